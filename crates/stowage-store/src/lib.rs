//! Artifact stores: where offloaded bytes live.
//!
//! [`ArtifactStore`] is the async trait every backend implements; every store is also a
//! [`stowage_core::ArtifactSink`], which is all that producers (the transform pipeline) see
//! (implemented for each store type and for `dyn ArtifactStore`; [`into_sink`] turns a shared
//! [`DynStore`] into the `Arc<dyn ArtifactSink>` the pipeline takes).
//!
//! ```no_run
//! # fn main() -> Result<(), stowage_store::StoreError> {
//! use std::sync::Arc;
//! use stowage_store::{DynStore, FsStore, RetentionConfig};
//!
//! let store: DynStore = Arc::new(FsStore::open(".stowage", RetentionConfig::default())?);
//! let sink = stowage_store::into_sink(store.clone());
//! # Ok(()) }
//! ```
//!
//! Backends: [`FsStore`] (files + SQLite, the default; feature `sqlite`, on by default),
//! [`MemoryStore`], and [`NoOpStore`] (keeps nothing; references it returns are marked
//! `truncated`). The first two share one engine that holds all the policy — content ids,
//! per-owner isolation, dedup, expiry, budgets and eviction, crash repair — over two small
//! internal traits, an index of records and a blob store keyed by sha256, so a new backend pair
//! implements storage primitives only. The `conformance` module (feature `conformance`) is the
//! suite every backend must pass.
//!
//! Durability: a put is all-or-nothing. [`FsStore`] writes a temp file, fsyncs it, renames it
//! to its content address, fsyncs the directory and only then inserts the index row, so a
//! crash leaves at most leftovers that [`ArtifactStore::gc`] removes.
//!
//! Access is explicit in every read or delete: an [`Access`] is either the [`Owner`] asking
//! for its own artifacts, or the local [`Access::Operator`] (the CLI, which already has the
//! files). Which of the owner's ids count is the store's [`Isolation`], chosen when it is
//! built: (tenant, user) by default, so a user reaches what it stored from any session, or
//! (tenant, user, session). A request for another owner's artifact is answered exactly like a
//! request for an id that never existed.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod blobs;
mod clock;
#[cfg(feature = "conformance")]
pub mod conformance;
mod delegate;
mod engine;
mod failpoint;
#[cfg(feature = "sqlite")]
mod fs;
#[cfg(all(feature = "postgres", feature = "s3"))]
mod identity;
mod index;
mod memory;
mod mime;
mod noop;
#[cfg(feature = "sqlite")]
mod private;
mod record;
mod retention;
#[cfg(all(feature = "postgres", feature = "s3"))]
mod shared;

use std::ops::Range;
use std::pin::Pin;

use async_trait::async_trait;
use bytes::Bytes;
use tokio::io::AsyncRead;

pub use clock::{Clock, ManualClock, SkewedClock, SystemClock};
#[cfg(feature = "test-hooks")]
#[doc(hidden)]
pub use failpoint::{FailpointHook, PutStep};
#[cfg(feature = "sqlite")]
pub use fs::{DEFAULT_GC_GRACE, FsStore, FsStoreBuilder};
pub use memory::{MemoryStore, MemoryStoreBuilder};
pub use noop::{NOOP_WARNING, NoOpStore};
#[cfg(feature = "sqlite")]
pub use private::{DIR_MODE, FILE_MODE, LooseEntry, PermissionReport};
pub use retention::{CleanupStrategy, RetentionConfig};
#[cfg(all(feature = "postgres", feature = "s3"))]
pub use shared::StoreCheck;
#[cfg(all(feature = "postgres", feature = "s3"))]
pub use shared::{BucketLocation, DEFAULT_SHARED_GC_GRACE, MAX_CLOCK_SKEW, Provider, SharedStore, SharedStoreBuilder, skew_warning};
pub use stowage_core::{ArtifactId, ArtifactRef, ArtifactScope, ArtifactSink, Isolation, Owner, PutOptions, StoreError};

/// A shared, type-erased store: what the CLI and the server hold.
pub type DynStore = std::sync::Arc<dyn ArtifactStore>;

/// The sink view of a shared store, for producers that take `Arc<dyn ArtifactSink>` (the
/// transform pipeline). Needed because `Arc<dyn ArtifactStore>` cannot be converted to
/// `Arc<dyn ArtifactSink>` directly: `ArtifactSink` is not a supertrait of `ArtifactStore`.
pub fn into_sink(store: DynStore) -> std::sync::Arc<dyn ArtifactSink> {
    std::sync::Arc::new(SharedSink(store))
}

/// [`into_sink`]'s adapter.
struct SharedSink(DynStore);

#[async_trait]
impl ArtifactSink for SharedSink {
    async fn put_bytes(&self, data: Bytes, opts: PutOptions) -> Result<ArtifactRef> {
        self.0.put_bytes(data, opts).await
    }

    fn is_noop(&self) -> bool {
        self.0.is_noop()
    }
}

delegate::sink_via_store!(dyn ArtifactStore);

