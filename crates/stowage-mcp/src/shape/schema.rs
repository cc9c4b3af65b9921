//! Step 2, the contract's last part: an answer's `structuredContent` still validates against
//! the tool's `outputSchema`, which the gateway advertises unchanged.
//!
//! The pipeline keeps schema-typed positions typed (a prefix of a large array, not a stub
//! object); what still fails is repaired where the rewrite touched it (the smallest instance
//! the schema accepts at that position), and what cannot be repaired becomes an `isError`
//! result that still lists every artifact (clients do not validate error results). Never
//! inline base64, never a dropped artifact. A violation where the rewrite did not touch the
//! result is the upstream's own and is relayed as it came.

use serde_json::{Value, json};
use stowage_transform::TransformReport;
use stowage_transform::layers::schema::SchemaView;

use super::contract::set_meta;
use crate::output_schema::{OutputSchema, Violation};

/// Error code of a result whose compact form could not be made to match the tool's output
/// schema (see [`enforce_output_schema`]).
pub const OUTPUT_SCHEMA_MISMATCH: &str = "output_schema_mismatch";

/// What checking a rewritten result against the tool's output schema came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SchemaCheck {
    /// Not checked: no schema, or the rewrite changed nothing.
    Unchecked,
    /// The rewritten result validates as it is.
    Valid,
    /// Positions the rewrite touched were replaced by the smallest values their schema accepts.
    Repaired,
    /// The upstream's own result does not validate, where the rewrite did not touch it: it is
    /// relayed as it is (not the gateway's to fix).
    UpstreamInvalid,
    /// No valid compact form: the result became an `isError` result listing every artifact.
    Error,
}

impl SchemaCheck {
    /// The name the log and the result's record give the outcome (`repaired`, `upstream_invalid`).
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            SchemaCheck::Unchecked => "unchecked",
            SchemaCheck::Valid => "valid",
            SchemaCheck::Repaired => "repaired",
            SchemaCheck::UpstreamInvalid => "upstream_invalid",
            SchemaCheck::Error => "error",
        }
    }

    /// What `_meta` says about it: nothing when it was checked and fine, or not checked.
    pub(crate) fn meta(self) -> Option<&'static str> {
        (!matches!(self, SchemaCheck::Unchecked | SchemaCheck::Valid)).then(|| self.as_str())
    }
}

/// Pointers (relative to `structuredContent`) of what the transform changed there; `""` when
/// it may have changed anything (the clamp).
pub(crate) fn touched(report: &TransformReport) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    // A value stored whole but kept in place in part: where it was cut is what changed.
    fn cut(a: &stowage_transform::ArtifactRecord) -> Vec<&str> {
        if a.cuts.is_empty() { vec![a.pointer.as_str()] } else { a.cuts.iter().map(|c| c.pointer.as_str()).collect() }
    }
    let pointers = report.artifacts.iter().flat_map(cut).chain(report.warnings.iter().filter_map(|w| w.pointer.as_deref()));
    for p in pointers {
        if p.is_empty() {
            out.push(String::new());
        } else if let Some(rel) = p.strip_prefix("/structuredContent")
            && (rel.is_empty() || rel.starts_with('/'))
        {
            out.push(rel.to_owned());
        }
    }
    if report.clamped {
        out.push(String::new());
    }
    out
}

/// Whether a violation at `at` can come from a change at `touched` (one contains the other).
fn related(touched: &str, at: &str) -> bool {
    let within = |outer: &str, inner: &str| inner == outer || inner.strip_prefix(outer).is_some_and(|r| r.starts_with('/'));
    touched.is_empty() || at.is_empty() || within(touched, at) || within(at, touched)
}

/// Makes the rewritten `structuredContent` of `value` validate against `schema` (see the
/// module docs): `touched` are the positions the rewrite changed.
pub fn enforce_output_schema(value: &mut Value, schema: &OutputSchema, touched: &[String]) -> SchemaCheck {
    if value.get("isError") == Some(&Value::Bool(true)) || schema.compile_error().is_some() {
        return SchemaCheck::Unchecked;
    }
    let Some(sc) = value.get("structuredContent") else { return SchemaCheck::Unchecked };
    if schema.is_valid(sc) {
        return SchemaCheck::Valid;
    }
    let view = SchemaView::new(schema.schema());
    let mut last: Option<Violation> = None;
    // A few rounds: a repair can uncover the next violation below it.
    for round in 0..4 {
        let violations = schema.violations(&value["structuredContent"], 32);
        let Some(first) = violations.first().cloned() else { return SchemaCheck::Repaired };
        let ours: Vec<&Violation> = violations.iter().filter(|v| touched.iter().any(|t| related(t, &v.pointer))).collect();
        if ours.is_empty() {
            return if round == 0 { SchemaCheck::UpstreamInvalid } else { SchemaCheck::Repaired };
        }
        last = Some(first);
        let mut changed = false;
        for v in ours {
            let sc = &value["structuredContent"];
            let Some(minimal) = view.minimal_instance(&view.at(sc, &v.pointer)) else { continue };
            let Some(slot) = value["structuredContent"].pointer_mut(&v.pointer) else { continue };
            changed |= repair(slot, minimal);
        }
        if !changed {
            break;
        }
    }
    if schema.is_valid(&value["structuredContent"]) {
        return SchemaCheck::Repaired;
    }
    let why = last.map_or_else(|| "it does not validate".to_owned(), |v| v.to_string());
    schema_error_result(value, &why);
    SchemaCheck::Error
}

