// The console's receipt checks (src/server/ui/receipt.js) against `power verify`: receipts
// that `power run` and `power classify` sign, as written and tampered with in many ways, give
// the same verdict lines in node as from the binary. Digests are checked against node's
// OpenSSL-backed crypto, canonical numbers against RFC 8785's Appendix B.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  canonicalize, parseStrict, requestInput, sha256Hex, sha256Sync, verdictLines, verifyReceipt,
} from '../../src/server/ui/receipt.js';

const power = process.env.POWER_BINARY;
const shared = process.env.POWER_SHARED_DIR;
const stories = `${shared}/models/stories260K/stories260K-F32.gguf`;
const mnist = `${shared}/models/vision/mnist-8.onnx`;
const nine = `${shared}/models/vision/mnist_nine.bmp`;
const haveShared = shared && existsSync(stories) && existsSync(mnist);
const needShared = !haveShared && process.env.CI !== 'true'
  ? `POWER_SHARED_DIR (${shared}) has no stories260K / mnist-8: skipping` : false;
const needBinary = !power ? 'POWER_BINARY is not set: skipping' : false;

let dir;
let env;
let pubkey;
const receipts = {};

before(() => {
  if (needShared || needBinary) return;
  assert.ok(haveShared, `CI=true needs the shared models under POWER_SHARED_DIR=${shared}`);
  dir = mkdtempSync(join(tmpdir(), 'power-ui-receipt-'));
  env = { ...process.env, POWER_HOME: join(dir, 'home') };
  pubkey = execFileSync(power, ['key', 'show'], { env }).toString().trim();
  // A chat receipt (messages), a prompt receipt, and an ONNX one.
  const run = (name, args) => {
    execFileSync(power, ['run', '-m', stories, '-n', '12', '--temp', '0', '-t', '1',
      '--receipt', join(dir, `${name}.json`), '--output', join(dir, `${name}.txt`), ...args],
    { env, stdio: ['ignore', 'ignore', 'inherit'] });
    receipts[name] = {
      text: readFileSync(join(dir, `${name}.json`), 'utf8'),
      output: readFileSync(join(dir, `${name}.txt`), 'utf8'),
    };
  };
  run('prompt', ['-p', 'Once upon a time']);
  writeFileSync(join(dir, 'prompt.req.json'), JSON.stringify({ prompt: 'Once upon a time' }));
  run('chat', ['--chat', '-p', 'Tell me a story', '--system', 'You are kind.']);
  const out = execFileSync(power, ['classify', '-m', mnist, nine, '--json',
    '--receipt', join(dir, 'onnx.json')], { env }).toString();
  receipts.onnx = { text: readFileSync(join(dir, 'onnx.json'), 'utf8'), output: out };
});

after(() => {
  if (dir) rmSync(dir, { recursive: true, force: true });
});

// power verify's lines for a receipt text with the given options.
function cliLines(text, o = {}) {
  const f = join(dir, `case-${randomBytes(6).toString('hex')}.json`);
  writeFileSync(f, text);
  const args = ['verify', f];
  if (o.publicKey) args.push('--pubkey', o.publicKey);
  if (o.modelSha256 !== undefined) args.push('-m', o.modelFile);
  if (o.request !== undefined) {
    const rf = `${f}.req`;
    writeFileSync(rf, o.request);
    args.push('--request', rf);
  }
  if (o.output !== undefined) {
    const of = `${f}.out`;
    writeFileSync(of, o.output);
    args.push('--output', of);
  }
  // An empty POWER_HOME: no local key to fall back on, as in the page.
  const r = spawnSync(power, args, { env: { ...env, POWER_HOME: join(dir, 'nokey') } });
  return { lines: r.stdout.toString().trimEnd().split('\n'), status: r.status };
}

async function jsLines(text, o = {}) {
  const { modelFile, ...opts } = o;
  return verdictLines(await verifyReceipt(text, opts));
}

// Compares the JS lines with the binary's; `detailsToo` false compares the verdicts only
// (check name, PASS/FAIL), for details that quote a parser's own error text.
async function same(text, o, detailsToo = true) {
  const cli = cliLines(text, o);
  const js = await jsLines(text, o);
  const strip = (ls) => ls.map((l) => l.replace(/^((PASS|FAIL) [a-z]+):.*$/, '$1'));
  if (detailsToo) assert.deepEqual(js, cli.lines);
  else assert.deepEqual(strip(js), strip(cli.lines));
  assert.equal(cli.status === 0, js[js.length - 1] === 'receipt accepted');
  return js;
}

const fileSha = (p) => createHash('sha256').update(readFileSync(p)).digest('hex');

