//! `[gateway.chaining]`: per-tool input rules, detection, and the hosts the gateway may fetch
//! from.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Deserializer, Serialize};

/// How an `artifact://` URI found in a tool's arguments reaches a tool that declares nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum InputMode {
    /// A short-lived signed GET URL with a read-only token.
    Url,
    /// The bytes, base64 (standard alphabet, padded), for tools that only accept inline data.
    Base64,
    /// The UTF-8 content (an artifact that is not UTF-8 is refused).
    Text,
    /// A local file path (stdio upstreams on this machine): read-only, removed after the call.
    Path,
}

impl InputMode {
    /// The name configuration and events use (`url`, `base64`, `text`, `path`).
    pub fn as_str(self) -> &'static str {
        match self {
            InputMode::Url => "url",
            InputMode::Base64 => "base64",
            InputMode::Text => "text",
            InputMode::Path => "path",
        }
    }

    fn parse(s: &str) -> Option<InputMode> {
        [InputMode::Url, InputMode::Base64, InputMode::Text, InputMode::Path].into_iter().find(|m| m.as_str() == s)
    }
}

impl fmt::Display for InputMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One rule: a form, or `off` (not chained at all).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// Not chained: URIs stay as the model wrote them, and detection leaves it alone.
    Off,
    /// Chained in this form.
    Mode(InputMode),
}

impl Rule {
    fn parse(s: &str) -> Option<Rule> {
        if s == "off" { Some(Rule::Off) } else { InputMode::parse(s).map(Rule::Mode) }
    }

    /// The rule as configuration spells it (`off`, or the form's name).
    pub fn as_str(self) -> &'static str {
        match self {
            Rule::Off => "off",
            Rule::Mode(m) => m.as_str(),
        }
    }
}

impl Serialize for Rule {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

const RULES: &str = "\"url\", \"base64\", \"text\", \"path\" or \"off\"";

impl<'de> Deserialize<'de> for Rule {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Rule::parse(&s).ok_or_else(|| serde::de::Error::custom(format!("unknown input rule {s:?}: use {RULES}")))
    }
}

/// A tool's entry in `[gateway.chaining.inputs]`: one rule for every URI in its arguments
/// (`"base64"`, …, or `"off"`: no chaining and no detection), or a table of rules by property
/// path (`"attachments[].content_base64" = "base64"`, `"notes" = "off"`) that override what
/// detection found for those properties only.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum ToolRule {
    /// One rule for the whole tool.
    Tool(Rule),
    /// Rules by property path, over what detection found.
    Properties(BTreeMap<String, Rule>),
}

impl From<InputMode> for ToolRule {
    fn from(m: InputMode) -> Self {
        ToolRule::Tool(Rule::Mode(m))
    }
}

impl<'de> Deserialize<'de> for ToolRule {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = ToolRule;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{RULES}, or a table of property paths to one of those")
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<ToolRule, E> {
                Rule::parse(s).map(ToolRule::Tool).ok_or_else(|| E::custom(format!("unknown input rule {s:?}: use {RULES}")))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<ToolRule, A::Error> {
                let mut props = BTreeMap::new();
                while let Some((k, v)) = map.next_entry::<String, Rule>()? {
                    props.insert(k, v);
                }
                Ok(ToolRule::Properties(props))
            }
        }
        d.deserialize_any(V)
    }
}

