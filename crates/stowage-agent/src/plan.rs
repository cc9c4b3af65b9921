//! Parallel plans (docs/agent.md): one action runs several tool calls at
//! once (`plan`: `[{"node", "args"}]`), and optionally a join tool after them (`join`:
//! `{"node", "args", "inject"}`) whose arguments `inject` fills from the branches' outcomes,
//! so the join receives their results whole without the model copying them.
//!
//! The JSON-only action format carries `plan` and `join` beside `"next_node": null`; with
//! native tool calling the model calls the planner's own `parallel_plan` tool with the same
//! two keys (independent calls need no plan there: the calls of one reply run concurrently).
//!
//! `inject` maps a join argument to one of the sources: `$results` (the results of the
//! branches that succeeded, in plan order), `$branches` (every branch: `{node, args,
//! observation}` or `{node, args, error}`), `$failures` (`{node, args, error}` of those that
//! failed), `$success_count`, `$failure_count`, `$expect` (how many branches ran). A mapping
//! may be wrapped as `{"mapping": {…}}`. Without `inject`, the older implicit rule
//! applies: a join whose input schema has a property of one of those names (`results`,
//! `branches`, `failures`, `success_count`, `failure_count`, `expect`) not set in `args`
//! gets it. When a branch failed, a join that asks for none of `$failures`, `$branches`,
//! `$failure_count` is not run (its `$results` would be short without it knowing); the model
//! is told which branches failed and why.

use serde_json::{Map, Value, json};

use crate::model::MAX_CALLS_PER_REPLY;
use crate::model::names::ToolNames;

/// The name the planner's own plan tool is offered under (native tool calling).
pub(crate) const PLAN_TOOL: &str = "parallel_plan";

/// One injection source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Source {
    Results,
    Branches,
    Failures,
    SuccessCount,
    FailureCount,
    Expect,
}

impl Source {
    const ALL: [(&'static str, Source); 6] = [
        ("$results", Source::Results),
        ("$branches", Source::Branches),
        ("$failures", Source::Failures),
        ("$success_count", Source::SuccessCount),
        ("$failure_count", Source::FailureCount),
        ("$expect", Source::Expect),
    ];

    fn parse(s: &str) -> Option<Source> {
        Source::ALL.iter().find(|(n, _)| *n == s).map(|(_, src)| *src)
    }

    /// Whether a join that asks for it hears about failed branches.
    fn tells_failures(self) -> bool {
        matches!(self, Source::Branches | Source::Failures | Source::FailureCount)
    }
}

/// One branch of a plan: the tool (its gateway name) and its arguments.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Branch {
    pub node: String,
    pub args: Value,
}

/// The join step.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Join {
    pub node: String,
    pub args: Map<String, Value>,
    /// Argument → source; `None`: no `inject` was given (the implicit rule).
    pub inject: Option<Vec<(String, Source)>>,
}

/// A parallel plan, validated.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Plan {
    pub branches: Vec<Branch>,
    /// Branches beyond the 16 one plan may run: counted, never run.
    pub dropped: usize,
    pub join: Option<Join>,
}

/// How one branch ended, as the join's sources see it.
#[derive(Debug, Clone)]
pub(crate) struct Outcome {
    pub node: String,
    pub args: Value,
    /// The result (`Ok`: the tool's structured result, else its text) or why it failed.
    pub result: Result<Value, String>,
}

/// Reads `{"plan": [...], "join": {...}}` (the JSON-only action, or the plan tool's arguments);
/// tool names are the ones the model was shown, mapped back to the gateway's. The error is one
/// line for the model.
pub(crate) fn parse(v: &Value, names: &ToolNames) -> Result<Plan, String> {
    let items = match v.get("plan") {
        Some(Value::Array(items)) if !items.is_empty() => items,
        Some(Value::Array(_)) => return Err("\"plan\" is empty: list the calls as [{\"node\": \"tool\", \"args\": {…}}, …]".into()),
        _ => return Err("\"plan\" must be a list of calls [{\"node\": \"tool\", \"args\": {…}}, …]".into()),
    };
    let mut branches = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let Some(node) = item.get("node").and_then(Value::as_str).filter(|n| !n.trim().is_empty()) else {
            return Err(format!("plan[{i}] has no \"node\" (the tool to call)"));
        };
        let args = match item.get("args") {
            None | Some(Value::Null) => json!({}),
            Some(a @ Value::Object(_)) => a.clone(),
            Some(other) => return Err(format!("plan[{i}].args of {node} must be a JSON object, not {other}")),
        };
        branches.push(Branch { node: names.mcp(node).to_owned(), args });
    }
    let dropped = branches.len().saturating_sub(MAX_CALLS_PER_REPLY);
    branches.truncate(MAX_CALLS_PER_REPLY);
    let join = match v.get("join") {
        None | Some(Value::Null) => None,
        Some(Value::Object(j)) => Some(parse_join(j, names)?),
        Some(other) => return Err(format!("\"join\" must be an object {{\"node\", \"args\", \"inject\"}}, not {other}")),
    };
    Ok(Plan { branches, dropped, join })
}

