//! `[agent]`: which model the planner talks to and the limits of one run.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The model's wire format (`agent.backend`): which API the requests speak, not which vendor
/// runs it (vLLM, llama.cpp and Ollama all speak `openai`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Backend {
    /// OpenAI-compatible Chat Completions (`POST {base_url}/chat/completions`): OpenAI, vLLM,
    /// llama.cpp's server, Ollama, LM Studio.
    Openai,
    /// Anthropic Messages (`POST {base_url}/messages`).
    Anthropic,
}

/// Whether the model is shown images (`agent.vision`: `"auto"`, `true` or `false`). Sending
/// image parts to a text-only model fails the request, so the default guesses from the name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Vision {
    /// On for the known vision model families (GPT-4o and later, Claude 3 and later, Gemini,
    /// LLaVA, Qwen-VL, Pixtral, Gemma 3, …, and any name with `vision` or `-vl`).
    #[default]
    Auto,
    /// Always (`true`): a model the family list does not know, served under a custom name.
    On,
    /// Never (`false`): images stand as their one-line description.
    Off,
}

impl Vision {
    /// Whether `model` is shown images: `Auto` knows the families that take them (GPT-4o,
    /// GPT-4.1, GPT-5, o1/o3/o4, Claude 3 and later, Gemini, Llama 3.2 Vision and Llama 4,
    /// Qwen-VL, LLaVA, Pixtral, Gemma 3, MiniCPM-V, Moondream, InternVL, and any name with
    /// `vision` or `-vl`).
    pub(crate) fn enabled_for(self, model: &str) -> bool {
        match self {
            Vision::On => true,
            Vision::Off => false,
            Vision::Auto => {
                let m = model.to_ascii_lowercase();
                let m = m.rsplit('/').next().unwrap_or(&m);
                const FAMILIES: &[&str] = &[
                    "gpt-4o",
                    "gpt-4.1",
                    "gpt-4-turbo",
                    "gpt-4-vision",
                    "gpt-5",
                    "chatgpt-4o",
                    "o1",
                    "o3",
                    "o4",
                    "claude-3",
                    "claude-sonnet-4",
                    "claude-opus-4",
                    "claude-haiku-4",
                    "claude-4",
                    "gemini",
                    "llava",
                    "bakllava",
                    "llama3.2-vision",
                    "llama-3.2-11b-vision",
                    "llama-3.2-90b-vision",
                    "llama4",
                    "llama-4",
                    "qwen2-vl",
                    "qwen2.5-vl",
                    "qwen-vl",
                    "qwen2.5vl",
                    "qwen3-vl",
                    "pixtral",
                    "gemma3",
                    "gemma-3",
                    "minicpm-v",
                    "moondream",
                    "internvl",
                    "phi-3.5-vision",
                    "phi-4-multimodal",
                    "granite3.2-vision",
                    "mistral-small-3.1",
                    "mistral-small3.1",
                ];
                FAMILIES.iter().any(|f| m.starts_with(f)) || m.contains("vision") || m.contains("-vl")
            }
        }
    }
}

impl Serialize for Vision {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Vision::Auto => s.serialize_str("auto"),
            Vision::On => s.serialize_bool(true),
            Vision::Off => s.serialize_bool(false),
        }
    }
}

impl<'de> Deserialize<'de> for Vision {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Bool(bool),
            Str(String),
        }
        match Raw::deserialize(d)? {
            Raw::Bool(true) => Ok(Vision::On),
            Raw::Bool(false) => Ok(Vision::Off),
            Raw::Str(s) if s == "auto" => Ok(Vision::Auto),
            Raw::Str(s) => Err(serde::de::Error::custom(format!("agent.vision must be \"auto\", true or false, not \"{s}\""))),
        }
    }
}

