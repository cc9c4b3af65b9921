//! The transform pipeline ([`stowage_transform::Pipeline`]) as the gateway's [`Offloader`].
//!
//! The pipeline runs every layer (field rules, schema marks, typed content, base64 with magic
//! bytes, the size net, the observation clamp) and reports each artifact with its pointer;
//! [`crate::rewrite::apply_contract`] then completes what the client must see (a
//! `resource_link` for every artifact, `structuredContent.assets[]`, signed URIs), leaving
//! alone the blocks the pipeline already wrote.

use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use serde_json::Value;
use stowage_core::{ArtifactRef, ArtifactSink, PutOptions, StoreError};
use stowage_transform::{Pipeline, TransformInput};

use crate::rewrite::{CallContext, OffloadError, Offloaded, OffloadedItem, Offloader};

pub struct PipelineOffloader {
    pipeline: Arc<Pipeline>,
}

impl PipelineOffloader {
    pub fn new(pipeline: Arc<Pipeline>) -> Self {
        PipelineOffloader { pipeline }
    }
}

#[async_trait]
impl Offloader for PipelineOffloader {
    async fn offload(&self, ctx: &CallContext, raw: String) -> Result<Offloaded, OffloadError> {
        let raw_len = raw.len();
        let mut input = TransformInput::new(&ctx.tool, &ctx.scope);
        input.output_schema = ctx.output_schema.as_ref();
        let out =
            self.pipeline.transform_json_text(&input, raw).await.map_err(|e| OffloadError { code: e.code(), message: e.to_string() })?;
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
        Ok(Offloaded { value: out.value, items, bytes_in: raw_len as u64, tokens_in: out.report.tokens_in })
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
        // Only the header is read (imagesize stops at the first size marker).
        if let Ok(size) = imagesize::blob_size(&data) {
            opts.source.insert("width".into(), (size.width as u64).into());
            opts.source.insert("height".into(), (size.height as u64).into());
        }
        self.0.put_bytes(data, opts).await
    }

    fn is_noop(&self) -> bool {
        self.0.is_noop()
    }
}

/// Width and height if they were recorded with the artifact.
fn dimensions(source: &serde_json::Map<String, Value>) -> Option<(u32, u32)> {
    let w = source.get("width")?.as_u64()?;
    let h = source.get("height")?.as_u64()?;
    Some((w as u32, h as u32))
}
