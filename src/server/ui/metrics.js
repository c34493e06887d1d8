// The live view's arithmetic (docs/CONSOLE.md): reading Prometheus text from /metrics and
// turning two scrapes into rates. Pure functions; tests/ui/metrics.test.mjs runs them in node.

// Parses the text exposition format (version 0.0.4) into [{name, labels, value}]. Comments,
// blank lines and malformed lines are skipped; label values are unescaped (\\, \", \n).
export function parsePrometheus(text) {
  const out = [];
  for (const raw of text.split('\n')) {
    const line = raw.trim();
    if (line === '' || line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)(\s+\S+)?$/.exec(line);
    if (!m) continue;
    const labels = {};
    if (m[3] !== undefined) {
      const re = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"\s*,?\s*/g;
      let lm;
      while ((lm = re.exec(m[3])) !== null) {
        labels[lm[1]] = lm[2].replace(/\\(.)/g, (_, c) => (c === 'n' ? '\n' : c));
      }
    }
    const value = m[4] === '+Inf' ? Infinity : m[4] === '-Inf' ? -Infinity : Number(m[4]);
    out.push({ name: m[1], labels, value });
  }
  return out;
}

// The sum of a metric's samples whose labels include every pair of `where`.
export function total(samples, name, where = {}) {
  let s = 0;
  for (const x of samples) {
    if (x.name !== name) continue;
    if (Object.entries(where).every(([k, v]) => x.labels[k] === v)) s += x.value;
  }
  return s;
}

// Label values a metric carries (e.g. every model of power_requests_running).
export function labelValues(samples, name, label) {
  const seen = new Set();
  for (const x of samples) if (x.name === name && label in x.labels) seen.add(x.labels[label]);
  return [...seen].sort();
}

// One scrape's figures for the live view. `prev` is the previous snapshot (or null), so that
// counters become rates over the time between the two scrapes.
//   running, waiting:      requests in the running batch / queued, all models
//   kvUsed, kvTotal:       KV blocks
//   tokensPerSecond:       generated tokens per second since the previous scrape
//   prefixHitRate:         prompt tokens served from the prefix cache / prompt tokens (since
//                          start; null before any prompt)
//   specAcceptance:        speculative tokens accepted / drafted (null when none drafted)
//   refusals:              {reason: count} since start
export function snapshot(samples, atMs, prev = null) {
  const completion = total(samples, 'power_completion_tokens_total');
  const prompt = total(samples, 'power_prompt_tokens_total');
  const cached = total(samples, 'power_prompt_cache_tokens_total');
  const drafted = total(samples, 'power_speculative_drafted_total');
  const accepted = total(samples, 'power_speculative_accepted_total');
  const refusals = {};
  for (const x of samples) {
    if (x.name === 'power_rejections_total' && x.value > 0) {
      refusals[x.labels.reason] = (refusals[x.labels.reason] || 0) + x.value;
    }
  }
  let tokensPerSecond = null;
  if (prev && atMs > prev.atMs) {
    // A restarted server resets its counters: no rate across that.
    const d = completion - prev.completion;
    tokensPerSecond = d >= 0 ? (d * 1000) / (atMs - prev.atMs) : null;
  }
  return {
    atMs,
    running: total(samples, 'power_requests_running'),
    waiting: total(samples, 'power_queue_depth'),
    kvUsed: total(samples, 'power_kv_blocks_used'),
    kvTotal: total(samples, 'power_kv_blocks_total'),
    completion,
    tokensPerSecond,
    prefixHitRate: prompt > 0 ? cached / prompt : null,
    specAcceptance: drafted > 0 ? accepted / drafted : null,
    refusals,
  };
}

// An SVG polyline's points for `values` (nulls skipped) in a width x height box, the y axis
// from 0 to max(values, floor).
export function sparkPoints(values, width, height, floor = 1) {
  const max = Math.max(floor, ...values.filter((v) => v !== null && Number.isFinite(v)));
  const n = values.length;
  const pts = [];
  values.forEach((v, k) => {
    if (v === null || !Number.isFinite(v)) return;
    const x = n <= 1 ? width : (k * width) / (n - 1);
    const y = height - (v / max) * height;
    pts.push(`${x.toFixed(1)},${y.toFixed(1)}`);
  });
  return { points: pts.join(' '), max };
}
