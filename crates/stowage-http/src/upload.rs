//! `PUT /uploads/{slot}`: write-only, single-use upload slots for output blobs.
//!
//! A slot is created server-side (by the blob-chaining step of the gateway, through
//! [`crate::LinkService::open_upload_slot`]) with its owner, size limit, accepted media types
//! and expiry; the client only gets a write token for its id. The upload streams into the
//! store, so limits are enforced as bytes arrive, and the artifact appears atomically or not at
//! all. A slot is claimed when an upload starts (a second concurrent PUT is refused), released
//! if that upload fails or its client goes away mid-body (a [`SlotClaim`] guard: the handler's
//! future may simply be dropped), and spent once it succeeds. An expired slot is removed and
//! answers like one that never existed.
//!
//! A slot opened with an expected size and sha256 ([`SlotSpec::expect`]) is *staged*: its PUT
//! writes the body to an anonymous temporary file (unlinked from the start, so nothing of it
//! outlives the process, whatever kills it), hashed as it arrives, and keeps it only when it is
//! exactly the declared bytes. Nothing reaches the store until whoever opened the slot takes
//! the bytes ([`SlotRegistry::take_staged`]) and commits them; a slot that expires or is
//! discarded first takes its file with it. That is how an upload that names its digest up
//! front becomes an artifact only on its commit, and how a wrong one can never touch an
//! artifact that was already there (the same bytes are the same content address).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use stowage_core::ErrorCode;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use futures::{StreamExt, TryStreamExt};
use sha2::{Digest, Sha256};
use stowage_core::{ArtifactRef, Owner, PutOptions, StoreError, normalize_media_type};
use stowage_links::Operation;
use tokio_util::io::StreamReader;

use crate::download::token_param;
use crate::{ApiError, HttpState};

/// What an upload slot accepts and where its artifact goes.
#[derive(Debug, Clone, PartialEq)]
pub struct SlotSpec {
    /// Who may upload: a write token must carry exactly these ids (the slot's link is minted
    /// for them together with the slot, so no other owner has a reason to hold one).
    pub owner: Owner,
    /// Put options for the resulting artifact (scope, namespace, filename, source).
    pub put: PutOptions,
    /// Largest accepted body, in bytes (the store's own limits apply too).
    pub max_bytes: u64,
    /// Accepted media types (`image/png`, `image/*`, `*/*`); empty accepts anything.
    pub accept: Vec<String>,
    /// Unix seconds from which the slot is gone (an upload already running may finish).
    pub expires_at: u64,
    /// A staged slot: the exact bytes the upload must be. The body waits in a temporary file
    /// until [`SlotRegistry::take_staged`]; `None` stores it as it arrives.
    pub expect: Option<Expected>,
}

/// The bytes a staged slot waits for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expected {
    /// Size in bytes.
    pub size: u64,
    /// Lowercase hex.
    pub sha256: String,
}

/// Where a slot is in its single life.
#[derive(Debug, Clone, PartialEq)]
pub enum SlotState {
    /// Waiting for its upload.
    Open,
    /// An upload is streaming in.
    Uploading,
    /// Uploaded and stored as this artifact.
    Done(Box<ArtifactRef>),
    /// A staged slot received exactly the expected bytes; they wait for
    /// [`SlotRegistry::take_staged`].
    Staged,
}

/// A staged upload's bytes, handed to whoever commits them: the body, rewound, in an anonymous
/// temporary file that disappears when this is dropped.
#[derive(Debug)]
pub struct Staged {
    /// The bytes, rewound to the start.
    pub file: std::fs::File,
    /// Their size.
    pub size: u64,
    /// Lowercase hex, computed as the bytes arrived.
    pub sha256: String,
    /// The upload's `Content-Type`, normalized.
    pub mime: Option<String>,
}

struct Slot {
    spec: SlotSpec,
    state: SlotState,
    staged: Option<Staged>,
}

/// The server-side table of upload slots. One registry must be shared by whatever opens slots
/// and the route that receives uploads: [`crate::HttpState::link_service`] does that.
#[derive(Default)]
pub struct SlotRegistry {
    slots: Mutex<HashMap<String, Slot>>,
}

impl std::fmt::Debug for SlotRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlotRegistry").field("slots", &self.lock().len()).finish()
    }
}

