//! stowage-mcp's integration tests, compiled and linked as one binary: each file below is a
//! module. One binary per crate instead of one per file keeps a cold build's disk use and
//! link time down (every test binary links the whole dependency graph); nextest still runs
//! each test in its own process, so the modules cannot share state.

mod common;

mod apps;
mod ask_the_data;
mod chaining;
mod cli_serve;
mod conformance;
mod gateway_core;
mod gateway_http;
mod gateway_stdio;
mod gateway_tls;
mod metrics_tokens;
mod peers;
mod peers_fastmcp;
mod resources;
mod rewrite_schema;
mod upstream_sessions;
mod upstream_sse;
mod upstream_startup;
