//! The gateway end to end over its stdio downstream, against the `stowage-fixture` upstream
//! (a real child process): relay, the output contract, aggregation, and the unhappy paths.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::{Client, MemSink, eventually, fast_config, fixture_spec, read_log};
use serde_json::{Value, json};
use stowage_mcp::config::{TransportSpec, UpstreamSpec};

const T: Duration = Duration::from_secs(20);

async fn one_fixture(sink: Arc<MemSink>) -> Client {
    Client::start(vec![fixture_spec("fx", None, T)], sink, fast_config(), None).await
}

fn texts(result: &Value) -> Vec<String> {
    result["content"].as_array().unwrap().iter().filter_map(|b| b["text"].as_str().map(str::to_owned)).collect()
}

#[tokio::test]
async fn single_upstream_is_transparent_and_small_results_pass_unchanged() {
    let c = one_fixture(Arc::default()).await;
    let tools = c.request("tools/list", json!({})).await;
    let names: Vec<_> = tools["result"]["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap().to_owned()).collect();
    assert!(names.contains(&"echo".to_owned()), "{names:?}");
    let r = c.call("echo", json!({"message": "hello"})).await;
    assert_eq!(r["result"]["content"], json!([{"type": "text", "text": "hello"}]));
    assert!(r["result"].get("structuredContent").is_none(), "nothing offloaded, nothing added: {r}");
    let stats = &r["result"]["_meta"]["io.stowage/transform"];
    assert_eq!(stats["artifacts"], 0);
    assert!(stats["bytesIn"].as_u64().unwrap() > 0);
    // Unknown tools are a JSON-RPC error, not a hang.
    let bad = c.call("nope", json!({})).await;
    assert_eq!(bad["error"]["code"], -32602);
}

/// The incident this project exists for: a Tableau-style ~500 KB base64 PDF inside JSON text.
#[tokio::test]
async fn tableau_pdf_becomes_a_link_under_1kb_and_the_bytes_are_identical() {
    let sink = Arc::new(MemSink::default());
    let c = one_fixture(sink.clone()).await;
    let r = c.call("get_view_pdf", json!({})).await;
    let wire = serde_json::to_vec(&r).unwrap();
    assert!(wire.len() <= 1024, "client received {} bytes: {r}", wire.len());
    let result = &r["result"];
    let link = result["content"].as_array().unwrap().iter().find(|b| b["type"] == "resource_link").expect("a resource_link");
    assert_eq!(link["mimeType"], "application/pdf");
    let uri = link["uri"].as_str().unwrap();
    assert!(uri.starts_with("artifact://get_view_pdf_"), "{uri}");
    let asset = &result["_meta"]["io.stowage/assets"][0];
    assert_eq!(asset["artifactUri"], uri);
    assert_eq!(asset["kind"], "file");
    let id = asset["id"].as_str().unwrap();
    let items = sink.items.lock().unwrap();
    let (bytes, opts) = &items[id];
    let want = stowage_testkit::samples::pdf(375_000, "Sales Dashboard");
    assert_eq!(bytes.as_ref(), want.as_slice(), "stored bytes differ from the upstream's PDF");
    assert_eq!(asset["size"], want.len());
    assert_eq!(opts.filename.as_deref(), Some("sales.pdf"));
    assert!(opts.scope.session_id.is_some(), "artifacts are stored under the session's scope");
    // The JSON text keeps its shape, with a stub naming the URI in place of the base64.
    let inner: Value = serde_json::from_str(&texts(result)[0]).unwrap();
    assert!(inner["data"].as_str().unwrap().contains(uri), "{inner}");
    assert_eq!(inner["view"], "Sales Dashboard");
}

#[tokio::test]
async fn native_image_gets_dimensions_and_no_base64_remains() {
    let c = one_fixture(Arc::default()).await;
    let r = c.call("get_image", json!({})).await;
    let result = &r["result"];
    let s = result.to_string();
    assert!(!s.contains("\"data\""), "no image.data in default output: {s}");
    let types: Vec<_> = result["content"].as_array().unwrap().iter().map(|b| b["type"].as_str().unwrap()).collect();
    assert_eq!(types, ["text", "resource_link"]);
    let a = &result["_meta"]["io.stowage/assets"][0];
    assert_eq!((a["kind"].as_str(), a["width"].as_u64(), a["height"].as_u64()), (Some("image"), Some(64), Some(48)));
    assert_eq!(a["mimeType"], "image/png");
    assert_eq!(a["sha256"].as_str().unwrap().len(), 64);
}

#[tokio::test]
async fn output_schema_still_validates_after_rewriting() {
    let c = one_fixture(Arc::default()).await;
    let r = c.call("get_report_structured", json!({})).await;
    let sc = &r["result"]["structuredContent"];
    // The schema is closed (additionalProperties: false, required title+pdf, both strings):
    // the same keys, still strings, and no `assets` added.
    let keys: Vec<_> = sc.as_object().unwrap().keys().cloned().collect();
    assert_eq!(keys, ["title", "pdf"]);
    assert!(sc["pdf"].as_str().unwrap().contains("artifact://"), "{sc}");
    // Same bytes in structuredContent and its text twin: one artifact, listed in _meta.
    let assets = r["result"]["_meta"]["io.stowage/assets"].as_array().unwrap();
    assert_eq!(assets.len(), 1);
}

/// FastMCP's `list[dict]` shape: `structuredContent.result` is typed as an array. Offloaded,
/// it stays an array (a prefix of whole rows) that validates (`Client::call` checks every
/// result against its tool's outputSchema), the rows are stored whole in one artifact, one
/// line says "N of 2000", and `_meta` counts one artifact and says how much was kept.
#[tokio::test]
async fn a_big_list_stays_a_list_that_validates_with_one_line_and_one_artifact() {
    let sink = Arc::new(MemSink::default());
    let c = one_fixture(sink.clone()).await;
    let r = c.call("get_rows_structured", json!({"n": 2000})).await;
    let result = &r["result"];
    let rows = result["structuredContent"]["result"].as_array().expect("still an array");
    assert!(!rows.is_empty() && rows.len() < 2000, "{}", rows.len());
    assert_eq!(rows[0], json!({"id": 0, "name": "row 0", "note": "lorem ipsum dolor"}));
    let meta = &result["_meta"]["io.stowage/transform"];
    assert_eq!(meta["artifacts"], 1, "{meta}");
    assert_eq!(meta["partial"][0]["kept"], rows.len());
    assert_eq!(meta["partial"][0]["total"], 2000);
    assert_eq!(meta["partial"][0]["pointer"], "/structuredContent/result");
    assert_eq!(meta["partial"][0]["artifact"], result["_meta"]["io.stowage/assets"][0]["id"]);
    assert!(meta.get("outputSchema").is_none(), "valid as rewritten, nothing to repair: {meta}");
    let assets = result["_meta"]["io.stowage/assets"].as_array().unwrap();
    assert_eq!(assets.len(), 1);
    let id = assets[0]["id"].as_str().unwrap();
    let lines: Vec<String> = texts(result).into_iter().filter(|t| t.contains(id)).collect();
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].contains(&format!("result keeps {} of 2000 items in place", rows.len())), "{}", lines[0]);
    let stored: Value = serde_json::from_slice(&sink.items.lock().unwrap()[id].0).unwrap();
    assert_eq!(stored["result"].as_array().unwrap().len(), 2000, "the artifact is the whole object, every row in it");
    assert!(r.to_string().len() < 8_000, "{}", r.to_string().len());
    // A small list passes untouched, and is not checked (nothing was rewritten).
    let r = c.call("get_rows_structured", json!({"n": 3})).await;
    assert_eq!(r["result"]["structuredContent"]["result"].as_array().unwrap().len(), 3);
    assert_eq!(r["result"]["_meta"]["io.stowage/transform"]["artifacts"], 0);
}

