// The web console (docs/CONSOLE.md) in headless Chromium (Debian's `chromium`, driven by npm
// playwright-core): `power serve` with an API key serves the page at /; the test enters the
// key, streams a chat answer from stories260K (the same text as a direct API call), hovers a
// token's log-probabilities, unloads and loads a model, pulls a model through a local mirror
// and watches the progress bar reach 100 %, overloads a queue and sees the refusal reason in
// the live view, and verifies a receipt in the page (and sees tampered ones fail). The page
// makes no request outside the servers it was pointed at. Screenshots go to
// $POWER_ARTIFACTS_DIR (default: a temporary directory, printed).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { createHash } from 'node:crypto';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium } from 'playwright-core';
import { startServer } from './serve.mjs';

const shared = process.env.POWER_SHARED_DIR;
const modelFile = `${shared}/models/stories260K/stories260K-F32.gguf`;
const pullFile = `${shared}/models/stories260K/stories260K-F16.gguf`;
const MODEL = 'stories260K-F32';
const KEY = 'sk-console';
const chromiumPath = process.env.POWER_CHROMIUM ?? '/usr/bin/chromium';

const haveChromium = existsSync(chromiumPath);
const skip = !haveChromium && process.env.CI !== 'true'
  ? `no Chromium at ${chromiumPath} (apt-get install chromium)` : false;

let dir;
let home;
let power;     // the console's server: API key, two slots, a short queue
let other;     // a second server the page is pointed at across origins (CORS)
let mirror;    // a local HTTP mirror holding the F16 file under its digest
let mirrorUrl;
let browser;
let context;
let page;
let artifacts;
const requests = [];
const pageErrors = [];
const allowedOrigins = [];  // servers a test pointed the page at, besides power and other

function listen(server) {
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve(server.address().port)));
}

before(async () => {
  if (skip) return;
  assert.ok(haveChromium, `CI=true needs Chromium at ${chromiumPath}`);
  dir = mkdtempSync(join(tmpdir(), 'power-console-'));
  home = join(dir, 'home');
  artifacts = process.env.POWER_ARTIFACTS_DIR || join(dir, 'artifacts');
  mkdirSync(artifacts, { recursive: true });
  writeFileSync(join(dir, 'keys'), `${KEY}\n`);

  // The mirror serves the blob slowly (64 KiB every 30 ms), so that the page sees progress.
  const blob = readFileSync(pullFile);
  const digest = createHash('sha256').update(blob).digest('hex');
  mirror = createServer((req, res) => {
    if (req.url !== `/sha256-${digest}`) {
      res.writeHead(404);
      res.end();
      return;
    }
    res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': blob.length });
    let off = 0;
    const step = () => {
      if (off >= blob.length) return res.end();
      res.write(blob.subarray(off, off + 65536));
      off += 65536;
      setTimeout(step, 30);
    };
    step();
  });
  mirrorUrl = `http://127.0.0.1:${await listen(mirror)}`;
  mirror.digest = digest;

  power = await startServer(['-m', modelFile, '--ctx', '512', '--threads', '1',
    '--api-key-file', join(dir, 'keys'), '--max-running', '1', '--max-waiting', '1'],
  { POWER_HOME: home, POWER_MIRRORS: mirrorUrl });
  other = await startServer(['-m', modelFile, '--ctx', '256', '--threads', '1',
    '--cors-origin', power.url], { POWER_HOME: home });
  browser = await chromium.launch({ executablePath: chromiumPath, args: ['--no-sandbox'] });
  context = await browser.newContext({ viewport: { width: 1280, height: 820 } });
  page = await context.newPage();
  page.on('request', (r) => requests.push(r.url()));
  page.on('pageerror', (e) => pageErrors.push(String(e)));
  await page.goto(`${power.url}/`);
});

after(async () => {
  if (browser) await browser.close();
  if (mirror) mirror.close();
  for (const s of [power, other]) if (s && s.proc.exitCode === null) s.proc.kill('SIGKILL');
  if (artifacts && !process.env.POWER_ARTIFACTS_DIR) console.log(`screenshots: ${artifacts}`);
  if (dir && process.env.POWER_ARTIFACTS_DIR) rmSync(dir, { recursive: true, force: true });
});

