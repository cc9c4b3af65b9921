//! Test support for Stowage, shared by the gateway's and the binary's tests and benches:
//!
//! - [`server`]: the loop the fixture MCP servers run on, which can misbehave on purpose;
//! - the fixture binaries `stowage-fixture` (tools that return heavy content, crash, hang,
//!   emit garbage, ask for sampling…) and `stowage-conformance-fixture` (what the official
//!   conformance suite expects), found with [`fixture_bin`] and [`conformance_fixture_bin`];
//! - [`client::RpcClient`]: a JSON-RPC client over any byte pipe;
//! - [`sink::MemSink`]: an in-memory artifact sink that records scopes and can fail;
//! - [`model_stub::ModelStub`]: a scripted OpenAI- and Anthropic-compatible model server.
//!
//! Nothing here depends on the gateway, so the fixtures cannot accidentally share its bugs.

pub mod client;
pub mod investigation;
pub mod model_stub;
pub mod server;
pub mod sink;

pub use client::{Received, RpcClient, ServerRequestHandler};
pub use sink::MemSink;
/// Sample files (PDF, PNG, WAV) made in code, shared with the demo server.
pub use stowage_demo::samples;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

/// Writes each line it is sent to `writer`, newline-terminated and flushed, until the sender
/// is gone or the pipe breaks: one writer per pipe, so lines never interleave.
pub(crate) fn spawn_line_writer<W: AsyncWrite + Unpin + Send + 'static>(
    mut writer: W,
) -> (mpsc::UnboundedSender<Vec<u8>>, tokio::task::JoinHandle<()>) {
    let (tx, mut rx) = mpsc::unbounded_channel::<Vec<u8>>();
    let task = tokio::spawn(async move {
        while let Some(mut line) = rx.recv().await {
            line.push(b'\n');
            if writer.write_all(&line).await.is_err() || writer.flush().await.is_err() {
                break;
            }
        }
    });
    (tx, task)
}

/// Where the third-party peers live (`scripts/gateway-peers.sh` installs them): under
/// `STOWAGE_PEERS_DIR`, default `target/peers`. Canonicalised, as node resolves `..`
/// lexically.
pub fn peers_dir() -> PathBuf {
    let dir = std::env::var_os("STOWAGE_PEERS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/peers"));
    dir.canonicalize().unwrap_or(dir)
}

/// `Some(path)` of peer `rel` (e.g. `venv/bin/python`) under [`peers_dir`]; otherwise the
/// test skips loudly, or fails under `CI`, where the test command installs every peer. The
/// file itself is not canonicalised: a venv's python is a symlink that must keep its venv path.
pub fn require_peer(rel: &str) -> Option<PathBuf> {
    let p = peers_dir().join(rel);
    if p.exists() {
        return Some(p);
    }
    let msg = format!("peer {} is not installed; run scripts/gateway-peers.sh", p.display());
    assert!(std::env::var_os("CI").is_none(), "{msg}");
    eprintln!("\n!!!!!!!! SKIPPED: {msg} !!!!!!!!\n");
    None
}

/// The path of the `stowage-fixture` binary, built first if it is missing or older than this
/// crate's sources (`cargo test -p stowage-mcp` alone does not build another package's bins).
pub fn fixture_bin() -> PathBuf {
    bin("stowage-fixture")
}

/// The path of the `stowage-chain-fixture` binary (blob chaining's tools; see [`fixture_bin`]).
pub fn chain_fixture_bin() -> PathBuf {
    bin("stowage-chain-fixture")
}

/// The path of the `stowage-conformance-fixture` binary (see [`fixture_bin`]).
pub fn conformance_fixture_bin() -> PathBuf {
    bin("stowage-conformance-fixture")
}

/// The path of the `stowage-session-fixture` binary (state per session; see [`fixture_bin`]).
pub fn session_fixture_bin() -> PathBuf {
    bin("stowage-session-fixture")
}

/// The path of the `stowage-hosts-fixture` binary (see [`fixture_bin`]).
pub fn hosts_fixture_bin() -> PathBuf {
    bin("stowage-hosts-fixture")
}

/// `target/<profile>/<name>`, next to the running test's own `deps/` directory.
fn bin(name: &str) -> PathBuf {
    static BUILT: OnceLock<()> = OnceLock::new();
    let exe = std::env::current_exe().expect("the test binary's path");
    // target/debug/deps/test-hash → target/debug
    let dir = exe.parent().and_then(Path::parent).expect("a target directory").to_path_buf();
    let path = dir.join(name);
    if !fresh(&path) {
        BUILT.get_or_init(|| {
            let status = std::process::Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
                .args(["build", "-p", "stowage-testkit", "--bins"])
                .args(if dir.ends_with("release") { &["--release"][..] } else { &[][..] })
                .current_dir(env!("CARGO_MANIFEST_DIR"))
                .status()
                .expect("run cargo to build the fixtures");
            assert!(status.success(), "building the fixture binaries failed");
        });
    }
    assert!(path.exists(), "fixture binary {} is missing", path.display());
    path
}

/// Whether `bin` exists and is newer than every source file of this crate.
fn fresh(bin: &Path) -> bool {
    let Ok(built) = bin.metadata().and_then(|m| m.modified()) else { return false };
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut stack = vec![src];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if e.metadata().and_then(|m| m.modified()).is_ok_and(|m| m > built) {
                return false;
            }
        }
    }
    true
}
