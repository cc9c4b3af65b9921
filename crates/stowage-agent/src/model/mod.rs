//! Model backends behind one trait, [`Model`]: the planner's conversation in our own types,
//! sent in each API's wire format and read back, streamed or whole.
//!
//! Both backends stream (`stream: true`) unless `agent.stream = false`, and read a plain JSON
//! answer to a streaming request as the whole reply (servers that ignore `stream` do that).
//! Answer text goes to the caller as it arrives; tool calls are assembled from their
//! fragments and returned whole, with arguments that are not JSON kept as a fault for the
//! planner's repair round rather than an error. A 429 or 5xx answer is retried with backoff,
//! honouring `Retry-After`.

mod anthropic;
pub(crate) mod names;
mod openai;
mod sse;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;
use tokio::sync::mpsc;

use anthropic::AnthropicModel;
use openai::OpenAiModel;

use crate::config::{AgentConfig, Backend};

/// The most tool calls one reply may carry that are read; later ones are counted
/// ([`ModelReply::dropped_calls`]) and never run.
pub(crate) const MAX_CALLS_PER_REPLY: usize = 16;
/// The most bytes of text and tool-call arguments one reply may have.
const MAX_REPLY_BYTES: usize = 4 * 1024 * 1024;
/// The longest one `Retry-After` is waited for; a server asking for more is failed at once.
const MAX_RETRY_WAIT: Duration = Duration::from_secs(30);

/// One tool the model may call, as a request offers it (native tools, or the tool list of the
/// JSON-only prompt).
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    /// The name the model API accepts (`^[a-zA-Z0-9_-]{1,64}$`), mapped from the MCP name.
    pub name: String,
    /// What the tool does: its MCP `description`, empty when it has none.
    pub description: String,
    /// JSON Schema of the arguments: the tool's `inputSchema`, `{"type": "object"}` when it
    /// has none.
    pub input_schema: Value,
}

/// A tool call the model asked for.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    /// The API's id for the call, which its tool result must name (`json_action` in the
    /// JSON-only action format, which has none).
    pub id: String,
    /// The tool: the API name in a reply; the planner maps it back to the MCP name.
    pub name: String,
    /// The arguments; `{}` when they were not a JSON object (`invalid` says why).
    pub arguments: Value,
    /// Why the arguments could not be used (not JSON, cut off, not an object): the planner
    /// tells the model instead of calling the tool.
    pub invalid: Option<String>,
}

impl ToolCall {
    /// A call whose arguments are fine: how a scripted model (tests, benches) writes a reply.
    pub fn new(id: impl Into<String>, name: impl Into<String>, arguments: Value) -> ToolCall {
        ToolCall { id: id.into(), name: name.into(), arguments, invalid: None }
    }
}

/// An image the model is shown (base64 data of a type both APIs take).
#[derive(Debug, Clone, PartialEq)]
pub struct ImagePart {
    /// `image/png`, `image/jpeg`, `image/gif` or `image/webp`: the types both APIs take.
    pub mime_type: String,
    /// Base64, shared: a conversation's requests repeat it without copying.
    pub data: Arc<str>,
    /// The line that stands for it when it is not sent (a model without vision, over the
    /// request's image budget).
    pub label: String,
}

/// One part of a message.
#[derive(Debug, Clone, PartialEq)]
pub enum Part {
    /// Text, sent as it is.
    Text(String),
    /// An image, sent only to a vision model within the request's image budget (otherwise
    /// its label is sent in its place).
    Image(ImagePart),
}

/// A message's parts, in order: text and images interleaved as the tool returned them.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Content(pub Vec<Part>);

impl From<&str> for Content {
    fn from(s: &str) -> Content {
        Content(vec![Part::Text(s.to_owned())])
    }
}

impl From<String> for Content {
    fn from(s: String) -> Content {
        Content(vec![Part::Text(s)])
    }
}

impl Content {
    /// The whole content as text, each image as its label.
    pub(crate) fn text(&self) -> String {
        let mut out = String::new();
        for p in &self.0 {
            let t = match p {
                Part::Text(t) => t.as_str(),
                Part::Image(i) => i.label.as_str(),
            };
            if !out.is_empty() && !t.is_empty() && !out.ends_with('\n') {
                out.push('\n');
            }
            out.push_str(t);
        }
        out
    }

