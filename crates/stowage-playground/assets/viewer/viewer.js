// viewer.js: the MCP Apps view of Stowage's artifacts (ui://stowage/viewer).
//
// The gateway inlines this file after preview.js in one module script, so the preview components
// (h, fill, renderArtifact, fetchRange, humanBytes, safeUrl, …) are called directly here. The view
// speaks the View side of MCP Apps (io.modelcontextprotocol/ui, protocol 2026-01-26) by hand:
// JSON-RPC 2.0 over window.parent.postMessage, no SDK bundled.
//
// Bytes reach the view one of two ways, per artifact:
// - the link path: the artifact's signed link (meta.url), when the CSP the host applied
//   (hostCapabilities.sandbox.csp) lets the view both fetch from and load from its origin;
// - the chunk path otherwise: the app-only tool artifact_fetch, 512 KiB a call through the host's
//   tools/call proxy, a few calls at a time, assembled into a Blob (blob: URL, or a data: URL when
//   the host's CSP refuses blob: images).
// Uploads go the same two ways (a PUT to the upload slot, or artifact_upload_chunk calls).
//
// Artifacts are untrusted: names, types and contents reach the DOM through textContent and element
// properties only; SVG is shown as an <img>; HTML as text; PDF is drawn by pdf.js onto a canvas.
// Nothing here parses strings as code. pdf.js itself (too big to inline) comes from the app-only
// tool artifact_viewer_asset and runs as an inline module script, its "worker" on this thread.

const VIEW_PROTOCOL = '2026-01-26';
const APP_INFO = { name: 'stowage-viewer', version: '1.0.0' };
const CHUNK_BYTES = 1024 * 1024; // artifact_upload_chunk's limit
// artifact_fetch's cap: a result stays well under the 1 MB some hosts allow a tool result.
const FETCH_BYTES = 512 * 1024;
const FETCH_PARALLEL = 4; // artifact_fetch calls in flight per artifact
const REQUEST_TIMEOUT_MS = 120_000;
const EMBED_SAVE_LIMIT = 20 * 1000 * 1000; // bytes a Save may send inline when there is no link
const MAX_IDS = 20; // artifact_view's own limit

const $ = (id) => document.getElementById(id);
const host = { caps: {}, context: {}, info: null };
const blobUrls = new Set();
const uploads = []; // what the model has been told about, in order (ui/update-model-context replaces)
let ready = null;

// ---- JSON-RPC over postMessage ---------------------------------------------------------------

const rpc = { next: 1, pending: new Map() };

function post(message) {
  window.parent.postMessage(message, '*');
}

function request(method, params, timeoutMs = REQUEST_TIMEOUT_MS) {
  const id = rpc.next++;
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      rpc.pending.delete(id);
      reject(new Error(`${method}: the host did not answer in ${Math.round(timeoutMs / 1000)} s`));
    }, timeoutMs);
    rpc.pending.set(id, { resolve, reject, timer, method });
    post({ jsonrpc: '2.0', id, method, params });
  });
}

function notify(method, params) {
  post({ jsonrpc: '2.0', method, params });
}

function respond(id, result) {
  post({ jsonrpc: '2.0', id, result });
}

function respondError(id, code, message) {
  post({ jsonrpc: '2.0', id, error: { code, message } });
}

window.addEventListener('message', (event) => {
  // Only the host (our parent) speaks to the view; anything else is ignored.
  if (event.source !== window.parent) return;
  const m = event.data;
  if (!m || typeof m !== 'object' || m.jsonrpc !== '2.0') return;
  if (typeof m.method === 'string') {
    if (m.id !== undefined && m.id !== null) onRequest(m);
    else onNotification(m.method, m.params ?? {});
    return;
  }
  const p = rpc.pending.get(m.id);
  if (!p) return;
  rpc.pending.delete(m.id);
  clearTimeout(p.timer);
  if (m.error) {
    const msg = typeof m.error.message === 'string' ? m.error.message : JSON.stringify(m.error);
    p.reject(new Error(`${p.method}: ${msg}`));
  } else {
    p.resolve(m.result ?? {});
  }
});

function onRequest(m) {
  switch (m.method) {
    case 'ping':
      respond(m.id, {});
      return;
    case 'ui/resource-teardown':
      teardown();
      respond(m.id, {});
      return;
    default:
      respondError(m.id, -32601, `the view does not handle ${m.method}`);
  }
}

