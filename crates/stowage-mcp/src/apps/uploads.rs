//! Uploads from the view: a file handed to the gateway in chunks through the host's
//! `tools/call` proxy, or (when the host's CSP lets the view reach the links origin) in one
//! `PUT` to a single-use upload slot.
//!
//! Nothing becomes an artifact until the commit has checked that exactly the declared size
//! arrived and that its sha256 is the declared one. Chunks must come in order: each one's
//! offset is the number of bytes received so far, so a gap or an overlap is refused, naming
//! the offset expected. The bytes wait in an anonymous temporary file (gone with the upload,
//! whatever happens), hashed as they arrive. A PUT to the upload's link is staged the same
//! way ([`LinkService::open_staged_slot`]): nothing reaches the store before the commit, so a
//! commit that fails removes nothing, in particular not an artifact the same bytes already
//! were. An upload that is not committed within the TTL is dropped; so is one whose commit
//! fails. At [`OPEN_PER_OWNER`] open uploads, beginning another drops the owner's least
//! recently used one that is not busy (a view that was closed mid-upload never comes back for
//! it), and only when all are busy is the new one refused.

use std::collections::HashMap;
use std::io::SeekFrom;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};
use stowage_core::ErrorCode;

use base64::Engine;
use parking_lot::Mutex;
use sha2::{Digest, Sha256};
use stowage_core::{ArtifactRef, ArtifactScope, Isolation, PutOptions};
use stowage_http::{Expected, LinkService, SlotRequest, SlotState};
use stowage_store::ArtifactStore;
use tokio::io::{AsyncSeekExt, AsyncWriteExt};

use crate::local_tools::ToolError;

/// The most bytes one chunk carries (decoded).
pub(super) const CHUNK_BYTES: usize = 1024 * 1024;
/// Uploads one owner may have open at once.
const OPEN_PER_OWNER: usize = 8;
/// How often abandoned uploads are looked for.
const SWEEP_EVERY: Duration = Duration::from_secs(30);

/// Why a handle is unknown, in the words every refusal of one uses.
const GONE: &str = "it was never begun, has expired (or made room for newer uploads), or was already committed; begin again";

/// What `artifact_upload_begin` declared.
#[derive(Debug, Clone)]
pub(crate) struct Declared {
    pub name: String,
    pub mime: String,
    pub size: u64,
    /// Lowercase hex.
    pub sha256: String,
}

struct Upload {
    /// Who may continue it: the owner's access key under the store's isolation, so a user's
    /// stateless requests (a new session each) reach their own upload, and under session
    /// isolation only the session that began it does.
    owner: String,
    scope: ArtifactScope,
    declared: Declared,
    received: u64,
    hasher: Sha256,
    file: Option<tokio::fs::File>,
    /// The link path's upload slot, when links are on (discarded with the upload).
    slot: Option<(String, LinkService)>,
    expires: Instant,
    /// The last begin, chunk or commit: the least recently used upload makes room first.
    last_used: Instant,
}

impl Drop for Upload {
    /// However the upload ends (committed, expired, evicted, failed), its slot ends with it:
    /// bytes staged there and never committed are dropped.
    fn drop(&mut self) {
        if let Some((slot, links)) = &self.slot {
            links.discard_slot(slot);
        }
    }
}

/// The uploads in flight.
pub(crate) struct Uploads {
    ttl: Duration,
    open: Mutex<HashMap<String, Arc<tokio::sync::Mutex<Upload>>>>,
}

/// What `begin` hands the view.
#[derive(Debug)]
pub(crate) struct Begun {
    pub handle: String,
    pub expires_in: Duration,
    pub url: Option<String>,
}

fn refused(message: impl Into<String>) -> ToolError {
    ToolError::bad_request(message)
}

impl Uploads {
    pub(crate) fn new(ttl: Duration) -> Uploads {
        Uploads { ttl, open: Mutex::default() }
    }

    /// Drops uploads past their TTL (their temporary files go with them).
    fn sweep(&self) {
        let now = Instant::now();
        self.open.lock().retain(|_, u| u.try_lock().map_or(true, |u| u.expires > now));
    }

