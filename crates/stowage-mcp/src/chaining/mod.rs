//! Blob chaining: artifacts passed into tools by reference, so a document or an image one tool
//! produced reaches the next tool without going back through the model.
//!
//! A model writes `artifact://<id>` (or an `https://` URL) in a tool's arguments. Before the
//! call is forwarded, [`translate_inputs`] materializes every such URI the way the tool's
//! configured input rule says (`[gateway.chaining.inputs]`: a signed GET link, inline base64,
//! the UTF-8 text, or a read-only local file removed after the call). Tools with no rule get
//! their arguments as written.
//!
//! Tools that declare their blobs ([`schema`]: AWP's `_awp.blob`, or `x-mcp-file` markers)
//! are shown to the model with `{uri, contentType?}` inputs and `{accept?, prefix?}` outputs;
//! per call an input becomes a short-lived read link and an output an upload slot with a
//! write-only link, and after the call each slot's artifact (`artifact://` URI, contentType,
//! size, sha256) or the fact that it was never written is injected into the result.
//!
//! The scheme policy (only for tools with a rule, whose arguments the gateway reads):
//! `artifact://` is ours and looked up as the caller's owner; `https://` passes through, and is
//! fetched on the model's behalf only from hosts on `fetch_allowed_hosts` (no SSRF); `s3://`
//! only into the store's own bucket ([`S3Buckets`]: the `s3` backend owns its bucket), passed
//! through to `url` tools, which read it themselves; anything else is
//! refused. Every refusal is a one-line `code: message` tool error and the upstream is not
//! called.

mod config;
mod inputs;
mod outputs;
pub mod schema;

pub use config::{ChainingConfig, InputMode};
pub(crate) use inputs::{InputEnv, Materialized, translate_inputs};
pub(crate) use outputs::{OpenSlot, inject, translate_blobs};

/// Which `s3://` buckets the store's S3 backend owns. The seam for the S3 backend: until it
/// lands, no bucket is owned and every `s3://` URI is refused with `artifact_forbidden`.
pub trait S3Buckets: Send + Sync {
    fn owns(&self, bucket: &str) -> bool;
}

/// No S3 backend: owns nothing.
pub struct NoS3;

impl S3Buckets for NoS3 {
    fn owns(&self, _bucket: &str) -> bool {
        false
    }
}

/// The gateway's artifact store decides: the `s3` backend owns its configured bucket.
pub(crate) struct StoreBuckets<'a>(pub Option<&'a std::sync::Arc<dyn stowage_store::ArtifactStore>>);

impl S3Buckets for StoreBuckets<'_> {
    fn owns(&self, bucket: &str) -> bool {
        self.0.is_some_and(|s| s.owns_bucket(bucket))
    }
}
