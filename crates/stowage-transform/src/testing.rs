//! Small sinks for tests, benchmarks and the fuzz target: one that keeps bytes in memory, one
//! that keeps nothing (like the NoOp store), and one that fails. Real stores live in
//! `stowage-store`; these exist so the pipeline can be tested without it.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;
use sha2::{Digest, Sha256};
use stowage_core::{ArtifactId, ArtifactRef, ArtifactSink, PutOptions, StoreError};

fn reference(data: &[u8], opts: PutOptions) -> ArtifactRef {
    let sha = hex::encode(Sha256::digest(data));
    let id = ArtifactId::from_content(opts.namespace.as_deref(), &sha);
    ArtifactRef {
        uri: id.uri(),
        id,
        mime_type: opts.mime_type,
        size_bytes: data.len() as u64,
        filename: opts.filename,
        sha256: sha,
        scope: opts.scope,
        source: opts.source,
        created_at: time_zero(),
        expires_at: None,
    }
}

fn time_zero() -> stowage_core::Timestamp {
    stowage_core::Timestamp::UNIX_EPOCH
}

/// Keeps every put in memory; optionally refuses after `limit` artifacts (like a per-trace
/// quota).
#[derive(Debug, Default)]
pub struct MemorySink {
    items: Mutex<BTreeMap<String, (ArtifactRef, Bytes)>>,
    limit: Option<usize>,
}

impl MemorySink {
    pub fn new() -> Arc<Self> {
        Arc::new(MemorySink::default())
    }

    /// A sink that refuses the `limit + 1`-th put with [`StoreError::QuotaExceeded`].
    pub fn with_limit(limit: usize) -> Arc<Self> {
        Arc::new(MemorySink { limit: Some(limit), ..Default::default() })
    }

    /// Every stored artifact, by id.
    pub fn items(&self) -> BTreeMap<String, (ArtifactRef, Bytes)> {
        self.items.lock().expect("not poisoned").clone()
    }

    pub fn get(&self, id: &str) -> Option<Bytes> {
        self.items.lock().expect("not poisoned").get(id).map(|(_, b)| b.clone())
    }
}

#[async_trait]
impl ArtifactSink for MemorySink {
    async fn put_bytes(&self, data: Bytes, opts: PutOptions) -> Result<ArtifactRef, StoreError> {
        let mut items = self.items.lock().expect("not poisoned");
        if self.limit.is_some_and(|l| items.len() >= l) {
            return Err(StoreError::QuotaExceeded { budget: "test trace".into(), detail: format!("{} artifacts", items.len()) });
        }
        let r = reference(&data, opts);
        items.insert(r.id.to_string(), (r.clone(), data));
        Ok(r)
    }
}

/// Keeps nothing and says so (`is_noop`), like the NoOp store: refs carry the truncated marker.
#[derive(Debug, Default)]
pub struct NoopSink;

#[async_trait]
impl ArtifactSink for NoopSink {
    async fn put_bytes(&self, data: Bytes, opts: PutOptions) -> Result<ArtifactRef, StoreError> {
        let mut r = reference(&data, opts);
        r.source.insert("truncated".into(), true.into());
        r.source.insert("warning".into(), "Content not stored (no ArtifactStore configured)".into());
        Ok(r)
    }

    fn is_noop(&self) -> bool {
        true
    }
}

/// Fails every put, as a full disk would.
#[derive(Debug, Default)]
pub struct FailingSink;

#[async_trait]
impl ArtifactSink for FailingSink {
    async fn put_bytes(&self, _: Bytes, _: PutOptions) -> Result<ArtifactRef, StoreError> {
        Err(StoreError::backend("write blob", "/test/blobs", std::io::Error::other("no space left on device")))
    }
}
