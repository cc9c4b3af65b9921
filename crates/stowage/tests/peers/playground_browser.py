"""Drives the playground page in a real browser (Debian's Chromium through Playwright) against a
running `stowage serve`: calls tools, opens artifact previews (PNG, PDF, hostile SVG / HTML /
names), downloads an artifact and checks its sha256, watches the events stream, subscribes to a
resource and sees its update arrive, and runs the agent (streamed answer, steps, ECharts chart,
final payload). Any console error (CSP violations included), page error or dialog (the XSS
payloads call alert()) fails the run. Screenshots go to CONFIG["out"] as <n>-<tab>.png.

Usage: playground_browser.py CONFIG.json
CONFIG: {"base", "out", "chart_tool", "pdf_tool", "subscribe_uri", "edit_tool",
         "hostile": [{"id", "kind", "name"?}], "agent_query"?, "expect_answer"?, "expect_source"?,
         "token"? (a bearer token, when the gateway has [auth]), "chart_args"?, "pdf_args"? (JSON objects)}
Prints ONE JSON line: {"ok": true, "first_load_bytes": N, "steps": [...], "answer_lengths_seen": K}
or {"ok": false, "error": "..."} (exit 1, after saving out/failure.png).
"""
import hashlib
import json
import time
import sys
import traceback
from pathlib import Path
from urllib.parse import urlsplit

from playwright.sync_api import sync_playwright

TIMEOUT = 20_000  # ms, for every explicit wait
FIRST_LOAD_LIMIT = 300_000  # bytes, the budget for the first load (ECharts excluded)
TOKEN_KEY = "stowage.playground.token"  # app.js keeps the token under this sessionStorage key
# Every wait_for_function predicate below is an arrow function: Playwright evaluates a bare string
# expression with eval() inside the page, which the page's CSP (no 'unsafe-eval') refuses.

# Records posted messages that mention "xss" (a payload that escaped would post one) in every frame.
INIT_SCRIPT = """
window.__xss_msgs = [];
window.addEventListener('message', (e) => {
  let s = '';
  try { s = typeof e.data === 'string' ? e.data : JSON.stringify(e.data); } catch (err) { s = String(e.data); }
  if (String(s).toLowerCase().includes('xss')) window.__xss_msgs.push(String(s));
});
"""


