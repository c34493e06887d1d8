// `power serve` driven by the official OpenAI JavaScript client (npm `openai`, pinned in
// package.json). Starts the server on 127.0.0.1 with an ephemeral port (or, with
// POWER_E2E_TRANSPORT=unix, on a unix socket only: run.sh runs this file both ways) and
// stories260K from ../shared/models; POWER_BINARY and POWER_SHARED_DIR are set by ctest.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import OpenAI from 'openai';
import { startServer as startServerWith } from './serve.mjs';

const shared = process.env.POWER_SHARED_DIR;
const modelFile = `${shared}/models/stories260K/stories260K-F32.gguf`;
const MODEL = 'stories260K-F32';
const bertFile = `${shared}/fixtures/embeddings/bert-mean-F16.gguf`;
const BERT = 'bert-mean-F16';
const expectedGreedy = readFileSync(
  `${shared}/models/stories260K/expected_llama-cli_greedy_prompt-Once-upon-a-time_n64.txt`,
  'utf8');

let server;
let baseURL;
let client;

function startServer(extraArgs = []) {
  return startServerWith(['-m', modelFile, '-m', bertFile, '--ctx', '512', '--threads', '1',
    ...extraArgs]);
}

async function metrics() {
  const r = await server.fetch(`${baseURL}/metrics`);
  return r.text();
}

function metricValue(text, name) {
  const m = text.match(new RegExp(`^${name} (\\S+)$`, 'm'));
  return m ? Number(m[1]) : NaN;
}

before(async () => {
  server = await startServer();
  baseURL = server.url;
  client = new OpenAI({ baseURL: `${baseURL}/v1`, apiKey: 'unused', maxRetries: 0,
    fetch: server.fetch });
});

after(() => {
  if (server && server.proc.exitCode === null) server.proc.kill('SIGKILL');
});

test('models.list names the loaded model', async () => {
  const ids = [];
  for await (const m of client.models.list()) ids.push(m.id);
  assert.deepEqual(ids.sort(), [BERT, MODEL].sort());
  const one = await client.models.retrieve(MODEL);
  assert.equal(one.id, MODEL);
});

test('completions: greedy text equals llama.cpp', async () => {
  const r = await client.completions.create({
    model: MODEL, prompt: 'Once upon a time', max_tokens: 64, temperature: 0,
  });
  assert.equal(r.object, 'text_completion');
  const text = r.choices[0].text;
  assert.ok(text.length > 100);
  assert.ok(expectedGreedy.includes(text), text);
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.equal(r.usage.completion_tokens, 64);
});

test('completions: streamed text equals the non-streamed text', async () => {
  const params = { model: MODEL, prompt: 'Once upon a time', max_tokens: 30, temperature: 0 };
  const whole = await client.completions.create(params);
  const stream = await client.completions.create({ ...params, stream: true });
  let text = '';
  let finish = null;
  for await (const chunk of stream) {
    text += chunk.choices[0].text;
    finish = chunk.choices[0].finish_reason ?? finish;
  }
  assert.equal(text, whole.choices[0].text);
  assert.equal(finish, 'length');
});

test('chat: non-streamed and streamed answers agree, usage chunk at the end', async () => {
  const params = {
    model: MODEL,
    messages: [{ role: 'system', content: 'You tell stories.' },
      { role: 'user', content: [{ type: 'text', text: 'Tell me about a cat.' }] }],
    max_completion_tokens: 40,
    temperature: 0,
    seed: 7,
  };
  const whole = await client.chat.completions.create(params);
  assert.equal(whole.object, 'chat.completion');
  assert.equal(whole.choices[0].message.role, 'assistant');
  const want = whole.choices[0].message.content;
  assert.ok(want.length > 0);

  const stream = await client.chat.completions.create({
    ...params, stream: true, stream_options: { include_usage: true },
  });
  let text = '';
  let role = null;
  let usage = null;
  let finish = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    if (chunk.choices.length === 0) continue;
    role = chunk.choices[0].delta.role ?? role;
    text += chunk.choices[0].delta.content ?? '';
    finish = chunk.choices[0].finish_reason ?? finish;
  }
  assert.equal(role, 'assistant');
  assert.equal(text, want);
  assert.equal(finish, whole.choices[0].finish_reason);
  // cached_tokens may differ: the second request reuses the first one's prompt KV blocks.
  assert.equal(usage.prompt_tokens, whole.usage.prompt_tokens);
  assert.equal(usage.completion_tokens, whole.usage.completion_tokens);
  assert.equal(usage.total_tokens, whole.usage.total_tokens);
});

