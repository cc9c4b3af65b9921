//! [`TransformReport`]: what a transform did, for people, tests, benchmarks and the gateway.
//!
//! Pointers are RFC 6901 JSON Pointers into the *original* result. A value found inside JSON
//! that was itself inside a string (the Tableau case: JSON text in a text block) is addressed
//! as the pointer to that string, `#`, then the pointer inside the embedded JSON:
//! `/content/0/text#/content`. The clamp's whole-observation artifact has the pointer `""`.

use serde::{Deserialize, Serialize};
use stowage_core::ArtifactRef;

/// Which layer produced an artifact or a warning.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Layer {
    /// L5: a custom transformer or the external hook.
    Custom,
    /// L4: a per-tool field rule (configured or preset).
    FieldRule,
    /// A property the tool's output schema marks `"artifact": true`.
    SchemaField,
    /// L1: `resource_link` handling.
    ResourceLink,
    /// L2: MCP typed content (image, audio, embedded resource blob).
    TypedContent,
    /// L3: base64 recognised by magic bytes.
    Base64,
    /// L0: the size safety net.
    SizeNet,
    /// The final observation clamp.
    Clamp,
    /// Parsing embedded JSON, token counting and other plumbing.
    Pipeline,
}

/// One stored artifact.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ArtifactRecord {
    /// The artifact id.
    pub id: String,
    /// `artifact://<id>`.
    pub uri: String,
    /// Where the value was in the original result (see the module docs).
    pub pointer: String,
    /// The recorded media type.
    pub mime_type: Option<String>,
    /// Stored size in bytes.
    pub size_bytes: u64,
    /// Lowercase hex sha256 of the bytes.
    pub sha256: String,
    /// The layer that offloaded it.
    pub layer: Layer,
    /// The file name recorded with it, if any.
    pub filename: Option<String>,
    /// The one-line summary the model reads.
    pub summary: String,
    /// When part of the value stayed in place (a typed prefix inside `structuredContent`, see
    /// [`crate::layers::schema`]): how much of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partial: Option<Partial>,
    /// Every part of the value that stayed in place as a prefix, when there are any: the
    /// artifact is the whole value (the object a tool's output schema describes), and these
    /// are where its arrays and objects were cut.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cuts: Vec<Cut>,
    /// The store's full reference (scope, timestamps, source), for `resource_link` and
    /// `structuredContent.assets[]`.
    #[serde(rename = "ref")]
    pub artifact: ArtifactRef,
}

/// How much of an offloaded array (items) or object (keys) was kept in place.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Partial {
    /// Items or keys kept in place.
    pub kept: usize,
    /// Items or keys the value had.
    pub total: usize,
}

/// One array or object cut to a prefix inside a stored value ([`ArtifactRecord::cuts`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cut {
    /// Where the prefix is, as a report pointer into the original result.
    pub pointer: String,
    /// Items or keys kept in place.
    pub kept: usize,
    /// Items or keys the value had.
    pub total: usize,
}

/// A `resource_link` kept as a lazy reference (L1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LinkRecord {
    /// Where the link is in the original result.
    pub pointer: String,
    /// The link's URI.
    pub uri: String,
    /// The media type the link declares.
    pub mime_type: Option<String>,
    /// The size the link declares.
    pub size_bytes: Option<u64>,
}

/// What kind of thing went wrong, for callers that act on it (the gateway counts store
/// failures and tells the model a value was cut) without matching message text.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WarningKind {
    /// The store refused a value: it was withheld, or a truncated copy stayed in its place.
    StoreFailed,
    /// Anything else (a custom transformer that failed, a hook's bad output).
    #[default]
    Other,
}

/// Something a layer could not do; the result still came back.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Warning {
    /// The layer that could not.
    pub layer: Layer,
    #[serde(default)]
    /// What kind of failure, for callers that act on it.
    pub kind: WarningKind,
    /// Where, when it is about one value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pointer: Option<String>,
    /// One line saying what happened.
    pub message: String,
}

/// The report of one transform (`stowage transform --report FILE` writes it as JSON).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TransformReport {
    /// Serialised size of the input, in bytes.
    pub bytes_in: u64,
    /// Serialised size of the output (compact JSON), in bytes.
    pub bytes_out: u64,
    /// o200k_base tokens of the input, or an estimate when `tokens_estimated`.
    pub tokens_in: u64,
    /// o200k_base tokens of the output, or an estimate when `tokens_estimated`.
    pub tokens_out: u64,
    /// True when a side was too large to count exactly and its count is `bytes / 4`-style
    /// estimate (see [`crate::tokens`]).
    pub tokens_estimated: bool,
    /// What was stored, in order.
    pub artifacts: Vec<ArtifactRecord>,
    /// `resource_link`s kept as lazy references (L1).
    pub links: Vec<LinkRecord>,
    /// What layers could not do.
    pub warnings: Vec<Warning>,
    /// Whether the final observation clamp changed the result.
    pub clamped: bool,
    /// Values the store could not take, withheld from the result (only with
    /// [`crate::TransformInput::withhold_on_store_failure`]; otherwise such a failure fails
    /// the run).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub withheld: Vec<Withheld>,
}

/// One value withheld because the store could not take it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Withheld {
    /// RFC 6901 pointer into the original result.
    pub pointer: String,
    /// What it was (`image/png binary`, `text`, …).
    pub what: String,
    /// Its size in bytes.
    pub size_bytes: u64,
    /// The line the result carries in its place.
    pub reason: String,
}

impl TransformReport {
    pub(crate) fn warn(&mut self, layer: Layer, pointer: Option<String>, message: impl Into<String>) {
        self.push_warning(layer, WarningKind::Other, pointer, message.into());
    }

    /// A value the store refused (see [`WarningKind::StoreFailed`]).
    pub(crate) fn warn_store(&mut self, layer: Layer, pointer: Option<String>, message: impl Into<String>) {
        self.push_warning(layer, WarningKind::StoreFailed, pointer, message.into());
    }

    fn push_warning(&mut self, layer: Layer, kind: WarningKind, pointer: Option<String>, message: String) {
        tracing::warn!(?layer, pointer = pointer.as_deref().unwrap_or(""), "{message}");
        self.warnings.push(Warning { layer, kind, pointer, message });
    }

    /// The warnings about values the store refused.
    pub fn store_failures(&self) -> impl Iterator<Item = &Warning> {
        self.warnings.iter().filter(|w| w.kind == WarningKind::StoreFailed)
    }
}
