// The web console (docs/CONSOLE.md): a chat playground, the models and the store, a live view
// of the scheduler, and receipts checked in the page. Plain modules, no build step; everything
// goes through the server's public API with the key the user typed (kept in sessionStorage).
import { sseData } from './sse.js';
import { parsePrometheus, snapshot, sparkPoints, labelValues, total } from './metrics.js';
import { verifyReceipt, verdictLines } from './receipt.js';

const $ = (id) => document.getElementById(id);

const state = {
  messages: [],      // the conversation: [{role, content}]
  abort: null,       // the running chat request's AbortController
  receipts: [],      // [{id, model, receipt, request, output}]
  history: [],       // live snapshots, newest last
  models: [],        // ids from /v1/models
};

// ---------------------------------------------------------------- connection

function baseUrl() {
  const s = sessionStorage.getItem('power.server');
  if (s) return s.replace(/\/+$/, '');
  // The directory the page was served from, so that a reverse proxy's prefix is kept.
  return new URL('.', location.href).href.replace(/\/+$/, '');
}

function apiKey() {
  return sessionStorage.getItem('power.apiKey') || '';
}

class ApiError extends Error {
  constructor(status, message, code) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

async function api(path, init = {}) {
  const headers = new Headers(init.headers || {});
  const key = apiKey();
  if (key) headers.set('Authorization', `Bearer ${key}`);
  if (init.body && !headers.has('Content-Type')) headers.set('Content-Type', 'application/json');
  const r = await fetch(baseUrl() + path, { ...init, headers });
  if (r.status === 401) showBanner('This server needs an API key: enter it at the top right.');
  return r;
}

async function errorFrom(r) {
  let message = `HTTP ${r.status}`;
  let code;
  try {
    const j = await r.json();
    if (j && j.error) {
      message = typeof j.error === 'string' ? j.error : j.error.message || message;
      code = j.error.code;
    }
  } catch { /* not JSON */ }
  return new ApiError(r.status, message, code);
}

async function apiJson(path, init) {
  const r = await api(path, init);
  if (!r.ok) throw await errorFrom(r);
  return r.json();
}

function showBanner(text) {
  const b = $('banner');
  b.textContent = text;
  b.hidden = !text;
}

function setStatus(el, text, kind = '') {
  el.textContent = text;
  el.className = `status ${kind}`;
}

function bytes(n) {
  if (!Number.isFinite(n)) return '';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let u = 0;
  while (n >= 1024 && u < units.length - 1) {
    n /= 1024;
    u++;
  }
  return `${n.toFixed(u === 0 ? 0 : 1)} ${units[u]}`;
}

function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === 'class') e.className = v;
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v);
  }
  for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return e;
}

async function connect() {
  try {
    const h = await fetch(`${baseUrl()}/health`);
    const health = await h.json();
    const v = await apiJson('/api/version').catch(() => null);
    await refreshModelList();
    showBanner('');
    setStatus($('conn-status'), `${health.status}${v ? ` · Ollama API ${v.version}` : ''}`,
      health.status === 'ok' ? 'ok' : 'bad');
  } catch (e) {
    setStatus($('conn-status'), e.message, 'bad');
  }
}

// ---------------------------------------------------------------- tabs

function showTab(name) {
  for (const b of document.querySelectorAll('#tabs button')) {
    b.classList.toggle('active', b.dataset.tab === name);
  }
  for (const s of document.querySelectorAll('section.tab')) s.hidden = s.id !== `tab-${name}`;
  if (name === 'models') refreshModels();
  if (name === 'live') renderLive();
}

// ---------------------------------------------------------------- chat

async function refreshModelList() {
  const j = await apiJson('/v1/models');
  state.models = j.data.filter((m) => m.kind !== 'embedding' && m.kind !== undefined)
    .map((m) => m.id);
  const sel = $('chat-model');
  const keep = sel.value;
  sel.replaceChildren(...state.models.map((id) => el('option', { value: id }, id)));
  if (state.models.includes(keep)) sel.value = keep;
}

