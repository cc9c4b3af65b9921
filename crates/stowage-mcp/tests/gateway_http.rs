//! The Streamable HTTP downstream: sessions, SSE and JSON answers, the stateless revision,
//! DNS-rebinding protection, metrics, and that a client hanging up cancels the upstream call.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::{MemSink, eventually, fast_config, fixture_spec, read_log, shaper};
use futures::StreamExt;
use serde_json::{Value, json};
use stowage_mcp::Gateway;

async fn start(log: Option<&std::path::Path>) -> (Arc<Gateway>, String) {
    start_with(log, fast_config()).await
}

async fn start_with(log: Option<&std::path::Path>, config: stowage_mcp::config::GatewayConfig) -> (Arc<Gateway>, String) {
    start_in_front_of(fixture_spec("fx", log, Duration::from_secs(20)), config).await
}

/// A gateway over HTTP in front of one upstream, ready; returns it and its `/mcp` URL.
async fn start_in_front_of(spec: stowage_mcp::config::UpstreamSpec, config: stowage_mcp::config::GatewayConfig) -> (Arc<Gateway>, String) {
    let gw = common::start_gateway(vec![spec], shaper(Arc::new(MemSink::default())), config, stowage_mcp::SessionMode::Shared).await;
    let addr = stowage_mcp::run::spawn_http(gw.clone(), "127.0.0.1:0").await.unwrap();
    (gw, format!("http://{addr}/mcp"))
}

fn rpc(id: u64, method: &str, params: Value) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string()
}

/// Posts and returns (status, session id, messages): SSE events or the JSON body.
async fn post(url: &str, sid: Option<&str>, accept: &str, body: String) -> (u16, Option<String>, Vec<Value>) {
    let mut req = reqwest::Client::new().post(url).header("content-type", "application/json").header("accept", accept).body(body);
    if let Some(s) = sid {
        req = req.header("mcp-session-id", s);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    let sid = resp.headers().get("mcp-session-id").map(|v| v.to_str().unwrap().to_owned());
    let sse = resp.headers().get("content-type").is_some_and(|c| c.to_str().unwrap().starts_with("text/event-stream"));
    let text = resp.text().await.unwrap();
    let msgs = if sse {
        // The priming event (an id and empty data) carries no message.
        text.lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .filter(|d| !d.trim().is_empty())
            .map(|d| serde_json::from_str(d.trim_start()).unwrap())
            .collect()
    } else if text.is_empty() {
        vec![]
    } else {
        vec![serde_json::from_str(&text).unwrap()]
    };
    (status, sid, msgs)
}

const BOTH: &str = "application/json, text/event-stream";

/// POSTs `body` in session `sid` and returns the response unread, to stream it.
async fn post_streaming(url: &str, sid: &str, body: String) -> reqwest::Response {
    let req = reqwest::Client::new().post(url).header("content-type", "application/json").header("accept", BOTH);
    req.header("mcp-session-id", sid).body(body).send().await.unwrap()
}

async fn initialize(url: &str) -> String {
    let init =
        rpc(1, "initialize", json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}));
    let (status, sid, msgs) = post(url, None, BOTH, init).await;
    assert_eq!(status, 200);
    assert_eq!(msgs.last().unwrap()["result"]["protocolVersion"], "2025-11-25");
    let sid = sid.expect("initialize returns a session id");
    let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string();
    assert_eq!(post(url, Some(&sid), BOTH, note).await.0, 202);
    sid
}

#[tokio::test]
async fn sessions_sse_and_json_answers() {
    let (_gw, url) = start(None).await;
    let sid = initialize(&url).await;
    let (status, _, msgs) =
        post(&url, Some(&sid), BOTH, rpc(2, "tools/call", json!({"name": "slow", "arguments": {"ms": 50}, "_meta": {"progressToken": 9}})))
            .await;
    assert_eq!(status, 200);
    // Progress first, on the request's own stream, then the response.
    assert_eq!(msgs.len(), 6, "{msgs:?}");
    assert_eq!(msgs[0]["params"]["progressToken"], 9);
    assert_eq!(msgs[5]["id"], 2);
    assert_eq!(msgs[5]["result"]["content"][0]["text"], "slept 50 ms");
    let (_, _, msgs) =
        post(&url, Some(&sid), "application/json", rpc(3, "tools/call", json!({"name": "echo", "arguments": {"message": "j"}}))).await;
    assert_eq!(msgs[0]["result"]["content"][0]["text"], "j");
    // An unknown session is 404, so the client knows to initialize again.
    assert_eq!(post(&url, Some("nope"), BOTH, rpc(4, "tools/list", json!({}))).await.0, 404);
    let metrics = reqwest::get(url.replace("/mcp", "/metrics")).await.unwrap().text().await.unwrap();
    assert!(metrics.contains("stowage_tool_calls_total"), "{metrics}");
}

#[tokio::test]
async fn stateless_revision_without_a_session() {
    let (_gw, url) = start(None).await;
    let meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}});
    let (status, sid, msgs) = post(&url, None, BOTH, rpc(1, "server/discover", json!({"_meta": meta}))).await;
    assert_eq!(status, 200);
    assert!(sid.is_none());
    let r = &msgs[0]["result"];
    assert_eq!(r["supportedVersions"], json!(["2026-07-28"]));
    assert!(r["capabilities"]["tools"].is_object());
    let (_, _, msgs) =
        post(&url, None, BOTH, rpc(2, "tools/call", json!({"name": "echo", "arguments": {"message": "s"}, "_meta": meta}))).await;
    assert_eq!(msgs[0]["result"]["content"][0]["text"], "s");
    // An older revision in the envelope is refused with the versions we speak.
    let old = json!({"_meta": {"io.modelcontextprotocol/protocolVersion": "2099-01-01"}});
    let (_, _, msgs) = post(&url, None, BOTH, rpc(3, "server/discover", old)).await;
    assert_eq!(msgs[0]["error"]["code"], -32022);
}

#[tokio::test]
async fn dns_rebinding_is_refused() {
    let (_gw, url) = start(None).await;
    let client = reqwest::Client::new();
    let body = rpc(1, "tools/list", json!({}));
    let r = client.post(&url).header("host", "evil.example:8787").body(body.clone()).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 403);
    let r = client.post(&url).header("origin", "http://evil.example").body(body.clone()).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 403);
    let r = client
        .post(&url)
        .header("origin", "http://localhost:6274")
        .header("content-type", "application/json")
        .header("accept", BOTH)
        .body(rpc(
            1,
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}),
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200, "loopback origins are allowed");
}

