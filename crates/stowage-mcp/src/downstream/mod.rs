//! Downstream transports: how clients reach the gateway.
//!
//! - [`stdio`]: one session over stdin/stdout, for hosts that spawn a command;
//! - [`http`]: Streamable HTTP at `/mcp` (sessions via `Mcp-Session-Id`, SSE responses,
//!   stateless 2026-07-28 requests), plus `/metrics`, with DNS-rebinding protection.

pub(crate) mod http;
pub(crate) mod stdio;
pub(crate) mod streams;