    pub(crate) async fn begin(
        &self,
        scope: &ArtifactScope,
        isolation: Isolation,
        declared: Declared,
        max_bytes: u64,
        links: Option<&LinkService>,
    ) -> Result<Begun, ToolError> {
        self.sweep();
        let d = &declared;
        if d.size == 0 {
            return Err(refused("artifact_upload_begin: \"size\" is 0; an empty file has nothing to keep"));
        }
        if d.size > max_bytes {
            return Err(refused(format!(
                "artifact_upload_begin: the file is {} bytes, over the {max_bytes}-byte limit ([apps] max_upload_bytes)",
                d.size
            )));
        }
        if d.sha256.len() != 64 || !d.sha256.chars().all(|c| c.is_ascii_hexdigit()) {
            return Err(refused("artifact_upload_begin: \"sha256\" must be the file's SHA-256 as 64 hex digits"));
        }
        let owner = scope.owner().access_key(isolation);
        self.make_room(&owner, links)?;
        let file = tokio::task::spawn_blocking(tempfile::tempfile)
            .await
            .map_err(|e| ToolError { code: ErrorCode::ArtifactStorageFailed.as_str(), message: format!("cannot stage the upload: {e}") })?
            .map_err(|e| {
                tracing::warn!(target: "stowage::apps", "cannot create an upload's temporary file: {e}");
                ToolError { code: ErrorCode::ArtifactStorageFailed.as_str(), message: "cannot stage the upload; try again later".into() }
            })?;
        let slot = links.and_then(|l| {
            let request = SlotRequest {
                max_bytes: d.size,
                accept: Vec::new(),
                ttl: Some(self.ttl.clamp(Duration::from_secs(60), Duration::from_secs(3600))),
                filename: Some(d.name.clone()),
                namespace: Some("upload".into()),
            };
            let expect = Expected { size: d.size, sha256: d.sha256.to_ascii_lowercase() };
            l.open_staged_slot(scope, request, expect).ok().map(|s| (s, l.clone()))
        });
        let handle = format!("up_{}", uuid::Uuid::new_v4().simple());
        let upload = Upload {
            owner,
            scope: scope.clone(),
            declared,
            received: 0,
            hasher: Sha256::new(),
            file: Some(tokio::fs::File::from_std(file)),
            slot: slot.as_ref().map(|(s, l)| (s.slot.clone(), l.clone())),
            expires: Instant::now() + self.ttl,
            last_used: Instant::now(),
        };
        self.open.lock().insert(handle.clone(), Arc::new(tokio::sync::Mutex::new(upload)));
        Ok(Begun { handle, expires_in: self.ttl, url: slot.map(|(s, _)| s.link.url) })
    }

    /// Makes room for one more upload of `owner`: at [`OPEN_PER_OWNER`], their least recently
    /// used upload that is not busy (no chunk or commit running, no PUT streaming into its
    /// slot) is dropped with its bytes; if every one is busy, the new one is refused.
    fn make_room(&self, owner: &str, links: Option<&LinkService>) -> Result<(), ToolError> {
        let mut open = self.open.lock();
        let mut theirs = 0;
        let mut lru: Option<(Instant, String)> = None;
        for (handle, u) in open.iter() {
            // A locked upload is busy right now; whose it is cannot be read, so it counts.
            let Ok(u) = u.try_lock() else {
                theirs += 1;
                continue;
            };
            if u.owner != owner {
                continue;
            }
            theirs += 1;
            let putting = matches!((&u.slot, links), (Some((slot, _)), Some(l)) if l.slot_state(slot) == Some(SlotState::Uploading));
            if !putting && lru.as_ref().is_none_or(|(t, _)| u.last_used < *t) {
                lru = Some((u.last_used, handle.clone()));
            }
        }
        if theirs < OPEN_PER_OWNER {
            return Ok(());
        }
        let Some((_, handle)) = lru else {
            return Err(refused(format!(
                "artifact_upload_begin: {OPEN_PER_OWNER} uploads are open and all are busy; wait for one to finish"
            )));
        };
        open.remove(&handle);
        tracing::debug!(target: "stowage::apps", "upload {handle} dropped for a new one of the same owner ({OPEN_PER_OWNER} open)");
        Ok(())
    }

    /// The caller's upload `handle`; another owner's answers like an unknown one.
    fn get(&self, owner: &str, handle: &str) -> Result<Arc<tokio::sync::Mutex<Upload>>, ToolError> {
        self.sweep();
        let unknown = || refused(format!("no upload {handle:?}: {GONE}"));
        let u = self.open.lock().get(handle).cloned().ok_or_else(unknown)?;
        // Checked under the upload's own lock by the callers too; here only to answer early.
        if u.try_lock().is_ok_and(|u| u.owner != owner) {
            return Err(unknown());
        }
        Ok(u)
    }

    fn forget(&self, handle: &str) {
        self.open.lock().remove(handle);
    }

