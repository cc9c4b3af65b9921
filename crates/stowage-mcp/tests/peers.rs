//! The gateway against real third-party MCP software, installed by
//! `scripts/gateway-peers.sh` into `target/peers`: `@modelcontextprotocol/server-everything`
//! as the upstream (stdio and Streamable HTTP), driven by the official Python client (default
//! and legacy handshakes) and by the MCP Inspector CLI.
//!
//! A missing peer skips a test with a loud message on a developer machine, and fails it under
//! `CI` (where the test script installs them).

use crate::common;

use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use common::{MemSink, fast_config, read_log, shaper};
use serde_json::{Value, json};
use stowage_mcp::Gateway;
use stowage_mcp::config::{TransportSpec, UpstreamSpec};

use common::require_peer as require;

const EVERYTHING: &str = "node_modules/@modelcontextprotocol/server-everything/dist/index.js";
const PYTHON: &str = "venv/bin/python";
const INSPECTOR: &str = "node_modules/.bin/inspector";

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

async fn gateway(upstream: TransportSpec) -> (Arc<Gateway>, String) {
    gateway_in(UpstreamSpec::new("everything", upstream, Duration::from_secs(30)), stowage_mcp::SessionMode::Shared).await
}

/// A gateway over HTTP in front of `spec` in session mode `mode`, ready; it and its URL.
async fn gateway_in(spec: UpstreamSpec, mode: stowage_mcp::SessionMode) -> (Arc<Gateway>, String) {
    let gw = common::start_gateway(vec![spec], shaper(Arc::new(MemSink::default())), fast_config(), mode).await;
    let addr = stowage_mcp::run::spawn_http(gw.clone(), "127.0.0.1:0").await.unwrap();
    (gw, format!("http://{addr}/mcp"))
}

fn stdio_everything(script: &std::path::Path) -> TransportSpec {
    TransportSpec::stdio("node", vec![script.display().to_string(), "stdio".into()])
}

