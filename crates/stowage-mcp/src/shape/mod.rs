//! The shaper: the one owner of every answer's shape.
//!
//! Every answer the gateway sends goes through it: tool results (`tools/call`,
//! `tasks/result`), `resources/read` and `prompts/get` results, and the answers of the
//! gateway's own tools (`artifact_read`, `artifact_query`, `artifact_list`, `artifact_url`,
//! the generated resource tools, `artifact_view`). The steps, in this order, each seeing what
//! the one before left:
//!
//! 1. **offload** ([`offload`]): the transform pipeline (L5 custom → L4 field rules → L1
//!    resource links → L2 typed content → L3 base64 by magic bytes → L0 size net) stores heavy
//!    parts and leaves stubs;
//! 2. **contract** ([`contract`], [`schema`]): one line and one `resource_link` per artifact,
//!    the records in `_meta`, and a `structuredContent` that still validates against the
//!    tool's `outputSchema`;
//! 3. **host** ([`host`], [`preview`]): references where the caller's host looks (links as
//!    lines, the gateway's lines in `structuredContent` for hosts that read only that),
//!    previews of offloaded images within its image budget;
//! 4. **the gateway's additions**: blob chaining's output slots and auto-read links, which the
//!    gateway writes into the [`Draft`] between [`Shaper::prepare`] and [`Shaper::finish`];
//! 5. **final limit** ([`fit`]): the host's budgets and the observation limit, on the answer as
//!    it will be sent; then the answer is **measured once** ([`measure`]), and the figures
//!    that the transform stats in `_meta`, the events and the metrics carry are those.
//!
//! A value an answer carries twice (FastMCP's text and `structuredContent.result`) counts once
//! against every budget and gets the same treatment in both places.
//!
//! The shaper knows nothing of how answers travel: it imports nothing from the upstream,
//! downstream, session or routing code (a test in this module holds that), so `serve`, `agent`
//! and the playground shape alike by building it from the same configuration
//! ([`Shaper::from_config`]).

pub mod contract;
pub(crate) mod fit;
pub mod host;
pub mod measure;
pub mod offload;
mod preview;
pub mod read;
pub mod schema;

use std::sync::Arc;
use std::time::Instant;

use serde_json::{Value, json};
use stowage_core::ArtifactRef;
use stowage_store::ArtifactStore;
use stowage_transform::{ImagePreviewConfig, Pipeline, TransformConfig, TransformReport, twins};

pub use contract::{ARTIFACT_META_KEY, ASSETS_META_KEY, LinkMinter, TRANSFORM_META_KEY, apply_contract, error_result, kind_of, layer_name};
pub use measure::Measure;
pub use offload::{CallContext, FailureKind, OFF_RUNTIME_BYTES, OffloadError, Offloaded, OffloadedItem, Pipelines, with_dimensions};
pub use schema::{OUTPUT_SCHEMA_MISMATCH, SchemaCheck, enforce_output_schema};

use crate::hosts::HostProfile;

/// Characters of head and tail an offloaded error text keeps for a host that states no error
/// limit: enough for the first frames and the exception at the end of a long trace.
const ERROR_PREVIEW_CHARS: usize = 4_000;
/// Room an error's preview leaves, within the host's error limit, for the line that names the
/// artifact and for the rest of the answer.
const ERROR_PREVIEW_ROOM: usize = 800;
/// Answers up to this size keep a copy of their text while they are shaped: what the model
/// would have read without the gateway is then measured exactly (`tokensIn`).
const KEEP_RAW_MAX: usize = 256 * 1024;

/// The shaper: the pipelines, the link minter and the preview source every answer is shaped
/// with, all given when it is built.
#[derive(Clone)]
pub struct Shaper {
    pipelines: Pipelines,
    links: Option<Arc<dyn LinkMinter>>,
    previews: Option<Previews>,
}

/// Where image previews read offloaded originals back, and how they are made.
#[derive(Clone)]
struct Previews {
    store: Arc<dyn ArtifactStore>,
    config: ImagePreviewConfig,
}

