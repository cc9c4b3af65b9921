//! An index held in memory: a map from insertion order to record, plus a key lookup.
//!
//! Queries scan; that is fine for the sizes a memory store holds (it lives as long as the
//! process and is bounded by the retention limits).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard};

use async_trait::async_trait;
use stowage_core::ArtifactId;

use super::{BlobUse, EvictOrder, Group, Index, ListFilter, Usage};
use crate::Result;
use crate::record::Record;

#[derive(Debug, Default)]
pub(crate) struct MemoryIndex {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    next_seq: i64,
    by_seq: BTreeMap<i64, Record>,
    by_key: HashMap<(String, ArtifactId), i64>,
    missing: HashMap<String, i64>,
}

impl MemoryIndex {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock cannot leave the maps inconsistent (every mutation is
        // a single insert/remove pair), so poisoning is ignored.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Inner {
    fn get_mut(&mut self, owner_key: &str, id: &ArtifactId) -> Option<&mut Record> {
        let seq = *self.by_key.get(&(owner_key.to_owned(), id.clone()))?;
        self.by_seq.get_mut(&seq)
    }
}

#[async_trait]
impl Index for MemoryIndex {
    async fn get(&self, owner_key: &str, id: &ArtifactId) -> Result<Option<Record>> {
        let inner = self.lock();
        Ok(inner.by_key.get(&(owner_key.to_owned(), id.clone())).and_then(|s| inner.by_seq.get(s)).cloned())
    }

    async fn get_all(&self, id: &ArtifactId) -> Result<Vec<Record>> {
        Ok(self.lock().by_seq.values().filter(|r| &r.id == id).cloned().collect())
    }

    async fn insert(&self, mut record: Record) -> Result<Record> {
        let mut inner = self.lock();
        inner.next_seq += 1;
        record.seq = inner.next_seq;
        inner.by_key.insert((record.owner_key.clone(), record.id.clone()), record.seq);
        inner.by_seq.insert(record.seq, record.clone());
        Ok(record)
    }

    /// Applied at once: in memory an update costs no more than remembering it.
    async fn record_access(&self, owner_key: &str, id: &ArtifactId, last_access: i64) -> Result<()> {
        if let Some(r) = self.lock().get_mut(owner_key, id) {
            r.last_access = r.last_access.max(last_access);
        }
        Ok(())
    }

    async fn refresh(&self, owner_key: &str, id: &ArtifactId, last_access: i64, expires_at: i64) -> Result<()> {
        if let Some(r) = self.lock().get_mut(owner_key, id) {
            r.last_access = r.last_access.max(last_access);
            r.expires_at = Some(expires_at);
        }
        Ok(())
    }

    async fn delete(&self, owner_key: &str, id: &ArtifactId) -> Result<Option<Record>> {
        let mut inner = self.lock();
        let Some(seq) = inner.by_key.remove(&(owner_key.to_owned(), id.clone())) else {
            return Ok(None);
        };
        Ok(inner.by_seq.remove(&seq))
    }

    async fn usage(&self, group: &Group) -> Result<Usage> {
        let inner = self.lock();
        let mut u = Usage::default();
        for r in inner.by_seq.values().filter(|r| group.contains(r)) {
            u.bytes += r.size;
            u.count += 1;
        }
        Ok(u)
    }

    async fn eviction_order(&self, group: &Group, order: EvictOrder) -> Result<Vec<Record>> {
        let inner = self.lock();
        let mut v: Vec<Record> = inner.by_seq.values().filter(|r| group.contains(r)).cloned().collect();
        if order == EvictOrder::LeastRecentlyUsed {
            v.sort_by_key(|r| (r.last_access, r.seq));
        }
        Ok(v)
    }

    async fn list(&self, filter: &ListFilter, after: i64, now: i64, limit: usize) -> Result<Vec<Record>> {
        let inner = self.lock();
        Ok(inner
            .by_seq
            .range(after.saturating_add(1)..)
            .map(|(_, r)| r)
            .filter(|r| {
                filter.owner_key.as_ref().is_none_or(|k| &r.owner_key == k)
                    && filter.session_id.as_ref().is_none_or(|s| r.scope.session_id.as_ref() == Some(s))
                    && filter.trace_id.as_ref().is_none_or(|t| r.scope.trace_id.as_ref() == Some(t))
                    && !r.is_expired(now)
            })
            .take(limit)
            .cloned()
            .collect())
    }

    async fn expired(&self, now: i64, group: Option<&Group>) -> Result<Vec<Record>> {
        Ok(self.lock().by_seq.values().filter(|r| r.is_expired(now) && group.is_none_or(|g| g.contains(r))).cloned().collect())
    }

    async fn sha_in_use(&self, sha256: &str) -> Result<bool> {
        Ok(self.lock().by_seq.values().any(|r| r.sha256 == sha256))
    }

    async fn blob_uses(&self) -> Result<Vec<BlobUse>> {
        Ok(self
            .lock()
            .by_seq
            .values()
            .map(|r| BlobUse { owner_key: r.owner_key.clone(), id: r.id.clone(), sha256: r.sha256.clone(), size: r.size })
            .collect())
    }

    async fn missing_blobs(&self) -> Result<HashMap<String, i64>> {
        Ok(self.lock().missing.clone())
    }

    async fn note_missing_blobs(&self, found: &[String], at: i64, cleared: &[String]) -> Result<()> {
        let mut inner = self.lock();
        for sha in found {
            inner.missing.entry(sha.clone()).or_insert(at);
        }
        for sha in cleared {
            inner.missing.remove(sha);
        }
        Ok(())
    }
}
