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

/// Content as blocks: text blocks that are not blank (the API refuses empty text), images.
fn blocks(c: &Content) -> Vec<Value> {
    c.0.iter()
        .filter_map(|p| match p {
            Part::Text(t) if t.trim().is_empty() => None,
            Part::Text(t) => Some(json!({"type": "text", "text": t})),
            Part::Image(i) => Some(json!({"type": "image", "source": {"type": "base64", "media_type": i.mime_type, "data": &*i.data}})),
        })
        .collect()
}

/// The request body, within the Messages API's published rules: turns alternate user and
/// assistant, starting with the user; no content is empty; `tool_use` appears only when
/// `tools` are sent, and each turn of `tool_use` blocks is answered by the next user turn,
/// whose `tool_result` blocks come first. [`super::wire_messages`] drops empty turns and pairs
/// every call with its result; consecutive turns of one role are then merged into one.
pub(crate) fn body(model: &str, req: &ModelRequest<'_>, stream: bool) -> Value {
    // (role, blocks), merged as they come.
    let mut turns: Vec<(&'static str, Vec<Value>)> = Vec::new();
    for m in &super::wire_messages(req.messages, !req.tools.is_empty()) {
        let (role, add) = match m {
            ChatMessage::User(c) => ("user", blocks(c)),
            ChatMessage::Assistant { text, tool_calls } => {
                let mut b = Vec::new();
                if !text.trim().is_empty() {
                    b.push(json!({"type": "text", "text": text}));
                }
                for c in tool_calls {
                    b.push(json!({"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments}));
                }
                ("assistant", b)
            }
            ChatMessage::ToolResult { call_id, content, is_error, .. } => {
                // All text: the compact string form ([`super::wire_messages`] made it non-blank).
                let inner = if content.has_images() { Value::Array(blocks(content)) } else { json!(content.text()) };
                ("user", vec![json!({"type": "tool_result", "tool_use_id": call_id, "content": inner, "is_error": is_error})])
            }
        };
        if add.is_empty() {
            continue;
        }
        match turns.last_mut() {
            Some((last, b)) if *last == role => {
                b.extend(add);
                // A user turn's tool results come before its text (the API requires them first).
                b.sort_by_key(|x| x["type"] != "tool_result");
            }
            _ => turns.push((role, add)),
        }
    }
    if turns.first().is_some_and(|(r, _)| *r == "assistant") {
        turns.insert(0, ("user", vec![json!({"type": "text", "text": "(continue)"})]));
    }
    let messages: Vec<Value> = turns
        .into_iter()
        .map(|(role, b)| {
            // A user turn of one text block goes as a string, as people write it.
            if role == "user" && b.len() == 1 && b[0]["type"] == "text" {
                json!({"role": role, "content": b[0]["text"]})
            } else {
                json!({"role": role, "content": b})
            }
        })
        .collect();
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn turns_alternate_and_tool_results_come_first() {
        let tools = [super::super::ToolSpec { name: "echo".into(), description: String::new(), input_schema: json!({"type": "object"}) }];
        let messages = vec![
            ChatMessage::User("q".into()),
            ChatMessage::Assistant { text: String::new(), tool_calls: vec![ToolCall::new("t1", "echo", json!({}))] },
            ChatMessage::ToolResult { call_id: "t1".into(), name: "echo".into(), content: "r".into(), is_error: false },
            ChatMessage::Assistant { text: "\n".into(), tool_calls: Vec::new() },
            ChatMessage::User("Your final answer is invalid".into()),
        ];
        let req = ModelRequest { system: "s", messages: &messages, tools: &tools, max_tokens: 10 };
        let b = body("m", &req, true);
        let roles: Vec<&str> = b["messages"].as_array().unwrap().iter().map(|m| m["role"].as_str().unwrap()).collect();
        assert_eq!(roles, ["user", "assistant", "user"]);
        let last = &b["messages"][2]["content"];
        assert_eq!(last[0]["type"], "tool_result");
        assert_eq!(last[1], json!({"type": "text", "text": "Your final answer is invalid"}));
    }
}
