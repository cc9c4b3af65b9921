//! What environment `stowage serve` hands its stdio upstreams: a minimal one plus the
//! server's own `env`, never the gateway's secrets, and the whole of it (secrets still
//! withheld) only with `inherit_env = true`. Through the real binary and the fixture server.

use std::process::Stdio;

use serde_json::{Value, json};
use stowage_testkit::RpcClient;

fn text(r: &Value) -> String {
    r["result"]["content"][0]["text"].as_str().unwrap_or_default().to_owned()
}

#[tokio::test]
async fn upstreams_get_a_minimal_environment_and_never_the_gateways_secrets() {
    let dir = tempfile::tempdir().unwrap();
    let fixture = stowage_testkit::fixture_bin();
    let config = format!(
        r#"
[links]
keys = [{{ id = "k1", secret_env = "STOWAGE_TEST_LINK_SECRET" }}]

[gateway.servers.plain]
command = "{fixture}"
env = {{ GIVEN = "1" }}

[gateway.servers.inheriting]
command = "{fixture}"
inherit_env = true
"#,
        fixture = fixture.display()
    );
    std::fs::write(dir.path().join("stowage.toml"), config).unwrap();
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_stowage"))
        .args(["--config", dir.path().join("stowage.toml").to_str().unwrap(), "--store", dir.path().join("store").to_str().unwrap()])
        .args(["serve", "--stdio"])
        .env("STOWAGE_TEST_LINK_SECRET", "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=")
        .env("SOME_CLOUD_TOKEN", "not for upstreams")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let rpc = RpcClient::connect(child.stdout.take().unwrap(), child.stdin.take().unwrap(), None);
    rpc.initialize("2025-06-18", json!({})).await;
    let plain = text(&rpc.call("plain_env", json!({})).await);
    let names: Vec<&str> = plain.split(' ').collect();
    assert!(names.contains(&"PATH") && names.contains(&"GIVEN"), "{plain}");
    assert!(!names.contains(&"SOME_CLOUD_TOKEN") && !names.contains(&"STOWAGE_TEST_LINK_SECRET"), "{plain}");
    let inheriting = text(&rpc.call("inheriting_env", json!({})).await);
    let names: Vec<&str> = inheriting.split(' ').collect();
    assert!(names.contains(&"SOME_CLOUD_TOKEN"), "inherit_env gives the gateway's environment: {inheriting}");
    assert!(!names.contains(&"STOWAGE_TEST_LINK_SECRET"), "but never a secret: {inheriting}");
    let _ = child.kill().await;
}