class StepFailed(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise StepFailed(msg)


def attr(v):
    """A CSS attribute-selector value, double-quoted."""
    return json.dumps(str(v))


class Run:
    def __init__(self, cfg, page):
        self.cfg = cfg
        self.page = page
        self.base = cfg["base"].rstrip("/")
        self.out = Path(cfg["out"])
        self.problems = []  # console errors, page errors and dialogs: each one fails the run
        self.steps = []
        self.first_load_bytes = None
        self.answer_lengths_seen = None
        self.chart_artifact = None
        self.net = {}  # CDP requestId -> {url, bytes, finished}

        def on_console(m):
            url = m.location.get("url", "")
            if m.type == "error":
                self.problems.append(f"console error: {m.text} ({url})")
        page.on("console", on_console)
        page.on("pageerror", lambda e: self.problems.append(f"page error: {e}"))

        def on_dialog(d):
            self.problems.append(f"dialog ({d.type}): {d.message}")
            d.dismiss()
        page.on("dialog", on_dialog)

    # ---- helpers ----

    def api_headers(self):
        return {"Authorization": f"Bearer {self.cfg['token']}"} if self.cfg.get("token") else {}

    def api_get(self, path):
        r = self.page.request.get(self.base + path, headers=self.api_headers())
        check(r.ok, f"GET {path} answered {r.status}: {r.text()[:300]}")
        return r.json()

    def shot(self, n, tab):
        self.page.screenshot(path=str(self.out / f"{n}-{tab}.png"), full_page=True)

    def clean(self, where):
        if self.problems:
            detail = " | ".join(self.problems[:5])
            raise StepFailed(detail if where in STEPS else f"{where}: {detail}")

    def tab(self, name):
        self.page.click(f"[data-tab={attr(name)}]")
        self.page.wait_for_selector(f"#tab-{name}", state="visible", timeout=TIMEOUT)

    def tool_name(self, want):
        """The catalog's name for a tool: exact, else the one ending in `_<want>` (upstream prefixes)."""
        names = self.page.eval_on_selector_all("[data-testid=tool-item]", "els => els.map(e => e.dataset.tool)")
        if want in names:
            return want
        hits = [n for n in names if n.endswith("_" + want)] or [n for n in names if n.endswith(want)]
        check(len(hits) == 1, f"no single tool named like {want!r} in {names}")
        return hits[0]

    def call_tool(self, want, args=None):
        """Selects a tool in the Tools tab, calls it and waits for the result view; returns its numbers."""
        name = self.tool_name(want)
        self.tab("tools")
        self.page.click(f"[data-testid=tool-item][data-tool={attr(name)}]")
        self.page.wait_for_selector("#call-button", timeout=TIMEOUT)
        if args is not None:
            self.page.check("#raw-args-toggle")
            self.page.fill("#raw-args", json.dumps(args))
        self.page.click("#call-button")
        self.page.wait_for_selector("[data-testid=result-bytes], #call-result [data-testid=error]", timeout=TIMEOUT)
        err = self.page.query_selector("#call-result [data-testid=error]")
        check(err is None, f"calling {name} failed: {err.text_content() if err else ''}")
        num = lambda tid: int(self.page.text_content(f"#call-result [data-testid={tid}]"))
        orig = self.page.query_selector("#call-result [data-testid=original-bytes]")
        return name, {"original_bytes": num("original-bytes") if orig else None, "result_bytes": num("result-bytes"),
                      "original_tokens": num("original-tokens") if orig else None, "result_tokens": num("result-tokens")}

    def wait_artifacts_loaded(self):
        self.page.wait_for_function("() => document.getElementById('artifact-status').textContent !== 'loading…'", timeout=TIMEOUT)

    def open_artifact(self, art_id, kind, this_session=False):
        """Finds an artifact's row in the Artifacts tab (filtered by kind, paging with Next) and opens it."""
        self.tab("artifacts")
        if self.page.is_checked("#artifact-this-session") != this_session:
            self.page.click("#artifact-this-session")
            self.wait_artifacts_loaded()
        self.page.select_option("#artifact-kind", kind)
        self.wait_artifacts_loaded()
        self.page.click("#artifact-refresh")
        self.wait_artifacts_loaded()
        row = f"[data-testid=artifact-row][data-id={attr(art_id)}]"
        for _ in range(200):
            if self.page.query_selector(row):
                break
            check(self.page.is_enabled("#artifact-next"), f"artifact {art_id} ({kind}) is not in the list")
            self.page.click("#artifact-next")
            self.wait_artifacts_loaded()
        self.page.click(row)
        self.page.wait_for_selector(f"#artifact-detail [data-testid=artifact-meta][data-id={attr(art_id)}]", timeout=TIMEOUT)

    def wait_preview(self):
        self.page.wait_for_selector("#artifact-detail [data-testid=artifact-preview][data-state]", state="attached", timeout=TIMEOUT)
        return self.page.get_attribute("#artifact-detail [data-testid=artifact-preview]", "data-state")

    # ---- steps ----

    def step1_load(self):
        cdp = self.page.context.new_cdp_session(self.page)
        cdp.send("Network.enable")
        cdp.on("Network.requestWillBeSent", lambda e: self.net.setdefault(e["requestId"], {"url": e["request"]["url"], "bytes": 0, "finished": False}))
        cdp.on("Network.loadingFinished", lambda e: self.net.get(e["requestId"], {}).update(bytes=e["encodedDataLength"], finished=True))
        self.page.goto(self.base + "/", wait_until="load")
        self.page.wait_for_selector("[data-testid=tool-item]", timeout=TIMEOUT)
        self.page.wait_for_function("() => document.documentElement.dataset.session", timeout=TIMEOUT)
        # Everything the first load asks for: the files, info, tools, resources, agent.
        self.page.wait_for_function("""() => !document.querySelector('#resource-list').textContent.includes('loading…')
            && document.getElementById('agent-status').textContent !== 'checking the agent…'""", timeout=TIMEOUT)
        self.page.evaluate("1")  # lets the CDP events that arrived so far be handled
        finished = [n for n in self.net.values() if n["finished"] and "echarts" not in n["url"]]
        self.first_load_bytes = sum(n["bytes"] for n in finished)
        self.first_load_requests = len(finished)
        cdp.detach()
        self.shot(1, "tools")
        return {"requests": len(finished), "open_streams": sum(1 for n in self.net.values() if not n["finished"])}

    def step2_chart(self):
        name, n = self.call_tool(self.cfg["chart_tool"], self.cfg.get("chart_args"))
        check(n["original_bytes"] is not None, f"{name}: no original result")
        check(n["original_bytes"] > n["result_bytes"] > 0, f"{name}: expected original > result > 0, got {n}")
        self.page.wait_for_function("""() => [...document.querySelectorAll('[data-testid=call-artifacts] img')]
            .some(i => i.complete && i.naturalWidth > 0)""", timeout=TIMEOUT)
        self.chart_artifact = self.page.get_attribute("[data-testid=call-artifacts] .artifact-card[data-kind=image]", "data-id")
        check(self.chart_artifact, "the chart call made no image artifact")
        self.shot(2, "tools")
        # The same call shaped for Codex, which takes no resource_link: the download link is in
        # the line its model reads.
        self.page.select_option("#host-select", "codex")
        self.page.click("#call-button")
        self.page.wait_for_function("""() => [...document.querySelectorAll('#call-result h3')].some(h => h.textContent.includes('(codex)'))""",
                                    timeout=TIMEOUT)
        codex_view = self.page.text_content("#call-result [data-testid=model-view]")
        check("Download: http" in codex_view and "resource_link" not in codex_view, f"codex's view: {codex_view}")
        self.page.select_option("#host-select", "")
        # artifact_read of the chart answers with the image, shown as one.
        _, read = self.call_tool("artifact_read", {"id": self.chart_artifact})
        self.page.wait_for_function("""() => [...document.querySelectorAll('[data-testid=result-images] img')]
            .some(i => i.complete && i.naturalWidth > 0)""", timeout=TIMEOUT)
        check(read["result_tokens"] > 0, f"the gateway's own tool reports its tokens: {read}")
        return {"tool": name, **n, "artifact": self.chart_artifact, "codex_view": True, "read_tokens": read["result_tokens"]}

    def step3_pdf(self):
        name, n = self.call_tool(self.cfg["pdf_tool"], self.cfg.get("pdf_args"))
        pdf_id = self.page.get_attribute("[data-testid=call-artifacts] .artifact-card[data-kind=pdf]", "data-id")
        check(pdf_id, f"{name} made no PDF artifact")
        self.open_artifact(pdf_id, "pdf", this_session=True)
        frame = self.page.wait_for_selector("#artifact-detail iframe.pdf-frame", state="attached", timeout=TIMEOUT)
        src = frame.get_attribute("src")
        href = self.page.get_attribute("#artifact-detail [data-testid=artifact-download]", "href")
        meta = self.api_get(f"/api/artifacts/{pdf_id}")
        check(src == href, f"the frame's src {src} is not the artifact's link {href}")
        want = urlsplit(meta["url"])
        got = urlsplit(src)
        check((got.scheme, got.netloc, got.path) == (want.scheme, want.netloc, want.path) and "token=" in got.query,
              f"the frame's src {src} is not a signed link like {meta['url']}")
        r = self.page.request.get(src)
        check(r.status == 200, f"GET of the PDF link answered {r.status}")
        ctype = r.headers.get("content-type", "")
        check(ctype.split(";")[0].strip() == "application/pdf", f"the PDF link answered {ctype}")
        check(r.body()[:5] == b"%PDF-", "the PDF link's body is not a PDF")
        # The frame holds the browser's own PDF viewer: its document is the PDF itself.
        deadline = time.time() + TIMEOUT / 1000
        viewer = None
        while viewer is None and time.time() < deadline:
            for f in self.page.frames:
                if f.url == src and f.evaluate("() => document.contentType") == "application/pdf":
                    viewer = f
            if viewer is None:
                time.sleep(0.1)
        check(viewer is not None, "the PDF frame did not open the PDF in the browser's viewer")
        time.sleep(2)  # the viewer draws its first page asynchronously; for the screenshot only
        self.shot(3, "artifacts")
        return {"tool": name, "artifact": pdf_id, "content_type": ctype, "viewer": True}

    def step4_download(self):
        self.open_artifact(self.chart_artifact, "image", this_session=True)
        shown = self.page.text_content("#artifact-detail [data-testid=artifact-sha256]").strip()
        with self.page.expect_download(timeout=TIMEOUT) as d:
            self.page.click("#artifact-detail [data-testid=artifact-download]")
        data = Path(d.value.path()).read_bytes()
        got = hashlib.sha256(data).hexdigest()
        api = self.api_get(f"/api/artifacts/{self.chart_artifact}")["sha256"]
        check(got == shown == api, f"sha256 differ: downloaded {got}, shown {shown}, API {api}")
        self.shot(4, "artifacts")
        return {"artifact": self.chart_artifact, "bytes": len(data), "sha256": got, "filename": d.value.suggested_filename}

    def step5_events(self):
        name = self.tool_name(self.cfg["chart_tool"])
        self.tab("events")
        sel = f"[data-testid=event-row][data-type=tool_call_finished][data-tool={attr(name)}]"
        self.page.wait_for_selector(sel, timeout=TIMEOUT)
        rows = len(self.page.query_selector_all(sel))
        total = len(self.page.query_selector_all("[data-testid=event-row]"))
        self.shot(5, "events")
        return {"chart_finished_rows": rows, "rows": total}

    def step6_resources(self):
        uri = self.cfg["subscribe_uri"]
        edit = self.tool_name(self.cfg["edit_tool"])
        self.tab("resources")
        btn = f"[data-testid=subscribe][data-uri={attr(uri)}]"
        self.page.wait_for_selector(btn, timeout=TIMEOUT)
        if self.page.get_attribute(btn, "data-subscribed") != "true":
            self.page.click(btn)
        self.page.wait_for_selector(f"{btn}[data-subscribed=true]", timeout=TIMEOUT)
        status = self.page.evaluate("""async ([tool, key]) => {
            const headers = {'Content-Type': 'application/json'};
            const token = sessionStorage.getItem(key);
            if (token) headers.Authorization = 'Bearer ' + token;
            const session = document.documentElement.dataset.session;
            const r = await fetch('/api/call', {method: 'POST', headers,
              body: JSON.stringify({tool, arguments: {text: 'changed by the browser test'}, session})});
            return r.status;
        }""", [edit, TOKEN_KEY])
        check(status == 200, f"calling {edit} answered {status}")
        self.page.wait_for_selector(f"#resource-updates [data-testid=resource-update][data-uri={attr(uri)}]", timeout=TIMEOUT)
        self.shot(6, "resources")
        return {"uri": uri, "edit_tool": edit}

    def step7_xss(self):
        seen = []
        for h in self.cfg.get("hostile", []):
            self.open_artifact(h["id"], h["kind"], this_session=False)
            state = self.wait_preview()
            # A payload that got to run would act at once (onload / onerror / inline script); give
            # any such event a moment to fire before looking.
            self.page.wait_for_timeout(300)
            self.clean(f"hostile {h['kind']} {h['id']}")
            for f in self.page.frames:
                try:
                    leaked = f.evaluate("typeof window.__xss !== 'undefined' || (window.parent && typeof window.parent.__xss !== 'undefined')")
                except Exception:  # a frame Playwright cannot script (the PDF viewer): nothing of ours runs there
                    continue
                check(not leaked, f"hostile {h['kind']}: window.__xss is set in frame {f.url}")
            msgs = self.page.evaluate("window.__xss_msgs")
            check(not msgs, f"hostile {h['kind']}: messages posted: {msgs}")
            detail = self.page.locator("#artifact-detail")
            check(detail.locator("script, object, embed, svg").count() == 0, f"hostile {h['kind']}: active elements in the detail pane")
            if h["kind"] in ("svg", "html"):
                check(detail.locator("iframe").count() == 0, f"hostile {h['kind']} rendered in a frame")
            if h["kind"] == "svg":
                check(detail.locator("[data-testid=artifact-preview] img").count() == 1, "the SVG is not shown as an <img>")
            if h["kind"] == "html":
                pre = detail.locator("[data-testid=artifact-preview] pre")
                check(pre.count() == 1, f"the HTML artifact is not shown as text (preview state {state})")
            if h.get("name"):
                title = detail.locator(".meta-title").text_content()
                check(title == h["name"] and "<img" in title, f"the hostile name is not shown as literal text: {title!r}")
                check(detail.locator(".meta-title img").count() == 0, "the hostile name was parsed as HTML")
            self.page.screenshot(path=str(self.out / f"7-artifacts-{h['kind']}.png"), full_page=True)
            seen.append({"id": h["id"], "kind": h["kind"], "preview": state})
        return {"hostile": seen}

    def step8_agent(self):
        if not self.cfg.get("agent_query"):
            return {"skipped": "no agent_query"}
        self.tab("agent")
        self.page.wait_for_selector("#agent-chat", state="visible", timeout=TIMEOUT)
        before = len(self.page.query_selector_all("[data-testid=final-payload]"))
        # Records each new length of the current answer bubble until the final payload shows.
        self.page.evaluate("""(before) => {
            window.__answer_lengths = [];
            const turns = document.getElementById('agent-turns');
            const obs = new MutationObserver(() => {
              if (turns.querySelectorAll('[data-testid=final-payload]').length > before) { obs.disconnect(); return; }
              const all = turns.querySelectorAll('[data-testid=agent-answer]');
              const a = all[all.length - 1];
              if (!a) return;
              const n = a.textContent.length;
              const l = window.__answer_lengths;
              if (n > 0 && l[l.length - 1] !== n) l.push(n);
            });
            obs.observe(turns, {subtree: true, childList: true, characterData: true});
        }""", before)
        self.page.fill("#agent-input", self.cfg["agent_query"])
        self.page.click("#agent-send")
        self.page.wait_for_function("""(before) => document.querySelectorAll('[data-testid=final-payload]').length > before
            || document.querySelector('.turn:last-child [data-testid=agent-error]')""", arg=before, timeout=60_000)
        turn = self.page.locator(".turn").last
        err = turn.locator("[data-testid=agent-error]")
        check(err.count() == 0, f"the agent run failed: {err.first.text_content() if err.count() else ''}")
        answer = turn.locator("[data-testid=agent-answer]").text_content()
        check(self.cfg.get("expect_answer", "") in answer, f"the answer {answer!r} lacks {self.cfg.get('expect_answer')!r}")
        steps = turn.locator("[data-testid=agent-step]").count()
        check(steps >= 1, "no agent step shown")
        # ECharts loads lazily: wait for a drawn chart.
        self.page.wait_for_function("""() => {
            const t = [...document.querySelectorAll('.turn')].pop();
            const c = t && t.querySelector('[data-testid=agent-chart] canvas, [data-testid=agent-chart] svg');
            if (!c) return false;
            const r = c.getBoundingClientRect();
            return r.width > 0 && r.height > 0;
        }""", timeout=TIMEOUT)
        sources = turn.locator("[data-testid=agent-source]").all_text_contents()
        want = self.cfg.get("expect_source")
        check(not want or any(want in s for s in sources), f"no source with {want!r} in {sources}")
        lengths = self.page.evaluate("window.__answer_lengths")
        self.answer_lengths_seen = len(set(lengths))
        self.shot(8, "agent")
        return {"steps": steps, "sources": len(sources), "answer_lengths_seen": self.answer_lengths_seen}

    def step9_weight(self):
        check(self.first_load_bytes is not None, "the first load was not measured")
        print(f"first load: {self.first_load_bytes} bytes in {self.first_load_requests} requests (ECharts excluded)", file=sys.stderr)
        check(self.first_load_bytes <= FIRST_LOAD_LIMIT, f"the first load is {self.first_load_bytes} bytes, over {FIRST_LOAD_LIMIT}")
        return {"first_load_bytes": self.first_load_bytes}


STEPS = ["step1_load", "step2_chart", "step3_pdf", "step4_download", "step5_events", "step6_resources", "step7_xss", "step8_agent", "step9_weight"]


def main():
    cfg = json.loads(Path(sys.argv[1]).read_text())
    out = Path(cfg["out"])
    out.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=cfg.get("chromium", "/usr/bin/chromium"), args=["--no-sandbox"], headless=True)
        context = browser.new_context(viewport={"width": 1400, "height": 900}, accept_downloads=True)
        context.add_init_script(INIT_SCRIPT)
        if cfg.get("token"):
            # The page's own frame only (init scripts run in every frame; a preview frame has no storage).
            context.add_init_script(f"if (window === window.top) sessionStorage.setItem({json.dumps(TOKEN_KEY)}, {json.dumps(cfg['token'])});")
        page = context.new_page()
        page.set_default_timeout(TIMEOUT)
        run = Run(cfg, page)
        current = None
        try:
            for name in STEPS:
                current = name
                info = getattr(run, name)()
                run.clean(name)
                run.steps.append({"step": name, **(info or {})})
        except Exception as e:  # noqa: BLE001 — any failure names its step
            try:
                page.screenshot(path=str(out / "failure.png"), full_page=True)
            except Exception:
                pass
            msg = str(e) if isinstance(e, StepFailed) else f"{type(e).__name__}: {e}"
            if not isinstance(e, StepFailed):
                traceback.print_exc(file=sys.stderr)
            print(json.dumps({"ok": False, "error": f"{current}: {msg}", "steps": run.steps, "problems": run.problems}))
            browser.close()
            sys.exit(1)
        browser.close()
    print(json.dumps({"ok": True, "first_load_bytes": run.first_load_bytes, "steps": run.steps, "answer_lengths_seen": run.answer_lengths_seen}))


if __name__ == "__main__":
    main()
