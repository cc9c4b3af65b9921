// app.js: the Stowage playground page (tabs, the JSON API client, the events stream, and the five panels).
//
// Plain ES module, no framework, no build step. The page runs under a strict CSP (no inline script or
// style, no eval), so every handler is attached here and every style lives in app.css. All data from the
// gateway is untrusted and reaches the DOM through textContent / element properties only (see h()).

import { fill, h, humanBytes, humanTime, kindOf, renderArtifact, renderJsonTree } from './preview.js';

const TOKEN_KEY = 'stowage.playground.token';
const EVENT_ROWS = 500;
const UPDATE_ROWS = 200;
const PAGE_SIZE = 50;
const ECHARTS_SRC = '/assets/vendor/echarts.min.js';

const $ = (id) => document.getElementById(id);
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

const state = {
  token: sessionStorage.getItem(TOKEN_KEY) || null,
  session: null, // the events stream's `ready` id: calls, reads and subscriptions belong to it
  info: null,
};

// ---- API client -------------------------------------------------------------------------------

class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

function authHeaders() {
  return state.token ? { Authorization: `Bearer ${state.token}` } : {};
}

/** Fetches the JSON API. A 401 asks for a token and retries; other errors throw ApiError. `raw` returns the Response. */
async function api(path, { method = 'GET', body, signal, raw = false } = {}) {
  for (;;) {
    const headers = authHeaders();
    if (body !== undefined) headers['Content-Type'] = 'application/json';
    const res = await fetch(path, {
      method, headers, signal, cache: 'no-store',
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    if (res.status === 401) {
      await askToken(state.token ? 'That token was refused.' : '');
      continue;
    }
    if (raw) return res;
    return readJson(res);
  }
}

async function readJson(res) {
  const text = await res.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch { /* not JSON: reported below */ }
  if (!res.ok) {
    const err = data?.error;
    throw new ApiError(res.status, err?.code ?? `http_${res.status}`, err?.message ?? (text.slice(0, 300) || res.statusText));
  }
  if (data === null && text) throw new ApiError(res.status, 'bad_json', 'the gateway answered something that is not JSON');
  return data;
}

/** `path` with `session=<this page's session>` added when there is one. */
function withSession(path) {
  if (!state.session) return path;
  return `${path}${path.includes('?') ? '&' : '?'}session=${encodeURIComponent(state.session)}`;
}

let tokenWait = null;
/** Shows the token form; resolves once the user has entered a token. Concurrent callers share one form. */
function askToken(message) {
  if (tokenWait) return tokenWait;
  tokenWait = new Promise((resolve) => {
    const form = $('token-form');
    $('token-error').textContent = message;
    form.hidden = false;
    $('token-input').focus();
    const onSubmit = (e) => {
      e.preventDefault();
      const t = $('token-input').value.trim();
      if (!t) return;
      state.token = t;
      sessionStorage.setItem(TOKEN_KEY, t);
      form.hidden = true;
      form.removeEventListener('submit', onSubmit);
      tokenWait = null;
      resolve();
    };
    form.addEventListener('submit', onSubmit);
  });
  return tokenWait;
}

/**
 * Server-sent events from a fetch Response body (EventSource cannot send the Authorization header).
 * Yields {event, data}; handles LF, CR and CRLF line ends split anywhere across chunks.
 */
async function* sseEvents(res) {
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = '';
  let event = '';
  let data = [];
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (!done) buf += value;
      for (;;) {
        const m = /\r\n|\r|\n/.exec(buf);
        if (!m) break;
        if (!done && m[0] === '\r' && m.index === buf.length - 1) break; // maybe the first half of a CRLF
        const line = buf.slice(0, m.index);
        buf = buf.slice(m.index + m[0].length);
        if (line === '') {
          if (data.length) yield { event: event || 'message', data: data.join('\n') };
          event = '';
          data = [];
        } else if (!line.startsWith(':')) {
          const colon = line.indexOf(':');
          const field = colon < 0 ? line : line.slice(0, colon);
          let val = colon < 0 ? '' : line.slice(colon + 1);
          if (val.startsWith(' ')) val = val.slice(1);
          if (field === 'event') event = val;
          else if (field === 'data') data.push(val);
        }
      }
      if (done) break;
    }
  } finally {
    reader.releaseLock();
  }
}

function parseData(ev) {
  try { return JSON.parse(ev.data); } catch { return null; }
}

// ---- Small shared widgets -----------------------------------------------------------------------

function errorBox(e) {
  const code = e instanceof ApiError ? `${e.status} ${e.code}` : 'error';
  return h('div', { className: 'error-box', role: 'alert', dataset: { testid: 'error' } },
    h('strong', {}, code), ' ', e?.message ?? String(e));
}

/** Options for preview.js: the "Fresh link" button asks the API (with the token) for a new signed URL. */
const artifactOpts = { fresh: (id) => api(`/api/artifacts/${encodeURIComponent(id)}`) };

function chip(text, cls = '') {
  return h('span', { className: `chip ${cls}` }, text);
}

/** A time as HH:MM:SS.mmm (local). */
function clock(d = new Date()) {
  const p = (n, w = 2) => String(n).padStart(w, '0');
  return `${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}.${p(d.getMilliseconds(), 3)}`;
}

/** Text as pretty JSON when it parses (and is not huge), else as it is. */
function pretty(text) {
  if (typeof text !== 'string') return JSON.stringify(text, null, 2);
  if (text.length > 4_000_000) return text;
  try { return JSON.stringify(JSON.parse(text), null, 2); } catch { return text; }
}

// ---- Tabs ---------------------------------------------------------------------------------------

const TABS = ['tools', 'artifacts', 'resources', 'events', 'agent'];
const firstShow = { artifacts: () => loadArtifacts() };
const shown = new Set();
let currentTab = 'tools';

function showTab(name) {
  if (!TABS.includes(name)) return;
  currentTab = name;
  for (const b of document.querySelectorAll('[data-tab]')) b.setAttribute('aria-selected', String(b.dataset.tab === name));
  for (const t of TABS) $(`tab-${t}`).hidden = t !== name;
  if (name === 'events') setEventsBadge(0);
  if (!shown.has(name)) {
    shown.add(name);
    firstShow[name]?.();
  }
  history.replaceState(null, '', `#${name}`);
}

// ---- Header: gateway info and the stream's state ------------------------------------------------

function renderInfo(info) {
  const box = $('info');
  fill(box,
    chip(`v${info.version ?? '?'}`),
    info.auth ? chip('auth on') : null,
    chip(info.links ? 'links on' : 'links off', info.links ? '' : 'warn'),
    info.store ? h('span', { className: 'muted small store', title: info.store }, info.store) : null,
  );
  for (const u of info.upstreams ?? []) box.append(upstreamChip(u.name, u.connected, u.tools));
}

function upstreamChip(name, up, tools) {
  const c = chip(`${name}${typeof tools === 'number' ? ` · ${tools} tools` : ''}`, up ? 'up' : 'down');
  c.dataset.upstream = name;
  c.title = up ? 'connected' : 'disconnected';
  return c;
}

function setUpstream(name, up, reason) {
  for (const c of $('info').querySelectorAll('[data-upstream]')) {
    if (c.dataset.upstream === name) {
      c.classList.toggle('up', up);
      c.classList.toggle('down', !up);
      c.title = up ? 'connected' : `disconnected${reason ? `: ${reason}` : ''}`;
    }
  }
}

