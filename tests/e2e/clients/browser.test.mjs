// A browser calls `power serve` from another origin: headless Chromium (Debian's `chromium`,
// driven by npm playwright-core) loads a page served by a small Node server on one port; the
// page fetches a streamed chat completion from `power serve` on another port with an API key
// (so the browser sends a CORS preflight first). The allowed origin gets the stream; a page on
// an origin not in --cors-origin is blocked by the browser.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium } from 'playwright-core';
import { startServer } from './serve.mjs';

const shared = process.env.POWER_SHARED_DIR;
const modelFile = `${shared}/models/stories260K/stories260K-F32.gguf`;
const MODEL = 'stories260K-F32';
const chromiumPath = process.env.POWER_CHROMIUM ?? '/usr/bin/chromium';

const PAGE = `<!doctype html><html><body><script>
async function run(base) {
  try {
    const r = await fetch(base + '/v1/chat/completions', {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: 'Bearer sk-page' },
      body: JSON.stringify({ model: '${MODEL}', stream: true, max_tokens: 12, temperature: 0,
        messages: [{ role: 'user', content: 'Once upon a time' }] }),
    });
    const reader = r.body.getReader();
    const decoder = new TextDecoder();
    let sse = '';
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      sse += decoder.decode(value, { stream: true });
    }
    let text = '';
    for (const line of sse.split('\\n')) {
      if (!line.startsWith('data: ') || line === 'data: [DONE]') continue;
      const c = JSON.parse(line.slice(6)).choices[0];
      if (c && c.delta && c.delta.content) text += c.delta.content;
    }
    return { ok: r.ok, status: r.status, text, requestId: r.headers.get('x-request-id') };
  } catch (e) {
    return { ok: false, error: String(e) };
  }
}
</script></body></html>`;

let power;
let dir;
const pages = [];
let browser;

function listen(server) {
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve(server.address().port)));
}

function startPower(args) {
  return startServer(['-m', modelFile, '--ctx', '512', '--threads', '1', ...args]);
}

const haveChromium = existsSync(chromiumPath);
const skip = !haveChromium && process.env.CI !== 'true'
  ? `no Chromium at ${chromiumPath} (apt-get install chromium)` : false;

before(async () => {
  if (skip) return;
  assert.ok(haveChromium, `CI=true needs Chromium at ${chromiumPath}`);
  for (let i = 0; i < 2; i++) {
    const s = createServer((req, res) => {
      res.writeHead(200, { 'content-type': 'text/html' });
      res.end(PAGE);
    });
    const port = await listen(s);
    pages.push({ server: s, origin: `http://127.0.0.1:${port}` });
  }
  dir = mkdtempSync(join(tmpdir(), 'power-browser-'));
  writeFileSync(join(dir, 'keys'), 'sk-page\n');
  // Only the first page's origin may call.
  power = await startPower(['--api-key-file', join(dir, 'keys'), '--cors-origin', pages[0].origin]);
  browser = await chromium.launch({ executablePath: chromiumPath, args: ['--no-sandbox'] });
});

after(async () => {
  if (browser) await browser.close();
  for (const p of pages) p.server.close();
  if (power && power.proc.exitCode === null) power.proc.kill('SIGKILL');
  if (dir) rmSync(dir, { recursive: true, force: true });
});

async function runFrom(origin) {
  const page = await browser.newPage();
  try {
    await page.goto(`${origin}/`);
    return await page.evaluate((base) => run(base), power.url);
  } finally {
    await page.close();
  }
}

test('the allowed origin streams a chat completion through fetch', { skip }, async () => {
  const r = await runFrom(pages[0].origin);
  assert.equal(r.ok, true, JSON.stringify(r));
  assert.equal(r.status, 200);
  // The same text as a direct (non-browser) request.
  const direct = await fetch(`${power.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: 'Bearer sk-page' },
    body: JSON.stringify({ model: MODEL, max_tokens: 12, temperature: 0,
      messages: [{ role: 'user', content: 'Once upon a time' }] }),
  });
  assert.equal(r.text, (await direct.json()).choices[0].message.content);
  assert.ok(r.requestId, 'X-Request-ID is exposed to the page');
});

test('an origin not in --cors-origin is blocked by the browser', { skip }, async () => {
  const r = await runFrom(pages[1].origin);
  assert.equal(r.ok, false);
  assert.match(r.error, /TypeError|Failed to fetch/);
});
