//! The official Rust MCP SDK (`rmcp`) as a client of `stowage serve --stdio` with its bundled
//! demo upstream: what an rmcp-based agent sees is links and summaries, never the bytes.

use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::TokioChildProcess;
use serde_json::{Value, json};

#[tokio::test]
async fn an_rmcp_client_gets_links_not_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_stowage"));
    cmd.args(["serve", "--stdio", "--store"]).arg(dir.path()).stderr(std::process::Stdio::null());
    let client = ().serve(TokioChildProcess::new(cmd).unwrap()).await.expect("rmcp handshake with stowage serve");

    let tools: Vec<String> = client.list_all_tools().await.unwrap().into_iter().map(|t| t.name.to_string()).collect();
    for t in ["get_report", "get_chart", "get_audio", "get_attachment", "get_report_link", "echo"] {
        assert!(tools.contains(&t.to_owned()), "{t} missing from {tools:?}");
    }

    let chart = serde_json::to_value(client.call_tool(CallToolRequestParams::new("get_chart")).await.unwrap()).unwrap();
    let text = chart.to_string();
    assert!(!text.contains("iVBORw0KGgo"), "PNG base64 reached the client: {text}");
    let blocks = chart["content"].as_array().unwrap();
    assert!(blocks.iter().any(|b| b["type"] == "resource_link" && b["mimeType"] == "image/png"), "{chart}");
    let asset = &chart["_meta"]["io.stowage/assets"][0];
    assert_eq!((asset["width"].as_u64(), asset["height"].as_u64()), (Some(200), Some(120)), "{chart}");

    let report = serde_json::to_value(client.call_tool(CallToolRequestParams::new("get_report")).await.unwrap()).unwrap();
    let text = report.to_string();
    assert!(text.len() < 2_000 && text.contains("artifact://"), "{text}");

    let args = json!({"message": "hello from rmcp"}).as_object().cloned().unwrap();
    let echo = client.call_tool(CallToolRequestParams::new("echo").with_arguments(args)).await.unwrap();
    let echo = serde_json::to_value(echo).unwrap();
    assert_eq!(echo["content"][0]["text"], Value::from("hello from rmcp"));
    client.cancel().await.unwrap();
}
