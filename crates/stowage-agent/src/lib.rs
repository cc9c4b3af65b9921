//! Stowage's agent planner: a ReAct loop over the gateway's tools whose every answer is one
//! [`FinalPayload`], and whose heavy tool output never reaches the model.
//!
//! How the parts fit: a [`Planner`] holds the [`stowage_mcp::Gateway`] and a [`Model`]
//! (OpenAI-compatible Chat Completions or Anthropic Messages, both streamed). A run asks the
//! model, calls the tools it picks through [`stowage_mcp::Gateway::call_tool`] (so the
//! transform pipeline and the caller's scope apply exactly as for an MCP client), feeds back
//! what the gateway shaped for the planner's own host profile (the private `observe` module),
//! and ends in a [`FinalPayload`]: the model's answer plus what the run's artifact collector
//! gathered (schema-marked artifacts, offloaded values as references, sources) — or, when the
//! run ends early, a partial payload with what was collected. The calls of one step run at
//! once, and a parallel plan (`plan` + `join.inject`) hands its branches'
//! results to a join tool without the model carrying them.
//! What happens is told as [`AgentEvent`]s, which [`http::router`] serves as
//! `text/event-stream` on `POST /agent/runs`.
//!
//! The public surface is what the `stowage` binary and the crate's tests and benches use: the
//! types re-exported here, [`events`], [`http`], and [`model`] (the [`Model`] trait and the
//! conversation types a backend or a scripted test model works with). The rest (collector,
//! observation, answer parsing, the streaming scanner) is private to the planner.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod collector;
mod config;
pub mod events;
pub mod http;
pub mod model;
mod observe;
mod payload;
mod plan;
mod planner;
mod stream;

pub use planner::{AgentError, Planner, RunOutcome, RunRequest};

pub use config::{AgentConfig, Backend, Vision};
pub use events::{AgentEvent, RunInfo};
pub use model::{Model, ModelError};
pub use payload::{FinalPayload, Source, SuggestedAction, final_payload_schema};
