//! Stowage as a host spawns it: `stowage serve --stdio --mcp-config /ABS/servers.json`,
//! started by the official Python client (`mcp` 2.3.0) from `/` with only `PATH` and `HOME` in
//! its environment, in front of the real `@modelcontextprotocol/server-everything` (and a
//! FastMCP server). What a user of Claude Desktop or Cursor would check:
//! - a download link keeps working after the host's session ends, with two hosts at once,
//!   across a restart, and when the configured port is taken by another program; the store's
//!   link server says where and until when (`stowage links status`) and stops when told;
//! - `stowage.toml` is found beside `servers.json`, in `~/.config/stowage/`, in the working
//!   directory, from `--config` and `STOWAGE_CONFIG`, in that order, and the banner and
//!   `check-config` say which (a broken file in a later place proves it was not read);
//! - `~` and relative paths get one line naming the working directory;
//! - a down HTTP upstream and a missing command are visible to the model and answered at once,
//!   and `check-config` and `serve` say the same about them;
//! - a file put with `stowage artifacts put` is read by the model through the gateway;
//! - a server that lists no resources gets no generated resource tools, and server-everything's
//!   roots request at start is answered quietly.
//!
//! A missing peer skips a test with a loud message on a developer machine, and fails it under
//! `CI`. Every link server a test starts is stopped when the test ends (and exits by itself
//! once its store directory is gone).

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_stowage");
const PYTHON: &str = "venv/bin/python";
const EVERYTHING: &str = "node_modules/@modelcontextprotocol/server-everything/dist/index.js";
const NOTE: &str = "hello from the shell\nput with stowage artifacts put\n";

/// A user's machine: a temporary HOME, and a directory holding `servers.json` (and maybe
/// `stowage.toml` beside it).
struct Machine {
    tmp: tempfile::TempDir,
}

impl Machine {
    fn new() -> Machine {
        let m = Machine { tmp: tempfile::tempdir().unwrap() };
        for d in ["home", "conf", "shell"] {
            std::fs::create_dir_all(m.path(d)).unwrap();
        }
        m
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.tmp.path().join(rel)
    }

    fn write(&self, rel: &str, text: &str) -> PathBuf {
        let p = self.path(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, text).unwrap();
        p
    }

    fn servers(&self, servers: Value) -> PathBuf {
        self.write("conf/servers.json", &json!({ "mcpServers": servers }).to_string())
    }

    /// The default store: the platform's data directory under HOME.
    fn store(&self) -> PathBuf {
        self.path("home/.local/share/stowage")
    }

    /// `stowage ARGS` run from the user's shell (in `shell/`), with only PATH and HOME.
    fn cli(&self, args: &[&str]) -> Command {
        self.cli_in(&self.path("shell"), args)
    }

    fn cli_in(&self, cwd: &Path, args: &[&str]) -> Command {
        let mut c = Command::new(BIN);
        c.current_dir(cwd).env_clear().env("PATH", std::env::var("PATH").unwrap_or_default()).env("HOME", self.path("home")).args(args);
        c
    }

    fn run(&self, args: &[&str]) -> Output {
        run_to_exit(self.cli(args))
    }

    /// One host session: the Python client starts `stowage serve --stdio --mcp-config
    /// conf/servers.json` from `/` with only PATH and HOME, lists the tools, makes `calls`, and
    /// closes. Returns what it saw and the gateway's stderr (the banner).
    async fn session(&self, python: &Path, calls: Value) -> (Value, String) {
        let spec = json!({
            "command": BIN,
            "args": ["serve", "--stdio", "--mcp-config", self.path("conf/servers.json")],
            "env": {"PATH": std::env::var("PATH").unwrap_or_default(), "HOME": self.path("home")},
            "cwd": "/",
            "calls": calls,
        });
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/peers/host_session.py");
        let child = tokio::process::Command::new(python)
            .arg(script)
            .arg(spec.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let out = tokio::time::timeout(Duration::from_secs(90), child.wait_with_output()).await.expect("the host session hung").unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "the host session failed:\n{stderr}");
        (serde_json::from_slice(&out.stdout).unwrap(), stderr)
    }

