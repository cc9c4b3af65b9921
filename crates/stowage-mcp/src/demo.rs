//! The bundled demo server: what `stowage serve` fronts when no upstream is configured, so a
//! newcomer sees the whole flow at once. It runs in-process (no binary to find on a fresh
//! machine) and returns each kind of heavy output the gateway handles:
//!
//! | tool | returns |
//! |---|---|
//! | `get_report` | a ~300 KB PDF as base64 inside JSON text (the Tableau shape) |
//! | `get_chart` | a native `image` block (PNG, 200×120) |
//! | `get_audio` | a native `audio` block (WAV, 1 s) |
//! | `get_attachment` | an embedded `resource` with a base64 `blob` (PDF) |
//! | `get_report_link` | a `resource_link` to `demo://reports/q3.pdf` (readable as a resource) |
//! | `echo` | its `message` back, small results pass through untouched |

use std::sync::Arc;

use async_trait::async_trait;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};

use crate::jsonrpc::code;
use crate::samples;
use crate::server_kit::{Handler, Peer, serve, text_result};
use crate::upstream::DemoFactory;

const REPORT_URI: &str = "demo://reports/q3.pdf";

struct Demo;

fn tool(name: &str, description: &str, props: Value) -> Value {
    json!({"name": name, "description": description, "inputSchema": {"type": "object", "properties": props}})
}

#[async_trait]
impl Handler for Demo {
    fn server_info(&self) -> Value {
        json!({
            "capabilities": {"tools": {}, "resources": {}},
            "serverInfo": {"name": "stowage-demo", "version": env!("CARGO_PKG_VERSION")},
            "instructions": "Demo tools that return heavy content; Stowage turns it into artifact links.",
        })
    }

    async fn handle(&self, method: &str, params: Value, _id: &Value, _peer: &Peer) -> Result<Option<Value>, (i64, String)> {
        let r = match method {
            "tools/list" => json!({"tools": [
                tool("get_report", "Quarterly report as a PDF (base64 inside JSON, like Tableau's get_view_pdf)", json!({})),
                tool("get_chart", "A chart as a PNG image", json!({})),
                tool("get_audio", "A one-second WAV tone", json!({})),
                tool("get_attachment", "The report as an embedded resource blob", json!({})),
                tool("get_report_link", "A resource_link to the report", json!({})),
                tool("echo", "Echoes its message", json!({"message": {"type": "string"}})),
            ]}),
            "tools/call" => {
                let name = params.get("name").and_then(Value::as_str).unwrap_or("");
                match name {
                    "get_report" => {
                        let pdf = samples::pdf(300_000, "Q3 report");
                        let body = json!({"report": "Q3", "filename": "q3-report.pdf", "format": "pdf", "data": STANDARD.encode(&pdf)});
                        text_result(body.to_string())
                    }
                    "get_chart" => json!({"content": [
                        {"type": "text", "text": "Revenue by month"},
                        {"type": "image", "mimeType": "image/png", "data": STANDARD.encode(samples::png(200, 120))},
                    ]}),
                    "get_audio" => json!({"content": [{"type": "audio", "mimeType": "audio/wav", "data": STANDARD.encode(samples::wav(1000))}]}),
                    "get_attachment" => json!({"content": [{"type": "resource", "resource": {
                        "uri": REPORT_URI, "mimeType": "application/pdf", "blob": STANDARD.encode(samples::pdf(120_000, "Q3 report"))}}]}),
                    "get_report_link" => json!({"content": [
                        {"type": "resource_link", "uri": REPORT_URI, "name": "q3.pdf", "mimeType": "application/pdf", "size": 120_000},
                    ]}),
                    "echo" => text_result(params.pointer("/arguments/message").and_then(Value::as_str).unwrap_or("").to_owned()),
                    other => return Err((code::INVALID_PARAMS, format!("unknown tool: {other}"))),
                }
            }
            "resources/list" => json!({"resources": [{"uri": REPORT_URI, "name": "q3.pdf", "mimeType": "application/pdf"}]}),
            "resources/templates/list" => json!({"resourceTemplates": []}),
            "resources/read" if params.get("uri").and_then(Value::as_str) == Some(REPORT_URI) => json!({"contents": [
                {"uri": REPORT_URI, "mimeType": "application/pdf", "blob": STANDARD.encode(samples::pdf(120_000, "Q3 report"))},
            ]}),
            "resources/read" => return Err((code::RESOURCE_NOT_FOUND, "resource not found".into())),
            _ => return Err((code::METHOD_NOT_FOUND, format!("method not found: {method}"))),
        };
        Ok(Some(r))
    }
}

/// Starts a fresh in-process demo server per call and returns its pipe ends.
pub fn factory() -> DemoFactory {
    Arc::new(|| {
        let (ours, theirs) = tokio::io::duplex(1 << 20);
        let (their_read, their_write) = tokio::io::split(theirs);
        tokio::spawn(serve(their_read, their_write, Arc::new(Demo)));
        let (our_read, our_write) = tokio::io::split(ours);
        (Box::new(our_read) as _, Box::new(our_write) as _)
    })
}
