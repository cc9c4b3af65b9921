//! L5: custom transformers, the escape hatch for what no built-in layer does. They see the raw
//! result first and may rewrite it; the built-in layers then still run on what they return,
//! unless a transformer says its output is final (then only the observation clamp follows).
//!
//! A failing transformer becomes a warning and the result goes on unchanged: user code can
//! never lose a tool result. Small closures implement the trait:
//!
//! ```
//! use stowage_transform::{CustomOutcome, CustomTransformer};
//! let redact = |tool: &str, v: &serde_json::Value| -> Result<CustomOutcome, stowage_transform::BoxError> {
//!     if tool != "get_user" { return Ok(CustomOutcome::Unchanged) }
//!     let mut v = v.clone();
//!     v["password"] = "<redacted>".into();
//!     Ok(CustomOutcome::Replace(v))
//! };
//! let boxed: Box<dyn CustomTransformer> = Box::new(redact);
//! # let _ = boxed;
//! ```

use async_trait::async_trait;
use serde_json::Value;
use stowage_core::{ArtifactScope, ArtifactSink};

pub use stowage_core::BoxError;

/// What a custom transformer decided.
#[derive(Debug, Clone, PartialEq)]
pub enum CustomOutcome {
    /// Leave the result as it is.
    Unchanged,
    /// Use this value; the remaining layers still run on it.
    Replace(Value),
    /// Use this value and skip the remaining layers (the clamp still applies).
    Final(Value),
}

/// What a transformer knows about the call.
pub struct CustomContext<'a> {
    /// The tool whose result this is.
    pub tool_name: &'a str,
    /// Whose call it is (artifacts stored go to this owner).
    pub scope: &'a ArtifactScope,
    /// The pipeline's sink, for transformers that store things themselves.
    pub sink: &'a dyn ArtifactSink,
}

/// A user-provided transformer (L5).
#[async_trait]
pub trait CustomTransformer: Send + Sync {
    /// A name for warnings.
    fn name(&self) -> &str {
        "custom transformer"
    }

    /// Rewrites `value` (the whole result), or leaves it; an error becomes a warning and the
    /// result goes on unchanged.
    async fn transform(&self, ctx: &CustomContext<'_>, value: &Value) -> Result<CustomOutcome, BoxError>;
}

/// `()` changes nothing, so "no transformer" needs no `Option`.
#[async_trait]
impl CustomTransformer for () {
    async fn transform(&self, _: &CustomContext<'_>, _: &Value) -> Result<CustomOutcome, BoxError> {
        Ok(CustomOutcome::Unchanged)
    }
}

/// Synchronous closures: `|tool_name, value| -> Result<CustomOutcome, BoxError>`.
#[async_trait]
impl<F> CustomTransformer for F
where
    F: Fn(&str, &Value) -> Result<CustomOutcome, BoxError> + Send + Sync,
{
    async fn transform(&self, ctx: &CustomContext<'_>, value: &Value) -> Result<CustomOutcome, BoxError> {
        self(ctx.tool_name, value)
    }
}
