// A fleet of three `power serve` replicas behind Debian's HAProxy (and, in a second run,
// nginx), scraped by Debian's Prometheus, all on loopback (docs/DEPLOY.md):
//  - session-keyed requests (X-Session-ID, or the body's "user" through HAProxy) land on one
//    replica while it lives, so their growing prompts hit its prefix cache; the same sessions
//    without a key, spread by least-connections, hit it less;
//  - a bounded load of streamed chat completions from 12 clients; one replica gets SIGTERM at 1/5
//    of the load and another SIGKILL at 2/5: every stream that had started on the drained
//    replica finishes with all its tokens, the drained replica exits 0, first-attempt failures
//    happen only on the killed replica, and every failed request succeeds on one client retry;
//  - Prometheus saw the running and waiting gauges move and two targets go down;
//  - a replica whose model is still loading answers /health "loading" (503, live) and exits at
//    once on SIGTERM (its model is a FIFO nobody writes, so the load never ends).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { spawn, execFileSync } from 'node:child_process';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  which, startReplica, startHaproxy, startNginx, startPrometheus, promQuery, streamCompletion,
  completion, stopAll, sleep, waitFor, freePort,
} from './fleet_lib.mjs';

const shared = process.env.POWER_SHARED_DIR;
const binary = process.env.POWER_BINARY;
const modelFile = `${shared}/models/stories260K/stories260K-F32.gguf`;
const MODEL = 'stories260K-F32';
const TOKENS = 400;      // per streamed request (ignore_eos: every request runs to it)
const REQUESTS = 96;
const CLIENTS = 12;

const missing = ['haproxy', 'nginx', 'prometheus'].filter((t) => !which(t));
const skip = missing.length && process.env.CI !== 'true'
  ? `${missing.join(', ')} not installed (bash scripts/setup.sh)` : false;

let dir;
const procs = [];

function replicaArgs() {
  return ['-m', modelFile, '--ctx', '512', '--threads', '1', '--max-running', '2',
    '--max-waiting', '64', '--drain-timeout', '60', '--no-ui'];
}

async function startFleet(n) {
  const replicas = [];
  for (let i = 1; i <= n; ++i) {
    const r = await startReplica(binary, replicaArgs(), `r${i}`);
    procs.push(r);
    replicas.push(r);
  }
  return replicas;
}

before(() => {
  if (skip) return;
  assert.deepEqual(missing, [], `CI=true needs ${missing.join(', ')}`);
  dir = mkdtempSync(join(tmpdir(), 'power-fleet-'));
});

after(() => {
  stopAll(procs);
  if (dir) rmSync(dir, { recursive: true, force: true });
});

// Sessions of `turns` requests, each turn's prompt the previous one plus a sentence (a growing
// conversation). Returns per session the replicas that answered and the cached prompt tokens.
async function runSessions(url, sessions, turns, keyOf) {
  const results = [];
  await Promise.all(sessions.map(async (s) => {
    let prompt = `${s.opening} `;
    const seen = [];
    let cached = 0;
    for (let t = 0; t < turns; ++t) {
      prompt += `${s.sentence} `;
      const body = { model: MODEL, prompt, max_tokens: 4, temperature: 0, ...keyOf.body(s) };
      const r = await completion(url, body, keyOf.headers(s));
      assert.equal(r.status, 200, JSON.stringify(r.json));
      seen.push(r.instance);
      cached += r.json.usage.prompt_tokens_details?.cached_tokens ?? 0;
    }
    results.push({ name: s.name, seen, cached });
  }));
  return results;
}

function sessionSet(prefix, n) {
  const animals = ['cat', 'dog', 'bird', 'fish', 'frog', 'bear', 'duck', 'fox', 'owl', 'bee', 'cow', 'pig'];
  return Array.from({ length: n }, (_, i) => ({
    name: `${prefix}-${i}`,
    opening: `${prefix} ${i}: Once upon a time there was a little ${animals[i % animals.length]} named ${prefix}${i}.`,
    sentence: `The ${animals[i % animals.length]} went to the park and played with the ball all day long.`,
  }));
}

