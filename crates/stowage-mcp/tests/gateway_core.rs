//! The gateway core as a careful user and an attacker would try it: a panic costs one
//! request, upstreams that are down answer at once, each client gets its own upstream session
//! when asked to, what an upstream initiates reaches only the client it belongs to, the
//! in-process API and its events, tasks, batches and oversized messages.

use crate::common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{Client, MemSink, fast_config, fixture_spec, shaper, start_gateway};
use serde_json::{Value, json};
use stowage_mcp::config::{TransportSpec, UpstreamSpec};
use stowage_mcp::events::{CallOutcome, GatewayEvent};
use stowage_mcp::{CallOptions, Caller, GatewayError, Outbox, SessionKind, SessionMode};

const T: Duration = Duration::from_secs(20);

fn text(r: &Value) -> String {
    r["result"]["content"][0]["text"].as_str().unwrap_or_default().to_owned()
}

/// A fault injected on purpose: the panicking request gets an internal error, and the same
/// session, another session and the process all carry on.
#[tokio::test]
async fn a_panic_answers_its_request_and_everything_else_carries_on() {
    let a = Client::start(vec![fixture_spec("fx", None, T)], Arc::new(MemSink::default()), fast_config(), None).await;
    let b = Client::connect(a.gateway.clone(), None, json!({})).await;
    a.gateway.inject_panic(Some("echo"));
    let r = a.request_within(Duration::from_secs(5), "tools/call", json!({"name": "echo", "arguments": {"message": "boom"}})).await;
    assert_eq!(r["error"]["code"], -32603, "{r}");
    assert!(r["error"]["message"].as_str().unwrap().contains("internal error while handling tools/call"), "{r}");
    let other = b.call("pid", json!({})).await;
    assert!(text(&other).parse::<u32>().is_ok(), "another session carries on: {other}");
    a.gateway.inject_panic(None);
    let again = a.call("echo", json!({"message": "fine"})).await;
    assert_eq!(text(&again), "fine", "the same session carries on: {again}");
}

/// An upstream that cannot start answers every call at once, naming itself and why.
#[tokio::test]
async fn a_call_to_a_dead_upstream_answers_at_once_with_its_last_failure() {
    let dead = UpstreamSpec::new("ghost", TransportSpec::stdio("/nonexistent/ghost-server", vec![]), Duration::from_secs(300));
    let specs = vec![fixture_spec("fx", None, T), dead];
    let gw = stowage_mcp::Gateway::builder(fast_config(), specs, shaper(Arc::new(MemSink::default()))).start();
    assert_eq!(gw.wait_ready(Duration::from_secs(2)).await, 1);
    let session = gw.open_session(SessionKind::InProcess, Caller::default(), None);
    // The dead upstream lists no tools; its prompts/resources route fails fast too.
    let started = Instant::now();
    // A name it never listed is still its to answer: it is down, and the call says why.
    let e = gw.call_tool(&session, "ghost_anything", json!({}), CallOptions::default()).await.unwrap_err();
    assert!(e.to_string().contains("upstream ghost is unavailable: cannot run /nonexistent/ghost-server"), "{e}");
    // A name that names no upstream is the gateway's to refuse.
    let e = gw.call_tool(&session, "nobody_anything", json!({}), CallOptions::default()).await.unwrap_err();
    assert!(matches!(e, GatewayError::UnknownTool(_)), "{e}");
    let unready = gw.unready_upstreams();
    assert_eq!(unready.len(), 1);
    assert_eq!(unready[0].0, "ghost");
    assert!(unready[0].1.contains("cannot run /nonexistent/ghost-server"), "{unready:?}");
    assert!(started.elapsed() < Duration::from_secs(1));
    gw.shutdown();

    // A read routed to it (the only upstream) fails at once, naming it and its failure; so
    // does an HTTP upstream nobody listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let nobody = UpstreamSpec::new(
        "gone",
        TransportSpec::Http { url: format!("http://127.0.0.1:{port}/mcp"), headers: Default::default(), ca_file: None },
        Duration::from_secs(300),
    );
    let ghost = UpstreamSpec::new("ghost", TransportSpec::stdio("/nonexistent/ghost-server", vec![]), Duration::from_secs(300));
    for (spec, name, why) in [(ghost, "ghost", "cannot run /nonexistent/ghost-server"), (nobody, "gone", "unreachable")] {
        let gw = stowage_mcp::Gateway::builder(fast_config(), vec![spec], shaper(Arc::new(MemSink::default()))).start();
        assert!(common::eventually(5, || gw.unready_upstreams().first().is_some_and(|u| u.1 != "still starting")).await);
        let c = Client::connect(gw.clone(), None, json!({})).await;
        let started = Instant::now();
        let r = c.request("resources/read", json!({"uri": "file:///x"})).await;
        let e = r["error"]["message"].as_str().unwrap_or_default();
        assert!(e.contains(&format!("upstream {name} is unavailable")) && e.contains(why), "{r}");
        assert!(started.elapsed() < Duration::from_secs(1), "took {:?}", started.elapsed());
        gw.shutdown();
    }
}

