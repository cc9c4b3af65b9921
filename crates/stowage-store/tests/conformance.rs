//! Runs the shared conformance suite on every backend in this crate.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use stowage_store::conformance::{self, Factory};
use stowage_store::{Clock, DynStore, FsStore, Isolation, MemoryStore, RetentionConfig};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_store_conforms() {
    let factory = |r: RetentionConfig, c: Arc<dyn Clock>, i: Isolation| -> DynStore {
        Arc::new(MemoryStore::builder().retention(r).clock(c).isolation(i).build())
    };
    conformance::run_all(&factory).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fs_store_conforms() {
    let root = tempfile::tempdir().unwrap();
    let n = AtomicUsize::new(0);
    let factory = |r: RetentionConfig, c: Arc<dyn Clock>, i: Isolation| -> DynStore {
        // Every store gets its own directory under one temp root, removed at the end.
        let dir = root.path().join(n.fetch_add(1, Ordering::SeqCst).to_string());
        Arc::new(FsStore::builder(dir).retention(r).clock(c).isolation(i).gc_grace(Duration::ZERO).open().unwrap())
    };
    let factory: Factory<'_> = &factory;
    conformance::run_all(factory).await;
}
