//! Two `stowage serve` processes sharing one S3 bucket (moto) and one PostgreSQL database, as a
//! deployment behind a load balancer runs them: an artifact offloaded through A downloads
//! through B with the link A minted (the same key source on both); killing A in the middle of
//! an upload leaves no artifact visible anywhere; `/readyz` fails when the bucket goes away or
//! refuses writes, naming it. An instance configured with a wrong prefix or another bucket
//! refuses to start (and `check-config` says why) while the fleet keeps its records. The Azure
//! backend serves the same way against Azurite.
//!
//! Uploads lose nothing, on the fs store and on the shared one: a failed upload commit never
//! removes an artifact that existed before it (the same bytes are the same content id), and
//! bytes PUT to an upload link become an artifact only on a commit with the declared size and
//! sha256; an upload left uncommitted leaves nothing once it expires.

use crate::raw_http;

use crate::store_support as support;

use raw_http::http;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::{BucketKind, BucketProxy, BucketServer, Postgres, ProxyMode};

/// A link-signing secret both instances read from the same variable (base64url, 32 bytes).
const LINK_KEY: &str = "c3Rvd2FnZS10ZXN0LWxpbmsta2V5LTMyLWJ5dGVzLW9r";

struct Server {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn config(s3: &BucketServer, pg_url: &str) -> String {
    let backend = match s3.kind {
        BucketKind::Azurite => "backend = \"azure\"",
        BucketKind::Moto | BucketKind::S3rver => "backend = \"s3\"\nregion = \"us-east-1\"",
    };
    format!(
        "[store]\n{backend}\nbucket = \"{}\"\nendpoint = \"{}\"\n\n\
         [index]\nurl = \"{pg_url}\"\n\n\
         [links]\nkeys = [{{ id = \"shared\", secret_env = \"STOWAGE_TEST_LINK_KEY\" }}]\n\n\
         [gateway]\nmax_request_bytes = 67108864\n",
        s3.bucket,
        s3.endpoint()
    )
}

/// `stowage ARGS…` on `config` with the bucket credentials in the environment, to its end
/// (30 s at most): (success, stdout, stderr).
fn run_stowage(config: &str, args: &[&str]) -> (bool, String, String) {
    run_stowage_env(config, args, &[])
}

/// [`run_stowage`] with more (or other) environment variables.
fn run_stowage_env(config: &str, args: &[&str], env: &[(&str, &str)]) -> (bool, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("stowage.toml");
    std::fs::write(&conf, config).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_stowage"))
        .current_dir(dir.path())
        .args(["--config", conf.to_str().unwrap()])
        .args(args)
        .env("AWS_ACCESS_KEY_ID", "testing")
        .env("AWS_SECRET_ACCESS_KEY", "testing")
        .env("STOWAGE_TEST_LINK_KEY", LINK_KEY)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("stowage {args:?} did not end within 30 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// Polls `/readyz` until it answers 503 (the last write probe's success answers for a few
/// seconds); its JSON body.
fn until_not_ready(port: u16) -> Value {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let (status, _, body) = http(port, "GET", "/readyz", &[], None);
        if status == 503 {
            return serde_json::from_slice(&body).unwrap();
        }
        assert!(Instant::now() < deadline, "still {status} after 15 s");
        std::thread::sleep(Duration::from_millis(250));
    }
}

fn start(config: &str) -> Server {
    start_env(config, &[])
}

/// [`start`] with more environment variables.
fn start_env(config: &str, env: &[(&str, &str)]) -> Server {
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("stowage.toml");
    std::fs::write(&conf, config).unwrap();
    let port = support::free_port();
    let log = std::fs::File::create(dir.path().join("serve.log")).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_stowage"))
        .current_dir(dir.path())
        .args(["--config", conf.to_str().unwrap()])
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        // Credentials only from the environment, as in production (each provider reads its own).
        .env("AWS_ACCESS_KEY_ID", "testing")
        .env("AWS_SECRET_ACCESS_KEY", "testing")
        .env("AZURE_STORAGE_ACCOUNT_NAME", support::AZURITE_ACCOUNT)
        .env("AZURE_STORAGE_ACCOUNT_KEY", support::AZURITE_KEY)
        .env("STOWAGE_TEST_LINK_KEY", LINK_KEY)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    let server = Server { child, port, _dir: dir };
    let deadline = Instant::now() + Duration::from_secs(30);
    while http(port, "GET", "/healthz", &[], None).0 != 200 {
        let log = std::fs::read_to_string(server._dir.path().join("serve.log")).unwrap_or_default();
        assert!(Instant::now() < deadline, "stowage serve did not come up: {log}");
        std::thread::sleep(Duration::from_millis(50));
    }
    server
}

/// A minimal MCP client over Streamable HTTP (JSON responses).
struct Client {
    port: u16,
    session: Option<String>,
}

impl Client {
    fn connect(port: u16) -> Client {
        Client::connect_with(port, json!({}))
    }

    fn connect_with(port: u16, capabilities: Value) -> Client {
        let mut c = Client { port, session: None };
        let (status, v) = c.rpc(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": capabilities, "clientInfo": {"name": "t", "version": "1"}}),
        );
        assert_eq!(status, 200, "{v}");
        c
    }

    fn rpc(&mut self, method: &str, params: Value) -> (u16, Value) {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).to_string();
        let mut headers = vec![("Content-Type", "application/json"), ("Accept", "application/json")];
        let sid = self.session.clone();
        if let Some(s) = &sid {
            headers.push(("Mcp-Session-Id", s));
        }
        let (status, h, body) = http(self.port, "POST", "/mcp", &headers, Some(body.as_bytes()));
        if method == "initialize" {
            self.session = h.iter().find(|(k, _)| k == "mcp-session-id").map(|(_, v)| v.clone());
        }
        (status, serde_json::from_slice(&body).unwrap_or(Value::Null))
    }

    fn call(&mut self, tool: &str, args: Value) -> Value {
        let (status, v) = self.rpc("tools/call", json!({"name": tool, "arguments": args}));
        assert_eq!(status, 200, "{v}");
        v["result"].clone()
    }
}

fn path_of(url: &str) -> String {
    url.split_once("://").unwrap().1.split_once('/').map(|(_, p)| format!("/{p}")).unwrap()
}

#[test]
fn two_instances_share_artifacts_links_and_nothing_half_written() {
    let Some(pg) = Postgres::start() else { return };
    let Some(mut s3) = BucketServer::start(BucketKind::Moto, "artifacts") else { return };
    let url = pg.create_database("stowage");
    let conf = config(&s3, &url);
    let mut a = start(&conf);
    let b = start(&conf);

    // Offloaded through A; the link A minted downloads through B.
    let result = Client::connect(a.port).call("get_report", json!({}));
    let asset = &result["_meta"]["io.stowage/assets"][0];
    let (id, link) = (asset["id"].as_str().unwrap().to_owned(), asset["uri"].as_str().unwrap().to_owned());
    assert!(link.contains(&format!("/artifacts/{id}?token=")), "{result}");
    let (status, _, pdf) = http(b.port, "GET", &path_of(&link), &[], None);
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&pdf));
    assert!(pdf.starts_with(b"%PDF-"));
    // And B knows it by id too: a fresh link from B's artifact_url tool.
    let fresh = Client::connect(b.port).call("artifact_url", json!({"id": id}));
    assert_ne!(fresh["isError"], true, "{fresh}");
    let count = || pg.psql("stowage", "SELECT count(*) FROM stowage.artifacts");
    assert_eq!(count(), "1");
    // The operator's CLI on the same config sees it too.
    let conf_file = a._dir.path().join("stowage.toml");
    let ls = Command::new(env!("CARGO_BIN_EXE_stowage"))
        .args(["--config", conf_file.to_str().unwrap(), "artifacts", "ls"])
        .env("AWS_ACCESS_KEY_ID", "testing")
        .env("AWS_SECRET_ACCESS_KEY", "testing")
        .output()
        .unwrap();
    assert!(ls.status.success(), "{}", String::from_utf8_lossy(&ls.stderr));
    assert!(String::from_utf8_lossy(&ls.stdout).contains(&id), "{}", String::from_utf8_lossy(&ls.stdout));

    // A big result on A (12 MB of text, offloaded as a multipart upload; the demo's SDK caps a
    // message at 16 MiB), and A killed while that upload is open in the bucket.
    let big = "x".repeat(12 << 20);
    let port = a.port;
    let caller =
        std::thread::spawn(move || Client::connect(port).rpc("tools/call", json!({"name": "echo", "arguments": {"message": big}})));
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (_, body) = s3.raw("GET", &format!("/{}?uploads", s3.bucket));
        if body.contains("<UploadId>") {
            break;
        }
        if caller.is_finished() {
            let (status, v) = caller.join().unwrap();
            let text = v.to_string();
            panic!("the call ended before its upload was seen: {status} {}", &text[..text.len().min(2000)]);
        }
        if Instant::now() > deadline {
            let log = std::fs::read_to_string(a._dir.path().join("serve.log")).unwrap_or_default();
            panic!("the upload never started; A's log: {}", &log[log.len().saturating_sub(3000)..]);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    a.child.kill().unwrap();
    a.child.wait().unwrap();
    let (status, _) = caller.join().unwrap();
    assert_ne!(status, 200, "the call died with its instance");
    // Nothing of it is visible: no record, and the only blob is the report's.
    assert_eq!(count(), "1", "no record of the killed upload");
    let (_, listing) = s3.raw("GET", &format!("/{}?list-type=2&prefix=stowage/blobs/", s3.bucket));
    assert_eq!(listing.matches("<Key>").count(), 1, "{listing}");
    let (status, _, _) = http(b.port, "GET", "/readyz", &[], None);
    assert_eq!(status, 200, "B carries on");

    // The bucket goes away: B is not ready, and says the bucket is why.
    s3.kill();
    let body = until_not_ready(b.port);
    assert_eq!(body["not_ready"]["store.bucket"], "unreachable or failing", "{body}");
}

