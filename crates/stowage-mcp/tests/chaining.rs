//! Blob chaining: `artifact://` URIs in a tool's arguments materialized by the
//! tool's `[gateway.chaining.inputs]` rule (`url`, `base64`, `text`, `path`), the URI scheme
//! policy, the fetch allow-list, ownership, and every refusal as a one-line `code: message`
//! tool error; tools that declare their blobs (AWP `_awp.blob`, `x-mcp-file`) chained through
//! read links and upload slots, with every failure of an upload. A real gateway in front of real fixture children, a
//! memory store, and the real signed-link routes on a loopback port the tools download from.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use serde_json::{Value, json};
use sha2::Digest;
use stowage_core::{ArtifactRef, ArtifactScope, PutOptions};
use stowage_mcp::chaining::InputMode;
use stowage_mcp::{CallOptions, Caller, Gateway, SessionKind, SessionMode};
use stowage_store::{ArtifactStore, ListQuery, MemoryStore, RetentionConfig};

use common::{MemSink, fast_config, shaper};
use stowage_mcp::config::{TransportSpec, UpstreamSpec};

/// A `stowage-chain-fixture` child named `name`.
fn chain_spec(name: &str) -> UpstreamSpec {
    let command = stowage_testkit::chain_fixture_bin().display().to_string();
    UpstreamSpec::new(
        name,
        TransportSpec::Stdio { command, args: vec![], env: Default::default(), cwd: None, inherit_env: false },
        Duration::from_secs(20),
    )
}

struct World {
    gw: Arc<Gateway>,
    store: Arc<dyn ArtifactStore>,
    base: String,
}

/// Upstreams `u` (url), `b` (base64), `t` (text), `p` (path) and `n` (no rule), each a chain-fixture
/// child; tools are exposed as `{upstream}_{tool}`.
async fn world(tune: impl FnOnce(&mut stowage_mcp::chaining::ChainingConfig)) -> World {
    let store: Arc<dyn ArtifactStore> = Arc::new(MemoryStore::new(RetentionConfig::default()));
    let (base, service) = common::serve_links(store.clone()).await;

    let mut config = fast_config();
    let rules = &mut config.chaining.inputs;
    rules.insert("u_echo".into(), InputMode::Url.into());
    rules.insert("b_echo".into(), InputMode::Base64.into());
    rules.insert("t_echo".into(), InputMode::Text.into());
    rules.insert("p_read_path".into(), InputMode::Path.into());
    rules.insert("t_summarize_text".into(), InputMode::Text.into());
    rules.insert("b_upload_file".into(), InputMode::Base64.into());
    tune(&mut config.chaining);
    let specs = ["u", "b", "t", "p", "n"].iter().map(|n| chain_spec(n)).collect();
    let gw = common::started(
        common::builder(specs, shaper(Arc::new(MemSink::default())), config, SessionMode::Shared)
            .links(stowage_http::Links::new(service))
            .store(store.clone()),
    )
    .await;
    // Every upstream is up; wait until the catalog lists every one's tools too (each upstream
    // is listed on its own, so the last one started is not necessarily the last one listed).
    let session = gw.open_session(SessionKind::InProcess, Caller::local(), None);
    let listed = common::eventually(20, || {
        let tools = gw.list_tools(&session);
        ["u", "b", "t", "p", "n"].iter().all(|u| tools.iter().any(|t| t["name"] == format!("{u}_echo").as_str()))
    })
    .await;
    assert!(listed, "the catalog never listed every upstream's tools");
    World { gw, store, base }
}

/// The scope a session of `user` stores under (another session of the same user).
fn scope_of(user: &str) -> ArtifactScope {
    ArtifactScope { tenant_id: None, user_id: Some(user.into()), session_id: Some("earlier-session".into()), trace_id: None }
}

impl World {
    async fn put(&self, user: &str, bytes: &[u8], mime: &str) -> ArtifactRef {
        self.store.put_bytes(bytes.to_vec().into(), PutOptions::scoped(scope_of(user)).mime(mime)).await.unwrap()
    }

