//! Blobs in an object store, through the `object_store` crate: S3 or an S3-compatible store
//! (AWS S3, Cloudflare R2, MinIO), Google Cloud Storage, or Azure Blob Storage. Nothing here
//! depends on which: the provider only decides how the client is built (`crate::shared`).
//!
//! Keys are opaque and content-addressed, `<prefix>/blobs/<2 hex>/<sha256>`, so identical bytes
//! are stored once whichever instance put them, and no filename, tool name or user string ever
//! reaches a key. Puts never hold a big artifact whole: a stream goes up as a multipart upload
//! (8 MiB parts, at most four in flight) to a temporary key `<prefix>/tmp/<random>`, is hashed
//! on the way, and is copied to its content address (a server-side copy) before the engine
//! commits it, outside the engine's lock; an upload that fails or is refused is aborted, so no
//! part lingers. Bytes already in memory are hashed first and go straight to their content
//! address.
//!
//! Several instances share the bucket, so "is this blob still referenced?" and "publish this
//! blob" must be atomic across them: [`Blobs::commit`] runs under the engine's cross-instance
//! lock and checks the object is really there (re-uploading or copying it if a concurrent
//! delete took it after staging), and gc spares blobs written within the grace period, which
//! may be staged for a put whose row is not inserted yet.

use std::collections::HashSet;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::signer::{Method, Signer};
use object_store::{
    Attribute, AttributeValue, Attributes, GetOptions, GetRange, ObjectStore, ObjectStoreExt, PutMultipartOptions, PutOptions, PutPayload,
    WriteMultipart,
};
use sha2::{Digest, Sha256};
use stowage_core::StoreError;

use super::{
    BlobInfo, Blobs, BoxReader, CHUNK, Limit, Staged, TempSweep, extend_head, read_chunk, read_stream_error, sha256_hex_off_thread,
    stream_too_large,
};
use crate::Result;
use crate::mime::SNIFF_LEN;

/// What the blobs need of a bucket client: the object API and presigning. Every provider's
/// client (`AmazonS3`, `GoogleCloudStorage`, `MicrosoftAzure`) is both.
pub(crate) trait Bucket: ObjectStore + Signer {}
impl<T: ObjectStore + Signer> Bucket for T {}

/// Multipart part size: S3 wants at least 5 MiB per part (but the last); 8 MiB keeps a 100 MB
/// artifact to 13 parts and the memory of four in flight to 32 MiB.
const PART_SIZE: usize = 8 << 20;
/// Parts uploaded at once.
const PARTS_IN_FLIGHT: usize = 4;
/// Bytes in memory at least this large go up as a multipart upload too, in parallel parts.
const MULTIPART_FROM: usize = PART_SIZE;
/// Bytes in memory at least this large are looked for before uploading (a HEAD is cheaper
/// than sending them again when the same content is already stored).
const HEAD_FIRST_FROM: usize = 1 << 20;

/// Where the blobs live and how to reach them.
pub(crate) struct ObjectBlobs {
    store: Arc<dyn Bucket>,
    prefix: Path,
    /// `s3://bucket` (`gs://`, `az://`), for messages (keys already hold the prefix).
    bucket_url: String,
    /// `s3://bucket/prefix` (or `gs://…`, `az://…`), for messages.
    target: String,
    grace: Duration,
    /// Temporary keys this process is writing or about to commit: never swept by this
    /// process's gc, whatever the grace.
    in_flight: Arc<Mutex<HashSet<String>>>,
}

impl std::fmt::Debug for ObjectBlobs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectBlobs").field("target", &self.target).finish_non_exhaustive()
    }
}

/// A staged blob: where its bytes are until the commit publishes them.
pub(crate) enum ObjectPending {
    /// Already at its content address (bytes from memory, which are kept to upload them again
    /// if a concurrent delete removes the object before the commit).
    Final(Bytes),
    /// At a temporary key; removed when dropped uncommitted.
    Temp(TempObject),
}

impl std::fmt::Debug for ObjectPending {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ObjectPending::Final(b) => write!(f, "Final({} bytes)", b.len()),
            ObjectPending::Temp(t) => write!(f, "Temp({})", t.key),
        }
    }
}

/// A completed upload at a temporary key. Dropping it deletes the object (on a task: drop
/// cannot wait); gc removes it later if even that fails.
pub(crate) struct TempObject {
    key: Path,
    store: Arc<dyn Bucket>,
    in_flight: Arc<Mutex<HashSet<String>>>,
}