#[tokio::test]
async fn a_client_that_hangs_up_cancels_the_upstream_call() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("fx.log");
    let (gw, url) = start(Some(&log)).await;
    let sid = initialize(&url).await;
    let resp = post_streaming(&url, &sid, rpc(2, "tools/call", json!({"name": "hang", "arguments": {}}))).await;
    assert_eq!(resp.status().as_u16(), 200);
    let mut body = resp.bytes_stream();
    assert!(eventually(5, || read_log(&log).contains("tools/call hang")).await);
    // Read nothing more and hang up.
    let _ = tokio::time::timeout(Duration::from_millis(50), body.next()).await;
    drop(body);
    assert!(eventually(5, || read_log(&log).contains("notifications/cancelled")).await, "upstream was not told: {}", read_log(&log));
    gw.shutdown();
}

/// Reads SSE events (id, data) from `body` until `until` holds for one, or the stream ends.
async fn read_events(
    body: &mut (impl futures::Stream<Item = reqwest::Result<bytes::Bytes>> + Unpin),
    until: impl Fn(&str) -> bool,
) -> Vec<(Option<String>, String)> {
    let mut out = Vec::new();
    let mut buf = String::new();
    while let Ok(Some(Ok(chunk))) = tokio::time::timeout(Duration::from_secs(10), body.next()).await {
        buf.push_str(std::str::from_utf8(&chunk).unwrap());
        while let Some(end) = buf.find("\n\n") {
            let block: String = buf.drain(..end + 2).collect();
            let id = block.lines().find_map(|l| l.strip_prefix("id:")).map(|v| v.trim().to_owned());
            let data: String = block.lines().filter_map(|l| l.strip_prefix("data:")).map(str::trim_start).collect();
            if id.is_none() && data.is_empty() {
                continue; // keep-alive comment
            }
            let stop = until(&data);
            out.push((id, data));
            if stop {
                return out;
            }
        }
    }
    out
}

/// A request the client cancels with `notifications/cancelled` (how the TypeScript SDK stops a
/// call) gets no response, as the specification says; the upstream is told to stop; and the
/// request's stream is held open, quiet, rather than ended unanswered (which would make the
/// client resume it and log the 400s), until the session ends.
#[tokio::test]
async fn a_cancelled_request_gets_no_answer_and_its_stream_is_held_open_until_the_session_ends() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("fx.log");
    let (gw, url) = start(Some(&log)).await;
    let sid = initialize(&url).await;
    let resp = post_streaming(&url, &sid, rpc(2, "tools/call", json!({"name": "slow", "arguments": {"ms": 5000}}))).await;
    assert_eq!(resp.status().as_u16(), 200);
    assert!(resp.headers()["content-type"].to_str().unwrap().starts_with("text/event-stream"));
    let mut body = resp.bytes_stream();
    assert!(eventually(5, || read_log(&log).contains("tools/call slow")).await);
    let cancel =
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 2, "reason": "the user stopped it"}});
    assert_eq!(post(&url, Some(&sid), BOTH, cancel.to_string()).await.0, 202);
    assert!(eventually(5, || read_log(&log).contains("notifications/cancelled")).await, "upstream was not told: {}", read_log(&log));
    // Past the cancel (and past where the 5 s call would have been well under way): the stream
    // neither ends nor carries a message; only the priming event and keep-alives.
    let mut seen = String::new();
    let deadline = tokio::time::Instant::now() + Duration::from_millis(1500);
    loop {
        match tokio::time::timeout_at(deadline, body.next()).await {
            Err(_) => break,
            Ok(Some(Ok(chunk))) => seen.push_str(std::str::from_utf8(&chunk).unwrap()),
            Ok(other) => panic!("the cancelled request's stream ended: {other:?} after {seen:?}"),
        }
    }
    let data: Vec<&str> = seen.lines().filter_map(|l| l.strip_prefix("data:")).map(str::trim).filter(|d| !d.is_empty()).collect();
    assert!(data.is_empty(), "a cancelled request was answered: {data:?}");
    // The session ends: so does the stream.
    let deleted = reqwest::Client::new().delete(&url).header("mcp-session-id", &sid).send().await.unwrap();
    assert!(deleted.status().is_success(), "{}", deleted.status());
    let ended = tokio::time::timeout(Duration::from_secs(5), async {
        while let Some(Ok(chunk)) = body.next().await {
            seen.push_str(std::str::from_utf8(&chunk).unwrap());
        }
    })
    .await;
    assert!(ended.is_ok(), "the stream outlived its session: {seen:?}");
    assert!(!seen.lines().any(|l| l.starts_with("data:") && l.contains("\"id\"")), "answered after all: {seen:?}");
    gw.shutdown();
}

fn sse_request(url: &str, sid: &str) -> reqwest::RequestBuilder {
    reqwest::Client::new().request(reqwest::Method::GET, url).header("accept", "text/event-stream").header("mcp-session-id", sid)
}

#[tokio::test]
async fn a_dropped_stream_resumes_with_last_event_id_and_loses_nothing() {
    // A window wide enough that a loaded machine cannot miss it.
    let (gw, url) = start_with(None, stowage_mcp::config::GatewayConfig { resume_window_ms: 5_000, ..fast_config() }).await;
    let sid = initialize(&url).await;
    let resp = post_streaming(
        &url,
        &sid,
        rpc(7, "tools/call", json!({"name": "slow", "arguments": {"ms": 1000}, "_meta": {"progressToken": "p"}})),
    )
    .await;
    let mut body = resp.bytes_stream();
    // The priming event comes first: an id, a retry hint and no data.
    let first = read_events(&mut body, |d| d.contains("progress")).await;
    assert_eq!(first[0].1, "", "{first:?}");
    assert!(first.iter().all(|(id, _)| id.is_some()), "{first:?}");
    let last_id = first.last().unwrap().0.clone().unwrap();
    drop(body); // the connection drops mid-call
    tokio::time::sleep(Duration::from_millis(150)).await; // well within the resume window
    let resp = sse_request(&url, &sid).header("last-event-id", &last_id).send().await.unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let rest = read_events(&mut resp.bytes_stream(), |d| d.contains("\"result\"")).await;
    let msgs: Vec<Value> = rest.iter().map(|(_, d)| serde_json::from_str(d).unwrap()).collect();
    let progress: Vec<_> = first.iter().chain(&rest).filter(|(_, d)| d.contains("notifications/progress")).collect();
    assert_eq!(progress.len(), 5, "every progress event exactly once: {first:?} {rest:?}");
    let last = msgs.last().unwrap();
    assert_eq!(last["id"], 7);
    assert_eq!(last["result"]["content"][0]["text"], "slept 1000 ms");
    // An id from nowhere is refused with a reason, not silently ignored.
    let bad = sse_request(&url, &sid).header("last-event-id", "99-1").send().await.unwrap();
    assert_eq!(bad.status().as_u16(), 400);
    assert!(bad.text().await.unwrap().contains("re-send the request"));
    let metrics = reqwest::get(url.replace("/mcp", "/metrics")).await.unwrap().text().await.unwrap();
    assert!(metrics.contains("stowage_stream_resumes_total"), "{metrics}");
    gw.shutdown();
}

