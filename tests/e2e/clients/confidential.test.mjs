// --redact-logs (docs/CONFIDENTIAL.md "Redacted logs"): a session of requests carrying a
// distinctive marker in prompts, chat messages, tool-call arguments, tool results, embedding
// inputs, the user field and request fields that error messages quote, run against
// `power serve` at POWER_LOG=debug over its unix listener. With --redact-logs no log line
// (stdout or stderr) and no error message holds the marker; without it the debug log does,
// so the check can fail.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { startServer } from './serve.mjs';

const shared = process.env.POWER_SHARED_DIR;
const modelFile = `${shared}/models/stories260K/stories260K-F32.gguf`;
const bertFile = `${shared}/fixtures/embeddings/bert-mean-F16.gguf`;
const MODEL = 'stories260K-F32';
const MARK = 'zebraquartz7731';

async function session(extraArgs) {
  const server = await startServer(
    ['-m', modelFile, '-m', bertFile, '--ctx', '256', '--threads', '1',
      '--keep-alive-timeout', '1', ...extraArgs],
    { POWER_LOG: 'debug', POWER_E2E_TRANSPORT: 'unix' });
  const client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused', maxRetries: 0,
    fetch: server.fetch });
  const errors = [];
  const expectError = async (p) => {
    try {
      await p;
      assert.fail('expected an error');
    } catch (e) {
      assert.ok(e instanceof OpenAI.APIError, String(e));
      errors.push(JSON.stringify(e.error ?? e.message));
    }
  };
  await client.completions.create({ model: MODEL, prompt: `Lily saw a ${MARK} in the park`,
    max_tokens: 8, user: `${MARK}@example.com` });
  const stream = await client.chat.completions.create({
    model: MODEL, stream: true, max_tokens: 8,
    messages: [
      { role: 'user', content: `What is the weather in ${MARK} city?` },
      { role: 'assistant', content: null,
        tool_calls: [{ id: 'call_1', type: 'function',
          function: { name: 'get_weather', arguments: JSON.stringify({ city: MARK }) } }] },
      { role: 'tool', tool_call_id: 'call_1', content: `sunny over ${MARK}` },
    ],
    tools: [{ type: 'function', function: { name: 'get_weather',
      parameters: { type: 'object', properties: { city: { type: 'string' } } } } }],
  });
  for await (const _ of stream) { /* drain */ }
  await client.embeddings.create({ model: 'bert-mean-F16', input: [`${MARK} embedding input`] });
  // Errors whose messages quote the request: a content part type, an unknown model name, a
  // logit_bias key, a tool_choice naming no tool.
  await expectError(client.chat.completions.create({ model: MODEL,
    messages: [{ role: 'user', content: [{ type: MARK, text: 'hi' }] }] }));
  await expectError(client.completions.create({ model: MARK, prompt: 'x' }));
  await expectError(client.completions.create({ model: MODEL, prompt: 'x',
    logit_bias: { [MARK]: 1 } }));
  await expectError(client.chat.completions.create({ model: MODEL,
    messages: [{ role: 'user', content: 'hi' }],
    tool_choice: { type: 'function', function: { name: MARK } },
    tools: [{ type: 'function', function: { name: 'get_weather', parameters: {} } }] }));
  const exited = new Promise((resolve) => server.proc.on('exit', (code) => resolve(code)));
  server.proc.kill('SIGTERM');
  assert.equal(await exited, 0);
  return { logs: server.stdout() + server.stderr(), errors };
}

test('--redact-logs: no log line and no error message carries request or answer text', async () => {
  const plain = await session([]);
  // Control: the same session without redaction logs the marker (debug bodies) and the
  // errors quote it, so the assertions below can fail.
  assert.ok(plain.logs.includes(MARK), plain.logs.slice(0, 2000));
  assert.ok(plain.errors.filter((e) => e.includes(MARK)).length >= 3, plain.errors.join('\n'));

  const redacted = await session(['--redact-logs']);
  assert.equal(redacted.errors.length, 4);
  for (const e of redacted.errors) assert.ok(!e.includes(MARK), e);
  const lines = redacted.logs.split('\n');
  const leaking = lines.filter((l) => l.includes(MARK) || l.includes('city') ||
    l.includes('sunny') || l.includes('Lily'));
  assert.deepEqual(leaking, []);
  // The debug lines are there, with sizes instead of bodies.
  assert.ok(lines.some((l) => /POST \/v1\/chat\/completions 200 .*\[redacted, \d+ bytes\]/.test(l)),
    redacted.logs.slice(0, 2000));
  assert.ok(lines.some((l) => /user=sha256:[0-9a-f]{16}/.test(l)));
});