impl Drop for TempObject {
    fn drop(&mut self) {
        let (key, store, in_flight) = (self.key.clone(), self.store.clone(), self.in_flight.clone());
        let cleanup = async move {
            if let Err(e) = store.delete(&key).await {
                tracing::warn!(error = %e, key = %key, "could not delete a staged upload; gc will");
            }
            lock(&in_flight).remove(key.as_ref());
        };
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => drop(rt.spawn(cleanup)),
            Err(_) => tracing::warn!(key = %self.key, "a staged upload outlived the runtime; gc will delete it"),
        }
    }
}

fn lock(set: &Mutex<HashSet<String>>) -> std::sync::MutexGuard<'_, HashSet<String>> {
    set.lock().unwrap_or_else(|e| e.into_inner())
}

/// A fresh temporary name, unique across processes: time, process id and a counter, hashed
/// so it says nothing and sorts nowhere in particular.
fn temp_name() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default().as_nanos();
    let seed = format!("{nanos}.{}.{}", std::process::id(), COUNTER.fetch_add(1, Ordering::Relaxed));
    hex::encode(&Sha256::digest(seed.as_bytes())[..16])
}

impl ObjectBlobs {
    /// Blobs under `prefix` in `bucket`; `scheme` (`s3`, `gs`, `az`) only names it in messages.
    pub fn new(store: Arc<dyn Bucket>, scheme: &str, bucket: &str, prefix: &str, grace: Duration) -> Self {
        let bucket_url = format!("{scheme}://{bucket}");
        let target = if prefix.is_empty() { bucket_url.clone() } else { format!("{bucket_url}/{prefix}") };
        ObjectBlobs { store, prefix: Path::from(prefix), bucket_url, target, grace, in_flight: Arc::default() }
    }

    fn key(&self, sha256: &str) -> Path {
        self.prefix.clone().join("blobs").join(&sha256[..2]).join(sha256)
    }

    fn temp_dir(&self) -> Path {
        self.prefix.clone().join("tmp")
    }

    fn fail(&self, op: &'static str, what: impl std::fmt::Display) -> impl Fn(object_store::Error) -> StoreError {
        let target = format!("{}/{what}", self.bucket_url);
        move |e| StoreError::backend(op, target.clone(), one_line(&e))
    }

    /// Attributes of a blob object: its sniffed content type (the bytes' own; each record keeps
    /// its producer's claim) and, when known before the upload starts, its sha256.
    fn attributes(head: &[u8], complete: bool, sha256: Option<&str>) -> Attributes {
        let mut attrs = Attributes::new();
        attrs.insert(Attribute::ContentType, AttributeValue::from(crate::mime::media_type(None, head, complete)));
        if let Some(sha) = sha256 {
            attrs.insert(Attribute::Metadata("sha256".into()), AttributeValue::from(sha.to_owned()));
        }
        attrs
    }

    /// Uploads bytes held in memory to `key`: one PUT, or parallel parts when large.
    async fn upload(&self, key: &Path, data: Bytes, attributes: Attributes) -> Result<()> {
        let fail = self.fail("upload blob", key);
        if data.len() < MULTIPART_FROM {
            let opts = PutOptions { attributes, ..Default::default() };
            self.store.put_opts(key, PutPayload::from(data), opts).await.map_err(fail)?;
            return Ok(());
        }
        let upload = self.store.put_multipart_opts(key, PutMultipartOptions { attributes, ..Default::default() }).await.map_err(&fail)?;
        let mut writer = WriteMultipart::new_with_chunk_size(upload, PART_SIZE);
        let mut rest = data;
        while !rest.is_empty() {
            if let Err(e) = writer.wait_for_capacity(PARTS_IN_FLIGHT).await {
                abort(writer, key).await;
                return Err(fail(e));
            }
            writer.put(rest.split_to(rest.len().min(PART_SIZE)));
        }
        // finish() aborts the upload itself when a part or the completion fails.
        writer.finish().await.map_err(fail)?;
        Ok(())
    }

