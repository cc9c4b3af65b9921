//! Host profiles: what each kind of MCP client shows its model of a tool result, so a result
//! is shaped to reach that host's model whole.
//!
//! Hosts differ, and what they do is measured, not assumed (docs/results.md's host table; the tests in
//! `crates/stowage/tests/real_hosts.rs` drive Claude Code and Codex CLI with a model server of
//! our own and read what reached the model): Claude Code shows `JSON.stringify` of
//! `structuredContent` instead of every text block when there is one, saves text over 50,000
//! characters to a file and cuts error text over 10,000; Codex CLI shows only
//! `structuredContent` when there is one (images dropped), cuts text at about 12 KB and never
//! says a result was an error; Qwen Code and Gemini CLI show an error result whole, `_meta`
//! included. A reference the host cuts off, hides or files away is lost to the model. So the
//! client's `clientInfo.name` (from `initialize`, or on 2026-07-28 from each request's
//! `_meta`) picks a [`HostProfile`], and the shaper ([`crate::shape`]) shapes each answer
//! within it.
//!
//! The spec says servers SHOULD NOT change behaviour on `clientInfo`; these are the named
//! clients' own hard limits, and shaping within them keeps the reference alive where the host
//! would cut or reject it (ARCHITECTURE.md). `[hosts] adapt = false` gives every client the
//! `default` profile, which keeps the gateway's usual shape.

use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize};
use stowage_transform::ImagePreviewConfig;
use wildmatch::WildMatch;

/// The profile of every client no other profile matches.
pub const DEFAULT_PROFILE: &str = "default";
/// The profile of the agent planner's own sessions (`stowage-agent`): matched by no client,
/// given by name ([`Hosts::by_name`], `Gateway::open_session_as`).
pub const PLANNER_PROFILE: &str = "planner";

/// How long a client no profile names waits, at most, for upstreams still starting before its
/// first list is answered (from the moment its upstreams could start connecting). Below the
/// shortest start-up timeout any host is known to keep for a server (Codex CLI's 10 s), so the
/// gateway answers before the host gives up on it.
pub const DEFAULT_STARTUP_WAIT_MS: u64 = 8_000;

/// Which parts of a tool result a host puts before its model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Sees {
    /// The `content` blocks only.
    Content,
    /// `structuredContent` when the result has one (then nothing else, images included), else
    /// `content` (Codex CLI, VS Code).
    Structured,
    /// `structuredContent` instead of the text blocks when the result has one, with its
    /// images, resource links and embedded resources still shown; an error result's text
    /// blocks only (Claude Code).
    StructuredAndMedia,
    /// Both.
    Both,
}

impl Sees {
    /// Whether a text block beside `structuredContent` never reaches the model: an answer for
    /// such a host writes what the model needs once, in `structuredContent` or in `content`
    /// with no `structuredContent` at all.
    pub fn drops_text_beside_structured(self) -> bool {
        matches!(self, Sees::Structured | Sees::StructuredAndMedia)
    }

    /// Whether images beside `structuredContent` reach the model.
    pub fn shows_images_beside_structured(self) -> bool {
        self != Sees::Structured
    }
}