// The load: REQUESTS streamed chat completions from CLIENTS workers. Event k (an object with
// `fire(inflight)` and an optional `ready(inflight)`) fires once (k + 1)/5 of the requests are done
// and the events before it have fired, at the first completion or stream start where `ready`
// holds (a drain waits until its replica has a stream under way: streams of one length end in
// waves, and between two waves a replica can have none with headers). A failed request is retried
// once by the client. Returns per request its attempts, and the throughput.
async function runLoad(url, events) {
  const results = Array.from({ length: REQUESTS }, () => ({ attempts: [] }));
  const inflight = new Map();  // request index -> instance, once headers arrived
  let next = 0;
  let done = 0;
  let fired = 0;
  const t0 = Date.now();
  function maybeFire() {
    while (fired < events.length && done >= ((fired + 1) * REQUESTS) / 5) {
      const e = events[fired];
      if (e.ready && !e.ready(inflight)) return;
      ++fired;
      e.fire(new Map(inflight));
    }
  }
  async function worker() {
    while (next < REQUESTS) {
      const i = next++;
      for (let attempt = 0; attempt < 2; ++attempt) {
        const r = await streamCompletion(url, {
          model: MODEL, messages: [{ role: 'user', content: `Story ${i}: tell me about a little dog` }],
          max_tokens: TOKENS, ignore_eos: true,
          temperature: 0.8, seed: i,
        }, { onStart: (instance) => { inflight.set(i, instance); maybeFire(); } });
        inflight.delete(i);
        results[i].attempts.push(r);
        if (r.ok) break;
      }
      ++done;
      maybeFire();
    }
  }
  await Promise.all(Array.from({ length: CLIENTS }, worker));
  assert.equal(fired, events.length, `only ${fired} of ${events.length} load events fired`);
  const seconds = (Date.now() - t0) / 1000;
  const tokens = results.reduce((n, r) => n + (r.attempts.at(-1).usage?.completion_tokens ?? 0), 0);
  return { results, seconds, tokens };
}

// The load event that sends `replica` SIGTERM while a stream runs on it, noting in
// `drained.inflight` the requests under way there.
function drainEvent(replica, drained, after = () => {}) {
  const on = (inflight) => [...inflight].filter(([, inst]) => inst === replica.name).map(([i]) => i);
  return {
    ready: (inflight) => on(inflight).length > 0,
    fire: (inflight) => {
      drained.inflight = on(inflight);
      replica.kill('SIGTERM');
      after();
    },
  };
}

function checkLoad(load, drained, killed) {
  const { results } = load;
  // Every request succeeded, at most on its second attempt, with every token.
  for (const [i, r] of results.entries()) {
    const last = r.attempts.at(-1);
    assert.ok(last.ok, `request ${i} failed twice: ${JSON.stringify(r.attempts.map((a) => a.error))}`);
    assert.equal(last.usage.completion_tokens, TOKENS, `request ${i}`);
  }
  // Streams that had started on the drained replica when it got SIGTERM all finished there.
  assert.ok(drained.inflight.length > 0, 'no stream was running on the drained replica');
  for (const i of drained.inflight) {
    const first = results[i].attempts[0];
    assert.equal(first.instance, drained.name, `request ${i}`);
    assert.ok(first.ok, `request ${i} (running on ${drained.name} at SIGTERM) failed: ${first.error}`);
  }
  // First attempts failed only where the killed replica answered.
  const failed = results.map((r, i) => [i, r.attempts[0]]).filter(([, a]) => !a.ok);
  for (const [i, a] of failed) {
    assert.ok(a.instance === killed.name || a.instance === null,
      `request ${i} failed on ${a.instance}: ${a.error}`);
  }
  return failed.length;
}

