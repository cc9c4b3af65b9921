//! L1: `resource_link`s are kept as lazy references.
//!
//! A `resource_link` already keeps bytes out of the context, so it is never fetched here
//! (auto-reading small resources is the gateway's job). Wherever one appears (the whole result,
//! a content list, nested JSON, JSON inside a text block) it is recorded in the report and
//! given a read hint: in `description` when the server sent none (so the model sees it), and
//! always in `_meta["io.stowage/read_hint"]` (so a second pass knows it was done). Links to
//! our own `artifact://` URIs are left alone: they are stubs this pipeline wrote. So are
//! links inside `structuredContent`, recorded but not touched: that object is validated against
//! the tool's `outputSchema`, and a closed schema refuses keys the tool did not put there.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::TransformConfig;
use crate::path::{push_index, push_key};
use crate::report::{LinkRecord, TransformReport};
use crate::work::Docs;
use stowage_core::ARTIFACT_URI_SCHEME;

/// The `_meta` key of the read hint.
pub const HINT_META_KEY: &str = "io.stowage/read_hint";

/// `[transform.resources]`: L1.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ResourcesConfig {
    /// Annotate `resource_link`s with a read hint and list them in the report. Default true.
    pub enabled: bool,
    /// The hint; `{uri}` is the link's URI. Default
    /// "Not fetched; read {uri} with resources/read if you need its content."
    pub read_hint: String,
}

impl Default for ResourcesConfig {
    fn default() -> Self {
        ResourcesConfig { enabled: true, read_hint: "Not fetched; read {uri} with resources/read if you need its content.".to_owned() }
    }
}

/// L1's pass: annotates links in place (nothing is stored).
pub(crate) fn annotate(docs: &mut Docs, config: &TransformConfig, report: &mut TransformReport) {
    if !config.resources.enabled {
        return;
    }
    for d in 0..docs.docs.len() {
        let prefix = docs.docs[d].prefix.clone();
        let mut ptr = String::new();
        let mut changed = false;
        walk(&mut docs.docs[d].value, &mut ptr, &prefix, &config.resources, report, &mut changed);
        docs.docs[d].changed |= changed;
    }
}

fn walk(value: &mut Value, ptr: &mut String, prefix: &str, config: &ResourcesConfig, report: &mut TransformReport, changed: &mut bool) {
    let len = ptr.len();
    match value {
        Value::Object(map) => {
            if map.get("type").and_then(Value::as_str) == Some("resource_link") {
                if let Some(uri) = map.get("uri").and_then(Value::as_str).map(str::to_owned)
                    && !uri.starts_with(ARTIFACT_URI_SCHEME)
                {
                    report.links.push(LinkRecord {
                        pointer: format!("{prefix}{ptr}"),
                        uri: uri.clone(),
                        mime_type: map.get("mimeType").and_then(Value::as_str).map(str::to_owned),
                        size_bytes: map.get("size").and_then(Value::as_u64),
                    });
                    let shaped_by_the_tool = prefix.is_empty() && ptr.starts_with("/structuredContent");
                    if !shaped_by_the_tool {
                        *changed |= add_hint(map, &config.read_hint.replace("{uri}", &uri));
                    }
                }
                return;
            }
            for (k, item) in map.iter_mut() {
                push_key(ptr, k);
                walk(item, ptr, prefix, config, report, changed);
                ptr.truncate(len);
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter_mut().enumerate() {
                push_index(ptr, i);
                walk(item, ptr, prefix, config, report, changed);
                ptr.truncate(len);
            }
        }
        _ => {}
    }
}

/// Returns whether the block changed (false when it already carries a hint).
fn add_hint(map: &mut Map<String, Value>, hint: &str) -> bool {
    let meta = map.entry("_meta").or_insert_with(|| Value::Object(Map::new()));
    let Value::Object(meta) = meta else { return false };
    if meta.contains_key(HINT_META_KEY) {
        return false;
    }
    meta.insert(HINT_META_KEY.into(), hint.into());
    if map.get("description").is_none_or(|d| d.as_str().is_none_or(str::is_empty)) {
        map.insert("description".into(), hint.into());
    }
    true
}