/// One kind of client and what a result may put before its model.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HostProfile {
    /// What configuration, logs and the playground call it (`claude-code`, `default`).
    pub name: String,
    /// `clientInfo.name` values (exact, or globs with `*` and `?`; case-insensitive).
    pub matches: Vec<String>,
    /// The most bytes of the whole serialized result (Claude Desktop's 1 MB).
    pub max_result_bytes: Option<usize>,
    /// The most bytes of text the model reads (Codex's 10 KiB, Claude Code's file spill).
    pub max_text_bytes: Option<usize>,
    /// The most lines of text the model reads (Codex's 256).
    pub max_text_lines: Option<usize>,
    /// The most o200k tokens, images counted (Claude Code's warning at 10k).
    pub max_tokens: Option<u64>,
    /// The most characters of an `isError` result's text (Claude Code cuts at ~11,000).
    pub max_error_chars: Option<usize>,
    /// Which parts of a result the model reads: what is measured and limited.
    pub sees: Sees,
    /// Whether the host handles `resource_link` blocks; when not, each becomes a text line.
    pub resource_links: bool,
    /// Whether offloaded images keep a downscaled preview in the result.
    pub image_preview: bool,
    /// Image budget: how many images a result may carry, their longest edge and their tokens
    /// (⌈w/28⌉ × ⌈h/28⌉ each).
    pub max_images: Option<usize>,
    /// Longest edge of an image the result carries, in pixels; larger ones are downscaled.
    pub max_image_edge: Option<u32>,
    /// Tokens all of a result's images may cost together.
    pub max_image_tokens: Option<u64>,
    /// Whether references carry signed download links (when links are on). `false`: the
    /// answer names `artifact://` URIs only, so no link token reaches the host's model.
    pub signed_links: bool,
    /// The longest the host's first requests wait for upstreams that are alive and still
    /// starting, in milliseconds: below the host's own start-up timeout, since a host that
    /// never lists again (Codex) would otherwise never see a slow upstream's tools. A dead
    /// upstream holds nobody up.
    pub startup_wait_ms: u64,
    /// Whether the host shows its model an `isError` result whole, as JSON, `_meta` included
    /// (Qwen Code, Gemini CLI): such a result then carries no signed link or figure in
    /// `_meta`.
    pub errors_as_json: bool,
    /// Whether the model learns that a result was an error (`isError`). Codex CLI shows an
    /// error exactly like a success: its error answers then say so in their first line.
    pub shows_error_flag: bool,
}

impl HostProfile {
    fn named(name: &str, matches: &[&str]) -> HostProfile {
        HostProfile {
            name: name.to_owned(),
            matches: matches.iter().map(|m| (*m).to_owned()).collect(),
            max_result_bytes: None,
            max_text_bytes: None,
            max_text_lines: None,
            max_tokens: None,
            max_error_chars: None,
            sees: Sees::Both,
            resource_links: true,
            image_preview: false,
            max_images: None,
            max_image_edge: None,
            max_image_tokens: None,
            signed_links: true,
            startup_wait_ms: DEFAULT_STARTUP_WAIT_MS,
            errors_as_json: false,
            shows_error_flag: true,
        }
    }

    /// [`HostProfile::startup_wait_ms`] as a duration.
    pub fn startup_wait(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.startup_wait_ms)
    }

    /// The profile of unknown clients: no budget, today's shape.
    pub fn default_profile() -> HostProfile {
        HostProfile::named(DEFAULT_PROFILE, &[])
    }

    /// Whether this profile asks for anything beyond the gateway's usual shape: the default
    /// profile does not, and its calls skip fitting altogether.
    pub fn adapts(&self) -> bool {
        self.max_result_bytes.is_some()
            || self.max_text_bytes.is_some()
            || self.max_text_lines.is_some()
            || self.max_tokens.is_some()
            || self.max_error_chars.is_some()
            || self.sees != Sees::Both
            || !self.resource_links
            || self.image_preview
            || self.max_images.is_some()
            || self.max_image_tokens.is_some()
            || !self.signed_links
            || self.errors_as_json
            || !self.shows_error_flag
    }
}

/// How long the named hosts that wait for their servers get: under the 30 s after which
/// Claude Code drops a server (`MCP_TIMEOUT`) and Codex CLI fails a required one
/// (`startup_timeout_sec`), both measured, with room for the gateway's own start.
const PATIENT_HOST_WAIT_MS: u64 = 20_000;