function onNotification(method, params) {
  switch (method) {
    case 'ui/notifications/tool-input':
      onToolInput(params);
      return;
    case 'ui/notifications/tool-result':
      onToolResult(params).catch((e) => showError(e.message));
      return;
    case 'ui/notifications/tool-cancelled':
      setStatus(`the tool call was cancelled${params?.reason ? `: ${params.reason}` : ''}`);
      return;
    case 'ui/notifications/host-context-changed':
      applyContext(params);
      return;
    default:
      // tool-input-partial and anything newer: nothing to do.
  }
}

/** A server tool through the host's proxy. A tool error becomes a thrown Error with the tool's text. */
async function callTool(name, args) {
  const result = await request('tools/call', { name, arguments: args });
  if (result?.isError) throw new Error(textOf(result) || `${name} failed`);
  return result;
}

function textOf(result) {
  const content = Array.isArray(result?.content) ? result.content : [];
  return content.filter((c) => c?.type === 'text' && typeof c.text === 'string').map((c) => c.text).join('\n');
}

// ---- lifecycle -------------------------------------------------------------------------------

async function init() {
  const res = await request('ui/initialize', { appInfo: APP_INFO, appCapabilities: {}, protocolVersion: VIEW_PROTOCOL });
  host.caps = res?.hostCapabilities && typeof res.hostCapabilities === 'object' ? res.hostCapabilities : {};
  host.info = res?.hostInfo ?? null;
  applyContext(res?.hostContext);
  notify('ui/notifications/initialized', {});
  watchSize();
  setStatus('waiting for the tool result…');
}

function teardown() {
  for (const u of blobUrls) URL.revokeObjectURL(u);
  blobUrls.clear();
}

function applyContext(ctx) {
  if (!ctx || typeof ctx !== 'object') return;
  Object.assign(host.context, ctx);
  const root = document.documentElement;
  if (ctx.theme === 'light' || ctx.theme === 'dark') {
    root.classList.remove('theme-light', 'theme-dark');
    root.classList.add(`theme-${ctx.theme}`);
    root.dataset.theme = ctx.theme;
  }
  const vars = ctx.styles?.variables;
  if (vars && typeof vars === 'object') {
    for (const [k, v] of Object.entries(vars)) {
      if (/^--[a-z0-9-]+$/i.test(k) && typeof v === 'string') root.style.setProperty(k, v);
    }
  }
}

/** Reports the document's size to the host whenever it changes (ui/notifications/size-changed). */
function watchSize() {
  let last = '';
  let queued = false;
  const send = () => {
    queued = false;
    const r = document.documentElement.getBoundingClientRect();
    const width = Math.ceil(r.width);
    const height = Math.ceil(r.height);
    const key = `${width}x${height}`;
    if (key === last) return;
    last = key;
    notify('ui/notifications/size-changed', { width, height });
  };
  const observer = new ResizeObserver(() => {
    if (!queued) {
      queued = true;
      requestAnimationFrame(send);
    }
  });
  observer.observe(document.documentElement);
  observer.observe(document.body);
  send();
}

function setStatus(text) {
  $('viewer-status').textContent = text;
}

function showError(text) {
  const box = $('viewer-error');
  box.hidden = false;
  box.textContent = text;
}

// ---- tool input and result -------------------------------------------------------------------

function onToolInput(params) {
  const ids = params?.arguments?.ids;
  if (Array.isArray(ids) && !$('viewer-artifacts').childElementCount) {
    setStatus(`loading ${ids.length} artifact${ids.length === 1 ? '' : 's'}…`);
  }
}

async function onToolResult(result) {
  await ready;
  $('viewer-error').hidden = true;
  if (!result || typeof result !== 'object') return;
  if (result.isError) {
    showError(textOf(result) || 'the tool call failed');
    setStatus('');
    return;
  }
  let metas = result.structuredContent?.artifacts;
  if (!Array.isArray(metas)) {
    // Another tool's (rewritten) result: find its artifacts and ask for their metadata.
    const ids = artifactIdsIn(result);
    if (!ids.length) {
      setStatus('this result holds no artifacts');
      return;
    }
    setStatus(`loading ${ids.length} artifact${ids.length === 1 ? '' : 's'}…`);
    const view = await callTool('artifact_view', { ids: ids.slice(0, MAX_IDS) });
    metas = view.structuredContent?.artifacts;
  }
  showArtifacts(Array.isArray(metas) ? metas : []);
}