    /// Puts NOTE from the shell, as the user would; returns its id.
    fn put_note(&self) -> String {
        let file = self.write("shell/note.txt", NOTE);
        let out = self.run(&["artifacts", "put", file.to_str().unwrap()]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        v["id"].as_str().unwrap().to_owned()
    }
}

impl Drop for Machine {
    /// Stops the store's link server, if a test started one (even a failed test).
    fn drop(&mut self) {
        if self.store().join("links").exists() {
            let _ = run_to_exit(self.cli(&["links", "stop"]));
        }
    }
}

/// Runs a command that must exit by itself; one still running after 30 s fails the test.
fn run_to_exit(mut cmd: Command) -> Output {
    let mut child = cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("{cmd:?} kept running");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

fn text(o: &Output) -> (String, String) {
    (String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr).into_owned())
}

fn peers() -> Option<(PathBuf, PathBuf)> {
    Some((stowage_testkit::require_peer(PYTHON)?, stowage_testkit::require_peer(EVERYTHING)?))
}

/// A free port to configure: taken from below Linux's ephemeral range (32768 and up), so that
/// no outgoing connection (the Python client's, npm's) can be given it between this check and
/// the link server's bind, which would send links to the store's own port instead.
fn free_port() -> u16 {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
    let seed = u64::from(std::process::id()) << 32 | u64::from(nanos);
    (0..4000u64)
        .map(|i| 20_000 + (seed.wrapping_mul(2_654_435_761).wrapping_add(i * 7_919) % 12_000) as u16)
        .find(|&p| std::net::TcpListener::bind(("127.0.0.1", p)).is_ok())
        .expect("a free port between 20000 and 32000")
}

fn tool_names(seen: &Value) -> Vec<String> {
    seen["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap().to_owned()).collect()
}

fn call_text(result: &Value) -> String {
    result["content"].as_array().unwrap().iter().filter_map(|c| c["text"].as_str()).collect::<Vec<_>>().join("\n")
}

/// The download link `artifact_url` answered with.
fn link_of(result: &Value) -> String {
    assert_ne!(result["isError"], true, "{result}");
    result["structuredContent"]["url"].as_str().unwrap_or_else(|| panic!("no url: {result}")).to_owned()
}

async fn download(url: &str) -> Result<(u16, String), reqwest::Error> {
    let client = reqwest::Client::builder().no_proxy().timeout(Duration::from_secs(10)).build().unwrap();
    let resp = client.get(url).send().await?;
    let status = resp.status().as_u16();
    Ok((status, resp.text().await?))
}

fn url_calls(id: &str) -> Value {
    json!([
        {"tool": "artifact_url", "arguments": {"id": id}},
        {"tool": "artifact_read", "arguments": {"id": id}},
    ])
}

// ---------------------------------------------------------------------------------------
// Links that outlive the host's session

/// Two hosts at once, each closes, the links still download; a restarted host reuses the
/// same server and port, and yesterday's link still works; `links status` says where and
/// until when, `links stop` ends it. The config beside servers.json (which sets the port) is
/// the one used, and a file put from the shell is read by the model.
#[tokio::test]
async fn links_outlive_the_session_for_two_hosts_at_once_and_a_restart() {
    let Some((python, everything)) = peers() else { return };
    let m = Machine::new();
    let port = free_port();
    m.servers(json!({"everything": {"command": "node", "args": [everything, "stdio"]}}));
    let toml = m.write("conf/stowage.toml", &format!("[links]\npublic_url = \"http://127.0.0.1:{port}\"\n"));
    let id = m.put_note();

    let (a, b) = tokio::join!(m.session(&python, url_calls(&id)), m.session(&python, url_calls(&id)));
    let base = format!("http://127.0.0.1:{port}/artifacts/");
    let mut links = Vec::new();
    for (seen, stderr) in [&a, &b] {
        let link = link_of(&seen["calls"][0]);
        assert!(link.starts_with(&base), "links are served on the configured port: {link}");
        // The CLI stored as the gateway's local user: the model reads it.
        assert!(call_text(&seen["calls"][1]).contains("hello from the shell"), "{}", seen["calls"][1]);
        assert!(stderr.contains(&format!("config: {} (beside the --mcp-config file)", toml.display())), "{stderr}");
        assert!(stderr.contains(&format!("download links: http://127.0.0.1:{port}/artifacts/")), "{stderr}");
        assert!(stderr.contains("link server"), "{stderr}");
        // The host declared no sampling: server-everything offers it what it offers such a
        // client directly (the gateway's upstream session declared the host's capabilities),
        // so no sampling tool it could not serve.
        let tools: Vec<&str> = seen["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
        assert!(tools.contains(&"echo") && !tools.contains(&"trigger-sampling-request"), "{tools:?}");
        links.push(link);
    }
    // Both hosts have closed their sessions (their gateways are gone): the links download.
    for link in &links {
        assert_eq!(download(link).await.unwrap(), (200, NOTE.to_owned()), "{link}");
    }
    let (status, _) = text(&m.run(&["links", "status"]));
    assert!(status.contains(&format!("served at http://127.0.0.1:{port}/artifacts/")) && status.contains("until at least"), "{status}");
    let pid = status.split("by pid ").nth(1).unwrap().split_whitespace().next().unwrap().to_owned();
    // The lease honours the links' TTL (15 min): the server runs until the last link a gateway
    // could have minted has expired (plus three 10 s renewal periods), and not longer.
    let until = status.split("until at least ").nth(1).unwrap().split_whitespace().next().unwrap();
    let until = time::OffsetDateTime::parse(until, &time::format_description::well_known::Rfc3339).unwrap().unix_timestamp();
    let now = time::OffsetDateTime::now_utc().unix_timestamp();
    assert!((now + 900 - 20..=now + 930).contains(&until), "until {until}, now {now}: {status}");

    // A restart: a new session reuses the server (the same pid and port); yesterday's links
    // work. server-everything's catalog, kept since the first session, is shown at once and
    // its tools answer as soon as it is up.
    assert!(std::fs::read_dir(m.store().join("upstreams")).unwrap().count() == 1, "one kept catalog");
    let mut calls = url_calls(&id);
    calls.as_array_mut().unwrap().push(json!({"tool": "echo", "arguments": {"message": "right after start"}}));
    let (c, _) = m.session(&python, calls).await;
    assert!(link_of(&c["calls"][0]).starts_with(&base));
    assert!(call_text(&c["calls"][2]).contains("right after start"), "{}", c["calls"][2]);
    assert_eq!(download(&links[0]).await.unwrap().0, 200);
    let (status, _) = text(&m.run(&["links", "status"]));
    assert!(status.contains(&format!("by pid {pid} ")), "the same server: {status}");

    // Stopped: its links stop working, and status says nothing runs.
    let out = m.run(&["links", "stop"]);
    assert!(out.status.success(), "{:?}", text(&out));
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while download(&links[0]).await.is_ok() {
        assert!(std::time::Instant::now() < deadline, "the link server still answers after links stop");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (status, _) = text(&m.run(&["links", "status"]));
    assert!(status.starts_with("no link server runs for the store"), "{status}");

    // The next host starts a new link server for the store, on the same port and with the
    // store's keys: the link minted before the old server was gone downloads again.
    let (d, _) = m.session(&python, url_calls(&id)).await;
    assert!(link_of(&d["calls"][0]).starts_with(&base));
    assert_eq!(download(&links[0]).await.unwrap(), (200, NOTE.to_owned()), "{}", links[0]);
    let (status, _) = text(&m.run(&["links", "status"]));
    assert!(status.contains(&format!("served at http://127.0.0.1:{port}/artifacts/")), "{status}");
    assert!(!status.contains(&format!("by pid {pid} ")), "a new server: {status}");
}

/// The configured port held by another program: the store's link server takes a port the
/// system picks (none another user could compute and take in advance), the banner says so,
/// links outlive the session and the next session reuses the server, and the other program
/// is never asked for an artifact.
#[tokio::test]
async fn with_the_port_taken_links_move_to_a_port_the_system_picks_and_still_outlive_the_session() {
    let Some((python, everything)) = peers() else { return };
    let m = Machine::new();
    let squatter = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = squatter.local_addr().unwrap().port();
    m.servers(json!({"everything": {"command": "node", "args": [everything, "stdio"]}}));
    m.write("conf/stowage.toml", &format!("[links]\npublic_url = \"http://127.0.0.1:{port}\"\n"));
    let id = m.put_note();
    let (first, stderr) = m.session(&python, url_calls(&id)).await;
    assert!(stderr.contains(&format!("127.0.0.1:{port} is taken by another program")), "{stderr}");
    assert!(stderr.contains("a port the system picked, another each time the link server starts"), "{stderr}");
    let link = link_of(&first["calls"][0]);
    assert!(!link.starts_with(&format!("http://127.0.0.1:{port}/")), "{link}");
    assert_eq!(download(&link).await.unwrap(), (200, NOTE.to_owned()));
    let (second, _) = m.session(&python, url_calls(&id)).await;
    let origin = |l: &str| l.split("/artifacts/").next().unwrap().to_owned();
    assert_eq!(origin(&link_of(&second["calls"][0])), origin(&link), "the next session reuses the server");
    squatter.set_nonblocking(true).unwrap();
    assert!(squatter.accept().is_err(), "nothing was sent to the program on the configured port");
}

/// The link server killed in the middle of a session: the next link the session mints goes
/// to a new server (on the configured port, which the kill freed), never to the dead one, and
/// the session says so; links minted before download again. Its log is the owner's only, so
/// the next gateway finds nothing loose in the store.
#[tokio::test]
async fn a_link_server_killed_mid_session_is_replaced_before_the_next_link() {
    let Some((python, everything)) = peers() else { return };
    let m = Machine::new();
    let port = free_port();
    m.servers(json!({"everything": {"command": "node", "args": [everything, "stdio"]}}));
    m.write("conf/stowage.toml", &format!("[links]\npublic_url = \"http://127.0.0.1:{port}\"\n"));
    let id = m.put_note();
    let state = m.store().join("links/server.json");
    let calls = json!([
        {"tool": "artifact_url", "arguments": {"id": id}},
        {"kill_pid_in": state},
        {"tool": "artifact_url", "arguments": {"id": id}},
        {"tool": "artifact_read", "arguments": {"id": id}},
    ]);
    let (seen, stderr) = m.session(&python, calls).await;
    let (before, after) = (link_of(&seen["calls"][0]), link_of(&seen["calls"][2]));
    let killed = seen["calls"][1]["killed"].as_u64().unwrap();
    let base = format!("http://127.0.0.1:{port}/artifacts/");
    assert!(before.starts_with(&base) && after.starts_with(&base), "{before} {after}");
    assert!(
        stderr.contains(&format!("this store's link server (pid {killed}) is gone; download links are now served by a new one (pid ")),
        "{stderr}"
    );
    assert!(call_text(&seen["calls"][3]).contains("hello from the shell"));
    for link in [&after, &before] {
        assert_eq!(download(link).await.unwrap(), (200, NOTE.to_owned()), "{link}");
    }
    let (status, _) = text(&m.run(&["links", "status"]));
    assert!(
        status.contains(&format!("served at http://127.0.0.1:{port}/artifacts/")) && !status.contains(&format!("by pid {killed} ")),
        "{status}"
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &str| std::fs::metadata(m.store().join(p)).unwrap().permissions().mode() & 0o777;
        assert_eq!((mode("links"), mode("links/server.json"), mode("links/server.log")), (0o700, 0o600, 0o600));
        let (_, stderr) = m.session(&python, json!([])).await;
        assert!(!stderr.contains("give group or others access"), "the store is private: {stderr}");
    }
}

/// Another local user, and a web page, against a running link server: its control routes
/// answer only requests signed with the secret in the owner's `server.json` (0600), which is
/// never served; an unsigned or id-bearing request to stop it or lease it for an hour is
/// refused; a foreign Host is refused on every route and an Origin on the control routes. As
/// root, the second user is uid 65534 (nobody), with every directory on the way opened to it:
/// it cannot read the secret, stop or renew the server. The owner's `links status` and `stop`
/// still work.
#[tokio::test]
async fn the_link_server_answers_its_owner_only() {
    let Some((python, everything)) = peers() else { return };
    let m = Machine::new();
    m.servers(json!({"everything": {"command": "node", "args": [everything, "stdio"]}}));
    let id = m.put_note();
    let (seen, _) = m.session(&python, url_calls(&id)).await;
    let link = link_of(&seen["calls"][0]);
    let state: Value = serde_json::from_slice(&std::fs::read(m.store().join("links/server.json")).unwrap()).unwrap();
    let (port, pid) = (state["port"].as_u64().unwrap(), state["pid"].as_u64().unwrap());
    let secret = state["secret"].as_str().unwrap().to_owned();
    assert_eq!(secret.len(), 64, "{state}");
    let base = format!("http://127.0.0.1:{port}");
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let control = format!("{base}/_stowage/link-server");
    let sid = state["id"].as_str().unwrap();
    // Unsigned, or with the server's id (what used to authorise): refused, and nothing leaks.
    let who = client.get(&control).send().await.unwrap();
    assert_eq!(who.status(), 403);
    let body = who.text().await.unwrap();
    assert!(!body.contains(&secret) && !body.contains(sid), "{body}");
    let lease = client.post(format!("{control}/lease")).json(&json!({"id": sid, "hold_secs": 3600})).send().await.unwrap();
    assert_eq!(lease.status(), 403);
    let stop = client.post(format!("{control}/stop")).json(&json!({"id": sid})).send().await.unwrap();
    assert_eq!(stop.status(), 403);
    // A forged signature: refused.
    let forged = format!("{}.{}.{}", time::OffsetDateTime::now_utc().unix_timestamp(), "0".repeat(32), "0".repeat(64));
    let stop = client.post(format!("{control}/stop")).header("x-stowage-control", forged).json(&json!({})).send().await.unwrap();
    assert_eq!(stop.status(), 403);
    // DNS rebinding: a foreign Host is refused on a download and on the control routes; a
    // page's Origin on the control routes.
    let path = link.strip_prefix(&base).unwrap();
    let rebound = client.get(format!("{base}{path}")).header("host", "evil.example").send().await.unwrap();
    assert_eq!(rebound.status(), 403);
    let refused: Value = rebound.json().await.unwrap();
    assert!(refused["error"]["message"].as_str().unwrap().starts_with("host \"evil.example\" is not allowed"), "{refused}");
    assert_eq!(client.post(format!("{control}/stop")).header("host", format!("evil.example:{port}")).send().await.unwrap().status(), 403);
    let paged = client.get(&control).header("origin", "http://127.0.0.1:23101.evil.example").send().await.unwrap();
    assert_eq!(paged.status(), 403);
    // The link itself still works, and the server still runs, not leased for an hour.
    assert_eq!(download(&link).await.unwrap(), (200, NOTE.to_owned()));
    let (status, _) = text(&m.run(&["links", "status"]));
    assert!(status.contains(&format!("by pid {pid} ")), "{status}");
    let until = status.split("until at least ").nth(1).unwrap().split_whitespace().next().unwrap();
    let until = time::OffsetDateTime::parse(until, &time::format_description::well_known::Rfc3339).unwrap().unix_timestamp();
    assert!(until <= time::OffsetDateTime::now_utc().unix_timestamp() + 930, "extended by someone: {status}");

    if is_root() {
        // Every directory from / to the state file opened to others (0711): only the file's
        // own mode stands between uid 65534 and the secret.
        use std::os::unix::fs::PermissionsExt;
        let mut dir = m.store().join("links");
        while dir.starts_with(m.tmp.path().parent().unwrap()) && dir != Path::new("/") {
            let mode = std::fs::metadata(&dir).unwrap().permissions().mode() | 0o711;
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode)).unwrap();
            dir = dir.parent().unwrap().to_path_buf();
        }
        let as_nobody = |program: &str, args: &[&str]| {
            let out = Command::new("setpriv")
                .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
                .arg(program)
                .args(args)
                .current_dir("/")
                .env_clear()
                .env("PATH", std::env::var("PATH").unwrap_or_default())
                .env("HOME", "/nonexistent")
                .output()
                .unwrap();
            (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr))
        };
        let file = m.store().join("links/server.json");
        let (read, said) = as_nobody("cat", &[file.to_str().unwrap()]);
        assert!(!read && said.contains("Permission denied"), "nobody read the state file: {said}");
        let store = m.store();
        let (_, said) = as_nobody(BIN, &["--store", store.to_str().unwrap(), "links", "stop"]);
        assert!(!said.contains("stopped the link server"), "{said}");
        for (route, body) in [("lease", json!({"id": sid, "hold_secs": 3600}).to_string()), ("stop", json!({"id": sid}).to_string())] {
            let (_, code) = as_nobody(
                "curl",
                &[
                    "-s",
                    "-o",
                    "/dev/null",
                    "-w",
                    "%{http_code}",
                    "-H",
                    "content-type: application/json",
                    "-d",
                    &body,
                    &format!("{control}/{route}"),
                ],
            );
            assert_eq!(code.trim(), "403", "nobody's {route}: {code}");
        }
        let (status, _) = text(&m.run(&["links", "status"]));
        assert!(status.contains(&format!("by pid {pid} ")), "nobody stopped it: {status}");
    } else {
        eprintln!("\n!!!!!!!! SKIPPED the second-user half: not root, so no other uid to run as !!!!!!!!\n");
    }
    // The owner stops it.
    let out = m.run(&["links", "stop"]);
    assert!(out.status.success() && text(&out).1.contains("stopped the link server"), "{:?}", text(&out));
}

fn is_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").map(|m| m.uid() == 0).unwrap_or(false)
}