/// What the gateway hands in for one answer: the call and the host.
#[derive(Clone, Copy)]
pub struct Job<'a> {
    /// The call the answer belongs to: tool, upstream, owner, output schema.
    pub ctx: &'a CallContext,
    /// The profile of the host whose model reads the answer: its limits and what it sees.
    pub host: &'a HostProfile,
}

/// What kind of answer a draft is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A tool's own result, offloaded and given the contract.
    ToolResult,
    /// An answer the gateway made itself: already compact, sized for the host.
    Local,
}

/// An answer between [`Shaper::prepare`] and [`Shaper::finish`]: offloaded, given the
/// contract and adapted to its host; not yet limited or measured. The gateway's additions
/// (output slots, auto-read links) go in through [`Draft::value_mut`].
#[derive(Debug)]
pub struct Draft {
    value: Value,
    kind: Kind,
    report: Option<TransformReport>,
    error: Option<OffloadError>,
    check: SchemaCheck,
    bytes_in: u64,
    /// The answer's text as it came, when small: `tokensIn` is then measured, not estimated.
    raw: Option<String>,
    /// Whether any step changed the answer (else `tokensIn` is `tokensOut`).
    changed: bool,
    artifacts: usize,
    stored: Vec<ArtifactRef>,
    started: Instant,
}

impl Draft {
    /// The answer, to add to (the step between host and final limit). Marks it changed.
    pub fn value_mut(&mut self) -> &mut Value {
        self.changed = true;
        &mut self.value
    }

    /// The answer as shaped so far, to look at without marking it changed.
    pub(crate) fn value(&self) -> &Value {
        &self.value
    }
}

/// A shaped answer, with what was done to it and its final figures.
#[derive(Debug, Clone)]
pub struct Shaped {
    /// The answer as it is sent to the client.
    pub value: Value,
    /// The transform's report; `None` for answers the gateway made itself and for a failed
    /// offload.
    pub report: Option<TransformReport>,
    /// Why the offload failed; the value is then the `isError` result saying so.
    pub error: Option<OffloadError>,
    /// Sizes before and after, measured on the answer as sent.
    pub figures: Figures,
}

/// An answer's figures, measured once on the answer as sent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Figures {
    /// Bytes of the answer's JSON as it came from the upstream (or as the gateway made it).
    pub bytes_in: u64,
    /// Bytes of the answer's JSON as sent.
    pub bytes_out: u64,
    /// o200k tokens the host's model would have read of the answer as it came.
    pub tokens_in: u64,
    /// o200k tokens the host's model reads of the answer as sent (images counted).
    pub tokens_out: u64,
    /// Whether a token count is an estimate (about 4 bytes a token) rather than counted: the
    /// changed answer was too large to keep its original text, or a count was not needed.
    pub tokens_estimated: bool,
    /// Distinct artifacts the answer references (offloaded, and moved out to fit).
    pub artifacts: usize,
    /// Previews of offloaded images actually sent.
    pub previews: usize,
    /// The final limit changed the answer (parts moved out, references folded).
    pub fitted: bool,
    /// The answer is still over its budget: only references and small parts are left.
    pub over: bool,
    /// The full measurement of the answer as sent, against the host's profile.
    pub measure: Measure,
}

impl Shaper {
    /// A shaper over `pipelines` whose answers carry `artifact://` URIs until
    /// [`Shaper::with_links`] gives it a signer.
    pub fn new(pipelines: Pipelines) -> Self {
        Shaper { pipelines, links: None, previews: None }
    }

    /// Previews of offloaded images for the hosts that get them: read back from `store` (a
    /// store that keeps nothing makes none), made as `config` says
    /// (`[transform.image_preview]`). Without, no previews. A gateway given a store
    /// ([`crate::GatewayBuilder::store`]) gives it here if its shaper has none.
    pub fn with_previews(mut self, store: Arc<dyn ArtifactStore>, config: ImagePreviewConfig) -> Self {
        self.previews = Some(Previews { store, config });
        self
    }

