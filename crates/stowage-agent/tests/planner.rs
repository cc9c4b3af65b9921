//! The planner end to end: a real gateway in front of the stdio fixture, a real memory store
//! with signed links on the real download routes, and the model stub over HTTP. Each test
//! asserts what a user of the payload or the event stream would check, and what the model
//! was actually sent.

use crate::common;

use std::time::Duration;

use common::*;
use serde_json::{Value, json};
use stowage_agent::events::StepStatus;
use stowage_agent::{AgentEvent, Backend};
use stowage_core::ArtifactId;
use stowage_store::Access;

fn tool(name: &str, args: Value) -> Turn {
    Turn::tool(name, args)
}

#[tokio::test]
async fn sales_analysis_end_to_end_with_placeholders_artifacts_and_events_in_order() {
    for backend in [Backend::Openai, Backend::Anthropic] {
        let final_answer = json!({
            "raw_answer": "Your Q4 2024 sales analysis shows $1.23M in revenue, +15.2% YoY.",
            "confidence": 0.92, "route": "analytics", "language": "en",
            "suggested_actions": [{"action_id": "export_csv", "label": "Export Raw Data", "params": {"format": "csv"}}]
        });
        let h = harness_with(
            vec![
                Turn::Tools {
                    thought: "Let me analyze.".into(),
                    calls: vec![("analyze_sales".into(), json!({"quarter": "Q4", "year": 2024}))],
                },
                Turn::Text(final_answer.to_string()),
            ],
            backend,
            |_| {},
        )
        .await;
        let (out, events) = h.run("ana", "How did Q4 2024 go?", None).await;
        let out = out.unwrap();
        // What the model saw of the tool: the light fields and the placeholders.
        let sent = h.sent();
        assert_eq!(sent.len(), 2);
        assert!(sent[1].contains("Q4 2024: Revenue $1,234,567, +15.2% YoY"), "{}", sent[1]);
        assert!(sent[1].contains("<artifact:dict stream=sales_chart>"), "{}", sent[1]);
        assert!(sent[1].contains("<artifact:list size=847 items>"), "{}", sent[1]);
        assert!(!sent[1].contains("\\\"revenue\\\":1846.5") && !sent[1].contains("[1799,"), "artifact values leaked to the model");
        assert!(sent[1].len() < 16 * 1024, "request of {} bytes", sent[1].len());
        // The payload: every documented field, artifacts inlined per tool and field.
        let p = serde_json::to_value(&out.payload).unwrap();
        assert_eq!(p["raw_answer"], final_answer["raw_answer"]);
        assert_eq!((p["confidence"].as_f64(), p["route"].as_str(), p["language"].as_str()), (Some(0.92), Some("analytics"), Some("en")));
        assert_eq!(p["suggested_actions"][0]["action_id"], "export_csv");
        let a = &p["artifacts"]["analyze_sales"];
        assert_eq!(a["chart_options"]["title"]["text"], "Q4 2024 sales");
        assert_eq!(a["chart_options"]["series"][0]["data"].as_array().unwrap().len(), 1800);
        assert_eq!(a["raw_data"].as_array().unwrap().len(), 847);
        assert_eq!(a["raw_data"][3], json!({"day": 3, "product": "Widget Pro", "revenue": 1003.5}));
        assert_eq!(p["warnings"], json!([]));
        assert_eq!(p, done_payload(&events));
        // The events, in order: the step starts (with the thought), the chart streams (live
        // from the tool's progress, then whole when it returns), the step ends, the answer
        // streams, done.
        assert_eq!(
            names(&events),
            [
                "step:analyze_sales:started",
                "artifact_chunk:sales_chart:0:false",
                "artifact_chunk:sales_chart:1:true",
                "step:analyze_sales:ok",
                "chunk",
                "done"
            ],
            "{backend:?}"
        );
        let chunks: Vec<&AgentEvent> = events.iter().filter(|e| matches!(e, AgentEvent::ArtifactChunk { .. })).collect();
        match (chunks[0], chunks[1]) {
            (
                AgentEvent::ArtifactChunk { chunk: first, artifact_type: t0, .. },
                AgentEvent::ArtifactChunk { chunk: last, artifact_type: t1, .. },
            ) => {
                assert_eq!(first, &json!({"title": {"text": "Q4 2024 sales"}}));
                assert_eq!(last, &a["chart_options"]);
                assert_eq!((t0.as_str(), t1.as_str()), ("dict", "dict"));
            }
            _ => unreachable!(),
        }
        // The chunks are the answer's text, not its JSON envelope nor the thought.
        assert_eq!(chunk_text(&events), final_answer["raw_answer"].as_str().unwrap());
        let thoughts: Vec<Option<&str>> =
            events.iter().filter_map(|e| if let AgentEvent::Step { thought, .. } = e { Some(thought.as_deref()) } else { None }).collect();
        assert_eq!(thoughts, [Some("Let me analyze."), Some("Let me analyze.")]);
    }
}