function setConn(kind, text) {
  $('conn-state').dataset.state = kind;
  $('conn-text').textContent = text;
}

// ---- The events stream --------------------------------------------------------------------------

let sessionWaiters = [];
let hadStream = false; // a `ready` came before: the next one is a reconnect

/** This page's session id, waiting (up to `ms`) for the stream's `ready` if it has not come yet. */
function waitSession(ms = 5000) {
  if (state.session) return Promise.resolve(state.session);
  return new Promise((resolve) => {
    const done = () => resolve(state.session);
    sessionWaiters.push(done);
    setTimeout(done, ms);
  });
}

/** Keeps GET /api/events open, reconnecting with backoff (0.5 s doubling to 15 s) when it drops. */
async function runEventStream() {
  let delay = 500;
  for (;;) {
    try {
      const res = await api('/api/events', { raw: true });
      if (!res.ok) throw new Error(`the events stream answered ${res.status}`);
      for await (const ev of sseEvents(res)) {
        if (ev.event === 'ready') delay = 500;
        onStreamEvent(ev);
      }
      throw new Error('the events stream ended');
    } catch (e) {
      state.session = null;
      document.documentElement.dataset.session = '';
      setConn('down', `${e.message}; retrying in ${(delay / 1000).toFixed(1)} s`);
    }
    await sleep(delay);
    delay = Math.min(delay * 2, 15000);
    setConn('connecting', 'reconnecting…');
  }
}

function onStreamEvent(ev) {
  const data = parseData(ev);
  switch (ev.event) {
    case 'ready': {
      const again = hadStream;
      hadStream = true;
      state.session = data?.session ?? null;
      // Exposed for tests and for people: the id the page sends as `session`.
      document.documentElement.dataset.session = state.session ?? '';
      setConn('live', `live · session ${state.session ?? '?'}`);
      for (const w of sessionWaiters) w();
      sessionWaiters = [];
      // A new stream is a new session: subscriptions of the old one are gone, so make them again.
      if (again) resubscribeAll();
      break;
    }
    case 'gateway':
      if (!data) break;
      addEvent(data);
      if (data.type === 'upstream_up') setUpstream(data.upstream, true);
      if (data.type === 'upstream_down') setUpstream(data.upstream, false, data.reason);
      break;
    case 'notification':
      if (!data) break;
      addEvent({ type: 'notification', method: data.method, uri: data.params?.uri });
      onNotification(data);
      break;
    case 'lagged':
      addEvent({ type: 'lagged', missed: data?.missed });
      break;
    default:
      break;
  }
}

// ---- Tools tab ----------------------------------------------------------------------------------

const tools = { list: [], selected: null, host: '' };
const UNSET = Symbol('unset');

async function loadTools() {
  const ul = $('tool-list');
  try {
    await waitSession();
    const data = await api(withSession('/api/tools'));
    tools.list = Array.isArray(data?.tools) ? data.tools : [];
    renderToolList();
  } catch (e) {
    ul.replaceChildren(h('li', {}, errorBox(e)));
  }
}

function renderToolList() {
  const f = $('tool-filter').value.trim().toLowerCase();
  const ul = $('tool-list');
  const items = tools.list.filter((t) => !f || `${t.name} ${t.title ?? ''} ${t.description ?? ''}`.toLowerCase().includes(f));
  ul.replaceChildren(...items.map((t) => {
    const b = h('button', {
      type: 'button', className: 'tool-item', dataset: { testid: 'tool-item', tool: String(t.name) },
      'aria-current': tools.selected?.name === t.name ? 'true' : null,
    }, h('span', { className: 'mono' }, String(t.name)), t.title ? h('span', { className: 'muted small' }, String(t.title)) : null);
    b.addEventListener('click', () => selectTool(t));
    return h('li', {}, b);
  }));
  if (!items.length) ul.append(h('li', { className: 'muted' }, tools.list.length ? 'No tool matches.' : 'No tools.'));
}

function schemaType(s) {
  let t = s?.type;
  if (Array.isArray(t)) t = t.find((x) => x !== 'null') ?? t[0];
  return typeof t === 'string' ? t : null;
}

let fieldSeq = 0;
/** One form field for a property of an inputSchema: {el, read()}; read() throws on invalid input, UNSET when empty. */
function buildField(name, schema, required) {
  const id = `arg-${++fieldSeq}`;
  const s = schema && typeof schema === 'object' ? schema : {};
  const t = schemaType(s);
  const has = (k) => Object.prototype.hasOwnProperty.call(s, k);
  let input;
  let read;
  if (Array.isArray(s.enum) && s.enum.length) {
    input = h('select', { id });
    if (!required) input.append(h('option', { value: '' }, '(unset)'));
    for (const v of s.enum) input.append(h('option', { value: JSON.stringify(v) }, String(v)));
    if (has('default')) input.value = JSON.stringify(s.default);
    read = () => (input.value === '' ? UNSET : JSON.parse(input.value));
  } else if (t === 'boolean') {
    input = h('input', { id, type: 'checkbox', checked: s.default === true });
    let touched = false;
    input.addEventListener('change', () => { touched = true; });
    // Unchecked and untouched means "not given", unless the tool needs the field.
    read = () => (required || touched || has('default') ? input.checked : UNSET);
  } else if (t === 'number' || t === 'integer') {
    input = h('input', { id, type: 'number', step: t === 'integer' ? '1' : 'any' });
    if (typeof s.minimum === 'number') input.min = String(s.minimum);
    if (typeof s.maximum === 'number') input.max = String(s.maximum);
    if (typeof s.default === 'number') input.value = String(s.default);
    read = () => {
      const v = input.value.trim();
      if (v === '') return UNSET;
      const n = Number(v);
      if (!Number.isFinite(n) || (t === 'integer' && !Number.isInteger(n))) throw new Error(`${name}: not ${t === 'integer' ? 'an integer' : 'a number'}`);
      return n;
    };
  } else if (t === 'string') {
    input = h('input', { id, type: 'text', spellcheck: false });
    if (typeof s.default === 'string') input.value = s.default;
    if (typeof s.examples?.[0] === 'string') input.placeholder = s.examples[0];
    read = () => (input.value === '' ? UNSET : input.value);
  } else {
    // Objects, arrays, unions and untyped values: JSON.
    input = h('textarea', { id, rows: 3, className: 'mono', spellcheck: false, placeholder: t === 'array' ? '[ ]  (JSON)' : 'JSON' });
    if (has('default')) input.value = JSON.stringify(s.default, null, 2);
    read = () => {
      const v = input.value.trim();
      if (v === '') return UNSET;
      try { return JSON.parse(v); } catch (e) { throw new Error(`${name}: invalid JSON (${e.message})`); }
    };
  }
  input.name = name;
  const label = h('label', { htmlFor: id, className: 'field-label' },
    h('span', { className: 'mono' }, name),
    required ? h('span', { className: 'required', title: 'required' }, ' *') : null,
    h('span', { className: 'muted small' }, ` ${Array.isArray(s.enum) ? 'enum' : (t ?? 'json')}`));
  const cls = ['string', 'number', 'integer', 'boolean'].includes(t) && !Array.isArray(s.enum) ? t : 'json';
  const el = h('div', { className: `field field-${cls}` }, label, input,
    typeof s.description === 'string' ? h('div', { className: 'muted small field-desc' }, s.description) : null);
  return { el, read };
}