test('receipts power verify accepts are accepted with the same lines', { skip: needShared || needBinary }, async () => {
  for (const name of ['prompt', 'chat']) {
    const r = receipts[name];
    const js = await same(r.text, { publicKey: pubkey, output: r.output, modelSha256: fileSha(stories),
      modelFile: stories });
    assert.equal(js[js.length - 1], 'receipt accepted', js.join('\n'));
  }
  const js = await same(receipts.prompt.text, { publicKey: pubkey,
    request: readFileSync(join(dir, 'prompt.req.json'), 'utf8') });
  assert.ok(js.includes("PASS input: the request's prompt matches input.sha256"), js.join('\n'));
  const o = await same(receipts.onnx.text, { publicKey: pubkey, output: receipts.onnx.output,
    modelSha256: fileSha(mnist), modelFile: mnist, request: readFileSync(nine) });
  assert.equal(o[o.length - 1], 'receipt accepted', o.join('\n'));
});

test('the chat request the console sends binds the receipt input', { skip: needShared || needBinary }, async () => {
  // power run --chat renders [system, user] messages; the console sends the same array.
  const request = JSON.stringify({ messages: [{ role: 'system', content: 'You are kind.' },
    { role: 'user', content: 'Tell me a story' }] });
  const js = await same(receipts.chat.text, { publicKey: pubkey, request });
  assert.ok(js.includes("PASS input: the request's messages matches input.sha256"), js.join('\n'));
  const other = JSON.stringify({ messages: [{ role: 'user', content: 'Tell me a story' }] });
  const bad = await same(receipts.chat.text, { publicKey: pubkey, request: other });
  assert.equal(bad[bad.length - 1], 'receipt REJECTED');
});

test('tampered receipts are rejected with the same lines', { skip: needShared || needBinary }, async () => {
  const text = receipts.prompt.text;
  const r = JSON.parse(text);
  const canon = (v) => `${canonicalize(v)}\n`;
  const flipHex = (h, at) => h.slice(0, at) + (h[at] === '0' ? '1' : '0') + h.slice(at + 1);
  const cases = {
    // A changed value, re-canonicalized: canonical passes, the signature does not.
    'changed output digest': canon({ ...r, output: { ...r.output, n_tokens: r.output.n_tokens + 1 } }),
    'changed model name': canon({ ...r, model: { ...r.model, name: 'other' } }),
    'flipped signature bit': canon({ ...r, signature: { ...r.signature, value: flipHex(r.signature.value, 10) } }),
    'uppercase signature hex': canon({ ...r, signature: { ...r.signature, value: r.signature.value.toUpperCase() } }),
    'other public key': canon({ ...r, signature: { ...r.signature, public_key: flipHex(r.signature.public_key, 3) } }),
    'wrong alg': canon({ ...r, signature: { ...r.signature, alg: 'RS256' } }),
    'missing input member': canon({ ...r, input: { kind: r.input.kind, sha256: r.input.sha256 } }),
    'bad digest': canon({ ...r, model: { ...r.model, sha256: 'xyz' } }),
    'wrong schema': canon({ ...r, schema: 'power.receipt.v0' }),
    'not an object': '[1,2,3]\n',
    // Same value, other bytes: not canonical.
    'pretty printed': `${JSON.stringify(r, null, 1)}\n`,
    'escaped letter': text.replace('"format":"gguf"', '"format":"gg\\u0075f"'),
    'reordered members': `{"timings":${JSON.stringify(r.timings)},${text.slice(1).replace(/,"timings":\{[^}]*\}/, '')}`,
    'two trailing newlines': `${text}\n`,
  };
  for (const [name, t] of Object.entries(cases)) {
    const js = await same(t, { publicKey: pubkey, output: receipts.prompt.output });
    assert.equal(js[js.length - 1], 'receipt REJECTED', `${name}:\n${js.join('\n')}`);
  }
  // The output text changed by one character.
  const js = await same(text, { publicKey: pubkey, output: `${receipts.prompt.output}!` });
  assert.ok(js.some((l) => l.startsWith('FAIL output: the output text (sha256 ')), js.join('\n'));
  // No key to check against.
  const nokey = await jsLines(text, {});
  assert.ok(nokey.some((l) => l.startsWith('FAIL signature: no public key')), nokey.join('\n'));
  // A model file that is not the artifact.
  await same(text, { publicKey: pubkey, modelSha256: fileSha(mnist), modelFile: mnist });
});

test('receipts that do not parse fail the canonical check, as in power verify', { skip: needShared || needBinary }, async () => {
  const text = receipts.prompt.text;
  const cases = {
    duplicate: text.replace('{"config":', '{"schema":"power.receipt.v1","config":'),
    truncated: text.slice(0, 200),
    'trailing comma': text.replace(/}\n$/, ',}\n'),
    'big integer': text.replace(/"n_tokens":(\d+)/, '"n_tokens":9007199254740993'),
    'lone surrogate': text.replace('"power.receipt.v1"', '"power.receipt.v1\\ud800"'),
    'control character': text.replace('"gguf"', '"gg\tuf"'),
  };
  for (const [name, t] of Object.entries(cases)) {
    // Duplicates and big integers have a detail both sides write the same way.
    const exact = name === 'duplicate' || name === 'big integer';
    const js = await same(t, { publicKey: pubkey }, exact);
    assert.equal(js[js.length - 1], 'receipt REJECTED', `${name}:\n${js.join('\n')}`);
  }
  // Invalid UTF-8 bytes.
  const bytes = Buffer.from(text);
  bytes[30] = 0xff;
  const js = await jsLines(new Uint8Array(bytes), { publicKey: pubkey });
  assert.match(js[0], /^FAIL canonical: corrupt: not valid JSON/);
  const f = join(dir, 'utf8.json');
  writeFileSync(f, bytes);
  const cli = spawnSync(power, ['verify', f, '--pubkey', pubkey]);
  assert.match(cli.stdout.toString(), /^FAIL canonical: corrupt: not valid JSON/);
});

