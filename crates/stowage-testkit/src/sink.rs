//! [`MemSink`]: an artifact sink that keeps every put in memory with its options, so tests can
//! check the bytes and the scope an artifact was stored under, and can fail on demand.

use std::collections::HashMap;
use std::sync::Mutex;

use async_trait::async_trait;
use bytes::Bytes;
use sha2::{Digest, Sha256};
use stowage_core::{ArtifactId, ArtifactRef, ArtifactSink, PutOptions, StoreError};

/// Keeps artifacts in memory, keyed by id, with the put options (to check scopes).
#[derive(Default)]
pub struct MemSink {
    pub items: Mutex<HashMap<String, (Bytes, PutOptions)>>,
    /// Every put fails like a full disk (until it is set back: the disk got room again).
    pub fail: std::sync::atomic::AtomicBool,
}

#[async_trait]
impl ArtifactSink for MemSink {
    async fn put_bytes(&self, data: Bytes, opts: PutOptions) -> Result<ArtifactRef, StoreError> {
        if self.fail.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(StoreError::backend("write blob", "/nonexistent", std::io::Error::other("disk full")));
        }
        let sha = hex::encode(Sha256::digest(&data));
        let id = ArtifactId::from_content(opts.namespace.as_deref(), &sha);
        let r = ArtifactRef {
            uri: id.uri(),
            id: id.clone(),
            mime_type: opts.mime_type.clone(),
            size_bytes: data.len() as u64,
            filename: opts.filename.clone(),
            sha256: sha,
            scope: opts.scope.clone(),
            source: opts.source.clone(),
            created_at: time::OffsetDateTime::now_utc(),
            expires_at: None,
        };
        self.items.lock().unwrap().insert(id.to_string(), (data, opts));
        Ok(r)
    }
}