#[tokio::test]
async fn a_full_store_withholds_what_it_cannot_take_and_the_rest_reaches_the_client() {
    let sink = Arc::new(MemSink { fail: true.into(), ..Default::default() });
    let c = one_fixture(sink.clone()).await;
    let r = c.call("get_view_pdf", json!({})).await;
    let result = &r["result"];
    assert_ne!(result["isError"], true, "{r}");
    let text = texts(result).join("\n");
    assert!(
        text.contains("[withheld: application/pdf binary") && text.contains("not stored: the artifact store cannot take it now"),
        "{text}"
    );
    // No server path, no base64, no link to bytes that were never kept.
    assert!(!r.to_string().contains("/nonexistent"), "the store's own message names a server path: {r}");
    assert!(!r.to_string().contains("JVBERi0"), "no inline base64 fallback");
    assert!(r.to_string().len() < 2048, "{}", r.to_string().len());
    assert!(!r.to_string().contains("artifact://"), "nothing was stored, so nothing is referenced: {r}");
    // As soon as the store takes bytes again, calls store them.
    sink.fail.store(false, std::sync::atomic::Ordering::SeqCst);
    let r = c.call("get_view_pdf", json!({})).await;
    assert!(r.to_string().contains("artifact://"), "{r}");
}

/// A long text the store cannot take (full): what stays in place is cut, and says both that it
/// was cut and that the whole was not stored, so the model does not take the cut for all there is.
#[tokio::test]
async fn a_long_text_on_a_full_store_is_cut_with_a_not_stored_note() {
    let sink = Arc::new(MemSink { fail: true.into(), ..Default::default() });
    let c = one_fixture(sink.clone()).await;
    let long: String = (0..200_000).map(|i| char::from(b'a' + (i % 26) as u8)).collect();
    let r = c.call("echo", json!({"message": long})).await;
    let result = &r["result"];
    assert_ne!(result["isError"], true, "{r}");
    let text = texts(result).join("\n");
    assert!(text.len() < 40_000, "cut: {}", text.len());
    assert!(text.starts_with("abcdefghij"), "the head stays: {}", &text[..100]);
    assert!(
        text.ends_with("[text of 200000 characters — not stored, only its start is here: the artifact store cannot take it now (full or unavailable); call the tool again later]"),
        "{}",
        &text[text.len().saturating_sub(600)..]
    );
    assert!(!r.to_string().contains("artifact://"), "nothing was stored, so nothing is referenced");
}