    pub(crate) fn images(&self) -> impl DoubleEndedIterator<Item = &ImagePart> {
        self.0.iter().filter_map(|p| if let Part::Image(i) = p { Some(i) } else { None })
    }

    pub(crate) fn has_images(&self) -> bool {
        self.images().next().is_some()
    }

    /// No image and no text but whitespace: what the APIs refuse as a message's content.
    pub(crate) fn is_blank(&self) -> bool {
        self.0.iter().all(|p| matches!(p, Part::Text(t) if t.trim().is_empty()))
    }

    /// The parts with every image replaced by its label.
    pub(crate) fn without_images(&self) -> Content {
        Content::from(self.text())
    }
}

/// One message of the conversation, independent of the wire format.
#[derive(Debug, Clone, PartialEq)]
pub enum ChatMessage {
    /// The user's question, a repair request, or (JSON-only format) an observation.
    User(Content),
    /// What the model replied, kept so the next request shows it its own turn.
    Assistant {
        /// The reply's text (its thought, or the JSON it wrote).
        text: String,
        /// The tool calls it made, with API names; empty in the JSON-only format.
        tool_calls: Vec<ToolCall>,
    },
    /// A tool's answer to one call (native tool calling only).
    ToolResult {
        /// The [`ToolCall::id`] it answers.
        call_id: String,
        /// The tool's API name.
        name: String,
        /// What the model reads of the result (see the planner's observation rules).
        content: Content,
        /// The tool failed, or could not be called; the model is told so.
        is_error: bool,
    },
}

/// What one model request carries.
#[derive(Debug, Clone)]
pub struct ModelRequest<'a> {
    /// The system prompt: instructions, the answer format, and (JSON-only format) the tools.
    pub system: &'a str,
    /// The conversation so far, oldest first.
    pub messages: &'a [ChatMessage],
    /// Empty: the model is not offered native tools (the JSON-only action format).
    pub tools: &'a [ToolSpec],
    /// The most tokens the reply may have (`agent.max_response_tokens`).
    pub max_tokens: u32,
}

/// Tokens one request cost, as the API reported them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// Prompt tokens (`prompt_tokens` / `input_tokens`), 0 when not reported.
    pub input_tokens: u64,
    /// Completion tokens, 0 when not reported.
    pub output_tokens: u64,
}

/// Why the model stopped, in both APIs' words.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum FinishReason {
    /// The reply is complete (`stop`, `end_turn`, `stop_sequence`).
    #[default]
    Stop,
    /// It asks for tools (`tool_calls`, `tool_use`).
    ToolCalls,
    /// Cut at `max_tokens` (`length`, `max_tokens`).
    Length,
    /// Refused or filtered (`content_filter`, `refusal`).
    Filtered,
    /// Any other reason, as the API wrote it.
    Other(String),
}

impl FinishReason {
    pub(crate) fn parse(s: &str) -> FinishReason {
        match s {
            "stop" | "end_turn" | "stop_sequence" => FinishReason::Stop,
            "tool_calls" | "tool_use" | "function_call" => FinishReason::ToolCalls,
            "length" | "max_tokens" | "model_context_window_exceeded" => FinishReason::Length,
            "content_filter" | "refusal" => FinishReason::Filtered,
            other => FinishReason::Other(other.to_owned()),
        }
    }

    pub(crate) fn as_str(&self) -> &str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::ToolCalls => "tool_calls",
            FinishReason::Length => "length",
            FinishReason::Filtered => "content_filter",
            FinishReason::Other(s) => s,
        }
    }
}

/// The model's complete reply.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ModelReply {
    /// All the text of the reply (the answer, or the thought beside tool calls).
    pub text: String,
    /// The tool calls it asks for, at most 16, whole and in order.
    pub tool_calls: Vec<ToolCall>,
    /// What the request cost.
    pub usage: Usage,
    /// Why the model stopped: `Length` means the reply was cut and gets a repair round.
    pub finish: FinishReason,
    /// Tool calls beyond the 16 a reply may carry: counted, never read or run.
    pub dropped_calls: usize,
}

