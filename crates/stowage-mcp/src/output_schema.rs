//! A tool's `outputSchema`, compiled once when its upstream's `tools/list` is fetched, and
//! checked against every rewritten `structuredContent` of that tool.
//!
//! The gateway advertises each tool's schema unchanged (typed clients generate code from it),
//! so what it puts in `structuredContent` must validate against that schema: the Python SDK
//! and the Inspector reject the whole result otherwise. The transform keeps schema-typed
//! positions typed; this module is the guarantee on top ([`crate::shape::schema`] repairs what still
//! fails). Only document-local `$ref`s resolve: `jsonschema` is built without its HTTP and
//! file retrievers, so an upstream's schema never makes the gateway fetch anything.

use std::fmt;

use serde_json::Value;

/// One tool's output schema and its compiled validator.
pub struct OutputSchema {
    schema: Value,
    /// `Err` when the schema does not compile (the tool is then relayed unchecked: clients
    /// that validate fail on such a schema whatever the gateway does).
    validator: Result<jsonschema::Validator, String>,
}

/// One place where an instance does not match.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// JSON Pointer into the instance (`""` for the whole of it).
    pub pointer: String,
    /// The validator's one-line description of what does not match.
    pub message: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let at = if self.pointer.is_empty() { "/" } else { &self.pointer };
        write!(f, "{at}: {}", self.message)
    }
}

impl OutputSchema {
    /// Compiles `schema` (the draft it names, 2020-12 when it names none, as the Python SDK
    /// and most servers assume).
    pub fn compile(schema: Value) -> OutputSchema {
        let validator = jsonschema::validator_for(&schema).map_err(|e| e.to_string());
        OutputSchema { schema, validator }
    }

    /// The schema as the upstream declared it, whether or not it compiled.
    pub(crate) fn schema(&self) -> &Value {
        &self.schema
    }

    /// Why the schema did not compile, if it did not.
    pub fn compile_error(&self) -> Option<&str> {
        self.validator.as_ref().err().map(String::as_str)
    }

    /// Whether `instance` validates; always true when the schema did not compile.
    pub fn is_valid(&self, instance: &Value) -> bool {
        self.validator.as_ref().map_or(true, |v| v.is_valid(instance))
    }

    /// Every violation in `instance` (at most `max`), for repairs and messages.
    pub fn violations(&self, instance: &Value, max: usize) -> Vec<Violation> {
        let Ok(v) = &self.validator else { return Vec::new() };
        v.iter_errors(instance)
            .take(max)
            .map(|e| Violation { pointer: e.instance_path().as_str().to_owned(), message: e.to_string() })
            .collect()
    }
}

impl fmt::Debug for OutputSchema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OutputSchema").field("schema", &self.schema).field("compiles", &self.validator.is_ok()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn validates_and_names_where() {
        let s = OutputSchema::compile(json!({"type": "object", "properties": {"result": {"type": "array"}}, "required": ["result"]}));
        assert!(s.compile_error().is_none());
        assert!(s.is_valid(&json!({"result": []})));
        assert!(!s.is_valid(&json!({"result": {"$artifact": {}}})));
        let v = s.violations(&json!({"result": {}}), 8);
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].pointer, "/result");
        assert!(v[0].to_string().starts_with("/result: ") && v[0].message.contains("array"), "{}", v[0]);
    }

    #[test]
    fn a_schema_that_does_not_compile_checks_nothing() {
        let s = OutputSchema::compile(json!({"type": 12}));
        assert!(s.compile_error().is_some());
        assert!(s.is_valid(&json!("anything")) && s.violations(&json!(1), 8).is_empty());
    }

    #[test]
    fn remote_references_are_never_fetched() {
        let s = OutputSchema::compile(json!({"$ref": "https://example.invalid/schema.json"}));
        assert!(s.compile_error().is_some(), "an unresolvable remote $ref is a compile error, not a fetch");
    }
}
