//! The store logic every backend shares: ids, dedup, owner isolation, expiry, budgets and
//! eviction, crash repair. Written once, generic over an [`Index`] and a [`Blobs`].
//!
//! Access: a record is keyed by its owner's [`Owner::access_key`] under the store's
//! [`Isolation`] — (tenant, user) by default, (tenant, user, session) when sessions are
//! isolated — so the key decides both who can see a record and what counts as "the same owner
//! storing the same bytes again" (dedup). Budgets are independent of the isolation: they group
//! records by the scope ids every record keeps ([`Group`]): per trace, session, user and tenant.
//!
//! Concurrency: staging (writing and hashing the bytes) runs without any lock, so puts proceed
//! in parallel. Everything that decides which records and blobs exist — dedup, eviction,
//! publishing a blob, inserting its row, deleting a row and then its blob if unreferenced,
//! gc — runs under one async mutex, so a put of some bytes can never lose its blob to a
//! concurrent delete of the same bytes by another owner. Reads take no lock; a read racing
//! a delete either sees the artifact or fails. An index shared by several processes
//! (PostgreSQL) extends that mutex across them with [`Index::lock_decisions`], taken right
//! after it, so the same holds for instances sharing one database and bucket.

use std::collections::{HashMap, HashSet};
use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use stowage_core::{ArtifactId, ArtifactRef, ArtifactScope, Isolation, Owner, PutOptions, StoreError};

use crate::blobs::{BlobInfo, Blobs, BoxReader, Limit, Staged, check_range};
use crate::clock::Clock;
use crate::failpoint::{Failpoints, PutStep};
use crate::index::{BlobUse, EvictOrder, Group, Index, Level, ListFilter, Usage};
use crate::record::{Record, floor_secs, to_nanos};
use crate::{
    Access, ArtifactReader, ArtifactStore, CleanupStrategy, GcOptions, GcReport, ListPage, ListQuery, NotReady, Result, RetentionConfig,
};

/// Page size when [`ListQuery::limit`] is 0, and the largest page served.
pub(crate) const DEFAULT_LIST_LIMIT: usize = 100;
const MAX_LIST_LIMIT: usize = 1000;

pub(crate) struct Engine<I, B> {
    index: I,
    /// Shared with the readiness probe's task.
    blobs: Arc<B>,
    config: RetentionConfig,
    clock: Arc<dyn Clock>,
    failpoints: Failpoints,
    /// Serialises the decisions about which records and blobs exist (see the module docs).
    lock: tokio::sync::Mutex<()>,
    /// The last LRU tick handed out: ticks are the clock in nanoseconds, forced to increase
    /// strictly so that two accesses within one clock reading are still ordered.
    last_tick: AtomicI64,
    isolation: Isolation,
    /// How long gc waits before believing a blob is gone (see [`Engine::dangling`]).
    grace: Duration,
    /// The write probe's state (see `ready`), and a count of probes done, to wait on.
    probe: Arc<std::sync::Mutex<ProbeState>>,
    probe_done: Arc<tokio::sync::watch::Sender<u64>>,
}

/// How an engine is set up besides its index and blobs.
pub(crate) struct Settings {
    pub config: RetentionConfig,
    pub clock: Arc<dyn Clock>,
    pub failpoints: Failpoints,
    pub isolation: Isolation,
    /// The largest LRU tick the index holds.
    pub last_tick: i64,
    /// How long gc waits before dropping records whose blob is missing: two sweeps at least
    /// this far apart must find it missing.
    pub grace: Duration,
}

impl<I: Index, B: Blobs> Engine<I, B> {
    pub(crate) fn new(index: I, blobs: B, settings: Settings) -> Self {
        let Settings { config, clock, failpoints, isolation, last_tick, grace } = settings;
        Engine {
            index,
            blobs: Arc::new(blobs),
            config,
            clock,
            failpoints,
            lock: tokio::sync::Mutex::new(()),
            last_tick: AtomicI64::new(last_tick),
            isolation,
            grace,
            probe: Arc::default(),
            probe_done: Arc::new(tokio::sync::watch::Sender::new(0)),
        }
    }

    pub(crate) fn config(&self) -> &RetentionConfig {
        &self.config
    }

    pub(crate) fn isolation(&self) -> Isolation {
        self.isolation
    }

    #[cfg_attr(not(all(feature = "postgres", feature = "s3")), allow(dead_code))]
    pub(crate) fn blobs(&self) -> &B {
        &self.blobs
    }

    /// The record behind a presigned URL: the same access and expiry checks as a read, and it
    /// counts as one for LRU.
    #[cfg_attr(not(all(feature = "postgres", feature = "s3")), allow(dead_code))]
    pub(crate) async fn resolve_for_presign(&self, access: &Access, id: &ArtifactId) -> Result<Record> {
        self.resolve_and_touch(access, id).await
    }