/// `backend = "azure"` (Azurite, which checks every Shared Key signature), credentials from
/// the environment: an offload lands in the container, its link downloads, and `/readyz`
/// follows the container's reachability.
#[test]
fn the_azure_backend_offloads_and_serves_links() {
    let Some(pg) = Postgres::start() else { return };
    let Some(mut az) = BucketServer::start(BucketKind::Azurite, "artifacts") else { return };
    let url = pg.create_database("stowage");
    let a = start(&config(&az, &url));
    let (status, _, body) = http(a.port, "GET", "/readyz", &[], None);
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    let result = Client::connect(a.port).call("get_report", json!({}));
    let asset = &result["_meta"]["io.stowage/assets"][0];
    let link = asset["uri"].as_str().unwrap().to_owned();
    let (status, _, pdf) = http(a.port, "GET", &path_of(&link), &[], None);
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&pdf));
    assert!(pdf.starts_with(b"%PDF-"));
    assert_eq!(pg.psql("stowage", "SELECT count(*) FROM stowage.artifacts"), "1");
    az.kill();
    let body = until_not_ready(a.port);
    assert_eq!(body["not_ready"]["store.bucket"], "unreachable or failing", "{body}");
}

/// One instance of a fleet started with a typo in its prefix, another pointed at an existing
/// but empty bucket: both refuse to start, saying in one line which location the index
/// belongs to and which they were given, and `check-config` says the same; the healthy
/// instance's records and links survive its gc sweeps.
#[test]
fn a_misconfigured_instance_refuses_to_start_and_the_fleet_keeps_its_records() {
    let Some(pg) = Postgres::start() else { return };
    let Some(s3) = BucketServer::start(BucketKind::Moto, "artifacts") else { return };
    let url = pg.create_database("stowage");
    let good = format!("{}\n[retention]\ngc_interval = \"1s\"\n", config(&s3, &url));
    let a = start(&good);
    let result = Client::connect(a.port).call("get_report", json!({}));
    let link = result["_meta"]["io.stowage/assets"][0]["uri"].as_str().unwrap().to_owned();
    let store_id = pg.psql("stowage", "SELECT value FROM stowage.settings WHERE key = 'store_id'");
    assert_eq!(store_id.len(), 32, "{store_id}");

    let (ok, out, _) = run_stowage(&good, &["check-config"]);
    assert!(ok, "{out}");
    assert!(out.contains(&format!("store identity: store {store_id} (the index and the bucket's marker agree)")), "{out}");

    let wrong_prefix = good.replace("[index]", "prefix = \"stowgae\"\n\n[index]");
    let (ok, _, err) = run_stowage(&wrong_prefix, &["serve", "--listen", &format!("127.0.0.1:{}", support::free_port())]);
    assert!(!ok, "{err}");
    let line = err.lines().find(|l| l.starts_with("error: ")).unwrap_or_else(|| panic!("no error line: {err}"));
    let endpoint = s3.endpoint();
    assert!(line.contains(&format!("s3://artifacts/stowgae at {endpoint}")), "{line}");
    assert!(line.contains(&format!("store {store_id}, whose blobs are at s3://artifacts/stowage at {endpoint}")), "{line}");
    let (ok, out, err) = run_stowage(&wrong_prefix, &["check-config"]);
    assert!(!ok && out.contains("store identity: error: ") && err.contains("s3://artifacts/stowgae"), "{out}{err}");

    let (status, _) = s3.raw("PUT", "/empty");
    assert!(status.contains("200"), "{status}");
    let other_bucket = good.replace("bucket = \"artifacts\"", "bucket = \"empty\"");
    let (ok, _, err) = run_stowage(&other_bucket, &["serve", "--listen", &format!("127.0.0.1:{}", support::free_port())]);
    assert!(!ok && err.contains("s3://empty/stowage") && err.contains("s3://artifacts/stowage"), "{err}");

    // Several of A's gc intervals later, everything is still there.
    std::thread::sleep(Duration::from_secs(4));
    assert_eq!(pg.psql("stowage", "SELECT count(*) FROM stowage.artifacts"), "1");
    let (status, _, pdf) = http(a.port, "GET", &path_of(&link), &[], None);
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&pdf));
    let log = std::fs::read_to_string(a._dir.path().join("serve.log")).unwrap_or_default();
    assert!(!log.contains("removing a record"), "{log}");
}

