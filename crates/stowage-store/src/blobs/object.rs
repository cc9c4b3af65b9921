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
//! may be staged for a put whose row is not inserted yet. Every publish is named in the index
//! first ([`super::publishing`]), so a put that fails or an instance that dies leaves no blob
//! that nothing names; staged uploads are named `tmp/<instance>.<random>`, so those of an
//! instance that is gone are removed at once.
//!
//! The location knows whose it is: a marker object, `<prefix>/stowage-store.json`, holds the
//! store id the index records (`crate::shared`'s identity check), and gc verifies it before
//! judging any blob missing or unreferenced.
//!
//! Every bucket call has a deadline ([`CALL_TIMEOUT`], plus [`MIN_RATE`] for the bytes it
//! carries; streamed reads fail after [`CALL_TIMEOUT`] without a byte), so a bucket that hangs
//! fails a put or a download in seconds rather than holding it.

use std::collections::HashSet;
use std::ops::Range;
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

use super::publishing::{Journal, Ticket};
use super::{
    BlobInfo, Blobs, BoxReader, CHUNK, Limit, Staged, TempSweep, extend_head, read_chunk, read_stream_error, sha256_hex_off_thread,
    stream_too_large,
};
use crate::Result;
use crate::clock::Clock;
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

/// The deadline of a bucket call that carries no bulk bytes (HEAD, DELETE, a small PUT, a
/// listing page, the first byte of a read), retries included: far beyond a healthy bucket's
/// latency, short enough that a hung one fails the call while its caller still waits.
pub(crate) const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// Bulk transfers get [`CALL_TIMEOUT`] plus their size at this rate: slower than this, a
/// bucket is taken as hung.
pub(crate) const MIN_RATE: u64 = 1 << 20;
/// The marker object under the prefix that names the store these blobs belong to.
pub(crate) const MARKER: &str = "stowage-store.json";

/// [`CALL_TIMEOUT`] plus `bytes` at [`MIN_RATE`].
fn deadline(bytes: u64) -> Duration {
    CALL_TIMEOUT + Duration::from_secs(bytes / MIN_RATE)
}

/// Runs a bucket call under `limit`; a call past it is an object_store error like any other.
async fn timed<T>(limit: Duration, call: impl Future<Output = object_store::Result<T>>) -> object_store::Result<T> {
    match tokio::time::timeout(limit, call).await {
        Ok(r) => r,
        Err(_) => Err(object_store::Error::Generic { store: "bucket", source: format!("no answer within {}s", limit.as_secs()).into() }),
    }
}

/// The marker's content: the store id, its generation (see `crate::identity`), and what wrote
/// it (for an operator reading it).
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Marker {
    store_id: String,
    /// Absent in a marker written before generations: 0.
    #[serde(default)]
    generation: u64,
    #[serde(default)]
    about: String,
}

/// Where the blobs live and how to reach them. Clones share the client, the in-flight set and
/// the journal (the settler task holds one).
#[derive(Clone)]
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
    /// Names publishes in the index before they happen; this instance's liveness.
    journal: Arc<Journal>,
    /// The store id the marker must hold, once the identity check has established it.
    store_id: std::sync::OnceLock<String>,
    /// The fleet's clock (the database's): what "older than the grace" is judged by.
    clock: Arc<dyn Clock>,
    /// Why this location is no longer the store's (a stale copy, a relocated store), once an
    /// identity check found so: puts are refused and readiness fails until a check finds it
    /// the store's again.
    fenced: Arc<Mutex<Option<String>>>,
}

impl std::fmt::Debug for ObjectBlobs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectBlobs").field("target", &self.target).finish_non_exhaustive()
    }
}

/// A staged blob: where its bytes are until the commit publishes them, and the publish's
/// name in the index (none when the blob was already there).
#[derive(Debug)]
pub(crate) struct ObjectPending {
    source: Source,
    ticket: Option<Ticket>,
}