async function shot(name) {
  await page.screenshot({ path: join(artifacts, `console-${name}.png`) });
}

async function authed(path, init = {}) {
  return fetch(`${power.url}${path}`, { ...init,
    headers: { 'content-type': 'application/json', authorization: `Bearer ${KEY}`, ...(init.headers || {}) } });
}

test('the page needs no key, the API does: the key is entered once and kept for the session', { skip }, async () => {
  const r = await fetch(`${power.url}/`);
  assert.equal(r.status, 200);
  assert.match(r.headers.get('content-security-policy'), /default-src 'none'/);
  assert.match(await r.text(), /<title>Power console<\/title>/);
  // Without the key the page says so.
  await page.waitForSelector('#banner:not([hidden])');
  assert.match(await page.textContent('#banner'), /needs an API key/);
  await page.fill('#api-key', KEY);
  await page.click('#conn button[type=submit]');
  await page.waitForFunction(() => document.querySelector('#conn-status').textContent.startsWith('ok'));
  assert.equal(await page.evaluate(() => sessionStorage.getItem('power.apiKey')), KEY);
  await page.waitForFunction((m) => [...document.querySelectorAll('#chat-model option')]
    .some((o) => o.value === m), MODEL);
  // A reload keeps the key (session storage) and needs no typing.
  await page.reload();
  await page.waitForFunction(() => document.querySelector('#conn-status').textContent.startsWith('ok'));
  assert.equal(await page.inputValue('#api-key'), KEY);
});

test('a chat answer streams with time to first token, tokens/s and per-token logprobs', { skip }, async () => {
  await page.fill('#chat-temperature', '0');
  await page.fill('#chat-max-tokens', '24');
  await page.fill('#chat-system', 'You tell short stories.');
  await page.fill('#chat-input', 'Once upon a time');
  await page.click('#chat-send');
  await page.waitForFunction(() => /finish: \w+/.test(document.querySelector('#chat-stats').textContent));
  const stats = await page.textContent('#chat-stats');
  assert.match(stats, /^TTFT \d+ ms · 24 tokens · [\d.]+ tokens\/s · prompt \d+ tokens · finish: length$/);
  // The tokens/s figure is the server's decode rate (the usage chunk's llama-server timings).
  const rate = Number(/([\d.]+) tokens\/s/.exec(stats)[1]);
  assert.ok(rate > 0);
  const text = await page.evaluate(() => document.querySelector('.msg.assistant .body').textContent);
  // The same text as a direct request with the same settings.
  const direct = await (await authed('/v1/chat/completions', { method: 'POST',
    body: JSON.stringify({ model: MODEL, max_tokens: 24, temperature: 0, top_p: 0.95, top_k: 40,
      logprobs: true, top_logprobs: 5,
      messages: [{ role: 'system', content: 'You tell short stories.' },
        { role: 'user', content: 'Once upon a time' }] }) })).json();
  assert.equal(text, direct.choices[0].message.content);
  // Every token carries its log-probability and alternatives; hovering shows them.
  const titles = await page.$$eval('.msg.assistant .tok', (s) => s.map((x) => x.title));
  assert.ok(titles.every((t) => /logprob -?\d+\.\d{3} \(p=[\d.]+\)\n {2}top: /.test(t)), titles[0]);
  // 24 tokens' figures, whatever chunks they came in; the greedy token is the top one.
  const lines = titles.join('\n').split('\n').filter((l) => !l.startsWith('  top: '));
  assert.equal(lines.length, 24, titles.join('\n'));
  // The same figures as the non-streamed answer's logprobs.
  const want = direct.choices[0].logprobs.content.map((t) =>
    `${JSON.stringify(t.token)} logprob ${t.logprob.toFixed(3)} (p=${Math.exp(t.logprob).toFixed(3)})`);
  assert.deepEqual(lines, want);
  // A second turn keeps the conversation.
  await page.fill('#chat-input', 'And then?');
  await page.click('#chat-send');
  await page.waitForFunction(() => document.querySelectorAll('.msg.assistant').length === 2 &&
    /finish:/.test(document.querySelector('#chat-stats').textContent));
  const turns = await page.$$eval('.msg .who', (w) => w.map((x) => x.textContent));
  assert.deepEqual(turns, ['user', 'assistant', 'user', 'assistant']);
  await page.hover('.msg.assistant .tok >> nth=2');
  await shot('chat');
});

