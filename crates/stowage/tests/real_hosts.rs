//! The real hosts, end to end: Claude Code (`claude -p`) and Codex CLI (`codex exec`), the
//! versions docs/results.md's host section names, run through `stowage serve` exactly as README's
//! snippets configure them, with a model server of our own (`stowage_testkit::model_stub`)
//! standing in for the model API. The model is played by a plan that reads what came back and
//! picks the next call, the way a model investigates: a needle in a 20,000-line log (by grep,
//! then by reading the page there), a fact on page 7 of a PDF, one order among 20,000 (by
//! `artifact_query`), the root cause at the end of a 40 KB error trace, and a zoomed region of
//! a 2400×1600 screenshot. What the test checks is what each host put in front of its model,
//! read from the requests the model server received:
//!
//! - every needle above reached the model, and the zoom as an image;
//! - every tool result is within that host's own limit (Claude Code: 50,000 characters before
//!   it files a result away, and 10,000 tokens, where its terminal warns; Codex: about 12,000
//!   bytes before it cuts the middle out) and was neither filed away nor cut by the host;
//! - over stdio, an upstream that takes 6 s to start is in the host's first model request
//!   (Codex never lists again, so a tool missing there is missing for good).
//!
//! The hosts are installed by scripts/gateway-peers.sh at pinned versions. One that cannot be
//! installed or started fails the test with that reason (and under `CI` a missing one fails
//! it too); one whose behaviour changed shows up as a needle that did not arrive, named.

use crate::hosts_support;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use serde_json::{Value, json};
use stowage_testkit::investigation::{NEEDLE, NEEDLE_LINE, RARE_ORDER, ROOT_CAUSE};
use stowage_testkit::model_stub::{ModelStub, Plan, Recorded, Turn};

/// What page 7 of the report says, and nothing else in the PDF does.
const PAGE_SEVEN_FACT: &str = "PAGE-SEVEN-FACT the Lisbon office closed the quarter at 4.2 million EUR";
/// The region of the screenshot the plan zooms into, and the colour painted there.
const REGION: (u32, u32, u32, u32) = (1800, 1100, 300, 200);
const MARK: [u8; 3] = [220, 30, 40];
/// How long the slow upstream takes before it reads its first message.
const SLOW_START_MS: u64 = 6_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HostKind {
    ClaudeCode,
    Codex,
}

impl HostKind {
    fn bin(self) -> &'static str {
        match self {
            HostKind::ClaudeCode => "node_modules/.bin/claude",
            HostKind::Codex => "node_modules/.bin/codex",
        }
    }
}

/// One tool result as the host showed it to the model.
#[derive(Debug, Clone, Default)]
struct SeenResult {
    /// Every text the model reads of it, joined.
    text: String,
    /// The images, decoded.
    images: Vec<Vec<u8>>,
    /// The host marked it as an error (Claude Code's `is_error`).
    is_error: bool,
}

/// The tools a request offers the model: Claude Code's flat names (`mcp__stowage__get_log`),
/// Codex's namespaces joined the same way.
fn offered(body: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for t in body["tools"].as_array().into_iter().flatten() {
        match t["type"].as_str() {
            Some("namespace") => {
                let ns = t["name"].as_str().unwrap_or_default();
                for f in t["tools"].as_array().into_iter().flatten() {
                    out.push(format!("{ns}__{}", f["name"].as_str().unwrap_or_default()));
                }
            }
            _ => out.extend(t["name"].as_str().map(str::to_owned)),
        }
    }
    out
}

fn decode_data_url(url: &str) -> Option<Vec<u8>> {
    let data = url.split_once(";base64,")?.1;
    base64::engine::general_purpose::STANDARD.decode(data).ok()
}

