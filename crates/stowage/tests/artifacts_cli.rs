//! `stowage artifacts …` end to end: the real binary on a temporary store directory, checked
//! the way a person would check it (exit status, stdout, stderr, the bytes that come back).

use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::Value;

struct Env {
    dir: tempfile::TempDir,
}

impl Env {
    fn new() -> Env {
        Env { dir: tempfile::tempdir().unwrap() }
    }

    fn store(&self) -> PathBuf {
        self.dir.path().join("store")
    }

    fn file(&self, name: &str, bytes: &[u8]) -> PathBuf {
        let p = self.dir.path().join(name);
        std::fs::write(&p, bytes).unwrap();
        p
    }

    /// Runs `stowage` with `--store` pointing at this env and the working directory in it (so a
    /// stray ./stowage.toml of the developer's is never read).
    fn run(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_stowage"))
            .current_dir(self.dir.path())
            .env_remove("STOWAGE_CONFIG")
            .env_remove("STOWAGE_STORE")
            .arg("--store")
            .arg(self.store())
            .args(args)
            .output()
            .unwrap()
    }

    fn ok(&self, args: &[&str]) -> Output {
        let out = self.run(args);
        assert!(out.status.success(), "stowage {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
        out
    }

    fn put(&self, args: &[&str]) -> Value {
        let mut full = vec!["artifacts", "put"];
        full.extend_from_slice(args);
        serde_json::from_slice(&self.ok(&full).stdout).unwrap()
    }

    /// Asserts a one-line error on stderr containing `needle` and a non-zero exit.
    fn fails(&self, args: &[&str], needle: &str) -> String {
        let out = self.run(args);
        assert!(!out.status.success(), "stowage {args:?} should fail");
        let err = String::from_utf8_lossy(&out.stderr).trim_end().to_string();
        assert_eq!(err.lines().count(), 1, "error should be one line: {err:?}");
        assert!(err.starts_with("error: "), "{err}");
        assert!(err.contains(needle), "{err:?} should mention {needle:?}");
        err
    }
}

fn pdf_bytes() -> Vec<u8> {
    let mut b = b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n1 0 obj<</Type/Catalog>>endobj\n".to_vec();
    b.extend((0..20_000u32).map(|i| (i * 7 % 251) as u8));
    b.extend_from_slice(b"\n%%EOF\n");
    b
}

#[test]
fn put_get_meta_round_trip_with_sniffed_mime() {
    let env = Env::new();
    let pdf = pdf_bytes();
    let file = env.file("report.pdf", &pdf);
    let r = env.put(&[file.to_str().unwrap(), "--session", "s1"]);
    assert_eq!(r["mime_type"], "application/pdf");
    assert_eq!(r["size_bytes"], pdf.len());
    assert_eq!(r["filename"], "report.pdf");
    assert_eq!(r["scope"]["session_id"], "s1");
    let id = r["id"].as_str().unwrap();
    assert_eq!(r["uri"], format!("artifact://{id}"));
    assert_eq!(r["sha256"].as_str().unwrap().len(), 64);

    // stdout by default, byte for byte.
    assert_eq!(env.ok(&["artifacts", "get", id]).stdout, pdf);
    // -o FILE, and the artifact:// form of the id.
    let out = env.dir.path().join("back.pdf");
    env.ok(&["artifacts", "get", &format!("artifact://{id}"), "-o", out.to_str().unwrap()]);
    assert_eq!(std::fs::read(&out).unwrap(), pdf);

    let meta: Value = serde_json::from_slice(&env.ok(&["artifacts", "meta", id]).stdout).unwrap();
    assert_eq!(meta, r);
}

#[test]
fn explicit_options_are_recorded() {
    let env = Env::new();
    let file = env.file("x.bin", b"just some text bytes");
    let r = env.put(&[
        file.to_str().unwrap(),
        "--mime",
        "application/x-custom",
        "--filename",
        "custom.dat",
        "--namespace",
        "tool",
        "--tenant",
        "t",
        "--user",
        "u",
        "--session",
        "s",
        "--trace",
        "r",
        "--ttl",
        "2h",
    ]);
    assert_eq!(r["mime_type"], "application/x-custom");
    assert_eq!(r["filename"], "custom.dat");
    assert!(r["id"].as_str().unwrap().starts_with("tool_"));
    assert_eq!(r["scope"], serde_json::json!({"tenant_id":"t","user_id":"u","session_id":"s","trace_id":"r"}));
    let created = time::OffsetDateTime::parse(r["created_at"].as_str().unwrap(), &time::format_description::well_known::Rfc3339).unwrap();
    let expires = time::OffsetDateTime::parse(r["expires_at"].as_str().unwrap(), &time::format_description::well_known::Rfc3339).unwrap();
    assert_eq!((expires - created).whole_seconds(), 7200);
}

#[test]
fn ls_table_and_json_and_session_filter() {
    let env = Env::new();
    let a = env.file("a.txt", b"alpha alpha alpha");
    let b = env.file("b.txt", b"bravo bravo bravo");
    let ra = env.put(&[a.to_str().unwrap(), "--session", "s1"]);
    let rb = env.put(&[b.to_str().unwrap(), "--session", "s2"]);

    let table = String::from_utf8(env.ok(&["artifacts", "ls"]).stdout).unwrap();
    let lines: Vec<&str> = table.lines().collect();
    assert!(lines[0].starts_with("ID") && lines[0].contains("SIZE") && lines[0].contains("SESSION"), "{table}");
    assert_eq!(lines.len(), 3, "{table}");
    assert!(table.contains(ra["id"].as_str().unwrap()) && table.contains("a.txt") && table.contains("s1"));

    let json = String::from_utf8(env.ok(&["artifacts", "ls", "--session", "s2", "--json"]).stdout).unwrap();
    let items: Vec<Value> = json.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(items, vec![rb]);

    let empty = String::from_utf8(env.ok(&["artifacts", "ls", "--session", "nobody"]).stdout).unwrap();
    assert!(empty.contains("(no artifacts)"), "{empty}");
}

#[test]
fn rm_and_gc() {
    let env = Env::new();
    let f = env.file("a.txt", b"to be removed");
    let r = env.put(&[f.to_str().unwrap()]);
    let id = r["id"].as_str().unwrap();
    env.ok(&["artifacts", "rm", id]);
    env.fails(&["artifacts", "get", id], "not found");
    env.fails(&["artifacts", "rm", id], "not found");
    let gc: Value = serde_json::from_slice(&env.ok(&["artifacts", "gc"]).stdout).unwrap();
    assert!(gc.get("expired_records").is_some(), "{gc}");
}

/// Regression: after a crash gc said `temp_files: 0` while the crashed put's temp file sat in
/// the store, because it counted only the files old enough to remove.
#[test]
fn gc_reports_the_temp_files_it_found_and_those_it_removed() {
    let env = Env::new();
    let f = env.file("a.txt", b"makes the store");
    env.put(&[f.to_str().unwrap()]);
    let tmp = env.store().join("tmp");
    std::fs::write(tmp.join("put-1-1-0.tmp"), vec![0u8; 40_000]).unwrap();
    let old = tmp.join("put-1-1-1.tmp");
    std::fs::write(&old, vec![0u8; 1000]).unwrap();
    let two_hours_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(7200);
    std::fs::File::options().write(true).open(&old).unwrap().set_modified(two_hours_ago).unwrap();

    let out = env.ok(&["artifacts", "gc"]);
    let gc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((&gc["temp_files"], &gc["temp_bytes"]), (&Value::from(2), &Value::from(41_000)), "{gc}");
    assert_eq!((&gc["temp_files_removed"], &gc["temp_bytes_removed"]), (&Value::from(1), &Value::from(1000)), "{gc}");
    let note = String::from_utf8_lossy(&out.stderr);
    assert!(note.contains("kept 1 recent temp file(s)") && note.contains("grace period"), "{note}");
    assert_eq!(note.trim_end().lines().count(), 1, "{note}");
    assert!(!old.exists() && tmp.join("put-1-1-0.tmp").exists());

    // Nothing kept: nothing said.
    std::fs::remove_file(tmp.join("put-1-1-0.tmp")).unwrap();
    let out = env.ok(&["artifacts", "gc"]);
    assert!(out.stderr.is_empty(), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn bad_input_gets_one_line_errors_and_writes_nothing() {
    let env = Env::new();
    env.fails(&["artifacts", "put", "does-not-exist.pdf"], "does-not-exist.pdf");
    env.fails(&["artifacts", "get", "art_0000000000000000"], "not found");
    env.fails(&["artifacts", "meta", "../../etc/passwd"], "not an artifact id");

    // Over the per-artifact limit: refused, and nothing becomes visible.
    let conf = env.file("small.toml", b"[retention]\nmax_artifact_bytes = 1000\n");
    let big = env.file("big.bin", &vec![7u8; 5000]);
    let out = env.run(&["--config", conf.to_str().unwrap(), "artifacts", "put", big.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("max_artifact_bytes"), "{err}");
    let ls = String::from_utf8(env.ok(&["artifacts", "ls", "--json"]).stdout).unwrap();
    assert_eq!(ls, "", "nothing may be listed after a refused put");

    // get -o into a missing directory fails without creating anything.
    let f = env.file("ok.txt", b"fine");
    let id = env.put(&[f.to_str().unwrap()])["id"].as_str().unwrap().to_string();
    env.fails(&["artifacts", "get", &id, "-o", "no/such/dir/out.txt"], "no/such/dir");
}

#[test]
fn config_errors_name_file_and_key() {
    let env = Env::new();
    let conf = env.file("bad.toml", b"[retention]\nttl_secs = 5\n");
    let err = env.fails(&["--config", conf.to_str().unwrap(), "artifacts", "ls"], "ttl_secs");
    assert!(err.contains("bad.toml:2"), "{err}");
    env.fails(&["--config", "missing.toml", "artifacts", "ls"], "missing.toml");
}

#[test]
fn unreadable_store_is_a_clear_error() {
    let env = Env::new();
    std::fs::create_dir_all(env.store()).unwrap();
    std::fs::write(env.store().join("index.sqlite"), b"this is not a database, it is a text file of some length ........").unwrap();
    env.fails(&["artifacts", "ls"], "cannot open store");
    // A store path that is a regular file.
    let file = env.file("plainfile", b"x");
    let out = Command::new(env!("CARGO_BIN_EXE_stowage"))
        .current_dir(env.dir.path())
        .args(["--store", file.to_str().unwrap(), "artifacts", "ls"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).starts_with("error: cannot open store"));
}

#[test]
fn every_subcommand_has_help() {
    let env = Env::new();
    for args in [
        vec!["--help"],
        vec!["artifacts", "--help"],
        vec!["artifacts", "put", "--help"],
        vec!["artifacts", "get", "--help"],
        vec!["artifacts", "meta", "--help"],
        vec!["artifacts", "ls", "--help"],
        vec!["artifacts", "rm", "--help"],
        vec!["artifacts", "gc", "--help"],
    ] {
        let out = env.ok(&args);
        assert!(String::from_utf8_lossy(&out.stdout).contains("Usage:"), "{args:?}");
    }
}
