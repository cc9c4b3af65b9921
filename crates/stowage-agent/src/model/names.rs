//! Tool names as model APIs accept them: OpenAI and Anthropic take only
//! `^[a-zA-Z0-9_-]{1,64}$`, while MCP tool names may hold dots, slashes and more
//! (`kb.search`, `files/read`) and be longer. Each tool gets an API name (every other
//! character becomes `_`; a name still too long keeps its head and a hash of the whole; a
//! clash gets a numbered suffix), and the mapping goes both ways, so a call the model makes
//! reaches the tool it was shown.

use std::collections::HashMap;

/// The longest name the APIs accept.
const MAX_LEN: usize = 64;

/// The two-way mapping of one run's tool names.
#[derive(Debug, Clone, Default)]
pub(crate) struct ToolNames {
    to_api: HashMap<String, String>,
    to_mcp: HashMap<String, String>,
}

impl ToolNames {
    /// API names for `mcp_names`, in order, each unique.
    pub(crate) fn new<'a>(mcp_names: impl IntoIterator<Item = &'a str>) -> ToolNames {
        let mut names = ToolNames::default();
        let all: Vec<&str> = mcp_names.into_iter().collect();
        // Names that are already valid keep them, whatever order they come in.
        for n in all.iter().filter(|n| valid(n)) {
            names.insert(n, (*n).to_owned());
        }
        for n in all.iter().filter(|n| !valid(n)) {
            let base = sanitize(n);
            let mut candidate = base.clone();
            let mut k = 2;
            while names.to_mcp.contains_key(&candidate) {
                let suffix = format!("_{k}");
                candidate = format!("{}{suffix}", cut(&base, MAX_LEN - suffix.len()));
                k += 1;
            }
            names.insert(n, candidate);
        }
        names
    }

    fn insert(&mut self, mcp: &str, api: String) {
        self.to_mcp.insert(api.clone(), mcp.to_owned());
        self.to_api.insert(mcp.to_owned(), api);
    }

    /// The name the model is shown for tool `mcp`.
    pub(crate) fn api<'a>(&'a self, mcp: &'a str) -> &'a str {
        self.to_api.get(mcp).map_or(mcp, String::as_str)
    }

    /// The tool an API name stands for; an unknown name is passed on as it is (the gateway
    /// answers that no such tool exists, and the model is told).
    pub(crate) fn mcp<'a>(&'a self, api: &'a str) -> &'a str {
        self.to_mcp.get(api).map_or(api, String::as_str)
    }
}

/// Whether the APIs accept `name` as it is.
fn valid(name: &str) -> bool {
    !name.is_empty() && name.len() <= MAX_LEN && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

fn sanitize(name: &str) -> String {
    let mut s: String = name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '_' }).collect();
    if s.is_empty() {
        s = "tool".into();
    }
    if s.len() > MAX_LEN {
        // The head says what it is; the hash keeps long names that share a head apart.
        let hash = fnv_tag(name);
        s = format!("{}_{hash}", cut(&s, MAX_LEN - 9));
    }
    s
}

fn cut(s: &str, n: usize) -> &str {
    // ASCII only by now.
    &s[..s.len().min(n)]
}

/// Eight hex digits of FNV-1a: a stable, dependency-free tag (not a security measure).
fn fnv_tag(s: &str) -> String {
    let mut h: u32 = 0x811c_9dc5;
    for b in s.bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    format!("{h:08x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_map_both_ways_and_stay_unique() {
        let long = "a".repeat(70) + ".x";
        let long2 = "a".repeat(70) + ".y";
        let mcp = ["kb.search", "kb_search", "files/read", "ok-name_1", "dé.jà", long.as_str(), long2.as_str()];
        let n = ToolNames::new(mcp);
        let apis: Vec<&str> = mcp.iter().map(|m| n.api(m)).collect();
        for (m, a) in mcp.iter().zip(&apis) {
            assert!(valid(a), "{a}");
            assert_eq!(n.mcp(a), *m);
        }
        assert_eq!(n.api("kb_search"), "kb_search", "a valid name keeps itself");
        assert_eq!(n.api("kb.search"), "kb_search_2");
        assert_eq!(n.api("files/read"), "files_read");
        assert_eq!(n.api("dé.jà"), "d__j_");
        assert_ne!(n.api(&long), n.api(&long2));
        let unique: std::collections::HashSet<&&str> = apis.iter().collect();
        assert_eq!(unique.len(), apis.len());
        assert_eq!(n.mcp("never_listed"), "never_listed");
    }
}
