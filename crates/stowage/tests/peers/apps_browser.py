"""Drives Stowage's MCP Apps view (ui://stowage/viewer) in a real browser (Debian's Chromium
through Playwright) inside a test host built on the SDK's own host side (AppBridge from
@modelcontextprotocol/ext-apps, tests/peers/apps_host/), against a running `stowage serve`.

The host renders the view as web hosts do: a sandboxed iframe (allow-scripts, opaque origin) with a
CSP <meta> built from the domains the host approves, and proxies the view's tools/call to the
gateway through the official Python MCP client (declaring the io.modelcontextprotocol/ui
extension), in the same asyncio loop as Playwright.

Steps: the chunk path (connect-src 'none'): an image, a PDF page drawn by pdf.js, a CSV table, a
JSON tree, page navigation, Save; a 5 MB upload through the view's file input (its sha256 checked
by fetching it back, its reference in the host's model context); the link path (the links origin
approved): the same artifacts from signed links, an upload by PUT, the host's theme; a host
without downloadFile / updateModelContext (ui/open-link, ui/message instead); hostile SVG,
HTML and filename under the spec's restrictive CSP (data: only, no blob:): nothing runs; timing of
a 10 MB image by chunks and by link; the view's size. Screenshots go to out/apps-<n>-<what>.png.

Usage: apps_browser.py CONFIG.json
CONFIG: {"mcp": "http://127.0.0.1:PORT/mcp", "out": dir, "chromium": path,
         "ids": {"image", "pdf", "csv", "big_image", "json"?, "audio"?, "video"?}, "hostile": [{"id", "kind", "name"?}],
         "links_origin": "http://127.0.0.1:PORT",
         "node_modules"? (default $STOWAGE_PEERS_DIR/node_modules, else target/peers/node_modules above here),
         "timing_runs"? (default 3), "chunk_budget_ms"?, "link_budget_ms"? (enforced only when given)}
Prints ONE JSON line: {"ok": true, "chunk_ms": N, "link_ms": N, "view_bytes": N, "steps": [...]}
or {"ok": false, "error": "...", ...} (exit 1, after saving out/apps-failure.png).
"""
import asyncio
import base64
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path

from mcp import Client
from mcp.client import advertise
from playwright.async_api import async_playwright

EXT = "io.modelcontextprotocol/ui"
APP_MIME = "text/html;profile=mcp-app"
VIEW_URI = "ui://stowage/viewer"
HOST_ORIGIN = "https://apps-host.test"  # a secure context, as real hosts are (WebCrypto needs one)
HERE = Path(__file__).resolve().parent
TIMEOUT = 30_000  # ms, for every explicit wait
VIEW_LIMIT = 300 * 1024  # bytes: the budget for the view's HTML (pdf.js excluded, it loads lazily)
UPLOAD_BYTES = 5 * 1000 * 1000
CHUNK = 1024 * 1024
FETCH = 512 * 1024  # artifact_fetch's cap
# Every wait_for_function predicate is an arrow function: Playwright evaluates a bare string with
# eval() in the frame, which the view's CSP (no 'unsafe-eval') refuses.

ACTIVE_ELEMENTS = "script, iframe, object, embed, svg, frame, link, meta, base, form"


