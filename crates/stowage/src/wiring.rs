//! Builds the configured store: the one place that knows which backend types exist.

use std::sync::Arc;

use anyhow::Context;
use stowage_store::{ArtifactStore, FsStore, Isolation, MemoryStore, NoOpStore};

use crate::config::{Backend, Config};

pub fn open_store(config: &Config) -> anyhow::Result<Arc<dyn ArtifactStore>> {
    let isolation = Isolation::from_isolate_sessions(config.store.isolate_sessions);
    Ok(match config.store.backend {
        Backend::Fs => {
            let dir = &config.store.dir;
            let store = FsStore::builder(dir)
                .retention(config.retention.clone())
                .isolation(isolation)
                .open()
                .with_context(|| format!("cannot open store {}", dir.display()))?;
            Arc::new(store)
        }
        Backend::Memory => Arc::new(MemoryStore::builder().retention(config.retention.clone()).isolation(isolation).build()),
        // Keeps nothing, so there is nothing to isolate.
        Backend::Noop => Arc::new(NoOpStore::new()),
    })
}

/// The store as the pipeline's sink.
pub fn sink(store: Arc<dyn ArtifactStore>) -> Arc<dyn stowage_core::ArtifactSink> {
    stowage_store::into_sink(store)
}