test('errors: unknown model 404, bad field 400 naming it, context overflow', async () => {
  await assert.rejects(
    client.chat.completions.create({ model: 'gpt-4o', messages: [{ role: 'user', content: 'x' }] }),
    (e) => e instanceof OpenAI.NotFoundError && e.status === 404);
  await assert.rejects(
    client.chat.completions.create({
      model: MODEL, messages: [{ role: 'user', content: 'x' }], temperature: 5,
    }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'temperature');
  await assert.rejects(
    client.completions.create({ model: MODEL, prompt: 'x', echo: true, logprobs: 2 }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'echo');
  await assert.rejects(
    client.embeddings.create({ model: MODEL, input: 'x' }),
    (e) => e instanceof OpenAI.BadRequestError && /not an embedding model/.test(e.message));
  // OpenAI's context overflow: 400 context_length_exceeded naming messages / max_tokens.
  const long = 'The cat sat on the mat. '.repeat(400);
  await assert.rejects(
    client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: long }] }),
    (e) => e instanceof OpenAI.BadRequestError && e.code === 'context_length_exceeded' &&
      e.param === 'messages' && /maximum context length is 512 tokens/.test(e.message));
  await assert.rejects(
    client.chat.completions.create({
      model: MODEL, messages: [{ role: 'user', content: 'Hi' }], max_tokens: 4000,
    }),
    (e) => e.code === 'context_length_exceeded' && e.param === 'max_tokens');
  await assert.rejects(
    client.completions.create({ model: MODEL, prompt: long }),
    (e) => e.code === 'context_length_exceeded' && e.param === 'prompt');
});

test('embeddings: floats and base64 agree, unit vectors, one per input', async () => {
  const r = await client.embeddings.create({ model: BERT, input: ['hello world', 'good morning'] });
  assert.equal(r.data.length, 2);
  assert.deepEqual(r.data.map((d) => d.index), [0, 1]);
  const v = r.data[0].embedding;
  assert.ok(Math.abs(Math.hypot(...v) - 1) < 1e-4);
  assert.ok(r.usage.prompt_tokens > 0);
  // The client asks for base64 by default when no format is given and decodes it itself; ask
  // for floats explicitly and compare.
  const f = await client.embeddings.create({
    model: BERT, input: 'hello world', encoding_format: 'float',
  });
  for (let i = 0; i < v.length; i++) assert.ok(Math.abs(f.data[0].embedding[i] - v[i]) < 1e-6);
});

test('chat: n choices, streamed and not, numbered by index', async () => {
  const params = {
    model: MODEL, messages: [{ role: 'user', content: 'Once upon a time' }],
    max_tokens: 12, temperature: 1, seed: 11, n: 2,
  };
  const r = await client.chat.completions.create(params);
  assert.equal(r.choices.length, 2);
  assert.deepEqual(r.choices.map((c) => c.index), [0, 1]);
  const texts = ['', ''];
  const stream = await client.chat.completions.create({ ...params, stream: true });
  for await (const chunk of stream) {
    for (const c of chunk.choices) texts[c.index] += c.delta.content ?? '';
  }
  assert.deepEqual(texts, r.choices.map((c) => c.message.content));
});

test('completions: an array of prompts gives one choice per prompt', async () => {
  const one = async (prompt) => (await client.completions.create({
    model: MODEL, prompt, max_tokens: 8, temperature: 0,
  })).choices[0].text;
  const a = await one('Once upon a time');
  const b = await one('The little dog');
  const both = await client.completions.create({
    model: MODEL, prompt: ['Once upon a time', 'The little dog'], max_tokens: 8, temperature: 0,
  });
  assert.deepEqual(both.choices.map((c) => c.text), [a, b]);
  assert.deepEqual(both.choices.map((c) => c.index), [0, 1]);
});

test('chat: parallel_tool_calls false keeps one call', async () => {
  const r = await client.chat.completions.create({
    model: MODEL, messages: [{ role: 'user', content: 'Weather in Paris?' }],
    tools: [weatherTool], tool_choice: 'required', parallel_tool_calls: false,
    temperature: 0, max_completion_tokens: 60,
  });
  assert.equal(r.choices[0].finish_reason, 'tool_calls');
  assert.equal(r.choices[0].message.tool_calls.length, 1);
});