/// Every tool result in a request, in order, as the model reads it.
fn results(body: &Value) -> Vec<SeenResult> {
    let mut out = Vec::new();
    // Anthropic Messages: tool_result blocks in user messages.
    for m in body["messages"].as_array().into_iter().flatten() {
        for b in m["content"].as_array().into_iter().flatten().filter(|b| b["type"] == "tool_result") {
            let mut seen = SeenResult { is_error: b["is_error"] == true, ..Default::default() };
            match &b["content"] {
                Value::String(s) => seen.text = s.clone(),
                Value::Array(blocks) => {
                    let mut texts = Vec::new();
                    for c in blocks {
                        match c["type"].as_str() {
                            Some("text") => texts.push(c["text"].as_str().unwrap_or_default().to_owned()),
                            Some("image") => seen.images.extend(
                                c["source"]["data"].as_str().and_then(|d| base64::engine::general_purpose::STANDARD.decode(d).ok()),
                            ),
                            _ => texts.push(c.to_string()),
                        }
                    }
                    seen.text = texts.join("\n");
                }
                _ => {}
            }
            out.push(seen);
        }
    }
    // OpenAI Responses: function_call_output items.
    for item in body["input"].as_array().into_iter().flatten().filter(|i| i["type"] == "function_call_output") {
        let mut seen = SeenResult::default();
        match &item["output"] {
            Value::String(s) => seen.text = s.clone(),
            Value::Array(parts) => {
                let mut texts = Vec::new();
                for p in parts {
                    match p["type"].as_str() {
                        Some("input_text") => texts.push(p["text"].as_str().unwrap_or_default().to_owned()),
                        Some("input_image") => seen.images.extend(p["image_url"].as_str().and_then(decode_data_url)),
                        _ => texts.push(p.to_string()),
                    }
                }
                seen.text = texts.join("\n");
            }
            _ => {}
        }
        out.push(seen);
    }
    out
}

/// The first `artifact://` id in `text`.
fn artifact_id(text: &str) -> Option<String> {
    let at = text.find("artifact://")? + "artifact://".len();
    let id: String = text[at..].chars().take_while(|c| c.is_ascii_alphanumeric() || "_.-".contains(*c)).collect();
    (!id.is_empty()).then_some(id)
}

/// The steps of the investigation: the tool each calls (by the name the gateway gives it), and
/// its arguments from what came back so far. `None`: nothing more to call.
fn step(n: usize, seen: &[SeenResult]) -> Result<Option<(&'static str, Value)>, String> {
    let id_from = |k: usize, what: &str| -> Result<String, String> {
        artifact_id(&seen[k].text)
            .ok_or_else(|| format!("no artifact:// reference to the {what} in what the model saw: {}", head(&seen[k].text)))
    };
    Ok(Some(match n {
        0 => ("get_log", json!({})),
        1 => ("artifact_read", json!({"id": id_from(0, "log")?, "grep": "NEEDLE-4417"})),
        2 => {
            // The grep lists `line@offset: text`: read the page that starts at the match.
            let offset: u64 = seen[1]
                .text
                .lines()
                .filter(|l| l.contains("NEEDLE-4417"))
                .find_map(|l| {
                    let (at, _) = l.split_once(": ")?;
                    let (line, offset) = at.trim().split_once('@')?;
                    line.parse::<u64>().ok().and(offset.parse().ok())
                })
                .ok_or_else(|| format!("no line@offset: text with the needle in {}", head(&seen[1].text)))?;
            ("artifact_read", json!({"id": id_from(0, "log")?, "offset": offset}))
        }
        3 => ("get_report", json!({})),
        4 => ("artifact_read", json!({"id": id_from(3, "report")?, "pages": "7"})),
        5 => ("get_orders", json!({})),
        6 => ("artifact_query", json!({"id": id_from(5, "orders")?, "jmespath": format!("orders[?id=='{RARE_ORDER}']")})),
        7 => ("run_job", json!({})),
        8 => ("take_screenshot", json!({})),
        9 => {
            let (x, y, width, height) = REGION;
            ("artifact_read", json!({"id": id_from(8, "screenshot")?, "region": {"x": x, "y": y, "width": width, "height": height}}))
        }
        _ => return Ok(None),
    }))
}

fn head(text: &str) -> &str {
    &text[..stowage_core::cut_at_char(text, 600).len()]
}

