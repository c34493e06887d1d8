// Receipt checks in the browser (docs/CONSOLE.md, docs/RECEIPTS.md): the same checks, in the
// same order and with the same "PASS name: detail" / "FAIL name: detail" lines, as
// `power verify` (src/receipt/receipt.cpp verify_receipt). Pure functions over strings and
// bytes: node's test runner imports this file as it is (tests/ui/receipt.test.mjs).
//
// The signature is checked with WebCrypto's Ed25519, which browsers offer only in a secure
// context (https, or http from localhost); digests use WebCrypto when it is there and the
// SHA-256 below otherwise.

const SCHEMA = 'power.receipt.v1';
const MAX_DEPTH = 64;
const MAX_SAFE = 2n ** 53n;

// A JSON integer literal beyond ±2^53 (canonical JSON refuses them, as the C++ writer does).
class UnsafeInteger {
  constructor(text) { this.text = text; }
}

// An error whose message is a Status line, code: message (context), as Status::to_string
// writes it ("corrupt: duplicate member name (name=x)"); `bare` is the message alone.
export class StatusError extends Error {
  constructor(code, message, context = '') {
    super(`${code}: ${message}${context ? ` (${context})` : ''}`);
    this.bare = message;
  }
}

// ---------------------------------------------------------------- strict JSON parsing

// Parses RFC 8259 JSON, refusing what parse_json_strict refuses: duplicate member names and
// nesting deeper than 64. Numbers are JS numbers, except integer literals beyond ±2^53.
export function parseStrict(text) {
  let i = 0;
  let duplicate = null;
  let tooDeep = false;
  const fail = (what) => {
    throw new StatusError('corrupt', 'not valid JSON', `error=${what} at offset ${i}`);
  };
  const ws = () => {
    while (i < text.length) {
      const c = text.charCodeAt(i);
      if (c === 0x20 || c === 0x09 || c === 0x0a || c === 0x0d) i++;
      else break;
    }
  };
  const literal = (word, value) => {
    if (text.startsWith(word, i)) {
      i += word.length;
      return value;
    }
    return fail('invalid literal');
  };
  const string = () => {
    i++;  // the opening quote
    let out = '';
    let start = i;
    for (;;) {
      if (i >= text.length) fail('unterminated string');
      const c = text.charCodeAt(i);
      if (c === 0x22) {
        out += text.slice(start, i);
        i++;
        return out;
      }
      if (c < 0x20) fail('control character in a string');
      if (c !== 0x5c) {
        i++;
        continue;
      }
      out += text.slice(start, i);
      const e = text[i + 1];
      const simple = { '"': '"', '\\': '\\', '/': '/', b: '\b', f: '\f', n: '\n', r: '\r', t: '\t' };
      if (e in simple) {
        out += simple[e];
        i += 2;
      } else if (e === 'u') {
        const unit = (at) => {
          const h = text.slice(at, at + 4);
          if (!/^[0-9A-Fa-f]{4}$/.test(h)) fail('bad \\u escape');
          return parseInt(h, 16);
        };
        let u = unit(i + 2);
        i += 6;
        if (u >= 0xd800 && u <= 0xdbff) {
          if (text[i] !== '\\' || text[i + 1] !== 'u') fail('lone surrogate');
          const lo = unit(i + 2);
          if (lo < 0xdc00 || lo > 0xdfff) fail('lone surrogate');
          i += 6;
          out += String.fromCharCode(u, lo);
        } else if (u >= 0xdc00 && u <= 0xdfff) {
          fail('lone surrogate');
        } else {
          out += String.fromCharCode(u);
        }
      } else {
        fail('bad escape');
      }
      start = i;
    }
  };
  const number = () => {
    const m = /^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?/.exec(text.slice(i, i + 400));
    if (!m) fail('invalid number');
    i += m[0].length;
    if (m[2] === undefined && m[3] === undefined) {
      const big = BigInt(m[0]);
      // nlohmann reads integers that fit 64 bits as integers, larger ones as doubles.
      const fits64 = big >= -(2n ** 63n) && big < 2n ** 64n;
      if (fits64 && (big > MAX_SAFE || big < -MAX_SAFE)) return new UnsafeInteger(m[0]);
    }
    return Number(m[0]);
  };
  const value = (depth) => {
    ws();
    if (depth > MAX_DEPTH) tooDeep = true;
    const c = text[i];
    if (c === '{') {
      i++;
      const obj = {};
      const seen = new Set();
      ws();
      if (text[i] === '}') {
        i++;
        return obj;
      }
      for (;;) {
        ws();
        if (text[i] !== '"') fail('expected a member name');
        const k = string();
        if (seen.has(k)) {
          if (duplicate === null) duplicate = k;
        } else {
          seen.add(k);
          Object.defineProperty(obj, k, { value: undefined, writable: true, enumerable: true,
            configurable: true });
        }
        ws();
        if (text[i] !== ':') fail("expected ':'");
        i++;
        const v = value(depth + 1);
        // The last of duplicate members wins, as in nlohmann's parser.
        obj[k] = v;
        ws();
        if (text[i] === ',') {
          i++;
          continue;
        }
        if (text[i] === '}') {
          i++;
          return obj;
        }
        fail("expected ',' or '}'");
      }
    }
    if (c === '[') {
      i++;
      const arr = [];
      ws();
      if (text[i] === ']') {
        i++;
        return arr;
      }
      for (;;) {
        arr.push(value(depth + 1));
        ws();
        if (text[i] === ',') {
          i++;
          continue;
        }
        if (text[i] === ']') {
          i++;
          return arr;
        }
        fail("expected ',' or ']'");
      }
    }
    if (c === '"') return string();
    if (c === 't') return literal('true', true);
    if (c === 'f') return literal('false', false);
    if (c === 'n') return literal('null', null);
    if (c === '-' || (c >= '0' && c <= '9')) return number();
    return fail(i >= text.length ? 'unexpected end of input' : 'unexpected character');
  };
  const v = value(1);
  ws();
  if (i !== text.length) fail('text after the JSON value');
  if (tooDeep) throw new StatusError('corrupt', 'JSON nested too deeply', `max_depth=${MAX_DEPTH}`);
  if (duplicate !== null) {
    throw new StatusError('corrupt', 'duplicate member name', `name=${duplicate}`);
  }
  return v;
}

