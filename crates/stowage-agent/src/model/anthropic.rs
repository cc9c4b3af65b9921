//! Anthropic Messages (`POST {base_url}/messages`). Streamed: `message_start`,
//! `content_block_start` (text or `tool_use`), `content_block_delta` (`text_delta`,
//! `input_json_delta`), `content_block_stop`, `message_delta` (stop reason, usage),
//! `message_stop`; a body that ends before `message_stop` was dropped, an `error` event is the
//! API's error. Whole (`stream = false`, or a server that answers JSON anyway): one `message`.
//!
//! Images are `image` blocks with a base64 `source`, in user turns and inside `tool_result`
//! content alike.

use async_trait::async_trait;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::sse::SseReader;
use super::{
    Answer, ChatMessage, Content, Endpoint, FinishReason, MAX_CALLS_PER_REPLY, Model, ModelError, ModelReply, ModelRequest, Part, ToolCall,
    check_size, parse_arguments, with_deadline,
};

/// The API version header every request carries.
const ANTHROPIC_VERSION: &str = "2023-06-01";

/// The Messages backend.
pub(crate) struct AnthropicModel {
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

/// Content as a string when it is all text, else blocks.
fn blocks(c: &Content) -> Value {
    if !c.has_images() {
        return json!(c.text());
    }
    let parts: Vec<Value> =
        c.0.iter()
            .map(|p| match p {
                Part::Text(t) => json!({"type": "text", "text": t}),
                Part::Image(i) => json!({"type": "image", "source": {"type": "base64", "media_type": i.mime_type, "data": &*i.data}}),
            })
            .collect();
    Value::Array(parts)
}

/// The request body. Tool results are user turns of `tool_result` blocks; consecutive ones
/// share one turn, as the API requires.
pub(crate) fn body(model: &str, req: &ModelRequest<'_>, stream: bool) -> Value {
    let mut messages: Vec<Value> = Vec::new();
    for m in req.messages {
        match m {
            ChatMessage::User(c) => messages.push(json!({"role": "user", "content": blocks(c)})),
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
                let block = json!({"type": "tool_result", "tool_use_id": call_id, "content": blocks(content), "is_error": is_error});
                match messages.last_mut() {
                    Some(last)
                        if last["role"] == "user"
                            && last["content"].as_array().is_some_and(|c| c.iter().all(|b| b["type"] == "tool_result")) =>
                    {
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
        "stream": stream,
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

fn finish_blocks(reply: &mut ModelReply, blocks: Vec<Option<Block>>) {
    let cut = reply.finish == FinishReason::Length;
    for b in blocks.into_iter().flatten() {
        if let Block::Tool { id, name, json } = b {
            let (arguments, invalid) = parse_arguments(&name, &json, cut);
            reply.tool_calls.push(ToolCall { id, name, arguments, invalid });
        }
    }
}

/// A whole `message`.
fn whole(v: &Value) -> ModelReply {
    let mut reply = ModelReply::default();
    if let Some(s) = v["stop_reason"].as_str() {
        reply.finish = FinishReason::parse(s);
    }
    reply.usage.input_tokens = v.pointer("/usage/input_tokens").and_then(Value::as_u64).unwrap_or(0);
    reply.usage.output_tokens = v.pointer("/usage/output_tokens").and_then(Value::as_u64).unwrap_or(0);
    let mut tools = Vec::new();
    for b in v["content"].as_array().into_iter().flatten() {
        match b["type"].as_str() {
            Some("text") => reply.text.push_str(b["text"].as_str().unwrap_or_default()),
            Some("tool_use") if tools.len() < MAX_CALLS_PER_REPLY => tools.push(Some(Block::Tool {
                id: b["id"].as_str().unwrap_or_default().to_owned(),
                name: b["name"].as_str().unwrap_or_default().to_owned(),
                // A server that could not parse the model's arguments sends them as a string.
                json: match b.get("input") {
                    Some(Value::String(raw)) => raw.clone(),
                    Some(v) => v.to_string(),
                    None => String::new(),
                },
            })),
            Some("tool_use") => reply.dropped_calls += 1,
            _ => {}
        }
    }
    finish_blocks(&mut reply, tools);
    reply
}

async fn streamed(url: &str, mut events: SseReader, text: &mpsc::Sender<String>) -> Result<ModelReply, ModelError> {
    let mut reply = ModelReply::default();
    // Blocks by index; tool blocks past the cap are counted, never stored.
    let mut blocks: Vec<Option<Block>> = Vec::new();
    let mut tools = 0usize;
    let mut pending = 0usize;
    let protocol = |what: String| ModelError::Protocol { url: url.to_owned(), what };
    loop {
        let ev = match events.next().await {
            Ok(Some(ev)) => ev,
            Ok(None) => return Err(ModelError::Dropped { url: url.to_owned(), reason: "the body ended before message_stop".into() }),
            Err(e) => return Err(ModelError::Dropped { url: url.to_owned(), reason: e.0 }),
        };
        let data: Value = serde_json::from_str(&ev.data)
            .map_err(|e| protocol(format!("an event is not JSON ({e}): {}", ev.data.chars().take(80).collect::<String>())))?;
        let kind = ev.event.as_deref().or_else(|| data.get("type").and_then(Value::as_str)).unwrap_or("").to_owned();
        let index = data.get("index").and_then(Value::as_u64).unwrap_or(0) as usize;
        match kind.as_str() {
            "message_start" => {
                reply.usage.input_tokens = data.pointer("/message/usage/input_tokens").and_then(Value::as_u64).unwrap_or(0);
            }
            "content_block_start" => {
                let b = &data["content_block"];
                let block = match b["type"].as_str() {
                    Some("tool_use") if tools >= MAX_CALLS_PER_REPLY => {
                        reply.dropped_calls += 1;
                        None
                    }
                    Some("tool_use") => {
                        tools += 1;
                        Some(Block::Tool {
                            id: b["id"].as_str().unwrap_or_default().to_owned(),
                            name: b["name"].as_str().unwrap_or_default().to_owned(),
                            json: String::new(),
                        })
                    }
                    _ => Some(Block::Text),
                };
                if let Some(block) = block {
                    // Indexes are dense in the API; a sparse one is bounded by what is stored.
                    if index > blocks.len() + MAX_CALLS_PER_REPLY * 4 {
                        return Err(protocol(format!("content block index {index} after {} blocks", blocks.len())));
                    }
                    if blocks.len() <= index {
                        blocks.resize_with(index + 1, || None);
                    }
                    blocks[index] = Some(block);
                }
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
                        let p = d["partial_json"].as_str().unwrap_or_default();
                        pending += p.len();
                        json.push_str(p);
                    }
                    // A dropped call's fragments.
                    (Some("input_json_delta"), None) => {}
                    (Some("input_json_delta"), _) => {
                        return Err(protocol(format!("input_json_delta for block {index}, not a tool_use")));
                    }
                    _ => {}
                }
                check_size(url, &reply, pending)?;
            }
            "message_delta" => {
                if let Some(n) = data.pointer("/usage/output_tokens").and_then(Value::as_u64) {
                    reply.usage.output_tokens = n;
                }
                if let Some(s) = data.pointer("/delta/stop_reason").and_then(Value::as_str) {
                    reply.finish = FinishReason::parse(s);
                }
            }
            "message_stop" => break,
            "error" => {
                let message = data.pointer("/error/message").and_then(Value::as_str).unwrap_or("an error in the stream");
                return Err(ModelError::Status { url: url.to_owned(), status: 500, body: message.to_owned() });
            }
            _ => {}
        }
    }
    finish_blocks(&mut reply, blocks);
    Ok(reply)
}

#[async_trait]
impl Model for AnthropicModel {
    async fn complete(&self, req: &ModelRequest<'_>, text: mpsc::Sender<String>) -> Result<ModelReply, ModelError> {
        let url = self.endpoint.url("messages");
        let body = body(&self.endpoint.model, req, self.endpoint.stream).to_string();
        let (answer, deadline) = self
            .endpoint
            .post(&url, || self.headers(self.endpoint.client.post(&url).header("content-type", "application/json").body(body.clone())))
            .await?;
        match answer {
            Answer::Stream(events) => with_deadline(&self.endpoint, &url, deadline, streamed(&url, events, &text)).await,
            Answer::Whole(v) => {
                if v["type"] != "message" && v.get("content").is_none() {
                    return Err(ModelError::Protocol { url, what: "the answer is not a message".into() });
                }
                let reply = whole(&v);
                if !reply.text.is_empty() {
                    let _ = text.send(reply.text.clone()).await;
                }
                Ok(reply)
            }
        }
    }

    async fn check(&self) -> Result<(), ModelError> {
        // One page of up to 1000 models: aliases are matched against all of them.
        self.endpoint.check(|url| self.headers(self.endpoint.client.get(format!("{url}?limit=1000")))).await
    }
}