function addMessage(role, text = '') {
  const body = el('span', { class: 'body' }, text);
  const m = el('div', { class: `msg ${role}` }, el('span', { class: 'who' }, role), body);
  $('chat-log').append(m);
  $('chat-log').scrollTop = $('chat-log').scrollHeight;
  return { div: m, body };
}

function tokenTitle(entries) {
  // One line per token of the chunk: its log-probability and the alternatives.
  return entries.map((t) => {
    const alts = (t.top_logprobs || []).map((a) => `${JSON.stringify(a.token)} ${a.logprob.toFixed(3)}`);
    return `${JSON.stringify(t.token)} logprob ${t.logprob.toFixed(3)} (p=${Math.exp(t.logprob).toFixed(3)})` +
      (alts.length ? `\n  top: ${alts.join(', ')}` : '');
  }).join('\n');
}

function chatBody(sent) {
  const body = {
    model: $('chat-model').value,
    messages: sent,
    stream: true,
    stream_options: { include_usage: true },
    temperature: Number($('chat-temperature').value),
    top_p: Number($('chat-top-p').value),
    max_tokens: Number($('chat-max-tokens').value),
  };
  const topK = $('chat-top-k').value;
  if (topK !== '') body.top_k = Number(topK);
  const seed = $('chat-seed').value;
  if (seed !== '') body.seed = Number(seed);
  const stop = $('chat-stop').value.split('\n').filter((s) => s !== '');
  if (stop.length) body.stop = stop;
  if ($('chat-logprobs').checked) {
    body.logprobs = true;
    const n = Number($('chat-top-logprobs').value);
    if (n > 0) body.top_logprobs = n;
  }
  if ($('chat-json').checked) {
    let schema;
    try {
      schema = JSON.parse($('chat-schema').value);
    } catch (e) {
      throw new Error(`the JSON schema does not parse: ${e.message}`);
    }
    body.response_format = { type: 'json_schema', json_schema: { name: 'console', schema, strict: true } };
  }
  if ($('chat-receipt').checked) body.power_receipt = true;
  return body;
}