#[tokio::test]
async fn crash_mid_call_gives_a_clear_error_and_the_next_call_works() {
    let c = one_fixture(Arc::default()).await;
    let r = c.call("crash", json!({})).await;
    let msg = r["error"]["message"].as_str().unwrap_or_default();
    assert!(msg.contains("upstream fx") && msg.contains("exited with status 3"), "{r}");
    let mut ok = false;
    for _ in 0..50 {
        let r = c.call("echo", json!({"message": "again"})).await;
        if r["result"]["content"][0]["text"] == "again" {
            ok = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(ok, "the upstream was restarted and serves again");
}

#[tokio::test]
async fn an_upstream_that_never_answers_times_out() {
    let spec = fixture_spec("fx", None, Duration::from_millis(800));
    let c = Client::start(vec![spec], Arc::new(MemSink::default()), fast_config(), None).await;
    let started = std::time::Instant::now();
    let r = c.call("hang", json!({})).await;
    assert_eq!(r["error"]["code"], -32001, "{r}");
    assert!(r["error"]["message"].as_str().unwrap().contains("did not answer tools/call"), "{r}");
    assert!(started.elapsed() < Duration::from_secs(5));
    // Still usable afterwards.
    assert_eq!(c.call("echo", json!({"message": "x"})).await["result"]["content"][0]["text"], "x");
}

#[tokio::test]
async fn malformed_json_rpc_from_upstream_is_a_clear_error() {
    let c = one_fixture(Arc::default()).await;
    let started = std::time::Instant::now();
    let r = c.call("malformed", json!({})).await;
    let msg = r["error"]["message"].as_str().unwrap_or_default();
    assert!(msg.contains("malformed json-rpc"), "{r}");
    assert!(started.elapsed() < Duration::from_secs(5), "answered at once, not by timeout");
    assert_eq!(c.call("echo", json!({"message": "y"})).await["result"]["content"][0]["text"], "y");
}

#[tokio::test]
async fn cancellation_reaches_the_upstream_and_progress_tokens_are_mapped_back() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("fx.log");
    let c = Client::start(vec![fixture_spec("fx", Some(&log), T)], Arc::new(MemSink::default()), fast_config(), None).await;

    // Progress: the client's own token comes back, whatever the gateway used upstream.
    let r = c.request("tools/call", json!({"name": "slow", "arguments": {"ms": 100}, "_meta": {"progressToken": "my-token"}})).await;
    assert_eq!(r["result"]["content"][0]["text"], "slept 100 ms");
    let progress: Vec<Value> =
        c.notifications.lock().unwrap().iter().filter(|n| n["method"] == "notifications/progress").cloned().collect();
    assert_eq!(progress.len(), 5, "{progress:?}");
    assert!(progress.iter().all(|p| p["params"]["progressToken"] == "my-token"));

    // Cancellation: the upstream hears about it, and the client gets no response.
    let mut rx = c.send_with_id(json!(77), "tools/call", json!({"name": "slow", "arguments": {"ms": 3000}}));
    assert!(eventually(5, || read_log(&log).matches("tools/call slow").count() == 2).await);
    c.notify("notifications/cancelled", json!({"requestId": 77, "reason": "user"}));
    assert!(eventually(5, || read_log(&log).contains("notifications/cancelled")).await, "{}", read_log(&log));
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(rx.try_recv().is_err(), "a cancelled request gets no response");
}

#[tokio::test]
async fn sampling_requests_from_upstream_reach_the_client() {
    let handler: common::ServerRequestHandler = Arc::new(|method, _params| {
        assert_eq!(method, "sampling/createMessage");
        Some(json!({"role": "assistant", "content": {"type": "text", "text": "hi"}, "model": "test"}))
    });
    let c = Client::start(vec![fixture_spec("fx", None, T)], Arc::new(MemSink::default()), fast_config(), Some(handler)).await;
    let r = c.call("sample", json!({})).await;
    assert_eq!(r["result"]["content"][0]["text"], "client said: hi", "{r}");
}

/// A 2026-07-28-only upstream asks for input by returning `input_required`; a 2025-era
/// client gets an ordinary sampling request, and its answer goes back as the retry.
#[tokio::test]
async fn a_stateless_upstreams_input_required_becomes_a_request_to_an_older_client() {
    let handler: common::ServerRequestHandler = Arc::new(|method, _params| {
        assert_eq!(method, "sampling/createMessage");
        Some(json!({"role": "assistant", "content": {"type": "text", "text": "hi"}, "model": "test"}))
    });
    let mut spec = fixture_spec("fx", None, T);
    if let TransportSpec::Stdio { env, .. } = &mut spec.transport {
        env.insert("STOWAGE_FIXTURE_STATELESS".into(), "1".into());
    }
    let c = Client::start(vec![spec], Arc::new(MemSink::default()), fast_config(), Some(handler)).await;
    let r = c.call("sample", json!({})).await;
    assert_eq!(r["result"]["content"][0]["text"], "client said: hi", "{r}");
    assert!(r["result"].get("resultType").is_none_or(|t| t == "complete"), "{r}");
}

/// A 2026-07-28-only upstream announces changes only on `subscriptions/listen` streams. The
/// gateway keeps one open to it, so an older client still hears about tool list changes and
/// about the resources it subscribed to; unsubscribing stops the updates.
#[tokio::test]
async fn a_stateless_upstreams_changes_reach_an_older_client() {
    let mut spec = fixture_spec("fx", None, T);
    if let TransportSpec::Stdio { env, .. } = &mut spec.transport {
        env.insert("STOWAGE_FIXTURE_STATELESS".into(), "1".into());
    }
    let c = Client::start(vec![spec], Arc::new(MemSink::default()), fast_config(), None).await;
    let seen = |method: &'static str| {
        let notes = c.notifications.clone();
        move || notes.lock().unwrap().iter().filter(|n| n["method"] == method).count()
    };
    let r = c.call("touch", json!({})).await;
    assert_eq!(r["result"]["content"][0]["text"], "told 1 listener(s)", "{r}");
    let tools_changed = seen("notifications/tools/list_changed");
    assert!(eventually(5, || tools_changed() >= 1).await, "no tools/list_changed reached the client");

    let sub = c.request("resources/subscribe", json!({"uri": "fx://report"})).await;
    assert!(sub.get("result").is_some(), "{sub}");
    let updated = seen("notifications/resources/updated");
    // The subscription reopens the upstream's listen stream; retry until it is in place.
    for _ in 0..100 {
        if updated() >= 1 {
            break;
        }
        c.call("update", json!({"uri": "fx://report"})).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(updated() >= 1, "no resources/updated reached the client");
    let note = c.notifications.lock().unwrap().iter().find(|n| n["method"] == "notifications/resources/updated").cloned().unwrap();
    assert_eq!(note["params"]["uri"], "fx://report");
    assert!(note["params"].get("_meta").is_none(), "the upstream's subscription id leaked: {note}");
}

#[tokio::test]
async fn several_upstreams_are_namespaced_and_routed() {
    let demo = UpstreamSpec::new("demo", TransportSpec::Demo, T);
    let specs = vec![fixture_spec("fx", None, T), demo];
    let sink = Arc::new(MemSink::default());
    let c = Client::start(specs, sink.clone(), fast_config(), None).await;
    let tools = c.request("tools/list", json!({})).await;
    let names: Vec<_> = tools["result"]["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap().to_owned()).collect();
    for want in ["fx_echo", "demo_echo", "demo_get_report", "fx_get_view_pdf"] {
        assert!(names.contains(&want.to_owned()), "{want} missing from {names:?}");
    }
    assert_eq!(c.call("fx_echo", json!({"message": "a"})).await["result"]["content"][0]["text"], "a");
    assert_eq!(c.call("demo_echo", json!({"message": "b"})).await["result"]["content"][0]["text"], "b");
    // Resources route back to the server that listed them; the PDF blob is stored, and the
    // client reads a line about it under the same uri.
    let read = c.request("resources/read", json!({"uri": "demo://reports/q3.pdf"})).await;
    let entry = &read["result"]["contents"][0];
    assert_eq!(entry["uri"], "demo://reports/q3.pdf", "{read}");
    assert!(entry.get("blob").is_none() && entry["text"].as_str().unwrap().contains("artifact://"), "{read}");
    let id = entry["_meta"]["io.stowage/artifact"]["id"].as_str().unwrap();
    assert!(sink.items.lock().unwrap().get(id).is_some_and(|(b, _)| b.starts_with(b"%PDF-")), "the PDF is in the store");
    // Every heavy kind from the demo becomes a link.
    for tool in ["demo_get_report", "demo_get_chart", "demo_get_audio", "demo_get_attachment"] {
        let r = c.call(tool, json!({})).await;
        assert!(r.to_string().len() < 2048, "{tool}: {} bytes", r.to_string().len());
        assert_eq!(r["result"]["_meta"]["io.stowage/assets"].as_array().map(Vec::len), Some(1), "{tool}: {r}");
    }
    let r = c.call("demo_get_report_link", json!({})).await;
    assert_eq!(r["result"]["content"][0]["type"], "resource_link", "resource links pass through: {r}");
}

/// `[gateway.servers.NAME.transform]`: one server's results go through its own pipeline.
#[tokio::test]
async fn a_server_with_its_own_transform_config_keeps_its_images_inline() {
    let sink = Arc::new(MemSink::default());
    let config = fast_config();
    let mut rw = common::shaper(sink.clone());
    let raw = stowage_transform::TransformConfig { inline_binary_max_bytes: 1 << 20, ..Default::default() };
    let p = stowage_transform::Pipeline::new(raw, sink.clone());
    rw = rw.with_pipeline("raw", Arc::new(p));
    let specs = vec![fixture_spec("fx", None, T), fixture_spec("raw", None, T)];
    let c = Client::start_with_shaper(specs, rw, config).await;
    let inline = c.call("raw_get_image", json!({})).await;
    assert_eq!(inline["result"]["content"][0]["type"], "image", "{inline}");
    let linked = c.call("fx_get_image", json!({})).await;
    assert!(linked["result"]["content"].as_array().unwrap().iter().any(|b| b["type"] == "resource_link"), "{linked}");
}

/// A tool result of at least 256 MB passes through without loss or stall. 300 MB of JSON (a 225
/// MB PDF as base64) goes upstream → gateway → pipeline; the client gets a reference, and the
/// stored bytes are exactly the PDF.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_300_mb_result_passes_through() {
    let sink = Arc::new(MemSink::default());
    let c = Client::start(vec![fixture_spec("fx", None, Duration::from_secs(120))], sink.clone(), fast_config(), None).await;
    c.call("get_view_pdf", json!({"bytes": 225_000_000, "prepare": true})).await;
    let r = c.call("get_view_pdf", json!({"bytes": 225_000_000})).await;
    let text = r.to_string();
    assert!(text.len() < 4_000, "the client got {} bytes: {}", text.len(), &text[..text.len().min(600)]);
    let id = r["result"]["_meta"]["io.stowage/assets"][0]["id"].as_str().unwrap_or_else(|| panic!("{text}")).to_owned();
    let stored = sink.items.lock().unwrap()[&id].0.clone();
    let want = stowage_testkit::samples::pdf(225_000_000, "Sales Dashboard");
    assert!(stored == want, "the stored artifact differs from the PDF ({} vs {} bytes)", stored.len(), want.len());
}
