//! put_bytes of 100 MiB against its floors, interleaved round by round: a raw write+fsync of
//! the same bytes and a raw sha256. This disk's write speed drifts by 5x over minutes, so
//! criterion's one-group-after-another figures cannot give a meaningful ratio; alternating
//! puts and raw writes can.
//!
//! `cargo run --release -p stowage-store --example put_vs_floor [-- ROUNDS [DIR]]`

use std::io::Write;
use std::time::{Duration, Instant};

use bytes::Bytes;
use sha2::Digest;
use stowage_store::{ArtifactStore, FsStore, PutOptions, RetentionConfig};

const SIZE: usize = 100 << 20;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 }
}

fn mb_per_s(d: Duration) -> f64 {
    SIZE as f64 / 1e6 / d.as_secs_f64()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let rounds: usize = args.next().map(|s| s.parse()).transpose()?.unwrap_or(10);
    let tmp = tempfile::tempdir_in(args.next().unwrap_or_else(|| std::env::temp_dir().display().to_string()))?;
    let limits =
        RetentionConfig { max_artifact_bytes: 1 << 30, max_session_bytes: 1 << 40, max_trace_bytes: 1 << 40, ..RetentionConfig::default() };
    let store = FsStore::open(tmp.path().join("store"), limits)?;
    let mut base: Vec<u8> = (0..SIZE).map(|i| (i % 251) as u8).collect();
    let (mut put, mut write, mut hash, mut ratio) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds {
        base[..8].copy_from_slice(&(round as u64).to_le_bytes());
        let data = Bytes::copy_from_slice(&base);

        let raw = || -> std::io::Result<Duration> {
            let start = Instant::now();
            let mut f = std::fs::File::create(tmp.path().join(format!("raw-{round}")))?;
            f.write_all(&data)?;
            f.sync_all()?;
            Ok(start.elapsed())
        };
        // Alternate which goes first, so drift within a round does not favour either.
        let (p, w) = if round % 2 == 0 {
            let w = raw()?;
            let start = Instant::now();
            store.put_bytes(data.clone(), PutOptions::default()).await?;
            (start.elapsed(), w)
        } else {
            let start = Instant::now();
            store.put_bytes(data.clone(), PutOptions::default()).await?;
            let p = start.elapsed();
            (p, raw()?)
        };
        let start = Instant::now();
        std::hint::black_box(sha2::Sha256::digest(&data));
        let h = start.elapsed();
        println!(
            "round {round}: put_bytes {:.0} MB/s, raw write+fsync {:.0} MB/s, raw sha256 {:.0} MB/s",
            mb_per_s(p),
            mb_per_s(w),
            mb_per_s(h)
        );
        put.push(mb_per_s(p));
        write.push(mb_per_s(w));
        hash.push(mb_per_s(h));
        ratio.push(w.as_secs_f64() / p.as_secs_f64());
    }
    println!(
        "median of {rounds}: put_bytes {:.0} MB/s, raw write+fsync {:.0} MB/s, raw sha256 {:.0} MB/s, \
         put speed / raw write+fsync speed {:.2}",
        median(put),
        median(write),
        median(hash),
        median(ratio)
    );
    Ok(())
}