function selectTool(t) {
  tools.selected = t;
  renderToolList();
  $('call-result').replaceChildren();
  const detail = $('tool-detail');
  detail.classList.remove('muted');
  const schema = t.inputSchema && typeof t.inputSchema === 'object' ? t.inputSchema : {};
  const props = schema.properties && typeof schema.properties === 'object' ? schema.properties : {};
  const required = new Set(Array.isArray(schema.required) ? schema.required : []);
  const fields = Object.entries(props).map(([name, s]) => [name, buildField(name, s, required.has(name))]);

  const ann = t.annotations && typeof t.annotations === 'object' ? t.annotations : {};
  const hints = Object.entries(ann).filter(([, v]) => v === true).map(([k]) => chip(k.replace(/Hint$/, '')));
  const rawToggle = h('input', { type: 'checkbox', id: 'raw-args-toggle' });
  const raw = h('textarea', { id: 'raw-args', className: 'mono', rows: 8, spellcheck: false, hidden: true });
  const formFields = h('div', { className: 'fields' }, fields.map(([, f]) => f.el));
  if (!fields.length) formFields.append(h('p', { className: 'muted' }, 'This tool takes no arguments.'));
  const callBtn = h('button', { type: 'submit', id: 'call-button', className: 'primary', dataset: { testid: 'call-button' } }, 'Call');
  // Which host's model to show the answer for: the same shaper answers each one differently.
  const hostSelect = h('select', { id: 'host-select', dataset: { testid: 'host-select' } },
    h('option', { value: '' }, 'this page\'s profile'),
    (Array.isArray(state.info?.hosts) ? state.info.hosts : []).map((p) => h('option', { value: String(p.name) }, String(p.name))));
  hostSelect.value = tools.host ?? '';
  hostSelect.addEventListener('change', () => { tools.host = hostSelect.value; });
  const status = h('span', { className: 'muted', id: 'call-status' });

  const collect = () => {
    const args = {};
    for (const [name, f] of fields) {
      const v = f.read();
      if (v !== UNSET) args[name] = v;
    }
    return args;
  };
  rawToggle.addEventListener('change', () => {
    if (rawToggle.checked) {
      try { raw.value = JSON.stringify(collect(), null, 2); } catch { /* keep what the textarea had */ }
    }
    raw.hidden = !rawToggle.checked;
    formFields.hidden = rawToggle.checked;
  });

  const form = h('form', { className: 'call-form', id: 'call-form', noValidate: true }, formFields,
    h('label', { className: 'check' }, rawToggle, ' raw JSON arguments'), raw,
    h('label', { className: 'check', htmlFor: 'host-select' }, 'shape for host ', hostSelect),
    h('div', { className: 'form-actions' }, callBtn, status));
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    let args;
    try {
      if (rawToggle.checked) {
        args = raw.value.trim() ? JSON.parse(raw.value) : {};
        if (!args || typeof args !== 'object' || Array.isArray(args)) throw new Error('the arguments must be a JSON object');
      } else {
        args = collect();
      }
    } catch (err) {
      $('call-result').replaceChildren(errorBox(err));
      return;
    }
    callBtn.disabled = true;
    status.textContent = 'calling…';
    const started = performance.now();
    try {
      const body = { tool: t.name, arguments: args, session: state.session ?? undefined, host: hostSelect.value || undefined };
      const r = await api('/api/call', { method: 'POST', body });
      status.textContent = `answered in ${Math.round(performance.now() - started)} ms`;
      $('call-result').replaceChildren(renderCallResult(r));
    } catch (err) {
      status.textContent = '';
      $('call-result').replaceChildren(errorBox(err));
    } finally {
      callBtn.disabled = false;
    }
  });

  fill(detail,
    h('h2', { className: 'tool-name' }, h('span', { className: 'mono' }, String(t.name)), t.title ? h('span', { className: 'muted' }, ` ${t.title}`) : null),
    hints.length ? h('div', { className: 'chips' }, hints) : null,
    typeof t.description === 'string' ? h('p', { className: 'description' }, t.description) : null,
    form,
    h('details', { className: 'schema' }, h('summary', {}, 'inputSchema'), renderJsonTree(schema, { openDepth: 3 })),
  );
}

function countEl(testid, n) {
  return h('span', { className: 'count', dataset: { testid } }, Number.isFinite(n) ? String(Math.round(n)) : '?');
}

function sizeLine(bytesId, tokensId, part) {
  return h('div', { className: 'sizes' },
    countEl(bytesId, part.bytes), ' bytes ', h('span', { className: 'muted' }, `(${humanBytes(part.bytes)})`),
    ' · ', countEl(tokensId, part.tokens), ' o200k tokens');
}

function renderCallResult(r) {
  const box = h('div', { className: 'call-result', dataset: { call: String(r.call ?? '') } });

  const left = h('section', { className: 'pane' }, h('h3', {}, 'Upstream returned'));
  if (r.original) {
    left.append(sizeLine('original-bytes', 'original-tokens', r.original));
    if (r.original.truncated) {
      const dl = h('button', { type: 'button', dataset: { testid: 'original-download' } }, 'Download the full text');
      const msg = h('span', { className: 'small' });
      dl.addEventListener('click', () => downloadOriginal(r.original.download, `call-${r.call ?? 'x'}-original.json`, msg));
      left.append(h('div', { className: 'note warn' }, 'Bigger than 1 MB: showing the first 1 MB only. ', dl, ' ', msg));
    }
    left.append(h('pre', { className: 'mono result-pre' }, r.original.truncated ? r.original.text : pretty(r.original.text)));
  } else {
    left.append(h('p', { className: 'note muted' }, 'Answered by the gateway itself: there is no upstream result.'));
  }

  const right = h('section', { className: 'pane' }, h('h3', {}, `Model receives${r.host ? ` (${r.host})` : ''}`));
  const res = r.result ?? {};
  right.append(sizeLine('result-bytes', 'result-tokens', res));
  if (r.is_error) right.append(h('div', { className: 'note warn' }, 'The tool answered with isError: true.'));
  const visible = res.visible ?? {};
  if (typeof visible.text === 'string') {
    right.append(h('div', { className: 'small muted' }, `What this host's model reads (${visible.tokens ?? '?'} tokens of text, ${visible.images ?? 0} images):`),
      h('pre', { className: 'mono result-pre', dataset: { testid: 'model-view' } }, visible.text));
  }
  const images = resultImages(res.value);
  if (images.length) right.append(h('div', { className: 'result-images', dataset: { testid: 'result-images' } }, images));
  right.append(h('details', { className: 'schema' }, h('summary', {}, 'the whole result'),
    h('pre', { className: 'mono result-pre' }, typeof res.text === 'string' ? pretty(res.text) : JSON.stringify(res.value ?? null, null, 2))));

  const saved = r.saved ?? {};
  const layers = Array.isArray(r.layers) ? r.layers : [];
  const stats = h('div', { className: 'stats', dataset: { testid: 'call-stats' } },
    h('span', {}, 'saved ', h('strong', {}, humanBytes(saved.bytes)), ` (${saved.tokens ?? '?'} tokens)`),
    h('span', {}, 'ratio ', h('strong', {}, typeof saved.ratio === 'number' ? `${saved.ratio.toFixed(1)}×` : '—')),
    h('span', {}, 'latency ', h('strong', {}, typeof r.latency_ms === 'number' ? `${r.latency_ms.toFixed(1)} ms` : '—')),
    h('span', {}, 'layers ', layers.length ? layers.map((l) => chip(String(l))) : h('span', { className: 'muted' }, 'none')),
    h('span', {}, 'clamped ', h('strong', {}, r.clamped ? 'yes' : 'no')),
    r.upstream ? h('span', { className: 'muted' }, `upstream ${r.upstream} · call #${r.call}`) : null);

  box.append(h('div', { className: 'result-grid' }, left, right), stats);
  const warnings = Array.isArray(r.warnings) ? r.warnings : [];
  if (warnings.length) box.append(h('ul', { className: 'warnings' }, warnings.map((w) => h('li', {}, String(w)))));

  const arts = Array.isArray(r.artifacts) ? r.artifacts : [];
  box.append(h('div', { className: 'call-artifacts', dataset: { testid: 'call-artifacts' } },
    h('h3', {}, `Artifacts created (${arts.length})`),
    arts.map((m) => renderArtifact(m, artifactOpts))));
  return box;
}