    fn key(&self, owner: &Owner) -> String {
        owner.access_key(self.isolation)
    }

    fn now(&self) -> i64 {
        to_nanos(self.clock.now())
    }

    fn tick(&self, now: i64) -> i64 {
        let prev = self
            .last_tick
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |prev| Some(now.max(prev.saturating_add(1))))
            .unwrap_or_else(|p| p);
        now.max(prev.saturating_add(1))
    }

    /// Every budget a put into `scope` must fit, innermost first: its trace (when it has
    /// one), its session, its user, its tenant.
    fn budgets(&self, scope: &ArtifactScope) -> Vec<Budget> {
        let c = &self.config;
        let group = |level| Group { level, scope: scope.clone() };
        let mut budgets = Vec::with_capacity(4);
        if let Some(trace) = &scope.trace_id {
            budgets.push(Budget {
                name: format!("trace {trace}"),
                group: group(Level::Trace),
                max_bytes: ("max_trace_bytes", c.max_trace_bytes),
                max_count: Some(("max_artifacts_per_trace", c.max_artifacts_per_trace)),
            });
        }
        budgets.push(Budget {
            name: budget_name("session", &scope.session_id),
            group: group(Level::Session),
            max_bytes: ("max_session_bytes", c.max_session_bytes),
            max_count: Some(("max_artifacts_per_session", c.max_artifacts_per_session)),
        });
        budgets.push(Budget {
            name: budget_name("user", &scope.user_id),
            group: group(Level::User),
            max_bytes: ("max_user_bytes", c.max_user_bytes),
            max_count: None,
        });
        budgets.push(Budget {
            name: budget_name("tenant", &scope.tenant_id),
            group: group(Level::Tenant),
            max_bytes: ("max_tenant_bytes", c.max_tenant_bytes),
            max_count: None,
        });
        budgets
    }

    /// The byte limits a put into `scope` is subject to: the artifact's own, then its budgets'
    /// innermost first (the order in which errors name the first one exceeded).
    fn byte_limits(&self, budgets: &[Budget]) -> impl Iterator<Item = Limit> {
        std::iter::once(("max_artifact_bytes", self.config.max_artifact_bytes)).chain(budgets.iter().map(|b| b.max_bytes))
    }

    /// Limits that can be judged from the size alone, before any byte is written.
    fn check_size(&self, size: u64, scope: &ArtifactScope) -> Result<()> {
        let budgets = self.budgets(scope);
        if let Some((limit_name, limit)) = self.byte_limits(&budgets).find(|&(_, limit)| size > limit) {
            return Err(StoreError::TooLarge { what: "artifact".into(), size, limit, limit_name });
        }
        for b in budgets {
            if let Some((name, 0)) = b.max_count {
                return Err(StoreError::QuotaExceeded { budget: b.name, detail: format!("{name} is 0") });
            }
        }
        Ok(())
    }

    /// The smallest byte limit a put into `scope` is subject to, so a stream is refused as soon
    /// as it passes it.
    fn stream_limit(&self, scope: &ArtifactScope) -> Limit {
        self.byte_limits(&self.budgets(scope)).min_by_key(|&(_, limit)| limit).expect("max_artifact_bytes always applies")
    }

    /// Removes the record and, if it was the blob's last user, the blob. Lock held.
    async fn remove_record(&self, owner_key: &str, id: &ArtifactId) -> Result<(Option<Record>, u64)> {
        let Some(rec) = self.index.delete(owner_key, id).await? else { return Ok((None, 0)) };
        let freed = self.release_blob(&rec.sha256).await?;
        Ok((Some(rec), freed))
    }

    /// Deletes the blob if no record uses it any more. Lock held.
    async fn release_blob(&self, sha256: &str) -> Result<u64> {
        if self.index.sha_in_use(sha256).await? { Ok(0) } else { self.blobs.delete(sha256).await }
    }

    /// Removes expired records (of one group, or all) and their unused blobs. Lock held.
    async fn purge_expired(&self, now: i64, group: Option<&Group>) -> Result<(u64, u64)> {
        let (mut records, mut freed) = (0, 0);
        for rec in self.index.expired(now, group).await? {
            let (removed, f) = self.remove_record(&rec.owner_key, &rec.id).await?;
            records += u64::from(removed.is_some());
            freed += f;
        }
        Ok((records, freed))
    }

    /// Chooses the records to evict so that a put of `size` bytes fits one budget, after
    /// `chosen` (already picked for another budget) are gone. Lock held.
    async fn plan_eviction(&self, budget: &Budget, size: u64, chosen: &[Record]) -> Result<Vec<Record>> {
        let usage = self.index.usage(&budget.group).await?;
        let mut bytes = usage.bytes;
        let mut count = usage.count;
        for r in chosen.iter().filter(|r| budget.group.contains(r)) {
            bytes = bytes.saturating_sub(r.size);
            count = count.saturating_sub(1);
        }
        let fits = |bytes: u64, count: u64| {
            bytes.saturating_add(size) <= budget.max_bytes.1 && budget.max_count.is_none_or(|(_, max)| count < max)
        };
        if fits(bytes, count) {
            return Ok(Vec::new());
        }
        let order = match self.config.cleanup_strategy {
            CleanupStrategy::Lru => EvictOrder::LeastRecentlyUsed,
            CleanupStrategy::Fifo => EvictOrder::OldestFirst,
            CleanupStrategy::None => return Err(budget.full(Usage { bytes, count }, size, "cleanup_strategy is none")),
        };
        let mut victims = Vec::new();
        for r in self.index.eviction_order(&budget.group, order).await? {
            if fits(bytes, count) {
                break;
            }
            if chosen.iter().any(|c| c.seq == r.seq) {
                continue;
            }
            bytes = bytes.saturating_sub(r.size);
            count = count.saturating_sub(1);
            victims.push(r);
        }
        if !fits(bytes, count) {
            return Err(budget.full(Usage { bytes, count }, size, "evicting everything else would not be enough"));
        }
        Ok(victims)
    }

    /// Publishes a staged put: dedup, budgets, blob, then the index row — in that order, so a
    /// crash before the row leaves nothing visible.
    async fn put_staged(&self, staged: Staged<B::Pending>, opts: PutOptions) -> Result<ArtifactRef> {
        let complete = staged.head.len() as u64 == staged.size;
        let mime = crate::mime::media_type(opts.mime_type.as_deref(), &staged.head, complete);
        let id = ArtifactId::from_content(opts.namespace.as_deref(), &staged.sha256);
        let owner_key = self.key(&opts.scope.owner());
        let ttl = opts.ttl.unwrap_or(self.config.ttl);

        let _guard = self.lock.lock().await;
        let _shared = self.index.lock_decisions().await?;
        let now = self.now();
        let tick = self.tick(now);
        let expires_at = floor_secs(now.saturating_add(duration_nanos(ttl)));
        // Expired records are invisible: they must not count against budgets nor be "found"
        // by the dedup below. The tenant holds every budget this put is subject to (and the
        // owner's own records).
        self.purge_expired(now, Some(&Group { level: Level::Tenant, scope: opts.scope.clone() })).await?;

        if let Some(existing) = self.index.get(&owner_key, &id).await? {
            if existing.sha256 != staged.sha256 {
                return Err(StoreError::IdCollision { id, existing: existing.sha256, incoming: staged.sha256 });
            }
            // Same bytes, same owner (under user isolation: another session of the same user):
            // one record, whose scope stays that of its first put. Refresh it rather than count
            // it twice; and if its blob went missing, this put's bytes repair it.
            if self.blobs.size(&staged.sha256).await? != Some(staged.size) {
                let receipt = self.blobs.commit(staged).await?;
                self.blobs.recorded(receipt);
            } else {
                self.blobs.already_recorded(staged);
            }
            let expires_at = existing.expires_at.map_or(expires_at, |e| e.max(expires_at));
            self.index.refresh(&owner_key, &id, tick, expires_at).await?;
            return Ok(Record { last_access: tick, expires_at: Some(expires_at), ..existing }.to_ref());
        }

        // Innermost budget first, each counting what the ones before chose to evict. Nothing
        // is removed until every budget has a plan, so a refusal leaves everything in place.
        let mut victims = Vec::new();
        for budget in self.budgets(&opts.scope) {
            let more = self.plan_eviction(&budget, staged.size, &victims).await?;
            victims.extend(more);
        }
        for v in &victims {
            self.remove_record(&v.owner_key, &v.id).await?;
        }
        if !victims.is_empty() {
            tracing::debug!(evicted = victims.len(), strategy = ?self.config.cleanup_strategy, "evicted artifacts to fit a put");
        }

        let (sha256, size) = (staged.sha256.clone(), staged.size);
        let receipt = self.blobs.commit(staged).await?;
        self.failpoints.check(PutStep::BeforeIndexInsert).map_err(|c| StoreError::backend("put", id.to_string(), c))?;
        let record = Record {
            seq: 0,
            owner_key,
            id,
            sha256: sha256.clone(),
            size,
            scope: opts.scope,
            mime_type: Some(mime),
            filename: opts.filename,
            source: opts.source,
            created_at: floor_secs(now),
            expires_at: Some(expires_at),
            last_access: tick,
        };
        match self.index.insert(record).await {
            Ok(record) => {
                self.blobs.recorded(receipt);
                Ok(record.to_ref())
            }
            Err(e) => {
                // The blob is unreachable without its row; remove it now if nothing else uses
                // it (gc would otherwise, later). The insert's error is the one to report.
                if let Err(cleanup) = self.release_blob(&sha256).await {
                    tracing::warn!(error = %cleanup, "could not remove the blob of a failed put");
                }
                Err(e)
            }
        }
    }

    /// The record `access` may see under `id`, refusing expired ones.
    async fn resolve(&self, access: &Access, id: &ArtifactId) -> Result<Record> {
        let now = self.now();
        let found = match access {
            Access::Owner(owner) => self.index.get(&self.key(owner), id).await?,
            // The same id under several owners names the same bytes; any unexpired one will do.
            Access::Operator => {
                let all = self.index.get_all(id).await?;
                let live = all.iter().find(|r| !r.is_expired(now)).cloned();
                live.or_else(|| all.into_iter().next())
            }
        };
        let rec = found.ok_or_else(|| StoreError::NotFound { id: id.clone() })?;
        if rec.is_expired(now) {
            return Err(StoreError::Expired { id: id.clone(), expired_at: rec.expired_at_string() });
        }
        Ok(rec)
    }

    /// [`Self::resolve`], then records the access for LRU (the index may defer writing it).
    async fn resolve_and_touch(&self, access: &Access, id: &ArtifactId) -> Result<Record> {
        let mut rec = self.resolve(access, id).await?;
        rec.last_access = self.tick(self.now());
        self.index.record_access(&rec.owner_key, &rec.id, rec.last_access).await?;
        Ok(rec)
    }
}