impl SlotRegistry {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Slot>> {
        // Every change is one assignment under the lock, so a panic elsewhere cannot leave the
        // table half-updated: poisoning is ignored.
        self.slots.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers a slot under a fresh random id and returns the id. Slots expired at `now`
    /// (Unix seconds) are dropped on the way, so abandoned slots cannot pile up.
    pub fn create(&self, spec: SlotSpec, now: u64) -> String {
        let mut raw = [0u8; 16];
        // A slot id is a capability name paired with a token; randomness keeps it unguessable
        // even to someone who sees other slot ids.
        getrandom_fill(&mut raw);
        let id = format!("slot_{}", raw.iter().map(|b| format!("{b:02x}")).collect::<String>());
        let mut slots = self.lock();
        // An upload in progress outlives its slot's expiry; only idle slots go (staged bytes
        // nobody took with them).
        slots.retain(|_, s| now < s.spec.expires_at || s.state == SlotState::Uploading);
        slots.insert(id.clone(), Slot { spec, state: SlotState::Open, staged: None });
        id
    }

    /// The slot's state at `now`; `None` for an unknown slot or one that has expired (which
    /// is removed).
    pub fn state(&self, id: &str, now: u64) -> Option<SlotState> {
        let mut slots = self.lock();
        let slot = slots.get(id)?;
        if now >= slot.spec.expires_at && slot.state != SlotState::Uploading {
            slots.remove(id);
            return None;
        }
        Some(slot.state.clone())
    }

    /// Ends the slot's life once whoever opened it has read the outcome (the gateway, after the
    /// tool call): an open slot is closed, so a tool cannot write its output after the call
    /// said there was none, and a done slot is forgotten. An upload still running is left to
    /// finish. Returns the state the slot was in; `None` for an unknown or expired one.
    pub fn close(&self, id: &str, now: u64) -> Option<SlotState> {
        let mut slots = self.lock();
        let slot = slots.get(id)?;
        if now >= slot.spec.expires_at && slot.state != SlotState::Uploading {
            slots.remove(id);
            return None;
        }
        let state = slot.state.clone();
        if state != SlotState::Uploading {
            slots.remove(id);
        }
        Some(state)
    }

    /// A staged slot's bytes, ending the slot; `None` (and the slot left as it is) unless the
    /// slot is staged and not expired.
    pub fn take_staged(&self, id: &str, now: u64) -> Option<Staged> {
        let mut slots = self.lock();
        let slot = slots.get(id)?;
        if slot.state != SlotState::Staged || now >= slot.spec.expires_at {
            return None;
        }
        slots.remove(id).and_then(|s| s.staged)
    }

    /// Forgets the slot whatever its state: staged bytes go, and an upload still running
    /// finds nowhere to land (it stores nothing).
    pub fn discard(&self, id: &str) {
        self.lock().remove(id);
    }

    /// Claims the slot for an upload by `owner` at `now`. The claim goes back to open when the
    /// returned guard is dropped without [`SlotClaim::done`].
    pub(crate) fn claim(self: &Arc<Self>, id: &str, owner: &Owner, now: u64) -> Result<SlotClaim, ApiError> {
        let mut slots = self.lock();
        let Some(Slot { spec, state, .. }) = slots.get_mut(id) else { return Err(ApiError::not_found()) };
        // Someone else's slot, an expired one or none at all: indistinguishable.
        if &spec.owner != owner {
            return Err(ApiError::not_found());
        }
        match state {
            SlotState::Uploading => {
                Err(ApiError::new(StatusCode::CONFLICT, ErrorCode::BadRequest, "an upload to this slot is already in progress"))
            }
            _ if now >= spec.expires_at => {
                slots.remove(id);
                Err(ApiError::not_found())
            }
            SlotState::Done(_) | SlotState::Staged => {
                Err(ApiError::new(StatusCode::CONFLICT, ErrorCode::BadRequest, "this upload slot has already been used"))
            }
            SlotState::Open => {
                *state = SlotState::Uploading;
                Ok(SlotClaim { registry: self.clone(), id: id.to_owned(), spec: spec.clone(), done: false })
            }
        }
    }
}

/// A slot claimed by one upload. Dropped without [`SlotClaim::done`] — the upload failed, or
/// its client disconnected and the server dropped the handler mid-body — it releases the slot
/// for another attempt.
pub(crate) struct SlotClaim {
    registry: Arc<SlotRegistry>,
    id: String,
    spec: SlotSpec,
    done: bool,
}

impl SlotClaim {
    pub(crate) fn spec(&self) -> &SlotSpec {
        &self.spec
    }