test('JSON-schema mode and stop strings reach the server', { skip }, async () => {
  await page.click('#chat-clear');
  await page.check('#chat-json');
  await page.fill('#chat-schema', '{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}');
  await page.fill('#chat-max-tokens', '40');
  await page.fill('#chat-input', 'A number');
  await page.click('#chat-send');
  await page.waitForFunction(() => /finish:/.test(document.querySelector('#chat-stats').textContent));
  const out = await page.evaluate(() => document.querySelector('.msg.assistant .body').textContent);
  const parsed = JSON.parse(out);
  assert.ok(Number.isInteger(parsed.n), out);
  await page.uncheck('#chat-json');
  // A schema that does not parse is caught in the page.
  await page.check('#chat-json');
  await page.fill('#chat-schema', '{nope');
  await page.fill('#chat-input', 'x');
  await page.click('#chat-send');
  assert.match(await page.textContent('#chat-stats'), /the JSON schema does not parse/);
  await page.uncheck('#chat-json');
  await page.click('#chat-clear');
  // Greedy, this prompt goes on '… a little girl named Lily came …' (checked below).
  await page.fill('#chat-stop', 'Lily');
  await page.fill('#chat-input', 'Once upon a time');
  await page.click('#chat-send');
  await page.waitForFunction(() => /finish:/.test(document.querySelector('#chat-stats').textContent));
  assert.match(await page.textContent('#chat-stats'), /finish: stop/);
  const stopped = await page.evaluate(() => document.querySelector('.msg.assistant .body').textContent);
  assert.match(stopped, /a little girl named $/);
  await page.fill('#chat-stop', '');
});

// A gate in front of `power` for the Stop test, across origins like `other`: it passes the
// page's requests through, and of a streamed chat answer it forwards the chunks up to the first
// one with content, then holds the rest back until the page closes the connection. stories260K
// makes 400 tokens in about 50 ms, and a server's writer that falls behind sends what is pending
// in one chunk (on a loaded machine, possibly the whole answer), so neither a slow model nor a
// throttled link keeps an answer arriving for long enough; the gate does, and it sees the close.
function startGate(upstream, origin) {
  const gate = { closed: null };
  const cors = { 'access-control-allow-origin': origin,
    'access-control-allow-headers': 'authorization, content-type',
    'access-control-allow-methods': 'GET, POST, DELETE, OPTIONS' };
  gate.server = createServer(async (req, res) => {
    if (req.method === 'OPTIONS') {
      res.writeHead(204, cors);
      return res.end();
    }
    const parts = [];
    for await (const c of req) parts.push(c);
    const headers = {};
    for (const h of ['authorization', 'content-type']) if (req.headers[h]) headers[h] = req.headers[h];
    const up = await fetch(`${upstream}${req.url}`, { method: req.method, headers,
      body: parts.length ? Buffer.concat(parts) : undefined });
    const type = up.headers.get('content-type') || 'application/octet-stream';
    res.writeHead(up.status, { ...cors, 'content-type': type });
    if (req.url !== '/v1/chat/completions' || !type.startsWith('text/event-stream')) {
      return res.end(Buffer.from(await up.arrayBuffer()));
    }
    res.on('close', () => { gate.closed = { sent: gate.sent }; });
    gate.sent = 0;
    let text = '';
    const dec = new TextDecoder();
    for await (const c of up.body) {
      text += dec.decode(c, { stream: true });
      let end;
      while ((end = text.indexOf('\n\n')) >= 0) {
        const event = text.slice(0, end + 2);
        text = text.slice(end + 2);
        res.write(event);
        gate.sent++;
        const data = event.replace(/^data: /, '');
        if (data.startsWith('{') && JSON.parse(data).choices?.[0]?.delta?.content) return;  // hold
      }
    }
    res.end();
  });
  return listen(gate.server).then((port) => { gate.url = `http://127.0.0.1:${port}`; return gate; });
}