    /// Whether previews are made ([`Shaper::with_previews`]).
    pub fn makes_previews(&self) -> bool {
        self.previews.is_some()
    }

    /// The shaper `serve`, `agent` and the playground use: `[transform]` for every upstream,
    /// and `[gateway.servers.NAME.transform]` for those that have one, storing through `sink`.
    pub fn from_config(
        transform: &TransformConfig,
        gateway: &crate::config::GatewayConfig,
        sink: Arc<dyn stowage_core::ArtifactSink>,
    ) -> Self {
        let servers = gateway.servers.iter().map(|(name, s)| (name, s.transform.as_ref()));
        Shaper::new(Pipelines::from_config(transform, servers, with_dimensions(sink)))
    }

    /// Gives answers from `upstream` a pipeline of their own.
    pub fn with_pipeline(mut self, upstream: impl Into<String>, pipeline: Arc<Pipeline>) -> Self {
        self.pipelines.set(upstream, pipeline);
        self
    }

    /// Signs the links answers carry (without, they carry `artifact://` URIs).
    pub fn with_links(mut self, links: Arc<dyn LinkMinter>) -> Self {
        self.links = Some(links);
        self
    }

    /// The links `host`'s answers carry: none for a profile without signed links.
    fn links_for(&self, host: &HostProfile) -> Option<&dyn LinkMinter> {
        self.links.as_deref().filter(|_| host.signed_links)
    }

    /// The links an answer carries: [`Shaper::links_for`], and none in an error for a host that
    /// shows an error whole, `_meta` included (a signed link there would reach its model).
    fn links_in(&self, host: &HostProfile, is_error: bool) -> Option<&dyn LinkMinter> {
        self.links_for(host).filter(|_| !(is_error && host.errors_as_json))
    }

    /// The pipeline answers from `upstream` go through.
    pub fn pipeline(&self, upstream: &str) -> &Arc<Pipeline> {
        self.pipelines.of(upstream)
    }

    /// The observation limit of answers from `upstream` (its `[transform.clamp]`).
    fn observation_limit(&self, upstream: &str) -> Option<usize> {
        let clamp = &self.pipeline(upstream).config().clamp;
        clamp.enabled.then_some(clamp.max_observation_chars)
    }

    /// Steps 1 to 3 for a tool result given as its JSON text.
    pub async fn prepare(&self, job: Job<'_>, raw: String) -> Draft {
        let started = Instant::now();
        let bytes_in = raw.len() as u64;
        // A CallToolResult is an object; anything else (a bare string or array, however big)
        // cannot be given the contract, and its bytes must not reach the model.
        if !raw.trim_start().starts_with('{') {
            let e = OffloadError {
                kind: FailureKind::Invalid,
                code: stowage_core::ErrorCode::BadRequest.as_str(),
                message: format!(
                    "upstream {} returned a tools/call result that is not an object ({bytes_in} bytes); nothing of it was kept",
                    job.ctx.upstream
                ),
            };
            let value = json!({"content": [{"type": "text", "text": e.to_string()}], "isError": true});
            return Draft::failed(value, e, bytes_in, started);
        }
        let opts = offload::OffloadOptions { withhold: true, preview_chars: is_error(&raw).then(|| error_preview(job.host)) };
        let kept = (raw.len() <= KEEP_RAW_MAX).then(|| raw.clone());
        let off = match offload::offload(self.pipeline(&job.ctx.upstream), job.ctx, raw, opts).await {
            Ok(off) => off,
            Err(e) => {
                let value = error_result(&e, job.ctx.output_schema.is_some());
                return Draft::failed(value, e, bytes_in, started);
            }
        };
        let report = off.report.clone();
        let artifacts = contract::unique_assets(&off.items);
        let mut changed = !report.artifacts.is_empty() || !report.warnings.is_empty() || !report.withheld.is_empty();
        let mut value = apply_contract(off, self.links_in(job.host, opts.preview_chars.is_some()));
        // Only an answer the rewrite changed is checked: an untouched one is the upstream's as
        // it sent it, and small calls pay nothing.
        let check = match job.ctx.output_schema.as_deref() {
            Some(s) if changed => enforce_output_schema(&mut value, s, &schema::touched(&report)),
            _ => SchemaCheck::Unchecked,
        };
        if matches!(check, SchemaCheck::Repaired | SchemaCheck::Error) {
            tracing::warn!(target: "stowage::call", upstream = %job.ctx.upstream, tool = %job.ctx.tool, check = check.as_str(),
                "the rewritten structuredContent did not match the tool's outputSchema");
        }
        let mut draft = Draft {
            value,
            kind: Kind::ToolResult,
            report: Some(report),
            error: None,
            check,
            bytes_in,
            raw: kept,
            changed: false,
            artifacts,
            stored: Vec::new(),
            started,
        };
        changed |= self.adapt(job, &mut draft).await;
        draft.changed = changed;
        draft
    }

