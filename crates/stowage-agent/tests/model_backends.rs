//! Both model backends against the testkit's model stub over real HTTP: streamed text,
//! tool-call arguments assembled from fragments, the request bodies in each wire format, and
//! every failure (HTTP error, timeout, dropped stream, nothing listening) as its own error.

use std::time::Duration;

use serde_json::json;
use stowage_agent::model::{self, ChatMessage, ModelRequest, ToolCall, ToolSpec};
use stowage_agent::{AgentConfig, Backend, ModelError};
use stowage_testkit::model_stub::{ModelStub, Turn};
use tokio::sync::mpsc;

fn config(stub: &ModelStub, backend: Backend) -> AgentConfig {
    AgentConfig {
        base_url: stub.base_url(),
        model: "stub-model".into(),
        backend,
        request_timeout: Duration::from_secs(2),
        max_retries: 0,
        ..Default::default()
    }
}

fn tools() -> Vec<ToolSpec> {
    vec![ToolSpec {
        name: "fx_search".into(),
        description: "Search".into(),
        input_schema: json!({"type": "object", "properties": {"q": {"type": "string"}}}),
    }]
}

async fn complete(stub: &ModelStub, backend: Backend, messages: &[ChatMessage]) -> (Result<model::ModelReply, ModelError>, Vec<String>) {
    let m = model::from_config(&config(stub, backend)).unwrap();
    let tools = tools();
    let req = ModelRequest { system: "be brief", messages, tools: &tools, max_tokens: 256 };
    let (tx, mut rx) = mpsc::channel(1024);
    let reply = m.complete(&req, tx).await;
    let mut chunks = Vec::new();
    while let Ok(c) = rx.try_recv() {
        chunks.push(c);
    }
    (reply, chunks)
}

#[tokio::test]
async fn both_backends_stream_text_and_assemble_fragmented_tool_calls() {
    for backend in [Backend::Openai, Backend::Anthropic] {
        let args = json!({"q": "quarterly \"sales\" 2024", "limit": 5, "nested": {"a": [1, 2, 3]}});
        let stub = ModelStub::start(vec![
            Turn::Text("{\"raw_answer\": \"hello there, world\"}".into()),
            Turn::Tools { thought: "look it up".into(), calls: vec![("fx_search".into(), args.clone()), ("fx_search".into(), json!({}))] },
        ])
        .await;
        let history = vec![ChatMessage::User("hi".into())];
        let (reply, chunks) = complete(&stub, backend, &history).await;
        let reply = reply.unwrap();
        assert_eq!(reply.text, "{\"raw_answer\": \"hello there, world\"}", "{backend:?}");
        assert!(chunks.len() > 3, "streamed in pieces: {chunks:?}");
        assert_eq!(chunks.concat(), reply.text);
        assert!(reply.tool_calls.is_empty());
        assert!(reply.usage.input_tokens > 0 && reply.usage.output_tokens > 0, "{:?}", reply.usage);

        let (reply, _) = complete(&stub, backend, &history).await;
        let reply = reply.unwrap();
        assert_eq!(reply.text, "look it up");
        let calls: Vec<(&str, &serde_json::Value)> = reply.tool_calls.iter().map(|c| (c.name.as_str(), &c.arguments)).collect();
        assert_eq!(calls, [("fx_search", &args), ("fx_search", &json!({}))], "{backend:?}");
        assert_ne!(reply.tool_calls[0].id, reply.tool_calls[1].id);

        // What the API was sent.
        let sent = stub.requests()[0].json();
        assert_eq!(sent["model"], "stub-model");
        assert_eq!(sent["stream"], true);
        match backend {
            Backend::Openai => {
                assert_eq!(stub.requests()[0].path, "/v1/chat/completions");
                assert_eq!(sent["messages"][0], json!({"role": "system", "content": "be brief"}));
                assert_eq!(sent["tools"][0]["function"]["name"], "fx_search");
                assert_eq!(sent["tools"][0]["function"]["parameters"]["properties"]["q"]["type"], "string");
            }
            Backend::Anthropic => {
                assert_eq!(stub.requests()[0].path, "/v1/messages");
                assert_eq!(sent["system"], "be brief");
                assert_eq!(sent["max_tokens"], 256);
                assert_eq!(sent["tools"][0]["input_schema"]["properties"]["q"]["type"], "string");
                assert_eq!(stub.requests()[0].headers["anthropic-version"], "2023-06-01");
            }
        }
    }
}

