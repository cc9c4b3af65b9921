//! Setting Stowage up, through the real binary: where the store goes when nobody says,
//! server lists that hold Stowage itself, `${VAR}` in entries, one bad entry among good ones,
//! where links point (`--public-url`, `0.0.0.0`), `check-config` running serve's own checks,
//! and the log filter and colours.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use serde_json::{Value, json};
use stowage_testkit::RpcClient;

const BIN: &str = env!("CARGO_BIN_EXE_stowage");

/// A temporary HOME, data directory and working directory; commands run with only these
/// (and PATH) in their environment, as a host would start them.
struct Env {
    tmp: tempfile::TempDir,
}

impl Env {
    fn new() -> Env {
        let env = Env { tmp: tempfile::tempdir().unwrap() };
        for d in ["home", "xdg", "work"] {
            std::fs::create_dir_all(env.path(d)).unwrap();
        }
        env
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.tmp.path().join(rel)
    }

    fn file(&self, rel: &str, text: &str) -> PathBuf {
        let p = self.path(rel);
        std::fs::write(&p, text).unwrap();
        p
    }

    /// Where the default store must land.
    fn data_store(&self) -> PathBuf {
        self.path("xdg/stowage")
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(BIN);
        c.current_dir(self.path("work"))
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", self.path("home"))
            .env("XDG_DATA_HOME", self.path("xdg"))
            .args(args);
        c
    }

    fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap()
    }

    /// Runs a command that must exit by itself (a refusal to start): one that keeps serving
    /// is killed after 20 s and fails the test rather than hanging it.
    fn run_to_exit(&self, args: &[&str]) -> Output {
        let mut child = self.command(args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while child.try_wait().unwrap().is_none() {
            if std::time::Instant::now() > deadline {
                let _ = child.kill();
                panic!("stowage {args:?} kept running: it should have refused to start");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        child.wait_with_output().unwrap()
    }

    fn tokio_command(&self, args: &[&str]) -> tokio::process::Command {
        let mut c = tokio::process::Command::from(self.command(args));
        c.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).kill_on_drop(true);
        c
    }
}

fn out_text(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn err_text(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Starts `stowage ARGS` (a `serve --stdio`), initializes, and returns the client, the child
/// and a task collecting its stderr.
async fn stdio_gateway(env: &Env, args: &[&str]) -> (RpcClient, tokio::process::Child, tokio::task::JoinHandle<String>) {
    let mut child = env.tokio_command(args).spawn().unwrap();
    let mut err = child.stderr.take().unwrap();
    let stderr = tokio::spawn(async move {
        use tokio::io::AsyncReadExt;
        let mut s = String::new();
        let _ = err.read_to_string(&mut s).await;
        s
    });
    let rpc = RpcClient::connect(child.stdout.take().unwrap(), child.stdin.take().unwrap(), None);
    let init = rpc.initialize("2025-06-18", json!({})).await;
    assert!(init["result"]["serverInfo"].is_object(), "{init}");
    (rpc, child, stderr)
}

/// Ends the gateway and returns its stderr (the banner is out: it precedes serving).
async fn finish(rpc: RpcClient, mut child: tokio::process::Child, stderr: tokio::task::JoinHandle<String>) -> String {
    let _ = child.kill().await;
    drop(rpc);
    tokio::time::timeout(Duration::from_secs(10), stderr).await.unwrap().unwrap()
}

async fn tool_names(rpc: &RpcClient) -> Vec<String> {
    let list = rpc.request("tools/list", json!({})).await;
    list["result"]["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap().to_owned()).collect()
}

// ---------------------------------------------------------------------------------------
// Where the store goes

/// Over stdio with no --store and no config, from a directory nobody writes to, the store is
/// the platform data directory; the banner names it, and `artifacts ls` run elsewhere (and
/// `check-config`, for serve over HTTP too) finds the same one.
#[tokio::test]
async fn with_no_store_configured_stdio_stores_in_the_platform_data_directory() {
    let env = Env::new();
    let mut cmd = env.tokio_command(&["serve", "--stdio", "--no-links"]);
    // As root a 0555 directory is still writable; /proc never is.
    cmd.current_dir("/proc");
    let mut child = cmd.spawn().unwrap();
    let mut err = child.stderr.take().unwrap();
    let banner = tokio::spawn(async move {
        use tokio::io::AsyncReadExt;
        let mut s = String::new();
        let _ = err.read_to_string(&mut s).await;
        s
    });
    let rpc = RpcClient::connect(child.stdout.take().unwrap(), child.stdin.take().unwrap(), None);
    let init = rpc.initialize("2025-06-18", json!({})).await;
    assert!(init["result"]["serverInfo"].is_object(), "{init}");
    let r = rpc.call("get_chart", json!({})).await;
    let id = r["result"]["_meta"]["io.stowage/assets"][0]["id"].as_str().unwrap_or_else(|| panic!("offloaded: {r}")).to_owned();
    let stderr = finish(rpc, child, banner).await;
    let store = env.data_store();
    assert!(store.join("index.sqlite").is_file(), "no store in {}: {stderr}", store.display());
    assert!(stderr.contains(&format!("artifacts: fs store {} (the default: this platform's data directory", store.display())), "{stderr}");

    let ls = env.run(&["artifacts", "ls", "--json"]);
    assert!(ls.status.success() && out_text(&ls).contains(&id), "artifacts ls: {}{}", out_text(&ls), err_text(&ls));
    for args in [&["check-config"][..], &["check-config", "--stdio"][..]] {
        let out = env.run(args);
        assert!(out.status.success(), "{}", err_text(&out));
        assert!(out_text(&out).contains(&format!("store: fs store {}", store.display())), "{args:?}: {}", out_text(&out));
    }
    assert!(!env.path("work/.stowage").exists());
}

/// --store and store.dir still choose the store; an older ./.stowage gets a hint.
#[test]
fn an_explicit_store_still_wins_and_an_old_default_store_gets_a_hint() {
    let env = Env::new();
    let config = env.file("stowage.toml", "[store]\ndir = \"from-config\"\n");
    let out = env.run(&["--config", config.to_str().unwrap(), "check-config"]);
    assert!(
        out_text(&out).contains(&format!("store: fs store {} (store.dir", env.path("work/from-config").display())),
        "{}",
        out_text(&out)
    );
    let out = env.run(&["--config", config.to_str().unwrap(), "--store", "flag", "check-config"]);
    assert!(out_text(&out).contains(&format!("store: fs store {} (--store", env.path("work/flag").display())), "{}", out_text(&out));
    std::fs::create_dir_all(env.path("work/.stowage/blobs")).unwrap();
    let out = env.run(&["artifacts", "ls"]);
    assert!(out.status.success(), "{}", err_text(&out));
    assert!(err_text(&out).contains("the ./.stowage here is an older default store: use it with --store .stowage"), "{}", err_text(&out));
}

/// A bad host profile stops `check-config` (and so `serve`) with one line that says what to
/// fix; a good one passes.
#[test]
fn host_profiles_are_checked_before_serving() {
    let env = Env::new();
    for (toml, says) in [
        ("[[hosts]]\nname = \"my-agent\"\nmax_tokens = 4000\n", "needs `match`"),
        ("[[hosts]]\nname = \"codex\"\nmax_tokenz = 4000\n", "max_tokenz"),
        ("[hosts]\nadapt = \"no\"\n", "adapt"),
    ] {
        let config = env.file("stowage.toml", toml);
        let out = env.run(&["--config", config.to_str().unwrap(), "check-config"]);
        assert!(!out.status.success(), "{toml}: {}", out_text(&out));
        let err = err_text(&out);
        assert!(err.contains(says), "{toml}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    }
    let config = env.file("stowage.toml", "[[hosts]]\nname = \"my-agent\"\nmatch = \"my-agent*\"\nmax_tokens = 4000\n");
    let out = env.run(&["--config", config.to_str().unwrap(), "check-config"]);
    assert!(out.status.success(), "{}", err_text(&out));
}

// ---------------------------------------------------------------------------------------
// Server lists: itself, variables, one bad entry

/// A list that holds Stowage itself (by the running binary's path, or by the name
/// `stowage`) serves the rest and says which it skipped; check-config flags them.
#[tokio::test]
async fn an_entry_that_runs_stowage_serve_is_skipped_with_a_warning() {
    let env = Env::new();
    let fixture = stowage_testkit::fixture_bin();
    let servers = json!({"mcpServers": {
        "fixture": {"command": fixture},
        "myself": {"command": BIN, "args": ["serve", "--stdio"]},
        "by-name": {"command": "stowage", "args": ["serve", "--stdio", "--mcp-config", "/x.json"]},
    }});
    let list = env.file("servers.json", &servers.to_string());
    let list = list.to_str().unwrap();
    let (rpc, child, stderr) = stdio_gateway(&env, &["serve", "--stdio", "--no-links", "--mcp-config", list]).await;
    let tools = tool_names(&rpc).await;
    assert!(tools.contains(&"echo".to_owned()), "the fixture is served, unprefixed as the only upstream: {tools:?}");
    assert!(!tools.iter().any(|t| t.starts_with("myself") || t.starts_with("by-name") || t == "get_report"), "{tools:?}");
    let stderr = finish(rpc, child, stderr).await;
    for name in ["myself", "by-name"] {
        assert!(stderr.contains(&format!("stowage: warning: not serving server \"{name}\": ")), "{stderr}");
        assert!(stderr.contains(&format!("NOT SERVED: server \"{name}\"")), "banner: {stderr}");
    }
    assert!(stderr.contains("does not spawn itself"), "{stderr}");

    let out = env.run(&["check-config", "--mcp-config", list]);
    assert!(!out.status.success());
    let text = out_text(&out);
    assert!(text.contains("  error: not served: server \"myself\"") && text.contains("  error: not served: server \"by-name\""), "{text}");
    assert_eq!(err_text(&out).trim(), "error: 2 server entries cannot be served as configured");
    // The same through the trailing command: nothing left to serve is a refusal, not the demo.
    let out = env.run_to_exit(&["serve", "--stdio", "--", BIN, "serve", "--stdio"]);
    assert!(!out.status.success());
    assert!(err_text(&out).starts_with("error: no configured server can be served: server \"stowage\""), "{}", err_text(&out));
}

/// `${VAR}`, `${env:VAR}` and `${VAR:-default}` expand in env values, headers and url, from
/// the gateway's environment; an unset one skips that entry with a line naming the server,
/// the key and the variable, and the other entries are served.
#[tokio::test]
async fn variables_expand_in_env_headers_and_url_and_a_missing_one_names_itself() {
    let env = Env::new();
    let fixture = stowage_testkit::fixture_bin();
    // An HTTP upstream that only records the first request it gets.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = std::thread::spawn(move || {
        use std::io::Read;
        listener.set_nonblocking(false).unwrap();
        let (mut sock, _) = listener.accept().unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut buf = vec![0u8; 16384];
        let mut got = Vec::new();
        while !got.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = sock.read(&mut buf).unwrap_or(0);
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
        }
        String::from_utf8_lossy(&got).into_owned()
    });
    let servers = json!({"mcpServers": {
        "local": {"command": fixture, "env": {"STOWAGE_FIXTURE_LOG": "${LOG_DIR}/fixture-${env:RUN}.log", "LEVEL": "${LEVEL:-info}"}},
        "remote": {"type": "http", "url": "http://127.0.0.1:${REMOTE_PORT}/mcp", "headers": {"X-Team": "${TEAM}", "X-Literal": "pa$$word"}},
        "broken": {"command": fixture, "env": {"API_KEY": "${STOWAGE_TEST_UNSET_KEY}"}},
    }});
    let list = env.file("servers.json", &servers.to_string());
    let list = list.to_str().unwrap();
    let log_dir = env.path("logs");
    std::fs::create_dir_all(&log_dir).unwrap();
    let mut cmd = env.tokio_command(&["serve", "--stdio", "--no-links", "--mcp-config", list]);
    cmd.env("LOG_DIR", &log_dir).env("RUN", "one").env("REMOTE_PORT", port.to_string()).env("TEAM", "bi");
    let mut child = cmd.spawn().unwrap();
    let mut err = child.stderr.take().unwrap();
    let errs = tokio::spawn(async move {
        use tokio::io::AsyncReadExt;
        let mut s = String::new();
        let _ = err.read_to_string(&mut s).await;
        s
    });
    let rpc = RpcClient::connect(child.stdout.take().unwrap(), child.stdin.take().unwrap(), None);
    rpc.initialize("2025-06-18", json!({})).await;
    let r = rpc.call("local_echo", json!({"message": "hi"})).await;
    assert!(r["result"].is_object(), "{r}");
    assert!(log_dir.join("fixture-one.log").is_file(), "env values expanded: the fixture logged to ${{LOG_DIR}}/fixture-${{env:RUN}}.log");
    let request = tokio::task::spawn_blocking(move || seen.join().unwrap()).await.unwrap();
    assert!(request.starts_with("POST /mcp "), "url expanded: {request}");
    let lower = request.to_ascii_lowercase();
    assert!(lower.contains("\r\nx-team: bi\r\n"), "header expanded: {request}");
    assert!(lower.contains("\r\nx-literal: pa$$word\r\n"), "a bare $ stays: {request}");
    let stderr = finish(rpc, child, errs).await;
    let want = "server \"broken\": env.API_KEY uses ${STOWAGE_TEST_UNSET_KEY}, which is not set in stowage's environment";
    assert!(stderr.contains(&format!("stowage: warning: not serving {want}")), "{stderr}");

    let check = |port: &str| {
        let mut c = env.command(&["check-config", "--mcp-config", list]);
        c.env("LOG_DIR", &log_dir).env("RUN", "one").env("REMOTE_PORT", port).env("TEAM", "bi").output().unwrap()
    };
    let out = check("4321");
    assert!(!out.status.success());
    assert!(out_text(&out).contains(&format!("error: not served: {want}")), "{}", out_text(&out));
    assert!(out_text(&out).contains("remote: http http://127.0.0.1:4321/mcp"), "check-config shows the expanded url: {}", out_text(&out));
    assert!(!out_text(&out).contains("remote: http http://127.0.0.1:${"), "{}", out_text(&out));
}

/// A malformed entry among good ones: the good one is served, the bad one reported.
#[tokio::test]
async fn one_bad_entry_does_not_stop_the_others() {
    let env = Env::new();
    let fixture = stowage_testkit::fixture_bin();
    let servers = json!({"mcpServers": {
        "good": {"command": fixture},
        "typo": {"command": fixture, "arg": ["--x"]},
        "nothing": {"description": "neither command nor url"},
    }});
    let list = env.file("servers.json", &servers.to_string());
    let list = list.to_str().unwrap();
    let (rpc, child, stderr) = stdio_gateway(&env, &["serve", "--stdio", "--no-links", "--mcp-config", list]).await;
    let r = rpc.call("echo", json!({"message": "still here"})).await;
    assert!(r["result"]["content"][0]["text"].as_str().unwrap_or_default().contains("still here"), "{r}");
    let stderr = finish(rpc, child, stderr).await;
    assert!(stderr.contains("not serving server \"typo\": unknown key \"arg\" (did you mean \"args\"?)"), "{stderr}");
    assert!(stderr.contains("not serving server \"nothing\": set command (a stdio server) or url"), "{stderr}");
    assert!(stderr.contains("upstream good: stdio"), "the banner lists the good one: {stderr}");
}

// ---------------------------------------------------------------------------------------
// Links

#[test]
fn links_are_never_minted_for_an_unspecified_listen_address() {
    let env = Env::new();
    let store = env.path("store");
    let store = store.to_str().unwrap();
    for listen in ["0.0.0.0:0", "[::]:0"] {
        let out = env.run_to_exit(&["--store", store, "serve", "--listen", listen, "--allow-unauthenticated"]);
        assert!(!out.status.success());
        let err = err_text(&out);
        assert!(err.starts_with("error: download links would point at http://"), "{err}");
        assert!(err.contains("--public-url http://HOST:") && err.contains("links.public_url"), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        // check-config refuses it the same way.
        let out = env.run(&["--store", store, "check-config", "--listen", listen, "--allow-unauthenticated"]);
        assert_eq!(err_text(&out), err, "check-config runs serve's checks");
    }
    let out = env.run(&[
        "--store",
        store,
        "check-config",
        "--listen",
        "0.0.0.0:8787",
        "--allow-unauthenticated",
        "--public-url",
        "http://files.example.com:8787",
    ]);
    assert!(out.status.success(), "{}", err_text(&out));
    assert!(out_text(&out).contains("links: http://files.example.com:8787/artifacts/… (from --public-url)"), "{}", out_text(&out));
    assert!(out_text(&out).contains("warning: listening on 0.0.0.0:8787 without authentication"), "{}", out_text(&out));
}

/// `serve --public-url` puts links on that base, and the gateway still serves them.
#[tokio::test]
async fn serve_mints_links_on_the_public_url() {
    let env = Env::new();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let public = format!("http://localhost:{port}/");
    let store = env.path("store");
    let _child = env
        .tokio_command(&["--store", store.to_str().unwrap(), "serve", "--listen", &format!("127.0.0.1:{port}"), "--public-url", &public])
        .spawn()
        .unwrap();
    let client = reqwest::Client::new();
    let url = format!("http://127.0.0.1:{port}/mcp");
    let mut session = None;
    for _ in 0..200 {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}});
        let req = client.post(&url).header("Accept", "application/json, text/event-stream").header("Content-Type", "application/json");
        if let Ok(r) = req.body(body.to_string()).send().await {
            session = r.headers().get("mcp-session-id").map(|v| v.to_str().unwrap().to_owned());
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let session = session.expect("serve came up");
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "get_chart", "arguments": {}}});
    let text = client
        .post(&url)
        .header("Accept", "application/json, text/event-stream")
        .header("Mcp-Session-Id", &session)
        .header("Content-Type", "application/json")
        .body(call.to_string())
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let link = format!("http://localhost:{port}/artifacts/");
    assert!(text.contains(&link), "links on --public-url: {text}");
    let start = text.find(&link).unwrap();
    // The link ends at the JSON string's quote, or in the stub line at the space before
    // "(expires …)".
    let end = text[start..].find(['"', ' ']).unwrap();
    let got = client.get(&text[start..start + end]).send().await.unwrap();
    assert_eq!(got.status(), 200);
    assert!(got.bytes().await.unwrap().starts_with(b"\x89PNG"));
}

