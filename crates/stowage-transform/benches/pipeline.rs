//! In-process pipeline benchmarks: the 1 MB Tableau-shaped result (target: at most 3 ms), a
//! result with nothing heavy, and the 50 MB case for reference (the CLI figure, with process
//! start and the store, is measured by `benches/cli_bench.sh`).
//!
//! Run: `cargo bench -p stowage-transform --bench pipeline`. To compare two versions on the
//! shared machine, build each (`--no-run`) and alternate them with `benches/ab_inproc.sh`; end
//! to end, `benches/cli_ab.py`, `cli_bench.sh` and `cli_steps.sh` (BENCHMARKS.md, session 3).

use std::sync::Arc;

use base64::Engine as _;
use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use serde_json::json;
use stowage_core::{ArtifactScope, ArtifactSink};
use stowage_transform::testing::MemorySink;
use stowage_transform::{Pipeline, TransformConfig, TransformInput};

/// A Tableau `download_workbook` CallToolResult whose text block holds `pdf_bytes` of PDF as
/// base64 (the shape of the incident the README opens with: JSON text in a text block).
fn tableau(pdf_bytes: usize) -> Vec<u8> {
    let mut pdf = b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n".to_vec();
    let mut x: u64 = 0x9e3779b97f4a7c15;
    while pdf.len() < pdf_bytes - 6 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        pdf.push((x >> 24) as u8);
    }
    pdf.extend_from_slice(b"%%EOF\n");
    let inner = json!({"content": base64::engine::general_purpose::STANDARD.encode(&pdf), "name": "Sales Dashboard", "format": "pdf"});
    serde_json::to_vec(&json!({"content": [{"type": "text", "text": inner.to_string()}], "isError": false})).unwrap()
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let sink: Arc<dyn ArtifactSink> = MemorySink::new();
    let pipeline = Pipeline::new(TransformConfig::default(), sink);
    let scope = ArtifactScope::session("bench");
    let input = TransformInput::new("download_workbook", &scope);

    let one_mb = tableau(786_000); // 1,048,xxx bytes of JSON
    assert!((1_000_000..1_100_000).contains(&one_mb.len()), "{}", one_mb.len());
    // Warm the token vocabulary so the bench measures the transform, not the one-off load.
    rt.block_on(pipeline.transform_json(&input, one_mb.clone())).unwrap();
    c.bench_function("tableau_1mb_json_bytes", |b| {
        b.iter_batched(|| one_mb.clone(), |json| rt.block_on(pipeline.transform_json(&input, json)).unwrap(), BatchSize::LargeInput)
    });

    // Each iteration's text differs (its project name), as a stream of real results does:
    // token counts of texts seen before are remembered, and would flatter a repeated input.
    let light = |n: u64| {
        serde_json::to_vec(&json!({"workbooks": (0..200).map(|i| json!({"id": i.to_string(), "name": format!("Workbook {i}"), "project": format!("Analytics {n}")})).collect::<Vec<_>>()})).unwrap()
    };
    let mut n = 0;
    c.bench_function("light_20kb_passthrough", |b| {
        b.iter_batched(
            || {
                n += 1;
                light(n)
            },
            |json| rt.block_on(pipeline.transform_json(&input, json)).unwrap(),
            BatchSize::SmallInput,
        )
    });

    let mut group = c.benchmark_group("large");
    group.sample_size(10);
    let fifty = tableau(37_500_000);
    group.bench_function("tableau_50mb_json_bytes", |b| {
        b.iter_batched(|| fifty.clone(), |json| rt.block_on(pipeline.transform_json(&input, json)).unwrap(), BatchSize::LargeInput)
    });
    // The gateway's entry: the same text as a String.
    let fifty_text = String::from_utf8(fifty).unwrap();
    group.bench_function("tableau_50mb_json_text", |b| {
        b.iter_batched(
            || fifty_text.clone(),
            |json| rt.block_on(pipeline.transform_json_text(&input, json)).unwrap(),
            BatchSize::LargeInput,
        )
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