// Every request field of the pinned client's published schema (its TypeScript types, which
// are generated from OpenAI's OpenAPI spec) is either honoured or refused with its own reason,
// and docs/SERVER.md says which.
function schemaFields(dts, iface) {
  const text = readFileSync(new URL(`./node_modules/openai/${dts}`, import.meta.url), 'utf8');
  const start = text.indexOf(`export interface ${iface} {`);
  assert.ok(start >= 0, `${iface} not found in ${dts}`);
  const fields = [];
  let depth = 0;
  for (const line of text.slice(start).split('\n')) {
    if (depth === 1) {
      const m = line.match(/^ {4}([a-z_]+)\??:/);
      if (m) fields.push(m[1]);
    }
    depth += (line.match(/{/g) ?? []).length - (line.match(/}/g) ?? []).length;
    if (depth === 0 && fields.length > 0) break;
  }
  return fields;
}

function docVerdicts(endpoint) {
  const doc = readFileSync(new URL('../../../docs/SERVER.md', import.meta.url), 'utf8');
  const at = doc.indexOf(`<!-- fields: ${endpoint} -->`);
  assert.ok(at >= 0, `docs/SERVER.md has no field table for ${endpoint}`);
  const verdicts = {};
  for (const line of doc.slice(at).split('\n').slice(1)) {
    if (!line.startsWith('|')) {
      if (Object.keys(verdicts).length > 0) break;
      continue;
    }
    const m = line.match(/^\| `([a-z_]+)` \| (honoured|accepted|model|refused) \|/);
    if (m) verdicts[m[1]] = m[2];
  }
  return verdicts;
}

const chatSamples = {
  messages: null, model: null,
  audio: { voice: 'alloy', format: 'wav' },
  frequency_penalty: 0.5,
  function_call: 'auto',
  functions: [{ name: 'f', parameters: { type: 'object' } }],
  logit_bias: { 5: 1 },
  logprobs: true,
  max_completion_tokens: 3,
  max_tokens: 3,
  metadata: { team: 'a' },
  modalities: ['text'],
  moderation: { model: 'omni-moderation-latest' },
  n: 2,
  parallel_tool_calls: false,
  prediction: { type: 'content', content: 'Once upon a time' },
  presence_penalty: 0.5,
  prompt_cache_key: 'conversation-1',
  prompt_cache_options: { mode: 'implicit' },
  prompt_cache_retention: 'in_memory',
  reasoning_effort: 'low',
  response_format: { type: 'json_object' },
  safety_identifier: 'user-hash',
  seed: 1,
  service_tier: 'flex',
  stop: ['.'],
  store: false,
  stream: true,
  stream_options: { include_usage: true, include_obfuscation: true },
  temperature: 0.5,
  tool_choice: 'none',
  tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object' } } }],
  top_logprobs: 2,
  top_p: 0.9,
  user: 'u1',
  verbosity: 'low',
  web_search_options: {},
};
const completionSamples = {
  model: null, prompt: null,
  best_of: 1, echo: true, frequency_penalty: 0.5, logit_bias: { 5: 1 }, logprobs: 2,
  max_tokens: 3, n: 2, presence_penalty: 0.5, seed: 1, stop: ['.'], stream: true,
  stream_options: { include_usage: true }, suffix: ' The end.', temperature: 0.5, top_p: 0.9,
  user: 'u1',
};
// Fields that only make sense with another one.
const companions = {
  stream_options: { stream: true },
  top_logprobs: { logprobs: true },
  function_call: { functions: [{ name: 'f', parameters: { type: 'object' } }] },
};

async function walk(endpoint, fields, samples, base) {
  const verdicts = docVerdicts(endpoint);
  for (const field of fields) {
    assert.ok(field in samples, `${endpoint}: schema field '${field}' has no sample here`);
    assert.ok(field in verdicts, `${endpoint}: docs/SERVER.md has no row for '${field}'`);
    if (samples[field] === null) continue;  // the base request has it
    const body = { ...base, ...(companions[field] ?? {}), [field]: samples[field] };
    const r = await server.fetch(`${baseURL}/v1/${endpoint}`, {
      method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body),
    });
    const text = await r.text();
    // stories260K: its template (ChatML) reads no reasoning or verbosity variable, its
    // vocabulary has no FIM tokens.
    const refusedHere = verdicts[field] === 'refused' || verdicts[field] === 'model';
    if (refusedHere) {
      assert.equal(r.status, 400, `${field}: ${text}`);
      const e = JSON.parse(text).error;
      assert.ok(e.param === field || e.param.startsWith(`${field}.`), `${field}: ${text}`);
      assert.ok(['unsupported_field', 'unsupported_value'].includes(e.code), `${field}: ${text}`);
      assert.match(e.message, /not supported/, field);
      if (verdicts[field] === 'model') assert.match(e.message, /not supported by this model/, field);
    } else {
      assert.equal(r.status, 200, `${field}: ${text}`);
    }
  }
}

