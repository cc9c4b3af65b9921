//! What checking a result against its tool's outputSchema costs: compiling the
//! validator (once per tools/list), validating a small rewritten structuredContent (per
//! changed result), and the whole check with nothing to repair. Small results the rewrite did
//! not change are not checked at all.
//!
//! Reproduce: `cargo bench -p stowage-mcp --bench output_schema`.

use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::json;
use std::hint::black_box;
use stowage_mcp::output_schema::OutputSchema;
use stowage_mcp::shape::enforce_output_schema;

fn bench(c: &mut Criterion) {
    // FastMCP's schema for a tool returning `list[dict]`, and a rewritten result: a prefix of
    // rows kept in place, the contract's assets beside it.
    let schema = json!({"type": "object", "required": ["result"], "x-fastmcp-wrap-result": true,
        "properties": {"result": {"type": "array", "items": {"type": "object", "additionalProperties": true}}}});
    let rows: Vec<_> = (0..12).map(|i| json!({"id": i, "name": format!("row {i}"), "note": "lorem ipsum dolor"})).collect();
    let asset = json!({"id": "rows_917726cbd35187fc", "kind": "text", "displayName": "rows_917726cbd35187fc",
        "mimeType": "application/json", "size": 111781, "sha256": "ab".repeat(32),
        "uri": "artifact://rows_917726cbd35187fc", "artifactUri": "artifact://rows_917726cbd35187fc"});
    let sc = json!({"result": rows, "assets": [asset]});
    let result = json!({"content": [{"type": "text", "text": "…"}], "structuredContent": sc});
    c.bench_function("compile list[dict] schema", |b| b.iter(|| OutputSchema::compile(black_box(schema.clone()))));
    let compiled = OutputSchema::compile(schema.clone());
    c.bench_function("is_valid small structuredContent", |b| b.iter(|| compiled.is_valid(black_box(&sc))));
    let touched = vec!["/result".to_owned()];
    c.bench_function("enforce_output_schema, valid", |b| {
        b.iter_batched(|| result.clone(), |mut r| enforce_output_schema(&mut r, &compiled, &touched), criterion::BatchSize::SmallInput)
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
