//! Blob chaining with the official Python MCP client as the host, in both protocol eras
//! (`mode="legacy"`: `initialize`; default: `server/discover`, 2026-07-28): `stowage serve
//! --stdio` in front of two fixture upstreams, a chain of tools across them, and the model-side
//! transcript holding references only.

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

/// The Python SDK from the peers directory (installed by scripts/gateway-peers.sh).
fn python() -> Option<PathBuf> {
    stowage_testkit::require_peer("venv/bin/python")
}

/// Runs the chain with the Python client in `mode`; `None` when the peer is not installed.
fn chain(mode: &str) -> Option<Value> {
    let python = python()?;
    let dir = tempfile::tempdir().unwrap();
    let fixture = stowage_testkit::chain_fixture_bin();
    let conf = dir.path().join("stowage.toml");
    let config = format!(
        "[gateway.servers.img]\ncommand = {f:?}\n\n[gateway.servers.edit]\ncommand = {f:?}\n\n[gateway.chaining.inputs]\nedit_upload_file = \"base64\"\n",
        f = fixture.display().to_string()
    );
    std::fs::write(&conf, config).unwrap();
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/peers/chaining.py");
    let out = Command::new(python)
        .arg(script)
        .args([mode, "--", env!("CARGO_BIN_EXE_stowage"), "--config", conf.to_str().unwrap()])
        .args(["--store", dir.path().join("store").to_str().unwrap(), "serve", "--stdio"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "python client failed ({mode}):\n{}", String::from_utf8_lossy(&out.stderr));
    Some(serde_json::from_slice(&out.stdout).unwrap())
}

fn text(result: &Value) -> String {
    result["content"].as_array().unwrap().iter().filter_map(|b| b["text"].as_str()).collect::<Vec<_>>().join("\n")
}

fn check(mode: &str, expect_version: &str) {
    let Some(o) = chain(mode) else { return };
    assert_eq!(o["protocol_version"], expect_version, "{mode}");
    // The model is shown no URL field: an optional output, nothing else to fill in.
    assert_eq!(o["generate_schema"]["required"], serde_json::json!(["prompt"]), "{}", o["generate_schema"]);
    let generated = &o["generate"]["_meta"]["io.stowage/blobs"]["result"];
    assert_eq!(generated["contentType"], "image/png", "{}", o["generate"]);
    let uri = generated["uri"].as_str().unwrap();
    assert!(uri.starts_with("artifact://img_generate_image_"), "{uri}");
    let png = stowage_demo::samples::png(64, 48);
    assert_eq!(generated["size"], png.len());
    // The other upstream read it through a signed link and wrote its own output.
    let rb = &o["remove_background"];
    assert!(text(rb).contains(&format!("removed the background of a {}-byte PNG", png.len())), "{rb}");
    let small = stowage_demo::samples::png(32, 24);
    assert_eq!(rb["_meta"]["io.stowage/blobs"]["result"]["size"], small.len());
    assert!(text(&o["upload"]).starts_with(&format!("uploaded {} bytes, sha256 ", small.len())), "{}", o["upload"]);
    let missing = &o["missing"];
    assert_eq!(missing["isError"], true, "{missing}");
    assert!(text(missing).starts_with("artifact_not_found: "), "{missing}");
    // References only: no image bytes reached the client, and the whole chain is small.
    let seen = [&o["generate"], &o["remove_background"], &o["upload"]].map(|v| v.to_string()).concat();
    assert!(!seen.contains("iVBOR"), "{seen}");
    assert!(seen.len() < 3_000, "{} bytes: {seen}", seen.len());
}

#[test]
fn a_chain_over_two_upstreams_with_the_python_sdk_in_the_legacy_era() {
    check("legacy", "2025-11-25");
}

#[test]
fn a_chain_over_two_upstreams_with_the_python_sdk_in_the_modern_era() {
    check("auto", "2026-07-28");
}