/// A state file left by a server that is gone (the machine restarted), naming a port now held
/// by something that is not Stowage: the gateway says the old server is gone, starts a new
/// one, and its links work.
#[tokio::test]
async fn a_stale_state_file_is_replaced_and_never_trusted() {
    let Some((python, everything)) = peers() else { return };
    let m = Machine::new();
    let squatter = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken = squatter.local_addr().unwrap().port();
    m.servers(json!({"everything": {"command": "node", "args": [everything, "stdio"]}}));
    let id = m.put_note();
    let stale = json!({"id": "0123456789abcdef01234567", "pid": 999_999, "port": taken, "started_at": 1, "version": "0.0.1"});
    std::fs::create_dir_all(m.store().join("links")).unwrap();
    std::fs::write(m.store().join("links/server.json"), stale.to_string()).unwrap();
    let (status, _) = text(&m.run(&["links", "status"]));
    assert!(status.contains("no link server runs") && status.contains("pid 999999"), "{status}");
    let (seen, stderr) = m.session(&python, url_calls(&id)).await;
    assert!(stderr.contains("the link server this store had (pid 999999"), "{stderr}");
    let link = link_of(&seen["calls"][0]);
    assert!(!link.contains(&format!(":{taken}/")), "{link}");
    assert_eq!(download(&link).await.unwrap(), (200, NOTE.to_owned()));
}