/// One budget a put must fit: a byte limit, and for traces and sessions a count limit, over the
/// records of one group.
struct Budget {
    name: String,
    group: Group,
    max_bytes: Limit,
    max_count: Option<Limit>,
}

impl Budget {
    fn full(&self, usage: Usage, size: u64, why: &str) -> StoreError {
        let (bytes_name, max_bytes) = self.max_bytes;
        let count = self.max_count.map(|(name, max)| format!(" and {name} = {max}")).unwrap_or_default();
        StoreError::QuotaExceeded {
            budget: self.name.clone(),
            detail: format!(
                "it holds {} bytes in {} artifacts and a put of {size} bytes must stay within {bytes_name} = {max_bytes}{count}; {why}",
                usage.bytes, usage.count
            ),
        }
    }
}

/// What a budget is called in errors: `session s1`, or for a scope without that id the budget
/// everything stored without one shares (within the enclosing user and tenant).
fn budget_name(kind: &str, id: &Option<String>) -> String {
    match id {
        Some(id) => format!("{kind} {id}"),
        None => format!("the {kind}-less budget"),
    }
}

fn duration_nanos(d: Duration) -> i64 {
    i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)
}

fn encode_cursor(seq: i64) -> String {
    format!("c{seq:x}")
}

fn decode_cursor(cursor: &str) -> Result<i64> {
    cursor
        .strip_prefix('c')
        .and_then(|hex| i64::from_str_radix(hex, 16).ok())
        .ok_or_else(|| StoreError::InvalidInput(format!("list cursor {cursor:?} is not one this store issued")))
}

