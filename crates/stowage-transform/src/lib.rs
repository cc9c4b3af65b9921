//! The transform pipeline: turns a tool result into the same shape with heavy parts replaced
//! by compact artifact stubs, plus a report.
//!
//! The main types and how they interact: a [`Pipeline`] is built from a [`TransformConfig`]
//! (the `[transform]` section of `stowage.toml`) and an [`ArtifactSink`](stowage_core::ArtifactSink)
//! (any store); [`Pipeline::transform`] takes a [`TransformInput`] (tool name, scope, output
//! schema) and the result, runs the layers ([`layers`]) and the observation clamp ([`clamp`]),
//! and returns a [`TransformOutput`]: the rewritten value and a [`TransformReport`] listing
//! every artifact with the JSON Pointer where it was found. The only fatal error is a store
//! failure for a value that must not stay inline ([`TransformError`], code
//! `artifact_storage_failed`).
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! use std::sync::Arc;
//! use stowage_transform::{Pipeline, TransformConfig, TransformInput};
//! # let sink: Arc<dyn stowage_core::ArtifactSink> = stowage_transform::testing::MemorySink::new();
//! let pipeline = Pipeline::new(TransformConfig::default(), sink);
//! let scope = stowage_core::ArtifactScope::session("s1");
//! let out = pipeline
//!     .transform(&TransformInput::new("list_workbooks", &scope), serde_json::json!({"workbooks": []}))
//!     .await
//!     .unwrap();
//! assert_eq!(out.value, serde_json::json!({"workbooks": []}));
//! assert!(out.report.artifacts.is_empty());
//! # });
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod clamp;
mod config;
pub mod describe;
mod error;
pub mod fastjson;
pub mod layers;
pub mod path;
mod pipeline;
mod report;
pub mod stub;
pub mod testing;
pub mod tokens;
pub mod twins;
mod work;

pub use clamp::{ClampEvent, ClampListener, observations_clamped};
pub use config::*;
pub use error::TransformError;
pub use layers::custom::{BoxError, CustomContext, CustomOutcome, CustomTransformer};
pub use layers::hook::CommandHook;
pub use pipeline::{Pipeline, TransformInput, TransformOutput, json_len};
pub use report::{ArtifactRecord, Cut, Layer, LinkRecord, Partial, TransformReport, Warning, WarningKind, Withheld};
