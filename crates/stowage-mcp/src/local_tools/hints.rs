//! What one reader answer may hold for the caller's host, and where its payload goes.
//!
//! A page is sized to the host's budgets before it is cut, so the shaper's final limit never
//! has to cut it again (which would leave a gap between pages): bytes, lines, and o200k
//! tokens. The payload (a window of text, matching lines, a selection, an image) is written
//! once, in `content`, after a header line that says what it is and where the next page
//! starts: every host shows its model `content` when there is no `structuredContent`. The
//! same facts go to `structuredContent` for programs only for hosts whose model reads text
//! beside it; Claude Code, Codex and VS Code show `structuredContent` instead of the text, so
//! for them the answer carries none (the reader tools declare no `outputSchema`, which leaves
//! `structuredContent` optional).

use serde_json::{Map, Value, json};

use super::READ_BUDGET_BYTES;
use crate::hosts::HostProfile;

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
    /// Whether the answer also carries its facts in `structuredContent`: not for a host that
    /// shows `structuredContent` instead of the text beside it, where it would hide the page.
    pub metadata: bool,
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
            metadata: !host.sees.drops_text_beside_structured(),
        }
    }

    /// The length in bytes of the longest prefix of `text` that fits one page (see the module
    /// docs), cut at a line end when one is in its last quarter. `text.len()` when it all fits.
    pub(crate) fn page_len(&self, text: &str) -> usize {
        let mut n = stowage_core::cut_at_char(text, self.text_budget).len();
        if let Some((k, _)) = text[..n].match_indices('\n').nth(self.line_budget.saturating_sub(1)) {
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
    /// that says what the payload is and how to go on, `payload` the text the model reads,
    /// and `facts` what `structuredContent` carries for programs, where the host reads text
    /// beside it (with `in: "content"`: the payload is in `content`, not repeated).
    pub(crate) fn answer(&self, header: String, payload: String, facts: Map<String, Value>) -> Value {
        let mut content = vec![json!({"type": "text", "text": header})];
        if !payload.is_empty() {
            content.push(json!({"type": "text", "text": payload}));
        }
        self.with_facts(content, facts)
    }

    /// `content` with `facts` in `structuredContent` where the host reads text beside it (see
    /// [`ReadHints::answer`]).
    pub(crate) fn with_facts(&self, content: Vec<Value>, mut facts: Map<String, Value>) -> Value {
        if !self.metadata {
            return json!({"content": content});
        }
        facts.insert("in".into(), json!("content"));
        json!({"content": content, "structuredContent": facts})
    }
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
        assert!(n <= 10_000 - 1_000, "codex counts bytes: {n}");
        assert!(csv[..n].ends_with('\n'));
        let code = hints("claude-code");
        let n = code.page_len(&csv);
        assert!(stowage_transform::tokens::count_exact(&csv[..n]) <= 9_400, "claude-code counts tokens");
        let qwen = hints("qwen-code");
        assert!(csv[..qwen.page_len(&csv)].lines().count() <= 1_000, "qwen-code counts lines");
        let default = ReadHints::default();
        assert!(default.page_len(&csv) <= READ_BUDGET_BYTES && default.token_budget.is_none());
        assert_eq!(default.page_len("short"), 5);
    }

    #[test]
    fn the_payload_is_written_once_in_content() {
        let facts = || {
            let mut m = Map::new();
            m.insert("nextOffset".into(), json!(4));
            m
        };
        let both = ReadHints::default().answer("[head]".into(), "text".into(), facts());
        assert_eq!(both["content"][1]["text"], "text");
        assert_eq!(both["structuredContent"], json!({"nextOffset": 4, "in": "content"}));
        // Hosts that show structuredContent instead of text get none: the page stays visible.
        for host in ["codex", "claude-code", "vscode"] {
            let v = hints(host).answer("[head]".into(), "text".into(), facts());
            assert_eq!(v["content"][1]["text"], "text", "{host}");
            assert!(v.get("structuredContent").is_none(), "{host}: {v}");
        }
    }
}