function artifactIdsIn(result) {
  const ids = [];
  const add = (v) => {
    if (typeof v === 'string' && v && !ids.includes(v)) ids.push(v);
  };
  const assets = result._meta?.['io.stowage/assets'];
  if (Array.isArray(assets)) for (const a of assets) add(a?.id);
  const listed = result.structuredContent?.assets;
  if (Array.isArray(listed)) for (const a of listed) add(a?.id);
  const content = Array.isArray(result.content) ? result.content : [];
  for (const c of content) {
    if (c?.type === 'resource_link' && typeof c.uri === 'string' && c.uri.startsWith('artifact://')) add(c.uri);
  }
  // Last: references written in the text (a host that passed on no structured content).
  if (!ids.length) for (const m of textOf(result).matchAll(/artifact:\/\/[A-Za-z0-9_.~-]+/g)) add(m[0]);
  return ids;
}

function showArtifacts(metas) {
  const list = $('viewer-artifacts');
  teardown();
  list.replaceChildren();
  const cards = metas.filter((m) => m && typeof m === 'object').map((m) => artifactCard(m));
  list.append(...cards);
  const paths = new Set(cards.map((c) => c.dataset.path));
  setStatus(`${cards.length} artifact${cards.length === 1 ? '' : 's'}${cards.length ? ` · via ${[...paths].join(' and ')}` : ''}`);
}

// ---- one artifact ----------------------------------------------------------------------------

/** Whether the CSP the host applied lets the view fetch from (connect) and load from (resource) `url`'s origin. */
function linkUsable(url) {
  const csp = host.caps?.sandbox?.csp;
  return !!safeUrl(url) && originListed(csp?.connectDomains, url) && originListed(csp?.resourceDomains, url);
}

function connectAllowed(url) {
  return !!safeUrl(url) && originListed(host.caps?.sandbox?.csp?.connectDomains, url);
}

/** Whether a CSP source list (origins, `https://*.example.com` wildcards, bare hosts, `*`) covers `url`. */
function originListed(list, url) {
  if (!Array.isArray(list)) return false;
  let u;
  try {
    u = new URL(url);
  } catch {
    return false;
  }
  if (u.protocol !== 'https:' && u.protocol !== 'http:') return false;
  const port = u.port || (u.protocol === 'https:' ? '443' : '80');
  return list.some((raw) => {
    if (typeof raw !== 'string') return false;
    const entry = raw.trim().toLowerCase().replace(/\/+$/, '');
    if (entry === '*') return true;
    const m = /^(?:([a-z][a-z0-9+.-]*):\/\/)?(\*\.)?([a-z0-9.-]+|\[[0-9a-f:.]+\])(?::(\d+|\*))?$/.exec(entry);
    if (!m) return false;
    const [, scheme, wild, hostPart, p] = m;
    if (scheme && `${scheme}:` !== u.protocol) return false;
    const hostOk = wild ? u.hostname.endsWith(`.${hostPart}`) : u.hostname === hostPart;
    const wantPort = p ?? (scheme === 'http' ? '80' : scheme === 'https' ? '443' : port);
    return hostOk && (p === '*' || wantPort === port);
  });
}

function artifactCard(meta) {
  const path = linkUsable(meta.url) ? 'link' : 'chunks';
  const source = path === 'link' ? linkSource(meta) : chunkSource(meta);
  const card = renderArtifact(meta, {
    source,
    renderPdf,
    downloadLink: false,
    noPreviewNote: 'No preview for this type; use Save.',
  });
  card.dataset.testid = 'viewer-artifact';
  card.dataset.path = path;
  const chip = h('span', {
    className: 'path-chip',
    dataset: { testid: 'viewer-path', path },
    title: path === 'link' ? 'loaded from the signed link' : 'loaded in 1 MiB chunks through the host',
  }, path === 'link' ? 'signed link' : 'chunks');
  source.onProgress = (got, total) => {
    chip.textContent = got >= total ? 'chunks' : `chunks ${humanBytes(got)} of ${humanBytes(total)}`;
  };
  const status = h('span', { className: 'muted small', dataset: { testid: 'viewer-save-status' } });
  const save = h('button', { type: 'button', dataset: { testid: 'viewer-save' } }, 'Save');
  save.addEventListener('click', () => saveArtifact(meta, save, status));
  card.actions.append(save, chip, status);
  const img = card.querySelector('img.preview-img');
  if (img) img.dataset.testid = 'viewer-image';
  return card;
}