/// Runs the Python driver and checks what it saw.
async fn drive_with_python(python: &std::path::Path, url: &str, mode: &str) -> Value {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/peers/drive_everything.py");
    let (python, url, mode) = (python.to_owned(), url.to_owned(), mode.to_owned());
    let out = tokio::task::spawn_blocking(move || Command::new(python).arg(script).arg(url).arg(mode).output().unwrap()).await.unwrap();
    assert!(out.status.success(), "python client failed:\n{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn check_observations(o: &Value) {
    let tools: Vec<&str> = o["tools"].as_array().unwrap().iter().map(|t| t.as_str().unwrap()).collect();
    for t in ["echo", "get-tiny-image", "get-resource-reference", "get-resource-links", "get-structured-content"] {
        assert!(tools.contains(&t), "{t} missing: {tools:?}");
    }
    assert_eq!(o["echo"]["content"][0]["text"], "Echo: hello from python");
    // The 4 KB PNG is over the inline threshold: a link, no base64.
    let img = &o["tiny_image"];
    let img_s = img.to_string();
    assert!(!img_s.contains("iVBORw0KGgo"), "base64 PNG reached the client: {img_s}");
    assert!(img["content"].as_array().unwrap().iter().any(|b| b["type"] == "resource_link" && b["mimeType"] == "image/png"), "{img_s}");
    // The embedded blob resource is offloaded too (or passes if tiny).
    let rr = o["resource_reference"].to_string();
    assert!(rr.len() < 8_000, "{rr}");
    // Resource links from the server pass through as they are.
    let links: Vec<_> = o["resource_links"]["content"].as_array().unwrap().iter().filter(|b| b["type"] == "resource_link").collect();
    assert!(links.len() >= 3, "{}", o["resource_links"]);
    // Structured content still matches the tool's output schema (the client validated it).
    let sc = &o["structured"]["structuredContent"];
    assert!(sc["temperature"].is_number() && sc["conditions"].is_string(), "{sc}");
    assert!(o["prompts"].as_array().unwrap().iter().any(|p| p == "simple-prompt"));
    assert!(o["simple_prompt"]["messages"].as_array().is_some_and(|m| !m.is_empty()));
}

#[tokio::test]
async fn python_client_default_and_legacy_through_gateway_to_everything_over_stdio() {
    let (Some(everything), Some(python)) = (require(EVERYTHING), require(PYTHON)) else { return };
    let (gw, url) = gateway(stdio_everything(&everything)).await;
    for mode in ["auto", "legacy"] {
        let o = drive_with_python(&python, &url, mode).await;
        check_observations(&o);
        let want = if mode == "auto" { "2026-07-28" } else { "2025-11-25" };
        assert_eq!(o["protocol_version"], want, "mode {mode}");
    }
    gw.shutdown();
}

#[tokio::test]
async fn python_client_through_gateway_to_everything_over_http() {
    let (Some(everything), Some(python)) = (require(EVERYTHING), require(PYTHON)) else { return };
    let (mut child, up) = everything_over_http(&everything).await;
    let (gw, url) = gateway(TransportSpec::Http { url: up, headers: Default::default(), ca_file: None }).await;
    let o = drive_with_python(&python, &url, "auto").await;
    check_observations(&o);
    gw.shutdown();
    let _ = child.kill().await;
}

#[tokio::test]
async fn inspector_cli_lists_and_calls_through_gateway() {
    let (Some(everything), Some(inspector)) = (require(EVERYTHING), require(INSPECTOR)) else { return };
    let (gw, url) = gateway(stdio_everything(&everything)).await;
    let run = |args: Vec<String>| {
        let inspector = inspector.clone();
        let url = url.clone();
        async move {
            tokio::task::spawn_blocking(move || Command::new(inspector).arg("--cli").arg(url).args(args).output().unwrap()).await.unwrap()
        }
    };
    let out = run(vec!["--method".into(), "tools/list".into()]).await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("get-tiny-image"));
    let out = run(vec!["--method".into(), "tools/call".into(), "--tool-name".into(), "get-tiny-image".into()]).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("resource_link") && !stdout.contains("iVBORw0KGgo"), "{stdout}");
    let out =
        run(vec!["--method".into(), "tools/call".into(), "--tool-name".into(), "echo".into(), "--tool-arg".into(), "message=hi".into()])
            .await;
    assert!(out.status.success() && String::from_utf8_lossy(&out.stdout).contains("Echo: hi"));
    gw.shutdown();
}

/// A 2026-07-28 client has no standalone stream: it hears about changes only through a
/// `subscriptions/listen` stream. Through the gateway, its resource subscription must reach
/// server-everything (a 2025-era server that knows only `resources/subscribe`) and the
/// server's updates must come back on the stream, tagged with the subscription id. In both
/// session modes: with per-client upstream sessions (the default of `stowage serve`) the
/// subscription must be made on the client's own upstream session, where its
/// `toggle-subscriber-updates` call runs, not on the gateway's (once: no update at all).
#[tokio::test]
async fn python_client_listens_for_resource_updates_through_gateway() {
    let (Some(everything), Some(python)) = (require(EVERYTHING), require(PYTHON)) else { return };
    for mode in [stowage_mcp::SessionMode::PerClient, stowage_mcp::SessionMode::Shared] {
        let spec = UpstreamSpec::new("everything", stdio_everything(&everything), Duration::from_secs(30));
        let (gw, url) = gateway_in(spec, mode).await;
        let o = run_python(&python, "listen_everything.py", vec![url]).await;
        assert_eq!(o["protocol_version"], "2026-07-28", "{mode:?}");
        assert_eq!(o["honored"]["toolsListChanged"], true, "{mode:?}: {o}");
        assert_eq!(o["honored"]["resourceSubscriptions"], json!([o["uri"]]), "{mode:?}: {o}");
        assert_eq!(o["updated"], o["uri"], "{mode:?}: no update on the listen stream: {o}");
        gw.shutdown();
    }
}

