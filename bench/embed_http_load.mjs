// Load benchmark for OpenAI-compatible /v1/embeddings (not part of CI): N concurrent clients
// each send one-sentence requests back to back for a bounded time, on loopback, round robin over
// a file of sentences (one per line). Point it at `power serve -m BERT.gguf` and at
// `llama-server --embedding -m BERT.gguf` in the same run to compare.
//   node bench/embed_http_load.mjs URL MODEL SENTENCES.txt [clients=1,8,64] [seconds=10]
// Prints one JSON line per client count: requests, errors by HTTP status, sentences/s, p50/p99
// latency.
import { readFileSync } from 'node:fs';

const [url, model, file, clientsArg, secondsArg] = process.argv.slice(2);
if (!url || !model || !file) {
  console.error('usage: node bench/embed_http_load.mjs URL MODEL SENTENCES.txt [clients] [seconds]');
  process.exit(2);
}
const sentences = readFileSync(file, 'utf8').split('\n').filter((s) => s.length > 0);
const levels = (clientsArg ?? '1,8,64').split(',').map(Number);
const seconds = Number(secondsArg ?? 10);

function percentile(sorted, p) {
  if (sorted.length === 0) return null;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

for (const clients of levels) {
  const deadline = performance.now() + seconds * 1000;
  const latencies = [];
  const errors = {};
  let next = 0;
  const t0 = performance.now();
  async function client() {
    while (performance.now() < deadline) {
      const input = sentences[next++ % sentences.length];
      const s = performance.now();
      try {
        const res = await fetch(`${url}/v1/embeddings`, {
          method: 'POST',
          headers: { 'Content-Type': 'application/json' },
          body: JSON.stringify({ model, input }),
        });
        const body = await res.json();
        if (res.status !== 200 || !Array.isArray(body?.data?.[0]?.embedding)) {
          errors[res.status] = (errors[res.status] ?? 0) + 1;
          continue;
        }
        latencies.push(performance.now() - s);
      } catch (e) {
        errors[e.name] = (errors[e.name] ?? 0) + 1;
      }
    }
  }
  await Promise.all(Array.from({ length: clients }, client));
  const elapsed = (performance.now() - t0) / 1000;
  latencies.sort((a, b) => a - b);
  console.log(JSON.stringify({
    url, clients, seconds: +elapsed.toFixed(1), requests: latencies.length, errors,
    sentences_per_s: +(latencies.length / elapsed).toFixed(1),
    latency_p50_ms: +percentile(latencies, 50)?.toFixed(2),
    latency_p99_ms: +percentile(latencies, 99)?.toFixed(2),
  }));
}
