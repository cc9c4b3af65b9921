//! Small reads on an FsStore: 1000 `meta` calls and 1000 `get` calls of 1 KB artifacts, the
//! pattern of a gateway answering link and metadata requests. Every read records an LRU access,
//! so this measures what that bookkeeping costs on top of the index lookup itself.
//!
//! `cargo bench -p stowage-store --bench reads -- --warm-up-time 1 --measurement-time 5`

use criterion::{Criterion, criterion_group, criterion_main};
use stowage_store::{Access, ArtifactId, ArtifactScope, ArtifactStore, FsStore, PutOptions, RetentionConfig};

/// Reads per measured iteration.
const READS: usize = 1000;
/// Distinct artifacts the reads cycle over, so the accesses are spread like a real working set
/// rather than one hot row.
const ARTIFACTS: usize = 100;

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let tmp = tempfile::tempdir_in(std::env::var_os("BENCH_DIR").unwrap_or_else(|| std::env::temp_dir().into())).unwrap();
    let store = FsStore::open(tmp.path().join("store"), RetentionConfig::default()).unwrap();
    let scope = ArtifactScope::session("bench").with_user("u");
    let access = Access::owner_of(&scope);
    let ids: Vec<ArtifactId> = rt.block_on(async {
        let mut ids = Vec::new();
        for i in 0..ARTIFACTS {
            let mut data = vec![0u8; 1024];
            data[..8].copy_from_slice(&(i as u64).to_le_bytes());
            ids.push(store.put_bytes(data.into(), PutOptions::scoped(scope.clone())).await.unwrap().id);
        }
        ids
    });

    let mut group = c.benchmark_group("fs_store_reads");
    group.sample_size(20);
    group.bench_function("meta_x1000", |b| {
        b.to_async(&rt).iter(|| async {
            for i in 0..READS {
                store.meta(&access, &ids[i % ARTIFACTS]).await.unwrap();
            }
        })
    });
    group.bench_function("get_1KB_x1000", |b| {
        b.to_async(&rt).iter(|| async {
            for i in 0..READS {
                let bytes = store.get(&access, &ids[i % ARTIFACTS]).await.unwrap();
                assert_eq!(bytes.len(), 1024);
            }
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
