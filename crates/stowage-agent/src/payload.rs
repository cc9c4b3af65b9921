//! The answer contract: [`FinalPayload`] with exactly the seed's fields, its parts
//! ([`Source`], [`SuggestedAction`]), the published JSON Schema, and the model's own final
//! answer ([`ModelAnswer`]) with the validation that decides whether a repair round is needed.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// A citation or reference used in the answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Source {
    pub title: String,
    #[serde(default)]
    pub url: Option<String>,
    #[serde(default)]
    pub snippet: Option<String>,
    #[serde(default)]
    pub relevance_score: Option<f64>,
}

/// A follow-up action the user might want to take.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SuggestedAction {
    /// e.g. `export_csv`, `schedule_meeting`.
    pub action_id: String,
    /// Human-readable label.
    pub label: String,
    #[serde(default)]
    pub params: Map<String, Value>,
}

/// Every run's answer: the contract between the planner and whatever consumes it.
/// All fields but `raw_answer` have defaults.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct FinalPayload {
    /// The human-readable answer text. Always present.
    pub raw_answer: String,
    /// Heavy data collected from tool outputs, keyed by tool name, then field. A value up to
    /// `agent.inline_artifact_max_bytes` is inlined; above that it is a reference
    /// (`{"$artifact": {id, uri, mime_type, size_bytes, sha256, url, expires_at}}`).
    #[serde(default)]
    pub artifacts: Map<String, Value>,
    /// The agent's confidence in the answer, 0.0–1.0.
    #[serde(default)]
    #[schemars(range(min = 0.0, max = 1.0))]
    pub confidence: Option<f64>,
    /// Citations collected from tools marked `produces_sources`, deduplicated.
    #[serde(default)]
    pub sources: Vec<Source>,
    /// Categorization of the answer: `knowledge_base`, `calculation`, `clarification`, …
    #[serde(default)]
    pub route: Option<String>,
    #[serde(default)]
    pub suggested_actions: Vec<SuggestedAction>,
    /// True when the answer is a question to the user; a later run in the same session
    /// continues the conversation.
    #[serde(default)]
    pub requires_followup: bool,
    /// Non-fatal issues: `max_steps_reached`, `invalid_final_answer`, …
    #[serde(default)]
    pub warnings: Vec<String>,
    /// ISO 639-1 language code of the answer.
    #[serde(default)]
    pub language: Option<String>,
    #[serde(default)]
    pub extra: Map<String, Value>,
}

impl FinalPayload {
    /// A payload with only an answer.
    pub fn answer(raw_answer: impl Into<String>) -> Self {
        FinalPayload {
            raw_answer: raw_answer.into(),
            artifacts: Map::new(),
            confidence: None,
            sources: Vec::new(),
            route: None,
            suggested_actions: Vec::new(),
            requires_followup: false,
            warnings: Vec::new(),
            language: None,
            extra: Map::new(),
        }
    }
}

/// The JSON Schema of [`FinalPayload`], generated from the Rust types.
pub fn final_payload_schema() -> Value {
    serde_json::to_value(schemars::schema_for!(FinalPayload)).expect("a schema serialises")
}

/// What the model may write in its final answer: the payload's model-authored fields.
/// Artifacts and sources are collected by the planner, never written by the model.
#[derive(Debug, Clone, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ModelAnswer {
    pub raw_answer: String,
    #[serde(default)]
    pub confidence: Option<f64>,
    #[serde(default)]
    pub route: Option<String>,
    #[serde(default)]
    pub suggested_actions: Vec<SuggestedAction>,
    #[serde(default)]
    pub requires_followup: bool,
    #[serde(default)]
    pub warnings: Vec<String>,
    #[serde(default)]
    pub language: Option<String>,
    #[serde(default)]
    pub extra: Map<String, Value>,
}

impl ModelAnswer {
    /// Parses a final answer, naming what is wrong in one line (the repair round sends it
    /// back to the model).
    pub fn parse(text: &str) -> Result<ModelAnswer, String> {
        let json = extract_json_object(text).ok_or_else(|| "the final answer is not a JSON object".to_owned())?;
        Self::from_value(json)
    }

