//! Step 1, offload: the transform pipeline moves the heavy parts of an answer into the
//! artifact store and leaves compact stubs, reporting each artifact with its JSON pointer.
//!
//! One pipeline per upstream with its own `[gateway.servers.NAME.transform]`, the default one
//! for every other ([`Pipelines`]). The shaper runs them without their own clamp and token
//! counts ([`stowage_transform::TransformInput::clamp`]): it holds the limit and measures on
//! the answer as finally sent, which only it sees.
//!
//! An answer of [`OFF_RUNTIME_BYTES`] or more is transformed on the gateway's CPU pool
//! ([`crate::cpu_pool`]), not on a runtime worker: a 50 MB result takes tens of milliseconds
//! of CPU, and on a 2-core machine two of them at once would otherwise stall every small call
//! behind them.

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use serde_json::Value;
use stowage_core::{ArtifactRef, ArtifactScope, ArtifactSink, PutOptions, StoreError};
use stowage_transform::{Pipeline, TransformConfig, TransformError, TransformInput, TransformOutput, TransformReport};

use crate::output_schema::OutputSchema;

/// Answers at least this large are transformed off the async runtime.
pub const OFF_RUNTIME_BYTES: usize = 64 * 1024;

/// What the shaper knows about the call an answer belongs to.
#[derive(Debug, Clone)]
pub struct CallContext {
    /// The tool's name as the upstream knows it (the artifact id namespace), or the method
    /// (`resources/read`) for answers that are not tool results.
    pub tool: String,
    /// The upstream's configured name: picks the pipeline, and is recorded with artifacts.
    pub upstream: String,
    /// Who owns what the answer's offload stores.
    pub scope: ArtifactScope,
    /// The tool's `outputSchema`, compiled (see [`crate::output_schema`]).
    pub output_schema: Option<Arc<OutputSchema>>,
}

/// One stored artifact and where it was found.
#[derive(Debug, Clone)]
pub struct OffloadedItem {
    /// The stored artifact: id, URI, MIME type, size, hash.
    pub reference: ArtifactRef,
    /// RFC 6901 pointer into the original answer; `/content/3` for a whole typed block that
    /// the pipeline removed (it left `null` in its place), `/content/0/text#/data` for a
    /// value inside JSON text.
    pub pointer: String,
    /// The one-line summary the model reads.
    pub summary: String,
    /// Width and height for images, when the header says.
    pub dimensions: Option<(u32, u32)>,
}

/// The pipeline's output: the answer with stubs in place of heavy parts, and the report.
#[derive(Debug, Clone)]
pub struct Offloaded {
    /// The answer with a stub in place of each offloaded part.
    pub value: Value,
    /// What was stored, in the order the pipeline found it.
    pub items: Vec<OffloadedItem>,
    /// The pipeline's report: layers applied, warnings, clamp.
    pub report: TransformReport,
}

/// Why an answer's offload failed as a whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureKind {
    /// The store refused a value that must not stay inline (a binary, a marked field).
    Store,
    /// The store keeps nothing (`store.backend = "noop"`): a reference would name nothing.
    NotKept,
    /// The answer is not what its method returns (not JSON, not an object).
    Invalid,
}

/// Why offloading failed; a tool's caller gets an `isError` result with `code`.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{code}: {message}")]
pub struct OffloadError {
    /// What went wrong, for the gateway to decide how to answer.
    pub kind: FailureKind,
    /// The stable machine-readable code the caller's `isError` result carries
    /// (`artifact_storage_failed`, or the transform's own).
    pub code: &'static str,
    /// One line for the client; names no server path.
    pub message: String,
}

impl OffloadError {
    pub(crate) fn store(message: impl Into<String>) -> Self {
        OffloadError { kind: FailureKind::Store, code: stowage_core::ErrorCode::ArtifactStorageFailed.as_str(), message: message.into() }
    }

    fn from_transform(e: TransformError) -> Self {
        let kind = match e {
            TransformError::InvalidJson(_) => FailureKind::Invalid,
            _ => FailureKind::Store,
        };
        OffloadError { kind, code: e.code().as_str(), message: e.to_string() }
    }
}

/// How one answer is offloaded.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct OffloadOptions {
    /// A value the store cannot take is withheld with a note rather than failing the answer
    /// (tool results: the model still gets the rest).
    pub withhold: bool,
    /// Characters of head and tail an offloaded text keeps (an error's budget).
    pub preview_chars: Option<usize>,
}

