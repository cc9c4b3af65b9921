//! [`MemoryStore`]: everything in memory, lost on exit. For tests, demos and embedding where
//! artifacts need not outlive the process. Same semantics as the filesystem store.

use std::sync::Arc;

use crate::RetentionConfig;
use crate::blobs::MemoryBlobs;
use crate::clock::{Clock, SystemClock};
use crate::delegate::delegate_store;
use crate::engine::Engine;
use crate::failpoint::Failpoints;
use crate::index::MemoryIndex;

/// An artifact store held in memory.
///
/// ```
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// use stowage_store::{Access, ArtifactScope, ArtifactStore, MemoryStore, PutOptions, RetentionConfig};
///
/// let store = MemoryStore::new(RetentionConfig::default());
/// let scope = ArtifactScope::session("s1");
/// let r = store.put_bytes("hello".into(), PutOptions::scoped(scope.clone())).await.unwrap();
/// assert_eq!(r.mime_type.as_deref(), Some("text/plain; charset=utf-8"));
/// let bytes = store.get(&Access::owner_of(&scope), &r.id).await.unwrap();
/// assert_eq!(&bytes[..], b"hello");
/// # });
/// ```
pub struct MemoryStore {
    engine: Engine<MemoryIndex, MemoryBlobs>,
}

impl MemoryStore {
    pub fn new(retention: RetentionConfig) -> Self {
        Self::with_clock(retention, Arc::new(SystemClock))
    }

    /// A store that reads the time from `clock` (tests pass a [`crate::ManualClock`]).
    pub fn with_clock(retention: RetentionConfig, clock: Arc<dyn Clock>) -> Self {
        let engine = Engine::new(MemoryIndex::default(), MemoryBlobs::default(), retention, clock, Failpoints::default(), 0);
        MemoryStore { engine }
    }

    pub fn retention(&self) -> &RetentionConfig {
        self.engine.config()
    }
}

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryStore").finish_non_exhaustive()
    }
}

delegate_store!(MemoryStore);
