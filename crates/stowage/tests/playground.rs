//! The playground's page and JSON API through the real `stowage serve`, with the bundled demo
//! server and the stdio fixture as upstreams: the page goes out under a strict CSP and only to
//! loopback hosts; a call shows the upstream's original beside what the model got, with the
//! artifacts downloadable through their links; artifacts page and filter; the events stream
//! carries calls and resource updates; and with authentication, one user sees nothing of
//! another's. And the page itself in a real browser (`the_playground_works_in_a_browser`).

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use stowage_testkit::model_stub::{ModelStub, Turn};

/// A binary of another package of this workspace, built when missing (a narrow `cargo test`
/// does not build other packages' binaries; the full test command does).
fn workspace_bin(package: &str, name: &str) -> String {
    let path = stowage_testkit::fixture_bin().with_file_name(name);
    if !path.exists() {
        let status = std::process::Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .args(["build", "-p", package, "--bins"])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .status()
            .unwrap();
        assert!(status.success(), "cannot build {package}");
    }
    path.display().to_string()
}

struct Serve {
    _child: tokio::process::Child,
    base: String,
    dir: tempfile::TempDir,
    http: reqwest::Client,
}

impl Serve {
    /// `stowage serve` on a free loopback port with the demo server (`demo`) and the fixture
    /// (`fx`) as upstreams, `config` as stowage.toml and `args` added; ready when both
    /// upstreams have listed their tools.
    async fn start(config: &str, args: &[&str]) -> Serve {
        Serve::start_in(tempfile::tempdir().unwrap(), config, args).await
    }