#[tokio::test]
async fn the_standalone_stream_can_be_reopened() {
    let (gw, url) = start(None).await;
    let sid = initialize(&url).await;
    // The first GET stream goes away; a second one must still get notifications.
    let first = sse_request(&url, &sid).send().await.unwrap();
    assert_eq!(first.status().as_u16(), 200);
    drop(first);
    let second = sse_request(&url, &sid).send().await.unwrap();
    assert_eq!(second.status().as_u16(), 200);
    let mut body = second.bytes_stream();
    // A crashed upstream comes back, and the gateway tells every session its tools may have
    // changed: on the standalone stream.
    let (_, _, msgs) = post(&url, Some(&sid), BOTH, rpc(2, "tools/call", json!({"name": "crash", "arguments": {}}))).await;
    assert!(msgs.last().unwrap().get("error").is_some(), "{msgs:?}");
    let events = read_events(&mut body, |d| d.contains("list_changed")).await;
    assert!(events.iter().any(|(_, d)| d.contains("notifications/tools/list_changed")), "{events:?}");
    gw.shutdown();
}

#[tokio::test]
async fn idle_sessions_expire() {
    let (gw, url) = start_with(None, stowage_mcp::config::GatewayConfig { session_idle_timeout_secs: 1, ..fast_config() }).await;
    let sid = initialize(&url).await;
    assert_eq!(post(&url, Some(&sid), BOTH, rpc(2, "ping", json!({}))).await.0, 200);
    // Asking would keep it alive, so wait past the timeout (and a sweep) first.
    tokio::time::sleep(Duration::from_millis(2600)).await;
    assert_eq!(post(&url, Some(&sid), BOTH, rpc(3, "ping", json!({}))).await.0, 404, "the idle session was never ended");
    gw.shutdown();
}

/// A 2026-07-28 client and a 2026-07-28-only upstream: the upstream's `input_required` comes
/// back to the client as the gateway's own, and the client's retry completes the call.
/// A made-up `requestState` is refused.
#[tokio::test]
async fn input_required_round_trip_for_a_stateless_client() {
    let mut spec = fixture_spec("fx", None, Duration::from_secs(20));
    if let stowage_mcp::config::TransportSpec::Stdio { env, .. } = &mut spec.transport {
        env.insert("STOWAGE_FIXTURE_STATELESS".into(), "1".into());
    }
    let (gw, url) = start_in_front_of(spec, fast_config()).await;
    let meta =
        json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {"sampling": {}}});
    let (_, _, msgs) = post(&url, None, BOTH, rpc(1, "tools/call", json!({"name": "sample", "arguments": {}, "_meta": meta}))).await;
    let r = &msgs.last().unwrap()["result"];
    assert_eq!(r["resultType"], "input_required", "{msgs:?}");
    let (key, ask) = r["inputRequests"].as_object().unwrap().iter().next().unwrap();
    assert_eq!(ask["method"], "sampling/createMessage");
    let state = r["requestState"].as_str().unwrap().to_owned();
    let answer = json!({key.clone(): {"role": "assistant", "content": {"type": "text", "text": "yo"}, "model": "m"}});
    let retry = json!({"name": "sample", "arguments": {}, "_meta": meta, "inputResponses": answer, "requestState": state});
    let (_, _, msgs) = post(&url, None, BOTH, rpc(2, "tools/call", retry)).await;
    let r = &msgs.last().unwrap()["result"];
    assert_eq!(r["content"][0]["text"], "client said: yo", "{msgs:?}");
    assert_eq!(r["resultType"], "complete");
    // The state is single-use, and an invented one is refused with what to do.
    let again = json!({"name": "sample", "arguments": {}, "_meta": meta, "inputResponses": answer, "requestState": state});
    let (_, _, msgs) = post(&url, None, BOTH, rpc(3, "tools/call", again)).await;
    let e = &msgs.last().unwrap()["error"];
    assert!(e["message"].as_str().unwrap().contains("unknown or expired requestState"), "{msgs:?}");
    gw.shutdown();
}

/// A Streamable HTTP upstream that answers `tools/call` the SEP-1699 polling way: the POST's
/// SSE stream carries only a priming event (`id` + `retry`, no data) and closes; the answer
/// comes on a `GET` with `Last-Event-ID`. With `ids: false` the stream closes with no id at
/// all, so there is nothing to resume.
async fn polling_upstream(ids: bool) -> String {
    use axum::http::HeaderMap;
    use axum::response::IntoResponse;
    let sse = |body: String| ([("content-type", "text/event-stream")], body).into_response();
    let post = move |body: String| async move {
        let msg: Value = serde_json::from_str(&body).unwrap();
        let id = msg["id"].clone();
        match msg["method"].as_str() {
            Some("initialize") => axum::Json(json!({"jsonrpc": "2.0", "id": id, "result": {
                "protocolVersion": "2025-11-25", "capabilities": {"tools": {}}, "serverInfo": {"name": "poller", "version": "1"}}}))
            .into_response(),
            Some("tools/list") => axum::Json(json!({"jsonrpc": "2.0", "id": id, "result": {"tools": [
                {"name": "poll", "inputSchema": {"type": "object"}}]}}))
            .into_response(),
            Some("tools/call") if ids => sse(format!("id: call-{id}\nretry: 50\ndata: \n\n")),
            Some("tools/call") => sse(": nothing to see\n\n".to_owned()),
            Some(_) => axum::http::StatusCode::ACCEPTED.into_response(),
            None => axum::http::StatusCode::ACCEPTED.into_response(),
        }
    };
    let get = move |headers: HeaderMap| async move {
        let Some(last) = headers.get("last-event-id").and_then(|v| v.to_str().ok()) else {
            return axum::http::StatusCode::METHOD_NOT_ALLOWED.into_response();
        };
        let id: u64 = last.trim_start_matches("call-").parse().unwrap();
        // The id goes last, as the TypeScript SDK writes responses.
        let answer = json!({"result": {"content": [{"type": "text", "text": "answered after resuming"}]}, "jsonrpc": "2.0", "id": id});
        ([("content-type", "text/event-stream")], format!("id: call-{id}-1\ndata: {answer}\n\n")).into_response()
    };
    let app = axum::Router::new().route("/mcp", axum::routing::post(post).get(get));
    serve_upstream(app).await
}

/// Serves `app` (an upstream of a test's own, at `/mcp`) on a free loopback port: its URL.
async fn serve_upstream(app: axum::Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}/mcp")
}

