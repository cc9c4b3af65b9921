//! Token counts for the report, with the o200k_base vocabulary (tiktoken-rs).
//!
//! Loading the vocabulary costs tens of milliseconds and counting runs at tens of MB/s, so:
//! - the vocabulary is loaded once per process, on a background thread started when the first
//!   [`crate::Pipeline`] is built, so the load overlaps the transform itself;
//! - texts up to `exact_max_bytes` are counted exactly; larger ones are estimated from their
//!   length (the report then says `tokens_estimated: true`). Above that size an exact count
//!   would dominate the run, and the large side is the input, whose point is that it never
//!   reaches the model;
//! - long texts are counted in chunks whose counts are remembered ([`chunks`]), so a page a
//!   reader cut to a budget is not encoded again when the answer around it is measured.

mod chunks;

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
    (count_exact(text), false)
}

/// Exact o200k tokens of `text`, whatever its size and whether counting for the report is
/// on: this decides what the model sees (the size net's token budget), so it is never an
/// estimate. Callers bound the length first; counting runs at tens of MB/s.
pub fn count_exact(text: &str) -> u64 {
    if text.len() < chunks::MIN_CHUNKED_BYTES {
        return bpe().count_ordinary(text) as u64;
    }
    chunks::chunks(text).map(|c| chunks::count(bpe(), c) as u64).sum()
}

/// The length in bytes of the longest prefix of `text` that is at most `max_tokens` o200k
/// tokens and ends on a character boundary: how a reader cuts a page to a host's token budget
/// with one pass, not a search of repeated counts. A long text is encoded chunk by chunk up to
/// the chunk the budget ends in, and the chunks' counts are remembered for the measure of the
/// answer that carries the page.
pub fn prefix_within(text: &str, max_tokens: u64) -> usize {
    // A token is at least one byte.
    if text.len() as u64 <= max_tokens {
        return text.len();
    }
    let Ok(budget) = usize::try_from(max_tokens) else { return text.len() };
    if text.len() < chunks::MIN_CHUNKED_BYTES {
        return end_of_tokens(text, 0, &bpe().encode_ordinary(text), budget);
    }
    // Chunk by chunk, stopping at the one the budget ends in: the rest is never encoded.
    let (mut used, mut start) = (0, 0);
    for chunk in chunks::chunks(text) {
        let (n, ranks) = match chunks::known(chunk) {
            Some(n) => (n, None),
            None => {
                let ranks = chunks::encode(bpe(), chunk);
                (ranks.len(), Some(ranks))
            }
        };
        if used + n > budget {
            let ranks = ranks.unwrap_or_else(|| bpe().encode_ordinary(chunk));
            return end_of_tokens(text, start, &ranks, budget - used);
        }
        used += n;
        start += chunk.len();
    }
    text.len()
}

/// The end of the first `keep` of `ranks`, the tokens of `text[start..]` (or of a chunk of it),
/// as a length of `text` on a character boundary.
fn end_of_tokens(text: &str, start: usize, ranks: &[tiktoken_rs::Rank], keep: usize) -> usize {
    if ranks.len() <= keep {
        return text.len();
    }
    // Tokens can end inside a character (byte-level BPE): back off to its start.
    let bytes = bpe().decode_bytes(&ranks[..keep]).map_or(0, |b| b.len());
    stowage_core::cut_at_char(text, start + bytes).len()
}

#[cfg(test)]
mod tests {
    use proptest::strategy::Strategy as _;

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

    /// The old cut, one encode of the whole text: what the chunked one must agree with.
    fn reference_prefix(text: &str, max_tokens: usize) -> usize {
        let ranks = bpe().encode_ordinary(text);
        if ranks.len() <= max_tokens {
            return text.len();
        }
        let bytes = bpe().decode_bytes(&ranks[..max_tokens]).map_or(0, |b| b.len());
        stowage_core::cut_at_char(text, bytes).len()
    }

    fn agrees(text: &str) {
        let whole = bpe().count_ordinary(text) as u64;
        assert_eq!(count_exact(text), whole, "count of {:?}", &text[..text.len().min(200)]);
        assert_eq!(count_exact(text), whole, "remembered count");
        for budget in [whole / 7, whole / 2, whole.saturating_sub(3), whole + 1] {
            assert_eq!(prefix_within(text, budget), reference_prefix(text, budget as usize), "budget {budget} of {whole}");
        }
    }

    #[test]
    fn chunked_counts_are_whole_counts_on_real_shapes() {
        let csv: String = (0..3000).map(|i| format!("{},north,{},{}.5,x/y\n", 100_000 + i, i % 500, i * 7)).collect();
        let prose = "The quick brown fox jumps over the lazy dog, again.\n\nIt's said: \"don't\".\n".repeat(400);
        let code = "fn main() {\n    // comment\n    let x = 1;\n}\n// top level\n/* block */\nuse a::b;\r\n".repeat(300);
        let json = serde_json::to_string_pretty(
            &serde_json::json!({"rows": (0..800).map(|i| serde_json::json!({"id": i, "name": format!("n{i}")})).collect::<Vec<_>>()}),
        )
        .unwrap();
        let wide = "日本語のテキスト。\nÉtat\u{a0}civil\n\u{85}x\ncafe\u{301}\n\t\ttab\n".repeat(300);
        let trace = (0..500).map(|i| format!("  File \"/app/m{i}.py\", line {i}, in f{i}\n    return g()\n")).collect::<String>()
            + "ValueError: bad\n";
        for text in [csv, prose, code, json, wide, trace] {
            agrees(&text);
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
        #[test]
        fn chunked_counts_are_whole_counts_on_any_text(
            parts in proptest::collection::vec(proptest::prop_oneof![
                proptest::string::string_regex("[a-zA-Z0-9 ,./:'\"-]{0,40}").unwrap(),
                proptest::sample::select(vec!["\n", "\n\n", "\r\n", "\n ", "\n/", "\n//x", "\n\t", "\n\u{a0}", "\n\u{85}", "\n\u{301}", "\n日本", "\n's", " \n", ".\n", "/\n", "\u{2028}"]).prop_map(String::from),
            ], 100..900)
        ) {
            agrees(&parts.concat());
        }
    }
}
