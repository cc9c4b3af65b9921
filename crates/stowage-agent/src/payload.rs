//! The answer contract: [`FinalPayload`] with exactly the fields docs/agent.md lists, its parts
//! ([`Source`], [`SuggestedAction`]), the published JSON Schema, and the model's own final
//! answer ([`ModelAnswer`]) with the validation that decides whether a repair round is needed
//! ([`AnswerError`]: why a reply holds no answer, in the one line that round sends back).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// A citation or reference used in the answer, read from a tool marked `produces_sources`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Source {
    /// The item's title (a field marked `source_field: "title"`), else its URL.
    pub title: String,
    /// Where the source can be read; sources are deduplicated by it (by title without one).
    #[serde(default)]
    pub url: Option<String>,
    /// The passage the tool returned with it.
    #[serde(default)]
    pub snippet: Option<String>,
    /// The tool's own score for it, as the tool gave it (no fixed scale).
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
    /// What the action needs to run (e.g. the quarter to export); empty by default.
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
    /// Follow-up actions the model proposes; empty by default.
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
    /// Anything else the model was asked to return, as it wrote it; empty by default.
    #[serde(default)]
    pub extra: Map<String, Value>,
}

impl FinalPayload {
    /// A payload with only an answer.
    pub(crate) fn answer(raw_answer: impl Into<String>) -> Self {
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

/// The JSON Schema of [`FinalPayload`], generated from the Rust types so it cannot drift from
/// what a run returns: for consumers that validate payloads or generate client types.
///
/// ```
/// let schema = stowage_agent::final_payload_schema();
/// assert_eq!(schema["required"], serde_json::json!(["raw_answer"]));
/// assert_eq!(schema["properties"]["confidence"]["maximum"], serde_json::json!(1.0));
/// ```
pub fn final_payload_schema() -> Value {
    serde_json::to_value(schemars::schema_for!(FinalPayload)).expect("a schema serialises")
}

/// What the model may write in its final answer: the payload's model-authored fields.
/// Artifacts and sources are collected by the planner, never written by the model.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct ModelAnswer {
    pub raw_answer: String,
    pub confidence: Option<f64>,
    pub route: Option<String>,
    pub suggested_actions: Vec<SuggestedAction>,
    pub requires_followup: bool,
    pub warnings: Vec<String>,
    pub language: Option<String>,
    pub extra: Map<String, Value>,
}

/// An answer read from a model's reply, and what had to be fixed to read it (one warning per
/// fix, naming the field: they go into the payload's `warnings`).
pub(crate) type Read = (ModelAnswer, Vec<String>);

/// Why a model's reply holds no usable final answer. The message is one line addressed to the
/// model: the repair round sends it back verbatim ("Your final answer is invalid: {message}"),
/// and a second fault in a row ends the run with it as the `invalid_final_answer` warning.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub(crate) enum AnswerError {
    /// A reply that is only a JSON object (or the JSON-only action's answer), without the
    /// required `raw_answer` key.
    #[error("the final answer has no \"raw_answer\" (required, a string)")]
    NoRawAnswer,
    /// A reply with no text at all (whitespace only).
    #[error("the reply is empty: write the answer")]
    EmptyReply,
    /// The answer value is JSON, but not an object (the JSON-only action's `args`).
    #[error("the final answer is not a JSON object")]
    NotAnObject,
    /// `raw_answer` is there but blank.
    #[error("\"raw_answer\" is empty")]
    EmptyRawAnswer,
    /// `raw_answer` is a list, an object or null: nothing that reads as text.
    #[error("\"raw_answer\" must be a string, not {kind}")]
    RawAnswerNotString {
        /// What it is instead, as the message says it (`a list`, `an object`, `null`).
        kind: &'static str,
    },
    /// A JSON-only action that ends the run (`next_node: null`) without the answer in `args`.
    #[error("the final action has no \"args\" with the answer (\"raw_answer\" is required)")]
    NoAnswerArgs,
    /// A JSON-only action whose `next_node` is neither a tool name nor null.
    #[error("\"next_node\" must be a tool name or null, not {next_node}")]
    BadNextNode {
        /// The value the model wrote, shown as JSON.
        next_node: Value,
    },
    /// The reply meant to be a JSON object (it starts like one, is fenced as one, or names
    /// the answer key) but is not one: cut inside a string, or not JSON.
    #[error("the final answer is not valid JSON: {0}")]
    BrokenJson(String),
    /// The JSON-only format's reply holds no action object at all (prose).
    #[error("the reply is no JSON action: reply with one JSON object {{\"thought\", \"next_node\", \"args\"}}")]
    NoAction,
    /// The JSON-only format's action is not valid JSON.
    #[error("the action is not valid JSON: {0}")]
    BrokenAction(String),
    /// A parallel plan that cannot run: why, in the model's terms.
    #[error("the parallel plan is invalid: {0}")]
    BadPlan(String),
}