/// The built-in profiles, from what each host was measured to show its model (docs/results.md's host
/// table; Claude Code and Codex CLI are driven in `crates/stowage/tests/real_hosts.rs`). The
/// limits sit a little under the measured ones: a host's own framing counts too.
pub fn builtin() -> Vec<HostProfile> {
    let mut out = Vec::new();
    // Rejects any result over 1 MB ("Tool result is too large").
    let mut p = HostProfile::named("claude-desktop", &["claude-ai"]);
    p.max_result_bytes = Some(1_000_000);
    p.image_preview = true;
    p.max_image_edge = Some(1568);
    p.max_images = Some(20);
    out.push(p);
    // Claude Code 2.1.197, measured: `structuredContent`, when present, replaces every text
    // block (images and resource links stay); text over 50,000 characters is saved to a file
    // and the model gets a 2 KB preview; an error's text over 10,000 characters keeps its
    // first and last 5,000; the terminal warns at 10,000 tokens (a 25,000-token result is
    // refused). It waits for servers up to `MCP_CONNECT_TIMEOUT_MS` and drops one slower
    // than 30 s, and re-lists on list_changed.
    let mut p = HostProfile::named("claude-code", &["claude-code"]);
    p.sees = Sees::StructuredAndMedia;
    p.max_tokens = Some(10_000);
    p.max_text_bytes = Some(40_000);
    p.max_error_chars = Some(10_000);
    p.image_preview = true;
    p.max_image_edge = Some(2000);
    p.max_images = Some(8);
    p.max_image_tokens = Some(6_000);
    p.startup_wait_ms = PATIENT_HOST_WAIT_MS;
    out.push(p);
    // Codex CLI 0.169.0, measured: only `structuredContent` when present (images and text
    // dropped); about 12,000 bytes of output, cut in the middle, with no line limit; a
    // resource_link as its raw JSON; an error shown exactly like a success. A required server
    // is waited for up to 30 s; list_changed is never acted on, so its first list is all it
    // ever sees.
    let mut p = HostProfile::named("codex", &["codex-mcp-client", "codex*"]);
    p.max_text_bytes = Some(10_000);
    p.sees = Sees::Structured;
    p.resource_links = false;
    p.image_preview = true;
    p.max_image_edge = Some(2048);
    p.max_images = Some(8);
    p.shows_error_flag = false;
    p.startup_wait_ms = PATIENT_HOST_WAIT_MS;
    out.push(p);
    // VS Code shows `JSON.stringify(structuredContent)` and no text when there is one
    // (https://github.com/microsoft/vscode/issues/290063) and truncates large results; it
    // publishes no figure: 16k tokens is ours, well clear of where its truncation was seen.
    let mut p = HostProfile::named("vscode", &["Visual Studio Code*", "vscode*"]);
    p.sees = Sees::Structured;
    p.max_tokens = Some(16_000);
    p.image_preview = true;
    p.max_images = Some(8);
    out.push(p);
    // Qwen Code 0.15 (its client is named after the server's config key): text beside
    // structuredContent shown, resource links shown, an error result shown whole as JSON
    // (`_meta` included); output cut at 25,000 characters or 1,000 lines; never re-lists.
    let mut p = HostProfile::named("qwen-code", &["qwen-cli-mcp-client*", "qwen-code*"]);
    p.max_text_bytes = Some(24_900);
    p.max_text_lines = Some(990);
    p.errors_as_json = true;
    p.startup_wait_ms = PATIENT_HOST_WAIT_MS;
    out.push(p);
    // opencode 1.18: resource links dropped; output cut at 50 KiB or 2,000 lines.
    let mut p = HostProfile::named("opencode", &["opencode*"]);
    p.resource_links = false;
    p.max_text_bytes = Some(48_000);
    p.max_text_lines = Some(1_990);
    out.push(p);
    // Gemini CLI 0.61: an error result shown whole as JSON (`_meta` included); text over
    // 40,000 characters keeps its first 8,000 and last 32,000.
    let mut p = HostProfile::named("gemini-cli", &["gemini-cli-mcp-client*", "gemini-cli*"]);
    p.max_text_bytes = Some(38_000);
    p.errors_as_json = true;
    p.startup_wait_ms = PATIENT_HOST_WAIT_MS;
    out.push(p);
    // Show images; no published size limit.
    let mut p = HostProfile::named("connectors", &["cursor-vscode", "openai-mcp", "Anthropic/ClaudeAI"]);
    p.image_preview = true;
    p.max_images = Some(8);
    out.push(p);
    // The SDK defaults (the Python SDK's `mcp`, under LangChain's adapters and agno; Kiro):
    // a resource_link block kills Bedrock runs in LangChain, agno drops it, Kiro rejects it.
    let mut p = HostProfile::named("sdk", &["mcp", "langchain*", "agno*", "kiro*"]);
    p.resource_links = false;
    out.push(p);
    // Stowage's own planner: one tool result is one observation in a model request, so its
    // budget is sized for that (a 10-step run stays in the tens of kilobytes); references are
    // `artifact://` URIs, never signed links (the payload carries those for people, and a
    // link token in a model's context is a credential in a log); images as previews within a
    // vision model's budget. Matched by no client: the planner opens its sessions under it.
    let mut p = HostProfile::named(PLANNER_PROFILE, &[]);
    p.max_text_bytes = Some(12_000);
    p.max_tokens = Some(4_000);
    p.max_error_chars = Some(4_000);
    p.image_preview = true;
    p.max_images = Some(4);
    p.max_image_edge = Some(768);
    p.max_image_tokens = Some(3_000);
    p.signed_links = false;
    out.push(p);
    out
}