/// The model: each request's next turn from the tool results it carries.
fn plan() -> Plan {
    Arc::new(|r: &Recorded| {
        let body = r.json();
        let tools = offered(&body);
        if tools.is_empty() {
            return Turn::Text("OK".into());
        }
        let seen = results(&body);
        match step(seen.len(), &seen) {
            Ok(Some((tool, args))) => match tools.iter().find(|t| t.as_str() == tool || t.ends_with(&format!("__{tool}"))) {
                Some(name) => Turn::tool(name, args),
                None => Turn::Text(format!("PLAN-FAILED at step {}: {tool} is not offered; offered: {tools:?}", seen.len())),
            },
            Ok(None) => Turn::Text("DONE: the investigation is complete.".into()),
            Err(why) => Turn::Text(format!("PLAN-FAILED at step {}: {why}", seen.len())),
        }
    })
}

/// The files the fixture serves and the server list that starts it.
struct World {
    dir: tempfile::TempDir,
    peers: PathBuf,
}

impl World {
    fn new(peers: PathBuf, slow: bool) -> World {
        let dir = tempfile::tempdir().unwrap();
        let pages: Vec<String> = (1..=8)
            .map(|p| {
                let filler: String =
                    (0..40).map(|i| format!("Page {p} line {i}: the regional figures were reconciled with the ledger.\n")).collect();
                if p == 7 { format!("{filler}{PAGE_SEVEN_FACT}\n") } else { filler }
            })
            .collect();
        let pdf = stowage_media::testing::text_pdf(&pages.iter().map(String::as_str).collect::<Vec<_>>());
        std::fs::write(dir.path().join("report.pdf"), pdf).unwrap();
        let mut shot = image::load_from_memory(&stowage_media::testing::screenshot_png(2400, 1600)).unwrap().to_rgb8();
        let (x, y, w, h) = REGION;
        for py in y..y + h {
            for px in x..x + w {
                shot.put_pixel(px, py, image::Rgb(MARK));
            }
        }
        let mut png = Vec::new();
        shot.write_to(&mut std::io::Cursor::new(&mut png), image::ImageFormat::Png).unwrap();
        std::fs::write(dir.path().join("screen.png"), png).unwrap();
        let mut env = json!({"STOWAGE_HOSTS_FIXTURE_DIR": dir.path()});
        if slow {
            env["STOWAGE_FIXTURE_START_DELAY_MS"] = json!(SLOW_START_MS.to_string());
        }
        let servers = json!({"mcpServers": {"investigation": {"command": stowage_testkit::hosts_fixture_bin(), "env": env}}});
        std::fs::write(dir.path().join("servers.json"), servers.to_string()).unwrap();
        std::fs::create_dir_all(dir.path().join("home")).unwrap();
        std::fs::create_dir_all(dir.path().join("work")).unwrap();
        World { dir, peers }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The host's own environment: nothing of ours but PATH, a scratch HOME (where the host
    /// keeps its state and Stowage its store) and the model server.
    fn host_env(&self, kind: HostKind, stub: &ModelStub) -> Vec<(String, String)> {
        let home = self.path("home");
        let mut env = vec![
            ("PATH".to_owned(), "/usr/local/bin:/usr/bin:/bin".to_owned()),
            ("HOME".to_owned(), home.display().to_string()),
            ("LANG".to_owned(), "C.UTF-8".to_owned()),
        ];
        match kind {
            HostKind::ClaudeCode => env.extend(
                [
                    ("ANTHROPIC_BASE_URL", stub.origin()),
                    ("ANTHROPIC_API_KEY", "sk-ant-test".to_owned()),
                    ("DISABLE_TELEMETRY", "1".to_owned()),
                    ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1".to_owned()),
                    ("DISABLE_AUTOUPDATER", "1".to_owned()),
                    // Wait for the servers before the first model request, as a user who wants
                    // the tools at once sets it (the default connects in the background).
                    ("MCP_CONNECTION_NONBLOCKING", "false".to_owned()),
                    ("MCP_CONNECT_TIMEOUT_MS", "60000".to_owned()),
                ]
                .map(|(k, v)| (k.to_owned(), v)),
            ),
            HostKind::Codex => env.extend([
                ("CODEX_HOME".to_owned(), home.join("codex").display().to_string()),
                ("STUB_KEY".to_owned(), "sk-test".to_owned()),
            ]),
        }
        env
    }

    fn command(&self, kind: HostKind, stub: &ModelStub, args: &[&str]) -> std::process::Command {
        let mut cmd = std::process::Command::new(self.peers.join(kind.bin()));
        cmd.env_clear().envs(self.host_env(kind, stub)).args(args).current_dir(self.path("work")).stdin(std::process::Stdio::null());
        cmd
    }
}

/// README's snippet `name` (the fenced block after `<!-- snippet: name -->`).
fn snippet(name: &str) -> String {
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md")).unwrap();
    let marker = format!("<!-- snippet: {name} -->");
    let after = readme.split_once(&marker).unwrap_or_else(|| panic!("README.md has no {marker}")).1;
    let body = &after[after.find("```").unwrap()..];
    let body = &body[body.find('\n').unwrap() + 1..];
    body[..body.find("```").unwrap()].to_owned()
}

const PLACEHOLDER: &str = "/ABSOLUTE/PATH/TO/servers.json";

/// How the host reaches Stowage: spawned over stdio as README says, or an HTTP gateway.
enum Transport {
    Stdio,
    Http(String),
}

/// Configures `kind` to use Stowage, as README's snippet says.
fn configure(w: &World, kind: HostKind, stub: &ModelStub, transport: &Transport) {
    let stowage = env!("CARGO_BIN_EXE_stowage");
    let servers = w.path("servers.json").display().to_string();
    match kind {
        HostKind::ClaudeCode => {
            let text = snippet(match transport {
                Transport::Stdio => "claude-code",
                Transport::Http(_) => "claude-code-http",
            });
            let line = text.lines().find(|l| l.starts_with("claude mcp add")).expect("a `claude mcp add` line");
            let mut words = shlex::split(line).expect("shell words");
            for word in words.iter_mut() {
                if word == PLACEHOLDER {
                    *word = servers.clone();
                } else if word == "http://127.0.0.1:8787/mcp"
                    && let Transport::Http(url) = transport
                {
                    *word = url.clone();
                }
            }
            if let Some(sep) = words.iter().position(|w| w == "--") {
                assert_eq!(words[sep + 1], "stowage", "{line}");
                words[sep + 1] = stowage.to_owned();
            }
            let out = w.command(kind, stub, &words[1..].iter().map(String::as_str).collect::<Vec<_>>()).output().expect("claude starts");
            assert!(out.status.success(), "{line}: {}", String::from_utf8_lossy(&out.stderr));
        }
        HostKind::Codex => {
            let text = snippet(match transport {
                Transport::Stdio => "codex",
                Transport::Http(_) => "codex-http",
            });
            let text = text.replace(PLACEHOLDER, &servers).replace("command = \"stowage\"", &format!("command = {stowage:?}"));
            let text = match transport {
                Transport::Http(url) => text.replace("http://127.0.0.1:8787/mcp", url),
                Transport::Stdio => text,
            };
            // The model provider is the test's; approving the server's tools up front is what
            // a user running `codex exec` unattended sets.
            let config = format!(
                "model = \"gpt-5\"\nmodel_provider = \"stub\"\napproval_policy = \"never\"\nsandbox_mode = \"read-only\"\n\n\
                 [model_providers.stub]\nname = \"stub\"\nbase_url = \"{}\"\nwire_api = \"responses\"\nenv_key = \"STUB_KEY\"\n\n{}\ndefault_tools_approval_mode = \"approve\"\n",
                stub.base_url(),
                text.trim_end()
            );
            let home = w.path("home").join("codex");
            std::fs::create_dir_all(&home).unwrap();
            std::fs::write(home.join("config.toml"), config).unwrap();
        }
    }
}

/// Runs the investigation in `kind` and returns the model requests of its conversation.
async fn investigate(w: &World, kind: HostKind, stub: &ModelStub) -> Vec<Value> {
    let prompt = "Investigate the payment failures with the tools you have.";
    let args: Vec<&str> = match kind {
        HostKind::ClaudeCode => {
            vec!["-p", prompt, "--allowedTools", "mcp__stowage", "--output-format", "stream-json", "--verbose", "--max-turns", "30"]
        }
        HostKind::Codex => vec!["exec", "--skip-git-repo-check", "--json", prompt],
    };
    let mut cmd = tokio::process::Command::from(w.command(kind, stub, &args));
    cmd.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).kill_on_drop(true);
    let run = cmd.spawn().unwrap_or_else(|e| panic!("{kind:?} does not start: {e}")).wait_with_output();
    let out =
        tokio::time::timeout(Duration::from_secs(240), run).await.unwrap_or_else(|_| panic!("{kind:?} did not finish in 240 s")).unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{kind:?} failed ({}):\n{stderr}\n{}", out.status, head(&stdout));
    let requests: Vec<Value> = stub.requests().iter().map(Recorded::json).filter(|b| !offered(b).is_empty()).collect();
    assert!(!requests.is_empty(), "{kind:?} sent the model nothing:\n{stderr}");
    let last = requests.last().unwrap();
    let n = results(last).len();
    let failed = stdout.lines().chain(stderr.lines()).find(|l| l.contains("PLAN-FAILED")).map(str::to_owned);
    assert!(failed.is_none() && n >= 10, "{kind:?} stopped after {n} tool results: {failed:?}\n{}", head(&stdout));
    requests
}