/// Where a staged blob's bytes are.
pub(crate) enum Source {
    /// Already at its content address (bytes from memory, which are kept to upload them again
    /// if a concurrent delete removes the object before the commit).
    Final(Bytes),
    /// At a temporary key; removed when dropped uncommitted.
    Temp(TempObject),
}

impl std::fmt::Debug for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Final(b) => write!(f, "Final({} bytes)", b.len()),
            Source::Temp(t) => write!(f, "Temp({})", t.key),
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
            if let Err(e) = timed(CALL_TIMEOUT, store.delete(&key)).await {
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

/// A fresh temporary name, unique across processes: the instance's liveness key, then 16
/// random bytes, so gc can tell whose it is and says nothing else.
fn temp_name(instance: i32) -> String {
    format!("{instance:08x}.{}", hex::encode(super::random_bytes::<16>()))
}

/// The instance a temporary name belongs to (`None` for names of an older version).
fn temp_owner(name: &str) -> Option<i32> {
    let (owner, rest) = name.split_once('.')?;
    (owner.len() == 8 && rest.len() == 32).then(|| i32::from_str_radix(owner, 16).ok()).flatten()
}

impl ObjectBlobs {
    /// Blobs under `prefix` in `bucket`; `scheme` (`s3`, `gs`, `az`) only names it in messages.
    pub(crate) fn new(
        store: Arc<dyn Bucket>,
        scheme: &str,
        bucket: &str,
        prefix: &str,
        grace: Duration,
        journal: Arc<Journal>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        let bucket_url = format!("{scheme}://{bucket}");
        let target = if prefix.is_empty() { bucket_url.clone() } else { format!("{bucket_url}/{prefix}") };
        ObjectBlobs {
            store,
            prefix: Path::from(prefix),
            bucket_url,
            target,
            grace,
            in_flight: Arc::default(),
            journal,
            store_id: std::sync::OnceLock::new(),
            clock,
            fenced: Arc::default(),
        }
    }

    /// The fleet's time less the grace: what was written before it is old enough to judge.
    fn grace_cutoff(&self) -> SystemTime {
        SystemTime::from(self.clock.now()).checked_sub(self.grace).unwrap_or(SystemTime::UNIX_EPOCH)
    }

    /// Stops this instance's puts at this location, saying why (an identity check found that
    /// the location is not the store's any more); `None` lifts it.
    pub(crate) fn set_fenced(&self, why: Option<String>) {
        *self.fenced.lock().unwrap_or_else(|e| e.into_inner()) = why;
    }

    fn fenced(&self) -> Option<String> {
        self.fenced.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Whether puts here are stopped (see [`ObjectBlobs::set_fenced`]).
    pub(crate) fn is_fenced(&self) -> bool {
        self.fenced().is_some()
    }

    /// A put at a fenced location fails before anything is written.
    fn check_fence(&self) -> Result<()> {
        match self.fenced() {
            Some(why) => Err(StoreError::backend(
                "put",
                self.target.clone(),
                format!("this instance takes no puts: its bucket location is not the store's any more ({why})"),
            )),
            None => Ok(()),
        }
    }

    fn marker_key(&self) -> Path {
        self.prefix.clone().join(MARKER)
    }

    /// The store id and generation in the location's marker, `None` when there is none.
    pub(crate) async fn read_marker(&self) -> Result<Option<(String, u64)>> {
        let key = self.marker_key();
        let fail = self.fail("read store marker", &key);
        let got = match timed(CALL_TIMEOUT, self.store.get(&key)).await {
            Ok(got) => got,
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(fail(e)),
        };
        let body = timed(CALL_TIMEOUT, got.bytes()).await.map_err(&fail)?;
        let marker: Marker = serde_json::from_slice(&body).map_err(|e| {
            StoreError::backend("read store marker", format!("{}/{key}", self.bucket_url), format!("not a stowage store marker ({e})"))
        })?;
        Ok(Some((marker.store_id, marker.generation)))
    }

    /// Writes the location's marker naming `store_id` at `generation`.
    pub(crate) async fn write_marker(&self, store_id: &str, generation: u64) -> Result<()> {
        let key = self.marker_key();
        let marker = Marker {
            store_id: store_id.to_owned(),
            generation,
            about: "this prefix holds the blobs of the Stowage store with this id; its PostgreSQL index records the same id and generation"
                .into(),
        };
        let body = serde_json::to_vec_pretty(&marker).map_err(|e| StoreError::backend("write store marker", key.to_string(), e))?;
        timed(CALL_TIMEOUT, self.store.put(&key, PutPayload::from(body))).await.map_err(self.fail("write store marker", &key))?;
        Ok(())
    }

    /// Which store these blobs belong to, once established: gc then verifies the marker.
    pub(crate) fn set_store_id(&self, store_id: String) {
        let _ = self.store_id.set(store_id);
    }

    /// Whether the blob is at its content address with this size (a HEAD).
    pub(crate) async fn has_blob(&self, sha256: &str, size: u64) -> Result<bool> {
        Ok(self.head_size(&self.key(sha256)).await? == Some(size))
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
            let limit = deadline(data.len() as u64);
            timed(limit, self.store.put_opts(key, PutPayload::from(data), opts)).await.map_err(fail)?;
            return Ok(());
        }
        let opts = PutMultipartOptions { attributes, ..Default::default() };
        let upload = timed(CALL_TIMEOUT, self.store.put_multipart_opts(key, opts)).await.map_err(&fail)?;
        let mut writer = WriteMultipart::new_with_chunk_size(upload, PART_SIZE);
        let mut rest = data;
        while !rest.is_empty() {
            if let Err(e) = timed(part_deadline(), writer.wait_for_capacity(PARTS_IN_FLIGHT)).await {
                abort(writer, key).await;
                return Err(fail(e));
            }
            writer.put(rest.split_to(rest.len().min(PART_SIZE)));
        }
        // finish() aborts the upload itself when a part or the completion fails; past its
        // deadline the upload is aborted here.
        let finish = writer.finish();
        match tokio::time::timeout(part_deadline(), finish).await {
            Ok(r) => r.map_err(fail)?,
            Err(_) => return Err(fail(timed_out(part_deadline()))),
        };
        Ok(())
    }

    /// Size of the object at `key`, `None` if there is none.
    async fn head_size(&self, key: &Path) -> Result<Option<u64>> {
        match timed(CALL_TIMEOUT, self.store.head(key)).await {
            Ok(meta) => Ok(Some(meta.size)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(self.fail("look up blob", key)(e)),
        }
    }

    /// A presigned GET URL for the blob, valid for `expires_in`, made with this instance's
    /// credentials (no request is sent).
    pub(crate) async fn presign_get(&self, sha256: &str, expires_in: Duration) -> Result<String> {
        let key = self.key(sha256);
        let url = self.store.signed_url(Method::GET, &key, expires_in).await.map_err(self.fail("presign blob", &key))?;
        Ok(url.to_string())
    }

    pub(crate) fn target(&self) -> &str {
        &self.target
    }
}

/// How long the parts in flight may take to make room for one more (or to finish): four parts
/// at [`MIN_RATE`].
fn part_deadline() -> Duration {
    deadline((PARTS_IN_FLIGHT * PART_SIZE) as u64)
}

fn timed_out(limit: Duration) -> object_store::Error {
    object_store::Error::Generic { store: "bucket", source: format!("no answer within {}s", limit.as_secs()).into() }
}

/// The few words `/readyz` may show for a failed bucket call: never a host, bucket or key.
fn public_reason(e: &object_store::Error) -> &'static str {
    match e {
        object_store::Error::PermissionDenied { .. } | object_store::Error::Unauthenticated { .. } => "access denied",
        object_store::Error::NotFound { .. } => "bucket not found",
        _ if e.to_string().contains("no answer within") => "timed out",
        _ => "unreachable or failing",
    }
}

/// Aborts a multipart upload whose part failed; the abort's own failure is only logged (the
/// bucket's lifecycle rule removes what is left, see docs/deploy.md).
async fn abort(writer: WriteMultipart, key: &Path) {
    if let Err(e) = timed(CALL_TIMEOUT, writer.abort()).await {
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
    type Receipt = Option<Ticket>;
    const DEPENDENCY: &'static str = "bucket";

    async fn stage_bytes(&self, data: Bytes) -> Result<Staged<ObjectPending>> {
        self.check_fence()?;
        let sha256 = sha256_hex_off_thread(data.clone()).await?;
        let size = data.len() as u64;
        let head = data.slice(..data.len().min(SNIFF_LEN));
        let key = self.key(&sha256);
        // The same content is often stored already (another owner's, another instance's).
        let present = data.len() >= HEAD_FIRST_FROM && self.head_size(&key).await? == Some(size);
        let mut ticket = None;
        if !present {
            // Named before it exists: a database that is down fails the put here, before
            // anything reaches the bucket.
            ticket = Some(self.journal.begin(&sha256).await?);
            self.upload(&key, data.clone(), Self::attributes(&head, true, Some(&sha256))).await?;
        }
        Ok(Staged { sha256, size, head, pending: ObjectPending { source: Source::Final(data), ticket } })
    }

    async fn stage_stream(&self, mut reader: BoxReader, limit: Limit) -> Result<Staged<ObjectPending>> {
        self.check_fence()?;
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
        let name = temp_name(self.journal.instance());
        let key = self.temp_dir().join(name.as_str());
        lock(&self.in_flight).insert(key.to_string());
        // From here on, however this put ends (an error, a refusal, the caller dropping the
        // future), dropping `temp` deletes whatever reached the key and forgets it. A multipart
        // upload cut off by a dropped future cannot be aborted from a destructor; the bucket's
        // lifecycle rule removes its parts (docs/deploy.md).
        let temp = TempObject { key: key.clone(), store: self.store.clone(), in_flight: self.in_flight.clone() };
        let fail = self.fail("upload blob", &key);
        let opts = PutMultipartOptions { attributes: Self::attributes(&head, false, None), ..Default::default() };
        let upload = timed(CALL_TIMEOUT, self.store.put_multipart_opts(&key, opts)).await.map_err(&fail)?;
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
            if let Err(e) = timed(part_deadline(), writer.wait_for_capacity(PARTS_IN_FLIGHT)).await {
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
        match tokio::time::timeout(part_deadline(), writer.finish()).await {
            Ok(r) => r.map_err(&fail)?,
            Err(_) => return Err(fail(timed_out(part_deadline()))),
        };
        let sha256 = hex::encode(hasher.finalize());
        // Publish now, outside the engine's lock: a server-side copy of a big object takes
        // seconds on S3, and the lock is fleet-wide. The commit only checks it is still there
        // (copying again from the temp object, kept until then, if a delete took it).
        let dest = self.key(&sha256);
        let mut ticket = None;
        if self.head_size(&dest).await? != Some(size) {
            ticket = Some(self.journal.begin(&sha256).await?);
            timed(deadline(size), self.store.copy(&key, &dest)).await.map_err(self.fail("publish blob", &dest))?;
        }
        Ok(Staged { sha256, size, head: Bytes::from(head), pending: ObjectPending { source: Source::Temp(temp), ticket } })
    }

    async fn commit(&self, staged: Staged<ObjectPending>) -> Result<Option<Ticket>> {
        let key = self.key(&staged.sha256);
        let ObjectPending { source, mut ticket } = staged.pending;
        // Under the engine's lock: no delete can run between this check and the row insert.
        if self.head_size(&key).await? == Some(staged.size) {
            return Ok(ticket); // a Temp object is deleted as it drops
        }
        // A concurrent delete took it since staging (or it was there then): publish it again,
        // named first like any publish.
        if ticket.is_none() {
            ticket = Some(self.journal.begin(&staged.sha256).await?);
        }
        match source {
            Source::Final(data) => {
                tracing::debug!(sha256 = %staged.sha256, "blob went missing between staging and commit; uploading it again");
                let head = data.slice(..data.len().min(SNIFF_LEN));
                self.upload(&key, data, Self::attributes(&head, true, Some(&staged.sha256))).await?;
            }
            Source::Temp(temp) => {
                timed(deadline(staged.size), self.store.copy(&temp.key, &key)).await.map_err(self.fail("publish blob", &key))?;
            }
        }
        Ok(ticket)
    }

    fn recorded(&self, receipt: Option<Ticket>) {
        if let Some(ticket) = receipt {
            ticket.recorded();
        }
    }

    fn already_recorded(&self, staged: Staged<ObjectPending>) {
        if let Some(ticket) = staged.pending.ticket {
            ticket.recorded();
        }
    }

    async fn read(&self, sha256: &str, range: Range<u64>) -> Result<Bytes> {
        if range.is_empty() {
            return Ok(Bytes::new());
        }
        let key = self.key(sha256);
        let limit = deadline(range.end - range.start);
        timed(limit, self.store.get_range(&key, range)).await.map_err(self.fail("read blob", &key))
    }

    async fn open(&self, sha256: &str, range: Range<u64>) -> Result<BoxReader> {
        if range.is_empty() {
            return Ok(Box::pin(std::io::Cursor::new(Bytes::new())));
        }
        let key = self.key(sha256);
        let opts = GetOptions { range: Some(GetRange::Bounded(range)), ..Default::default() };
        let got = timed(CALL_TIMEOUT, self.store.get_opts(&key, opts)).await.map_err(self.fail("read blob", &key))?;
        // A bucket that stops sending mid-body fails the read after CALL_TIMEOUT without a
        // byte, rather than holding the download (object_store resumes a body that breaks).
        let body = got.into_stream();
        let stream = futures::stream::unfold(Some(body), |body| async move {
            let mut body = body?;
            match tokio::time::timeout(CALL_TIMEOUT, body.next()).await {
                Ok(Some(Ok(chunk))) => Some((Ok(chunk), Some(body))),
                Ok(Some(Err(e))) => Some((Err(std::io::Error::other(one_line(&e))), None)),
                Ok(None) => None,
                Err(_) => Some((Err(std::io::Error::other(format!("bucket sent nothing for {}s", CALL_TIMEOUT.as_secs()))), None)),
            }
        });
        Ok(Box::pin(tokio_util::io::StreamReader::new(stream)))
    }

    async fn delete(&self, sha256: &str) -> Result<u64> {
        let key = self.key(sha256);
        let Some(size) = self.head_size(&key).await? else { return Ok(0) };
        match timed(CALL_TIMEOUT, self.store.delete(&key)).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(size),
            Err(e) => Err(self.fail("delete blob", &key)(e)),
        }
    }

    async fn size(&self, sha256: &str) -> Result<Option<u64>> {
        self.head_size(&self.key(sha256)).await
    }

    async fn list(&self) -> Result<Vec<BlobInfo>> {
        let dir = self.prefix.clone().join("blobs");
        let cutoff = self.grace_cutoff();
        let mut out = Vec::new();
        let mut listing = self.store.list(Some(&dir));
        loop {
            let next = tokio::time::timeout(CALL_TIMEOUT, listing.next())
                .await
                .map_err(|_| self.fail("list blobs", &dir)(timed_out(CALL_TIMEOUT)))?;
            let Some(meta) = next else { break };
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

    /// A small object written under `tmp/` and deleted again: the bucket takes writes now.
    async fn probe_write(&self) -> Result<(), (String, StoreError)> {
        if let Err(e) = self.check_fence() {
            return Err(("not the store's location".to_owned(), e));
        }
        let key = self.temp_dir().join(temp_name(self.journal.instance()).as_str());
        lock(&self.in_flight).insert(key.to_string());
        let put = timed(CALL_TIMEOUT, self.store.put(&key, PutPayload::from_static(b"stowage readiness probe\n"))).await;
        let outcome = match put {
            Ok(_) => timed(CALL_TIMEOUT, self.store.delete(&key)).await,
            Err(e) => Err(e),
        };
        lock(&self.in_flight).remove(key.as_ref());
        outcome.map_err(|e| (public_reason(&e).to_owned(), self.fail("probe bucket write", &key)(e)))
    }

    async fn verify_location(&self) -> Result<()> {
        let Some(want) = self.store_id.get() else { return Ok(()) };
        let fail = |why: String| StoreError::backend("verify store marker", format!("{}/{}", self.bucket_url, self.marker_key()), why);
        if let Some(why) = self.fenced() {
            return Err(fail(format!("this location is not the store's any more ({why}); gc will not judge blobs here")));
        }
        // The index's generation now (instances advance it), and the marker's: the marker
        // may be one ahead while an advance is half done, never behind.
        let generation = self.journal.index().setting("generation").await?.and_then(|g| g.parse::<u64>().ok()).unwrap_or(0);
        match self.read_marker().await? {
            Some((have, g)) if &have == want && (g == generation || g == generation + 1) => Ok(()),
            Some((have, g)) if &have == want => Err(fail(format!(
                "it is at generation {g} and the index at {generation}: this location is not the store's current one (a stale copy); gc will not judge blobs here"
            ))),
            Some((other, _)) => Err(fail(format!("it names store {other}, not this store ({want}); gc will not judge blobs here"))),
            None => Err(fail(format!("it is missing (this store is {want}); gc will not judge blobs here"))),
        }
    }

    async fn clean_temp(&self) -> Result<TempSweep> {
        let dir = self.temp_dir();
        let cutoff = self.grace_cutoff();
        let mut sweep = TempSweep::default();
        let listing = timed(CALL_TIMEOUT, self.store.list(Some(&dir)).try_collect::<Vec<_>>());
        let found = listing.await.map_err(self.fail("list staged uploads", &dir))?;
        let owners: Vec<i32> = {
            let mut o: Vec<i32> = found.iter().filter_map(|m| m.location.filename().and_then(temp_owner)).collect();
            o.sort_unstable();
            o.dedup();
            o
        };
        let live = self.journal.live(&owners).await?;
        let me = self.journal.instance();
        for meta in found {
            if lock(&self.in_flight).contains(meta.location.as_ref()) {
                continue;
            }
            sweep.found += 1;
            sweep.found_bytes += meta.size;
            let written: SystemTime = meta.last_modified.into();
            // This instance's with no put in flight, or a gone instance's: abandoned now.
            // Another live instance's, or an older version's name: only past the grace.
            let abandoned = match meta.location.filename().and_then(temp_owner) {
                Some(owner) => owner == me || !live.contains(&owner),
                None => false,
            };
            if abandoned || written <= cutoff {
                match timed(CALL_TIMEOUT, self.store.delete(&meta.location)).await {
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

    async fn settle_publishes(&self) -> Result<u64> {
        self.journal.settle(|sha| async move { self.delete(&sha).await }).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temp_names_are_unique_opaque_and_name_their_instance() {
        let a = temp_name(0x1234);
        let b = temp_name(0x1234);
        assert_ne!(a, b);
        assert!(a.len() == 41 && a.starts_with("00001234.") && a[9..].bytes().all(|c| c.is_ascii_hexdigit()), "{a}");
        assert_eq!(temp_owner(&a), Some(0x1234));
        assert_eq!(temp_owner(&temp_name(i32::MAX)), Some(i32::MAX));
        // Names of the version before carry no owner: they wait for the grace period.
        assert_eq!(temp_owner("0123456789abcdef0123456789abcdef"), None);
        assert_eq!(temp_owner("zzzzzzzz.0123456789abcdef0123456789abcdef"), None);
    }

    #[test]
    fn bulk_calls_get_more_time_by_size() {
        assert_eq!(deadline(0), CALL_TIMEOUT);
        assert_eq!(deadline(100 << 20), CALL_TIMEOUT + Duration::from_secs(100));
    }
}
