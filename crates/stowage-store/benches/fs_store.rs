//! FsStore throughput: put_bytes (hash + durable write + index row) and streaming get, at
//! 1 KB, 1 MB and 100 MB, next to the floors the machine sets (raw sha256, raw write+fsync,
//! raw file read) measured in the same run so that ratios mean something.
//!
//! `cargo bench -p stowage-store --bench fs_store -- --warm-up-time 1 --measurement-time 5`

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
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

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let tmp =
        tempfile::tempdir_in(std::env::var_os("BENCH_DIR").unwrap_or_else(|| std::env::temp_dir().into())).unwrap();
    let store = FsStore::open(tmp.path().join("store"), retention()).unwrap();
    let scope = ArtifactScope::session("bench");
    let access = Access::owner_of(&scope);

    let mut group = c.benchmark_group("fs_store");
    for (size, name) in SIZES {
        group.throughput(Throughput::Bytes(size as u64));
        group.sample_size(if size >= 100 << 20 { 10 } else { 50 });
        let mut base: Vec<u8> = (0..size).map(|i| (i % 251) as u8).collect();

        group.bench_function(BenchmarkId::new("put_bytes", name), |b| {
            let mut n = 0u64;
            b.to_async(&rt).iter_custom(|iters| {
                // Fresh content is built and each put deleted outside the timed region.
                let batch: Vec<Bytes> = (0..iters)
                    .map(|_| {
                        n += 1;
                        unique(&mut base, n)
                    })
                    .collect();
                let (store, scope, access) = (&store, &scope, &access);
                async move {
                    let mut total = Duration::ZERO;
                    for data in batch {
                        let start = Instant::now();
                        let r = store.put_bytes(data, PutOptions::scoped(scope.clone())).await.unwrap();
                        total += start.elapsed();
                        store.delete(access, &r.id).await.unwrap();
                    }
                    total
                }
            });
        });

        let stored =
            rt.block_on(store.put_bytes(unique(&mut base, u64::MAX), PutOptions::scoped(scope.clone()))).unwrap();
        group.bench_function(BenchmarkId::new("open_read", name), |b| {
            b.to_async(&rt).iter(|| async {
                let mut reader = store.open(&access, &stored.id, None).await.unwrap();
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

    // The floors, for 100 MB: what hashing, a durable write and a cached read cost on their own.
    let size = 100 << 20;
    let data: Vec<u8> = (0..size).map(|i| (i % 251) as u8).collect();
    let mut floor = c.benchmark_group("floor");
    floor.throughput(Throughput::Bytes(size as u64)).sample_size(10);
    floor.bench_function("sha256/100MB", |b| b.iter(|| sha2::Sha256::digest(&data)));
    let path = tmp.path().join("floor.bin");
    floor.bench_function("write_fsync/100MB", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let _ = std::fs::remove_file(&path);
                let start = Instant::now();
                let mut f = std::fs::File::create(&path).unwrap();
                f.write_all(&data).unwrap();
                f.sync_all().unwrap();
                total += start.elapsed();
            }
            total
        })
    });
    floor.bench_function("read_cached/100MB", |b| {
        b.iter(|| {
            let mut f = std::fs::File::open(&path).unwrap();
            let mut buf = vec![0u8; 1 << 20];
            while f.read(&mut buf).unwrap() > 0 {}
        })
    });
    floor.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