/// Three instances of one fleet, one with a clock 2 h ahead and one 2 h behind (the test
/// hook `STOWAGE_TEST_CLOCK_SKEW_SECS` moves a test build's clock): the two warn at start, in
/// one line, and `check-config` says the same (a warning; `--strict` fails on it). Each stores,
/// every instance sweeps every second, and nothing anyone stored goes; every link downloads.
#[test]
fn instances_whose_clocks_are_off_warn_and_delete_nothing() {
    let Some(pg) = Postgres::start() else { return };
    let Some(s3) = BucketServer::start(BucketKind::Moto, "artifacts") else { return };
    let url = pg.create_database("stowage");
    let conf = format!("{}\n[retention]\ngc_interval = \"1s\"\nttl = \"1h\"\n", config(&s3, &url));
    let right = start(&conf);
    let ahead = start_env(&conf, &[("STOWAGE_TEST_CLOCK_SKEW_SECS", "7200")]);
    let behind = start_env(&conf, &[("STOWAGE_TEST_CLOCK_SKEW_SECS", "-7200")]);
    let log = |s: &Server| std::fs::read_to_string(s._dir.path().join("serve.log")).unwrap_or_default();
    for (server, way) in [(&ahead, "ahead of"), (&behind, "behind")] {
        let warned: Vec<String> = log(server).lines().filter(|l| l.contains("clock is")).map(str::to_owned).collect();
        assert_eq!(warned.len(), 1, "{}", log(server));
        assert!(warned[0].starts_with("stowage: warning: this machine's clock is 7200.0s ") && warned[0].contains(way), "{}", warned[0]);
        assert!(warned[0].contains("decides expiry and gc by the database's clock"), "{}", warned[0]);
    }
    assert!(!log(&right).contains("clock is"), "{}", log(&right));
    // Each stores a text of its own (offloaded: over the inline limit).
    let mut links = Vec::new();
    for (i, server) in [&right, &ahead, &behind, &right].into_iter().enumerate() {
        let message = format!("{i} {}", "stored by one instance of the fleet ".repeat(1200));
        let result = Client::connect(server.port).call("echo", json!({"message": message}));
        links.push(result["_meta"]["io.stowage/assets"][0]["uri"].as_str().unwrap_or_else(|| panic!("not offloaded: {result}")).to_owned());
    }
    std::thread::sleep(Duration::from_secs(4));
    assert_eq!(pg.psql("stowage", "SELECT count(*) FROM stowage.artifacts"), "4", "nothing was deleted");
    for link in &links {
        let (status, _, _) = http(right.port, "GET", &path_of(link), &[], None);
        assert_eq!(status, 200, "{link}");
    }
    let (ok, out, _) = run_stowage_env(&conf, &["check-config"], &[("STOWAGE_TEST_CLOCK_SKEW_SECS", "-7200")]);
    assert!(ok, "a clock that is off is a warning: {out}");
    assert!(out.contains("clock: warning: this machine's clock is 7200.0s behind the database's"), "{out}");
    let (ok, _, err) = run_stowage_env(&conf, &["check-config", "--strict"], &[("STOWAGE_TEST_CLOCK_SKEW_SECS", "-7200")]);
    assert!(!ok && err.contains("(--strict)"), "{err}");
    let (ok, out, _) = run_stowage(&conf, &["check-config"]);
    // Same machine, same clock: a few milliseconds at most, never "-0.0s".
    assert!(ok && (out.contains("clock: 0.0s from the database's") || out.contains("clock: 0.1s from the database's")), "{out}");
}

