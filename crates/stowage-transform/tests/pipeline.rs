//! Behaviour of each layer and of the pipeline as a whole, as many small cases.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::*;
use serde_json::{Value, json};
use stowage_transform::testing::{FailingSink, MemorySink, NoopSink};
use stowage_transform::{CustomOutcome, FieldRule, Layer, Pipeline, TransformConfig, TransformInput};

// ---------------------------------------------------------------- the incident (README's opening)

/// The Tableau 500 KB base64 PDF (JSON text in a text block) becomes at most 600 bytes of
/// observation, whatever the tool is called.
#[test]
fn tableau_pdf_becomes_under_600_bytes() {
    let pdf = fake_pdf(375_000); // 500,000 base64 characters
    for (tool, layer) in [
        ("download_workbook", Layer::FieldRule),
        ("tableau_download_workbook", Layer::FieldRule),
        ("tableau.download_workbook", Layer::FieldRule),
        ("some_other_tool", Layer::Base64),
    ] {
        let r = run(tool, tableau_result(&pdf));
        let text = r.text();
        assert!(text.len() <= 600, "{tool}: {} bytes: {text}", text.len());
        assert!(!text.contains("JVBERi"), "{tool}: base64 left in {text}");
        let a = &r.out.report.artifacts;
        assert_eq!(a.len(), 1, "{tool}");
        assert_eq!(a[0].pointer, "/content/0/text#/content");
        assert_eq!(a[0].layer, layer, "{tool}");
        assert_eq!(a[0].mime_type.as_deref(), Some("application/pdf"));
        assert_eq!(a[0].size_bytes, 375_000);
        assert_eq!(a[0].filename.as_deref(), Some("Sales Dashboard.pdf"));
        assert!(a[0].summary.contains("'Sales Dashboard'") && a[0].summary.contains("366.2 KB"), "{}", a[0].summary);
        r.check_hashes();
        // The text block still holds valid JSON with the siblings, and a resource_link follows.
        let inner: Value = serde_json::from_str(r.value()["content"][0]["text"].as_str().unwrap()).unwrap();
        assert_eq!(inner["name"], "Sales Dashboard");
        assert!(inner["content"].as_str().unwrap().contains(&a[0].uri));
        assert_eq!(r.value()["content"][1]["type"], "resource_link");
        assert_eq!(r.value()["content"][1]["uri"], a[0].uri);
        assert_eq!(r.value()["isError"], false);
        assert!(r.out.report.bytes_in > 500_000 && r.out.report.bytes_out as usize == text.len());
        assert!(r.out.report.tokens_out > 0 && r.out.report.tokens_out < 200);
    }
}

#[test]
fn presets_fill_their_templates() {
    let pdf = fake_pdf(20_000);
    let r = run("download_workbook", json!({"content": b64(&pdf), "name": "Sales Dashboard", "format": "pdf"}));
    let s = r.value()["content"].as_str().unwrap();
    assert!(s.starts_with("Downloaded workbook 'Sales Dashboard' as pdf (19.5 KB), stored as artifact://download_workbook_"), "{s}");
    let r = run(
        "tableau.get_view_as_pdf",
        json!({"pdf_data": b64(&pdf), "view_name": "Revenue by Region", "generated_at": "2025-12-22T10:30:00Z"}),
    );
    let s = r.value()["pdf_data"].as_str().unwrap();
    assert!(s.starts_with("PDF of view 'Revenue by Region' (19.5 KB, generated 2025-12-22T10:30:00Z), stored as artifact://"), "{s}");
    assert_eq!(r.out.report.artifacts[0].filename.as_deref(), Some("Revenue by Region.pdf"));
    assert_eq!(r.value()["view_name"], "Revenue by Region");
    // list_workbooks (no binary) passes through untouched.
    let lw = json!({"workbooks": [{"id": "123", "name": "Sales", "project": "Analytics"}]});
    assert_eq!(run("list_workbooks", lw.clone()).out.value, lw);
}

// ---------------------------------------------------------------- L4 field rules

#[test]
fn configured_rules() {
    let png = corpus("sample.png");
    let mut config = TransformConfig::default();
    config.tool_fields.rules = vec![
        FieldRule {
            tool: "get_report".into(),
            path: "result.pages[*].png".into(),
            content_type: Some("image".into()),
            mime_type: None,
            filename: Some("{title}-{page}.{ext}".into()),
            summary: Some("Page {page} of '{title}' ({size_human}, {mime}) at {uri} id {artifact_id}".into()),
        },
        FieldRule {
            tool: "get_report".into(),
            path: "/result/log".into(),
            content_type: Some("text".into()),
            mime_type: None,
            filename: None,
            summary: None,
        },
        FieldRule {
            tool: "get_report".into(),
            path: "result.meta".into(),
            content_type: None,
            mime_type: None,
            filename: None,
            summary: None,
        },
    ];
    let v = json!({"result": {
        "pages": [{"page": 1, "title": "Q4", "png": b64(&png)}, {"page": 2, "title": "Q4", "png": b64(&png)}],
        "log": "short log line",
        "meta": {"k": [1, 2, 3]}
    }});
    let r = run_with(config, "srv__get_report", v);
    assert_eq!(r.pointers(), ["/result/pages/0/png", "/result/pages/1/png", "/result/log", "/result/meta"]);
    assert_eq!(r.mimes(), ["image/png", "image/png", "text/plain; charset=utf-8", "application/json"]);
    let s = r.value()["result"]["pages"][1]["png"].as_str().unwrap();
    let a = &r.out.report.artifacts[1];
    assert!(s.starts_with(&format!("Page 2 of 'Q4' (2.3 KB, image/png) at {} id {}", a.uri, a.id)), "{s}");
    assert_eq!(a.filename.as_deref(), Some("Q4-2.png"));
    assert!(r.value()["result"]["meta"].as_str().unwrap().starts_with("<artifact:dict size="));
    r.check_hashes();
}

#[test]
fn a_rule_also_matches_under_fastmcps_result_wrapper() {
    let png = corpus("sample.png");
    let mut config = TransformConfig::default();
    config.tool_fields.rules = vec![FieldRule {
        tool: "snap".into(),
        path: "resource.blob".into(),
        content_type: Some("image".into()),
        mime_type: None,
        filename: None,
        summary: None,
    }];
    // FastMCP returns a non-object as {"result": …}: the rule written for the tool's own shape
    // still finds the blob.
    let r = run_with(config.clone(), "snap", json!({"result": {"resource": {"blob": b64(&png)}}}));
    assert_eq!(r.pointers(), ["/result/resource/blob"]);
    assert_eq!(r.mimes(), ["image/png"]);
    assert_eq!(r.out.report.artifacts[0].layer, Layer::FieldRule);
    // Where the path matches at the top, that is where it applies.
    let r = run_with(config, "snap", json!({"resource": {"blob": b64(&png)}, "result": {"resource": {"blob": "kept"}}}));
    assert_eq!(r.pointers(), ["/resource/blob"]);
    assert_eq!(r.value()["result"]["resource"]["blob"], "kept");
}

#[test]
fn a_rule_reaches_a_payload_inside_a_content_block() {
    let pdf = corpus("sample.pdf");
    let mut config = TransformConfig::default();
    config.tool_fields.rules = vec![FieldRule {
        tool: "export".into(),
        path: "content[*].resource.blob".into(),
        content_type: Some("pdf".into()),
        mime_type: None,
        filename: Some("report.pdf".into()),
        summary: Some("The exported report ({size_human}), stored as {uri}".into()),
    }];
    // An embedded resource's blob: the rule names it, the declared mimeType beside it types
    // it, and the whole block gives way to the line and link (no base64 left, no half-emptied
    // block).
    let result = json!({"content": [
        {"type": "text", "text": "Exported."},
        {"type": "resource", "resource": {"uri": "file:///tmp/report.pdf", "mimeType": "application/pdf", "blob": b64(&pdf)}},
    ]});
    let r = run_with(config, "export", result);
    assert_eq!(r.pointers(), ["/content/1"]);
    assert_eq!(r.mimes(), ["application/pdf"]);
    assert_eq!(r.out.report.artifacts[0].layer, Layer::FieldRule);
    assert_eq!(r.out.report.artifacts[0].filename.as_deref(), Some("report.pdf"));
    let text = r.value().to_string();
    assert!(text.contains("The exported report ("), "{text}");
    assert!(!text.contains(&b64(&pdf)[..64]), "no base64 left");
    assert!(r.value()["content"].as_array().unwrap().iter().all(|b| b["type"] != "resource"), "{text}");
    r.check_hashes();
}