test('Stop ends a streaming answer and keeps what came', { skip }, async () => {
  const gate = await startGate(power.url, power.url);
  allowedOrigins.push(gate.url);
  try {
    await page.fill('#server-url', gate.url);
    await page.click('#conn button[type=submit]');
    await page.waitForFunction(() => document.querySelector('#conn-status').textContent.startsWith('ok'));
    await page.click('#chat-clear');
    await page.fill('#chat-max-tokens', '400');
    await page.fill('#chat-input', 'Once upon a time');
    await page.click('#chat-send');
    await page.waitForFunction(() => document.querySelectorAll('.msg.assistant .tok').length >= 1);
    assert.equal(await page.isDisabled('#chat-send'), true);
    assert.equal(gate.closed, null);
    await page.click('#chat-stop-button');
    await page.waitForFunction(() => /finish: stopped/.test(document.querySelector('#chat-stats').textContent));
    assert.equal(await page.isDisabled('#chat-send'), false);
    assert.equal(await page.isDisabled('#chat-stop-button'), true);
    const kept = await page.evaluate(() => document.querySelector('.msg.assistant .body').textContent);
    assert.ok(kept.length > 0);
    // Stop closed the request: the gate, holding the rest of the answer, saw the page leave.
    for (let i = 0; i < 100 && !gate.closed; i++) await new Promise((r) => setTimeout(r, 50));
    assert.ok(gate.closed && gate.closed.sent >= 2, JSON.stringify(gate.closed));
  } finally {
    await page.fill('#chat-max-tokens', '24');
    await page.fill('#server-url', '');
    await page.click('#conn button[type=submit]');
    await page.waitForFunction(() => document.querySelector('#conn-status').textContent.startsWith('ok'));
    gate.server.close();
  }
});

test('a receipt is asked for, verified in the page, and tampered ones fail', { skip }, async () => {
  await page.click('#chat-clear');
  await page.check('#chat-receipt');
  await page.fill('#chat-input', 'Tell me about a cat');
  await page.click('#chat-send');
  await page.click('.receipt-link');
  await page.waitForFunction(() => document.querySelector('#verify-result').dataset.verdict);
  const key = execFileSync(process.env.POWER_BINARY, ['key', 'show'], { env: { ...process.env, POWER_HOME: home } })
    .toString().trim();
  const lines = await page.$$eval('#verify-result div', (d) => d.map((x) => x.textContent));
  assert.deepEqual(lines, [
    'PASS canonical: the file is its canonical JSON',
    'PASS schema: power.receipt.v1',
    `PASS signature: Ed25519 by ${key}`,
    "PASS input: the request's messages matches input.sha256",
    'PASS output: the output text matches output.text_sha256',
    'receipt accepted',
  ]);
  await shot('receipt');
  // The same receipt through power verify, with the page's request and output.
  const receipt = await page.inputValue('#verify-receipt');
  writeFileSync(join(dir, 'r.json'), receipt);
  writeFileSync(join(dir, 'req.json'), await page.inputValue('#verify-request'));
  writeFileSync(join(dir, 'out.txt'), await page.inputValue('#verify-output'));
  const cli = execFileSync(process.env.POWER_BINARY, ['verify', join(dir, 'r.json'), '--pubkey', key,
    '--request', join(dir, 'req.json'), '--output', join(dir, 'out.txt')]).toString().trimEnd().split('\n');
  assert.deepEqual(lines, cli);
  // A changed output text.
  await page.fill('#verify-output', `${await page.inputValue('#verify-output')}!`);
  await page.click('#verify-form button[type=submit]');
  await page.waitForFunction(() => document.querySelector('#verify-result').dataset.verdict === 'receipt REJECTED');
  assert.match(await page.textContent('#verify-result'), /FAIL output: the output text \(sha256 [0-9a-f]{64}\) does not match/);
  await shot('receipt-tampered');
  // A changed receipt (one more output token): the signature no longer holds.
  const r = JSON.parse(receipt);
  r.output.n_tokens += 1;
  const keys = (o) => (o && typeof o === 'object' && !Array.isArray(o)
    ? Object.fromEntries(Object.keys(o).sort().map((k) => [k, keys(o[k])])) : o);
  await page.fill('#verify-receipt', JSON.stringify(keys(r)));
  await page.fill('#verify-output', '');
  await page.click('#verify-form button[type=submit]');
  await page.waitForFunction(() => /FAIL signature/.test(document.querySelector('#verify-result').textContent));
  assert.match(await page.textContent('#verify-result'), /FAIL signature: the Ed25519 signature does not verify/);
  // A key that is not the server's.
  await page.fill('#verify-receipt', receipt);
  await page.fill('#verify-key', '0'.repeat(64));
  await page.click('#verify-form button[type=submit]');
  await page.waitForFunction(() => /FAIL signature: signed by/.test(document.querySelector('#verify-result').textContent));
  await page.click('#verify-fetch-key');
  await page.waitForFunction((k) => document.querySelector('#verify-key').value === k, key);
  await page.click('button[data-tab=chat]');
  await page.uncheck('#chat-receipt');
});

