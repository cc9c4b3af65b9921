//! Stowage's HTTP surface (axum): signed artifact downloads, upload slots and health checks.
//!
//! Routes (mounted by the gateway on its listener, beside `/mcp`):
//! - `GET|HEAD /artifacts/{id}?token=…` — the bytes, streamed, with ranges and safe headers;
//! - `GET /artifacts/{id}/meta?token=…` — the ArtifactRef JSON;
//! - `PUT /uploads/{slot}?token=…` — a single-use, write-only upload slot;
//! - `GET /healthz`, `GET /readyz`.
//!
//! Every refusal is `{"error":{"code","message"}}` with one of the seed's codes
//! ([`ApiError`]); nothing internal (paths, backend errors) reaches the response.
//! The token decides the owner: downloads need no bearer header, so a link works from any
//! HTTP client, and an owner's token can never reach another owner's artifact.
#![forbid(unsafe_code)]

mod auth;
mod download;
mod error;
mod links;
mod range;
mod upload;

use std::sync::Arc;

use axum::Router;
use axum::routing::{get, put};
use stowage_links::LinkSigner;
use stowage_store::ArtifactStore;

pub use auth::{ApiKeyConfig, AuthConfig, AuthSetupError, Authenticator, Identity, JwtConfig, hash_api_key, require_auth};
pub use error::ApiError;
pub use links::LinkService;
pub use range::{ByteRange, RangeRequest, parse_range};
pub use upload::{SlotRegistry, SlotSpec, SlotState};

/// What the routes share.
#[derive(Clone)]
pub struct HttpState {
    pub store: Arc<dyn ArtifactStore>,
    pub signer: Arc<LinkSigner>,
    pub slots: Arc<SlotRegistry>,
    /// Unix seconds; injectable so tests can expire links without sleeping.
    pub clock: fn() -> u64,
}

impl HttpState {
    pub fn new(store: Arc<dyn ArtifactStore>, signer: Arc<LinkSigner>) -> Self {
        HttpState { store, signer, slots: Arc::new(SlotRegistry::default()), clock: stowage_links::unix_now }
    }
}

/// The artifact, upload and health routes.
pub fn routes(state: HttpState) -> Router {
    Router::new()
        .route("/artifacts/{id}", get(download::artifact).head(download::artifact))
        .route("/artifacts/{id}/meta", get(download::meta))
        .route("/uploads/{slot}", put(upload::upload))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(ready))
        .with_state(state)
}

/// Ready when the store answers a trivial listing.
async fn ready(axum::extract::State(state): axum::extract::State<HttpState>) -> Result<&'static str, ApiError> {
    let query = stowage_store::ListQuery { owner: Some(Default::default()), limit: 1, ..Default::default() };
    state.store.list(query).await.map_err(ApiError::from)?;
    Ok("ready\n")
}
