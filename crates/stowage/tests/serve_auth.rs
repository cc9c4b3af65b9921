//! `stowage serve` over HTTP with authentication, through the real binary and its bundled
//! demo upstream: /mcp refuses missing and wrong credentials, an authenticated user's
//! offloaded PDF is downloadable through the signed link in its result, `artifact_url` mints
//! fresh links for the caller's own artifacts only, and one user can neither reach another's
//! artifacts nor use another's session; API keys and JWTs are separate identity spaces, and
//! the store `serve` makes is its owner's alone.
//!
//! Isolation tests for every path to an artifact live here and in
//! `crates/stowage-http/tests/routes.rs` (HTTP links); new paths (MCP resources) join them.

use crate::raw_http;

use raw_http::http;
use std::io::Write;
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

struct Server {
    child: Child,
    port: u16,
    dir: tempfile::TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `stowage hash-key`, through the binary, as an operator would produce the config value.
fn hash(key: &str) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_stowage")).args(["hash-key", key]).output().unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

fn auth_config() -> String {
    format!(
        "[auth]\napi_keys = [\n  {{ id = \"alice\", sha256 = \"{}\" }},\n  {{ id = \"bob\", sha256 = \"{}\", tenant = \"t2\" }},\n]\n",
        hash("alice-secret-key-0123456789"),
        hash("bob-secret-key-0123456789")
    )
}

/// Runs `stowage` against this server's config and store.
fn stowage(dir: &std::path::Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_stowage"))
        .current_dir(dir)
        .args(["--config", dir.join("stowage.toml").to_str().unwrap(), "--store", dir.join("store").to_str().unwrap()])
        .args(args)
        .output()
        .unwrap()
}

fn start(config: &str) -> Server {
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("stowage.toml");
    std::fs::write(&conf, config).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let child = Command::new(env!("CARGO_BIN_EXE_stowage"))
        .current_dir(dir.path())
        .args(["--config", conf.to_str().unwrap(), "--store", dir.path().join("store").to_str().unwrap()])
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let server = Server { child, port, dir };
    let deadline = Instant::now() + Duration::from_secs(30);
    while http(port, "GET", "/healthz", &[], None).0 != 200 {
        assert!(Instant::now() < deadline, "stowage serve did not come up");
        std::thread::sleep(Duration::from_millis(50));
    }
    server
}

struct Client {
    port: u16,
    key: String,
    session: Option<String>,
}

impl Client {
    fn new(port: u16, key: &str) -> Client {
        Client { port, key: format!("Bearer {key}"), session: None }
    }

    fn rpc(&mut self, method: &str, params: Value) -> (u16, Value) {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).to_string();
        let mut headers = vec![("Authorization", self.key.as_str()), ("Content-Type", "application/json"), ("Accept", "application/json")];
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

    fn init(&mut self) {
        let (status, v) = self
            .rpc("initialize", json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}));
        assert_eq!(status, 200, "{v}");
        assert!(self.session.is_some());
    }

    fn call(&mut self, tool: &str, args: Value) -> Value {
        let (status, v) = self.rpc("tools/call", json!({"name": tool, "arguments": args}));
        assert_eq!(status, 200, "{v}");
        v["result"].clone()
    }
}

/// The code a tool error names: `isError`, one text block `code: message`, and no
/// `structuredContent` (which would have to match the tool's `outputSchema`).
fn error_code(result: &Value) -> String {
    assert_eq!(result["isError"], true, "{result}");
    assert!(result.get("structuredContent").is_none(), "an error must not carry structuredContent: {result}");
    let content = result["content"].as_array().unwrap();
    assert_eq!(content.len(), 1, "{result}");
    content[0]["text"].as_str().unwrap().split_once(':').unwrap().0.to_owned()
}

fn path_of(url: &str) -> String {
    url.split_once("://").unwrap().1.split_once('/').map(|(_, p)| format!("/{p}")).unwrap()
}