/// server-everything (2025-era) asks for sampling and elicitation mid-call with requests; the
/// Python client speaking 2026-07-28 expects `input_required` results and retries. The gateway
/// bridges the two, and the answers reach the server's tools.
#[tokio::test]
async fn python_client_answers_sampling_and_elicitation_as_input_required() {
    let (Some(everything), Some(python)) = (require(EVERYTHING), require(PYTHON)) else { return };
    let (gw, url) = gateway(stdio_everything(&everything)).await;
    check_input_required(run_python(&python, "input_required_everything.py", vec![url]).await);
    gw.shutdown();
}

/// The same over stdio on both sides: the Python client spawns `stowage serve --stdio`, which
/// wraps server-everything; then the plain default/legacy drive as well.
#[tokio::test]
async fn python_client_spawns_stowage_serve_stdio() {
    let (Some(everything), Some(python), Some(stowage)) = (require(EVERYTHING), require(PYTHON), stowage_bin()) else { return };
    let dir = tempfile::tempdir().unwrap();
    let serve = vec![
        "--stdio".to_owned(),
        "--".to_owned(),
        stowage.display().to_string(),
        "serve".to_owned(),
        "--stdio".to_owned(),
        "--store".to_owned(),
        dir.path().display().to_string(),
        "--".to_owned(),
        "node".to_owned(),
        everything.display().to_string(),
        "stdio".to_owned(),
    ];
    check_input_required(run_python(&python, "input_required_everything.py", serve.clone()).await);
    for mode in ["auto", "legacy"] {
        let mut args = serve.clone();
        args.insert(1, mode.to_owned());
        let o = run_python(&python, "drive_everything.py", args).await;
        check_observations(&o);
        let want = if mode == "auto" { "2026-07-28" } else { "2025-11-25" };
        assert_eq!(o["protocol_version"], want, "mode {mode}");
    }
}

/// `target/debug/stowage`, built by the test script before the tests run.
fn stowage_bin() -> Option<PathBuf> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/debug/stowage");
    if p.exists() {
        return Some(p);
    }
    assert!(std::env::var_os("CI").is_none(), "{} is not built", p.display());
    eprintln!("\n!!!!!!!! SKIPPED: {} is not built; run `cargo build -p stowage` first !!!!!!!!\n", p.display());
    None
}