async fn gateway_in_front_of(url: String) -> (Arc<Gateway>, String) {
    let transport = stowage_mcp::config::TransportSpec::Http { url, headers: Default::default(), ca_file: None };
    let spec = stowage_mcp::config::UpstreamSpec::new("poller", transport, Duration::from_secs(60));
    start_in_front_of(spec, fast_config()).await
}

#[tokio::test]
async fn an_upstream_that_closes_its_stream_mid_call_is_resumed() {
    let (gw, url) = gateway_in_front_of(polling_upstream(true).await).await;
    let sid = initialize(&url).await;
    let (_, _, msgs) = post(&url, Some(&sid), BOTH, rpc(2, "tools/call", json!({"name": "poll", "arguments": {}}))).await;
    assert_eq!(msgs.last().unwrap()["result"]["content"][0]["text"], "answered after resuming", "{msgs:?}");
    gw.shutdown();
}

#[tokio::test]
async fn an_upstream_stream_that_ends_unanswered_and_unresumable_fails_at_once() {
    let (gw, url) = gateway_in_front_of(polling_upstream(false).await).await;
    let sid = initialize(&url).await;
    let started = std::time::Instant::now();
    let (_, _, msgs) = post(&url, Some(&sid), BOTH, rpc(2, "tools/call", json!({"name": "poll", "arguments": {}}))).await;
    let e = &msgs.last().unwrap()["error"];
    assert!(e["message"].as_str().unwrap().contains("closed its stream before answering"), "{msgs:?}");
    assert!(started.elapsed() < Duration::from_secs(10), "waited for the 60 s timeout instead");
    gw.shutdown();
}

/// Every progress notification of a call reaches a 2026-07-28 client before the call's
/// result, on the same stream, in order: 100 calls in a row, no exception.
#[tokio::test]
async fn progress_always_precedes_the_result_for_a_stateless_client() {
    let (gw, url) = start(None).await;
    let meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}, "progressToken": "tok"});
    for round in 0..100 {
        let body = rpc(round, "tools/call", json!({"name": "progress_burst", "arguments": {"n": 5}, "_meta": meta}));
        let (_, _, msgs) = post(&url, None, BOTH, body).await;
        let methods: Vec<&str> = msgs.iter().map(|m| m["method"].as_str().unwrap_or("result")).collect();
        assert_eq!(methods, ["notifications/progress"; 5].iter().copied().chain(["result"]).collect::<Vec<_>>(), "round {round}: {msgs:?}");
        let progress: Vec<u64> = msgs[..5].iter().map(|m| m["params"]["progress"].as_u64().unwrap()).collect();
        assert_eq!(progress, [1, 2, 3, 4, 5], "round {round}");
        assert!(msgs[..5].iter().all(|m| m["params"]["progressToken"] == "tok"));
        assert_eq!(msgs[5]["result"]["content"][0]["text"], "sent 5");
    }
    gw.shutdown();
}

/// An HTTP upstream's body or SSE event over `max_message_bytes` fails its call at once with
/// an error naming the limit, and is never held whole.
#[tokio::test]
async fn an_oversized_http_upstream_reply_fails_its_call_at_once() {
    use axum::response::IntoResponse;
    let upstream = move |body: String| async move {
        let msg: Value = serde_json::from_str(&body).unwrap();
        let id = msg["id"].clone();
        match (msg["method"].as_str(), msg["params"]["name"].as_str()) {
            (Some("initialize"), _) => axum::Json(json!({"jsonrpc": "2.0", "id": id, "result": {
                "protocolVersion": "2025-11-25", "capabilities": {"tools": {}}, "serverInfo": {"name": "big", "version": "1"}}}))
            .into_response(),
            (Some("tools/list"), _) => axum::Json(json!({"jsonrpc": "2.0", "id": id, "result": {"tools": [
                {"name": "json_body", "inputSchema": {"type": "object"}}, {"name": "sse_event", "inputSchema": {"type": "object"}}]}}))
            .into_response(),
            (Some("tools/call"), Some("json_body")) => {
                axum::Json(json!({"jsonrpc": "2.0", "id": id, "result": {"content": [{"type": "text", "text": "x".repeat(200_000)}]}}))
                    .into_response()
            }
            (Some("tools/call"), _) => {
                let answer = json!({"jsonrpc": "2.0", "id": id, "result": {"content": [{"type": "text", "text": "y".repeat(200_000)}]}});
                ([("content-type", "text/event-stream")], format!("data: {answer}\n\n")).into_response()
            }
            _ => axum::http::StatusCode::ACCEPTED.into_response(),
        }
    };
    let url = serve_upstream(axum::Router::new().route("/mcp", axum::routing::post(upstream))).await;
    let transport = stowage_mcp::config::TransportSpec::Http { url, headers: Default::default(), ca_file: None };
    let spec = stowage_mcp::config::UpstreamSpec::new("big", transport, Duration::from_secs(120));
    let (gw, url) = start_in_front_of(spec, stowage_mcp::config::GatewayConfig { max_message_bytes: 100_000, ..fast_config() }).await;
    let sid = initialize(&url).await;
    for (i, tool) in [(2, "json_body"), (3, "sse_event")] {
        let started = std::time::Instant::now();
        let (_, _, msgs) = post(&url, Some(&sid), BOTH, rpc(i, "tools/call", json!({"name": tool, "arguments": {}}))).await;
        let e = msgs.last().unwrap()["error"]["message"].as_str().unwrap_or_default().to_owned();
        assert!(e.contains("100000 byte limit") && e.contains("max_message_bytes"), "{tool}: {msgs:?}");
        assert!(started.elapsed() < Duration::from_secs(10), "{tool} waited for the timeout");
    }
    gw.shutdown();
}

/// A Streamable HTTP upstream that answers `initialize` with `status` and `body` (HTML's
/// content type) after the first `grace` of them, which it answers properly; `tools/list`
/// with one tool, `echo`. Its URL.
async fn guarded_upstream(status: u16, body: &'static str, grace: usize) -> String {
    use axum::response::IntoResponse;
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
    let inits = Arc::new(AtomicUsize::new(0));
    let upstream = move |b: String| {
        let inits = inits.clone();
        async move {
            let msg: Value = serde_json::from_str(&b).unwrap();
            let id = msg["id"].clone();
            match msg["method"].as_str() {
                Some("initialize") if inits.fetch_add(1, SeqCst) >= grace => {
                    (axum::http::StatusCode::from_u16(status).unwrap(), [("content-type", "text/html")], body).into_response()
                }
                Some("initialize") => axum::Json(json!({"jsonrpc": "2.0", "id": id, "result": {
                    "protocolVersion": "2025-11-25", "capabilities": {"tools": {}}, "serverInfo": {"name": "guarded", "version": "1"}}}))
                .into_response(),
                Some("tools/list") => axum::Json(json!({"jsonrpc": "2.0", "id": id, "result": {"tools": [
                    {"name": "echo", "inputSchema": {"type": "object"}}]}}))
                .into_response(),
                Some("tools/call") => axum::Json(json!({"jsonrpc": "2.0", "id": id, "result": {"content": [
                    {"type": "text", "text": "echoed"}]}}))
                .into_response(),
                _ => axum::http::StatusCode::ACCEPTED.into_response(),
            }
        }
    };
    let app = axum::Router::new().route("/mcp", axum::routing::post(upstream));
    serve_upstream(app).await
}

