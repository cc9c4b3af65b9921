//! Chaining with no configuration, through the real binary and the official Python client:
//! `stowage serve --stdio` in front of three instances of a FastMCP 4.1.2 server of our own
//! (tests/peers/chaining_auto_server.py) whose tools take file bytes the ways published
//! servers do and declare nothing for Stowage. A PDF made by one upstream reaches each target
//! byte-exact through its artifact:// URI; what a target cannot take is refused before it is
//! called (its log shows no call); a free-text `content` is left as written; the catalog the
//! client was given validates (the Python SDK, the 2026-07-28 and 2025-11-25 wire models, the
//! TypeScript SDK's 2025-06-18 schema, the JSON Schema meta-schemas).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;
use sha2::Digest;

struct Run {
    out: Value,
    /// Each upstream's log: one JSON object per call it received.
    logs: [Vec<Value>; 3],
    pdf: Vec<u8>,
}

fn read_log(p: &Path) -> Vec<Value> {
    std::fs::read_to_string(p).unwrap_or_default().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// The three upstreams' configuration, written in `dir`: `src` and `dst`, and `tiny` behind a
/// proxy that takes bodies of 2,000 bytes at most. Returns the config file and each log.
fn configure(dir: &Path, python: &Path, pdf_path: &Path) -> (PathBuf, [PathBuf; 3]) {
    let server = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/peers/chaining_auto_server.py");
    let logs = ["src", "dst", "tiny"].map(|n| dir.join(format!("{n}.log")));
    let entry = |name: &str, log: &Path, extra: &str| {
        format!(
            "[gateway.servers.{name}]\ncommand = {:?}\nargs = [{:?}, {:?}, {:?}]\n{extra}\n",
            python.display().to_string(),
            server.display().to_string(),
            log.display().to_string(),
            pdf_path.display().to_string()
        )
    };
    let config = [entry("src", &logs[0], ""), entry("dst", &logs[1], ""), entry("tiny", &logs[2], "max_request_bytes = 2000")].concat();
    let conf = dir.join("stowage.toml");
    std::fs::write(&conf, config).unwrap();
    (conf, logs)
}

/// Runs the client in `mode`; `None` when the Python peer is not installed.
fn run(mode: &str) -> Option<Run> {
    let python = stowage_testkit::require_peer("venv/bin/python")?;
    let dir = tempfile::tempdir().unwrap();
    let pdf = stowage_demo::samples::pdf(24_000, "Quarterly report");
    let pdf_path = dir.path().join("report.pdf");
    std::fs::write(&pdf_path, &pdf).unwrap();
    let (conf, logs) = configure(dir.path(), &python, &pdf_path);
    let peers = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/peers");
    // coreutils' timeout: a hung client or gateway fails the test instead of holding the run.
    let out = Command::new("timeout")
        .args(["-k", "5", "180"])
        .arg(&python)
        .arg(peers.join("chaining_auto.py"))
        .args([mode, "--", env!("CARGO_BIN_EXE_stowage"), "--config", conf.to_str().unwrap()])
        .args(["--store", dir.path().join("store").to_str().unwrap(), "serve", "--stdio"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "python client failed ({mode}):\n{}", String::from_utf8_lossy(&out.stderr));
    let out: Value = serde_json::from_slice(&out.stdout).unwrap();
    Some(Run { out, logs: logs.map(|l| read_log(&l)), pdf })
}

fn text(result: &Value) -> String {
    result["content"].as_array().unwrap().iter().filter_map(|b| b["text"].as_str()).collect::<Vec<_>>().join("\n")
}

/// The refusal's `code: message` line.
fn refused(result: &Value) -> String {
    assert_eq!(result["isError"], true, "{result}");
    let t = text(result);
    assert_eq!(t.lines().count(), 1, "one line: {t}");
    t
}

/// The TypeScript SDK's schema check of the catalog, when Node and the SDK are installed.
fn ts_sdk_accepts(tools: &Value) {
    let Some(peers) = stowage_testkit::require_peer("node_modules/@modelcontextprotocol/sdk") else { return };
    let peers = peers.parent().unwrap().parent().unwrap().parent().unwrap().to_path_buf();
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/peers/tools_check.js");
    let mut child = Command::new("timeout")
        .args(["-k", "5", "60", "node"])
        .arg(script)
        .arg(&peers)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let list: Vec<&Value> = tools.as_object().unwrap().values().collect();
    child.stdin.take().unwrap().write_all(serde_json::json!({ "tools": list }).to_string().as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "the TypeScript SDK refused the catalog:\n{}", String::from_utf8_lossy(&out.stdout));
}

fn check(mode: &str, expect_version: &str) {
    let Some(Run { out, logs: [src, dst, tiny], pdf }) = run(mode) else { return };
    assert_eq!(out["protocol_version"], expect_version);
    assert_eq!(out["catalog_problems"], serde_json::json!([]), "{}", out["catalog_problems"]);
    ts_sdk_accepts(&out["tools"]);
    let tools = &out["tools"];
    let prop = |tool: &str, p: &str| tools[tool]["inputSchema"]["properties"][p].clone();
    // Each detected property tells the model, in one sentence; free text does not.
    for (tool, p) in [("dst_upload_file", "content_base64"), ("dst_ocr", "image"), ("dst_archive", "blob"), ("dst_transcribe", "audio_url")]
    {
        let d = prop(tool, p)["description"].as_str().unwrap_or_default().to_owned();
        assert!(d.contains("artifact:// URI"), "{tool}.{p}: {d:?}");
    }
    assert_eq!(prop("dst_note", "content"), serde_json::json!({"type": "string"}), "free text is left alone");
    // format byte would refuse a URI with format-asserting validators: widened.
    assert_eq!(prop("dst_archive", "blob")["anyOf"][1]["pattern"], "^artifact://");
    let items = &prop("dst_send", "attachments")["items"]["properties"]["content_base64"];
    assert!(items["description"].as_str().unwrap().contains("artifact://"), "{items}");

    let uri = out["uri"].as_str().unwrap();
    assert!(uri.starts_with("artifact://make_pdf_"), "{uri}");
    assert!(!out["make_pdf"].to_string().contains("JVBERi0"), "the PDF's base64 reached the client");
    assert_eq!(src.len(), 1, "{src:?}");
    let sha = hex(&sha2::Sha256::digest(&pdf));
    let got = |tool: &str| dst.iter().filter(|l| l["tool"] == tool).cloned().collect::<Vec<_>>();
    for tool in ["upload_file", "ocr", "archive", "send", "transcribe"] {
        let calls = got(tool);
        assert_eq!(calls.len(), 1, "{tool}: {dst:?}");
        assert_eq!((calls[0]["size"].as_u64(), calls[0]["sha256"].as_str()), (Some(pdf.len() as u64), Some(sha.as_str())), "{tool}");
        assert_ne!(out[tool]["isError"], true, "{tool}: {}", out[tool]);
        // What the call filled is reported for programs, never the bytes.
        let filled = &out[tool]["_meta"]["io.stowage/inputs"][0];
        assert_eq!(filled["uri"], uri, "{tool}: {}", out[tool]);
        assert_eq!(filled["size"], pdf.len());
    }
    assert_eq!(got("upload_file")[0]["mime_type"], "application/pdf", "the empty mime sibling is filled");
    let filename = got("send")[0]["filename"].as_str().unwrap().to_owned();
    assert!(filename.ends_with(".pdf"), "the empty filename sibling is filled: {filename}");
    assert_eq!(out["transcribe"]["_meta"]["io.stowage/inputs"][0]["form"], "url");
    // The free-text field got exactly what the model wrote.
    assert_eq!(got("note")[0]["content"], uri);
    // Refused before the upstream was called, with a reason the model can act on.
    let line = refused(&out["too_long"]);
    assert!(line.starts_with("bad_request: ") && line.contains("takes at most 64 (its maxLength)"), "{line}");
    let line = refused(&out["wrong_type"]);
    assert!(line.contains("is application/pdf") && line.contains("takes image/png only"), "{line}");
    let line = refused(&out["over_body_limit"]);
    assert!(line.contains("gateway.servers.tiny.max_request_bytes"), "{line}");
    let line = refused(&out["missing"]);
    assert!(line.starts_with("artifact_not_found: "), "{line}");
    assert!(got("stamp").is_empty() && got("avatar").is_empty() && tiny.is_empty(), "a refused call reached its upstream");
    assert!(dst.iter().all(|l| l["tool"] != "ocr" || l["sha256"] == sha.as_str()), "the missing artifact's call reached ocr");
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn a_pdf_reaches_every_kind_of_file_input_with_the_python_sdk_in_the_legacy_era() {
    check("legacy", "2025-11-25");
}

#[test]
fn a_pdf_reaches_every_kind_of_file_input_with_the_python_sdk_in_the_modern_era() {
    check("auto", "2026-07-28");
}

/// `check-config --tools` starts the upstreams and prints, per tool, what was detected and
/// how, so a user can see a guess and override it; a tool set to "off" says so.
#[test]
fn check_config_tools_prints_each_upstreams_file_inputs() {
    let Some(python) = stowage_testkit::require_peer("venv/bin/python") else { return };
    let dir = tempfile::tempdir().unwrap();
    let pdf_path = dir.path().join("report.pdf");
    std::fs::write(&pdf_path, b"%PDF-1.4").unwrap();
    let (conf, logs) = configure(dir.path(), &python, &pdf_path);
    let mut config = std::fs::read_to_string(&conf).unwrap();
    config.push_str("[gateway.chaining.inputs]\ntiny_upload_file = \"off\"\n");
    std::fs::write(&conf, config).unwrap();
    let out = Command::new("timeout")
        .args(["-k", "5", "120", env!("CARGO_BIN_EXE_stowage"), "--config", conf.to_str().unwrap()])
        .args(["--store", dir.path().join("store").to_str().unwrap(), "check-config", "--tools"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    for line in [
        "detection on",
        "dst_upload_file: content_base64: base64 (",
        "sets mime_type",
        "dst_ocr: image: base64 (",
        "dst_archive: blob: base64 (",
        "schema widened",
        "dst_send: attachments[].content_base64: base64 (",
        "sets filename",
        "dst_transcribe: audio_url: url (",
        "dst_stamp: pdf_base64: base64 (",
        "maxLength 64",
        "takes image/png",
        "tiny_upload_file: rule \"off\"",
    ] {
        assert!(stdout.contains(line), "{line:?} is missing from:\n{stdout}");
    }
    assert!(!stdout.contains("dst_note:"), "free text is not a file input:\n{stdout}");
    // Listing calls no tool.
    assert!(logs.iter().all(|l| read_log(l).is_empty()));
}