/// Why a model request failed; [`ModelError::code`] is the `error` event's code.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ModelError {
    /// No HTTP answer: connection refused, DNS, TLS.
    #[error("model at {url} is unreachable: {reason}")]
    Unreachable {
        /// The URL that was asked.
        url: String,
        /// The innermost cause, in one line.
        reason: String,
    },
    /// An error status (after its retries, for a 429 or 5xx), or an `error` object in the body.
    #[error("model at {url} answered HTTP {status}: {body}")]
    Status {
        /// The URL that was asked.
        url: String,
        /// The HTTP status (500 for an error object in a 200 answer).
        status: u16,
        /// The API's `error.message`, else the body, in one line of at most 300 characters.
        body: String,
    },
    /// The attempt took longer than `agent.request_timeout`.
    #[error("model at {url} did not answer within {}s", timeout.as_secs())]
    Timeout {
        /// The URL that was asked.
        url: String,
        /// The limit that ran out.
        timeout: Duration,
    },
    /// The body ended, or broke off, before the answer was complete.
    #[error("model at {url} dropped the stream before the end of its answer ({reason})")]
    Dropped {
        /// The URL that was asked.
        url: String,
        /// What broke (connection reset, an event cut in half, a body over the size limit).
        reason: String,
    },
    /// The answer is not what the wire format promises (not JSON, over 4 MiB, a malformed
    /// event).
    #[error("model at {url} sent something unreadable: {what}")]
    Protocol {
        /// The URL that was asked.
        url: String,
        /// What was wrong with it.
        what: String,
    },
    /// `agent.api_key_env` names a variable that is not set (the name is the field).
    #[error("the API key variable {0} is not set (agent.api_key_env); export it or clear api_key_env for a local model")]
    KeyMissing(String),
    /// `agent.base_url` or `agent.model` is empty.
    #[error("no model is configured: set agent.base_url and agent.model in stowage.toml")]
    NotConfigured,
    /// The API answers, but not as configured (a base URL without its version path, a model
    /// it does not serve): the message names the fix.
    #[error("{0}")]
    Misconfigured(String),
}

impl ModelError {
    /// The stable code the `error` event and the agent's HTTP errors carry (`model_timeout`,
    /// `model_http_error`, …): what a client branches on, unlike the message.
    pub fn code(&self) -> &'static str {
        match self {
            ModelError::Unreachable { .. } => "model_unreachable",
            ModelError::Status { .. } => "model_http_error",
            ModelError::Timeout { .. } => "model_timeout",
            ModelError::Dropped { .. } => "model_stream_dropped",
            ModelError::Protocol { .. } => "model_protocol_error",
            ModelError::KeyMissing(_) | ModelError::NotConfigured => "model_not_configured",
            ModelError::Misconfigured(_) => "model_misconfigured",
        }
    }

    /// Worth another attempt: rate limited, or the server failed (not our request).
    fn retryable(&self) -> bool {
        matches!(self, ModelError::Status { status: 408 | 409 | 429 | 500 | 502 | 503 | 504 | 529, .. })
    }
}

/// A chat model the planner talks to: the two HTTP backends ([`from_config`]), or a scripted
/// one in tests and benches. Another API, or an in-process model, goes behind the planner by
/// implementing it.
#[async_trait]
pub trait Model: Send + Sync {
    /// Sends the conversation and reads the reply; answer text goes to `text` as it arrives
    /// (the sender is dropped when the reply ends).
    async fn complete(&self, req: &ModelRequest<'_>, text: mpsc::Sender<String>) -> Result<ModelReply, ModelError>;

    /// Whether the model's API serves this model (`GET {base_url}/models`): called at start,
    /// so a wrong URL or model name fails before the first question, with the fix.
    async fn check(&self) -> Result<(), ModelError>;
}

/// The HTTP settings both backends share.
#[derive(Debug, Clone)]
pub(crate) struct Endpoint {
    pub client: reqwest::Client,
    pub base_url: String,
    pub model: String,
    pub api_key: Option<String>,
    pub timeout: Duration,
    pub stream: bool,
    pub max_retries: u32,
}

/// An answer to read: a stream of events, or one JSON body.
pub(crate) enum Answer {
    Stream(sse::SseReader),
    Whole(Value),
}

impl Endpoint {
    fn url(&self, path: &str) -> String {
        format!("{}/{path}", self.base_url.trim_end_matches('/'))
    }