    /// Appends `data` (base64) at `offset`; returns (received, total).
    pub(crate) async fn chunk(&self, owner: &str, handle: &str, offset: u64, data: &str) -> Result<(u64, u64), ToolError> {
        let upload = self.get(owner, handle)?;
        let mut u = upload.lock().await;
        if u.owner != owner {
            return Err(refused(format!("no upload {handle:?}: {GONE}")));
        }
        u.last_used = Instant::now();
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(data.trim())
            .map_err(|e| refused(format!("artifact_upload_chunk: \"data\" is not base64 ({e}); send the chunk's bytes base64-encoded")))?;
        if bytes.len() > CHUNK_BYTES {
            return Err(refused(format!("artifact_upload_chunk: a chunk carries at most {CHUNK_BYTES} bytes, this one {}", bytes.len())));
        }
        let received = u.received;
        if offset > received {
            return Err(refused(format!(
                "artifact_upload_chunk: offset {offset} leaves a gap: {received} bytes have arrived; send offset {received} next"
            )));
        }
        if offset < received {
            return Err(refused(format!(
                "artifact_upload_chunk: offset {offset} overlaps what has arrived ({received} bytes); send offset {received} next"
            )));
        }
        let total = u.declared.size;
        if received + bytes.len() as u64 > total {
            return Err(refused(format!(
                "artifact_upload_chunk: {} more bytes would pass the declared size of {total} ({received} have arrived)",
                bytes.len()
            )));
        }
        let file = u.file.as_mut().ok_or_else(|| refused("artifact_upload_chunk: the upload is being committed"))?;
        if let Err(e) = file.write_all(&bytes).await {
            drop(u);
            self.forget(handle);
            tracing::warn!(target: "stowage::apps", "cannot write an upload's chunk: {e}");
            return Err(ToolError {
                code: ErrorCode::ArtifactStorageFailed.as_str(),
                message: "cannot stage the chunk (the upload is dropped); try again later".into(),
            });
        }
        u.hasher.update(&bytes);
        u.received += bytes.len() as u64;
        Ok((u.received, total))
    }

    /// Stores what arrived as the caller's artifact, if it is exactly what was declared.
    /// The upload ends either way.
    pub(crate) async fn commit(
        &self,
        owner: &str,
        handle: &str,
        store: &Arc<dyn ArtifactStore>,
        links: Option<&LinkService>,
    ) -> Result<ArtifactRef, ToolError> {
        let upload = self.get(owner, handle)?;
        let mut u = upload.lock().await;
        if u.owner != owner {
            return Err(refused(format!("no upload {handle:?}: {GONE}")));
        }
        u.last_used = Instant::now();
        let declared = u.declared.clone();
        // The link path: the bytes wait in the slot, staged only if they are exactly what was
        // declared. A PUT still streaming is waited for by the view, not raced.
        if u.received == 0
            && let (Some((slot, _)), Some(links)) = (&u.slot, links)
        {
            if links.slot_state(slot) == Some(SlotState::Uploading) {
                return Err(refused(
                    "artifact_upload_commit: the file is still being uploaded to the link; commit once the PUT has finished",
                ));
            }
            if let Some(staged) = links.take_staged(slot) {
                self.forget(handle);
                // The slot checked both as the bytes arrived; checked here again so that what
                // is stored is what the view declared, whatever the slot did.
                if staged.size != declared.size || !staged.sha256.eq_ignore_ascii_case(&declared.sha256) {
                    return Err(refused(format!(
                        "artifact_upload_commit: the uploaded file is {} bytes with sha256 {}, not the declared {} bytes with sha256 {}; nothing was kept",
                        staged.size, staged.sha256, declared.size, declared.sha256
                    )));
                }
                let file = tokio::fs::File::from_std(staged.file);
                return store.put_stream(Box::pin(file), upload_options(&u.scope, &declared)).await.map_err(stored_error);
            }
        }
        self.forget(handle);
        if u.received == 0 && u.slot.is_some() && links.is_some() {
            return Err(refused(format!(
                "artifact_upload_commit: nothing arrived: no chunk, and no PUT to the upload link with exactly the declared {} bytes and sha256; nothing was kept",
                declared.size
            )));
        }
        if u.received != declared.size {
            return Err(refused(format!(
                "artifact_upload_commit: {} of {} bytes arrived; nothing was kept (begin again and send every chunk)",
                u.received, declared.size
            )));
        }
        let digest = hex::encode(std::mem::take(&mut u.hasher).finalize());
        if !digest.eq_ignore_ascii_case(&declared.sha256) {
            return Err(refused(format!(
                "artifact_upload_commit: the bytes' sha256 is {digest}, not the declared {}; nothing was kept",
                declared.sha256
            )));
        }
        let mut file = u.file.take().ok_or_else(|| refused("artifact_upload_commit: the upload is being committed"))?;
        let staged = file.flush().await.and(file.seek(SeekFrom::Start(0)).await.map(drop));
        if let Err(e) = staged {
            tracing::warn!(target: "stowage::apps", "cannot read an upload back: {e}");
            return Err(ToolError {
                code: ErrorCode::ArtifactStorageFailed.as_str(),
                message: "cannot read the upload back; nothing was kept".into(),
            });
        }
        store.put_stream(Box::pin(file), upload_options(&u.scope, &declared)).await.map_err(stored_error)
    }
}