impl ModelAnswer {
    /// Reads a final answer from the model's text. A JSON object with `raw_answer` (or one of
    /// [`ANSWER_ALIASES`], or the JSON-only action's `args` holding one) is the answer, its
    /// faults fixed with a warning each; an object cut only before its closing brackets is
    /// closed (with a warning); prose (text that is not meant as such an object) is the
    /// `raw_answer` itself. A reply with no answer, an object without one, and JSON that is cut
    /// inside a string or invalid are errors, in one line (the repair round sends it back).
    pub(crate) fn parse(text: &str) -> Result<Read, AnswerError> {
        match find_json(text) {
            Found::Prose => {
                let prose = text.trim();
                if prose.is_empty() {
                    return Err(AnswerError::EmptyReply);
                }
                Ok((ModelAnswer { raw_answer: prose.to_owned(), ..Default::default() }, Vec::new()))
            }
            Found::Object(m) => Self::from_object(m),
            Found::Closed(m, added) => {
                let (a, mut w) = Self::from_object(m)?;
                w.insert(0, format!("final answer: the JSON object was not closed; read with \"{added}\" added"));
                Ok((a, w))
            }
            Found::Broken(why) => Err(AnswerError::BrokenJson(why)),
        }
    }

    /// Reads an answer object: `raw_answer`, else an alias of it, else the answer inside a
    /// JSON-only action's `args` (a model that writes the action format when it need not).
    pub(crate) fn from_object(mut m: Map<String, Value>) -> Result<Read, AnswerError> {
        let mut pre = Vec::new();
        if !m.contains_key("raw_answer") {
            if let Some(alias) = ANSWER_ALIASES.iter().find(|k| m.get(**k).is_some_and(|v| v.is_string() || v.is_number())) {
                let v = m.remove(*alias).expect("found");
                pre.push(format!("final answer: \"{alias}\" read as raw_answer"));
                m.insert("raw_answer".into(), v);
            } else if let Some(Value::Object(args)) = m.get("args")
                && (args.contains_key("raw_answer") || ANSWER_ALIASES.iter().any(|k| args.contains_key(*k)))
                && m.get("next_node").is_none_or(Value::is_null)
            {
                let args = args.clone();
                let (a, mut w) = Self::from_object(args)?;
                w.insert(0, "final answer: read from the action's \"args\"".to_owned());
                return Ok((a, w));
            }
        }
        let (a, mut w) = Self::from_value(Value::Object(m))?;
        pre.append(&mut w);
        Ok((a, pre))
    }