    fn unreachable(&self, url: &str, e: &reqwest::Error) -> ModelError {
        // The innermost cause says what went wrong (connection refused, DNS, TLS).
        let mut reason = e.to_string();
        let mut src = std::error::Error::source(e);
        while let Some(s) = src {
            reason = s.to_string();
            src = s.source();
        }
        ModelError::Unreachable { url: url.to_owned(), reason }
    }

    /// `GET {base}/models`: the API is there, takes the key, has its version path, and
    /// serves the configured model. `build` makes the request for a URL (each backend's
    /// headers).
    async fn check(&self, build: impl Fn(&str) -> reqwest::RequestBuilder) -> Result<(), ModelError> {
        let limit = self.timeout.min(Duration::from_secs(10));
        let build = &build;
        let get = |url: String| async move {
            let resp = tokio::time::timeout(limit, build(&url).send())
                .await
                .map_err(|_| ModelError::Timeout { url: url.clone(), timeout: limit })?
                .map_err(|e| self.unreachable(&url, &e))?;
            Ok::<_, ModelError>((url, resp))
        };
        let (url, resp) = get(self.url("models")).await?;
        let status = resp.status().as_u16();
        match status {
            401 | 403 => return Err(ModelError::Status { url, status, body: "the API key was refused (agent.api_key_env)".into() }),
            404 => {
                let base = self.base_url.trim_end_matches('/');
                if !has_version_path(base) {
                    // The usual mistake: the server's root instead of its API path.
                    let with_v1 = format!("{base}/v1");
                    let found = get(format!("{with_v1}/models")).await.is_ok_and(|(_, r)| r.status().is_success());
                    let hint = if found { "the API answers there" } else { "OpenAI-compatible servers serve it under /v1" };
                    return Err(ModelError::Misconfigured(format!(
                        "agent.base_url {base} has no version path and {url} is not found: set agent.base_url = \"{with_v1}\" ({hint})"
                    )));
                }
                // Some servers list no models; the first question will tell.
                tracing::warn!(target: "stowage::agent", %url, "the model API does not list its models (404); the model name is not checked");
                return Ok(());
            }
            s if !(200..300).contains(&s) => {
                let body: String = resp.text().await.unwrap_or_default().chars().filter(|c| !c.is_control()).take(300).collect();
                return Err(ModelError::Status { url, status, body });
            }
            _ => {}
        }
        let list: Value = match resp.bytes().await.ok().and_then(|b| serde_json::from_slice(&b).ok()) {
            Some(v) => v,
            // An answer that is no model list: not ours to judge.
            None => return Ok(()),
        };
        let ids: Vec<&str> = list.get("data").and_then(Value::as_array).into_iter().flatten().filter_map(|m| m["id"].as_str()).collect();
        if ids.is_empty() || ids.iter().any(|id| serves(id, &self.model)) {
            return Ok(());
        }
        if list.get("has_more").and_then(Value::as_bool) == Some(true) {
            return Ok(()); // a longer list than one page: the model may be on another
        }
        let shown: Vec<&str> = ids.iter().take(12).copied().collect();
        let more = if ids.len() > shown.len() { format!(" and {} more", ids.len() - shown.len()) } else { String::new() };
        Err(ModelError::Misconfigured(format!(
            "model \"{}\" is not served at {}: set agent.model to one it lists ({}{more})",
            self.model,
            self.base_url,
            shown.join(", ")
        )))
    }