async function sendChat(text) {
  const system = $('chat-system').value;
  const user = { role: 'user', content: text };
  const sent = [...(system ? [{ role: 'system', content: system }] : []), ...state.messages, user];
  let body;
  try {
    body = chatBody(sent);
  } catch (e) {
    setStatus($('chat-stats'), e.message, 'bad');
    return;
  }
  state.messages.push(user);
  addMessage('user', text);
  const out = addMessage('assistant');
  out.div.classList.add('streaming');
  const ctl = new AbortController();
  state.abort = ctl;
  $('chat-send').disabled = true;
  $('chat-stop-button').disabled = false;
  setStatus($('chat-stats'), 'waiting for the first token…');
  const t0 = performance.now();
  let tFirst = null;
  let tLast = null;
  let chunks = 0;
  let reply = '';
  let usage = null;
  let timings = null;  // the server's measurements (llama-server's names)
  let finish = null;
  let receipt = null;
  let error = null;
  try {
    const r = await api('/v1/chat/completions', { method: 'POST', body: JSON.stringify(body), signal: ctl.signal });
    if (!r.ok) throw await errorFrom(r);
    for await (const data of sseData(r)) {
      if (data === '[DONE]') break;
      const j = JSON.parse(data);
      if (j.error) {
        error = j.error.message || String(j.error);
        continue;
      }
      if (j.object === 'power.receipt') {
        receipt = j.receipt;
        continue;
      }
      if (j.usage) usage = j.usage;
      if (j.timings) timings = j.timings;
      const c = j.choices && j.choices[0];
      if (!c) continue;
      if (c.finish_reason) finish = c.finish_reason;
      const piece = c.delta && c.delta.content;
      if (piece) {
        const now = performance.now();
        if (tFirst === null) tFirst = now;
        tLast = now;
        const lp = c.logprobs && Array.isArray(c.logprobs.content) ? c.logprobs.content : [];
        // Tokens so far: the logprobs say how many a chunk holds; without them, one per chunk
        // until the usage chunk gives the count.
        chunks += lp.length || 1;
        reply += piece;
        if (lp.length > 1 && lp.map((t) => t.token).join('') === piece) {
          // Several tokens in one chunk: one span each, so that each shows its own figures.
          for (const t of lp) out.body.append(el('span', { class: 'tok', title: tokenTitle([t]) }, t.token));
        } else {
          const span = el('span', { class: 'tok' }, piece);
          if (lp.length) span.title = tokenTitle(lp);
          out.body.append(span);
        }
        $('chat-log').scrollTop = $('chat-log').scrollHeight;
        const tps = chunks > 1 && tLast > tFirst ? ((chunks - 1) * 1000) / (tLast - tFirst) : null;
        setStatus($('chat-stats'), `TTFT ${(tFirst - t0).toFixed(0)} ms · ${chunks} tokens` +
          (tps ? ` · ${tps.toFixed(1)} tokens/s` : ''));
      }
    }
  } catch (e) {
    error = e.name === 'AbortError' ? null : e.message;
    if (e.name === 'AbortError') finish = 'stopped';
  } finally {
    state.abort = null;
    $('chat-send').disabled = false;
    $('chat-stop-button').disabled = true;
    out.div.classList.remove('streaming');
  }
  if (error) {
    out.div.classList.add('error');
    if (!reply) out.body.textContent = error;
    setStatus($('chat-stats'), error, 'bad');
    if (!reply) {
      state.messages.pop();  // the turn did not happen
      return;
    }
  }
  state.messages.push({ role: 'assistant', content: reply });
  const n = usage ? usage.completion_tokens : chunks;
  // Decode speed: the server's (tokens after the first over the time after the first); the
  // page's own clock only when the server did not say.
  const tps = timings && timings.predicted_n > 1 ? timings.predicted_per_second
    : n > 1 && tLast > tFirst ? ((n - 1) * 1000) / (tLast - tFirst) : null;
  const parts = [];
  if (tFirst !== null) parts.push(`TTFT ${(tFirst - t0).toFixed(0)} ms`);
  parts.push(`${n} tokens`);
  if (tps) parts.push(`${tps.toFixed(1)} tokens/s`);
  if (usage) parts.push(`prompt ${usage.prompt_tokens} tokens`);
  if (finish) parts.push(`finish: ${finish}`);
  if (!error) setStatus($('chat-stats'), parts.join(' · '));
  if (receipt) {
    const rec = { id: state.receipts.length + 1, model: body.model, receipt,
      request: JSON.stringify({ messages: sent }), output: reply };
    state.receipts.push(rec);
    renderReceiptList();
    const link = el('a', { class: 'receipt-link', href: '#', onclick: (ev) => {
      ev.preventDefault();
      openReceipt(rec);
    } }, `receipt #${rec.id}`);
    out.div.append(el('div', { class: 'stats' }, link));
  }
}

// ---------------------------------------------------------------- models

