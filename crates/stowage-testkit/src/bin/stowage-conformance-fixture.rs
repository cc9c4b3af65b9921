//! `stowage-conformance-fixture`: a stdio MCP server with the tools, resources and prompts the
//! official conformance suite (`@modelcontextprotocol/conformance`, server mode) expects, so
//! the suite can be run against `stowage serve` fronting it. Names and payloads follow the
//! scenario descriptions the suite prints (`conformance list` / its sources); the binary
//! payloads are tiny (a 1×1 PNG, a 44-byte WAV), under the gateway's inline threshold, so they
//! must come back unchanged.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};
use stowage_testkit::server::{Handler, Peer, code, serve, text_result};

/// A 1×1 red PNG (70 bytes), as the suite suggests.
const PNG_1X1: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==";

fn wav_44() -> String {
    // A RIFF/WAVE header with no samples: the smallest valid WAV.
    let mut w = b"RIFF".to_vec();
    w.extend_from_slice(&36u32.to_le_bytes());
    w.extend_from_slice(b"WAVEfmt ");
    w.extend_from_slice(&16u32.to_le_bytes());
    w.extend_from_slice(&1u16.to_le_bytes());
    w.extend_from_slice(&1u16.to_le_bytes());
    w.extend_from_slice(&8000u32.to_le_bytes());
    w.extend_from_slice(&16000u32.to_le_bytes());
    w.extend_from_slice(&2u16.to_le_bytes());
    w.extend_from_slice(&16u16.to_le_bytes());
    w.extend_from_slice(b"data");
    w.extend_from_slice(&0u32.to_le_bytes());
    STANDARD.encode(w)
}

struct Conformance;

fn tool(name: &str, description: &str, props: Value, required: &[&str]) -> Value {
    json!({"name": name, "description": description,
        "inputSchema": {"type": "object", "properties": props, "required": required}})
}

fn elicit_result(r: Result<Value, Value>, prefix: &str) -> Value {
    match r {
        Ok(v) => text_result(format!(
            "{prefix}: action={}, content={}",
            v.get("action").and_then(Value::as_str).unwrap_or("?"),
            v.get("content").cloned().unwrap_or(json!({}))
        )),
        Err(e) => json!({"content": [{"type": "text", "text": format!("elicitation failed: {e}")}], "isError": true}),
    }
}

#[async_trait]
impl Handler for Conformance {
    fn server_info(&self) -> Value {
        json!({
            "capabilities": {
                "tools": {"listChanged": true},
                "resources": {"subscribe": true, "listChanged": true},
                "prompts": {"listChanged": true},
                "logging": {},
                "completions": {},
            },
            "serverInfo": {"name": "stowage-conformance-fixture", "version": "1"},
        })
    }