/// What must reach the model, per tool result, and the host's own limits for every result.
/// `screenshot_bytes`: the size of the original screenshot.
fn check(kind: HostKind, requests: &[Value], screenshot_bytes: usize) {
    let last = requests.last().unwrap();
    let seen = results(last);
    let ctx = |k: usize| format!("{kind:?}, result {k}: {}", head(&seen[k].text));
    // The needle: by grep, then on the page read from there, with the lines after it.
    assert!(seen[1].text.contains(NEEDLE), "{}", ctx(1));
    assert!(seen[2].text.contains(NEEDLE), "{}", ctx(2));
    assert!(seen[2].text.contains(&format!("request r-{} served", NEEDLE_LINE + 1)), "the page goes on after the needle: {}", ctx(2));
    assert!(seen[4].text.contains(PAGE_SEVEN_FACT), "{}", ctx(4));
    assert!(seen[6].text.contains(RARE_ORDER) && seen[6].text.contains("Ada Lovelace"), "{}", ctx(6));
    assert!(seen[7].text.contains(ROOT_CAUSE), "the root cause at the end of the trace: {}", ctx(7));
    // The screenshot: a preview reached the model, and the zoom is the original's pixels.
    assert!(!seen[8].images.is_empty(), "no preview of the screenshot: {}", ctx(8));
    let preview = seen[8].images[0].len();
    assert!(preview < screenshot_bytes, "{kind:?}: a {preview}-byte preview of a {screenshot_bytes}-byte screenshot");
    let zoom = seen[9].images.first().unwrap_or_else(|| panic!("the zoom is not an image: {}", ctx(9)));
    let zoom = image::load_from_memory(zoom).unwrap().to_rgb8();
    assert_eq!((zoom.width(), zoom.height()), (REGION.2, REGION.3), "{kind:?}: the region at native resolution");
    assert_eq!(zoom.get_pixel(REGION.2 / 2, REGION.3 / 2).0, MARK, "{kind:?}: the region is the marked one");
    // What the model read, per result (BENCHMARKS.md quotes it): o200k tokens of text, plus
    // ⌈w/28⌉ × ⌈h/28⌉ per image.
    let per_result: Vec<u64> = seen
        .iter()
        .map(|r| {
            let images: u64 = r
                .images
                .iter()
                .filter_map(|b| imagesize::blob_size(b).ok())
                .map(|d| (d.width as u64).div_ceil(28) * (d.height as u64).div_ceil(28))
                .sum();
            stowage_transform::tokens::count_exact(&r.text) + images
        })
        .collect();
    eprintln!("{kind:?}: tokens the model read per tool result {per_result:?}, {} in all", per_result.iter().sum::<u64>());
    // Every result within the host's own limits, and none filed away or cut by the host.
    for (k, r) in seen.iter().enumerate() {
        let tokens = stowage_transform::tokens::count_exact(&r.text);
        match kind {
            HostKind::ClaudeCode => {
                assert!(r.text.chars().count() <= 50_000 && tokens <= 10_000, "{}: {tokens} tokens", ctx(k));
                for marker in ["<persisted-output>", "exceeds maximum allowed tokens", "[OUTPUT TRUNCATED", "characters truncated]"] {
                    assert!(!r.text.contains(marker), "Claude Code cut or filed it ({marker}): {}", ctx(k));
                }
            }
            HostKind::Codex => {
                assert!(r.text.len() <= 11_950, "{}: {} bytes", ctx(k), r.text.len());
                assert!(!r.text.contains("tokens truncated") && !r.text.contains("[omitted"), "Codex cut it: {}", ctx(k));
            }
        }
    }
    // Codex never says a result was an error: the gateway's first line does.
    if kind == HostKind::Codex {
        assert!(seen[7].text.contains("this tool call failed"), "{}", ctx(7));
    } else {
        assert!(seen[7].is_error, "{}", ctx(7));
    }
}