async function refreshModels() {
  const tbody = $('models-loaded').tBodies[0];
  const store = $('models-store').tBodies[0];
  try {
    const [ps, tags] = await Promise.all([apiJson('/api/ps'), apiJson('/api/tags')]);
    const loaded = new Set(ps.models.map((m) => m.name));
    tbody.replaceChildren(...ps.models.map((m) => el('tr', { 'data-model': m.name },
      el('td', {}, m.name),
      el('td', {}, m.arch || m.kind || (m.details && m.details.family) || ''),
      el('td', {}, m.context_length || m.n_ctx || ''),
      el('td', {}, bytes(m.weights_bytes)),
      el('td', {}, m.kv_cache_bytes === undefined ? bytes(m.workspace_bytes)
        : m.state_bytes ? `${bytes(m.kv_cache_bytes)} + ${bytes(m.state_bytes)} state` : bytes(m.kv_cache_bytes)),
      el('td', {}, m.scratch_bytes !== undefined ? bytes(m.scratch_bytes) : ''),
      el('td', {}, m.residency || ''),
      el('td', {}, m.replicas || ''),
      el('td', {}, el('button', { type: 'button', class: 'unload', onclick: () => unload(m.name) }, 'Unload')))));
    const inStore = tags.models.filter((m) => !loaded.has(m.name));
    store.replaceChildren(...inStore.map((m) => el('tr', { 'data-model': m.name },
      el('td', {}, m.name),
      el('td', {}, bytes(m.size)),
      el('td', { class: 'mono' }, (m.digest || '').slice(0, 19)),
      el('td', {},
        el('button', { type: 'button', class: 'load', onclick: () => load(m.name) }, 'Load'), ' ',
        el('button', { type: 'button', class: 'delete', onclick: () => remove(m.name) }, 'Delete')))));
  } catch (e) {
    setStatus($('load-status'), e.message, 'bad');
  }
}

async function load(model) {
  setStatus($('load-status'), `loading ${model}…`);
  try {
    const m = await apiJson('/api/load', { method: 'POST', body: JSON.stringify({ model }) });
    setStatus($('load-status'), `loaded ${m.id}`, 'ok');
  } catch (e) {
    setStatus($('load-status'), e.message, 'bad');
  }
  await refreshModels();
  await refreshModelList().catch(() => {});
}

async function unload(model) {
  try {
    await apiJson('/api/unload', { method: 'POST', body: JSON.stringify({ model }) });
    setStatus($('load-status'), `unloaded ${model}`, 'ok');
  } catch (e) {
    setStatus($('load-status'), e.message, 'bad');
  }
  await refreshModels();
  await refreshModelList().catch(() => {});
}

async function remove(model) {
  if (!confirm(`Delete ${model} from the store?`)) return;
  try {
    const j = await apiJson('/api/delete', { method: 'DELETE', body: JSON.stringify({ model }) });
    setStatus($('load-status'), `deleted ${model} (${bytes(j.freed_bytes)} freed)`, 'ok');
  } catch (e) {
    setStatus($('load-status'), e.message, 'bad');
  }
  await refreshModels();
}

async function pull(source, name, sha256) {
  const bar = $('pull-progress');
  const status = $('pull-status');
  bar.value = 0;
  bar.max = 100;
  setStatus(status, 'starting…');
  const body = { source };
  if (name) body.name = name;
  if (sha256) body.sha256 = sha256;
  try {
    const r = await api('/api/pull', { method: 'POST', body: JSON.stringify(body) });
    if (!r.ok) throw await errorFrom(r);
    let last = null;
    for await (const data of sseData(r)) {
      if (data === '[DONE]') break;
      const p = JSON.parse(data);
      last = p;
      if (p.status === 'error') {
        const why = typeof p.error === 'string' ? p.error : p.error && p.error.message;
        throw new Error(why || 'the pull failed');
      }
      if (p.status === 'retrying' || p.status === 'rejected') {
        setStatus(status, `${p.status}: ${p.message || ''}`);
        continue;
      }
      if (p.status === 'success') {
        bar.max = 100;
        bar.value = 100;
        setStatus(status, `success: ${p.model} ${p.digest}`, 'ok');
        continue;
      }
      const totalBytes = p.total_bytes || p.total || 0;
      const done = p.completed_bytes || p.completed || 0;
      if (totalBytes > 0) {
        bar.max = totalBytes;
        bar.value = done;
        setStatus(status, `${p.status} ${((100 * done) / totalBytes).toFixed(0)} % (${bytes(done)} of ${bytes(totalBytes)})`);
      } else {
        setStatus(status, p.status);
      }
    }
    if (!last || last.status !== 'success') throw new Error('the pull ended without success');
  } catch (e) {
    setStatus(status, e.message, 'bad');
  }
  await refreshModels();
}