/// An instance started with another secret under the fleet's link key id: it refuses to
/// start, in one line naming the key, and `check-config` says the same; the fleet's links work.
#[test]
fn another_link_secret_is_refused_at_start_and_by_check_config() {
    let Some(pg) = Postgres::start() else { return };
    let Some(s3) = BucketServer::start(BucketKind::Moto, "artifacts") else { return };
    let url = pg.create_database("stowage");
    let conf = config(&s3, &url);
    let a = start(&conf);
    let result = Client::connect(a.port).call("get_report", json!({}));
    let link = result["_meta"]["io.stowage/assets"][0]["uri"].as_str().unwrap().to_owned();
    let other = [("STOWAGE_TEST_LINK_KEY", "YW5vdGhlci1saW5rLWtleS1vZi0zMi1ieXRlcy1oZXJl")];
    let (ok, _, err) = run_stowage_env(&conf, &["serve", "--listen", &format!("127.0.0.1:{}", support::free_port())], &other);
    assert!(!ok, "{err}");
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("error: ")).collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(lines[0].contains("link-signing key \"shared\" of this instance has another secret than store "), "{}", lines[0]);
    let (ok, out, _) = run_stowage_env(&conf, &["check-config"], &other);
    assert!(!ok && out.contains("store identity: error: ") && out.contains("link-signing key \"shared\""), "{out}");
    let (status, _, _) = http(a.port, "GET", &path_of(&link), &[], None);
    assert_eq!(status, 200);
}