/// With per-client upstream sessions, each client's first call opens its own session on an
/// HTTP upstream. An upstream that refuses that `initialize` (401 with an OAuth error body, or
/// a login page with status 200) fails the call at once, with the upstream's status and the
/// method in the message, instead of leaving it to the 60 s timeout.
#[tokio::test]
async fn an_upstream_refusing_a_clients_initialize_fails_the_call_at_once_with_its_status() {
    for (status, body) in [(401u16, r#"{"error":"invalid_token"}"#), (200, "<html><body>please log in</body></html>")] {
        let transport = stowage_mcp::config::TransportSpec::Http {
            url: guarded_upstream(status, body, 1).await,
            headers: Default::default(),
            ca_file: None,
        };
        let spec = stowage_mcp::config::UpstreamSpec::new("guarded", transport, Duration::from_secs(60));
        let gw =
            common::start_gateway(vec![spec], shaper(Arc::new(MemSink::default())), fast_config(), stowage_mcp::SessionMode::PerClient)
                .await;
        let url = format!("http://{}/mcp", stowage_mcp::run::spawn_http(gw.clone(), "127.0.0.1:0").await.unwrap());
        let sid = initialize(&url).await;
        let started = std::time::Instant::now();
        let (_, _, msgs) = post(&url, Some(&sid), BOTH, rpc(2, "tools/call", json!({"name": "echo", "arguments": {}}))).await;
        let elapsed = started.elapsed();
        let answer = msgs.last().unwrap_or_else(|| panic!("HTTP {status}: no answer"));
        let message = answer["error"]["message"].as_str().unwrap_or_else(|| panic!("HTTP {status}: not an error: {answer}"));
        assert!(elapsed < Duration::from_secs(5), "HTTP {status}: waited {elapsed:?} (the timeout is 60 s)");
        assert!(message.contains(&format!("HTTP {status}")) && message.contains("initialize"), "{message}");
        assert!(message.contains(if status == 401 { "invalid_token" } else { "please log in" }), "the body's start is shown: {message}");
        gw.shutdown();
    }
}

/// An HTTP upstream that answers every `initialize` with 401 is reported unready at once,
/// naming the status, rather than after the 60 s timeout.
#[tokio::test]
async fn an_upstream_refusing_every_initialize_is_reported_unready_with_its_status_at_once() {
    let transport = stowage_mcp::config::TransportSpec::Http {
        url: guarded_upstream(401, r#"{"error":"invalid_token"}"#, 0).await,
        headers: Default::default(),
        ca_file: None,
    };
    let spec = stowage_mcp::config::UpstreamSpec::new("guarded", transport, Duration::from_secs(60));
    stowage_mcp::metrics::install();
    let gw = Gateway::builder(fast_config(), vec![spec], shaper(Arc::new(MemSink::default()))).start();
    let why = || gw.unready_upstreams().first().map(|(_, why)| why.clone()).unwrap_or_default();
    assert!(eventually(5, || why().contains("HTTP 401")).await, "after 5 s: {:?}", gw.unready_upstreams());
    let why = why();
    assert!(why.contains("initialize") && why.contains("bearer_token_env"), "{why}");
    gw.shutdown();
}

/// A Streamable HTTP upstream that pages its lists: `tools/list` gives `first_tool` with
/// `nextCursor` "t2", then `second_tool`; `prompts/list` likewise `first_prompt`, "p2",
/// `second_prompt`. A cursor it never gave is refused. Its URL.
async fn paging_upstream() -> String {
    use axum::response::IntoResponse;
    let upstream = move |b: String| async move {
        let msg: Value = serde_json::from_str(&b).unwrap();
        let id = msg["id"].clone();
        let cursor = msg["params"]["cursor"].as_str().map(str::to_owned);
        let page = |key: &str, first: Value, next: &str, second: Value| match cursor.as_deref() {
            None => json!({"jsonrpc": "2.0", "id": id, "result": {key: [first], "nextCursor": next}}),
            Some(c) if c == next => json!({"jsonrpc": "2.0", "id": id, "result": {key: [second]}}),
            Some(c) => json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32602, "message": format!("unknown cursor {c}")}}),
        };
        let tool = |name: &str| json!({"name": name, "inputSchema": {"type": "object"}});
        match msg["method"].as_str() {
            Some("initialize") => axum::Json(json!({"jsonrpc": "2.0", "id": id, "result": {
                "protocolVersion": "2025-11-25", "capabilities": {"tools": {}, "prompts": {}}, "serverInfo": {"name": "pager", "version": "1"}}}))
            .into_response(),
            Some("tools/list") => axum::Json(page("tools", tool("first_tool"), "t2", tool("second_tool"))).into_response(),
            Some("prompts/list") => {
                axum::Json(page("prompts", json!({"name": "first_prompt"}), "p2", json!({"name": "second_prompt"}))).into_response()
            }
            _ => axum::http::StatusCode::ACCEPTED.into_response(),
        }
    };
    let app = axum::Router::new().route("/mcp", axum::routing::post(upstream));
    serve_upstream(app).await
}

