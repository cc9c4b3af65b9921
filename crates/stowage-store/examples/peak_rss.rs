//! Streams 1 GiB through an FsStore (put_stream, then a streaming read) and prints how much
//! the process's peak resident memory grew: the bytes must flow through, never be held.
//!
//! `cargo run --release -p stowage-store --example peak_rss [-- SIZE_MIB [DIR]]`
//! (Linux only: reads VmHWM/VmRSS from /proc/self/status.)

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use stowage_store::{Access, ArtifactScope, ArtifactStore, FsStore, PutOptions, RetentionConfig};
use tokio::io::{AsyncRead, AsyncReadExt, ReadBuf};

/// Generates `remaining` bytes of a repeating pattern on the fly.
struct Generated {
    remaining: u64,
    offset: u64,
}

impl AsyncRead for Generated {
    fn poll_read(mut self: Pin<&mut Self>, _: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let n = (buf.remaining() as u64).min(self.remaining) as usize;
        let start = self.offset;
        let out = buf.initialize_unfilled_to(n);
        for (i, b) in out.iter_mut().enumerate() {
            *b = ((start + i as u64) % 251) as u8;
        }
        buf.advance(n);
        self.remaining -= n as u64;
        self.offset += n as u64;
        Poll::Ready(Ok(()))
    }
}

/// A field of /proc/self/status, in KiB.
fn status_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("linux /proc");
    status.lines().find_map(|l| l.strip_prefix(field)?.trim().strip_suffix("kB")?.trim().parse().ok()).unwrap_or(0)
}

/// Resets VmHWM to the current RSS, so each phase's peak is its own.
fn reset_peak() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow_free::Result {
    let mut args = std::env::args().skip(1);
    let size_mib: u64 = args.next().map(|s| s.parse().expect("SIZE_MIB")).unwrap_or(1024);
    let tmp = tempfile::tempdir_in(args.next().unwrap_or_else(|| std::env::temp_dir().display().to_string()))?;
    let size = size_mib << 20;
    let retention =
        RetentionConfig { max_artifact_bytes: size, max_session_bytes: size, max_trace_bytes: size, ..RetentionConfig::default() };
    let store = FsStore::open(tmp.path(), retention)?;
    let scope = ArtifactScope::session("peak-rss");

    reset_peak();
    let base = status_kib("VmRSS:");
    let start = Instant::now();
    let r = store.put_stream(Box::pin(Generated { remaining: size, offset: 0 }), PutOptions::scoped(scope.clone())).await?;
    let put_secs = start.elapsed().as_secs_f64();
    let put_peak = status_kib("VmHWM:");
    assert_eq!(r.size_bytes, size);

    reset_peak();
    let base_get = status_kib("VmRSS:");
    let start = Instant::now();
    let mut reader = store.open(&Access::owner_of(&scope), &r.id, None).await?;
    let mut buf = vec![0u8; 1 << 20];
    let mut total = 0u64;
    loop {
        let n = reader.body.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        total += n as u64;
    }
    let get_secs = start.elapsed().as_secs_f64();
    let get_peak = status_kib("VmHWM:");
    assert_eq!(total, size);

    println!("size: {size_mib} MiB");
    println!(
        "put_stream: {:.2} s ({:.0} MiB/s), peak RSS growth {:.1} MiB (baseline {:.1} MiB)",
        put_secs,
        size_mib as f64 / put_secs,
        mib(put_peak.saturating_sub(base)),
        mib(base)
    );
    println!(
        "streaming get: {:.2} s ({:.0} MiB/s), peak RSS growth {:.1} MiB (baseline {:.1} MiB)",
        get_secs,
        size_mib as f64 / get_secs,
        mib(get_peak.saturating_sub(base_get)),
        mib(base_get)
    );
    Ok(())
}

/// The example's error type: anything printable, without pulling in anyhow.
mod anyhow_free {
    pub(crate) type Result = std::result::Result<(), Box<dyn std::error::Error>>;
}