class StepFailed(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise StepFailed(msg)


def dump(result):
    return result.model_dump(by_alias=True, mode="json", exclude_none=True)


def attr(v):
    return json.dumps(str(v))


def node_modules(cfg):
    if cfg.get("node_modules"):
        return Path(cfg["node_modules"])
    if os.environ.get("STOWAGE_PEERS_DIR"):
        return Path(os.environ["STOWAGE_PEERS_DIR"]) / "node_modules"
    for d in [HERE, *HERE.parents]:
        if (d / "target" / "peers" / "node_modules").is_dir():
            return d / "target" / "peers" / "node_modules"
    raise StepFailed("no node_modules with the apps host's packages: run scripts/browser-peers.sh")


def bundle_host(cfg, tmp):
    """host.js + AppBridge into one browser module, with the esbuild that browser-peers.sh installed."""
    nm = node_modules(cfg)
    esbuild = nm / ".bin" / "esbuild"
    check(esbuild.exists(), f"{esbuild} is missing: run scripts/browser-peers.sh")
    out = Path(tmp) / "host.bundle.js"
    proc = subprocess.run(
        [str(esbuild), str(HERE / "apps_host" / "host.js"), "--bundle", "--format=esm", "--platform=browser",
         "--target=chrome120", f"--outfile={out}", "--log-level=warning"],
        env={**os.environ, "NODE_PATH": str(nm)}, capture_output=True, text=True, timeout=120)
    check(proc.returncode == 0, f"esbuild failed: {proc.stderr[-2000:]}")
    return out.read_bytes()


class Run:
    def __init__(self, cfg, client, page):
        self.cfg = cfg
        self.client = client
        self.page = page
        self.out = Path(cfg["out"])
        self.links = cfg["links_origin"].rstrip("/")
        self.problems = []  # console errors, page errors, dialogs: each fails the run
        self.steps = []
        self.html = None
        self.view_meta = None
        self.frame = None
        self.calls = 0
        page.on("console", lambda m: self.problems.append(f"console error: {m.text}") if m.type == "error" else None)
        page.on("pageerror", lambda e: self.problems.append(f"page error: {e}"))

        async def on_dialog(d):
            self.problems.append(f"dialog ({d.type}): {d.message}")
            await d.dismiss()
        page.on("dialog", on_dialog)

    # ---- helpers ----

    async def call(self, name, args):
        """The host's tools/call proxy: the real gateway through the Python MCP client."""
        self.calls += 1
        return dump(await self.client.call_tool(name, args))

    def clean(self, where):
        if self.problems:
            raise StepFailed(f"{where}: " + " | ".join(self.problems[:6]))

    async def shot(self, n, what):
        # A viewport as tall as the page: Chromium paints an out-of-process frame only where it is
        # on screen, so a full-page capture of a tall view would come out cut.
        height = await self.page.evaluate("() => Math.ceil(document.documentElement.scrollHeight)")
        await self.page.set_viewport_size({"width": 960, "height": max(900, min(height + 20, 8000))})
        await self.page.wait_for_timeout(150)
        await self.page.screenshot(path=str(self.out / f"apps-{n}-{what}.png"), full_page=True)
        await self.page.set_viewport_size({"width": 960, "height": 900})

    async def view_result(self, ids):
        r = await self.call("artifact_view", {"ids": ids})
        check(not r.get("isError"), f"artifact_view {ids} failed: {r}")
        return r

    async def mount(self, csp, theme="light", blob=True, caps=None):
        info = await self.page.evaluate("(cfg) => window.__stowageHost.mount(cfg)",
                                        {"html": self.html, "csp": csp, "theme": theme, "blob": blob, "hostCapabilities": caps or {}})
        handle = await self.page.wait_for_selector("#stage iframe", state="attached")
        self.frame = await handle.content_frame()
        check(self.frame is not None, "the view's frame is not there")
        await self.frame.wait_for_function("() => document.getElementById('viewer-status')?.textContent.startsWith('waiting')", timeout=TIMEOUT)
        return info

    async def deliver(self, ids, result=None):
        """Sends the tool input ({"ids": ids}, or `ids` itself when it is a dict) and the result."""
        result = result or await self.view_result(ids)
        args = ids if isinstance(ids, dict) else {"ids": ids}
        return await self.page.evaluate("([args, result]) => window.__stowageHost.deliver(args, result)", [args, result])

    def card(self, art_id):
        return f"[data-testid=viewer-artifact][data-id={attr(art_id)}]"

    async def wait_image(self, art_id):
        sel = f"{self.card(art_id)} [data-testid=viewer-image]"
        try:
            await self.frame.wait_for_function(
                """(sel) => { const i = document.querySelector(sel); return i && i.complete && i.naturalWidth > 0; }""",
                arg=sel, timeout=TIMEOUT)
        except Exception:
            raise StepFailed(f"the image {art_id} did not render: {await self.card_text(art_id)}")
        return await self.frame.eval_on_selector(sel, "(i) => ({w: i.naturalWidth, h: i.naturalHeight, scheme: i.src.split(':')[0]})")

    async def wait_pdf(self, art_id, page_no=1):
        sel = f"{self.card(art_id)} [data-testid=pdf-canvas]"
        try:
            await self.frame.wait_for_function(
                "([sel, n]) => document.querySelector(sel)?.dataset.page === String(n)", arg=[sel, page_no], timeout=TIMEOUT)
        except Exception:
            raise StepFailed(f"PDF page {page_no} of {art_id} was not drawn: {await self.card_text(art_id)}")
        # Drawn pixels: a blank canvas is all white (or all transparent).
        stats = await self.frame.eval_on_selector(sel, """(c) => {
            const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
            let ink = 0, colored = 0;
            for (let i = 0; i < d.length; i += 4) {
              if (d[i + 3] > 0 && (d[i] < 200 || d[i + 1] < 200 || d[i + 2] < 200)) ink++;
              if (d[i + 3] > 0 && Math.abs(d[i] - d[i + 2]) > 60) colored++;
            }
            return {w: c.width, h: c.height, ink, colored, pages: Number(c.dataset.pages)};
        }""")
        check(stats["ink"] > 200, f"the PDF canvas looks blank: {stats}")
        return stats

    async def card_text(self, art_id):
        """What an artifact's card says (its preview's error, say), for a failure message."""
        text = await self.frame.evaluate(
            "(sel) => document.querySelector(sel)?.querySelector('[data-testid=artifact-preview]')?.textContent ?? 'no such card'",
            self.card(art_id))
        return text[:400]

    async def wait_csv(self, art_id):
        sel = f"{self.card(art_id)} [data-testid=csv-table]"
        try:
            await self.frame.wait_for_selector(sel, state="attached", timeout=TIMEOUT)
        except Exception:
            raise StepFailed(f"the CSV {art_id} is not shown as a table: {await self.card_text(art_id)}")
        return await self.frame.eval_on_selector(sel, "(t) => ({rows: t.tBodies[0].rows.length, head: [...t.tHead.rows[0].cells].map((c) => c.textContent)})")

    async def paths(self):
        return await self.frame.eval_on_selector_all("[data-testid=viewer-artifact]", "(els) => els.map((e) => [e.dataset.id, e.querySelector('[data-testid=viewer-path]')?.dataset.path])")

    async def host_log(self, kind):
        return await self.page.evaluate("(k) => window.__hostLog.filter((e) => e.kind === k)", kind)

    async def fetch_back(self, art_id):
        """An artifact's bytes through artifact_fetch, as a client would read it."""
        data = bytearray()
        while True:
            r = await self.call("artifact_fetch", {"id": art_id, "offset": len(data), "length": FETCH})
            check(not r.get("isError"), f"artifact_fetch {art_id} failed: {r}")
            sc = r["structuredContent"]
            data += base64.b64decode(sc["data"])
            if sc["eof"]:
                return bytes(data), sc["total"]

    async def upload(self, name, mime, payload):
        status = "[data-testid=viewer-upload-status]"
        await self.frame.set_input_files("[data-testid=viewer-upload-input]", files=[{"name": name, "mimeType": mime, "buffer": payload}])
        await self.frame.wait_for_selector(f"{status}[data-state=done], {status}[data-state=error]", state="attached", timeout=60_000)
        state = await self.frame.get_attribute(status, "data-state")
        text = await self.frame.text_content(status)
        check(state == "done", f"the upload of {name} failed in the view: {text}")
        uri = await self.frame.get_attribute(status, "data-uri")
        path = await self.frame.get_attribute(status, "data-path")
        check(uri and uri.startswith("artifact://"), f"no artifact:// reference after the upload: {uri!r}")
        got, total = await self.fetch_back(uri)
        want = hashlib.sha256(payload).hexdigest()
        check(total == len(payload) and hashlib.sha256(got).hexdigest() == want,
              f"the uploaded {name} ({total} B) does not hash to the file's {want}")
        contexts = await self.host_log("update-model-context")
        check(any(uri in json.dumps(c["params"]) for c in contexts), f"{uri} did not reach the model context: {contexts[-1:] }")
        last = contexts[-1]["params"]
        check(any(b.get("type") == "text" and uri in b.get("text", "") and name in b.get("text", "") for b in last.get("content", [])),
              f"the model context does not name {name} and {uri}: {last}")
        art_id = (await self.view_result([uri]))["structuredContent"]["artifacts"][0]["id"]
        await self.frame.wait_for_selector(self.card(art_id), state="attached", timeout=TIMEOUT)
        return {"uri": uri, "bytes": total, "sha256": want, "path": path}

    async def big_image_ms(self, csp, runs):
        """Time from delivering the tool result to the 10 MB image's load event in the view."""
        big = self.cfg["ids"]["big_image"]
        times = []
        for _ in range(runs):
            await self.mount(csp)
            result = await self.view_result([big])
            await self.frame.evaluate("""() => { window.__loadedAt = null;
                document.addEventListener('load', (e) => {
                  if (e.target.dataset?.testid === 'viewer-image' && e.target.naturalWidth > 0) window.__loadedAt ??= Date.now();
                }, true); }""")
            sent = await self.deliver([big], result)
            await self.frame.wait_for_function("() => window.__loadedAt !== null", timeout=TIMEOUT)
            loaded = await self.frame.evaluate("() => window.__loadedAt")
            times.append(loaded - sent)
        return times

    # ---- steps ----

    async def step1_resource(self):
        caps = self.client.server_capabilities
        exts = (caps.extensions or {}) if hasattr(caps, "extensions") else {}
        check(EXT in exts, f"the server does not declare {EXT}: {caps}")
        r = dump(await self.client.read_resource(VIEW_URI))
        c = r["contents"][0]
        check(c.get("mimeType") == APP_MIME, f"the view's mimeType is {c.get('mimeType')}")
        self.html = c["text"]
        self.view_meta = (c.get("_meta") or {}).get("ui") or {}
        size = len(self.html.encode())
        check(size <= VIEW_LIMIT, f"the view is {size} bytes, over {VIEW_LIMIT}")
        return {"view_bytes": size, "csp": self.view_meta.get("csp")}

    async def step2_chunks(self):
        ids = self.cfg["ids"]
        shown = [ids["image"], ids["pdf"], ids["csv"]] + [ids[k] for k in ("json", "audio", "video") if ids.get(k)]
        info = await self.mount({})
        check("connect-src 'none'" in info["policy"], f"the chunk render's CSP allows connections: {info['policy']}")
        await self.deliver(shown)
        img = await self.wait_image(ids["image"])
        pdf = await self.wait_pdf(ids["pdf"])
        csv = await self.wait_csv(ids["csv"])
        check(csv["rows"] >= 1 and len(csv["head"]) >= 1, f"the CSV table is empty: {csv}")
        if ids.get("json"):
            await self.frame.wait_for_selector(f"{self.card(ids['json'])} [data-testid=json-tree]", state="attached", timeout=TIMEOUT)
        for kind in ("audio", "video"):
            if ids.get(kind):
                sel = f"{self.card(ids[kind])} {kind}"
                try:
                    await self.frame.wait_for_function("(sel) => document.querySelector(sel)?.readyState >= 1", arg=sel, timeout=TIMEOUT)
                except Exception:
                    raise StepFailed(f"the {kind} player did not load: {await self.card_text(ids[kind])}")
        paths = await self.paths()
        check(all(p == "chunks" for _, p in paths), f"not every artifact came by chunks: {paths}")
        check(img["scheme"] in ("blob", "data"), f"the image was loaded from {img['scheme']}: URL under connect-src 'none'")
        await self.shot(1, "chunks")
        if pdf["pages"] > 1:
            await self.frame.click(f"{self.card(ids['pdf'])} [data-testid=pdf-next]")
            await self.wait_pdf(ids["pdf"], 2)
            label = await self.frame.text_content(f"{self.card(ids['pdf'])} [data-testid=pdf-page-label]")
            check(label.strip() == f"page 2 of {pdf['pages']}", f"the page label says {label!r}")
        # Save: the host gets a resource_link to a fresh signed link.
        await self.frame.click(f"{self.card(ids['image'])} [data-testid=viewer-save]")
        await self.page.wait_for_function("() => window.__hostLog.some((e) => e.kind === 'download-file')", timeout=TIMEOUT)
        dl = (await self.host_log("download-file"))[-1]["params"]["contents"][0]
        check(dl.get("type") == "resource_link" and dl.get("uri", "").startswith(self.links + "/"),
              f"Save did not hand the host a signed link on {self.links}: {dl}")
        sizes = await self.host_log("size-changed")
        check(sizes and sizes[-1]["params"].get("height", 0) > 200, f"the view reported no size: {sizes[-1:]}")
        self.clean("chunk path")
        return {"image": img, "pdf": pdf, "csv": csv, "paths": sorted({p for _, p in paths}), "save": dl["uri"].split("?")[0],
                "height": sizes[-1]["params"]["height"]}

    async def step3_upload_chunks(self):
        payload = os.urandom(UPLOAD_BYTES)
        up = await self.upload("upload-5mb.bin", "application/octet-stream", payload)
        check(up["path"] == "chunks", f"the upload went by {up['path']} under connect-src 'none'")
        await self.shot(2, "upload")
        self.clean("upload by chunks")
        return up

    async def step4_links(self):
        ids = self.cfg["ids"]
        shown = [ids["image"], ids["pdf"], ids["csv"]]
        origin = self.links
        info = await self.mount({"connectDomains": [origin], "resourceDomains": [origin]}, theme="dark")
        check(f"connect-src {origin}" in info["policy"], f"the link render's CSP: {info['policy']}")
        theme = await self.frame.evaluate("() => document.documentElement.className")
        check("theme-dark" in theme, f"the view did not take the host's dark theme: {theme!r}")
        await self.deliver(shown)
        img = await self.wait_image(ids["image"])
        check(img["scheme"] in ("http", "https"), f"the image did not load from the signed link: {img}")
        pdf = await self.wait_pdf(ids["pdf"])
        csv = await self.wait_csv(ids["csv"])
        paths = await self.paths()
        check(all(p == "link" for _, p in paths), f"not every artifact came by link: {paths}")
        await self.shot(3, "link-dark")
        payload = os.urandom(300_000)
        up = await self.upload("upload-link.bin", "application/octet-stream", payload)
        check(up["path"] == "link", f"the upload went by {up['path']} with the links origin approved")
        await self.page.evaluate("() => window.__stowageHost.setTheme('light')")
        await self.frame.wait_for_function("() => document.documentElement.classList.contains('theme-light')", timeout=TIMEOUT)
        self.clean("link path")
        return {"image": img, "pdf": pdf, "csv": csv, "upload": up}

    async def step5_fallbacks(self):
        """Another tool's result (attach_viewer): the view finds its artifacts in _meta["io.stowage/assets"]
        and asks artifact_view itself. A host without downloadFile and updateModelContext: Save opens
        the link, an upload goes to ui/message."""
        ids = self.cfg["ids"]
        await self.mount({}, caps={"downloadFile": None, "updateModelContext": None})
        other = {"content": [{"type": "text", "text": "made a chart"}], "_meta": {"io.stowage/assets": [{"id": ids["image"]}]}}
        await self.deliver({"prompt": "a chart"}, other)
        await self.wait_image(ids["image"])
        opened = len(await self.host_log("open-link"))
        await self.frame.click(f"{self.card(ids['image'])} [data-testid=viewer-save]")
        await self.page.wait_for_function("(n) => window.__hostLog.filter((e) => e.kind === 'open-link').length > n", arg=opened, timeout=TIMEOUT)
        link = (await self.host_log("open-link"))[-1]["params"]["url"]
        check(link.startswith(self.links + "/"), f"Save opened {link}, not a signed link on {self.links}")
        contexts = len(await self.host_log("update-model-context"))
        payload = os.urandom(1000)
        status = "[data-testid=viewer-upload-status]"
        await self.frame.set_input_files("[data-testid=viewer-upload-input]", files=[{"name": "note.txt", "mimeType": "text/plain", "buffer": payload}])
        await self.frame.wait_for_selector(f"{status}[data-state=done], {status}[data-state=error]", state="attached", timeout=TIMEOUT)
        uri = await self.frame.get_attribute(status, "data-uri")
        check(uri, f"the upload failed: {await self.frame.text_content(status)}")
        messages = await self.host_log("message")
        check(messages and uri in json.dumps(messages[-1]["params"]) and messages[-1]["params"].get("role") == "user",
              f"{uri} did not reach the conversation as ui/message: {messages[-1:]}")
        check(len(await self.host_log("update-model-context")) == contexts, "the view used ui/update-model-context on a host without it")
        self.clean("fallbacks")
        return {"open_link": link.split("?")[0], "message": uri}

    async def step6_hostile(self):
        hostile = self.cfg.get("hostile", [])
        if not hostile:
            return {"skipped": "no hostile artifacts"}
        ids = [h["id"] for h in hostile]
        # The spec's restrictive default (no blob:): the view falls back to data: URLs.
        info = await self.mount({}, blob=False)
        check("blob:" not in info["policy"], info["policy"])
        result = await self.view_result(ids)
        names = {m["id"]: m.get("name") for m in result["structuredContent"]["artifacts"]}
        await self.deliver(ids, result)
        for hh in hostile:
            await self.frame.wait_for_selector(f"{self.card(hh['id'])} [data-testid=artifact-preview][data-state]", state="attached", timeout=TIMEOUT)
        await self.page.wait_for_timeout(500)  # a payload that ran would act at once; give it a moment
        seen = []
        for hh in hostile:
            card = self.card(hh["id"])
            state = await self.frame.get_attribute(f"{card} [data-testid=artifact-preview]", "data-state")
            active = await self.frame.eval_on_selector_all(f"{card} :is({ACTIVE_ELEMENTS})", "(els) => els.map((e) => e.tagName)")
            check(not active, f"hostile {hh['kind']}: active elements in its card: {active}")
            if hh["kind"] == "svg":
                img = await self.wait_image(hh["id"])
                check(img["scheme"] == "data", f"the SVG should load as a data: image under this CSP: {img}")
            if hh["kind"] == "html":
                pre = await self.frame.eval_on_selector_all(f"{card} [data-testid=artifact-preview] pre", "(els) => els.map((e) => e.textContent)")
                check(len(pre) == 1 and "<" in pre[0], f"the HTML is not shown as text: {pre}")
            # The name, whatever it holds, is text: no element came of it.
            title = await self.frame.text_content(f"{card} .meta-title")
            want = hh.get("name") or names.get(hh["id"]) or "(unnamed)"
            check(title == want, f"the name of {hh['id']} is not shown literally: {title!r}, not {want!r}")
            parsed = await self.frame.eval_on_selector_all(f"{card} .meta-title *:not(.artifact-name), {card} .meta img", "(els) => els.map((e) => e.tagName)")
            check(not parsed, f"the metadata of {hh['id']} grew elements: {parsed}")
            seen.append({"id": hh["id"], "kind": hh["kind"], "preview": state})
        leaked = await self.frame.evaluate("() => typeof window.__xss !== 'undefined'")
        check(not leaked, "window.__xss is set in the view")
        stray = await self.page.evaluate("() => window.__strayMessages")
        check(not stray, f"messages other than JSON-RPC reached the host: {stray[:5]}")
        rpc_xss = await self.page.evaluate("() => window.__hostLog.filter((e) => JSON.stringify(e).toLowerCase().includes('xss-'))")
        check(not rpc_xss, f"a payload reached the host: {rpc_xss[:3]}")
        await self.shot(4, "hostile")
        self.clean("hostile artifacts")
        return {"hostile": seen}

    async def step7_timing(self):
        runs = int(self.cfg.get("timing_runs", 3))
        chunk = await self.big_image_ms({}, runs)
        await self.shot(5, "big-chunks")
        link = await self.big_image_ms({"connectDomains": [self.links], "resourceDomains": [self.links]}, runs)
        paths = await self.paths()
        check(paths and paths[0][1] == "link", f"the timed link render did not use the link: {paths}")
        self.chunk_ms, self.link_ms = min(chunk), min(link)
        print(f"10 MB image: chunks {chunk} ms, link {link} ms", file=sys.stderr)
        if self.cfg.get("chunk_budget_ms") is not None:
            check(self.chunk_ms <= self.cfg["chunk_budget_ms"], f"by chunks the 10 MB image took {self.chunk_ms} ms")
        if self.cfg.get("link_budget_ms") is not None:
            check(self.link_ms <= self.cfg["link_budget_ms"], f"by link the 10 MB image took {self.link_ms} ms")
        self.clean("timing")
        return {"chunk_ms": chunk, "link_ms": link}


STEPS = ["step1_resource", "step2_chunks", "step3_upload_chunks", "step4_links", "step5_fallbacks", "step6_hostile", "step7_timing"]


async def main():
    cfg = json.loads(Path(sys.argv[1]).read_text())
    out = Path(cfg["out"])
    out.mkdir(parents=True, exist_ok=True)
    result = {"ok": False}
    current = "setup"
    with tempfile.TemporaryDirectory() as tmp:
        try:
            host_js = bundle_host(cfg, tmp)
            host_html = (HERE / "apps_host" / "host.html").read_bytes()
            ext = advertise(EXT, {"mimeTypes": [APP_MIME]})
            async with Client(cfg["mcp"], extensions=[ext]) as client, async_playwright() as p:
                browser = await p.chromium.launch(
                    executable_path=cfg.get("chromium", "/usr/bin/chromium"), headless=True,
                    # Loopback links from a page on another origin: Chromium's local-network checks
                    # would ask the user; a real deployment's links are public https.
                    args=["--no-sandbox", "--disable-features=LocalNetworkAccessChecks,BlockInsecurePrivateNetworkRequests,PrivateNetworkAccessRespectPreflightResults"])
                context = await browser.new_context(viewport={"width": 960, "height": 900}, ignore_https_errors=True)
                page = await context.new_page()
                page.set_default_timeout(TIMEOUT)
                run = Run(cfg, client, page)

                async def serve(route):
                    path = route.request.url[len(HOST_ORIGIN):].split("?")[0]
                    if path in ("/", "/host.html"):
                        await route.fulfill(status=200, body=host_html, headers={"Content-Type": "text/html; charset=utf-8"})
                    elif path == "/host.bundle.js":
                        await route.fulfill(status=200, body=host_js, headers={"Content-Type": "text/javascript; charset=utf-8"})
                    else:
                        await route.fulfill(status=404, body=b"not found")
                await page.route(f"{HOST_ORIGIN}/**", serve)

                async def stowage_call(name, args):
                    return await run.call(name, args)
                await page.expose_function("__stowageCall", stowage_call)
                await page.goto(f"{HOST_ORIGIN}/host.html")
                await page.wait_for_function("() => window.__hostReady === true")
                try:
                    for name in STEPS:
                        current = name
                        info = await getattr(run, name)()
                        run.steps.append({"step": name, **(info or {})})
                    result = {"ok": True, "chunk_ms": run.chunk_ms, "link_ms": run.link_ms,
                              "view_bytes": len(run.html.encode()), "tool_calls": run.calls, "steps": run.steps}
                except Exception as e:  # noqa: BLE001 — any failure names its step
                    try:
                        await page.screenshot(path=str(out / "apps-failure.png"), full_page=True)
                    except Exception:
                        pass
                    if not isinstance(e, StepFailed):
                        traceback.print_exc(file=sys.stderr)
                    msg = str(e) if isinstance(e, StepFailed) else f"{type(e).__name__}: {e}"
                    result = {"ok": False, "error": f"{current}: {msg}", "steps": run.steps, "problems": run.problems[:10]}
                await browser.close()
        except Exception as e:  # noqa: BLE001
            if not isinstance(e, StepFailed):
                traceback.print_exc(file=sys.stderr)
            result = {"ok": False, "error": f"{current}: {e}"}
    print(json.dumps(result))
    sys.exit(0 if result["ok"] else 1)


if __name__ == "__main__":
    asyncio.run(main())
