//! The planner against the mistakes real models make, and parallel plans with `join.inject`:
//! the scripted model server over real HTTP in both wire formats (streamed), the stdio
//! fixture as the upstream. Each test asserts what the user gets (payload, events), what the
//! model was sent, that every request the server received is one its API's published rules
//! accept, and that every fault ends in a payload within the documented number of requests.

use crate::common;

use common::*;
use serde_json::{Value, json};
use stowage_agent::events::StepStatus;
use stowage_agent::{AgentEvent, Backend, Vision};
use stowage_testkit::model_stub::rule_violations;

const BOTH: [Backend; 2] = [Backend::Openai, Backend::Anthropic];

fn tool(name: &str, args: Value) -> Turn {
    Turn::tool(name, args)
}

fn request(h: &Harness, i: usize) -> Value {
    serde_json::from_str(&h.sent()[i]).unwrap()
}

/// No request the scripted server received breaks its API's rules.
fn assert_valid_requests(h: &Harness, what: &str) {
    let v = h.stub.violations();
    assert!(v.is_empty(), "{what}: requests the API would refuse:\n{}", v.join("\n"));
}

/// The `step` events that end a call: (tool, status, call id).
fn ended_steps(events: &[AgentEvent]) -> Vec<(String, StepStatus, String)> {
    events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::Step { node, status, call_id, .. } if *status != StepStatus::Started => {
                Some((node.clone(), *status, call_id.clone()))
            }
            _ => None,
        })
        .collect()
}

/// Every `answer_reset` comes before the chunks that replace what streamed, and its `seq` is
/// the next chunk's.
fn assert_resets_precede_their_replacement(events: &[AgentEvent]) {
    for (i, e) in events.iter().enumerate() {
        if let AgentEvent::AnswerReset { seq, stream_id, .. } = e {
            assert_eq!(stream_id, "answer");
            let next = events[i + 1..].iter().find_map(|e| if let AgentEvent::Chunk { seq, .. } = e { Some(*seq) } else { None });
            assert_eq!(next, Some(*seq), "the reset names the next chunk");
        }
    }
}

#[tokio::test]
async fn a_final_answer_cut_or_wrapped_is_closed_read_or_repaired_never_delivered_verbatim() {
    for backend in BOTH {
        // Only the closing brace is missing (the model stopped, the text is whole): read as
        // the object, with a warning, without another request.
        let h = harness_with(vec![Turn::Text("{\"raw_answer\": \"The answer is 42.\", \"confidence\": 0.9".into())], backend, |_| {}).await;
        let (out, events) = h.run("ana", "The answer?", None).await;
        let out = out.unwrap();
        assert_eq!((out.payload.raw_answer.as_str(), out.payload.confidence), ("The answer is 42.", Some(0.9)), "{backend:?}");
        assert_eq!(out.payload.warnings, ["final answer: the JSON object was not closed; read with \"}\" added"]);
        assert_eq!((h.sent().len(), out.run.repairs), (1, 0));
        assert_eq!(chunk_text(&events), "The answer is 42.");
        assert!(resets(&events).is_empty());

        // Cut inside its string: a repair round, and the client drops what streamed.
        let h = harness_with(vec![Turn::Text("{\"raw_answer\": \"The answer is ve".into()), answer("The answer is 42.")], backend, |_| {})
            .await;
        let (out, events) = h.run("ana", "The answer?", None).await;
        let out = out.unwrap();
        assert_eq!(out.payload.raw_answer, "The answer is 42.");
        assert!(out.payload.warnings.is_empty(), "{:?}", out.payload.warnings);
        assert_eq!((out.run.model_requests, out.run.repairs), (2, 1));
        assert!(h.sent()[1].contains("the final answer is not valid JSON: it was cut off inside a string"), "{}", h.sent()[1]);
        assert_eq!(resets(&events), ["repair"]);
        assert_eq!(chunk_text(&events), "The answer is 42.", "what the client shows");
        assert_resets_precede_their_replacement(&events);

        // JSON in a fence inside prose, without the answer: repaired.
        let fenced = Turn::Text("Here is the result:\n```json\n{\"total\": 1234}\n```\nHope it helps.".into());
        let h = harness_with(vec![fenced, answer("The total is 1234.")], backend, |_| {}).await;
        let out = h.run("ana", "Total?", None).await.0.unwrap();
        assert_eq!(out.payload.raw_answer, "The total is 1234.");
        assert!(h.sent()[1].contains("the final answer has no \\\"raw_answer\\\""), "{}", h.sent()[1]);

        // The answer under the names other planners use: read as it, with a warning.
        for key in ["answer", "final_answer", "response"] {
            let h = harness_with(vec![Turn::Text(json!({key: "Forty-two."}).to_string())], backend, |_| {}).await;
            let (out, events) = h.run("ana", "The answer?", None).await;
            let p = out.unwrap().payload;
            assert_eq!(p.raw_answer, "Forty-two.", "{key}");
            assert_eq!(p.warnings, [format!("final answer: \"{key}\" read as raw_answer")]);
            assert_eq!(h.sent().len(), 1);
            assert_eq!(chunk_text(&events), "Forty-two.");
        }
        assert_valid_requests(&h, "cut and wrapped answers");
    }
}

