//! Stowage's MCP gateway: it sits between MCP clients and the user's MCP servers and keeps
//! heavy tool output (base64 files, images, audio, huge text) out of the model's context.
//!
//! How the parts fit (client → [`downstream`] → [`gateway`] → [`upstream`] → server, and the
//! result back through [`rewrite`]):
//! - [`downstream`]: stdio and Streamable HTTP transports towards clients; each connection is
//!   a [`session::Session`] with its own artifact scope;
//! - [`gateway::Gateway`]: answers initialize/discover and the aggregated lists itself,
//!   routes everything else through the [`router::Catalog`] to the right upstream with ids
//!   and progress tokens mapped, and relays what upstreams initiate back to the right client
//!   ([`inputs`] turns an upstream's sampling/elicitation requests into `input_required`
//!   results for 2026-07-28 clients);
//! - [`upstream`]: supervised connections to servers (stdio children, HTTP URLs, the in-process
//!   [`demo`]), restarted with backoff;
//! - [`rewrite`] + [`pipeline`]: tools/call results go through the transform pipeline and
//!   become the output contract (text line, `resource_link`, `structuredContent.assets[]`)
//!   with the bytes in the artifact store.
//!
//! Messages are relayed as raw JSON ([`jsonrpc`], [`framing`]): typed MCP models would drop
//! fields they do not know, and a 256 MB result must pass without a line-length cap.
#![forbid(unsafe_code)]

pub mod config;
pub mod demo;
pub mod downstream;
pub mod framing;
pub mod gateway;
pub mod inputs;
pub mod jsonrpc;
pub mod local_tools;
pub mod metrics;
pub mod pipeline;
pub mod rewrite;
pub mod router;
pub mod routes;
pub mod run;
pub mod server_kit;
pub mod session;
pub mod upstream;

pub use config::{GatewayConfig, ServerConfig, UpstreamSpec};
pub use gateway::Gateway;
/// Sample files (PDF, PNG, WAV) made in code, shared with the demo server.
pub use stowage_demo::samples;
