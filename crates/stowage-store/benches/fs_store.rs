//! FsStore throughput: put_bytes (hash + durable write + index row) and streaming get, at
//! 1 KB, 1 MB and 100 MB, next to the floors the machine sets (raw sha256, raw write+fsync,
//! raw file read) measured in the same run so that ratios mean something.
//!
//! `cargo bench -p stowage-store --bench fs_store -- --warm-up-time 1 --measurement-time 5`

use std::cell::OnceCell;
use std::io::{Read, Write};
use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::{BenchmarkId, Criterion, SamplingMode, Throughput, criterion_group, criterion_main};
use sha2::Digest;
use stowage_store::{Access, ArtifactScope, ArtifactStore, FsStore, PutOptions, RetentionConfig};
use tokio::io::AsyncReadExt;

const SIZES: [(usize, &str); 3] = [(1 << 10, "1KB"), (1 << 20, "1MB"), (100 << 20, "100MB")];

fn retention() -> RetentionConfig {
    // Roomy enough that no put is refused or evicts during a run.
    RetentionConfig {
        max_artifact_bytes: 1 << 30,
        max_session_bytes: 1 << 40,
        max_trace_bytes: 1 << 40,
        max_artifacts_per_session: 1 << 40,
        max_artifacts_per_trace: 1 << 40,
        ..RetentionConfig::default()
    }
}

/// Content that differs per call, so every put writes a new blob instead of deduplicating.
fn unique(base: &mut [u8], n: u64) -> Bytes {
    base[..8].copy_from_slice(&n.to_le_bytes());
    Bytes::copy_from_slice(base)
}

/// The floors, for 100 MB: what hashing, a durable write and a cached read cost on their own.
/// Run first, right before the store's own 100 MB figures, because this disk's write speed
/// drifts over minutes (it throttles sustained writes): ratios need neighbouring measurements.
fn floors(c: &mut Criterion) {
    let tmp = tempfile::tempdir_in(std::env::var_os("BENCH_DIR").unwrap_or_else(|| std::env::temp_dir().into())).unwrap();
    let size = 100 << 20;
    // Everything is built on first use: `cargo test`/nextest run each benchmark once in its own
    // process, which should not pay for the others' 100 MB setups.
    let data = OnceCell::new();
    let data = || data.get_or_init(|| (0..size).map(|i| (i % 251) as u8).collect::<Vec<u8>>());
    let mut floor = c.benchmark_group("floor");
    floor.throughput(Throughput::Bytes(size as u64)).sample_size(10).sampling_mode(SamplingMode::Flat);
    floor.bench_function("sha256/100MB", |b| {
        let data = data();
        b.iter(|| sha2::Sha256::digest(data))
    });
    let mut files = 0u64;
    let write_one = || {
        files += 1;
        let path = tmp.path().join(format!("floor-{files}.bin"));
        let start = Instant::now();
        let mut f = std::fs::File::create(&path).unwrap();
        f.write_all(data()).unwrap();
        f.sync_all().unwrap();
        (start.elapsed(), path)
    };
    let write_one = std::cell::RefCell::new(write_one);
    floor.bench_function("write_fsync/100MB", |b| b.iter_custom(|iters| (0..iters).map(|_| write_one.borrow_mut()().0).sum()));
    let cached = OnceCell::new();
    floor.bench_function("read_cached/100MB", |b| {
        let path = cached.get_or_init(|| write_one.borrow_mut()().1);
        b.iter(|| {
            let mut f = std::fs::File::open(path).unwrap();
            let mut buf = vec![0u8; 1 << 20];
            while f.read(&mut buf).unwrap() > 0 {}
        })
    });
    floor.finish();
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let tmp = tempfile::tempdir_in(std::env::var_os("BENCH_DIR").unwrap_or_else(|| std::env::temp_dir().into())).unwrap();
    let store = FsStore::open(tmp.path().join("store"), retention()).unwrap();
    let scope = ArtifactScope::session("bench");
    let access = Access::owner_of(&scope);

    let mut group = c.benchmark_group("fs_store");
    for (size, name) in SIZES {
        group.throughput(Throughput::Bytes(size as u64));
        // Flat sampling for 100 MB: ten puts per sample set rather than criterion's linear
        // 55+, so a run writes ~1 GB instead of ~6 GB (this disk throttles sustained writes).
        if size >= 100 << 20 {
            group.sample_size(10).sampling_mode(SamplingMode::Flat);
        } else {
            group.sample_size(50).sampling_mode(SamplingMode::Auto);
        }
        // Fresh content per put (so nothing deduplicates), built outside the timed region.
        // Built on first use, like the floors' data.
        let base = OnceCell::new();
        let counter = std::sync::atomic::AtomicU64::new(0);
        let next = || {
            let base = base.get_or_init(|| std::sync::Mutex::new((0..size).map(|i| (i % 251) as u8).collect::<Vec<u8>>()));
            unique(&mut base.lock().unwrap(), counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
        };

        group.bench_function(BenchmarkId::new("put_bytes", name), |b| {
            // Puts are not deleted: on this disk (ext4 with `discard`) a delete's discards land
            // in the next put's fsync.
            let (next, store, scope) = (&next, &store, &scope);
            b.to_async(&rt).iter_custom(|iters| async move {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let data = next();
                    let start = Instant::now();
                    store.put_bytes(data, PutOptions::scoped(scope.clone())).await.unwrap();
                    total += start.elapsed();
                }
                total
            });
        });

        let stored = OnceCell::new();
        group.bench_function(BenchmarkId::new("open_read", name), |b| {
            let id = stored.get_or_init(|| rt.block_on(store.put_bytes(next(), PutOptions::scoped(scope.clone()))).unwrap().id);
            b.to_async(&rt).iter(|| async {
                let mut reader = store.open(&access, id, None).await.unwrap();
                let mut buf = vec![0u8; 1 << 20];
                let mut total = 0usize;
                loop {
                    let n = reader.body.read(&mut buf).await.unwrap();
                    if n == 0 {
                        break;
                    }
                    total += n;
                }
                assert_eq!(total, size);
            });
        });
    }
    group.finish();
}

criterion_group!(benches, floors, bench);
criterion_main!(benches);
