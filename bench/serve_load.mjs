// Load benchmark for OpenAI-compatible servers (not part of CI): N concurrent clients each run
// streamed /v1/completions requests back to back for a bounded time, on loopback.
//   node bench/serve_load.mjs URL MODEL [clients=64] [seconds=20] [max_tokens=64]
// Prints requests, errors by HTTP status, p50/p99 time to first token (request sent -> first
// content chunk) and aggregate completion tokens/s (usage from include_usage / llama-server's
// final chunk, else the number of content chunks). Point it at `power serve` and at
// llama-server on the same model in the same run to compare.
// The time is bounded: at the deadline requests still streaming are aborted; their content
// chunks so far count as tokens ("cut" requests), and "cut_before_first_token" counts those
// that had not received a token yet (they are not in the TTFT percentiles).
const [url, model, clientsArg, secondsArg, maxTokensArg] = process.argv.slice(2);
if (!url || !model) {
  console.error('usage: node bench/serve_load.mjs URL MODEL [clients] [seconds] [max_tokens]');
  process.exit(2);
}
const clients = Number(clientsArg ?? 64);
const seconds = Number(secondsArg ?? 20);
const maxTokens = Number(maxTokensArg ?? 64);
const deadline = performance.now() + seconds * 1000;
const ttfts = [];
const errors = {};
let requests = 0;
let tokens = 0;
let cut = 0;
let cutBeforeFirst = 0;
const stop = new AbortController();
setTimeout(() => stop.abort(), seconds * 1000);

async function one() {
  const t0 = performance.now();
  const res = await fetch(`${url}/v1/completions`, {
    method: 'POST',
    signal: stop.signal,
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ model, prompt: 'Once upon a time', max_tokens: maxTokens,
      temperature: 0.8, stream: true, stream_options: { include_usage: true } }),
  });
  if (res.status !== 200) {
    errors[res.status] = (errors[res.status] ?? 0) + 1;
    await res.text();
    return;
  }
  const decoder = new TextDecoder();
  let buf = '';
  let first = true;
  let chunks = 0;
  let usage = null;
  try {
    for await (const part of res.body) {
      buf += decoder.decode(part, { stream: true });
      let i;
      while ((i = buf.indexOf('\n\n')) >= 0) {
        const ev = buf.slice(0, i);
        buf = buf.slice(i + 2);
        if (!ev.startsWith('data: ') || ev === 'data: [DONE]') continue;
        const j = JSON.parse(ev.slice(6));
        if (j.usage) usage = j.usage;
        if (j.choices?.length && j.choices[0].text) {
          if (first) { ttfts.push(performance.now() - t0); first = false; }
          chunks++;
        }
      }
    }
  } catch (e) {
    if (!stop.signal.aborted) throw e;
    cut++;
    if (first) cutBeforeFirst++;
    tokens += chunks;
    return;
  }
  requests++;
  tokens += usage?.completion_tokens ?? chunks;
}

async function client() {
  while (performance.now() < deadline) {
    try {
      await one();
    } catch (e) {
      if (stop.signal.aborted) {  // aborted before the answer's headers came
        cut++;
        cutBeforeFirst++;
        continue;
      }
      errors[e.code ?? e.name] = (errors[e.code ?? e.name] ?? 0) + 1;
    }
  }
}

const start = performance.now();
await Promise.all(Array.from({ length: clients }, client));
const elapsed = (performance.now() - start) / 1000;
ttfts.sort((a, b) => a - b);
const pct = (p) => ttfts.length ? ttfts[Math.min(ttfts.length - 1, Math.floor(p * ttfts.length))] : NaN;
console.log(JSON.stringify({ url, model, clients, seconds: Number(elapsed.toFixed(1)), requests,
  cut, cut_before_first_token: cutBeforeFirst, errors, ttft_p50_ms: Number(pct(0.5).toFixed(1)), ttft_p99_ms: Number(pct(0.99).toFixed(1)),
  completion_tokens: tokens, tokens_per_s: Number((tokens / elapsed).toFixed(1)) }));