/// sign-url builds on what is configured: --public-url, links.public_url, the listen address;
/// 127.0.0.1:8787 only when nothing is.
#[test]
fn sign_url_uses_the_configured_base() {
    let env = Env::new();
    let store = env.path("store");
    let store = store.to_str().unwrap();
    let pdf = env.file("a.pdf", "%PDF-1.4 hello");
    let put = env.run(&["--store", store, "artifacts", "put", pdf.to_str().unwrap()]);
    assert!(put.status.success(), "{}", err_text(&put));
    let id = serde_json::from_slice::<Value>(&put.stdout).unwrap()["id"].as_str().unwrap().to_owned();
    let sign = |config: &str, extra: &[&str]| {
        let c = env.file("stowage.toml", config);
        let mut args = vec!["--config", c.to_str().unwrap(), "--store", store, "sign-url", &id];
        args.extend_from_slice(extra);
        env.run(&args)
    };
    let starts = |o: &Output, base: &str| {
        assert!(o.status.success(), "{}", err_text(o));
        assert!(out_text(o).starts_with(&format!("{base}/artifacts/{id}?token=")), "{}", out_text(o));
    };
    starts(&sign("", &[]), "http://127.0.0.1:8787");
    starts(&sign("[gateway]\nlisten = \"127.0.0.1:9911\"\n", &[]), "http://127.0.0.1:9911");
    starts(&sign("[links]\npublic_url = \"https://files.example.com/s\"\n", &[]), "https://files.example.com/s");
    starts(&sign("[links]\npublic_url = \"https://files.example.com\"\n", &["--public-url", "http://10.1.2.3:80"]), "http://10.1.2.3:80");
    let out = sign("[gateway]\nlisten = \"0.0.0.0:8787\"\n", &[]);
    assert!(!out.status.success() && err_text(&out).contains("--public-url"), "{}", err_text(&out));
}

