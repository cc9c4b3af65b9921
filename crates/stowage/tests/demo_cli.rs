//! README's main command on the embedded default: `stowage demo` offloads the 500 KB base64
//! PDF, shows a small observation, and the artifact it names is fetchable byte for byte from
//! the default store, in the platform's data directory (here: `$XDG_DATA_HOME/stowage`).

use std::process::Command;

#[test]
fn demo_offloads_and_round_trips() {
    let dir = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_stowage"))
            .current_dir(dir.path())
            .env_remove("STOWAGE_CONFIG")
            .env_remove("STOWAGE_STORE")
            .env("HOME", data.path())
            .env("XDG_DATA_HOME", data.path().join("xdg"))
            .args(args)
            .output()
            .unwrap()
    };
    let out = run(&["demo"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("byte-identical to the original PDF"), "{stdout}");
    let seen: usize = stdout.split("What the model sees instead (").nth(1).unwrap().split(' ').next().unwrap().parse().unwrap();
    assert!(seen <= 600, "the model sees {seen} bytes");
    assert!(data.path().join("xdg/stowage/index.sqlite").is_file(), "the default store is $XDG_DATA_HOME/stowage");
    assert!(!dir.path().join(".stowage").exists(), "nothing is stored in the working directory");
    let id = stdout.split("stowage artifacts get ").nth(1).unwrap().split_whitespace().next().unwrap().to_owned();
    let pdf = run(&["artifacts", "get", &id]);
    assert!(pdf.status.success());
    assert!(pdf.stdout.starts_with(b"%PDF-") && pdf.stdout.len() > 300_000);
}
