//! [`ArtifactSink`]: the narrow contract through which producers hand bytes to a store.
//!
//! The transform pipeline and embedded tools depend on this trait only, never on a concrete
//! store, which keeps them free of IO and lets tests substitute any store. Every
//! `stowage_store::ArtifactStore` is a sink.

use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use serde_json::{Map, Value};

use crate::{ArtifactRef, ArtifactScope, StoreError};

/// What to record with a put besides the bytes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PutOptions {
    /// The media type; when `None`, stores sniff it from the bytes' magic numbers and fall back
    /// to `application/octet-stream`.
    pub mime_type: Option<String>,
    /// The file name to record and offer on download.
    pub filename: Option<String>,
    /// The id namespace (`{namespace}_{sha256 prefix}`), usually the tool name. Default `art`.
    pub namespace: Option<String>,
    /// Whose artifact it is, and the trace it belongs to.
    pub scope: ArtifactScope,
    /// Free-form provenance stored as [`ArtifactRef::source`].
    pub source: Map<String, Value>,
    /// Overrides the store's default TTL for this artifact.
    pub ttl: Option<Duration>,
}

impl PutOptions {
    /// Options for `scope` and nothing else.
    pub fn scoped(scope: ArtifactScope) -> Self {
        PutOptions { scope, ..Default::default() }
    }

    /// With the media type set.
    pub fn mime(mut self, mime: impl Into<String>) -> Self {
        self.mime_type = Some(mime.into());
        self
    }

    /// With the file name set.
    pub fn filename(mut self, name: impl Into<String>) -> Self {
        self.filename = Some(name.into());
        self
    }

    /// With the id namespace set.
    pub fn namespace(mut self, ns: impl Into<String>) -> Self {
        self.namespace = Some(ns.into());
        self
    }

    /// With one more provenance entry.
    pub fn source_entry(mut self, key: impl Into<String>, value: impl Into<Value>) -> Self {
        self.source.insert(key.into(), value.into());
        self
    }
}

/// Something that stores bytes and answers with a reference.
#[async_trait]
pub trait ArtifactSink: Send + Sync {
    /// Stores `data` and returns its reference. Must be all-or-nothing: on error nothing is
    /// visible.
    async fn put_bytes(&self, data: Bytes, opts: PutOptions) -> Result<ArtifactRef, StoreError>;

    /// True when this sink does not keep bytes (the NoOp store). Producers use it to decide
    /// between offloading and truncating (the clamp stores an over-limit observation only when a
    /// real store exists).
    fn is_noop(&self) -> bool {
        false
    }

    /// True when this sink would rather be handed the bytes' sha256 ([`Self::put_bytes_sha256`])
    /// than compute it: its put hashes on the caller's critical path (an in-memory store), so
    /// a producer that can hash while it makes the bytes (the transform pipeline decodes
    /// base64 on one core and hashes on the other) saves that whole pass, ~25 ms for 37 MB.
    /// Default false, and producers then do not hash: a sink that hashes alongside a slower
    /// durable write (the filesystem store) would gain nothing. Wrappers forward it.
    fn prefers_sha256(&self) -> bool {
        false
    }

    /// [`Self::put_bytes`], with `sha256`, the digest of `data` the producer computed. It must
    /// be exactly sha256(`data`): a sink that uses it addresses the content by it without
    /// hashing again. The default ignores it and calls `put_bytes`, which hashes.
    async fn put_bytes_sha256(&self, data: Bytes, sha256: [u8; 32], opts: PutOptions) -> Result<ArtifactRef, StoreError> {
        let _ = sha256;
        self.put_bytes(data, opts).await
    }
}