/// A stdio upstream that dies during the handshake is reported as such.
#[tokio::test]
async fn an_upstream_that_dies_during_start_up_says_so() {
    let spec = UpstreamSpec::new("quits", TransportSpec::stdio("sh", vec!["-c".into(), "exit 7".into()]), Duration::from_secs(300));
    let gw = stowage_mcp::Gateway::builder(fast_config(), vec![spec], shaper(Arc::new(MemSink::default()))).start();
    assert!(common::eventually(5, || gw.unready_upstreams().first().is_some_and(|u| u.1 != "still starting")).await);
    let reason = gw.unready_upstreams()[0].1.clone();
    assert!(reason.contains("during start-up") && reason.contains("exited with status 7"), "{reason}");
    assert!(!reason.contains("during the call"), "{reason}");
    gw.shutdown();
}

/// In `per_client` mode each client has its own upstream child; in `shared` mode they share
/// one. A client whose session ends takes its child with it.
#[tokio::test]
async fn per_client_mode_gives_each_client_its_own_upstream_session() {
    let gw =
        start_gateway(vec![fixture_spec("fx", None, T)], shaper(Arc::new(MemSink::default())), fast_config(), SessionMode::PerClient).await;
    let a = gw.open_session(SessionKind::InProcess, Caller::default(), None);
    let b = gw.open_session(SessionKind::InProcess, Caller::default(), None);
    let pid = |r: stowage_mcp::ToolOutcome| r.result["content"][0]["text"].as_str().unwrap().parse::<i32>().unwrap();
    let pa = pid(gw.call_tool(&a, "pid", json!({}), CallOptions::default()).await.unwrap());
    let pb = pid(gw.call_tool(&b, "pid", json!({}), CallOptions::default()).await.unwrap());
    let pa2 = pid(gw.call_tool(&a, "pid", json!({}), CallOptions::default()).await.unwrap());
    assert_ne!(pa, pb, "two clients, two upstream sessions");
    assert_eq!(pa, pa2, "one client keeps its upstream session");
    assert_eq!(gw.upstreams[0].client_sessions(), 2);
    gw.close_session(&a);
    let gone = common::eventually(5, || nix::sys::signal::kill(nix::unistd::Pid::from_raw(pa), None).is_err() || zombie(pa)).await;
    assert!(gone, "the ended session's child {pa} is still running");
    assert_eq!(gw.upstreams[0].client_sessions(), 1);
    gw.shutdown();

    let shared =
        start_gateway(vec![fixture_spec("fx", None, T)], shaper(Arc::new(MemSink::default())), fast_config(), SessionMode::Shared).await;
    let a = shared.open_session(SessionKind::InProcess, Caller::default(), None);
    let b = shared.open_session(SessionKind::InProcess, Caller::default(), None);
    let pa = pid(shared.call_tool(&a, "pid", json!({}), CallOptions::default()).await.unwrap());
    let pb = pid(shared.call_tool(&b, "pid", json!({}), CallOptions::default()).await.unwrap());
    assert_eq!(pa, pb, "shared mode: one upstream session");
    shared.shutdown();
}