fn parse_join(j: &Map<String, Value>, names: &ToolNames) -> Result<Join, String> {
    let Some(node) = j.get("node").and_then(Value::as_str).filter(|n| !n.trim().is_empty()) else {
        return Err("\"join\" has no \"node\" (the tool that receives the results)".into());
    };
    let args = match j.get("args") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(a)) => a.clone(),
        Some(other) => return Err(format!("join.args must be a JSON object, not {other}")),
    };
    let inject = match j.get("inject") {
        None | Some(Value::Null) => None,
        Some(Value::Object(m)) => {
            // `{"mapping": {…}}` and the bare mapping alike.
            let m = match m.get("mapping") {
                Some(Value::Object(inner)) if m.len() == 1 => inner,
                _ => m,
            };
            let mut out = Vec::new();
            for (arg, src) in m {
                let parsed = src.as_str().and_then(Source::parse).ok_or_else(|| {
                    let all: Vec<&str> = Source::ALL.iter().map(|(n, _)| *n).collect();
                    format!("join.inject.{arg} is {src}: use one of {}", all.join(", "))
                })?;
                out.push((arg.clone(), parsed));
            }
            Some(out)
        }
        Some(other) => return Err(format!("join.inject must map join arguments to sources such as \"$results\", not {other}")),
    };
    Ok(Join { node: names.mcp(node).to_owned(), args, inject })
}

/// The join's arguments from the branches' outcomes, or why it is not run (one line).
/// `input_schema` is the join tool's, for the implicit rule.
pub(crate) fn join_arguments(join: &Join, outcomes: &[Outcome], input_schema: Option<&Value>) -> Result<Value, String> {
    let inject: Vec<(String, Source)> = match &join.inject {
        Some(m) => m.clone(),
        None => {
            let props = input_schema.and_then(|s| s.get("properties")).and_then(Value::as_object);
            Source::ALL
                .iter()
                .map(|(n, s)| (n.trim_start_matches('$').to_owned(), *s))
                .filter(|(arg, _)| props.is_some_and(|p| p.contains_key(arg)) && !join.args.contains_key(arg))
                .collect()
        }
    };
    let failed: Vec<&Outcome> = outcomes.iter().filter(|o| o.result.is_err()).collect();
    if !failed.is_empty() && !inject.iter().any(|(_, s)| s.tells_failures()) {
        let names: Vec<String> = failed.iter().map(|o| o.node.clone()).collect();
        return Err(format!(
            "{} of {} branches failed ({}), and the join asks for none of $failures, $branches, $failure_count, so its $results would be incomplete",
            failed.len(),
            outcomes.len(),
            names.join(", ")
        ));
    }
    let mut args = join.args.clone();
    for (arg, src) in inject {
        args.insert(arg, source_value(src, outcomes));
    }
    Ok(Value::Object(args))
}

fn source_value(src: Source, outcomes: &[Outcome]) -> Value {
    let ok = outcomes.iter().filter_map(|o| o.result.as_ref().ok());
    let failures = outcomes.iter().filter_map(|o| o.result.as_ref().err().map(|e| json!({"node": o.node, "args": o.args, "error": e})));
    match src {
        Source::Results => Value::Array(ok.cloned().collect()),
        Source::Branches => Value::Array(
            outcomes
                .iter()
                .map(|o| match &o.result {
                    Ok(v) => json!({"node": o.node, "args": o.args, "observation": v}),
                    Err(e) => json!({"node": o.node, "args": o.args, "error": e}),
                })
                .collect(),
        ),
        Source::Failures => Value::Array(failures.collect()),
        Source::SuccessCount => json!(ok.count()),
        Source::FailureCount => json!(outcomes.iter().filter(|o| o.result.is_err()).count()),
        Source::Expect => json!(outcomes.len()),
    }
}