/// The pipelines answers go through: the default one and those of upstreams with their own
/// `[gateway.servers.NAME.transform]`.
#[derive(Clone)]
pub struct Pipelines {
    default: Arc<Pipeline>,
    per_upstream: HashMap<String, Arc<Pipeline>>,
}

impl Pipelines {
    /// Every upstream's answers go through `default` until [`Pipelines::set`] gives one its own.
    pub fn new(default: Arc<Pipeline>) -> Self {
        Pipelines { default, per_upstream: HashMap::new() }
    }

    /// The default pipeline over `sink`, plus one per upstream that has its own transform
    /// settings (`servers` yields each name with its table, if any): what `serve`, `agent` and
    /// the playground all build from the same config.
    pub fn from_config<'a>(
        default: &TransformConfig,
        servers: impl IntoIterator<Item = (&'a String, Option<&'a TransformConfig>)>,
        sink: Arc<dyn ArtifactSink>,
    ) -> Self {
        let mut p = Pipelines::new(Arc::new(Pipeline::new(default.clone(), sink.clone())));
        for (name, t) in servers {
            if let Some(t) = t {
                p.per_upstream.insert(name.clone(), Arc::new(Pipeline::new(t.clone(), sink.clone())));
            }
        }
        p
    }

    /// Gives `upstream` a pipeline of its own.
    pub fn set(&mut self, upstream: impl Into<String>, pipeline: Arc<Pipeline>) {
        self.per_upstream.insert(upstream.into(), pipeline);
    }

    /// The pipeline for answers from `upstream`.
    pub fn of(&self, upstream: &str) -> &Arc<Pipeline> {
        self.per_upstream.get(upstream).unwrap_or(&self.default)
    }
}

/// Runs `raw` (an answer's JSON text, handed over so a large one is parsed once and freed)
/// through `pipeline`.
pub(crate) async fn offload(
    pipeline: &Arc<Pipeline>,
    ctx: &CallContext,
    raw: String,
    opts: OffloadOptions,
) -> Result<Offloaded, OffloadError> {
    let out = transform(pipeline, ctx, raw, opts).await.map_err(OffloadError::from_transform)?;
    let items = out
        .report
        .artifacts
        .iter()
        .map(|a| OffloadedItem {
            reference: a.artifact.clone(),
            pointer: a.pointer.clone(),
            summary: a.summary.clone(),
            dimensions: dimensions(&a.artifact.source),
        })
        .collect();
    Ok(Offloaded { value: out.value, items, report: out.report })
}

async fn transform(
    pipeline: &Arc<Pipeline>,
    ctx: &CallContext,
    raw: String,
    opts: OffloadOptions,
) -> Result<TransformOutput, TransformError> {
    fn input<'a>(tool: &'a str, scope: &'a ArtifactScope, schema: Option<&'a OutputSchema>, opts: OffloadOptions) -> TransformInput<'a> {
        let mut input = TransformInput::new(tool, scope);
        input.output_schema = schema.map(OutputSchema::schema);
        input.withhold_on_store_failure = opts.withhold;
        input.preview_chars = opts.preview_chars;
        input.clamp = false;
        input.count_tokens = false;
        input
    }
    if raw.len() < OFF_RUNTIME_BYTES {
        return pipeline.transform_json_text(&input(&ctx.tool, &ctx.scope, ctx.output_schema.as_deref(), opts), raw).await;
    }
    // The pool thread drives the pipeline's own awaits (store writes) with the runtime's
    // handle; the store's file IO goes to tokio's blocking pool as usual.
    let (tool, scope, schema) = (ctx.tool.clone(), ctx.scope.clone(), ctx.output_schema.clone());
    let pipeline = pipeline.clone();
    let handle = tokio::runtime::Handle::current();
    // A panic in the pipeline is a bug: `run` passes it on, and it fails this call only (the
    // gateway answers it with an internal error).
    crate::cpu_pool::run(move || handle.block_on(pipeline.transform_json_text(&input(&tool, &scope, schema.as_deref(), opts), raw))).await
}

