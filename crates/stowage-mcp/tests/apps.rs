//! MCP Apps through the gateway, over its stdio transport, with the fixture upstream, a memory
//! store and the signed-link routes on a loopback port: only a client that declares the
//! extension sees the view and its tools; `artifact_view` and `artifact_fetch` read as the
//! caller; uploads by chunks and by link become the caller's artifact only when exactly the
//! declared bytes arrived; the link routes answer CORS. (The view itself, in a browser host,
//! and the Python client's view of all this are in `crates/stowage/tests/playground.rs`.)

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use common::{Client, MemSink, fast_config, fixture_spec, shaper};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use stowage_core::{ArtifactScope, PutOptions};
use stowage_mcp::apps::{Apps, AppsConfig, VIEWER_URI, Viewer};
use stowage_mcp::config::SessionMode;
use stowage_store::{ArtifactStore, MemoryStore, RetentionConfig};

const T: Duration = Duration::from_secs(20);

struct World {
    gw: Arc<stowage_mcp::Gateway>,
    store: Arc<dyn ArtifactStore>,
    base: String,
}

async fn world(config: AppsConfig) -> World {
    let store: Arc<dyn ArtifactStore> = Arc::new(MemoryStore::new(RetentionConfig::default()));
    let (base, service) = common::serve_links(store.clone()).await;
    let viewer = Viewer {
        html: "<!doctype html><title>viewer</title>".into(),
        assets: vec![("pdfjs", "export const x = 1;")],
        ui_meta: json!({"csp": {}, "prefersBorder": true}),
    };
    let gw = common::started(
        common::builder(vec![fixture_spec("fx", None, T)], shaper(Arc::new(MemSink::default())), fast_config(), SessionMode::Shared)
            .links(stowage_http::Links::new(service))
            .store(store.clone())
            .apps(Apps::new(config, viewer)),
    )
    .await;
    World { gw, store, base }
}

fn apps_client_caps() -> Value {
    json!({"extensions": {"io.modelcontextprotocol/ui": {"mimeTypes": ["text/html;profile=mcp-app"]}}})
}

fn local(session: Option<&str>) -> ArtifactScope {
    ArtifactScope { tenant_id: None, user_id: Some(stowage_mcp::LOCAL_USER.into()), session_id: session.map(str::to_owned), trace_id: None }
}

fn sha(b: &[u8]) -> String {
    hex::encode(Sha256::digest(b))
}

fn b64(b: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(b)
}

/// The tool's `structuredContent`, asserting it succeeded.
fn ok(r: &Value) -> &Value {
    assert!(r.get("error").is_none() && r["result"]["isError"] != true, "{r}");
    &r["result"]["structuredContent"]
}