// Encrypted weights (docs/CONFIDENTIAL.md "Encrypted weights"): stories260K encrypted with
// `power encrypt`, served with --model-key-file, answers exactly as the plain file, and the
// receipts bind the same model digest (the plaintext SHA-256).
test('encrypted models serve bit-identical answers and receipts name the same weights', async () => {
  const { mkdtempSync, writeFileSync, readdirSync, rmSync } = await import('node:fs');
  const { tmpdir } = await import('node:os');
  const { execFileSync } = await import('node:child_process');
  const dir = mkdtempSync(`${tmpdir()}/power-enc-`);
  try {
    const keyFile = `${dir}/model.key`;
    writeFileSync(keyFile, '7f'.repeat(32) + '\n', { mode: 0o600 });
    const enc = `${dir}/stories260K-F32.gguf`;
    execFileSync(process.env.POWER_BINARY, ['encrypt', modelFile, enc, '--key-file', keyFile]);
    const ask = async (file, extra) => {
      const server = await startServer(['-m', file, '--ctx', '256', '--threads', '1',
        '--keep-alive-timeout', '1', ...extra], { POWER_E2E_TRANSPORT: 'unix' });
      try {
        const r = await server.fetch(`${server.url}/v1/completions`, {
          method: 'POST', headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ model: MODEL, prompt: 'Once upon a time', max_tokens: 48,
            temperature: 0, logprobs: 3, power_receipt: true }),
        });
        assert.equal(r.status, 200);
        const body = await r.json();
        const receipt = JSON.parse(body.power_receipt);
        return { text: body.choices[0].text, logprobs: body.choices[0].logprobs, receipt };
      } finally {
        const exited = new Promise((resolve) => server.proc.on('exit', resolve));
        server.proc.kill('SIGTERM');
        await exited;
      }
    };
    const before = new Set(readdirSync(tmpdir()));
    const plain = await ask(modelFile, []);
    const secret = await ask(enc, ['--model-key-file', keyFile]);
    assert.equal(secret.text, plain.text);
    assert.deepEqual(secret.logprobs, plain.logprobs);
    assert.deepEqual(secret.receipt.model, plain.receipt.model);
    assert.deepEqual(secret.receipt.output, plain.receipt.output);
    // No plaintext copy appeared beside the temp files (the container's own dir aside).
    const created = [...readdirSync(tmpdir())].filter((f) => !before.has(f) &&
      !f.startsWith('power-e2e-'));
    assert.deepEqual(created, []);
    // An encrypted embedding model: the same vectors as the plain file.
    const bertEnc = `${dir}/bert-mean-F16.gguf`;
    execFileSync(process.env.POWER_BINARY, ['encrypt', bertFile, bertEnc, '--key-file', keyFile]);
    const embed = async (file, extra) => {
      const server = await startServer(['-m', file, '--threads', '1', '--keep-alive-timeout', '1',
        ...extra], { POWER_E2E_TRANSPORT: 'unix' });
      try {
        const r = await server.fetch(`${server.url}/v1/embeddings`, {
          method: 'POST', headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ model: 'bert-mean-F16', input: ['a secret sentence', 'two'] }),
        });
        assert.equal(r.status, 200);
        return (await r.json()).data.map((d) => d.embedding);
      } finally {
        const exited = new Promise((resolve) => server.proc.on('exit', resolve));
        server.proc.kill('SIGTERM');
        await exited;
      }
    };
    assert.deepEqual(await embed(bertEnc, ['--model-key-file', keyFile]), await embed(bertFile, []));
    // Without the key the server refuses to start, naming the container.
    await assert.rejects(startServer(['-m', enc, '--ctx', '256'], { POWER_E2E_TRANSPORT: 'unix' }),
      /encrypted Power container/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