/// Runs a driver script from tests/peers and parses the one JSON object it prints.
async fn run_python(python: &std::path::Path, script: &str, args: Vec<String>) -> Value {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/peers").join(script);
    let python = python.to_owned();
    let out = tokio::task::spawn_blocking(move || Command::new(python).arg(script).args(args).output().unwrap()).await.unwrap();
    assert!(out.status.success(), "python client failed:\n{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn check_input_required(o: Value) {
    assert_eq!(o["protocol_version"], "2026-07-28");
    assert!(o["asked"]["sampling"].as_str().unwrap().contains("say hi"), "{o}");
    assert!(o["sampling_result"].as_str().unwrap().contains("stowage-sampled-reply"), "{o}");
    assert!(o["asked"]["elicitation"].as_str().is_some(), "{o}");
    assert!(o["elicitation_result"].as_str().unwrap().contains("Ada Lovelace"), "{o}");
}

/// Starts server-everything over Streamable HTTP on a free port; returns it and its URL.
async fn everything_over_http(everything: &std::path::Path) -> (tokio::process::Child, String) {
    let port = free_port();
    let child = tokio::process::Command::new("node")
        .arg(everything)
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    for _ in 0..100 {
        if tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    (child, format!("http://127.0.0.1:{port}/mcp"))
}

/// Two people (two API keys) through one gateway with per-client upstream sessions, both
/// protocol eras, in front of server-everything over stdio and over HTTP: each sees its own
/// session resources, sampling answers, progress, roots and logs, and none of the other's.
/// (In shared mode Bob reads Alice's session resource and concurrent sampling cannot be
/// attributed: this test fails there.)
#[tokio::test]
async fn two_clients_are_kept_apart_as_if_they_had_connected_directly() {
    let (Some(everything), Some(python)) = (require(EVERYTHING), require(PYTHON)) else { return };
    let auth = stowage_http::AuthConfig {
        api_keys: [("alice", "key-alice"), ("bob", "key-bob")]
            .into_iter()
            .map(|(user, key)| stowage_http::ApiKeyConfig {
                id: user.into(),
                sha256: stowage_http::hash_api_key(key),
                user: None,
                tenant: Some("acme".into()),
            })
            .collect(),
        jwt: None,
    };
    let authenticator = stowage_http::Authenticator::new(&auth).unwrap();
    let (mut http_child, http_url) = everything_over_http(&everything).await;
    let upstreams = [stdio_everything(&everything), TransportSpec::Http { url: http_url, headers: Default::default(), ca_file: None }];
    for upstream in upstreams {
        let spec = UpstreamSpec::new("everything", upstream.clone(), Duration::from_secs(30));
        let gw =
            common::start_gateway(vec![spec], shaper(Arc::new(MemSink::default())), fast_config(), stowage_mcp::SessionMode::PerClient)
                .await;
        let addr = stowage_mcp::run::spawn_http_with(gw.clone(), "127.0.0.1:0", authenticator.clone(), None).await.unwrap();
        let url = format!("http://{addr}/mcp");
        for mode in ["legacy", "auto"] {
            let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/peers/two_clients_everything.py");
            let (py, u, m) = (python.clone(), url.clone(), mode.to_owned());
            let out = tokio::task::spawn_blocking(move || {
                Command::new(py).arg(script).arg(u).arg(m).arg("key-alice").arg("key-bob").output().unwrap()
            })
            .await
            .unwrap();
            assert!(out.status.success(), "python clients failed ({mode}, {upstream:?}):\n{}", String::from_utf8_lossy(&out.stderr));
            let o: Value = serde_json::from_slice(&out.stdout).unwrap();
            let what = format!("{mode} over {}: {o}", if matches!(upstream, TransportSpec::Http { .. }) { "http" } else { "stdio" });
            // Each is offered the tools the server offers a client like it: the sampling tool
            // only to the clients that can sample, as server-everything does directly.
            let tools = |who: &str| {
                o[format!("{who}_tools")].as_array().unwrap().iter().map(|t| t.as_str().unwrap().to_owned()).collect::<Vec<_>>()
            };
            let (alice, carol) = (tools("alice"), tools("carol"));
            let sampling = "trigger-sampling-request";
            assert!(alice.iter().any(|t| t == sampling), "{what}");
            assert!(!carol.iter().any(|t| t == sampling), "{what}");
            assert!(carol.len() < alice.len() && carol.iter().all(|t| alice.contains(t)), "{what}");
            assert_eq!(o["alice_lists_it"], true, "{what}");
            assert_eq!(o["bob_lists_it"], false, "{what}");
            assert_eq!(o["alice_reads_it"], true, "{what}");
            assert!(o["bob_reads_it"].as_str().is_some_and(|e| e.starts_with("error")), "{what}");
            assert!(o["alice_sampling"].as_str().unwrap().contains("reply-for-alice"), "{what}");
            assert!(o["bob_sampling"].as_str().unwrap().contains("reply-for-bob"), "{what}");
            // Each client was asked exactly its own question.
            let asked = |who: &str| {
                o[format!("{who}_sampled")].as_array().unwrap().iter().map(|q| q.as_str().unwrap().to_owned()).collect::<Vec<_>>()
            };
            assert!(asked("alice").len() == 1 && asked("alice")[0].ends_with("alice asks"), "{what}");
            assert!(asked("bob").len() == 1 && asked("bob")[0].ends_with("bob asks"), "{what}");
            assert!(o["alice_progress"].as_u64().unwrap() >= 1 && o["bob_progress"].as_u64().unwrap() >= 1, "{what}");
            if mode == "legacy" {
                assert!(o["alice_roots"].as_str().unwrap().contains("file:///home/alice"), "{what}");
                assert!(o["bob_roots"].as_str().unwrap().contains("file:///home/bob"), "{what}");
                // Alice's simulated logging ("Error-level message", "Alert level-message", …)
                // reaches her only; each hears its own "Roots updated" line.
                let simulated = |who: &str| {
                    o[format!("{who}_logs")]
                        .as_array()
                        .unwrap()
                        .iter()
                        .filter(|l| !l.as_str().unwrap().starts_with("Roots updated"))
                        .count()
                };
                assert!(simulated("alice") >= 1, "{what}");
                assert_eq!(simulated("bob"), 0, "bob heard alice's logs: {what}");
            }
        }
        gw.shutdown();
    }
    let _ = http_child.kill().await;
}

/// One client on a shared upstream session (no auth), over both upstream transports: the
/// upstream's `roots/list`, asked during a call, reaches the client (session-level over
/// stdio, on the call's stream over HTTP) and its answer reaches the tool.
#[tokio::test]
async fn roots_reach_a_shared_upstream_from_its_only_client() {
    let (Some(everything), Some(python)) = (require(EVERYTHING), require(PYTHON)) else { return };
    let (mut http_child, http_url) = everything_over_http(&everything).await;
    for upstream in [stdio_everything(&everything), TransportSpec::Http { url: http_url, headers: Default::default(), ca_file: None }] {
        let (gw, url) = gateway(upstream).await;
        let script = r#"
import asyncio, sys
import mcp_types as types
from mcp import Client
async def roots(context):
    return types.ListRootsResult(roots=[types.Root(uri="file:///home/carol", name="carol")])
async def main():
    async with Client(sys.argv[1], mode="legacy", list_roots_callback=roots) as c:
        r = await c.call_tool("get-roots-list", {})
        print(" ".join(getattr(b, "text", "") for b in r.content))
asyncio.run(main())
"#;
        let (py, u) = (python.clone(), url.clone());
        let out = tokio::task::spawn_blocking(move || Command::new(py).arg("-c").arg(script).arg(u).output().unwrap()).await.unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let said = String::from_utf8_lossy(&out.stdout);
        assert!(said.contains("file:///home/carol"), "{said}");
        gw.shutdown();
    }
    let _ = http_child.kill().await;
}

/// server-everything's resources through the gateway to the official Python client: lists and
/// templates pass, small text and blob reads stay inline, long documents become artifacts, a
/// repeated read is answered from the cache, and after a subscribed update the read reaches the
/// server again (the cache was invalidated before the update was forwarded).
#[tokio::test]
async fn python_client_reads_everythings_resources_through_the_pipeline_and_the_cache() {
    let (Some(everything), Some(python)) = (require(EVERYTHING), require(PYTHON)) else { return };
    let (gw, url) = gateway(stdio_everything(&everything)).await;
    let o = run_python(&python, "resources_everything.py", vec![url]).await;
    assert_eq!(o["protocol_version"], "2026-07-28");
    let templates: Vec<&str> = o["templates"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    assert!(templates.contains(&"demo://resource/dynamic/text/{resourceId}"), "{templates:?}");
    let text = o["text"]["contents"][0]["text"].as_str().unwrap();
    assert!(text.starts_with("Resource 1: This is a plaintext resource created at"), "{text}");
    let blob = o["blob"]["contents"][0]["blob"].as_str().expect("a tiny blob stays inline");
    use base64::Engine;
    assert!(base64::engine::general_purpose::STANDARD.decode(blob).unwrap().starts_with(b"Resource 1: This is a base64 blob"));
    // Every document reads; any over the inline limit comes back as a reference.
    let docs = o["docs"].as_object().unwrap();
    assert!(!docs.is_empty(), "{o}");
    for (uri, doc) in docs {
        let entry = &doc["contents"][0];
        assert_eq!(entry["uri"], *uri);
        let text = entry["text"].as_str().unwrap();
        if entry["_meta"].get("io.stowage/artifact").is_some() {
            assert!(text.contains("artifact://") && text.len() < 600, "{uri}: {text}");
        } else {
            assert!(text.chars().count() <= 10_000, "{uri}: {} chars inline", text.chars().count());
        }
    }
    // server-everything gives its reads no `ttlMs`: a dynamic resource is read through, never
    // answered from the cache.
    assert!(o["text_again"]["_meta"]["io.stowage/transform"].get("cached").is_none(), "{}", o["text_again"]);
    assert_eq!(o["updated"], "demo://resource/dynamic/text/1", "{o}");
    let after = &o["text_after_update"];
    assert!(after["_meta"].get("io.stowage/transform").is_none_or(|t| t.get("cached").is_none()), "{after}");
    assert_ne!(after["contents"][0]["text"], o["text"]["contents"][0]["text"], "the read after the update reached the server");
    gw.shutdown();
}

/// Runs `tests/peers/keepalive_sdk.mjs`: `calls` interleaved rounds of one `echo` per target
/// with the TypeScript SDK's client; returns each target's milliseconds per call.
async fn time_sdk_calls(calls: usize, targets: &[(&str, &str)]) -> std::collections::HashMap<String, Vec<f64>> {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/peers/keepalive_sdk.mjs");
    let mut cmd = Command::new("node");
    cmd.arg(script).arg(stowage_testkit::peers_dir()).arg(calls.to_string());
    for (label, url) in targets {
        cmd.arg(format!("{label}={url}"));
    }
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap()).await.unwrap();
    assert!(out.status.success(), "the TypeScript SDK client failed:\n{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn median(times: &[f64]) -> f64 {
    let mut t = times.to_vec();
    t.sort_by(f64::total_cmp);
    t[t.len() / 2]
}

/// Every call on a kept-alive connection once waited ~40 ms for the client's delayed ACK,
/// because accepted sockets kept Nagle on. The TypeScript SDK's client (Node's fetch, as Claude
/// Code, VS Code, Cursor and the Inspector use it) makes 100 sequential calls on one connection
/// through the gateway and straight to server-everything over HTTP: the gateway's median stays
/// within a few milliseconds of direct, far from the 40 ms stall. (The figures themselves are a
/// benchmark: `cargo bench -p stowage-mcp --bench keepalive`.)
#[tokio::test]
async fn kept_alive_calls_from_the_typescript_sdk_stay_close_to_direct() {
    let Some(everything) = require(EVERYTHING) else { return };
    if require("node_modules/@modelcontextprotocol/sdk/package.json").is_none() {
        return;
    }
    let (_server, direct) = everything_over_http(&everything).await;
    let (gw, through) = gateway(TransportSpec::Http { url: direct.clone(), headers: Default::default(), ca_file: None }).await;
    let times = time_sdk_calls(100, &[("direct", &direct), ("gateway", &through)]).await;
    let (direct_ms, gateway_ms) = (median(&times["direct"]), median(&times["gateway"]));
    // A debug build on a shared 2-core machine: a few milliseconds of our own work at most,
    // against 40 ms per call when the stall was there.
    assert!(gateway_ms < direct_ms + 10.0, "median per call: {gateway_ms:.2} ms through the gateway, {direct_ms:.2} ms direct");
    gw.shutdown();
}

/// A user stops a running tool in a client built on the TypeScript SDK: the SDK sends
/// `notifications/cancelled` and rejects the call. The gateway sends no response (as the
/// specification says) and holds the request's stream open, so the SDK has nothing to resume:
/// it once resumed the ended stream twice, got a 400 each time and reported both. Checked in
/// both session modes: the SDK reports no error, the upstream is told to stop, and the same
/// client's next call is answered.
#[tokio::test]
async fn a_call_cancelled_by_the_typescript_sdk_logs_no_error() {
    if require("node_modules/@modelcontextprotocol/sdk/package.json").is_none() {
        return;
    }
    let peers = stowage_testkit::peers_dir();
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/peers/cancel_sdk.mjs");
    for mode in [stowage_mcp::SessionMode::PerClient, stowage_mcp::SessionMode::Shared] {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("fx.log");
        let (gw, url) = gateway_in(common::fixture_spec("fx", Some(&log), Duration::from_secs(30)), mode).await;
        let mut cmd = Command::new("node");
        cmd.arg(&script).arg(&peers).arg(&url).arg("slow");
        let out = tokio::task::spawn_blocking(move || cmd.output().unwrap()).await.unwrap();
        assert!(out.status.success(), "{mode:?}: the TypeScript SDK client failed:\n{}", String::from_utf8_lossy(&out.stderr));
        let o: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(o["rejected"], true, "{mode:?}: the aborted call was not rejected: {o}");
        assert_eq!(o["errors"], json!([]), "{mode:?}: the SDK reported errors: {o}");
        assert_eq!(o["after"], "slept 10 ms", "{mode:?}: {o}");
        let cancelled = read_log(&log).lines().filter(|l| l.contains("notifications/cancelled")).count();
        assert_eq!(cancelled, 1, "{mode:?}: the upstream was told to stop {cancelled} times:\n{}", read_log(&log));
        gw.shutdown();
    }
}

/// Starts `standalone_asker.js` (the TypeScript SDK) on a free port; returns it and its URL.
async fn standalone_asker(peers: &std::path::Path) -> (tokio::process::Child, String) {
    use tokio::io::AsyncBufReadExt;
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/peers/standalone_asker.js");
    let mut child = tokio::process::Command::new("node")
        .arg(script)
        .arg(peers)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let first = tokio::time::timeout(Duration::from_secs(20), lines.next_line()).await.unwrap().unwrap().unwrap();
    let port = serde_json::from_str::<Value>(&first).unwrap()["port"].as_u64().unwrap();
    (child, format!("http://127.0.0.1:{port}/mcp"))
}

/// Runs `fresh_sessions.py` (N Python SDK clients at once) against `url`.
async fn fresh_sessions(python: &std::path::Path, url: &str, n: usize) -> Vec<Value> {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/peers/fresh_sessions.py");
    let (py, url) = (python.to_owned(), url.to_owned());
    let out =
        tokio::task::spawn_blocking(move || Command::new(py).arg(script).arg(url).arg(n.to_string()).output().unwrap()).await.unwrap();
    assert!(out.status.success(), "python clients failed:\n{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// A server that asks for sampling and logs on its standalone stream the moment a call
/// starts (the TypeScript SDK's server, as the conformance suite's reference server does),
/// behind the gateway's default per-client upstream sessions: 20 clients at once, each on a
/// fresh session whose first call makes the server ask. Every call completes with its own
/// client's answer and each client hears only its own log line, as they do connected
/// directly (checked first). A request sent before a fresh upstream session's stream is open
/// is lost by the server, and the call hangs until its timeout: the gateway opens the stream
/// before it forwards the first request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fresh_upstream_sessions_find_their_standalone_stream_open() {
    let (Some(python), Some(peers)) = (require(PYTHON), require("package.json")) else { return };
    let peers = peers.parent().unwrap().to_owned();
    let (_server, url) = standalone_asker(&peers).await;
    let check = |seen: &[Value], how: &str| {
        for (i, s) in seen.iter().enumerate() {
            assert_eq!(s["text"], format!("sampled: answer-{i}"), "{how}: client {i}: {s}");
            assert_eq!(s["logs"], json!([format!("asking: question-{i}")]), "{how}: client {i} hears its own log only: {s}");
        }
    };
    check(&fresh_sessions(&python, &url, 5).await, "direct");
    let spec = UpstreamSpec::new("asker", TransportSpec::Http { url, headers: Default::default(), ca_file: None }, Duration::from_secs(30));
    let gw =
        common::start_gateway(vec![spec], shaper(Arc::new(MemSink::default())), fast_config(), stowage_mcp::SessionMode::PerClient).await;
    let addr = stowage_mcp::run::spawn_http(gw.clone(), "127.0.0.1:0").await.unwrap();
    let seen = fresh_sessions(&python, &format!("http://{addr}/mcp"), 20).await;
    assert_eq!(seen.len(), 20);
    check(&seen, "through the gateway");
    gw.shutdown();
}