/// `[[hosts]]`: one profile added, or a built-in one (by `name`) overridden key by key.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostOverride {
    /// The profile's name: a built-in one (`claude-code`, `default`) to change it, any other
    /// to add one.
    pub name: String,
    /// A `clientInfo.name`, a glob, or a list of them; required for a new profile.
    #[serde(default, rename = "match", deserialize_with = "one_or_many", skip_serializing_if = "Option::is_none")]
    pub matches: Option<Vec<String>>,
    /// Bytes of the whole serialized result. Unset: the profile's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_result_bytes: Option<usize>,
    /// Bytes of text the model reads. Unset: the profile's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_text_bytes: Option<usize>,
    /// Lines of text the model reads. Unset: the profile's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_text_lines: Option<usize>,
    /// o200k tokens of the whole answer, images counted. Unset: the profile's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    /// Characters of an `isError` result's text. Unset: the profile's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_error_chars: Option<usize>,
    /// Which parts of a result the host's model reads. Unset: the profile's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sees: Option<Sees>,
    /// Whether the host handles `resource_link` blocks. Unset: the profile's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_links: Option<bool>,
    /// Whether offloaded images keep a preview in the result. Unset: the profile's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_preview: Option<bool>,
    /// Images one result may carry. Unset: the profile's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_images: Option<usize>,
    /// Longest edge of an image the result carries, in pixels. Unset: the profile's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_image_edge: Option<u32>,
    /// Tokens all of a result's images may cost together. Unset: the profile's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_image_tokens: Option<u64>,
    /// Whether references carry signed download links. Unset: the profile's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signed_links: Option<bool>,
    /// Milliseconds the host's first requests wait for upstreams still starting. Unset: the
    /// profile's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub startup_wait_ms: Option<u64>,
    /// Whether the host shows an error result whole, as JSON. Unset: the profile's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub errors_as_json: Option<bool>,
    /// Whether the host tells its model a result was an error. Unset: the profile's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shows_error_flag: Option<bool>,
}

fn one_or_many<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<String>>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(String),
        Many(Vec<String>),
    }
    Ok(Some(match OneOrMany::deserialize(d)? {
        OneOrMany::One(s) => vec![s],
        OneOrMany::Many(v) => v,
    }))
}

