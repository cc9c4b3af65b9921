//! The final observation clamp: whatever the layers left, the observation the model reads is at
//! most `max_observation_chars` characters.
//!
//! It runs last, after every artifact was collected and stored, so a marked or offloaded field
//! is never lost to it: stubs are short and survive truncation, and the report already lists
//! every artifact. Over the limit, the whole observation is stored as a JSON artifact when the
//! sink keeps bytes (and the observation is over `auto_artifact_threshold`); otherwise, or when
//! that store fails, it is truncated with its structure kept: long strings are cut with the
//! `truncation_suffix`, then the largest arrays and objects are halved until it fits.
//!
//! Each clamp emits an `observation_clamped` event: a `tracing` warning (target
//! `stowage::observation_clamped`), the process-wide [`observations_clamped`] counter, and the
//! pipeline's [`ClampListener`], if one is set.

use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::stub;

/// `[transform.clamp]`: the final observation guardrail.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClampConfig {
    /// Apply the clamp. Default true.
    pub enabled: bool,
    /// The most characters of JSON an observation may have. Default 50000.
    pub max_observation_chars: usize,
    /// When truncating, strings are first cut to this many characters. Default 10000.
    pub max_field_chars: usize,
    /// An over-limit observation larger than this is stored whole as an artifact (when the
    /// sink keeps bytes) instead of truncated. Default 20000.
    pub auto_artifact_threshold: usize,
    /// Appended where something was cut; `{truncated_chars}` is how many characters (or items)
    /// went. Default "\n... [truncated: {truncated_chars} chars]".
    pub truncation_suffix: String,
}

impl Default for ClampConfig {
    fn default() -> Self {
        ClampConfig {
            enabled: true,
            max_observation_chars: 50_000,
            max_field_chars: 10_000,
            auto_artifact_threshold: 20_000,
            truncation_suffix: "\n... [truncated: {truncated_chars} chars]".to_owned(),
        }
    }
}

impl ClampConfig {
    /// The suffix with its placeholder filled.
    pub fn suffix(&self, truncated_chars: usize) -> String {
        self.truncation_suffix.replace("{truncated_chars}", &truncated_chars.to_string())
    }
}

/// One `observation_clamped` event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ClampEvent {
    /// The tool whose observation was clamped.
    pub tool: String,
    /// Characters of JSON before.
    pub original_chars: usize,
    /// Characters of JSON after.
    pub clamped_chars: usize,
    /// True when the observation went to an artifact, false when it was truncated.
    pub stored: bool,
}

/// A subscriber to `observation_clamped` events (the gateway's SSE stream, metrics).
pub type ClampListener = std::sync::Arc<dyn Fn(&ClampEvent) + Send + Sync>;

static CLAMPED: AtomicU64 = AtomicU64::new(0);

/// How many observations this process has clamped.
pub fn observations_clamped() -> u64 {
    CLAMPED.load(Ordering::Relaxed)
}

pub(crate) fn emit(event: &ClampEvent, listener: Option<&ClampListener>) {
    CLAMPED.fetch_add(1, Ordering::Relaxed);
    tracing::warn!(
        target: "stowage::observation_clamped",
        tool = %event.tool,
        original_chars = event.original_chars,
        clamped_chars = event.clamped_chars,
        stored = event.stored,
        "observation clamped"
    );
    if let Some(l) = listener {
        l(event);
    }
}

/// Characters of the compact JSON of `v` (bytes bound it from above, so most calls skip the
/// char count).
pub(crate) fn json_chars(v: &Value) -> usize {
    let s = serde_json::to_string(v).expect("a Value always serialises");
    if s.is_ascii() { s.len() } else { s.chars().count() }
}