/// A store whose link-server directory cannot be made (a file where `links/` goes): one line
/// says links are served by this process only, and they work while the session lasts.
#[tokio::test]
async fn a_store_the_link_server_cannot_use_is_one_line_and_links_still_work_in_the_session() {
    let Some((python, everything)) = peers() else { return };
    let m = Machine::new();
    m.servers(json!({"everything": {"command": "node", "args": [everything, "stdio"]}}));
    let id = m.put_note();
    std::fs::write(m.store().join("links"), "not a directory").unwrap();
    let (seen, stderr) = m.session(&python, url_calls(&id)).await;
    let warned: Vec<&str> = stderr.lines().filter(|l| l.contains("download links are served by this process only")).collect();
    assert_eq!(warned.len(), 1, "{stderr}");
    assert!(warned[0].contains("links"), "names what failed: {}", warned[0]);
    assert!(link_of(&seen["calls"][0]).starts_with("http://127.0.0.1:"));
    assert!(call_text(&seen["calls"][1]).contains("hello from the shell"));
    std::fs::remove_file(m.store().join("links")).unwrap();
}

// ---------------------------------------------------------------------------------------
// Where stowage.toml is found (check-config says which, as serve's banner does)

/// A config in each place; `broken` ones (not TOML) must not be read.
fn config_source(m: &Machine, cwd: &Path, extra: &[&str], env: Option<(&str, &Path)>) -> String {
    let servers = m.servers(json!({}));
    let mut args = extra.to_vec();
    args.extend(["check-config", "--no-probe", "--stdio", "--mcp-config", servers.to_str().unwrap()]);
    let mut cmd = m.cli_in(cwd, &args);
    if let Some((k, v)) = env {
        cmd.env(k, v);
    }
    let out = run_to_exit(cmd);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}{stderr}");
    stdout.lines().find(|l| l.starts_with("config: ")).unwrap().to_owned()
}