fn peers() -> Option<PathBuf> {
    let dir = stowage_testkit::peers_dir();
    for kind in [HostKind::ClaudeCode, HostKind::Codex] {
        stowage_testkit::require_peer(kind.bin())?;
    }
    Some(dir)
}

/// Stops the store's link server a stdio gateway started (it outlives the session on purpose).
fn stop_link_server(w: &World) {
    let _ = std::process::Command::new(env!("CARGO_BIN_EXE_stowage"))
        .args(["links", "stop"])
        .env("HOME", w.path("home"))
        .env_remove("XDG_DATA_HOME")
        .output();
}

async fn over_stdio(kind: HostKind) {
    let Some(peers) = peers() else { return };
    let w = World::new(peers, true);
    let stub = ModelStub::planned(plan()).await;
    configure(&w, kind, &stub, &Transport::Stdio);
    let requests = investigate(&w, kind, &stub).await;
    stop_link_server(&w);
    // The slow upstream's tools are in the very first request.
    let first = offered(&requests[0]);
    assert!(first.iter().any(|t| t.ends_with("get_log")), "{kind:?}: the first request lacks the slow upstream's tools: {first:?}");
    check(kind, &requests, std::fs::metadata(w.path("screen.png")).unwrap().len() as usize);
}

async fn over_http(kind: HostKind) {
    let Some(peers) = peers() else { return };
    let w = World::new(peers, false);
    let args = vec![
        "--store".to_owned(),
        w.path("store").display().to_string(),
        "serve".to_owned(),
        "--mcp-config".to_owned(),
        w.path("servers.json").display().to_string(),
    ];
    let (_gateway, url) = hosts_support::serve_http(w.dir.path(), args, &[]).await;
    let stub = ModelStub::planned(plan()).await;
    configure(&w, kind, &stub, &Transport::Http(url));
    let requests = investigate(&w, kind, &stub).await;
    check(kind, &requests, std::fs::metadata(w.path("screen.png")).unwrap().len() as usize);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_code_over_stdio_shows_its_model_every_needle() {
    over_stdio(HostKind::ClaudeCode).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_over_stdio_shows_its_model_every_needle() {
    over_stdio(HostKind::Codex).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_code_over_http_shows_its_model_every_needle() {
    over_http(HostKind::ClaudeCode).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_over_http_shows_its_model_every_needle() {
    over_http(HostKind::Codex).await;
}
