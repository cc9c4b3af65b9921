//! The planner against what real models and real tools do: Pydantic-marked tools on
//! FastMCP 4.1.2 (`tests/fixtures/rfc_tools.py`), the scripted model server over real HTTP in
//! both wire formats, streamed and whole. Each test asserts what the model was sent and what
//! the user got (payload and events).
//!
//! A missing Python peer skips the FastMCP tests loudly on a developer machine and fails them
//! under `CI`, where `scripts/test` installs it.

use crate::common;

use std::time::Duration;

use common::*;
use serde_json::{Value, json};
use stowage_agent::events::StepStatus;
use stowage_agent::{AgentEvent, Backend, Vision};

fn tool(name: &str, args: Value) -> Turn {
    Turn::tool(name, args)
}

const BOTH: [Backend; 2] = [Backend::Openai, Backend::Anthropic];

/// The text of every message the model was sent in request `i`, joined.
fn request(h: &Harness, i: usize) -> Value {
    serde_json::from_str(&h.sent()[i]).unwrap()
}

#[tokio::test]
async fn the_model_reads_every_text_block_and_sees_images_in_both_wire_formats_streamed_or_not() {
    for backend in BOTH {
        for stream in [true, false] {
            let script = vec![tool("incidents", json!({})), tool("screenshot", json!({})), answer("INC-2 is the root cause.")];
            let Some((h, _)) = fastmcp_harness(script, backend, true, |c| {
                c.vision = Vision::On;
                c.stream = stream;
            })
            .await
            else {
                return;
            };
            let (out, events) = h.run("ana", "What broke?", None).await;
            let out = out.unwrap();
            assert_eq!(out.payload.raw_answer, "INC-2 is the root cause.");
            assert_eq!(chunk_text(&events), "INC-2 is the root cause.", "{backend:?} stream={stream}");
            for body in h.sent() {
                assert_eq!(request_stream(&body), stream);
                // Signed links never reach the model, even though this shaper mints them.
                assert!(!body.contains("token="), "a signed link in a model request: {backend:?}");
            }
            // Every text block of the result, in order.
            let second = &h.sent()[1];
            let at = |s: &str| second.find(s).unwrap_or_else(|| panic!("{s} not sent: {second}"));
            assert!(at("Found 3 matching incidents:") < at("INC-1 disk full") && at("INC-1 disk full") < at("INC-2 certificate expired"));
            assert!(at("INC-2 certificate expired") < at("INC-3 slow queries"));
            // The screenshot: an image part in the wire format, after its line.
            let third = request(&h, 2);
            let msgs = third["messages"].as_array().unwrap();
            match backend {
                Backend::Openai => {
                    let tool_msg = msgs.iter().rev().find(|m| m["role"] == "tool").unwrap();
                    assert!(tool_msg["content"].as_str().unwrap().contains("The dashboard at 09:00:"));
                    let last = msgs.last().unwrap();
                    assert_eq!(last["role"], "user", "images follow the tool messages: {last}");
                    let url = last["content"][1]["image_url"]["url"].as_str().unwrap();
                    // The preview the gateway made of the offloaded PNG.
                    assert!(url.starts_with("data:image/jpeg;base64,/9j/"), "{}", &url[..40]);
                }
                Backend::Anthropic => {
                    let result = &msgs.last().unwrap()["content"][0];
                    assert_eq!(result["type"], "tool_result");
                    let blocks = result["content"].as_array().unwrap();
                    assert_eq!(blocks[0]["text"].as_str().map(|t| t.starts_with("The dashboard at 09:00:")), Some(true), "{result}");
                    let img = blocks.iter().find(|b| b["type"] == "image").expect("an image block");
                    assert_eq!(img["source"]["type"], "base64");
                    assert_eq!(img["source"]["media_type"], "image/jpeg");
                    assert!(img["source"]["data"].as_str().unwrap().starts_with("/9j/"));
                }
            }
            // The payload has the screenshot with a working signed link.
            let shot = &out.payload.artifacts["screenshot"];
            let url = shot.as_object().unwrap().values().find_map(|v| v.pointer("/$artifact/url")).and_then(Value::as_str);
            assert!(url.is_some_and(|u| u.contains("token=")), "{shot}");
            // How the run went.
            assert_eq!((out.run.finish_reason.as_str(), out.run.steps, out.run.model_requests), ("answer", 2, 3));
            assert!(out.run.usage.input_tokens > 0);
        }
    }
}

