//! The index: every owner's records, and the queries retention needs.
//!
//! An index knows nothing about bytes; [`crate::blobs`] knows nothing about owners. The engine
//! ([`crate::engine`]) combines one of each and holds all the policy, so a new backend pair
//! (say Postgres + S3) implements only these storage primitives.

mod memory;
mod sqlite;

pub(crate) use memory::MemoryIndex;
pub(crate) use sqlite::SqliteIndex;

use async_trait::async_trait;
use stowage_core::ArtifactId;

use crate::Result;
use crate::record::Record;

/// Which order eviction candidates come in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EvictOrder {
    /// Least recently accessed first.
    LeastRecentlyUsed,
    /// Oldest insertion first.
    OldestFirst,
}

/// Bytes and records held by an owner, or by one trace within it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Usage {
    pub bytes: u64,
    pub count: u64,
}

/// What a listing selects. `owner_key: None` is every owner.
#[derive(Debug, Clone, Default)]
pub(crate) struct ListFilter {
    pub owner_key: Option<String>,
    pub session_id: Option<String>,
    pub trace_id: Option<String>,
}

/// A record's place in its blob: enough for gc to check blobs against records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BlobUse {
    pub owner_key: String,
    pub id: ArtifactId,
    pub sha256: String,
    pub size: u64,
}

#[async_trait]
pub(crate) trait Index: Send + Sync + 'static {
    /// The owner's record of `id`, expired or not.
    async fn get(&self, owner_key: &str, id: &ArtifactId) -> Result<Option<Record>>;

    /// Every owner's record of `id` (operator access), oldest first.
    async fn get_all(&self, id: &ArtifactId) -> Result<Vec<Record>>;

    /// Inserts a record for a new (owner, id); returns it with its `seq` assigned.
    async fn insert(&self, record: Record) -> Result<Record>;

    /// Records an access and, when given, a new expiry.
    async fn touch(&self, owner_key: &str, id: &ArtifactId, last_access: i64, expires_at: Option<i64>) -> Result<()>;

    /// Removes the owner's record of `id`, returning it.
    async fn delete(&self, owner_key: &str, id: &ArtifactId) -> Result<Option<Record>>;

    /// What the owner (or one trace of it) holds.
    async fn usage(&self, owner_key: &str, trace_id: Option<&str>) -> Result<Usage>;

    /// The owner's records (or one trace's), in eviction order.
    async fn eviction_order(&self, owner_key: &str, trace_id: Option<&str>, order: EvictOrder) -> Result<Vec<Record>>;

    /// Records matching `filter` with `seq > after`, not expired at `now`, oldest first.
    async fn list(&self, filter: &ListFilter, after: i64, now: i64, limit: usize) -> Result<Vec<Record>>;

    /// Records expired at `now`, of one owner or of all.
    async fn expired(&self, now: i64, owner_key: Option<&str>) -> Result<Vec<Record>>;

    /// Whether any record (of any owner, expired or not) uses the blob `sha256`.
    async fn sha_in_use(&self, sha256: &str) -> Result<bool>;

    /// Every record's blob, for gc.
    async fn blob_uses(&self) -> Result<Vec<BlobUse>>;
}