    /// POSTs `body` (rebuilt per attempt by `build`), retrying 429 and 5xx answers with
    /// backoff (`Retry-After` / `retry-after-ms` when the server says), each attempt within the
    /// request timeout; returns the answer to read.
    async fn post(&self, url: &str, build: impl Fn() -> reqwest::RequestBuilder) -> Result<(Answer, tokio::time::Instant), ModelError> {
        let mut attempt = 0u32;
        loop {
            let deadline = tokio::time::Instant::now() + self.timeout;
            let sent = tokio::time::timeout_at(deadline, async {
                let resp = build().send().await.map_err(|e| (self.unreachable(url, &e), None))?;
                let status = resp.status();
                if !status.is_success() {
                    let wait = retry_after(resp.headers());
                    let body = resp.text().await.unwrap_or_default();
                    let body = error_message(&body);
                    return Err((ModelError::Status { url: url.to_owned(), status: status.as_u16(), body }, wait));
                }
                Ok(resp)
            })
            .await
            .map_err(|_| ModelError::Timeout { url: url.to_owned(), timeout: self.timeout });
            let err = match sent {
                Ok(Ok(resp)) => return Ok((self.answer(url, resp, deadline).await?, deadline)),
                Ok(Err((e, wait))) => (e, wait),
                Err(e) => (e, None),
            };
            let (e, wait) = err;
            if !e.retryable() || attempt >= self.max_retries {
                return Err(e);
            }
            let backoff = Duration::from_millis(500 * 2u64.pow(attempt.min(4)));
            let wait = wait.unwrap_or(backoff);
            if wait > MAX_RETRY_WAIT {
                return Err(e);
            }
            tracing::info!(target: "stowage::agent", url, attempt = attempt + 1, wait_ms = wait.as_millis() as u64, "retrying the model request: {e}");
            tokio::time::sleep(wait).await;
            attempt += 1;
        }
    }

    /// The body as a stream of events, or as one JSON answer (a server that ignored
    /// `stream: true`, or `stream = false`).
    async fn answer(&self, url: &str, resp: reqwest::Response, deadline: tokio::time::Instant) -> Result<Answer, ModelError> {
        let streamed = resp
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|ct| ct.to_ascii_lowercase().starts_with("text/event-stream"));
        if streamed {
            return Ok(Answer::Stream(sse::SseReader::new(resp)));
        }
        let body = tokio::time::timeout_at(deadline, read_capped(resp, MAX_REPLY_BYTES))
            .await
            .map_err(|_| ModelError::Timeout { url: url.to_owned(), timeout: self.timeout })?
            .map_err(|reason| ModelError::Dropped { url: url.to_owned(), reason })?;
        let v: Value = serde_json::from_slice(&body).map_err(|e| ModelError::Protocol {
            url: url.to_owned(),
            what: format!("the answer is neither an event stream nor JSON ({e}): {}", preview(&body)),
        })?;
        if let Some(err) = v.get("error").filter(|e| !e.is_null()) {
            let body = err.get("message").and_then(Value::as_str).map_or_else(|| err.to_string(), str::to_owned);
            return Err(ModelError::Status { url: url.to_owned(), status: 500, body });
        }
        Ok(Answer::Whole(v))
    }
}

/// Whether a base URL ends in an API version segment (`/v1`, `/v1beta`, `/api/v2`).
fn has_version_path(base: &str) -> bool {
    let last = base.rsplit('/').next().unwrap_or("");
    last.len() >= 2 && last.starts_with('v') && last[1..].starts_with(|c: char| c.is_ascii_digit())
}

/// Whether a listed model id serves the configured name: the same, or the name is an alias of
/// it (`claude-sonnet-4-5` for `claude-sonnet-4-5-20250929`, `qwen2.5` for `qwen2.5:latest`,
/// `x-latest` for any `x-…`).
fn serves(id: &str, model: &str) -> bool {
    if id == model {
        return true;
    }
    if let Some(rest) = id.strip_prefix(model)
        && (rest.starts_with('-') || rest.starts_with(':') || rest.starts_with('@'))
    {
        return true;
    }
    if let Some(stem) = model.strip_suffix("-latest") {
        return id.starts_with(stem);
    }
    // A name given with its organisation (`Qwen/Qwen2.5-7B`) or a path that the server lists by
    // its file name.
    id.rsplit('/').next() == Some(model) || model.rsplit('/').next() == Some(id)
}

