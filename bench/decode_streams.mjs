// Aggregate decode throughput of llama-server (not part of CI): for each stream count, that
// many concurrent /completion requests (greedy, n_predict tokens, ignore_eos, no prompt cache)
// are sent at once; aggregate tokens/s = all predicted tokens / wall time from the first
// request sent to the last response. The same shape as runtime_test's
// DISABLED_ThroughputByStreams (in-process), so both can be run on one file in one session:
//   llama-server -m FILE -np 8 -c 2048 -t 2 --port 8090 &
//   node bench/decode_streams.mjs http://127.0.0.1:8090 [n_predict=64] [streams=1,4,8,16]
// Each count runs twice; the second run is printed (the first warms the server).
const [url, nPredictArg, streamsArg] = process.argv.slice(2);
if (!url) {
  console.error('usage: node bench/decode_streams.mjs URL [n_predict] [streams,...]');
  process.exit(2);
}
const nPredict = Number(nPredictArg ?? 64);
const counts = (streamsArg ?? '1,4,8,16').split(',').map(Number);
const prompts = ['Once upon a time', 'Lily went to the park with her mom', 'The cat sat',
  'Tom had a big red ball. He liked to play with it every day',
  'Tom had a big red ball. He liked to play with it in the garden', 'One day, a little bird'];

async function one(i) {
  const res = await fetch(`${url}/completion`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ prompt: prompts[i % prompts.length], n_predict: nPredict,
      temperature: 0, ignore_eos: true, cache_prompt: false }),
  });
  if (res.status !== 200) throw new Error(`HTTP ${res.status}: ${await res.text()}`);
  const j = await res.json();
  return { tokens: j.tokens_predicted ?? 0, perSecond: j.timings?.predicted_per_second ?? 0 };
}

for (const streams of counts) {
  let line = '';
  for (let run = 0; run < 2; ++run) {
    const t0 = performance.now();
    const results = await Promise.all(Array.from({ length: streams }, (_, i) => one(i)));
    const s = (performance.now() - t0) / 1000;
    const tokens = results.reduce((a, r) => a + r.tokens, 0);
    line = `${String(streams).padStart(2)} streams: ${tokens} tokens in ${s.toFixed(3)} s = ` +
      `${(tokens / s).toFixed(1)} tokens/s aggregate`;
  }
  console.log(line);
}