/// How a committed upload is stored: the caller's scope, the declared name and type.
fn upload_options(scope: &ArtifactScope, declared: &Declared) -> PutOptions {
    let mut opts = PutOptions::scoped(scope.clone()).mime(declared.mime.clone());
    opts.filename = Some(declared.name.clone());
    opts.namespace = Some("upload".into());
    opts.source.insert("uploaded".into(), serde_json::Value::Bool(true));
    opts
}

fn stored_error(e: stowage_core::StoreError) -> ToolError {
    ToolError::from(stowage_http::ApiError::from(e))
}

/// Sweeps `apps`' uploads every [`SWEEP_EVERY`] while the gateway lives.
pub(super) async fn sweep(apps: Weak<super::Apps>) {
    let mut tick = tokio::time::interval(SWEEP_EVERY);
    tick.tick().await;
    loop {
        tick.tick().await;
        match apps.upgrade() {
            Some(a) => a.uploads.sweep(),
            None => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stowage_store::{Access, MemoryStore};

    fn scope(user: &str) -> ArtifactScope {
        ArtifactScope { tenant_id: None, user_id: Some(user.into()), session_id: Some("s".into()), trace_id: None }
    }

    fn key(user: &str) -> String {
        scope(user).owner().access_key(Isolation::User)
    }

    fn declared(bytes: &[u8]) -> Declared {
        Declared {
            name: "f.bin".into(),
            mime: "application/octet-stream".into(),
            size: bytes.len() as u64,
            sha256: hex::encode(Sha256::digest(bytes)),
        }
    }

    fn b64(b: &[u8]) -> String {
        base64::engine::general_purpose::STANDARD.encode(b)
    }

    #[tokio::test]
    async fn chunks_in_order_become_the_owners_artifact() {
        let store: Arc<dyn ArtifactStore> = Arc::new(MemoryStore::builder().build());
        let up = Uploads::new(Duration::from_secs(60));
        let data: Vec<u8> = (0..3000u32).map(|i| (i % 251) as u8).collect();
        let me = scope("me");
        let h = up.begin(&me, Isolation::User, declared(&data), 1 << 20, None).await.unwrap().handle;
        assert_eq!(up.chunk(&key("me"), &h, 0, &b64(&data[..1000])).await.unwrap(), (1000, 3000));
        let gap = up.chunk(&key("me"), &h, 2000, &b64(&data[2000..])).await.unwrap_err().to_string();
        assert!(gap.contains("leaves a gap") && gap.contains("send offset 1000 next"), "{gap}");
        let overlap = up.chunk(&key("me"), &h, 500, &b64(&data[500..1500])).await.unwrap_err().to_string();
        assert!(overlap.contains("overlaps"), "{overlap}");
        // Another owner cannot touch it, and hears what an unknown handle hears.
        let other = up.chunk(&key("other"), &h, 1000, &b64(&data[1000..])).await.unwrap_err().to_string();
        assert!(other.starts_with("bad_request: no upload"), "{other}");
        assert!(up.chunk(&key("me"), &h, 1000, "not base64!").await.unwrap_err().to_string().contains("not base64"));
        up.chunk(&key("me"), &h, 1000, &b64(&data[1000..])).await.unwrap();
        let r = up.commit(&key("me"), &h, &store, None).await.unwrap();
        assert_eq!(r.sha256, hex::encode(Sha256::digest(&data)));
        assert_eq!(store.get(&Access::owner_of(&me), &r.id).await.unwrap(), data);
        assert!(up.commit(&key("me"), &h, &store, None).await.is_err(), "a handle commits once");
    }

    #[tokio::test]
    async fn a_wrong_digest_or_a_short_upload_keeps_nothing() {
        let store: Arc<dyn ArtifactStore> = Arc::new(MemoryStore::builder().build());
        let up = Uploads::new(Duration::from_secs(60));
        let me = scope("me");
        let mut d = declared(b"hello world");
        d.sha256 = "0".repeat(64);
        let h = up.begin(&me, Isolation::User, d, 100, None).await.unwrap().handle;
        up.chunk(&key("me"), &h, 0, &b64(b"hello world")).await.unwrap();
        assert!(up.commit(&key("me"), &h, &store, None).await.unwrap_err().to_string().contains("not the declared"));
        let h = up.begin(&me, Isolation::User, declared(b"hello world"), 100, None).await.unwrap().handle;
        up.chunk(&key("me"), &h, 0, &b64(b"hello")).await.unwrap();
        assert!(up.chunk(&key("me"), &h, 5, &b64(b" world and more")).await.unwrap_err().to_string().contains("pass the declared size"));
        assert!(up.commit(&key("me"), &h, &store, None).await.unwrap_err().to_string().contains("5 of 11 bytes arrived"));
        let listed = store.list(stowage_store::ListQuery::default()).await.unwrap();
        assert!(listed.items.is_empty(), "{listed:?}");
        assert!(up.begin(&me, Isolation::User, declared(b"x"), 0, None).await.unwrap_err().to_string().contains("max_upload_bytes"));
    }

    #[tokio::test]
    async fn who_may_continue_follows_the_stores_isolation() {
        let up = Uploads::new(Duration::from_secs(60));
        let me = scope("me");
        let other_session = ArtifactScope { session_id: Some("s2".into()), ..scope("me") };
        // A stateless client's next request is a new session of the same user.
        let h = up.begin(&me, Isolation::User, declared(b"abc"), 100, None).await.unwrap().handle;
        assert!(up.chunk(&other_session.owner().access_key(Isolation::User), &h, 0, &b64(b"a")).await.is_ok());
        // Under session isolation, only the session that began it.
        let h = up.begin(&me, Isolation::Session, declared(b"abc"), 100, None).await.unwrap().handle;
        assert!(up.chunk(&other_session.owner().access_key(Isolation::Session), &h, 0, &b64(b"a")).await.is_err());
        assert!(up.chunk(&me.owner().access_key(Isolation::Session), &h, 0, &b64(b"a")).await.is_ok());
    }

    #[tokio::test]
    async fn an_abandoned_upload_expires() {
        let up = Uploads::new(Duration::from_millis(20));
        let me = scope("me");
        let h = up.begin(&me, Isolation::User, declared(b"abc"), 100, None).await.unwrap().handle;
        tokio::time::sleep(Duration::from_millis(40)).await;
        assert!(up.chunk(&key("me"), &h, 0, &b64(b"abc")).await.unwrap_err().to_string().contains("has expired"));
        assert!(up.open.lock().is_empty());
    }

    /// Abandoned uploads never lock their owner out: at the cap, the least recently used one
    /// that is not busy makes room; only when every one is busy is a new one refused.
    #[tokio::test]
    async fn at_the_cap_the_least_recently_used_idle_upload_makes_room() {
        let up = Uploads::new(Duration::from_secs(600));
        let me = scope("me");
        let mut handles = Vec::new();
        for _ in 0..OPEN_PER_OWNER {
            handles.push(up.begin(&me, Isolation::User, declared(b"abc"), 100, None).await.unwrap().handle);
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        // The first is used again, so the second is the least recently used.
        up.chunk(&key("me"), &handles[0], 0, &b64(b"a")).await.unwrap();
        // Another owner's uploads neither count nor go.
        let theirs = up.begin(&scope("them"), Isolation::User, declared(b"abc"), 100, None).await.unwrap().handle;
        let newest = up.begin(&me, Isolation::User, declared(b"abc"), 100, None).await.unwrap().handle;
        let gone = up.chunk(&key("me"), &handles[1], 0, &b64(b"a")).await.unwrap_err().to_string();
        assert!(gone.contains("made room for newer uploads"), "{gone}");
        assert!(up.chunk(&key("me"), &handles[0], 1, &b64(b"b")).await.is_ok());
        assert!(up.chunk(&key("them"), &theirs, 0, &b64(b"a")).await.is_ok());
        // Every one busy (a chunk or commit holding it): nothing to drop, so the new one waits.
        let mine: Vec<_> = up.open.lock().iter().filter(|(h, _)| **h != theirs).map(|(_, u)| u.clone()).collect();
        assert_eq!(mine.len(), OPEN_PER_OWNER);
        let busy: Vec<_> = mine.iter().map(|u| u.try_lock().unwrap()).collect();
        let refused = up.begin(&me, Isolation::User, declared(b"abc"), 100, None).await.unwrap_err().to_string();
        assert!(refused.contains("all are busy"), "{refused}");
        drop(busy);
        assert!(up.begin(&me, Isolation::User, declared(b"abc"), 100, None).await.is_ok());
        assert!(up.open.lock().contains_key(&newest));
    }
}