#[tokio::test]
async fn json_only_replies_that_are_no_action_are_repaired_and_the_answer_read_under_its_other_names() {
    for backend in BOTH {
        let script = vec![
            Turn::Text("I will look the numbers up.".into()),
            Turn::Text("{\"thought\": \"numbers\", \"next_node\": \"echo\", \"args\": {\"message\": \"hi".into()),
            Turn::Text(json!({"thought": "numbers", "next_node": "echo", "args": {"message": "hi"}}).to_string()),
            Turn::Text(json!({"thought": "done", "next_node": null, "args": {"answer": "hi back"}}).to_string()),
        ];
        let h = harness_with(script, backend, |c| c.tool_calling = false).await;
        let (out, events) = h.run("ana", "Say hi", None).await;
        let out = out.unwrap();
        assert_eq!(out.payload.raw_answer, "hi back", "{backend:?}");
        assert_eq!(out.payload.warnings, ["final answer: \"answer\" read as raw_answer"]);
        assert_eq!((out.run.model_requests, out.run.repairs, out.run.steps), (4, 2, 1));
        let sent = h.sent();
        assert!(sent[1].contains("Your reply is not a valid action: the reply is no JSON action"), "{}", sent[1]);
        assert!(sent[2].contains("the action is not valid JSON: it was cut off inside a string"), "{}", sent[2]);
        assert!(sent[3].contains("Observation from echo (ok)"));
        assert_eq!(chunk_text(&events), "hi back");
        // No tool-call structures for a model given no tools.
        for i in 0..sent.len() {
            let body = request(&h, i);
            assert!(body.get("tools").is_none());
        }
        assert_valid_requests(&h, "json-only repairs");
    }
}

#[tokio::test]
async fn streamed_calls_without_index_are_told_apart_by_id_or_by_order_and_run_at_once() {
    for ids in [true, false] {
        let key = format!("weather-{ids}");
        let calls = vec![("rendezvous".to_owned(), json!({"key": key, "n": 2})), ("rendezvous".to_owned(), json!({"key": key, "n": 2}))];
        let h = harness(vec![Turn::Unindexed { calls, ids }, answer("Both cities.")], |_| {}).await;
        let (out, events) = h.run("ana", "Weather in Oslo and Lima?", None).await;
        assert_eq!(out.unwrap().payload.raw_answer, "Both cities.");
        // Two calls, not one named `rendezvousrendezvous`; each waited for the other, so they
        // were in flight together.
        let ended: Vec<(String, StepStatus)> = ended_steps(&events).into_iter().map(|(n, s, _)| (n, s)).collect();
        assert_eq!(ended, [("rendezvous".into(), StepStatus::Ok), ("rendezvous".into(), StepStatus::Ok)], "ids={ids}");
        let second = request(&h, 1);
        let msgs = second["messages"].as_array().unwrap();
        let assistant = msgs.iter().find(|m| m["role"] == "assistant").unwrap();
        let calls = assistant["tool_calls"].as_array().unwrap();
        assert_eq!(calls.len(), 2);
        for c in calls {
            assert_eq!(c["function"]["name"], "rendezvous");
            assert_eq!(serde_json::from_str::<Value>(c["function"]["arguments"].as_str().unwrap()).unwrap(), json!({"key": key, "n": 2}));
        }
        assert_ne!(calls[0]["id"], calls[1]["id"]);
        let tool_msgs: Vec<&Value> = msgs.iter().filter(|m| m["role"] == "tool").collect();
        assert_eq!(tool_msgs.len(), 2);
        for m in tool_msgs {
            assert!(m["content"].as_str().unwrap().contains("all 2 calls met"), "{m}");
        }
        assert_valid_requests(&h, "index-less calls");
    }
}

