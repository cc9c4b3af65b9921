//! What one reader answer may hold for the caller's host, and where its payload goes.
//!
//! A page is sized to the host's budgets before it is cut, so the shaper's final limit never
//! has to cut it again (which would leave a gap between pages): bytes as the host counts them
//! (JSON-escaped for a host that reads `structuredContent`), lines, and o200k tokens. The
//! payload (a window of text, matching lines, a selection) is written once: in `content` for a
//! host whose model reads `content`, in `structuredContent` for one that reads only that.

use serde_json::{Map, Value, json};

use super::READ_BUDGET_BYTES;
use crate::hosts::{HostProfile, Sees};

/// The longest edge of an image answer for a host with no published limit: the most a Claude
/// model takes without resizing.
pub(crate) const DEFAULT_MAX_EDGE: u32 = 1568;
/// What an answer's own lines (its header, the structured metadata) take of a host's budget.
const ROOM_BYTES: usize = 1_000;
const ROOM_LINES: usize = 6;
const ROOM_TOKENS: u64 = 600;
/// The smallest page worth sending, whatever the host says.
const MIN_PAGE_BYTES: usize = 1_000;

/// What the caller's host takes in one answer (from its profile).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ReadHints {
    /// The longest edge of an image answer unless `max_edge` says otherwise.
    pub max_image_edge: u32,
    /// The most bytes of payload in one answer (as the host counts them).
    pub text_budget: usize,
    /// The most lines of payload.
    pub line_budget: usize,
    /// The most o200k tokens of payload.
    pub token_budget: Option<u64>,
    /// The host's model reads only `structuredContent`.
    pub structured: bool,
}

impl Default for ReadHints {
    fn default() -> Self {
        ReadHints::for_host(&HostProfile::default_profile())
    }
}

impl ReadHints {
    /// What `host` takes, less room for the answer's own lines (never under a page worth
    /// sending, never over the readers' usual budget).
    pub(crate) fn for_host(host: &HostProfile) -> ReadHints {
        ReadHints {
            max_image_edge: host.max_image_edge.unwrap_or(DEFAULT_MAX_EDGE),
            text_budget: host
                .max_text_bytes
                .map_or(READ_BUDGET_BYTES, |b| b.saturating_sub(ROOM_BYTES).clamp(MIN_PAGE_BYTES, READ_BUDGET_BYTES)),
            line_budget: host.max_text_lines.map_or(usize::MAX, |l| l.saturating_sub(ROOM_LINES).max(10)),
            token_budget: host.max_tokens.map(|t| t.saturating_sub(ROOM_TOKENS).max(250)),
            structured: host.sees == Sees::Structured,
        }
    }

    /// The length in bytes of the longest prefix of `text` that fits one page (see the module
    /// docs), cut at a line end when one is in its last quarter. `text.len()` when it all fits.
    pub(crate) fn page_len(&self, text: &str) -> usize {
        let mut n =
            if self.structured { escaped_prefix(text, self.text_budget) } else { stowage_core::cut_at_char(text, self.text_budget).len() };
        if !self.structured
            && let Some((k, _)) = text[..n].match_indices('\n').nth(self.line_budget.saturating_sub(1))
        {
            n = n.min(k + 1);
        }
        if let Some(t) = self.token_budget {
            n = stowage_transform::tokens::prefix_within(&text[..n], t);
        }
        if n < text.len()
            && let Some(nl) = text[..n].rfind('\n').filter(|&nl| nl + 1 >= n - n / 4)
        {
            n = nl + 1;
        }
        n
    }

    /// An answer with its payload written once (see the module docs): `header` is the line
    /// that says what the payload is, `payload` the text the model reads, and `structured`
    /// gets it under `key` (as `as_value`) only for a host that reads `structuredContent`.
    pub(crate) fn answer(&self, header: String, payload: String, mut structured: Map<String, Value>, key: &str, as_value: Value) -> Value {
        if self.structured {
            structured.insert(key.into(), as_value);
            json!({"content": [{"type": "text", "text": header}], "structuredContent": structured})
        } else {
            let mut content = vec![json!({"type": "text", "text": header})];
            if !payload.is_empty() {
                content.push(json!({"type": "text", "text": payload}));
            }
            structured.insert("in".into(), json!("content"));
            json!({"content": content, "structuredContent": structured})
        }
    }
}

/// The byte length of the longest prefix of `text` whose JSON-escaped form is at most `budget`
/// bytes (what a host that reads `structuredContent` counts).
fn escaped_prefix(text: &str, budget: usize) -> usize {
    let mut used = 0;
    for (i, c) in text.char_indices() {
        let n = match c {
            '"' | '\\' | '\n' | '\r' | '\t' | '\u{8}' | '\u{c}' => 2,
            c if (c as u32) < 0x20 => 6,
            c => c.len_utf8(),
        };
        if used + n > budget {
            return i;
        }
        used += n;
    }
    text.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hosts::builtin;

    fn hints(name: &str) -> ReadHints {
        ReadHints::for_host(&builtin().into_iter().find(|p| p.name == name).unwrap())
    }

    #[test]
    fn pages_fit_each_hosts_budget() {
        let csv: String = (0..40_000).map(|i| format!("{i},{},{}.{:02},north\n", i * 7 % 1000, i % 97, i % 100)).collect();
        let codex = hints("codex");
        let n = codex.page_len(&csv);
        assert!(serde_json::to_string(&csv[..n]).unwrap().len() <= 10_000 - 1_000 + 2, "codex counts escaped bytes");
        assert!(csv[..n].ends_with('\n'));
        let code = hints("claude-code");
        let n = code.page_len(&csv);
        assert!(stowage_transform::tokens::count_exact(&csv[..n]) <= 9_400, "claude-code counts tokens");
        let default = ReadHints::default();
        assert!(default.page_len(&csv) <= READ_BUDGET_BYTES && default.token_budget.is_none());
        assert_eq!(default.page_len("short"), 5);
    }

    #[test]
    fn the_payload_is_written_once() {
        let both = ReadHints::default().answer("[head]".into(), "text".into(), Map::new(), "text", json!("text"));
        assert_eq!(both["content"][1]["text"], "text");
        assert!(both["structuredContent"].get("text").is_none());
        let codex = hints("codex").answer("[head]".into(), "text".into(), Map::new(), "text", json!("text"));
        assert_eq!(codex["structuredContent"]["text"], "text");
        assert_eq!(codex["content"].as_array().unwrap().len(), 1);
    }
}