#[tokio::test]
async fn a_500kb_base64_pdf_never_reaches_the_model_and_the_payload_links_to_it() {
    let h = harness(vec![tool("get_view_pdf", json!({})), answer("Here is the dashboard.")], |_| {}).await;
    let (out, _) = h.run("ana", "Get me the sales dashboard as PDF", None).await;
    let p = out.unwrap().payload;
    for body in h.sent() {
        // "%PDF-" in base64, and any long base64 run.
        assert!(!body.contains("JVBERi0"), "base64 PDF sent to the model");
        assert!(body.len() < 16 * 1024, "{} bytes", body.len());
    }
    let r = &p.artifacts["get_view_pdf"]["data"]["$artifact"];
    assert_eq!(r["mime_type"], "application/pdf");
    assert!(r["size_bytes"].as_u64().unwrap() > 300_000);
    assert!(r["uri"].as_str().unwrap().starts_with("artifact://"));
    assert_eq!(r["sha256"].as_str().unwrap().len(), 64);
    let url = r["url"].as_str().expect("a signed link");
    let resp = reqwest::get(url).await.unwrap();
    assert_eq!(resp.status(), 200);
    let body = resp.bytes().await.unwrap();
    assert!(body.starts_with(b"%PDF-"));
    assert_eq!(body.len() as u64, r["size_bytes"].as_u64().unwrap());
}

#[tokio::test]
async fn sources_are_collected_from_marked_tools_and_deduplicated() {
    let h = harness(
        vec![tool("search_docs", json!({"q": "refunds"})), tool("search_docs", json!({"q": "refunds again"})), answer("30 days.")],
        |_| {},
    )
    .await;
    let (out, _) = h.run("ana", "What is the refund policy?", None).await;
    let p = out.unwrap().payload;
    let got: Vec<(String, Option<String>, Option<f64>)> =
        p.sources.iter().map(|s| (s.title.clone(), s.url.clone(), s.relevance_score)).collect();
    assert_eq!(
        got,
        [
            ("Refund policy".to_owned(), Some("https://docs.example/refunds".to_owned()), Some(0.92)),
            ("Shipping FAQ".to_owned(), Some("https://docs.example/shipping".to_owned()), Some(0.71)),
            ("Internal memo".to_owned(), None, Some(0.4)),
        ]
    );
    assert_eq!(p.sources[0].snippet.as_deref(), Some("Refunds within 30 days"));
}