#[tokio::test]
async fn tool_results_are_sent_in_each_wire_format() {
    let history = vec![
        ChatMessage::User("find it".into()),
        ChatMessage::Assistant {
            text: String::new(),
            tool_calls: vec![ToolCall::new("c1", "fx_search", json!({"q": "a"})), ToolCall::new("c2", "fx_search", json!({"q": "b"}))],
        },
        ChatMessage::ToolResult { call_id: "c1".into(), name: "fx_search".into(), content: "one".into(), is_error: false },
        ChatMessage::ToolResult { call_id: "c2".into(), name: "fx_search".into(), content: "error: boom".into(), is_error: true },
    ];
    let stub = ModelStub::start(vec![Turn::Text("ok".into()), Turn::Text("ok".into())]).await;
    complete(&stub, Backend::Openai, &history).await.0.unwrap();
    complete(&stub, Backend::Anthropic, &history).await.0.unwrap();
    let openai = stub.requests()[0].json();
    assert_eq!(openai["messages"][2]["tool_calls"][1]["function"]["arguments"], "{\"q\":\"b\"}");
    assert_eq!(openai["messages"][3], json!({"role": "tool", "tool_call_id": "c1", "content": "one"}));
    assert_eq!(openai["messages"][4]["tool_call_id"], "c2");
    let anthropic = stub.requests()[1].json();
    assert_eq!(anthropic["messages"][1]["content"][1], json!({"type": "tool_use", "id": "c2", "name": "fx_search", "input": {"q": "b"}}));
    // Both results in one user turn, as the API requires.
    assert_eq!(anthropic["messages"].as_array().unwrap().len(), 3);
    assert_eq!(anthropic["messages"][2]["content"][1]["is_error"], true);
}

#[tokio::test]
async fn each_failure_has_its_own_error_and_code() {
    for backend in [Backend::Openai, Backend::Anthropic] {
        let stub = ModelStub::start(vec![Turn::Status(500, "overloaded".into()), Turn::DropAfter("half an ans".into()), Turn::Hang]).await;
        let history = vec![ChatMessage::User("hi".into())];
        let e = complete(&stub, backend, &history).await.0.unwrap_err();
        assert_eq!(e.code(), "model_http_error", "{e}");
        assert!(e.to_string().contains("500") && e.to_string().contains("overloaded"), "{e}");
        let e = complete(&stub, backend, &history).await.0.unwrap_err();
        assert_eq!(e.code(), "model_stream_dropped", "{backend:?}: {e}");
        let started = std::time::Instant::now();
        let e = complete(&stub, backend, &history).await.0.unwrap_err();
        assert_eq!(e.code(), "model_timeout", "{e}");
        assert!(started.elapsed() < Duration::from_secs(5));
    }
}

#[tokio::test]
async fn the_start_up_check_tells_a_missing_or_unreachable_model_in_one_line() {
    let stub = ModelStub::start(vec![]).await;
    for backend in [Backend::Openai, Backend::Anthropic] {
        model::from_config(&config(&stub, backend)).unwrap().check().await.unwrap();
    }
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let cfg = AgentConfig { base_url: format!("http://{free}/v1"), model: "m".into(), ..Default::default() };
    let e = model::from_config(&cfg).unwrap().check().await.unwrap_err();
    assert_eq!(e.code(), "model_unreachable");
    assert!(e.to_string().contains(&free.to_string()) && !e.to_string().contains('\n'), "{e}");
    let e = model::from_config(&AgentConfig::default()).err().unwrap();
    assert!(e.to_string().contains("agent.base_url"), "{e}");
    let cfg = AgentConfig { api_key_env: "STOWAGE_TEST_SURELY_UNSET_KEY".into(), ..config(&stub, Backend::Openai) };
    let e = model::from_config(&cfg).err().unwrap();
    assert!(e.to_string().contains("STOWAGE_TEST_SURELY_UNSET_KEY"), "{e}");
}