#[test]
fn rule_on_non_base64_warns_and_l0_still_applies() {
    let mut config = TransformConfig::default();
    config.tool_fields.rules =
        vec![FieldRule { tool: "t".into(), path: "blob".into(), content_type: None, mime_type: None, filename: None, summary: None }];
    let r = run_with(config, "t", json!({"blob": "this is not base64 at all! ".repeat(1500)}));
    assert_eq!(r.out.report.warnings.len(), 1);
    assert_eq!(r.out.report.warnings[0].layer, Layer::FieldRule);
    assert_eq!(r.out.report.artifacts[0].layer, Layer::SizeNet);
}

// ---------------------------------------------------------------- schema-marked fields

#[test]
fn schema_marked_fields_are_always_extracted() {
    let schema = json!({"type": "object", "properties": {
        "summary": {"type": "string"},
        "chart_options": {"type": "object", "artifact": true},
        "raw_data": {"type": "array", "x-artifact": true},
        "thumb": {"type": "string", "artifact": true}
    }});
    let structured = json!({
        "summary": "Sales up 20%",
        "chart_options": {"series": [1, 2, 3]},
        "raw_data": [{"a": 1}, {"a": 2}],
        "thumb": b64(&corpus("tiny.png"))
    });
    let v = json!({"content": [{"type": "text", "text": structured.to_string()}], "structuredContent": structured, "isError": false});
    let out = try_run(TransformConfig::default(), MemorySink::new(), "analyze", Some(&schema), v).unwrap();
    let sc = &out.value["structuredContent"];
    assert_eq!(sc["summary"], "Sales up 20%");
    // Inside structuredContent the schema types the slots: an object stays an object and an
    // array an array (with nothing optional kept), so validating clients accept the result;
    // the summary says where the whole value went.
    assert_eq!(sc["chart_options"], json!({}));
    assert_eq!(sc["raw_data"], json!([]));
    let raw = out
        .report
        .artifacts
        .iter()
        .find(|a| a.pointer == "/structuredContent/raw_data")
        .unwrap_or_else(|| panic!("{:?}", out.report.artifacts.iter().map(|a| (&a.pointer, &a.summary)).collect::<Vec<_>>()));
    assert_eq!(raw.partial, Some(stowage_transform::Partial { kept: 0, total: 2 }));
    assert!(raw.summary.starts_with("Field 'raw_data' (") && raw.summary.contains("0 of 2 items are kept in place"), "{}", raw.summary);
    // Small, but marked: extracted anyway, and a base64 PNG is stored as the PNG.
    assert!(sc["thumb"].as_str().unwrap().starts_with("<artifact:str size="));
    // The text twin repeats structuredContent: the layers saw the value once, and the text is
    // written back from what they left, so both copies say the same (one artifact per value).
    let twin: Value = serde_json::from_str(out.value["content"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(&twin, sc, "the twin is the rewritten structuredContent");
    let ptrs: Vec<_> = out.report.artifacts.iter().map(|a| (a.pointer.as_str(), a.layer)).collect();
    assert!(ptrs.contains(&("/structuredContent/chart_options", Layer::SchemaField)));
    assert!(!ptrs.iter().any(|(p, _)| p.starts_with("/content/")), "nothing found twice: {ptrs:?}");
    assert!(out.report.artifacts.iter().any(|a| a.mime_type.as_deref() == Some("image/png")));
    // The mirror text block does not leak the marked values either.
    assert!(!out.value["content"][0]["text"].as_str().unwrap().contains("series"));
}

/// What FastMCP sends for a tool returning `list[dict]`: the list wrapped as `result`, its
/// JSON text as the text block, and a schema typing `result` as an array.
fn fastmcp_list(n: usize) -> (Value, Value) {
    let rows: Vec<Value> = (0..n).map(|i| json!({"id": i, "name": format!("row {i}"), "note": "lorem ipsum dolor sit amet"})).collect();
    let schema = json!({"type": "object", "properties": {"result": {"type": "array", "items": {"type": "object", "additionalProperties": true}}},
        "required": ["result"], "x-fastmcp-wrap-result": true});
    let v = json!({"content": [{"type": "text", "text": Value::Array(rows.clone()).to_string()}],
        "structuredContent": {"result": rows}, "isError": false});
    (v, schema)
}

#[test]
fn an_offloaded_list_stays_a_list_under_its_output_schema() {
    let (v, schema) = fastmcp_list(2000);
    let sink = MemorySink::new();
    let out = try_run(TransformConfig::default(), sink.clone(), "rows", Some(&schema), v).unwrap();
    let result = out.value["structuredContent"]["result"].as_array().unwrap();
    // A prefix of whole items, within the typed budget.
    assert!(!result.is_empty() && result.len() < 2000, "{}", result.len());
    assert_eq!(result[0], json!({"id": 0, "name": "row 0", "note": "lorem ipsum dolor sit amet"}));
    assert!(serde_json::to_string(result).unwrap().len() <= TransformConfig::default().schema_fields.typed_preview_chars);
    // The text twin is the same list, so one artifact holds it, whole.
    let ids: std::collections::HashSet<_> = out.report.artifacts.iter().map(|a| a.id.as_str()).collect();
    assert_eq!(ids.len(), 1, "{:?}", out.report.artifacts.iter().map(|a| &a.pointer).collect::<Vec<_>>());
    let a = &out.report.artifacts[0];
    // The artifact is the whole object the schema describes, so `length(result)` works on it.
    assert_eq!(a.pointer, "/structuredContent");
    let stored: Value = serde_json::from_slice(&sink.get(&a.id).unwrap()).unwrap();
    assert_eq!(stored["result"].as_array().unwrap().len(), 2000);
    let kept = result.len();
    assert_eq!(a.partial, Some(stowage_transform::Partial { kept, total: 2000 }));
    assert_eq!(a.cuts, vec![stowage_transform::Cut { pointer: "/structuredContent/result".into(), kept, total: 2000 }]);
    assert!(a.summary.contains(&format!("result keeps {kept} of 2000 items in place")) && a.summary.contains(&a.uri), "{}", a.summary);
    assert!(
        a.summary.contains("artifact_query") && a.summary.contains("length(result)") && a.summary.contains("artifact_read"),
        "{}",
        a.summary
    );
    // The text twin is the same prefix, as JSON.
    let twin: Value = serde_json::from_str(out.value["content"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(twin, Value::Array(result.clone()));
    assert!(out.report.bytes_out < 6_000, "{}", out.report.bytes_out);
}

/// An inventory whose warehouses are each bigger than the typed budget, beside a long line of
/// notes: the typed prefix of `warehouses` keeps no item, so the summary the model reads
/// carries the described shape of what was cut (not a bare `warehouses: []`).
#[test]
fn a_part_cut_to_nothing_keeps_its_described_shape() {
    let warehouses: Vec<Value> = (0..40)
        .map(|w| {
            let bins: Vec<Value> = (0..60)
                .map(|b| {
                    let zone = ["A", "B", "C"][b % 3];
                    json!({"sku": format!("SKU-{w}-{b}"), "qty": (w * 7 + b) % 500, "zone": zone})
                })
                .collect();
            let region = ["north", "south", "east", "west"][w % 4];
            json!({"id": format!("WH-{w:02}"), "region": region, "bins": bins})
        })
        .collect();
    let doc = json!({"warehouses": warehouses, "notes": "n".repeat(4_500)});
    let schema = json!({"type": "object", "properties": {"warehouses": {"type": "array"}, "notes": {"type": "string"}}});
    let v = json!({"content": [{"type": "text", "text": doc.to_string()}], "structuredContent": doc});
    let out = try_run(TransformConfig::default(), MemorySink::new(), "inventory", Some(&schema), v).unwrap();
    assert_eq!(out.value["structuredContent"]["warehouses"], json!([]), "each warehouse is over the typed budget");
    let a = &out.report.artifacts[0];
    assert!(a.summary.contains("shape of warehouses"), "{}", a.summary);
    for line in [
        ".[]: object ×40",
        ".[].region: string ×40; values \"east\" 10",
        ".[].bins: array ×40; length 60",
        ".[].bins[].qty: integer ×2400; min 0 max",
    ] {
        assert!(a.summary.contains(line), "{line} not in {}", a.summary);
    }
    assert!(a.summary.len() < 2_500, "{}", a.summary.len());
}

#[test]
fn an_offloaded_dict_and_a_pydantic_model_keep_their_schema() {
    // dict[str, int]: open object, no required keys.
    let dict: serde_json::Map<String, Value> = (0..3000).map(|i| (format!("k{i}"), json!(i))).collect();
    let schema = json!({"type": "object", "additionalProperties": true});
    let v = json!({"content": [{"type": "text", "text": Value::Object(dict.clone()).to_string()}], "structuredContent": dict, "isError": false});
    let out = try_run(TransformConfig::default(), MemorySink::new(), "table", Some(&schema), v).unwrap();
    let sc = out.value["structuredContent"].as_object().unwrap();
    assert!(sc.len() > 10 && sc.len() < 3000 && sc["k0"] == 0, "{}", sc.len());
    assert!(!sc.contains_key("$artifact"));

    // A Pydantic model with a nested model ($defs + $ref), a big string and a big list, closed.
    let schema = json!({
        "$defs": {"Meta": {"type": "object", "properties": {"owner": {"type": "string"}, "tags": {"type": "array", "items": {"type": "string"}}},
            "required": ["owner", "tags"], "additionalProperties": false}},
        "type": "object",
        "properties": {"title": {"type": "string"}, "body": {"type": "string"}, "meta": {"$ref": "#/$defs/Meta"},
            "rows": {"type": "array", "minItems": 1, "items": {"type": "object", "properties": {"i": {"type": "integer"}}, "required": ["i"]}},
            "extra": {"anyOf": [{"type": "object"}, {"type": "null"}]}},
        "required": ["title", "body", "meta", "rows"],
        "additionalProperties": false
    });
    let tags: Vec<String> = (0..5000).map(|i| format!("tag-{i}")).collect();
    // Numbers tokenize densely: far over any inline text budget.
    let body = (0..20_000).map(|i| i.to_string()).collect::<Vec<_>>().join(" ");
    let sc = json!({"title": "t", "body": body, "meta": {"owner": "me", "tags": tags},
        "rows": (0..30_000).map(|i| json!({"i": i})).collect::<Vec<_>>(), "extra": null});
    let v = json!({"content": [{"type": "text", "text": sc.to_string()}], "structuredContent": sc, "isError": false});
    let out = try_run(TransformConfig::default(), MemorySink::new(), "report", Some(&schema), v).unwrap();
    let sc = &out.value["structuredContent"];
    assert_eq!(sc["title"], "t");
    assert!(sc["body"].as_str().unwrap().contains("artifact://"), "a long string stays a string, with its stub");
    assert!(sc["meta"]["tags"].is_array() && sc["meta"]["owner"] == "me");
    assert!(sc["rows"].as_array().is_some_and(|r| !r.is_empty() && r.len() < 30_000));
    let pointers: Vec<_> = out.report.artifacts.iter().map(|a| a.pointer.as_str()).collect();
    // The long string is its own text artifact; the arrays cut to prefixes are parts of one
    // artifact, the whole model as the tool sent it (its long string as the stub).
    assert_eq!(pointers, ["/structuredContent/body", "/structuredContent"], "{pointers:?}");
    let whole = out.report.artifacts.iter().find(|a| a.pointer == "/structuredContent").unwrap();
    let cut: Vec<_> = whole.cuts.iter().map(|c| c.pointer.as_str()).collect();
    assert!(cut.contains(&"/structuredContent/meta/tags") && cut.contains(&"/structuredContent/rows"), "{cut:?}");
}

#[test]
fn a_store_failure_under_an_output_schema_keeps_the_typed_prefix() {
    let (v, schema) = fastmcp_list(2000);
    let out = try_run(TransformConfig::default(), Arc::new(FailingSink), "rows", Some(&schema), v).unwrap();
    assert!(out.value["structuredContent"]["result"].as_array().is_some_and(|r| !r.is_empty() && r.len() < 2000));
    assert!(out.report.warnings.iter().any(|w| w.message.starts_with("cannot store")));
}

#[test]
fn the_clamp_keeps_structured_content_under_an_output_schema() {
    // Many text blocks, each under the size net, together over the clamp; structuredContent
    // small. The observation is stored whole, and structuredContent stays beside the link.
    let blocks: Vec<Value> = (0..8).map(|i| json!({"type": "text", "text": format!("line {i} of plain text\n").repeat(700)})).collect();
    let schema = json!({"type": "object", "properties": {"count": {"type": "integer"}}, "required": ["count"]});
    let config = TransformConfig { max_inline_chars: 20_000, ..Default::default() };
    let v = json!({"content": blocks, "structuredContent": {"count": 8}, "isError": false});
    let out = try_run(config.clone(), MemorySink::new(), "t", Some(&schema), v.clone()).unwrap();
    assert!(out.report.clamped, "{:?} {}", out.report, out.value.to_string().len());
    assert_eq!(out.value["structuredContent"], json!({"count": 8}));
    // Without a schema the clamp's replacement is as before: the content only.
    let out = try_run(config, MemorySink::new(), "t", None, v).unwrap();
    assert!(out.report.clamped && out.value.get("structuredContent").is_none());
}

// ---------------------------------------------------------------- L1 resource_link

#[test]
fn resource_links_everywhere_are_kept_lazy() {
    let link = json!({"type": "resource_link", "uri": "file:///r/report.pdf", "name": "report.pdf", "mimeType": "application/pdf", "size": 123456});
    let cases: Vec<(Value, Vec<&str>)> = vec![
        (link.clone(), vec![""]),
        (json!({"content": [{"type": "text", "text": "see"}, link.clone()]}), vec!["/content/1"]),
        (json!({"structuredContent": {"files": [link.clone()]}, "isError": false}), vec!["/structuredContent/files/0"]),
        (json!({"content": [{"type": "text", "text": json!({"file": link.clone()}).to_string()}]}), vec!["/content/0/text#/file"]),
    ];
    for (v, want) in cases {
        let r = run("t", v.clone());
        let got: Vec<_> = r.out.report.links.iter().map(|l| l.pointer.as_str()).collect();
        assert_eq!(got, want, "{v}");
        assert!(r.out.report.artifacts.is_empty());
        let text = r.text();
        if want[0].starts_with("/structuredContent") {
            // Recorded, but left exactly as the tool shaped it (its outputSchema may be closed).
            assert_eq!(r.out.value, v, "{text}");
        } else {
            assert!(text.contains("io.stowage/read_hint") && text.contains("file:///r/report.pdf"), "{text}");
        }
        assert_eq!(r.out.report.links[0].size_bytes, Some(123456));
        // A second pass changes nothing.
        assert_eq!(run("t", r.out.value.clone()).out.value, r.out.value);
    }
    // Our own artifact:// links are not annotated.
    let own = json!({"type": "resource_link", "uri": "artifact://t_0123456789abcdef", "name": "x"});
    assert_eq!(run("t", own.clone()).out.value, own);
    // A server description is kept; the hint goes to _meta only.
    let described = json!({"type": "resource_link", "uri": "file:///a", "name": "a", "description": "Quarterly report"});
    let r = run("t", described);
    assert_eq!(r.value()["description"], "Quarterly report");
}

// ---------------------------------------------------------------- L2 typed content

#[test]
fn typed_blocks_are_offloaded() {
    let png = corpus("sample.png");
    let wav = corpus("sample.wav");
    let pdf = corpus("sample.pdf");
    let v = json!({"content": [
        {"type": "text", "text": "Here you go"},
        {"type": "image", "data": b64(&png), "mimeType": "image/png", "annotations": {"audience": ["user"], "priority": 0.9}},
        {"type": "audio", "data": b64(&wav), "mimeType": "audio/wav"},
        {"type": "resource", "resource": {"uri": "file:///docs/q4.pdf", "mimeType": "application/pdf", "blob": b64(&pdf)}},
        {"type": "future_block", "payload": {"x": 1}}
    ]});
    let r = run("t", v);
    assert_eq!(r.pointers(), ["/content/1", "/content/2", "/content/3"]);
    assert_eq!(r.mimes(), ["image/png", "audio/wav", "application/pdf"]);
    let content = r.value()["content"].as_array().unwrap();
    let kinds: Vec<_> = content.iter().map(|b| b["type"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["text", "text", "resource_link", "text", "resource_link", "text", "resource_link", "future_block"]);
    assert_eq!(content[2]["annotations"], json!({"audience": ["user"], "priority": 0.9}), "the block's annotations go with its link");
    assert!(content[4].get("annotations").is_none());
    assert_eq!(content[4]["mimeType"], "audio/wav");
    assert_eq!(content[6]["name"], "q4.pdf");
    assert_eq!(content[7], json!({"type": "future_block", "payload": {"x": 1}}));
    assert!(content[1]["text"].as_str().unwrap().starts_with("PNG image (2.3 KB) stored as artifact://t_"));
    assert_eq!(r.out.report.artifacts[0].layer, Layer::TypedContent);
    r.check_hashes();
}

#[test]
fn typed_content_edge_cases() {
    let tiny = corpus("tiny.png");
    let png = corpus("sample.png");
    // (input, artifacts expected, warnings expected)
    let cases: Vec<(Value, usize, usize)> = vec![
        // Under inline_binary_max_bytes: untouched (conformance: 70-byte PNG).
        (json!({"content": [{"type": "image", "data": b64(&tiny), "mimeType": "image/png"}]}), 0, 0),
        // Data URI inside an image block.
        (json!({"content": [{"type": "image", "data": format!("data:image/png;base64,{}", b64(&png)), "mimeType": "image/png"}]}), 1, 0),
        // Not in a content list: becomes a resource_link object with a description.
        (json!({"thumbnail": {"type": "image", "data": b64(&png), "mimeType": "image/png"}}), 1, 0),
        // resources/read contents: blob becomes text, uri kept.
        (json!({"contents": [{"uri": "test://static-binary", "mimeType": "image/png", "blob": b64(&png)}]}), 1, 0),
        // Malformed base64: left as it is, with a warning.
        (json!({"content": [{"type": "image", "data": format!("{}!!", "A".repeat(2000)), "mimeType": "image/png"}]}), 0, 1),
        (json!({"content": [{"type": "audio", "data": format!("{}A", b64(&png)), "mimeType": "audio/wav"}]}), 0, 1),
    ];
    for (v, n, w) in cases {
        let r = run("t", v.clone());
        assert_eq!(r.out.report.artifacts.len(), n, "{v:.200}");
        assert_eq!(r.out.report.warnings.len(), w, "{:?}", r.out.report.warnings);
        if n == 0 && w == 0 {
            assert_eq!(r.out.value, v);
        }
    }
    let r = run("t", json!({"thumbnail": {"type": "image", "data": b64(&png), "mimeType": "image/png"}}));
    assert_eq!(r.value()["thumbnail"]["type"], "resource_link");
    assert!(r.value()["thumbnail"]["description"].as_str().unwrap().starts_with("PNG image"));
    let r = run("t", json!({"contents": [{"uri": "test://static-binary", "mimeType": "image/png", "blob": b64(&png)}]}));
    let entry = &r.value()["contents"][0];
    assert_eq!(entry["uri"], "test://static-binary");
    assert!(entry.get("blob").is_none() && entry["text"].as_str().unwrap().contains("artifact://"));
}

// ---------------------------------------------------------------- L3 base64 heuristics

#[test]
fn base64_in_every_encoding_and_position() {
    let pdf = corpus("sample.pdf");
    let encodings: Vec<(&str, String)> = vec![
        ("standard", b64(&pdf)),
        ("unpadded", b64_nopad(&pdf)),
        ("url-safe", b64_url(&pdf)),
        ("mime-wrapped", b64_mime(&pdf)),
        ("data-uri", format!("data:application/pdf;base64,{}", b64(&pdf))),
        ("trailing newline", format!("{}\n", b64(&pdf))),
    ];
    for (name, enc) in &encodings {
        let positions: Vec<(Value, &str)> = vec![
            (json!(enc), ""),
            (json!({"a": {"b": enc}}), "/a/b"),
            (json!({"list": ["x", enc]}), "/list/1"),
            (json!({"content": [{"type": "text", "text": enc}]}), "/content/0"),
            (json!({"content": [{"type": "text", "text": json!({"deep": {"file": enc}}).to_string()}]}), "/content/0/text#/deep/file"),
            (json!({"wrapper": json!({"inner": json!({"pdf": enc}).to_string()}).to_string()}), "/wrapper#/inner#/pdf"),
        ];
        for (v, ptr) in positions {
            let r = run("t", v);
            assert_eq!(r.pointers(), [ptr], "{name} at {ptr}");
            assert_eq!(r.mimes(), ["application/pdf"], "{name} at {ptr}");
            assert_eq!(r.sink.get(&r.out.report.artifacts[0].id).unwrap().as_ref(), pdf.as_slice(), "{name}");
            assert!(!r.text().contains("JVBERi"), "{name} at {ptr}");
        }
    }
}

/// Hard negatives: none of these may ever become a binary artifact.
#[test]
fn hard_negatives_never_become_binaries() {
    let jwt = format!("eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.{}.{}", b64_url(&noise(900, 1)), b64_url(&noise(32, 2)));
    let hex_digest = hex::encode(noise(1500, 3));
    let b64_digests: String = (0..60).map(|i| format!("sha256-{} ", b64(&noise(32, i)))).collect();
    let uuids: String =
        (0..60).map(|i| format!("{}-4a1b-8c2d-{}", hex::encode(noise(4, i)), hex::encode(noise(6, i + 100)))).collect::<Vec<_>>().join(",");
    let api_keys: String = (0..40).map(|i| format!("sk-proj-{}", b64_url(&noise(30, i)))).collect::<Vec<_>>().join("\n");
    let prose = "The quarterly results show that revenue grew in every region, with the strongest gains in the west. ".repeat(20);
    let minified = "function a(b){return b.map(function(c){return c*2}).filter(Boolean)};var x={a:1,b:[2,3]};".repeat(20);
    let css = ".btn{color:#fff;background:#0a66c2;padding:4px 8px}.btn:hover{opacity:.9}".repeat(30);
    let text_b64 = b64(prose.as_bytes());
    let json_b64 = b64(json!({"rows": (0..400).collect::<Vec<_>>()}).to_string().as_bytes());
    let html_b64 = b64(format!("<!DOCTYPE html><html><body>{}</body></html>", prose).as_bytes());
    let long_number = "12345678901234567890".repeat(60);
    let random_b64 = b64(&noise(3000, 9)); // base64 of bytes with no magic: not a known binary
    let cases: Vec<(&str, String)> = vec![
        ("jwt", jwt),
        ("hex digest", hex_digest),
        ("base64 digests", b64_digests),
        ("uuid list", uuids),
        ("api keys", api_keys),
        ("prose", prose.clone()),
        ("minified js", minified),
        ("css", css),
        ("base64 of text", text_b64),
        ("base64 of json", json_b64),
        ("base64 of html", html_b64),
        ("long number", long_number),
        ("no magic", random_b64),
        ("AAAA prefix, no magic", format!("AAAA{}", b64(&noise(2000, 5)))),
    ];
    for (name, s) in cases {
        assert!(s.len() >= 1000, "{name} must be long enough to be examined ({})", s.len());
        let r = run("t", json!({"field": s}));
        assert!(r.out.report.artifacts.iter().all(|a| a.layer != Layer::Base64), "{name} became a binary: {:?}", r.out.report.artifacts);
        assert!(r.out.report.warnings.is_empty(), "{name}: {:?}", r.out.report.warnings);
        if s.chars().count() <= 10_000 {
            assert_eq!(r.out.value, json!({"field": s}), "{name} changed");
        } else {
            assert_eq!(r.out.report.artifacts[0].layer, Layer::SizeNet, "{name}");
        }
    }
}

#[test]
fn malformed_base64_is_left_and_l0_applies() {
    let pdf = fake_pdf(30_000);
    // Truncated mid-stream (length % 4 == 1) and a corrupted character in the middle.
    let mut truncated = b64(&pdf);
    truncated.truncate(truncated.len() - 3);
    let mut corrupted = b64(&pdf);
    corrupted.replace_range(20_000..20_001, "*");
    for s in [truncated, corrupted] {
        let r = run("t", json!({"f": s.clone()}));
        assert_eq!(r.out.report.warnings.len(), 1, "{:?}", r.out.report.warnings);
        assert_eq!(r.out.report.warnings[0].layer, Layer::Base64);
        assert_eq!(r.out.report.artifacts.len(), 1);
        assert_eq!(r.out.report.artifacts[0].layer, Layer::SizeNet);
        assert!(r.mimes()[0].starts_with("text/plain"));
        // The in-place decode attempt restored the string exactly before L0 stored it.
        assert_eq!(r.sink.get(&r.out.report.artifacts[0].id).unwrap().as_ref(), s.as_bytes());
    }
    // Same with a data: URI header and with a URL-safe body.
    let mut data_uri = format!("data:application/pdf;base64,{}", b64_url(&pdf));
    data_uri.replace_range(30_000..30_001, "+");
    let r = run("t", json!({"f": data_uri.clone()}));
    assert_eq!(r.out.report.warnings.len(), 1);
    assert_eq!(r.sink.get(&r.out.report.artifacts[0].id).unwrap().as_ref(), data_uri.as_bytes());
}

#[test]
fn large_base64_is_decoded_whole() {
    // Over 5 MB (the old cap that stored such files as text), and not a multiple of 4 MB.
    let pdf = fake_pdf(6_000_001);
    let r = run("t", json!({"content": b64(&pdf)}));
    assert_eq!(r.mimes(), ["application/pdf"]);
    assert_eq!(r.out.report.artifacts[0].size_bytes, 6_000_001);
    r.check_hashes();
}

// ---------------------------------------------------------------- L0 size net

/// A made-up source file of `bytes` bytes: code lines with identifiers, numbers and comments,
/// the mix a `read_file` tool returns.
fn source_file(bytes: usize) -> String {
    let mut s = String::new();
    let mut i = 0;
    while s.len() < bytes {
        s.push_str(&format!("    let value_{i} = compute(&input[{i}], \"field {i}\")?; // step {i} of the parser\n"));
        i += 1;
    }
    s.truncate(bytes);
    s
}

/// Text with many o200k tokens per character (short words of digits and punctuation): over
/// the token budget while well under the character ceiling.
fn dense_text(chars: usize) -> String {
    let mut s = String::new();
    let mut i = 0u64;
    while s.len() < chars {
        s.push_str(&format!("{};{} ", i * 7919 % 1000, (i * 104_729) % 97));
        i += 1;
    }
    s.truncate(chars);
    s
}

/// A 17 KB source file from `read_file` once came back as a 335-character preview. Text now
/// stays whole up to `max_inline_tokens`.
#[test]
fn text_stays_inline_up_to_the_token_budget() {
    let file = source_file(17_000);
    assert!(stowage_transform::tokens::count_exact(&file) < 8_000);
    let result = json!({"content": [{"type": "text", "text": file}], "isError": false});
    let r = run("read_file", result.clone());
    assert!(r.out.report.artifacts.is_empty(), "{:?}", r.pointers());
    assert_eq!(r.out.value, result);
    // The same text as a JSON string field: whole too.
    let r = run("t", json!({"source": file}));
    assert_eq!(r.value()["source"].as_str().unwrap(), file);
    // Text longer than `large_json_chars` (20000) inside an object: the object is not turned
    // into a JSON preview with 80-character strings because of it.
    let longer = source_file(22_000);
    assert!(stowage_transform::tokens::count_exact(&longer) < 8_000);
    let r = run("t", json!({"path": "src/main.rs", "source": longer}));
    assert!(r.out.report.artifacts.is_empty(), "{:?}", r.pointers());
    assert_eq!(r.value()["source"].as_str().unwrap(), longer);
}

#[test]
fn size_net_offloads_text_over_the_budget_and_names_artifact_read() {
    // Over 8000 tokens while under the 32000-character ceiling: offloaded by its tokens.
    let dense = dense_text(25_000);
    let tokens = stowage_transform::tokens::count_exact(&dense);
    assert!(tokens > 8_000 && dense.chars().count() < 32_000, "{tokens} tokens");
    let r = run("t", json!({"log": dense, "ok": "short"}));
    let s = r.value()["log"].as_str().unwrap();
    assert!(s.starts_with(&dense[..100]) && s.contains("artifact://"), "{s}");
    assert!(s.contains("artifact_read"), "the stub names the tool that reads on: {s}");
    // Head and tail: the end of a log (where the error is) stays beside its beginning.
    assert!(s.ends_with(&dense[dense.len() - 100..]), "{s}");
    assert!(s.len() < 1_400, "{}", s.len());
    assert_eq!(r.value()["ok"], "short");
    assert_eq!(r.out.report.artifacts[0].layer, Layer::SizeNet);
    assert_eq!(r.sink.get(&r.out.report.artifacts[0].id).unwrap().as_ref(), dense.as_bytes());

    // Over the character ceiling: offloaded whatever its tokens (a long run of one letter is
    // few tokens). Multi-byte characters count once.
    assert_eq!(run("t", json!({"s": "x".repeat(32_001)})).out.report.artifacts.len(), 1);
    let at = "é".repeat(16_000);
    let config = TransformConfig { max_inline_chars: 16_000, max_inline_tokens: 1_000_000, ..TransformConfig::default() };
    assert!(run_with(config.clone(), "t", json!({"s": at})).out.report.artifacts.is_empty());
    assert_eq!(run_with(config, "t", json!({"s": "é".repeat(16_001)})).out.report.artifacts.len(), 1);

    // Exactly at the token budget: inline; one token over: offloaded.
    let text = source_file(2_000);
    let n = stowage_transform::tokens::count_exact(&text);
    let at = TransformConfig { max_inline_tokens: n, ..TransformConfig::default() };
    assert!(run_with(at, "t", json!({"s": text})).out.report.artifacts.is_empty());
    let under = TransformConfig { max_inline_tokens: n - 1, ..TransformConfig::default() };
    assert_eq!(run_with(under, "t", json!({"s": text})).out.report.artifacts.len(), 1);

    // A multi-megabyte string is decided by its length: it is offloaded without being
    // tokenized (which would take seconds in a debug build).
    let started = std::time::Instant::now();
    let big = format!("{}\n", source_file(8 << 20));
    let r = run("t", json!({"s": big}));
    assert_eq!(r.out.report.artifacts.len(), 1);
    assert!(started.elapsed() < std::time::Duration::from_secs(20), "{:?}", started.elapsed());

    // A large array of small rows: a JSON artifact with a valid JSON preview and a schema.
    let rows: Vec<Value> = (0..2000).map(|i| json!({"id": i, "name": format!("row {i}"), "ok": i % 2 == 0})).collect();
    let r = run("t", json!({"rows": rows, "count": 2000}));
    let rows_out = &r.value()["rows"];
    assert_eq!(rows_out["preview"].as_array().unwrap().len(), 3);
    assert_eq!(rows_out["schema"]["length"], 2000);
    assert_eq!(rows_out["schema"]["items"]["properties"]["ok"]["type"], "boolean");
    assert!(rows_out["$artifact"]["uri"].as_str().unwrap().starts_with("artifact://"));
    assert_eq!(r.value()["count"], 2000);
    assert_eq!(r.mimes(), ["application/json"]);
    let stored: Value = serde_json::from_slice(&r.sink.get(&r.out.report.artifacts[0].id).unwrap()).unwrap();
    assert_eq!(stored.as_array().unwrap().len(), 2000);
    // The JSON stub names the tool that selects parts of it.
    assert!(rows_out["$artifact"]["summary"].as_str().unwrap().contains("artifact_query"), "{rows_out}");
}

/// `keep_images_under_bytes`: a user whose model reads images keeps small ones as image
/// blocks. Nothing later (L3's magic bytes, L0's length, the clamp) touches a kept image;
/// larger images are still offloaded.
#[test]
fn small_images_can_stay_image_blocks() {
    let png = corpus("sample.png");
    let data = b64(&png);
    let result = json!({"content": [
        {"type": "text", "text": "the chart"},
        {"type": "image", "data": data, "mimeType": "image/png"},
    ]});
    // Default: the image becomes an artifact, as before.
    assert_eq!(run("t", result.clone()).mimes(), ["image/png"]);

    let keep = |limit: u64| {
        let mut c = TransformConfig::default();
        c.typed_content.keep_images_under_bytes = limit;
        // A clamp smaller than the image's base64: it measures text, not kept images.
        c.clamp.max_observation_chars = data.len() / 2;
        c.clamp.auto_artifact_threshold = data.len() / 2;
        c
    };
    let r = run_with(keep(png.len() as u64 + 1), "t", result.clone());
    assert!(r.out.report.artifacts.is_empty(), "{:?}", r.pointers());
    assert!(!r.out.report.clamped);
    assert_eq!(r.out.value, result);
    assert!(r.out.report.bytes_out as usize > data.len());
    // Nested and beside a long text too, and the text is still handled.
    let nested = json!({"thumb": {"type": "image", "data": data, "mimeType": "image/png"}, "log": "x".repeat(40_000)});
    let mut config = keep(png.len() as u64 + 1);
    config.clamp = TransformConfig::default().clamp;
    let r = run_with(config, "t", nested);
    assert_eq!(r.mimes(), ["text/plain; charset=utf-8"]);
    assert_eq!(r.value()["thumb"]["data"], data);
    // At the limit ("under" is strict) and above it: offloaded.
    assert_eq!(run_with(keep(png.len() as u64), "t", result.clone()).mimes(), ["image/png"]);
    // Audio is not an image: still offloaded.
    let wav = json!({"content": [{"type": "audio", "data": b64(&corpus("sample.wav")), "mimeType": "audio/wav"}]});
    assert_eq!(run_with(keep(10 << 20), "t", wav).mimes(), ["audio/wav"]);
}

/// The clamp stores an over-limit observation whole, kept images included.
#[test]
fn a_stored_observation_keeps_its_kept_images() {
    let png = corpus("sample.png");
    let data = b64(&png);
    let mut config = TransformConfig::default();
    config.typed_content.keep_images_under_bytes = 1 << 20;
    config.clamp.max_observation_chars = 5_000;
    config.clamp.auto_artifact_threshold = 5_000;
    let rows: Vec<Value> = (0..1000).map(|i| json!(format!("row {i}"))).collect();
    let result = json!({"rows": rows, "img": {"type": "image", "data": data, "mimeType": "image/png"}});
    let r = run_with(config, "t", result.clone());
    assert!(r.out.report.clamped);
    let stored: Value = serde_json::from_slice(&r.sink.get(&r.out.report.artifacts[0].id).unwrap()).unwrap();
    assert_eq!(stored, result);
    assert!(r.out.report.artifacts[0].summary.contains("artifact_query"));
}

// ---------------------------------------------------------------- failure rules

#[test]
fn store_failures() {
    let pdf = fake_pdf(50_000);
    // A binary that cannot be stored fails the call: never base64 to the model.
    let err = try_run(TransformConfig::default(), Arc::new(FailingSink), "t", None, tableau_result(&pdf)).unwrap_err();
    assert_eq!(err.code(), "artifact_storage_failed");
    assert!(err.to_string().contains("/content/0/text#/content"), "{err}");
    // Same for an image block and a preset field.
    let img = json!({"content": [{"type": "image", "data": b64(&corpus("sample.png")), "mimeType": "image/png"}]});
    assert_eq!(try_run(TransformConfig::default(), Arc::new(FailingSink), "t", None, img).unwrap_err().code(), "artifact_storage_failed");
    // A per-trace quota refusing the second artifact is a storage failure too.
    let two = json!({"a": b64(&pdf), "b": b64(&corpus("sample.png"))});
    let err = try_run(TransformConfig::default(), MemorySink::with_limit(1), "t", None, two).unwrap_err();
    assert_eq!(err.code(), "artifact_storage_failed");
    // The size net degrades instead: truncated text and a warning, the result comes back.
    let out = try_run(TransformConfig::default(), Arc::new(FailingSink), "t", None, json!({"log": "x".repeat(40_000)})).unwrap();
    let s = out.value["log"].as_str().unwrap();
    // The cut says so, and says the whole was not stored (it is not an offload with a link).
    assert!(
        s.contains("\n... [truncated: 8000 chars]\n[text of 40000 characters — not stored, only its start is here: "),
        "{}",
        &s[31_900..]
    );
    assert!(
        s.ends_with("the artifact store cannot take it now (full or unavailable); call the tool again later]") && s.len() < 32_300,
        "{}",
        s.len()
    );
    assert_eq!(out.report.warnings.len(), 1);
    assert!(out.report.warnings[0].message.contains("artifact_storage_failed"));
    // Offloaded for its tokens: the copy kept is within the budget.
    let dense = dense_text(30_000);
    let out = try_run(TransformConfig::default(), Arc::new(FailingSink), "t", None, json!({"log": dense})).unwrap();
    let kept = out.value["log"].as_str().unwrap();
    assert!(kept.contains("[truncated: ") && stowage_transform::tokens::count_exact(kept) <= 8_100, "{}", kept.len());
}

#[test]
fn noop_sink_marks_not_stored() {
    let out =
        try_run(TransformConfig::default(), Arc::new(NoopSink), "download_workbook", None, tableau_result(&fake_pdf(20_000))).unwrap();
    let text = out.value.to_string();
    assert!(text.contains("was not kept: no artifact store is configured"), "{text}");
    assert!(!text.contains("JVBERi"));
    // Nothing was kept, so nothing names an artifact or links to one.
    assert!(!text.contains("artifact://") && !text.contains("resource_link"), "{text}");
}

// ---------------------------------------------------------------- clamp

fn clamp_config() -> TransformConfig {
    let mut c = TransformConfig::default();
    c.size_net.large_json_chars = usize::MAX; // let the clamp see a large observation
    c
}

fn many_small_fields() -> Value {
    json!({"items": (0..5000).map(|i| json!({"i": i, "s": "abcdefghij"})).collect::<Vec<_>>()})
}

#[test]
fn clamp_stores_truncates_and_emits() {
    let seen = Arc::new(AtomicUsize::new(0));
    let before = stowage_transform::observations_clamped();
    let scope = stowage_core::ArtifactScope::default();
    let input = TransformInput::new("big", &scope);
    // A real sink: the whole observation becomes one artifact.
    let sink = MemorySink::new();
    let s2 = seen.clone();
    let p = Pipeline::new(clamp_config(), sink.clone()).on_clamp(Arc::new(move |e| {
        assert_eq!(e.tool, "big");
        s2.fetch_add(1, Ordering::SeqCst);
    }));
    let out = block_on(p.transform(&input, many_small_fields())).unwrap();
    assert!(out.report.clamped);
    assert_eq!(out.report.artifacts.len(), 1);
    assert_eq!(out.report.artifacts[0].layer, Layer::Clamp);
    assert_eq!(out.report.artifacts[0].pointer, "");
    assert!(out.value["$artifact"]["uri"].is_string() && out.value["preview"].is_object());
    assert!(out.report.bytes_out < 2_000, "{}", out.report.bytes_out);
    // No sink that keeps bytes: truncated with structure and the suffix.
    let p = Pipeline::new(clamp_config(), Arc::new(NoopSink)).on_clamp({
        let s = seen.clone();
        Arc::new(move |_| {
            s.fetch_add(1, Ordering::SeqCst);
        })
    });
    let out = block_on(p.transform(&input, many_small_fields())).unwrap();
    assert!(out.report.clamped && out.report.artifacts.is_empty());
    assert!(out.report.bytes_out <= 50_000);
    assert!(out.value["items"].as_array().unwrap().last().unwrap().as_str().unwrap().contains("truncated"));
    // A failing sink: truncation plus a warning.
    let out = try_run(clamp_config(), Arc::new(FailingSink), "big", None, many_small_fields()).unwrap();
    assert!(out.report.clamped && out.report.bytes_out <= 50_000 && out.report.warnings.len() == 1);
    assert_eq!(seen.load(Ordering::SeqCst), 2);
    assert!(stowage_transform::observations_clamped() >= before + 3);
}

/// The clamp runs after collection: artifacts found by earlier layers survive it.
#[test]
fn clamp_never_loses_artifacts() {
    let mut v = many_small_fields();
    v["file"] = json!(b64(&fake_pdf(40_000)));
    // (A store that keeps things: the NoOp store's markers name no artifact at all.)
    let out = try_run(clamp_config(), MemorySink::new(), "t", None, v).unwrap();
    assert!(out.report.clamped);
    // The PDF, and the whole observation the clamp stored before cutting it.
    assert_eq!(out.report.artifacts.len(), 2, "{:?}", out.report.artifacts);
    let text = out.value.to_string();
    for a in &out.report.artifacts {
        assert!(text.contains(&a.uri), "{} lost: {text}", a.uri);
    }
}

// ---------------------------------------------------------------- L5 custom and hook

#[test]
fn custom_transformers() {
    let pdf = fake_pdf(20_000);
    let v = json!({"secret": "hunter2", "file": b64(&pdf)});
    let redact = |_: &str, v: &Value| -> Result<CustomOutcome, stowage_transform::BoxError> {
        let mut v = v.clone();
        v["secret"] = "<redacted>".into();
        Ok(CustomOutcome::Replace(v))
    };
    let failing = |_: &str, _: &Value| -> Result<CustomOutcome, stowage_transform::BoxError> { Err("boom".into()) };
    let sink = MemorySink::new();
    let scope = stowage_core::ArtifactScope::default();
    let p = Pipeline::new(TransformConfig::default(), sink)
        .with_custom(Box::new(failing))
        .with_custom(Box::new(redact))
        .with_custom(Box::new(()));
    let out = block_on(p.transform(&TransformInput::new("t", &scope), v.clone())).unwrap();
    assert_eq!(out.value["secret"], "<redacted>");
    // The failure is a warning; the other layers still ran.
    assert_eq!(out.report.warnings.len(), 1);
    assert!(out.report.warnings[0].message.contains("boom"));
    assert_eq!(out.report.artifacts.len(), 1);
    // Final: later layers skipped (the base64 stays, by the transformer's choice).
    let fin = |_: &str, v: &Value| -> Result<CustomOutcome, stowage_transform::BoxError> { Ok(CustomOutcome::Final(v.clone())) };
    let p = Pipeline::new(TransformConfig::default(), MemorySink::new()).with_custom(Box::new(fin));
    let out = block_on(p.transform(&TransformInput::new("t", &scope), v.clone())).unwrap();
    assert!(out.report.artifacts.is_empty() && out.value == v);
}

#[test]
fn external_hook() {
    let pdf = fake_pdf(20_000);
    let v = json!({"a": 1, "file": b64(&pdf)});
    let sh = |script: &str, timeout_ms: u64| {
        let mut c = TransformConfig::default();
        c.hook.command = vec!["sh".into(), "-c".into(), script.into()];
        c.hook.timeout_ms = timeout_ms;
        c
    };
    // (script, expected "a" afterwards, warnings)
    let cases = [
        (r#"sed 's/"a":1/"a":2/'"#, json!(2), 0),
        ("cat >/dev/null", json!(1), 0),         // empty stdout: unchanged
        ("cat >/dev/null; exit 3", json!(1), 1), // failure
        ("cat >/dev/null; echo not json", json!(1), 1),
        ("sleep 5", json!(1), 1), // timeout, killed
        ("test \"$STOWAGE_TOOL\" = my_tool && cat", json!(1), 0),
    ];
    for (script, a, warnings) in cases {
        let started = std::time::Instant::now();
        let r = run_with(sh(script, 300), "my_tool", v.clone());
        assert!(started.elapsed().as_secs() < 3, "{script}");
        assert_eq!(r.value()["a"], a, "{script}");
        assert_eq!(r.out.report.warnings.len(), warnings, "{script}: {:?}", r.out.report.warnings);
        // Whatever the hook did, the binary was still offloaded by L3.
        assert_eq!(r.out.report.artifacts.len(), 1, "{script}");
    }
}

// ---------------------------------------------------------------- pass-through

#[test]
fn nothing_heavy_passes_through() {
    let cases = vec![
        json!(null),
        json!("short"),
        json!({"content": [{"type": "text", "text": "hello"}], "isError": false, "_meta": {"x": 1}}),
        json!({"content": [{"type": "text", "text": "{\"pretty\":   [1, 2,\n 3]}"}]}),
        json!({"unknown": {"type": "weird", "data": "AAAA"}, "n": 1.5, "big": 18446744073709551615u64}),
        json!({"content": [{"type": "image", "data": b64(&corpus("tiny.png")), "mimeType": "image/png"}]}),
        json!([1, "two", {"three": [3]}]),
    ];
    for v in cases {
        let r = run("t", v.clone());
        assert_eq!(r.out.value, v);
        assert!(r.out.report.artifacts.is_empty() && r.out.report.warnings.is_empty());
        assert!(!r.out.report.clamped);
        assert_eq!(r.out.report.bytes_in, r.out.report.bytes_out);
    }
}

#[test]
fn transform_json_entry_matches_value_entry() {
    let v = tableau_result(&fake_pdf(100_000));
    let text = serde_json::to_vec(&v).unwrap();
    let scope = stowage_core::ArtifactScope::default();
    let p = Pipeline::new(TransformConfig::default(), MemorySink::new());
    let a = block_on(p.transform_json(&TransformInput::new("t", &scope), text.clone())).unwrap();
    let b = block_on(p.transform(&TransformInput::new("t", &scope), v)).unwrap();
    assert_eq!(a.value, b.value);
    assert_eq!(a.report.bytes_in, text.len() as u64);
    assert_eq!(a.report.bytes_in, b.report.bytes_in);
    let bad = block_on(p.transform_json(&TransformInput::new("t", &scope), b"{nope".to_vec())).unwrap_err();
    assert_eq!(bad.code(), "bad_request");
    // The same from a String (the gateway's entry), and for a result with a long key, which
    // the in-place parser leaves to serde_json.
    let c = block_on(p.transform_json_text(&TransformInput::new("t", &scope), String::from_utf8(text.clone()).unwrap())).unwrap();
    assert_eq!((c.value, c.report.bytes_in), (a.value, a.report.bytes_in));
    let long_key = format!(r#"{{"content": [{{"type": "text", "text": "hi"}}], "{}": 1}}"#, "k".repeat(100_000));
    let d = block_on(p.transform_json_text(&TransformInput::new("t", &scope), long_key.clone())).unwrap();
    let e = block_on(p.transform_json(&TransformInput::new("t", &scope), long_key.into_bytes())).unwrap();
    assert_eq!(d.value, e.value);
    let bad = block_on(p.transform_json_text(&TransformInput::new("t", &scope), "{nope".repeat(20_000))).unwrap_err();
    assert_eq!(bad.code(), "bad_request");
}

// ---------------------------------------------------------------- entry points and fast paths

/// Forwards puts to a memory sink but, like the filesystem store, does not ask for digests:
/// the pipeline must then leave hashing to it.
struct HashesItself(Arc<MemorySink>);

#[async_trait::async_trait]
impl stowage_core::ArtifactSink for HashesItself {
    async fn put_bytes(
        &self,
        data: bytes::Bytes,
        opts: stowage_core::PutOptions,
    ) -> Result<stowage_core::ArtifactRef, stowage_core::StoreError> {
        self.0.put_bytes(data, opts).await
    }
}

/// A result whose text block is over 1 MiB of JSON around a 3 MB PDF goes through the fast
/// paths (the text block parsed through the index its first parse made, the PDF hashed while
/// it is decoded): every entry point, a sink that hashes by itself, and a custom transformer
/// that replaces the value (so the index must not be used) all give the same result.
#[test]
fn large_results_are_the_same_from_every_entry() {
    let v = tableau_result(&fake_pdf(3_000_000));
    let text = serde_json::to_string(&v).unwrap();
    let scope = stowage_core::ArtifactScope::session("s1");
    let same = |_: &str, v: &Value| -> Result<CustomOutcome, stowage_transform::BoxError> { Ok(CustomOutcome::Replace(v.clone())) };
    for tool in ["download_workbook", "t"] {
        let input = TransformInput::new(tool, &scope);
        let sink = MemorySink::new();
        let p = Pipeline::new(TransformConfig::default(), sink.clone());
        let want = block_on(p.transform(&input, v.clone())).unwrap();
        assert_eq!(want.report.artifacts.len(), 1, "{tool}");
        let a = &want.report.artifacts[0];
        assert_eq!((a.size_bytes, a.pointer.as_str()), (3_000_000, "/content/0/text#/content"));
        assert_eq!(a.sha256, sha256_hex(&sink.get(&a.id).unwrap()));
        let from_bytes = block_on(p.transform_json(&input, text.clone().into_bytes())).unwrap();
        let from_text = block_on(p.transform_json_text(&input, text.clone())).unwrap();
        assert_eq!(from_bytes.value, want.value, "{tool}");
        assert_eq!(from_text.value, want.value, "{tool}");
        assert_eq!(from_bytes.report.artifacts, want.report.artifacts, "{tool}");
        assert_eq!(from_text.report, from_bytes.report, "{tool}");

        let plain = Pipeline::new(TransformConfig::default(), Arc::new(HashesItself(MemorySink::new())));
        let out = block_on(plain.transform_json(&input, text.clone().into_bytes())).unwrap();
        assert_eq!((out.value, out.report.artifacts), (want.value.clone(), want.report.artifacts.clone()), "{tool}");

        let custom = Pipeline::new(TransformConfig::default(), MemorySink::new()).with_custom(Box::new(same));
        let out = block_on(custom.transform_json_text(&input, text.clone())).unwrap();
        assert_eq!((out.value, out.report.artifacts), (want.value.clone(), want.report.artifacts.clone()), "{tool}");
    }
}

/// The fast JSON path's reported crash, end to end: a string over 64 KiB beside one that
/// unescapes to a placeholder (`"\u0000\u0073towage-lifted:0"`), at the top level and inside
/// a text block's JSON. Both JSON entry points answer, as the value entry point does.
#[test]
fn escaped_placeholder_beside_a_long_string_passes() {
    let long = "x".repeat(70_000);
    let crafted = r#""\u0000\u0073towage-lifted:0""#;
    let top = format!(r#"{{"content": [{{"type": "text", "text": "{long}"}}, {{"type": "text", "text": {crafted}}}], "isError": false}}"#);
    let inner = format!(r#"{{"a": "{long}", "b": {crafted}, "c": "JVBERi0xLjQ="}}"#);
    let embedded = serde_json::to_string(&json!({"content": [{"type": "text", "text": inner}]})).unwrap();
    let scope = stowage_core::ArtifactScope::session("s1");
    let input = TransformInput::new("t", &scope);
    for text in [top, embedded] {
        let v: Value = serde_json::from_str(&text).unwrap();
        let p = Pipeline::new(TransformConfig::default(), MemorySink::new());
        let want = block_on(p.transform(&input, v)).unwrap();
        let from_bytes = block_on(p.transform_json(&input, text.clone().into_bytes())).unwrap();
        let from_text = block_on(p.transform_json_text(&input, text.clone())).unwrap();
        assert_eq!(from_bytes.value, want.value);
        assert_eq!(from_text.value, want.value);
        assert!(serde_json::to_string(&want.value).unwrap().contains("stowage-lifted:0"));
    }
}

#[test]
fn a_full_store_withholds_values_and_keeps_the_rest_when_asked() {
    let pdf = fake_pdf(50_000);
    let png = corpus("sample.png");
    let result = json!({"content": [
        {"type": "text", "text": "Here is the quarter's report and its chart."},
        {"type": "image", "data": b64(&png), "mimeType": "image/png"},
        {"type": "resource", "resource": {"uri": "file:///report.pdf", "mimeType": "application/pdf", "blob": b64(&pdf)}},
    ]});
    let scope = stowage_core::ArtifactScope::session("s1");
    let mut input = TransformInput::new("t", &scope);
    input.withhold_on_store_failure = true;
    let pipeline = Pipeline::new(TransformConfig::default(), Arc::new(FailingSink));
    let out = block_on(pipeline.transform(&input, result)).expect("withheld, not failed");
    let text = out.value.to_string();
    // The tool's own text reaches the model; each withheld value is named with its size and
    // why, and none of its bytes stay.
    assert_eq!(out.value["content"][0]["text"], "Here is the quarter's report and its chart.");
    assert_eq!(out.report.withheld.len(), 2, "{:?}", out.report.withheld);
    assert!(text.contains("[withheld: image/png content block, 2.3 KB — not stored: the artifact store cannot take it now"), "{text}");
    assert!(text.contains("[withheld: application/pdf"), "{text}");
    assert!(!text.contains(&b64(&png)[..100]) && !text.contains(&b64(&pdf)[..100]), "no base64 stays");
    assert!(out.report.warnings.iter().all(|w| w.message.starts_with("cannot store")));
    assert!(out.report.artifacts.is_empty());
    // A quota that refuses names its limit, which the user can change.
    let mut input = TransformInput::new("t", &scope);
    input.withhold_on_store_failure = true;
    let pipeline = Pipeline::new(TransformConfig::default(), MemorySink::with_limit(1));
    let two = json!({"a": b64(&pdf), "b": b64(&png)});
    let out = block_on(pipeline.transform(&input, two)).unwrap();
    assert_eq!((out.report.artifacts.len(), out.report.withheld.len()), (1, 1), "{:?}", out.report);
    assert!(out.report.withheld[0].reason.contains("[withheld: "), "{:?}", out.report.withheld);
}