#[tokio::test]
async fn a_missing_answer_gets_one_repair_round_then_the_fallback() {
    let h = harness(vec![Turn::Text("{\"result\": 42}".into()), answer("42")], |_| {}).await;
    let (out, _) = h.run("ana", "What is the answer?", None).await;
    let p = out.unwrap().payload;
    assert_eq!(p.raw_answer, "42");
    assert!(p.warnings.is_empty());
    let sent = h.sent();
    assert_eq!(sent.len(), 2);
    assert!(sent[1].contains("Your final answer is invalid: the final answer has no \\\"raw_answer\\\""), "{}", sent[1]);

    // Missing more often than the repair budget allows: a partial payload naming the last
    // tool result, with a warning.
    let h = harness(
        vec![
            tool("echo", json!({"message": "the total is 1234"})),
            Turn::Text("{\"result\": 1}".into()),
            Turn::Text("```json\n{\"total\": 1234}\n```".into()),
        ],
        |c| c.max_repairs = 1,
    )
    .await;
    let (out, events) = h.run("ana", "Total?", None).await;
    let out = out.unwrap();
    let p = out.payload;
    assert!(p.raw_answer.contains("the total is 1234") && p.raw_answer.contains("from echo (call c1)"), "{}", p.raw_answer);
    assert_eq!(p.route.as_deref(), Some("partial"));
    assert_eq!(p.warnings.len(), 1);
    assert!(p.warnings[0].starts_with("invalid_final_answer: the final answer has no \"raw_answer\""), "{:?}", p.warnings);
    assert_eq!(out.run.finish_reason, "invalid_answer");
    assert!(matches!(events.last(), Some(AgentEvent::Done(..))));
    assert_eq!(chunk_text(&events), p.raw_answer, "the fallback's text is the answer's chunks");
}

#[tokio::test]
async fn a_model_that_fails_after_a_tool_ran_ends_in_a_partial_payload_and_before_in_an_error() {
    for (turn, code) in [
        (Turn::Status(500, "internal".into()), "model_http_error"),
        (Turn::Hang, "model_timeout"),
        (Turn::DropAfter("{\"raw_answer\": \"half".into()), "model_stream_dropped"),
        (Turn::Raw { content_type: "text/event-stream".into(), body: "data: {not json at all\n\n".into() }, "model_protocol_error"),
    ] {
        for backend in [Backend::Openai, Backend::Anthropic] {
            let h = harness_with(vec![tool("analyze_sales", json!({})), turn.clone()], backend, |c| {
                c.request_timeout = Duration::from_millis(800)
            })
            .await;
            let (out, events) = h.run("ana", "Q4?", None).await;
            let out = out.unwrap();
            let p = &out.payload;
            assert_eq!(p.route.as_deref(), Some("partial"), "{code}");
            assert_eq!(p.warnings.len(), 1);
            assert!(p.warnings[0].starts_with(&format!("{code}: ")) && !p.warnings[0].contains('\n'), "{:?}", p.warnings);
            // What the tool returned is in the payload, whole.
            assert_eq!(p.artifacts["analyze_sales"]["raw_data"].as_array().map(Vec::len), Some(847), "{code}");
            assert_eq!(out.run.finish_reason, "model_error");
            assert_eq!(done_payload(&events)["route"], "partial");
        }
    }
    // Before any tool: nothing to keep, one error event with the code and trace id.
    let h = harness(vec![Turn::Status(503, "overloaded".into())], |_| {}).await;
    let (out, events) = h.run("ana", "Q4?", None).await;
    assert_eq!(out.unwrap_err().code(), "model_http_error");
    match events.last() {
        Some(AgentEvent::Error { code, trace_id, error }) => {
            assert_eq!(code, "model_http_error");
            assert!(trace_id.starts_with("run-"));
            assert!(error.contains("overloaded") && !error.contains('\n'), "{error}");
        }
        other => panic!("{other:?}"),
    }
    assert!(!events.iter().any(|e| matches!(e, AgentEvent::Done(..))), "no payload after a failure");
}