#[test]
fn authenticated_gateway_isolates_users() {
    let server = start(&auth_config());
    let port = server.port;

    // No credentials, wrong credentials: 401 before anything runs.
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}).to_string();
    let (status, h, _) = http(port, "POST", "/mcp", &[("Content-Type", "application/json")], Some(init.as_bytes()));
    assert_eq!(status, 401);
    assert!(h.iter().any(|(k, v)| k == "www-authenticate" && v.starts_with("Bearer")));
    assert_eq!(Client::new(port, "not-a-key").rpc("initialize", json!({})).0, 401);

    let mut alice = Client::new(port, "alice-secret-key-0123456789");
    alice.init();
    let (_, tools) = alice.rpc("tools/list", json!({}));
    let names: Vec<&str> = tools["result"]["tools"].as_array().unwrap().iter().filter_map(|t| t["name"].as_str()).collect();
    assert!(names.contains(&"artifact_url") && names.contains(&"get_report"), "{names:?}");

    // The offloaded PDF: no base64 in the result, a signed link that downloads it.
    let result = alice.call("get_report", json!({}));
    let text = result.to_string();
    assert!(text.len() < 4000 && !text.contains("JVBERi"), "{text}");
    let asset = &result["_meta"]["io.stowage/assets"][0];
    let id = asset["id"].as_str().unwrap().to_owned();
    let url = asset["uri"].as_str().unwrap();
    assert!(url.starts_with(&format!("http://127.0.0.1:{port}/artifacts/{id}?token=")), "{url}");
    let (status, _, pdf) = http(port, "GET", &path_of(url), &[], None);
    assert_eq!(status, 200);
    assert!(pdf.starts_with(b"%PDF-"));

    // A fresh link for one's own artifact, by id and by artifact:// URI.
    for arg in [id.clone(), format!("artifact://{id}")] {
        let fresh = alice.call("artifact_url", json!({"id": arg}));
        assert_ne!(fresh["isError"], true, "{fresh}");
        let fresh_url = fresh["structuredContent"]["url"].as_str().unwrap();
        let (status, _, body) = http(port, "GET", &path_of(fresh_url), &[], None);
        assert_eq!((status, body == pdf), (200, true));
    }

    // Bob: alice's id looks exactly like an id that does not exist.
    let mut bob = Client::new(port, "bob-secret-key-0123456789");
    bob.init();
    let theirs = bob.call("artifact_url", json!({"id": id}));
    let ghost = bob.call("artifact_url", json!({"id": "get_report_0000000000000000"}));
    assert_eq!(theirs["isError"], true);
    assert_eq!(error_code(&theirs), "artifact_not_found");
    assert_eq!(theirs, ghost, "another user's artifact must be indistinguishable from a missing one");
    assert_eq!(error_code(&bob.call("artifact_url", json!({}))), "bad_request");

    // Bob cannot ride alice's session id.
    let mut hijack = Client::new(port, "bob-secret-key-0123456789");
    hijack.session = alice.session.clone();
    let (status, _) = hijack.rpc("tools/call", json!({"name": "artifact_url", "arguments": {"id": id}}));
    assert_eq!(status, 404);

    // Alice's own second session is still alice: users own artifacts, sessions group them.
    let mut alice2 = Client::new(port, "alice-secret-key-0123456789");
    alice2.init();
    let again = alice2.call("artifact_url", json!({"id": id}));
    assert_ne!(again["isError"], true, "{again}");
    let (status, _, body) = http(port, "GET", &path_of(again["structuredContent"]["url"].as_str().unwrap()), &[], None);
    assert_eq!((status, body == pdf), (200, true));
}