fn request_stream(body: &str) -> bool {
    serde_json::from_str::<Value>(body).unwrap()["stream"].as_bool().unwrap()
}

#[tokio::test]
async fn a_model_without_vision_gets_the_images_line_and_the_image_budget_holds() {
    // Vision off (a model not known to take images): the line, no image part.
    let Some((h, _)) = fastmcp_harness(vec![tool("screenshot", json!({})), answer("ok")], Backend::Openai, false, |_| {}).await else {
        return;
    };
    h.run("ana", "Show me", None).await.0.unwrap();
    let body = &h.sent()[1];
    assert!(!body.contains("image_url") && !body.contains("base64,"), "no image part for a model without vision");
    assert!(body.contains("[image image/jpeg") && body.contains("a preview of artifact://"), "{body}");
    // Fifty images from one tool, then more: no request carries more than the budget.
    for backend in BOTH {
        let script =
            vec![tool("many_images", json!({"n": 50})), tool("screenshot", json!({})), tool("many_images", json!({"n": 5})), answer("ok")];
        let Some((h, _)) = fastmcp_harness(script, backend, false, |c| {
            c.vision = Vision::On;
            c.max_images = 3;
        })
        .await
        else {
            return;
        };
        let (out, _) = h.run("ana", "Images", None).await;
        assert_eq!(out.unwrap().run.finish_reason, "answer");
        // (An OpenAI image part is {"type":"image_url","image_url":{…}}: counted by its type.)
        let parts: Vec<usize> = h
            .sent()
            .iter()
            .map(|body| body.matches("\"type\":\"image_url\"").count() + body.matches("\"type\":\"image\"").count())
            .collect();
        assert_eq!(parts, [0, 3, 3, 3], "images per request, {backend:?}");
        // The last request shows the newest images; older ones stand as their line.
        assert!(h.sent()[3].contains("not shown: over one request's image budget"), "{backend:?}");
    }
}

#[tokio::test]
async fn sources_come_from_the_original_result_marked_on_list_items_capped() {
    let script = vec![tool("search_kb", json!({"query": "refunds", "n": 300})), answer("See the docs.")];
    let Some((h, _)) = fastmcp_harness(script, Backend::Openai, false, |c| c.max_sources = 250).await else { return };
    let (out, _) = h.run("ana", "Refund policy?", None).await;
    let p = out.unwrap().payload;
    // Not the three the gateway's shortened copy holds: all of them, up to the cap.
    assert_eq!(p.sources.len(), 250);
    assert_eq!(p.sources[0].url.as_deref(), Some("https://kb.example/0"));
    assert_eq!(p.sources[249].relevance_score, Some(0.751));
    assert!(p.warnings.iter().any(|w| w.starts_with("sources_capped: 50 more sources")), "{:?}", p.warnings);
    // The model's request stayed small all the same.
    assert!(h.sent()[1].len() < 20_000, "{} bytes", h.sent()[1].len());
}

