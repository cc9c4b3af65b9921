//! [`FsStore`]: blobs as files under a directory, records in an embedded SQLite index.
//!
//! Layout of a store directory (created on open):
//!
//! ```text
//! <dir>/index.sqlite        records (WAL mode: also index.sqlite-wal, -shm)
//! <dir>/blobs/ab/ab12…      one file per distinct content, named by its sha256
//! <dir>/tmp/                puts in progress
//! ```
//!
//! Everything the store creates is its owner's alone (directories 0700, files 0600, set
//! explicitly whatever the umask); see [`FsStore::check_permissions`] for stores made before.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use stowage_core::{Isolation, StoreError};

use crate::blobs::FsBlobs;
use crate::clock::{Clock, SystemClock};
use crate::delegate::delegate_store;
use crate::engine::{Engine, Settings};
use crate::failpoint::Failpoints;
use crate::index::SqliteIndex;
use crate::{Result, RetentionConfig};

/// How long a temp file or an unreferenced blob must sit untouched before gc removes it, by
/// default. Another process sharing the store may be between writing a blob and inserting its
/// row; an hour is far longer than any put takes.
pub const DEFAULT_GC_GRACE: Duration = Duration::from_secs(3600);

/// An artifact store on the local filesystem.
///
/// Safe to share between tasks (wrap in an `Arc`). Several processes may open the same
/// directory (SQLite WAL); within one process all puts, deletes and gc are coordinated, and
/// across processes gc spares anything younger than [`FsStoreBuilder::gc_grace`]. Deletes in
/// two processes at once racing a put of the same bytes are not coordinated: run one writer.
pub struct FsStore {
    engine: Engine<SqliteIndex, FsBlobs>,
    dir: PathBuf,
}

impl FsStore {
    /// Opens the store at `dir`, creating it if needed, with the system clock.
    pub fn open(dir: impl AsRef<Path>, retention: RetentionConfig) -> Result<Self> {
        Self::builder(dir).retention(retention).open()
    }

    /// Options for opening a store at `dir`: retention, clock, gc grace, isolation.
    pub fn builder(dir: impl AsRef<Path>) -> FsStoreBuilder {
        FsStoreBuilder {
            dir: dir.as_ref().to_path_buf(),
            retention: RetentionConfig::default(),
            clock: Arc::new(SystemClock),
            gc_grace: DEFAULT_GC_GRACE,
            failpoints: Failpoints::default(),
            isolation: Isolation::default(),
        }
    }

    /// The store directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The retention the store was opened with.
    pub fn retention(&self) -> &RetentionConfig {
        self.engine.config()
    }

    /// Which owner ids decide access.
    pub fn isolation(&self) -> Isolation {
        self.engine.isolation()
    }

    /// Checks the modes of an existing store directory without opening it: which entries
    /// (the directory, the index and its WAL files, `links.key`, blobs, temp files) let group
    /// or other local users in. A store this version creates is private (directories 0700,
    /// files 0600, whatever the umask); one made by an older version, copied, or opened up by
    /// hand may not be, and is left as it is: the report says what to fix and how.
    ///
    /// Walks the whole store (one `lstat` per entry), so call it once at start-up, off the
    /// async runtime for a big store. Always private on non-Unix systems.
    pub fn check_permissions(dir: impl AsRef<Path>) -> Result<crate::PermissionReport> {
        let dir = dir.as_ref();
        crate::private::check(dir).map_err(|e| StoreError::backend("check store permissions", dir.display().to_string(), e))
    }
}

impl std::fmt::Debug for FsStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FsStore").field("dir", &self.dir).finish_non_exhaustive()
    }
}

/// Options for opening an [`FsStore`].
pub struct FsStoreBuilder {
    dir: PathBuf,
    retention: RetentionConfig,
    clock: Arc<dyn Clock>,
    gc_grace: Duration,
    failpoints: Failpoints,
    isolation: Isolation,
}

impl FsStoreBuilder {
    /// The retention limits and expiry (default: [`RetentionConfig::default`]).
    pub fn retention(mut self, retention: RetentionConfig) -> Self {
        self.retention = retention;
        self
    }

    /// Where the store reads the time (tests pass a [`crate::ManualClock`]).
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// How old a temp file or unreferenced blob must be before gc removes it (default
    /// [`DEFAULT_GC_GRACE`]). Puts in flight in this process are never touched whatever the
    /// grace, so `Duration::ZERO` is safe when no other process writes the store.
    pub fn gc_grace(mut self, grace: Duration) -> Self {
        self.gc_grace = grace;
        self
    }

    /// Which owner ids decide access: [`Isolation::User`] (tenant and user, the default) or
    /// [`Isolation::Session`] (tenant, user and session). A setting of the store rather than of
    /// its retention, because it decides what the index's records are keyed by: opening an
    /// existing store under the other isolation re-keys every record once (merging one user's
    /// copies of the same artifact from several sessions when going to `User`).
    pub fn isolation(mut self, isolation: Isolation) -> Self {
        self.isolation = isolation;
        self
    }

    /// Installs a failpoint hook (crash tests only: the `test-hooks` feature).
    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    pub fn failpoints(mut self, hook: crate::FailpointHook) -> Self {
        self.failpoints = Failpoints::new(hook);
        self
    }

    /// Opens the store, creating the directory, the index and the blob tree if needed.
    pub fn open(self) -> Result<FsStore> {
        let dir = self.dir;
        if dir.exists() && !dir.is_dir() {
            return Err(StoreError::backend("open store", dir.display().to_string(), "not a directory"));
        }
        crate::private::create_dir_all(&dir).map_err(|e| StoreError::backend("create store directory", dir.display().to_string(), e))?;
        let failpoints = self.failpoints;
        let blobs = FsBlobs::open(&dir, failpoints.clone(), self.gc_grace)?;
        let index_path = dir.join("index.sqlite");
        crate::private::precreate_file(&index_path)
            .map_err(|e| StoreError::backend("create index", index_path.display().to_string(), e))?;
        let index = SqliteIndex::open(&index_path, self.isolation)?;
        let last_tick = index.max_last_access()?;
        let settings =
            Settings { config: self.retention, clock: self.clock, failpoints, isolation: self.isolation, last_tick, grace: self.gc_grace };
        let engine = Engine::new(index, blobs, settings);
        Ok(FsStore { engine, dir })
    }
}

delegate_store!(FsStore);
