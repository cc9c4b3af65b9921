//! The index: every owner's records, and the queries retention needs.
//!
//! An index knows nothing about bytes; [`crate::blobs`] knows nothing about owners. The engine
//! ([`crate::engine`]) combines one of each and holds all the policy, so a new backend pair
//! (say Postgres + S3) implements only these storage primitives.
//!
//! Records are keyed by `(owner_key, id)`, where the owner key is
//! [`stowage_core::Owner::access_key`] under the store's isolation; budgets select records by
//! their scope ids instead ([`Group`]), which stay on every record whatever the isolation.

mod memory;
// Only SharedStore uses it, and that needs the s3 blobs too.
#[cfg(all(feature = "postgres", feature = "s3"))]
mod postgres;
#[cfg(feature = "sqlite")]
mod sqlite;

pub(crate) use memory::MemoryIndex;
#[cfg(all(feature = "postgres", feature = "s3"))]
pub(crate) use postgres::{DEFAULT_SCHEMA as DEFAULT_PG_SCHEMA, PgIndex, PgOptions};
#[cfg(feature = "sqlite")]
pub(crate) use sqlite::SqliteIndex;

use std::collections::HashMap;

use async_trait::async_trait;
use stowage_core::{ArtifactId, ArtifactScope};

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

/// Bytes and records held by one budget's [`Group`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Usage {
    pub bytes: u64,
    pub count: u64,
}

/// How many of a scope's ids, in the order tenant, user, session, trace, a [`Group`] compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Level {
    Tenant = 1,
    User = 2,
    Session = 3,
    Trace = 4,
}

/// The records one budget covers: those whose scope has the same ids as `scope` up to `level`
/// (an unset id matches only unset ids). Nested: every trace lies in one session, every session
/// in one user, every user in one tenant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Group {
    pub level: Level,
    pub scope: ArtifactScope,
}

impl Group {
    /// The scope's ids this group compares, outermost first.
    pub(crate) fn ids(&self) -> impl Iterator<Item = &Option<String>> {
        let s = &self.scope;
        [&s.tenant_id, &s.user_id, &s.session_id, &s.trace_id].into_iter().take(self.level as usize)
    }

    pub(crate) fn contains(&self, r: &Record) -> bool {
        let theirs = [&r.scope.tenant_id, &r.scope.user_id, &r.scope.session_id, &r.scope.trace_id];
        self.ids().zip(theirs).all(|(mine, theirs)| mine == theirs)
    }
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

/// Held while the engine decides which records and blobs exist; dropping it releases the lock.
pub(crate) type DecisionLock = Box<dyn Send>;

#[async_trait]
pub(crate) trait Index: Send + Sync + 'static {
    /// What `/readyz` calls this index when it fails: `index` (embedded) or `database`.
    const DEPENDENCY: &'static str = "index";

    /// Takes the lock that serialises, across every process sharing this index, the decisions
    /// the engine's own mutex serialises within one: dedup, budget plans and eviction, publishing
    /// a blob and inserting its row, deleting a row and then its unused blob, gc. The engine
    /// takes its mutex first, so one process holds at most one of these at a time. An embedded
    /// index has no other writer to exclude (the default).
    async fn lock_decisions(&self) -> Result<DecisionLock> {
        Ok(Box::new(()))
    }

    /// Claims the right to run gc, without waiting: `None` when another process is sweeping,
    /// which then does this one's work too. Held for the whole sweep.
    async fn try_lock_sweeper(&self) -> Result<Option<DecisionLock>> {
        Ok(Some(Box::new(())))
    }

    /// Whether the index answers, for readiness checks: a trivial query.
    async fn ping(&self) -> Result<()> {
        let probe = ListFilter { owner_key: Some(String::new()), ..ListFilter::default() };
        self.list(&probe, 0, 0, 1).await.map(drop)
    }

    /// The owner's record of `id`, expired or not.
    async fn get(&self, owner_key: &str, id: &ArtifactId) -> Result<Option<Record>>;

    /// Every owner's record of `id` (operator access), oldest first.
    async fn get_all(&self, id: &ArtifactId) -> Result<Vec<Record>>;

    /// Inserts a record for a new (owner, id); returns it with its `seq` assigned.
    async fn insert(&self, record: Record) -> Result<Record>;

    /// Records a read for LRU order. An index may defer the write (SQLite batches them), but
    /// every later [`Index::eviction_order`] must see it.
    async fn record_access(&self, owner_key: &str, id: &ArtifactId, last_access: i64) -> Result<()>;

    /// Writes deferred accesses now (gc calls it, so that a store's state on disk is current).
    async fn flush_accesses(&self) -> Result<()> {
        Ok(())
    }

    /// Records an access and a new expiry at once (a re-put of the same bytes), immediately.
    async fn refresh(&self, owner_key: &str, id: &ArtifactId, last_access: i64, expires_at: i64) -> Result<()>;

    /// Removes the owner's record of `id`, returning it.
    async fn delete(&self, owner_key: &str, id: &ArtifactId) -> Result<Option<Record>>;

    /// What the group holds, expired records included (the engine purges them first).
    async fn usage(&self, group: &Group) -> Result<Usage>;

    /// The group's records in eviction order. Least-recently-used order counts every access
    /// recorded so far, deferred or not.
    async fn eviction_order(&self, group: &Group, order: EvictOrder) -> Result<Vec<Record>>;

    /// Records matching `filter` with `seq > after`, not expired at `now`, oldest first.
    async fn list(&self, filter: &ListFilter, after: i64, now: i64, limit: usize) -> Result<Vec<Record>>;

    /// Records expired at `now`, of one group or of all.
    async fn expired(&self, now: i64, group: Option<&Group>) -> Result<Vec<Record>>;

    /// Whether any record (of any owner, expired or not) uses the blob `sha256`.
    async fn sha_in_use(&self, sha256: &str) -> Result<bool>;

    /// Every record's blob, for gc.
    async fn blob_uses(&self) -> Result<Vec<BlobUse>>;

    /// Blobs gc found missing (or the wrong size), with when it first did (unix nanoseconds):
    /// a record is dropped as dangling only when its blob is still missing on a later sweep.
    async fn missing_blobs(&self) -> Result<HashMap<String, i64>>;

    /// Records `found` as missing since `at` (those already recorded keep their time) and
    /// forgets `cleared` (present again, or no longer used by any record).
    async fn note_missing_blobs(&self, found: &[String], at: i64, cleared: &[String]) -> Result<()>;
}