#[tokio::test]
async fn live_chunks_name_their_call_and_key_and_two_calls_are_told_apart() {
    for backend in BOTH {
        let script =
            vec![tool("analyze_sales", json!({"quarter": "Q3"})), tool("analyze_sales", json!({"quarter": "Q4"})), answer("Both.")];
        let Some((h, _)) = fastmcp_harness(script, backend, false, |_| {}).await else { return };
        let (out, events) = h.run("ana", "Q3 and Q4?", None).await;
        let p = out.unwrap().payload;
        let chunks: Vec<(String, u64, bool, String)> = events
            .iter()
            .filter_map(|e| match e {
                AgentEvent::ArtifactChunk { call_id, seq, done, key, tool, .. } => {
                    assert_eq!(tool, "analyze_sales");
                    Some((call_id.clone(), *seq, *done, key.clone()))
                }
                _ => None,
            })
            .collect();
        let c = |call: &str, seq, done, key: &str| (call.to_owned(), seq, done, key.to_owned());
        assert_eq!(
            chunks,
            [
                c("c1", 0, false, "chart_options"),
                c("c1", 1, true, "chart_options"),
                c("c2", 0, false, "chart_options#2"),
                c("c2", 1, true, "chart_options#2")
            ],
            "{backend:?}"
        );
        let a = p.artifacts["analyze_sales"].as_object().unwrap();
        let mut keys: Vec<&str> = a.keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(keys, ["chart_options", "chart_options#2", "raw_data", "raw_data#2"], "each artifact once, under its own key");
        assert_eq!(a["chart_options"]["title"]["text"], "Q3 sales");
        assert_eq!(a["chart_options#2"]["title"]["text"], "Q4 sales");
        assert_eq!(a["raw_data#2"].as_array().map(Vec::len), Some(847));
        // The model saw the placeholders, not the values.
        assert!(h.sent()[1].contains("<artifact:dict stream=sales_chart>"), "{}", h.sent()[1]);
        let steps: Vec<String> =
            events.iter().filter_map(|e| if let AgentEvent::Step { call_id, .. } = e { Some(call_id.clone()) } else { None }).collect();
        assert_eq!(steps, ["c1", "c1", "c2", "c2"]);
    }
}

#[tokio::test]
async fn an_artifact_and_its_mirror_are_collected_once() {
    let script = vec![tool("rows", json!({"n": 20000})), tool("table", json!({"n": 5000})), answer("Listed.")];
    let Some((h, _)) = fastmcp_harness(script, Backend::Openai, false, |_| {}).await else { return };
    let p = h.run("ana", "List", None).await.0.unwrap().payload;
    let rows = p.artifacts["rows"].as_object().unwrap();
    assert_eq!(rows.len(), 1, "FastMCP's {{\"result\": …}} and its text are one artifact: {:?}", rows.keys().collect::<Vec<_>>());
    let table = p.artifacts["table"].as_object().unwrap();
    assert_eq!(table.keys().collect::<Vec<_>>(), ["rows"], "the marked field, once");
}