#[tokio::test]
async fn alternating_faults_end_within_the_repair_budget_with_a_partial_payload() {
    let broken_args = Turn::RawTools { thought: String::new(), calls: vec![("echo".into(), "{\"message\": ".into())] };
    let cut = Turn::Cut(Box::new(Turn::Text("{\"raw_answer\": \"a very long".into())));
    let no_answer = Turn::Text("{\"result\": 1}".into());
    let empty = Turn::Text(String::new());
    let kinds = [broken_args, cut, no_answer, empty];
    // A model that never gets it right: fifty faulty replies, each kind in turn.
    let script: Vec<Turn> = (0..50).map(|i| kinds[i % 4].clone()).collect();
    for backend in BOTH {
        for max_repairs in [0u32, 2, 5] {
            let h = harness_with(script.clone(), backend, |c| c.max_repairs = max_repairs).await;
            let (out, events) = h.run("ana", "Try", None).await;
            let out = out.unwrap();
            let max_steps = h.planner.config().max_steps;
            assert!(h.sent().len() as u32 <= max_steps + max_repairs + 1, "the documented bound");
            assert_eq!(h.sent().len() as u32, max_repairs + 1, "{backend:?} max_repairs={max_repairs}");
            assert_eq!(out.run.repairs, max_repairs);
            assert_eq!(out.payload.route.as_deref(), Some("partial"));
            assert_eq!(out.payload.warnings.len(), 1, "{:?}", out.payload.warnings);
            assert!(out.payload.warnings[0].ends_with(&format!("agent.max_repairs = {max_repairs})")), "{:?}", out.payload.warnings);
            assert!(matches!(events.last(), Some(AgentEvent::Done(..))), "a payload, never a hang");
            assert_eq!(chunk_text(&events), out.payload.raw_answer);
            assert_valid_requests(&h, &format!("{backend:?} faults, max_repairs={max_repairs}"));
        }
        // Faults between good steps: the bound counts both.
        let (ok, bad) = (tool("echo", json!({"message": "ok"})), kinds[0].clone());
        let script = vec![ok.clone(), bad.clone(), ok.clone(), kinds[1].clone(), ok.clone(), kinds[2].clone(), ok.clone(), ok.clone(), ok];
        let h = harness_with(script, backend, |c| {
            c.max_steps = 4;
            c.max_repairs = 2;
        })
        .await;
        let out = h.run("ana", "Mixed", None).await.0.unwrap();
        assert!(h.sent().len() <= 4 + 2 + 1, "{}", h.sent().len());
        assert_eq!(out.payload.route.as_deref(), Some("partial"));
        assert!(out.payload.warnings[0].starts_with("invalid_final_answer: the final answer has no"), "{:?}", out.payload.warnings);
        assert_valid_requests(&h, "faults between steps");
    }
}