/// The plan tool as native tool calling offers it: its arguments are the JSON-only action's
/// `plan` and `join`. Kept small (every request carries it): the sources are named in the
/// description, not as an enum.
pub(crate) fn tool_schema() -> Value {
    let call = json!({"type": "object", "required": ["node"], "properties": {"node": {"type": "string"}, "args": {"type": "object"}}});
    let mut join = call.clone();
    join["properties"]["inject"] = json!({"type": "object"});
    json!({"type": "object", "required": ["plan"], "properties": {"plan": {"type": "array", "items": call}, "join": join}})
}

/// The plan tool's description.
pub(crate) const TOOL_DESCRIPTION: &str = "Run tools at once (plan), then optionally a join tool that gets their results directly, \
not through you: join.inject maps its arguments to $results, $branches, $failures, $success_count, $failure_count or $expect.";

#[cfg(test)]
mod tests {
    use super::*;

    fn names() -> ToolNames {
        ToolNames::new(["kb.search", "merge", "analyze_sales"])
    }

    #[test]
    fn plans_read_as_the_rfc_writes_them_and_bad_ones_say_why() {
        let v = json!({"plan": [{"node": "kb_search", "args": {"q": "a"}}, {"node": "analyze_sales"}],
                       "join": {"node": "merge", "args": {"label": "x"}, "inject": {"mapping": {"items": "$results", "n": "$expect"}}}});
        let p = parse(&v, &names()).unwrap();
        assert_eq!(p.branches[0], Branch { node: "kb.search".into(), args: json!({"q": "a"}) }, "API names map back");
        assert_eq!(p.branches[1].args, json!({}));
        let j = p.join.unwrap();
        assert_eq!(j.inject, Some(vec![("items".into(), Source::Results), ("n".into(), Source::Expect)]));
        for (v, why) in [
            (json!({"plan": []}), "\"plan\" is empty"),
            (json!({"plan": "x"}), "must be a list"),
            (json!({"plan": [{"args": {}}]}), "plan[0] has no \"node\""),
            (json!({"plan": [{"node": "merge", "args": 3}]}), "plan[0].args of merge must be a JSON object"),
            (
                json!({"plan": [{"node": "merge"}], "join": {"node": "merge", "inject": {"a": "$nope"}}}),
                "join.inject.a is \"$nope\": use one of $results",
            ),
            (json!({"plan": [{"node": "merge"}], "join": {"args": {}}}), "\"join\" has no \"node\""),
        ] {
            let e = parse(&v, &names()).unwrap_err();
            assert!(e.contains(why) && !e.contains('\n'), "{v}: {e}");
        }
        let many = json!({"plan": (0..20).map(|i| json!({"node": "merge", "args": {"i": i}})).collect::<Vec<_>>()});
        let p = parse(&many, &names()).unwrap();
        assert_eq!((p.branches.len(), p.dropped), (16, 4));
    }

    #[test]
    fn injection_hands_the_outcomes_over_and_a_join_blind_to_failures_is_not_run() {
        let outcomes = vec![
            Outcome { node: "a".into(), args: json!({"p": 1}), result: Ok(json!({"docs": [1]})) },
            Outcome { node: "b".into(), args: json!({"p": 2}), result: Err("down".into()) },
        ];
        let join = |inject: Option<Vec<(String, Source)>>| Join { node: "merge".into(), args: Map::new(), inject };
        let all = join(Some(Source::ALL.iter().map(|(n, s)| (n.trim_start_matches('$').to_owned(), *s)).collect()));
        let args = join_arguments(&all, &outcomes, None).unwrap();
        assert_eq!(args["results"], json!([{"docs": [1]}]));
        assert_eq!(args["branches"][1], json!({"node": "b", "args": {"p": 2}, "error": "down"}));
        assert_eq!(args["failures"], json!([{"node": "b", "args": {"p": 2}, "error": "down"}]));
        assert_eq!((args["success_count"].clone(), args["failure_count"].clone(), args["expect"].clone()), (json!(1), json!(1), json!(2)));
        let blind = join(Some(vec![("items".into(), Source::Results)]));
        let why = join_arguments(&blind, &outcomes, None).unwrap_err();
        assert!(why.starts_with("1 of 2 branches failed (b)"), "{why}");
        // The implicit rule: the join's own parameter names, unless args sets them.
        let schema = json!({"properties": {"results": {}, "expect": {}, "label": {}}});
        let mut implicit = join(None);
        implicit.args.insert("expect".into(), json!(9));
        let args = join_arguments(&implicit, &outcomes[..1], Some(&schema)).unwrap();
        assert_eq!(args, json!({"results": [{"docs": [1]}], "expect": 9}));
    }
}
