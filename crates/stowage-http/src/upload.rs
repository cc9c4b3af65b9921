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

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use futures::TryStreamExt;
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
}

/// Where a slot is in its single life.
#[derive(Debug, Clone, PartialEq)]
pub enum SlotState {
    Open,
    Uploading,
    Done(Box<ArtifactRef>),
}

/// The server-side table of upload slots. One registry must be shared by whatever opens slots
/// and the route that receives uploads: [`crate::HttpState::link_service`] does that.
#[derive(Debug, Default)]
pub struct SlotRegistry {
    slots: Mutex<HashMap<String, (SlotSpec, SlotState)>>,
}

impl SlotRegistry {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, (SlotSpec, SlotState)>> {
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
        // An upload in progress outlives its slot's expiry; only idle slots go.
        slots.retain(|_, (spec, state)| now < spec.expires_at || *state == SlotState::Uploading);
        slots.insert(id.clone(), (spec, SlotState::Open));
        id
    }

    /// The slot's state at `now`; `None` for an unknown slot or one that has expired (which
    /// is removed).
    pub fn state(&self, id: &str, now: u64) -> Option<SlotState> {
        let mut slots = self.lock();
        let (spec, state) = slots.get(id)?;
        if now >= spec.expires_at && *state != SlotState::Uploading {
            slots.remove(id);
            return None;
        }
        Some(state.clone())
    }

    /// Ends the slot's life once whoever opened it has read the outcome (the gateway, after the
    /// tool call): an open slot is closed, so a tool cannot write its output after the call
    /// said there was none, and a done slot is forgotten. An upload still running is left to
    /// finish. Returns the state the slot was in; `None` for an unknown or expired one.
    pub fn close(&self, id: &str, now: u64) -> Option<SlotState> {
        let mut slots = self.lock();
        let (spec, state) = slots.get(id)?;
        if now >= spec.expires_at && *state != SlotState::Uploading {
            slots.remove(id);
            return None;
        }
        let state = state.clone();
        if state != SlotState::Uploading {
            slots.remove(id);
        }
        Some(state)
    }

    /// Claims the slot for an upload by `owner` at `now`. The claim goes back to open when the
    /// returned guard is dropped without [`SlotClaim::done`].
    pub(crate) fn claim(self: &Arc<Self>, id: &str, owner: &Owner, now: u64) -> Result<SlotClaim, ApiError> {
        let mut slots = self.lock();
        let Some((spec, state)) = slots.get_mut(id) else { return Err(ApiError::not_found()) };
        // Someone else's slot, an expired one or none at all: indistinguishable.
        if &spec.owner != owner {
            return Err(ApiError::not_found());
        }
        match state {
            SlotState::Uploading => {
                Err(ApiError::new(StatusCode::CONFLICT, "bad_request", "an upload to this slot is already in progress"))
            }
            _ if now >= spec.expires_at => {
                slots.remove(id);
                Err(ApiError::not_found())
            }
            SlotState::Done(_) => Err(ApiError::new(StatusCode::CONFLICT, "bad_request", "this upload slot has already been used")),
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
    pub fn spec(&self) -> &SlotSpec {
        &self.spec
    }

    /// The upload stored `artifact`: the slot is spent.
    pub fn done(mut self, artifact: ArtifactRef) {
        self.done = true;
        if let Some((_, state)) = self.registry.lock().get_mut(&self.id) {
            *state = SlotState::Done(Box::new(artifact));
        }
    }
}

impl Drop for SlotClaim {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        if let Some((_, state)) = self.registry.lock().get_mut(&self.id)
            && *state == SlotState::Uploading
        {
            *state = SlotState::Open;
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
    let r = store_upload(&state, claim.spec(), &headers, body).await?;
    claim.done(r.clone());
    Ok((StatusCode::CREATED, axum::Json(r)).into_response())
}

async fn store_upload(state: &HttpState, spec: &SlotSpec, headers: &HeaderMap, body: Body) -> Result<ArtifactRef, ApiError> {
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
    ApiError::new(StatusCode::UNSUPPORTED_MEDIA_TYPE, "bad_request", message)
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
    ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "bad_request", format!("upload is larger than this slot's limit of {max} bytes"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(owner: &Owner, expires_at: u64) -> SlotSpec {
        SlotSpec { owner: owner.clone(), put: PutOptions::default(), max_bytes: 10, accept: Vec::new(), expires_at }
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