// ---------------------------------------------------------------- live view

const HISTORY = 120;

function card(id, label, value, series, floor) {
  const { points, max } = sparkPoints(series, 200, 40, floor);
  const svg = document.createElementNS('http://www.w3.org/2000/svg', 'svg');
  svg.setAttribute('viewBox', '0 0 200 40');
  svg.setAttribute('preserveAspectRatio', 'none');
  const line = document.createElementNS('http://www.w3.org/2000/svg', 'polyline');
  line.setAttribute('points', points);
  svg.append(line);
  const title = document.createElementNS('http://www.w3.org/2000/svg', 'title');
  title.textContent = `last ${series.length} samples, top of the chart ${max}`;
  svg.append(title);
  return el('div', { class: 'card', id: `live-${id}` }, el('div', { class: 'label' }, label),
    el('div', { class: 'value' }, value), svg);
}

function pct(x) {
  return x === null ? '–' : `${(100 * x).toFixed(1)} %`;
}

async function pollLive() {
  try {
    const [r, refusals] = await Promise.all([api('/metrics'), apiJson('/api/refusals')]);
    if (!r.ok) throw await errorFrom(r);
    const samples = parsePrometheus(await r.text());
    const prev = state.history.length ? state.history[state.history.length - 1] : null;
    const snap = snapshot(samples, Date.now(), prev);
    snap.samples = samples;
    state.history.push(snap);
    if (state.history.length > HISTORY) state.history.shift();
    state.refusals = refusals.refusals;
    if (!$('tab-live').hidden) renderLive();
  } catch (e) {
    state.liveError = e.message;
    if (!$('tab-live').hidden) renderLive();
  }
}

function renderLive() {
  const h = state.history;
  const now = h.length ? h[h.length - 1] : null;
  const series = (f) => h.map(f);
  if (!now) {
    $('live-cards').replaceChildren(el('div', { class: 'status' }, state.liveError || 'waiting for the first scrape…'));
    return;
  }
  $('live-cards').replaceChildren(
    card('running', 'Requests running', now.running, series((s) => s.running), 1),
    card('waiting', 'Requests waiting', now.waiting, series((s) => s.waiting), 1),
    card('tps', 'Tokens/s generated', now.tokensPerSecond === null ? '–' : now.tokensPerSecond.toFixed(1),
      series((s) => s.tokensPerSecond), 1),
    card('kv', 'KV blocks used', `${now.kvUsed} / ${now.kvTotal}`, series((s) => s.kvUsed), Math.max(1, now.kvTotal)),
    card('prefix', 'Prefix-cache hit rate (prompt tokens)', pct(now.prefixHitRate),
      series((s) => s.prefixHitRate), 1),
    card('spec', 'Speculative acceptance', pct(now.specAcceptance), series((s) => s.specAcceptance), 1));
  const counts = Object.entries(now.refusals);
  $('live-refusal-counts').textContent = counts.length
    ? counts.map(([k, v]) => `${k}: ${v}`).join(' · ') : 'none since the server started';
  $('live-refusals').tBodies[0].replaceChildren(...(state.refusals || []).slice().reverse().map((r) =>
    el('tr', {}, el('td', {}, new Date(r.time_ms).toLocaleTimeString()), el('td', {}, r.status),
      el('td', { class: 'reason' }, r.reason), el('td', {}, r.message))));
  const s = now.samples;
  $('live-models').tBodies[0].replaceChildren(...labelValues(s, 'power_kv_blocks_total', 'model').map((m) => {
    const w = { model: m };
    return el('tr', {}, el('td', {}, m), el('td', {}, total(s, 'power_requests_running', w)),
      el('td', {}, total(s, 'power_queue_depth', w)),
      el('td', {}, `${total(s, 'power_kv_blocks_used', w)} / ${total(s, 'power_kv_blocks_total', w)}`),
      el('td', {}, `${total(s, 'power_prefix_cache_blocks', w)} blocks`),
      el('td', {}, total(s, 'power_preemptions_total', w)));
  }));
}