impl HostOverride {
    fn apply(&self, p: &mut HostProfile) {
        if let Some(m) = &self.matches {
            p.matches = m.clone();
        }
        macro_rules! take {
            ($($opt:ident),*) => { $( if self.$opt.is_some() { p.$opt = self.$opt; } )* };
        }
        take!(max_result_bytes, max_text_bytes, max_text_lines, max_tokens, max_error_chars, max_images, max_image_edge, max_image_tokens);
        if let Some(s) = self.sees {
            p.sees = s;
        }
        if let Some(r) = self.resource_links {
            p.resource_links = r;
        }
        if let Some(i) = self.image_preview {
            p.image_preview = i;
        }
        if let Some(l) = self.signed_links {
            p.signed_links = l;
        }
        if let Some(w) = self.startup_wait_ms {
            p.startup_wait_ms = w;
        }
        if let Some(e) = self.errors_as_json {
            p.errors_as_json = e;
        }
        if let Some(e) = self.shows_error_flag {
            p.shows_error_flag = e;
        }
    }
}

/// The `hosts` key of `stowage.toml`: either `[[hosts]]` profiles, or a `[hosts]` table with
/// `adapt` and `[[hosts.profiles]]` (TOML cannot have both `[hosts]` and `[[hosts]]`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HostsConfig {
    /// `false`: every client gets the default profile. Default `true`.
    pub adapt: bool,
    /// Profiles to add (matched before the built-in ones) or to change key by key.
    pub profiles: Vec<HostOverride>,
}

impl Default for HostsConfig {
    fn default() -> Self {
        HostsConfig { adapt: true, profiles: Vec::new() }
    }
}

impl<'de> Deserialize<'de> for HostsConfig {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Table {
            #[serde(default = "yes")]
            adapt: bool,
            #[serde(default)]
            profiles: Vec<HostOverride>,
        }
        fn yes() -> bool {
            true
        }
        // Read as a value first, so each form keeps its own precise error (an untagged enum
        // would only say that neither form matched).
        let v = serde_json::Value::deserialize(d)?;
        let what = |e: serde_json::Error| serde::de::Error::custom(format!("hosts: {e}"));
        if v.is_array() {
            let profiles: Vec<HostOverride> = serde_json::from_value(v).map_err(what)?;
            Ok(HostsConfig { adapt: true, profiles })
        } else {
            if let Some(a) = v.get("adapt").filter(|a| !a.is_boolean()) {
                return Err(serde::de::Error::custom(format!("hosts.adapt must be true or false, not {a}")));
            }
            let t: Table = serde_json::from_value(v).map_err(what)?;
            Ok(HostsConfig { adapt: t.adapt, profiles: t.profiles })
        }
    }
}

/// Why a hosts configuration was refused.
#[derive(Debug, thiserror::Error)]
pub enum HostsError {
    /// A profile that is not built in names no clients, so nothing would ever pick it.
    #[error("[[hosts]] \"{0}\" is a new profile and needs `match` (a clientInfo.name or a glob such as \"my-agent*\")")]
    NoMatch(String),
    /// Two entries name the same profile; which one wins would be a guess.
    #[error("[[hosts]] \"{0}\" appears twice; give each profile one entry")]
    Duplicate(String),
    /// The `default` profile was given a `match`: it is what unmatched clients get already.
    #[error("[[hosts]] \"default\" matches every client no other profile matches; remove its `match`")]
    DefaultMatch,
}

/// The profiles in force, ready to match clients against, and the image preview settings.
#[derive(Debug)]
pub struct Hosts {
    adapt: bool,
    profiles: Vec<(Vec<WildMatch>, Arc<HostProfile>)>,
    default: Arc<HostProfile>,
    /// How previews of offloaded images are made (`[transform.image_preview]`).
    pub(crate) preview: ImagePreviewConfig,
}

