// preview.js: artifact metadata and preview components, shared by the playground page and the
// MCP Apps viewer (ui://stowage/viewer, which inlines this file ahead of viewer.js).
//
// Everything here treats artifact metadata and content as hostile: strings reach the DOM through
// textContent / element properties only, never innerHTML. The playground's previews load from the
// artifact's signed download URL (`meta.url`), never from base64 inlined into the page; the viewer
// may hand in its own byte source instead (`opts.source`, see renderPreview). SVG is shown only as
// <img>, where it cannot run script; HTML is shown as text.

const JSON_CAP = 2 * 1024 * 1024;
const CSV_CAP = 256 * 1024;
const TEXT_CAP = 64 * 1024;
const CSV_ROWS = 500;
// Text-like types that have kind "other" on the gateway side but read fine as text.
const TEXTISH = /^(application\/(xml|javascript|ecmascript|x-sh|x-yaml|yaml|toml|x-toml|sql|graphql|x-ndjson|ndjson)|[a-z]+\/[a-z0-9.+-]*\+(xml|json|yaml))$/;

/** Small DOM helper: `h('div', {className: 'x', dataset: {id}}, child, 'text')`. Text children become text nodes. */
export function h(tag, props = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(props ?? {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'dataset') Object.assign(el.dataset, v);
    else if (k === 'on') for (const [ev, fn] of Object.entries(v)) el.addEventListener(ev, fn);
    else if (k in el && k !== 'list') el[k] = v;
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  append(el, children);
  return el;
}

/** Replaces an element's children, with h()'s rules (null / false / undefined are skipped; text becomes text nodes). */
export function fill(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

/** 1234567 -> "1.2 MB" (decimal units, as the gateway's limits are written). */
export function humanBytes(n) {
  if (typeof n !== 'number' || !Number.isFinite(n)) return '?';
  if (n < 1000) return `${n} B`;
  const units = ['kB', 'MB', 'GB', 'TB'];
  let v = n;
  let i = -1;
  do { v /= 1000; i++; } while (v >= 1000 && i < units.length - 1);
  return `${v.toFixed(v < 10 ? 1 : 0)} ${units[i]}`;
}

/** An RFC 3339 string as local time; the raw string when it does not parse. */
export function humanTime(s) {
  if (typeof s !== 'string' || !s) return '—';
  const d = new Date(s);
  return Number.isNaN(d.getTime()) ? s : d.toLocaleString();
}

/** The mime type without parameters, lower-cased ("Text/CSV; charset=x" -> "text/csv"). */
function baseMime(m) {
  return typeof m === 'string' ? m.split(';')[0].trim().toLowerCase() : '';
}

/** The preview kind: the gateway's `kind` when it is one we know, else guessed from the mime type. */
export function kindOf(meta) {
  const known = ['image', 'svg', 'pdf', 'audio', 'video', 'json', 'csv', 'text', 'html', 'other'];
  if (known.includes(meta?.kind)) return meta.kind;
  const m = baseMime(meta?.mime_type);
  if (m === 'image/svg+xml') return 'svg';
  if (m.startsWith('image/')) return 'image';
  if (m === 'application/pdf') return 'pdf';
  if (m.startsWith('audio/')) return 'audio';
  if (m.startsWith('video/')) return 'video';
  if (m === 'application/json' || m.endsWith('+json')) return 'json';
  if (m === 'text/csv') return 'csv';
  if (m === 'text/html') return 'html';
  if (m.startsWith('text/')) return 'text';
  return 'other';
}

/**
 * The default byte-range loader: GET `url` with `Range: bytes=start-end` (end inclusive).
 * Resolves {bytes: Uint8Array, total: number|null}. Reads no more than asked for, even from a
 * server that ignores Range (200). No credentials: the signed URL carries its own authorisation.
 */
export async function fetchRange(url, start, end) {
  const res = await fetch(url, { headers: { Range: `bytes=${start}-${end}` }, credentials: 'omit', cache: 'no-store' });
  if (res.status === 416) return { bytes: new Uint8Array(0), total: 0 };
  if (!res.ok) throw new Error(`download answered ${res.status} ${res.statusText}`);
  const cr = res.headers.get('Content-Range');
  const m = cr && /\/(\d+)\s*$/.exec(cr);
  let total = m ? Number(m[1]) : null;
  if (total === null && res.status === 200) {
    const len = Number(res.headers.get('Content-Length'));
    if (res.headers.has('Content-Length') && !res.headers.has('Content-Encoding') && Number.isFinite(len)) total = len;
  }
  const want = end - start + 1;
  const parts = [];
  let got = 0;
  const reader = res.body.getReader();
  while (got < want) {
    const { value, done } = await reader.read();
    if (done) break;
    parts.push(value);
    got += value.length;
  }
  if (got >= want) reader.cancel().catch(() => {});
  const bytes = new Uint8Array(Math.min(got, want));
  let off = 0;
  for (const p of parts) {
    const take = Math.min(p.length, bytes.length - off);
    bytes.set(p.subarray(0, take), off);
    off += take;
    if (off >= bytes.length) break;
  }
  if (total === null && res.status === 200 && got < want) total = got;
  return { bytes, total };
}

/** An artifact link the page may use: http(s) only (relative links resolve against the page); else null. */
export function safeUrl(u) {
  if (typeof u !== 'string' || !u) return null;
  try {
    const url = new URL(u, location.href);
    return url.protocol === 'http:' || url.protocol === 'https:' ? url.href : null;
  } catch {
    return null;
  }
}

/** Loads up to `cap` bytes of an artifact as text: {text, shown, total, truncated}. */
async function loadText(meta, cap, loader, url = safeUrl(meta.url)) {
  const size = typeof meta.size_bytes === 'number' ? meta.size_bytes : null;
  if (size === 0) return { text: '', shown: 0, total: 0, truncated: false };
  const end = (size === null ? cap : Math.min(cap, size)) - 1;
  const { bytes, total } = await loader(url, 0, end);
  const all = total ?? size ?? bytes.length;
  const truncated = bytes.length < all;
  // stream:true holds back a multi-byte character cut at the end instead of printing U+FFFD.
  const text = new TextDecoder('utf-8').decode(bytes, { stream: truncated });
  return { text, shown: bytes.length, total: all, truncated };
}

function note(text, cls = 'note') {
  return h('p', { className: cls }, text);
}

function textBlock(text, info, extraNote) {
  return h('div', { className: 'preview-text' },
    extraNote ? note(extraNote, 'note warn') : null,
    info.truncated
      ? note(`Showing the first ${info.shown.toLocaleString()} of ${info.total.toLocaleString()} bytes.`)
      : note(`${info.total.toLocaleString()} bytes.`, 'note muted'),
    h('pre', { className: 'mono' }, text));
}

/**
 * A preview for one artifact, loaded from `meta.url`. Returns the container at once and fills it
 * when the content arrives; `container.ready` is a promise that settles then.
 * `opts.fetchRange(url, start, endInclusive)` replaces the default loader (same result shape).
 * `opts.source` (the MCP Apps viewer) replaces `meta.url` altogether:
 *   {url: () => Promise<string>   a URL an <img>, <audio> or <video> may load (a blob: URL, or the signed link),
 *    fetchRange: (start, endInclusive) => Promise<{bytes, total}>   bytes for the text-like previews}
 * and may carry more for `opts.renderPdf(meta, source)`, which then draws a PDF instead of the
 * frame: it returns an element whose `ready` promise settles when the first page is drawn.
 */
export function renderPreview(meta, opts = {}) {
  const source = opts.source ?? null;
  const loader = source ? (_url, start, end) => source.fetchRange(start, end) : (opts.fetchRange ?? fetchRange);
  const kind = kindOf(meta);
  const box = h('div', { className: `preview preview-${kind}`, dataset: { kind, testid: 'artifact-preview' } });
  const label = meta.name || meta.id || 'artifact';
  const url = safeUrl(meta.url);
  // Runs `use` with the URL media elements load: at once with the signed link, or when the source has one.
  const withUrl = (use) => (source ? source.url().then(use) : use(url));

  if (!url && !source) {
    box.append(note('No preview: download links are off on this gateway, so the artifact has no URL.', 'note muted'));
    box.dataset.state = 'none';
    box.ready = Promise.resolve();
    return box;
  }
  const done = (p) => {
    box.ready = p.then(() => { box.dataset.state = 'ready'; },
      (err) => { box.dataset.state = 'error'; box.replaceChildren(note(`Preview failed: ${err.message}`, 'note error-text')); });
  };

  switch (kind) {
    case 'image':
    case 'svg': {
      // SVG as <img> only: an image document runs no script and loads nothing else.
      const img = h('img', { className: 'preview-img', alt: label, referrerPolicy: 'no-referrer', decoding: 'async' });
      img.addEventListener('click', () => img.classList.toggle('zoomed'));
      done(withUrl((src) => new Promise((resolve, reject) => {
        img.addEventListener('load', resolve, { once: true });
        img.addEventListener('error', () => reject(new Error('the image did not load')), { once: true });
        img.src = src;
      })));
      box.append(img);
      if (kind === 'svg') box.append(note('SVG shown as an image: its scripts and links do nothing.', 'note muted'));
      return box;
    }
    case 'pdf': {
      // Only a real application/pdf goes into a frame. No sandbox attribute: Chromium will not show a PDF in a
      // sandboxed frame; the download route sends its own restrictive headers instead.
      if (baseMime(meta.mime_type) !== 'application/pdf') break;
      if (opts.renderPdf) {
        const view = opts.renderPdf(meta, source);
        done(view.ready);
        box.append(view);
        return box;
      }
      const frame = h('iframe', { className: 'pdf-frame', title: label, referrerPolicy: 'no-referrer' });
      done(new Promise((resolve) => frame.addEventListener('load', resolve, { once: true })));
      frame.src = url;
      box.append(frame);
      return box;
    }
    case 'audio':
    case 'video': {
      const media = h(kind, { controls: true, preload: 'metadata', className: `preview-${kind}` });
      done(withUrl((src) => new Promise((resolve, reject) => {
        media.addEventListener('loadedmetadata', resolve, { once: true });
        media.addEventListener('error', () => reject(new Error(`the ${kind} did not load`)), { once: true });
        media.src = src;
      })));
      box.append(media);
      return box;
    }
    case 'json': {
      done(loadText(meta, JSON_CAP, loader, url).then((info) => {
        if (info.truncated) {
          box.append(textBlock(info.text, info, 'Too big to show as a tree; shown as text.'));
          return;
        }
        let value;
        try {
          value = JSON.parse(info.text);
        } catch (e) {
          box.append(textBlock(info.text, info, `Not valid JSON (${e.message}); shown as text.`));
          return;
        }
        box.append(note(`${info.total.toLocaleString()} bytes.`, 'note muted'), renderJsonTree(value, { openDepth: 2 }));
      }));
      return box;
    }
    case 'csv': {
      done(loadText(meta, CSV_CAP, loader, url).then((info) => {
        const table = renderCsvTable(info.text, CSV_ROWS, { dropLastLine: info.truncated });
        if (info.truncated) box.append(note(`Read the first ${info.shown.toLocaleString()} of ${info.total.toLocaleString()} bytes.`));
        box.append(table);
      }));
      return box;
    }
    case 'html':
    case 'text':
      done(loadText(meta, TEXT_CAP, loader, url).then((info) => {
        box.append(textBlock(info.text, info, kind === 'html' ? 'HTML is never rendered here: shown as text.' : null));
      }));
      return box;
    default:
      if (TEXTISH.test(baseMime(meta.mime_type))) {
        done(loadText(meta, TEXT_CAP, loader, url).then((info) => box.append(textBlock(info.text, info))));
        return box;
      }
  }
  box.append(note(opts.noPreviewNote ?? 'No preview for this type; use the download link.', 'note muted'));
  box.dataset.state = 'none';
  box.ready = Promise.resolve();
  return box;
}

/**
 * The metadata of an artifact as a definition list with a Download link and, when `opts.fresh`
 * is given (`async (id) => meta`), a "Fresh link" button that fetches a new signed URL and copies it.
 * `opts.downloadLink: false` leaves the link out (the viewer saves through its host instead and
 * adds its own buttons to `box.actions`).
 */
export function renderMetadata(meta, opts = {}) {
  const box = h('div', { className: 'meta', dataset: { testid: 'artifact-meta', id: meta.id ?? '' } });
  const dl = h('dl', { className: 'meta-list' });
  const row = (k, v, cls) => dl.append(h('dt', {}, k), h('dd', { className: cls }, v));
  const name = h('span', { className: 'artifact-name' }, meta.name ?? '(unnamed)');
  box.append(h('h3', { className: 'meta-title' }, name));
  row('id', meta.id ?? '—', 'mono');
  if (meta.uri) row('uri', meta.uri, 'mono');
  row('type', `${meta.mime_type ?? '?'} (${kindOf(meta)})`);
  row('size', h('span', { title: `${meta.size_bytes} bytes` }, `${humanBytes(meta.size_bytes)} (${Number(meta.size_bytes ?? 0).toLocaleString()} bytes)`));
  if (meta.width && meta.height) row('dimensions', `${meta.width} × ${meta.height}`);
  row('sha256', h('span', { dataset: { testid: 'artifact-sha256' } }, meta.sha256 ?? '—'), 'mono hash');
  row('created', h('time', { title: meta.created_at ?? '' }, humanTime(meta.created_at)));
  row('expires', meta.expires_at ? h('time', { title: meta.expires_at }, humanTime(meta.expires_at)) : 'never');
  row('session', meta.session ?? '—', 'mono');
  box.append(dl);

  const actions = h('div', { className: 'meta-actions' });
  const linkOut = h('div', { className: 'fresh-link', hidden: true });
  const url = safeUrl(meta.url);
  if (opts.downloadLink === false) {
    // The caller puts its own actions here.
  } else if (url) {
    // The `download` attribute keeps the page where it is. Browsers ignore it for another origin
    // (links.public_url), so such a link opens in a new tab rather than replacing the page.
    const a = h('a', { className: 'button', href: url, download: meta.name || meta.id || 'artifact', rel: 'noopener noreferrer', dataset: { testid: 'artifact-download' } }, 'Download');
    if (new URL(url).origin !== location.origin) a.target = '_blank';
    actions.append(a);
    if (meta.url_expires_at) actions.append(h('span', { className: 'muted small' }, `link valid until ${humanTime(meta.url_expires_at)}`));
    box.linkEl = a;
  } else {
    actions.append(h('span', { className: 'muted' }, 'Download links are off on this gateway.'));
  }
  if (opts.fresh && meta.id) {
    const btn = h('button', { type: 'button', dataset: { testid: 'artifact-fresh' } }, 'Fresh link');
    btn.addEventListener('click', async () => {
      btn.disabled = true;
      linkOut.hidden = false;
      linkOut.replaceChildren(h('span', { className: 'muted' }, 'asking…'));
      try {
        const fresh = await opts.fresh(meta.id);
        const freshUrl = safeUrl(fresh?.url);
        if (!freshUrl) {
          linkOut.replaceChildren(h('span', { className: 'muted' }, 'Links are off: no URL.'));
          return;
        }
        if (box.linkEl) box.linkEl.href = freshUrl;
        const input = h('input', { type: 'text', readOnly: true, value: freshUrl, className: 'mono', spellcheck: false });
        input.addEventListener('focus', () => input.select());
        const status = h('span', { className: 'muted small' });
        linkOut.replaceChildren(input, status);
        try {
          await navigator.clipboard.writeText(freshUrl);
          status.textContent = 'copied';
        } catch {
          status.textContent = 'select and copy';
        }
        if (fresh.url_expires_at) status.textContent += ` · valid until ${humanTime(fresh.url_expires_at)}`;
      } catch (e) {
        linkOut.replaceChildren(h('span', { className: 'error-text' }, e.message));
      } finally {
        btn.disabled = false;
      }
    });
    actions.append(btn);
  }
  box.append(actions, linkOut);
  box.actions = actions;
  return box;
}

/** Metadata and preview together, as one card. `opts` goes to both. */
export function renderArtifact(meta, opts = {}) {
  const card = h('article', { className: 'artifact-card', dataset: { id: meta.id ?? '', kind: kindOf(meta) } });
  const preview = renderPreview(meta, opts);
  const metadata = renderMetadata(meta, opts);
  card.append(metadata, preview);
  card.ready = preview.ready;
  card.actions = metadata.actions;
  return card;
}

// ---- JSON tree ------------------------------------------------------------------------------

const TREE_CHILDREN = 1000; // children shown per object/array before "… N more"
const TREE_STRING = 20000;  // characters shown per string before it is cut

/**
 * A collapsible tree of a JSON value from nested <details>/<summary>. Nodes deeper than
 * `opts.openDepth` (default 1) start closed and build their children only when first opened,
 * so a large document costs little until it is explored.
 */
export function renderJsonTree(value, opts = {}) {
  const openDepth = opts.openDepth ?? 1;
  const root = h('div', { className: 'json-tree mono', dataset: { testid: 'json-tree' } });
  root.append(jsonNode(value, 0, openDepth));
  return root;
}

function jsonScalar(v) {
  if (v === null) return h('span', { className: 'j-null' }, 'null');
  switch (typeof v) {
    case 'string': {
      const s = v.length > TREE_STRING ? v.slice(0, TREE_STRING) : v;
      const span = h('span', { className: 'j-str' }, JSON.stringify(s));
      if (s !== v) span.append(h('span', { className: 'muted' }, ` … ${(v.length - TREE_STRING).toLocaleString()} more characters`));
      return span;
    }
    case 'number': return h('span', { className: 'j-num' }, String(v));
    case 'boolean': return h('span', { className: 'j-bool' }, String(v));
    default: return h('span', {}, String(v));
  }
}

function jsonNode(v, depth, openDepth) {
  if (v === null || typeof v !== 'object') return jsonScalar(v);
  const isArr = Array.isArray(v);
  const keys = isArr ? null : Object.keys(v);
  const n = isArr ? v.length : keys.length;
  if (n === 0) return h('span', { className: 'j-empty' }, isArr ? '[]' : '{}');
  const det = h('details', { className: 'j-node' });
  det.append(h('summary', {}, h('span', { className: 'j-brace' }, isArr ? '[' : '{'),
    h('span', { className: 'muted' }, ` ${n} ${isArr ? (n === 1 ? 'item' : 'items') : (n === 1 ? 'key' : 'keys')} `),
    h('span', { className: 'j-brace' }, isArr ? ']' : '}')));
  let built = false;
  const build = () => {
    if (built) return;
    built = true;
    const body = h('div', { className: 'j-children' });
    const shown = Math.min(n, TREE_CHILDREN);
    for (let i = 0; i < shown; i++) {
      const key = isArr ? i : keys[i];
      const child = isArr ? v[i] : v[key];
      body.append(h('div', { className: 'j-entry' },
        h('span', { className: isArr ? 'j-idx' : 'j-key' }, isArr ? `${key}` : JSON.stringify(key)), ': ',
        jsonNode(child, depth + 1, openDepth)));
    }
    if (n > shown) body.append(h('div', { className: 'muted' }, `… ${(n - shown).toLocaleString()} more`));
    det.append(body);
  };
  if (depth < openDepth) {
    det.open = true;
    build();
  } else {
    det.addEventListener('toggle', () => { if (det.open) build(); });
  }
  return det;
}

// ---- CSV ------------------------------------------------------------------------------------

/**
 * Parses CSV (RFC 4180: quoted fields with "" escapes, commas, CRLF / LF / CR line ends) into
 * at most `maxRows` rows. Returns {rows, more}: `more` is true when rows were left unread.
 */
export function parseCsv(text, maxRows = Infinity) {
  const rows = [];
  let row = [];
  let field = '';
  let i = 0;
  let quoted = false;
  const n = text.length;
  const endRow = () => { row.push(field); rows.push(row); row = []; field = ''; };
  while (i < n) {
    const c = text[i];
    if (quoted) {
      if (c === '"') {
        if (text[i + 1] === '"') { field += '"'; i += 2; continue; }
        quoted = false; i++; continue;
      }
      field += c; i++; continue;
    }
    if (c === '"' && field === '') { quoted = true; i++; continue; }
    if (c === ',') { row.push(field); field = ''; i++; continue; }
    if (c === '\r' || c === '\n') {
      endRow();
      i += (c === '\r' && text[i + 1] === '\n') ? 2 : 1;
      if (rows.length >= maxRows) return { rows, more: i < n };
      continue;
    }
    field += c; i++;
  }
  if (field !== '' || row.length > 0) endRow();
  return { rows, more: false };
}

/**
 * A <table> of the first `maxRows` data rows of CSV text; the first row is the header.
 * `opts.dropLastLine`: the text was cut mid-file, so its last line may be partial; leave it out.
 */
export function renderCsvTable(text, maxRows = CSV_ROWS, opts = {}) {
  let { rows, more } = parseCsv(text, maxRows + 2);
  if (opts.dropLastLine && !more && rows.length > 1) rows = rows.slice(0, -1);
  const box = h('div', { className: 'csv' });
  if (rows.length === 0) {
    box.append(note('Empty CSV.', 'note muted'));
    return box;
  }
  const [head, ...data] = rows;
  const shown = data.slice(0, maxRows);
  const cut = more || data.length > maxRows || opts.dropLastLine;
  box.append(note(cut ? `Showing the first ${shown.length.toLocaleString()} rows.` : `${shown.length.toLocaleString()} rows.`, 'note muted'));
  const table = h('table', { className: 'grid-table csv-table', dataset: { testid: 'csv-table' } });
  table.append(h('thead', {}, h('tr', {}, head.map((c) => h('th', {}, c)))));
  const tbody = h('tbody');
  for (const r of shown) tbody.append(h('tr', {}, r.map((c) => h('td', {}, c))));
  table.append(tbody);
  box.append(h('div', { className: 'table-wrap' }, table));
  return box;
}