/// With `[store] isolate_sessions = true`, each session is an owner of its own again: the same
/// user's second session is told nothing of the first's artifacts.
#[test]
fn isolate_sessions_walls_sessions_off() {
    let server = start(&format!("[store]\nisolate_sessions = true\n\n{}", auth_config()));
    let mut alice = Client::new(server.port, "alice-secret-key-0123456789");
    alice.init();
    let id = alice.call("get_report", json!({}))["_meta"]["io.stowage/assets"][0]["id"].as_str().unwrap().to_owned();
    assert_ne!(alice.call("artifact_url", json!({"id": id}))["isError"], true);
    let mut alice2 = Client::new(server.port, "alice-secret-key-0123456789");
    alice2.init();
    let theirs = alice2.call("artifact_url", json!({"id": id}));
    let ghost = alice2.call("artifact_url", json!({"id": "get_report_0000000000000000"}));
    assert_eq!(error_code(&theirs), "artifact_not_found");
    assert_eq!(theirs, ghost);
}

/// `/readyz` says 503 while a configured upstream is down, and names it and why; the dead
/// upstream does not hold up serving.
#[test]
fn readyz_names_a_down_upstream() {
    let started = Instant::now();
    let server = start("[gateway.servers.ghost]\ncommand = \"/nonexistent/ghost-server\"\n\n[gateway.servers.fine]\ncommand = \"true\"\n");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (status, _, body) = http(server.port, "GET", "/readyz", &[], None);
        let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        if status == 503
            && v["not_ready"]["upstream ghost"].as_str().is_some_and(|why| why.contains("cannot run /nonexistent/ghost-server"))
        {
            break;
        }
        assert!(Instant::now() < deadline, "{status} {}", String::from_utf8_lossy(&body));
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(started.elapsed() < Duration::from_secs(5), "serving waited for the dead upstream: {:?}", started.elapsed());
}

#[test]
fn non_loopback_without_auth_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_stowage"))
        .current_dir(dir.path())
        .args(["--store", dir.path().join("s").to_str().unwrap(), "serve", "--listen", "0.0.0.0:0"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("refusing to listen on 0.0.0.0:0 without authentication"), "{err}");
    assert_eq!(err.lines().filter(|l| l.starts_with("error:")).count(), 1, "{err}");
}

/// The embedded default key is created once in the store directory, so links from
/// `stowage sign-url` work on a running `stowage serve` of the same store.
#[test]
fn sign_url_and_serve_share_the_store_key() {
    let server = start("");
    let file = server.dir.path().join("note.txt");
    std::fs::write(&file, b"hello from the operator").unwrap();
    let put = stowage(server.dir.path(), &["artifacts", "put", file.to_str().unwrap(), "--session", "ops"]);
    assert!(put.status.success());
    let id = serde_json::from_slice::<Value>(&put.stdout).unwrap()["id"].as_str().unwrap().to_owned();
    let url = stowage(server.dir.path(), &["sign-url", &id, "--ttl", "5m"]);
    assert!(url.status.success(), "{}", String::from_utf8_lossy(&url.stderr));
    let url = String::from_utf8(url.stdout).unwrap().trim().to_owned();
    // The default public_url is 127.0.0.1:8787; the server runs elsewhere, so fetch its path.
    let (status, _, body) = http(server.port, "GET", &path_of(&url), &[], None);
    assert_eq!((status, body), (200, b"hello from the operator".to_vec()));
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(server.dir.path().join("store/links.key")).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o600);
    let bad = stowage(server.dir.path(), &["sign-url", &id, "--ttl", "2h"]);
    assert!(!bad.status.success() && String::from_utf8_lossy(&bad.stderr).contains("1m to 60m"));
}

/// `links.resource_link_uri = "artifact"` keeps the permanent URI in resource_link.uri.
#[test]
fn resource_link_uri_switch() {
    let server = start("[links]\nresource_link_uri = \"artifact\"\n");
    let mut c = Client::new(server.port, "unused");
    c.init();
    let result = c.call("get_report", json!({}));
    let link = result["content"].as_array().unwrap().iter().find(|b| b["type"] == "resource_link").unwrap();
    assert!(link["uri"].as_str().unwrap().starts_with("artifact://"), "{link}");
    assert!(result["_meta"]["io.stowage/assets"][0]["artifactUri"].as_str().unwrap().starts_with("artifact://"));
}

