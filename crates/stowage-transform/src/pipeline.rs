//! [`Pipeline`]: runs the layers in order over one tool result and returns the rewritten result
//! with its [`TransformReport`].
//!
//! Order, each step seeing what the previous one left:
//! 1. L5 custom transformers, then the external hook;
//! 2. embedded JSON is parsed (JSON text inside strings, e.g. a text block);
//! 3. L4 field rules and schema-marked fields (declared by people: always extracted);
//! 4. L1 `resource_link`s annotated; 5. L2 typed content; 6. L3 base64 by magic bytes;
//! 7. L0 long strings, then large JSON;
//! 8. embedded JSON written back; 9. the observation clamp, last of all, after every artifact
//!    was collected.
//!
//! Store errors: fatal for offloads that must not stay inline (L4, schema marks, L2, L3 —
//! binaries never fall back to base64); a warning plus truncation for the size net and the
//! clamp, which are safety nets.

use std::sync::Arc;

use serde_json::Value;
use stowage_core::{ArtifactScope, ArtifactSink, PutOptions};

use crate::clamp::{self, ClampEvent, ClampListener};
use crate::layers::custom::{CustomContext, CustomOutcome, CustomTransformer};
use crate::layers::hook::CommandHook;
use crate::layers::{self, is_call_tool_result};
use crate::report::{Layer, TransformReport};
use crate::tokens;
use crate::work::{Docs, Payload, StoreCtx, commit};
use crate::{TransformConfig, TransformError};

/// What the pipeline knows about one call.
#[derive(Debug, Clone, Copy)]
pub struct TransformInput<'a> {
    /// The tool's name as the model knows it (namespaced or not); selects field rules.
    pub tool_name: &'a str,
    /// Who the artifacts belong to (trace limits are enforced by the store on this scope).
    pub scope: &'a ArtifactScope,
    /// The tool's `outputSchema`, for schema-marked fields.
    pub output_schema: Option<&'a Value>,
    /// Artifact id namespace; default: the tool name.
    pub namespace: Option<&'a str>,
    /// When the store cannot take a value that must not stay inline (a binary, a marked
    /// field), replace it with a line naming what it was and why, and go on, instead of
    /// failing the whole run. Off by default (`stowage transform` fails); the gateway turns it
    /// on for tool results, so a full store never costs the model the rest of the result.
    pub withhold_on_store_failure: bool,
    /// Run the observation clamp at the end. On by default; the gateway's shaper turns it off
    /// and holds the limit itself, on the result as finally sent (its references, links and
    /// host adaptations included), which only it sees.
    pub clamp: bool,
    /// Count o200k tokens for the report. On by default (when `[transform.tokens]` is); the
    /// gateway's shaper counts what the host's model sees instead, once.
    pub count_tokens: bool,
    /// Characters of head and tail an offloaded text keeps (default
    /// `size_net.preview_chars`): the shaper gives an error result the host's error budget, so
    /// the exception at the end of a long trace reaches the model.
    pub preview_chars: Option<usize>,
}

impl<'a> TransformInput<'a> {
    /// The input for a call of `tool_name` by `scope`, with the defaults: clamped, tokens
    /// counted, a store failure fails the run.
    pub fn new(tool_name: &'a str, scope: &'a ArtifactScope) -> Self {
        TransformInput {
            tool_name,
            scope,
            output_schema: None,
            namespace: None,
            withhold_on_store_failure: false,
            clamp: true,
            count_tokens: true,
            preview_chars: None,
        }
    }
}

/// The rewritten result and what happened.
#[derive(Debug, Clone, PartialEq)]
pub struct TransformOutput {
    /// The rewritten result.
    pub value: Value,
    /// What each layer did.
    pub report: TransformReport,
}

/// The transform pipeline. Cheap to share (`Arc`) and to call concurrently.
pub struct Pipeline {
    config: TransformConfig,
    sink: Arc<dyn ArtifactSink>,
    custom: Vec<Box<dyn CustomTransformer>>,
    hook: Option<CommandHook>,
    on_clamp: Option<ClampListener>,
}

impl std::fmt::Debug for Pipeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pipeline").field("config", &self.config).field("custom", &self.custom.len()).field("hook", &self.hook).finish()
    }
}