fn error_text(r: &Value) -> String {
    assert_eq!(r["result"]["isError"], true, "{r}");
    r["result"]["content"][0]["text"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn only_a_client_that_declares_the_extension_sees_the_view_and_its_tools() {
    let w = world(AppsConfig { attach_viewer: vec!["get_im*".into()], ..AppsConfig::default() }).await;
    let apps = Client::connect(w.gw.clone(), None, apps_client_caps()).await;
    let plain = Client::connect(w.gw.clone(), None, json!({})).await;

    let tools = apps.request("tools/list", json!({})).await;
    let tools = tools["result"]["tools"].as_array().unwrap();
    let by_name = |n: &str| tools.iter().find(|t| t["name"] == n).cloned();
    let view = by_name("artifact_view").expect("artifact_view is listed");
    assert_eq!(view["_meta"]["ui"]["resourceUri"], VIEWER_URI);
    assert_eq!(view["_meta"]["ui/resourceUri"], VIEWER_URI);
    assert!(view["_meta"]["ui"].get("visibility").is_none(), "the model may call it: {view}");
    for app_only in ["artifact_fetch", "artifact_upload_begin", "artifact_upload_chunk", "artifact_upload_commit", "artifact_viewer_asset"]
    {
        let t = by_name(app_only).unwrap_or_else(|| panic!("{app_only} is listed"));
        assert_eq!(t["_meta"]["ui"]["visibility"], json!(["app"]), "{t}");
    }
    // [apps] attach_viewer: the fixture's get_image shows its results in the viewer.
    assert_eq!(by_name("get_image").unwrap()["_meta"]["ui"]["resourceUri"], VIEWER_URI);
    assert!(by_name("echo").unwrap().get("_meta").is_none_or(|m| m.get("ui").is_none()));

    let listed = apps.request("resources/list", json!({})).await;
    let entry =
        listed["result"]["resources"].as_array().unwrap().iter().find(|r| r["uri"] == VIEWER_URI).cloned().expect("the view is listed");
    assert_eq!(entry["mimeType"], "text/html;profile=mcp-app");
    let read = apps.request("resources/read", json!({"uri": VIEWER_URI})).await;
    let content = &read["result"]["contents"][0];
    assert_eq!(
        (content["mimeType"].as_str(), content["text"].as_str()),
        (Some("text/html;profile=mcp-app"), Some("<!doctype html><title>viewer</title>"))
    );
    assert_eq!(content["_meta"]["ui"]["prefersBorder"], true);

    // The other client: the server declares the extension, and offers it nothing of it.
    let plain_tools = plain.request("tools/list", json!({})).await;
    let names: Vec<&str> = plain_tools["result"]["tools"].as_array().unwrap().iter().filter_map(|t| t["name"].as_str()).collect();
    assert!(
        !names.iter().any(|n| n.starts_with("artifact_view") || n.starts_with("artifact_upload") || *n == "artifact_fetch"),
        "{names:?}"
    );
    let get_image = plain_tools["result"]["tools"].as_array().unwrap().iter().find(|t| t["name"] == "get_image").unwrap();
    assert!(get_image.get("_meta").is_none_or(|m| m.get("ui").is_none()), "{get_image}");
    let plain_listed = plain.request("resources/list", json!({})).await;
    assert!(!plain_listed.to_string().contains(VIEWER_URI));
    assert!(plain.request("resources/read", json!({"uri": VIEWER_URI})).await.get("error").is_some());
    let call = plain.request("tools/call", json!({"name": "artifact_view", "arguments": {"ids": ["x"]}})).await;
    assert!(call.get("error").is_some() || call["result"]["isError"] == true, "{call}");
}

#[tokio::test]
async fn view_and_fetch_read_as_the_caller_and_chunks_reassemble() {
    let w = world(AppsConfig::default()).await;
    let apps = Client::connect(w.gw.clone(), None, apps_client_caps()).await;
    let data: Vec<u8> = (0..2_500_000u32).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
    let mut opts = PutOptions::scoped(local(Some("other-session"))).mime("application/octet-stream");
    opts.filename = Some("blob.bin".into());
    let mine = w.store.put_bytes(data.clone().into(), opts).await.unwrap();
    let someone = ArtifactScope { user_id: Some("someone-else".into()), ..local(None) };
    let theirs = w.store.put_bytes(b"not yours".to_vec().into(), PutOptions::scoped(someone)).await.unwrap();

    let r = apps.call("artifact_view", json!({"ids": [mine.uri]})).await;
    let text = r["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.starts_with("Showing 1 artifact to the user: artifact://") && text.contains("blob.bin"), "{text}");
    let meta = &ok(&r)["artifacts"][0];
    assert_eq!((meta["sha256"].as_str(), meta["size_bytes"].as_u64()), (Some(mine.sha256.as_str()), Some(2_500_000)));
    assert!(meta["url"].as_str().unwrap().starts_with(&w.base), "{meta}");

    // Chunks of at most 1 MiB reassemble to the artifact.
    let mut got = Vec::new();
    loop {
        let r = apps.call("artifact_fetch", json!({"id": mine.id.to_string(), "offset": got.len(), "length": 4_000_000})).await;
        let s = ok(&r);
        let chunk = base64::engine::general_purpose::STANDARD.decode(s["data"].as_str().unwrap()).unwrap();
        assert!(chunk.len() <= 1 << 20);
        assert_eq!(s["total"], 2_500_000);
        got.extend(chunk);
        if s["eof"] == true {
            break;
        }
    }
    assert_eq!(sha(&got), mine.sha256);
    let past = apps.call("artifact_fetch", json!({"id": mine.uri, "offset": 3_000_000})).await;
    assert_eq!((ok(&past)["data"].as_str(), ok(&past)["eof"].as_bool()), (Some(""), Some(true)));

    // Another user's id, and one that never existed, answer alike.
    let e1 = error_text(&apps.call("artifact_view", json!({"ids": [theirs.uri]})).await);
    let e2 = error_text(&apps.call("artifact_fetch", json!({"id": theirs.id.to_string()})).await);
    let e3 = error_text(&apps.call("artifact_fetch", json!({"id": "art_0000000000000000"})).await);
    assert!(
        e1.contains("artifact_not_found") && e2.starts_with("artifact_not_found") && e3.starts_with("artifact_not_found"),
        "{e1} / {e2} / {e3}"
    );
    assert_eq!(e2.replace(&theirs.id.to_string(), "X"), e3.replace("art_0000000000000000", "X"));
    assert!(error_text(&apps.call("artifact_view", json!({"ids": []})).await).contains("1 to 20"));
    let asset = apps.call("artifact_viewer_asset", json!({"name": "pdfjs"})).await;
    assert_eq!(ok(&asset)["text"], "export const x = 1;");
    assert!(error_text(&apps.call("artifact_viewer_asset", json!({"name": "nope"})).await).contains("the viewer has pdfjs"));
}

#[tokio::test]
async fn uploads_by_chunks_and_by_link_keep_only_what_was_declared() {
    let w = world(AppsConfig { max_upload_bytes: 8 << 20, ..AppsConfig::default() }).await;
    let apps = Client::connect(w.gw.clone(), None, apps_client_caps()).await;
    let file: Vec<u8> = (0..3_000_000u32).map(|i| (i % 253) as u8).collect();
    let begin =
        |size: usize, digest: String| json!({"name": "scan.bin", "mimeType": "application/octet-stream", "size": size, "sha256": digest});

    // By chunks.
    let r = apps.call("artifact_upload_begin", begin(file.len(), sha(&file))).await;
    let up = ok(&r)["upload"].as_str().unwrap().to_owned();
    assert_eq!(ok(&r)["chunk_bytes"], 1 << 20);
    for (i, chunk) in file.chunks(1 << 20).enumerate() {
        let r = apps.call("artifact_upload_chunk", json!({"upload": up, "offset": i << 20, "data": b64(chunk)})).await;
        ok(&r);
    }
    let done = apps.call("artifact_upload_commit", json!({"upload": up})).await;
    let artifact = &ok(&done)["artifact"];
    assert_eq!(artifact["sha256"].as_str(), Some(sha(&file).as_str()));
    let uri = artifact["uri"].as_str().unwrap();
    assert!(done["result"]["content"][0]["text"].as_str().unwrap().starts_with(&format!("stored as {uri}")), "{done}");
    assert_eq!(done["result"]["content"][1]["type"], "resource_link");
    // It is the caller's: artifact_fetch reads it back whole.
    let back = apps.call("artifact_fetch", json!({"id": uri, "length": 10})).await;
    assert_eq!(ok(&back)["total"], 3_000_000);

    // Bad uploads leave nothing behind.
    let before = w.store.list(Default::default()).await.unwrap().items.len();
    let r = apps.call("artifact_upload_begin", begin(11, "0".repeat(64))).await;
    let up = ok(&r)["upload"].as_str().unwrap().to_owned();
    ok(&apps.call("artifact_upload_chunk", json!({"upload": up, "offset": 0, "data": b64(b"hello world")})).await);
    assert!(error_text(&apps.call("artifact_upload_commit", json!({"upload": up})).await).contains("not the declared"));
    assert!(error_text(&apps.call("artifact_upload_commit", json!({"upload": up})).await).contains("no upload"), "the handle is gone");
    let r = apps.call("artifact_upload_begin", begin(11, sha(b"hello world"))).await;
    let up = ok(&r)["upload"].as_str().unwrap().to_owned();
    assert!(
        error_text(&apps.call("artifact_upload_chunk", json!({"upload": up, "offset": 5, "data": b64(b" world")})).await).contains("gap")
    );
    assert!(
        error_text(&apps.call("artifact_upload_chunk", json!({"upload": up, "offset": 0, "data": b64(b"hello world!!")})).await)
            .contains("declared size")
    );
    assert!(error_text(&apps.call("artifact_upload_begin", begin(9 << 20, sha(b"x"))).await).contains("[apps] max_upload_bytes"));
    assert!(error_text(&apps.call("artifact_upload_begin", begin(3, "zz".into())).await).contains("64 hex digits"));
    assert!(
        error_text(&apps.call("artifact_upload_chunk", json!({"upload": "up_nope", "offset": 0, "data": ""})).await).contains("no upload")
    );
    assert_eq!(w.store.list(Default::default()).await.unwrap().items.len(), before, "nothing was kept");

    // By link: one PUT to the slot, then the commit checks what arrived.
    let http = reqwest::Client::new();
    let small = b"a file that went by link".to_vec();
    let r = apps.call("artifact_upload_begin", begin(small.len(), sha(&small))).await;
    let (up, url) = (ok(&r)["upload"].as_str().unwrap().to_owned(), ok(&r)["url"].as_str().unwrap().to_owned());
    // The view runs in a sandboxed frame (an opaque origin): the route answers its preflight.
    let pre = http
        .request(reqwest::Method::OPTIONS, &url)
        .header("origin", "null")
        .header("access-control-request-method", "PUT")
        .header("access-control-request-headers", "content-type")
        .send()
        .await
        .unwrap();
    assert!(pre.status().is_success(), "{}", pre.status());
    assert_eq!(pre.headers()["access-control-allow-origin"], "*");
    assert!(pre.headers()["access-control-allow-methods"].to_str().unwrap().contains("PUT"));
    assert!(pre.headers().get("access-control-allow-credentials").is_none());
    let put = http
        .put(&url)
        .header("origin", "null")
        .header("content-type", "application/octet-stream")
        .body(small.clone())
        .send()
        .await
        .unwrap();
    // Staged, not stored: the commit makes it an artifact.
    assert_eq!(put.status(), 202);
    assert_eq!(put.headers()["access-control-allow-origin"], "*");
    let listed = w.store.list(Default::default()).await.unwrap().items;
    assert!(!listed.iter().any(|a| a.sha256 == sha(&small)), "a PUT alone is no artifact: {listed:?}");
    let done = apps.call("artifact_upload_commit", json!({"upload": up})).await;
    let artifact = ok(&done)["artifact"].clone();
    assert_eq!(artifact["sha256"].as_str(), Some(sha(&small).as_str()));
    let get = http.get(artifact["url"].as_str().unwrap()).header("origin", "null").send().await.unwrap();
    assert_eq!(get.headers()["access-control-allow-origin"], "*");
    assert_eq!(get.bytes().await.unwrap(), small);
    // A PUT of something else than declared is refused and kept nowhere.
    let r = apps.call("artifact_upload_begin", begin(5, sha(b"right"))).await;
    let (up, url) = (ok(&r)["upload"].as_str().unwrap().to_owned(), ok(&r)["url"].as_str().unwrap().to_owned());
    let before = w.store.list(Default::default()).await.unwrap().items.len();
    assert_eq!(http.put(&url).body(b"wrong".to_vec()).send().await.unwrap().status(), 400);
    assert!(error_text(&apps.call("artifact_upload_commit", json!({"upload": up})).await).contains("nothing was kept"));
    assert_eq!(w.store.list(Default::default()).await.unwrap().items.len(), before, "nothing of the mismatched upload");
}
