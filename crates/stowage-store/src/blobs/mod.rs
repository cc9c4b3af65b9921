//! Blob storage: bytes keyed by their full sha256, with no notion of owners or ids.
//!
//! A put is staged first (bytes written somewhere private and hashed), then committed under
//! the engine's lock, which is what makes "is this blob still referenced?" and "publish this
//! blob" atomic with respect to each other.

// Only FsStore writes blobs as files, and FsStore needs the SQLite index.
#[cfg(feature = "sqlite")]
mod fs;
mod memory;
// Only SharedStore uses it, and that needs the PostgreSQL index too.
#[cfg(all(feature = "postgres", feature = "s3"))]
mod object;
#[cfg(all(feature = "postgres", feature = "s3"))]
mod publishing;

#[cfg(feature = "sqlite")]
pub(crate) use fs::FsBlobs;
pub(crate) use memory::MemoryBlobs;
#[cfg(all(feature = "postgres", feature = "s3"))]
pub(crate) use object::{Bucket, MARKER, ObjectBlobs};
#[cfg(all(feature = "postgres", feature = "s3"))]
pub(crate) use publishing::Journal;

use std::ops::Range;
use std::pin::Pin;

use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
use sha2::{Digest, Sha256};
use stowage_core::StoreError;
use tokio::io::{AsyncRead, AsyncReadExt};

use crate::Result;
use crate::mime::SNIFF_LEN;

/// Size of the chunks streams are read and written in: large enough that per-chunk overhead
/// vanishes, small enough that a few in flight stay far under the memory budget.
pub(crate) const CHUNK: usize = 1 << 20;

/// Bytes written and hashed but not yet published.
#[derive(Debug)]
pub(crate) struct Staged<P> {
    pub sha256: String,
    pub size: u64,
    /// The first bytes, for mime sniffing.
    pub head: Bytes,
    pub pending: P,
}

pub(crate) type BoxReader = Pin<Box<dyn AsyncRead + Send>>;

/// A byte limit and the name of the setting it comes from, for the error message.
pub(crate) type Limit = (&'static str, u64);

/// A stored blob as gc sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BlobInfo {
    pub sha256: String,
    pub size: u64,
    /// Written so recently that another process may still be about to insert its index row;
    /// gc leaves such a blob alone even if no row references it yet.
    pub recent: bool,
}

#[async_trait]
pub(crate) trait Blobs: Send + Sync + 'static {
    /// A staged blob; dropping it without committing discards it.
    type Pending: Send + 'static;
    /// What a commit leaves to settle once the record is written ([`Blobs::recorded`]) or
    /// not (dropped).
    type Receipt: Send + 'static;
    /// What `/readyz` calls this storage when it fails: `disk`, `bucket`.
    const DEPENDENCY: &'static str;

    async fn stage_bytes(&self, data: Bytes) -> Result<Staged<Self::Pending>>;

    /// Stages a stream, refusing it with [`StoreError::TooLarge`] naming `limit` as soon as
    /// it passes `limit.1` bytes.
    async fn stage_stream(&self, reader: BoxReader, limit: Limit) -> Result<Staged<Self::Pending>>;

    /// Publishes a staged blob under its sha256 (idempotent: the same bytes may already be
    /// there). Called with the engine's lock held.
    async fn commit(&self, staged: Staged<Self::Pending>) -> Result<Self::Receipt>;

    /// A record names the committed blob now.
    fn recorded(&self, receipt: Self::Receipt) {
        drop(receipt);
    }

    /// A staged blob whose bytes a record already names (a re-put of the same bytes by the
    /// same owner) and that needs no commit.
    fn already_recorded(&self, staged: Staged<Self::Pending>) {
        drop(staged);
    }

    /// `range` of the blob.
    async fn read(&self, sha256: &str, range: Range<u64>) -> Result<Bytes>;

    /// A stream over `range` of the blob.
    async fn open(&self, sha256: &str, range: Range<u64>) -> Result<BoxReader>;

    /// Removes the blob; returns the bytes freed (0 if it was not there).
    async fn delete(&self, sha256: &str) -> Result<u64>;

    /// The blob's size, or `None` if it is missing.
    async fn size(&self, sha256: &str) -> Result<Option<u64>>;

    /// Every blob, for gc.
    async fn list(&self) -> Result<Vec<BlobInfo>>;

    /// Proves the storage takes a write now (writes and removes a small temp object), for
    /// readiness checks: the caller bounds it with a timeout and caches the outcome. The error
    /// carries a short public reason (`access denied`, `unreachable or failing`).
    async fn probe_write(&self) -> Result<(), (String, StoreError)> {
        Ok(())
    }

    /// Checks that the location holds this store's blobs (the object store's marker object)
    /// before gc judges anything missing or unreferenced there. Local storage always does.
    async fn verify_location(&self) -> Result<()> {
        Ok(())
    }

    /// Removes leftovers of interrupted writes: at once those of a writer that is gone (its
    /// lock is free) or of this one with no put in flight, the others once they are older than
    /// the grace period; says what it found and what it removed.
    async fn clean_temp(&self) -> Result<TempSweep>;

    /// Resolves blobs published for puts that never recorded them (the object store's
    /// publishing journal): gone unless a record uses them. Returns the bytes freed.
    async fn settle_publishes(&self) -> Result<u64> {
        Ok(0)
    }
}

