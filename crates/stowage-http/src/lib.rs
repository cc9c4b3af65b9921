//! Stowage's HTTP surface (axum): signed artifact downloads, upload slots and health checks.
//!
//! Routes (mounted by the gateway on its listener, beside `/mcp`):
//! - `GET|HEAD /artifacts/{id}?token=…` — the bytes, streamed, with ranges and safe headers;
//! - `GET /artifacts/{id}/meta?token=…` — the ArtifactRef JSON;
//! - `PUT /uploads/{slot}?token=…` — a single-use, write-only upload slot, opened by the
//!   gateway through [`LinkService::open_upload_slot`];
//! - `GET /healthz`; `GET /readyz` (503 with a JSON body naming what is not ready: the store's
//!   dependency that failed, `store.database` or `store.bucket` (`store.index`, `store.disk`
//!   for the fs store), or what the [`HttpState::readiness`] check reports, such as a gateway's
//!   down upstreams).
//!
//! They are served by [`listener::serve`]: timeouts, `TCP_NODELAY`, and an ambiguous `Host`
//! refused before any route sees it.
//!
//! Every refusal is `{"error":{"code","message"}}` with one of the stable codes ([`ApiError`]);
//! nothing internal (paths, backend errors) reaches the response. The token decides the owner:
//! downloads need no bearer header, so a link works from any HTTP client, and an owner's token
//! can never reach another owner's artifact. Which of the token's owner ids count is the
//! store's isolation: by default (tenant, user), so a link minted in one session of a user
//! opens what the user stored from any other.
//!
//! ```no_run
//! # fn wire(store: std::sync::Arc<dyn stowage_store::ArtifactStore>, signer: std::sync::Arc<stowage_links::LinkSigner>) {
//! let state = stowage_http::HttpState::new(store, signer);
//! // Shares the state's store, signer, clock and upload slots: slots it opens are the ones
//! // `PUT /uploads/{slot}` accepts.
//! let links: stowage_http::LinkService = state.link_service();
//! let router = stowage_http::routes(state);
//! # }
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod auth;
mod browser;
mod conditional;
mod describe;
mod download;
mod error;
mod links;
pub mod listener;
mod range;
mod upload;

use std::sync::Arc;

use axum::Router;
use axum::routing::{get, put};
use stowage_links::LinkSigner;
use stowage_store::ArtifactStore;

pub use auth::{
    API_KEY_USER_PREFIX, ApiKeyConfig, AuthConfig, AuthError, AuthSetupError, Authenticator, Identity, JWT_USER_PREFIX, JwtConfig,
    hash_api_key, require_auth,
};
pub use browser::{BrowserGuard, guard_json_api, origin_is_loopback};
pub use describe::{Kind, describe, kind_of};
pub use error::ApiError;
pub use links::{LinkService, Links, SlotRequest, UploadSlot};
pub use range::{ByteRange, RangeRequest, parse_range};
pub use upload::{Expected, SlotRegistry, SlotSpec, SlotState, Staged};

/// What the routes share.
#[derive(Clone)]
pub struct HttpState {
    /// Where downloads are read and uploads stored.
    pub store: Arc<dyn ArtifactStore>,
    /// Signs and verifies the links' tokens.
    pub signer: Arc<LinkSigner>,
    /// The open upload slots.
    pub slots: Arc<SlotRegistry>,
    /// Unix seconds; injectable so tests can expire links without sleeping.
    pub clock: fn() -> u64,
    /// More for `/readyz` to check, set once whoever knows it exists (the gateway, after it
    /// starts): `(name, why it is not ready)` for each part that is not.
    pub readiness: Arc<std::sync::OnceLock<ReadinessCheck>>,
}

/// A readiness check: what is not ready, and why.
pub type ReadinessCheck = Arc<dyn Fn() -> Vec<(String, String)> + Send + Sync>;

impl HttpState {
    /// State over `store` and `signer`, with an empty slot registry, the system clock and no
    /// readiness checks.
    pub fn new(store: Arc<dyn ArtifactStore>, signer: Arc<LinkSigner>) -> Self {
        HttpState { store, signer, slots: Arc::new(SlotRegistry::default()), clock: stowage_links::unix_now, readiness: Arc::default() }
    }

    /// The [`LinkService`] over this state's store, signer, slot registry and clock (set the
    /// clock first), so the upload slots it opens are the ones the routes accept.
    pub fn link_service(&self) -> LinkService {
        LinkService::with_slots(self.store.clone(), self.signer.clone(), self.slots.clone(), self.clock)
    }
}

/// The artifact, upload and health routes.
pub fn routes(state: HttpState) -> Router {
    Router::new()
        .route("/artifacts/{id}", get(download::artifact).head(download::artifact))
        .route("/artifacts/{id}/meta", get(download::meta))
        .route("/uploads/{slot}", put(upload::upload))
        .layer(link_cors())
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(ready))
        .with_state(state)
}

/// CORS for the signed-link routes: any page may use a link it holds (an MCP Apps view in a
/// sandboxed frame has an opaque origin), because the link's token is its whole authority.
/// No credentials are allowed, so a browser never attaches cookies or HTTP auth to such a
/// request, and a page without a token can do nothing with them.
fn link_cors() -> tower_http::cors::CorsLayer {
    use axum::http::{Method, header};
    tower_http::cors::CorsLayer::new()
        .allow_origin(tower_http::cors::Any)
        .allow_methods([Method::GET, Method::HEAD, Method::PUT])
        .allow_headers([header::CONTENT_TYPE, header::RANGE, header::IF_NONE_MATCH, header::IF_RANGE])
        .expose_headers([header::CONTENT_LENGTH, header::CONTENT_RANGE, header::CONTENT_TYPE, header::ETAG, header::CONTENT_DISPOSITION])
        .max_age(std::time::Duration::from_secs(600))
}

/// Ready when the store can store (its index answers a round trip and its blob storage takes
/// a write: for the shared backends, the database and the bucket; see
/// [`stowage_store::ArtifactStore::ready`]) and the readiness check reports nothing. The body
/// names the dependency that failed and a few words why (it is unauthenticated: no host,
/// bucket or path); the log has the whole error.
async fn ready(axum::extract::State(state): axum::extract::State<HttpState>) -> axum::response::Response {
    use axum::response::IntoResponse;
    let mut not_ready = serde_json::Map::new();
    if let Err(e) = state.store.ready().await {
        tracing::warn!(target: "stowage::store", "not ready: {e}");
        not_ready.insert(format!("store.{}", e.dependency), serde_json::Value::String(e.reason));
    }
    if let Some(check) = state.readiness.get() {
        for (name, why) in check() {
            not_ready.insert(name, serde_json::Value::String(why));
        }
    }
    if not_ready.is_empty() {
        return "ready\n".into_response();
    }
    let body = serde_json::json!({"ready": false, "not_ready": not_ready});
    (axum::http::StatusCode::SERVICE_UNAVAILABLE, axum::Json(body)).into_response()
}