test('HAProxy: session affinity, drain, kill and Prometheus', { skip, timeout: 600000 }, async () => {
  const replicas = await startFleet(3);
  const prom = await startPrometheus(join(dir), replicas);
  procs.push(prom);
  const lb = await startHaproxy(dir, replicas);
  procs.push(lb);

  // Affinity: 12 sessions keyed by header, 12 by the body's "user"; 4 turns each.
  const byHeader = await runSessions(lb.url, sessionSet('hdr', 12), 4,
    { headers: (s) => ({ 'X-Session-ID': s.name }), body: () => ({}) });
  const byUser = await runSessions(lb.url, sessionSet('usr', 12), 4,
    { headers: () => ({}), body: (s) => ({ user: s.name }) });
  for (const s of [...byHeader, ...byUser]) {
    assert.equal(new Set(s.seen).size, 1, `${s.name} moved: ${s.seen}`);
  }
  const used = new Set([...byHeader, ...byUser].map((s) => s.seen[0]));
  assert.ok(used.size >= 2, `24 sessions all hashed to ${[...used]}`);
  // The same conversations without a key: least-connections spreads their turns.
  const unkeyed = await runSessions(lb.url, sessionSet('free', 12), 4,
    { headers: () => ({}), body: () => ({}) });
  const keyedHits = byHeader.reduce((n, s) => n + s.cached, 0);
  const freeHits = unkeyed.reduce((n, s) => n + s.cached, 0);
  console.log(`prefix-cache hit tokens: keyed ${keyedHits}, unkeyed ${freeHits} (12 sessions x 4 turns)`);
  assert.ok(keyedHits > freeHits, `keyed ${keyedHits} <= unkeyed ${freeHits}`);

  // Load with a drain and a kill.
  const [r1, r2] = replicas;
  const drained = { name: r1.name, inflight: [] };
  const killed = { name: r2.name };
  let drainHealth = null;
  const load = await runLoad(lb.url, [
    drainEvent(r1, drained, () => {
      // /health says draining at once (the balancer's check takes it out).
      setTimeout(async () => {
        try {
          const h = await fetch(`${r1.url}/health`);
          drainHealth = { status: h.status, body: await h.json() };
        } catch (e) { drainHealth = { error: String(e) }; }
      }, 20);
    }),
    { fire: () => { r2.kill('SIGKILL'); } },
  ]);
  const failedFirst = checkLoad(load, drained, killed);
  console.log(`load: ${REQUESTS} x ${TOKENS} tokens from ${CLIENTS} clients in ${load.seconds.toFixed(1)} s ` +
    `(${(load.tokens / load.seconds).toFixed(0)} tokens/s); ${drained.inflight.length} streams ran through ` +
    `the drain of ${r1.name}; ${failedFirst} first attempts failed on ${r2.name}, all retried`);
  const exit1 = await r1.exited;
  assert.equal(exit1.code, 0, `drained replica: ${JSON.stringify(exit1)} ${r1.stderrText()}`);
  assert.match(r1.stderrText(), /SIGTERM, draining/);
  assert.ok(drainHealth && !drainHealth.error, `/health of the draining replica: ${JSON.stringify(drainHealth)}`);
  assert.equal(drainHealth.status, 503);
  assert.equal(drainHealth.body.status, 'draining');

  // Prometheus: the queue gauges moved during the load; two targets are down now.
  await sleep(1000);
  const maxWaiting = await promQuery(prom, 'max(max_over_time(vllm:num_requests_waiting[5m]))');
  const maxRunning = await promQuery(prom, 'max(max_over_time(vllm:num_requests_running[5m]))');
  // The waiting gauge rose from 0 and fell back (at least two changes on some replica).
  const changes = await promQuery(prom, 'max(changes(vllm:num_requests_waiting[5m]))');
  const down = await promQuery(prom, 'count(up == 0)');
  console.log(`prometheus: max waiting ${maxWaiting[0]?.value[1]}, max running ${maxRunning[0]?.value[1]}, ` +
    `waiting-gauge changes ${changes[0]?.value[1]}, targets down ${down[0]?.value[1]}`);
  assert.ok(Number(maxWaiting[0].value[1]) >= 1);
  assert.equal(Number(maxRunning[0].value[1]), 2);  // --max-running 2
  assert.ok(Number(changes[0].value[1]) >= 2);
  assert.equal(Number(down[0].value[1]), 2);
  stopAll([lb, prom, ...replicas]);
});

test('nginx: header affinity and a drain', { skip, timeout: 600000 }, async () => {
  const replicas = await startFleet(3);
  const lb = await startNginx(join(dir), replicas);
  procs.push(lb);
  const sessions = await runSessions(lb.url, sessionSet('ngx', 12), 3,
    { headers: (s) => ({ 'X-Session-ID': s.name }), body: () => ({}) });
  for (const s of sessions) assert.equal(new Set(s.seen).size, 1, `${s.name} moved: ${s.seen}`);
  assert.ok(new Set(sessions.map((s) => s.seen[0])).size >= 2);

  const [r1] = replicas;
  const drained = { name: r1.name, inflight: [] };
  const load = await runLoad(lb.url, [drainEvent(r1, drained)]);
  // nginx moves a request refused with 503 "draining" to the next replica: no failure at all.
  const failedFirst = checkLoad(load, drained, { name: '(none)' });
  assert.equal(failedFirst, 0);
  assert.equal((await r1.exited).code, 0);
  console.log(`nginx load: ${(load.tokens / load.seconds).toFixed(0)} tokens/s; ` +
    `${drained.inflight.length} streams ran through the drain`);
  await waitFor(`${lb.url}/health`);
  stopAll([lb, ...replicas]);
});

test('SIGTERM while the model loads exits at once', { skip, timeout: 60000 }, async () => {
  const fifo = join(dir, 'never.gguf');
  execFileSync('mkfifo', [fifo]);
  const port = await freePort();
  const proc = spawn(binary, ['serve', '-m', fifo, '--port', String(port)], { stdio: ['ignore', 'pipe', 'pipe'] });
  procs.push(proc);
  let err = '';
  proc.stderr.on('data', (d) => { err += d; });
  const exited = new Promise((r) => proc.on('exit', (code, signal) => r({ code, signal })));
  await waitFor(`http://127.0.0.1:${port}/health`, { status: 503 });
  const h = await (await fetch(`http://127.0.0.1:${port}/health`)).json();
  assert.equal(h.status, 'loading');
  assert.equal(h.live, true);
  assert.equal((await fetch(`http://127.0.0.1:${port}/health/live`)).status, 200);
  const t0 = Date.now();
  proc.kill('SIGTERM');
  const e = await exited;
  assert.equal(e.code, 0, JSON.stringify(e));
  assert.ok(Date.now() - t0 < 5000);
  assert.match(err, /SIGTERM while loading, exiting/);
});