// ---------------------------------------------------------------- receipts

function renderReceiptList() {
  $('receipt-list').replaceChildren(...state.receipts.map((r) => el('li', {},
    el('a', { href: '#', onclick: (ev) => {
      ev.preventDefault();
      openReceipt(r);
    } }, `#${r.id} ${r.model}`))));
}

async function fetchKey() {
  try {
    const k = await apiJson('/api/receipts/key');
    $('verify-key').value = k.public_key;
  } catch (e) {
    $('verify-result').textContent = `cannot read the server's key: ${e.message}`;
  }
}

async function openReceipt(r) {
  showTab('receipts');
  $('verify-receipt').value = r.receipt;
  $('verify-request').value = r.request;
  $('verify-output').value = r.output;
  $('verify-model').value = '';
  if (!$('verify-key').value) await fetchKey();
  await runVerify();
}

async function runVerify() {
  const opts = {};
  const key = $('verify-key').value.trim();
  if (key) opts.publicKey = key;
  if ($('verify-request').value !== '') opts.request = $('verify-request').value;
  if ($('verify-output').value !== '') opts.output = $('verify-output').value;
  if ($('verify-model').value.trim() !== '') opts.modelSha256 = $('verify-model').value.trim();
  const checks = await verifyReceipt($('verify-receipt').value, opts);
  const lines = verdictLines(checks);
  const pre = $('verify-result');
  pre.replaceChildren(...lines.map((l) => el('div', {
    class: l.startsWith('PASS') || l === 'receipt accepted' ? 'pass' : 'fail' }, l)));
  pre.dataset.verdict = lines[lines.length - 1];
}

// ---------------------------------------------------------------- wiring

function init() {
  $('server-url').value = sessionStorage.getItem('power.server') || '';
  $('api-key').value = apiKey();
  $('conn').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const url = $('server-url').value.trim();
    if (url) sessionStorage.setItem('power.server', url);
    else sessionStorage.removeItem('power.server');
    const key = $('api-key').value.trim();
    if (key) sessionStorage.setItem('power.apiKey', key);
    else sessionStorage.removeItem('power.apiKey');
    state.history = [];
    connect();
  });
  for (const b of document.querySelectorAll('#tabs button')) {
    b.addEventListener('click', () => showTab(b.dataset.tab));
  }
  $('chat-json').addEventListener('change', () => { $('chat-schema').hidden = !$('chat-json').checked; });
  $('chat-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const text = $('chat-input').value;
    if (!text.trim() || state.abort) return;
    $('chat-input').value = '';
    sendChat(text);
  });
  $('chat-input').addEventListener('keydown', (ev) => {
    if (ev.key === 'Enter' && !ev.shiftKey) {
      ev.preventDefault();
      $('chat-form').requestSubmit();
    }
  });
  $('chat-stop-button').addEventListener('click', () => state.abort && state.abort.abort());
  $('chat-clear').addEventListener('click', () => {
    state.messages = [];
    $('chat-log').replaceChildren();
    setStatus($('chat-stats'), '');
  });
  $('load-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const m = $('load-model').value.trim();
    if (m) load(m);
  });
  $('pull-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const source = $('pull-source').value.trim();
    if (source) pull(source, $('pull-name').value.trim(), $('pull-sha256').value.trim());
  });
  $('verify-fetch-key').addEventListener('click', fetchKey);
  $('verify-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    runVerify();
  });
  connect();
  pollLive();
  setInterval(() => { if (document.visibilityState === 'visible') pollLive(); }, 1000);
}

init();