// ---------------------------------------------------------------- canonical JSON (RFC 8785)

// The canonical text of a value from parseStrict (or any plain JSON value): members sorted by
// UTF-16 code units, strings as JSON.stringify writes them (only '"', '\' and U+0000..U+001F
// escaped), numbers as Number.prototype.toString. Throws a StatusError as canonical_json does.
export function canonicalize(v, depth = 0) {
  if (depth > MAX_DEPTH) throw new StatusError('invalid_argument', 'JSON nested too deeply');
  if (v === null) return 'null';
  if (v === true) return 'true';
  if (v === false) return 'false';
  if (v instanceof UnsafeInteger) {
    throw new StatusError('invalid_argument', 'integer beyond 2^53 (write it as a string)',
      `value=${v.text}`);
  }
  if (typeof v === 'number') {
    if (!Number.isFinite(v)) {
      throw new StatusError('invalid_argument', 'NaN and infinities have no JSON form');
    }
    return String(v);
  }
  if (typeof v === 'string') return JSON.stringify(v);
  if (Array.isArray(v)) return `[${v.map((x) => canonicalize(x, depth + 1)).join(',')}]`;
  if (typeof v === 'object') {
    // Array.prototype.sort compares strings by UTF-16 code units, which is what JCS asks.
    const keys = Object.keys(v).sort();
    return `{${keys.map((k) => `${JSON.stringify(k)}:${canonicalize(v[k], depth + 1)}`).join(',')}}`;
  }
  throw new StatusError('invalid_argument', `${typeof v} has no JSON form`);
}

// ---------------------------------------------------------------- digests and bytes

const utf8 = new TextEncoder();

// A string as it is, bytes decoded as strict UTF-8 (throws on malformed bytes).
function asText(x) {
  return typeof x === 'string' ? x : new TextDecoder('utf-8', { fatal: true }).decode(x);
}

export function toBytes(x) {
  return typeof x === 'string' ? utf8.encode(x) : x;
}

export function hex(bytes) {
  return Array.from(bytes, (b) => b.toString(16).padStart(2, '0')).join('');
}

export function fromHex(s) {
  const out = new Uint8Array(s.length / 2);
  for (let k = 0; k < out.length; k++) out[k] = parseInt(s.slice(2 * k, 2 * k + 2), 16);
  return out;
}

const K256 = new Uint32Array([
  0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
  0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
  0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
  0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
  0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
  0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
  0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
  0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
]);

