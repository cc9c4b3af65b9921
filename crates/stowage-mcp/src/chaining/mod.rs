//! Blob chaining: artifacts passed into tools by reference, so a document or an image one tool
//! produced reaches the next tool without going back through the model.
//!
//! A model writes `artifact://<id>` (or an `https://` URL) in a tool's arguments. Before the
//! call is forwarded, [`translate_inputs`] materializes every such URI the way the tool's
//! configured input rule says (`[gateway.chaining.inputs]`: a signed GET link, inline base64,
//! the UTF-8 text, or a read-only local file removed after the call).
//!
//! With no configuration, [`detect`] reads each tool's input schema when the catalog is
//! fetched and finds the properties that take file bytes (base64, a URL, a local path, text);
//! the model is told they also take an `artifact://` URI, and per call [`fill`] puts the
//! artifact there in that form, sets an empty mime/filename sibling, and refuses what the
//! property cannot take before the upstream is called. Other tools get their arguments as
//! written.
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
pub mod detect;
mod fill;
mod inputs;
mod outputs;
pub mod schema;

use std::sync::Arc;

use serde::Serialize;
use serde_json::Value;
use stowage_core::ArtifactScope;

pub use config::{ChainingConfig, InputMode, Rule, ToolRule};
pub use detect::{DetectedInput, ToolInputs};
pub use fill::Filled;
pub(crate) use fill::Limits;
pub(crate) use inputs::{InputEnv, Materialized, translate_inputs};
pub(crate) use outputs::{OpenSlot, inject, translate_blobs};

use crate::tool_error::ToolError;

/// The chained inputs of one tool, as events and `check-config --tools` report them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DetectedTool {
    /// The tool's name as clients see it.
    pub tool: String,
    /// Its chained inputs and the notes on what was not chained.
    #[serde(flatten)]
    pub inputs: ToolInputs,
}

/// One exposed tool as detection sees it, lent by the caller from its catalog: chaining knows
/// these fields and nothing else of the catalog (which uses chaining's schema functions, so the
/// dependency points one way).
pub(crate) struct ToolEntry<'a> {
    /// The name the model sees.
    pub name: &'a str,
    /// The index of the upstream that serves it.
    pub upstream: usize,
    /// Whether it declares its blob fields (then nothing is detected).
    pub declares_blobs: bool,
    /// Its definition as exposed; detection shows the model what the inputs take here.
    pub def: &'a mut Value,
    /// Where the detected inputs go.
    pub inputs: &'a mut Option<Arc<ToolInputs>>,
}

/// The catalog hook: detects the chained inputs of every tool in `tools` (except those that
/// declare their blobs, or have a tool-wide rule) and shows the model what they take.
/// `stdio(i)`: whether upstream `i` runs on this machine. Returns what upstream `index`'s
/// tools came to, for the event and the log.
pub(crate) fn expose_inputs<'a>(
    tools: impl IntoIterator<Item = ToolEntry<'a>>,
    config: &ChainingConfig,
    stdio: impl Fn(usize) -> bool,
    index: usize,
) -> Vec<DetectedTool> {
    let mut report = Vec::new();
    for t in tools {
        let rule = config.inputs.get(t.name);
        if t.declares_blobs || detect::tool_rule(rule).is_some() {
            continue;
        }
        let mut found = detect::detect(t.def, stdio(t.upstream), config.auto, detect::property_rules(rule));
        if found.is_empty() {
            continue;
        }
        detect::llm_facing(t.def, &mut found);
        if t.upstream == index {
            report.push(DetectedTool { tool: t.name.to_owned(), inputs: found.clone() });
        }
        *t.inputs = Some(Arc::new(found));
    }
    report
}

impl DetectedTool {
    /// One line per chained input and note, as `check-config --tools` prints them:
    /// `content_base64: base64 (its name; sets mime_type)`.
    pub fn lines(&self) -> Vec<String> {
        let mut out = Vec::new();
        for d in &self.inputs.inputs {
            let mut how = vec![d.signal.clone()];
            if d.widened {
                how.push("schema widened".into());
            }
            if let Some(m) = &d.max_length {
                how.push(format!("maxLength {m}"));
            }
            if !d.media_types.is_empty() {
                how.push(format!("takes {}", d.media_types.join(", ")));
            }
            for s in d.mime_sibling.iter().chain(&d.filename_sibling) {
                how.push(format!("sets {s}"));
            }
            out.push(format!("{}: {} ({})", d.path, d.form, how.join("; ")));
        }
        out.extend(self.inputs.notes.iter().cloned());
        out
    }
}

/// What chaining did to one call's arguments: files to remove when the call ends, and what
/// each detected property was filled with.
#[derive(Debug, Default)]
pub(crate) struct Translated {
    pub materialized: Materialized,
    pub filled: Vec<Filled>,
}

/// A call's arguments through its tool's rule (`[gateway.chaining.inputs]`) or, without a
/// tool-wide one, its detected inputs. Nothing changes unless every URI is accepted.
pub(crate) async fn translate_call(
    env: &InputEnv<'_>,
    tool: &str,
    inputs: Option<&ToolInputs>,
    scope: &ArtifactScope,
    arguments: &mut Value,
    limits: &Limits<'_>,
) -> Result<Translated, ToolError> {
    match detect::tool_rule(env.config.inputs.get(tool)) {
        Some(Rule::Off) => Ok(Translated::default()),
        Some(Rule::Mode(mode)) => {
            Ok(Translated { materialized: translate_inputs(env, tool, mode, scope, arguments).await?, filled: Vec::new() })
        }
        None => match inputs.filter(|i| !i.inputs.is_empty()) {
            Some(inputs) => {
                let (materialized, filled) = fill::fill(env, tool, inputs, scope, arguments, limits).await?;
                Ok(Translated { materialized, filled })
            }
            None => Ok(Translated::default()),
        },
    }
}

/// Which `s3://` buckets the store's S3 backend owns: an `s3://` URI into any other bucket is
/// refused with `artifact_forbidden`. A trait so tests can own a bucket without a store.
pub(crate) trait S3Buckets: Send + Sync {
    /// Whether `bucket` is the store's own.
    fn owns(&self, bucket: &str) -> bool;
}

/// The gateway's artifact store decides: the `s3` backend owns its configured bucket.
pub(crate) struct StoreBuckets<'a>(pub Option<&'a Arc<dyn stowage_store::ArtifactStore>>);

impl S3Buckets for StoreBuckets<'_> {
    fn owns(&self, bucket: &str) -> bool {
        self.0.is_some_and(|s| s.owns_bucket(bucket))
    }
}