/// Puts `minimal` at `slot`: an object only gets the members it lacks (what it has may be
/// fine), anything else is replaced. Whether anything changed.
fn repair(slot: &mut Value, minimal: Value) -> bool {
    match (slot, minimal) {
        (Value::Object(have), Value::Object(need)) => {
            let mut changed = false;
            for (k, v) in need {
                if !have.contains_key(&k) {
                    have.insert(k, v);
                    changed = true;
                }
            }
            changed
        }
        (slot, minimal) if *slot != minimal => {
            *slot = minimal;
            true
        }
        _ => false,
    }
}

/// The last resort: an `isError` result (clients do not validate those against the output
/// schema) that keeps every line and link, says why first, and drops the structuredContent
/// that does not fit.
fn schema_error_result(value: &mut Value, why: &str) {
    let message = format!(
        "The compact form of this result does not match the tool's outputSchema ({why}), so it is returned as an error; \
         the heavy parts are stored as the artifacts listed here."
    );
    if let Some(obj) = value.as_object_mut() {
        obj.remove("structuredContent");
        obj.insert("isError".into(), Value::Bool(true));
        let line = json!({"type": "text", "text": format!("{OUTPUT_SCHEMA_MISMATCH}: {message}")});
        match obj.get_mut("content").and_then(Value::as_array_mut) {
            Some(content) => content.insert(0, line),
            None => {
                obj.insert("content".into(), json!([line]));
            }
        }
    }
    set_meta(value, "io.stowage/error", json!({"code": OUTPUT_SCHEMA_MISMATCH, "message": message}));
}

/// Whether an object `schema` lets `key` be added: it declares it, or does not close the
/// object.
pub(crate) fn schema_accepts_key(schema: &Value, key: &str) -> bool {
    if schema.get("properties").and_then(|p| p.get(key)).is_some() {
        return true;
    }
    !matches!(schema.get("additionalProperties"), Some(Value::Bool(false)))
        && !matches!(schema.get("unevaluatedProperties"), Some(Value::Bool(false)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows_schema() -> OutputSchema {
        OutputSchema::compile(
            json!({"type": "object", "properties": {"result": {"type": "array", "items": {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]}},
            "n": {"type": "integer"}}, "required": ["result"]}),
        )
    }

    #[test]
    fn touched_positions_are_repaired_to_what_the_schema_accepts() {
        let schema = rows_schema();
        // The rewrite left an object where an array must be.
        let mut v = json!({"content": [], "structuredContent": {"result": {"$artifact": {}}, "n": 3}});
        assert_eq!(enforce_output_schema(&mut v, &schema, &["/result".into()]), SchemaCheck::Repaired);
        assert_eq!(v["structuredContent"], json!({"result": [], "n": 3}));
        assert!(schema.is_valid(&v["structuredContent"]));
        // An item lost a required member: only that member is added.
        let mut v = json!({"content": [], "structuredContent": {"result": [{"id": 1}, {"x": 2}]}});
        assert_eq!(enforce_output_schema(&mut v, &schema, &["/result/1/x".into()]), SchemaCheck::Repaired);
        assert_eq!(v["structuredContent"]["result"][1], json!({"x": 2, "id": 0}));
    }

    #[test]
    fn an_upstreams_own_invalid_result_is_left_alone() {
        let schema = rows_schema();
        let mut v = json!({"content": [], "structuredContent": {"result": [], "n": "three"}});
        let before = v.clone();
        assert_eq!(enforce_output_schema(&mut v, &schema, &["/result".into()]), SchemaCheck::UpstreamInvalid);
        assert_eq!(v, before);
    }

    #[test]
    fn what_cannot_be_repaired_becomes_an_error_result_that_keeps_its_artifacts() {
        // `contains` cannot be met by a smallest instance.
        let schema = OutputSchema::compile(
            json!({"type": "object", "properties": {"xs": {"type": "array", "contains": {"const": 7}}}, "required": ["xs"]}),
        );
        let mut v = json!({"content": [{"type": "text", "text": "JSON array stored as artifact://t_1"}, {"type": "resource_link", "uri": "artifact://t_1", "name": "t_1"}],
            "structuredContent": {"xs": [1, 2]}});
        assert_eq!(enforce_output_schema(&mut v, &schema, &["/xs".into()]), SchemaCheck::Error);
        assert_eq!(v["isError"], true);
        assert!(v.get("structuredContent").is_none());
        assert!(v["content"][0]["text"].as_str().unwrap().starts_with("output_schema_mismatch: "), "{v}");
        assert_eq!(v["content"][2]["uri"], "artifact://t_1", "the artifact is still there");
        assert_eq!(v["_meta"]["io.stowage/error"]["code"], OUTPUT_SCHEMA_MISMATCH);
    }
}
