//! OpenAI-compatible Chat Completions (`POST {base_url}/chat/completions`), streamed: `data:`
//! lines of `chat.completion.chunk`, tool-call arguments in fragments keyed by `index`, a last
//! chunk with `usage`, then `data: [DONE]`. A body that ends before `[DONE]` was dropped.

use async_trait::async_trait;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::sse::SseReader;
use super::{ChatMessage, Endpoint, Model, ModelError, ModelReply, ModelRequest, ToolCall, parse_arguments, with_timeout};

/// The Chat Completions backend.
pub struct OpenAiModel {
    endpoint: Endpoint,
}

impl OpenAiModel {
    pub(crate) fn new(endpoint: Endpoint) -> Self {
        OpenAiModel { endpoint }
    }

    fn auth(&self, req: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.endpoint.api_key {
            Some(k) => req.bearer_auth(k),
            None => req,
        }
    }
}

/// The request body.
pub(crate) fn body(model: &str, req: &ModelRequest<'_>) -> Value {
    let mut messages = vec![json!({"role": "system", "content": req.system})];
    for m in req.messages {
        messages.push(match m {
            ChatMessage::User(t) => json!({"role": "user", "content": t}),
            ChatMessage::Assistant { text, tool_calls } if tool_calls.is_empty() => json!({"role": "assistant", "content": text}),
            ChatMessage::Assistant { text, tool_calls } => json!({
                "role": "assistant",
                "content": if text.is_empty() { Value::Null } else { json!(text) },
                "tool_calls": tool_calls.iter().map(|c| json!({
                    "id": c.id, "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments.to_string()}
                })).collect::<Vec<_>>(),
            }),
            ChatMessage::ToolResult { call_id, content, .. } => json!({"role": "tool", "tool_call_id": call_id, "content": content}),
        });
    }
    let mut body = json!({
        "model": model,
        "messages": messages,
        "stream": true,
        "stream_options": {"include_usage": true},
        "max_tokens": req.max_tokens,
    });
    if !req.tools.is_empty() {
        body["tools"] = req
            .tools
            .iter()
            .map(|t| json!({"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.input_schema}}))
            .collect();
    }
    body
}

#[derive(Default)]
struct PartialCall {
    id: String,
    name: String,
    arguments: String,
}

#[async_trait]
impl Model for OpenAiModel {
    async fn complete(&self, req: &ModelRequest<'_>, text: mpsc::Sender<String>) -> Result<ModelReply, ModelError> {
        let url = self.endpoint.url("chat/completions");
        let body = body(&self.endpoint.model, req);
        with_timeout(&self.endpoint, &url, async {
            let resp = self
                .endpoint
                .post(&url, self.auth(self.endpoint.client.post(&url).header("content-type", "application/json").body(body.to_string())))
                .await?;
            let mut events = SseReader::new(resp);
            let mut reply = ModelReply::default();
            let mut calls: Vec<PartialCall> = Vec::new();
            loop {
                let ev = match events.next().await {
                    Ok(Some(ev)) => ev,
                    Ok(None) => return Err(ModelError::Dropped { url: url.clone(), reason: "the body ended".into() }),
                    Err(e) => return Err(ModelError::Dropped { url: url.clone(), reason: e.0 }),
                };
                if ev.data.trim() == "[DONE]" {
                    break;
                }
                let chunk: Value = serde_json::from_str(&ev.data)
                    .map_err(|e| ModelError::Protocol { url: url.clone(), what: format!("a chunk is not JSON: {e}") })?;
                if let Some(err) = chunk.get("error") {
                    let message = err.get("message").and_then(Value::as_str).unwrap_or("an error in the stream").to_owned();
                    return Err(ModelError::Status { url: url.clone(), status: 500, body: message });
                }
                if let Some(u) = chunk.get("usage").filter(|u| u.is_object()) {
                    reply.usage.input_tokens = u["prompt_tokens"].as_u64().unwrap_or(0);
                    reply.usage.output_tokens = u["completion_tokens"].as_u64().unwrap_or(0);
                }
                let Some(delta) = chunk.pointer("/choices/0/delta") else { continue };
                if let Some(t) = delta.get("content").and_then(Value::as_str).filter(|t| !t.is_empty()) {
                    reply.text.push_str(t);
                    // A caller that stopped listening does not stop the answer.
                    let _ = text.send(t.to_owned()).await;
                }
                for tc in delta.get("tool_calls").and_then(Value::as_array).into_iter().flatten() {
                    let i = tc.get("index").and_then(Value::as_u64).unwrap_or(calls.len().saturating_sub(1) as u64) as usize;
                    if i > 128 {
                        return Err(ModelError::Protocol { url: url.clone(), what: format!("tool call index {i}") });
                    }
                    if calls.len() <= i {
                        calls.resize_with(i + 1, PartialCall::default);
                    }
                    let c = &mut calls[i];
                    if let Some(id) = tc.get("id").and_then(Value::as_str) {
                        c.id = id.to_owned();
                    }
                    if let Some(n) = tc.pointer("/function/name").and_then(Value::as_str) {
                        c.name.push_str(n);
                    }
                    if let Some(a) = tc.pointer("/function/arguments").and_then(Value::as_str) {
                        c.arguments.push_str(a);
                    }
                }
            }
            for (i, c) in calls.into_iter().enumerate().filter(|(_, c)| !c.name.is_empty()) {
                let arguments = parse_arguments(&url, &c.name, &c.arguments)?;
                let id = if c.id.is_empty() { format!("call_{i}") } else { c.id };
                reply.tool_calls.push(ToolCall { id, name: c.name, arguments });
            }
            Ok(reply)
        })
        .await
    }

    async fn check(&self) -> Result<(), ModelError> {
        let url = self.endpoint.url("models");
        self.endpoint.check(self.auth(self.endpoint.client.get(url))).await
    }
}
