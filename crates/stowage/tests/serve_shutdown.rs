//! Stopping `stowage serve` is quiet: with a stdio upstream and a Streamable HTTP upstream
//! connected, neither SIGTERM nor the host closing stdin makes it log a lost connection, a
//! reconnection or any other warning. (Supervisors used to race the shutdown: the killed
//! child looked like a crash and was "reconnecting".)

use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use stowage_testkit::RpcClient;
use tokio::io::AsyncReadExt;
use tokio::process::{Child, Command};

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A real Streamable HTTP MCP server to be the HTTP upstream: another `stowage serve`, in
/// front of the fixture.
async fn http_upstream(dir: &std::path::Path) -> (Child, String) {
    let port = free_port();
    let child = Command::new(env!("CARGO_BIN_EXE_stowage"))
        .args(["--store", dir.join("upstream-store").to_str().unwrap(), "serve", "--listen", &format!("127.0.0.1:{port}"), "--"])
        .arg(stowage_testkit::fixture_bin())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let base = format!("http://127.0.0.1:{port}");
    for _ in 0..200 {
        if reqwest::get(format!("{base}/healthz")).await.is_ok_and(|r| r.status().is_success()) {
            return (child, format!("{base}/mcp"));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the HTTP upstream did not start");
}

fn config(dir: &std::path::Path, http_url: &str) -> std::path::PathBuf {
    let text = format!(
        "[gateway.servers.local]\ncommand = \"{}\"\n\n[gateway.servers.remote]\nurl = \"{http_url}\"\n",
        stowage_testkit::fixture_bin().display()
    );
    let path = dir.join("stowage.toml");
    std::fs::write(&path, text).unwrap();
    path
}

fn gateway(dir: &std::path::Path, config: &std::path::Path, mode: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_stowage"))
        .args(["--config", config.to_str().unwrap(), "--store", dir.join("store").to_str().unwrap(), "serve"])
        .args(mode)
        .env_remove("STOWAGE_LOG")
        .env_remove("RUST_LOG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap()
}

/// Waits for the process to exit (it must, promptly) and returns its whole stderr.
async fn exit_and_stderr(mut child: Child, mut stderr: tokio::process::ChildStderr) -> String {
    let status = tokio::time::timeout(Duration::from_secs(15), child.wait()).await.expect("stowage serve did not exit").unwrap();
    let mut err = String::new();
    stderr.read_to_string(&mut err).await.unwrap();
    assert!(status.success(), "exit {status}: {err}");
    err
}

fn sigterm(child: &Child) {
    let pid = child.id().expect("running").to_string();
    assert!(std::process::Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
}

/// What must not be in the log of a clean stop.
fn assert_quiet(how: &str, stderr: &str) {
    assert!(stderr.contains("connected"), "{how}: the upstreams never connected:\n{stderr}");
    for line in stderr.lines() {
        let lower = line.to_ascii_lowercase();
        for bad in ["warn", "error", "reconnect", "retrying", "connection lost", "cannot start"] {
            assert!(!lower.contains(bad), "{how}: {bad:?} logged at shutdown: {line}\n--- whole stderr ---\n{stderr}");
        }
    }
}

/// Connects over stdio, checks both upstreams answer, and returns the client and what
/// closes the gateway's stdin when aborted (the client's own writer lives as long as its
/// reader, so it cannot be the one to close it).
async fn use_both_over_stdio(child: &mut Child) -> (RpcClient, tokio::task::JoinHandle<()>) {
    let (client_end, mut relay_end) = tokio::io::duplex(1 << 16);
    let mut stdin = child.stdin.take().unwrap();
    let relay = tokio::spawn(async move {
        let _ = tokio::io::copy(&mut relay_end, &mut stdin).await;
    });
    let rpc = RpcClient::connect(child.stdout.take().unwrap(), client_end, None);
    rpc.initialize("2025-06-18", json!({})).await;
    let tools = rpc.request("tools/list", json!({})).await;
    let names: Vec<&str> = tools["result"]["tools"].as_array().unwrap().iter().filter_map(|t| t["name"].as_str()).collect();
    assert!(names.contains(&"local_echo") && names.contains(&"remote_echo"), "{names:?}");
    for tool in ["local_echo", "remote_echo"] {
        let r: Value = rpc.call(tool, json!({"message": "hi"})).await;
        assert_eq!(r["result"]["content"][0]["text"], "hi", "{r}");
    }
    (rpc, relay)
}

#[tokio::test]
async fn stdin_eof_stops_serve_without_reconnect_warnings() {
    let dir = tempfile::tempdir().unwrap();
    let (_upstream, url) = http_upstream(dir.path()).await;
    let cfg = config(dir.path(), &url);
    let mut child = gateway(dir.path(), &cfg, &["--stdio", "--no-links"]);
    let stderr = child.stderr.take().unwrap();
    let (_rpc, stdin) = use_both_over_stdio(&mut child).await;
    // The host closes the pipe: stdin reaches EOF.
    stdin.abort();
    let err = exit_and_stderr(child, stderr).await;
    assert_quiet("stdin EOF", &err);
}

#[tokio::test]
async fn sigterm_stops_stdio_serve_without_reconnect_warnings() {
    let dir = tempfile::tempdir().unwrap();
    let (_upstream, url) = http_upstream(dir.path()).await;
    let cfg = config(dir.path(), &url);
    let mut child = gateway(dir.path(), &cfg, &["--stdio", "--no-links"]);
    let stderr = child.stderr.take().unwrap();
    let (_rpc, _stdin) = use_both_over_stdio(&mut child).await;
    // Stdin stays open: the signal alone must stop it.
    sigterm(&child);
    let err = exit_and_stderr(child, stderr).await;
    assert_quiet("SIGTERM over stdio", &err);
}

#[tokio::test]
async fn sigterm_stops_http_serve_without_reconnect_warnings() {
    let dir = tempfile::tempdir().unwrap();
    let (_upstream, url) = http_upstream(dir.path()).await;
    let cfg = config(dir.path(), &url);
    let port = free_port();
    let mut child = gateway(dir.path(), &cfg, &["--listen", &format!("127.0.0.1:{port}")]);
    let stderr = child.stderr.take().unwrap();
    // Both upstreams up: /readyz says so.
    let ready = format!("http://127.0.0.1:{port}/readyz");
    let mut up = false;
    for _ in 0..300 {
        if reqwest::get(&ready).await.is_ok_and(|r| r.status().is_success()) {
            up = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(up, "the gateway never became ready");
    sigterm(&child);
    let err = exit_and_stderr(child, stderr).await;
    assert_quiet("SIGTERM over http", &err);
}