    /// The upload stored `artifact`: the slot is spent.
    pub(crate) fn done(mut self, artifact: ArtifactRef) {
        self.done = true;
        if let Some(slot) = self.registry.lock().get_mut(&self.id) {
            slot.state = SlotState::Done(Box::new(artifact));
        }
    }

    /// The upload staged exactly the expected bytes: they wait in the slot. A slot discarded
    /// meanwhile keeps nothing (the file is dropped here).
    pub(crate) fn staged(mut self, staged: Staged) {
        self.done = true;
        if let Some(slot) = self.registry.lock().get_mut(&self.id) {
            slot.state = SlotState::Staged;
            slot.staged = Some(staged);
        }
    }
}

impl Drop for SlotClaim {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        if let Some(slot) = self.registry.lock().get_mut(&self.id)
            && slot.state == SlotState::Uploading
        {
            slot.state = SlotState::Open;
        }
    }
}

fn getrandom_fill(buf: &mut [u8]) {
    // Fall back to time-derived bytes only if the OS RNG is unavailable, which on Linux means
    // the process is already in deep trouble; slot ids are still paired with signed tokens.
    if getrandom::fill(buf).is_err() {
        let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos();
        for (i, b) in buf.iter_mut().enumerate() {
            *b = (t >> ((i % 16) * 8)) as u8;
        }
    }
}

/// Does `mime` match one of `accept` (exact, `type/*` or `*/*`)?
pub(crate) fn accepts(accept: &[String], mime: &str) -> bool {
    if accept.is_empty() {
        return true;
    }
    let mime = mime.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    let (top, _) = mime.split_once('/').unwrap_or((&mime, ""));
    accept.iter().any(|a| {
        let a = a.trim().to_ascii_lowercase();
        a == "*/*" || a == mime || a.strip_suffix("/*").is_some_and(|t| t == top)
    })
}

pub(crate) async fn upload(
    State(state): State<HttpState>,
    Path(slot): Path<String>,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let token = token_param(&uri)?;
    let now = (state.clock)();
    let claims = state.signer.ring().verify_for(&token, Operation::Write, &slot, now)?;
    let claim = state.slots.claim(&slot, &claims.owner, now)?;
    // On error, or if this future is dropped while the body streams in, `claim` is dropped
    // and the slot is open again.
    let mime = check_headers(claim.spec(), &headers)?;
    if let Some(expect) = claim.spec().expect.clone() {
        let staged = stage_upload(&expect, mime, body).await?;
        let answer = serde_json::json!({"staged": true, "size": staged.size, "sha256": staged.sha256});
        claim.staged(staged);
        return Ok((StatusCode::ACCEPTED, axum::Json(answer)).into_response());
    }
    let r = store_upload(&state, claim.spec(), mime, body).await?;
    claim.done(r.clone());
    Ok((StatusCode::CREATED, axum::Json(r)).into_response())
}

/// The upload's media type, if it sent one; refusals for what the slot does not take.
fn check_headers(spec: &SlotSpec, headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    // The uploader controls its Content-Type, so a list, a wildcard or garbage is its mistake
    // to fix: refused here rather than left to the store, which would type the bytes itself.
    let mime = match headers.get(header::CONTENT_TYPE) {
        None => None,
        Some(v) => {
            let claimed = v.to_str().map_err(|_| unsupported("Content-Type is not ASCII; send a single type/subtype".into()))?;
            // An empty header says as little as none.
            if claimed.trim().is_empty() { None } else { Some(normalize_media_type(claimed).map_err(|e| unsupported(e.to_string()))?) }
        }
    };
    if let Some(m) = &mime {
        if !accepts(&spec.accept, m) {
            return Err(unsupported(format!("this slot accepts {}, not {m}", spec.accept.join(", "))));
        }
    } else if !spec.accept.is_empty() {
        return Err(ApiError::bad_request(format!("set Content-Type; this slot accepts {}", spec.accept.join(", "))));
    }
    let declared = headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > spec.max_bytes) {
        return Err(too_large(spec.max_bytes));
    }
    Ok(mime)
}