/// Result type of every store operation.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// Who is asking.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Access {
    /// An owner asking for its own artifacts; it sees nothing else. The store compares the
    /// ids its [`Isolation`] names, so the session id of an [`Owner`] (from a request or a link
    /// token) only matters in a store that isolates sessions.
    Owner(Owner),
    /// The local operator (the `stowage artifacts` CLI): sees every owner's artifacts. Never
    /// constructed from network input.
    Operator,
}

impl Access {
    /// Access as `scope`'s owner.
    pub fn owner_of(scope: &ArtifactScope) -> Self {
        Access::Owner(scope.owner())
    }
}

/// A byte stream over (part of) an artifact, with its reference.
pub struct ArtifactReader {
    /// The artifact's reference.
    pub meta: ArtifactRef,
    /// The byte range the body yields, within `0..meta.size_bytes`.
    pub range: Range<u64>,
    /// The bytes of `range`.
    pub body: Pin<Box<dyn AsyncRead + Send>>,
}

impl std::fmt::Debug for ArtifactReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArtifactReader").field("meta", &self.meta).field("range", &self.range).finish()
    }
}

/// Which artifacts to list.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListQuery {
    /// `None` lists every owner's artifacts (operator use only); `Some` lists what exactly that
    /// owner can access (under user isolation: the user's artifacts from every session).
    pub owner: Option<Owner>,
    /// Only artifacts whose scope has this session id (one session's within an owner's).
    pub session_id: Option<String>,
    /// Only artifacts recorded under this trace.
    pub trace_id: Option<String>,
    /// Opaque cursor from the previous page's [`ListPage::next`].
    pub cursor: Option<String>,
    /// Page size; 0 means the backend's default (100).
    pub limit: usize,
}

/// One page of a listing, oldest first.
#[derive(Debug, Clone, PartialEq)]
pub struct ListPage {
    /// The artifacts of this page.
    pub items: Vec<ArtifactRef>,
    /// Pass as [`ListQuery::cursor`] to get the next page; `None` on the last page.
    pub next: Option<String>,
}

/// What a garbage collection did.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct GcReport {
    /// Artifact records removed because their TTL had passed.
    pub expired_records: u64,
    /// Blobs removed because no record referenced them (e.g. after a crash between the
    /// blob rename and the index insert).
    pub orphan_blobs: u64,
    /// Records removed because their blob was missing or the wrong size.
    pub dangling_records: u64,
    /// Leftover temporary files of interrupted writes found, whether removed or not (puts
    /// in flight in this process are not leftovers and are not counted).
    pub temp_files: u64,
    /// Their total size in bytes.
    pub temp_bytes: u64,
    /// How many of them were removed: those untouched for the store's grace period. The
    /// others may still be being written by another process sharing the store; a later gc
    /// removes them once they are that old.
    pub temp_files_removed: u64,
    /// The size of the removed temp files (not part of `bytes_freed`).
    pub temp_bytes_removed: u64,
    /// Bytes of blob storage freed.
    pub bytes_freed: u64,
    /// Records whose blob is missing (or the wrong size) but that were kept: seen missing
    /// only once so far, or not yet for the store's grace period. A later gc drops those still
    /// missing then; a blob that comes back clears them.
    pub dangling_suspected: u64,
    /// Records whose blob was confirmed missing but that were kept because dropping them all
    /// would remove more than [`DANGLING_MAX_SHARE`] of the index: more often a wrong bucket or
    /// prefix than lost blobs. [`GcOptions::drop_dangling`] drops them.
    pub dangling_held: u64,
    /// True when another instance sharing the store was already sweeping it, so this gc did
    /// nothing (that sweep covers the same records and blobs).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub skipped: bool,
}

/// The largest share of the index one gc drops as dangling on its own: a sweep that finds more
/// records than this (and more than one) whose blobs are missing keeps them all and logs, since
/// a misconfigured or emptied location looks exactly like that. An operator who knows the blobs
/// are gone forces it with [`GcOptions::drop_dangling`].
pub const DANGLING_MAX_SHARE: f64 = 0.05;

/// How a gc runs; [`Default`] is the scheduled sweep.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct GcOptions {
    /// Drop every record whose blob is missing right now (checked once more, blob by blob),
    /// without waiting for a second sighting and whatever their share of the index: the
    /// operator's `stowage artifacts gc --drop-dangling`, after checking the store's location.
    /// Never on a location whose marker does not match the index.
    pub drop_dangling: bool,
}

impl GcOptions {
    /// Options that drop dangling records at once.
    pub fn drop_dangling() -> Self {
        GcOptions { drop_dangling: true }
    }
}

/// Why a store is not ready: which of its dependencies failed the readiness check, a short
/// public reason, and the whole error (for the log).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{dependency} not ready ({reason}): {detail}")]
pub struct NotReady {
    /// `database` or `bucket` (shared store), `index` or `disk` (fs store).
    pub dependency: &'static str,
    /// A few words safe to show anyone (no host, bucket or path): `timed out`,
    /// `access denied`, `unreachable or failing`.
    pub reason: String,
    /// The whole error, one line, for the log (it names hosts and paths).
    pub detail: String,
}