test('models: unload and load, with their memory shown', { skip }, async () => {
  await page.click('button[data-tab=models]');
  const row = `#models-loaded tr[data-model="${MODEL}"]`;
  await page.waitForSelector(row);
  const cells = await page.$$eval(`${row} td`, (t) => t.map((x) => x.textContent));
  assert.equal(cells[1], 'llama');
  assert.equal(cells[2], '512');
  assert.match(cells[3], /MiB$/);
  assert.equal(cells[6], 'mmap');
  await page.click(`${row} button.unload`);
  await page.waitForSelector(row, { state: 'detached' });
  assert.match(await page.textContent('#load-status'), /unloaded stories260K-F32/);
  const ps = await (await authed('/api/ps')).json();
  assert.equal(ps.models.length, 0);
  await page.fill('#load-model', modelFile);
  await page.click('#load-form button[type=submit]');
  await page.waitForSelector(row);
  assert.match(await page.textContent('#load-status'), /loaded stories260K-F32/);
  // A file that is not there: the server's reason, no row.
  await page.fill('#load-model', join(dir, 'missing.gguf'));
  await page.click('#load-form button[type=submit]');
  await page.waitForFunction(() => document.querySelector('#load-status').classList.contains('bad'));
  await shot('models');
});

test('a pull through the local mirror fills the progress bar to 100 %, then delete', { skip }, async () => {
  await page.click('button[data-tab=models]');
  // Record the bar at every status change.
  await page.evaluate(() => {
    window.pullSeen = [];
    new MutationObserver(() => {
      const b = document.querySelector('#pull-progress');
      window.pullSeen.push([b.value, b.max, document.querySelector('#pull-status').textContent]);
    }).observe(document.querySelector('#pull-status'), { childList: true, characterData: true, subtree: true });
  });
  // The upstream is unreachable from here; the pinned digest lets the mirror serve it.
  await page.fill('#pull-source', 'hf://power-test/stories/stories260K-F16.gguf');
  await page.fill('#pull-name', 'tiny');
  await page.fill('#pull-sha256', mirror.digest);
  await page.click('#pull-form button[type=submit]');
  await page.waitForFunction(() => /^success/.test(document.querySelector('#pull-status').textContent),
    null, { timeout: 60000 });
  const seen = await page.evaluate(() => window.pullSeen);
  const partial = seen.filter(([v, m, s]) => s.startsWith('downloading') && v > 0 && v < m);
  assert.ok(partial.length >= 2, JSON.stringify(seen));
  const [value, max] = await page.evaluate(() => [document.querySelector('#pull-progress').value,
    document.querySelector('#pull-progress').max]);
  assert.equal(value, max);
  assert.match(await page.textContent('#pull-status'), new RegExp(`success: tiny sha256:${mirror.digest}`));
  await shot('pull');
  const row = '#models-store tr[data-model="tiny"]';
  await page.waitForSelector(row);
  page.once('dialog', (d) => d.accept());
  await page.click(`${row} button.delete`);
  await page.waitForSelector(row, { state: 'detached' });
  assert.match(await page.textContent('#load-status'), /deleted tiny/);
});