#[tokio::test]
async fn tool_names_are_mapped_to_what_model_apis_accept_and_back() {
    for backend in BOTH {
        let script = vec![
            tool("kb_search", json!({"q": "vpn"})),
            tool("files_read", json!({"path": "/etc/motd"})),
            tool("no_such_tool", json!({})),
            answer("Done."),
        ];
        let Some((h, _)) = fastmcp_harness(script, backend, false, |_| {}).await else { return };
        let (out, events) = h.run("ana", "Find", None).await;
        assert_eq!(out.unwrap().payload.raw_answer, "Done.");
        let first = request(&h, 0);
        let names: Vec<&str> = first["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().or_else(|| t.pointer("/function/name").and_then(Value::as_str)).unwrap())
            .collect();
        let re = |n: &str| !n.is_empty() && n.len() <= 64 && n.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        assert!(names.iter().all(|n| re(n)), "{names:?}");
        assert!(names.contains(&"kb_search") && names.contains(&"files_read"), "{names:?}");
        assert!(!names.contains(&"artifact_url"), "no tool that mints signed links: {names:?}");
        let steps: Vec<(String, StepStatus)> = events
            .iter()
            .filter_map(|e| if let AgentEvent::Step { node, status, .. } = e { Some((node.clone(), *status)) } else { None })
            .filter(|(_, s)| *s != StepStatus::Started)
            .collect();
        assert_eq!(
            steps,
            [("kb.search".into(), StepStatus::Ok), ("files/read".into(), StepStatus::Ok), ("no_such_tool".into(), StepStatus::Error)]
        );
        assert!(h.sent()[1].contains("kb.search found: vpn"));
        assert!(h.sent()[2].contains("contents of /etc/motd"));
        assert!(h.sent()[3].contains("no_such_tool"), "the model heard about the unknown tool");
    }
}

#[tokio::test]
async fn max_wall_time_bounds_a_hanging_tool_and_cancels_it_upstream() {
    let script = vec![tool("incidents", json!({})), tool("hang", json!({})), answer("never")];
    let Some((h, marker)) = fastmcp_harness(script, Backend::Anthropic, false, |c| c.max_wall_time = Duration::from_secs(2)).await else {
        return;
    };
    let started = std::time::Instant::now();
    let (out, events) = h.run("ana", "Wait", None).await;
    assert!(started.elapsed() < Duration::from_secs(8), "took {:?} (the upstream timeout is 30 s)", started.elapsed());
    let out = out.unwrap();
    assert_eq!(out.payload.route.as_deref(), Some("partial"));
    assert_eq!(out.payload.warnings, ["max_wall_time_reached"]);
    assert!(out.payload.raw_answer.contains("INC-2"), "what was collected is kept: {}", out.payload.raw_answer);
    assert!(events.iter().any(|e| matches!(e, AgentEvent::Step { node, status: StepStatus::Error, .. } if node == "hang")));
    // The tool was told: FastMCP cancelled its task.
    let mut told = false;
    for _ in 0..50 {
        if std::fs::read_to_string(&marker).is_ok_and(|s| s == "cancelled") {
            told = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let _ = std::fs::remove_file(&marker);
    assert!(told, "the hanging call was not cancelled upstream");
}

#[tokio::test]
async fn malformed_arguments_and_cut_replies_get_one_repair_round_in_both_formats() {
    for backend in BOTH {
        for stream in [true, false] {
            let broken = Turn::RawTools { thought: String::new(), calls: vec![("echo".into(), "{\"message\": \"hi\", ".into())] };
            let script = vec![
                broken.clone(),
                tool("echo", json!({"message": "hello"})),
                Turn::Cut(Box::new(Turn::Text("{\"raw_answer\": \"The answer is very lo".into()))),
                answer("hello back"),
            ];
            let h = harness_with(script, backend, |c| c.stream = stream).await;
            let (out, _) = h.run("ana", "Say hi", None).await;
            let out = out.unwrap();
            assert_eq!(out.payload.raw_answer, "hello back", "{backend:?} stream={stream}");
            assert!(out.payload.warnings.is_empty(), "{:?}", out.payload.warnings);
            let sent = h.sent();
            assert!(sent[1].contains("the arguments of echo are not valid JSON"), "{}", sent[1]);
            assert!(sent[3].contains("cut off at the token limit"), "{}", sent[3]);
            // The history stays valid for the API: the broken call is answered by a result.
            let second = request(&h, 1);
            let msgs = second["messages"].as_array().unwrap();
            match backend {
                Backend::Openai => {
                    let call_id = msgs.iter().find_map(|m| m.pointer("/tool_calls/0/id")).unwrap();
                    assert!(msgs.iter().any(|m| m["role"] == "tool" && &m["tool_call_id"] == call_id));
                }
                Backend::Anthropic => {
                    assert_eq!(msgs.last().unwrap()["content"][0]["type"], "tool_result");
                    assert_eq!(msgs[1]["content"][0]["input"], json!({}), "the input is an object, as the API requires");
                }
            }
        }
        // Broken more often than the repair budget allows: the run ends with what it has.
        let broken = Turn::RawTools { thought: String::new(), calls: vec![("echo".into(), "not json".into())] };
        let h = harness_with(vec![broken.clone(), broken], backend, |c| c.max_repairs = 1).await;
        let out = h.run("ana", "Say hi", None).await.0.unwrap();
        assert_eq!(out.payload.route.as_deref(), Some("partial"));
        assert!(
            out.payload.warnings[0].starts_with("invalid_tool_arguments: the arguments of echo are not valid JSON"),
            "{:?}",
            out.payload.warnings
        );
    }
}

#[tokio::test]
async fn small_faults_in_a_final_answer_are_fixed_with_a_warning_each() {
    let sloppy = json!({
        "raw_answer": "Las ventas subieron.", "thought": "I am done", "confidence": 92, "language": "Spanish",
        "suggested_actions": [{"action_id": "export_csv"}]
    });
    let h = harness(vec![Turn::Text(sloppy.to_string())], |_| {}).await;
    let (out, events) = h.run("ana", "¿Ventas?", None).await;
    let p = out.unwrap().payload;
    assert_eq!(p.raw_answer, "Las ventas subieron.");
    assert_eq!((p.confidence, p.language.as_deref()), (Some(0.92), Some("es")));
    assert_eq!(p.suggested_actions[0].label, "export_csv");
    assert_eq!(p.warnings.len(), 4, "{:?}", p.warnings);
    assert_eq!(h.sent().len(), 1, "no repair round for small faults");
    assert_eq!(chunk_text(&events), "Las ventas subieron.");
    // Prose is the answer, streamed as the answer once known.
    let h = harness(vec![Turn::Text("Sales rose 15% in Q4.".into())], |_| {}).await;
    let (out, events) = h.run("ana", "Sales?", None).await;
    assert_eq!(out.unwrap().payload.raw_answer, "Sales rose 15% in Q4.");
    assert_eq!(chunk_text(&events), "Sales rose 15% in Q4.");
}

#[tokio::test]
async fn bad_model_output_is_bounded_with_a_payload_or_one_error() {
    // 10,000 tool calls in one reply: the first 16 run, the model is told about the rest.
    let calls: Vec<(String, Value)> = (0..10_000).map(|i| ("echo".to_owned(), json!({"message": format!("m{i}")}))).collect();
    let h = harness(vec![Turn::Tools { thought: String::new(), calls }, answer("done")], |c| c.request_timeout = Duration::from_secs(120))
        .await;
    let (out, events) = h.run("ana", "Spam", None).await;
    assert_eq!(out.unwrap().payload.raw_answer, "done");
    let ran = events.iter().filter(|e| matches!(e, AgentEvent::Step { status: StepStatus::Ok, .. })).count();
    assert_eq!(ran, 16);
    assert!(h.sent()[1].contains("9984 more tool calls in your reply were not run"), "told");
    // A stream that never ends: the request timeout, one error event.
    let h = harness(vec![Turn::Endless], |c| c.request_timeout = Duration::from_millis(700)).await;
    let (out, events) = h.run("ana", "Talk", None).await;
    assert_eq!(out.unwrap_err().code(), "model_timeout");
    assert!(matches!(events.last(), Some(AgentEvent::Error { .. })));
    // Garbage: a protocol error naming what came.
    let garbage = Turn::Raw { content_type: "text/event-stream".into(), body: "data: ¿¿??\n\n".into() };
    let h = harness(vec![garbage], |_| {}).await;
    let e = h.run("ana", "Talk", None).await.0.unwrap_err();
    assert_eq!(e.code(), "model_protocol_error");
    assert!(e.to_string().contains("not JSON"), "{e}");
    // A tool that returns a hundred text blocks: the request stays within the planner's budget,
    // the rest is stored and referenced.
    let Some((h, _)) = fastmcp_harness(vec![tool("many_blocks", json!({"n": 100})), answer("ok")], Backend::Openai, false, |_| {}).await
    else {
        return;
    };
    h.run("ana", "Blocks", None).await.0.unwrap();
    let body = &h.sent()[1];
    assert!(body.len() < 24_000, "{} bytes", body.len());
    assert!(body.contains("artifact://"), "a reference to what did not fit: {body}");
}

#[tokio::test]
async fn models_as_served_whole_answers_and_retries() {
    for backend in BOTH {
        // A plain JSON answer to a streamed request is read as the answer.
        let h = harness_with(vec![Turn::Whole(Box::new(Turn::Text(json!({"raw_answer": "whole"}).to_string())))], backend, |_| {}).await;
        assert_eq!(h.run("ana", "Q", None).await.0.unwrap().payload.raw_answer, "whole");
        // 429 with Retry-After, then 503: retried, then answered.
        let script = vec![Turn::RetryAfter(429, "1".into()), Turn::Status(503, "overloaded".into()), answer("after retries")];
        let h = harness_with(script, backend, |c| c.max_retries = 2).await;
        let started = std::time::Instant::now();
        let out = h.run("ana", "Q", None).await.0.unwrap();
        assert_eq!(out.payload.raw_answer, "after retries");
        assert!(started.elapsed() >= Duration::from_millis(900), "Retry-After was honoured");
        assert_eq!(h.stub.requests().len(), 3);
    }
}

#[tokio::test]
async fn runs_over_http_heartbeat_and_cancel_with_a_partial_payload() {
    use futures::StreamExt;
    let script = vec![tool("incidents", json!({})), tool("hang", json!({})), answer("never")];
    let Some((h, marker)) = fastmcp_harness(script, Backend::Openai, false, |_| {}).await else { return };
    let slot = stowage_agent::http::PlannerSlot::default();
    let _ = slot.set(h.planner.clone());
    let guard = std::sync::Arc::new(stowage_http::BrowserGuard::new("127.0.0.1:0", &[], &[]));
    let app = stowage_agent::http::router_with_heartbeat(slot, None, guard, Duration::from_millis(200));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    let client = reqwest::Client::new();
    let resp = client
        .post(format!("http://{addr}/agent/runs"))
        .header("content-type", "application/json")
        .body(json!({"query": "wait for it"}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let run_id = resp.headers()[stowage_agent::http::RUN_HEADER].to_str().unwrap().to_owned();
    let mut body = resp.bytes_stream();
    let mut text = String::new();
    let read_until = |text: &String, needle: &str| text.contains(needle);
    while !read_until(&text, ": heartbeat") {
        let chunk = tokio::time::timeout(Duration::from_secs(10), body.next()).await.unwrap().unwrap().unwrap();
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(text.contains("\"node\":\"hang\""), "the hanging step has started: {text}");
    // Unknown ids answer 404, the run's own id cancels it.
    let gone = client.delete(format!("http://{addr}/agent/runs/run-nope")).send().await.unwrap();
    assert_eq!(gone.status(), 404);
    let del = client.delete(format!("http://{addr}/agent/runs/{run_id}")).send().await.unwrap();
    assert_eq!(del.status(), 202);
    while let Ok(Some(Ok(chunk))) = tokio::time::timeout(Duration::from_secs(10), body.next()).await {
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    let done = text.split("event: done\ndata: ").nth(1).expect("a done event").lines().next().unwrap();
    let done: Value = serde_json::from_str(done).unwrap();
    assert_eq!(done["route"], "partial");
    assert!(done["warnings"][0].as_str().unwrap().starts_with("cancelled"), "{done}");
    assert_eq!(done["run"]["finish_reason"], "cancelled");
    assert_eq!(done["run"]["trace_id"], run_id.as_str());
    assert!(done["raw_answer"].as_str().unwrap().contains("INC-1"), "what was collected is kept");
    server.abort();
    let _ = std::fs::remove_file(&marker);
}