fn zombie(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default().contains(") Z ")
}

/// At the cap, an idle client session makes room; with none idle, the newcomer is told why.
#[tokio::test]
async fn the_client_session_cap_evicts_an_idle_one_or_refuses_clearly() {
    let config = stowage_mcp::GatewayConfig { max_upstream_sessions: 1, ..fast_config() };
    let gw = start_gateway(vec![fixture_spec("fx", None, T)], shaper(Arc::new(MemSink::default())), config, SessionMode::PerClient).await;
    let a = gw.open_session(SessionKind::InProcess, Caller::default(), None);
    let b = gw.open_session(SessionKind::InProcess, Caller::default(), None);
    gw.call_tool(&a, "pid", json!({}), CallOptions::default()).await.unwrap();
    // `a` is idle: `b` takes its place.
    gw.call_tool(&b, "pid", json!({}), CallOptions::default()).await.unwrap();
    assert_eq!(gw.upstreams[0].client_sessions(), 1);
    // `b` busy (a slow call in flight): `a` is refused, clearly.
    let gw2 = gw.clone();
    let b2 = b.clone();
    let slow = tokio::spawn(async move { gw2.call_tool(&b2, "slow", json!({"ms": 1500}), CallOptions::default()).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let e = gw.call_tool(&a, "pid", json!({}), CallOptions::default()).await.unwrap_err().to_string();
    assert!(e.contains("already has 1 client sessions open") && e.contains("max_upstream_sessions"), "{e}");
    slow.await.unwrap().unwrap();
    gw.shutdown();
}

/// The in-process API runs the MCP path: the rewritten result, the transform report, and the
/// events a call publishes, in order.
#[tokio::test]
async fn in_process_calls_return_the_report_and_publish_events() {
    let sink = Arc::new(MemSink::default());
    let gw = start_gateway(vec![fixture_spec("fx", None, T)], shaper(sink.clone()), fast_config(), SessionMode::Shared).await;
    let mut events = gw.events().subscribe();
    let session = gw.open_session(SessionKind::InProcess, Caller { tenant: Some("acme".into()), user: Some("ana".into()) }, None);
    let names: Vec<String> = gw.list_tools(&session).iter().map(|t| t["name"].as_str().unwrap().to_owned()).collect();
    assert!(names.contains(&"get_view_pdf".to_owned()), "{names:?}");
    let (progress, mut progress_rx) = Outbox::channel();
    let opts = CallOptions {
        trace_id: Some("run-1".into()),
        progress: Some(progress),
        progress_token: Some(json!("p1")),
        keep_original: false,
        host: None,
    };
    let out = gw.call_tool(&session, "get_view_pdf", json!({}), opts).await.unwrap();
    let link = out.result["content"].as_array().unwrap().iter().find(|b| b["type"] == "resource_link").expect("a link");
    assert!(link["uri"].as_str().unwrap().starts_with("artifact://get_view_pdf_"));
    let report = out.report.transform.as_ref().expect("a transform report");
    assert_eq!(report.artifacts.len(), 1);
    assert_eq!(report.artifacts[0].pointer, "/content/0/text#/data");
    assert!(out.report.bytes_in > 400_000 && out.report.bytes_out < 3_000, "{:?}", out.report);
    assert!(out.report.tokens_in > out.report.tokens_out);
    assert_eq!(out.result["_meta"]["io.stowage/transform"]["layers"], json!(["base64"]));
    // Stored under the caller: its tenant, user, this session, and the run's trace.
    let scope = sink.items.lock().unwrap().values().next().unwrap().1.scope.clone();
    assert_eq!(scope.tenant_id.as_deref(), Some("acme"));
    assert_eq!(scope.user_id.as_deref(), Some("ana"));
    assert_eq!(scope.session_id.as_deref(), Some(session.id.as_str()));
    assert_eq!(scope.trace_id.as_deref(), Some("run-1"));
    // Events: started, offloaded, finished — for this call, with its owner.
    let mut seen = Vec::new();
    while let Ok(Ok(e)) = tokio::time::timeout(Duration::from_millis(200), events.recv()).await {
        seen.push(e);
    }
    let kinds: Vec<&str> = seen
        .iter()
        .map(|e| match &**e {
            GatewayEvent::ToolCallStarted { .. } => "started",
            GatewayEvent::Offloaded { .. } => "offloaded",
            GatewayEvent::ToolCallFinished { .. } => "finished",
            _ => "other",
        })
        .filter(|k| *k != "other")
        .collect();
    assert_eq!(kinds, ["started", "offloaded", "finished"]);
    match &*seen[seen.len() - 1] {
        GatewayEvent::ToolCallFinished { outcome, artifacts, owner, tool, .. } => {
            assert_eq!((*outcome, *artifacts, tool.as_str()), (CallOutcome::Ok, 1, "get_view_pdf"));
            assert_eq!(owner.user.as_deref(), Some("ana"));
            assert_eq!(owner.trace.as_deref(), Some("run-1"));
        }
        other => panic!("{other:?}"),
    }
    // Progress reached the in-process caller with its own token.
    let out = gw
        .call_tool(&session, "progress_burst", json!({"n": 3}), CallOptions { progress: Some(Outbox::channel().0), ..Default::default() })
        .await
        .unwrap();
    assert_eq!(out.result["content"][0]["text"], "sent 3");
    assert!(progress_rx.try_recv().is_err(), "get_view_pdf sent no progress");
    // A tool the only upstream does not have is its to refuse, as it would refuse a client
    // directly; the refusal is a typed error.
    let e = gw.call_tool(&session, "nope", json!({}), CallOptions::default()).await.unwrap_err();
    assert!(matches!(&e, GatewayError::Refused { tool, code: -32602, .. } if tool == "nope"), "{e}");
    gw.shutdown();
}

/// A store failure is an event too (counted in `stowage_store_failures_total`), and the call
/// still answers: what could not be stored is withheld with a note, never inlined.
#[tokio::test]
async fn a_store_failure_is_published() {
    let gw = start_gateway(
        vec![fixture_spec("fx", None, T)],
        shaper(Arc::new(MemSink { fail: true.into(), ..Default::default() })),
        fast_config(),
        SessionMode::Shared,
    )
    .await;
    let mut events = gw.events().subscribe();
    let session = gw.open_session(SessionKind::InProcess, Caller::default(), None);
    let out = gw.call_tool(&session, "get_image", json!({}), CallOptions::default()).await.unwrap();
    assert_ne!(out.result["isError"], true, "{}", out.result);
    assert!(out.result.to_string().contains("[withheld: image/png content block"), "{}", out.result);
    let mut failed = false;
    while let Ok(Ok(e)) = tokio::time::timeout(Duration::from_millis(200), events.recv()).await {
        if let GatewayEvent::StoreFailed { message, .. } = &*e {
            assert!(message.contains("artifact_storage_failed"), "{message}");
            failed = true;
        }
    }
    assert!(failed, "no store_failed event");
    gw.shutdown();
}

/// `tools/call` whose `arguments` is not an object (`[1,2]`, a string, a number) is refused by
/// the gateway with JSON-RPC invalid params naming what it must be, for an upstream's tool and
/// the gateway's own alike; `null` counts as no arguments.
#[tokio::test]
async fn non_object_arguments_are_invalid_params_and_never_forwarded() {
    let c = Client::start(vec![fixture_spec("fx", None, T)], Arc::new(MemSink::default()), fast_config(), None).await;
    for (tool, args, kind) in
        [("echo", json!([1, 2]), "an array"), ("echo", json!("message"), "a string"), ("artifact_read", json!(7), "a number")]
    {
        let r = c.request("tools/call", json!({"name": tool, "arguments": args})).await;
        assert_eq!(r["error"]["code"], -32602, "{r}");
        let message = r["error"]["message"].as_str().unwrap();
        assert_eq!(message, format!("tools/call arguments must be an object of {tool}'s named inputs ({{\"input\": value}}), not {kind}"));
    }
    let r = c.request("tools/call", json!({"name": "pid", "arguments": null})).await;
    assert!(text(&r).parse::<u32>().is_ok(), "null is no arguments: {r}");
}

/// A tools/call result that is not an object (a bare base64 string) cannot be rewritten: the
/// client gets a clear error, and none of its bytes.
#[tokio::test]
async fn a_non_object_result_is_refused_not_relayed() {
    let c = Client::start(vec![fixture_spec("fx", None, T)], Arc::new(MemSink::default()), fast_config(), None).await;
    let r = c.call("not_object", json!({"bytes": 200_000})).await;
    assert_eq!(r["result"]["isError"], true, "{r}");
    assert!(text(&r).contains("not an object"), "{r}");
    assert!(serde_json::to_vec(&r).unwrap().len() < 1000);
    assert_eq!(text(&c.call("echo", json!({"message": "still here"})).await), "still here");
}

/// A task's result is rewritten like the tools/call it stands for: its 1 MB PNG is offloaded.
#[tokio::test]
async fn a_task_result_is_offloaded_like_a_tool_result() {
    let sink = Arc::new(MemSink::default());
    let c = Client::start(vec![fixture_spec("fx", None, T)], sink.clone(), fast_config(), None).await;
    let created = c.request("tools/call", json!({"name": "task_image", "arguments": {}, "task": {"ttl": 60000}})).await;
    let task_id = created["result"]["task"]["taskId"].as_str().expect("a task handle").to_owned();
    let status = c.request("tasks/get", json!({"taskId": task_id})).await;
    assert_eq!(status["result"]["status"], "completed", "{status}");
    let r = c.request("tasks/result", json!({"taskId": task_id})).await;
    let wire = serde_json::to_vec(&r).unwrap();
    assert!(wire.len() < 3_000, "the 1 MB image reached the client: {} bytes", wire.len());
    let link = r["result"]["content"].as_array().unwrap().iter().find(|b| b["type"] == "resource_link").expect("a resource_link");
    assert_eq!(link["mimeType"], "image/png");
    let bytes = sink.items.lock().unwrap().values().next().unwrap().0.clone();
    assert_eq!(&bytes[..], &stowage_testkit::samples::png(600, 600)[..]);
    assert!(bytes.len() > 1_000_000);
    // Unknown task ids are refused; the list shows the caller's task.
    let bad = c.request("tasks/get", json!({"taskId": "task-999"})).await;
    assert_eq!(bad["error"]["code"], -32602);
    let list = c.request("tasks/list", json!({})).await;
    assert_eq!(list["result"]["tasks"][0]["taskId"], task_id.as_str());
}

/// Batches get one error per element with that element's id; oversized messages an error
/// naming the limit, under their own id.
#[tokio::test]
async fn batches_and_oversized_messages_are_answered_clearly() {
    // The limit must still admit the fixture's own tools/list answer (a few KB, growing with
    // its tools), or the catalog would be empty and the last call unknown.
    let config = stowage_mcp::GatewayConfig { max_message_bytes: 32_768, ..fast_config() };
    let c = Client::start(vec![fixture_spec("fx", None, T)], Arc::new(MemSink::default()), config, None).await;
    let before = c.received.lock().unwrap().len();
    c.send_raw(br#"[{"jsonrpc":"2.0","id":41,"method":"ping"},{"jsonrpc":"2.0","id":"x","method":"tools/list"}]"#.to_vec());
    let big = json!({"jsonrpc": "2.0", "id": 42, "method": "tools/call", "params": {"name": "echo", "arguments": {"message": "m".repeat(40_000)}}});
    c.send_raw(serde_json::to_vec(&big).unwrap());
    assert!(common::eventually(5, || c.received.lock().unwrap().len() >= before + 2).await);
    let got: Vec<stowage_testkit::Received> = c.received.lock().unwrap()[before..].to_vec();
    let texts: Vec<String> = got.iter().map(|r| format!("{r:?}")).collect();
    assert!(texts[0].contains("\"id\": Number(41)") && texts[0].contains("batches are not supported"), "{texts:?}");
    assert!(texts[0].contains("String(\"x\")"), "{texts:?}");
    assert!(texts[1].contains("Number(42)") && texts[1].contains("over the 32768 byte limit"), "{texts:?}");
    assert_eq!(text(&c.call("echo", json!({"message": "ok"})).await), "ok");
}

/// An upstream never asks a client for what it did not declare, and `roots/list` reaches the
/// client whose upstream session asked.
#[tokio::test]
async fn an_upstream_never_asks_a_client_for_what_it_did_not_declare() {
    let handler: stowage_testkit::ServerRequestHandler = Arc::new(|_, _| Some(json!({"roots": [{"uri": "file:///work", "name": "work"}]})));
    // Shared mode, one client without roots: the request is its, and it is refused for it.
    let c = Client::start(vec![fixture_spec("fx", None, T)], Arc::new(MemSink::default()), fast_config(), Some(handler.clone())).await;
    let r = text(&c.call("roots", json!({})).await);
    assert!(r.contains("did not declare the roots capability"), "{r}");
    assert!(!c.received.lock().unwrap().iter().any(|m| matches!(m, stowage_testkit::Received::Request(_))), "the client was asked anyway");
    // A second client on the shared connection: roots can no longer be attributed to anyone.
    let d = Client::connect(c.gateway.clone(), Some(handler.clone()), json!({"roots": {}})).await;
    let r = text(&d.call("roots", json!({})).await);
    assert!(r.contains("no client of the gateway can be attributed"), "{r}");
    c.gateway.shutdown();

    // Per-client sessions: each client's own upstream asks that client, and only it.
    let gw =
        start_gateway(vec![fixture_spec("fx", None, T)], shaper(Arc::new(MemSink::default())), fast_config(), SessionMode::PerClient).await;
    let with_roots = Client::connect(gw.clone(), Some(handler.clone()), json!({"roots": {}})).await;
    let without = Client::connect(gw.clone(), Some(handler), json!({})).await;
    let r = text(&with_roots.call("roots", json!({})).await);
    assert!(r.contains("file:///work"), "{r}");
    let r = text(&without.call("roots", json!({})).await);
    assert!(r.contains("did not declare the roots capability"), "{r}");
    assert!(!without.received.lock().unwrap().iter().any(|m| matches!(m, stowage_testkit::Received::Request(_))));
    gw.shutdown();
}

/// When the client closes its input, a request waiting for the client's answer fails at once
/// and the session ends promptly (not after the request timeout).
#[tokio::test]
async fn closing_stdin_ends_the_session_promptly_even_with_a_question_pending() {
    let gw = start_gateway(
        vec![fixture_spec("fx", None, Duration::from_secs(300))],
        shaper(Arc::new(MemSink::default())),
        fast_config(),
        SessionMode::Shared,
    )
    .await;
    let (client_end, gw_end) = tokio::io::duplex(1 << 16);
    let (gr, gwr) = tokio::io::split(gw_end);
    let served = tokio::spawn(stowage_mcp::serve_stdio(gw.clone(), gr, gwr));
    // A client that declares sampling, asks for a tool that needs it, and never answers.
    let (_cr, mut cw) = tokio::io::split(client_end);
    use tokio::io::AsyncWriteExt;
    for msg in [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {"sampling": {}}, "clientInfo": {"name": "t", "version": "0"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"name": "sample", "arguments": {}}}),
    ] {
        cw.write_all(format!("{msg}\n").as_bytes()).await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = Instant::now();
    cw.shutdown().await.unwrap();
    drop(cw);
    tokio::time::timeout(Duration::from_secs(10), served).await.expect("the stdio session ended promptly").unwrap().unwrap();
    assert!(started.elapsed() < Duration::from_secs(8), "took {:?}", started.elapsed());
    gw.shutdown();
}

/// URL-mode elicitation: put to a client that declared `elicitation.url`, and its completion
/// notification follows it there; a client with form-only elicitation is never asked.
#[tokio::test]
async fn url_elicitation_reaches_the_client_that_can_take_it_and_its_completion_follows() {
    let accept: stowage_testkit::ServerRequestHandler =
        Arc::new(|method, params| (method == "elicitation/create" && params["mode"] == "url").then(|| json!({"action": "accept"})));
    let gw =
        start_gateway(vec![fixture_spec("fx", None, T)], shaper(Arc::new(MemSink::default())), fast_config(), SessionMode::PerClient).await;
    let url_client = Client::connect(gw.clone(), Some(accept.clone()), json!({"elicitation": {"form": {}, "url": {}}})).await;
    let r = url_client.call("elicit_url", json!({})).await;
    assert_eq!(text(&r), "elicitation: \"accept\"", "{r}");
    let done = common::eventually(5, || {
        url_client
            .notifications
            .lock()
            .unwrap()
            .iter()
            .any(|n| n["method"] == "notifications/elicitation/complete" && n["params"]["elicitationId"] == "fixture-elicitation-1")
    })
    .await;
    assert!(done, "the completion did not reach the client");
    let form_only = Client::connect(gw.clone(), Some(accept), json!({"elicitation": {}})).await;
    let r = form_only.call("elicit_url", json!({})).await;
    assert!(text(&r).contains("did not declare the elicitation.url capability"), "{r}");
    gw.shutdown();
}

/// A piped batch (`requests | stowage serve --stdio`): input ends at once, yet a call still
/// running is answered within the grace, on a per-client upstream session too.
#[tokio::test]
async fn a_piped_batch_gets_its_answers_after_input_ends() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let gw =
        start_gateway(vec![fixture_spec("fx", None, T)], shaper(Arc::new(MemSink::default())), fast_config(), SessionMode::PerClient).await;
    let (client_end, gw_end) = tokio::io::duplex(1 << 16);
    let (gr, gwr) = tokio::io::split(gw_end);
    let served = tokio::spawn(stowage_mcp::serve_stdio(gw.clone(), gr, gwr));
    let (mut cr, mut cw) = tokio::io::split(client_end);
    for msg in [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "slow", "arguments": {"ms": 800}}}),
    ] {
        cw.write_all(format!("{msg}\n").as_bytes()).await.unwrap();
    }
    cw.shutdown().await.unwrap();
    drop(cw);
    tokio::time::timeout(Duration::from_secs(10), served).await.expect("ended within the grace").unwrap().unwrap();
    let mut out = String::new();
    cr.read_to_string(&mut out).await.unwrap();
    let answer: Value =
        out.lines().map(|l| serde_json::from_str::<Value>(l).unwrap()).find(|m| m["id"] == 2).expect("the slow call was answered");
    assert_eq!(answer["result"]["content"][0]["text"], "slept 800 ms", "{answer}");
    gw.shutdown();
}

