// Starts `power serve` (POWER_BINARY) on an ephemeral 127.0.0.1 port with `args`, resolving
// with {proc, url} once it prints its listening line; rejects if it exits first or stays
// silent for 60 s. The caller kills proc.
import { spawn } from 'node:child_process';

export function startServer(args, env = {}) {
  return new Promise((resolve, reject) => {
    const proc = spawn(process.env.POWER_BINARY, ['serve', '--port', '0', ...args],
      { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, ...env } });
    let out = '';
    let err = '';
    const timer = setTimeout(() => reject(new Error(`no listening line; stderr: ${err}`)), 60000);
    proc.stdout.on('data', (d) => {
      out += d;
      const m = out.match(/listening on (http:\/\/[^ ]+)/);
      if (m) {
        clearTimeout(timer);
        resolve({ proc, url: m[1], stderr: () => err });
      }
    });
    proc.stderr.on('data', (d) => { err += d; });
    proc.on('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`power serve exited with ${code}: ${err}`));
    });
  });
}