#[tokio::test]
async fn the_start_up_check_names_the_fix_for_a_missing_version_path_and_an_unknown_model() {
    let stub = ModelStub::start(vec![]).await;
    for backend in [Backend::Openai, Backend::Anthropic] {
        // The server's root instead of its API path.
        let cfg = AgentConfig { base_url: format!("http://{}", stub.addr), ..config(&stub, backend) };
        let e = model::from_config(&cfg).unwrap().check().await.unwrap_err();
        assert_eq!(e.code(), "model_misconfigured");
        assert!(e.to_string().contains(&format!("set agent.base_url = \"http://{}/v1\"", stub.addr)), "{e}");
        // A model the server does not list.
        let cfg = AgentConfig { model: "gpt-9".into(), ..config(&stub, backend) };
        let e = model::from_config(&cfg).unwrap().check().await.unwrap_err();
        assert!(e.to_string().contains("model \"gpt-9\" is not served") && e.to_string().contains("stub-model"), "{e}");
        // An alias of a listed model is served.
        stub.set_models(&["claude-sonnet-4-5-20250929", "stub-model"]);
        let cfg = AgentConfig { model: "claude-sonnet-4-5".into(), ..config(&stub, backend) };
        model::from_config(&cfg).unwrap().check().await.unwrap();
        stub.set_models(&["stub-model"]);
    }
    let e =
        model::from_config(&AgentConfig { base_url: "localhost:11434/v1".into(), model: "m".into(), ..Default::default() }).err().unwrap();
    assert!(e.to_string().contains("agent.base_url") && e.to_string().contains("http"), "{e}");
}

#[tokio::test]
async fn whole_answers_garbage_and_many_calls_in_each_format() {
    for backend in [Backend::Openai, Backend::Anthropic] {
        let args = json!({"q": "x"});
        let stub = ModelStub::start(vec![
            Turn::Whole(Box::new(Turn::Tools { thought: "t".into(), calls: vec![("fx_search".into(), args.clone())] })),
            Turn::RawTools { thought: String::new(), calls: vec![("fx_search".into(), "{\"q\": ".into())] },
            Turn::Raw { content_type: "text/html".into(), body: "<html>502 Bad Gateway</html>".into() },
            Turn::Tools { thought: String::new(), calls: (0..40).map(|i| ("fx_search".to_owned(), json!({"i": i}))).collect() },
        ])
        .await;
        let history = vec![ChatMessage::User("hi".into())];
        let reply = complete(&stub, backend, &history).await.0.unwrap();
        assert_eq!((reply.text.as_str(), reply.tool_calls[0].arguments.clone()), ("t", args.clone()), "{backend:?}");
        // Arguments that are not JSON are the call's fault, not an error.
        let reply = complete(&stub, backend, &history).await.0.unwrap();
        assert!(reply.tool_calls[0].invalid.as_deref().is_some_and(|w| w.contains("not valid JSON")), "{reply:?}");
        let e = complete(&stub, backend, &history).await.0.unwrap_err();
        assert_eq!(e.code(), "model_protocol_error");
        assert!(e.to_string().contains("502 Bad Gateway"), "{e}");
        let reply = complete(&stub, backend, &history).await.0.unwrap();
        assert_eq!((reply.tool_calls.len(), reply.dropped_calls), (16, 24));
    }
}