/// An upstream's stderr can hold anything: a line that is not UTF-8 and a 20 MB line are read
/// (lossily, cut) and the upstream keeps working; nothing stops draining it.
#[tokio::test]
async fn an_upstream_stderr_of_garbage_and_giant_lines_does_not_stop_it() {
    let c = Client::start(vec![fixture_spec("fx", None, T)], Arc::new(MemSink::default()), fast_config(), None).await;
    for _ in 0..3 {
        let r = c.call("stderr_noise", json!({"bytes": 20_000_000})).await;
        assert_eq!(text(&r), "wrote 20000000 bytes to stderr", "{r}");
    }
    assert_eq!(text(&c.call("echo", json!({"message": "alive"})).await), "alive");
    assert!(c.gateway.unready_upstreams().is_empty(), "the upstream died: {:?}", c.gateway.unready_upstreams());
}

/// Base64 leaves log data, progress messages and JSON-RPC error data too, through the same
/// pipeline, before they reach the client: what the client receives is a stub, and the bytes
/// are in the store under the client's scope.
#[tokio::test]
async fn base64_leaves_logs_progress_and_error_data_too() {
    let sink = Arc::new(MemSink::default());
    let c = Client::start(vec![fixture_spec("fx", None, T)], sink.clone(), fast_config(), None).await;
    let pdf_b64_start = "JVBERi0";
    assert_eq!(text(&c.call("heavy_log", json!({})).await), "logged a pdf");
    let progress = c.request("tools/call", json!({"name": "heavy_progress", "arguments": {}, "_meta": {"progressToken": "p"}})).await;
    assert_eq!(text(&progress), "progressed with a pdf");
    let error = c.call("heavy_error", json!({})).await;
    assert_eq!(error["error"]["message"], "failed, report attached", "{error}");
    let data = error["error"]["data"]["report"].as_str().unwrap();
    assert!(data.contains("artifact://") && !data.contains(pdf_b64_start), "{data}");
    assert!(common::eventually(5, || c.notifications.lock().unwrap().len() >= 2).await);
    let notes = c.notifications.lock().unwrap().clone();
    let log = notes.iter().find(|n| n["method"] == "notifications/message").expect("the log message");
    let progress = notes.iter().find(|n| n["method"] == "notifications/progress").expect("the progress");
    for n in [log, progress] {
        let s = n.to_string();
        assert!(!s.contains(pdf_b64_start) && s.contains("artifact://") && s.len() < 2_000, "{s}");
    }
    assert_eq!(progress["params"]["progressToken"], "p");
    // Three PDFs stored, each under this client's session.
    let items = sink.items.lock().unwrap();
    let pdfs: Vec<_> = items.values().filter(|(b, _)| b.starts_with(b"%PDF")).collect();
    assert_eq!(pdfs.len(), 3);
    assert!(pdfs.iter().all(|(_, o)| o.scope.user_id.as_deref() == Some("local")));
}