    /// [`Serve::start`] in `dir`, whose `store/` may already hold artifacts.
    async fn start_in(dir: tempfile::TempDir, config: &str, args: &[&str]) -> Serve {
        let d = dir.path();
        let fixture = d.join("stowage-fixture");
        std::fs::copy(stowage_testkit::fixture_bin(), &fixture).unwrap();
        let servers = json!({"mcpServers": {
            "demo": {"command": workspace_bin("stowage-demo", "stowage-demo-server"), "args": []},
            "fx": {"command": fixture, "args": []},
        }});
        std::fs::write(d.join("mcp.json"), servers.to_string()).unwrap();
        std::fs::write(d.join("stowage.toml"), config).unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_stowage"))
            .current_dir(d)
            .args(["--config", d.join("stowage.toml").to_str().unwrap(), "--store", d.join("store").to_str().unwrap()])
            .args(["serve", "--listen", &format!("127.0.0.1:{port}"), "--mcp-config", d.join("mcp.json").to_str().unwrap()])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(d.join("serve.log")).unwrap())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let base = format!("http://127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(60);
        while !reqwest::get(format!("{base}/readyz")).await.is_ok_and(|r| r.status() == 200) {
            assert!(Instant::now() < deadline, "stowage serve did not come up");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Serve { _child: child, base, dir, http: reqwest::Client::new() }
    }

    /// What the server said on stderr once it printed its banner.
    async fn banner(&self) -> String {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let log = std::fs::read_to_string(self.dir.path().join("serve.log")).unwrap_or_default();
            // The HTTP banner's last line before the playground's is the "try it" command.
            if log.contains("--tool-name") || Instant::now() > deadline {
                tokio::time::sleep(Duration::from_millis(100)).await;
                return std::fs::read_to_string(self.dir.path().join("serve.log")).unwrap_or_default();
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn get(&self, path: &str, token: Option<&str>) -> reqwest::RequestBuilder {
        let r = self.http.get(format!("{}{path}", self.base));
        match token {
            Some(t) => r.bearer_auth(t),
            None => r,
        }
    }

    async fn post(&self, path: &str, token: Option<&str>, body: Value) -> (u16, Value) {
        let mut r = self.http.post(format!("{}{path}", self.base)).json(&body);
        if let Some(t) = token {
            r = r.bearer_auth(t);
        }
        let resp = r.send().await.unwrap();
        let status = resp.status().as_u16();
        (status, resp.json().await.unwrap_or(Value::Null))
    }

    async fn get_json(&self, path: &str, token: Option<&str>) -> (u16, Value) {
        let resp = self.get(path, token).send().await.unwrap();
        let status = resp.status().as_u16();
        (status, resp.json().await.unwrap_or(Value::Null))
    }

    /// The name the catalog gives upstream `upstream`'s tool `original`.
    async fn tool(&self, original: &str, upstream: &str) -> String {
        let (_, tools) = self.get_json("/api/tools", None).await;
        let names: Vec<&str> = tools["tools"].as_array().unwrap().iter().filter_map(|t| t["name"].as_str()).collect();
        for candidate in [original.to_owned(), format!("{upstream}_{original}")] {
            if names.contains(&candidate.as_str()) {
                return candidate;
            }
        }
        panic!("no tool {original} of {upstream} in {names:?}");
    }
}

fn sha256_hex(b: &[u8]) -> String {
    hex::encode(Sha256::digest(b))
}

/// An open `/api/events` stream, read frame by frame.
struct Events {
    body: futures::stream::BoxStream<'static, reqwest::Result<bytes::Bytes>>,
    buf: String,
    session: String,
}

impl Events {
    async fn open(s: &Serve, token: Option<&str>) -> Events {
        let resp = s.get("/api/events", token).send().await.unwrap();
        assert_eq!(resp.status(), 200);
        assert_eq!(resp.headers()["content-type"], "text/event-stream");
        let mut e = Events { body: resp.bytes_stream().boxed(), buf: String::new(), session: String::new() };
        let (name, data) = e.next().await;
        assert_eq!(name, "ready", "{data}");
        e.session = data["session"].as_str().unwrap().to_owned();
        e
    }

    /// The next frame's event name and data (keep-alive comments skipped).
    async fn next(&mut self) -> (String, Value) {
        loop {
            if let Some(end) = self.buf.find("\n\n") {
                let frame: String = self.buf.drain(..end + 2).collect();
                let mut name = String::new();
                let mut data = String::new();
                for line in frame.lines() {
                    if let Some(v) = line.strip_prefix("event: ") {
                        name = v.to_owned();
                    } else if let Some(v) = line.strip_prefix("data: ") {
                        data.push_str(v);
                    }
                }
                if !name.is_empty() {
                    return (name, serde_json::from_str(&data).unwrap());
                }
                continue;
            }
            let chunk = tokio::time::timeout(Duration::from_secs(20), self.body.next()).await.expect("an event within 20 s");
            self.buf.push_str(std::str::from_utf8(&chunk.expect("the stream is open").unwrap()).unwrap());
        }
    }

    /// Frames until one satisfies `want`; returns it.
    async fn until(&mut self, mut want: impl FnMut(&str, &Value) -> bool) -> Value {
        loop {
            let (name, data) = self.next().await;
            if want(&name, &data) {
                return data;
            }
        }
    }
}

#[tokio::test]
async fn the_page_goes_out_under_a_strict_csp_to_loopback_hosts_only() {
    let s = Serve::start("", &[]).await;
    let page = s.get("/", None).send().await.unwrap();
    assert_eq!(page.status(), 200);
    let h = page.headers().clone();
    assert!(h["content-type"].to_str().unwrap().starts_with("text/html"));
    let csp = h["content-security-policy"].to_str().unwrap();
    assert!(csp.contains("script-src 'self';") && !csp.contains("unsafe") && csp.contains("frame-ancestors 'none'"), "{csp}");
    assert_eq!(h["x-content-type-options"], "nosniff");
    let html = page.text().await.unwrap();
    assert!(html.contains("/assets/app.js"), "{html}");
    // A reload costs a 304.
    let again = s.get("/", None).header("if-none-match", h["etag"].clone()).send().await.unwrap();
    assert_eq!(again.status(), 304);
    for asset in ["/assets/app.js", "/assets/preview.js", "/assets/app.css", "/assets/vendor/echarts.min.js"] {
        let r = s.get(asset, None).send().await.unwrap();
        assert_eq!(r.status(), 200, "{asset}");
    }
    // DNS rebinding: a foreign Host gets neither the page nor the API.
    for path in ["/", "/api/info", "/api/artifacts"] {
        let r = s.get(path, None).header("host", "evil.example:80").send().await.unwrap();
        assert_eq!(r.status(), 403, "{path}");
    }
    // A cross-site form cannot call a tool: the body must be JSON, from an allowed origin.
    let form =
        s.http.post(format!("{}/api/call", s.base)).header("content-type", "text/plain").body("{\"tool\":\"echo\"}").send().await.unwrap();
    assert_eq!(form.status(), 415);
    let foreign = s
        .http
        .post(format!("{}/api/call", s.base))
        .header("origin", "https://evil.example")
        .json(&json!({"tool": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(foreign.status(), 403);
    let (status, info) = s.get_json("/api/info", None).await;
    assert_eq!(status, 200);
    assert_eq!(info["agent"], false);
    let upstreams: Vec<&str> = info["upstreams"].as_array().unwrap().iter().map(|u| u["name"].as_str().unwrap()).collect();
    assert_eq!(upstreams, ["demo", "fx"]);
    assert_eq!(s.get_json("/api/agent", None).await.1, json!({"configured": false}));

    // The banner says where the page is.
    let banner = s.banner().await;
    assert!(banner.contains(&format!("playground: {}/", s.base)), "{banner}");

    let off = Serve::start("", &["--no-playground"]).await;
    assert!(!off.banner().await.contains("playground:"));
    assert_eq!(off.get("/", None).send().await.unwrap().status(), 404);
    assert_eq!(off.get("/api/info", None).send().await.unwrap().status(), 404);
}

#[tokio::test]
async fn a_call_shows_the_original_beside_what_the_model_gets() {
    let s = Serve::start("", &[]).await;
    let chart = s.tool("get_chart", "demo").await;
    let (status, r) = s.post("/api/call", None, json!({"tool": chart})).await;
    assert_eq!(status, 200, "{r}");
    let (orig, res) = (&r["original"], &r["result"]);
    assert!(orig["bytes"].as_u64().unwrap() > res["bytes"].as_u64().unwrap(), "{r}");
    // Tokens are what a model reads: a small chart costs a vision model its image tokens, and
    // its reference costs about as much, so the PDF inside JSON text is where tokens are saved.
    let report = s.tool("get_report", "demo").await;
    let (_, pr) = s.post("/api/call", None, json!({"tool": report})).await;
    assert!(pr["original"]["tokens"].as_u64().unwrap() > 50 * pr["result"]["tokens"].as_u64().unwrap(), "{pr}");
    assert_eq!(orig["truncated"], false);
    // The original holds the PNG's base64; what the model gets does not.
    let original: Value = serde_json::from_str(orig["text"].as_str().unwrap()).unwrap();
    let png_b64 = original["content"][1]["data"].as_str().unwrap().to_owned();
    assert!(png_b64.len() > 1000);
    assert!(!res["text"].as_str().unwrap().contains(&png_b64[..200]));
    assert_eq!(res["text"].as_str().unwrap().len() as u64, res["bytes"].as_u64().unwrap());
    assert!(r["saved"]["ratio"].as_f64().unwrap() > 1.0, "{r}");
    assert!(!r["layers"].as_array().unwrap().is_empty(), "{r}");
    // The artifact: described, and its link serves exactly the PNG.
    let a = &r["artifacts"][0];
    assert_eq!((a["kind"].as_str(), a["mime_type"].as_str()), (Some("image"), Some("image/png")), "{a}");
    let bytes = reqwest::get(a["url"].as_str().unwrap()).await.unwrap().bytes().await.unwrap();
    use base64::Engine;
    assert_eq!(bytes, base64::engine::general_purpose::STANDARD.decode(&png_b64).unwrap());
    assert_eq!(sha256_hex(&bytes), a["sha256"].as_str().unwrap());
    // The whole original is a download, for the caller.
    let full = s.get(orig["download"].as_str().unwrap(), None).send().await.unwrap();
    assert_eq!(full.status(), 200);
    assert!(full.headers()["content-disposition"].to_str().unwrap().starts_with("attachment"));
    assert_eq!(full.text().await.unwrap(), orig["text"].as_str().unwrap());

    // The unhappy paths: one line each, never a crash.
    let (status, e) = s.post("/api/call", None, json!({"tool": "no_such_tool"})).await;
    assert_eq!((status, e["error"]["code"].as_str()), (404, Some("not_found")), "{e}");
    assert!(e["error"]["message"].as_str().unwrap().contains("GET /api/tools"), "{e}");
    let (status, e) = s.post("/api/call", None, json!({"name": chart})).await;
    assert_eq!(status, 400, "{e}");
    assert!(e["error"]["message"].as_str().unwrap().starts_with("the body must be {\"tool\""), "{e}");
    let (status, e) = s.post("/api/call", None, json!({"tool": chart, "arguments": [1]})).await;
    assert_eq!((status, e["error"]["message"].as_str()), (400, Some("arguments must be a JSON object")));
    let (status, e) = s.post("/api/call", None, json!({"tool": chart, "session": "not-a-session"})).await;
    assert_eq!(status, 404, "{e}");
    assert_eq!(s.get("/api/calls/999999/original", None).send().await.unwrap().status(), 404);
}

#[tokio::test]
async fn artifacts_page_and_filter_by_kind() {
    let s = Serve::start("", &[]).await;
    for tool in ["get_chart", "get_report", "get_audio", "get_chart"] {
        let name = s.tool(tool, "demo").await;
        let (status, r) = s.post("/api/call", None, json!({"tool": name})).await;
        assert_eq!(status, 200, "{r}");
    }
    // One at a time, following cursors: every artifact once, oldest first.
    let mut seen = Vec::new();
    let mut cursor = String::new();
    loop {
        let (status, page) = s.get_json(&format!("/api/artifacts?limit=1&cursor={cursor}"), None).await;
        assert_eq!(status, 200, "{page}");
        let items = page["items"].as_array().unwrap();
        assert!(items.len() <= 1);
        seen.extend(items.iter().map(|i| (i["id"].as_str().unwrap().to_owned(), i["kind"].as_str().unwrap().to_owned())));
        match page["next"].as_str() {
            Some(n) => cursor = n.to_owned(),
            None => break,
        }
    }
    let kinds: Vec<&str> = seen.iter().map(|(_, k)| k.as_str()).collect();
    assert!(kinds.contains(&"image") && kinds.contains(&"pdf") && kinds.contains(&"audio"), "{kinds:?}");
    let (_, pdfs) = s.get_json("/api/artifacts?kind=pdf&limit=50", None).await;
    let pdfs = pdfs["items"].as_array().unwrap();
    assert!(!pdfs.is_empty() && pdfs.iter().all(|i| i["kind"] == "pdf"), "{pdfs:?}");
    // A filtered page never skips what lies between pages.
    let mut images = 0;
    let mut cursor = String::new();
    loop {
        let (_, page) = s.get_json(&format!("/api/artifacts?kind=image&limit=1&cursor={cursor}"), None).await;
        images += page["items"].as_array().unwrap().len();
        match page["next"].as_str() {
            Some(n) => cursor = n.to_owned(),
            None => break,
        }
    }
    assert_eq!(images, kinds.iter().filter(|k| **k == "image").count());
    let (status, e) = s.get_json("/api/artifacts?kind=spreadsheet", None).await;
    assert_eq!(status, 400, "{e}");
    assert!(e["error"]["message"].as_str().unwrap().contains("unknown kind \"spreadsheet\""), "{e}");
    // One artifact, with a fresh link that serves what the metadata says.
    let pdf = &pdfs[0];
    let (status, one) = s.get_json(&format!("/api/artifacts/{}", pdf["id"].as_str().unwrap()), None).await;
    assert_eq!(status, 200, "{one}");
    let link = one["url"].as_str().unwrap();
    let resp = reqwest::get(link).await.unwrap();
    assert_eq!(resp.headers()["content-type"], "application/pdf");
    assert_eq!(sha256_hex(&resp.bytes().await.unwrap()), one["sha256"].as_str().unwrap());
    assert_eq!(s.get_json("/api/artifacts/art_0000000000000000", None).await.0, 404);
}

/// One upstream that cannot list its templates (here one without `resources/templates/list`,
/// with a session per client) no longer fails the whole page: the others' resources and
/// templates are listed, and the one that failed is named.
#[tokio::test]
async fn a_list_one_upstream_cannot_give_is_named_beside_what_the_others_listed() {
    let fixture = stowage_testkit::fixture_bin();
    let config = format!(
        "[gateway.servers.plain]\ncommand = {:?}\nsession_mode = \"per_client\"\nenv = {{ STOWAGE_FIXTURE_NO_TEMPLATES = \"1\" }}\n",
        fixture.to_str().unwrap()
    );
    let s = Serve::start(&config, &[]).await;
    let fx_template =
        |listed: &Value| listed["templates"].as_array().is_some_and(|t| t.iter().any(|t| t["uriTemplate"] == "fx://blob/{bytes}"));
    // Ready is "connected": fx's lists may arrive a moment later.
    let deadline = Instant::now() + Duration::from_secs(20);
    let listed = loop {
        let (status, listed) = s.get_json("/api/resources", None).await;
        assert_eq!(status, 200, "{listed}");
        if fx_template(&listed) || Instant::now() > deadline {
            break listed;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(fx_template(&listed), "fx's templates still show: {listed}");
    assert!(listed["resources"].as_array().unwrap().iter().any(|r| r["uri"] == "fx://docs/log.txt"), "{listed}");
    let failed = listed["failed"].as_array().unwrap();
    assert_eq!(failed.len(), 1, "{listed}");
    assert_eq!((failed[0]["upstream"].as_str(), failed[0]["list"].as_str()), (Some("plain"), Some("resources/templates/list")));
    assert!(failed[0]["message"].as_str().unwrap().contains("method not found"), "{listed}");
}

#[tokio::test]
async fn the_events_stream_carries_calls_and_resource_updates() {
    let s = Serve::start("", &[]).await;
    let mut events = Events::open(&s, None).await;
    let session = events.session.clone();
    let (status, r) = s.post("/api/resources/subscribe", None, json!({"uri": "fx://docs/note.txt", "session": session})).await;
    assert_eq!((status, &r), (200, &json!({"ok": true})));
    let edit = s.tool("edit_note", "fx").await;
    let (status, r) = s.post("/api/call", None, json!({"tool": edit, "arguments": {"text": "changed"}, "session": session})).await;
    assert_eq!(status, 200, "{r}");
    let update = events.until(|name, d| name == "notification" && d["method"] == "notifications/resources/updated").await;
    assert_eq!(update["params"]["uri"], "fx://docs/note.txt");
    let (_, read) = s.post("/api/resources/read", None, json!({"uri": "fx://docs/note.txt", "session": session})).await;
    assert_eq!(read["result"]["contents"][0]["text"], "changed");

    let chart = s.tool("get_chart", "demo").await;
    s.post("/api/call", None, json!({"tool": chart, "session": session})).await;
    let done = events.until(|name, d| name == "gateway" && d["type"] == "tool_call_finished" && d["tool"] == chart.as_str()).await;
    assert_eq!(done["outcome"], "ok");
    assert!(done["latency"].as_f64().unwrap() >= 0.0 && done["artifacts"] == 1, "{done}");
    assert_eq!(done["owner"]["session"], session.as_str(), "the call ran in the page's session");

    // An offloaded read comes back with its artifact, for the preview.
    let (status, read) = s.post("/api/resources/read", None, json!({"uri": "fx://docs/report.pdf", "session": session})).await;
    assert_eq!(status, 200, "{read}");
    assert_eq!(read["artifacts"][0]["kind"], "pdf", "{read}");
    assert!(read["result"]["contents"][0].get("blob").is_none());
    let (status, listed) = s.get_json(&format!("/api/resources?session={session}"), None).await;
    assert_eq!(status, 200);
    assert!(listed["resources"].as_array().unwrap().iter().any(|r| r["uri"] == "fx://docs/log.txt"), "{listed}");
    assert!(listed["templates"].as_array().unwrap().iter().any(|t| t["uriTemplate"] == "fx://blob/{bytes}"), "{listed}");

    // Failures say what went wrong.
    let (status, e) = s.post("/api/resources/read", None, json!({"uri": "fx://docs/broken.bin", "session": session})).await;
    assert_eq!(status, 502, "{e}");
    assert!(e["error"]["message"].as_str().unwrap().contains("not base64"), "{e}");
    let (status, e) = s.post("/api/resources/subscribe", None, json!({"uri": "fx://docs/note.txt"})).await;
    assert_eq!(status, 400, "{e}");
    assert!(e["error"]["message"].as_str().unwrap().starts_with("session is required"), "{e}");
}

fn hash(key: &str) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_stowage")).args(["hash-key", key]).output().unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

#[tokio::test]
async fn one_user_sees_nothing_of_anothers() {
    let config = format!(
        "[auth]\napi_keys = [\n  {{ id = \"alice\", sha256 = \"{}\" }},\n  {{ id = \"bob\", sha256 = \"{}\" }},\n]\n",
        hash("alice-secret-key-0123456789"),
        hash("bob-secret-key-0123456789")
    );
    let s = Serve::start(&config, &[]).await;
    let (alice, bob) = (Some("alice-secret-key-0123456789"), Some("bob-secret-key-0123456789"));
    // The page loads without a token (it holds no data); the API does not.
    assert_eq!(s.get("/", None).send().await.unwrap().status(), 200);
    assert_eq!(s.get_json("/api/info", None).await.0, 401);
    assert_eq!(s.get_json("/api/info", Some("wrong-key-0123456789012345")).await.0, 401);
    let (_, info) = s.get_json("/api/info", alice).await;
    assert_eq!(info["auth"], true);

    let mut bob_events = Events::open(&s, bob).await;
    let alice_events = Events::open(&s, alice).await;
    let (_, tools) = s.get_json("/api/tools", alice).await;
    let chart =
        tools["tools"].as_array().unwrap().iter().find_map(|t| t["name"].as_str().filter(|n| n.ends_with("get_chart"))).unwrap().to_owned();
    let (status, r) = s.post("/api/call", alice, json!({"tool": chart, "session": alice_events.session})).await;
    assert_eq!(status, 200, "{r}");
    let id = r["artifacts"][0]["id"].as_str().unwrap().to_owned();
    let call = r["call"].as_u64().unwrap();
    assert_eq!(s.get_json(&format!("/api/artifacts/{id}"), alice).await.0, 200);
    // Bob: alice's artifact is like one that never existed, his list is empty, her session
    // and her call's original are not his.
    let (status, e) = s.get_json(&format!("/api/artifacts/{id}"), bob).await;
    assert_eq!(status, 404, "{e}");
    assert!(s.get_json("/api/artifacts", bob).await.1["items"].as_array().unwrap().is_empty());
    assert_eq!(s.post("/api/call", bob, json!({"tool": chart, "session": alice_events.session})).await.0, 404);
    assert_eq!(s.get(&format!("/api/calls/{call}/original"), bob).send().await.unwrap().status(), 404);
    assert_eq!(s.get(&format!("/api/calls/{call}/original"), alice).send().await.unwrap().status(), 200);
    // Bob's stream shows his own call and never hers (hers came first).
    let echo =
        tools["tools"].as_array().unwrap().iter().find_map(|t| t["name"].as_str().filter(|n| n.ends_with("echo"))).unwrap().to_owned();
    s.post("/api/call", bob, json!({"tool": echo, "arguments": {"message": "hi"}, "session": bob_events.session})).await;
    let mine = bob_events.until(|name, d| name == "gateway" && d["type"] == "tool_call_finished").await;
    assert_eq!(mine["tool"], echo.as_str(), "bob saw alice's call: {mine}");
    assert_eq!(mine["owner"]["user"], "key:bob");
}

// --- the page in a real browser ---------------------------------------------------------------

/// The peers' Python (with Playwright) and Debian's Chromium: a missing one skips loudly on a
/// developer machine and fails under CI, where the test command installs both.
fn browser_peers() -> Option<(PathBuf, PathBuf)> {
    let python = stowage_testkit::peers_dir().join("venv/bin/python");
    let chromium = PathBuf::from(std::env::var("STOWAGE_CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into()));
    let has_playwright =
        python.exists() && std::process::Command::new(&python).args(["-c", "import playwright"]).status().is_ok_and(|s| s.success());
    if has_playwright && chromium.exists() {
        return Some((python, chromium));
    }
    let msg = format!("Playwright in {} or Chromium at {} is missing; run scripts/browser-peers.sh", python.display(), chromium.display());
    assert!(std::env::var_os("CI").is_none(), "{msg}");
    eprintln!("\n!!!!!!!! SKIPPED: {msg} !!!!!!!!\n");
    None
}

/// Stores `bytes` as the local user's artifact through `stowage artifacts put`, before the
/// server opens the store; returns its id.
fn put(dir: &std::path::Path, name: &str, mime: &str, bytes: &[u8]) -> String {
    put_in(dir, name, mime, bytes, "hostile")
}

/// [`put`] into session `session`.
fn put_in(dir: &std::path::Path, name: &str, mime: &str, bytes: &[u8], session: &str) -> String {
    let file = dir.join("upload.bin");
    std::fs::write(&file, bytes).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_stowage"))
        .args(["--store", dir.join("store").to_str().unwrap(), "artifacts", "put", file.to_str().unwrap()])
        .args(["--mime", mime, "--filename", name, "--user", stowage_mcp::LOCAL_USER, "--session", session])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    r["id"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn the_playground_works_in_a_browser() {
    let Some((python, chromium)) = browser_peers() else { return };
    let stub = ModelStub::start(vec![]).await;
    let config = format!("[agent]\nbase_url = \"{}\"\nmodel = \"stub-model\"\nrequest_timeout = \"10s\"\n", stub.base_url());
    let store_dir = tempfile::tempdir().unwrap();
    // Hostile artifacts: each would run script if the page rendered it as a document.
    let xss = "alert('xss');parent.postMessage('xss','*')";
    let svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" onload=\"{xss}\"><script>{xss}</script><rect width=\"10\" height=\"10\"/></svg>"
    );
    let html = format!("<!doctype html><html><body><img src=x onerror=\"{xss}\"><script>{xss}</script>hostile</body></html>");
    let hostile_name = format!("<img src=x onerror=\"{xss}\">.png");
    let png = stowage_demo::samples::png(20, 20);
    let hostile = vec![
        json!({"id": put(store_dir.path(), "hostile.svg", "image/svg+xml", svg.as_bytes()), "kind": "svg"}),
        json!({"id": put(store_dir.path(), "hostile.html", "text/html", html.as_bytes()), "kind": "html"}),
        json!({"id": put(store_dir.path(), &hostile_name, "image/png", &png), "kind": "image", "name": hostile_name}),
    ];
    let s = Serve::start_in(store_dir, &config, &[]).await;

    let (sales, search) = (s.tool("analyze_sales", "fx").await, s.tool("search_docs", "fx").await);
    // analyze_sales streams an ECharts chart; search_docs' results are the payload's sources.
    let calls = vec![(sales, json!({"quarter": "Q4", "year": 2024})), (search, json!({"q": "Q4 sales"}))];
    stub.push([
        Turn::Tools { thought: "Looking at the Q4 numbers.".into(), calls },
        Turn::Text(
            json!({
                "raw_answer": "Q4 revenue was $1.23M, up 12% on Q3, with EMEA growing fastest across the three regions we track.",
                "confidence": 0.9,
                "suggested_actions": [{"action_id": "export_csv", "label": "Export as CSV", "params": {}}],
            })
            .to_string(),
        ),
    ]);
    let out = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/playground-screenshots");
    std::fs::create_dir_all(&out).unwrap();
    let cfg = json!({
        "base": s.base,
        "out": out,
        "chromium": chromium,
        "chart_tool": s.tool("get_chart", "demo").await,
        "pdf_tool": s.tool("get_report", "demo").await,
        "subscribe_uri": "fx://docs/note.txt",
        "edit_tool": s.tool("edit_note", "fx").await,
        "hostile": hostile,
        "agent_query": "How did Q4 go?",
        "expect_answer": "Q4 revenue was",
        "expect_source": "Shipping FAQ",
    });
    let cfg_path = s.dir.path().join("browser.json");
    std::fs::write(&cfg_path, cfg.to_string()).unwrap();
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/peers/playground_browser.py");
    let run = tokio::process::Command::new(&python).arg(&script).arg(&cfg_path).output();
    let run = tokio::time::timeout(Duration::from_secs(300), run).await.expect("the browser test finishes in 5 minutes").unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);
    let report: Value = stdout.lines().rev().find_map(|l| serde_json::from_str(l).ok()).unwrap_or(Value::Null);
    assert!(run.status.success() && report["ok"] == true, "browser test failed:\n{stdout}\n{stderr}");
    let first_load = report["first_load_bytes"].as_u64().unwrap();
    assert!(first_load > 0 && first_load <= 300 * 1024, "first load is {first_load} bytes: {report}");
    eprintln!("{report}");
}

// --- MCP Apps: the viewer and its tools -----------------------------------------------------

/// Artifacts for the apps tests, stored as the local user before the server starts: a chart,
/// a PDF, a CSV, a 10 MB image and the hostile ones. Returns (ids by kind, the chart's sha256).
fn apps_artifacts(dir: &std::path::Path) -> (Value, Value, String) {
    let png = stowage_demo::samples::png(300, 200);
    let csv = "region,quarter,revenue\nEMEA,Q4,1230000\n\"North America, East\",Q4,980000\nAPAC,Q4,455000\n";
    // The demo's PNGs are stored uncompressed: 1,900 × 1,800 pixels make about 10 MB.
    let big = stowage_demo::samples::png(1900, 1800);
    assert!(big.len() > 10_000_000, "{}", big.len());
    let ids = json!({
        "image": put(dir, "chart.png", "image/png", &png),
        "pdf": put(dir, "q3-report.pdf", "application/pdf", &stowage_demo::samples::pdf(120_000, "Q3 report")),
        "csv": put(dir, "sales.csv", "text/csv", csv.as_bytes()),
        "big_image": put(dir, "big.png", "image/png", &big),
    });
    let xss = "alert('xss');parent.postMessage('xss','*')";
    let svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" onload=\"{xss}\"><script>{xss}</script><rect width=\"10\" height=\"10\"/></svg>"
    );
    let html = format!("<!doctype html><html><body><img src=x onerror=\"{xss}\"><script>{xss}</script>hostile</body></html>");
    let hostile_name = format!("<img src=x onerror=\"{xss}\">.png");
    let hostile = json!([
        {"id": put(dir, "hostile.svg", "image/svg+xml", svg.as_bytes()), "kind": "svg"},
        {"id": put(dir, "hostile.html", "text/html", html.as_bytes()), "kind": "html"},
        {"id": put(dir, &hostile_name, "image/png", &stowage_demo::samples::png(20, 20)), "kind": "image", "name": hostile_name},
    ]);
    (ids, hostile, sha256_hex(&png))
}

/// Runs one of the peers' Python scripts with `cfg`, expecting its last JSON line to say ok.
async fn run_peer_script(python: &std::path::Path, script: &str, cfg: &Value, dir: &std::path::Path) -> Value {
    let cfg_path = dir.join(format!("{script}.json"));
    std::fs::write(&cfg_path, cfg.to_string()).unwrap();
    let script_path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/peers").join(script);
    let run = tokio::process::Command::new(python).arg(&script_path).arg(&cfg_path).kill_on_drop(true).output();
    let run = tokio::time::timeout(Duration::from_secs(300), run).await.expect("the script finishes in 5 minutes").unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);
    let report: Value = stdout.lines().rev().find_map(|l| serde_json::from_str(l).ok()).unwrap_or(Value::Null);
    assert!(run.status.success() && report["ok"] == true, "{script} failed:\n{stdout}\n{stderr}");
    report
}

#[tokio::test]
async fn mcp_apps_negotiation_fetch_and_uploads_through_the_python_client() {
    let Some((python, _)) = browser_peers() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (ids, _, image_sha256) = apps_artifacts(dir.path());
    let s = Serve::start_in(dir, "", &[]).await;
    let out = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/apps-screenshots");
    std::fs::create_dir_all(&out).unwrap();
    let cfg = json!({"mcp": format!("{}/mcp", s.base), "out": out, "artifact_ids": ids, "image_sha256": image_sha256});
    let report = run_peer_script(&python, "apps_protocol.py", &cfg, s.dir.path()).await;
    eprintln!("{report}");
}

#[tokio::test]
async fn mcp_apps_view_in_a_browser_host() {
    let Some((python, chromium)) = browser_peers() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (ids, hostile, _) = apps_artifacts(dir.path());
    let s = Serve::start_in(dir, "", &[]).await;
    let out = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/apps-screenshots");
    std::fs::create_dir_all(&out).unwrap();
    let peers = stowage_testkit::peers_dir();
    let cfg = json!({
        "mcp": format!("{}/mcp", s.base),
        "out": out,
        "chromium": chromium,
        "node_modules": peers.join("node_modules"),
        "ids": ids,
        "hostile": hostile,
        "links_origin": s.base,
    });
    let report = run_peer_script(&python, "apps_browser.py", &cfg, s.dir.path()).await;
    eprintln!("{report}");
}
