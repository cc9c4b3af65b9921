//! Values a result carries twice: one value, counted once and treated alike in both places.
//!
//! Servers that return structured output usually repeat it as text for clients that read only
//! `content`: FastMCP sends a `-> str` tool's text as `content[0].text` and as
//! `structuredContent.result`, and a `-> dict` tool's value as `structuredContent` and as its
//! JSON text in `content[0].text` (a `-> list` one as `structuredContent.result` and its JSON).
//! Counted twice, a 26 KB text looks like 52 KB to a budget and gets offloaded although each
//! copy is far under the inline budget; treated apart, the two copies drift (a typed prefix in
//! one, a JSON preview in the other). So:
//! - the pipeline folds a JSON twin before its layers run (they see the value once, in
//!   `structuredContent`, where the output schema types it) and writes the text back from the
//!   result afterwards ([`crate::work::Docs`]); a string twin needs no folding, every layer
//!   treats equal strings alike;
//! - whatever measures a result against a budget (the clamp here, the gateway's shaper) skips
//!   the copies [`find`] names.

use serde_json::Value;

/// Where the value a text block repeats lives in the result.
pub const STRUCTURED: &str = "/structuredContent";
/// FastMCP's wrapper for a value that is not an object.
pub const STRUCTURED_RESULT: &str = "/structuredContent/result";

/// A `content` text block that repeats a value of `structuredContent`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Twin {
    /// The text block's index in `content`.
    pub block: usize,
    /// [`STRUCTURED`] or [`STRUCTURED_RESULT`].
    pub source: &'static str,
    /// The block repeats a string as it is (not as JSON text).
    pub string: bool,
}

impl Twin {
    /// The pointer of the repeating text.
    pub fn text_pointer(&self) -> String {
        format!("/content/{}/text", self.block)
    }
}

/// Which value of `structured` (a result's `structuredContent`) the parsed JSON text `parsed`
/// repeats, if any.
pub fn source_of(parsed: &Value, structured: &Value) -> Option<&'static str> {
    if parsed == structured {
        return Some(STRUCTURED);
    }
    match structured.as_object() {
        Some(m) if m.len() == 1 && m.get("result") == Some(parsed) => Some(STRUCTURED_RESULT),
        _ => None,
    }
}

/// Whether `s` may be JSON text of an object or array (the cheap test before a parse).
pub fn looks_like_json_container(s: &str) -> bool {
    let t = s.trim_ascii();
    (t.starts_with('{') && t.ends_with('}')) || (t.starts_with('[') && t.ends_with(']'))
}

/// The text blocks of `result` that repeat its `structuredContent` (at most one per source).
/// A JSON-looking text is parsed to compare, so on a big result call this once and keep the
/// answer.
pub fn find(result: &Value) -> Vec<Twin> {
    let mut out: Vec<Twin> = Vec::new();
    let Some(structured) = result.get("structuredContent").filter(|s| !s.is_null()) else { return out };
    let Some(blocks) = result.get("content").and_then(Value::as_array) else { return out };
    let result_string = structured.as_object().filter(|m| m.len() == 1).and_then(|m| m.get("result")).and_then(Value::as_str);
    for (block, b) in blocks.iter().enumerate() {
        if b.get("type").and_then(Value::as_str) != Some("text") {
            continue;
        }
        let Some(text) = b.get("text").and_then(Value::as_str) else { continue };
        let found = if result_string == Some(text) {
            Some((STRUCTURED_RESULT, true))
        } else if looks_like_json_container(text) {
            serde_json::from_str::<Value>(text).ok().and_then(|parsed| source_of(&parsed, structured)).map(|s| (s, false))
        } else {
            None
        };
        if let Some((source, string)) = found
            && !out.iter().any(|t| t.source == source)
        {
            out.push(Twin { block, source, string });
        }
    }
    out
}

/// The characters the repeating copies add to `result`'s JSON (their texts, as JSON strings).
pub fn duplicate_chars(result: &Value, twins: &[Twin]) -> usize {
    twins.iter().filter_map(|t| result.pointer(&t.text_pointer())).map(|v| serde_json::to_string(v).map_or(0, |s| s.chars().count())).sum()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn fastmcp_string_and_json_twins_are_found() {
        let text = "a long report ".repeat(10);
        let r = json!({"content": [{"type": "text", "text": text}], "structuredContent": {"result": text}});
        assert_eq!(find(&r), vec![Twin { block: 0, source: STRUCTURED_RESULT, string: true }]);
        let r =
            json!({"content": [{"type": "text", "text": "{\"rows\": [1, 2], \"n\": 2}"}], "structuredContent": {"n": 2, "rows": [1, 2]}});
        assert_eq!(find(&r), vec![Twin { block: 0, source: STRUCTURED, string: false }]);
        let r = json!({"content": [{"type": "text", "text": "[1,2]"}], "structuredContent": {"result": [1, 2]}});
        assert_eq!(find(&r)[0].source, STRUCTURED_RESULT);
        assert_eq!(duplicate_chars(&r, &find(&r)), "\"[1,2]\"".len());
    }

    #[test]
    fn different_values_are_not_twins() {
        let r = json!({"content": [{"type": "text", "text": "{\"n\": 3}"}], "structuredContent": {"n": 2}});
        assert!(find(&r).is_empty());
        let r = json!({"content": [{"type": "text", "text": "hello"}], "structuredContent": {"result": "hello", "extra": 1}});
        assert!(find(&r).is_empty(), "a result key beside others is the tool's own");
        assert!(find(&json!({"content": [{"type": "text", "text": "x"}]})).is_empty());
    }
}