test('an overloaded queue: the refusal and its reason appear in the live view', { skip }, async () => {
  await page.click('button[data-tab=live]');
  // One slot, one waiting place: of six long requests at once, some are turned away.
  const body = JSON.stringify({ model: MODEL, max_tokens: 400, temperature: 0,
    messages: [{ role: 'user', content: 'Once upon a time' }] });
  const results = await Promise.all(Array.from({ length: 6 }, () =>
    authed('/v1/chat/completions', { method: 'POST', body }).then((r) => r.status)));
  assert.ok(results.includes(429), JSON.stringify(results));
  await page.waitForFunction(() => [...document.querySelectorAll('#live-refusals td.reason')]
    .some((t) => t.textContent === 'queue_full'), null, { timeout: 10000 });
  const row = await page.$$eval('#live-refusals tr', (rs) => rs.map((r) => r.textContent)
    .find((t) => t.includes('queue_full')));
  assert.match(row, /429queue_full.+queue/);
  // The counts come from /metrics (power_rejections_total).
  await page.waitForFunction(() => /queue_full: \d+/.test(document.querySelector('#live-refusal-counts').textContent));
  // The counters moved: tokens were generated, the KV pool is shown.
  assert.match(await page.textContent('#live-kv .value'), /^\d+ \/ \d+$/);
  // A speculative (n-gram) request: the acceptance and prefix-cache cards show the ratios of
  // the counters in /metrics once the page has scraped them.
  const spec = await authed('/v1/chat/completions', { method: 'POST', body: JSON.stringify({
    model: MODEL, max_tokens: 60, temperature: 0, speculative: { mode: 'ngram', k: 4 },
    messages: [{ role: 'user', content: 'One day, one day, one day, one day, one day' }] }) });
  assert.equal(spec.status, 200);
  const text = await (await authed('/metrics')).text();
  const counter = (name) => [...text.matchAll(new RegExp(`^${name}(\\{[^}]*\\})? (\\d+)$`, 'gm'))]
    .reduce((a, m) => a + Number(m[2]), 0);
  const drafted = counter('power_speculative_drafted_total');
  assert.ok(drafted > 0, 'the n-gram drafter drafted');
  const want = (x) => `${(100 * x).toFixed(1)} %`;
  const specWant = want(counter('power_speculative_accepted_total') / drafted);
  const prefixWant = want(counter('power_prompt_cache_tokens_total') / counter('power_prompt_tokens_total'));
  await page.waitForFunction(([a, b]) => document.querySelector('#live-spec .value').textContent === a &&
    document.querySelector('#live-prefix .value').textContent === b, [specWant, prefixWant], { timeout: 10000 });
  await shot('live');
});

test('the page can drive another server across origins (CORS)', { skip }, async () => {
  await page.click('button[data-tab=chat]');
  await page.fill('#server-url', other.url);
  await page.fill('#api-key', '');
  await page.click('#conn button[type=submit]');
  await page.waitForFunction(() => document.querySelector('#conn-status').textContent.startsWith('ok'));
  await page.click('#chat-clear');
  await page.fill('#chat-max-tokens', '8');
  await page.fill('#chat-input', 'Hello');
  await page.click('#chat-send');
  await page.waitForFunction(() => /finish:/.test(document.querySelector('#chat-stats').textContent));
  assert.match(await page.textContent('#chat-stats'), /8 tokens/);
  await page.fill('#server-url', '');
  await page.fill('#api-key', KEY);
  await page.click('#conn button[type=submit]');
});

test('the page asked nothing of any other origin and threw nothing', { skip }, async () => {
  assert.deepEqual(pageErrors, []);
  const allowed = [power.url, other.url, ...allowedOrigins];
  const outside = requests.filter((u) => !u.startsWith('data:') && !allowed.some((a) => u.startsWith(a)));
  assert.deepEqual(outside, []);
  assert.ok(requests.some((u) => u.startsWith(`${other.url}/v1/chat/completions`)));
});

test('--no-ui: no console at /', { skip }, async () => {
  const s = await startServer(['-m', modelFile, '--ctx', '128', '--threads', '1', '--no-ui'], { POWER_HOME: home });
  try {
    const r = await fetch(`${s.url}/`);
    assert.equal(r.status, 404);
    assert.equal((await r.json()).error.code, 'not_found');
    assert.equal((await fetch(`${s.url}/ui/app.js`)).status, 404);
  } finally {
    s.proc.kill('SIGKILL');
  }
});
