//! SharedStore (PostgreSQL + S3) against the fs store, in one run on one machine: put and get
//! throughput of a 100 MB artifact on each, and what the PostgreSQL index adds to a put's
//! latency (p50/p99). The S3 server is moto on loopback (in memory, in Python: its own speed
//! bounds the S3 figures, so they say what the store adds over the server, not what AWS does).
//!
//! Also what `/readyz` costs: [`ArtifactStore::ready`] called back to back (p50/p99), the
//! store's whole readiness check as the route runs it.
//!
//! `STOWAGE_PEERS_DIR=target/peers cargo bench -p stowage-store --bench shared_store`
//! (starts its own PostgreSQL cluster and moto; needs scripts/storage-peers.sh). With
//! `-- latency`, only the small-put and readiness sections run (no 100 MB artifacts).

#[path = "../tests/support/mod.rs"]
mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use object_store::aws::AmazonS3Builder;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use stowage_store::{Access, ArtifactScope, ArtifactStore, FsStore, PutOptions, RetentionConfig, SharedStore};
use tokio::io::AsyncReadExt;

const BIG: usize = 100 << 20;
const BIG_RUNS: usize = 5;
const SMALL: usize = 1 << 10;
const SMALL_RUNS: usize = 400;
const READY_RUNS: usize = 400;
/// Readiness checks spaced past the write probe's cache, so each one writes.
const UNCACHED_READY_RUNS: usize = 10;

fn retention() -> RetentionConfig {
    RetentionConfig {
        max_artifact_bytes: 1 << 30,
        max_session_bytes: 1 << 40,
        max_trace_bytes: 1 << 40,
        max_artifacts_per_session: 1 << 40,
        max_artifacts_per_trace: 1 << 40,
        ..RetentionConfig::default()
    }
}

