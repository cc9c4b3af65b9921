//! `PUT /uploads/{slot}`: write-only, single-use upload slots for output blobs.
//!
//! A slot is created server-side (by the blob-chaining step of the gateway) with its owner,
//! size limit and accepted media types; the client only gets a write token for its id. The
//! upload streams into the store, so limits are enforced as bytes arrive, and the artifact
//! appears atomically or not at all. A slot is claimed when an upload starts (a second
//! concurrent PUT is refused), released if that upload fails, and spent once it succeeds.

use std::collections::HashMap;
use std::sync::Mutex;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use futures::TryStreamExt;
use stowage_core::{ArtifactRef, Owner, PutOptions, StoreError};
use stowage_links::Operation;
use tokio_util::io::StreamReader;

use crate::download::token_param;
use crate::{ApiError, HttpState};

/// What an upload slot accepts and where its artifact goes.
#[derive(Debug, Clone, PartialEq)]
pub struct SlotSpec {
    pub owner: Owner,
    /// Put options for the resulting artifact (scope, namespace, filename, source).
    pub put: PutOptions,
    /// Largest accepted body, in bytes (the store's own limits apply too).
    pub max_bytes: u64,
    /// Accepted media types (`image/png`, `image/*`, `*/*`); empty accepts anything.
    pub accept: Vec<String>,
}

/// Where a slot is in its single life.
#[derive(Debug, Clone, PartialEq)]
pub enum SlotState {
    Open,
    Uploading,
    Done(Box<ArtifactRef>),
}

/// The server-side table of upload slots.
#[derive(Debug, Default)]
pub struct SlotRegistry {
    slots: Mutex<HashMap<String, (SlotSpec, SlotState)>>,
}

impl SlotRegistry {
    /// Registers a slot under a fresh random id and returns the id.
    pub fn create(&self, spec: SlotSpec) -> String {
        let mut raw = [0u8; 16];
        // A slot id is a capability name paired with a token; randomness keeps it unguessable
        // even to someone who sees other slot ids.
        getrandom_fill(&mut raw);
        let id = format!("slot_{}", raw.iter().map(|b| format!("{b:02x}")).collect::<String>());
        self.slots.lock().expect("slot table").insert(id.clone(), (spec, SlotState::Open));
        id
    }

    /// The slot's state, for the owner that created it.
    pub fn state(&self, id: &str) -> Option<SlotState> {
        self.slots.lock().expect("slot table").get(id).map(|(_, s)| s.clone())
    }

    fn claim(&self, id: &str, owner: &Owner) -> Result<SlotSpec, ApiError> {
        let mut slots = self.slots.lock().expect("slot table");
        match slots.get_mut(id) {
            Some((spec, state)) if &spec.owner == owner => match state {
                SlotState::Open => {
                    *state = SlotState::Uploading;
                    Ok(spec.clone())
                }
                SlotState::Uploading => {
                    Err(ApiError::new(StatusCode::CONFLICT, "bad_request", "an upload to this slot is already in progress"))
                }
                SlotState::Done(_) => Err(ApiError::new(StatusCode::CONFLICT, "bad_request", "this upload slot has already been used")),
            },
            // Someone else's slot or none at all: indistinguishable.
            _ => Err(ApiError::not_found()),
        }
    }

    fn finish(&self, id: &str, result: Option<ArtifactRef>) {
        if let Some((_, state)) = self.slots.lock().expect("slot table").get_mut(id) {
            *state = match result {
                Some(r) => SlotState::Done(Box::new(r)),
                None => SlotState::Open,
            };
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
    let claims = state.signer.ring().verify_for(&token, Operation::Write, &slot, (state.clock)())?;
    let spec = state.slots.claim(&slot, &claims.owner)?;
    let result = store_upload(&state, &spec, &headers, body).await;
    state.slots.finish(&slot, result.as_ref().ok().cloned());
    let r = result?;
    Ok((StatusCode::CREATED, axum::Json(r)).into_response())
}

async fn store_upload(state: &HttpState, spec: &SlotSpec, headers: &HeaderMap, body: Body) -> Result<ArtifactRef, ApiError> {
    let mime = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).map(str::to_owned);
    if let Some(m) = &mime {
        if !accepts(&spec.accept, m) {
            return Err(ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "bad_request",
                format!("this slot accepts {}, not {m}", spec.accept.join(", ")),
            ));
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
        opts.mime_type = mime.filter(|m| !m.is_empty());
    }
    match state.store.put_stream(Box::pin(StreamReader::new(stream)), opts).await {
        Ok(r) => Ok(r),
        Err(StoreError::Backend { source, .. }) if is_too_large(source.as_ref()) => Err(too_large(max)),
        Err(e) => Err(e.into()),
    }
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