const GOOD: &str = "[links]\nttl = \"10m\"\n";
const BROKEN: &str = "this is not toml [";

#[test]
fn config_from_the_flag_comes_first() {
    let m = Machine::new();
    let flag = m.write("elsewhere/mine.toml", GOOD);
    m.write("conf/stowage.toml", BROKEN);
    m.write("home/.config/stowage/stowage.toml", BROKEN);
    let line =
        config_source(&m, &m.path("shell"), &["--config", flag.to_str().unwrap()], Some(("STOWAGE_CONFIG", &m.path("conf/stowage.toml"))));
    assert_eq!(line, format!("config: {} (--config) (valid)", flag.display()));
}

#[test]
fn config_from_stowage_config_comes_before_the_places() {
    let m = Machine::new();
    let env = m.write("elsewhere/env.toml", GOOD);
    m.write("conf/stowage.toml", BROKEN);
    let line = config_source(&m, &m.path("shell"), &[], Some(("STOWAGE_CONFIG", &env)));
    assert_eq!(line, format!("config: {} (STOWAGE_CONFIG) (valid)", env.display()));
}

#[test]
fn config_beside_the_servers_file_comes_before_the_user_config_directory() {
    let m = Machine::new();
    let beside = m.write("conf/stowage.toml", GOOD);
    m.write("home/.config/stowage/stowage.toml", BROKEN);
    let line = config_source(&m, Path::new("/"), &[], None);
    assert_eq!(line, format!("config: {} (beside the --mcp-config file) (valid)", beside.display()));
}

