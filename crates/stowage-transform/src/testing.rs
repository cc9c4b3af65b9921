//! Small sinks for tests, benchmarks and the fuzz target: one that keeps bytes in memory, one
//! that keeps nothing (like the NoOp store), and one that fails. Real stores live in
//! `stowage-store`; these exist so the pipeline can be tested without it.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;
use sha2::{Digest, Sha256};
use stowage_core::{ArtifactId, ArtifactRef, ArtifactSink, PutOptions, StoreError};

/// The reference for `data`, whose sha256 is `sha256` when the producer computed it (checked
/// in debug builds, so the tests catch a wrong digest; benchmarks trust it, as a store would).
fn reference(data: &[u8], sha256: Option<[u8; 32]>, opts: PutOptions) -> ArtifactRef {
    let digest: [u8; 32] = match sha256 {
        Some(d) => {
            debug_assert!(d[..] == Sha256::digest(data)[..], "the producer's sha256 is not the bytes'");
            d
        }
        None => Sha256::digest(data).into(),
    };
    let sha = hex::encode(digest);
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
    /// An empty sink with no limit.
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

    /// The bytes stored under `id`.
    pub fn get(&self, id: &str) -> Option<Bytes> {
        self.items.lock().expect("not poisoned").get(id).map(|(_, b)| b.clone())
    }
}

impl MemorySink {
    fn put(&self, data: Bytes, sha256: Option<[u8; 32]>, opts: PutOptions) -> Result<ArtifactRef, StoreError> {
        let mut items = self.items.lock().expect("not poisoned");
        if self.limit.is_some_and(|l| items.len() >= l) {
            return Err(StoreError::QuotaExceeded { budget: "test trace".into(), detail: format!("{} artifacts", items.len()) });
        }
        let r = reference(&data, sha256, opts);
        items.insert(r.id.to_string(), (r.clone(), data));
        Ok(r)
    }
}

#[async_trait]
impl ArtifactSink for MemorySink {
    async fn put_bytes(&self, data: Bytes, opts: PutOptions) -> Result<ArtifactRef, StoreError> {
        self.put(data, None, opts)
    }

    /// Hashing is the only work a put does here, so a digest computed alongside is welcome.
    fn prefers_sha256(&self) -> bool {
        true
    }

    async fn put_bytes_sha256(&self, data: Bytes, sha256: [u8; 32], opts: PutOptions) -> Result<ArtifactRef, StoreError> {
        self.put(data, Some(sha256), opts)
    }
}

/// Keeps nothing and says so (`is_noop`), like the NoOp store: refs carry the truncated marker.
#[derive(Debug, Default)]
pub struct NoopSink;

#[async_trait]
impl ArtifactSink for NoopSink {
    async fn put_bytes(&self, data: Bytes, opts: PutOptions) -> Result<ArtifactRef, StoreError> {
        Ok(NoopSink::noted(reference(&data, None, opts)))
    }

    fn is_noop(&self) -> bool {
        true
    }

    fn prefers_sha256(&self) -> bool {
        true
    }

    async fn put_bytes_sha256(&self, data: Bytes, sha256: [u8; 32], opts: PutOptions) -> Result<ArtifactRef, StoreError> {
        Ok(NoopSink::noted(reference(&data, Some(sha256), opts)))
    }
}

impl NoopSink {
    fn noted(mut r: ArtifactRef) -> ArtifactRef {
        r.source.insert("truncated".into(), true.into());
        r.source.insert("warning".into(), "Content not stored (no ArtifactStore configured)".into());
        r
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
