//! L4: per-tool field rules. For a known tool, the operator says which field holds a file, what
//! it is and how to describe it; no guessing, so no false positives.
//!
//! A rule applies to a tool by name, plain or behind a server namespace
//! (`download_workbook` matches `tableau_download_workbook` and `tableau.download_workbook`),
//! at a JSON Pointer or dot path with `*` wildcards, inside the tool's payload (the root of a
//! native result, or the `structuredContent` and text-block JSON of a `CallToolResult`).
//! Filename and summary templates are filled from the stored artifact and the value's sibling
//! fields: `{name}`, `{size_human}`, `{mime}`, `{filename}`, `{content_type}`, `{artifact_id}`,
//! `{uri}`, `{ext}`, and any sibling like `{view_name}`.
//!
//! The shipped presets (on unless `presets = false`) cover the Tableau MCP server's heavy
//! fields: `download_workbook.content` and `get_view_as_pdf.pdf_data`.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::TransformConfig;
use crate::layers::base64::{Decoded, Sniff, decode_owned, shape_probe, sniff};
use crate::layers::{payload_roots, tool_matches};
use crate::path::{FieldPath, split_last};
use crate::report::{Layer, TransformReport};
use crate::stub::{self, TemplateVars, placeholder};
use crate::work::{Docs, Offload, Payload, Render};

/// `[transform.tool_fields]`: L4.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ToolFieldsConfig {
    /// Apply the shipped presets (Tableau `download_workbook.content`,
    /// `get_view_as_pdf.pdf_data`) after your own rules. Default true.
    pub presets: bool,
    /// Your rules, as `[[transform.tool_fields.rules]]` tables. Default none.
    pub rules: Vec<FieldRule>,
}

impl Default for ToolFieldsConfig {
    fn default() -> Self {
        ToolFieldsConfig { presets: true, rules: Vec::new() }
    }
}

/// One field rule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FieldRule {
    /// Tool name, plain (matches namespaced names too) or `*`.
    pub tool: String,
    /// JSON Pointer (`/result/pdf_data`) or dot path (`result.pdf_data`, `pages.*.image`).
    pub path: String,
    /// Short type for summaries (`pdf`, `image`, `text`, `json`); `text`/`json`/`csv` values
    /// that are not base64 are stored as text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_type: Option<String>,
    /// Media type; sniffed from the bytes when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
    /// Filename template, e.g. `{name}.pdf`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filename: Option<String>,
    /// Summary template, e.g. `Downloaded workbook '{name}' ({size_human}) as {uri}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
}

/// The shipped presets: the Tableau MCP server's base64 fields.
pub fn presets() -> Vec<FieldRule> {
    vec![
        FieldRule {
            tool: "download_workbook".into(),
            path: "content".into(),
            content_type: None,
            mime_type: None,
            filename: Some("{name}.{ext}".into()),
            summary: Some("Downloaded workbook '{name}' as {content_type} ({size_human}), stored as {uri}".into()),
        },
        FieldRule {
            tool: "get_view_as_pdf".into(),
            path: "pdf_data".into(),
            content_type: Some("pdf".into()),
            mime_type: Some("application/pdf".into()),
            filename: Some("{view_name}.pdf".into()),
            summary: Some("PDF of view '{view_name}' ({size_human}, generated {generated_at}), stored as {uri}".into()),
        },
    ]
}

/// The rules that apply to `tool`: configured first, then presets.
pub(crate) fn rules_for(config: &ToolFieldsConfig, tool: &str) -> Vec<FieldRule> {
    let mut out: Vec<FieldRule> = config.rules.iter().filter(|r| tool_matches(&r.tool, tool)).cloned().collect();
    if config.presets {
        out.extend(presets().into_iter().filter(|r| tool_matches(&r.tool, tool)));
    }
    out
}

/// L4's pass. With `hash`, large binaries are hashed as they are decoded.
pub(crate) fn collect(docs: &mut Docs, config: &TransformConfig, tool: &str, report: &mut TransformReport, hash: bool) -> Vec<Offload> {
    let mut out = Vec::new();
    let rules = rules_for(&config.tool_fields, tool);
    if rules.is_empty() {
        return out;
    }
    let roots = payload_roots(docs);
    for rule in &rules {
        let path = match FieldPath::parse(&rule.path) {
            Ok(p) => p,
            Err(e) => {
                report.warn(Layer::FieldRule, None, format!("field rule for tool {}: {e}", rule.tool));
                continue;
            }
        };
        let mut matched = false;
        for (doc, root_ptr) in &roots {
            let Some(root) = docs.docs[*doc].value.pointer(root_ptr) else { continue };
            for rel in resolve_with_result_fallback(&path, root) {
                matched = true;
                let ptr = format!("{root_ptr}{rel}");
                if let Some(off) = offload(docs, *doc, &ptr, rule, report, hash) {
                    out.push(off);
                }
            }
        }
        // `content[*].resource.blob`: a payload inside a content block of the result itself
        // (an embedded resource's blob). The whole block gives way to the artifact's line and
        // link, as a typed block's would, so no half-emptied block is left behind.
        if !matched && path.reaches_into_content_blocks() && crate::layers::is_call_tool_result(&docs.docs[0].value) {
            for ptr in path.resolve(&docs.docs[0].value) {
                let Some(block) = content_block_pointer(&ptr) else { continue };
                if let Some(mut off) = offload(docs, 0, &ptr, rule, report, hash) {
                    off.ptr = block;
                    off.render = Render::Blocks;
                    out.push(off);
                }
            }
        }
    }
    out
}