#[test]
fn config_in_the_user_config_directory_comes_before_the_working_directory() {
    let m = Machine::new();
    let user = m.write("home/.config/stowage/stowage.toml", GOOD);
    m.write("shell/stowage.toml", BROKEN);
    let line = config_source(&m, &m.path("shell"), &[], None);
    assert_eq!(line, format!("config: {} (the user config directory) (valid)", user.display()));
}

#[test]
fn config_in_the_working_directory_comes_last() {
    let m = Machine::new();
    let cwd = m.write("shell/stowage.toml", GOOD);
    let line = config_source(&m, &m.path("shell"), &[], None);
    assert_eq!(line, format!("config: {} (the working directory) (valid)", cwd.display()));
}

#[test]
fn no_config_names_every_place_looked_in() {
    let m = Machine::new();
    let line = config_source(&m, &m.path("shell"), &[], None);
    assert!(line.starts_with("config: none found, using the defaults (looked for "), "{line}");
    for place in [m.path("conf/stowage.toml"), m.path("home/.config/stowage/stowage.toml"), m.path("shell/stowage.toml")] {
        assert!(line.contains(&place.display().to_string()), "{line}");
    }
}

/// `check-config --cwd /` from the user's shell answers as a host-started `serve` would: the
/// shell's own stowage.toml is not the one a host in `/` reads.
#[test]
fn check_config_answers_for_the_hosts_working_directory() {
    let m = Machine::new();
    m.write("shell/stowage.toml", GOOD);
    let line = config_source(&m, &m.path("shell"), &[], None);
    assert!(line.contains("(the working directory)"), "{line}");
    let servers = m.path("conf/servers.json");
    let out = m.run(&["check-config", "--no-probe", "--stdio", "--cwd", "/", "--mcp-config", servers.to_str().unwrap()]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.contains("config: none found, using the defaults") && stdout.contains("working directory: / (--cwd)"), "{stdout}");
}

