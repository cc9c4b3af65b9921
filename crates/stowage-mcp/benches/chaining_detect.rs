//! What detecting file inputs adds to a catalog fetch (docs/results.md, "With no configuration"): for
//! each tool of a 100-tool catalog, [`detect`] (the walk of its input schema) and
//! [`llm_facing`] (the description sentence, the widening), which is the work the catalog hook
//! adds to every fetch of an upstream's tools — target ≤ 1 ms for 100 tools. Also the bounded
//! cost of two hostile schemas: 10,000 properties, and a `$ref` cycle.
//!
//! The catalog mixes shapes seen in published servers: a third of the tools take file bytes
//! (`content_base64` + `mime_type`, `contentEncoding`, `format: byte`, attachments arrays, a
//! `*_url`), the rest take plain text, numbers, enums and nested options.
//!
//! Reproduce: `cargo bench -p stowage-mcp --bench chaining_detect`.

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use serde_json::{Value, json};
use std::hint::black_box;
use stowage_mcp::chaining::detect::{detect, llm_facing};

fn tool(name: String, properties: Value, required: &[&str]) -> Value {
    json!({"name": name, "description": "a tool of the benchmark catalog",
        "inputSchema": {"type": "object", "properties": properties, "required": required}})
}

/// 100 tool definitions as an upstream lists them.
fn catalog() -> Vec<Value> {
    (0..100)
        .map(|i| {
            let name = format!("tool_{i}");
            match i % 9 {
                0 => tool(name, json!({"content_base64": {"type": "string"}, "mime_type": {"type": "string"}, "filename": {"type": "string"}}), &["content_base64"]),
                1 => tool(name, json!({"image": {"type": "string", "contentEncoding": "base64", "description": "The scanned page."}, "language": {"type": "string", "enum": ["en", "de", "fr"]}}), &["image"]),
                2 => tool(name, json!({"blob": {"type": "string", "format": "byte"}, "bucket": {"type": "string"}}), &["blob"]),
                3 => tool(name, json!({"to": {"type": "string"}, "subject": {"type": "string"}, "attachments": {"type": "array", "items": {"type": "object",
                    "properties": {"filename": {"type": "string"}, "content_base64": {"type": "string"}}, "required": ["content_base64"]}}}), &["to"]),
                4 => tool(name, json!({"audio_url": {"type": "string", "format": "uri"}, "model": {"type": "string"}}), &["audio_url"]),
                5 => tool(name, json!({"query": {"type": "string", "description": "What to search for."}, "limit": {"type": "integer", "minimum": 1, "maximum": 100},
                    "filters": {"type": "object", "properties": {"since": {"type": "string", "format": "date-time"}, "tags": {"type": "array", "items": {"type": "string"}}}}}), &["query"]),
                6 => tool(name, json!({"title": {"type": "string"}, "content": {"type": "string"}, "folder": {"type": "string"}}), &["title"]),
                7 => tool(name, json!({"id": {"type": "string"}, "fields": {"type": "array", "items": {"type": "string", "enum": ["a", "b", "c"]}},
                    "options": {"anyOf": [{"type": "object", "properties": {"verbose": {"type": "boolean"}}}, {"type": "null"}]}}), &["id"]),
                _ => tool(name, json!({"sql": {"type": "string"}, "params": {"type": "array", "items": {"type": ["string", "number", "null"]}}, "timeout_ms": {"type": "integer"}}), &["sql"]),
            }
        })
        .collect()
}

/// Everything the catalog hook does per tool on a fetch (the detection and the catalog entry
/// the model sees), for every tool.
fn detect_all(defs: &mut [Value]) -> usize {
    let mut chained = 0;
    for def in defs {
        let mut found = detect(def, true, true, None);
        if found.is_empty() {
            continue;
        }
        llm_facing(def, &mut found);
        chained += found.inputs.len();
    }
    chained
}

fn bench(c: &mut Criterion) {
    let defs = catalog();
    assert_eq!(detect_all(&mut defs.clone()), 56, "the catalog's file inputs");
    c.bench_function("detect + llm_facing, 100 tools", |b| {
        b.iter_batched_ref(|| defs.clone(), |d| detect_all(black_box(d)), BatchSize::SmallInput)
    });
    // The baseline every fetch pays anyway: the tools' definitions copied into the catalog.
    c.bench_function("clone 100 tool definitions (baseline)", |b| b.iter(|| black_box(&defs).clone()));

    let wide: serde_json::Map<String, Value> = (0..10_000).map(|i| (format!("field_{i}"), json!({"type": "string"}))).collect();
    let wide = vec![tool("wide".into(), Value::Object(wide), &[])];
    c.bench_function("detect + llm_facing, one 10,000-property schema", |b| {
        b.iter_batched_ref(|| wide.clone(), |d| detect_all(black_box(d)), BatchSize::LargeInput)
    });
    let cyclic = vec![json!({"name": "cyclic", "inputSchema": {"type": "object",
        "$defs": {"Node": {"type": "object", "properties": {"data_base64": {"type": "string"}, "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}}}},
                  "Loop": {"$ref": "#/$defs/Loop"}},
        "properties": {"root": {"$ref": "#/$defs/Node"}, "odd": {"$ref": "#/$defs/Loop"}}}})];
    c.bench_function("detect + llm_facing, a $ref cycle", |b| {
        b.iter_batched_ref(|| cyclic.clone(), |d| detect_all(black_box(d)), BatchSize::SmallInput)
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