/// With the store full, an upstream error whose data carries a blob becomes a line that says
/// so, and the store's own message (which names a server path) reaches only the log.
#[tokio::test]
async fn error_data_the_store_cannot_take_names_no_server_path() {
    let full = Arc::new(MemSink { fail: true.into(), ..Default::default() });
    let c = Client::start(vec![fixture_spec("fx", None, T)], full, fast_config(), None).await;
    let error = c.call("heavy_error", json!({})).await;
    assert_eq!(error["error"]["message"], "failed, report attached", "{error}");
    let data = error["error"]["data"].to_string();
    assert!(data.contains("artifact_storage_failed") && data.contains("could not take it"), "{data}");
    assert!(!data.contains("/nonexistent") && !data.contains("JVBERi0"), "no server path, no base64: {data}");
}

/// A storm of `list_changed` from an upstream costs one refetch of its lists, not one each.
#[tokio::test]
async fn a_storm_of_list_changes_is_one_refetch() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("fixture.log");
    let c = Client::start(vec![fixture_spec("fx", Some(&log), T)], Arc::new(MemSink::default()), fast_config(), None).await;
    let lists = || common::read_log(&log).lines().filter(|l| l.starts_with("tools/list")).count();
    let before = lists();
    assert_eq!(text(&c.call("list_storm", json!({"n": 200})).await), "announced 200 list changes");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let refetches = lists() - before;
    assert!((1..=2).contains(&refetches), "{refetches} refetches for 200 list changes");
    // Clients are told, a bounded number of times.
    let told = c.notifications.lock().unwrap().iter().filter(|n| n["method"] == "notifications/tools/list_changed").count();
    assert!((1..=2).contains(&told), "{told} list_changed notifications reached the client");
}