#[tokio::test]
async fn a_tool_error_is_a_step_with_status_error_and_the_run_goes_on() {
    let h = harness(vec![tool("tool_error", json!({})), tool("no_such_tool", json!({})), answer("The warehouse is closed.")], |_| {}).await;
    let (out, events) = h.run("ana", "Is the warehouse open?", None).await;
    assert_eq!(out.unwrap().payload.raw_answer, "The warehouse is closed.");
    let steps: Vec<(String, StepStatus)> = events
        .iter()
        .filter_map(|e| if let AgentEvent::Step { node, status, .. } = e { Some((node.clone(), *status)) } else { None })
        .collect();
    assert_eq!(
        steps,
        [
            ("tool_error".into(), StepStatus::Started),
            ("tool_error".into(), StepStatus::Error),
            ("no_such_tool".into(), StepStatus::Started),
            ("no_such_tool".into(), StepStatus::Error)
        ]
    );
    let sent = h.sent();
    let second: Value = serde_json::from_str(&sent[1]).unwrap();
    let tool_msg = second["messages"].as_array().unwrap().iter().find(|m| m["role"] == "tool").unwrap();
    assert!(tool_msg["content"].as_str().unwrap().contains("the warehouse is closed"), "{tool_msg}");
    assert!(sent[2].contains("no_such_tool"), "the model heard about the unknown tool");
}

#[tokio::test]
async fn limits_end_the_run_with_a_payload_and_a_warning() {
    let h = harness(
        vec![tool("echo", json!({"message": "one"})), tool("echo", json!({"message": "two"})), tool("echo", json!({"message": "three"}))],
        |c| c.max_steps = 2,
    )
    .await;
    let (out, _) = h.run("ana", "Loop", None).await;
    let out = out.unwrap();
    assert_eq!((out.run.finish_reason.as_str(), out.run.steps), ("max_steps", 2));
    let p = out.payload;
    assert_eq!(p.warnings, ["max_steps_reached"]);
    assert_eq!(p.route.as_deref(), Some("partial"));
    assert!(p.raw_answer.contains("two"), "{}", p.raw_answer);
    assert_eq!(h.stub.requests().len(), 3);

    let h = harness(vec![tool("echo", json!({"message": "one"})), Turn::Hang], |c| {
        c.max_wall_time = Duration::from_secs(1);
        c.request_timeout = Duration::from_secs(30);
    })
    .await;
    let started = std::time::Instant::now();
    let (out, _) = h.run("ana", "Slow", None).await;
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(out.unwrap().payload.warnings, ["max_wall_time_reached"]);

    let h = harness(vec![tool("echo", json!({"message": "one"})), answer("never asked")], |c| c.max_tokens = 10).await;
    let (out, _) = h.run("ana", "Expensive", None).await;
    assert_eq!(out.unwrap().payload.warnings, ["max_tokens_reached"]);
}

#[tokio::test]
async fn two_users_runs_at_once_are_isolated() {
    let h = harness(vec![], |_| {}).await;
    h.stub.push_keyed("question from ana", [tool("get_view_pdf", json!({"bytes": 300000})), answer("ana's pdf")]);
    h.stub.push_keyed("question from bob", [tool("analyze_sales", json!({"quarter": "Q1"})), answer("bob's sales")]);
    let (a, b) = tokio::join!(h.run("ana", "question from ana", None), h.run("bob", "question from bob", None));
    let (a, b) = (a.0.unwrap(), b.0.unwrap());
    assert_eq!(a.payload.raw_answer, "ana's pdf");
    assert_eq!(b.payload.raw_answer, "bob's sales");
    assert_eq!(a.payload.artifacts.keys().collect::<Vec<_>>(), ["get_view_pdf"]);
    assert_eq!(b.payload.artifacts.keys().collect::<Vec<_>>(), ["analyze_sales"]);
    assert_ne!(a.trace_id, b.trace_id);
    assert_ne!(a.session_id, b.session_id);
    // Ana's PDF is ana's: bob cannot read it, ana can.
    let id = a.payload.artifacts["get_view_pdf"]["data"]["$artifact"]["id"].as_str().unwrap();
    let id = ArtifactId::parse_loose(id).unwrap();
    let as_owner = |user: &str| {
        Access::owner_of(&stowage_core::ArtifactScope { tenant_id: Some("acme".into()), user_id: Some(user.into()), ..Default::default() })
    };
    assert!(h.store.get(&as_owner("ana"), &id).await.is_ok());
    assert!(h.store.get(&as_owner("bob"), &id).await.is_err());
    let meta = h.store.meta(&as_owner("ana"), &id).await.unwrap();
    assert_eq!(meta.scope.session_id.as_deref(), Some(a.session_id.as_str()));
    assert_eq!(meta.scope.trace_id.as_deref(), Some(a.trace_id.as_str()));
    // Neither model conversation saw the other's question.
    for r in h.stub.requests() {
        assert!(!(r.body.contains("question from ana") && r.body.contains("question from bob")));
    }
}