/// How long the server asks to wait: `retry-after-ms`, else `Retry-After` in seconds or as an
/// HTTP date.
fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let get = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::trim);
    if let Some(ms) = get("retry-after-ms").and_then(|v| v.parse::<f64>().ok()).filter(|v| v.is_finite() && *v >= 0.0) {
        return Some(Duration::from_secs_f64(ms / 1000.0));
    }
    let v = get("retry-after")?;
    if let Ok(secs) = v.parse::<f64>()
        && secs.is_finite()
        && secs >= 0.0
    {
        return Some(Duration::from_secs_f64(secs));
    }
    let at = httpdate::parse_http_date(v).ok()?;
    Some(at.duration_since(std::time::SystemTime::now()).unwrap_or_default())
}

/// One line of an error body: the API's `error.message` when it has one.
fn error_message(body: &str) -> String {
    let msg = serde_json::from_str::<Value>(body)
        .ok()
        .and_then(|v| v.pointer("/error/message").and_then(Value::as_str).map(str::to_owned))
        .unwrap_or_else(|| body.to_owned());
    msg.chars().filter(|c| !c.is_control()).take(300).collect()
}

fn preview(body: &[u8]) -> String {
    String::from_utf8_lossy(&body[..body.len().min(120)]).chars().filter(|c| !c.is_control()).collect()
}

