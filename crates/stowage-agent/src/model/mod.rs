//! Model backends behind one trait, [`Model`]: the planner's conversation in our own types,
//! sent in each API's wire format and read back from its token stream.
//!
//! Both backends stream (`stream: true`) and hand answer text to the caller as it arrives;
//! tool calls are assembled from their fragments and returned whole.

mod anthropic;
mod openai;
mod sse;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;
use tokio::sync::mpsc;

pub use anthropic::AnthropicModel;
pub use openai::OpenAiModel;

use crate::config::{AgentConfig, Backend};

/// One tool the model may call.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    pub input_schema: Value,
}

/// A tool call the model asked for.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    pub arguments: Value,
}

/// One message of the conversation, independent of the wire format.
#[derive(Debug, Clone, PartialEq)]
pub enum ChatMessage {
    User(String),
    Assistant { text: String, tool_calls: Vec<ToolCall> },
    ToolResult { call_id: String, name: String, content: String, is_error: bool },
}

/// What one model request carries.
#[derive(Debug, Clone)]
pub struct ModelRequest<'a> {
    pub system: &'a str,
    pub messages: &'a [ChatMessage],
    /// Empty: the model is not offered native tools (the JSON-only action format).
    pub tools: &'a [ToolSpec],
    pub max_tokens: u32,
}

/// Tokens one request cost, as the API reported them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
}

/// The model's complete reply.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ModelReply {
    pub text: String,
    pub tool_calls: Vec<ToolCall>,
    pub usage: Usage,
}

/// Why a model request failed; [`ModelError::code`] is the `error` event's code.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ModelError {
    #[error("model at {url} is unreachable: {reason}")]
    Unreachable { url: String, reason: String },
    #[error("model at {url} answered HTTP {status}: {body}")]
    Status { url: String, status: u16, body: String },
    #[error("model at {url} did not answer within {}s", timeout.as_secs())]
    Timeout { url: String, timeout: Duration },
    #[error("model at {url} dropped the stream before the end of its answer ({reason})")]
    Dropped { url: String, reason: String },
    #[error("model at {url} sent something unreadable: {what}")]
    Protocol { url: String, what: String },
    #[error("the API key variable {0} is not set (agent.api_key_env); export it or clear api_key_env for a local model")]
    KeyMissing(String),
    #[error("no model is configured: set agent.base_url and agent.model in stowage.toml")]
    NotConfigured,
}

impl ModelError {
    pub fn code(&self) -> &'static str {
        match self {
            ModelError::Unreachable { .. } => "model_unreachable",
            ModelError::Status { .. } => "model_http_error",
            ModelError::Timeout { .. } => "model_timeout",
            ModelError::Dropped { .. } => "model_stream_dropped",
            ModelError::Protocol { .. } => "model_protocol_error",
            ModelError::KeyMissing(_) | ModelError::NotConfigured => "model_not_configured",
        }
    }
}

/// A chat model.
#[async_trait]
pub trait Model: Send + Sync {
    /// Sends the conversation and reads the streamed reply; answer text goes to `text` as it
    /// arrives (the sender is dropped when the reply ends).
    async fn complete(&self, req: &ModelRequest<'_>, text: mpsc::Sender<String>) -> Result<ModelReply, ModelError>;

    /// Whether the model's API answers at all (`GET {base_url}/models`): called at start so a
    /// wrong URL fails before the first question.
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

    /// `GET {base}/models`: any HTTP answer but a refused key means the API is there.
    async fn check(&self, req: reqwest::RequestBuilder) -> Result<(), ModelError> {
        let url = self.url("models");
        let resp = tokio::time::timeout(self.timeout.min(Duration::from_secs(10)), req.send())
            .await
            .map_err(|_| ModelError::Timeout { url: url.clone(), timeout: self.timeout.min(Duration::from_secs(10)) })?
            .map_err(|e| self.unreachable(&url, &e))?;
        match resp.status().as_u16() {
            401 | 403 => Err(ModelError::Status { url, status: resp.status().as_u16(), body: "the API key was refused".into() }),
            _ => Ok(()),
        }
    }

    /// POSTs `body`, checks the status, and returns the response to stream from.
    async fn post(&self, url: &str, req: reqwest::RequestBuilder) -> Result<reqwest::Response, ModelError> {
        let resp = req.send().await.map_err(|e| self.unreachable(url, &e))?;
        let status = resp.status();
        if !status.is_success() {
            let body = resp.text().await.unwrap_or_default();
            let body: String = body.chars().filter(|c| !c.is_control()).take(300).collect();
            return Err(ModelError::Status { url: url.to_owned(), status: status.as_u16(), body });
        }
        Ok(resp)
    }
}

/// The configured model, or why there is none.
pub fn from_config(config: &AgentConfig) -> Result<Arc<dyn Model>, ModelError> {
    if config.base_url.trim().is_empty() || config.model.trim().is_empty() {
        return Err(ModelError::NotConfigured);
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
    let endpoint =
        Endpoint { client, base_url: config.base_url.clone(), model: config.model.clone(), api_key, timeout: config.request_timeout };
    Ok(match config.backend {
        Backend::Openai => Arc::new(OpenAiModel::new(endpoint)),
        Backend::Anthropic => Arc::new(AnthropicModel::new(endpoint)),
    })
}

/// Runs one streamed request under the endpoint's timeout.
async fn with_timeout<T>(endpoint: &Endpoint, url: &str, fut: impl Future<Output = Result<T, ModelError>>) -> Result<T, ModelError> {
    tokio::time::timeout(endpoint.timeout, fut).await.map_err(|_| ModelError::Timeout { url: url.to_owned(), timeout: endpoint.timeout })?
}

/// Tool-call arguments assembled from fragments: `{}` when the model sent none.
fn parse_arguments(url: &str, name: &str, text: &str) -> Result<Value, ModelError> {
    if text.trim().is_empty() {
        return Ok(Value::Object(Default::default()));
    }
    serde_json::from_str(text)
        .map_err(|e| ModelError::Protocol { url: url.to_owned(), what: format!("the arguments of tool call {name} are not JSON: {e}") })
}