// ---------------------------------------------------------------------------------------
// check-config runs serve's checks

#[test]
fn check_config_refuses_what_serve_refuses_and_says_what_it_would_use() {
    let env = Env::new();
    let store = env.path("store");
    let store = store.to_str().unwrap();
    let bad = env.file("bad.toml", "[links]\nttl = \"2h\"\n");
    let serve = env.run_to_exit(&["--config", bad.to_str().unwrap(), "--store", store, "serve", "--stdio"]);
    let check = env.run(&["--config", bad.to_str().unwrap(), "--store", store, "check-config"]);
    assert!(!serve.status.success() && !check.status.success());
    assert_eq!(err_text(&check), "error: links.ttl is 2h; it must be between 1m and 60m\n");
    assert_eq!(err_text(&serve), err_text(&check), "the same check, the same words");
    let missing_key = env.file("key.toml", "[links]\nkeys = [{ id = \"k1\", secret_env = \"STOWAGE_TEST_NO_SUCH_SECRET\" }]\n");
    let check = env.run(&["--config", missing_key.to_str().unwrap(), "--store", store, "check-config"]);
    assert!(!check.status.success() && err_text(&check).contains("STOWAGE_TEST_NO_SUCH_SECRET"), "{}", err_text(&check));
    assert!(!Path::new(store).exists(), "check-config creates nothing");

    let good = env.file("good.toml", "[gateway]\nlisten = \"127.0.0.1:9912\"\n");
    let check = env.run(&["--config", good.to_str().unwrap(), "--store", store, "check-config"]);
    assert!(check.status.success(), "{}", err_text(&check));
    let text = out_text(&check);
    assert!(text.contains("links: http://127.0.0.1:9912/artifacts/… (from the listen address)"), "{text}");
    assert!(text.contains(&format!("store: fs store {store} (--store")), "{text}");
    let check = env.run(&["--config", good.to_str().unwrap(), "--store", store, "check-config", "--stdio"]);
    assert!(out_text(&check).contains("links: loopback listener at http://127.0.0.1:8787"), "{}", out_text(&check));
    let check = env.run(&["--store", store, "check-config", "--stdio", "--public-url", "https://gw.example.com"]);
    assert!(err_text(&check).contains("cannot be used with --stdio"), "{}", err_text(&check));
}