    /// Steps 1 to 3 for an answer the gateway made itself (its own tools): nothing to offload,
    /// it is already sized for the host; references go where the host looks.
    pub async fn prepare_local(&self, job: Job<'_>, value: Value) -> Draft {
        let started = Instant::now();
        let bytes_in = json_len(&value);
        let mut draft = Draft {
            value,
            kind: Kind::Local,
            report: None,
            error: None,
            check: SchemaCheck::Unchecked,
            bytes_in,
            raw: None,
            changed: false,
            artifacts: 0,
            stored: Vec::new(),
            started,
        };
        draft.changed = self.adapt(job, &mut draft).await;
        draft
    }

    /// Step 3, for the hosts that ask for anything.
    async fn adapt(&self, job: Job<'_>, draft: &mut Draft) -> bool {
        if !job.host.adapts() {
            return false;
        }
        let mut changed = false;
        if !job.host.resource_links {
            changed |= host::links_as_text(&mut draft.value);
        }
        if job.host.sees.drops_text_beside_structured() && draft.kind == Kind::ToolResult {
            changed |= host::structured_visibility(&mut draft.value, job.ctx);
        }
        if !job.host.shows_error_flag {
            changed |= host::say_it_failed(&mut draft.value);
        }
        if let (Some(report), Some(p)) = (&draft.report, self.previews.as_ref().filter(|p| !p.store.is_noop())) {
            changed |= preview::add_previews(&mut draft.value, report, job.host, &p.config, &p.store, &job.ctx.scope).await > 0;
        }
        let pipeline = self.pipeline(&job.ctx.upstream).clone();
        changed |= host::fit_images(&mut draft.value, job.host, &pipeline, job.ctx, &mut draft.stored).await;
        changed
    }

    /// Steps 5 and the measurement: the answer within its budget, measured once, with its
    /// figures in `_meta`.
    pub async fn finish(&self, job: Job<'_>, mut draft: Draft) -> Shaped {
        let twins = if draft.value.get("structuredContent").is_some() { twins::find(&draft.value) } else { Vec::new() };
        let is_error = draft.value.get("isError").and_then(Value::as_bool) == Some(true);
        let budget = fit::Budget::of(job.host, is_error, self.observation_limit(&job.ctx.upstream));
        let pipeline = self.pipeline(&job.ctx.upstream).clone();
        let fitted = fit::fit(&mut draft.value, job.host, budget, &twins, &pipeline, job.ctx).await;
        draft.changed |= fitted.changed;
        draft.stored.extend(fitted.stored.iter().cloned());
        // Parts moved out after the contract are artifacts like the others: listed for hosts.
        contract::record_stored(&mut draft.value, &draft.stored, self.links_in(job.host, is_error));
        let m = fitted.after;
        let tokens_in = match (&draft.raw, draft.changed) {
            (_, false) => m.tokens(),
            (Some(raw), true) => serde_json::from_str::<Value>(raw)
                .map(|v| {
                    let t = twins::find(&v);
                    measure::measure(&v, job.host, &t, measure::Tokens::Figures).tokens()
                })
                .unwrap_or_else(|_| draft.bytes_in.div_ceil(4)),
            (None, true) => draft.bytes_in.div_ceil(4),
        };
        let mut figures = Figures {
            bytes_in: draft.bytes_in,
            bytes_out: m.result_bytes as u64,
            tokens_in,
            tokens_out: m.tokens(),
            tokens_estimated: m.tokens_estimated || (draft.changed && draft.raw.is_none()),
            artifacts: draft.artifacts + unique_new(&draft.stored),
            previews: host::previews_in(&draft.value),
            fitted: fitted.changed,
            over: fitted.over,
            measure: m,
        };
        self.write_stats(job, &mut draft, &mut figures, fitted.stored_whole);
        Shaped { value: draft.value, report: draft.report, error: draft.error, figures }
    }