/// `[gateway.chaining]` in stowage.toml.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ChainingConfig {
    /// Detect the inputs that take file bytes from each tool's input schema (base64, URL,
    /// path or text properties) and fill `artifact://` URIs given there in the form each asks
    /// for. `false`: only declared blobs and the rules in `inputs` are chained.
    pub auto: bool,
    /// Exposed tool name → a rule for every `artifact://` URI in its arguments (`url`,
    /// `base64`, `text`, `path`), `off` (no chaining, no detection), or a table of rules by
    /// property path that override detection for those properties.
    pub inputs: BTreeMap<String, ToolRule>,
    /// Hosts the gateway fetches `https://` URLs from on the model's behalf (for `base64`,
    /// `text` and `path` tools). Exact host names, no wildcards; empty fetches from nowhere.
    pub fetch_allowed_hosts: Vec<String>,
    /// Lifetime of the signed GET links handed to tools (`url` mode), in seconds (60–3600).
    pub input_link_ttl_secs: u64,
    /// Largest artifact or fetched body materialized inline or as a file (`base64`, `text`,
    /// `path`), in bytes; larger ones are refused with a hint to use `url`.
    pub max_materialize_bytes: u64,
    /// Most bytes one call may materialize in all (every artifact and fetched body put inline
    /// or in a file for it): the gateway holds them, and the upstream is sent them, at once.
    /// A call over it is refused before anything is read or the upstream is called.
    pub max_materialize_bytes_per_call: u64,
    /// Most bytes one call may have written to temporary files (`path` inputs), in all.
    pub max_file_bytes_per_call: u64,
    /// Largest body a tool may upload to one output blob's slot, in bytes (the store's
    /// `retention.max_artifact_bytes` applies too).
    pub max_output_bytes: u64,
    /// `url` tools get the storage backend's own presigned URL instead of a gateway link, so
    /// the bytes go from the bucket to the tool without passing through the gateway. Only
    /// with `[store] backend = "s3"` (refused otherwise). Links for people always go through
    /// the gateway: a presigned URL names the bucket.
    pub presign_direct: bool,
}

impl Default for ChainingConfig {
    fn default() -> Self {
        ChainingConfig {
            auto: true,
            inputs: BTreeMap::new(),
            fetch_allowed_hosts: Vec::new(),
            input_link_ttl_secs: 300,
            max_materialize_bytes: 16 << 20,
            max_materialize_bytes_per_call: 64 << 20,
            max_file_bytes_per_call: 64 << 20,
            max_output_bytes: 50 << 20,
            presign_direct: false,
        }
    }
}

impl ChainingConfig {
    /// How long a signed input link stays valid: `input_link_ttl_secs` held to 1–60 minutes.
    pub(crate) fn input_link_ttl(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.input_link_ttl_secs.clamp(60, 3600))
    }

    /// Whether the gateway may fetch from `host` (compared without case, as DNS does).
    pub fn may_fetch(&self, host: &str) -> bool {
        self.fetch_allowed_hosts.iter().any(|h| h.eq_ignore_ascii_case(host))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Deserialize)]
    struct Doc {
        inputs: BTreeMap<String, ToolRule>,
    }

    #[test]
    fn rules_read_as_a_mode_off_or_a_table_of_properties() {
        let doc: Doc =
            toml::from_str("[inputs]\na = \"base64\"\nb = \"off\"\n[inputs.c]\n\"attachments[].data\" = \"url\"\nnotes = \"off\"\n")
                .unwrap();
        assert_eq!(doc.inputs["a"], ToolRule::Tool(Rule::Mode(InputMode::Base64)));
        assert_eq!(doc.inputs["b"], ToolRule::Tool(Rule::Off));
        let ToolRule::Properties(c) = &doc.inputs["c"] else { panic!("{:?}", doc.inputs["c"]) };
        assert_eq!(c["attachments[].data"], Rule::Mode(InputMode::Url));
        assert_eq!(c["notes"], Rule::Off);
        let e = toml::from_str::<Doc>("[inputs]\na = \"bytes\"\n").err().unwrap().to_string();
        assert!(e.contains("unknown input rule \"bytes\": use \"url\", \"base64\", \"text\", \"path\" or \"off\""), "{e}");
        let e = toml::from_str::<Doc>("[inputs.c]\nx = \"nope\"\n").err().unwrap().to_string();
        assert!(e.contains("unknown input rule \"nope\""), "{e}");
    }
}
