//! `stowage serve --stdio` as users run it (the real binary, the fs store), driven by a bare
//! JSON-RPC client: the Tableau-style result reaches the client in at most 1 KB, the artifact
//! fetched with `stowage artifacts get` is byte-identical to the PDF, and the upstream child
//! is gone once the gateway exits.
//!
//! Needs `target/debug/stowage` (built by `cargo build --workspace`, which the test script
//! does first); skipped loudly without it, failed under `CI`.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

fn stowage_bin() -> Option<PathBuf> {
    let p = std::env::var_os("STOWAGE_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/debug/stowage"));
    if p.exists() {
        return Some(p);
    }
    let msg = format!("{} is not built; run `cargo build -p stowage` first", p.display());
    if std::env::var_os("CI").is_some() {
        panic!("{msg}");
    }
    eprintln!("\n!!!!!!!! SKIPPED: {msg} !!!!!!!!\n");
    None
}

#[test]
fn tableau_pdf_under_1kb_and_artifacts_get_is_byte_identical() {
    let Some(stowage) = stowage_bin() else { return };
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let log = dir.path().join("fixture.log");
    let mut gw = Command::new(&stowage)
        .args(["serve", "--stdio", "--no-links", "--store"])
        .arg(&store)
        // Upstreams get a minimal environment: the fixture's log path is handed to it by `env`,
        // which then becomes the fixture (same pid).
        .args(["--", "env"])
        .arg(format!("STOWAGE_FIXTURE_LOG={}", log.display()))
        .arg(stowage_testkit::fixture_bin())
        .env("STOWAGE_LOG", "warn")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = gw.stdin.take().unwrap();
    let mut stdout = BufReader::new(gw.stdout.take().unwrap());
    let mut ask = |id: u64, method: &str, params: Value| -> String {
        let msg = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        writeln!(stdin, "{msg}").unwrap();
        let mut line = String::new();
        loop {
            line.clear();
            assert!(stdout.read_line(&mut line).unwrap() > 0, "gateway closed");
            if line.contains(&format!("\"id\":{id}")) {
                return line;
            }
        }
    };
    ask(1, "initialize", json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}));
    let line = ask(2, "tools/call", json!({"name": "get_view_pdf", "arguments": {}}));
    assert!(line.trim_end().len() <= 1024, "client received {} bytes: {line}", line.len());
    let v: Value = serde_json::from_str(&line).unwrap();
    let asset = &v["result"]["_meta"]["io.stowage/assets"][0];
    let id = asset["id"].as_str().expect("an asset id").to_owned();
    assert_eq!(asset["uri"], asset["artifactUri"], "with --no-links the link is the artifact:// URI");
    drop(stdin);

    // The gateway exits when its client leaves, and takes its upstream with it.
    let deadline = Instant::now() + Duration::from_secs(10);
    while gw.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "gateway did not exit after stdin closed");
        std::thread::sleep(Duration::from_millis(20));
    }
    let pid: i32 = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("started pid "))
        .and_then(|p| p.trim().parse().ok())
        .expect("the fixture logged its pid");
    let gone = (0..100).any(|_| {
        let alive = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok()
            && !std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default().contains(") Z ");
        if alive {
            std::thread::sleep(Duration::from_millis(50));
        }
        !alive
    });
    assert!(gone, "upstream child {pid} outlived the gateway");

    let out = dir.path().join("out.pdf");
    let status = Command::new(&stowage).args(["--store"]).arg(&store).args(["artifacts", "get", &id, "-o"]).arg(&out).status().unwrap();
    assert!(status.success());
    let want = stowage_testkit::samples::pdf(375_000, "Sales Dashboard");
    assert!(std::fs::read(&out).unwrap() == want, "artifacts get returned different bytes");
}

/// Over stdio, links work too: a loopback listener serves the signed download links that the
/// results carry, for as long as the gateway runs; the bytes are the upstream's.
#[test]
fn links_work_over_stdio_on_a_loopback_listener() {
    let Some(stowage) = stowage_bin() else { return };
    let dir = tempfile::tempdir().unwrap();
    // Another gateway may hold the default port: taking a free one instead is the point.
    let _taken = std::net::TcpListener::bind("127.0.0.1:8787");
    let mut gw = Command::new(&stowage)
        .args(["serve", "--stdio", "--store"])
        .arg(dir.path().join("store"))
        .arg("--")
        .arg(stowage_testkit::fixture_bin())
        .env("STOWAGE_LOG", "warn")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = gw.stdin.take().unwrap();
    let mut stdout = BufReader::new(gw.stdout.take().unwrap());
    let mut stderr = BufReader::new(gw.stderr.take().unwrap());
    let mut banner = String::new();
    while !banner.contains("download links: ") {
        assert!(stderr.read_line(&mut banner).unwrap() > 0, "no banner: {banner}");
    }
    assert!(banner.contains("is taken") && banner.contains("download links: http://127.0.0.1:"), "{banner}");
    for (id, method, params) in [
        (1, "initialize", json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}})),
        (2, "tools/call", json!({"name": "get_view_pdf", "arguments": {}})),
    ] {
        writeln!(stdin, "{}", json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})).unwrap();
    }
    let mut line = String::new();
    while !line.contains("\"id\":2") {
        line.clear();
        assert!(stdout.read_line(&mut line).unwrap() > 0, "gateway closed");
    }
    let v: Value = serde_json::from_str(&line).unwrap();
    let link = v["result"]["content"].as_array().unwrap().iter().find(|b| b["type"] == "resource_link").expect("a resource_link").clone();
    let url = link["uri"].as_str().unwrap().to_owned();
    assert!(url.starts_with("http://127.0.0.1:") && url.contains("/artifacts/get_view_pdf_") && url.contains("?token=c."), "{url}");
    assert!(!url.contains(":8787/"), "the taken default port was not used: {url}");
    let want = stowage_testkit::samples::pdf(375_000, "Sales Dashboard");
    let got = reqwest::blocking_get(&url);
    assert_eq!(got.0, 200);
    assert!(got.1 == want, "the link served different bytes");
    // A tampered token is refused.
    let tampered = format!("{}x", url);
    assert_eq!(reqwest::blocking_get(&tampered).0, 403);
    drop(stdin);
    let _ = gw.wait();
}

mod reqwest {
    /// A GET on a fresh runtime (the test itself is synchronous): status and body.
    pub(crate) fn blocking_get(url: &str) -> (u16, Vec<u8>) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let r = ::reqwest::get(url).await.unwrap();
            (r.status().as_u16(), r.bytes().await.unwrap().to_vec())
        })
    }
}