impl Pipeline {
    /// A pipeline storing through `sink`. Starts loading the token vocabulary in the
    /// background.
    pub fn new(config: TransformConfig, sink: Arc<dyn ArtifactSink>) -> Self {
        if config.tokens.enabled {
            tokens::preload();
        }
        let hook = CommandHook::from_config(&config.hook);
        Pipeline { config, sink, custom: Vec::new(), hook, on_clamp: None }
    }

    /// Adds a custom transformer (L5); they run in the order added, before the hook.
    pub fn with_custom(mut self, t: Box<dyn CustomTransformer>) -> Self {
        self.custom.push(t);
        self
    }

    /// Subscribes to `observation_clamped` events.
    pub fn on_clamp(mut self, listener: ClampListener) -> Self {
        self.on_clamp = Some(listener);
        self
    }

    /// Where this pipeline stores artifacts (the gateway stores parts it moves out to fit a
    /// host through it, under the same owner and quotas).
    pub fn sink(&self) -> &Arc<dyn ArtifactSink> {
        &self.sink
    }

    /// The configuration it runs with.
    pub fn config(&self) -> &TransformConfig {
        &self.config
    }

    /// Transforms a result given as JSON text. Takes the buffer by value so it can be freed
    /// as soon as it is parsed: with a 50 MB result, holding the text and the tree at once
    /// is what would set the peak memory.
    pub async fn transform_json(&self, input: &TransformInput<'_>, json: Vec<u8>) -> Result<TransformOutput, TransformError> {
        let bytes_in = json.len() as u64;
        let tokens_in = if self.counts(input) && json.len() <= self.config.tokens.exact_max_bytes {
            std::str::from_utf8(&json).ok().map(|s| tokens::count(s, &self.config.tokens))
        } else {
            None
        };
        // The buffer's memory becomes the longest string (the 50 MB text block), no copy.
        let started = std::time::Instant::now();
        let (value, index) = crate::fastjson::parse_owned_indexed(json).map_err(TransformError::InvalidJson)?;
        tracing::debug!(step = "parse", ms = started.elapsed().as_secs_f64() * 1e3, "transform step");
        let tokens_in = tokens_in.unwrap_or_else(|| self.estimate(input, bytes_in));
        self.run(input, value, index, bytes_in, tokens_in).await
    }

    /// Whether this run counts tokens for its report.
    fn counts(&self, input: &TransformInput<'_>) -> bool {
        self.config.tokens.enabled && input.count_tokens
    }

    /// The token estimate of a side too large to count, or nothing when this run does not
    /// count.
    fn estimate(&self, input: &TransformInput<'_>, bytes: u64) -> (u64, bool) {
        if self.counts(input) { (bytes.div_ceil(tokens::ESTIMATE_BYTES_PER_TOKEN), true) } else { (0, false) }
    }

    /// [`Self::transform_json`] for text already known to be UTF-8 (the gateway's results):
    /// the longest string keeps the text's memory and is not checked for UTF-8 again.
    pub async fn transform_json_text(&self, input: &TransformInput<'_>, json: String) -> Result<TransformOutput, TransformError> {
        let bytes_in = json.len() as u64;
        let tokens_in = if self.counts(input) && json.len() <= self.config.tokens.exact_max_bytes {
            Some(tokens::count(&json, &self.config.tokens))
        } else {
            None
        };
        let started = std::time::Instant::now();
        // `parse_string` fails exactly when serde_json does, and then returns the text, so
        // serde_json can say why.
        let (value, index) = match crate::fastjson::parse_string_indexed(json) {
            Ok(parsed) => parsed,
            Err(json) => (serde_json::from_str(&json).map_err(TransformError::InvalidJson)?, None),
        };
        tracing::debug!(step = "parse", ms = started.elapsed().as_secs_f64() * 1e3, "transform step");
        let tokens_in = tokens_in.unwrap_or_else(|| self.estimate(input, bytes_in));
        self.run(input, value, index, bytes_in, tokens_in).await
    }

    /// Transforms a result given as a JSON value.
    pub async fn transform(&self, input: &TransformInput<'_>, value: Value) -> Result<TransformOutput, TransformError> {
        let bytes_in = json_len(&value);
        let tokens_in = if !self.counts(input) {
            (0, false)
        } else if bytes_in as usize <= self.config.tokens.exact_max_bytes {
            tokens::count(&serde_json::to_string(&value).expect("serialises"), &self.config.tokens)
        } else {
            self.estimate(input, bytes_in)
        };
        self.run(input, value, None, bytes_in, tokens_in).await
    }