/// What [`Blobs::clean_temp`] found and removed. Both are reported: a gc right after a crash
/// finds the crashed put's temp file but, inside the grace period, must leave it, and a report
/// of "0 temp files" then would hide megabytes sitting on disk.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct TempSweep {
    pub found: u64,
    pub found_bytes: u64,
    pub removed: u64,
    pub removed_bytes: u64,
}

/// `N` bytes that differ on every call in every process (the time, the process id, a counter
/// and a stack address, hashed): names and keys that must not collide, not secrets.
pub(crate) fn random_bytes<const N: usize>() -> [u8; N] {
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let nanos = std::time::SystemTime::now().duration_since(std::time::SystemTime::UNIX_EPOCH).unwrap_or_default().as_nanos();
    let local = 0u8;
    let seed = format!("{nanos}.{}.{}.{:p}", std::process::id(), COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed), &local);
    let digest = Sha256::digest(seed.as_bytes());
    let mut out = [0u8; N];
    out.copy_from_slice(&digest[..N]);
    out
}

/// sha256 of `data` as lowercase hex.
pub(crate) fn sha256_hex(data: &[u8]) -> String {
    hex::encode(Sha256::digest(data))
}

/// sha256 of `data`, on a blocking thread when it is large: hashing 100 MB takes over 100 ms,
/// far too long to hold up an async worker.
pub(crate) async fn sha256_hex_off_thread(data: Bytes) -> Result<String> {
    if data.len() < CHUNK {
        return Ok(sha256_hex(&data));
    }
    tokio::task::spawn_blocking(move || sha256_hex(&data)).await.map_err(|e| StoreError::backend("hash content", "blocking task", e))
}

/// Reads up to [`CHUNK`] bytes, looping over short reads so that chunks are full except the
/// last. Returns an empty buffer at end of stream.
pub(crate) async fn read_chunk(reader: &mut BoxReader) -> std::io::Result<Bytes> {
    let mut buf = BytesMut::with_capacity(CHUNK);
    while buf.len() < CHUNK {
        if reader.read_buf(&mut buf).await? == 0 {
            break;
        }
    }
    Ok(buf.freeze())
}

/// Appends to `head` until it holds [`SNIFF_LEN`] bytes.
pub(crate) fn extend_head(head: &mut Vec<u8>, chunk: &[u8]) {
    let want = SNIFF_LEN.saturating_sub(head.len()).min(chunk.len());
    head.extend_from_slice(&chunk[..want]);
}

pub(crate) fn stream_too_large(seen: u64, (limit_name, limit): Limit) -> StoreError {
    StoreError::TooLarge { what: "artifact stream (stopped reading)".into(), size: seen, limit, limit_name }
}

pub(crate) fn read_stream_error(e: std::io::Error) -> StoreError {
    StoreError::backend("read input stream", "put_stream", e)
}

/// Checks that `range` lies within a blob of `size` bytes.
pub(crate) fn check_range(range: &Range<u64>, size: u64) -> Result<()> {
    if range.start > range.end || range.end > size {
        return Err(StoreError::InvalidInput(format!("range {}..{} is outside the artifact's {size} bytes", range.start, range.end)));
    }
    Ok(())
}