/** The image blocks of a result (an artifact_read of an image, a preview) as images: decoded to blob URLs, which the page's CSP allows. */
function resultImages(value) {
  const blocks = Array.isArray(value?.content) ? value.content : [];
  return blocks.filter((b) => b && b.type === 'image' && typeof b.data === 'string').map((b) => {
    try {
      const bin = atob(b.data);
      const bytes = new Uint8Array(bin.length);
      for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
      const url = URL.createObjectURL(new Blob([bytes], { type: String(b.mimeType || 'image/png') }));
      return h('img', { src: url, alt: 'an image block of the result', className: 'result-image' });
    } catch {
      return h('span', { className: 'small error-text' }, 'an image block whose data is not base64');
    }
  });
}

/** Saves the full original text (same auth as the API) through a blob URL: the token never goes in a URL. */
async function downloadOriginal(path, filename, msg) {
  msg.textContent = 'downloading…';
  try {
    // Same origin only: the request carries the bearer token.
    if (typeof path !== 'string' || new URL(path, location.href).origin !== location.origin) throw new Error('no download route for this call');
    const res = await api(path, { raw: true });
    if (res.status === 404) throw new Error('the full text is kept for the last calls only; this one is gone');
    if (!res.ok) await readJson(res);
    const url = URL.createObjectURL(await res.blob());
    const a = h('a', { href: url, download: filename });
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 30000);
    msg.textContent = '';
  } catch (e) {
    msg.textContent = e.message;
    msg.className = 'small error-text';
  }
}

// ---- Artifacts tab ------------------------------------------------------------------------------

const arts = { cursors: [null], next: null, selectedId: null, seq: 0 };

function artifactQuery() {
  const p = new URLSearchParams({ limit: String(PAGE_SIZE) });
  const cursor = arts.cursors[arts.cursors.length - 1];
  if (cursor) p.set('cursor', cursor);
  const kind = $('artifact-kind').value;
  if (kind) p.set('kind', kind);
  const session = $('artifact-this-session').checked ? state.session : $('artifact-session').value.trim();
  if (session) p.set('session', session);
  return p;
}

async function loadArtifacts() {
  const seq = ++arts.seq; // a slower, older answer must not overwrite a newer one
  const status = $('artifact-status');
  status.textContent = 'loading…';
  try {
    const data = await api(`/api/artifacts?${artifactQuery()}`);
    if (seq !== arts.seq) return;
    const items = Array.isArray(data?.items) ? data.items : [];
    arts.next = data?.next ?? null;
    $('artifact-rows').replaceChildren(...items.map(artifactRow));
    status.textContent = items.length ? `${items.length} on this page (oldest first)` : 'No artifacts.';
  } catch (e) {
    if (seq !== arts.seq) return;
    arts.next = null;
    $('artifact-rows').replaceChildren();
    status.replaceChildren(errorBox(e));
  }
  $('artifact-prev').disabled = arts.cursors.length <= 1;
  $('artifact-next').disabled = !arts.next;
  $('artifact-page').textContent = `page ${arts.cursors.length}`;
}

function artifactRow(meta) {
  const tr = h('tr', {
    tabIndex: 0, className: 'artifact-row',
    dataset: { testid: 'artifact-row', id: String(meta.id ?? ''), kind: kindOf(meta) },
    'aria-selected': String(meta.id === arts.selectedId),
  },
  h('td', { className: 'name-cell' }, meta.name ? String(meta.name) : h('span', { className: 'muted mono' }, String(meta.id ?? '(unnamed)'))),
  h('td', {}, chip(kindOf(meta))),
  h('td', { className: 'mono small' }, String(meta.mime_type ?? '')),
  h('td', { className: 'num' }, humanBytes(meta.size_bytes)),
  h('td', { className: 'small' }, humanTime(meta.created_at)),
  h('td', { className: 'mono small ellipsis', title: meta.session ?? '' }, meta.session ?? '—'));
  const open = () => openArtifact(meta, tr);
  tr.addEventListener('click', open);
  tr.addEventListener('keydown', (e) => { if (e.key === 'Enter' || e.key === ' ') { e.preventDefault(); open(); } });
  return tr;
}

async function openArtifact(meta, tr) {
  arts.selectedId = meta.id;
  for (const r of $('artifact-rows').children) r.setAttribute('aria-selected', String(r === tr));
  const detail = $('artifact-detail');
  detail.classList.remove('muted');
  let m = meta;
  // The list's link may have expired by now: ask for a fresh one when it is close.
  const exp = Date.parse(meta.url_expires_at ?? '');
  if (meta.url && Number.isFinite(exp) && exp - Date.now() < 60000) {
    try { m = await api(`/api/artifacts/${encodeURIComponent(meta.id)}`); } catch { /* show the old one */ }
  }
  if (arts.selectedId !== meta.id) return;
  detail.replaceChildren(renderArtifact(m, artifactOpts));
}

function resetArtifacts() {
  arts.cursors = [null];
  loadArtifacts();
}

// ---- Resources tab ------------------------------------------------------------------------------

const resources = { subscribed: new Set(), buttons: new Map() };

async function loadResources() {
  const list = $('resource-list');
  try {
    await waitSession();
    const data = await api(withSession('/api/resources'));
    const rs = Array.isArray(data?.resources) ? data.resources : [];
    const ts = Array.isArray(data?.templates) ? data.templates : [];
    // An upstream that could not list is named where its entries would be; the rest show.
    const failed = Array.isArray(data?.failed) ? data.failed : [];
    const failures = (which) => failed.filter((f) => f?.list === which).map((f) =>
      h('li', { className: 'error-box', role: 'alert', dataset: { testid: 'list-failed', upstream: String(f.upstream ?? '') } },
        h('strong', {}, String(f.upstream ?? 'an upstream')), ` could not list: ${String(f.message ?? '')}`));
    resources.buttons.clear();
    list.replaceChildren(...rs.map(resourceItem), ...failures('resources/list'));
    if (!rs.length) list.append(h('li', { className: 'muted' }, 'No resources.'));
    $('template-list').replaceChildren(...ts.map(templateItem), ...failures('resources/templates/list'));
    if (!ts.length) $('template-list').append(h('li', { className: 'muted' }, 'No templates.'));
  } catch (e) {
    list.replaceChildren(h('li', {}, errorBox(e)));
  }
}