impl Default for Hosts {
    fn default() -> Self {
        Hosts::new(&HostsConfig::default(), &ImagePreviewConfig::default()).expect("the built-in profiles are valid")
    }
}

impl Hosts {
    /// The built-in profiles with `config`'s added and overridden; user profiles are matched
    /// before built-in ones.
    pub fn new(config: &HostsConfig, preview: &ImagePreviewConfig) -> Result<Hosts, HostsError> {
        let mut builtin = builtin();
        let mut default = HostProfile::default_profile();
        let mut added = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for o in &config.profiles {
            if !seen.insert(o.name.as_str()) {
                return Err(HostsError::Duplicate(o.name.clone()));
            }
            if o.name == DEFAULT_PROFILE {
                if o.matches.is_some() {
                    return Err(HostsError::DefaultMatch);
                }
                o.apply(&mut default);
            } else if let Some(p) = builtin.iter_mut().find(|p| p.name == o.name) {
                o.apply(p);
            } else {
                if o.matches.as_ref().is_none_or(Vec::is_empty) {
                    return Err(HostsError::NoMatch(o.name.clone()));
                }
                let mut p = HostProfile::named(&o.name, &[]);
                o.apply(&mut p);
                added.push(p);
            }
        }
        let profiles = added
            .into_iter()
            .chain(builtin)
            .map(|p| (p.matches.iter().map(|m| WildMatch::new(&spelling(m))).collect(), Arc::new(p)))
            .collect();
        Ok(Hosts { adapt: config.adapt, profiles, default: Arc::new(default), preview: preview.clone() })
    }

    /// The profile for a client that calls itself `client` (its `clientInfo.name`). Names
    /// are compared as spelled ([`spelling`]): case, spaces, `-`, `_` and `.` aside.
    pub fn profile_for(&self, client: Option<&str>) -> Arc<HostProfile> {
        let Some(name) = client.filter(|_| self.adapt) else { return self.default.clone() };
        let name = spelling(name);
        self.profiles
            .iter()
            .find(|(patterns, _)| patterns.iter().any(|p| p.matches(&name)))
            .map_or_else(|| self.default.clone(), |(_, p)| p.clone())
    }

    /// The profile for clients no other profile matches (and for every client when `adapt`
    /// is off).
    pub fn default_profile(&self) -> Arc<HostProfile> {
        self.default.clone()
    }

    /// The profile called `name` (`default` included), whatever clients it matches.
    pub fn by_name(&self, name: &str) -> Option<Arc<HostProfile>> {
        if name == self.default.name {
            return Some(self.default.clone());
        }
        self.profiles.iter().find(|(_, p)| p.name == name).map(|(_, p)| p.clone())
    }

    /// Every profile in force, matched ones first, the default last.
    pub fn profiles(&self) -> impl Iterator<Item = &HostProfile> {
        self.profiles.iter().map(|(_, p)| p.as_ref()).chain(std::iter::once(self.default.as_ref()))
    }
}