/// The gateway answers `tools/list` and `prompts/list` in one page, every page of every
/// upstream gathered (in both session modes), so it never hands out a cursor for them: a
/// client's cursor is refused as invalid params, as the specification says of a cursor the
/// server does not know, and never silently ignored (which would hand the client page one
/// again as if it were the next).
#[tokio::test]
async fn an_upstreams_list_pages_are_gathered_and_a_clients_cursor_is_refused() {
    for mode in [stowage_mcp::SessionMode::PerClient, stowage_mcp::SessionMode::Shared] {
        let transport =
            stowage_mcp::config::TransportSpec::Http { url: paging_upstream().await, headers: Default::default(), ca_file: None };
        let spec = stowage_mcp::config::UpstreamSpec::new("pager", transport, Duration::from_secs(20));
        let gw = common::start_gateway(vec![spec], shaper(Arc::new(MemSink::default())), fast_config(), mode).await;
        let url = format!("http://{}/mcp", stowage_mcp::run::spawn_http(gw.clone(), "127.0.0.1:0").await.unwrap());
        let sid = initialize(&url).await;
        for (i, (method, key, names)) in
            [("tools/list", "tools", ["first_tool", "second_tool"]), ("prompts/list", "prompts", ["first_prompt", "second_prompt"])]
                .into_iter()
                .enumerate()
        {
            let (_, _, msgs) = post(&url, Some(&sid), BOTH, rpc(10 + i as u64, method, json!({}))).await;
            let result = &msgs.last().unwrap()["result"];
            let listed: Vec<&str> = result[key]
                .as_array()
                .unwrap_or_else(|| panic!("{mode:?} {method}: {msgs:?}"))
                .iter()
                .filter_map(|t| t["name"].as_str())
                .collect();
            for name in names {
                assert!(listed.iter().any(|n| n.ends_with(name)), "{mode:?} {method}: {name} missing from {listed:?}");
            }
            assert!(result.get("nextCursor").is_none(), "{mode:?} {method}: {result}");
            for cursor in [json!("t2"), json!("abc")] {
                let (status, _, msgs) = post(&url, Some(&sid), BOTH, rpc(20 + i as u64, method, json!({"cursor": cursor}))).await;
                assert_eq!(status, 200);
                let e = &msgs.last().unwrap()["error"];
                assert_eq!(e["code"], -32602, "{mode:?} {method} with cursor {cursor}: {msgs:?}");
                let message = e["message"].as_str().unwrap();
                assert!(message.contains("unknown cursor") && message.contains(method), "{message}");
            }
        }
        gw.shutdown();
    }
}

/// Requests are refused past `gateway.max_request_bytes` with a JSON-RPC error naming it, and
/// an identity cannot open sessions without end, yet abandoned sessions never lock it out: at
/// the cap, the least recently used idle session makes room (its client gets 404 and
/// initializes again), and only when every session is busy is a new one refused.
#[tokio::test]
async fn request_bodies_and_sessions_per_identity_are_capped() {
    let config = stowage_mcp::config::GatewayConfig { max_request_bytes: 64 * 1024, max_sessions_per_identity: 2, ..fast_config() };
    let (gw, url) = start_with(None, config).await;
    let first = initialize(&url).await;
    let big = rpc(2, "tools/call", json!({"name": "echo", "arguments": {"message": "m".repeat(100_000)}}));
    let (status, _, msgs) = post(&url, Some(&first), BOTH, big).await;
    assert_eq!(status, 413);
    assert!(msgs[0]["error"]["message"].as_str().unwrap().contains("65536 byte limit (gateway.max_request_bytes)"), "{msgs:?}");
    let ping = || rpc(9, "ping", json!({}));
    // Two sessions abandoned without DELETE, the first used last: the second is the one to go.
    let second = initialize(&url).await;
    assert_eq!(post(&url, Some(&first), BOTH, ping()).await.0, 200);
    let third = initialize(&url).await;
    let (status, _, msgs) = post(&url, Some(&second), BOTH, ping()).await;
    assert_eq!(status, 404, "the least recently used session made room: {msgs:?}");
    assert_eq!(post(&url, Some(&first), BOTH, ping()).await.0, 200);
    assert_eq!(post(&url, Some(&third), BOTH, ping()).await.0, 200);
    // Its client initializes again, as the specification tells it to (now `first` goes).
    let again = initialize(&url).await;
    assert_eq!(post(&url, Some(&again), BOTH, ping()).await.0, 200);
    assert_eq!(post(&url, Some(&first), BOTH, ping()).await.0, 404);

    // Both sessions listening on their streams are busy: nothing to end, so the new one waits.
    let _third_listens = sse_request(&url, &third).send().await.unwrap();
    let _again_listens = sse_request(&url, &again).send().await.unwrap();
    let init =
        rpc(1, "initialize", json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}));
    let (status, _, msgs) = post(&url, None, BOTH, init.clone()).await;
    assert_eq!(status, 429);
    let message = msgs[0]["error"]["message"].as_str().unwrap();
    assert!(message.contains("all busy") && message.contains("max_sessions_per_identity"), "{message}");
    // Ending one makes room.
    let ended = reqwest::Client::new().delete(&url).header("mcp-session-id", &third).send().await.unwrap();
    assert_eq!(ended.status().as_u16(), 200);
    assert_eq!(post(&url, None, BOTH, init).await.0, 200);
    gw.shutdown();
}

/// Over HTTP/2 the host is in `:authority`, not a Host header: a loopback client is let in,
/// a foreign authority is still refused, and a Host header that disagrees with the authority
/// is refused as ambiguous (RFC 9112 §3.2) before any route sees it.
#[tokio::test]
async fn http2_requests_are_checked_by_their_authority() {
    let (gw, url) = start(None).await;
    let client = reqwest::Client::builder().http2_prior_knowledge().build().unwrap();
    let init =
        rpc(1, "initialize", json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}));
    let r = client.post(&url).header("content-type", "application/json").header("accept", BOTH).body(init).send().await.unwrap();
    assert_eq!(r.version(), reqwest::Version::HTTP_2);
    assert_eq!(r.status().as_u16(), 200, "{}", r.text().await.unwrap());
    let addr: std::net::SocketAddr = url.trim_start_matches("http://").trim_end_matches("/mcp").parse().unwrap();
    // A page on evil.example whose name resolves here (DNS rebinding).
    let rebound = reqwest::Client::builder().http2_prior_knowledge().resolve("evil.example", addr).build().unwrap();
    let foreign = format!("http://evil.example:{}/mcp", addr.port());
    let r = rebound.post(&foreign).header("content-type", "application/json").body("{}").send().await.unwrap();
    assert_eq!(r.status().as_u16(), 403, "{foreign}");
    // Loopback authority, foreign Host: which one is meant is ambiguous.
    let r = client
        .post(&url)
        .header("content-type", "application/json")
        .header("host", format!("evil.example:{}", addr.port()))
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    let body: Value = serde_json::from_slice(&r.bytes().await.unwrap()).unwrap();
    assert!(body["error"]["message"].as_str().unwrap().contains("disagrees with the request's authority"), "{body}");
    gw.shutdown();
}

