//! OpenAI-compatible Chat Completions (`POST {base_url}/chat/completions`). Streamed: `data:`
//! lines of `chat.completion.chunk`, tool-call arguments in fragments keyed by `index`, a last
//! chunk with `usage`, then `data: [DONE]`; a body that ends before `[DONE]` was dropped.
//! Whole (`stream = false`, or a server that answers JSON anyway): one `chat.completion`.
//!
//! Images: a user message's image parts are `image_url` parts with a `data:` URL. A `tool`
//! message takes text only, so the images of a turn's tool results follow its tool messages
//! in one user message that says which call they came from.

use async_trait::async_trait;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::sse::SseReader;
use super::{
    Answer, ChatMessage, Content, Endpoint, FinishReason, MAX_CALLS_PER_REPLY, Model, ModelError, ModelReply, ModelRequest, Part, ToolCall,
    check_size, parse_arguments, with_deadline,
};

/// The Chat Completions backend.
pub(crate) struct OpenAiModel {
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

/// A user message's content: a plain string when it is all text, else parts.
fn user_content(c: &Content) -> Value {
    if !c.has_images() {
        return json!(c.text());
    }
    let parts: Vec<Value> =
        c.0.iter()
            .map(|p| match p {
                Part::Text(t) => json!({"type": "text", "text": t}),
                Part::Image(i) => json!({"type": "image_url", "image_url": {"url": format!("data:{};base64,{}", i.mime_type, i.data)}}),
            })
            .collect();
    Value::Array(parts)
}

/// The request body: the conversation as [`super::wire_messages`] makes it valid, so a tool
/// message always follows the assistant message whose `tool_calls` name it.
pub(crate) fn body(model: &str, req: &ModelRequest<'_>, stream: bool) -> Value {
    let mut messages = vec![json!({"role": "system", "content": req.system})];
    // Images of the tool results since the last assistant message, sent after them.
    let mut pending: Vec<Part> = Vec::new();
    let flush = |messages: &mut Vec<Value>, pending: &mut Vec<Part>| {
        if !pending.is_empty() {
            messages.push(json!({"role": "user", "content": user_content(&Content(std::mem::take(pending)))}));
        }
    };
    for m in &super::wire_messages(req.messages, !req.tools.is_empty()) {
        if !matches!(m, ChatMessage::ToolResult { .. }) {
            flush(&mut messages, &mut pending);
        }
        messages.push(match m {
            ChatMessage::User(c) => json!({"role": "user", "content": user_content(c)}),
            ChatMessage::Assistant { text, tool_calls } if tool_calls.is_empty() => json!({"role": "assistant", "content": text}),
            ChatMessage::Assistant { text, tool_calls } => json!({
                "role": "assistant",
                "content": if text.is_empty() { Value::Null } else { json!(text) },
                "tool_calls": tool_calls.iter().map(|c| json!({
                    "id": c.id, "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments.to_string()}
                })).collect::<Vec<_>>(),
            }),
            ChatMessage::ToolResult { call_id, name, content, .. } => {
                if content.has_images() {
                    pending.push(Part::Text(format!("The images of the result of {name} (call {call_id}):")));
                    pending.extend(content.images().cloned().map(Part::Image));
                }
                json!({"role": "tool", "tool_call_id": call_id, "content": content.text()})
            }
        });
    }
    flush(&mut messages, &mut pending);
    let mut body = json!({
        "model": model,
        "messages": messages,
        "stream": stream,
        "max_tokens": req.max_tokens,
    });
    if stream {
        body["stream_options"] = json!({"include_usage": true});
    }
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

/// Which call a streamed tool-call delta adds to. OpenAI and most servers number the calls
/// (`index`); Gemini's OpenAI-compatible endpoint sends deltas without one, each call whole
/// under its own `id`, and some servers send a call's later fragments with neither. Those are
/// assembled by id, and by order where there is no id: a delta without either continues the
/// last call, unless it names a tool while the last call has its name already (a new call).
#[derive(Default)]
struct Slots {
    /// Call id → slot, for deltas without an index.
    by_id: std::collections::HashMap<String, usize>,
    /// Slots handed out so far (the highest index + 1).
    count: usize,
    /// Whether the last slot has its tool name.
    last_named: bool,
}

impl Slots {
    fn slot(&mut self, tc: &Value) -> usize {
        let id = tc.get("id").and_then(Value::as_str).filter(|id| !id.is_empty());
        let named = tc.pointer("/function/name").and_then(Value::as_str).is_some_and(|n| !n.is_empty());
        let slot = if let Some(i) = tc.get("index").and_then(Value::as_u64) {
            let i = usize::try_from(i).unwrap_or(usize::MAX);
            if let Some(id) = id {
                self.by_id.entry(id.to_owned()).or_insert(i);
            }
            i
        } else if let Some(id) = id {
            let next = self.count;
            *self.by_id.entry(id.to_owned()).or_insert(next)
        } else if self.count == 0 || (named && self.last_named) {
            self.count
        } else {
            self.count - 1
        };
        if slot >= self.count {
            self.count = slot.saturating_add(1);
            self.last_named = false;
        }
        if slot.saturating_add(1) == self.count && named {
            self.last_named = true;
        }
        slot
    }
}

fn finish_calls(reply: &mut ModelReply, calls: Vec<PartialCall>) {
    let cut = reply.finish == FinishReason::Length;
    for (i, c) in calls.into_iter().enumerate().filter(|(_, c)| !c.name.is_empty()) {
        let (arguments, invalid) = parse_arguments(&c.name, &c.arguments, cut);
        let id = if c.id.is_empty() { format!("call_{i}") } else { c.id };
        reply.tool_calls.push(ToolCall { id, name: c.name, arguments, invalid });
    }
}

fn usage(reply: &mut ModelReply, u: &Value) {
    reply.usage.input_tokens = u["prompt_tokens"].as_u64().unwrap_or(0);
    reply.usage.output_tokens = u["completion_tokens"].as_u64().unwrap_or(0);
}

/// A whole `chat.completion`.
fn whole(url: &str, v: &Value) -> Result<ModelReply, ModelError> {
    let message = v
        .pointer("/choices/0/message")
        .ok_or_else(|| ModelError::Protocol { url: url.to_owned(), what: "the answer has no choices[0].message".into() })?;
    let mut reply = ModelReply { text: message["content"].as_str().unwrap_or_default().to_owned(), ..Default::default() };
    if let Some(f) = v.pointer("/choices/0/finish_reason").and_then(Value::as_str) {
        reply.finish = FinishReason::parse(f);
    }
    if let Some(u) = v.get("usage").filter(|u| u.is_object()) {
        usage(&mut reply, u);
    }
    let all = message["tool_calls"].as_array().map(Vec::as_slice).unwrap_or_default();
    reply.dropped_calls = all.len().saturating_sub(MAX_CALLS_PER_REPLY);
    let calls = all
        .iter()
        .take(MAX_CALLS_PER_REPLY)
        .map(|tc| PartialCall {
            id: tc["id"].as_str().unwrap_or_default().to_owned(),
            name: tc.pointer("/function/name").and_then(Value::as_str).unwrap_or_default().to_owned(),
            arguments: match tc.pointer("/function/arguments") {
                Some(Value::String(s)) => s.clone(),
                Some(other) => other.to_string(),
                None => String::new(),
            },
        })
        .collect();
    finish_calls(&mut reply, calls);
    Ok(reply)
}

async fn streamed(url: &str, mut events: SseReader, text: &mpsc::Sender<String>) -> Result<ModelReply, ModelError> {
    let mut reply = ModelReply::default();
    let mut calls: Vec<PartialCall> = Vec::new();
    let mut pending = 0usize;
    let mut seen_indexes = std::collections::HashSet::new();
    let mut slots = Slots::default();
    loop {
        let ev = match events.next().await {
            Ok(Some(ev)) => ev,
            Ok(None) => return Err(ModelError::Dropped { url: url.to_owned(), reason: "the body ended before [DONE]".into() }),
            Err(e) => return Err(ModelError::Dropped { url: url.to_owned(), reason: e.0 }),
        };
        if ev.data.trim() == "[DONE]" {
            break;
        }
        let chunk: Value = serde_json::from_str(&ev.data).map_err(|e| ModelError::Protocol {
            url: url.to_owned(),
            what: format!("a chunk is not JSON ({e}): {}", ev.data.chars().take(80).collect::<String>()),
        })?;
        if let Some(err) = chunk.get("error").filter(|e| !e.is_null()) {
            let message = err.get("message").and_then(Value::as_str).unwrap_or("an error in the stream").to_owned();
            return Err(ModelError::Status { url: url.to_owned(), status: 500, body: message });
        }
        if let Some(u) = chunk.get("usage").filter(|u| u.is_object()) {
            usage(&mut reply, u);
        }
        if let Some(f) = chunk.pointer("/choices/0/finish_reason").and_then(Value::as_str) {
            reply.finish = FinishReason::parse(f);
        }
        let Some(delta) = chunk.pointer("/choices/0/delta") else { continue };
        if let Some(t) = delta.get("content").and_then(Value::as_str).filter(|t| !t.is_empty()) {
            reply.text.push_str(t);
            // A caller that stopped listening does not stop the answer.
            let _ = text.send(t.to_owned()).await;
        }
        for tc in delta.get("tool_calls").and_then(Value::as_array).into_iter().flatten() {
            let i = slots.slot(tc);
            seen_indexes.insert(i);
            if i >= MAX_CALLS_PER_REPLY {
                // Counted, never stored: a reply of 10,000 calls costs no memory.
                continue;
            }
            if calls.len() <= i {
                calls.resize_with(i + 1, PartialCall::default);
            }
            let c = &mut calls[i];
            if let Some(id) = tc.get("id").and_then(Value::as_str).filter(|id| !id.is_empty()) {
                c.id = id.to_owned();
            }
            if let Some(n) = tc.pointer("/function/name").and_then(Value::as_str) {
                pending += n.len();
                c.name.push_str(n);
            }
            if let Some(a) = tc.pointer("/function/arguments").and_then(Value::as_str) {
                pending += a.len();
                c.arguments.push_str(a);
            }
        }
        check_size(url, &reply, pending)?;
    }
    reply.dropped_calls = seen_indexes.iter().filter(|i| **i >= MAX_CALLS_PER_REPLY).count();
    finish_calls(&mut reply, calls);
    Ok(reply)
}

#[async_trait]
impl Model for OpenAiModel {
    async fn complete(&self, req: &ModelRequest<'_>, text: mpsc::Sender<String>) -> Result<ModelReply, ModelError> {
        let url = self.endpoint.url("chat/completions");
        let body = body(&self.endpoint.model, req, self.endpoint.stream).to_string();
        let (answer, deadline) = self
            .endpoint
            .post(&url, || self.auth(self.endpoint.client.post(&url).header("content-type", "application/json").body(body.clone())))
            .await?;
        match answer {
            Answer::Stream(events) => with_deadline(&self.endpoint, &url, deadline, streamed(&url, events, &text)).await,
            Answer::Whole(v) => {
                let reply = whole(&url, &v)?;
                if !reply.text.is_empty() {
                    let _ = text.send(reply.text.clone()).await;
                }
                Ok(reply)
            }
        }
    }

    async fn check(&self) -> Result<(), ModelError> {
        self.endpoint.check(|url| self.auth(self.endpoint.client.get(url))).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deltas_without_index_go_by_id_then_by_order() {
        let mut by_index = Slots::default();
        assert_eq!(by_index.slot(&json!({"index": 1, "id": "b"})), 1);
        assert_eq!(by_index.slot(&json!({"index": 0})), 0);
        // Gemini: each call whole, under its own id.
        let mut ids = Slots::default();
        let whole = |id: &str| json!({"id": id, "function": {"name": "weather", "arguments": "{}"}});
        assert_eq!((ids.slot(&whole("x")), ids.slot(&whole("y")), ids.slot(&json!({"id": "x"}))), (0, 1, 0));
        // Neither: a named delta starts a call, fragments continue the last one.
        let mut order = Slots::default();
        let named = json!({"function": {"name": "weather", "arguments": ""}});
        let frag = json!({"function": {"arguments": "{\"city\""}});
        assert_eq!([order.slot(&named), order.slot(&frag), order.slot(&named), order.slot(&frag)], [0, 0, 1, 1]);
        // A fragment first has nothing to continue: it is the first call.
        assert_eq!(Slots::default().slot(&frag), 0);
    }
}