#[tokio::test]
async fn every_request_obeys_the_apis_rules_through_empty_replies_images_plans_and_follow_ups() {
    for backend in BOTH {
        let scenarios: Vec<(&str, Vec<Turn>, bool)> = vec![
            // An empty reply after a tool ran: the repair request must not hold an empty
            // assistant turn (the Messages API refuses it).
            ("empty reply", vec![tool("echo", json!({"message": "x"})), Turn::Text(String::new()), answer("done")], true),
            (
                "empty then cut",
                vec![Turn::Text("  ".into()), Turn::Cut(Box::new(Turn::Text("{\"raw_answer\": \"lo".into()))), answer("ok")],
                true,
            ),
            (
                "two calls and an image",
                vec![
                    Turn::Tools {
                        thought: String::new(),
                        calls: vec![("get_image".into(), json!({})), ("echo".into(), json!({"message": "a"}))],
                    },
                    answer("seen"),
                ],
                true,
            ),
            (
                "a plan",
                vec![
                    tool(
                        "parallel_plan",
                        json!({"plan": [{"node": "echo", "args": {"message": "a"}}, {"node": "echo", "args": {"message": "b"}}]}),
                    ),
                    answer("planned"),
                ],
                true,
            ),
            (
                "json-only plan",
                vec![
                    Turn::Text(
                        json!({"thought": "t", "next_node": null, "plan": [{"node": "echo", "args": {"message": "a"}}]}).to_string(),
                    ),
                    Turn::Text(String::new()),
                    Turn::Text(json!({"next_node": null, "args": {"raw_answer": "ok"}}).to_string()),
                ],
                false,
            ),
        ];
        for (what, script, tool_calling) in scenarios {
            let h = harness_with(script, backend, |c| {
                c.vision = Vision::On;
                c.tool_calling = tool_calling;
            })
            .await;
            let (out, events) = h.run("ana", "Go", None).await;
            let out = out.unwrap();
            assert_eq!(out.run.finish_reason, "answer", "{backend:?} {what}: {:?}", out.payload.warnings);
            assert!(matches!(events.last(), Some(AgentEvent::Done(..))));
            assert_valid_requests(&h, &format!("{backend:?} {what}"));
        }
        // A follow-up continues a conversation that held tool calls.
        let h = harness_with(
            vec![
                tool("echo", json!({"message": "q"})),
                Turn::Text(json!({"raw_answer": "Which one?", "requires_followup": true}).to_string()),
                Turn::Text(String::new()),
                answer("That one."),
            ],
            backend,
            |_| {},
        )
        .await;
        let first = h.run("ana", "Pick", None).await.0.unwrap();
        let second = h.run("ana", "The first", Some(first.session_id)).await.0.unwrap();
        assert_eq!(second.payload.raw_answer, "That one.");
        assert_valid_requests(&h, &format!("{backend:?} follow-up"));
    }
}

#[test]
fn the_rules_checker_refuses_what_the_apis_refuse() {
    // The request the planner used to send after an empty reply.
    let empty_turn = json!({"model": "m", "max_tokens": 10, "tools": [{"name": "echo"}], "messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": []},
        {"role": "user", "content": "Your final answer is invalid"}
    ]});
    let v = rule_violations("/v1/messages", &empty_turn);
    assert!(v.iter().any(|v| v.contains("empty content")), "{v:?}");
    let unanswered = json!({"model": "m", "max_tokens": 10, "messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "echo", "input": {}}]},
        {"role": "user", "content": [{"type": "text", "text": "x"}, {"type": "tool_result", "tool_use_id": "t2", "content": "r"}]},
        {"role": "user", "content": "again"}
    ]});
    let v = rule_violations("/v1/messages", &unanswered).join("\n");
    for needle in ["without tools", "tool results must come first", "no tool_result for tool_use t1", "must alternate"] {
        assert!(v.contains(needle), "{needle} not in:\n{v}");
    }
    let openai = json!({"model": "m", "messages": [
        {"role": "user", "content": "hi"},
        {"role": "tool", "tool_call_id": "c1", "content": "orphan"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "c2", "type": "function", "function": {"name": "echo", "arguments": "{"}}]},
        {"role": "user", "content": "next"}
    ]});
    let v = rule_violations("/v1/chat/completions", &openai).join("\n");
    for needle in ["does not follow an assistant message", "not a JSON string", "were not answered", "without tools"] {
        assert!(v.contains(needle), "{needle} not in:\n{v}");
    }
}