/// Writes the body to an anonymous temporary file, hashing it, and keeps it only when it is
/// exactly `expect`.
async fn stage_upload(expect: &Expected, mime: Option<String>, body: Body) -> Result<Staged, ApiError> {
    use tokio::io::{AsyncSeekExt, AsyncWriteExt};
    let unavailable = |e: std::io::Error| {
        tracing::warn!(target: "stowage::http", "cannot stage an upload: {e}");
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, ErrorCode::ArtifactStorageFailed, "cannot stage the upload now; try again later")
    };
    let file = tokio::task::spawn_blocking(tempfile::tempfile).await.map_err(|e| unavailable(std::io::Error::other(e)))?;
    let mut file = tokio::fs::File::from_std(file.map_err(unavailable)?);
    let mut hasher = Sha256::new();
    let mut size = 0u64;
    let mut stream = body.into_data_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| ApiError::bad_request(format!("the upload broke off: {e}")))?;
        size += chunk.len() as u64;
        if size > expect.size {
            return Err(mismatch(expect, &format!("more than {} bytes", expect.size)));
        }
        hasher.update(&chunk);
        file.write_all(&chunk).await.map_err(unavailable)?;
    }
    let sha256 = hex::encode(hasher.finalize());
    if size != expect.size || !sha256.eq_ignore_ascii_case(&expect.sha256) {
        return Err(mismatch(expect, &format!("{size} bytes with sha256 {sha256}")));
    }
    file.flush().await.map_err(unavailable)?;
    file.seek(std::io::SeekFrom::Start(0)).await.map_err(unavailable)?;
    Ok(Staged { file: file.into_std().await, size, sha256, mime })
}

fn mismatch(expect: &Expected, got: &str) -> ApiError {
    ApiError::bad_request(format!(
        "the body is {got}, not the declared {} bytes with sha256 {}; nothing was kept (send exactly the declared file)",
        expect.size, expect.sha256
    ))
}

async fn store_upload(state: &HttpState, spec: &SlotSpec, mime: Option<String>, body: Body) -> Result<ArtifactRef, ApiError> {
    // Count bytes as they stream so a body without (or lying about) Content-Length is cut off
    // at the slot's limit instead of filling the disk.
    let max = spec.max_bytes;
    let mut seen = 0u64;
    let stream = body.into_data_stream().map_err(std::io::Error::other).and_then(move |chunk| {
        seen += chunk.len() as u64;
        let over = seen > max;
        async move {
            if over {
                Err(std::io::Error::new(std::io::ErrorKind::FileTooLarge, "upload exceeds the slot's size limit"))
            } else {
                Ok(chunk)
            }
        }
    });
    let mut opts = spec.put.clone();
    if opts.mime_type.is_none() {
        opts.mime_type = mime;
    }
    match state.store.put_stream(Box::pin(StreamReader::new(stream)), opts).await {
        Ok(r) => Ok(r),
        Err(StoreError::Backend { source, .. }) if is_too_large(source.as_ref()) => Err(too_large(max)),
        Err(e) => Err(e.into()),
    }
}

fn unsupported(message: String) -> ApiError {
    ApiError::new(StatusCode::UNSUPPORTED_MEDIA_TYPE, ErrorCode::BadRequest, message)
}

fn is_too_large(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur = Some(e);
    while let Some(err) = cur {
        if let Some(io) = err.downcast_ref::<std::io::Error>()
            && io.kind() == std::io::ErrorKind::FileTooLarge
        {
            return true;
        }
        cur = err.source();
    }
    false
}

