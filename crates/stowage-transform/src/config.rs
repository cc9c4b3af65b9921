//! [`TransformConfig`]: the `[transform]` section of `stowage.toml`, composed of one section per
//! layer.
//!
//! Every field has a default (README, "Configuration: `stowage.toml`") and unknown keys are
//! refused, so a misspelt limit fails loudly instead of silently keeping its default. Each
//! layer's own section lives next to the layer's code.

use serde::{Deserialize, Serialize};

pub use crate::clamp::ClampConfig;
pub use crate::layers::base64::BinaryDetectionConfig;
pub use crate::layers::fields::{FieldRule, ToolFieldsConfig};
pub use crate::layers::hook::HookConfig;
pub use crate::layers::resource_link::ResourcesConfig;
pub use crate::layers::schema::SchemaFieldsConfig;
pub use crate::layers::size::SizeNetConfig;
pub use crate::layers::typed::TypedContentConfig;
pub use crate::tokens::TokensConfig;

/// The whole pipeline's configuration (`[transform]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TransformConfig {
    /// Decoded binaries of at most this many bytes stay inline, untouched (tiny icons, the
    /// protocol conformance scenarios' 70-byte PNG). Default 1024.
    pub inline_binary_max_bytes: u64,
    /// The ceiling on an inline string: one longer than this many characters is offloaded by
    /// the size net (L0) without counting its tokens, so a multi-megabyte string is never
    /// tokenized. Default 32000 (8000 tokens of code or prose is ~28-36K characters, and a
    /// string under the ceiling also stays under the clamp's 50000).
    pub max_inline_chars: usize,
    /// Text stays inline up to this many o200k tokens; the size net (L0) offloads a string
    /// only above it (or above `max_inline_chars`). A string of at most this many bytes is
    /// never counted: a token is at least one byte. Default 8000.
    pub max_inline_tokens: u64,
    /// L2: MCP typed content (image, audio, embedded resource blobs).
    pub typed_content: TypedContentConfig,
    /// L3: heuristic base64 detection with magic bytes.
    pub binary_detection: BinaryDetectionConfig,
    /// L1: `resource_link` handling.
    pub resources: ResourcesConfig,
    /// L4: per-tool field rules and the shipped presets.
    pub tool_fields: ToolFieldsConfig,
    /// Output-schema fields marked `"artifact": true` / `"x-artifact": true`.
    pub schema_fields: SchemaFieldsConfig,
    /// L0: the size safety net.
    pub size_net: SizeNetConfig,
    /// The final observation clamp.
    pub clamp: ClampConfig,
    /// L5: the external-command hook.
    pub hook: HookConfig,
    /// Token counting for the report.
    pub tokens: TokensConfig,
    /// The downscaled preview an offloaded image keeps in the result, for hosts whose
    /// profile shows images (the gateway makes it; see `stowage_mcp::hosts`).
    pub image_preview: ImagePreviewConfig,
}

/// `[transform.image_preview]`: an offloaded image keeps a small copy beside its reference,
/// so a vision model is not left blind. Made only for hosts whose profile asks for it
/// (`[[hosts]] image_preview`), within that profile's image budget.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ImagePreviewConfig {
    /// `false`: no previews for any host. Default `true`.
    pub enabled: bool,
    /// The preview's longest edge in pixels (a profile's smaller `max_image_edge` wins).
    /// Default 768.
    pub max_edge: u32,
    /// The most bytes of one preview (encoded, before base64). Default 98304 (96 KiB).
    pub max_bytes: usize,
}

impl Default for ImagePreviewConfig {
    fn default() -> Self {
        ImagePreviewConfig { enabled: true, max_edge: 768, max_bytes: 96 * 1024 }
    }
}

impl Default for TransformConfig {
    fn default() -> Self {
        TransformConfig {
            inline_binary_max_bytes: 1024,
            max_inline_chars: 32_000,
            max_inline_tokens: 8_000,
            typed_content: TypedContentConfig::default(),
            binary_detection: BinaryDetectionConfig::default(),
            resources: ResourcesConfig::default(),
            tool_fields: ToolFieldsConfig::default(),
            schema_fields: SchemaFieldsConfig::default(),
            size_net: SizeNetConfig::default(),
            clamp: ClampConfig::default(),
            hook: HookConfig::default(),
            tokens: TokensConfig::default(),
            image_preview: ImagePreviewConfig::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_documented_ones() {
        let c = TransformConfig::default();
        assert_eq!(c.inline_binary_max_bytes, 1024);
        // A 10000-character limit once cut a 17 KB source file to a preview the model could
        // not read past: text is now limited by tokens, the characters are a ceiling.
        assert_eq!(c.max_inline_chars, 32_000);
        assert_eq!(c.max_inline_tokens, 8_000);
        assert_eq!(c.typed_content.keep_images_under_bytes, c.inline_binary_max_bytes);
        assert_eq!(c.clamp.max_observation_chars, 50_000);
        assert_eq!(c.clamp.max_field_chars, 10_000);
        assert_eq!(c.clamp.auto_artifact_threshold, 20_000);
        assert_eq!(c.clamp.truncation_suffix, "\n... [truncated: {truncated_chars} chars]");
        assert_eq!(c.binary_detection.min_size_for_detection, 1000);
        assert!(c.tool_fields.presets);
    }

    #[test]
    fn toml_round_trip_and_unknown_keys() {
        let c = TransformConfig::default();
        let text = toml::to_string(&c).unwrap();
        let back: TransformConfig = toml::from_str(&text).unwrap();
        assert_eq!(back, c);
        assert!(toml::from_str::<TransformConfig>("max_inline_charz = 3").is_err());
        assert!(toml::from_str::<TransformConfig>("[clamp]\nmax_observation = 3").is_err());
        let partial: TransformConfig = toml::from_str("[clamp]\nmax_observation_chars = 7").unwrap();
        assert_eq!(partial.clamp.max_observation_chars, 7);
        assert_eq!(partial.clamp.max_field_chars, 10_000);
    }

    /// The `[transform]` section of the reference file lists every key with its default.
    #[test]
    fn reference_file_section_is_the_defaults() {
        let text = include_str!("../../../examples/stowage.toml");
        let file: toml::Table = toml::from_str(text).unwrap();
        let section = file.get("transform").expect("examples/stowage.toml has a [transform] section");
        let parsed: TransformConfig = section.clone().try_into().unwrap();
        assert_eq!(parsed, TransformConfig::default());
        let defaults = toml::Table::try_from(TransformConfig::default()).unwrap();
        assert_eq!(section.as_table().unwrap(), &defaults, "a key is missing from examples/stowage.toml");
    }
}