    /// `index`: what parsing the result learnt about its longest string (see
    /// [`crate::fastjson::StringIndex`]), used only while the value is as parsed.
    async fn run(
        &self,
        input: &TransformInput<'_>,
        value: Value,
        index: Option<crate::fastjson::StringIndex>,
        bytes_in: u64,
        tokens_in: (u64, bool),
    ) -> Result<TransformOutput, TransformError> {
        let mut report = TransformReport { bytes_in, tokens_in: tokens_in.0, tokens_estimated: tokens_in.1, ..Default::default() };
        let cfg = &self.config;
        let mut opts = PutOptions::scoped(input.scope.clone());
        let ns = input.namespace.unwrap_or(input.tool_name);
        if !ns.is_empty() {
            opts.namespace = Some(ns.to_owned());
        }
        let store = StoreCtx { sink: self.sink.as_ref(), opts: &opts, tool: input.tool_name, withhold: input.withhold_on_store_failure };
        // Binaries decoded by L4 and L3 are hashed on a second core while they are decoded
        // when the sink would otherwise hash them itself, on this one, afterwards.
        let hash = self.sink.prefers_sha256();

        // Per-step timings at debug level (STOWAGE_LOG=stowage_transform=debug): where a slow
        // result spends its time.
        let mut t = std::time::Instant::now();
        let mut lap = |step: &str| {
            tracing::debug!(step, ms = t.elapsed().as_secs_f64() * 1e3, "transform step");
            t = std::time::Instant::now();
        };
        // L5.
        let (mut value, outcome) = self.custom_layer(input, value, &mut report).await;
        lap("custom");

        if outcome != Custom::Final {
            let index = index.filter(|_| outcome == Custom::Unchanged);
            let mut docs = Docs::expand(value, 2, index);
            lap("expand");
            let offs = layers::fields::collect(&mut docs, cfg, input.tool_name, &mut report, hash);
            lap("fields");
            commit(&mut docs, offs, &store, &mut report).await?;
            lap("fields store");
            let offs = layers::schema::collect(&mut docs, cfg, input.output_schema);
            commit(&mut docs, offs, &store, &mut report).await?;
            layers::resource_link::annotate(&mut docs, cfg, &mut report);
            let offs = layers::typed::collect(&mut docs, cfg, &mut report);
            commit(&mut docs, offs, &store, &mut report).await?;
            lap("schema, links, typed");
            let offs = layers::base64::collect(&mut docs, cfg, &mut report, hash);
            lap("base64");
            commit(&mut docs, offs, &store, &mut report).await?;
            lap("base64 store");
            let preview_chars = input.preview_chars.unwrap_or(cfg.size_net.preview_chars);
            let offs = layers::size::collect_strings(&mut docs, cfg, preview_chars);
            commit(&mut docs, offs, &store, &mut report).await?;
            // Under an output schema, structuredContent keeps its types (a prefix of a large
            // array, not a `$artifact` object): that pass goes before the size net's own.
            let offs = layers::schema::collect_typed(&mut docs, cfg, input.output_schema);
            commit(&mut docs, offs, &store, &mut report).await?;
            let offs = layers::size::collect_containers(&mut docs, cfg);
            commit(&mut docs, offs, &store, &mut report).await?;
            value = docs.collapse();
            lap("size net, collapse");
        }

        // Images kept inline are for the client, not text for the model: the clamp does not
        // measure them and the token count leaves them out (a vision model's image tokens are
        // not o200k's); the byte count has them.
        if !input.clamp {
            report.bytes_out = json_len(&value);
            return Ok(TransformOutput { value, report });
        }
        let mut kept = layers::typed::KeptImages::lift(&mut value, cfg);
        let text = self.clamp(input, &mut value, &store, &mut report, &mut kept).await;
        lap("clamp");
        report.bytes_out = text.len() as u64;
        if !kept.is_empty() {
            kept.restore(&mut value, false);
            report.bytes_out = json_len(&value);
        }
        if self.counts(input) {
            let (tokens_out, est) = tokens::count(&text, &cfg.tokens);
            report.tokens_out = tokens_out;
            report.tokens_estimated |= est;
        }
        Ok(TransformOutput { value, report })
    }

