//! Anthropic Messages (`POST {base_url}/messages`), streamed: `message_start`,
//! `content_block_start` (text or `tool_use`), `content_block_delta` (`text_delta`,
//! `input_json_delta`), `content_block_stop`, `message_delta` (usage), `message_stop`. A body
//! that ends before `message_stop` was dropped; an `error` event is the API's error.

use async_trait::async_trait;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::sse::SseReader;
use super::{ChatMessage, Endpoint, Model, ModelError, ModelReply, ModelRequest, ToolCall, parse_arguments, with_timeout};

/// The API version header every request carries.
const ANTHROPIC_VERSION: &str = "2023-06-01";

/// The Messages backend.
pub struct AnthropicModel {
    endpoint: Endpoint,
}

impl AnthropicModel {
    pub(crate) fn new(endpoint: Endpoint) -> Self {
        AnthropicModel { endpoint }
    }

    fn headers(&self, req: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        let req = req.header("anthropic-version", ANTHROPIC_VERSION);
        match &self.endpoint.api_key {
            Some(k) => req.header("x-api-key", k),
            None => req,
        }
    }
}

/// The request body. Tool results are user turns of `tool_result` blocks; consecutive ones
/// share one turn, as the API requires.
pub(crate) fn body(model: &str, req: &ModelRequest<'_>) -> Value {
    let mut messages: Vec<Value> = Vec::new();
    for m in req.messages {
        match m {
            ChatMessage::User(t) => messages.push(json!({"role": "user", "content": t})),
            ChatMessage::Assistant { text, tool_calls } => {
                let mut blocks = Vec::new();
                if !text.is_empty() {
                    blocks.push(json!({"type": "text", "text": text}));
                }
                for c in tool_calls {
                    blocks.push(json!({"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments}));
                }
                messages.push(json!({"role": "assistant", "content": blocks}));
            }
            ChatMessage::ToolResult { call_id, content, is_error, .. } => {
                let block = json!({"type": "tool_result", "tool_use_id": call_id, "content": content, "is_error": is_error});
                match messages.last_mut() {
                    Some(last) if last["role"] == "user" && last["content"].is_array() => {
                        last["content"].as_array_mut().expect("checked").push(block);
                    }
                    _ => messages.push(json!({"role": "user", "content": [block]})),
                }
            }
        }
    }
    let mut body = json!({
        "model": model,
        "max_tokens": req.max_tokens,
        "system": req.system,
        "messages": messages,
        "stream": true,
    });
    if !req.tools.is_empty() {
        body["tools"] =
            req.tools.iter().map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.input_schema})).collect();
    }
    body
}

enum Block {
    Text,
    Tool { id: String, name: String, json: String },
}

#[async_trait]
impl Model for AnthropicModel {
    async fn complete(&self, req: &ModelRequest<'_>, text: mpsc::Sender<String>) -> Result<ModelReply, ModelError> {
        let url = self.endpoint.url("messages");
        let body = body(&self.endpoint.model, req);
        with_timeout(&self.endpoint, &url, async {
            let resp = self
                .endpoint
                .post(&url, self.headers(self.endpoint.client.post(&url).header("content-type", "application/json").body(body.to_string())))
                .await?;
            let mut events = SseReader::new(resp);
            let mut reply = ModelReply::default();
            let mut blocks: Vec<Option<Block>> = Vec::new();
            let protocol = |what: String| ModelError::Protocol { url: url.clone(), what };
            loop {
                let ev = match events.next().await {
                    Ok(Some(ev)) => ev,
                    Ok(None) => return Err(ModelError::Dropped { url: url.clone(), reason: "the body ended".into() }),
                    Err(e) => return Err(ModelError::Dropped { url: url.clone(), reason: e.0 }),
                };
                let data: Value = serde_json::from_str(&ev.data).map_err(|e| protocol(format!("an event is not JSON: {e}")))?;
                let kind = ev.event.as_deref().or_else(|| data.get("type").and_then(Value::as_str)).unwrap_or("").to_owned();
                let index = data.get("index").and_then(Value::as_u64).unwrap_or(0) as usize;
                match kind.as_str() {
                    "message_start" => {
                        reply.usage.input_tokens = data.pointer("/message/usage/input_tokens").and_then(Value::as_u64).unwrap_or(0);
                    }
                    "content_block_start" => {
                        if index > 128 {
                            return Err(protocol(format!("content block index {index}")));
                        }
                        if blocks.len() <= index {
                            blocks.resize_with(index + 1, || None);
                        }
                        let b = &data["content_block"];
                        blocks[index] = Some(match b["type"].as_str() {
                            Some("tool_use") => Block::Tool {
                                id: b["id"].as_str().unwrap_or_default().to_owned(),
                                name: b["name"].as_str().unwrap_or_default().to_owned(),
                                json: String::new(),
                            },
                            _ => Block::Text,
                        });
                    }
                    "content_block_delta" => {
                        let d = &data["delta"];
                        match (d["type"].as_str(), blocks.get_mut(index).and_then(Option::as_mut)) {
                            (Some("text_delta"), _) => {
                                let t = d["text"].as_str().unwrap_or_default();
                                reply.text.push_str(t);
                                let _ = text.send(t.to_owned()).await;
                            }
                            (Some("input_json_delta"), Some(Block::Tool { json, .. })) => {
                                json.push_str(d["partial_json"].as_str().unwrap_or_default());
                            }
                            (Some("input_json_delta"), _) => {
                                return Err(protocol(format!("input_json_delta for block {index}, not a tool_use")));
                            }
                            _ => {}
                        }
                    }
                    "message_delta" => {
                        if let Some(n) = data.pointer("/usage/output_tokens").and_then(Value::as_u64) {
                            reply.usage.output_tokens = n;
                        }
                    }
                    "message_stop" => break,
                    "error" => {
                        let message = data.pointer("/error/message").and_then(Value::as_str).unwrap_or("an error in the stream");
                        return Err(ModelError::Status { url: url.clone(), status: 500, body: message.to_owned() });
                    }
                    _ => {}
                }
            }
            for b in blocks.into_iter().flatten() {
                if let Block::Tool { id, name, json } = b {
                    let arguments = parse_arguments(&url, &name, &json)?;
                    reply.tool_calls.push(ToolCall { id, name, arguments });
                }
            }
            Ok(reply)
        })
        .await
    }

    async fn check(&self) -> Result<(), ModelError> {
        let url = self.endpoint.url("models");
        self.endpoint.check(self.headers(self.endpoint.client.get(url))).await
    }
}