    /// Step 1 alone, for what an upstream sends that is not an answer (log data, a progress
    /// message, error data): base64 and huge strings leave it as they leave answers.
    pub async fn offload_payload(&self, ctx: &CallContext, raw: String) -> Result<Offloaded, OffloadError> {
        offload::offload(self.pipeline(&ctx.upstream), ctx, raw, offload::OffloadOptions::default()).await
    }

    /// Steps 1 to 5 for a tool result with nothing to add between them.
    pub async fn shape(&self, job: Job<'_>, raw: String) -> Shaped {
        let draft = self.prepare(job, raw).await;
        self.finish(job, draft).await
    }

    /// Steps 3 and 5 for the gateway's own answers.
    pub async fn shape_local(&self, job: Job<'_>, value: Value) -> Shaped {
        let draft = self.prepare_local(job, value).await;
        self.finish(job, draft).await
    }

    /// An answer for an MCP App's view, never shown to a model (`_meta.ui.visibility: ["app"]`
    /// tools: a chunk of an artifact's bytes, an upload's progress): left as it is, no budget
    /// applies (the view asked for those bytes), and measured in bytes only.
    pub fn shape_app(&self, value: Value) -> Shaped {
        let bytes = json_len(&value);
        let figures = Figures { bytes_in: bytes, bytes_out: bytes, ..Default::default() };
        Shaped { value, report: None, error: None, figures }
    }