// FIPS 180-4 SHA-256, for pages opened outside a secure context (no crypto.subtle there).
export function sha256Sync(input) {
  const data = toBytes(input);
  const bitLen = data.length * 8;
  const padded = new Uint8Array(((data.length + 9 + 63) >> 6) << 6);
  padded.set(data);
  padded[data.length] = 0x80;
  const view = new DataView(padded.buffer);
  view.setUint32(padded.length - 8, Math.floor(bitLen / 2 ** 32));
  view.setUint32(padded.length - 4, bitLen >>> 0);
  const h = new Uint32Array([0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f,
    0x9b05688c, 0x1f83d9ab, 0x5be0cd19]);
  const w = new Uint32Array(64);
  const rotr = (x, n) => (x >>> n) | (x << (32 - n));
  for (let off = 0; off < padded.length; off += 64) {
    for (let t = 0; t < 16; t++) w[t] = view.getUint32(off + 4 * t);
    for (let t = 16; t < 64; t++) {
      const s0 = rotr(w[t - 15], 7) ^ rotr(w[t - 15], 18) ^ (w[t - 15] >>> 3);
      const s1 = rotr(w[t - 2], 17) ^ rotr(w[t - 2], 19) ^ (w[t - 2] >>> 10);
      w[t] = (w[t - 16] + s0 + w[t - 7] + s1) >>> 0;
    }
    let [a, b, c, d, e, f, g, hh] = h;
    for (let t = 0; t < 64; t++) {
      const S1 = rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25);
      const ch = (e & f) ^ (~e & g);
      const t1 = (hh + S1 + ch + K256[t] + w[t]) >>> 0;
      const S0 = rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22);
      const maj = (a & b) ^ (a & c) ^ (b & c);
      const t2 = (S0 + maj) >>> 0;
      hh = g; g = f; f = e; e = (d + t1) >>> 0;
      d = c; c = b; b = a; a = (t1 + t2) >>> 0;
    }
    h[0] += a; h[1] += b; h[2] += c; h[3] += d; h[4] += e; h[5] += f; h[6] += g; h[7] += hh;
  }
  const out = new Uint8Array(32);
  const ov = new DataView(out.buffer);
  for (let t = 0; t < 8; t++) ov.setUint32(4 * t, h[t]);
  return hex(out);
}

function subtle() {
  return globalThis.crypto && globalThis.crypto.subtle ? globalThis.crypto.subtle : null;
}

export async function sha256Hex(input) {
  const s = subtle();
  if (!s) return sha256Sync(input);
  return hex(new Uint8Array(await s.digest('SHA-256', toBytes(input))));
}

// ---------------------------------------------------------------- the checks

function schemaProblem(r) {
  if (r === null || typeof r !== 'object' || Array.isArray(r)) return 'not a JSON object';
  if (r.schema !== SCHEMA) return `schema is not ${SCHEMA}`;
  const onnx = isOnnx(r);
  const required = onnx ? [
    ['model', ['name', 'sha256', 'format', 'task', 'files']],
    ['config', ['task', 'threads', 'kernel_isa', 'power_version', 'options', 'nondeterminism']],
    ['device', ['kind', 'cpu_model', 'isa_flags', 'memory_bytes']],
    ['input', ['kind', 'sha256', 'bytes']],
    ['output', ['kind', 'sha256']],
    ['timings', []],
    ['signature', ['alg', 'public_key', 'value']],
  ] : [
    ['model', ['name', 'sha256', 'format', 'tensors_sha256']],
    ['config', ['sampling', 'kv_type', 'threads', 'kernel_isa', 'power_version', 'speculative',
      'nondeterminism']],
    ['device', ['kind', 'cpu_model', 'isa_flags', 'memory_bytes']],
    ['input', ['kind', 'sha256', 'tokens_sha256']],
    ['output', ['tokens_sha256', 'text_sha256', 'n_tokens', 'finish']],
    ['timings', []],
    ['signature', ['alg', 'public_key', 'value']],
  ];
  for (const [part, members] of required) {
    const p = r[part];
    if (p === null || typeof p !== 'object' || Array.isArray(p)) return `missing object ${part}`;
    for (const m of members) if (!(m in p)) return `missing ${part}.${m}`;
  }
  for (const h of ['sha256', 'tokens_sha256', 'text_sha256']) {
    for (const part of ['model', 'input', 'output']) {
      if (h in r[part] && !(typeof r[part][h] === 'string' && isSha256Hex(r[part][h]))) {
        return `${part}.${h} is not a SHA-256`;
      }
    }
  }
  return '';
}

// parse_sha256_hex: 64 hex digits, either case.
function isSha256Hex(s) {
  return /^[0-9a-fA-F]{64}$/.test(s);
}

function isOnnx(r) {
  return r && typeof r.model === 'object' && r.model !== null && r.model.format === 'onnx';
}

// nlohmann's dump() of a value, for details that quote the receipt.
function dump(v) {
  return v === undefined ? 'null' : JSON.stringify(v);
}