/// Stores `data` as an artifact of the call's owner, through `pipeline`'s sink (its owner and
/// quotas): a part moved out of an answer to fit a budget.
pub(crate) async fn store(pipeline: &Pipeline, ctx: &CallContext, data: Bytes, mime: &str) -> Result<ArtifactRef, OffloadError> {
    let opts = PutOptions::scoped(ctx.scope.clone()).mime(mime).namespace(ctx.tool.clone());
    let r = pipeline.sink().put_bytes(data, opts).await.map_err(|e| OffloadError::store(e.to_string()))?;
    if r.is_truncated() {
        // The noop store keeps nothing: a reference to it would point at nothing.
        return Err(OffloadError {
            kind: FailureKind::NotKept,
            code: "artifact_not_kept",
            message: "the store keeps nothing (store.backend = \"noop\")".into(),
        });
    }
    Ok(r)
}

/// Wraps a sink so that images are stored with their width and height in the record's
/// `source` (read back for the assets' `width`/`height`): the pipeline itself does not look
/// inside images.
pub fn with_dimensions(sink: Arc<dyn ArtifactSink>) -> Arc<dyn ArtifactSink> {
    Arc::new(DimensionsSink(sink))
}

struct DimensionsSink(Arc<dyn ArtifactSink>);

#[async_trait]
impl ArtifactSink for DimensionsSink {
    async fn put_bytes(&self, data: Bytes, mut opts: PutOptions) -> Result<ArtifactRef, StoreError> {
        add_dimensions(&data, &mut opts);
        self.0.put_bytes(data, opts).await
    }

    fn is_noop(&self) -> bool {
        self.0.is_noop()
    }

    // Forwarded, so a sink behind this wrapper that takes the producer's digest still gets it.
    fn prefers_sha256(&self) -> bool {
        self.0.prefers_sha256()
    }

    async fn put_bytes_sha256(&self, data: Bytes, sha256: [u8; 32], mut opts: PutOptions) -> Result<ArtifactRef, StoreError> {
        add_dimensions(&data, &mut opts);
        self.0.put_bytes_sha256(data, sha256, opts).await
    }
}

/// Records an image's width and height with it. Only the header is read (imagesize stops at
/// the first size marker).
fn add_dimensions(data: &[u8], opts: &mut PutOptions) {
    if let Ok(size) = imagesize::blob_size(data) {
        opts.source.insert("width".into(), (size.width as u64).into());
        opts.source.insert("height".into(), (size.height as u64).into());
    }
}

/// Width and height if they were recorded with the artifact.
pub(crate) fn dimensions(source: &serde_json::Map<String, Value>) -> Option<(u32, u32)> {
    let w = source.get("width")?.as_u64()?;
    let h = source.get("height")?.as_u64()?;
    Some((w as u32, h as u32))
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    /// Records which of its put methods was called.
    #[derive(Default)]
    struct Recording(Mutex<Vec<&'static str>>);

    #[async_trait]
    impl ArtifactSink for Recording {
        async fn put_bytes(&self, data: Bytes, opts: PutOptions) -> Result<ArtifactRef, StoreError> {
            self.0.lock().unwrap().push("put_bytes");
            stowage_transform::testing::MemorySink::new().put_bytes(data, opts).await
        }
        fn prefers_sha256(&self) -> bool {
            true
        }
        async fn put_bytes_sha256(&self, data: Bytes, sha256: [u8; 32], opts: PutOptions) -> Result<ArtifactRef, StoreError> {
            self.0.lock().unwrap().push("put_bytes_sha256");
            stowage_transform::testing::MemorySink::new().put_bytes_sha256(data, sha256, opts).await
        }
    }

    #[tokio::test]
    async fn the_dimensions_wrapper_forwards_every_method_of_the_sink() {
        let inner = Arc::new(Recording::default());
        let wrapped = with_dimensions(inner.clone());
        assert!(wrapped.prefers_sha256(), "prefers_sha256 is the inner sink's");
        assert!(!wrapped.is_noop());
        let data = Bytes::from_static(b"forwarded");
        let digest: [u8; 32] = {
            use sha2::Digest;
            sha2::Sha256::digest(&data).into()
        };
        wrapped.put_bytes_sha256(data.clone(), digest, PutOptions::default()).await.unwrap();
        wrapped.put_bytes(data, PutOptions::default()).await.unwrap();
        assert_eq!(*inner.0.lock().unwrap(), ["put_bytes_sha256", "put_bytes"], "the producer's digest reaches the inner sink");
        assert!(with_dimensions(Arc::new(stowage_transform::testing::NoopSink)).is_noop(), "is_noop is the inner sink's");
    }
}