    /// `_meta["io.stowage/transform"]`: the figures (their `bytesOut` including this very
    /// entry), the layers that acted, values kept in place in part, the schema check and what
    /// the host step did.
    fn write_stats(&self, job: Job<'_>, draft: &mut Draft, figures: &mut Figures, stored_whole: bool) {
        if draft.kind == Kind::Local && !figures.fitted && !job.host.adapts() && draft.error.is_none() {
            // The gateway's own small answers carry no stats unless something happened to
            // them: the figures are in the events and the call report.
            return;
        }
        if job.host.errors_as_json && draft.value.get("isError").and_then(Value::as_bool) == Some(true) {
            // That host shows this `_meta` to its model: the figures stay in the events.
            return;
        }
        let ms = (draft.started.elapsed().as_secs_f64() * 10_000.0).round() / 10.0;
        let mut s = json!({
            "bytesIn": figures.bytes_in,
            "bytesOut": figures.bytes_out,
            "tokensIn": figures.tokens_in,
            "tokensOut": figures.tokens_out,
            "artifacts": figures.artifacts,
            "ms": ms,
        });
        if let Some(report) = &draft.report {
            let mut layers: Vec<&'static str> = Vec::new();
            for a in &report.artifacts {
                let l = layer_name(a.layer);
                if !layers.contains(&l) {
                    layers.push(l);
                }
            }
            if !report.links.is_empty() && !layers.contains(&"resource_link") {
                layers.push("resource_link");
            }
            if !layers.is_empty() {
                s["layers"] = json!(layers);
            }
            // Values kept in place in part (typed prefixes in structuredContent): where, how
            // much, and which artifact has the whole.
            let partial: Vec<Value> = report
                .artifacts
                .iter()
                .flat_map(|a| {
                    let cuts: Vec<Value> = if a.cuts.is_empty() {
                        a.partial
                            .map(|p| json!({"pointer": a.pointer, "artifact": a.id, "kept": p.kept, "total": p.total}))
                            .into_iter()
                            .collect()
                    } else {
                        a.cuts.iter().map(|c| json!({"pointer": c.pointer, "artifact": a.id, "kept": c.kept, "total": c.total})).collect()
                    };
                    cuts
                })
                .collect();
            if !partial.is_empty() {
                s["partial"] = Value::Array(partial);
            }
            if !report.warnings.is_empty() {
                s["warnings"] = json!(report.warnings.len());
            }
        }
        if figures.tokens_estimated {
            s["tokensEstimated"] = json!(true);
        }
        if let Some(c) = draft.check.meta() {
            s["outputSchema"] = json!(c);
        }
        if figures.fitted {
            s["fitted"] = json!(true);
        }
        if stored_whole {
            s["clamped"] = json!(true);
        }
        if job.host.adapts() {
            let mut h = json!({"profile": job.host.name, "fitted": figures.fitted, "tokens": figures.tokens_out, "textBytes": figures.measure.text_bytes});
            if figures.previews > 0 {
                h["previews"] = json!(figures.previews);
            }
            if figures.over {
                h["over"] = json!(true);
            }
            s["host"] = h;
        }
        // The answer's bytes as sent include this entry, whose own size depends on the number
        // it carries: settle it (a second round changes at most one digit's width).
        let base = figures.bytes_out;
        contract::set_meta(&mut draft.value, TRANSFORM_META_KEY, s.clone());
        for _ in 0..3 {
            let total = json_len(&draft.value);
            if s["bytesOut"] == json!(total) {
                break;
            }
            s["bytesOut"] = json!(total);
            contract::set_meta(&mut draft.value, TRANSFORM_META_KEY, s.clone());
        }
        figures.bytes_out = s["bytesOut"].as_u64().unwrap_or(base);
    }
}

impl Draft {
    fn failed(value: Value, e: OffloadError, bytes_in: u64, started: Instant) -> Draft {
        Draft {
            value,
            kind: Kind::ToolResult,
            report: None,
            error: Some(e),
            check: SchemaCheck::Unchecked,
            bytes_in,
            raw: None,
            changed: true,
            artifacts: 0,
            stored: Vec::new(),
            started,
        }
    }
}

/// Distinct artifacts among parts moved out after the offload.
fn unique_new(stored: &[ArtifactRef]) -> usize {
    stored.iter().map(|r| &r.id).collect::<std::collections::HashSet<_>>().len()
}

/// Whether a result's text says `"isError": true` at its top level (a cheap look: errors are
/// small, and a big result is not read twice for it).
fn is_error(raw: &str) -> bool {
    #[derive(serde::Deserialize)]
    struct Peek {
        #[serde(default, rename = "isError")]
        is_error: Option<bool>,
    }
    let says_true = |at: usize| {
        let rest = raw[at + "\"isError\"".len()..].trim_start();
        rest.strip_prefix(':').is_some_and(|r| r.trim_start().starts_with("true"))
    };
    raw.len() <= 8 * 1024 * 1024
        && memchr::memmem::find_iter(raw.as_bytes(), b"\"isError\"").any(says_true)
        && serde_json::from_str::<Peek>(raw).ok().and_then(|p| p.is_error) == Some(true)
}

/// Characters of head and tail an error's offloaded text keeps for `host`.
fn error_preview(host: &HostProfile) -> usize {
    host.max_error_chars.map_or(ERROR_PREVIEW_CHARS, |c| c.saturating_sub(ERROR_PREVIEW_ROOM).max(1_000))
}

pub(crate) use stowage_transform::json_len;

#[cfg(test)]
mod tests;