// The canonical input of a request object, as receipt::input_json: exactly one of "prompt"
// (its UTF-8 bytes), "prompt_tokens" (the canonical array) or "messages" (the canonical array
// of {role, content[, name, tool_call_id, tool_calls]}). Throws a StatusError.
export function requestInput(request) {
  if (request === null || typeof request !== 'object' || Array.isArray(request)) {
    throw new StatusError('invalid_argument', 'the request file must hold a JSON object');
  }
  const forms = ['prompt', 'prompt_tokens', 'messages'].filter((k) => k in request).length;
  if (forms !== 1) {
    throw new StatusError('invalid_argument',
      'the request needs exactly one of prompt, prompt_tokens, messages');
  }
  const malformed = (why) => {
    throw new StatusError('invalid_argument', 'the request\'s input is malformed', `error=${why}`);
  };
  if ('prompt' in request) {
    if (typeof request.prompt !== 'string') malformed('prompt is not a string');
    return { kind: 'prompt', bytes: request.prompt };
  }
  if ('prompt_tokens' in request) {
    const t = request.prompt_tokens;
    if (!Array.isArray(t) || !t.every((x) => Number.isInteger(x) && Math.abs(x) < 2 ** 31)) {
      malformed('prompt_tokens is not an array of int32');
    }
    // An empty token list reads as "no tokens": the prompt form (the empty string).
    if (t.length === 0) return { kind: 'prompt', bytes: '' };
    return { kind: 'prompt_tokens', bytes: canonicalize(t) };
  }
  if (!Array.isArray(request.messages)) malformed('messages is not an array');
  const msgs = request.messages.map((m) => {
    if (m === null || typeof m !== 'object' || typeof m.role !== 'string') {
      malformed('a message has no string role');
    }
    const out = { role: m.role, content: '' };
    if ('content' in m && m.content !== null) {
      if (typeof m.content !== 'string') malformed('a message content is not a string');
      out.content = m.content;
    }
    for (const k of ['name', 'tool_call_id']) {
      if (k in m) {
        if (typeof m[k] !== 'string') malformed(`${k} is not a string`);
        if (m[k] !== '') out[k] = m[k];
      }
    }
    if ('tool_calls' in m) out.tool_calls = m.tool_calls;
    return out;
  });
  if (msgs.length === 0) return { kind: 'prompt', bytes: '' };
  return { kind: 'messages', bytes: canonicalize(msgs) };
}

async function ed25519Verify(publicKeyHex, signatureHex, message) {
  const s = subtle();
  if (!s) {
    return 'WebCrypto is not available here (browsers offer it only over https or from ' +
      'localhost): open the console that way, or run power verify';
  }
  let key;
  try {
    key = await s.importKey('raw', fromHex(publicKeyHex), { name: 'Ed25519' }, false, ['verify']);
  } catch (e) {
    return e && e.name === 'NotSupportedError'
      ? 'this browser has no WebCrypto Ed25519' : 'not an Ed25519 public key';
  }
  const ok = await s.verify({ name: 'Ed25519' }, key, fromHex(signatureHex), toBytes(message));
  return ok ? '' : 'the Ed25519 signature does not verify';
}