test('every field of the published request schemas is honoured or refused with a reason', async () => {
  const chatFields = schemaFields('resources/chat/completions/completions.d.ts',
    'ChatCompletionCreateParamsBase');
  const completionFields = schemaFields('resources/completions.d.ts', 'CompletionCreateParamsBase');
  assert.ok(chatFields.length >= 30, chatFields.join());
  assert.ok(completionFields.length >= 15, completionFields.join());
  await walk('chat/completions', chatFields, chatSamples, {
    model: MODEL, messages: [{ role: 'user', content: 'Hi' }], max_tokens: 3,
  });
  await walk('completions', completionFields, completionSamples, {
    model: MODEL, prompt: 'Once upon a time', max_tokens: 3,
  });
});

test('chat: streamed logprobs per chunk, the stream helper collects them', async () => {
  const params = {
    model: MODEL, messages: [{ role: 'user', content: 'Tell me about a dog.' }],
    max_completion_tokens: 12, temperature: 0, logprobs: true, top_logprobs: 2,
  };
  const whole = await client.chat.completions.create(params);
  const want = whole.choices[0].logprobs.content;
  assert.ok(want.length > 0 && want.length <= whole.usage.completion_tokens);
  const runner = client.chat.completions.stream(params);
  const perChunk = [];
  runner.on('chunk', (chunk) => {
    const lp = chunk.choices[0]?.logprobs;
    if (lp) perChunk.push(...lp.content);
  });
  const final = await runner.finalChatCompletion();
  const got = final.choices[0].logprobs.content;
  assert.deepEqual(got.map((e) => e.token), want.map((e) => e.token));
  assert.deepEqual(perChunk.map((e) => e.token), want.map((e) => e.token));
  for (let i = 0; i < got.length; i++) {
    assert.ok(Math.abs(got[i].logprob - want[i].logprob) < 1e-4);
    assert.equal(got[i].top_logprobs.length, 2);
    // Greedy: the chosen token is the most likely one.
    assert.ok(Math.abs(got[i].top_logprobs[0].logprob - got[i].logprob) < 1e-6);
  }
  assert.equal(final.choices[0].message.content, whole.choices[0].message.content);
});

test('completions: streamed logprobs in the completions shape', async () => {
  const params = { model: MODEL, prompt: 'Once upon a time', max_tokens: 10, temperature: 0,
    logprobs: 1 };
  const whole = await client.completions.create(params);
  const lp = whole.choices[0].logprobs;
  assert.equal(lp.tokens.join(''), whole.choices[0].text);
  const stream = await client.completions.create({ ...params, stream: true });
  const tokens = [];
  const offsets = [];
  for await (const chunk of stream) {
    const c = chunk.choices[0].logprobs;
    if (!c) continue;
    tokens.push(...c.tokens);
    offsets.push(...c.text_offset);
  }
  assert.deepEqual(tokens, lp.tokens);
  assert.deepEqual(offsets, lp.text_offset);
});

// The tool: a closed enum makes the forced call's arguments exactly one of two objects, so
// what stories260K writes under the tool-call grammar is checkable.
const weatherTool = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'The weather in a city',
    parameters: {
      type: 'object',
      properties: { city: { type: 'string', enum: ['Paris', 'Rome'] } },
      required: ['city'],
      additionalProperties: false,
    },
  },
};

