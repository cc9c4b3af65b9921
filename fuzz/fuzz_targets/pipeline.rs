//! Fuzzes the pipeline's entry points, `Pipeline::transform_json` (bytes) and
//! `Pipeline::transform_json_text` (a `String`), with arbitrary bytes.
//!
//! Invariants checked on every input: no panic; invalid JSON is `bad_request` and valid JSON
//! transforms; every artifact in the report was stored with bytes that hash to its sha256;
//! the report's `bytes_out` is the size of the JSON that comes out; the text entry point and
//! the value entry point (serde_json's parse, no fast path) give the same result.
//!
//! Built by cargo-fuzz with `--cfg fuzzing`, under which the fast JSON parser lifts strings
//! from 64 bytes (`fastjson::BIG`), so short inputs take its lifted path too.
//!
//! Run: `cd fuzz && cargo +nightly fuzz run pipeline` (see README.md).
#![no_main]

use libfuzzer_sys::fuzz_target;
use sha2::{Digest, Sha256};
use stowage_core::ArtifactScope;
use stowage_transform::testing::MemorySink;
use stowage_transform::{Pipeline, TransformConfig, TransformInput};

fuzz_target!(|data: &[u8]| {
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let mut config = TransformConfig::default();
    // Small limits so short fuzz inputs reach every layer and the clamp.
    config.inline_binary_max_bytes = 16;
    config.max_inline_chars = 200;
    config.binary_detection.min_size_for_detection = 24;
    config.size_net.large_json_chars = 400;
    config.clamp.max_observation_chars = 2_000;
    config.clamp.max_field_chars = 500;
    config.clamp.auto_artifact_threshold = 1_000;
    config.tokens.enabled = false;
    let sink = MemorySink::new();
    let pipeline = Pipeline::new(config, sink.clone());
    let scope = ArtifactScope::session("fuzz");
    // The first byte picks a tool, so presets and namespaced names are exercised too.
    let tool = ["download_workbook", "tableau.get_view_as_pdf", "t"][data.first().copied().unwrap_or(0) as usize % 3];
    let input = TransformInput::new(tool, &scope);
    let parsed = serde_json::from_slice::<serde_json::Value>(data);
    let out = rt.block_on(pipeline.transform_json(&input, data.to_vec()));
    match &out {
        Ok(out) => {
            assert!(parsed.is_ok(), "accepted invalid json");
            for a in &out.report.artifacts {
                let bytes = sink.get(&a.id).expect("reported artifacts are stored");
                assert_eq!(hex::encode(Sha256::digest(&bytes)), a.sha256);
            }
            let text = serde_json::to_string(&out.value).unwrap();
            assert_eq!(text.len() as u64, out.report.bytes_out);
        }
        Err(e) => assert!(parsed.is_err() && e.code() == "bad_request", "{e}"),
    }
    // The text entry point (the gateway's) parses in place too; the value entry point does not
    // use the fast parser at all. All three must agree.
    if let Ok(text) = std::str::from_utf8(data) {
        let from_text = rt.block_on(pipeline.transform_json_text(&input, text.to_owned()));
        match (&out, &from_text) {
            (Ok(a), Ok(b)) => assert!(a.value == b.value && a.report.artifacts == b.report.artifacts, "bytes and text entries differ"),
            (Err(_), Err(_)) => {}
            _ => panic!("bytes and text entries disagree on whether this is json"),
        }
    }
    if let (Ok(a), Ok(v)) = (&out, parsed) {
        let b = rt.block_on(pipeline.transform(&input, v)).expect("a value transforms");
        assert!(a.value == b.value, "the fast parser's result transforms differently");
    }
});