    /// Validates an answer already parsed as JSON (the JSON-only action's `args`).
    pub fn from_value(v: Value) -> Result<ModelAnswer, String> {
        if v.get("raw_answer").is_none() {
            return Err("the final answer has no \"raw_answer\" (required, a string)".to_owned());
        }
        let a: ModelAnswer = serde_json::from_value(v).map_err(|e| format!("the final answer does not match the schema: {e}"))?;
        if a.raw_answer.trim().is_empty() {
            return Err("\"raw_answer\" is empty".to_owned());
        }
        if let Some(c) = a.confidence
            && !(0.0..=1.0).contains(&c)
        {
            return Err(format!("\"confidence\" must be between 0 and 1, not {c}"));
        }
        Ok(a)
    }

    /// The payload this answer makes, before artifacts and sources are added.
    pub fn into_payload(self) -> FinalPayload {
        FinalPayload {
            raw_answer: self.raw_answer,
            artifacts: Map::new(),
            confidence: self.confidence,
            sources: Vec::new(),
            route: self.route,
            suggested_actions: self.suggested_actions,
            requires_followup: self.requires_followup,
            warnings: self.warnings,
            language: self.language,
            extra: self.extra,
        }
    }
}

/// The JSON object in a model's text: the whole text, or the part inside a ```json fence,
/// or from the first `{` to the last `}` (models wrap JSON in prose despite being told not to).
pub(crate) fn extract_json_object(text: &str) -> Option<Value> {
    let t = text.trim();
    let t = t.strip_prefix("```json").or_else(|| t.strip_prefix("```")).map(|s| s.trim_end().trim_end_matches("```")).unwrap_or(t);
    if let Ok(v @ Value::Object(_)) = serde_json::from_str::<Value>(t.trim()) {
        return Some(v);
    }
    let (start, end) = (t.find('{')?, t.rfind('}')?);
    match serde_json::from_str::<Value>(t.get(start..=end)?) {
        Ok(v @ Value::Object(_)) => Some(v),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_payload_has_exactly_the_seeds_fields() {
        let v = serde_json::to_value(FinalPayload::answer("hi")).unwrap();
        let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            [
                "raw_answer",
                "artifacts",
                "confidence",
                "sources",
                "route",
                "suggested_actions",
                "requires_followup",
                "warnings",
                "language",
                "extra"
            ]
        );
        let schema = final_payload_schema();
        assert_eq!(schema["required"], json!(["raw_answer"]));
        assert_eq!(schema["properties"]["confidence"]["minimum"], json!(0.0));
        assert_eq!(schema["properties"]["confidence"]["maximum"], json!(1.0));
        assert!(schema["$defs"]["Source"].is_object(), "{schema}");
    }

    #[test]
    fn answers_are_validated_with_a_one_line_reason() {
        let ok = ModelAnswer::parse("```json\n{\"raw_answer\": \"42\", \"confidence\": 0.9}\n```").unwrap();
        assert_eq!((ok.raw_answer.as_str(), ok.confidence), ("42", Some(0.9)));
        assert!(ModelAnswer::parse("Sure! {\"raw_answer\": \"x\"} hope this helps").is_ok());
        for (text, why) in [
            ("just prose", "not a JSON object"),
            ("{\"answer\": \"x\"}", "no \"raw_answer\""),
            ("{\"raw_answer\": 3}", "does not match"),
            ("{\"raw_answer\": \"x\", \"confidence\": 7}", "between 0 and 1"),
            ("{\"raw_answer\": \"  \"}", "empty"),
            ("{\"raw_answer\": \"x\", \"artifacts\": {}}", "unknown field"),
        ] {
            let e = ModelAnswer::parse(text).unwrap_err();
            assert!(e.contains(why), "{text}: {e}");
            assert!(!e.contains('\n'));
        }
    }
}