// ---------------------------------------------------------------------------------------
// Logs

#[test]
fn rust_log_is_honoured_stowage_log_wins_and_piped_stderr_has_no_colour() {
    let env = Env::new();
    let input = env.file("result.json", r#"{"content":[{"type":"text","text":"hello"}]}"#);
    let run = |vars: &[(&str, &str)]| {
        let mut c = env.command(&["--store", env.path("store").to_str().unwrap(), "transform", input.to_str().unwrap()]);
        for (k, v) in vars {
            c.env(k, v);
        }
        let out = c.output().unwrap();
        assert!(out.status.success(), "{}", err_text(&out));
        err_text(&out)
    };
    let debug = run(&[("RUST_LOG", "debug")]);
    assert!(debug.contains("transform step"), "RUST_LOG=debug shows debug lines: {debug}");
    assert!(!debug.contains('\x1b'), "no ANSI escapes when stderr is not a terminal: {debug:?}");
    let quiet = run(&[("RUST_LOG", "debug"), ("STOWAGE_LOG", "warn")]);
    assert!(!quiet.contains("transform step"), "STOWAGE_LOG wins over RUST_LOG: {quiet}");
    let bad = run(&[("STOWAGE_LOG", "stowage=loudest")]);
    assert!(bad.starts_with("stowage: warning: STOWAGE_LOG=\"stowage=loudest\" is not a log filter"), "{bad}");
}

/// A command that fails to start says why where the user and the model look: its stand-in
/// tool and `check-config` quote its exit status and the last lines of its stderr (what a
/// Python server missing a module prints), and `check-config` warns of arguments a host would
/// resolve wrongly (a `~`, which no shell expands when a host starts a server).
#[tokio::test]
async fn a_command_that_fails_to_start_is_named_with_its_stderr() {
    let env = Env::new();
    let fixture = stowage_testkit::fixture_bin();
    let servers = json!({"mcpServers": {
        "fixture": {"command": fixture},
        "broken": {"command": "sh", "args": ["-c", "echo 'Traceback (most recent call last):' >&2; echo \"ModuleNotFoundError: No module named 'fastmcp'\" >&2; exit 1"]},
        "tilde": {"command": "sh", "args": ["~/heavy.sh"]},
    }});
    let list = env.file("servers.json", &servers.to_string());
    let list = list.to_str().unwrap();
    let (rpc, child, stderr) = stdio_gateway(&env, &["serve", "--stdio", "--no-links", "--mcp-config", list]).await;
    let tools = rpc.request("tools/list", json!({})).await;
    let standin = tools["result"]["tools"].as_array().unwrap().iter().find(|t| t["name"] == "broken_unavailable").cloned();
    let standin = standin.unwrap_or_else(|| panic!("no stand-in for the broken server: {tools}"));
    let said = standin["description"].as_str().unwrap();
    assert!(said.contains("exited with status 1") && said.contains("ModuleNotFoundError: No module named 'fastmcp'"), "{said}");
    let r = rpc.call("broken_unavailable", json!({})).await;
    assert!(r.to_string().contains("ModuleNotFoundError"), "the call says why too: {r}");
    finish(rpc, child, stderr).await;

    let out = env.run(&["check-config", "--mcp-config", list]);
    let text = out_text(&out);
    assert!(out.status.success(), "warnings only: {text}{}", err_text(&out));
    assert!(text.contains("server \"broken\" does not start: exited with status 1; its stderr ended:"), "{text}");
    assert!(text.contains("ModuleNotFoundError: No module named 'fastmcp'"), "{text}");
    assert!(text.contains("argument \"~/heavy.sh\" has a \"~\""), "{text}");
    assert!(text.contains("probe: answers initialize (stowage-fixture 1)"), "{text}");
    let strict = env.run(&["check-config", "--strict", "--mcp-config", list]);
    assert!(!strict.status.success(), "--strict fails on them: {}", out_text(&strict));
}
