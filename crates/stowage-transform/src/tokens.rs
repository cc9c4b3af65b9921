//! Token counts for the report, with the o200k_base vocabulary (tiktoken-rs).
//!
//! Loading the vocabulary costs tens of milliseconds and counting runs at tens of MB/s, so:
//! - the vocabulary is loaded once per process, on a background thread started when the first
//!   [`crate::Pipeline`] is built, so the load overlaps the transform itself;
//! - texts up to `exact_max_bytes` are counted exactly; larger ones are estimated from their
//!   length (the report then says `tokens_estimated: true`). Above that size an exact count
//!   would dominate the run, and the large side is the input, whose point is that it never
//!   reaches the model.

use std::sync::OnceLock;

use serde::{Deserialize, Serialize};
use tiktoken_rs::CoreBPE;

/// `[transform.tokens]`: token counting for the report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TokensConfig {
    /// Count tokens at all (false: counts are 0). Default true.
    pub enabled: bool,
    /// Texts up to this many bytes are counted exactly, larger ones estimated. Default 262144.
    pub exact_max_bytes: usize,
}

impl Default for TokensConfig {
    fn default() -> Self {
        TokensConfig { enabled: true, exact_max_bytes: 256 * 1024 }
    }
}

static LOADER: OnceLock<std::thread::JoinHandle<()>> = OnceLock::new();

/// Starts loading the vocabulary in the background (idempotent).
pub fn preload() {
    LOADER.get_or_init(|| {
        std::thread::Builder::new()
            .name("stowage-o200k".into())
            .spawn(|| {
                let _ = bpe();
            })
            .expect("spawning a thread")
    });
}

fn bpe() -> &'static CoreBPE {
    tiktoken_rs::o200k_base_singleton()
}

/// Bytes per token assumed by the estimate. Measured on this project's inputs: JSON and prose
/// run at ~3.5-4.5 bytes per o200k token, base64 at ~2.6; 4 errs on the low side for base64
/// (never overstates what a model would see of prose).
pub const ESTIMATE_BYTES_PER_TOKEN: u64 = 4;

/// Tokens of `text`: exact (`false`) or estimated (`true`).
pub fn count(text: &str, config: &TokensConfig) -> (u64, bool) {
    if !config.enabled {
        return (0, false);
    }
    if text.len() > config.exact_max_bytes {
        return ((text.len() as u64).div_ceil(ESTIMATE_BYTES_PER_TOKEN), true);
    }
    (bpe().count_ordinary(text) as u64, false)
}

/// Exact o200k tokens of `text`, whatever its size and whether counting for the report is
/// on: this decides what the model sees (the size net's token budget), so it is never an
/// estimate. Callers bound the length first; counting runs at tens of MB/s.
pub fn count_exact(text: &str) -> u64 {
    bpe().count_ordinary(text) as u64
}

/// The length in bytes of the longest prefix of `text` that is at most `max_tokens` o200k
/// tokens and ends on a character boundary: how a reader cuts a page to a host's token budget
/// with one encode, not a search of repeated counts.
pub fn prefix_within(text: &str, max_tokens: u64) -> usize {
    // A token is at least one byte.
    if text.len() as u64 <= max_tokens {
        return text.len();
    }
    let ranks = bpe().encode_ordinary(text);
    let Ok(n) = usize::try_from(max_tokens) else { return text.len() };
    if ranks.len() <= n {
        return text.len();
    }
    // Tokens can end inside a character (byte-level BPE): back off to its start.
    let bytes = bpe().decode_bytes(&ranks[..n]).map_or(0, |b| b.len());
    stowage_core::cut_at_char(text, bytes).len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_within_a_token_budget() {
        let text = "The quick brown fox jumps over the lazy dog. ".repeat(50);
        let n = prefix_within(&text, 100);
        assert!(count_exact(&text[..n]) <= 100 && count_exact(&text[..n]) >= 95, "{n}");
        assert_eq!(prefix_within("short", 100), 5);
        let wide = "日本語のテキスト".repeat(200);
        let n = prefix_within(&wide, 50);
        assert!(wide.is_char_boundary(n) && count_exact(&wide[..n]) <= 50);
    }

    #[test]
    fn exact_below_and_estimated_above() {
        let c = TokensConfig::default();
        assert_eq!(count("hello world", &c), (2, false));
        let big = "a".repeat(c.exact_max_bytes + 4);
        let (n, est) = count(&big, &c);
        assert!(est);
        assert_eq!(n, (c.exact_max_bytes as u64 + 4) / 4);
        assert_eq!(count("x", &TokensConfig { enabled: false, ..c }), (0, false));
    }
}