/// A client name as it is compared: lowercase, without spaces, `-`, `_` and `.`. One host
/// sends its name in several spellings over versions and forks ("Visual Studio Code",
/// "Visual-Studio-Code", "visual_studio_code"); a profile names it once.
fn spelling(name: &str) -> String {
    name.chars().filter(|c| !matches!(c, ' ' | '-' | '_' | '.')).flat_map(char::to_lowercase).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts(toml_text: &str) -> Result<Hosts, String> {
        #[derive(Deserialize)]
        struct File {
            #[serde(default)]
            hosts: HostsConfig,
        }
        let f: File = toml::from_str(toml_text).map_err(|e| e.to_string())?;
        Hosts::new(&f.hosts, &ImagePreviewConfig::default()).map_err(|e| e.to_string())
    }

    #[test]
    fn builtin_profiles_match_the_published_client_names() {
        let h = Hosts::default();
        for (client, profile) in [
            ("claude-ai", "claude-desktop"),
            ("claude-code", "claude-code"),
            ("codex-mcp-client", "codex"),
            ("Visual Studio Code", "vscode"),
            ("Visual-Studio-Code", "vscode"),
            ("visual_studio_code - Insiders", "vscode"),
            ("Claude Code", "claude-code"),
            ("qwen-cli-mcp-client-stowage", "qwen-code"),
            ("gemini-cli-mcp-client", "gemini-cli"),
            ("opencode", "opencode"),
            ("cursor-vscode", "connectors"),
            ("openai-mcp", "connectors"),
            ("Anthropic/ClaudeAI", "connectors"),
            ("mcp", "sdk"),
            ("LangChain-MCP", "sdk"),
            ("some-agent", "default"),
            ("planner", "default"),
        ] {
            assert_eq!(h.profile_for(Some(client)).name, profile, "{client}");
        }
        assert_eq!(h.profile_for(None).name, "default");
        assert!(!h.profile_for(None).adapts(), "the default profile keeps today's shape");
        assert!(h.profiles().all(|p| p.name == "default" || p.adapts()));
        let planner = h.by_name(PLANNER_PROFILE).expect("the planner's profile");
        assert!(!planner.signed_links && planner.max_tokens.is_some() && planner.image_preview);
        let off = Hosts::new(&HostsConfig { adapt: false, profiles: Vec::new() }, &ImagePreviewConfig::default()).unwrap();
        assert_eq!(off.by_name(PLANNER_PROFILE).unwrap().name, PLANNER_PROFILE, "named, not matched");
    }

    #[test]
    fn config_adds_overrides_and_turns_adaptation_off() {
        let h = hosts(
            "[[hosts]]\nname = \"my-agent\"\nmatch = \"my-agent*\"\nmax_tokens = 2000\nsees = \"content\"\n\n\
             [[hosts]]\nname = \"codex\"\nmax_text_bytes = 20000\n",
        )
        .unwrap();
        let mine = h.profile_for(Some("My-Agent 2.0"));
        assert_eq!((mine.name.as_str(), mine.max_tokens, mine.sees), ("my-agent", Some(2000), Sees::Content));
        let codex = h.profile_for(Some("codex-mcp-client"));
        assert_eq!(codex.max_text_bytes, Some(20_000), "overridden");
        assert!(!codex.resource_links && !codex.shows_error_flag, "the rest kept");
        assert_eq!(codex.sees, Sees::Structured);

        let off = hosts("[hosts]\nadapt = false\n").unwrap();
        assert_eq!(off.profile_for(Some("claude-code")).name, "default");
        let table = hosts("[hosts]\n[[hosts.profiles]]\nname = \"x\"\nmatch = [\"x\", \"y\"]\n").unwrap();
        assert_eq!(table.profile_for(Some("y")).name, "x");
    }

    #[test]
    fn bad_profiles_are_refused_with_the_fix() {
        let e = hosts("[[hosts]]\nname = \"new\"\nmax_tokens = 5\n").unwrap_err();
        assert!(e.contains("needs `match`"), "{e}");
        let e = hosts("[[hosts]]\nname = \"codex\"\nmax_tokenz = 5\n").unwrap_err();
        assert!(e.contains("max_tokenz"), "{e}");
        let e = hosts("[[hosts]]\nname = \"a\"\nmatch=\"a\"\n[[hosts]]\nname = \"a\"\nmatch=\"b\"\n").unwrap_err();
        assert!(e.contains("twice"), "{e}");
        let e = hosts("[[hosts]]\nname = \"x\"\nmatch=\"x\"\nsees = \"everything\"\n").unwrap_err();
        assert!(e.contains("everything"), "{e}");
        let e = hosts("[hosts]\nadapt = \"no\"\n").unwrap_err();
        assert!(e.contains("adapt") || e.contains("boolean"), "{e}");
    }
}