/// Content that differs per call, so every put stores a new blob.
fn unique(base: &mut [u8], n: u64) -> Bytes {
    base[..8].copy_from_slice(&n.to_le_bytes());
    Bytes::copy_from_slice(base)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn mb_s(bytes: usize, d: Duration) -> f64 {
    bytes as f64 / d.as_secs_f64() / 1e6
}

/// Median put and get throughput of 100 MB on `store`.
async fn big(name: &str, store: &dyn ArtifactStore) {
    let scope = ArtifactScope::session("bench");
    let access = Access::owner_of(&scope);
    let mut base: Vec<u8> = (0..BIG).map(|i| (i % 251) as u8).collect();
    let (mut puts, mut gets) = (Vec::new(), Vec::new());
    for n in 0..BIG_RUNS as u64 {
        let data = unique(&mut base, n + 1);
        let started = Instant::now();
        let r = store.put_bytes(data, PutOptions::scoped(scope.clone())).await.unwrap();
        puts.push(started.elapsed());
        let started = Instant::now();
        let mut body = store.open(&access, &r.id, None).await.unwrap().body;
        let mut buf = vec![0u8; 1 << 20];
        let mut total = 0;
        loop {
            let k = body.read(&mut buf).await.unwrap();
            if k == 0 {
                break;
            }
            total += k;
        }
        gets.push(started.elapsed());
        assert_eq!(total, BIG);
        store.delete(&access, &r.id).await.unwrap();
    }
    puts.sort();
    gets.sort();
    let (p, g) = (percentile(&puts, 0.5), percentile(&gets, 0.5));
    println!(
        "{name:<28} put 100 MB: median {:>7.1} ms ({:>6.0} MB/s)   get (streamed): median {:>7.1} ms ({:>6.0} MB/s)   [{BIG_RUNS} runs]",
        p.as_secs_f64() * 1e3,
        mb_s(BIG, p),
        g.as_secs_f64() * 1e3,
        mb_s(BIG, g)
    );
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    // cargo test runs benches once as tests; this one needs servers and minutes, so it runs
    // only under `cargo bench`.
    if !std::env::args().any(|a| a == "--bench") {
        println!("shared_store bench: run it with cargo bench");
        return;
    }
    let latency_only = std::env::args().any(|a| a == "latency");
    let Some(pg) = support::Postgres::start() else { return };
    let Some(s3) = support::BucketServer::start(support::BucketKind::Moto, "bench") else { return };
    let url = pg.create_database("bench");
    runtime.block_on(async {
        let (id, secret) = s3.credentials();
        let shared =
            SharedStore::builder(s3.location("stowage"), url).static_credentials(id, secret).retention(retention()).open().await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let fs = FsStore::open(dir.path().join("store"), retention()).unwrap();

        if !latency_only {
            println!("== 100 MB put/get, same run");
            big("fs (SQLite + disk)", &fs).await;
            big("shared (PostgreSQL + moto)", &shared).await;
        }

        // What the index adds to a put: 1 KB puts through the store against the S3 requests
        // such a put makes on its own (a PUT when staging, a HEAD at commit), interleaved so
        // both see the same server load.
        let raw = AmazonS3Builder::new()
            .with_bucket_name(&s3.bucket)
            .with_endpoint(s3.endpoint())
            .with_allow_http(true)
            .with_region("us-east-1")
            .with_access_key_id(id)
            .with_secret_access_key(secret)
            .build()
            .unwrap();
        let raw: Arc<dyn ObjectStore> = Arc::new(raw);
        let scope = ArtifactScope::session("latency");
        let mut base = vec![7u8; SMALL];
        let (mut store_puts, mut s3_only) = (Vec::new(), Vec::new());
        for n in 0..SMALL_RUNS as u64 {
            let data = unique(&mut base, 1_000_000 + n);
            let started = Instant::now();
            shared.put_bytes(data.clone(), PutOptions::scoped(scope.clone())).await.unwrap();
            store_puts.push(started.elapsed());
            let key = Path::from(format!("raw/{n}"));
            let started = Instant::now();
            raw.put(&key, PutPayload::from(data)).await.unwrap();
            raw.head(&key).await.unwrap();
            s3_only.push(started.elapsed());
        }
        store_puts.sort();
        s3_only.sort();
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let (sp50, sp99) = (percentile(&store_puts, 0.5), percentile(&store_puts, 0.99));
        let (rp50, rp99) = (percentile(&s3_only, 0.5), percentile(&s3_only, 0.99));
        println!("== 1 KB puts, {SMALL_RUNS} each, interleaved");
        println!("shared store put             p50 {:>6.2} ms   p99 {:>6.2} ms", ms(sp50), ms(sp99));
        println!("its S3 requests alone        p50 {:>6.2} ms   p99 {:>6.2} ms", ms(rp50), ms(rp99));
        println!(
            "PostgreSQL index added       p50 {:>6.2} ms   p99 {:>6.2} ms   (difference of the percentiles)",
            ms(sp50.saturating_sub(rp50)),
            ms(sp99.saturating_sub(rp99))
        );

        // What /readyz costs: the store's readiness check, back to back, on each store.
        println!("== readiness check (ArtifactStore::ready), {READY_RUNS} calls back to back");
        for (name, store) in [("fs (SQLite + disk)", &fs as &dyn ArtifactStore), ("shared (PostgreSQL + moto)", &shared)] {
            let mut took = Vec::with_capacity(READY_RUNS);
            for _ in 0..READY_RUNS {
                let started = Instant::now();
                store.ready().await.unwrap();
                took.push(started.elapsed());
            }
            took.sort();
            println!("{name:<28} p50 {:>6.3} ms   p99 {:>6.3} ms", ms(percentile(&took, 0.5)), ms(percentile(&took, 0.99)));
        }
        // The same check when it has to write (the probe's outcome answers for a few seconds,
        // so these are spaced past that): what one probe in a few seconds costs.
        println!("== readiness check, {UNCACHED_READY_RUNS} calls 3.1 s apart (each past the write probe's cache)");
        for (name, store) in [("fs (SQLite + disk)", &fs as &dyn ArtifactStore), ("shared (PostgreSQL + moto)", &shared)] {
            let mut took = Vec::with_capacity(UNCACHED_READY_RUNS);
            for _ in 0..UNCACHED_READY_RUNS {
                tokio::time::sleep(Duration::from_millis(3100)).await;
                let started = Instant::now();
                store.ready().await.unwrap();
                took.push(started.elapsed());
            }
            took.sort();
            println!("{name:<28} median {:>6.3} ms   max {:>6.3} ms", ms(percentile(&took, 0.5)), ms(percentile(&took, 1.0)));
        }
    });
}
