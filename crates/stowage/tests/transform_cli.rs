//! `stowage transform` end to end: the real binary on a temporary store, fed the incident's
//! Tableau result and friends, checked by exit status, stdout, the report and the bytes that
//! come back out of the store.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use serde_json::{Value, json};

struct Env {
    dir: tempfile::TempDir,
}

impl Env {
    fn new() -> Env {
        Env { dir: tempfile::tempdir().unwrap() }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn file(&self, name: &str, bytes: &[u8]) -> PathBuf {
        let p = self.path(name);
        std::fs::write(&p, bytes).unwrap();
        p
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_stowage"));
        c.current_dir(self.dir.path())
            .env_remove("STOWAGE_CONFIG")
            .env_remove("STOWAGE_STORE")
            .arg("--store")
            .arg(self.path("store"))
            .args(args);
        c
    }

    fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap()
    }

    fn run_stdin(&self, args: &[&str], input: &[u8]) -> Output {
        let mut child = self.command(args).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        child.stdin.take().unwrap().write_all(input).unwrap();
        child.wait_with_output().unwrap()
    }

    fn report(&self) -> Value {
        serde_json::from_slice(&std::fs::read(self.path("report.json")).unwrap()).unwrap()
    }
}

fn ok(out: &Output) -> Value {
    assert!(out.status.success(), "stderr: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Standard base64 (the stowage crate has no base64 dependency; this is small enough).
fn b64(data: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut s = String::with_capacity(data.len().div_ceil(3) * 4);
    for c in data.chunks(3) {
        let n = (c[0] as u32) << 16 | (*c.get(1).unwrap_or(&0) as u32) << 8 | *c.get(2).unwrap_or(&0) as u32;
        for i in 0..4 {
            if i <= c.len() {
                s.push(T[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                s.push('=');
            }
        }
    }
    s
}

fn fake_pdf(n: usize) -> Vec<u8> {
    let mut v = b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n".to_vec();
    let mut x: u64 = 7;
    while v.len() < n - 6 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.push((x >> 24) as u8);
    }
    v.extend_from_slice(b"%%EOF\n");
    v
}

fn tableau(pdf: &[u8]) -> Vec<u8> {
    let inner = json!({"content": b64(pdf), "name": "Sales Dashboard", "format": "pdf"});
    serde_json::to_vec(&json!({"content": [{"type": "text", "text": inner.to_string()}], "isError": false})).unwrap()
}

#[test]
fn tableau_pdf_is_stored_and_the_result_is_small() {
    let env = Env::new();
    let pdf = fake_pdf(375_000);
    let input = env.file("result.json", &tableau(&pdf));
    let out = env.run(&["transform", "--tool", "tableau_download_workbook", "--report", "report.json", input.to_str().unwrap()]);
    let result = ok(&out);
    assert!(out.stdout.len() <= 601, "{} bytes: {}", out.stdout.len(), String::from_utf8_lossy(&out.stdout));
    assert_eq!(result["content"][1]["type"], "resource_link");

    let report = env.report();
    let a = &report["artifacts"][0];
    assert_eq!(a["pointer"], "/content/0/text#/content");
    assert_eq!(a["mime_type"], "application/pdf");
    assert_eq!(a["size_bytes"], 375_000);
    assert_eq!(a["layer"], "field_rule");
    assert_eq!(a["ref"]["id"], a["id"]);
    assert!(report["bytes_in"].as_u64().unwrap() > 500_000);
    assert!(report["tokens_out"].as_u64().unwrap() > 0);
    assert_eq!(report["clamped"], false);

    // The bytes come back out of the store unchanged.
    let id = a["id"].as_str().unwrap();
    let got = env.run(&["artifacts", "get", id, "-o", "back.pdf"]);
    assert!(got.status.success(), "{}", String::from_utf8_lossy(&got.stderr));
    assert_eq!(std::fs::read(env.path("back.pdf")).unwrap(), pdf);
}

#[test]
fn stdin_and_pass_through() {
    let env = Env::new();
    let light = json!({"workbooks": [{"id": "123", "name": "Sales", "project": "Analytics"}]});
    for args in [&["transform"][..], &["transform", "-"][..]] {
        let out = env.run_stdin(args, light.to_string().as_bytes());
        assert_eq!(ok(&out), light);
    }
    let out = env.run_stdin(&["transform", "--pretty"], light.to_string().as_bytes());
    assert!(String::from_utf8_lossy(&out.stdout).contains("\n  \"workbooks\""));
}

#[test]
fn bad_input_and_missing_file_fail_with_one_line() {
    let env = Env::new();
    let out = env.run_stdin(&["transform"], b"{not json");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.starts_with("error: bad_request: input is not valid json"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1);
    let out = env.run(&["transform", "nope.json"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot read nope.json"));
}

/// A binary the store refuses fails the command; base64 never reaches stdout.
#[test]
fn store_refusal_is_artifact_storage_failed() {
    let env = Env::new();
    let config = env.file("stowage.toml", b"[retention]\nmax_artifact_bytes = 1000\n");
    let input = env.file("result.json", &tableau(&fake_pdf(50_000)));
    let out = env.run(&["--config", config.to_str().unwrap(), "transform", input.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty(), "{}", String::from_utf8_lossy(&out.stdout));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with("error: artifact_storage_failed: cannot store application/pdf binary found at /content/0/text#/content"),
        "{err}"
    );
}

#[test]
fn config_rules_hook_and_output_schema() {
    let env = Env::new();
    let config = env.file(
        "stowage.toml",
        br#"
[transform.hook]
command = ["sh", "-c", "sed 's/SECRET/[redacted]/'"]

[[transform.tool_fields.rules]]
tool = "get_report"
path = "pages.*.data"
mime_type = "application/pdf"
summary = "Page {n} of '{title}' ({size_human}) at {uri}"
"#,
    );
    let pdf = fake_pdf(5_000);
    let v = json!({"token": "SECRET", "pages": [{"n": 1, "title": "Q4", "data": b64(&pdf)}], "chart": {"series": [1, 2]}});
    let input = env.file("in.json", v.to_string().as_bytes());
    let schema = env.file(
        "schema.json",
        json!({"type": "object", "properties": {"chart": {"type": "object", "artifact": true}}}).to_string().as_bytes(),
    );
    let out = env.run(&[
        "--config",
        config.to_str().unwrap(),
        "transform",
        "--tool",
        "srv.get_report",
        "--output-schema",
        schema.to_str().unwrap(),
        "--session",
        "s1",
        "--report",
        "report.json",
        input.to_str().unwrap(),
    ]);
    let result = ok(&out);
    assert_eq!(result["token"], "[redacted]");
    assert!(result["pages"][0]["data"].as_str().unwrap().starts_with("Page 1 of 'Q4' (4.9 KB) at artifact://srv.get_report_"), "{result}");
    assert!(result["chart"].as_str().unwrap().starts_with("<artifact:dict size="), "{result}");
    let report = env.report();
    let layers: Vec<_> = report["artifacts"].as_array().unwrap().iter().map(|a| a["layer"].as_str().unwrap().to_owned()).collect();
    assert_eq!(layers, ["field_rule", "schema_field"]);
    assert_eq!(report["artifacts"][0]["ref"]["scope"]["session_id"], "s1");
}

/// Regression: a result with one string over 64 KiB and another that unescapes to the fast
/// JSON parser's placeholder (`"\u0000\u0073towage-lifted:0"`) used to panic the parser. The
/// command answers: exit 0, valid JSON out, the crafted string passed through as text; the
/// same inside a text block's JSON.
#[test]
fn escaped_placeholder_beside_a_long_string_answers() {
    let env = Env::new();
    let long = "x".repeat(70_000);
    let crafted = r#""\u0000\u0073towage-lifted:0""#;
    let top = format!(r#"{{"content": [{{"type": "text", "text": "{long}"}}, {{"type": "text", "text": {crafted}}}]}}"#);
    let inner = format!(r#"{{"a": "{long}", "b": {crafted}}}"#);
    let embedded = serde_json::to_string(&json!({"content": [{"type": "text", "text": inner}]})).unwrap();
    for (name, text) in [("top.json", top), ("embedded.json", embedded)] {
        let input = env.file(name, text.as_bytes());
        let out = env.run(&["transform", "--report", "report.json", input.to_str().unwrap()]);
        let result = ok(&out);
        assert!(result.to_string().contains(r"\u0000stowage-lifted:0"), "{name}: {result}");
        assert_eq!(env.report()["warnings"], json!([]), "{name}");
    }
}

/// A file big enough to be read by two threads comes through whole: the PDF read back from
/// the store is the one that went in.
#[test]
fn big_input_file_is_read_whole() {
    let env = Env::new();
    let pdf = fake_pdf(7_000_000); // 9.3 MB of base64 in the file
    let input = env.file("big.json", &tableau(&pdf));
    assert!(std::fs::metadata(&input).unwrap().len() > 8 << 20);
    let out = env.run(&["transform", "--tool", "download_workbook", "--report", "report.json", input.to_str().unwrap()]);
    let result = ok(&out);
    assert_eq!(result["content"][1]["type"], "resource_link");
    let id = env.report()["artifacts"][0]["id"].as_str().unwrap().to_owned();
    let got = env.run(&["artifacts", "get", &id, "-o", "back.pdf"]);
    assert!(got.status.success(), "{}", String::from_utf8_lossy(&got.stderr));
    assert!(std::fs::read(env.path("back.pdf")).unwrap() == pdf);
}