// ---------------------------------------------------------------------------------------
// Paths as hosts pass them

#[test]
fn a_tilde_or_relative_mcp_config_from_a_host_gets_one_line_naming_the_working_directory() {
    let m = Machine::new();
    m.servers(json!({}));
    for (arg, want) in [
        ("~/conf/servers.json", "--mcp-config ~/conf/servers.json: `~` was passed as written"),
        ("conf/servers.json", "--mcp-config conf/servers.json: no such file in the working directory /"),
    ] {
        let out = run_to_exit(m.cli_in(Path::new("/"), &["serve", "--stdio", "--mcp-config", arg]));
        let (_, stderr) = text(&out);
        assert!(!out.status.success(), "{stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
        assert!(stderr.contains(want), "{stderr}");
        assert!(stderr.contains("working directory") && stderr.contains("absolute path"), "{stderr}");
    }
    let out = run_to_exit(m.cli_in(Path::new("/"), &["--config", "~/stowage.toml", "check-config"]));
    assert!(!out.status.success() && text(&out).1.contains("`~` was passed as written"), "{:?}", text(&out));
}

// ---------------------------------------------------------------------------------------
// Down is visible

/// A down HTTP upstream and a missing command: the model sees one stand-in tool for each,
/// whose call fails at once with the server's name and why; check-config warns about both
/// (exit 0, 1 with --strict) in the words serve prints at start.
#[tokio::test]
async fn a_down_http_upstream_and_a_missing_command_are_visible_and_answered_at_once() {
    let Some((python, everything)) = peers() else { return };
    let m = Machine::new();
    let dead = free_port();
    let servers = m.servers(json!({
        "everything": {"command": "node", "args": [everything, "stdio"]},
        "web": {"type": "http", "url": format!("http://127.0.0.1:{dead}/mcp")},
        "gone": {"command": "no-such-mcp-server-29"},
    }));
    let missing = "server \"gone\": no-such-mcp-server-29 is not an executable file or on PATH";

    let out = m.run(&["check-config", "--stdio", "--mcp-config", servers.to_str().unwrap()]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "warnings, not errors: {stdout}{stderr}");
    assert!(stdout.contains(&format!("warning: {missing}")), "{stdout}");
    assert!(stdout.contains("warning: server \"web\" cannot be reached"), "{stdout}");
    assert!(stdout.contains("2 upstreams would start as unavailable"), "{stdout}");
    let strict = m.run(&["check-config", "--strict", "--stdio", "--mcp-config", servers.to_str().unwrap()]);
    assert!(!strict.status.success(), "{:?}", text(&strict));
    assert!(text(&strict).1.contains("2 upstreams would start as unavailable (--strict)"), "{:?}", text(&strict));

    let calls = json!([
        {"tool": "web_unavailable", "arguments": {}},
        {"tool": "gone_unavailable", "arguments": {}},
        {"tool": "everything_echo", "arguments": {"message": "still here"}},
    ]);
    let started = std::time::Instant::now();
    let (seen, stderr) = m.session(&python, calls).await;
    assert!(started.elapsed() < Duration::from_secs(45), "calls waited for the down upstreams: {:?}", started.elapsed());
    let names = tool_names(&seen);
    assert!(names.contains(&"web_unavailable".to_owned()) && names.contains(&"gone_unavailable".to_owned()), "{names:?}");
    let standin = seen["tools"].as_array().unwrap().iter().find(|t| t["name"] == "gone_unavailable").unwrap();
    assert!(standin["description"].as_str().unwrap().contains("MCP server gone is not connected"), "{standin}");
    for (i, name, why) in [(0, "web", "127.0.0.1"), (1, "gone", "no-such-mcp-server-29")] {
        // A JSON-RPC error, as every call to a down upstream gets: the host shows its message.
        let r = &seen["calls"][i];
        let t = r["error"]["message"].as_str().unwrap_or_else(|| panic!("{name}: {r}"));
        assert!(t.contains(&format!("upstream {name} is unavailable")) && t.contains(why), "{name}: {t}");
    }
    assert!(call_text(&seen["calls"][2]).contains("still here"), "{}", seen["calls"][2]);
    // serve says what check-config says.
    assert!(stderr.contains(&format!("stowage: warning: {missing}")), "{stderr}");
    assert!(stderr.contains("gone: ") && stderr.contains("NOT CONNECTED"), "{stderr}");
}

/// A server that listed its tools once and whose command is gone at the next start: the
/// model still sees those tools (kept in the store), and a call says at once that it is down
/// and why.
#[tokio::test]
async fn a_server_down_at_start_keeps_the_tools_it_listed_last_time() {
    let Some((python, everything)) = peers() else { return };
    let m = Machine::new();
    let script = m.write("conf/everything.sh", &format!("#!/bin/sh\nexec node {} stdio\n", everything.display()));
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    m.servers(json!({"everything": {"command": script}}));
    let (first, _) = m.session(&python, json!([])).await;
    let listed = tool_names(&first);
    assert!(listed.contains(&"echo".to_owned()), "{listed:?}");

    std::fs::remove_file(&script).unwrap();
    let (second, stderr) = m.session(&python, json!([{"tool": "echo", "arguments": {"message": "x"}}])).await;
    assert_eq!(tool_names(&second), listed, "the same tools as last time");
    let message = second["calls"][0]["error"]["message"].as_str().unwrap_or_else(|| panic!("{}", second["calls"][0]));
    assert!(message.contains("upstream everything is unavailable") && message.contains("everything.sh"), "{message}");
    assert!(stderr.contains("tools from its last listing are shown, calls say why"), "the banner says so: {stderr}");
}

// ---------------------------------------------------------------------------------------
// Small things

/// FastMCP declares resources and lists none: no generated resource tools for it (while
/// server-everything, which lists resources, has them); server-everything's roots request at
/// start, which no client can be behind, is answered quietly.
#[tokio::test]
async fn no_resource_tools_for_a_server_without_resources_and_no_roots_noise() {
    let Some((python, everything)) = peers() else { return };
    let m = Machine::new();
    let shapes = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../stowage-mcp/tests/fixtures/fastmcp_shapes.py");
    m.servers(json!({
        "everything": {"command": "node", "args": [everything, "stdio"]},
        "shapes": {"command": python, "args": [shapes]},
    }));
    let (seen, stderr) = m.session(&python, json!([{"tool": "everything_resources_list", "arguments": {}}])).await;
    let names = tool_names(&seen);
    assert!(names.iter().any(|n| n.starts_with("shapes_")), "FastMCP is connected: {names:?}");
    assert!(!names.iter().any(|n| n.starts_with("shapes_resources")), "{names:?}");
    assert!(names.contains(&"everything_resources_list".to_owned()), "{names:?}");
    assert_ne!(seen["calls"][0]["isError"], true, "{}", seen["calls"][0]);
    assert!(!stderr.contains("can be attributed") && !stderr.contains("Failed to request roots"), "{stderr}");
}