test('canonical numbers follow RFC 8785 Appendix B', () => {
  // (IEEE 754 bits, JCS text) pairs from the RFC's table.
  const table = [
    ['0000000000000000', '0'], ['8000000000000000', '0'], ['0000000000000001', '5e-324'],
    ['8000000000000001', '-5e-324'], ['7fefffffffffffff', '1.7976931348623157e+308'],
    ['ffefffffffffffff', '-1.7976931348623157e+308'], ['4340000000000000', '9007199254740992'],
    ['c340000000000000', '-9007199254740992'], ['4430000000000000', '295147905179352830000'],
    ['44b52d02c7e14af5', '9.999999999999997e+22'], ['44b52d02c7e14af6', '1e+23'],
    ['44b52d02c7e14af7', '1.0000000000000001e+23'], ['444b1ae4d6e2ef4e', '999999999999999700000'],
    ['444b1ae4d6e2ef4f', '999999999999999900000'], ['444b1ae4d6e2ef50', '1e+21'],
    ['3eb0c6f7a0b5ed8c', '9.999999999999997e-7'], ['3eb0c6f7a0b5ed8d', '0.000001'],
    ['41b3de4355555553', '333333333.3333332'], ['41b3de4355555554', '333333333.33333325'],
    ['41b3de4355555555', '333333333.3333333'], ['41b3de4355555556', '333333333.3333334'],
    ['41b3de4355555557', '333333333.33333343'], ['becbf647612f3696', '-0.0000033333333333333333'],
    ['43143ff3c1cb0959', '1424953923781206.2'],
  ];
  for (const [bits, want] of table) {
    const d = Buffer.from(bits, 'hex').readDoubleBE(0);
    assert.equal(canonicalize(d), want, bits);
    if (Math.abs(d) <= 2 ** 53 || !Number.isInteger(d)) {
      assert.equal(canonicalize(parseStrict(want)), want, `reparse ${want}`);
    }
  }
  // RFC 8785 section 3.2.3: members sorted by UTF-16 code units.
  const sorted = canonicalize(parseStrict(
    '{"\\u20ac":"Euro Sign","\\r":"Carriage Return","\\ufb33":"Hebrew Letter Dalet With Dagesh",' +
    '"1":"One","\\ud83d\\ude00":"Emoji: Grinning Face","\\u0080":"Control","\\u00f6":"Latin Small Letter O With Diaeresis"}'));
  // (Read from the text: JSON.parse would put the integer-like "1" first.)
  assert.deepEqual([...sorted.matchAll(/:"([^"]*)"/g)].map((m) => m[1]), ['Carriage Return', 'One', 'Control',
    'Latin Small Letter O With Diaeresis', 'Euro Sign', 'Emoji: Grinning Face',
    'Hebrew Letter Dalet With Dagesh']);
  assert.equal(canonicalize(parseStrict('"a/b\\u001f\\u2028é"')), '"a/b\\u001f\u2028é"');
  assert.throws(() => parseStrict('{"a":1,"a":2}'), /duplicate member name \(name=a\)/);
  assert.throws(() => canonicalize(parseStrict('[9007199254740993]')), /integer beyond 2\^53/);
  assert.equal(canonicalize(parseStrict('{"__proto__":1,"b":[true,false,null]}')),
    '{"__proto__":1,"b":[true,false,null]}');
});

test('SHA-256 (the fallback and WebCrypto) matches OpenSSL', async () => {
  const inputs = ['', 'abc', 'a'.repeat(55), 'a'.repeat(56), 'a'.repeat(64), 'é✓😀'];
  for (let n = 0; n < 40; n++) inputs.push(randomBytes(n * 37));
  for (const x of inputs) {
    const want = createHash('sha256').update(x).digest('hex');
    assert.equal(sha256Sync(x), want);
    assert.equal(await sha256Hex(x), want);
  }
});

test('request inputs canonicalize as receipt::input_json', () => {
  assert.deepEqual(requestInput({ prompt: 'hi' }), { kind: 'prompt', bytes: 'hi' });
  assert.deepEqual(requestInput({ prompt_tokens: [1, 403, 407] }), { kind: 'prompt_tokens', bytes: '[1,403,407]' });
  assert.deepEqual(requestInput({ messages: [{ content: 'x', role: 'user', name: '' }], model: 'm' }),
    { kind: 'messages', bytes: '[{"content":"x","role":"user"}]' });
  assert.throws(() => requestInput({ prompt: 'a', messages: [] }), /exactly one of/);
  assert.throws(() => requestInput({ messages: [{ role: 'user', content: 3 }] }), /malformed/);
});