function resourceItem(r) {
  const uri = String(r.uri ?? '');
  const read = h('button', { type: 'button', dataset: { testid: 'resource-read', uri } }, 'Read');
  read.addEventListener('click', () => readResource(uri));
  const sub = h('button', { type: 'button', dataset: { testid: 'subscribe', uri } });
  setSubButton(sub, resources.subscribed.has(uri));
  sub.addEventListener('click', () => toggleSubscribe(uri, sub));
  resources.buttons.set(uri, sub);
  return h('li', { className: 'resource-item', dataset: { uri } },
    h('div', { className: 'item-head' }, h('strong', {}, String(r.title ?? r.name ?? uri)),
      r.mimeType ? chip(String(r.mimeType)) : null, typeof r.size === 'number' ? chip(humanBytes(r.size)) : null),
    h('div', { className: 'mono small' }, uri),
    typeof r.description === 'string' ? h('div', { className: 'muted small' }, r.description) : null,
    h('div', { className: 'item-actions' }, read, sub));
}

function setSubButton(btn, on) {
  btn.textContent = on ? 'Unsubscribe' : 'Subscribe';
  btn.dataset.subscribed = String(on);
  btn.setAttribute('aria-pressed', String(on));
}

/** RFC 6570 variable names in a URI template ("{a}", "{+path}", "{?x,y}"). */
function templateVars(tpl) {
  const names = [];
  for (const m of tpl.matchAll(/\{[+#./;?&]?([^}]*)\}/g)) {
    for (const raw of m[1].split(',')) {
      const n = raw.replace(/(\*|:\d+)$/, '').trim();
      if (n && !names.includes(n)) names.push(n);
    }
  }
  return names;
}

/** Expands a URI template: `{name}` is percent-encoded, `{+name}`/`{#name}` keep reserved characters; simple operators. */
function expandTemplate(tpl, values) {
  return tpl.replace(/\{([+#./;?&]?)([^}]*)\}/g, (_, op, list) => {
    const enc = op === '+' || op === '#' ? encodeURI : encodeURIComponent;
    const vars = list.split(',').map((v) => v.replace(/(\*|:\d+)$/, '').trim()).filter((n) => values[n] !== undefined && values[n] !== '');
    const named = (sep) => vars.map((n) => `${n}=${enc(values[n])}`).join(sep);
    const plain = (sep) => vars.map((n) => enc(values[n])).join(sep);
    if (!vars.length) return '';
    switch (op) {
      case '#': return `#${plain(',')}`;
      case '.': return `.${plain('.')}`;
      case '/': return `/${plain('/')}`;
      case ';': return `;${named(';')}`;
      case '?': return `?${named('&')}`;
      case '&': return `&${named('&')}`;
      default: return plain(',');
    }
  });
}

function templateItem(t) {
  const tpl = String(t.uriTemplate ?? '');
  const vars = templateVars(tpl);
  const inputs = vars.map((n) => [n, h('input', { type: 'text', placeholder: n, spellcheck: false, 'aria-label': n })]);
  const preview = h('div', { className: 'mono small muted' }, tpl);
  const current = () => expandTemplate(tpl, Object.fromEntries(inputs.map(([n, i]) => [n, i.value])));
  for (const [, i] of inputs) i.addEventListener('input', () => { preview.textContent = current(); });
  const read = h('button', { type: 'button', dataset: { testid: 'template-read' } }, 'Read');
  read.addEventListener('click', () => readResource(current()));
  return h('li', { className: 'resource-item template' },
    h('div', { className: 'item-head' }, h('strong', {}, String(t.title ?? t.name ?? tpl)), t.mimeType ? chip(String(t.mimeType)) : null),
    preview,
    typeof t.description === 'string' ? h('div', { className: 'muted small' }, t.description) : null,
    h('div', { className: 'template-vars' }, inputs.map(([n, i]) => h('label', {}, h('span', { className: 'mono small' }, n), i))),
    h('div', { className: 'item-actions' }, read));
}

async function readResource(uri) {
  const out = $('resource-read');
  out.classList.remove('muted');
  out.replaceChildren(h('p', { className: 'muted' }, 'reading ', h('span', { className: 'mono' }, uri), '…'));
  try {
    const r = await api('/api/resources/read', { method: 'POST', body: { uri, session: state.session ?? undefined } });
    const contents = Array.isArray(r?.result?.contents) ? r.result.contents : [];
    const box = h('div', { className: 'read-result', dataset: { uri, testid: 'read-result' } },
      h('h3', { className: 'mono' }, uri));
    for (const c of contents) {
      const head = h('div', { className: 'muted small' }, String(c.uri ?? ''), c.mimeType ? ` · ${c.mimeType}` : '');
      if (typeof c.text === 'string') {
        const cap = 65536;
        box.append(head, h('pre', { className: 'mono result-pre' }, c.text.length > cap ? c.text.slice(0, cap) : c.text));
        if (c.text.length > cap) box.append(h('p', { className: 'note' }, `Showing the first ${cap.toLocaleString()} of ${c.text.length.toLocaleString()} characters.`));
      } else if (typeof c.blob === 'string') {
        box.append(head, h('p', { className: 'note' }, `A base64 blob of about ${humanBytes(Math.floor(c.blob.length * 3 / 4))}.`));
      }
    }
    const artifacts = Array.isArray(r?.artifacts) ? r.artifacts : [];
    if (artifacts.length) {
      box.append(h('h3', {}, `Offloaded to ${artifacts.length === 1 ? 'an artifact' : `${artifacts.length} artifacts`}`),
        h('div', { className: 'read-artifacts', dataset: { testid: 'read-artifacts' } }, artifacts.map((m) => renderArtifact(m, artifactOpts))));
    }
    box.append(h('details', { className: 'raw-json' }, h('summary', {}, 'Result JSON'), renderJsonTree(r?.result ?? null, { openDepth: 2 })));
    out.replaceChildren(box);
  } catch (e) {
    out.replaceChildren(h('h3', { className: 'mono' }, uri), errorBox(e));
  }
}

async function toggleSubscribe(uri, btn) {
  const on = !resources.subscribed.has(uri);
  btn.disabled = true;
  try {
    const session = await waitSession();
    if (!session) throw new Error('the events stream is not connected yet; try again in a moment');
    await api(`/api/resources/${on ? 'subscribe' : 'unsubscribe'}`, { method: 'POST', body: { uri, session } });
    if (on) resources.subscribed.add(uri); else resources.subscribed.delete(uri);
    setSubButton(btn, on);
  } catch (e) {
    logUpdate({ error: `${on ? 'subscribe' : 'unsubscribe'} ${uri}: ${e.message}` });
  } finally {
    btn.disabled = false;
  }
}

async function resubscribeAll() {
  for (const uri of resources.subscribed) {
    try {
      await api('/api/resources/subscribe', { method: 'POST', body: { uri, session: state.session } });
    } catch (e) {
      resources.subscribed.delete(uri);
      const b = resources.buttons.get(uri);
      if (b) setSubButton(b, false);
      logUpdate({ error: `resubscribing ${uri} after a reconnect failed: ${e.message}` });
    }
  }
}

function onNotification(n) {
  const method = String(n.method ?? '');
  if (method === 'notifications/resources/updated' || method === 'notifications/resources/list_changed') {
    logUpdate({ method, uri: n.params?.uri });
  }
  if (method === 'notifications/resources/list_changed') loadResources();
  if (method === 'notifications/tools/list_changed') loadTools();
}

function logUpdate({ method, uri, error }) {
  const log = $('resource-updates');
  log.querySelector('.empty-note')?.remove();
  let row;
  if (error) {
    row = h('li', { className: 'error-text' }, h('time', {}, clock()), ' ', error);
  } else {
    const u = typeof uri === 'string' ? uri : '';
    row = h('li', { dataset: { testid: 'resource-update', uri: u, method } },
      h('time', {}, clock()), ' ', chip(method.replace('notifications/resources/', '')), ' ', h('span', { className: 'mono' }, u || '—'));
    if (u && resources.subscribed.has(u)) {
      const again = h('button', { type: 'button', className: 'small-button', dataset: { testid: 'read-again' } }, 'Read again');
      again.addEventListener('click', () => { showTab('resources'); readResource(u); });
      row.append(' ', again);
    }
  }
  log.prepend(row);
  while (log.children.length > UPDATE_ROWS) log.lastElementChild.remove();
}

// ---- Events tab ---------------------------------------------------------------------------------

const events = { paused: false, held: [], total: 0, unseen: 0 };

function addEvent(e) {
  const row = { e, at: new Date() };
  events.total++;
  if (currentTab !== 'events') setEventsBadge(events.unseen + 1);
  if (events.paused) {
    events.held.push(row);
    if (events.held.length > EVENT_ROWS) events.held.shift();
  } else {
    insertEventRow(row);
  }
  $('events-count').textContent = `${events.total} events${events.paused ? ` · ${events.held.length} held while paused` : ''}`;
}

function setEventsBadge(n) {
  events.unseen = n;
  const b = $('events-badge');
  b.hidden = n === 0;
  b.textContent = n > 99 ? '99+' : String(n);
}

const fmtBytes = (a, b) => (typeof a === 'number' || typeof b === 'number' ? `${humanBytes(a)} → ${humanBytes(b)}` : '');
const fmtTokens = (a, b) => (typeof a === 'number' || typeof b === 'number' ? `${a ?? '?'} → ${b ?? '?'}` : '');

function insertEventRow({ e, at }) {
  const type = String(e.type ?? 'unknown');
  const who = [e.tool, e.upstream ? `@${e.upstream}` : null].filter(Boolean).join(' ');
  let bytes = '';
  let tokens = '';
  let outcome = '';
  let artifacts = '';
  switch (type) {
    case 'tool_call_finished':
      bytes = fmtBytes(e.bytes_in, e.bytes_out);
      tokens = fmtTokens(e.tokens_in, e.tokens_out);
      outcome = [e.outcome, e.error].filter(Boolean).join(': ');
      artifacts = typeof e.artifacts === 'number' ? String(e.artifacts) : '';
      break;
    case 'offloaded':
      bytes = humanBytes(e.size);
      artifacts = [e.id, e.mime_type, e.pointer].filter(Boolean).join(' · ');
      outcome = e.layer ? `layer ${e.layer}` : '';
      break;
    case 'final_fit':
      bytes = fmtBytes(e.bytes_from_upstream, e.bytes_out);
      break;
    case 'inputs_detected': {
      // Which inputs of the upstream's tools take an artifact:// URI, and in which form.
      const tools = Array.isArray(e.tools) ? e.tools : [];
      outcome = tools.map((t) => `${t.tool}: ${(Array.isArray(t.inputs) ? t.inputs : []).map((i) => `${i.path} (${i.form})`).join(', ') || 'none'}`).join('; ');
      break;
    }
    case 'inputs_filled': {
      // What the call's artifact:// URIs became (the form, the artifact, the size; never the bytes).
      const inputs = Array.isArray(e.inputs) ? e.inputs : [];
      bytes = humanBytes(inputs.reduce((n, i) => n + (typeof i.size === 'number' ? i.size : 0), 0));
      outcome = inputs.map((i) => `${i.property} ← ${i.form}${i.set?.length ? ` (set ${i.set.join(', ')})` : ''}`).join('; ');
      artifacts = inputs.map((i) => i.uri).filter(Boolean).join(' · ');
      break;
    }
    case 'store_failed':
      outcome = `${e.fatal ? 'fatal: ' : ''}${e.message ?? ''}`;
      break;
    case 'upstream_down':
      outcome = e.reason ?? 'down';
      break;
    case 'upstream_up':
      outcome = 'up';
      break;
    case 'notification':
      outcome = [e.method, e.uri].filter(Boolean).join(' ');
      break;
    case 'lagged':
      outcome = `the page fell behind: ${e.missed ?? '?'} events missed`;
      break;
    default:
      break;
  }
  const bad = (type === 'tool_call_finished' && e.outcome && e.outcome !== 'ok') || type === 'store_failed' || type === 'upstream_down' || type === 'lagged';
  const tr = h('tr', { className: bad ? 'bad' : '', dataset: { testid: 'event-row', type, tool: e.tool ? String(e.tool) : '' } },
    h('td', { className: 'mono small' }, clock(at)),
    h('td', {}, chip(type, /^[a-z_]+$/.test(type) ? `t-${type}` : ''), e.call !== undefined ? h('span', { className: 'muted small' }, ` #${e.call}`) : null),
    h('td', { className: 'mono small' }, who),
    h('td', { className: 'num' }, typeof e.latency === 'number' ? `${e.latency.toFixed(1)} ms` : ''),
    h('td', { className: 'num' }, bytes),
    h('td', { className: 'num' }, tokens),
    h('td', { className: 'small' }, String(outcome)),
    h('td', { className: 'mono small' }, artifacts));
  const filter = $('events-type').value;
  tr.hidden = Boolean(filter) && filter !== type;
  const body = $('event-rows');
  body.prepend(tr);
  while (body.children.length > EVENT_ROWS) body.lastElementChild.remove();
}

function applyEventFilter() {
  const filter = $('events-type').value;
  for (const tr of $('event-rows').children) tr.hidden = Boolean(filter) && filter !== tr.dataset.type;
}

// ---- Agent tab ----------------------------------------------------------------------------------

const agent = { session: null, ctrl: null };

async function loadAgent() {
  const status = $('agent-status');
  try {
    const a = await api('/api/agent');
    if (!a?.configured) {
      status.textContent = 'The agent is not configured: set [agent] base_url and model in stowage.toml';
      status.dataset.testid = 'agent-not-configured';
      return;
    }
    status.textContent = `Model: ${a.model ?? '?'}`;
    $('agent-chat').hidden = false;
  } catch (e) {
    status.replaceChildren(errorBox(e));
  }
}

function setAgentSession(id) {
  agent.session = id;
  $('agent-session').textContent = id ? `conversation ${id}` : '';
}

/** The value of string field `key` in JSON text that may still be arriving: what has come of it so far, or null. */
function partialJsonString(text, key) {
  const m = new RegExp(`"${key}"\\s*:\\s*"`).exec(text);
  if (!m) return null;
  let out = '';
  for (let i = m.index + m[0].length; i < text.length;) {
    const c = text[i];
    if (c === '"') break;
    if (c !== '\\') { out += c; i++; continue; }
    const n = text[i + 1];
    if (n === undefined) break;
    if (n === 'u') {
      const hex = text.slice(i + 2, i + 6);
      if (!/^[0-9a-fA-F]{4}$/.test(hex)) break;
      out += String.fromCharCode(parseInt(hex, 16));
      i += 6;
      continue;
    }
    out += { n: '\n', t: '\t', r: '\r', b: '\b', f: '\f' }[n] ?? n;
    i += 2;
  }
  return out;
}

/** What the answer bubble shows of one model reply's streamed text. The model is asked to answer
 *  with a JSON object, so a reply that looks like JSON shows its "raw_answer" (or nothing yet). */
function displayText(seg) {
  if (/^\s*(```[a-z]*\s*)?\{/.test(seg)) return partialJsonString(seg, 'raw_answer');
  return seg;
}

function newTurn(query) {
  const answer = h('div', { className: 'bubble assistant streaming', dataset: { testid: 'agent-answer' } });
  const steps = h('ol', { className: 'timeline' });
  const artifacts = h('div', { className: 'agent-artifacts' });
  const final = h('div', { className: 'final-slot' });
  const el = h('div', { className: 'turn' },
    h('div', { className: 'bubble user' }, query),
    answer,
    h('div', { className: 'turn-details' }, steps, artifacts),
    final);
  $('agent-turns').append(el);
  el.scrollIntoView({ block: 'end' });
  return { el, answer, steps, artifacts, final, seg: '', earlier: [], pending: new Map(), streams: new Map(), finished: false };
}

function onAgentEvent(turn, ev) {
  const d = parseData(ev);
  if (!d) return;
  switch (ev.event) {
    case 'chunk': {
      if (typeof d.text === 'string' && d.text) {
        turn.seg += d.text;
        const shownText = displayText(turn.seg);
        if (shownText) turn.answer.textContent = shownText;
      }
      if (d.done) turn.answer.classList.remove('streaming');
      break;
    }
    case 'answer_reset':
      // What streamed will not be the answer (the model is asked again, or a partial answer
      // follows): the next chunks replace it.
      turn.seg = '';
      turn.answer.textContent = '';
      break;
    case 'step':
      onStep(turn, d);
      break;
    case 'artifact_chunk':
      onArtifactChunk(turn, d);
      break;
    case 'done':
      turn.finished = true;
      turn.answer.classList.remove('streaming');
      turn.answer.textContent = typeof d.raw_answer === 'string' ? d.raw_answer : '';
      turn.final.replaceChildren(renderFinal(d));
      break;
    case 'error':
      turn.finished = true;
      turn.answer.classList.remove('streaming');
      turn.el.append(agentError(d.error, d.code, d.trace_id));
      break;
    default:
      break;
  }
}

function onStep(turn, d) {
  const node = String(d.node ?? '?');
  const status = String(d.status ?? '?');
  // A new step means the model's previous reply is over: later text is a new reply.
  if (turn.seg) {
    turn.earlier.push(turn.seg);
    turn.seg = '';
  }
  let li;
  const waiting = turn.pending.get(node);
  if (status !== 'started' && waiting?.length) li = waiting.shift();
  if (!li) {
    li = h('li', { dataset: { testid: 'agent-step' } });
    turn.steps.append(li);
  }
  if (status === 'started') turn.pending.set(node, [...(turn.pending.get(node) ?? []), li]);
  li.dataset.node = node;
  li.dataset.status = status;
  li.className = `step step-${/^[a-z]+$/.test(status) ? status : 'other'}`;
  fill(li, chip(status), ' ', h('span', { className: 'mono' }, node),
    typeof d.latency_ms === 'number' && status !== 'started' ? h('span', { className: 'muted small' }, ` ${d.latency_ms.toFixed(1)} ms`) : null,
    typeof d.thought === 'string' && d.thought ? h('div', { className: 'muted small thought' }, d.thought) : null);
}

function isChartOptions(v) {
  return v !== null && typeof v === 'object' && !Array.isArray(v) && Array.isArray(v.series);
}

/** Options for ECharts from an untrusted chunk: the tooltip renders as canvas text (never HTML) and title links are dropped. */
function safeChartOptions(chunk) {
  const o = structuredClone(chunk);
  const each = (v, fn) => (Array.isArray(v) ? v.forEach(fn) : v && typeof v === 'object' && fn(v));
  each(o.title, (t) => { delete t.link; delete t.sublink; });
  each(o.tooltip, (t) => { t.renderMode = 'richText'; });
  each(o.toolbox, (t) => { if (t.feature) delete t.feature.dataView; });
  if (o.backgroundColor === undefined) o.backgroundColor = 'transparent';
  return o;
}

let echartsLoading = null;
/** Loads the vendored ECharts once, on first use (it is ~1 MB, so not part of the first load). */
function loadEcharts() {
  if (window.echarts) return Promise.resolve(window.echarts);
  echartsLoading ??= new Promise((resolve, reject) => {
    const s = h('script', { src: ECHARTS_SRC, async: true });
    s.addEventListener('load', () => (window.echarts ? resolve(window.echarts) : reject(new Error('ECharts did not define window.echarts'))));
    s.addEventListener('error', () => { echartsLoading = null; s.remove(); reject(new Error(`could not load ${ECHARTS_SRC}`)); });
    document.head.append(s);
  });
  return echartsLoading;
}

const darkMode = window.matchMedia('(prefers-color-scheme: dark)');

function onArtifactChunk(turn, d) {
  const id = String(d.stream_id ?? '?');
  let s = turn.streams.get(id);
  if (!s) {
    const head = h('div', { className: 'card-head' });
    const body = h('div', { className: 'card-body' });
    const card = h('article', { className: 'artifact-card stream-card', dataset: { stream: id, testid: 'agent-artifact' } }, head, body);
    turn.artifacts.append(card);
    // Chunks of one stream render in order, even while ECharts is still loading.
    s = { card, head, body, chart: null, chartEl: null, queue: Promise.resolve() };
    turn.streams.set(id, s);
  }
  s.head.replaceChildren(h('strong', { className: 'mono' }, id), ' ', chip(String(d.artifact_type ?? '?')),
    h('span', { className: 'muted small' }, ` seq ${d.seq ?? '?'} · ${d.done ? 'done' : 'streaming…'}`));
  const chunk = d.chunk;
  s.queue = s.queue.then(async () => {
    if (isChartOptions(chunk)) {
      if (!s.chartEl) {
        s.chartEl = h('div', { className: 'chart', dataset: { testid: 'agent-chart' } });
        s.body.replaceChildren(s.chartEl);
      }
      const echarts = await loadEcharts();
      if (!s.chart) {
        s.chart = echarts.init(s.chartEl, darkMode.matches ? 'dark' : null);
        new ResizeObserver(() => s.chart.resize()).observe(s.chartEl);
      }
      s.chart.setOption(safeChartOptions(chunk), true); // the latest chunk wins: replace, not merge
    } else {
      s.chart?.dispose();
      s.chart = null;
      s.chartEl = null;
      s.body.replaceChildren(typeof chunk === 'string'
        ? h('pre', { className: 'mono result-pre' }, chunk)
        : renderJsonTree(chunk, { openDepth: 2 }));
    }
  }).catch((e) => s.body.replaceChildren(errorBox(e)));
}

function confidenceBadge(c) {
  if (typeof c !== 'number') return h('span', { className: 'badge conf conf-none', dataset: { testid: 'agent-confidence' } }, 'confidence n/a');
  const level = c >= 0.8 ? 'high' : c >= 0.5 ? 'medium' : 'low';
  return h('span', { className: `badge conf conf-${level}`, dataset: { testid: 'agent-confidence', level } }, `${level} confidence · ${c.toFixed(2)}`);
}

/** An http(s) URL as a normalised string; null for anything else (javascript:, data:, relative…). */
function httpUrl(s) {
  if (typeof s !== 'string') return null;
  try {
    const u = new URL(s);
    return u.protocol === 'http:' || u.protocol === 'https:' ? u.href : null;
  } catch {
    return null;
  }
}

function renderFinal(p) {
  const box = h('section', { className: 'final-payload', dataset: { testid: 'final-payload' } });
  box.append(h('div', { className: 'final-head' }, h('h3', {}, 'Final payload'), confidenceBadge(p.confidence),
    p.route ? chip(`route ${p.route}`) : null, p.language ? chip(`lang ${p.language}`) : null));
  box.append(h('p', { className: 'final-answer' }, typeof p.raw_answer === 'string' ? p.raw_answer : ''));
  if (p.requires_followup) box.append(h('p', { className: 'note warn' }, 'The agent needs your input: answer its question to go on (same conversation).'));

  const warnings = Array.isArray(p.warnings) ? p.warnings : [];
  if (warnings.length) box.append(h('ul', { className: 'warnings' }, warnings.map((w) => h('li', {}, String(w)))));

  const sources = Array.isArray(p.sources) ? p.sources : [];
  if (sources.length) {
    box.append(h('h4', {}, 'Sources'), h('ol', { className: 'sources' }, sources.map((s) => {
      const url = httpUrl(s?.url);
      return h('li', { dataset: { testid: 'agent-source' } },
        h('strong', {}, String(s?.title ?? '(untitled)')),
        typeof s?.relevance_score === 'number' ? h('span', { className: 'muted small' }, ` relevance ${s.relevance_score.toFixed(2)}`) : null,
        url ? h('div', {}, h('a', { href: url, target: '_blank', rel: 'noopener noreferrer', referrerPolicy: 'no-referrer' }, url)) : null,
        typeof s?.snippet === 'string' ? h('div', { className: 'muted small snippet' }, s.snippet) : null);
    })));
  }

  const actions = Array.isArray(p.suggested_actions) ? p.suggested_actions : [];
  if (actions.length) {
    box.append(h('h4', {}, 'Suggested actions'), h('div', { className: 'actions' }, actions.map((a) => {
      const label = String(a?.label ?? a?.action_id ?? '?');
      const b = h('button', { type: 'button', title: a?.action_id ? `action ${a.action_id}` : '', dataset: { testid: 'agent-action' } }, label);
      b.addEventListener('click', () => { const i = $('agent-input'); i.value = label; i.focus(); });
      return b;
    })));
  }
  const artifacts = p.artifacts && typeof p.artifacts === 'object' ? p.artifacts : {};
  if (Object.keys(artifacts).length) {
    box.append(h('details', { className: 'raw-json' }, h('summary', {}, `Artifacts (${Object.keys(artifacts).length})`), renderJsonTree(artifacts, { openDepth: 1 })));
  }
  if (p.extra && typeof p.extra === 'object' && Object.keys(p.extra).length) {
    box.append(h('details', { className: 'raw-json' }, h('summary', {}, 'Extra'), renderJsonTree(p.extra, { openDepth: 1 })));
  }
  return box;
}

function agentError(message, code, trace) {
  return h('div', { className: 'bubble error-box', role: 'alert', dataset: { testid: 'agent-error' } },
    h('strong', {}, code ? String(code) : 'error'), ' ', String(message ?? 'the run failed'),
    trace ? h('div', { className: 'muted small mono' }, `trace ${trace}`) : null);
}

async function runAgent(query) {
  const turn = newTurn(query);
  const ctrl = new AbortController();
  agent.ctrl = ctrl;
  $('agent-send').disabled = true;
  $('agent-stop').hidden = false;
  try {
    const res = await api('/agent/runs', { method: 'POST', raw: true, signal: ctrl.signal, body: { query, session: agent.session ?? undefined } });
    if (!res.ok) await readJson(res);
    const sid = res.headers.get('stowage-agent-session');
    if (sid) setAgentSession(sid);
    for await (const ev of sseEvents(res)) onAgentEvent(turn, ev);
    if (!turn.finished) throw new Error('the run ended without an answer');
  } catch (e) {
    turn.answer.classList.remove('streaming');
    if (e.name === 'AbortError') turn.el.append(h('p', { className: 'note muted' }, 'Stopped.'));
    else turn.el.append(agentError(e.message, e instanceof ApiError ? e.code : null));
  } finally {
    if (!turn.answer.textContent) turn.answer.hidden = true;
    agent.ctrl = null;
    $('agent-send').disabled = false;
    $('agent-stop').hidden = true;
  }
}

// ---- Start --------------------------------------------------------------------------------------

function bind() {
  for (const b of document.querySelectorAll('[data-tab]')) b.addEventListener('click', () => showTab(b.dataset.tab));
  $('tool-filter').addEventListener('input', renderToolList);

  $('artifact-kind').addEventListener('change', resetArtifacts);
  $('artifact-session').addEventListener('change', resetArtifacts);
  $('artifact-this-session').addEventListener('change', () => {
    $('artifact-session').disabled = $('artifact-this-session').checked;
    resetArtifacts();
  });
  $('artifact-refresh').addEventListener('click', loadArtifacts);
  $('artifact-next').addEventListener('click', () => {
    if (!arts.next) return;
    arts.cursors.push(arts.next);
    loadArtifacts();
  });
  $('artifact-prev').addEventListener('click', () => {
    if (arts.cursors.length > 1) arts.cursors.pop();
    loadArtifacts();
  });

  $('resources-refresh').addEventListener('click', loadResources);

  $('events-pause').addEventListener('click', () => {
    events.paused = !events.paused;
    const b = $('events-pause');
    b.textContent = events.paused ? 'Resume' : 'Pause';
    b.setAttribute('aria-pressed', String(events.paused));
    if (!events.paused) {
      for (const row of events.held) insertEventRow(row);
      events.held = [];
    }
  });
  $('events-type').addEventListener('change', applyEventFilter);
  $('events-clear').addEventListener('click', () => {
    $('event-rows').replaceChildren();
    events.held = [];
  });

  $('agent-form').addEventListener('submit', (e) => {
    e.preventDefault();
    const q = $('agent-input').value.trim();
    if (!q || agent.ctrl) return;
    $('agent-input').value = '';
    runAgent(q);
  });
  // Enter sends, Shift+Enter makes a new line.
  $('agent-input').addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      $('agent-form').requestSubmit();
    }
  });
  $('agent-stop').addEventListener('click', () => agent.ctrl?.abort());
  $('agent-new').addEventListener('click', () => {
    setAgentSession(null);
    $('agent-turns').append(h('hr', { className: 'conversation-break' }));
  });
}

async function start() {
  bind();
  const fromHash = location.hash.slice(1);
  showTab(TABS.includes(fromHash) ? fromHash : 'tools');
  for (;;) {
    try {
      state.info = await api('/api/info');
      break;
    } catch (e) {
      $('info').replaceChildren(errorBox(e));
      await sleep(3000);
    }
  }
  renderInfo(state.info);
  runEventStream();
  loadTools();
  loadResources();
  loadAgent();
}

start();
