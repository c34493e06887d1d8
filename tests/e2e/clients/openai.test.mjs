// `power serve` driven by the official OpenAI JavaScript client (npm `openai`, pinned in
// package.json). Starts the server on 127.0.0.1 with an ephemeral port and stories260K from
// ../shared/models; POWER_BINARY and POWER_SHARED_DIR are set by ctest (run.sh).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import OpenAI from 'openai';

const binary = process.env.POWER_BINARY;
const shared = process.env.POWER_SHARED_DIR;
const modelFile = `${shared}/models/stories260K/stories260K-F32.gguf`;
const MODEL = 'stories260K-F32';
const expectedGreedy = readFileSync(
  `${shared}/models/stories260K/expected_llama-cli_greedy_prompt-Once-upon-a-time_n64.txt`,
  'utf8');

let server;
let baseURL;
let client;

function startServer(extraArgs = []) {
  return new Promise((resolve, reject) => {
    const proc = spawn(binary, ['serve', '--port', '0', '-m', modelFile, '--ctx', '512',
      '--threads', '1', ...extraArgs], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    const timer = setTimeout(() => reject(new Error(`no listening line; stderr: ${err}`)), 60000);
    proc.stdout.on('data', (d) => {
      out += d;
      const m = out.match(/listening on (http:\/\/[^ ]+)/);
      if (m) {
        clearTimeout(timer);
        resolve({ proc, url: m[1], stderr: () => err });
      }
    });
    proc.stderr.on('data', (d) => { err += d; });
    proc.on('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`power serve exited with ${code}: ${err}`));
    });
  });
}

async function metrics() {
  const r = await fetch(`${baseURL}/metrics`);
  return r.text();
}

function metricValue(text, name) {
  const m = text.match(new RegExp(`^${name} (\\S+)$`, 'm'));
  return m ? Number(m[1]) : NaN;
}

before(async () => {
  server = await startServer();
  baseURL = server.url;
  client = new OpenAI({ baseURL: `${baseURL}/v1`, apiKey: 'unused', maxRetries: 0 });
});

after(() => {
  if (server && server.proc.exitCode === null) server.proc.kill('SIGKILL');
});

test('models.list names the loaded model', async () => {
  const ids = [];
  for await (const m of client.models.list()) ids.push(m.id);
  assert.deepEqual(ids, [MODEL]);
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

test('errors: unknown model 404, bad field 400 naming it, n>1 400', async () => {
  await assert.rejects(
    client.chat.completions.create({ model: 'gpt-4o', messages: [{ role: 'user', content: 'x' }] }),
    (e) => e instanceof OpenAI.NotFoundError && e.status === 404);
  await assert.rejects(
    client.chat.completions.create({
      model: MODEL, messages: [{ role: 'user', content: 'x' }], temperature: 5,
    }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'temperature');
  await assert.rejects(
    client.completions.create({ model: MODEL, prompt: 'x', n: 2 }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'n');
  await assert.rejects(
    client.completions.create({ model: MODEL, prompt: 'x', echo: true }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'echo');
  await assert.rejects(
    client.embeddings.create({ model: MODEL, input: 'x' }),
    (e) => e instanceof OpenAI.BadRequestError && /not an embedding model/.test(e.message));
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