    async fn handle(&self, method: &str, params: Value, _id: &Value, peer: &Peer) -> Result<Option<Value>, (i64, String)> {
        let args = params.get("arguments").cloned().unwrap_or(json!({}));
        let arg = |k: &str| args.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
        let r = match method {
            "tools/list" => json!({"tools": [
                tool("test_simple_text", "Returns simple text", json!({}), &[]),
                tool("test_image_content", "Returns an image", json!({}), &[]),
                tool("test_audio_content", "Returns audio", json!({}), &[]),
                tool("test_embedded_resource", "Returns an embedded resource", json!({}), &[]),
                tool("test_multiple_content_types", "Returns text, image and a resource", json!({}), &[]),
                tool("test_tool_with_logging", "Logs while running", json!({}), &[]),
                tool("test_tool_with_progress", "Reports progress", json!({}), &[]),
                tool("test_error_handling", "Always fails", json!({}), &[]),
                tool("test_sampling", "Asks the client's LLM", json!({"prompt": {"type": "string"}}), &["prompt"]),
                tool("test_elicitation", "Asks the user", json!({"message": {"type": "string"}}), &["message"]),
                tool("test_elicitation_sep1034_defaults", "Elicitation with defaults", json!({}), &[]),
                tool("test_elicitation_sep1330_enums", "Elicitation with enums", json!({}), &[]),
                tool("test_reconnection", "Answers after a pause (SSE polling, SEP-1699)", json!({}), &[]),
                {
                    "name": "json_schema_2020_12_tool",
                    "description": "Tool with JSON Schema 2020-12 features",
                    "inputSchema": {
                        "$schema": "https://json-schema.org/draft/2020-12/schema",
                        "type": "object",
                        "$defs": {"address": {"type": "object", "properties": {"street": {"type": "string"}, "city": {"type": "string"}}}},
                        "properties": {"name": {"type": "string"}, "address": {"$ref": "#/$defs/address"}},
                        "additionalProperties": false,
                    },
                },
            ]}),
            "tools/call" => {
                let name = params.get("name").and_then(Value::as_str).unwrap_or("");
                match name {
                    "test_simple_text" => text_result("This is a simple text response for testing."),
                    "test_image_content" => json!({"content": [{"type": "image", "data": PNG_1X1, "mimeType": "image/png"}]}),
                    "test_audio_content" => json!({"content": [{"type": "audio", "data": wav_44(), "mimeType": "audio/wav"}]}),
                    "test_embedded_resource" => json!({"content": [{"type": "resource", "resource": {
                        "uri": "test://embedded-resource", "mimeType": "text/plain", "text": "This is an embedded resource content."}}]}),
                    "test_multiple_content_types" => json!({"content": [
                        {"type": "text", "text": "Multiple content types test:"},
                        {"type": "image", "data": PNG_1X1, "mimeType": "image/png"},
                        {"type": "resource", "resource": {"uri": "test://mixed-content-resource", "mimeType": "application/json", "text": "{\"test\":\"data\",\"value\":123}"}},
                    ]}),
                    "test_tool_with_logging" => {
                        for (i, m) in ["Tool execution started", "Tool processing data", "Tool execution completed"].iter().enumerate() {
                            if i > 0 {
                                tokio::time::sleep(Duration::from_millis(50)).await;
                            }
                            peer.notify("notifications/message", json!({"level": "info", "data": m}));
                        }
                        text_result("Tool with logging executed successfully")
                    }
                    "test_tool_with_progress" => {
                        let token = params.pointer("/_meta/progressToken").cloned();
                        for (i, p) in [0, 50, 100].iter().enumerate() {
                            if i > 0 {
                                tokio::time::sleep(Duration::from_millis(50)).await;
                            }
                            if let Some(t) = &token {
                                peer.notify("notifications/progress", json!({"progressToken": t, "progress": p, "total": 100}));
                            }
                        }
                        text_result("Tool with progress executed successfully")
                    }
                    // Over stdio there is no stream to close; the pause leaves the gateway's
                    // own SSE stream open mid-call, long enough to be resumed.
                    "test_reconnection" => {
                        tokio::time::sleep(Duration::from_millis(200)).await;
                        text_result("Reconnection test completed")
                    }
                    "test_error_handling" => {
                        json!({"isError": true, "content": [{"type": "text", "text": "This tool intentionally returns an error for testing"}]})
                    }
                    "test_sampling" => {
                        let req =
                            json!({"messages": [{"role": "user", "content": {"type": "text", "text": arg("prompt")}}], "maxTokens": 100});
                        match peer.request("sampling/createMessage", req).await {
                            Ok(v) => {
                                text_result(format!("LLM response: {}", v.pointer("/content/text").and_then(Value::as_str).unwrap_or("")))
                            }
                            Err(e) => json!({"content": [{"type": "text", "text": format!("sampling failed: {e}")}], "isError": true}),
                        }
                    }
                    "test_elicitation" => {
                        let req = json!({"message": arg("message"), "requestedSchema": {"type": "object", "properties": {
                            "username": {"type": "string", "description": "User's response"},
                            "email": {"type": "string", "description": "User's email address"}}, "required": ["username", "email"]}});
                        elicit_result(peer.request("elicitation/create", req).await, "User response")
                    }
                    "test_elicitation_sep1034_defaults" => {
                        let req = json!({"message": "Please review and update the form fields with defaults", "requestedSchema": {"type": "object", "properties": {
                            "name": {"type": "string", "description": "User name", "default": "John Doe"},
                            "age": {"type": "integer", "description": "User age", "default": 30},
                            "score": {"type": "number", "description": "User score", "default": 95.5},
                            "status": {"type": "string", "description": "User status", "enum": ["active", "inactive", "pending"], "default": "active"},
                            "verified": {"type": "boolean", "description": "Verification status", "default": true}}}});
                        elicit_result(peer.request("elicitation/create", req).await, "Elicitation completed")
                    }
                    "test_elicitation_sep1330_enums" => {
                        let req = json!({"message": "Please select options from the enum fields", "requestedSchema": {"type": "object", "properties": {
                            "untitledSingle": {"type": "string", "description": "Select one option", "enum": ["option1", "option2", "option3"]},
                            "titledSingle": {"type": "string", "description": "Select one option with titles", "oneOf": [
                                {"const": "value1", "title": "First Option"}, {"const": "value2", "title": "Second Option"}, {"const": "value3", "title": "Third Option"}]},
                            "legacyEnum": {"type": "string", "description": "Select one option (legacy)", "enum": ["opt1", "opt2", "opt3"], "enumNames": ["Option One", "Option Two", "Option Three"]},
                            "untitledMulti": {"type": "array", "description": "Select multiple options", "items": {"type": "string", "enum": ["option1", "option2", "option3"]}},
                            "titledMulti": {"type": "array", "description": "Select multiple options with titles", "items": {"anyOf": [
                                {"const": "value1", "title": "First Choice"}, {"const": "value2", "title": "Second Choice"}, {"const": "value3", "title": "Third Choice"}]}}}}});
                        elicit_result(peer.request("elicitation/create", req).await, "Elicitation completed")
                    }
                    "json_schema_2020_12_tool" => text_result("ok"),
                    other => return Err((code::INVALID_PARAMS, format!("unknown tool: {other}"))),
                }
            }
            "resources/list" => json!({"resources": [
                {"uri": "test://static-text", "name": "static-text", "description": "A static text resource", "mimeType": "text/plain"},
                {"uri": "test://static-binary", "name": "static-binary", "description": "A static binary resource", "mimeType": "image/png"},
                {"uri": "test://watched-resource", "name": "watched-resource", "description": "A resource that can be subscribed to", "mimeType": "text/plain"},
            ]}),
            "resources/templates/list" => json!({"resourceTemplates": [
                {"uriTemplate": "test://template/{id}/data", "name": "template", "description": "A templated resource", "mimeType": "application/json"},
            ]}),
            "resources/read" => {
                let uri = params.get("uri").and_then(Value::as_str).unwrap_or("").to_owned();
                let content = match uri.as_str() {
                    "test://static-text" => {
                        json!({"uri": uri, "mimeType": "text/plain", "text": "This is the content of the static text resource."})
                    }
                    "test://static-binary" => json!({"uri": uri, "mimeType": "image/png", "blob": PNG_1X1}),
                    "test://watched-resource" => json!({"uri": uri, "mimeType": "text/plain", "text": "Watched resource content."}),
                    u if u.starts_with("test://template/") && u.ends_with("/data") => {
                        let id = &u["test://template/".len()..u.len() - "/data".len()];
                        let text = json!({"id": id, "templateTest": true, "data": format!("Data for ID: {id}")}).to_string();
                        json!({"uri": uri, "mimeType": "application/json", "text": text})
                    }
                    _ => return Err((code::RESOURCE_NOT_FOUND, format!("resource not found: {uri}"))),
                };
                json!({"contents": [content]})
            }
            "resources/subscribe" | "resources/unsubscribe" => json!({}),
            "prompts/list" => json!({"prompts": [
                {"name": "test_simple_prompt", "description": "A simple prompt without arguments"},
                {"name": "test_prompt_with_arguments", "description": "A prompt with arguments", "arguments": [
                    {"name": "arg1", "description": "First test argument", "required": true},
                    {"name": "arg2", "description": "Second test argument", "required": true}]},
                {"name": "test_prompt_with_embedded_resource", "description": "A prompt with an embedded resource", "arguments": [
                    {"name": "resourceUri", "description": "URI of the resource to embed", "required": true}]},
                {"name": "test_prompt_with_image", "description": "A prompt with an image"},
            ]}),
            "prompts/get" => {
                let name = params.get("name").and_then(Value::as_str).unwrap_or("");
                let pargs = params.get("arguments").cloned().unwrap_or(json!({}));
                let parg = |k: &str| pargs.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
                let text = |t: String| json!({"role": "user", "content": {"type": "text", "text": t}});
                match name {
                    "test_simple_prompt" => json!({"messages": [text("This is a simple prompt for testing.".into())]}),
                    "test_prompt_with_arguments" => {
                        json!({"messages": [text(format!("Prompt with arguments: arg1='{}', arg2='{}'", parg("arg1"), parg("arg2")))]})
                    }
                    "test_prompt_with_embedded_resource" => json!({"messages": [
                        {"role": "user", "content": {"type": "resource", "resource": {"uri": parg("resourceUri"), "mimeType": "text/plain", "text": "Embedded resource content for testing."}}},
                        text("Please process the embedded resource above.".into()),
                    ]}),
                    "test_prompt_with_image" => json!({"messages": [
                        {"role": "user", "content": {"type": "image", "data": PNG_1X1, "mimeType": "image/png"}},
                        text("Please analyze the image above.".into()),
                    ]}),
                    other => return Err((code::INVALID_PARAMS, format!("unknown prompt: {other}"))),
                }
            }
            "completion/complete" => {
                let value = params.pointer("/argument/value").and_then(Value::as_str).unwrap_or("");
                let values: Vec<&str> = ["paris", "park", "party"].into_iter().filter(|v| v.starts_with(value)).collect();
                json!({"completion": {"values": values, "total": values.len(), "hasMore": false}})
            }
            "logging/setLevel" => json!({}),
            _ => return Err((code::METHOD_NOT_FOUND, format!("method not found: {method}"))),
        };
        Ok(Some(r))
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    serve(tokio::io::stdin(), tokio::io::stdout(), Arc::new(Conformance)).await;
}