    /// Reads an answer already parsed as JSON (the JSON-only action's `args`): unknown keys are
    /// dropped, wrong optional fields coerced or dropped, each with a warning; a missing or
    /// empty `raw_answer` is the one error.
    pub(crate) fn from_value(v: Value) -> Result<Read, AnswerError> {
        let Value::Object(mut m) = v else { return Err(AnswerError::NotAnObject) };
        let mut w = Vec::new();
        let raw_answer = match m.remove("raw_answer") {
            Some(Value::String(s)) if !s.trim().is_empty() => s,
            Some(Value::Number(n)) => {
                w.push(format!("final answer: raw_answer {n} read as a string"));
                n.to_string()
            }
            Some(Value::Bool(b)) => {
                w.push(format!("final answer: raw_answer {b} read as a string"));
                b.to_string()
            }
            Some(Value::String(_)) => return Err(AnswerError::EmptyRawAnswer),
            Some(other) => return Err(AnswerError::RawAnswerNotString { kind: kind(&other) }),
            None => return Err(AnswerError::NoRawAnswer),
        };
        let mut a = ModelAnswer { raw_answer, ..Default::default() };
        for (key, value) in m {
            match key.as_str() {
                "confidence" => a.confidence = confidence(&value, &mut w),
                "route" => match value {
                    Value::String(s) if !s.trim().is_empty() => a.route = Some(s),
                    Value::Null => {}
                    other => w.push(format!("final answer: dropped route {} (a string)", short(&other))),
                },
                "requires_followup" => match value {
                    Value::Bool(b) => a.requires_followup = b,
                    Value::String(s) if s.eq_ignore_ascii_case("true") || s.eq_ignore_ascii_case("false") => {
                        a.requires_followup = s.eq_ignore_ascii_case("true");
                        w.push(format!("final answer: requires_followup \"{s}\" read as {}", a.requires_followup));
                    }
                    Value::Null => {}
                    other => w.push(format!("final answer: dropped requires_followup {} (true or false)", short(&other))),
                },
                "warnings" => match value {
                    Value::Array(items) => {
                        for i in items {
                            match i {
                                Value::String(s) => a.warnings.push(s),
                                other => w.push(format!("final answer: dropped warning {} (a string)", short(&other))),
                            }
                        }
                    }
                    Value::String(s) => a.warnings.push(s),
                    Value::Null => {}
                    other => w.push(format!("final answer: dropped warnings {} (a list of strings)", short(&other))),
                },
                "suggested_actions" => a.suggested_actions = actions(value, &mut w),
                "language" => a.language = language(&value, &mut w),
                "extra" => match value {
                    Value::Object(e) => a.extra = e,
                    Value::Null => {}
                    other => w.push(format!("final answer: dropped extra {} (an object)", short(&other))),
                },
                _ => w.push(format!("final answer: dropped unknown key \"{key}\"")),
            }
        }
        Ok((a, w))
    }

