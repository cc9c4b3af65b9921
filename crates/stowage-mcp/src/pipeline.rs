//! The transform pipeline as the gateway's [`Offloader`]: a tools/call result goes through
//! the layers into the artifact store, and the report lists every artifact with its pointer.
//! [`crate::rewrite::apply_contract`] then adds what the output contract asks for
//! (`structuredContent.assets[]`, signed URIs), leaving alone the blocks the pipeline already
//! wrote.
//!
//! A result of [`OFF_RUNTIME_BYTES`] or more is transformed on the gateway's CPU pool
//! ([`crate::cpu_pool`]), not on a runtime worker: a 50 MB result takes tens of milliseconds
//! of CPU, and on a 2-core machine two of them at once would otherwise stall every small call
//! behind them.

use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use serde_json::Value;
use stowage_core::{ArtifactRef, ArtifactSink, PutOptions, StoreError};
use stowage_transform::{Pipeline, TransformError, TransformInput, TransformOutput};

use crate::output_schema::OutputSchema;
use crate::rewrite::{CallContext, OffloadError, Offloaded, OffloadedItem, Offloader};

/// Results at least this large are transformed off the async runtime.
pub const OFF_RUNTIME_BYTES: usize = 64 * 1024;

pub struct PipelineOffloader {
    pipeline: Arc<Pipeline>,
}

impl PipelineOffloader {
    pub fn new(pipeline: Arc<Pipeline>) -> Self {
        PipelineOffloader { pipeline }
    }

    async fn transform(&self, ctx: &CallContext, raw: String, withhold: bool) -> Result<TransformOutput, OffloadError> {
        let failed = |e: TransformError| OffloadError { code: e.code(), message: e.to_string() };
        if raw.len() < OFF_RUNTIME_BYTES {
            let mut input = TransformInput::new(&ctx.tool, &ctx.scope);
            input.output_schema = ctx.output_schema.as_deref().map(OutputSchema::schema);
            input.withhold_on_store_failure = withhold;
            return self.pipeline.transform_json_text(&input, raw).await.map_err(failed);
        }
        // The pool thread drives the pipeline's own awaits (store writes) with the runtime's
        // handle; the store's file IO goes to tokio's blocking pool as usual.
        let (tool, scope, schema) = (ctx.tool.clone(), ctx.scope.clone(), ctx.output_schema.clone());
        let pipeline = self.pipeline.clone();
        let handle = tokio::runtime::Handle::current();
        // A panic in the pipeline is a bug: `run` passes it on, and it fails this call only
        // (the gateway answers it with an internal error).
        crate::cpu_pool::run(move || {
            let mut input = TransformInput::new(&tool, &scope);
            input.output_schema = schema.as_deref().map(OutputSchema::schema);
            input.withhold_on_store_failure = withhold;
            handle.block_on(pipeline.transform_json_text(&input, raw))
        })
        .await
        .map_err(failed)
    }
}

#[async_trait]
impl Offloader for PipelineOffloader {
    fn observation_limit(&self) -> Option<usize> {
        let clamp = &self.pipeline.config().clamp;
        clamp.enabled.then_some(clamp.max_observation_chars)
    }

    async fn offload(&self, ctx: &CallContext, raw: String) -> Result<Offloaded, OffloadError> {
        self.offload_with(ctx, raw, false).await
    }

    async fn offload_tool_result(&self, ctx: &CallContext, raw: String) -> Result<Offloaded, OffloadError> {
        self.offload_with(ctx, raw, true).await
    }

    async fn store(&self, ctx: &CallContext, data: Bytes, mime: &str) -> Result<ArtifactRef, OffloadError> {
        let opts = PutOptions::scoped(ctx.scope.clone()).mime(mime).namespace(ctx.tool.clone());
        let r = self
            .pipeline
            .sink()
            .put_bytes(data, opts)
            .await
            .map_err(|e| OffloadError { code: "artifact_storage_failed", message: e.to_string() })?;
        if r.is_truncated() {
            // The noop store keeps nothing: a reference to it would point at nothing.
            return Err(OffloadError { code: "artifact_not_kept", message: "the store keeps nothing (store.backend = \"noop\")".into() });
        }
        Ok(r)
    }
}

impl PipelineOffloader {
    async fn offload_with(&self, ctx: &CallContext, raw: String, withhold: bool) -> Result<Offloaded, OffloadError> {
        let out = self.transform(ctx, raw, withhold).await?;
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
}

/// Wraps a sink so that images are stored with their width and height in the record's
/// `source` (read back by [`PipelineOffloader`] for `assets[].width/height`): the pipeline
/// itself does not look inside images.
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
fn dimensions(source: &serde_json::Map<String, Value>) -> Option<(u32, u32)> {
    let w = source.get("width")?.as_u64()?;
    let h = source.get("height")?.as_u64()?;
    Some((w as u32, h as u32))
}