fn too_large(max: u64) -> ApiError {
    ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, ErrorCode::BadRequest, format!("upload is larger than this slot's limit of {max} bytes"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(owner: &Owner, expires_at: u64) -> SlotSpec {
        SlotSpec { owner: owner.clone(), put: PutOptions::default(), max_bytes: 10, accept: Vec::new(), expires_at, expect: None }
    }

    fn artifact() -> ArtifactRef {
        let sha = "b".repeat(64);
        let id = stowage_core::ArtifactId::from_content(None, &sha);
        ArtifactRef {
            uri: id.uri(),
            id,
            mime_type: None,
            size_bytes: 0,
            filename: None,
            sha256: sha,
            scope: Default::default(),
            source: Default::default(),
            created_at: time::OffsetDateTime::UNIX_EPOCH,
            expires_at: None,
        }
    }

    #[test]
    fn a_claim_dropped_unfinished_reopens_the_slot_and_a_finished_one_spends_it() {
        let reg = Arc::new(SlotRegistry::default());
        let owner = Owner { user_id: Some("u".into()), ..Default::default() };
        let id = reg.create(spec(&owner, 100), 0);
        let claim = reg.claim(&id, &owner, 1).unwrap();
        assert_eq!(reg.state(&id, 1), Some(SlotState::Uploading));
        assert_eq!(reg.claim(&id, &owner, 1).err().map(|e| e.status), Some(StatusCode::CONFLICT), "one upload at a time");
        drop(claim);
        assert_eq!(reg.state(&id, 1), Some(SlotState::Open));
        reg.claim(&id, &owner, 2).unwrap().done(artifact());
        assert_eq!(reg.state(&id, 2), Some(SlotState::Done(Box::new(artifact()))));
        assert_eq!(reg.claim(&id, &owner, 3).err().map(|e| e.status), Some(StatusCode::CONFLICT), "single use");
    }

    #[test]
    fn a_closed_slot_takes_no_upload_and_a_running_one_is_left_to_finish() {
        let reg = Arc::new(SlotRegistry::default());
        let owner = Owner { user_id: Some("u".into()), ..Default::default() };
        let open = reg.create(spec(&owner, 100), 0);
        assert_eq!(reg.close(&open, 1), Some(SlotState::Open));
        assert_eq!(reg.claim(&open, &owner, 2).err().map(|e| e.status), Some(StatusCode::NOT_FOUND), "closed: gone");
        let running = reg.create(spec(&owner, 100), 0);
        let claim = reg.claim(&running, &owner, 1).unwrap();
        assert_eq!(reg.close(&running, 2), Some(SlotState::Uploading));
        claim.done(artifact());
        assert_eq!(reg.close(&running, 3), Some(SlotState::Done(Box::new(artifact()))));
        assert_eq!(reg.close(&running, 3), None, "a done slot is forgotten once read");
        assert_eq!(reg.close("slot_unknown", 3), None);
    }

    #[test]
    fn expired_and_foreign_slots_look_unknown_and_expired_ones_go() {
        let reg = Arc::new(SlotRegistry::default());
        let owner = Owner { user_id: Some("u".into()), ..Default::default() };
        let other = Owner { user_id: Some("u".into()), session_id: Some("s".into()), ..Default::default() };
        let id = reg.create(spec(&owner, 100), 0);
        let unknown = reg.claim("slot_unknown", &owner, 1).err().unwrap();
        assert_eq!(reg.claim(&id, &other, 1).err(), Some(unknown.clone()), "another owner's slot");
        assert_eq!(reg.claim(&id, &owner, 100).err(), Some(unknown), "expired");
        assert_eq!(reg.state(&id, 0), None, "removed on the way");

        // Creating a slot sweeps idle expired ones, but not one whose upload is running.
        let idle = reg.create(spec(&owner, 100), 0);
        let busy = reg.create(spec(&owner, 100), 0);
        let claim = reg.claim(&busy, &owner, 50).unwrap();
        reg.create(spec(&owner, 300), 200);
        assert_eq!(reg.lock().len(), 2);
        assert!(!reg.lock().contains_key(&idle));
        claim.done(artifact());
        assert_eq!(reg.state(&busy, 200), None, "spent and expired");
    }

    #[test]
    fn media_type_matching() {
        let acc = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(accepts(&acc(&[]), "anything/at-all"));
        assert!(accepts(&acc(&["image/png"]), "image/png"));
        assert!(accepts(&acc(&["image/png"]), "IMAGE/PNG; q=1"));
        assert!(accepts(&acc(&["image/*"]), "image/webp"));
        assert!(accepts(&acc(&["*/*"]), "text/plain"));
        assert!(!accepts(&acc(&["image/*"]), "text/html"));
        assert!(!accepts(&acc(&["image/png"]), "image/pngx"));
        assert!(!accepts(&acc(&["image/*"]), "imagex/png"));
    }
}