#[tokio::test]
async fn the_client_is_told_when_what_streamed_will_not_be_the_answer() {
    for backend in BOTH {
        // Text that looked like an answer, then tool calls.
        let script = vec![
            Turn::Tools { thought: "{\"raw_answer\": \"Let me check".into(), calls: vec![("echo".into(), json!({"message": "x"}))] },
            answer("Checked."),
        ];
        let h = harness_with(script, backend, |_| {}).await;
        let (out, events) = h.run("ana", "Check", None).await;
        assert_eq!(out.unwrap().payload.raw_answer, "Checked.");
        assert_eq!(resets(&events), ["tool_calls"], "{backend:?}");
        assert_eq!(chunk_text(&events), "Checked.");
        assert_resets_precede_their_replacement(&events);
        // The reset comes before the call's step: a client clears the bubble, then shows steps.
        let reset_at = events.iter().position(|e| matches!(e, AgentEvent::AnswerReset { .. })).unwrap();
        let step_at = events.iter().position(|e| matches!(e, AgentEvent::Step { .. })).unwrap();
        assert!(reset_at < step_at);

        // A stream dropped after a tool ran: the partial answer replaces what streamed.
        let script = vec![tool("echo", json!({"message": "the total is 1234"})), Turn::DropAfter("{\"raw_answer\": \"The total".into())];
        let h = harness_with(script, backend, |_| {}).await;
        let (out, events) = h.run("ana", "Total?", None).await;
        let p = out.unwrap().payload;
        assert_eq!(p.route.as_deref(), Some("partial"));
        assert_eq!(resets(&events), ["partial"]);
        assert_eq!(chunk_text(&events), p.raw_answer);
        assert!(p.raw_answer.contains("from echo (call c1)") && p.raw_answer.contains("the total is 1234"), "{}", p.raw_answer);
        assert_resets_precede_their_replacement(&events);

        // A reply cut at the token limit, then a short one.
        let script = vec![Turn::Cut(Box::new(Turn::Text("{\"raw_answer\": \"A very long answer".into()))), answer("Short.")];
        let h = harness_with(script, backend, |_| {}).await;
        let (out, events) = h.run("ana", "Long?", None).await;
        assert_eq!(out.unwrap().payload.raw_answer, "Short.");
        assert_eq!(resets(&events), ["repair"]);
        assert_eq!(chunk_text(&events), "Short.");
        assert_valid_requests(&h, "resets");
    }
}

#[tokio::test]
async fn a_partial_answer_names_the_last_tool_result_and_never_the_planners_own_error() {
    let broken = Turn::RawTools { thought: String::new(), calls: vec![("echo".into(), "not json".into())] };
    let script = vec![tool("analyze_sales", json!({"quarter": "Q3"})), broken.clone(), broken.clone(), broken];
    let h = harness(script, |_| {}).await;
    let (out, events) = h.run("ana", "Q3?", None).await;
    let p = out.unwrap().payload;
    assert_eq!(p.route.as_deref(), Some("partial"));
    // The tool's own summary, not "the arguments of echo are not valid JSON".
    assert!(p.raw_answer.contains("The last result, from analyze_sales (call c1), was: Q3 2024: Revenue $1,234,567"), "{}", p.raw_answer);
    assert!(!p.raw_answer.contains("not valid JSON"), "{}", p.raw_answer);
    assert!(p.warnings[0].starts_with("invalid_tool_arguments: the arguments of echo are not valid JSON"), "{:?}", p.warnings);
    assert_eq!(chunk_text(&events), p.raw_answer);
}

