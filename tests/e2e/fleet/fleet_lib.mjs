// A fleet on loopback for the fleet test and the fleet benchmark (docs/DEPLOY.md): `power
// serve` replicas, Debian's HAProxy or nginx in front of them with the configurations the
// docs give, Debian's Prometheus scraping them, and a streaming client that records which
// replica answered (X-Power-Instance) and how the stream ended. Node.js only (no npm modules).
import { spawn, spawnSync } from 'node:child_process';
import { createServer } from 'node:net';
import { mkdirSync, writeFileSync, chmodSync } from 'node:fs';
import { join } from 'node:path';

export function which(cmd) {
  const r = spawnSync('sh', ['-c', `command -v ${cmd}`], { encoding: 'utf8' });
  return r.status === 0 ? r.stdout.trim() : null;
}

export function freePort() {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.on('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Polls url until it answers `status` (default 200), up to timeoutMs.
export async function waitFor(url, { status = 200, timeoutMs = 30000 } = {}) {
  const until = Date.now() + timeoutMs;
  for (;;) {
    try {
      const r = await fetch(url);
      await r.arrayBuffer();
      if (r.status === status) return;
    } catch { /* not listening yet */ }
    if (Date.now() > until) throw new Error(`${url} did not answer ${status}`);
    await sleep(50);
  }
}

// One `power serve` replica on an ephemeral port; resolves once it printed its listening line
// (printed after its models are loaded and warmed up).
export function startReplica(binary, args, name) {
  return new Promise((resolve, reject) => {
    const proc = spawn(binary, ['serve', '--port', '0', '--instance-id', name, ...args],
      { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    const timer = setTimeout(() => reject(new Error(`${name}: no listening line; ${err}`)), 60000);
    proc.stdout.on('data', (d) => {
      out += d;
      const m = out.match(/listening on http:\/\/[^:]+:(\d+)/);
      if (m && !proc.port) {
        clearTimeout(timer);
        proc.port = Number(m[1]);
        proc.name = name;
        proc.url = `http://127.0.0.1:${proc.port}`;
        proc.stderrText = () => err;
        proc.exited = new Promise((r) => proc.on('exit', (code, signal) => r({ code, signal })));
        resolve(proc);
      }
    });
    proc.stderr.on('data', (d) => { err += d; });
    proc.on('exit', (code) => {
      clearTimeout(timer);
      if (!proc.port) reject(new Error(`${name} exited with ${code}: ${err}`));
    });
  });
}

// HAProxy in front of `replicas` (docs/DEPLOY.md): requests with a session key (X-Session-ID,
// else the JSON body's "user") go to a consistent-hash backend, the rest to least-connections;
// readiness checks every 250 ms take a draining replica out; failed connections and 503s are
// retried on another replica.
export function haproxyConfig(port, replicas) {
  const servers = replicas.map((r) => `  server ${r.name} 127.0.0.1:${r.port} check`).join('\n');
  const checks = [
    '  option httpchk GET /health/ready',
    '  http-check expect status 200',
    '  default-server inter 250ms fastinter 250ms downinter 500ms fall 1 rise 2',
  ].join('\n');
  return `global
  maxconn 4096
defaults
  mode http
  timeout connect 2s
  timeout client 120s
  timeout server 120s
  retries 3
  option redispatch 1
  retry-on conn-failure empty-response 503
frontend power
  bind 127.0.0.1:${port}
  option http-buffer-request
  http-request set-var(txn.session) req.hdr(X-Session-ID) if { req.hdr(X-Session-ID) -m found }
  http-request set-var(txn.session) req.body,json_query('$.user') if !{ var(txn.session) -m found } { req.body_size gt 0 }
  use_backend power_affinity if { var(txn.session) -m found }
  default_backend power_least
backend power_least
  balance leastconn
${checks}
${servers}
backend power_affinity
  balance hash var(txn.session)
  hash-type consistent
${checks}
${servers}
`;
}

export async function startHaproxy(dir, replicas) {
  const port = await freePort();
  const cfg = join(dir, 'haproxy.cfg');
  writeFileSync(cfg, haproxyConfig(port, replicas));
  return startBalancer('haproxy', ['-c', '-f', cfg], ['-db', '-f', cfg], port);
}

// Checks a balancer's configuration (`checkArgs`), starts it in the foreground and waits until
// it forwards /health.
async function startBalancer(cmd, checkArgs, runArgs, port) {
  const check = spawnSync(cmd, checkArgs, { encoding: 'utf8' });
  if (check.status !== 0) throw new Error(`${cmd} config check: ${check.stdout}${check.stderr}`);
  const proc = spawn(cmd, runArgs, { stdio: ['ignore', 'ignore', 'pipe'] });
  let err = '';
  proc.stderr.on('data', (d) => { err += d; });
  proc.url = `http://127.0.0.1:${port}`;
  proc.stderrText = () => err;
  await waitFor(`${proc.url}/health`);
  return proc;
}

// nginx in front of `replicas`: the X-Session-ID header picks a consistent-hash upstream,
// requests without it go least_conn; a 503 (draining) or a failed connection moves the request
// to the next replica (POST included). nginx has no JSON body parser, so only the header keys
// sessions here.
export function nginxConfig(port, dir, replicas) {
  const servers = replicas.map((r) => `    server 127.0.0.1:${r.port} max_fails=1 fail_timeout=10s;`).join('\n');
  return `worker_processes 1;
daemon off;
pid ${dir}/nginx.pid;
error_log ${dir}/nginx-error.log warn;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path ${dir}/body;
  proxy_temp_path ${dir}/proxy;
  fastcgi_temp_path ${dir}/fastcgi;
  uwsgi_temp_path ${dir}/uwsgi;
  scgi_temp_path ${dir}/scgi;
  map $http_x_session_id $power_upstream {
    ""      power_least;
    default power_affinity;
  }
  upstream power_least {
    least_conn;
${servers}
  }
  upstream power_affinity {
    hash $http_x_session_id consistent;
${servers}
  }
  server {
    listen 127.0.0.1:${port};
    location / {
      proxy_pass http://$power_upstream;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
      proxy_read_timeout 120s;
      proxy_next_upstream error timeout http_503 non_idempotent;
      proxy_next_upstream_tries 3;
    }
  }
}
`;
}

export async function startNginx(dir, replicas) {
  const port = await freePort();
  for (const d of ['body', 'proxy', 'fastcgi', 'uwsgi', 'scgi']) {
    mkdirSync(join(dir, d), { recursive: true });
    chmodSync(join(dir, d), 0o777);  // workers may run as another user when started as root
  }
  const cfg = join(dir, 'nginx.conf');
  writeFileSync(cfg, nginxConfig(port, dir, replicas));
  return startBalancer('nginx', ['-t', '-p', dir, '-c', cfg], ['-p', dir, '-c', cfg], port);
}

// Prometheus scraping the replicas' /metrics every 250 ms.
export async function startPrometheus(dir, replicas) {
  const port = await freePort();
  const cfg = join(dir, 'prometheus.yml');
  const targets = replicas.map((r) => `'127.0.0.1:${r.port}'`).join(', ');
  writeFileSync(cfg, `global:
  scrape_interval: 250ms
  scrape_timeout: 200ms
scrape_configs:
  - job_name: power
    static_configs:
      - targets: [${targets}]
`);
  const proc = spawn('prometheus', [`--config.file=${cfg}`, `--storage.tsdb.path=${join(dir, 'tsdb')}`,
    `--web.listen-address=127.0.0.1:${port}`, '--log.level=warn'], { stdio: ['ignore', 'ignore', 'pipe'] });
  let err = '';
  proc.stderr.on('data', (d) => { err += d; });
  proc.url = `http://127.0.0.1:${port}`;
  proc.stderrText = () => err;
  proc.exited = new Promise((r) => proc.on('exit', (code, signal) => r({ code, signal })));
  await waitFor(`${proc.url}/-/ready`);
  // Ready is not scraping: the discovery manager hands targets to the scrape loops up to 5 s
  // later. Wait until every replica has been scraped, so a short load cannot finish unseen.
  for (let i = 0; i < 400; i++) {
    const r = await fetch(`${proc.url}/api/v1/query?query=${encodeURIComponent('up == 1')}`);
    const j = await r.json();
    if (j.status === 'success' && j.data.result.length === replicas.length) return proc;
    await new Promise((res) => setTimeout(res, 50));
  }
  throw new Error(`Prometheus did not scrape all ${replicas.length} replicas within 20 s`);
}

// An instant PromQL query; resolves with the result vector.
export async function promQuery(prom, q) {
  const r = await fetch(`${prom.url}/api/v1/query?query=${encodeURIComponent(q)}`);
  const j = await r.json();
  if (j.status !== 'success') throw new Error(`${q}: ${JSON.stringify(j)}`);
  return j.data.result;
}

// One streamed completion — a chat completion when `body` has messages, else a text
// completion: resolves {ok, instance, tokens, usage, status, error}. `onStart(instance)` runs
// when the response headers arrive. ok means HTTP 200, a final chunk with a finish_reason and
// [DONE].
export async function streamCompletion(url, body, { headers = {}, onStart } = {}) {
  const out = { ok: false, instance: null, tokens: 0, usage: null, status: 0, error: null };
  const path = body.messages ? '/v1/chat/completions' : '/v1/completions';
  try {
    const r = await fetch(`${url}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...headers },
      body: JSON.stringify({ ...body, stream: true, stream_options: { include_usage: true } }),
    });
    out.status = r.status;
    out.instance = r.headers.get('x-power-instance');
    if (onStart) onStart(out.instance);
    if (r.status !== 200) {
      out.error = await r.text();
      return out;
    }
    const decoder = new TextDecoder();
    let buf = '';
    let finished = false;
    let done = false;
    for await (const chunk of r.body) {
      buf += decoder.decode(chunk, { stream: true });
      let at;
      while ((at = buf.indexOf('\n\n')) >= 0) {
        const event = buf.slice(0, at);
        buf = buf.slice(at + 2);
        if (!event.startsWith('data: ')) continue;
        const data = event.slice(6);
        if (data === '[DONE]') { done = true; continue; }
        const j = JSON.parse(data);
        if (j.usage) out.usage = j.usage;
        for (const c of j.choices ?? []) {
          if ((c.text ?? c.delta?.content) !== undefined && c.finish_reason === null) out.tokens += 1;
          if (c.finish_reason) finished = true;
        }
      }
    }
    out.ok = finished && done;
    if (!out.ok) out.error = 'stream ended early';
  } catch (e) {
    out.error = String(e?.cause?.code ?? e?.message ?? e);
  }
  return out;
}

// A plain (non-streamed) completion; resolves {status, instance, json}.
export async function completion(url, body, headers = {}) {
  const r = await fetch(`${url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
  });
  return { status: r.status, instance: r.headers.get('x-power-instance'), json: await r.json() };
}

export function stopAll(procs) {
  for (const p of procs) {
    if (p && p.exitCode === null && p.signalCode === null) p.kill('SIGKILL');
  }
}
