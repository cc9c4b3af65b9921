//! The web playground: a page served by `stowage serve` at `/` that shows what a tool really
//! returned beside what the model received (bytes, o200k tokens, layers, artifacts), previews
//! artifacts and resources, streams the gateway's events, and chats with the agent.
//!
//! Two halves:
//! - the page itself ([`assets`]): hand-written HTML, CSS and ES modules embedded in the binary
//!   (no CDN, no JavaScript toolchain; ECharts vendored, loaded only when a chart is drawn),
//!   served under a strict Content-Security-Policy;
//! - its JSON API under `/api/` ([`api`], [`artifacts`], [`resources`], [`events`]), the only
//!   thing the page talks to besides the existing routes (signed downloads, `/agent/runs`).
//!   Every API route runs as the authenticated caller, through the gateway's in-process call
//!   API and the store's owner-scoped reads, so the page sees exactly what that caller's MCP
//!   client would, and nothing of anyone else's.
//!
//! The routes are built before the gateway starts (they are merged into its listener); the
//! gateway is handed over through a [`GatewaySlot`] once it runs.

mod api;
mod artifacts;
mod assets;
mod events;
mod resources;
mod viewer;

use std::sync::{Arc, OnceLock};

use axum::Router;
use axum::middleware;
use axum::routing::{get, post};
use stowage_http::{Authenticator, BrowserGuard, LinkService, guard_json_api, require_auth};
use stowage_mcp::Gateway;
use stowage_store::ArtifactStore;

pub use assets::{ASSETS, page_csp};
pub use viewer::{viewer, viewer_document};

/// The gateway the API runs on, set once it has started.
pub type GatewaySlot = Arc<OnceLock<Arc<Gateway>>>;

/// What the playground is built from.
pub struct PlaygroundOptions {
    /// Where the gateway will be ([`GatewaySlot`]); until it is set the API answers 503.
    pub gateway: GatewaySlot,
    /// The artifact store (the artifacts tab reads it as the caller); `None`: nothing is kept.
    pub store: Option<Arc<dyn ArtifactStore>>,
    /// Fresh signed links for previews and downloads; `None` when links are off.
    pub links: Option<LinkService>,
    /// The configured agent model, when `[agent]` is set (the agent tab chats through
    /// `/agent/runs`).
    pub agent_model: Option<String>,
    /// The store, in the banner's words.
    pub store_label: String,
    /// Bearer authentication for the API (the page's own files need none: they hold no data).
    pub auth: Option<Arc<Authenticator>>,
    /// The gateway's Host and Origin lists.
    pub guard: Arc<BrowserGuard>,
    /// The origin of signed links (`links.public_url`) when it is not the page's own: the
    /// page's CSP lets previews load from it.
    pub links_origin: Option<String>,
}

/// The page at `/`, its assets under `/assets/`, and the JSON API under `/api/`.
pub fn router(opts: PlaygroundOptions) -> Router {
    let auth_on = opts.auth.is_some();
    let page = assets::router(opts.links_origin.as_deref(), opts.guard.clone());
    let state = api::Api::new(&opts, auth_on);
    let mut api = Router::new()
        .route("/api/info", get(api::info))
        .route("/api/agent", get(api::agent))
        .route("/api/tools", get(api::tools))
        .route("/api/call", post(api::call))
        .route("/api/calls/{call}/original", get(api::original))
        .route("/api/artifacts", get(artifacts::list))
        .route("/api/artifacts/{id}", get(artifacts::one))
        .route("/api/resources", get(resources::list))
        .route("/api/resources/read", post(resources::read))
        .route("/api/resources/subscribe", post(resources::subscribe))
        .route("/api/resources/unsubscribe", post(resources::unsubscribe))
        .route("/api/events", get(events::stream))
        .with_state(state);
    if let Some(auth) = opts.auth {
        api = api.route_layer(middleware::from_fn_with_state(auth, require_auth));
    }
    api = api.route_layer(middleware::from_fn_with_state(opts.guard, guard_json_api));
    page.merge(api)
}