#[tokio::test]
async fn calls_of_one_reply_run_at_once_and_their_keys_name_the_call_stably() {
    for backend in BOTH {
        let mut keys_seen = Vec::new();
        for _ in 0..2 {
            let both = Turn::Tools {
                thought: String::new(),
                calls: vec![
                    ("analyze_sales".into(), json!({"quarter": "Q3"})),
                    ("rendezvous".into(), json!({"key": format!("{backend:?}-{}", keys_seen.len()), "n": 2})),
                    ("analyze_sales".into(), json!({"quarter": "Q4"})),
                    ("rendezvous".into(), json!({"key": format!("{backend:?}-{}", keys_seen.len()), "n": 2})),
                ],
            };
            let h = harness_with(vec![both, answer("Both halves.")], backend, |_| {}).await;
            let (out, events) = h.run("ana", "Q3 and Q4?", None).await;
            let p = out.unwrap().payload;
            let a = p.artifacts["analyze_sales"].as_object().unwrap();
            let mut keys: Vec<&str> = a.keys().map(String::as_str).collect();
            keys.sort_unstable();
            // The fixture's rows are the same for every quarter: one artifact, collected once.
            assert_eq!(keys, ["chart_options", "chart_options#2", "raw_data"], "{backend:?}");
            // The first call asked for is the plain key, whichever finished first.
            assert_eq!(a["chart_options"]["title"]["text"], "Q3 2024 sales");
            assert_eq!(a["chart_options#2"]["title"]["text"], "Q4 2024 sales");
            let ended = ended_steps(&events);
            assert_eq!(
                ended.iter().map(|(n, s, c)| (n.as_str(), *s, c.as_str())).collect::<Vec<_>>(),
                [
                    ("analyze_sales", StepStatus::Ok, "c1"),
                    ("rendezvous", StepStatus::Ok, "c2"),
                    ("analyze_sales", StepStatus::Ok, "c3"),
                    ("rendezvous", StepStatus::Ok, "c4")
                ],
                "the rendezvous calls met: the calls were in flight together"
            );
            let live: Vec<(String, String)> = events
                .iter()
                .filter_map(|e| {
                    if let AgentEvent::ArtifactChunk { call_id, key, .. } = e { Some((call_id.clone(), key.clone())) } else { None }
                })
                .collect();
            assert!(live.contains(&("c3".into(), "chart_options#2".into())), "{live:?}");
            assert!(live.iter().all(|(c, k)| (c == "c1") == (k == "chart_options")), "{live:?}");
            keys_seen.push(keys.iter().map(|k| (*k).to_owned()).collect::<Vec<_>>());
            assert_valid_requests(&h, "parallel calls");
        }
        assert_eq!(keys_seen[0], keys_seen[1]);
    }
}

/// The parallel-plan example of docs/agent.md: both halves of the year at once, merged by a join that
/// `inject` hands their results to.
fn half_year_plan() -> Value {
    json!({
        "plan": [
            {"node": "analyze_sales", "args": {"quarter": "Q3", "year": 2024}},
            {"node": "analyze_sales", "args": {"quarter": "Q4", "year": 2024}}
        ],
        "join": {"node": "merge_results", "args": {"label": "H2 2024"},
                 "inject": {"branch_outputs": "$results", "total_requests": "$expect"}}
    })
}