/// The replacement for an observation stored whole: for a `CallToolResult` a text block and a
/// `resource_link` (and `isError` kept); otherwise the JSON preview object.
pub(crate) fn stored_replacement(
    original_is_ctr: bool,
    is_error: Option<Value>,
    r: &stowage_core::ArtifactRef,
    summary: &str,
    preview: Value,
    schema: Value,
) -> Value {
    if original_is_ctr {
        let mut m = Map::new();
        let text = format!("{} Preview: {}", stub::string_stub(r, summary), stub::one_line(&preview.to_string(), 2000));
        m.insert("content".into(), json!([stub::text_block(text), stub::resource_link_block(r)]));
        if let Some(e) = is_error {
            m.insert("isError".into(), e);
        }
        Value::Object(m)
    } else {
        json!({"$artifact": crate::work::artifact_object(r, summary), "preview": preview, "schema": schema})
    }
}

/// Truncates `v` in place until its JSON is at most `config.max_observation_chars` characters,
/// keeping its structure. Strings that hold an artifact stub are never cut.
pub(crate) fn truncate(v: &mut Value, config: &ClampConfig) {
    cut_strings(v, config.max_field_chars, config);
    // Then halve the largest container until it fits; bounded so it always ends.
    for _ in 0..64 {
        let size = json_chars(v);
        if size <= config.max_observation_chars {
            return;
        }
        if !halve_largest(v, config) {
            break;
        }
    }
    let size = json_chars(v);
    if size > config.max_observation_chars {
        // Nothing left to halve (e.g. one giant key set): cut the serialisation itself.
        let text = serde_json::to_string(v).expect("serialises");
        let keep = config.max_observation_chars.saturating_sub(64);
        let kept: String = text.chars().take(keep).collect();
        *v = Value::String(format!("{kept}{}", config.suffix(size - keep)));
    }
}

fn is_stub_string(s: &str) -> bool {
    s.len() <= 4096 && s.contains(stowage_core::ARTIFACT_URI_SCHEME)
}

fn cut_strings(v: &mut Value, max: usize, config: &ClampConfig) {
    match v {
        Value::String(s) if s.len() > max && !is_stub_string(s) => {
            let total = s.chars().count();
            if total > max {
                let kept: String = s.chars().take(max).collect();
                *s = format!("{kept}{}", config.suffix(total - max));
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|i| cut_strings(i, max, config)),
        Value::Object(m) => m.values_mut().for_each(|i| cut_strings(i, max, config)),
        _ => {}
    }
}

/// Finds the node to shrink and halves it: arrays keep their first half (plus any item that
/// holds an artifact stub) and a marker string; objects their first half of keys (likewise)
/// and a `"…"` key; strings their first half and the suffix. Returns false when nothing can
/// shrink.
fn halve_largest(v: &mut Value, config: &ClampConfig) -> bool {
    let path = find_target(v);
    let Some(node) = v.pointer_mut(&path) else { return false };
    match node {
        Value::Array(items) if items.len() > 1 => {
            let keep = items.len() / 2;
            let mut kept: Vec<Value> = Vec::with_capacity(keep + 1);
            let mut dropped = 0;
            for (i, item) in std::mem::take(items).into_iter().enumerate() {
                if i < keep || contains_stub(&item) {
                    kept.push(item);
                } else {
                    dropped += 1;
                }
            }
            *items = kept;
            if dropped == 0 {
                return false;
            }
            items.push(Value::String(config.suffix(dropped).trim_start().replace("chars", "items")));
            true
        }
        Value::Object(m) if m.len() > 1 => {
            let keep = m.len() / 2;
            let old = std::mem::take(m);
            let mut dropped = 0;
            for (i, (k, item)) in old.into_iter().enumerate() {
                if i < keep || contains_stub(&item) {
                    m.insert(k, item);
                } else {
                    dropped += 1;
                }
            }
            if dropped == 0 {
                return false;
            }
            m.insert("…".into(), Value::String(config.suffix(dropped).trim_start().replace("chars", "keys")));
            true
        }
        Value::String(s) if s.chars().count() > 64 && !is_stub_string(s) => {
            let total = s.chars().count();
            let keep = total / 2;
            let kept: String = s.chars().take(keep).collect();
            *s = format!("{kept}{}", config.suffix(total - keep));
            true
        }
        _ => false,
    }
}

/// Walks down from the root while one child makes up at least half of its parent and can
/// itself shrink: halving that child cuts the most while touching the least.
fn find_target(v: &Value) -> String {
    let mut ptr = String::new();
    let mut node = v;
    loop {
        let size = approx_len(node);
        let mut best: Option<(usize, String, &Value)> = None;
        match node {
            Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    let s = approx_len(item);
                    if best.as_ref().is_none_or(|b| s > b.0) {
                        best = Some((s, format!("/{i}"), item));
                    }
                }
            }
            Value::Object(m) => {
                for (k, item) in m {
                    let s = approx_len(item);
                    if best.as_ref().is_none_or(|b| s > b.0) {
                        let mut seg = String::new();
                        crate::path::push_key(&mut seg, k);
                        best = Some((s, seg, item));
                    }
                }
            }
            _ => return ptr,
        }
        match best {
            Some((s, seg, child)) if s * 2 >= size && shrinkable(child) => {
                ptr.push_str(&seg);
                node = child;
            }
            _ => return ptr,
        }
    }
}