/** Bytes from the signed link (fetch with Range; media elements load the link themselves). */
function linkSource(meta) {
  const url = safeUrl(meta.url);
  let whole = null;
  return {
    path: 'link',
    onProgress: null,
    url: async () => url,
    fetchRange: (start, end) => fetchRange(url, start, end),
    bytes: () => (whole ??= fetch(url, { credentials: 'omit', cache: 'no-store' }).then((res) => {
      if (!res.ok) throw new Error(`download answered ${res.status} ${res.statusText}`);
      return res.arrayBuffer();
    }).then((b) => new Uint8Array(b))),
  };
}

/** Bytes through artifact_fetch, 512 KiB a call; the whole artifact once for media and PDF. */
function chunkSource(meta) {
  let whole = null;
  let objectUrl = null;
  const src = {
    path: 'chunks',
    onProgress: null,
    fetchRange: (start, end) => fetchChunks(meta, start, end + 1, null),
    bytes: () => (whole ??= fetchChunks(meta, 0, null, (got, total) => src.onProgress?.(got, total)).then((r) => r.bytes)),
    url: () => (objectUrl ??= src.bytes().then((b) => mediaUrl(b, meta.mime_type))),
  };
  return src;
}

function decodeBase64(s) {
  if (typeof Uint8Array.fromBase64 === 'function') return Uint8Array.fromBase64(s);
  const bin = atob(s);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

async function encodeBase64(blob) {
  const bytes = new Uint8Array(await blob.arrayBuffer());
  if (typeof bytes.toBase64 === 'function') return bytes.toBase64();
  const url = await readDataUrl(new Blob([bytes]));
  return url.slice(url.indexOf(',') + 1);
}

function readDataUrl(blob) {
  return new Promise((resolve, reject) => {
    const reader = new FileReader();
    reader.addEventListener('load', () => resolve(String(reader.result)), { once: true });
    reader.addEventListener('error', () => reject(reader.error ?? new Error('could not read the bytes')), { once: true });
    reader.readAsDataURL(blob);
  });
}

async function fetchChunk(id, offset, length) {
  const r = await callTool('artifact_fetch', { id, offset, length });
  const sc = r.structuredContent;
  if (!sc || typeof sc.data !== 'string' || typeof sc.total !== 'number') throw new Error('artifact_fetch returned no data');
  return { bytes: decodeBase64(sc.data), total: sc.total, eof: !!sc.eof };
}

/**
 * Bytes [start, end) of an artifact (end null: to its end) through artifact_fetch, FETCH_PARALLEL
 * calls in flight. Resolves {bytes, total}.
 */
async function fetchChunks(meta, start, end, onProgress) {
  let total = typeof meta.size_bytes === 'number' && meta.size_bytes >= 0 ? meta.size_bytes : null;
  if (total === null) total = (await fetchChunk(meta.id, 0, 0)).total;
  const stop = Math.min(end ?? total, total);
  const len = Math.max(0, stop - start);
  const out = new Uint8Array(len);
  const offsets = [];
  for (let o = start; o < stop; o += FETCH_BYTES) offsets.push(o);
  let got = 0;
  let next = 0;
  const worker = async () => {
    while (next < offsets.length) {
      const off = offsets[next++];
      const until = Math.min(off + FETCH_BYTES, stop);
      let pos = off;
      while (pos < until) {
        const c = await fetchChunk(meta.id, pos, until - pos);
        if (c.bytes.length === 0) throw new Error(`artifact_fetch returned no bytes at offset ${pos} of ${c.total}`);
        const take = c.bytes.subarray(0, until - pos);
        out.set(take, pos - start);
        pos += take.length;
        got += take.length;
        onProgress?.(got, len);
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(FETCH_PARALLEL, offsets.length) }, worker));
  return { bytes: out, total };
}

/** A plain `type/subtype` mime type, or the fallback (a hostile type never reaches a URL). */
function plainMime(m, fallback = 'application/octet-stream') {
  const base = typeof m === 'string' ? m.split(';')[0].trim().toLowerCase() : '';
  return /^[a-z0-9][a-z0-9!#$&^_.+-]*\/[a-z0-9][a-z0-9!#$&^_.+-]*$/.test(base) ? base : fallback;
}

let blobProbe = null;
/**
 * Whether the host's CSP lets images load from blob: URLs (MCP Apps' default CSP names only data:).
 * A policy the host put in the document as a <meta> says so without a try (and without the console
 * error a refused load logs); otherwise a 1-pixel image is tried.
 */
function blobImagesAllowed() {
  if (!blobProbe) {
    for (const m of document.querySelectorAll('meta[http-equiv]')) {
      if (m.httpEquiv.toLowerCase() !== 'content-security-policy') continue;
      const directives = new Map(m.content.split(';').map((d) => d.trim().split(/\s+/)).filter((t) => t[0]).map(([k, ...v]) => [k.toLowerCase(), v]));
      const sources = directives.get('img-src') ?? directives.get('default-src');
      if (sources && !sources.some((v) => v.toLowerCase() === 'blob:')) blobProbe = Promise.resolve(false);
    }
  }
  return (blobProbe ??= new Promise((resolve) => {
    const png = decodeBase64('iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII=');
    const u = URL.createObjectURL(new Blob([png], { type: 'image/png' }));
    const img = new Image();
    const done = (ok) => {
      URL.revokeObjectURL(u);
      resolve(ok);
    };
    img.addEventListener('load', () => done(true), { once: true });
    img.addEventListener('error', () => done(false), { once: true });
    img.src = u;
  }));
}

/** A URL for an <img>/<audio>/<video> holding `bytes`: blob: where allowed, else data:. */
async function mediaUrl(bytes, mime) {
  const blob = new Blob([bytes], { type: plainMime(mime) });
  if (await blobImagesAllowed()) {
    const u = URL.createObjectURL(blob);
    blobUrls.add(u);
    return u;
  }
  return readDataUrl(blob);
}

// ---- PDF: pdf.js, loaded on first use --------------------------------------------------------

let pdfjs = null;

/** pdf.js: the worker module first (it sets globalThis.pdfjsWorker, which pdf.js then runs on this thread), then the library. */
function loadPdfjs() {
  return (pdfjs ??= (async () => {
    if (!globalThis.pdfjsWorker?.WorkerMessageHandler) await runAsset('pdfjs-worker');
    if (!globalThis.pdfjsLib?.getDocument) await runAsset('pdfjs');
    if (!globalThis.pdfjsLib?.getDocument) throw new Error('pdf.js did not load');
    return globalThis.pdfjsLib;
  })().catch((e) => {
    pdfjs = null; // a later PDF may try again
    throw e;
  }));
}

/** Runs one vendored module (from artifact_viewer_asset) as an inline module script; resolves when it has run. */
async function runAsset(name) {
  // Sent in parts (each result stays under hosts' size limits), joined here.
  let text = '';
  for (let part = 0, parts = 1; part < parts; part++) {
    const r = await callTool('artifact_viewer_asset', { name, part });
    const sc = r.structuredContent;
    if (typeof sc?.text !== 'string' || !sc.text) throw new Error(`artifact_viewer_asset returned no ${name}`);
    text += sc.text;
    parts = Number(sc.parts) || 1;
  }
  const event = `stowage-asset-${name}`;
  await new Promise((resolve, reject) => {
    const cleanup = () => {
      clearTimeout(timer);
      globalThis.removeEventListener(event, onDone);
      globalThis.removeEventListener('error', onError);
      document.removeEventListener('securitypolicyviolation', onBlocked);
    };
    const onDone = () => {
      cleanup();
      resolve();
    };
    const onError = (e) => {
      cleanup();
      reject(new Error(`${name} failed to run: ${e.message ?? 'error'}`));
    };
    const onBlocked = (e) => {
      if (e.effectiveDirective?.startsWith('script-src') || e.violatedDirective?.startsWith('script-src')) {
        cleanup();
        reject(new Error(`the host's CSP does not let ${name} run (${e.violatedDirective})`));
      }
    };
    const timer = setTimeout(() => {
      cleanup();
      reject(new Error(`${name} did not run in 30 s`));
    }, 30_000);
    globalThis.addEventListener(event, onDone);
    globalThis.addEventListener('error', onError);
    document.addEventListener('securitypolicyviolation', onBlocked);
    const script = document.createElement('script');
    script.type = 'module';
    // The module's last statement tells us it has run (inline module scripts fire no load event).
    // Through globalThis: the module's own top-level names (minified) may shadow Event.
    script.textContent = `${text}\n;globalThis.dispatchEvent(new globalThis.Event(${JSON.stringify(event)}));\n`;
    document.head.append(script);
  });
}

/** A PDF drawn by pdf.js onto a canvas, one page at a time (preview.js's opts.renderPdf). */
function renderPdf(meta, source) {
  const canvas = h('canvas', { className: 'pdf-canvas', dataset: { testid: 'pdf-canvas' } });
  const prev = h('button', { type: 'button', disabled: true, dataset: { testid: 'pdf-prev' } }, '‹ Previous');
  const next = h('button', { type: 'button', disabled: true, dataset: { testid: 'pdf-next' } }, 'Next ›');
  const label = h('span', { className: 'muted small', dataset: { testid: 'pdf-page-label' } }, 'loading the PDF renderer…');
  const view = h('div', { className: 'pdf-view' },
    h('div', { className: 'pdf-nav' }, prev, label, next),
    h('div', { className: 'pdf-page' }, canvas));
  let doc = null;
  let pageNo = 0;
  let task = null;
  let seq = 0;

  const draw = async (n) => {
    const mine = ++seq;
    task?.cancel();
    task = null;
    prev.disabled = true;
    next.disabled = true;
    label.textContent = `page ${n} of ${doc.numPages}`;
    const page = await doc.getPage(n);
    if (mine !== seq) return;
    const base = page.getViewport({ scale: 1 });
    const width = Math.max(240, Math.min(view.clientWidth || 800, 1400));
    const viewport = page.getViewport({ scale: width / base.width });
    const dpr = Math.min(window.devicePixelRatio || 1, 2);
    canvas.width = Math.floor(viewport.width * dpr);
    canvas.height = Math.floor(viewport.height * dpr);
    canvas.style.width = `${Math.floor(viewport.width)}px`;
    canvas.style.height = `${Math.floor(viewport.height)}px`;
    task = page.render({
      canvasContext: canvas.getContext('2d'),
      canvas,
      viewport,
      transform: dpr === 1 ? undefined : [dpr, 0, 0, dpr, 0, 0],
    });
    try {
      await task.promise;
    } catch (e) {
      if (e?.name === 'RenderingCancelledException' || mine !== seq) return;
      throw e;
    }
    if (mine !== seq) return;
    task = null;
    pageNo = n;
    canvas.dataset.page = String(n);
    canvas.dataset.pages = String(doc.numPages);
    prev.disabled = n <= 1;
    next.disabled = n >= doc.numPages;
  };
  const go = (n) => draw(n).catch((e) => {
    label.textContent = `page ${n} failed: ${e.message}`;
    prev.disabled = pageNo <= 1;
    next.disabled = pageNo >= (doc?.numPages ?? 0);
  });
  prev.addEventListener('click', () => go(pageNo - 1));
  next.addEventListener('click', () => go(pageNo + 1));

  view.ready = (async () => {
    const [lib, bytes] = await Promise.all([loadPdfjs(), source.bytes()]);
    label.textContent = 'opening the PDF…';
    // A copy: pdf.js takes the buffer over, and the source keeps its bytes for Save.
    doc = await lib.getDocument({
      data: bytes.slice(),
      isEvalSupported: false,
      useWasm: false,
      useWorkerFetch: false,
      disableWorkerRendering: true,
      enableXfa: false,
      verbosity: 0,
    }).promise;
    await draw(1);
  })();
  return view;
}

// ---- saving ----------------------------------------------------------------------------------

async function saveArtifact(meta, button, status) {
  button.disabled = true;
  status.classList.remove('error-text');
  status.textContent = 'getting a fresh link…';
  try {
    let url = null;
    try {
      const fresh = await callTool('artifact_view', { ids: [meta.id] });
      url = safeUrl(fresh.structuredContent?.artifacts?.[0]?.url);
    } catch {
      // The link from the first call may still be valid.
    }
    url ??= safeUrl(meta.url);
    const name = meta.name || meta.id || 'artifact';
    const mimeType = plainMime(meta.mime_type);
    if (host.caps.downloadFile) {
      let item;
      if (url) {
        item = { type: 'resource_link', uri: url, name, mimeType };
      } else {
        if ((meta.size_bytes ?? Infinity) > EMBED_SAVE_LIMIT) throw new Error(`download links are off and ${humanBytes(meta.size_bytes)} is too big to hand over inline`);
        status.textContent = 'reading the artifact…';
        const { bytes } = await fetchChunks(meta, 0, null, null);
        item = { type: 'resource', resource: { uri: meta.uri || `artifact://${meta.id}`, mimeType, blob: await encodeBase64(new Blob([bytes])) } };
      }
      status.textContent = 'asking the host to save it…';
      const res = await request('ui/download-file', { contents: [item] });
      if (res?.isError) throw new Error('the host did not save the file');
      status.textContent = 'handed to the host';
    } else if (host.caps.openLinks && url) {
      const res = await request('ui/open-link', { url });
      if (res?.isError) throw new Error('the host did not open the link');
      status.textContent = 'opened the link';
    } else {
      throw new Error(url ? 'this host can neither save files nor open links' : 'download links are off and this host cannot save files');
    }
  } catch (e) {
    status.classList.add('error-text');
    status.textContent = `Save failed: ${e.message}`;
  } finally {
    button.disabled = false;
  }
}

// ---- uploading -------------------------------------------------------------------------------

function setupUpload() {
  const input = $('viewer-upload-input');
  const drop = $('viewer-drop');
  input.addEventListener('change', () => {
    const files = [...input.files];
    input.value = '';
    uploadAll(files);
  });
  for (const ev of ['dragenter', 'dragover']) {
    drop.addEventListener(ev, (e) => {
      e.preventDefault();
      drop.classList.add('dragging');
    });
  }
  drop.addEventListener('dragleave', () => drop.classList.remove('dragging'));
  drop.addEventListener('drop', (e) => {
    e.preventDefault();
    drop.classList.remove('dragging');
    uploadAll([...(e.dataTransfer?.files ?? [])]);
  });
  // A file dropped anywhere else must not navigate the frame away.
  document.addEventListener('dragover', (e) => e.preventDefault());
  document.addEventListener('drop', (e) => e.preventDefault());
}

let uploadQueue = Promise.resolve();
function uploadAll(files) {
  for (const f of files) uploadQueue = uploadQueue.then(() => uploadFile(f));
}

async function uploadFile(file) {
  const status = $('viewer-upload-status');
  status.hidden = false;
  status.dataset.state = 'working';
  delete status.dataset.uri;
  delete status.dataset.path;
  const say = (...parts) => fill(status, ...parts);
  const bar = h('progress', { max: Math.max(file.size, 1), value: 0 });
  try {
    await ready;
    const mimeType = plainMime(file.type);
    say(`hashing ${file.name} (${humanBytes(file.size)})…`);
    const sha256 = await sha256Hex(file);
    const begin = () => callTool('artifact_upload_begin', { name: file.name, mimeType, size: file.size, sha256 });
    let slot = (await begin()).structuredContent ?? {};
    if (typeof slot.upload !== 'string') throw new Error('artifact_upload_begin returned no upload handle');
    let path = 'chunks';
    if (slot.url && connectAllowed(slot.url)) {
      say(`sending ${file.name} to the upload link… `, bar);
      try {
        await putFile(slot.url, file, mimeType);
        path = 'link';
        bar.value = file.size;
      } catch (e) {
        if (!(e instanceof TypeError)) throw e;
        // The request never got through (network, CSP): start over in chunks.
        slot = (await begin()).structuredContent ?? {};
      }
    }
    if (path === 'chunks') {
      say(`sending ${file.name} in chunks… `, bar);
      const size = Math.min(Number(slot.chunk_bytes) || CHUNK_BYTES, CHUNK_BYTES);
      for (let off = 0; off < file.size; off += size) {
        const data = await encodeBase64(file.slice(off, off + size));
        await callTool('artifact_upload_chunk', { upload: slot.upload, offset: off, data });
        bar.value = Math.min(off + size, file.size);
      }
    }
    say(`checking ${file.name}…`);
    const committed = await callTool('artifact_upload_commit', { upload: slot.upload });
    const meta = committed.structuredContent?.artifact;
    if (!meta || typeof meta.uri !== 'string') throw new Error('artifact_upload_commit returned no artifact');
    $('viewer-artifacts').append(artifactCard(meta));
    const told = await tellModel(meta, file);
    status.dataset.path = path;
    status.dataset.uri = meta.uri;
    status.dataset.state = 'done';
    say(`Uploaded ${file.name} as `, h('span', { className: 'mono' }, meta.uri), told ? ` · ${told}` : '');
  } catch (e) {
    status.dataset.state = 'error';
    say(`Upload of ${file.name} failed: ${e.message}`);
  }
}

async function putFile(url, file, mimeType) {
  const res = await fetch(url, { method: 'PUT', body: file, headers: { 'Content-Type': mimeType }, credentials: 'omit', cache: 'no-store' });
  if (!res.ok) {
    const detail = (await res.text().catch(() => '')).slice(0, 300);
    throw new Error(`the upload link answered ${res.status}${detail ? `: ${detail}` : ''}`);
  }
}

/**
 * Gives the model the new reference: ui/update-model-context (every upload so far, as that call
 * replaces the view's earlier context), else ui/message. Returns a few words for the status line.
 */
async function tellModel(meta, file) {
  const text = `The user uploaded ${meta.name ?? file.name} (${meta.mime_type ?? plainMime(file.type)}, ${humanBytes(meta.size_bytes ?? file.size)}): ${meta.uri}`;
  uploads.push({ text, uri: meta.uri, name: meta.name ?? file.name, mime_type: meta.mime_type ?? null, size_bytes: meta.size_bytes ?? file.size });
  try {
    if (host.caps.updateModelContext) {
      await request('ui/update-model-context', {
        content: uploads.map((u) => ({ type: 'text', text: u.text })),
        structuredContent: { uploads: uploads.map(({ text: _t, ...u }) => u) },
      });
      return 'the model can see it';
    }
    if (host.caps.message) {
      await request('ui/message', { role: 'user', content: [{ type: 'text', text }] });
      return 'sent to the conversation';
    }
    return 'this host cannot tell the model';
  } catch (e) {
    return `the model was not told (${e.message})`;
  }
}

/** Hex sha256 of a file: WebCrypto, or a plain implementation where the frame is not a secure context. */
async function sha256Hex(file) {
  const buf = await file.arrayBuffer();
  const digest = globalThis.crypto?.subtle ? new Uint8Array(await crypto.subtle.digest('SHA-256', buf)) : sha256Plain(new Uint8Array(buf));
  return [...digest].map((b) => b.toString(16).padStart(2, '0')).join('');
}

const SHA_K = new Uint32Array([
  0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
  0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
  0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
  0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
  0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
  0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
  0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
  0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
]);

function sha256Plain(bytes) {
  const n = bytes.length;
  const padded = new Uint8Array((((n + 9) >> 6) + 1) << 6);
  padded.set(bytes);
  padded[n] = 0x80;
  const dv = new DataView(padded.buffer);
  dv.setUint32(padded.length - 8, Math.floor(n / 0x20000000));
  dv.setUint32(padded.length - 4, (n << 3) >>> 0);
  const hh = new Uint32Array([0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19]);
  const w = new Uint32Array(64);
  const rotr = (x, r) => (x >>> r) | (x << (32 - r));
  for (let off = 0; off < padded.length; off += 64) {
    for (let i = 0; i < 16; i++) w[i] = dv.getUint32(off + i * 4);
    for (let i = 16; i < 64; i++) {
      const s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >>> 3);
      const s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >>> 10);
      w[i] = (w[i - 16] + s0 + w[i - 7] + s1) >>> 0;
    }
    let [a, b, c, d, e, f, g, k] = hh;
    for (let i = 0; i < 64; i++) {
      const t1 = (k + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + SHA_K[i] + w[i]) >>> 0;
      const t2 = ((rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c))) >>> 0;
      k = g; g = f; f = e; e = (d + t1) >>> 0; d = c; c = b; b = a; a = (t1 + t2) >>> 0;
    }
    hh[0] += a; hh[1] += b; hh[2] += c; hh[3] += d; hh[4] += e; hh[5] += f; hh[6] += g; hh[7] += k;
  }
  const out = new Uint8Array(32);
  const odv = new DataView(out.buffer);
  hh.forEach((v, i) => odv.setUint32(i * 4, v));
  return out;
}

// ---- start -----------------------------------------------------------------------------------

setupUpload();
ready = init().catch((e) => {
  showError(`Could not connect to the host: ${e.message}`);
  setStatus('');
  throw e;
});
ready.catch(() => {});
