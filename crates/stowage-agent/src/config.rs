//! `[agent]`: which model the planner talks to and the limits of one run.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The model's wire format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Backend {
    /// OpenAI-compatible Chat Completions (`POST {base_url}/chat/completions`): OpenAI, vLLM,
    /// llama.cpp's server, Ollama, LM Studio.
    Openai,
    /// Anthropic Messages (`POST {base_url}/messages`).
    Anthropic,
}

/// `[agent]` in `stowage.toml`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AgentConfig {
    /// The API's base URL, including the version path (`http://localhost:11434/v1`). Empty:
    /// no model is configured and the agent refuses to start.
    pub base_url: String,
    pub model: String,
    pub backend: Backend,
    /// The environment variable holding the API key (the key itself is never in the file).
    /// Empty: no key is sent (local servers).
    pub api_key_env: String,
    /// Tool-calling steps per run; reaching it ends the run with a payload and a warning.
    pub max_steps: u32,
    /// A run's wall-clock limit.
    #[serde(with = "humantime_serde")]
    pub max_wall_time: Duration,
    /// Tokens (prompt + completion, as the model reports them) one run may spend.
    pub max_tokens: u64,
    /// The most tokens one model reply may have (Anthropic requires it on every request).
    pub max_response_tokens: u32,
    /// How long one model request may take, first byte to last.
    #[serde(with = "humantime_serde")]
    pub request_timeout: Duration,
    /// Replaces the built-in system prompt (the tool list and answer format are appended).
    pub system_prompt: Option<String>,
    /// Native tool calling; false sends the seed's JSON-only action format instead, for
    /// models without tool support.
    pub tool_calling: bool,
    /// An artifact value up to this size is inlined in the payload; above it the payload
    /// carries its reference with a fresh signed link.
    pub inline_artifact_max_bytes: u64,
}

impl Default for AgentConfig {
    fn default() -> Self {
        AgentConfig {
            base_url: String::new(),
            model: String::new(),
            backend: Backend::Openai,
            api_key_env: String::new(),
            max_steps: 8,
            max_wall_time: Duration::from_secs(300),
            max_tokens: 200_000,
            max_response_tokens: 4096,
            request_timeout: Duration::from_secs(120),
            system_prompt: None,
            tool_calling: true,
            inline_artifact_max_bytes: 64 * 1024,
        }
    }
}