fn shrinkable(v: &Value) -> bool {
    match v {
        Value::Array(items) => items.len() > 1,
        Value::Object(m) => m.len() > 1,
        Value::String(s) => s.len() > 64 && !is_stub_string(s),
        _ => false,
    }
}

fn approx_len(v: &Value) -> usize {
    match v {
        Value::Array(items) => 2 + items.iter().map(|i| approx_len(i) + 1).sum::<usize>(),
        Value::Object(m) => 2 + m.iter().map(|(k, i)| k.len() + 4 + approx_len(i)).sum::<usize>(),
        Value::String(s) => s.len() + 2,
        other => other.to_string().len(),
    }
}

fn contains_stub(v: &Value) -> bool {
    match v {
        Value::String(s) => is_stub_string(s),
        Value::Array(items) => items.iter().any(contains_stub),
        Value::Object(m) => m.values().any(contains_stub),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(max: usize) -> ClampConfig {
        ClampConfig { max_observation_chars: max, max_field_chars: max / 2, ..ClampConfig::default() }
    }

    #[test]
    fn truncation_keeps_structure_and_fits() {
        let cases = vec![
            json!({"rows": (0..5000).map(|i| json!({"i": i, "s": "abcdefghij"})).collect::<Vec<_>>(), "meta": {"n": 5000}}),
            json!({"text": "x".repeat(100_000)}),
            json!((0..3000).map(|i| format!("item number {i}")).collect::<Vec<_>>()),
            json!({"a": "é".repeat(30_000), "b": (0..2000).collect::<Vec<_>>()}),
            Value::Object((0..4000).map(|i| (format!("key{i}"), json!(i))).collect()),
        ];
        for mut v in cases {
            let before = v.clone();
            truncate(&mut v, &cfg(5_000));
            assert!(json_chars(&v) <= 5_000, "{} chars", json_chars(&v));
            // Structure kept: same JSON type at the root.
            assert_eq!(std::mem::discriminant(&v), std::mem::discriminant(&before));
        }
    }

    #[test]
    fn stubs_survive_truncation() {
        let stub = "PDF document (1.0 MB) stored as artifact://t_0123456789abcdef [application/pdf, sha256:0123456789ab]";
        let mut items: Vec<Value> = (0..4000).map(|i| json!(format!("filler {i}"))).collect();
        items.push(json!({"file": stub}));
        let mut v = json!({"items": items});
        truncate(&mut v, &cfg(3_000));
        assert!(json_chars(&v) <= 3_000);
        assert!(v.to_string().contains("artifact://t_0123456789abcdef"));
    }

    #[test]
    fn suffix_is_filled() {
        let mut v = json!({"s": "y".repeat(20_000)});
        truncate(&mut v, &cfg(12_000));
        let s = v["s"].as_str().unwrap();
        assert!(s.ends_with("\n... [truncated: 14000 chars]"), "{}", &s[s.len() - 40..]);
    }
}