/// RFC 9112 §3.2: a request with two Host headers (or an HTTP/1.1 one with none) is refused
/// with 400, not served on whichever header a check happens to read.
#[tokio::test]
async fn an_ambiguous_host_is_refused() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (gw, url) = start(None).await;
    let addr = url.trim_start_matches("http://").trim_end_matches("/mcp").to_owned();
    let exchange = |head: String| {
        let addr = addr.clone();
        async move {
            let mut conn = tokio::net::TcpStream::connect(&addr).await.unwrap();
            conn.write_all(head.as_bytes()).await.unwrap();
            let mut buf = Vec::new();
            conn.read_to_end(&mut buf).await.unwrap();
            String::from_utf8_lossy(&buf).into_owned()
        }
    };
    let body = rpc(1, "ping", json!({}));
    let request = |hosts: &str| {
        format!(
            "POST /mcp HTTP/1.1\r\n{hosts}Content-Type: application/json\r\nAccept: application/json\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
    };
    let ok = exchange(request(&format!("Host: {addr}\r\n"))).await;
    assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
    // The loopback name first, a rebinding name second: neither may be picked.
    let two = exchange(request(&format!("Host: {addr}\r\nHost: evil.example\r\n"))).await;
    assert!(two.starts_with("HTTP/1.1 400") && two.contains("more than one Host header"), "{two}");
    let none = exchange(request("")).await;
    assert!(none.starts_with("HTTP/1.1 400") && none.contains("needs a Host header"), "{none}");
    gw.shutdown();
}

/// A session that never opened its standalone stream has nothing queued for it: the first GET
/// starts with what happens from then on.
#[tokio::test]
async fn notifications_queue_only_for_sessions_that_listen() {
    let (gw, url) = start(None).await;
    let sid = initialize(&url).await;
    // A crash and restart: every listening session is told its tools may have changed.
    let (_, _, msgs) = post(&url, Some(&sid), BOTH, rpc(2, "tools/call", json!({"name": "crash", "arguments": {}}))).await;
    assert!(msgs.last().unwrap().get("error").is_some(), "{msgs:?}");
    assert!(eventually(10, || gw.unready_upstreams().is_empty()).await);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let stream = sse_request(&url, &sid).send().await.unwrap();
    let mut body = stream.bytes_stream();
    let early = tokio::time::timeout(Duration::from_millis(700), read_events(&mut body, |d| d.contains("list_changed"))).await;
    assert!(early.is_err(), "a notification was queued for a session that was not listening: {early:?}");
    gw.shutdown();
}

/// A client that sends its headers or its body too slowly is cut off, so slow connections
/// cannot pile up.
#[tokio::test]
async fn slow_headers_and_stalled_bodies_are_cut_off() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let config = stowage_mcp::config::GatewayConfig { http_header_timeout_secs: 1, http_body_timeout_secs: 1, ..fast_config() };
    let (gw, url) = start_with(None, config).await;
    let addr = url.trim_start_matches("http://").trim_end_matches("/mcp").to_owned();
    // Headers that never end.
    let mut slow = tokio::net::TcpStream::connect(&addr).await.unwrap();
    slow.write_all(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n").await.unwrap();
    let mut buf = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), slow.read_to_end(&mut buf)).await;
    assert!(read.is_ok(), "a connection with unfinished headers was kept open past the timeout");
    // A body that stalls half way.
    let mut stalled = tokio::net::TcpStream::connect(&addr).await.unwrap();
    stalled
        .write_all(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"jsonrpc\":")
        .await
        .unwrap();
    let mut buf = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), stalled.read_to_end(&mut buf)).await;
    assert!(read.is_ok(), "a stalled body was waited for past the timeout");
    let text = String::from_utf8_lossy(&buf);
    assert!(text.is_empty() || text.starts_with("HTTP/1.1 408") || text.starts_with("HTTP/1.1 400"), "{text}");
    // A normal client is unaffected.
    assert_eq!(post(&url, None, BOTH, rpc(1, "ping", json!({}))).await.0, 200);
    gw.shutdown();
}

fn peak_rss_mb() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0)
        / 1024
}

/// Four parallel 100 MB requests are refused as they stream in, each at the request limit:
/// the gateway never holds them (its process, this test's, grows by far less than 400 MB).
#[tokio::test]
async fn four_parallel_100_mb_requests_do_not_reach_a_gigabyte() {
    let (gw, url) = start(None).await;
    let sid = initialize(&url).await;
    let before = peak_rss_mb();
    let send = |url: String, sid: String| async move {
        // 100 MB, streamed from a generator: the client side holds one chunk at a time.
        let chunk = bytes::Bytes::from(vec![b' '; 1 << 20]);
        let head = futures::stream::once(async {
            Ok::<_, std::io::Error>(bytes::Bytes::from_static(b"{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"ping\",\"params\":{\"pad\":\""))
        });
        let body = head.chain(futures::stream::iter((0..100).map(move |_| Ok(chunk.clone()))));
        let r = reqwest::Client::new()
            .post(&url)
            .header("content-type", "application/json")
            .header("accept", BOTH)
            .header("mcp-session-id", sid)
            .body(reqwest::Body::wrap_stream(body))
            .send()
            .await;
        match r {
            Ok(r) => r.status().as_u16(),
            Err(_) => 413, // the gateway may close the connection as soon as it has answered
        }
    };
    let results = futures::future::join_all((0..4).map(|_| send(url.clone(), sid.clone()))).await;
    assert!(results.iter().all(|s| *s == 413), "{results:?}");
    let grew = peak_rss_mb().saturating_sub(before);
    assert!(grew < 300, "the process grew by {grew} MB for four refused 100 MB requests");
    gw.shutdown();
}

/// Mints download links the way `stowage serve` does (a URL on the gateway with a token), so
/// the contract can be seen with links on.
struct TestLinks(String);

impl stowage_mcp::shape::LinkMinter for TestLinks {
    fn link(&self, a: &stowage_core::ArtifactRef) -> Option<(String, String)> {
        Some((format!("{}/artifacts/{}?token=t", self.0, a.id), "2026-11-23T15:00:00Z".into()))
    }
}

