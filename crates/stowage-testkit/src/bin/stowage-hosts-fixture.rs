//! `stowage-hosts-fixture`: a stdio MCP server with what a real host's model investigates
//! through Stowage (crates/stowage/tests/real_hosts.rs drives Claude Code and Codex CLI through
//! it). Each tool returns one kind of heavy answer that would flood a context, with one fact
//! planted where only a reader tool finds it:
//!
//! | tool | what it returns | the fact, and where |
//! |---|---|---|
//! | `get_log` | a 20,000-line service log as one text block (about 1.6 MB) | `investigation::NEEDLE` on line `NEEDLE_LINE`, found by grep or by reading the page there |
//! | `get_report` | `report.pdf` from the fixture directory as an embedded `resource` blob | text of a late page (the test writes the PDF) |
//! | `get_orders` | 20,000 orders as JSON text and the same in `structuredContent` (FastMCP's shape), under an `outputSchema` | the one order with id `RARE_ORDER` |
//! | `run_job` | an `isError` result: a 40 KB stack trace | the root cause on its last line (`ROOT_CAUSE`) |
//! | `take_screenshot` | `screen.png` from the fixture directory as an image block | the test draws a mark in one region |
//!
//! `STOWAGE_HOSTS_FIXTURE_DIR` names the directory with `report.pdf` and `screen.png`.
//! `STOWAGE_FIXTURE_START_DELAY_MS` makes it read nothing for that long after it starts: an
//! upstream slow to start (a first `npx -y` or `uvx` run, a Python server on a busy machine).
//! The texts are made by `stowage_testkit::investigation`, so a test names exactly what the
//! model must see.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};
use stowage_testkit::investigation::{log_text, orders, trace_text};
use stowage_testkit::server::{Handler, Peer, code, serve, text_result};

struct Fixture {
    dir: PathBuf,
}

fn tool(name: &str, description: &str) -> Value {
    json!({"name": name, "description": description, "inputSchema": {"type": "object", "properties": {}}})
}

#[async_trait]
impl Handler for Fixture {
    fn server_info(&self) -> Value {
        json!({"capabilities": {"tools": {}}, "serverInfo": {"name": "stowage-hosts-fixture", "version": "1"}})
    }

    async fn handle(&self, method: &str, params: Value, _id: &Value, _peer: &Peer) -> Result<Option<Value>, (i64, String)> {
        let name = params.get("name").and_then(Value::as_str).unwrap_or("");
        let read = |file: &str| std::fs::read(self.dir.join(file)).map_err(|e| (code::INVALID_PARAMS, format!("cannot read {file}: {e}")));
        let r = match method {
            "tools/list" => json!({"tools": [
                tool("get_log", "The payment service's log for 2026-11-28."),
                tool("get_report", "The quarterly report as a PDF."),
                {
                    "name": "get_orders",
                    "description": "Every order of the quarter.",
                    "inputSchema": {"type": "object", "properties": {}},
                    "outputSchema": {"type": "object", "properties": {"orders": {"type": "array", "items": {"type": "object"}}}, "required": ["orders"]},
                },
                tool("run_job", "Runs the nightly export job."),
                tool("take_screenshot", "A screenshot of the dashboard."),
            ]}),
            "tools/call" => match name {
                "get_log" => text_result(log_text()),
                "get_report" => json!({"content": [{"type": "resource", "resource": {
                    "uri": "file:///reports/q3.pdf", "mimeType": "application/pdf", "blob": STANDARD.encode(read("report.pdf")?),
                }}]}),
                "get_orders" => {
                    let doc = json!({"orders": orders()});
                    json!({"content": [{"type": "text", "text": doc.to_string()}], "structuredContent": doc})
                }
                "run_job" => json!({"content": [{"type": "text", "text": trace_text()}], "isError": true}),
                "take_screenshot" => {
                    json!({"content": [{"type": "image", "mimeType": "image/png", "data": STANDARD.encode(read("screen.png")?)}]})
                }
                _ => return Err((code::INVALID_PARAMS, format!("unknown tool: {name}"))),
            },
            _ => return Err((code::METHOD_NOT_FOUND, format!("method not found: {method}"))),
        };
        Ok(Some(r))
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    if let Some(ms) = std::env::var("STOWAGE_FIXTURE_START_DELAY_MS").ok().and_then(|v| v.parse().ok()) {
        eprintln!("stowage-hosts-fixture: starting slowly ({ms} ms)");
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
    let dir = std::env::var_os("STOWAGE_HOSTS_FIXTURE_DIR").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("."));
    eprintln!("stowage-hosts-fixture: serving on stdio");
    serve(tokio::io::stdin(), tokio::io::stdout(), Arc::new(Fixture { dir })).await;
}