#[async_trait]
impl<I: Index, B: Blobs> ArtifactStore for Engine<I, B> {
    async fn put_bytes(&self, data: Bytes, opts: PutOptions) -> Result<ArtifactRef> {
        self.check_size(data.len() as u64, &opts.scope)?;
        let staged = self.blobs.stage_bytes(data).await?;
        self.failpoints.check(PutStep::Staged).map_err(|c| StoreError::backend("put", staged.sha256.clone(), c))?;
        self.put_staged(staged, opts).await
    }

    async fn put_stream(&self, reader: BoxReader, opts: PutOptions) -> Result<ArtifactRef> {
        self.check_size(0, &opts.scope)?;
        let staged = self.blobs.stage_stream(reader, self.stream_limit(&opts.scope)).await?;
        self.failpoints.check(PutStep::Staged).map_err(|c| StoreError::backend("put", staged.sha256.clone(), c))?;
        self.check_size(staged.size, &opts.scope)?;
        self.put_staged(staged, opts).await
    }

    async fn get(&self, access: &Access, id: &ArtifactId) -> Result<Bytes> {
        let rec = self.resolve_and_touch(access, id).await?;
        self.blobs.read(&rec.sha256, 0..rec.size).await
    }

    async fn get_range(&self, access: &Access, id: &ArtifactId, range: Range<u64>) -> Result<Bytes> {
        let rec = self.resolve_and_touch(access, id).await?;
        check_range(&range, rec.size)?;
        self.blobs.read(&rec.sha256, range).await
    }