/// Over HTTP with links, one offloaded item is one line, and that line carries the download
/// link; one resource_link; `_meta` counts one artifact for one asset. For a typed image block
/// (the transform writes its own stub line), a JSON list in structuredContent and its text
/// twin, and base64 inside JSON text.
#[tokio::test]
async fn over_http_one_offloaded_item_is_one_line_and_one_link() {
    let mut rw = shaper(Arc::new(MemSink::default()));
    rw = rw.with_links(Arc::new(TestLinks("http://gw.test".into())));
    let gw =
        common::start_gateway(vec![fixture_spec("fx", None, Duration::from_secs(20))], rw, fast_config(), stowage_mcp::SessionMode::Shared)
            .await;
    let addr = stowage_mcp::run::spawn_http(gw.clone(), "127.0.0.1:0").await.unwrap();
    let url = format!("http://{addr}/mcp");
    let sid = initialize(&url).await;
    for (i, (tool, args)) in
        [("get_image", json!({})), ("get_rows_structured", json!({"n": 2000})), ("get_view_pdf", json!({}))].into_iter().enumerate()
    {
        let (_, _, msgs) = post(&url, Some(&sid), BOTH, rpc(10 + i as u64, "tools/call", json!({"name": tool, "arguments": args}))).await;
        let result = &msgs.last().unwrap()["result"];
        let assets = result["_meta"]["io.stowage/assets"].as_array().unwrap_or_else(|| panic!("{tool}: {result}"));
        assert_eq!(assets.len(), 1, "{tool}");
        let id = assets[0]["id"].as_str().unwrap();
        let link = format!("http://gw.test/artifacts/{id}?token=t");
        let blocks = result["content"].as_array().unwrap();
        let lines: Vec<&str> = blocks.iter().filter_map(|b| b["text"].as_str()).filter(|t| t.contains(id) && !t.starts_with('{')).collect();
        assert_eq!(lines.len(), 1, "{tool}: {lines:#?}");
        assert!(lines[0].ends_with("(link expires 15:00 UTC)"), "{tool}: {}", lines[0]);
        let links: Vec<_> = blocks.iter().filter(|b| b["type"] == "resource_link").collect();
        assert_eq!(links.len(), 1, "{tool}");
        assert_eq!(links[0]["uri"], link.as_str());
        // The signed URL once in what a model reads: in the link, not in the line too.
        let visible = format!("{}{}", result["content"], result.get("structuredContent").map(Value::to_string).unwrap_or_default());
        assert_eq!(visible.matches(&link).count(), 1, "{tool}: {visible}");
        assert_eq!(result["_meta"]["io.stowage/transform"]["artifacts"], 1, "{tool}");
    }
}

/// A shared upstream's session-level message (a log sent outside any call) reaches the one
/// client still there, though another left without `DELETE` before it: a session quiet for
/// `absent_after_secs` with no stream open does not count. With the wait long, the abandoned
/// session still counts, two clients share the upstream and the message is nobody's.
#[tokio::test]
async fn a_client_that_left_without_delete_does_not_take_session_messages_from_the_one_still_there() {
    for (absent_after_secs, delivered) in [(1, true), (600, false)] {
        let (gw, url) = start_with(None, stowage_mcp::config::GatewayConfig { absent_after_secs, ..fast_config() }).await;
        let _gone = initialize(&url).await; // a health check: initialize, then nothing
        let sid = initialize(&url).await;
        let stream = sse_request(&url, &sid).send().await.unwrap();
        assert_eq!(stream.status().as_u16(), 200);
        let mut body = stream.bytes_stream();
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let (_, _, msgs) = post(
            &url,
            Some(&sid),
            BOTH,
            rpc(2, "tools/call", json!({"name": "log_later", "arguments": {"message": "after the call", "ms": 300}})),
        )
        .await;
        assert!(msgs.last().unwrap()["result"]["content"][0]["text"].as_str().is_some_and(|t| t.starts_with("will log")), "{msgs:?}");
        let events = tokio::time::timeout(Duration::from_secs(3), read_events(&mut body, |d| d.contains("after the call")))
            .await
            .unwrap_or_default();
        let got = events.iter().any(|(_, d)| d.contains("notifications/message") && d.contains("after the call"));
        assert_eq!(got, delivered, "absent_after_secs = {absent_after_secs}: {events:?}");
        gw.shutdown();
    }
}

/// How many `stowage-fixture` children this process has (the upstream sessions' processes).
fn fixture_children() -> usize {
    let mut n = 0;
    for task in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let children = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
        for pid in children.split_whitespace() {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let exe = cmdline.split(|b| *b == 0).next().unwrap_or_default();
            n += usize::from(String::from_utf8_lossy(exe).ends_with("stowage-fixture"));
        }
    }
    n
}

/// With per-client upstream sessions (the default over HTTP), clients that leave without
/// `DELETE` cost a bounded number of upstream sessions: 1,000 sessions are opened and
/// abandoned, 200 of them after listing tools and calling one the fixture does not mark
/// read-only (which opens the client's own upstream session, a child process of the
/// fixture), with `max_upstream_sessions = 8`. The upstream never has more than 8 client
/// sessions (plus the gateway's own), the least recently used idle one making room, and a
/// client that comes after them all, one that never sends `initialized`, lists and calls as
/// usual.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_abandoned_sessions_cost_bounded_upstream_sessions_and_affect_no_one() {
    let config = stowage_mcp::config::GatewayConfig { max_upstream_sessions: 8, ..fast_config() };
    let gw = common::start_gateway(
        vec![fixture_spec("fx", None, Duration::from_secs(20))],
        shaper(Arc::new(MemSink::default())),
        config,
        stowage_mcp::SessionMode::PerClient,
    )
    .await;
    let url = format!("http://{}/mcp", stowage_mcp::run::spawn_http(gw.clone(), "127.0.0.1:0").await.unwrap());
    let mut most = 0;
    for i in 0..1000 {
        let sid = initialize(&url).await;
        if i % 5 == 0 {
            let (status, _, msgs) = post(&url, Some(&sid), BOTH, rpc(2, "tools/list", json!({}))).await;
            assert_eq!(status, 200);
            assert!(msgs[0]["result"]["tools"].as_array().unwrap().iter().any(|t| t["name"] == "echo"), "{msgs:?}");
            let (_, _, msgs) =
                post(&url, Some(&sid), BOTH, rpc(3, "tools/call", json!({"name": "echo", "arguments": {"message": "hi"}}))).await;
            assert_eq!(msgs.last().unwrap()["result"]["content"][0]["text"], "hi", "{msgs:?}");
            most = most.max(gw.upstreams[0].client_sessions());
            assert!(gw.upstreams[0].sessions_held() <= 8, "sessions, starting ones and spares count against the cap");
        }
    }
    assert_eq!(most, 8, "the cap is reached and held");
    assert!(fixture_children() <= 9, "{} fixture processes", fixture_children());
    // A client that never sends `initialized` is served like any other.
    let init =
        rpc(1, "initialize", json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}));
    let (status, sid, _) = post(&url, None, BOTH, init).await;
    assert_eq!(status, 200);
    let sid = sid.unwrap();
    let (_, _, msgs) = post(&url, Some(&sid), BOTH, rpc(2, "tools/list", json!({}))).await;
    assert!(msgs[0]["result"]["tools"].as_array().unwrap().iter().any(|t| t["name"] == "echo"), "{msgs:?}");
    let (_, _, msgs) =
        post(&url, Some(&sid), BOTH, rpc(3, "tools/call", json!({"name": "echo", "arguments": {"message": "still here"}}))).await;
    assert_eq!(msgs.last().unwrap()["result"]["content"][0]["text"], "still here", "{msgs:?}");
    assert!(gw.upstreams[0].client_sessions() <= 8);
    gw.shutdown();
}
