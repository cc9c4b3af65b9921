//! The detection corpus (tests/corpus/, see its README): real files of 19 formats, each
//! base64-encoded several ways and placed in several positions, mixed with hard negatives in
//! the same result. Every binary must be found with the right type at the right pointer,
//! stored byte for byte, and nothing else may become a binary artifact.

use crate::common;

use common::*;
use serde_json::{Value, json};
use stowage_transform::Layer;

/// (file, the media type infer's magic bytes give it)
const CORPUS: &[(&str, &str)] = &[
    ("sample.png", "image/png"),
    ("sample.jpg", "image/jpeg"),
    ("sample.gif", "image/gif"),
    ("sample.webp", "image/webp"),
    ("sample.bmp", "image/bmp"),
    ("sample.tiff", "image/tiff"),
    ("sample.pdf", "application/pdf"),
    ("sample.zip", "application/zip"),
    ("sample.docx", "application/vnd.openxmlformats-officedocument.wordprocessingml.document"),
    ("sample.xlsx", "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"),
    ("sample.gz", "application/gzip"),
    ("sample.bz2", "application/x-bzip2"),
    ("sample.xz", "application/x-xz"),
    ("sample.tar", "application/x-tar"),
    ("sample.sqlite", "application/vnd.sqlite3"),
    ("sample.wav", "audio/x-wav"),
    ("sample.mp3", "audio/mpeg"),
    ("sample.flac", "audio/x-flac"),
    ("sample.ogg", "audio/ogg"),
];

fn encodings(data: &[u8], mime: &str) -> Vec<(&'static str, String)> {
    vec![
        ("standard", b64(data)),
        ("unpadded", b64_nopad(data)),
        ("url-safe", b64_url(data)),
        ("mime-wrapped", b64_mime(data)),
        ("data-uri", format!("data:{mime};base64,{}", b64(data))),
    ]
}

fn negatives() -> Vec<(&'static str, Value)> {
    vec![
        ("jwt", json!(format!("eyJhbGciOiJSUzI1NiJ9.{}.{}", b64_url(&noise(1200, 11)), b64_url(&noise(256, 12))))),
        ("hex", json!(hex::encode(noise(800, 13)))),
        (
            "uuids",
            json!(
                (0..50)
                    .map(|i| format!("{}-1111-4222-8333-{}", hex::encode(noise(4, i)), hex::encode(noise(6, i + 1))))
                    .collect::<Vec<_>>()
                    .join(" ")
            ),
        ),
        ("prose", json!("It was the best of times, it was the worst of times; ".repeat(40))),
        ("b64 text", json!(b64("plain words, nothing binary here. ".repeat(60).as_bytes()))),
        ("digits", json!("9".repeat(1500))),
        ("css", json!("a{b:c}".repeat(300))),
    ]
}

#[test]
fn every_format_in_every_encoding_and_position() {
    for (file, mime) in CORPUS {
        let data = corpus(file);
        assert!(data.len() > 1024, "{file} must exceed the inline limit");
        for (enc_name, enc) in encodings(&data, mime) {
            // Positions: top-level field, nested, array item, JSON in a text block, alone in a
            // text block; negatives sit beside it in every document.
            let mut doc = json!({
                "top": enc,
                "nested": {"deeper": {"file": enc}},
                "list": [1, enc, "x"],
                "content_json": json!({"payload": {"file": enc}}).to_string(),
            });
            for (name, neg) in negatives() {
                doc[format!("neg_{name}")] = neg;
            }
            let r = run("t", doc);
            let want = ["/top", "/nested/deeper/file", "/list/1", "/content_json#/payload/file"];
            assert_eq!(r.pointers(), want, "{file} {enc_name}");
            for a in &r.out.report.artifacts {
                assert_eq!(a.mime_type.as_deref(), Some(*mime), "{file} {enc_name} at {}", a.pointer);
                assert_eq!(a.layer, Layer::Base64);
                assert_eq!(r.sink.get(&a.id).unwrap().as_ref(), data.as_slice(), "{file} {enc_name}");
            }
            r.check_hashes();
            // The negatives came through untouched.
            for (name, neg) in negatives() {
                assert_eq!(r.value()[format!("neg_{name}")], neg, "{name} beside {file} {enc_name}");
            }
        }
    }
}

#[test]
fn every_format_as_typed_content_blocks() {
    for (file, sniffed) in CORPUS {
        let data = corpus(file);
        // A server-declared type wins over the sniffed one; absent, the sniffed one is used.
        let v = json!({"content": [
            {"type": "text", "text": b64(&data)},
            {"type": "image", "data": b64(&data), "mimeType": "application/x-declared"},
            {"type": "resource", "resource": {"uri": format!("file:///in/{file}"), "blob": b64(&data)}}
        ]});
        let r = run("t", v);
        assert_eq!(r.pointers(), ["/content/1", "/content/2", "/content/0"], "{file}");
        assert_eq!(r.mimes(), ["application/x-declared", sniffed, sniffed], "{file}");
        let blocks = r.value()["content"].as_array().unwrap();
        assert_eq!(blocks.len(), 6, "{file}: {blocks:?}");
        assert_eq!(blocks.iter().filter(|b| b["type"] == "resource_link").count(), 3);
        r.check_hashes();
    }
}

#[test]
fn tiny_binaries_stay_inline() {
    let tiny = corpus("tiny.png");
    assert!(tiny.len() < 1024);
    let v = json!({"content": [
        {"type": "image", "data": b64(&tiny), "mimeType": "image/png"},
        {"type": "text", "text": b64(&tiny)}
    ], "icon": b64(&tiny)});
    let r = run("t", v.clone());
    assert_eq!(r.out.value, v);
}