/// What `serve` refuses, `check-config` refuses too (exit 1, the same line), and neither leaves
/// a schema behind: another `isolate_sessions` than the fleet's, a typo in `[index] schema`,
/// another database.
#[test]
fn check_config_refuses_what_serve_refuses_and_neither_leaves_a_schema() {
    let Some(pg) = Postgres::start() else { return };
    let Some(s3) = BucketServer::start(BucketKind::Moto, "artifacts") else { return };
    let url = pg.create_database("stowage");
    let conf = config(&s3, &url);
    let a = start(&conf);
    Client::connect(a.port).call("get_report", json!({}));
    let schemas = |db: &str| {
        pg.psql(db, "SELECT coalesce(string_agg(nspname, ',' ORDER BY nspname), '') FROM pg_namespace WHERE nspname NOT LIKE 'pg_%' AND nspname NOT IN ('information_schema', 'public')")
    };
    let other_db = pg.create_database("other");
    let cases = [
        ("isolate_sessions", conf.replace("[index]", "isolate_sessions = true\n\n[index]"), "keys its records by user isolation"),
        ("a schema typo", conf.replace("[index]\n", "[index]\nschema = \"stowgae\"\n"), "schema stowgae records no store"),
        ("another database", conf.replace(&url, &other_db), "/other schema stowage records no store"),
    ];
    for (what, bad, says) in cases {
        let (ok, _, err) = run_stowage(&bad, &["serve", "--listen", &format!("127.0.0.1:{}", support::free_port())]);
        assert!(!ok, "{what}: serve started");
        let line = err.lines().find(|l| l.starts_with("error: ")).unwrap_or_else(|| panic!("{what}: {err}"));
        assert!(line.contains(says), "{what}: {line}");
        let (ok, out, _) = run_stowage(&bad, &["check-config"]);
        assert!(!ok, "{what}: check-config passed: {out}");
        let reason = line.split_once(": ").unwrap().1.split_once(": ").unwrap().1;
        assert!(out.contains("store identity: error: ") && out.contains(reason), "{what}: {out}\nserve said: {line}");
    }
    assert_eq!(schemas("stowage"), "stowage", "no schema left behind");
    assert_eq!(schemas("other"), "", "no schema left behind");
}

