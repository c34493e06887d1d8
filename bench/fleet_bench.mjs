// Fleet throughput (docs/DEPLOY.md): N = 1, 2, 3 `power serve` replicas behind HAProxy
// (the configuration of tests/e2e/fleet), a fixed load of streamed completions, aggregate
// generated tokens/s per N. Rounds alternate the order of N (1,2,3 then 3,2,1, ...); the
// median per N is printed with the CPU model and the kernels' ISA path.
//
// usage: POWER_BINARY=build/src/cli/power node bench/fleet_bench.mjs MODEL.gguf
//          [--requests 48] [--clients 12] [--tokens 256] [--rounds 3] [--threads 1]
//          [--max-running 2] [--ctx 512] [--replicas 1,2,3]
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execFileSync } from 'node:child_process';
import { startReplica, startHaproxy, streamCompletion, stopAll } from '../tests/e2e/fleet/fleet_lib.mjs';

const args = process.argv.slice(2);
const model = args.find((a, i) => !a.startsWith('--') && !(i > 0 && args[i - 1].startsWith('--')));
const opt = (name, def) => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 ? Number(args[i + 1]) : def;
};
const requests = opt('requests', 48);
const clients = opt('clients', 12);
const tokens = opt('tokens', 256);
const rounds = opt('rounds', 3);
const threads = opt('threads', 1);
const maxRunning = opt('max-running', 2);
const ctx = opt('ctx', 512);
const counts = (() => {
  const i = args.indexOf('--replicas');
  return i >= 0 ? args[i + 1].split(',').map(Number) : [1, 2, 3];
})();
const binary = process.env.POWER_BINARY;
if (!model || !binary) {
  console.error('usage: POWER_BINARY=... node bench/fleet_bench.mjs MODEL.gguf [options]');
  process.exit(2);
}
const name = model.split('/').pop().replace(/\.gguf$/, '');

async function once(n) {
  const dir = mkdtempSync(join(tmpdir(), 'power-fleet-bench-'));
  const procs = [];
  try {
    const replicas = [];
    for (let i = 1; i <= n; ++i) {
      const r = await startReplica(binary, ['-m', model, '--threads', String(threads),
        '--max-running', String(maxRunning), '--max-waiting', '256', '--ctx', String(ctx), '--no-ui'],
        `r${i}`);
      procs.push(r);
      replicas.push(r);
    }
    const lb = await startHaproxy(dir, replicas);
    procs.push(lb);
    let next = 0;
    let generated = 0;
    const t0 = process.hrtime.bigint();
    await Promise.all(Array.from({ length: clients }, async () => {
      while (next < requests) {
        const i = next++;
        const r = await streamCompletion(lb.url, { model: name, prompt: `Story ${i}: Once upon a time`,
          max_tokens: tokens, ignore_eos: true, temperature: 0.8, seed: i });
        if (!r.ok) throw new Error(`request ${i}: ${r.error}`);
        generated += r.usage.completion_tokens;
      }
    }));
    const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
    return generated / seconds;
  } finally {
    stopAll(procs);
    rmSync(dir, { recursive: true, force: true });
  }
}

const cpu = (readFileSync('/proc/cpuinfo', 'utf8').match(/model name\s*:\s*(.*)/) ?? [])[1];
let isa = '?';
try {
  const out = execFileSync(binary, ['bench', '-m', model, '-p', '0', '-n', '1', '-r', '1', '-t', '1',
    '--json'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] });
  isa = JSON.parse(out.split('\n')[0]).isa ?? '?';
} catch { /* older binaries: no --json */ }
const results = Object.fromEntries(counts.map((n) => [n, []]));
for (let r = 0; r < rounds; ++r) {
  const order = r % 2 === 0 ? counts : [...counts].reverse();
  for (const n of order) results[n].push(await once(n));
}
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
console.log(`CPU: ${cpu}, ${(readFileSync('/proc/cpuinfo', 'utf8').match(/^processor/gm) ?? []).length} ` +
  `logical CPUs; ISA path: ${isa}`);
console.log(`model ${name}; ${requests} streamed requests x ${tokens} tokens from ${clients} clients; ` +
  `--threads ${threads} --max-running ${maxRunning}; ${rounds} rounds, alternating order`);
for (const n of counts) {
  const m = median(results[n]);
  console.log(`replicas ${n}: median ${m.toFixed(0)} tokens/s (${results[n].map((x) => x.toFixed(0)).join(', ')}); ` +
    `${(m / median(results[counts[0]])).toFixed(2)}x ${counts[0]} replica(s)`);
}