#[tokio::test]
async fn a_followup_question_continues_in_the_same_session_for_the_same_caller_only() {
    let h = harness(
        vec![
            Turn::Text(json!({"raw_answer": "Which quarter?", "requires_followup": true, "route": "clarification"}).to_string()),
            tool("analyze_sales", json!({"quarter": "Q3"})),
            answer("Q3 was fine."),
        ],
        |_| {},
    )
    .await;
    let (first, _) = h.run("ana", "How were sales?", None).await;
    let first = first.unwrap();
    assert!(first.payload.requires_followup);
    let (again, _) = h.run("bob", "Q3", Some(first.session_id.clone())).await;
    assert_eq!(again.unwrap_err().code(), "unknown_session");
    let (second, _) = h.run("ana", "Q3 please", Some(first.session_id.clone())).await;
    let second = second.unwrap();
    assert_eq!(second.payload.raw_answer, "Q3 was fine.");
    assert_eq!(second.session_id, first.session_id);
    let body: Value = serde_json::from_str(&h.sent()[1]).unwrap();
    let texts: Vec<String> = body["messages"].as_array().unwrap().iter().map(|m| m["content"].to_string()).collect();
    assert!(texts[1].contains("How were sales?") && texts[2].contains("Which quarter?") && texts[3].contains("Q3 please"), "{texts:?}");
}

#[tokio::test]
async fn a_model_without_tool_calling_uses_the_json_action_format() {
    let h = harness(
        vec![
            Turn::Text(json!({"thought": "I need the numbers", "next_node": "analyze_sales", "args": {"quarter": "Q4"}}).to_string()),
            Turn::Text(json!({"thought": "done", "next_node": null, "args": {"raw_answer": "Up 15%.", "confidence": 0.8}}).to_string()),
        ],
        |c| c.tool_calling = false,
    )
    .await;
    let (out, events) = h.run("ana", "Q4?", None).await;
    let p = out.unwrap().payload;
    assert_eq!((p.raw_answer.as_str(), p.confidence), ("Up 15%.", Some(0.8)));
    assert_eq!(p.artifacts["analyze_sales"]["raw_data"].as_array().unwrap().len(), 847);
    let first: Value = serde_json::from_str(&h.sent()[0]).unwrap();
    assert!(first.get("tools").is_none(), "no native tools offered");
    // The history is plain messages: the model's own JSON as its text, the observation as a
    // user message; no tool-call structures for a model that was given no tools.
    let second: Value = serde_json::from_str(&h.sent()[1]).unwrap();
    let msgs = second["messages"].as_array().unwrap();
    assert!(msgs.iter().all(|m| m.get("tool_calls").is_none() && m["role"] != "tool"), "{second}");
    assert!(msgs[2]["content"].as_str().unwrap().contains("\"next_node\":\"analyze_sales\""), "{}", msgs[2]);
    assert_eq!(msgs[3]["role"], "user");
    assert!(first["messages"][0]["content"].as_str().unwrap().contains("- analyze_sales: "));
    assert!(h.sent()[1].contains("Observation from analyze_sales (ok)"));
    assert!(h.sent()[1].contains("<artifact:list size=847 items>"));
    assert!(events.iter().any(|e| matches!(e, AgentEvent::Step { thought: Some(t), .. } if t == "I need the numbers")));
}