/// `serve` collects garbage on a timer (`retention.gc_interval`): an expired artifact's blob
/// leaves the disk without anyone putting or reading anything.
#[test]
fn serve_collects_expired_artifacts_on_a_timer() {
    let server = start(&format!("[retention]\nttl = \"3s\"\ngc_interval = \"1s\"\n\n{}", auth_config()));
    let mut alice = Client::new(server.port, "alice-secret-key-0123456789");
    alice.init();
    assert!(alice.call("get_report", json!({}))["_meta"]["io.stowage/assets"][0]["id"].is_string());
    let blobs = |dir: &std::path::Path| -> usize {
        std::fs::read_dir(dir.join("store/blobs"))
            .map_or(0, |d| d.flatten().map(|sub| std::fs::read_dir(sub.path()).map_or(0, |f| f.count())).sum())
    };
    assert_eq!(blobs(server.dir.path()), 1, "the PDF is on disk");
    let deadline = Instant::now() + Duration::from_secs(10);
    while blobs(server.dir.path()) > 0 {
        assert!(Instant::now() < deadline, "gc did not remove the expired artifact");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Without `[auth]`, every client is the one local user: what one session (or one stateless
/// 2026-07-28 request) stored, another session finds and downloads.
#[test]
fn without_auth_every_client_is_the_local_user() {
    let server = start("");
    let mut first = Client::new(server.port, "ignored");
    first.init();
    let result = first.call("get_report", json!({}));
    let id = result["_meta"]["io.stowage/assets"][0]["id"].as_str().unwrap().to_owned();
    let mut second = Client::new(server.port, "ignored");
    second.init();
    let fresh = second.call("artifact_url", json!({"id": id}));
    assert_ne!(fresh["isError"], true, "{fresh}");
    let (status, _, body) = http(server.port, "GET", &path_of(fresh["structuredContent"]["url"].as_str().unwrap()), &[], None);
    assert_eq!(status, 200);
    assert!(body.starts_with(b"%PDF-"));
    // A stateless request: no session at all, the same user.
    let meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}});
    let body = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "artifact_url", "arguments": {"id": id}, "_meta": meta}}).to_string();
    let (status, _, out) =
        http(server.port, "POST", "/mcp", &[("Content-Type", "application/json"), ("Accept", "application/json")], Some(body.as_bytes()));
    let v: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(status, 200);
    assert_ne!(v["result"]["isError"], true, "{v}");
}