    /// The payload this answer makes, before artifacts and sources are added.
    pub(crate) fn into_payload(self) -> FinalPayload {
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

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// A value as a warning shows it: short.
fn short(v: &Value) -> String {
    let s = v.to_string();
    if s.chars().count() > 40 { format!("{}…", s.chars().take(40).collect::<String>()) } else { s }
}

/// 0–1 as it is; a percentage (1 < c ≤ 100) read as a fraction; anything else dropped.
fn confidence(v: &Value, w: &mut Vec<String>) -> Option<f64> {
    let n = match v {
        Value::Null => return None,
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().trim_end_matches('%').trim().parse::<f64>().ok(),
        _ => None,
    };
    match n {
        Some(c) if (0.0..=1.0).contains(&c) => {
            if v.is_string() {
                w.push(format!("final answer: confidence {} read as {c}", short(v)));
            }
            Some(c)
        }
        Some(c) if c > 1.0 && c <= 100.0 => {
            let f = (c / 100.0 * 1e6).round() / 1e6;
            w.push(format!("final answer: confidence {} read as {f}", short(v)));
            Some(f)
        }
        _ => {
            w.push(format!("final answer: dropped confidence {} (a number from 0 to 1)", short(v)));
            None
        }
    }
}

fn actions(v: Value, w: &mut Vec<String>) -> Vec<SuggestedAction> {
    let items = match v {
        Value::Array(items) => items,
        Value::Null => return Vec::new(),
        other => {
            w.push(format!("final answer: dropped suggested_actions {} (a list)", short(&other)));
            return Vec::new();
        }
    };
    let mut out = Vec::new();
    for (i, item) in items.into_iter().enumerate() {
        let Value::Object(mut m) = item else {
            w.push(format!("final answer: dropped suggested_actions[{i}] (an object with action_id and label)"));
            continue;
        };
        let Some(action_id) = m.get("action_id").and_then(Value::as_str).filter(|s| !s.trim().is_empty()).map(str::to_owned) else {
            w.push(format!("final answer: dropped suggested_actions[{i}]: no action_id"));
            continue;
        };
        let label = match m.remove("label") {
            Some(Value::String(l)) if !l.trim().is_empty() => l,
            _ => {
                w.push(format!("final answer: suggested_actions[{i}] ({action_id}) has no label; its action_id is used"));
                action_id.clone()
            }
        };
        let params = match m.remove("params") {
            Some(Value::Object(p)) => p,
            None | Some(Value::Null) => Map::new(),
            Some(other) => {
                w.push(format!("final answer: dropped suggested_actions[{i}].params {} (an object)", short(&other)));
                Map::new()
            }
        };
        for k in m.keys().filter(|k| *k != "action_id") {
            w.push(format!("final answer: dropped unknown key \"{k}\" of suggested_actions[{i}]"));
        }
        out.push(SuggestedAction { action_id, label, params });
    }
    out
}

/// An ISO 639-1 code: as it is; a tag (`en-US`, `pt_BR`) or an English name (`Spanish`) read
/// as its code, with a warning; anything else dropped.
fn language(v: &Value, w: &mut Vec<String>) -> Option<String> {
    let s = match v {
        Value::Null => return None,
        Value::String(s) => s.trim(),
        other => {
            w.push(format!("final answer: dropped language {} (an ISO 639-1 code such as \"en\")", short(other)));
            return None;
        }
    };
    let lower = s.to_ascii_lowercase();
    if lower.len() == 2 && isolang::Language::from_639_1(&lower).is_some() {
        if lower != s {
            w.push(format!("final answer: language \"{s}\" read as \"{lower}\""));
        }
        return Some(lower);
    }
    let primary = lower.split(['-', '_']).next().unwrap_or_default();
    let code = if primary.len() == 2 && isolang::Language::from_639_1(primary).is_some() {
        Some(primary.to_owned())
    } else if primary.len() == 3 {
        isolang::Language::from_639_3(primary).and_then(|l| l.to_639_1()).map(str::to_owned)
    } else {
        let mut name = s.to_owned();
        if let Some(first) = name.get_mut(0..1) {
            first.make_ascii_uppercase();
        }
        isolang::Language::from_name(&name).and_then(|l| l.to_639_1()).map(str::to_owned)
    };
    match code {
        Some(c) => {
            w.push(format!("final answer: language \"{s}\" read as \"{c}\""));
            Some(c)
        }
        None => {
            w.push(format!("final answer: dropped language \"{s}\" (an ISO 639-1 code such as \"en\")"));
            None
        }
    }
}

/// Keys other planners and models put the answer under (penguiflow reads `answer`); read as
/// `raw_answer` with a warning.
pub(crate) const ANSWER_ALIASES: &[&str] = &["answer", "final_answer", "response"];

/// What a model's text holds, read for its JSON object.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Found {
    /// No JSON object meant as one: prose (possibly holding braces, as `Totals: {"q1": 5}`).
    Prose,
    /// A whole object (text after it is ignored: models add a closing remark).
    Object(Map<String, Value>),
    /// An object cut only before its closing brackets, and those brackets (`}`, `]}`), which
    /// close it.
    Closed(Map<String, Value>, String),
    /// Meant as a JSON object, but not one: why, in one line.
    Broken(String),
}

/// The JSON object in a model's text. It is meant as one when the text starts with `{`, when
/// a fence (```` ```json ````) holds one, or when prose leads into `{"raw_answer": …` (or an
/// alias); braces elsewhere in prose are prose. The object is read from its `{` to the
/// matching `}` (strings and escapes respected); one cut before its end is closed when it was
/// cut between values, and broken when it was cut inside a string or a value.
pub(crate) fn find_json(text: &str) -> Found {
    let t = text.trim();
    let region = (t.starts_with('{').then_some(t)).or_else(|| fenced_object(t)).or_else(|| keyed_object_start(t).map(|at| &t[at..]));
    let Some(region) = region else { return Found::Prose };
    let mut closers: Vec<char> = Vec::new();
    let (mut in_string, mut escaped) = (false, false);
    for (i, c) in region.char_indices() {
        if in_string {
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => in_string = true,
            '{' => closers.push('}'),
            '[' => closers.push(']'),
            '}' | ']' => {
                if closers.pop() != Some(c) {
                    return Found::Broken(format!("a '{c}' does not match its opening bracket"));
                }
                if closers.is_empty() {
                    let whole = &region[..=i];
                    return match serde_json::from_str::<Value>(whole) {
                        Ok(Value::Object(m)) => Found::Object(m),
                        Ok(_) => Found::Broken("it is not an object".into()),
                        Err(e) => Found::Broken(format!("{e}")),
                    };
                }
            }
            _ => {}
        }
    }
    if in_string {
        return Found::Broken("it was cut off inside a string".into());
    }
    // Cut between values: drop a dangling comma and close what is open.
    let head = region.trim_end();
    let head = head.strip_suffix(',').unwrap_or(head).trim_end();
    let added: String = closers.iter().rev().collect();
    match serde_json::from_str::<Value>(&format!("{head}{added}")) {
        Ok(Value::Object(m)) => Found::Closed(m, added),
        _ => Found::Broken("it was cut off before its end".into()),
    }
}

/// The body of the first fence in `t` when it holds an object (from its `{`).
fn fenced_object(t: &str) -> Option<&str> {
    let at = t.find("```")?;
    let rest = &t[at + 3..];
    // The info string (`json`, `JSON`, nothing) ends the fence's first line.
    let body = rest.trim_start_matches(|c: char| c.is_ascii_alphanumeric()).trim_start();
    let body = body.split("```").next().unwrap_or(body).trim();
    body.starts_with('{').then_some(body)
}

/// Where prose leads into an answer object: a `{` followed by `"raw_answer"` (or an alias) as
/// its first key.
fn keyed_object_start(t: &str) -> Option<usize> {
    t.match_indices('{').map(|(i, _)| i).find(|&i| {
        let after = t[i + 1..].trim_start();
        std::iter::once("raw_answer").chain(ANSWER_ALIASES.iter().copied()).any(|k| {
            after
                .strip_prefix('"')
                .and_then(|a| a.strip_prefix(k))
                .and_then(|a| a.strip_prefix('"'))
                .is_some_and(|a| a.trim_start().starts_with(':'))
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn json_is_found_where_it_is_meant_closed_when_only_its_brackets_are_missing() {
        let obj = |v: Value| v.as_object().unwrap().clone();
        assert_eq!(find_json("The total is 5."), Found::Prose);
        assert_eq!(find_json("Totals: {\"q1\": 5} and more"), Found::Prose, "braces in prose are prose");
        assert_eq!(find_json("{\"raw_answer\": \"a}b\"} trailing remark"), Found::Object(obj(json!({"raw_answer": "a}b"}))));
        assert_eq!(find_json("Sure! {\"answer\" : \"x\"}"), Found::Object(obj(json!({"answer": "x"}))));
        assert_eq!(find_json("```JSON\n{\"a\": [1, {\"b\": \"\\\"\"}]}\n```"), Found::Object(obj(json!({"a": [1, {"b": "\""}]}))));
        assert_eq!(
            find_json("{\"raw_answer\": \"x\", \"warnings\": [\"w\","),
            Found::Closed(obj(json!({"raw_answer": "x", "warnings": ["w"]})), "]}".into())
        );
        assert!(matches!(find_json("{\"raw_answer\": \"x"), Found::Broken(w) if w.contains("inside a string")));
        assert!(matches!(find_json("{\"a\": 1]}"), Found::Broken(w) if w.contains("does not match")));
        // An answer under another name, or inside an action's args, is read with a warning.
        let (a, w) = ModelAnswer::parse("{\"final_answer\": \"x\", \"thought\": \"t\"}").unwrap();
        assert_eq!(a.raw_answer, "x");
        assert_eq!(w, ["final answer: \"final_answer\" read as raw_answer", "final answer: dropped unknown key \"thought\""]);
        let (a, w) = ModelAnswer::parse(&json!({"thought": "t", "next_node": null, "args": {"raw_answer": "y"}}).to_string()).unwrap();
        assert_eq!((a.raw_answer.as_str(), w[0].as_str()), ("y", "final answer: read from the action's \"args\""));
        let (a, w) = ModelAnswer::parse("{\"raw_answer\": \"z\"").unwrap();
        assert_eq!((a.raw_answer.as_str(), w[0].as_str()), ("z", "final answer: the JSON object was not closed; read with \"}\" added"));
    }

    #[test]
    fn the_payload_has_exactly_the_documented_fields() {
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
    fn answers_are_read_leniently_and_only_a_missing_answer_is_an_error() {
        let (ok, w) = ModelAnswer::parse("```json\n{\"raw_answer\": \"42\", \"confidence\": 0.9}\n```").unwrap();
        assert_eq!((ok.raw_answer.as_str(), ok.confidence, w.len()), ("42", Some(0.9), 0));
        assert!(ModelAnswer::parse("Sure! {\"raw_answer\": \"x\"} hope this helps").is_ok());
        // Prose is the answer.
        let (a, w) = ModelAnswer::parse("The answer is 42.").unwrap();
        assert_eq!((a.raw_answer.as_str(), w.len()), ("The answer is 42.", 0));
        let (a, _) = ModelAnswer::parse("Totals: {\"q1\": 5} and more").unwrap();
        assert!(a.raw_answer.starts_with("Totals"));
        for (text, why) in [
            ("{\"result\": \"x\"}", "no \"raw_answer\""),
            ("```json\n{\"result\": \"x\"}\n```", "no \"raw_answer\""),
            ("Here it is:\n```json\n{\"total\": 5}\n```\nThanks!", "no \"raw_answer\""),
            ("{\"raw_answer\": \"The answer is ve", "cut off inside a string"),
            ("Sure: {\"raw_answer\": \"a\", \"confidence\": ", "cut off before its end"),
            ("{'raw_answer': 'single quotes'}", "not valid JSON"),
            ("{\"raw_answer\": {}}", "must be a string"),
            ("{\"raw_answer\": \"  \"}", "empty"),
            ("  ", "empty"),
        ] {
            let e = ModelAnswer::parse(text).unwrap_err().to_string();
            assert!(e.contains(why), "{text}: {e}");
            assert!(!e.contains('\n'));
        }
        // The repair round sends these lines to the model as they are: the wording is pinned.
        for (e, line) in [
            (AnswerError::NoRawAnswer, "the final answer has no \"raw_answer\" (required, a string)"),
            (AnswerError::EmptyReply, "the reply is empty: write the answer"),
            (AnswerError::NotAnObject, "the final answer is not a JSON object"),
            (AnswerError::EmptyRawAnswer, "\"raw_answer\" is empty"),
            (AnswerError::RawAnswerNotString { kind: "a list" }, "\"raw_answer\" must be a string, not a list"),
            (AnswerError::NoAnswerArgs, "the final action has no \"args\" with the answer (\"raw_answer\" is required)"),
            (AnswerError::BadNextNode { next_node: json!(5) }, "\"next_node\" must be a tool name or null, not 5"),
            (
                AnswerError::BrokenJson("it was cut off inside a string".into()),
                "the final answer is not valid JSON: it was cut off inside a string",
            ),
            (AnswerError::NoAction, "the reply is no JSON action: reply with one JSON object {\"thought\", \"next_node\", \"args\"}"),
            (AnswerError::BrokenAction("x".into()), "the action is not valid JSON: x"),
            (AnswerError::BadPlan("x".into()), "the parallel plan is invalid: x"),
        ] {
            assert_eq!(e.to_string(), line);
        }
        assert_eq!(ModelAnswer::parse("{\"raw_answer\": [1]}"), Err(AnswerError::RawAnswerNotString { kind: "a list" }));
        assert_eq!(ModelAnswer::from_value(json!("x")), Err(AnswerError::NotAnObject));
        let (a, w) = ModelAnswer::parse(
            &json!({
                "raw_answer": "Q4 grew", "thought": "done", "confidence": 92, "language": "Spanish", "route": 5,
                "suggested_actions": [{"action_id": "export_csv"}, {"label": "no id"}, {"action_id": "x", "label": "X", "params": 3}],
                "requires_followup": "false", "warnings": "stale", "artifacts": {}
            })
            .to_string(),
        )
        .unwrap();
        assert_eq!(a.confidence, Some(0.92));
        assert_eq!(a.language.as_deref(), Some("es"));
        assert_eq!(a.route, None);
        assert_eq!(a.warnings, ["stale"]);
        assert_eq!(a.suggested_actions.len(), 2);
        assert_eq!(a.suggested_actions[0].label, "export_csv");
        let all = w.join("\n");
        for needle in [
            "dropped unknown key \"thought\"",
            "dropped unknown key \"artifacts\"",
            "confidence 92 read as 0.92",
            "language \"Spanish\" read as \"es\"",
            "dropped route 5",
            "suggested_actions[0] (export_csv) has no label",
            "dropped suggested_actions[1]: no action_id",
            "dropped suggested_actions[2].params 3",
            "requires_followup \"false\" read as false",
        ] {
            assert!(all.contains(needle), "{needle} not in:\n{all}");
        }
        let lang = |l: &str| ModelAnswer::from_value(json!({"raw_answer": "x", "language": l})).unwrap().0.language;
        assert_eq!(lang("en-US"), Some("en".into()));
        assert_eq!(lang("EN"), Some("en".into()));
        assert_eq!(lang("deu"), Some("de".into()));
        assert_eq!(lang("Klingonese"), None);
        let conf = |c: Value| ModelAnswer::from_value(json!({"raw_answer": "x", "confidence": c})).unwrap().0.confidence;
        assert_eq!(conf(json!("0.5")), Some(0.5));
        assert_eq!(conf(json!(250)), None);
        assert_eq!(conf(json!(-1)), None);
    }
}
