// host.js: a test host for MCP Apps views, on the SDK's own host side (AppBridge from
// @modelcontextprotocol/ext-apps). apps_browser.py bundles it with esbuild at test time and serves
// it with host.html on a fake origin through Playwright's page.route.
//
// It renders a view the way web hosts do: a sandboxed iframe (allow-scripts only: an opaque origin,
// no same-origin access to this page) whose document is the resource's HTML with a CSP <meta>
// built from the resource's _meta.ui.csp. It answers the view's tools/call through
// window.__stowageCall (a Playwright binding that calls the real gateway with the Python MCP
// client), tells the view what it applied (hostCapabilities.sandbox.csp), and records what the view
// asks of it (model context, messages, downloads, links, sizes) in window.__hostLog.
import { AppBridge, PostMessageTransport } from '@modelcontextprotocol/ext-apps/app-bridge';

// The SDK logs every message at debug level; a console that keeps 1 MiB chunks alive helps no one.
console.debug = () => {};

const hostLog = [];
const strayMessages = [];
window.__hostLog = hostLog;
window.__strayMessages = strayMessages;

function record(kind, params) {
  hostLog.push({ kind, params, at: Date.now() });
}

// Every message this page receives that is not JSON-RPC 2.0: a payload that ran in the view and
// posted to its parent would land here.
window.addEventListener('message', (event) => {
  const d = event.data;
  if (d && typeof d === 'object' && d.jsonrpc === '2.0') return;
  let text;
  try {
    text = typeof d === 'string' ? d : JSON.stringify(d);
  } catch {
    text = String(d);
  }
  strayMessages.push(String(text).slice(0, 500));
});

/**
 * The CSP a host applies to a view, from the domains it approved (MCP Apps 2026-01-26: default
 * 'none', inline script and style, declared origins for connect and resources, no frames or
 * objects). `blob` adds blob: to img-src and media-src, as hosts that let views show bytes they
 * fetched do; without it the policy is the spec's restrictive default (data: only). Nothing more
 * for pdf.js: it runs as inline module scripts (script-src 'unsafe-inline'), its worker on the
 * view's own thread (no worker-src), without WebAssembly (no 'wasm-unsafe-eval'), and it loads
 * embedded fonts from bytes with the FontFace API (no font-src).
 */
export function buildCsp(csp, { blob = true } = {}) {
  const resources = (csp.resourceDomains ?? []).join(' ');
  const connect = csp.connectDomains?.length ? csp.connectDomains.join(' ') : "'none'";
  const local = blob ? 'blob: data:' : 'data:';
  return [
    "default-src 'none'",
    `script-src 'unsafe-inline' ${resources}`,
    `style-src 'unsafe-inline' ${resources}`,
    `img-src ${local} ${resources}`,
    `media-src ${local} ${resources}`,
    `connect-src ${connect}`,
    "frame-src 'none'",
    "object-src 'none'",
    "base-uri 'none'",
    "form-action 'none'",
  ].map((d) => d.trim()).join('; ');
}

function injectCsp(html, policy) {
  const meta = `<meta http-equiv="Content-Security-Policy" content="${policy.replace(/&/g, '&amp;').replace(/"/g, '&quot;')}">`;
  const head = /<head(\s[^>]*)?>/i;
  return head.test(html) ? html.replace(head, (m) => m + meta) : meta + html;
}

let current = null;

async function unmount() {
  if (!current) return;
  const { bridge, iframe } = current;
  current = null;
  try {
    await Promise.race([bridge.teardownResource({}), new Promise((r) => setTimeout(r, 2000))]);
  } catch {
    // A view that cannot answer is removed all the same.
  }
  await bridge.close().catch(() => {});
  iframe.remove();
}

/**
 * Renders a view. cfg: {html, csp: {connectDomains, resourceDomains} (what the host approves),
 * theme, blob, hostCapabilities (overrides)}. Resolves once the view has sent initialized.
 */
async function mount(cfg) {
  await unmount();
  const applied = {
    connectDomains: [...(cfg.csp?.connectDomains ?? [])],
    resourceDomains: [...(cfg.csp?.resourceDomains ?? [])],
  };
  const policy = buildCsp(applied, { blob: cfg.blob !== false });
  const caps = {
    openLinks: {},
    downloadFile: {},
    serverTools: {},
    updateModelContext: { text: {} },
    message: { text: {} },
    sandbox: { csp: applied },
    ...(cfg.hostCapabilities ?? {}),
  };
  // A null override takes the capability away.
  for (const [k, v] of Object.entries(caps)) if (v === null) delete caps[k];
  const iframe = document.createElement('iframe');
  iframe.setAttribute('sandbox', 'allow-scripts');
  iframe.title = 'MCP App view';
  iframe.id = 'view';
  document.getElementById('stage').replaceChildren(iframe);

  const bridge = new AppBridge(null, { name: 'stowage-test-host', version: '1.0.0' }, caps, {
    hostContext: {
      theme: cfg.theme ?? 'light',
      displayMode: 'inline',
      availableDisplayModes: ['inline'],
      platform: 'web',
      locale: 'en-US',
      containerDimensions: { width: 900, maxHeight: 6000 },
    },
  });
  bridge.oncalltool = async (params) => {
    const started = Date.now();
    try {
      return await window.__stowageCall(params.name, params.arguments ?? {});
    } finally {
      record('tools/call', { name: params.name, ms: Date.now() - started });
    }
  };
  bridge.onupdatemodelcontext = async (params) => {
    record('update-model-context', params);
    return {};
  };
  bridge.onmessage = async (params) => {
    record('message', params);
    return {};
  };
  bridge.ondownloadfile = async (params) => {
    record('download-file', params);
    return {};
  };
  bridge.onopenlink = async (params) => {
    record('open-link', params);
    return {};
  };
  bridge.addEventListener('sizechange', (params) => {
    record('size-changed', params);
    if (typeof params.height === 'number') iframe.style.height = `${params.height}px`;
  });
  const initialized = new Promise((resolve) => bridge.addEventListener('initialized', resolve));

  // Listen before the document exists, so the view's first message (ui/initialize) is heard.
  await bridge.connect(new PostMessageTransport(iframe.contentWindow, iframe.contentWindow));
  iframe.srcdoc = injectCsp(cfg.html, policy);
  await initialized;
  current = { bridge, iframe };
  record('initialized', { policy });
  return { policy, hostCapabilities: caps };
}

/** Delivers a tool call's input and result to the view, as a host does after the call returns. */
async function deliver(args, result) {
  if (!current) throw new Error('no view is mounted');
  const at = Date.now();
  await current.bridge.sendToolInput({ arguments: args ?? {} });
  await current.bridge.sendToolResult(result);
  return at;
}

function setTheme(theme) {
  current?.bridge.setHostContext({ theme });
}

window.__stowageHost = { mount, unmount, deliver, setTheme, buildCsp };
window.__hostReady = true;
