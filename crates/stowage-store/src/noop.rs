//! [`NoOpStore`]: the fallback when no store is configured. It keeps nothing, never fails a
//! put, and answers with a reference marked `truncated` so that producers and the model can
//! tell the bytes are gone.

use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use bytes::Bytes;
use serde_json::Value;
use sha2::{Digest, Sha256};
use stowage_core::{ArtifactId, ArtifactRef, ID_HASH_HEX_LEN, PutOptions, StoreError};

use crate::blobs::{BoxReader, extend_head, read_chunk, read_stream_error, sha256_hex_off_thread};
use crate::clock::{Clock, SystemClock};
use crate::delegate::sink_via_store;
use crate::{Access, ArtifactReader, ArtifactStore, GcReport, ListPage, ListQuery, Result};

/// The warning every NoOp reference carries in `source.warning`.
pub const NOOP_WARNING: &str = "content not stored (no artifact store configured)";

/// A store that stores nothing.
#[derive(Debug, Default)]
pub struct NoOpStore {
    warned: AtomicBool,
}

impl NoOpStore {
    /// A store that keeps nothing (see the type).
    pub fn new() -> Self {
        Self::default()
    }

    fn warn_once(&self) {
        if !self.warned.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                "no artifact store configured: offloaded content is not stored, only a truncated marker \
                 is returned; configure [store] in stowage.toml to keep it"
            );
        }
    }

    fn marker(&self, sha256: String, size: u64, head: &[u8], complete: bool, opts: PutOptions) -> ArtifactRef {
        self.warn_once();
        let id: ArtifactId = format!("truncated_{}", &sha256[..ID_HASH_HEX_LEN]).parse().expect("hex digits are valid id characters");
        let mut source = opts.source;
        source.insert("warning".into(), Value::from(NOOP_WARNING));
        source.insert("truncated".into(), Value::from(true));
        source.insert("original_size".into(), Value::from(size));
        ArtifactRef {
            uri: id.uri(),
            id,
            mime_type: Some(opts.mime_type.unwrap_or_else(|| crate::mime::sniff(head, complete))),
            size_bytes: size,
            filename: opts.filename,
            sha256,
            scope: opts.scope,
            source,
            created_at: SystemClock.now(),
            expires_at: None,
        }
    }
}

fn not_found(id: &ArtifactId) -> StoreError {
    StoreError::NotFound { id: id.clone() }
}

#[async_trait]
impl ArtifactStore for NoOpStore {
    async fn put_bytes(&self, data: Bytes, opts: PutOptions) -> Result<ArtifactRef> {
        let sha = sha256_hex_off_thread(data.clone()).await?;
        let head = &data[..data.len().min(crate::mime::SNIFF_LEN)];
        Ok(self.marker(sha, data.len() as u64, head, head.len() == data.len(), opts))
    }

    /// Reads the stream to its end (hashing it, holding one chunk at a time) so the marker
    /// still says how big the content was.
    async fn put_stream(&self, mut reader: BoxReader, opts: PutOptions) -> Result<ArtifactRef> {
        let mut hasher = Sha256::new();
        let mut head = Vec::new();
        let mut size = 0u64;
        loop {
            let chunk = read_chunk(&mut reader).await.map_err(read_stream_error)?;
            if chunk.is_empty() {
                break;
            }
            extend_head(&mut head, &chunk);
            hasher.update(&chunk);
            size += chunk.len() as u64;
        }
        let complete = head.len() as u64 == size;
        Ok(self.marker(hex::encode(hasher.finalize()), size, &head, complete, opts))
    }

    async fn get(&self, _: &Access, id: &ArtifactId) -> Result<Bytes> {
        Err(not_found(id))
    }

    async fn get_range(&self, _: &Access, id: &ArtifactId, _: Range<u64>) -> Result<Bytes> {
        Err(not_found(id))
    }

    async fn open(&self, _: &Access, id: &ArtifactId, _: Option<Range<u64>>) -> Result<ArtifactReader> {
        Err(not_found(id))
    }

    async fn meta(&self, _: &Access, id: &ArtifactId) -> Result<ArtifactRef> {
        Err(not_found(id))
    }

    async fn exists(&self, _: &Access, _: &ArtifactId) -> Result<bool> {
        Ok(false)
    }

    async fn delete(&self, _: &Access, _: &ArtifactId) -> Result<bool> {
        Ok(false)
    }

    async fn list(&self, _: ListQuery) -> Result<ListPage> {
        Ok(ListPage { items: Vec::new(), next: None })
    }

    async fn gc(&self) -> Result<GcReport> {
        Ok(GcReport::default())
    }

    fn is_noop(&self) -> bool {
        true
    }
}

sink_via_store!(NoOpStore);

#[cfg(test)]
mod tests {
    use stowage_core::{ArtifactScope, ArtifactSink};

    use super::*;

    #[tokio::test]
    async fn put_returns_a_truncated_marker_and_nothing_is_readable() {
        let store = NoOpStore::new();
        let data = Bytes::from_static(b"%PDF-1.7 not really a pdf");
        let opts = PutOptions::scoped(ArtifactScope::session("s")).filename("a.pdf").source_entry("tool", "t");
        let r = ArtifactStore::put_bytes(&store, data.clone(), opts).await.unwrap();
        let sha = hex::encode(Sha256::digest(&data));
        assert_eq!(r.id.as_str(), format!("truncated_{}", &sha[..16]));
        assert_eq!(r.sha256, sha);
        assert!(r.is_truncated());
        assert_eq!(r.size_bytes, data.len() as u64);
        assert_eq!(r.mime_type.as_deref(), Some("application/pdf"));
        assert_eq!(r.source["warning"], NOOP_WARNING);
        assert_eq!(r.source["original_size"], data.len());
        assert_eq!(r.source["tool"], "t");
        assert_eq!(r.filename.as_deref(), Some("a.pdf"));
        assert!(r.expires_at.is_none());

        let access = Access::Operator;
        assert!(matches!(store.get(&access, &r.id).await, Err(StoreError::NotFound { .. })));
        assert!(matches!(store.get_range(&access, &r.id, 0..1).await, Err(StoreError::NotFound { .. })));
        assert!(matches!(store.open(&access, &r.id, None).await, Err(StoreError::NotFound { .. })));
        assert!(matches!(store.meta(&access, &r.id).await, Err(StoreError::NotFound { .. })));
        assert!(!store.exists(&access, &r.id).await.unwrap());
        assert!(!store.delete(&access, &r.id).await.unwrap());
        assert!(store.list(ListQuery::default()).await.unwrap().items.is_empty());
        assert!(ArtifactStore::is_noop(&store) && ArtifactSink::is_noop(&store));
    }

    #[tokio::test]
    async fn stream_and_text_puts_never_fail_and_report_the_size() {
        let store = NoOpStore::new();
        let big = vec![7u8; 3 * 1024 * 1024 + 5];
        let r = store.put_stream(Box::pin(std::io::Cursor::new(big.clone())), PutOptions::default()).await.unwrap();
        assert_eq!(r.size_bytes, big.len() as u64);
        assert_eq!(r.sha256, hex::encode(Sha256::digest(&big)));
        assert_eq!(r.source["original_size"], big.len());
        let t = store.put_text("hi".into(), PutOptions::default()).await.unwrap();
        assert_eq!(t.mime_type.as_deref(), Some("text/plain; charset=utf-8"));
        assert!(t.is_truncated());
    }
}
