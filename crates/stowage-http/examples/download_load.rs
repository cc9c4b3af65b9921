//! Load generator for the download route (BENCHMARKS.md, "Signed links and downloads"); run in release:
//!
//! ```sh
//! cargo run --release -p stowage-http --example download_load
//! ```
//!
//! It starts the artifact routes on a free loopback port *in a child process* (this same
//! binary with `serve DIR`), so the server's memory can be read from `/proc/<pid>/status`
//! without the client's buffers in it. Then it measures, with a bare HTTP/1.1 client that
//! hashes what it reads:
//! 1. one 1 GiB download: throughput and the server's RSS growth;
//! 2. 64 concurrent downloads of 10 MiB artifacts, each checked against its sha256.
//!
//! Artifacts are created with `put_stream` from generated data, so nothing holds a gigabyte.

use std::sync::Arc;
use std::time::Instant;

use sha2::{Digest, Sha256};
use stowage_core::{ArtifactScope, PutOptions};
use stowage_http::{HttpState, routes};
use stowage_links::{KeyRing, LinkSigner, LinksConfig};
use stowage_store::{ArtifactStore, FsStore, RetentionConfig};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

const GIB: u64 = 1 << 30;
const SMALL: u64 = 10 << 20;
const CONCURRENT: usize = 64;

fn retention() -> RetentionConfig {
    RetentionConfig { max_artifact_bytes: 2 * GIB, max_session_bytes: 4 * GIB, max_trace_bytes: 4 * GIB, ..Default::default() }
}

fn ring() -> KeyRing {
    KeyRing::new([("bench", vec![1u8; 32])]).unwrap()
}

/// Deterministic, incompressible-enough bytes, produced in chunks.
struct Gen {
    left: u64,
    state: u64,
}

impl tokio::io::AsyncRead for Gen {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let n = (buf.remaining() as u64).min(self.left) as usize;
        let mut chunk = vec![0u8; n];
        for b in chunk.chunks_mut(8) {
            self.state = self.state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let bytes = self.state.to_le_bytes();
            b.copy_from_slice(&bytes[..b.len()]);
        }
        buf.put_slice(&chunk);
        self.left -= n as u64;
        std::task::Poll::Ready(Ok(()))
    }
}

fn rss_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status.lines().find(|l| l.starts_with(field)).and_then(|l| l.split_whitespace().nth(1)).and_then(|v| v.parse().ok()).unwrap_or(0)
}

async fn serve(dir: &str) {
    let store: Arc<dyn ArtifactStore> = Arc::new(FsStore::open(dir, retention()).unwrap());
    let signer = Arc::new(LinkSigner::new(ring(), &LinksConfig::default()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    println!("{}", listener.local_addr().unwrap().port());
    axum::serve(listener, routes(HttpState::new(store, signer))).await.unwrap();
}

/// GETs `path` over a fresh connection; returns (bytes, sha256 hex when `hash`).
async fn download(port: u16, path: &str, hash: bool) -> (u64, String) {
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    stream.write_all(format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").as_bytes()).await.unwrap();
    let mut reader = BufReader::with_capacity(1 << 20, stream);
    let mut len = None;
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).await.unwrap();
        if line == "\r\n" {
            break;
        }
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            len = Some(v.trim().parse::<u64>().unwrap());
        }
        assert!(!line.starts_with("HTTP/1.1 4") && !line.starts_with("HTTP/1.1 5"), "{line}");
    }
    let len = len.expect("content-length");
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut got = 0u64;
    while got < len {
        let n = reader.read(&mut buf).await.unwrap();
        assert!(n > 0, "short body");
        if hash {
            hasher.update(&buf[..n]);
        }
        got += n as u64;
    }
    (got, hex::encode(hasher.finalize()))
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("serve") {
        return serve(&args[2]).await;
    }
    let dir = tempfile::tempdir().unwrap();
    let store = FsStore::open(dir.path(), retention()).unwrap();
    let scope = ArtifactScope::session("bench");
    let big = store.put_stream(Box::pin(Gen { left: GIB, state: 1 }), PutOptions::scoped(scope.clone())).await.unwrap();
    let mut small = Vec::new();
    for i in 0..CONCURRENT {
        small
            .push(store.put_stream(Box::pin(Gen { left: SMALL, state: 100 + i as u64 }), PutOptions::scoped(scope.clone())).await.unwrap());
    }
    drop(store);

    let mut child = tokio::process::Command::new(&args[0])
        .args(["serve", dir.path().to_str().unwrap()])
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut port = String::new();
    out.read_line(&mut port).await.unwrap();
    let port: u16 = port.trim().parse().unwrap();
    let pid = child.id().unwrap();
    let signer = LinkSigner::new(ring(), &LinksConfig::default());
    let now = stowage_links::unix_now();
    let path = |r: &stowage_core::ArtifactRef| {
        let url = signer.artifact_link(&r.id, &r.scope.owner(), now, None).url;
        url.strip_prefix("http://127.0.0.1:8787").unwrap().to_string()
    };

    // Warm the server up (first connection, allocator arenas) before taking the baseline.
    download(port, &path(&small[0]), false).await;
    let rss_before = rss_kib(pid, "VmRSS:");
    let t = Instant::now();
    // Throughput of the server, so the client only counts bytes here; correctness of the
    // bytes is checked by the sha256 of every concurrent download below, and of this one
    // in a second, unmeasured pass.
    let (n, _) = download(port, &path(&big), false).await;
    let secs = t.elapsed().as_secs_f64();
    assert_eq!(n, GIB);
    let rss_peak = rss_kib(pid, "VmHWM:");
    println!("1 GiB download: {:.3} s, {:.2} GB/s ({:.0} MiB/s)", secs, GIB as f64 / secs / 1e9, GIB as f64 / secs / (1 << 20) as f64);
    println!(
        "server RSS before {} MiB, peak {} MiB, growth {} MiB",
        rss_before / 1024,
        rss_peak / 1024,
        rss_peak.saturating_sub(rss_before) / 1024
    );
    let (_, sha) = download(port, &path(&big), true).await;
    assert_eq!(sha, big.sha256, "the 1 GiB download was corrupted");
    println!("1 GiB download sha256 verified");

    let t = Instant::now();
    let mut tasks = Vec::new();
    for r in &small {
        let (p, want) = (path(r), r.sha256.clone());
        tasks.push(tokio::spawn(async move {
            let (n, sha) = download(port, &p, true).await;
            assert_eq!((n, sha), (SMALL, want), "a concurrent download was corrupted");
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let secs = t.elapsed().as_secs_f64();
    println!(
        "{CONCURRENT} concurrent 10 MiB downloads: all {CONCURRENT} sha256 verified, {:.3} s total, {:.2} GB/s aggregate; server peak RSS {} MiB",
        secs,
        (SMALL * CONCURRENT as u64) as f64 / secs / 1e9,
        rss_kib(pid, "VmHWM:") / 1024
    );
    child.kill().await.ok();
}
