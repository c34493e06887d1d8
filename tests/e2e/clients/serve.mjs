// Starts `power serve` (POWER_BINARY) with `args`, resolving with {proc, url, fetch, stderr}
// once it prints its listening line; rejects if it exits first or stays silent for 60 s. The
// caller kills proc.
//
// The transport is POWER_E2E_TRANSPORT: `tcp` (default: an ephemeral 127.0.0.1 port) or
// `unix` (--listen unix:///tmp/…sock; `fetch` then speaks HTTP over that socket, so the
// official clients, given it as their fetch, run unchanged over the unix listener).
import { spawn } from 'node:child_process';
import http from 'node:http';
import { tmpdir } from 'node:os';

let serial = 0;

// A WHATWG fetch over a unix socket (node:http with socketPath), streaming the body, honouring
// AbortSignal: enough for the OpenAI and Ollama clients and the tests' own calls.
export function unixFetch(socketPath) {
  return (input, init = {}) => new Promise((resolve, reject) => {
    const url = new URL(typeof input === 'string' || input instanceof URL ? input : input.url);
    const headers = {};
    new Headers(init.headers ?? {}).forEach((v, k) => { headers[k] = v; });
    const abortError = () => new DOMException('This operation was aborted', 'AbortError');
    const req = http.request(
      { socketPath, path: url.pathname + url.search, method: init.method ?? 'GET', headers },
      (res) => {
        const body = new ReadableStream({
          start(controller) {
            res.on('data', (c) => controller.enqueue(new Uint8Array(c)));
            res.on('end', () => controller.close());
            res.on('error', (e) => controller.error(e));
            res.on('aborted', () => controller.error(abortError()));
          },
          cancel() { res.destroy(); },
        });
        const h = new Headers();
        for (const [k, v] of Object.entries(res.headers)) {
          if (Array.isArray(v)) v.forEach((x) => h.append(k, x));
          else if (v !== undefined) h.set(k, v);
        }
        const empty = res.statusCode === 204 || res.statusCode === 304 || init.method === 'HEAD';
        resolve(new Response(empty ? null : body,
          { status: res.statusCode, statusText: res.statusMessage, headers: h }));
      });
    req.on('error', reject);
    const signal = init.signal;
    if (signal) {
      if (signal.aborted) {
        req.destroy();
        reject(abortError());
        return;
      }
      signal.addEventListener('abort', () => {
        const e = abortError();
        req.destroy(e);
        reject(e);
      });
    }
    const b = init.body;
    if (b === undefined || b === null) req.end();
    else req.end(typeof b === 'string' ? b : Buffer.from(b instanceof ArrayBuffer ? b : b.buffer ?? b));
  });
}

export function startServer(args, env = {}) {
  const transport = env.POWER_E2E_TRANSPORT ?? process.env.POWER_E2E_TRANSPORT ?? 'tcp';
  let listen = ['--port', '0'];
  let socketPath = null;
  if (transport === 'unix') {
    socketPath = `${tmpdir()}/power-e2e-${process.pid}-${serial++}.sock`;
    listen = ['--listen', `unix://${socketPath}`];
  } else if (transport !== 'tcp') {
    throw new Error(`POWER_E2E_TRANSPORT=${transport}: tcp or unix`);
  }
  return new Promise((resolve, reject) => {
    const proc = spawn(process.env.POWER_BINARY, ['serve', ...listen, ...args],
      { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, ...env } });
    let out = '';
    let err = '';
    const timer = setTimeout(() => reject(new Error(`no listening line; stderr: ${err}`)), 60000);
    proc.stdout.on('data', (d) => {
      out += d;
      const m = socketPath ? out.match(/listening on unix:\/\/(\S+)/)
        : out.match(/listening on (http:\/\/[^ ]+)/);
      if (m) {
        clearTimeout(timer);
        resolve(socketPath
          ? { proc, url: 'http://localhost', fetch: unixFetch(m[1]), socketPath: m[1],
            stdout: () => out, stderr: () => err }
          : { proc, url: m[1], fetch, stdout: () => out, stderr: () => err });
      }
    });
    proc.stderr.on('data', (d) => { err += d; });
    proc.on('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`power serve exited with ${code}: ${err}`));
    });
  });
}
