//! Host profiles: what each kind of MCP client does with a tool result, so a result is shaped
//! to reach that host's model whole.
//!
//! Hosts differ in hard limits: Claude Desktop rejects a result over 1 MB, Claude Code fails
//! at 25k tokens and cuts error text at about 11,000 characters, Codex CLI cuts output at
//! 10 KiB or 256 lines and shows the model only `structuredContent` when there is one, and
//! LangChain, agno and Kiro choke on `resource_link` blocks. A reference the host cuts off or
//! hides is lost to the model. So the client's `clientInfo.name` (from `initialize`, or on
//! 2026-07-28 from each request's `_meta`) picks a [`HostProfile`], and the shaper
//! ([`crate::shape`]) shapes each answer within it.
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

/// Which parts of a tool result a host puts before its model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Sees {
    /// The `content` blocks only.
    Content,
    /// `structuredContent` when the result has one (then nothing else), else `content`.
    Structured,
    /// Both.
    Both,
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
        }
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
    }
}

/// The built-in profiles, from what each host publishes (README lists them with sources). The
/// limits sit a little under the published ones: a host's own framing counts too.
pub fn builtin() -> Vec<HostProfile> {
    let mut out = Vec::new();
    // Rejects any result over 1 MB ("Tool result is too large").
    let mut p = HostProfile::named("claude-desktop", &["claude-ai"]);
    p.max_result_bytes = Some(1_000_000);
    p.image_preview = true;
    p.max_image_edge = Some(1568);
    p.max_images = Some(20);
    out.push(p);
    // Warns at 10k tokens and fails at 25k (images counted); text over 50,000 characters
    // goes to a file; isError text cut at ~11,000 characters; images resized to 2000 px.
    let mut p = HostProfile::named("claude-code", &["claude-code"]);
    p.max_tokens = Some(10_000);
    p.max_text_bytes = Some(40_000);
    p.max_error_chars = Some(10_000);
    p.image_preview = true;
    p.max_image_edge = Some(2000);
    p.max_images = Some(8);
    p.max_image_tokens = Some(6_000);
    out.push(p);
    // Cuts output at 10 KiB or 256 lines; only structuredContent reaches the model when
    // present; a resource_link reaches it as raw JSON; images resized to 2048 px.
    let mut p = HostProfile::named("codex", &["codex-mcp-client", "codex*"]);
    p.max_text_bytes = Some(10_000);
    p.max_text_lines = Some(250);
    p.sees = Sees::Structured;
    p.resource_links = false;
    p.image_preview = true;
    p.max_image_edge = Some(2048);
    p.max_images = Some(8);
    out.push(p);
    // Truncates large results and points the model at a URI it cannot read. VS Code
    // publishes no figure: 16k tokens is ours, well clear of where its truncation was seen.
    let mut p = HostProfile::named("vscode", &["Visual Studio Code", "Visual Studio Code - Insiders"]);
    p.max_tokens = Some(16_000);
    p.image_preview = true;
    p.max_images = Some(8);
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
            .map(|p| (p.matches.iter().map(|m| WildMatch::new_case_insensitive(m)).collect(), Arc::new(p)))
            .collect();
        Ok(Hosts { adapt: config.adapt, profiles, default: Arc::new(default), preview: preview.clone() })
    }

    /// The profile for a client that calls itself `client` (its `clientInfo.name`).
    pub fn profile_for(&self, client: Option<&str>) -> Arc<HostProfile> {
        let Some(name) = client.filter(|_| self.adapt) else { return self.default.clone() };
        self.profiles
            .iter()
            .find(|(patterns, _)| patterns.iter().any(|p| p.matches(name)))
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
        assert_eq!(codex.max_text_lines, Some(250), "the rest kept");
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