    async fn open(&self, access: &Access, id: &ArtifactId, range: Option<Range<u64>>) -> Result<ArtifactReader> {
        let rec = self.resolve_and_touch(access, id).await?;
        let range = range.unwrap_or(0..rec.size);
        check_range(&range, rec.size)?;
        let body = self.blobs.open(&rec.sha256, range.clone()).await?;
        Ok(ArtifactReader { meta: rec.to_ref(), range, body })
    }

    async fn meta(&self, access: &Access, id: &ArtifactId) -> Result<ArtifactRef> {
        Ok(self.resolve_and_touch(access, id).await?.to_ref())
    }

    async fn owners(&self, id: &ArtifactId) -> Result<Vec<Owner>> {
        let now = self.now();
        Ok(self.index.get_all(id).await?.into_iter().filter(|r| !r.is_expired(now)).map(|r| r.scope.owner()).collect())
    }

    async fn exists(&self, access: &Access, id: &ArtifactId) -> Result<bool> {
        match self.resolve(access, id).await {
            Ok(_) => Ok(true),
            Err(StoreError::NotFound { .. } | StoreError::Expired { .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    async fn delete(&self, access: &Access, id: &ArtifactId) -> Result<bool> {
        let owners: Vec<String> = match access {
            Access::Owner(o) => vec![self.key(o)],
            Access::Operator => self.index.get_all(id).await?.into_iter().map(|r| r.owner_key).collect(),
        };
        let _guard = self.lock.lock().await;
        let _shared = self.index.lock_decisions().await?;
        let now = self.now();
        let mut deleted = false;
        for owner_key in owners {
            // An expired record is removed too, but reported like a missing one: it was
            // already invisible.
            if let (Some(rec), _) = self.remove_record(&owner_key, id).await? {
                deleted |= !rec.is_expired(now);
            }
        }
        Ok(deleted)
    }

    async fn list(&self, query: ListQuery) -> Result<ListPage> {
        let limit = match query.limit {
            0 => DEFAULT_LIST_LIMIT,
            n => n.min(MAX_LIST_LIMIT),
        };
        let after = query.cursor.as_deref().map(decode_cursor).transpose()?.unwrap_or(0);
        let filter =
            ListFilter { owner_key: query.owner.as_ref().map(|o| self.key(o)), session_id: query.session_id, trace_id: query.trace_id };
        let mut records = self.index.list(&filter, after, self.now(), limit + 1).await?;
        let next = if records.len() > limit {
            records.truncate(limit);
            records.last().map(|r| encode_cursor(r.seq))
        } else {
            None
        };
        Ok(ListPage { items: records.iter().map(Record::to_ref).collect(), next })
    }

    async fn ready(&self) -> std::result::Result<(), NotReady> {
        // A round trip to the index on every probe (cheap), with a deadline.
        match tokio::time::timeout(READY_TIMEOUT, self.index.ping()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                return Err(NotReady { dependency: I::DEPENDENCY, reason: "unreachable or failing".into(), detail: e.to_string() });
            }
            Err(_) => return Err(not_ready_timeout(I::DEPENDENCY, READY_TIMEOUT)),
        }
        // A write to the blob storage, at most one at a time and once per PROBE_TTL: probes
        // stay cheap, and a burst of them shares one write. The write runs on its own, so a
        // slow but healthy bucket (seconds per request, as puts still succeed) never makes a
        // readiness check wait for it: while it runs, the last success answers, for as long
        // as a put would wait for the bucket (PROBE_PATIENCE).
        let mut changed = {
            let mut st = lock(&self.probe);
            if let Some((at, outcome)) = &st.last
                && at.elapsed() < PROBE_TTL
            {
                return outcome.clone();
            }
            let running_for = match st.running_since {
                Some(since) => since.elapsed(),
                None => {
                    st.running_since = Some(std::time::Instant::now());
                    self.spawn_write_probe();
                    Duration::ZERO
                }
            };
            if running_for >= PROBE_PATIENCE {
                return Err(not_ready_timeout(B::DEPENDENCY, PROBE_PATIENCE));
            }
            if matches!(st.last, Some((_, Ok(())))) {
                return Ok(());
            }
            // Nothing proven yet, or the last write failed: this check waits for the write.
            self.probe_done.subscribe()
        };
        match tokio::time::timeout(READY_TIMEOUT, changed.changed()).await {
            Ok(Ok(())) => lock(&self.probe).last.as_ref().map_or(Err(not_ready_timeout(B::DEPENDENCY, READY_TIMEOUT)), |(_, o)| o.clone()),
            _ => Err(not_ready_timeout(B::DEPENDENCY, READY_TIMEOUT)),
        }
    }

    async fn gc(&self) -> Result<GcReport> {
        self.gc_with(GcOptions::default()).await
    }

    async fn gc_with(&self, opts: GcOptions) -> Result<GcReport> {
        // One sweeper at a time over a shared index: another process already sweeping does
        // this one's work, so waiting for it would only repeat the sweep.
        let Some(_sweeper) = self.index.try_lock_sweeper().await? else {
            tracing::debug!("gc: another instance is sweeping the shared store; skipped");
            return Ok(GcReport { skipped: true, ..GcReport::default() });
        };
        // Nothing is judged missing or unreferenced at a location that is not this store's.
        self.blobs.verify_location().await?;
        let mut report = GcReport::default();
        // Blobs of puts that never recorded them (this instance's failed puts, and every put
        // of an instance that is gone): takes the decision lock itself.
        report.bytes_freed += self.blobs.settle_publishes().await?;

        let _guard = self.lock.lock().await;
        let _shared = self.index.lock_decisions().await?;
        self.index.flush_accesses().await?;
        let now = self.now();
        let (expired, freed) = self.purge_expired(now, None).await?;
        report.expired_records = expired;
        report.bytes_freed += freed;

        let blobs: Vec<BlobInfo> = self.blobs.list().await?;
        let sizes: HashMap<&str, u64> = blobs.iter().map(|b| (b.sha256.as_str(), b.size)).collect();
        let uses = self.index.blob_uses().await?;
        let dangling = self.dangling(&uses, &sizes, now, opts, &mut report).await?;
        let mut referenced = HashSet::new();
        for u in uses {
            if dangling.contains(&u.sha256) {
                tracing::warn!(id = %u.id, sha256 = %u.sha256, "gc: removing a record whose blob is missing or the wrong size");
                self.index.delete(&u.owner_key, &u.id).await?;
                report.dangling_records += 1;
            } else {
                referenced.insert(u.sha256);
            }
        }
        // Blobs nobody references: a crash between publishing a blob and inserting its row
        // (of a version before the publishing journal), or a blob of the wrong size whose rows
        // were just dropped.
        for b in blobs.iter().filter(|b| !referenced.contains(&b.sha256) && !b.recent) {
            report.bytes_freed += self.blobs.delete(&b.sha256).await?;
            report.orphan_blobs += 1;
        }
        let temp = self.blobs.clean_temp().await?;
        report.temp_files = temp.found;
        report.temp_bytes = temp.found_bytes;
        report.temp_files_removed = temp.removed;
        report.temp_bytes_removed = temp.removed_bytes;
        Ok(report)
    }
}

impl<I: Index, B: Blobs> Engine<I, B> {
    /// Which blobs' records gc drops as dangling this sweep. Lock held.
    ///
    /// A record whose blob is missing (or the wrong size) may be a real loss, or a location
    /// that is not the store's (a wrong prefix, an emptied or replaced bucket, a listing that
    /// came back short): dropping it is permanent, so gc is slow to do it. A blob must be
    /// missing on two sweeps at least the grace period apart, and checked once more by itself
    /// (a HEAD, not the listing) before its records go; a sweep that would drop more than
    /// [`DANGLING_MAX_SHARE`](crate::DANGLING_MAX_SHARE) of the index (and more than one record) drops none and says so.
    /// The operator's [`GcOptions::drop_dangling`] skips the waiting and the share, not the
    /// direct check.
    async fn dangling(
        &self,
        uses: &[BlobUse],
        sizes: &HashMap<&str, u64>,
        now: i64,
        opts: GcOptions,
        report: &mut GcReport,
    ) -> Result<HashSet<String>> {
        let mut missing: HashMap<&str, u64> = HashMap::new();
        for u in uses.iter().filter(|u| sizes.get(u.sha256.as_str()) != Some(&u.size)) {
            missing.insert(u.sha256.as_str(), u.size);
        }
        let known = self.index.missing_blobs().await?;
        let cleared: Vec<String> = known.keys().filter(|sha| !missing.contains_key(sha.as_str())).cloned().collect();
        let first_seen: Vec<String> = missing.keys().filter(|sha| !known.contains_key(**sha)).map(|s| (*s).to_owned()).collect();
        self.index.note_missing_blobs(&first_seen, now, &cleared).await?;

        let confirm_after = duration_nanos(self.grace);
        let due: Vec<(&str, u64)> = missing
            .iter()
            .filter(|(sha, _)| opts.drop_dangling || known.get(**sha).is_some_and(|&since| now.saturating_sub(since) >= confirm_after))
            .map(|(sha, size)| (*sha, *size))
            .collect();
        let records = |shas: &dyn Fn(&str) -> bool| uses.iter().filter(|u| shas(&u.sha256)).count() as u64;
        let due_set: HashSet<&str> = due.iter().map(|(sha, _)| *sha).collect();
        let due_records = records(&|s| due_set.contains(s));
        let allowed = ((uses.len() as f64) * crate::DANGLING_MAX_SHARE).floor().max(1.0) as u64;
        // Judged before any blob is looked at again: an emptied bucket must not cost a HEAD per
        // record under the fleet's lock.
        if due_records > allowed && !opts.drop_dangling {
            tracing::error!(
                records = due_records,
                of = uses.len(),
                "gc: the blobs of {due_records} of {} records are missing; that is more than gc drops on its own, so it drops none: check that [store] bucket, prefix and endpoint are this store's; if the blobs are really gone, run stowage artifacts gc --drop-dangling",
                uses.len()
            );
            report.dangling_held = due_records;
            report.dangling_suspected = records(&|s| missing.contains_key(s)) - due_records;
            return Ok(HashSet::new());
        }
        let mut confirmed = HashSet::new();
        for (sha, size) in due {
            // The second look is the blob's own, not the listing's.
            if self.blobs.size(sha).await? != Some(size) {
                confirmed.insert(sha.to_owned());
            }
        }
        report.dangling_suspected = records(&|s| missing.contains_key(s) && !confirmed.contains(s));
        if !confirmed.is_empty() {
            self.index.note_missing_blobs(&[], now, &confirmed.iter().cloned().collect::<Vec<_>>()).await?;
        }
        Ok(confirmed)
    }
}

/// How long the readiness check waits for the index, and for a write probe when no earlier
/// one succeeded.
pub(crate) const READY_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a write probe's outcome answers readiness checks.
pub(crate) const PROBE_TTL: Duration = Duration::from_secs(3);
/// How long a write probe may run before the storage counts as not ready: as long as a put
/// waits for one call to the bucket (`blobs::object::CALL_TIMEOUT`).
pub(crate) const PROBE_PATIENCE: Duration = Duration::from_secs(10);

fn not_ready_timeout(dependency: &'static str, waited: Duration) -> NotReady {
    let secs = waited.as_secs();
    NotReady { dependency, reason: "timed out".into(), detail: format!("{dependency}: no answer within {secs}s") }
}

/// The write probe: the last outcome, and since when the one running now has run.
#[derive(Default)]
struct ProbeState {
    last: Option<(std::time::Instant, std::result::Result<(), NotReady>)>,
    running_since: Option<std::time::Instant>,
}

fn lock(state: &std::sync::Mutex<ProbeState>) -> std::sync::MutexGuard<'_, ProbeState> {
    state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl<I: Index, B: Blobs> Engine<I, B> {
    /// Runs one write probe on its own task; its outcome lands in `probe` and wakes whoever
    /// waits for it.
    fn spawn_write_probe(&self) {
        let (blobs, state, done) = (self.blobs.clone(), self.probe.clone(), self.probe_done.clone());
        tokio::spawn(async move {
            let outcome = match tokio::time::timeout(PROBE_PATIENCE * 2, blobs.probe_write()).await {
                Ok(Ok(())) => Ok(()),
                Ok(Err((reason, e))) => Err(NotReady { dependency: B::DEPENDENCY, reason, detail: e.to_string() }),
                Err(_) => Err(not_ready_timeout(B::DEPENDENCY, PROBE_PATIENCE * 2)),
            };
            {
                let mut st = lock(&state);
                st.last = Some((std::time::Instant::now(), outcome));
                st.running_since = None;
            }
            done.send_modify(|n| *n += 1);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::blobs::{MemoryBlobs, sha256_hex};
    use crate::clock::ManualClock;
    use crate::index::MemoryIndex;

    fn engine(config: RetentionConfig) -> Engine<MemoryIndex, MemoryBlobs> {
        let settings = Settings {
            config,
            clock: Arc::new(ManualClock::fixed()),
            failpoints: Failpoints::default(),
            isolation: Isolation::User,
            last_tick: 0,
            grace: Duration::ZERO,
        };
        Engine::new(MemoryIndex::default(), MemoryBlobs::default(), settings)
    }

    #[tokio::test]
    async fn an_id_naming_different_content_is_a_collision_not_an_alias() {
        let e = engine(RetentionConfig::default());
        let scope = ArtifactScope::session("s");
        let data = Bytes::from_static(b"incoming");
        let id = ArtifactId::from_content(None, &sha256_hex(&data));
        // Forge a record under the same id with another digest, as a 64-bit prefix
        // collision would produce.
        let other_sha = sha256_hex(b"something else");
        let forged = Record {
            seq: 0,
            owner_key: e.key(&scope.owner()),
            id: id.clone(),
            sha256: other_sha.clone(),
            size: 14,
            scope: scope.clone(),
            mime_type: None,
            filename: None,
            source: Default::default(),
            created_at: 0,
            expires_at: None,
            last_access: 0,
        };
        e.index.insert(forged).await.unwrap();
        let err = e.put_bytes(data, PutOptions::scoped(scope.clone())).await.unwrap_err();
        match err {
            StoreError::IdCollision { id: got, existing, incoming } => {
                assert_eq!((got, existing, incoming), (id, other_sha, sha256_hex(b"incoming")));
            }
            other => panic!("want IdCollision, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn a_re_put_restores_a_missing_blob() {
        let e = engine(RetentionConfig::default());
        let scope = ArtifactScope::session("s");
        let r = e.put_bytes(Bytes::from_static(b"bytes"), PutOptions::scoped(scope.clone())).await.unwrap();
        e.blobs.delete(&r.sha256).await.unwrap();
        assert!(e.get(&Access::owner_of(&scope), &r.id).await.is_err());
        e.put_bytes(Bytes::from_static(b"bytes"), PutOptions::scoped(scope.clone())).await.unwrap();
        assert_eq!(&e.get(&Access::owner_of(&scope), &r.id).await.unwrap()[..], b"bytes");
    }

    #[tokio::test]
    async fn without_a_session_id_the_budget_covers_the_whole_owner() {
        let config = RetentionConfig { max_artifacts_per_session: 1, cleanup_strategy: CleanupStrategy::None, ..Default::default() };
        let e = engine(config);
        let tenant_only = ArtifactScope::default().with_tenant("t");
        e.put_bytes(Bytes::from_static(b"one"), PutOptions::scoped(tenant_only.clone())).await.unwrap();
        let err = e.put_bytes(Bytes::from_static(b"two"), PutOptions::scoped(tenant_only)).await.unwrap_err();
        assert!(err.to_string().starts_with("the session-less budget is full:"), "{err}");
        // Another owner has its own budget.
        e.put_bytes(Bytes::from_static(b"two"), PutOptions::scoped(ArtifactScope::session("s"))).await.unwrap();
    }

    #[tokio::test]
    async fn a_missing_blob_drops_its_records_on_the_second_sighting_within_the_share() {
        let e = engine(RetentionConfig::default());
        let mut shas = Vec::new();
        for i in 0..40u8 {
            let scope = ArtifactScope::session(format!("s{}", i % 3));
            shas.push(e.put_bytes(Bytes::from(vec![i; 10]), PutOptions::scoped(scope)).await.unwrap().sha256);
        }
        e.blobs.delete(&shas[0]).await.unwrap();
        let first = e.gc().await.unwrap();
        assert_eq!((first.dangling_records, first.dangling_suspected, first.dangling_held), (0, 1, 0), "{first:?}");
        let second = e.gc().await.unwrap();
        assert_eq!((second.dangling_records, second.dangling_suspected), (1, 0), "{second:?}");
        // Five of 39 is over 5%: noted, then held, never dropped without the operator.
        for sha in &shas[1..6] {
            e.blobs.delete(sha).await.unwrap();
        }
        assert_eq!(e.gc().await.unwrap().dangling_suspected, 5);
        let held = e.gc().await.unwrap();
        assert_eq!((held.dangling_records, held.dangling_held), (0, 5), "{held:?}");
        let forced = e.gc_with(GcOptions::drop_dangling()).await.unwrap();
        assert_eq!(forced.dangling_records, 5, "{forced:?}");
        assert_eq!(e.index.blob_uses().await.unwrap().len(), 34);
    }

    #[test]
    fn ticks_increase_even_when_the_clock_does_not() {
        let e = engine(RetentionConfig::default());
        let now = e.now();
        let a = e.tick(now);
        let b = e.tick(now);
        let c = e.tick(now - 1_000);
        assert!(a >= now && b > a && c > b, "{a} {b} {c}");
    }

    #[test]
    fn cursors_round_trip_and_refuse_garbage() {
        assert_eq!(decode_cursor(&encode_cursor(12345)).unwrap(), 12345);
        for bad in ["", "c", "x10", "czz"] {
            assert!(matches!(decode_cursor(bad), Err(StoreError::InvalidInput(_))), "{bad:?}");
        }
    }
}
