//! Helpers shared by the integration tests: encoders, fixture builders and a runner.
#![allow(dead_code)]

use std::sync::Arc;

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE_NO_PAD};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use stowage_core::{ArtifactScope, ArtifactSink};
use stowage_transform::testing::MemorySink;
use stowage_transform::{Pipeline, TransformConfig, TransformError, TransformInput, TransformOutput};

pub(crate) fn b64(data: &[u8]) -> String {
    STANDARD.encode(data)
}

pub(crate) fn b64_nopad(data: &[u8]) -> String {
    STANDARD_NO_PAD.encode(data)
}

pub(crate) fn b64_url(data: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(data)
}

/// MIME-style: 76 characters a line, CRLF.
pub(crate) fn b64_mime(data: &[u8]) -> String {
    let s = b64(data);
    s.as_bytes().chunks(76).map(|c| std::str::from_utf8(c).unwrap()).collect::<Vec<_>>().join("\r\n")
}

pub(crate) fn sha256_hex(data: &[u8]) -> String {
    hex::encode(Sha256::digest(data))
}

/// Deterministic pseudo-random bytes (xorshift), so fixtures need no rand dependency.
pub(crate) fn noise(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// A PDF-looking file of `n` bytes: real magic, binary comment line, noise body, %%EOF.
pub(crate) fn fake_pdf(n: usize) -> Vec<u8> {
    let mut v = b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n".to_vec();
    v.extend(noise(n.saturating_sub(v.len() + 6), 42));
    v.extend_from_slice(b"%%EOF\n");
    v
}

pub(crate) fn corpus(name: &str) -> Vec<u8> {
    std::fs::read(format!("{}/tests/corpus/{name}", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

/// The Tableau incident: a CallToolResult whose text block holds the tool's JSON.
pub(crate) fn tableau_result(pdf: &[u8]) -> Value {
    let inner = json!({"content": b64(pdf), "name": "Sales Dashboard", "format": "pdf"});
    json!({"content": [{"type": "text", "text": inner.to_string()}], "isError": false})
}

pub(crate) fn block_on<F: Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(f)
}

pub(crate) struct Run {
    pub out: TransformOutput,
    pub sink: Arc<MemorySink>,
}

pub(crate) fn run_with(config: TransformConfig, tool: &str, value: Value) -> Run {
    let sink = MemorySink::new();
    let out = try_run(config, sink.clone(), tool, None, value).unwrap();
    Run { out, sink }
}

pub(crate) fn run(tool: &str, value: Value) -> Run {
    run_with(TransformConfig::default(), tool, value)
}

pub(crate) fn try_run(
    config: TransformConfig,
    sink: Arc<dyn ArtifactSink>,
    tool: &str,
    schema: Option<&Value>,
    value: Value,
) -> Result<TransformOutput, TransformError> {
    let scope = ArtifactScope::session("s1").with_trace("t1");
    let mut input = TransformInput::new(tool, &scope);
    input.output_schema = schema;
    let pipeline = Pipeline::new(config, sink);
    let had_structured = value.get("structuredContent").is_some();
    let out = block_on(pipeline.transform(&input, value))?;
    if let Some(schema) = schema {
        assert_valid_against(schema, &out.value, had_structured);
    }
    Ok(out)
}

/// What a validating client (the Python SDK, the Inspector) checks of a tool result whose tool
/// declares `schema` as its outputSchema: a result that had structuredContent still has it,
/// and it validates. `isError` results are not checked (clients do not). Every test run with a
/// schema goes through this.
pub(crate) fn assert_valid_against(schema: &Value, result: &Value, had_structured: bool) {
    if result.get("isError") == Some(&Value::Bool(true)) {
        return;
    }
    let Some(sc) = result.get("structuredContent") else {
        assert!(!had_structured, "structuredContent was dropped by the rewrite: {result}");
        return;
    };
    let validator = jsonschema::validator_for(schema).expect("the test's schema compiles");
    let errors: Vec<String> = validator.iter_errors(sc).map(|e| format!("{} at {}", e, e.instance_path().as_str())).collect();
    assert!(errors.is_empty(), "rewritten structuredContent does not validate against its outputSchema: {errors:?}\n{sc}");
}

impl Run {
    pub(crate) fn value(&self) -> &Value {
        &self.out.value
    }
    pub(crate) fn pointers(&self) -> Vec<&str> {
        self.out.report.artifacts.iter().map(|a| a.pointer.as_str()).collect()
    }
    pub(crate) fn mimes(&self) -> Vec<&str> {
        self.out.report.artifacts.iter().map(|a| a.mime_type.as_deref().unwrap_or("")).collect()
    }
    /// Every stored artifact's bytes hash to the sha256 its record claims.
    pub(crate) fn check_hashes(&self) {
        for a in &self.out.report.artifacts {
            let bytes = self.sink.get(&a.id).expect("stored");
            assert_eq!(sha256_hex(&bytes), a.sha256, "{}", a.pointer);
            assert_eq!(bytes.len() as u64, a.size_bytes);
        }
    }
    pub(crate) fn text(&self) -> String {
        serde_json::to_string(&self.out.value).unwrap()
    }
}