    async fn custom_layer(&self, input: &TransformInput<'_>, mut value: Value, report: &mut TransformReport) -> (Value, Custom) {
        let ctx = CustomContext { tool_name: input.tool_name, scope: input.scope, sink: self.sink.as_ref() };
        let hook: Option<&dyn CustomTransformer> = self.hook.as_ref().map(|h| h as &dyn CustomTransformer);
        let mut outcome = Custom::Unchanged;
        for t in self.custom.iter().map(|b| b.as_ref()).chain(hook) {
            match t.transform(&ctx, &value).await {
                Ok(CustomOutcome::Unchanged) => {}
                Ok(CustomOutcome::Replace(v)) => {
                    value = v;
                    outcome = Custom::Replaced;
                }
                Ok(CustomOutcome::Final(v)) => return (v, Custom::Final),
                Err(e) => report.warn(Layer::Custom, None, format!("{} failed, result passed on unchanged: {e}", t.name())),
            }
        }
        (value, outcome)
    }

    /// Applies the observation clamp; returns the final compact JSON text.
    async fn clamp(
        &self,
        input: &TransformInput<'_>,
        value: &mut Value,
        store: &StoreCtx<'_>,
        report: &mut TransformReport,
        kept: &mut layers::typed::KeptImages,
    ) -> String {
        let c = &self.config.clamp;
        let text = serde_json::to_string(&*value).expect("serialises");
        if !c.enabled || text.len() <= c.max_observation_chars {
            return text;
        }
        // A value carried twice (a text block repeating structuredContent) counts once.
        let twice = crate::twins::duplicate_chars(value, &crate::twins::find(value));
        let original_chars = text.chars().count() - twice;
        if original_chars <= c.max_observation_chars {
            return text;
        }
        let mut stored = false;
        if !self.sink.is_noop() && original_chars > c.auto_artifact_threshold {
            let is_ctr = is_call_tool_result(value);
            let preview = layers::size::preview(value, self.config.size_net.preview_items, 0);
            let schema = layers::size::infer_schema(value, 0);
            // The stored observation is the whole result, kept images included.
            let text = if kept.is_empty() {
                text
            } else {
                let mut whole = value.clone();
                kept.restore(&mut whole, true);
                serde_json::to_string(&whole).expect("serialises")
            };
            let size = text.len() as u64;
            match store.put(Payload::Text(text), Some("application/json".into()), None, Layer::Clamp, "", Default::default()).await {
                Ok(r) => {
                    let summary = format!(
                        "Tool result of {original_chars} characters ({}) stored as {}; artifact_query selects parts",
                        stowage_core::human_size(size),
                        r.uri
                    );
                    let mut replacement = clamp::stored_replacement(is_ctr, value.get("isError").cloned(), &r, &summary, preview, schema);
                    // A tool with an output schema must still return structuredContent (clients
                    // reject a result without it). The layers already brought it down to its
                    // typed form, so it stays beside the link.
                    if is_ctr
                        && input.output_schema.is_some()
                        && let (Some(sc), Some(m)) = (value.get_mut("structuredContent"), replacement.as_object_mut())
                    {
                        m.insert("structuredContent".into(), sc.take());
                    }
                    report.artifacts.push(crate::report::ArtifactRecord {
                        id: r.id.to_string(),
                        uri: r.uri.clone(),
                        pointer: String::new(),
                        mime_type: r.mime_type.clone(),
                        size_bytes: r.size_bytes,
                        sha256: r.sha256.clone(),
                        layer: Layer::Clamp,
                        filename: r.filename.clone(),
                        summary,
                        partial: None,
                        cuts: Vec::new(),
                        artifact: r,
                    });
                    *value = replacement;
                    stored = true;
                }
                Err(e) => report.warn_store(
                    Layer::Clamp,
                    None,
                    format!("cannot store the over-limit observation ({}), truncating it: {e}", e.code()),
                ),
            }
        }
        if !stored {
            clamp::truncate(value, c);
        }
        let text = serde_json::to_string(&*value).expect("serialises");
        let event = ClampEvent { tool: input.tool_name.to_owned(), original_chars, clamped_chars: text.chars().count(), stored };
        clamp::emit(&event, self.on_clamp.as_ref());
        report.clamped = true;
        text
    }
}

/// What the custom layer (L5) did to the result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Custom {
    Unchanged,
    Replaced,
    /// Replaced, and no other layer may run.
    Final,
}

/// Length of the compact JSON of `v`, without building it (the gateway measures answers with it
/// too).
pub fn json_len(v: &Value) -> u64 {
    struct Count(u64);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len() as u64;
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut c = Count(0);
    serde_json::to_writer(&mut c, v).expect("counting never fails");
    c.0
}