/// Runs `openssl` in `dir`; the tests that need keys and signatures use it (scripts/test
/// installs it).
fn openssl(dir: &std::path::Path, args: &[&str], stdin: Option<&[u8]>) -> Vec<u8> {
    let mut child = Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("openssl is installed (scripts/test installs it)");
    child.stdin.take().unwrap().write_all(stdin.unwrap_or_default()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    out.stdout
}

/// An RS256 JWT signed by `dir/rsa.pem`, made the way any issuer makes one: base64url header
/// and claims, and an RSASSA-PKCS1-v1_5 SHA-256 signature over them (`openssl dgst -sign`).
fn rs256(dir: &std::path::Path, claims: &Value) -> String {
    use base64::Engine;
    let b64 = |b: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b);
    let input = format!("{}.{}", b64(br#"{"alg":"RS256","typ":"JWT"}"#), b64(claims.to_string().as_bytes()));
    let signature = openssl(dir, &["dgst", "-sha256", "-sign", "rsa.pem"], Some(input.as_bytes()));
    format!("{input}.{}", b64(&signature))
}

/// Regression: a JWT whose `sub` equalled an API key's user became that user, artifacts and
/// all. API keys are `key:<user>` and JWTs `jwt:<sub>` now, so they never meet.
#[test]
fn a_jwt_named_like_an_api_key_user_gets_none_of_its_artifacts() {
    let keys = tempfile::tempdir().unwrap();
    openssl(keys.path(), &["genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", "rsa.pem"], None);
    openssl(keys.path(), &["pkey", "-in", "rsa.pem", "-pubout", "-out", "rsa.pub.pem"], None);
    let config = format!(
        "{}\n[auth.jwt]\nalgorithms = [\"RS256\"]\nissuer = \"https://idp.example\"\naudience = [\"stowage\"]\npublic_key_files = [{:?}]\n",
        auth_config(),
        keys.path().join("rsa.pub.pem").to_str().unwrap()
    );
    let server = start(&config);
    let exp = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() + 300;
    let jwt = |claims: Value| rs256(keys.path(), &claims);

    let mut alice_key = Client::new(server.port, "alice-secret-key-0123456789");
    alice_key.init();
    let id = alice_key.call("get_report", json!({}))["_meta"]["io.stowage/assets"][0]["id"].as_str().unwrap().to_owned();

    // A token from the identity provider for a user who happens to be called "alice".
    let mut alice_jwt = Client::new(server.port, &jwt(json!({"sub": "alice", "iss": "https://idp.example", "aud": "stowage", "exp": exp})));
    alice_jwt.init();
    let theirs = alice_jwt.call("artifact_url", json!({"id": id}));
    let ghost = alice_jwt.call("artifact_url", json!({"id": "get_report_0000000000000000"}));
    assert_eq!(error_code(&theirs), "artifact_not_found", "{theirs}");
    assert_eq!(theirs, ghost, "the key user's artifact must look like a missing one");
    // The JWT user is a user in its own right: its own artifacts work.
    let own = alice_jwt.call("get_report", json!({}))["_meta"]["io.stowage/assets"][0]["id"].as_str().unwrap().to_owned();
    assert_ne!(alice_jwt.call("artifact_url", json!({"id": own}))["isError"], true);
    // And the API key user cannot reach the JWT user's copy by id either: same bytes, same
    // id, separate records.
    let fresh = alice_key.call("artifact_url", json!({"id": own}));
    assert_ne!(fresh["isError"], true, "the key user still has its own record of the same report: {fresh}");

    // A configured issuer and audience are required, not merely compared when present.
    for (what, claims) in [
        ("no iss", json!({"sub": "carol", "aud": "stowage", "exp": exp})),
        ("null aud", json!({"sub": "carol", "iss": "https://idp.example", "aud": null, "exp": exp})),
        ("nbf in an hour", json!({"sub": "carol", "iss": "https://idp.example", "aud": "stowage", "exp": exp, "nbf": exp + 3300})),
    ] {
        let (status, _) = Client::new(server.port, &jwt(claims)).rpc("initialize", json!({}));
        assert_eq!(status, 401, "{what}");
    }
}

/// The store `serve` creates, with the link key, the index and a blob in it, is readable by
/// its owner only, whatever the umask of the shell that started it.
#[test]
fn the_store_serve_creates_is_private() {
    use std::os::unix::fs::PermissionsExt;
    let server = start("");
    let mut c = Client::new(server.port, "ignored");
    c.init();
    let r = c.call("get_report", json!({}));
    let sha = r["_meta"]["io.stowage/assets"][0]["sha256"].as_str().unwrap().to_owned();
    let store = server.dir.path().join("store");
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    for dir in [store.clone(), store.join("blobs"), store.join("tmp"), store.join("blobs").join(&sha[..2])] {
        assert_eq!(mode(&dir), 0o700, "{}", dir.display());
    }
    for file in [store.join("index.sqlite"), store.join("links.key"), store.join("blobs").join(&sha[..2]).join(&sha)] {
        assert_eq!(mode(&file), 0o600, "{}", file.display());
    }
    assert!(stowage_store::FsStore::check_permissions(&store).unwrap().is_private());
}

/// A store left readable by others (made by an older Stowage, or copied in with a loose umask)
/// is served as it is, but the operator is told on stderr what is loose and how to fix it.
#[test]
fn a_loose_existing_store_is_reported_at_start() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    std::fs::create_dir(&store).unwrap();
    std::fs::set_permissions(&store, std::fs::Permissions::from_mode(0o755)).unwrap();
    let log = dir.path().join("stderr.log");
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_stowage"))
        .args(["--store", store.to_str().unwrap(), "serve", "--listen", &format!("127.0.0.1:{port}")])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let warned = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains("chmod -R go=") || Instant::now() > deadline {
            break text;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut up = 0;
    while up != 200 && Instant::now() < deadline {
        up = TcpStream::connect(("127.0.0.1", port)).map_or(0, |_| http(port, "GET", "/healthz", &[], None).0);
        std::thread::sleep(Duration::from_millis(50));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(warned.contains("readable by other local users") && warned.contains(&format!("chmod -R go= {}", store.display())), "{warned}");
    assert_eq!(up, 200, "a loose store is a warning, not a refusal");
}

/// Every resource path looks artifacts up as the caller: bob cannot list, read or subscribe to
/// alice's artifacts, as resources or through `artifact_list`, and a read of the same upstream
/// resource is stored for each of them separately (the read cache is per owner).
#[test]
fn resource_paths_keep_users_apart() {
    let server = start(&auth_config());
    let mut alice = Client::new(server.port, "alice-secret-key-0123456789");
    alice.init();
    let id = alice.call("get_report", json!({}))["_meta"]["io.stowage/assets"][0]["id"].as_str().unwrap().to_owned();
    let uri = format!("artifact://{id}");
    let (_, list) = alice.rpc("resources/list", json!({}));
    assert!(list.to_string().contains(&uri), "{list}");
    let (_, read) = alice.rpc("resources/read", json!({"uri": uri}));
    assert!(read["result"]["contents"][0]["text"].as_str().unwrap().contains("download: http://127.0.0.1:"), "{read}");
    let (_, sub) = alice.rpc("resources/subscribe", json!({"uri": uri}));
    assert!(sub.get("error").is_none(), "{sub}");
    let (_, demo) = alice.rpc("resources/read", json!({"uri": "demo://reports/q3.pdf"}));
    let alice_link = demo["result"]["contents"][0]["_meta"]["io.stowage/artifact"]["uri"].as_str().unwrap().to_owned();

    let mut bob = Client::new(server.port, "bob-secret-key-0123456789");
    bob.init();
    let (_, list) = bob.rpc("resources/list", json!({}));
    assert!(!list.to_string().contains(&id), "{list}");
    let listed = bob.call("artifact_list", json!({}));
    assert!(!listed.to_string().contains(&id), "{listed}");
    let ghost = "artifact://get_report_0000000000000000";
    for method in ["resources/read", "resources/subscribe"] {
        let (_, theirs) = bob.rpc(method, json!({"uri": uri}));
        let (_, missing) = bob.rpc(method, json!({"uri": ghost}));
        assert_eq!(theirs["error"]["code"], -32002, "{method}: {theirs}");
        assert_eq!(
            theirs["error"]["message"].as_str().unwrap().replace(&uri, "X"),
            missing["error"]["message"].as_str().unwrap().replace(ghost, "X")
        );
    }
    // The same upstream resource, read by bob: his own artifact and link, not alice's cached one.
    let (_, demo) = bob.rpc("resources/read", json!({"uri": "demo://reports/q3.pdf"}));
    let bob_link = demo["result"]["contents"][0]["_meta"]["io.stowage/artifact"]["uri"].as_str().unwrap().to_owned();
    assert_ne!(bob_link, alice_link);
    assert!(demo["result"]["_meta"]["io.stowage/transform"].get("cached").is_none(), "{demo}");
    let (status, _, pdf) = http(server.port, "GET", &path_of(&bob_link), &[], None);
    assert_eq!((status, pdf.starts_with(b"%PDF-")), (200, true));
}