    /// Calls `tool` as a fresh session of the local user (the unauthenticated caller).
    async fn call(&self, tool: &str, args: Value) -> Value {
        let session = self.gw.open_session(SessionKind::InProcess, Caller::local(), None);
        self.gw.call_tool(&session, tool, args, CallOptions::default()).await.unwrap().result
    }
}

fn text(result: &Value) -> &str {
    result["content"][0]["text"].as_str().unwrap_or_else(|| panic!("no text block in {result}"))
}

/// A refusal: `isError`, one text block `code: message`, no structuredContent.
fn refusal(result: &Value) -> (&str, &str) {
    assert_eq!(result["isError"], true, "{result}");
    assert!(result.get("structuredContent").is_none(), "{result}");
    assert_eq!(result["content"].as_array().unwrap().len(), 1, "{result}");
    text(result).split_once(": ").unwrap_or_else(|| panic!("not `code: message`: {result}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn url_mode_hands_the_tool_a_signed_read_link_that_downloads_the_bytes() {
    let w = world(|_| {}).await;
    let png = stowage_demo::samples::png(64, 64);
    // Stored by another session of the same user: chaining works across sessions.
    let a = w.put("local", &png, "image/png").await;
    let result = w.call("u_echo", json!({"message": a.id.uri()})).await;
    let link = text(&result);
    assert!(link.starts_with(&format!("{}/artifacts/{}?", w.base, a.id)), "{link}");
    let got = reqwest::get(link).await.unwrap();
    assert_eq!(got.status(), 200);
    assert_eq!(got.bytes().await.unwrap().as_ref(), &png[..]);
    // The link is read-only: a PUT with it is refused.
    let put = reqwest::Client::new().put(link).body("x").send().await.unwrap();
    assert!(put.status().is_client_error(), "{}", put.status());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn base64_text_and_path_modes_materialize_the_content() {
    let w = world(|_| {}).await;
    let doc = w.put("local", b"Quarterly report: revenue up 4%.", "text/plain").await;

    let b = w.call("b_echo", json!({"message": doc.id.uri()})).await;
    assert_eq!(base64::engine::general_purpose::STANDARD.decode(text(&b)).unwrap(), b"Quarterly report: revenue up 4%.");

    let t = w.call("t_echo", json!({"message": doc.id.uri()})).await;
    assert_eq!(text(&t), "Quarterly report: revenue up 4%.");

    // path: the tool reads a read-only local file, which is gone once the call is over.
    let p = w.call("p_read_path", json!({"path": doc.id.uri()})).await;
    assert_eq!(text(&p), "len=32 readonly=true text=Quarterly report: revenue up 4%.");
    let dirs: Vec<_> = std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with("stowage-input-"))
        .filter(|e| {
            std::fs::read_dir(e.path())
                .is_ok_and(|mut d| d.any(|f| f.is_ok_and(|f| f.file_name().to_string_lossy().contains(doc.id.as_str()))))
        })
        .collect();
    assert!(dirs.is_empty(), "the input file outlived its call: {dirs:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_users_artifact_answers_exactly_like_a_missing_one() {
    let w = world(|_| {}).await;
    let theirs = w.put("bob", b"bob's private notes", "text/plain").await;
    let missing = "artifact://local_00000000deadbeef";
    for tool in ["u_echo", "t_echo", "b_echo"] {
        let r1 = w.call(tool, json!({"message": theirs.id.uri()})).await;
        let r2 = w.call(tool, json!({"message": missing})).await;
        let (c1, m1) = refusal(&r1);
        let (c2, m2) = refusal(&r2);
        assert_eq!((c1, c2), ("artifact_not_found", "artifact_not_found"));
        // Same words once the URI itself is taken out: no existence oracle.
        assert_eq!(m1.replace(&theirs.id.uri(), "URI"), m2.replace(missing, "URI"));
    }
    // Nested arguments are found too, and one bad URI refuses the whole call.
    let mine = w.put("local", b"mine", "text/plain").await;
    let r = w.call("t_echo", json!({"message": "x", "items": [mine.id.uri(), {"deep": theirs.id.uri()}]})).await;
    assert_eq!(refusal(&r).0, "artifact_not_found");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scheme_policy_passes_https_and_refuses_the_rest() {
    let w = world(|_| {}).await;
    // https passes through as written to a url-mode tool: it fetches the URL itself.
    let r = w.call("u_echo", json!({"message": "https://example.com/cat.png"})).await;
    assert_eq!(text(&r), "https://example.com/cat.png");
    for uri in ["file:///etc/passwd", "http://169.254.169.254/latest/meta-data/", "gopher://x/y", "ftp://h/f"] {
        let r = w.call("u_echo", json!({"message": uri})).await;
        let (code, message) = refusal(&r);
        assert_eq!(code, "artifact_forbidden", "{uri}");
        assert!(message.contains("use an artifact:// URI"), "{message}");
    }
    let r = w.call("t_echo", json!({"message": "s3://company-data/payroll.csv"})).await;
    let (code, message) = refusal(&r);
    assert_eq!(code, "artifact_forbidden");
    assert!(message.contains("bucket \"company-data\" is not a bucket of this gateway's store"), "{message}");
    // Text that merely mentions a URI is not a URI, and is left alone.
    let r = w.call("t_echo", json!({"message": "see file:///etc/passwd"})).await;
    assert_eq!(text(&r), "see file:///etc/passwd");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_fetches_only_from_allowed_hosts_and_fails_clearly() {
    let w = world(|c| c.fetch_allowed_hosts = vec!["127.0.0.1".into()]).await;
    // Not on the list: refused before any connection is made.
    let r = w.call("t_echo", json!({"message": "https://internal.example/admin"})).await;
    let (code, message) = refusal(&r);
    assert_eq!(code, "artifact_forbidden");
    assert!(message.contains("fetch_allowed_hosts") && message.contains("\"internal.example\""), "{message}");
    // On the list but nothing speaks TLS there: a clear fetch error, not a hang or a crash.
    let port = w.base.rsplit(':').next().unwrap();
    let r = w.call("t_echo", json!({"message": format!("https://127.0.0.1:{port}/x")})).await;
    let (code, message) = refusal(&r);
    assert_eq!(code, "bad_request");
    assert!(message.contains("cannot fetch it for t_echo"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_without_a_rule_get_their_arguments_as_written() {
    let w = world(|_| {}).await;
    let a = w.put("local", b"hello", "text/plain").await;
    for arg in [a.id.uri(), "file:///etc/hosts".into(), "artifact://local_00000000deadbeef".into()] {
        let r = w.call("n_echo", json!({"message": arg})).await;
        assert_eq!(text(&r), arg);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversize_and_non_text_inputs_are_refused_with_the_fix() {
    let w = world(|c| c.max_materialize_bytes = 1024).await;
    let big = w.put("local", &vec![b'a'; 4096], "text/plain").await;
    let r = w.call("b_echo", json!({"message": big.id.uri()})).await;
    let (code, message) = refusal(&r);
    assert_eq!(code, "bad_request");
    assert!(message.contains("max_materialize_bytes") && message.contains("url input mode"), "{message}");
    // url mode has no such cap: the tool downloads it.
    let r = w.call("u_echo", json!({"message": big.id.uri()})).await;
    assert!(r.get("isError").is_none(), "{r}");

    let png = w.put("local", &stowage_demo::samples::png(64, 64)[..512], "image/png").await;
    let r = w.call("t_echo", json!({"message": png.id.uri()})).await;
    let (code, message) = refusal(&r);
    assert_eq!(code, "bad_request");
    assert!(message.contains("is not UTF-8 text") && message.contains("base64 or url input mode"), "{message}");
}

/// One call naming artifacts many times: what it would materialize in all, and what it would
/// write to files, is capped per call; over a cap the call is refused in one line naming it,
/// before a byte is read and before the upstream is called. Under the caps it goes through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fan_out_is_capped_per_call_before_anything_is_read() {
    let defaults = stowage_mcp::chaining::ChainingConfig::default();
    assert_eq!((defaults.max_materialize_bytes_per_call, defaults.max_file_bytes_per_call), (64 << 20, 64 << 20));
    let w = world(|c| {
        c.max_materialize_bytes_per_call = 1 << 20;
        c.max_file_bytes_per_call = 512 << 10;
    })
    .await;
    let doc = w.put("local", &vec![b'd'; 300 << 10], "text/plain").await;
    let uri = doc.id.uri();
    // Five times 300 KiB inline: over the 1 MiB a call may materialize.
    let r = w.call("b_echo", json!({"message": uri, "more": [uri, uri, uri, uri]})).await;
    let (code, message) = refusal(&r);
    assert_eq!(code, "bad_request");
    assert_eq!(
        message,
        format!(
            "b_echo's inputs would put {} bytes inline or in files (5 inputs), over the {} bytes one call may ([gateway.chaining] max_materialize_bytes_per_call); pass fewer or smaller artifacts, or give b_echo the url input mode",
            5 * (300 << 10),
            1 << 20
        )
    );
    // Three fit, and reach the tool.
    let r = w.call("b_echo", json!({"message": uri, "more": [uri, uri]})).await;
    assert!(r.get("isError").is_none(), "{r}");
    // The tool echoed the first as base64 (offloaded on its way back: it is long).
    assert_eq!(r["_meta"]["io.stowage/assets"][0]["size"], (300u64 << 10).div_ceil(3) * 4, "{r}");
    // Two as files: over the 512 KiB a call may write.
    let r = w.call("p_read_path", json!({"path": uri, "also": uri})).await;
    let (code, message) = refusal(&r);
    assert_eq!(code, "bad_request");
    assert!(message.contains(&format!("would write {} bytes of files (2 inputs)", 2 * (300 << 10))), "{message}");
    assert!(message.contains("[gateway.chaining] max_file_bytes_per_call"), "{message}");
    // A detected input (no rule) counts the same: one artifact past the call's cap.
    let big = w.put("local", &vec![b'b'; 1536 << 10], "application/octet-stream").await;
    let r = w.call("n_upload_file", json!({"content_base64": big.id.uri(), "name": "big.bin"})).await;
    let (code, message) = refusal(&r);
    assert_eq!(code, "bad_request");
    assert!(message.starts_with("n_upload_file's inputs would put 1572864 bytes inline or in files (1 input)"), "{message}");
    // url mode reads nothing and is not capped.
    let r = w.call("u_echo", json!({"message": uri, "more": [uri, uri, uri, uri, uri]})).await;
    assert!(r.get("isError").is_none(), "{r}");
}

impl World {
    /// Every artifact the local user holds.
    async fn local_artifacts(&self) -> Vec<ArtifactRef> {
        let q = ListQuery { owner: Some(scope_of("local").owner()), session_id: None, trace_id: None, cursor: None, limit: 0 };
        self.store.list(q).await.unwrap().items
    }
}

/// What the gateway injected for output blob `field`.
fn blob<'a>(result: &'a Value, field: &str) -> &'a Value {
    &result["_meta"]["io.stowage/blobs"][field]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn declared_blobs_are_shown_to_the_model_as_uris_and_optional_outputs() {
    let w = world(|_| {}).await;
    let session = w.gw.open_session(SessionKind::InProcess, Caller::local(), None);
    let tools = w.gw.list_tools(&session);
    let def = |n: &str| tools.iter().find(|t| t["name"] == n).unwrap_or_else(|| panic!("{n} not listed")).clone();
    let gen_def = def("n_generate_image");
    let props = &gen_def["inputSchema"]["properties"];
    assert_eq!(gen_def["inputSchema"]["required"], json!(["prompt"]), "the output blob is not required of the model");
    assert!(props["result"]["properties"].get("url").is_none() && props["result"]["properties"].get("accept").is_some());
    let rb = def("n_remove_background");
    let props = &rb["inputSchema"]["properties"];
    assert_eq!(props["image"]["required"], json!(["uri"]));
    assert_eq!(props["image"]["type"], "object");
    assert!(props["image"]["description"].as_str().unwrap().starts_with("The image to clean up"));
    // A tool that declares nothing is listed as it is.
    assert_eq!(def("n_summarize_text")["inputSchema"]["properties"], json!({"text": {"type": "string"}}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chain_across_upstreams_and_sessions_keeps_only_references_in_the_transcript() {
    let w = world(|_| {}).await;
    let mut transcript = Vec::new();

    // 1. generate_image (upstream n, AWP) writes to an output slot.
    let gen_result = w.call("n_generate_image", json!({"prompt": "a red square", "result": {"accept": "image/png"}})).await;
    let generated = blob(&gen_result, "result").clone();
    let png = stowage_demo::samples::png(64, 48);
    assert_eq!(generated["contentType"], "image/png", "{gen_result}");
    assert_eq!(generated["size"], png.len());
    assert_eq!(generated["sha256"], hex::encode(sha2::Sha256::digest(&png)));
    let uri = generated["uri"].as_str().unwrap().to_owned();
    assert!(uri.starts_with("artifact://n_generate_image_"), "{uri}");
    assert_eq!(gen_result["structuredContent"]["result"]["uri"], uri.as_str(), "injected where programs read it too");
    assert!(text(&gen_result).contains("generated") && gen_result.to_string().contains(&format!("result: {uri} (image/png")));
    transcript.push(gen_result);

    // 2. remove_background (upstream u, x-mcp-file), in another session of the same user: reads
    //    the input through a signed link and writes another output.
    let rb = w.call("u_remove_background", json!({"image": {"uri": uri}, "result": {}})).await;
    assert!(text(&rb).starts_with(&format!("removed the background of a {}-byte PNG; upload HTTP 20", png.len())), "{rb}");
    let cleaned = blob(&rb, "result")["uri"].as_str().unwrap().to_owned();
    assert_ne!(cleaned, uri);
    transcript.push(rb);

    // 3. upload_file takes base64 only: the artifact is materialized as base64.
    let up = w.call("b_upload_file", json!({"content_base64": cleaned, "name": "cat.png"})).await;
    let small = stowage_demo::samples::png(32, 24);
    assert_eq!(text(&up), format!("uploaded {} bytes, sha256 {}", small.len(), hex::encode(sha2::Sha256::digest(&small))));
    transcript.push(up);

    // 4. summarize_text takes inline text only: a text artifact materialized as text.
    let doc = w.put("local", "The quarterly report says revenue grew. ".repeat(2000).as_bytes(), "text/plain").await;
    let sum = w.call("t_summarize_text", json!({"text": doc.id.uri()})).await;
    assert_eq!(text(&sum), "summary of 80000 chars: The quarterly report say");
    transcript.push(sum);

    // The model saw references only: no image bytes, no 80 KB document, a few KB in all.
    let seen = serde_json::to_string(&transcript).unwrap();
    assert!(!seen.contains("iVBOR") && !seen.contains("revenue grew. The"), "{seen}");
    assert!(seen.len() < 4_000, "the transcript is {} bytes: {seen}", seen.len());
    assert_eq!(w.local_artifacts().await.len(), 3, "two images and the document");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_declared_input_that_is_missing_foreign_expired_or_refused_stops_the_call() {
    let w = world(|_| {}).await;
    let theirs = w.put("bob", &stowage_demo::samples::png(8, 8), "image/png").await;
    let before = w.local_artifacts().await.len();
    for uri in [theirs.id.uri(), "artifact://n_generate_image_00000000deadbeef".into()] {
        let r = w.call("n_remove_background", json!({"image": {"uri": uri}, "result": {}})).await;
        assert_eq!(refusal(&r).0, "artifact_not_found", "{r}");
    }
    for (uri, code) in
        [("file:///etc/passwd", "artifact_forbidden"), ("s3://other/x.png", "artifact_forbidden"), ("cat.png", "bad_request")]
    {
        let r = w.call("n_remove_background", json!({"image": {"uri": uri}})).await;
        assert_eq!(refusal(&r).0, code, "{uri}: {r}");
    }
    let r = w.call("n_remove_background", json!({"image": {"url": "artifact://x"}})).await;
    let (code, message) = refusal(&r);
    assert_eq!(code, "bad_request");
    assert!(message.contains("needs {\"uri\""), "{message}");
    // Expired: stored with a one-second lifetime.
    let mut opts = PutOptions::scoped(scope_of("local")).mime("image/png");
    opts.ttl = Some(Duration::from_secs(1));
    let short = w.store.put_bytes(stowage_demo::samples::png(9, 9).into(), opts).await.unwrap();
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let r = w.call("n_remove_background", json!({"image": {"uri": short.id.uri()}})).await;
    let (code, _) = refusal(&r);
    assert!(code == "artifact_not_found" || code == "artifact_url_expired", "{r}");
    // No slot was written for any refused call.
    assert!(w.local_artifacts().await.len() <= before + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upload_failures_leave_no_artifact_and_the_result_says_so() {
    let w = world(|c| c.max_output_bytes = 20_000).await;
    let not_written = |r: &Value| {
        assert_eq!(blob(r, "result")["error"], "slot_not_written", "{r}");
        assert!(r.to_string().contains("result: not written"), "{r}");
    };
    // Oversize: the slot refuses the body (413), nothing is stored.
    let r = w.call("n_generate_image", json!({"prompt": "big", "bytes": 50_000})).await;
    assert!(text(&r).contains("HTTP 413"), "{r}");
    not_written(&r);
    // Wrong content type for what the slot accepts (image/png): 415.
    let r = w.call("n_generate_image", json!({"prompt": "x", "content_type": "text/html"})).await;
    assert!(text(&r).contains("HTTP 415"), "{r}");
    not_written(&r);
    // Never written: the result says so.
    let r = w.call("n_generate_image", json!({"prompt": "x", "skip_upload": true})).await;
    not_written(&r);
    assert!(w.local_artifacts().await.is_empty());
    // A tool that answers first and uploads later: the slot was closed with the call.
    let r = w.call("n_generate_image", json!({"prompt": "x", "upload_after_ms": 200})).await;
    not_written(&r);
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(w.local_artifacts().await.is_empty(), "an output appeared after the result said there was none");
    // A slot is single use: the second PUT is refused, the first upload is the artifact.
    let r = w.call("n_generate_image", json!({"prompt": "x", "upload_twice": true})).await;
    assert_eq!(text(&r), "generated; second upload HTTP 409", "{r}");
    assert_eq!(blob(&r, "result")["size"], stowage_demo::samples::png(64, 48).len());
    assert_eq!(w.local_artifacts().await.len(), 1);
    // A tool that crashes after sending half its upload: the call fails, no partial artifact.
    let session = w.gw.open_session(SessionKind::InProcess, Caller::local(), None);
    let crashed =
        w.gw.call_tool(&session, "n_generate_image", json!({"prompt": "x", "crash_mid_upload": true}), CallOptions::default()).await;
    assert!(crashed.is_err() || crashed.as_ref().unwrap().result["isError"] == true, "{crashed:?}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(w.local_artifacts().await.len(), 1, "the half upload became an artifact");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_session_of_the_same_user_is_forbidden_only_where_sessions_are_isolated() {
    let w = world(|_| {}).await;
    // A store that keeps each session's artifacts to itself.
    let isolated: Arc<dyn ArtifactStore> = Arc::new(MemoryStore::builder().isolation(stowage_store::Isolation::Session).build());
    let gw = {
        let mut config = fast_config();
        config.chaining.inputs.insert("echo".into(), InputMode::Text.into());
        let b = common::builder(vec![chain_spec("solo")], shaper(Arc::new(MemSink::default())), config, SessionMode::Shared);
        common::started(b.store(isolated.clone())).await
    };
    let earlier = isolated.put_bytes(b"from an earlier session".to_vec().into(), PutOptions::scoped(scope_of("local"))).await.unwrap();
    let bobs = isolated.put_bytes(b"bob's".to_vec().into(), PutOptions::scoped(scope_of("bob"))).await.unwrap();
    let session = gw.open_session(SessionKind::InProcess, Caller::local(), None);
    let call = |args| gw.call_tool(&session, "echo", args, CallOptions::default());
    let r = call(json!({"message": earlier.id.uri()})).await.unwrap().result;
    let (code, message) = refusal(&r);
    assert_eq!(code, "artifact_forbidden");
    assert!(message.contains("isolate_sessions"), "{message}");
    // Another user's artifact is still exactly a missing one.
    let r = call(json!({"message": bobs.id.uri()})).await.unwrap().result;
    assert_eq!(refusal(&r).0, "artifact_not_found");
    // The session that stored it can use it.
    let mine = isolated.put_bytes(b"this session's".to_vec().into(), PutOptions::scoped(session.scope.clone())).await.unwrap();
    let r = call(json!({"message": mine.id.uri()})).await.unwrap().result;
    assert_eq!(text(&r), "this session's");
    // Under user isolation (the default), every session of the user reaches it.
    let r = w.call("t_echo", json!({"message": w.put("local", b"shared", "text/plain").await.id.uri()})).await;
    assert_eq!(text(&r), "shared");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_augmented_call_with_output_blobs_is_refused_plainly() {
    let w = world(|_| {}).await;
    let c = common::Client::connect(w.gw.clone(), None, json!({})).await;
    let params = json!({"name": "n_generate_image", "arguments": {"prompt": "x"}, "task": {"ttl": 60000}});
    let r = c.request("tools/call", params).await;
    let (code, message) = refusal(&r["result"]);
    assert_eq!(code, "bad_request");
    assert!(message.contains("call it without \"task\""), "{message}");
    // The upstream was not called, so nothing was written.
    assert!(w.local_artifacts().await.is_empty());
}

/// Chaining with no configuration (docs/results.md, "With no configuration"): `n_upload_file` declares
/// nothing and has no rule, but its `content_base64` is detected from the schema; a URI there
/// is filled as the caller, and refused exactly as configured chaining refuses it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_detected_input_is_filled_as_the_caller_and_refused_like_a_configured_one() {
    use stowage_mcp::chaining::{Rule, ToolRule};
    use stowage_mcp::events::GatewayEvent;
    let w = world(|c| {
        c.inputs.insert("p_upload_file".into(), ToolRule::Tool(Rule::Off));
    })
    .await;
    let session = w.gw.open_session(SessionKind::InProcess, Caller::local(), None);
    let tools = w.gw.list_tools(&session);
    let prop = |tool: &str| tools.iter().find(|t| t["name"] == tool).unwrap()["inputSchema"]["properties"]["content_base64"].clone();
    let told = prop("n_upload_file")["description"].as_str().unwrap_or_default().to_owned();
    assert!(told.contains("artifact:// URI"), "{told}");
    assert_eq!(prop("p_upload_file"), json!({"type": "string"}), "\"off\": shown as listed");

    let mut bus = w.gw.events().subscribe();
    let pdf = stowage_demo::samples::pdf(6_000, "Invoice");
    let mine = w.put("local", &pdf, "application/pdf").await;
    let r = w.call("n_upload_file", json!({"content_base64": mine.id.uri()})).await;
    assert_eq!(text(&r), format!("uploaded {} bytes, sha256 {}", pdf.len(), hex::encode(sha2::Sha256::digest(&pdf))), "{r}");
    let filled = &r["_meta"]["io.stowage/inputs"][0];
    assert_eq!((filled["form"].as_str(), filled["size"].as_u64()), (Some("base64"), Some(pdf.len() as u64)), "{r}");
    // The event says what was filled, never the bytes.
    let event = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            if let Ok(e) = bus.recv().await
                && let GatewayEvent::InputsFilled { tool, inputs, .. } = &*e
            {
                return (tool.clone(), serde_json::to_value(inputs).unwrap());
            }
        }
    })
    .await
    .expect("no inputs_filled event");
    assert_eq!(event.0, "n_upload_file");
    assert_eq!(event.1[0]["uri"], mine.id.uri());
    assert!(!event.1.to_string().contains("JVBERi0"), "the bytes reached the event: {}", event.1);

    // "off": the URI reaches the tool as written.
    let r = w.call("p_upload_file", json!({"content_base64": mine.id.uri()})).await;
    assert!(text(&r).starts_with("content_base64 is not base64"), "{r}");
    // Real base64 the model wrote itself is left alone.
    let r = w.call("n_upload_file", json!({"content_base64": "aGVsbG8="})).await;
    assert!(text(&r).starts_with("uploaded 5 bytes"), "{r}");

    // Another user's artifact answers exactly like a missing one.
    // (Other bytes: the same content would be the same artifact id, which the caller holds.)
    let theirs = w.put("bob", &[&pdf[..], b"\n%bob"].concat(), "application/pdf").await;
    let missing = "artifact://local_00000000deadbeef";
    let r1 = w.call("n_upload_file", json!({"content_base64": theirs.id.uri()})).await;
    let r2 = w.call("n_upload_file", json!({"content_base64": missing})).await;
    let ((c1, m1), (c2, m2)) = (refusal(&r1), refusal(&r2));
    assert_eq!((c1, c2), ("artifact_not_found", "artifact_not_found"));
    assert_eq!(m1.replace(&theirs.id.uri(), "URI"), m2.replace(missing, "URI"));
    // Other schemes follow configured chaining's policy: nothing is fetched from a host not
    // on the allow-list, and file:// is refused.
    for (uri, needle) in [("https://internal.example/a.pdf", "fetch_allowed_hosts"), ("file:///etc/passwd", "file:// scheme")] {
        let r = w.call("n_upload_file", json!({"content_base64": uri})).await;
        let (code, message) = refusal(&r);
        assert_eq!(code, "artifact_forbidden", "{uri}");
        assert!(message.contains(needle), "{message}");
    }
    // Expired: stored with a one-second lifetime.
    let mut opts = PutOptions::scoped(scope_of("local")).mime("application/pdf");
    opts.ttl = Some(Duration::from_secs(1));
    let short = w.store.put_bytes([&pdf[..], b"\n%short"].concat().into(), opts).await.unwrap();
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let r = w.call("n_upload_file", json!({"content_base64": short.id.uri()})).await;
    let (code, _) = refusal(&r);
    assert!(code == "artifact_not_found" || code == "artifact_url_expired", "{r}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_false_leaves_undeclared_tools_as_written() {
    let w = world(|c| c.auto = false).await;
    let session = w.gw.open_session(SessionKind::InProcess, Caller::local(), None);
    let tools = w.gw.list_tools(&session);
    let n = tools.iter().find(|t| t["name"] == "n_upload_file").unwrap();
    assert_eq!(n["inputSchema"]["properties"]["content_base64"], json!({"type": "string"}));
    let mine = w.put("local", b"%PDF-1.4", "application/pdf").await;
    let r = w.call("n_upload_file", json!({"content_base64": mine.id.uri()})).await;
    assert!(text(&r).starts_with("content_base64 is not base64"), "{r}");
    // A configured rule still applies.
    let r = w.call("b_upload_file", json!({"content_base64": mine.id.uri()})).await;
    assert!(text(&r).starts_with("uploaded 8 bytes"), "{r}");
}