/// A bucket that starts refusing writes (a policy change, a credential that lost its write
/// rights) while reads still work: `/readyz` turns 503 and names the bucket.
#[test]
fn readyz_names_a_bucket_that_refuses_writes() {
    let Some(pg) = Postgres::start() else { return };
    let Some(s3) = BucketServer::start(BucketKind::Moto, "artifacts") else { return };
    let url = pg.create_database("stowage");
    let proxy = BucketProxy::start(s3.port);
    let conf = config(&s3, &url).replace(&s3.endpoint(), &proxy.endpoint());
    let a = start(&conf);
    let (status, _, body) = http(a.port, "GET", "/readyz", &[], None);
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    proxy.set(ProxyMode::RefuseWrites);
    let body = until_not_ready(a.port);
    assert_eq!(body["not_ready"]["store.bucket"], "access denied", "{body}");
    assert!(body["not_ready"].get("store.database").is_none(), "{body}");
    // Writes come back: ready again.
    proxy.set(ProxyMode::Pass);
    let deadline = Instant::now() + Duration::from_secs(15);
    while http(a.port, "GET", "/readyz", &[], None).0 != 200 {
        assert!(Instant::now() < deadline, "not ready again after 15 s");
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// Quotas are the store's, not an instance's: calls on both instances at once, each offloading
/// a different 40 000-character result (over `transform.max_inline_chars`, so text offloaded
/// on its length whatever its token count), fill one user's budget exactly; every call past it is
/// refused by the store (its text then goes through the observation clamp, as text the store
/// cannot take always does).
#[test]
fn a_budget_holds_while_two_instances_write_at_once() {
    let Some(pg) = Postgres::start() else { return };
    let Some(s3) = BucketServer::start(BucketKind::Moto, "artifacts") else { return };
    let url = pg.create_database("stowage");
    let conf = format!("{}\n[retention]\nmax_user_bytes = 200000\ncleanup_strategy = \"none\"\n", config(&s3, &url));
    let (a, b) = (start(&conf), start(&conf));
    let calls: Vec<_> = (0..12)
        .map(|i| {
            let port = if i % 2 == 0 { a.port } else { b.port };
            std::thread::spawn(move || {
                let message = format!("{i:02}{}", "y".repeat(39_998));
                Client::connect(port).call("echo", json!({"message": message}))
            })
        })
        .collect();
    let mut refused = 0;
    for call in calls {
        let result = call.join().unwrap();
        let text = result.to_string();
        // Whole, the text never stays inline (refused, a truncated copy within the inline budget does).
        assert!(!text.contains(&"y".repeat(39_998)), "the text never stays inline whole");
        let report = &result["_meta"]["io.stowage/transform"];
        if report["artifacts"] == 0 {
            // Refused by the budget: a truncated copy stays, with a warning.
            assert!(text.contains("[truncated: ") && report["warnings"].as_u64() >= Some(1), "{text}");
            refused += 1;
        }
    }
    let stored = pg.psql("stowage", "SELECT count(*) || ' ' || sum(size) FROM stowage.artifacts");
    assert_eq!(stored, "5 200000", "exactly the budget was stored");
    assert_eq!(refused, 7);
}

/// What an MCP Apps view declares (the upload tools are listed only for it).
fn apps_caps() -> Value {
    json!({"extensions": {"io.modelcontextprotocol/ui": {"mimeTypes": ["text/html;profile=mcp-app"]}}})
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(bytes))
}

/// The upload regressions (a failed commit removing an earlier artifact, an uncommitted PUT becoming one) and their neighbours, on the instance at `port`.
fn uploads_lose_nothing(port: u16) {
    let mut view = Client::connect_with(port, apps_caps());
    let file: Vec<u8> = (0..5000u32).map(|i| (i * 7 % 251) as u8).collect();
    let begin = |c: &mut Client, digest: &str| {
        let r = c.call(
            "artifact_upload_begin",
            json!({"name": "f.bin", "mimeType": "application/octet-stream", "size": 5000, "sha256": digest}),
        );
        assert_ne!(r["isError"], true, "{r}");
        (r["structuredContent"]["upload"].as_str().unwrap().to_owned(), r["structuredContent"]["url"].as_str().unwrap().to_owned())
    };
    let put = |url: &str, body: &[u8]| http(port, "PUT", &path_of(url), &[("Content-Type", "application/octet-stream")], Some(body));
    // The caller's artifact ids (content addresses: the sha256's first 16 hex digits).
    let mine = |c: &mut Client| -> Vec<String> {
        let r = c.call("artifact_list", json!({}));
        r["structuredContent"]["artifacts"].as_array().unwrap().iter().map(|a| a["uri"].as_str().unwrap().to_owned()).collect()
    };
    let id_of = |bytes: &[u8]| format!("artifact://upload_{}", &sha256_hex(bytes)[..16]);

    // The artifact the user already has: uploaded by link and committed.
    let (up, url) = begin(&mut view, &sha256_hex(&file));
    assert_eq!(put(&url, &file).0, 202, "staged");
    let done = view.call("artifact_upload_commit", json!({"upload": up}));
    assert_ne!(done["isError"], true, "{done}");
    let artifact = done["structuredContent"]["artifact"].clone();
    let (id, link) = (artifact["id"].as_str().unwrap().to_owned(), artifact["url"].as_str().unwrap().to_owned());

    // The same bytes under a wrong digest, by link: refused at the PUT, and the commit keeps
    // nothing and removes nothing.
    let (up, url) = begin(&mut view, &"0".repeat(64));
    let (status, _, body) = put(&url, &file);
    assert_eq!(status, 400, "{}", String::from_utf8_lossy(&body));
    let failed = view.call("artifact_upload_commit", json!({"upload": up}));
    assert_eq!(failed["isError"], true, "{failed}");
    // And by chunks.
    let (up, _) = begin(&mut view, &"0".repeat(64));
    use base64::Engine;
    let data = base64::engine::general_purpose::STANDARD.encode(&file);
    assert_ne!(view.call("artifact_upload_chunk", json!({"upload": up, "offset": 0, "data": data}))["isError"], true);
    let failed = view.call("artifact_upload_commit", json!({"upload": up}));
    assert!(failed["content"][0]["text"].as_str().unwrap().contains("not the declared"), "{failed}");
    // The earlier artifact is whole: its link, a fresh link, and the bytes.
    let fresh = view.call("artifact_url", json!({"id": id}));
    assert_ne!(fresh["isError"], true, "the earlier artifact survived: {fresh}");
    let (status, _, bytes) = http(port, "GET", &path_of(&link), &[], None);
    assert_eq!((status, bytes), (200, file.clone()), "its old link still downloads it");

    // Bytes PUT and never committed: no artifact, then or after the upload expired.
    let other: Vec<u8> = file.iter().map(|b| b ^ 0x5a).collect();
    let (up, url) = begin(&mut view, &sha256_hex(&other));
    assert_eq!(put(&url, &other).0, 202);
    assert!(!mine(&mut view).contains(&id_of(&other)), "a PUT alone is no artifact");
    std::thread::sleep(Duration::from_millis(1500));
    let late = view.call("artifact_upload_commit", json!({"upload": up}));
    assert!(late["content"][0]["text"].as_str().unwrap().contains("has expired"), "{late}");
    assert!(!mine(&mut view).contains(&id_of(&other)), "nothing once expired");
    assert_eq!(put(&url, &other).0, 404, "the expired upload's link is gone with it");
    assert_eq!(mine(&mut view), vec![id_of(&file)], "exactly the one committed upload");
}

#[test]
fn uploads_lose_nothing_on_the_fs_store() {
    let server = start("[store]\ndir = \"store\"\n\n[apps]\nupload_ttl_secs = 1\n");
    uploads_lose_nothing(server.port);
}

#[test]
fn uploads_lose_nothing_on_the_shared_store() {
    let Some(pg) = Postgres::start() else { return };
    let Some(s3) = BucketServer::start(BucketKind::Moto, "artifacts") else { return };
    let url = pg.create_database("stowage");
    let server = start(&format!("{}\n[apps]\nupload_ttl_secs = 1\n", config(&s3, &url)));
    uploads_lose_nothing(server.port);
}