test('chat: streamed tool call deltas, accepted by chat.completions.stream', async () => {
  const params = {
    model: MODEL, messages: [{ role: 'user', content: 'Weather in Paris?' }],
    tools: [weatherTool], tool_choice: 'required', temperature: 0, max_completion_tokens: 60,
  };
  const whole = await client.chat.completions.create(params);
  assert.equal(whole.choices[0].finish_reason, 'tool_calls');
  const wantCall = whole.choices[0].message.tool_calls[0];
  const runner = client.chat.completions.stream(params);
  let sawNameChunk = false;
  let contentChunks = 0;
  runner.on('chunk', (chunk) => {
    const d = chunk.choices[0]?.delta;
    if (d?.tool_calls?.[0]?.function?.name === 'get_weather') {
      sawNameChunk = true;
      assert.equal(d.tool_calls[0].index, 0);
      assert.equal(d.tool_calls[0].type, 'function');
      assert.ok(d.tool_calls[0].id);
    }
    if (d?.content) contentChunks++;
  });
  const final = await runner.finalChatCompletion();
  assert.ok(sawNameChunk);
  assert.equal(contentChunks, 0);  // the call's text is not streamed as content
  const choice = final.choices[0];
  assert.equal(choice.finish_reason, 'tool_calls');
  assert.equal(choice.message.tool_calls.length, 1);
  const call = choice.message.tool_calls[0];
  assert.equal(call.function.name, 'get_weather');
  assert.equal(call.id, wantCall.id);
  assert.equal(call.function.arguments, wantCall.function.arguments);
  assert.ok(['Paris', 'Rome'].includes(JSON.parse(call.function.arguments).city));
});

test('chat: runTools (streaming) runs the tool from streamed deltas', async () => {
  const calls = [];
  const runner = client.chat.completions.runTools({
    model: MODEL, messages: [{ role: 'user', content: 'Weather in Paris?' }], stream: true,
    temperature: 0, max_completion_tokens: 60,
    tool_choice: { type: 'function', function: { name: 'get_weather' } },
    tools: [{
      type: 'function',
      function: {
        name: 'get_weather',
        parameters: weatherTool.function.parameters,
        parse: JSON.parse,
        function: (args) => { calls.push(args); return { sky: 'clear' }; },
      },
    }],
  });
  await runner.done();
  assert.equal(calls.length, 1);
  assert.ok(['Paris', 'Rome'].includes(calls[0].city));
  const tool = runner.messages.find((m) => m.role === 'tool');
  assert.equal(tool.content, JSON.stringify({ sky: 'clear' }));
});

test('abort mid-stream cancels the generation on the server', async () => {
  const before = metricValue(await metrics(), 'power_client_cancellations_total');
  const tokensBefore = metricValue(await metrics(), 'power_completion_tokens_total');
  const controller = new AbortController();
  // EOS (id 2) is banned, so only max_tokens or a cancel ends this request.
  const stream = await client.completions.create(
    { model: MODEL, prompt: 'Once upon a time', max_tokens: 480, logit_bias: { 2: -100 },
      stream: true },
    { signal: controller.signal });
  let chunks = 0;
  // Depending on timing the client ends the iteration quietly or throws its abort error.
  try {
    for await (const _ of stream) {
      if (++chunks === 3) controller.abort();
    }
  } catch (e) {
    assert.ok(e instanceof OpenAI.APIUserAbortError || e.name === 'AbortError', String(e));
  }
  assert.ok(chunks >= 3 && chunks < 480, `chunks: ${chunks}`);  // buffered chunks may still arrive
  let m = '';
  for (let i = 0; i < 200; i++) {
    m = await metrics();
    if (metricValue(m, 'power_client_cancellations_total') === before + 1 &&
        metricValue(m, 'power_active_generations') === 0) break;
    await new Promise((r) => setTimeout(r, 50));
  }
  assert.equal(metricValue(m, 'power_client_cancellations_total'), before + 1, m);
  assert.equal(metricValue(m, 'power_active_generations'), 0);
  assert.ok(metricValue(m, 'power_completion_tokens_total') - tokensBefore < 480);
  // And the server keeps answering.
  const r = await client.completions.create({ model: MODEL, prompt: 'Once', max_tokens: 4 });
  assert.equal(r.usage.completion_tokens, 4);
});

test('SIGTERM drains a running stream, then the process exits 0', async () => {
  const stream = await client.completions.create({
    model: MODEL, prompt: 'Once upon a time', max_tokens: 300, logit_bias: { 2: -100 },
    stream: true,
  });
  const exited = new Promise((resolve) => server.proc.on('exit', (code) => resolve(code)));
  let text = '';
  let finish = null;
  let signalled = false;
  for await (const chunk of stream) {
    text += chunk.choices[0].text;
    finish = chunk.choices[0].finish_reason ?? finish;
    if (!signalled) {
      signalled = true;
      server.proc.kill('SIGTERM');
    }
  }
  assert.equal(finish, 'length');  // the running request finished, not cut off
  assert.equal(await exited, 0);
});
