//! Stowage's MCP gateway: it sits between MCP clients and the user's MCP servers and keeps
//! heavy tool output (base64 files, images, audio, huge text) out of the model's context.
//!
//! How the parts fit (client → downstream → [`Gateway`] → upstream → server, and every answer
//! back through the [`shape`]r):
//! - downstream: stdio ([`serve_stdio`]) and Streamable HTTP ([`http_router`]) transports
//!   towards clients; each connection is a [`Session`] of a [`Caller`];
//! - [`Gateway`]: answers initialize/discover and the aggregated lists itself, routes
//!   everything else to the right upstream with ids and progress tokens mapped, relays what
//!   upstreams initiate to the one client it belongs to, and offers the same calls in process
//!   ([`Gateway::list_tools`], [`Gateway::call_tool`]); what happens is published on its
//!   [`events`] bus;
//! - upstream: supervised connections to servers (stdio children, HTTP URLs, in-process
//!   servers), restarted with backoff, shared by all clients or one per client
//!   ([`SessionMode`]);
//! - [`shape`]: the one owner of every answer's shape (tool results, reads, prompts, the
//!   gateway's own tools): the transform pipeline, the output contract (a text line and a
//!   `resource_link` per artifact, the records in `_meta`), the host's profile, the final limit,
//!   and one measurement of what is sent.
//!
//! Messages are relayed as raw JSON: typed MCP models would drop fields they do not know, and
//! a 256 MB result must pass without a line-length cap.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod apps;
pub mod chaining;
pub mod config;
mod cpu_pool;
mod downstream;
pub mod error;
pub mod events;
mod framing;
mod gateway;
pub mod hosts;
mod inputs;
mod jsonrpc;
mod local_tools;
/// The gateway's tool that mints signed links (the planner leaves it out of its model's tools).
pub use local_tools::ARTIFACT_URL_TOOL;
/// Artifacts per `resources/list` page of the caller's artifacts (and the most one
/// `artifact_list` answer holds).
pub use local_tools::resources::PAGE as ARTIFACTS_PER_PAGE;
mod attribution;
mod catalog;
pub mod metrics;
pub mod outbox;
pub mod output_schema;
pub mod run;
mod session;
pub mod shape;
mod tool_error;
mod upstream;

pub use config::{GatewayConfig, ServerConfig, SessionMode, TransportSpec, UpstreamSpec};
pub use downstream::http::{router as http_router, router_with_auth as http_router_with_auth};
pub use downstream::stdio::serve as serve_stdio;
pub use error::GatewayError;
pub use gateway::{
    CallOptions, CallReport, ControlCapabilities, Gateway, GatewayBuilder, HANDSHAKE_VERSIONS, MODERN_VERSIONS, ToolOutcome,
};
pub use outbox::Outbox;
pub use session::{Caller, LOCAL_USER, Session, SessionKind};
pub use upstream::{CallError, Health, InProcessFactory, InProcessPipes, TransportError, probe as probe_upstream, probe_stdio};
