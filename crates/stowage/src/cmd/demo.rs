//! `stowage demo`: the whole idea in one run, on the embedded default store.
//!
//! It builds the tool result behind this project's incident — a Tableau-style
//! `download_workbook` answer with a ~500 KB base64 PDF inside JSON text — runs it through the
//! transform pipeline into the configured store, prints what the model would see instead, and
//! reads the PDF back from the store to show it is byte-identical.

use std::sync::Arc;

use anyhow::{Context, ensure};
use base64::Engine as _;
use clap::Args;
use serde_json::json;
use sha2::{Digest, Sha256};
use stowage_core::human_size;
use stowage_store::{Access, ArtifactStore};
use stowage_transform::{Pipeline, TransformConfig, TransformInput};

#[derive(Debug, Args)]
pub(crate) struct DemoArgs {
    /// Size of the generated PDF in bytes (default ~375 KB, ~500 KB as base64).
    #[arg(long, default_value_t = 375_000)]
    pub pdf_bytes: usize,
}

pub(crate) async fn run(store: Arc<dyn ArtifactStore>, config: TransformConfig, args: DemoArgs) -> anyhow::Result<()> {
    let pdf = stowage_demo::samples::pdf(args.pdf_bytes, "Sales Dashboard");
    let tool_json = json!({
        "content": base64::engine::general_purpose::STANDARD.encode(&pdf),
        "name": "Sales Dashboard",
        "format": "pdf",
    });
    let result = json!({
        "content": [{"type": "text", "text": tool_json.to_string()}],
        "isError": false,
    });
    let raw = result.to_string();

    // The local user's, as the gateway's: the model and the playground see the demo's PDF too.
    let scope = super::local_scope(Some("demo".into()), None);
    let pipeline = Pipeline::new(config, crate::wiring::sink(store.clone()));
    let input = TransformInput::new("download_workbook", &scope);
    let out = pipeline.transform(&input, result).await.context("transform failed")?;
    let shown = serde_json::to_string_pretty(&out.value)?;

    println!(
        "A tool returned {} of JSON: a {} PDF as base64 inside a text block.",
        human_size(raw.len() as u64),
        human_size(pdf.len() as u64)
    );
    println!("Without Stowage, all of it goes into the model's context.\n");
    println!("What the model sees instead ({} bytes):\n{shown}\n", out.value.to_string().len());
    let report = &out.report;
    println!("bytes {} -> {}, tokens {} -> {}", report.bytes_in, report.bytes_out, report.tokens_in, report.tokens_out);
    ensure!(!report.artifacts.is_empty(), "the demo PDF was not offloaded; check [transform] in your config");
    for a in &report.artifacts {
        let back = store.get(&Access::owner_of(&scope), &a.artifact.id).await?;
        let same = back.as_ref() == pdf.as_slice() || hex::encode(Sha256::digest(&back)) == a.sha256;
        println!(
            "stored {} at {} ({}, {}), read back: {}",
            a.id,
            a.pointer,
            a.mime_type.as_deref().unwrap_or("?"),
            human_size(a.size_bytes),
            if back.as_ref() == pdf.as_slice() {
                "byte-identical to the original PDF"
            } else if same {
                "sha256 matches"
            } else {
                "MISMATCH"
            }
        );
        ensure!(same, "artifact {} does not match what was stored", a.id);
    }
    let first = &report.artifacts[0].id;
    println!("\nFetch it yourself:  stowage artifacts get {first} -o sales.pdf");
    println!("List everything:    stowage artifacts ls");
    Ok(())
}
