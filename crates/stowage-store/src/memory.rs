//! [`MemoryStore`]: everything in memory, lost on exit. For tests, demos and embedding where
//! artifacts need not outlive the process. Same semantics as the filesystem store.

use std::sync::Arc;

use stowage_core::Isolation;

use crate::RetentionConfig;
use crate::blobs::MemoryBlobs;
use crate::clock::{Clock, SystemClock};
use crate::delegate::delegate_store;
use crate::engine::{Engine, Settings};
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
    /// A memory store with `retention` and the system clock.
    pub fn new(retention: RetentionConfig) -> Self {
        Self::builder().retention(retention).build()
    }

    /// A store that reads the time from `clock` (tests pass a [`crate::ManualClock`]).
    pub fn with_clock(retention: RetentionConfig, clock: Arc<dyn Clock>) -> Self {
        Self::builder().retention(retention).clock(clock).build()
    }

    /// Options for a memory store: retention, clock, isolation.
    pub fn builder() -> MemoryStoreBuilder {
        MemoryStoreBuilder { retention: RetentionConfig::default(), clock: Arc::new(SystemClock), isolation: Isolation::default() }
    }

    /// The retention the store was built with.
    pub fn retention(&self) -> &RetentionConfig {
        self.engine.config()
    }

    /// Which owner ids decide access.
    pub fn isolation(&self) -> Isolation {
        self.engine.isolation()
    }
}

/// Options for a [`MemoryStore`]: the same as [`crate::FsStoreBuilder`]'s that apply in memory.
pub struct MemoryStoreBuilder {
    retention: RetentionConfig,
    clock: Arc<dyn Clock>,
    isolation: Isolation,
}

impl MemoryStoreBuilder {
    /// The retention limits and expiry.
    pub fn retention(mut self, retention: RetentionConfig) -> Self {
        self.retention = retention;
        self
    }

    /// Where the store reads the time (tests pass a [`crate::ManualClock`]).
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Which owner ids decide access (default [`Isolation::User`]: tenant and user).
    pub fn isolation(mut self, isolation: Isolation) -> Self {
        self.isolation = isolation;
        self
    }

    /// The store.
    pub fn build(self) -> MemoryStore {
        let settings = Settings {
            config: self.retention,
            clock: self.clock,
            failpoints: Failpoints::default(),
            isolation: self.isolation,
            last_tick: 0,
            // Nothing but this process touches its blobs.
            grace: std::time::Duration::ZERO,
        };
        MemoryStore { engine: Engine::new(MemoryIndex::default(), MemoryBlobs::default(), settings) }
    }
}

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryStore").finish_non_exhaustive()
    }
}

delegate_store!(MemoryStore);