/// `/content/3` for a pointer inside block 3 of a result's content.
fn content_block_pointer(ptr: &str) -> Option<String> {
    let rest = ptr.strip_prefix("/content/")?;
    let (index, inside) = rest.split_once('/')?;
    (index.parse::<usize>().is_ok() && !inside.is_empty()).then(|| format!("/content/{index}"))
}

/// Where `path` points in `root`; when it matches nothing there, where it points under
/// `root.result`. FastMCP wraps a tool's non-object return as `{"result": …}`, so a rule
/// written for the tool's own shape (`resource.blob`) still finds `result.resource.blob`.
fn resolve_with_result_fallback(path: &FieldPath, root: &Value) -> Vec<String> {
    let direct = path.resolve(root);
    if !direct.is_empty() {
        return direct;
    }
    match root.get("result") {
        Some(inner) => path.resolve(inner).into_iter().map(|rel| format!("/result{rel}")).collect(),
        None => direct,
    }
}

fn offload(docs: &mut Docs, doc: usize, ptr: &str, rule: &FieldRule, report: &mut TransformReport, hash: bool) -> Option<Offload> {
    let pointer = docs.report_pointer(doc, ptr);
    let value = docs.docs[doc].value.pointer(ptr)?;
    if value.is_null() || value.as_str().is_some_and(|s| s.is_empty() || stub::is_stub(s)) {
        return None;
    }
    let (parent_ptr, key) = split_last(ptr)?;
    let parent = docs.docs[doc].value.pointer(parent_ptr).and_then(Value::as_object);
    // An embedded resource (or any holder) that declares its type beside the value.
    let sibling_mime = parent.and_then(|p| p.get("mimeType")).and_then(Value::as_str).filter(|m| !m.is_empty()).map(str::to_owned);
    let mut vars = TemplateVars::from_siblings(parent, Some(&key));
    let textual = matches!(rule.content_type.as_deref(), Some("text" | "json" | "csv" | "markdown" | "html"));
    let probed = match value {
        Value::String(s) if !textual => Some(shape_probe(s)),
        _ => None,
    };
    let (payload, mime, ext, render) = match probed {
        Some(Some(p)) => {
            // Decoded in place: a preset field is the Tableau case, megabytes of base64.
            let slot = docs.docs[doc].value.pointer_mut(ptr)?;
            let Value::String(s) = slot else { return None };
            match decode_owned(std::mem::take(s), &p, hash) {
                Ok(Decoded { bytes, sha256 }) => {
                    let (sniffed, ext) = match sniff(&bytes) {
                        Sniff::Binary { mime, ext } => (Some(mime), ext),
                        _ => (None, ""),
                    };
                    let mime = rule
                        .mime_type
                        .clone()
                        .or(p.declared_mime.clone())
                        .or(sibling_mime)
                        .or(sniffed.map(str::to_owned))
                        .unwrap_or_else(|| "application/octet-stream".to_owned());
                    let ext = if ext.is_empty() { rule.content_type.clone().unwrap_or_default() } else { ext.to_owned() };
                    (Payload::new(bytes, sha256), mime, ext, Render::StringStub)
                }
                Err((original, _)) => {
                    *slot = Value::String(original);
                    report.warn(
                        Layer::FieldRule,
                        Some(pointer),
                        format!("field rule {}.{}: value is not base64; left as it is", rule.tool, rule.path),
                    );
                    return None;
                }
            }
        }
        Some(None) => {
            report.warn(
                Layer::FieldRule,
                Some(pointer),
                format!("field rule {}.{}: value is not base64; left as it is", rule.tool, rule.path),
            );
            return None;
        }
        None => match value {
            Value::String(s) => {
                let mime = rule.mime_type.clone().unwrap_or_else(|| "text/plain; charset=utf-8".to_owned());
                (Payload::Text(s.clone()), mime, "txt".to_owned(), Render::StringStub)
            }
            other => {
                let text = serde_json::to_string(other).expect("serialises");
                let ph = placeholder(other, text.len() as u64);
                let mime = rule.mime_type.clone().unwrap_or_else(|| "application/json".to_owned());
                (Payload::Text(text), mime, "json".to_owned(), Render::Placeholder { placeholder: ph })
            }
        },
    };
    vars.set("mime", mime.clone());
    vars.set("ext", ext.clone());
    let content_type = rule.content_type.clone().or_else(|| stub::content_type_of(&mime));
    if let Some(ct) = &content_type {
        vars.set("content_type", ct.clone());
    }
    vars.set("size_human", stowage_core::human_size(payload.len() as u64));
    let filename = rule.filename.as_deref().map(|t| vars.fill(t)).filter(|f| !f.starts_with('?') && !f.is_empty());
    if let Some(slot) = docs.docs[doc].value.pointer_mut(ptr) {
        *slot = Value::String(String::new());
    }
    Some(Offload {
        doc,
        ptr: ptr.to_owned(),
        what: format!("field {} of tool {}", rule.path, rule.tool),
        payload,
        mime: Some(mime),
        filename,
        layer: Layer::FieldRule,
        render,
        fatal: true,
        fallback: None,
        summary_template: rule.summary.clone(),
        content_type,
        vars,
        source: Map::new(),
    })
}