#[tokio::test]
async fn the_parallel_plan_example_hands_the_branches_results_to_the_join_in_both_modes_and_wire_formats() {
    for backend in BOTH {
        for tool_calling in [true, false] {
            let (plan, done) = if tool_calling {
                (tool("parallel_plan", half_year_plan()), answer("H2 2024: 1,694 rows merged."))
            } else {
                let mut action = half_year_plan();
                action["thought"] = json!("both quarters at once");
                action["next_node"] = Value::Null;
                let done = json!({"thought": "merged", "next_node": null, "args": {"raw_answer": "H2 2024: 1,694 rows merged."}});
                (Turn::Text(action.to_string()), Turn::Text(done.to_string()))
            };
            let h = harness_with(vec![plan, done], backend, |c| c.tool_calling = tool_calling).await;
            let (out, events) = h.run("ana", "How did the second half of 2024 go?", None).await;
            let out = out.unwrap();
            let what = format!("{backend:?} tool_calling={tool_calling}");
            assert_eq!(out.payload.raw_answer, "H2 2024: 1,694 rows merged.", "{what}");
            assert_eq!((out.run.steps, out.run.tool_calls, out.run.model_requests), (1, 3, 2), "{what}");
            if tool_calling {
                let first = request(&h, 0);
                let offered = first["tools"].to_string();
                assert!(offered.contains("\"parallel_plan\"") && offered.contains("$results"), "{what}: the plan tool is offered");
            } else {
                assert!(h.sent()[0].contains("\\\"join\\\": {\\\"node\\\""), "{what}: the prompt describes plans");
            }
            // The join received both branches' results whole (847 rows each), which the model
            // never saw: it read placeholders and the join's totals.
            let after = &h.sent()[1];
            assert!(after.contains("Parallel plan: 2 branches ran (2 ok, 0 failed)."), "{what}: {after}");
            assert!(after.contains("H2 2024: 2 branches of 2 expected, 0 failed; 1694 rows"), "{what}: {after}");
            assert!(after.contains("<artifact:list size=847 items>"), "{what}");
            assert!(!after.contains("\\\"revenue\\\":1000.5") && !after.contains("\"revenue\":1000.5"), "{what}: a row reached the model");
            assert!(after.len() < 24_000, "{what}: {} bytes", after.len());
            // Each branch's artifacts under its own key.
            let a = out.payload.artifacts["analyze_sales"].as_object().unwrap();
            assert_eq!(a["chart_options"]["title"]["text"], "Q3 2024 sales", "{what}");
            assert_eq!(a["chart_options#2"]["title"]["text"], "Q4 2024 sales", "{what}");
            assert_eq!(a["raw_data"].as_array().map(Vec::len), Some(847));
            // Branches start together, end in plan order, then the join.
            let steps: Vec<String> = names(&events).into_iter().filter(|n| n.starts_with("step:")).collect();
            assert_eq!(
                steps,
                [
                    "step:analyze_sales:started",
                    "step:analyze_sales:started",
                    "step:analyze_sales:ok",
                    "step:analyze_sales:ok",
                    "step:merge_results:started",
                    "step:merge_results:ok"
                ],
                "{what}"
            );
            assert_eq!(chunk_text(&events), out.payload.raw_answer);
            assert_valid_requests(&h, &what);
        }
    }
}

#[tokio::test]
async fn a_failed_branch_skips_a_join_blind_to_failures_and_reaches_one_that_asks_for_them() {
    let plan = |inject: Value| {
        json!({"plan": [{"node": "analyze_sales", "args": {"quarter": "Q3"}}, {"node": "tool_error"}],
               "join": {"node": "merge_results", "inject": inject}})
    };
    for backend in BOTH {
        let script = vec![
            tool("parallel_plan", plan(json!({"branch_outputs": "$results"}))),
            tool("parallel_plan", plan(json!({"branch_outputs": "$results", "failures": "$failures", "total_requests": "$expect"}))),
            // A plan whose inject names no source: a fault, repaired.
            tool("parallel_plan", plan(json!({"branch_outputs": "$everything"}))),
            // Branches meet: they run at once.
            tool(
                "parallel_plan",
                json!({"plan": [{"node": "rendezvous", "args": {"key": format!("plan-{backend:?}"), "n": 2}},
                                {"node": "rendezvous", "args": {"key": format!("plan-{backend:?}"), "n": 2}}]}),
            ),
            answer("One quarter, and the warehouse is closed."),
        ];
        let h = harness_with(script, backend, |_| {}).await;
        let (out, events) = h.run("ana", "Q3 and the warehouse?", None).await;
        let out = out.unwrap();
        assert_eq!(out.payload.raw_answer, "One quarter, and the warehouse is closed.");
        assert_eq!(out.run.repairs, 1, "the bad inject");
        let sent = h.sent();
        assert!(sent[1].contains("Parallel plan: 2 branches ran (1 ok, 1 failed)."), "{}", sent[1]);
        assert!(sent[1].contains("Join merge_results: not run: 1 of 2 branches failed (tool_error)"), "{}", sent[1]);
        assert!(sent[2].contains(": 1 branches of 2 expected, 1 failed; 847 rows"), "{}", sent[2]);
        assert!(sent[3].contains("join.inject.branch_outputs is \\\"$everything\\\": use one of $results"), "{}", sent[3]);
        assert!(sent[4].matches("all 2 calls met").count() == 2, "{}", sent[4]);
        let merges = ended_steps(&events).iter().filter(|(n, _, _)| n == "merge_results").count();
        assert_eq!(merges, 1, "the blind join did not run; the one that asks did");
        assert_valid_requests(&h, "failed branches");
    }
}