// Every check, in power verify's order. `text` is the receipt (a string, or its bytes);
// options: publicKey (hex; the trusted key), modelSha256 (of the model file the caller holds),
// request (a JSON text: {"prompt"|"prompt_tokens"|"messages"}, or an ONNX receipt's input
// bytes), output (the generated text, or an ONNX receipt's JSON result).
// Resolves to [{name, ok, detail}].
export async function verifyReceipt(text, options = {}) {
  const out = [];
  const add = (name, ok, detail) => out.push({ name, ok, detail });
  let body;
  try {
    body = asText(text);
  } catch {
    add('canonical', false, 'corrupt: not valid JSON (error=the bytes are not UTF-8)');
    return out;
  }
  let r;
  try {
    r = parseStrict(body);
  } catch (e) {
    add('canonical', false, e instanceof StatusError ? e.message : String(e));
    return out;
  }
  if (body.endsWith('\n')) body = body.slice(0, -1);
  try {
    const canon = canonicalize(r);
    add('canonical', canon === body, canon === body ? 'the file is its canonical JSON'
      : 'the bytes are not the canonical JSON of their value');
  } catch (e) {
    add('canonical', false, e.message);
  }

  const schemaErr = schemaProblem(r);
  add('schema', schemaErr === '', schemaErr === '' ? SCHEMA : schemaErr);
  if (schemaErr !== '') return out;

  {
    const sig = r.signature;
    let detail;
    let ok = false;
    if (sig.alg !== 'Ed25519') {
      detail = 'alg is not Ed25519';
    } else if (typeof sig.public_key !== 'string' || !/^[0-9a-f]{64}$/.test(sig.public_key)) {
      detail = 'signature.public_key is not 64 lowercase hex digits';
    } else if (typeof sig.value !== 'string' || !/^[0-9a-f]{128}$/.test(sig.value)) {
      detail = 'signature.value is not 128 lowercase hex digits';
    } else if (!options.publicKey) {
      detail = 'no public key to check against (enter the server\'s key, GET /api/receipts/key)';
    } else if (options.publicKey.trim().toLowerCase() !== sig.public_key) {
      detail = `signed by ${sig.public_key}, not by the given key ` +
        options.publicKey.trim().toLowerCase();
    } else {
      const unsigned = { ...r };
      delete unsigned.signature;
      let problem;
      try {
        problem = await ed25519Verify(sig.public_key, sig.value, canonicalize(unsigned));
      } catch (e) {
        problem = e instanceof StatusError ? e.bare : String(e);  // Status::message()
      }
      ok = problem === '';
      detail = ok ? `Ed25519 by ${sig.public_key}` : problem;
    }
    add('signature', ok, detail);
  }

  const onnx = isOnnx(r);
  if (options.modelSha256 !== undefined && onnx) {
    let role = '';
    if (Array.isArray(r.model.files)) {
      for (const f of r.model.files) {
        if (f && typeof f === 'object' && f.sha256 === options.modelSha256) {
          role = typeof f.role === 'string' ? f.role : '?';
        }
      }
    }
    add('model', role !== '', role !== '' ? `the file is the recorded ${role} file`
      : `the file's sha256 ${options.modelSha256} is none of the recorded model.files`);
  } else if (options.modelSha256 !== undefined) {
    const ok = r.model.sha256 === options.modelSha256;
    add('model', ok, ok ? 'the model file is the recorded artifact'
      : `the model file's sha256 ${options.modelSha256} is not the recorded ${dump(r.model.sha256)}`);
  }

  if (options.request !== undefined && onnx) {
    const mine = await sha256Hex(options.request);
    const ok = r.input.sha256 === mine;
    add('input', ok, ok ? 'the input file matches input.sha256'
      : `the input file (sha256 ${mine}) does not match input.sha256 ${dump(r.input.sha256)}`);
  } else if (options.request !== undefined) {
    let input;
    try {
      let req;
      try {
        req = parseStrict(asText(options.request));
      } catch (e) {
        throw new StatusError('invalid_argument', 'the request file is not valid JSON',
          `error=${e instanceof StatusError ? e.bare : String(e)}`);
      }
      input = requestInput(req);
    } catch (e) {
      add('input', false, e instanceof StatusError ? e.message : String(e));
    }
    if (input) {
      const mine = await sha256Hex(input.bytes);
      const ok = input.kind === r.input.kind && mine === r.input.sha256;
      add('input', ok, ok ? `the request's ${input.kind} matches input.sha256`
        : `the request's ${input.kind} (sha256 ${mine}) does not match the receipt's ` +
          `${dump(r.input.kind)} ${dump(r.input.sha256)}`);
    }
  }

  if (options.output !== undefined && onnx) {
    let mine = '';
    let problem = '';
    try {
      mine = await sha256Hex(canonicalize(parseStrict(asText(options.output))));
    } catch (e) {
      problem = e instanceof StatusError ? e.bare : String(e);
    }
    const ok = problem === '' && r.output.sha256 === mine;
    add('output', ok, ok ? 'the canonical JSON of the output matches output.sha256'
      : problem === '' ? `the output's canonical JSON (sha256 ${mine}) does not match ` +
          `output.sha256 ${dump(r.output.sha256)}`
        : `the output file is not JSON: ${problem}`);
  } else if (options.output !== undefined) {
    const mine = await sha256Hex(options.output);
    const ok = r.output.text_sha256 === mine;
    add('output', ok, ok ? 'the output text matches output.text_sha256'
      : `the output text (sha256 ${mine}) does not match output.text_sha256 ` +
        dump(r.output.text_sha256));
  }
  return out;
}

// power verify's printout: one line per check, then the verdict.
export function verdictLines(checks) {
  const lines = checks.map((c) => `${c.ok ? 'PASS' : 'FAIL'} ${c.name}: ${c.detail}`);
  const all = checks.length > 0 && checks.every((c) => c.ok);
  lines.push(all ? 'receipt accepted' : 'receipt REJECTED');
  return lines;
}
