//! The layers, in the order the pipeline runs them (see [`crate::pipeline`]):
//!
//! | module | layer | what it does |
//! |---|---|---|
//! | [`custom`], [`hook`] | L5 | user code: a Rust [`custom::CustomTransformer`] or an external command |
//! | [`fields`] | L4 | per-tool field rules and the Tableau presets |
//! | [`schema`] | L4 | properties the tool's output schema marks `"artifact": true` |
//! | [`resource_link`] | L1 | `resource_link`s kept as lazy references with a read hint |
//! | [`typed`] | L2 | image, audio and embedded-resource blobs decoded and stored |
//! | [`base64`] | L3 | base64 anywhere, recognised by magic bytes |
//! | [`size`] | L0 | the size safety net for long strings and large JSON |
//!
//! The final observation clamp ([`crate::clamp`]) follows them.

pub mod base64;
pub mod custom;
pub mod fields;
pub mod hook;
pub mod resource_link;
pub mod schema;
pub mod size;
pub mod typed;

use serde_json::Value;

use crate::TransformConfig;
use crate::report::TransformReport;
use crate::work::{Docs, Offload};

/// What the layers that walk a document and collect values to offload (L2, L3) carry along:
/// the config, the report for warnings, which document and its pointer prefix, and the list of
/// found values.
pub(crate) struct WalkCx<'a> {
    pub config: &'a TransformConfig,
    pub report: &'a mut TransformReport,
    pub doc: usize,
    pub prefix: String,
    pub out: &'a mut Vec<Offload>,
    /// Hash large decoded binaries while decoding them (the sink prefers a digest).
    pub hash: bool,
}

/// Whether a value has the shape of an MCP `CallToolResult`: a `content` list of typed blocks
/// (or `structuredContent`/`isError` beside it). A native tool's `{"content": "JVBERi…"}` is not.
pub(crate) fn is_call_tool_result(v: &Value) -> bool {
    let Some(map) = v.as_object() else { return false };
    match map.get("content") {
        Some(Value::Array(items)) => items.iter().all(|b| b.get("type").is_some_and(Value::is_string)),
        Some(_) => false,
        None => map.contains_key("structuredContent") && map.contains_key("isError"),
    }
}

/// Where a tool's own payload lives, as (document, pointer) pairs: for a `CallToolResult`, its
/// `structuredContent` and the JSON inside its text blocks; for anything else, the root.
/// Field rules and schema marks apply there.
pub(crate) fn payload_roots(docs: &Docs) -> Vec<(usize, String)> {
    let root = &docs.docs[0].value;
    if !is_call_tool_result(root) {
        return vec![(0, String::new())];
    }
    let mut out = Vec::new();
    if root.get("structuredContent").is_some() {
        out.push((0, "/structuredContent".to_owned()));
    }
    for (i, d) in docs.docs.iter().enumerate().skip(1) {
        if let Some((0, ptr)) = &d.parent
            && ptr.starts_with("/content/")
            && ptr.ends_with("/text")
            && ptr.matches('/').count() == 3
        {
            out.push((i, String::new()));
        }
    }
    out
}

/// Whether a tool name is `rule` itself or `rule` behind a server namespace
/// (`tableau_download_workbook`, `tableau.download_workbook`, `tableau/download_workbook`,
/// `tableau__download_workbook`, `tableau:download_workbook`). `*` matches every tool.
pub fn tool_matches(rule: &str, tool: &str) -> bool {
    if rule == "*" || rule == tool {
        return true;
    }
    match tool.strip_suffix(rule) {
        Some(prefix) => prefix.ends_with(['_', '.', '/', ':', '-']) && prefix.len() > 1,
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tool_names() {
        for (rule, tool, want) in [
            ("download_workbook", "download_workbook", true),
            ("download_workbook", "tableau_download_workbook", true),
            ("download_workbook", "tableau.download_workbook", true),
            ("download_workbook", "tableau/download_workbook", true),
            ("download_workbook", "tableau__download_workbook", true),
            ("download_workbook", "tableau:download_workbook", true),
            ("download_workbook", "redownload_workbook", false),
            ("download_workbook", "download_workbooks", false),
            ("download_workbook", "_download_workbook", false),
            ("download_workbook", "", false),
            ("*", "anything", true),
        ] {
            assert_eq!(tool_matches(rule, tool), want, "{rule} vs {tool}");
        }
    }

    #[test]
    fn call_tool_results() {
        for (v, want) in [
            (json!({"content": [{"type": "text", "text": "x"}]}), true),
            (json!({"content": [], "isError": false}), true),
            (json!({"structuredContent": {}, "isError": false}), true),
            (json!({"content": "JVBERi0x", "name": "Sales"}), false),
            (json!({"content": [{"text": "no type"}]}), false),
            (json!([1, 2]), false),
        ] {
            assert_eq!(is_call_tool_result(&v), want, "{v}");
        }
    }
}