    /// Size of the object at `key`, `None` if there is none.
    async fn head_size(&self, key: &Path) -> Result<Option<u64>> {
        match self.store.head(key).await {
            Ok(meta) => Ok(Some(meta.size)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(self.fail("look up blob", key)(e)),
        }
    }

    /// A presigned GET URL for the blob, valid for `expires_in`, made with this instance's
    /// credentials (no request is sent).
    pub async fn presign_get(&self, sha256: &str, expires_in: Duration) -> Result<String> {
        let key = self.key(sha256);
        let url = self.store.signed_url(Method::GET, &key, expires_in).await.map_err(self.fail("presign blob", &key))?;
        Ok(url.to_string())
    }

    pub fn target(&self) -> &str {
        &self.target
    }
}

/// Aborts a multipart upload whose part failed; the abort's own failure is only logged (the
/// bucket's lifecycle rule removes what is left, see docs/deploy.md).
async fn abort(writer: WriteMultipart, key: &Path) {
    if let Err(e) = writer.abort().await {
        tracing::warn!(error = %one_line(&e), key = %key, "could not abort a multipart upload; the bucket's lifecycle rule will");
    }
}

/// object_store errors span lines (they embed the server's XML body); the engine's errors are
/// one line.
fn one_line(e: &object_store::Error) -> String {
    let mut out = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[async_trait]
impl Blobs for ObjectBlobs {
    type Pending = ObjectPending;

    async fn stage_bytes(&self, data: Bytes) -> Result<Staged<ObjectPending>> {
        let sha256 = sha256_hex_off_thread(data.clone()).await?;
        let size = data.len() as u64;
        let head = data.slice(..data.len().min(SNIFF_LEN));
        let key = self.key(&sha256);
        // The same content is often stored already (another owner's, another instance's).
        let present = data.len() >= HEAD_FIRST_FROM && self.head_size(&key).await? == Some(size);
        if !present {
            self.upload(&key, data.clone(), Self::attributes(&head, true, Some(&sha256))).await?;
        }
        Ok(Staged { sha256, size, head, pending: ObjectPending::Final(data) })
    }

    async fn stage_stream(&self, mut reader: BoxReader, limit: Limit) -> Result<Staged<ObjectPending>> {
        let first = read_chunk(&mut reader).await.map_err(read_stream_error)?;
        if first.len() as u64 > limit.1 {
            return Err(stream_too_large(first.len() as u64, limit));
        }
        if first.len() < CHUNK {
            // The whole stream fit in one chunk: it is in memory already.
            return self.stage_bytes(first).await;
        }
        let mut head = Vec::new();
        extend_head(&mut head, &first);
        let name = temp_name();
        let key = self.temp_dir().join(name.as_str());
        lock(&self.in_flight).insert(key.to_string());
        // From here on, however this put ends (an error, a refusal, the caller dropping the
        // future), dropping `temp` deletes whatever reached the key and forgets it. A multipart
        // upload cut off by a dropped future cannot be aborted from a destructor; the bucket's
        // lifecycle rule removes its parts (docs/deploy.md).
        let temp = TempObject { key: key.clone(), store: self.store.clone(), in_flight: self.in_flight.clone() };
        let fail = self.fail("upload blob", &key);
        let opts = PutMultipartOptions { attributes: Self::attributes(&head, false, None), ..Default::default() };
        let upload = self.store.put_multipart_opts(&key, opts).await.map_err(&fail)?;
        let mut writer = WriteMultipart::new_with_chunk_size(upload, PART_SIZE);
        let mut hasher = Sha256::new();
        let mut size = 0u64;
        let mut chunk = first;
        let outcome: Result<()> = loop {
            if chunk.is_empty() {
                break Ok(());
            }
            size += chunk.len() as u64;
            if size > limit.1 {
                break Err(stream_too_large(size, limit));
            }
            hasher.update(&chunk);
            if let Err(e) = writer.wait_for_capacity(PARTS_IN_FLIGHT).await {
                break Err(fail(e));
            }
            writer.put(chunk);
            chunk = match read_chunk(&mut reader).await {
                Ok(c) => c,
                Err(e) => break Err(read_stream_error(e)),
            };
        };
        if let Err(e) = outcome {
            abort(writer, &key).await;
            return Err(e);
        }
        writer.finish().await.map_err(&fail)?;
        let sha256 = hex::encode(hasher.finalize());
        // Publish now, outside the engine's lock: a server-side copy of a big object takes
        // seconds on S3, and the lock is fleet-wide. The commit only checks it is still there
        // (copying again from the temp object, kept until then, if a delete took it).
        let dest = self.key(&sha256);
        if self.head_size(&dest).await? != Some(size) {
            self.store.copy(&key, &dest).await.map_err(self.fail("publish blob", &dest))?;
        }
        Ok(Staged { sha256, size, head: Bytes::from(head), pending: ObjectPending::Temp(temp) })
    }

    async fn commit(&self, staged: Staged<ObjectPending>) -> Result<()> {
        let key = self.key(&staged.sha256);
        // Under the engine's lock: no delete can run between this check and the row insert.
        if self.head_size(&key).await? == Some(staged.size) {
            return Ok(()); // a Temp object is deleted as it drops
        }
        match staged.pending {
            ObjectPending::Final(data) => {
                tracing::debug!(sha256 = %staged.sha256, "blob went missing between staging and commit; uploading it again");
                let head = data.slice(..data.len().min(SNIFF_LEN));
                self.upload(&key, data, Self::attributes(&head, true, Some(&staged.sha256))).await
            }
            ObjectPending::Temp(temp) => self.store.copy(&temp.key, &key).await.map_err(self.fail("publish blob", &key)),
        }
    }

    async fn read(&self, sha256: &str, range: Range<u64>) -> Result<Bytes> {
        if range.is_empty() {
            return Ok(Bytes::new());
        }
        let key = self.key(sha256);
        self.store.get_range(&key, range).await.map_err(self.fail("read blob", &key))
    }

    async fn open(&self, sha256: &str, range: Range<u64>) -> Result<BoxReader> {
        if range.is_empty() {
            return Ok(Box::pin(std::io::Cursor::new(Bytes::new())));
        }
        let key = self.key(sha256);
        let opts = GetOptions { range: Some(GetRange::Bounded(range)), ..Default::default() };
        let got = self.store.get_opts(&key, opts).await.map_err(self.fail("read blob", &key))?;
        let stream = got.into_stream().map_err(|e| std::io::Error::other(one_line(&e)));
        Ok(Box::pin(tokio_util::io::StreamReader::new(stream)))
    }

    async fn delete(&self, sha256: &str) -> Result<u64> {
        let key = self.key(sha256);
        let Some(size) = self.head_size(&key).await? else { return Ok(0) };
        match self.store.delete(&key).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(size),
            Err(e) => Err(self.fail("delete blob", &key)(e)),
        }
    }

    async fn size(&self, sha256: &str) -> Result<Option<u64>> {
        self.head_size(&self.key(sha256)).await
    }

    async fn list(&self) -> Result<Vec<BlobInfo>> {
        let dir = self.prefix.clone().join("blobs");
        let cutoff = SystemTime::now().checked_sub(self.grace).unwrap_or(SystemTime::UNIX_EPOCH);
        let mut out = Vec::new();
        let mut listing = self.store.list(Some(&dir));
        while let Some(meta) = listing.next().await {
            let meta = meta.map_err(self.fail("list blobs", &dir))?;
            let Some(name) = meta.location.filename() else { continue };
            // Only content addresses: anything else under blobs/ is not ours to judge.
            if name.len() != 64 || !name.bytes().all(|b| b.is_ascii_hexdigit()) {
                continue;
            }
            let written: SystemTime = meta.last_modified.into();
            out.push(BlobInfo { sha256: name.to_owned(), size: meta.size, recent: written > cutoff });
        }
        Ok(out)
    }

    /// Whether the bucket answers: a listing of at most one key under the prefix.
    async fn ping(&self) -> Result<()> {
        let dir = self.prefix.clone().join("blobs");
        self.store.list_with_delimiter(Some(&dir)).await.map(|_| ()).map_err(self.fail("reach bucket", &dir))
    }

    async fn clean_temp(&self) -> Result<TempSweep> {
        let dir = self.temp_dir();
        let cutoff = SystemTime::now().checked_sub(self.grace).unwrap_or(SystemTime::UNIX_EPOCH);
        let mut sweep = TempSweep::default();
        let found: Vec<_> = self.store.list(Some(&dir)).try_collect().await.map_err(self.fail("list staged uploads", &dir))?;
        for meta in found {
            if lock(&self.in_flight).contains(meta.location.as_ref()) {
                continue;
            }
            sweep.found += 1;
            sweep.found_bytes += meta.size;
            let written: SystemTime = meta.last_modified.into();
            if written <= cutoff {
                match self.store.delete(&meta.location).await {
                    Ok(()) | Err(object_store::Error::NotFound { .. }) => {
                        sweep.removed += 1;
                        sweep.removed_bytes += meta.size;
                    }
                    Err(e) => return Err(self.fail("delete staged upload", &meta.location)(e)),
                }
            }
        }
        Ok(sweep)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temp_names_are_unique_and_opaque() {
        let a = temp_name();
        let b = temp_name();
        assert_ne!(a, b);
        assert!(a.len() == 32 && a.bytes().all(|c| c.is_ascii_hexdigit()), "{a}");
    }
}
