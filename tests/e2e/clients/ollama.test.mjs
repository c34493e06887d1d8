// `power serve` driven by the official Ollama JavaScript client (npm `ollama`, pinned in
// package.json): chat and generate streamed and not, tags, show, embed, pull progress, ps.
// Starts its own servers on 127.0.0.1 (ephemeral ports) with stories260K and a BERT embedding
// fixture from ../shared; POWER_BINARY and POWER_SHARED_DIR come from ctest (run.sh).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Ollama } from 'ollama';
import { startServer as startServerWith } from './serve.mjs';

const shared = process.env.POWER_SHARED_DIR;
const modelFile = `${shared}/models/stories260K/stories260K-F32.gguf`;
const bertFile = `${shared}/fixtures/embeddings/bert-mean-F16.gguf`;
const MODEL = 'stories260K-F32';
const BERT = 'bert-mean-F16';

let server;
let ollama;
let home;

function startServer(args, env = {}) {
  return startServerWith(['--ctx', '512', '--threads', '1', ...args], env);
}

before(async () => {
  home = mkdtempSync(join(tmpdir(), 'power-ollama-'));
  server = await startServer(['-m', modelFile, '-m', bertFile], { POWER_HOME: home });
  ollama = new Ollama({ host: server.url });
});

after(() => {
  if (server && server.proc.exitCode === null) server.proc.kill('SIGKILL');
  if (home) rmSync(home, { recursive: true, force: true });
});

const greedy = { temperature: 0, num_predict: 12, repeat_penalty: 1.0 };

test('version, tags and show', async () => {
  const v = await ollama.version();
  assert.match(v.version, /^\d+\.\d+\.\d+$/);
  const tags = await ollama.list();
  const names = tags.models.map((m) => m.name).sort();
  assert.deepEqual(names, [BERT, MODEL].sort());
  const m = tags.models.find((x) => x.name === MODEL);
  assert.equal(m.details.format, 'gguf');
  assert.equal(m.details.family, 'llama');
  assert.ok(m.size > 0);
  const show = await ollama.show({ model: MODEL });
  assert.equal(show.model_info['general.architecture'], 'llama');
  assert.ok(show.capabilities.includes('completion'));
  assert.equal(typeof show.template, 'string');
});

test('chat: not streamed, then streamed pieces add up to the same text', async () => {
  const messages = [{ role: 'user', content: 'Once upon a time' }];
  const whole = await ollama.chat({ model: MODEL, messages, options: greedy });
  assert.equal(whole.done, true);
  assert.equal(whole.message.role, 'assistant');
  assert.ok(whole.message.content.length > 0);
  assert.equal(whole.eval_count, 12);
  assert.equal(whole.done_reason, 'length');
  // The same as the OpenAI endpoint's greedy answer.
  const r = await fetch(`${server.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: MODEL, messages, max_tokens: 12, temperature: 0 }),
  });
  assert.equal((await r.json()).choices[0].message.content, whole.message.content);
  let text = '';
  let parts = 0;
  let last;
  for await (const part of await ollama.chat({ model: MODEL, messages, options: greedy, stream: true })) {
    text += part.message.content;
    parts++;
    last = part;
  }
  assert.ok(parts >= 2);
  assert.equal(last.done, true);
  assert.equal(text, whole.message.content);
});

test('generate: not streamed and streamed agree; format json gives JSON', async () => {
  const whole = await ollama.generate({ model: MODEL, prompt: 'Once upon a time', options: greedy });
  assert.equal(whole.done, true);
  let text = '';
  for await (const part of await ollama.generate({
    model: MODEL, prompt: 'Once upon a time', options: greedy, stream: true,
  })) {
    text += part.response;
  }
  assert.equal(text, whole.response);
  const json = await ollama.generate({
    model: MODEL, prompt: 'Give me JSON', format: 'json',
    options: { temperature: 0, num_predict: 40 },
  });
  if (json.done_reason === 'stop') JSON.parse(json.response);  // complete: it parses
  assert.match(json.response.trimStart(), /^{/);
});

test('errors come back as ResponseError with the reason', async () => {
  await assert.rejects(ollama.chat({ model: 'nope', messages: [{ role: 'user', content: 'x' }] }),
    (e) => e.status_code === 404 && /not found/.test(e.error));
  await assert.rejects(ollama.chat({
    model: MODEL, messages: [{ role: 'user', content: 'x' }], options: { num_ctx: 100000 },
  }), (e) => e.status_code === 400 && /--ctx/.test(e.error));
});

test('embed and embeddings', async () => {
  const e = await ollama.embed({ model: BERT, input: ['hello world', 'good morning'] });
  assert.equal(e.embeddings.length, 2);
  const norm = Math.hypot(...e.embeddings[0]);
  assert.ok(Math.abs(norm - 1) < 1e-4, `unit length, got ${norm}`);
  const legacy = await ollama.embeddings({ model: BERT, prompt: 'hello world' });
  assert.equal(legacy.embedding.length, e.embeddings[0].length);
  // The legacy endpoint is not normalized; its direction is the same.
  const n = Math.hypot(...legacy.embedding);
  const cos = legacy.embedding.reduce((s, x, i) => s + x * e.embeddings[0][i], 0) / n;
  assert.ok(cos > 0.9999, `cosine ${cos}`);
});

test('pull streams progress into the store, then the model is listed there', async () => {
  const events = [];
  for await (const p of await ollama.pull({ model: modelFile, stream: true })) events.push(p);
  const last = events.at(-1);
  assert.equal(last.status, 'success', JSON.stringify(events));
  const bytes = events.filter((p) => p.total && p.completed !== undefined);
  assert.ok(bytes.length >= 1, JSON.stringify(events));
  assert.equal(bytes.at(-1).completed, statSync(modelFile).size);
  assert.equal(bytes.at(-1).total, statSync(modelFile).size);
  assert.match(bytes.at(-1).digest, /^sha256:[0-9a-f]{64}$/);
  // Not streamed: one status.
  const again = await ollama.pull({ model: modelFile });
  assert.equal(again.status, 'success');
  // The store holds it under its file's name (a blob named by the digest above), and tags
  // lists that name once (the loaded model of the same name stands for it).
  assert.deepEqual(readdirSync(join(home, 'manifests')), [`${MODEL}.json`]);
  assert.ok(readdirSync(join(home, 'blobs')).includes(bytes.at(-1).digest.replace(':', '-')));
  const names = (await ollama.list()).models.map((m) => m.name);
  assert.equal(names.filter((n) => n === MODEL).length, 1);
});

test('ps lists the loaded models with Ollama fields', async () => {
  const ps = await ollama.ps();
  const m = ps.models.find((x) => x.name === MODEL);
  assert.ok(m);
  assert.ok(m.size > 0);
  assert.equal(m.context_length, 512);
});