async fn read_capped(resp: reqwest::Response, max: usize) -> Result<Vec<u8>, String> {
    use futures::StreamExt;
    let mut body = Vec::new();
    let mut stream = resp.bytes_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| e.to_string())?;
        if body.len() + chunk.len() > max {
            return Err(format!("the answer is over {max} bytes"));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// The backend `[agent]` names, ready to call. Checks the configuration (both names set, an
/// http(s) base URL, the key variable set) but sends nothing: [`Model::check`] asks the API.
pub fn from_config(config: &AgentConfig) -> Result<Arc<dyn Model>, ModelError> {
    if config.base_url.trim().is_empty() || config.model.trim().is_empty() {
        return Err(ModelError::NotConfigured);
    }
    match reqwest::Url::parse(&config.base_url) {
        Ok(u) if matches!(u.scheme(), "http" | "https") => {}
        Ok(u) => {
            return Err(ModelError::Misconfigured(format!(
                "agent.base_url {} must be an http or https URL, not {}: (e.g. http://127.0.0.1:11434/v1)",
                config.base_url,
                u.scheme()
            )));
        }
        Err(e) => {
            return Err(ModelError::Misconfigured(format!(
                "agent.base_url \"{}\" is not a URL ({e}): give the API's base URL, e.g. http://127.0.0.1:11434/v1",
                config.base_url
            )));
        }
    }
    let api_key = if config.api_key_env.is_empty() {
        None
    } else {
        Some(std::env::var(&config.api_key_env).map_err(|_| ModelError::KeyMissing(config.api_key_env.clone()))?)
    };
    let client = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        .build()
        .map_err(|e| ModelError::Unreachable { url: config.base_url.clone(), reason: e.to_string() })?;
    let endpoint = Endpoint {
        client,
        base_url: config.base_url.clone(),
        model: config.model.clone(),
        api_key,
        timeout: config.request_timeout,
        stream: config.stream,
        max_retries: config.max_retries,
    };
    Ok(match config.backend {
        Backend::Openai => Arc::new(OpenAiModel::new(endpoint)),
        Backend::Anthropic => Arc::new(AnthropicModel::new(endpoint)),
    })
}

/// Reads one streamed reply by the request's deadline (its timeout counts from the attempt's
/// first byte sent to the reply's last).
async fn with_deadline<T>(
    endpoint: &Endpoint,
    url: &str,
    deadline: tokio::time::Instant,
    fut: impl Future<Output = Result<T, ModelError>>,
) -> Result<T, ModelError> {
    tokio::time::timeout_at(deadline, fut).await.map_err(|_| ModelError::Timeout { url: url.to_owned(), timeout: endpoint.timeout })?
}

/// Tool-call arguments assembled from fragments: `{}` when the model sent none; not JSON, or
/// not an object, is kept as the call's fault (the planner's repair round names it).
fn parse_arguments(name: &str, text: &str, cut: bool) -> (Value, Option<String>) {
    if text.trim().is_empty() {
        return (Value::Object(Default::default()), None);
    }
    match serde_json::from_str::<Value>(text) {
        Ok(v @ Value::Object(_)) => (v, None),
        Ok(other) => (Value::Object(Default::default()), Some(format!("the arguments of {name} must be a JSON object, not {other}"))),
        Err(e) => {
            let why = if cut { "were cut off by the reply's token limit" } else { "are not valid JSON" };
            let shown: String = text.chars().take(200).collect();
            (Value::Object(Default::default()), Some(format!("the arguments of {name} {why} ({e}): {shown}")))
        }
    }
}

/// The conversation as both APIs' published rules accept it, whatever the planner's history
/// holds: no assistant turn without text or tool calls (Anthropic refuses empty content, and
/// an empty reply is a fault the planner repairs, not a turn), no blank user turn, tool calls
/// and their results only when the request offers tools (otherwise both become plain text),
/// and every call answered by its result right after its turn (a result without its call is
/// plain text; a call without its result gets one saying so).
pub(crate) fn wire_messages(messages: &[ChatMessage], tools: bool) -> Vec<ChatMessage> {
    let mut out: Vec<ChatMessage> = Vec::with_capacity(messages.len());
    // Calls of the last assistant turn still waiting for their result: (id, name).
    let mut open: Vec<(String, String)> = Vec::new();
    let close = |out: &mut Vec<ChatMessage>, open: &mut Vec<(String, String)>| {
        for (call_id, name) in open.drain(..) {
            out.push(ChatMessage::ToolResult {
                call_id,
                name,
                content: "error: no result was recorded for this call".into(),
                is_error: true,
            });
        }
    };
    for m in messages {
        match m {
            ChatMessage::User(c) => {
                close(&mut out, &mut open);
                if !c.is_blank() {
                    out.push(m.clone());
                }
            }
            ChatMessage::Assistant { text, tool_calls } => {
                close(&mut out, &mut open);
                let (text, tool_calls) = if tools {
                    (text.clone(), tool_calls.clone())
                } else {
                    let mut t = text.clone();
                    for c in tool_calls {
                        if !t.is_empty() {
                            t.push('\n');
                        }
                        t.push_str(&format!("[called {} with {}]", c.name, c.arguments));
                    }
                    (t, Vec::new())
                };
                if text.trim().is_empty() && tool_calls.is_empty() {
                    continue;
                }
                open = tool_calls.iter().map(|c| (c.id.clone(), c.name.clone())).collect();
                out.push(ChatMessage::Assistant { text, tool_calls });
            }
            ChatMessage::ToolResult { call_id, name, content, is_error } => {
                if let Some(at) = open.iter().position(|(id, _)| id == call_id) {
                    open.remove(at);
                    let content = if content.is_blank() { Content::from("(the tool returned nothing)") } else { content.clone() };
                    out.push(ChatMessage::ToolResult { call_id: call_id.clone(), name: name.clone(), content, is_error: *is_error });
                } else {
                    close(&mut out, &mut open);
                    let status = if *is_error { "error" } else { "ok" };
                    let mut parts = vec![Part::Text(format!("Result of {name} ({status}):"))];
                    parts.extend(content.0.iter().cloned());
                    out.push(ChatMessage::User(Content(parts)));
                }
            }
        }
    }
    close(&mut out, &mut open);
    out
}

/// Text and arguments so far: over [`MAX_REPLY_BYTES`] the reply is refused.
fn check_size(url: &str, reply: &ModelReply, pending: usize) -> Result<(), ModelError> {
    let size = reply.text.len() + pending;
    if size > MAX_REPLY_BYTES {
        return Err(ModelError::Protocol { url: url.to_owned(), what: format!("the reply is over {MAX_REPLY_BYTES} bytes") });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aliases_and_version_paths() {
        assert!(serves("gpt-4o", "gpt-4o"));
        assert!(serves("claude-sonnet-4-5-20250929", "claude-sonnet-4-5"));
        assert!(serves("qwen2.5:latest", "qwen2.5"));
        assert!(serves("claude-3-5-sonnet-20241022", "claude-3-5-sonnet-latest"));
        assert!(serves("/models/qwen.gguf", "qwen.gguf"));
        assert!(!serves("gpt-4o-mini", "gpt-5"));
        assert!(has_version_path("http://h/v1") && has_version_path("http://h/api/v1beta"));
        assert!(!has_version_path("http://h:8000") && !has_version_path("http://h/api") && !has_version_path("http://h/v"));
    }

    #[test]
    fn retry_after_in_seconds_milliseconds_or_a_date() {
        let mut h = reqwest::header::HeaderMap::new();
        h.insert("retry-after", "2".parse().unwrap());
        assert_eq!(retry_after(&h), Some(Duration::from_secs(2)));
        h.insert("retry-after-ms", "250".parse().unwrap());
        assert_eq!(retry_after(&h), Some(Duration::from_millis(250)));
        let mut h = reqwest::header::HeaderMap::new();
        let later = httpdate::fmt_http_date(std::time::SystemTime::now() + Duration::from_secs(5));
        h.insert("retry-after", later.parse().unwrap());
        let d = retry_after(&h).unwrap();
        assert!(d <= Duration::from_secs(5) && d >= Duration::from_secs(3), "{d:?}");
        h.insert("retry-after", "soon".parse().unwrap());
        assert_eq!(retry_after(&h), None);
    }

    #[test]
    fn the_wire_history_has_no_empty_turn_and_pairs_every_call_with_its_result() {
        let call = |id: &str| ToolCall::new(id, "echo", serde_json::json!({"m": 1}));
        let history = vec![
            ChatMessage::User("q".into()),
            ChatMessage::Assistant { text: " ".into(), tool_calls: Vec::new() },
            ChatMessage::User("repair".into()),
            ChatMessage::Assistant { text: String::new(), tool_calls: vec![call("a"), call("b")] },
            ChatMessage::ToolResult { call_id: "a".into(), name: "echo".into(), content: Content::default(), is_error: false },
            ChatMessage::ToolResult { call_id: "zz".into(), name: "echo".into(), content: "stray".into(), is_error: false },
            ChatMessage::User("  ".into()),
        ];
        let out = wire_messages(&history, true);
        assert_eq!(out.len(), 6, "{out:?}");
        assert_eq!(out[1], ChatMessage::User("repair".into()), "the blank assistant turn is gone");
        assert!(
            matches!(&out[3], ChatMessage::ToolResult { call_id, content, .. } if call_id == "a" && content.text() == "(the tool returned nothing)")
        );
        // The call whose result the stray one is not: answered, before the stray becomes text.
        assert!(matches!(&out[4], ChatMessage::ToolResult { call_id, is_error: true, .. } if call_id == "b"));
        assert!(matches!(&out[5], ChatMessage::User(c) if c.text().starts_with("Result of echo (ok):")));
        // Without tools offered, calls and results are text.
        let out = wire_messages(&history[..5], false);
        assert!(out.iter().all(|m| !matches!(m, ChatMessage::ToolResult { .. })), "{out:?}");
        assert!(
            matches!(&out[2], ChatMessage::Assistant { text, tool_calls } if tool_calls.is_empty() && text.contains("[called echo with {\"m\":1}]"))
        );
    }

    #[test]
    fn bad_arguments_are_a_fault_not_an_error() {
        assert_eq!(parse_arguments("t", " ", false), (serde_json::json!({}), None));
        let (v, why) = parse_arguments("echo", "{\"a\": 1", true);
        assert_eq!(v, serde_json::json!({}));
        assert!(why.unwrap().contains("cut off"));
        let (_, why) = parse_arguments("echo", "[1]", false);
        assert!(why.unwrap().contains("must be a JSON object"));
    }
}