/// An artifact store.
///
/// Every put is all-or-nothing: after an error or a crash nothing of it is visible. Every
/// read checks access and expiry. Retention limits ([`RetentionConfig`]) are enforced on put.
#[async_trait]
pub trait ArtifactStore: Send + Sync + 'static {
    /// Stores bytes held in memory.
    async fn put_bytes(&self, data: Bytes, opts: PutOptions) -> Result<ArtifactRef>;

    /// Stores text; the mime type defaults to `text/plain; charset=utf-8`.
    async fn put_text(&self, text: String, mut opts: PutOptions) -> Result<ArtifactRef> {
        opts.mime_type.get_or_insert_with(|| "text/plain; charset=utf-8".to_owned());
        self.put_bytes(Bytes::from(text), opts).await
    }

    /// Stores a stream without holding it whole in memory. Limits are checked as bytes
    /// arrive, so an oversize stream is refused without being written out in full.
    async fn put_stream(&self, reader: Pin<Box<dyn AsyncRead + Send>>, opts: PutOptions) -> Result<ArtifactRef>;

    /// The whole artifact in memory. Prefer [`ArtifactStore::open`] for large artifacts.
    async fn get(&self, access: &Access, id: &ArtifactId) -> Result<Bytes>;

    /// `range` of the artifact's bytes; a range past the end is [`StoreError::InvalidInput`].
    async fn get_range(&self, access: &Access, id: &ArtifactId, range: Range<u64>) -> Result<Bytes>;

    /// A streaming reader over the artifact, or over `range` of it.
    async fn open(&self, access: &Access, id: &ArtifactId, range: Option<Range<u64>>) -> Result<ArtifactReader>;

    /// The artifact's reference, without touching its bytes.
    async fn meta(&self, access: &Access, id: &ArtifactId) -> Result<ArtifactRef>;

    /// Whether the artifact exists, is visible to `access` and has not expired.
    async fn exists(&self, access: &Access, id: &ArtifactId) -> Result<bool>;

    /// Deletes the caller's record; the blob goes once no other owner's record uses it.
    /// Returns whether anything was deleted. The operator deletes every owner's record.
    async fn delete(&self, access: &Access, id: &ArtifactId) -> Result<bool>;

    /// Lists artifacts, paginated, oldest first. Expired artifacts are not listed.
    async fn list(&self, query: ListQuery) -> Result<ListPage>;

    /// Removes expired artifacts and unreferenced blobs, and repairs what a crash left
    /// (blobs without records, temp files); records whose blob is missing are dropped only
    /// when it is still missing on a later sweep past the grace period, and never more than
    /// [`DANGLING_MAX_SHARE`] of the index at once.
    async fn gc(&self) -> Result<GcReport>;

    /// The owners that hold a live record of `id`: what a compact link, which binds an owner
    /// without carrying the owner's ids, is checked against. The default (a store that cannot
    /// say) is nobody, which refuses such links.
    async fn owners(&self, id: &ArtifactId) -> Result<Vec<Owner>> {
        let _ = id;
        Ok(Vec::new())
    }

    /// [`ArtifactStore::gc`] with options (the operator's forced drop of dangling records). The
    /// default, for stores with nothing to force, is the plain sweep.
    async fn gc_with(&self, opts: GcOptions) -> Result<GcReport> {
        let _ = opts;
        self.gc().await
    }

    /// Whether the store can store now (for `/readyz`): its index answers a round trip and
    /// its blob storage takes a write, each within a short timeout; the error names which
    /// failed. The default lists one artifact.
    async fn ready(&self) -> std::result::Result<(), NotReady> {
        let probe = ListQuery { owner: Some(Owner::default()), limit: 1, ..ListQuery::default() };
        self.list(probe).await.map(drop).map_err(|e| NotReady { dependency: "store", reason: "failing".into(), detail: e.to_string() })
    }

    /// True for the NoOp store, which keeps nothing.
    fn is_noop(&self) -> bool {
        false
    }

    /// Which owner ids decide access to an artifact; what callers key by owner (the gateway's
    /// read cache) follows it.
    fn isolation(&self) -> Isolation {
        Isolation::User
    }

    /// Whether `bucket` is this store's own object-store bucket (the `s3` backend's), so an
    /// `s3://` URI into it may be handed to a tool (blob chaining's scheme policy).
    fn owns_bucket(&self, bucket: &str) -> bool {
        let _ = bucket;
        false
    }

    /// A URL the storage backend itself serves the artifact's bytes at, valid for
    /// `expires_in`, after the same access and expiry checks as a read; `None` for a backend
    /// without such URLs (the default). For tools only (blob chaining's `presign_direct`): the
    /// bytes then bypass the gateway, and the URL names the bucket, so it is never a link
    /// for people.
    async fn direct_url(&self, access: &Access, id: &ArtifactId, expires_in: std::time::Duration) -> Result<Option<String>> {
        let _ = (access, id, expires_in);
        Ok(None)
    }
}