/// `[agent]` in `stowage.toml`: which model the planner talks to and the limits of one run.
/// Every field has a default and unknown keys are refused, so a misspelt limit fails loudly.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AgentConfig {
    /// The API's base URL, including the version path (`http://localhost:11434/v1`). Empty:
    /// no model is configured and the agent refuses to start. Default empty.
    pub base_url: String,
    /// The model name sent with every request and looked up in `GET {base_url}/models` at
    /// start (an alias such as `claude-sonnet-4-5` matches its dated id). Default empty.
    pub model: String,
    /// The wire format of the API at `base_url`. Default `openai`.
    pub backend: Backend,
    /// The environment variable holding the API key (the key itself is never in the file).
    /// Empty: no key is sent (local servers). Default empty.
    pub api_key_env: String,
    /// Tool-calling steps per run; reaching it ends the run with a payload and a warning.
    /// Default 8.
    pub max_steps: u32,
    /// A run's wall-clock limit, tool calls included (humantime, `"5m"`). Default 5 minutes.
    #[serde(with = "humantime_serde")]
    pub max_wall_time: Duration,
    /// Tokens (prompt + completion, as the model reports them) one run may spend.
    /// Default 200000.
    pub max_tokens: u64,
    /// The most tokens one model reply may have (Anthropic requires it on every request).
    /// Default 4096.
    pub max_response_tokens: u32,
    /// How long one model request may take, first byte to last (humantime). Default 2 minutes.
    #[serde(with = "humantime_serde")]
    pub request_timeout: Duration,
    /// Replaces the built-in system prompt (the tool list and answer format are appended).
    /// Default none: the built-in prompt.
    pub system_prompt: Option<String>,
    /// Native tool calling; false sends the JSON-only action format instead, for models without
    /// tool support. Default true.
    pub tool_calling: bool,
    /// Repair rounds per run: a fault of the model's reply (tool arguments that are not JSON, a
    /// reply cut at the token limit, a final answer that is none, a JSON-only reply that is no
    /// action) is told back to the model this many times in all, whatever the mix of faults;
    /// the next ends the run with a partial payload. A run sends the model at most
    /// `max_steps + max_repairs + 1` requests. Default 2.
    pub max_repairs: u32,
    /// An artifact value up to this many bytes is inlined in the payload; above it the
    /// payload carries its reference with a fresh signed link. Default 65536 (64 KiB).
    pub inline_artifact_max_bytes: u64,
    /// Streamed replies (`stream: true`); false asks for whole ones, for servers whose
    /// streaming is broken. A plain JSON answer to a streamed request is read either way.
    /// Default true.
    pub stream: bool,
    /// Retries of a request answered 429 or 5xx, with backoff (`Retry-After` honoured up to
    /// 30 s). Default 2.
    pub max_retries: u32,
    /// Show the model the images tool results carry: `"auto"` (the known vision model
    /// families), `true` or `false`. Default `"auto"`.
    pub vision: Vision,
    /// The image budget of one model request: at most this many images (the newest; older
    /// ones are replaced by their one-line description)… Default 4.
    pub max_images: usize,
    /// …and at most this many bytes of them (base64). Default 1048576 (1 MiB).
    pub max_image_bytes: u64,
    /// The most sources one payload lists (the first ones, in the order the tools returned
    /// them); the rest are counted in a `sources_capped` warning. Default 500.
    pub max_sources: usize,
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
            max_repairs: 2,
            inline_artifact_max_bytes: 64 * 1024,
            stream: true,
            max_retries: 2,
            vision: Vision::Auto,
            max_images: 4,
            max_image_bytes: 1024 * 1024,
            max_sources: 500,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vision_is_auto_true_or_false() {
        #[derive(Deserialize)]
        struct T {
            vision: Vision,
        }
        let v = |s: &str| toml::from_str::<T>(s).map(|t| t.vision).map_err(|e| e.to_string());
        assert_eq!(v("vision = \"auto\""), Ok(Vision::Auto));
        assert_eq!(v("vision = true"), Ok(Vision::On));
        assert_eq!(v("vision = false"), Ok(Vision::Off));
        assert!(v("vision = \"yes\"").unwrap_err().contains("\"auto\", true or false"));
        for m in [
            "gpt-4o-mini",
            "claude-sonnet-4-5",
            "claude-3-5-haiku-latest",
            "llava:13b",
            "qwen2.5-vl-7b-instruct",
            "openai/gpt-4.1",
            "gemma3:12b",
        ] {
            assert!(Vision::Auto.enabled_for(m), "{m}");
        }
        for m in ["gpt-3.5-turbo", "qwen2.5:7b-instruct", "llama3.1:8b", "mistral-7b-instruct", "deepseek-r1"] {
            assert!(!Vision::Auto.enabled_for(m), "{m}");
        }
        assert!(Vision::On.enabled_for("x") && !Vision::Off.enabled_for("gpt-4o"));
    }
}
