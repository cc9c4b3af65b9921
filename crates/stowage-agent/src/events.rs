//! What a run tells while it runs: the events of `POST /agent/runs` (`chunk`,
//! `answer_reset`, `step`, `artifact_chunk`, `done`, `error`; docs/agent.md),
//! each with its SSE event name and JSON data.
//!
//! So a client can match them up: `step` and `artifact_chunk` carry the tool call's `call_id`
//! (unique in the run: two calls of one tool are told apart), `artifact_chunk` the payload key
//! it fills (`artifacts[tool][key]`), and `done` a `run` object (why the run ended, its steps
//! and token usage) beside the payload's fields.

use serde::Serialize;
use serde_json::Value;

use crate::payload::FinalPayload;

/// How a run went: the `run` object of the `done` event.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RunInfo {
    /// The run's id (`run-…`): its trace id in the gateway's events and logs, the scope of its
    /// artifacts, and what `DELETE /agent/runs/{id}` names.
    pub trace_id: String,
    /// Why it ended: `answer` (the model's answer), `invalid_answer`, `invalid_action`,
    /// `invalid_tool_arguments`, `reply_cut` (a fault its repair budget could not fix),
    /// `max_steps`, `max_wall_time`, `max_tokens`, `model_error`, `cancelled`.
    pub finish_reason: String,
    /// The model's own reason for its last reply (`stop`, `tool_calls`, `length`, …).
    pub model_finish_reason: Option<String>,
    /// Tool-calling steps taken.
    pub steps: u32,
    /// Tool calls made (a step may make several).
    pub tool_calls: u32,
    /// Requests sent to the model, repair rounds included: at most `max_steps + max_repairs +
    /// 1`.
    pub model_requests: u32,
    /// Repair rounds the run used (a fault of the model's reply told back to it), at most
    /// `agent.max_repairs`.
    pub repairs: u32,
    /// Tokens the run spent.
    pub usage: RunUsage,
    /// Wall-clock time of the run, in milliseconds.
    pub duration_ms: u64,
}

/// Tokens the run spent, as the model reported them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct RunUsage {
    /// Prompt tokens, summed over the run's requests.
    pub input_tokens: u64,
    /// Completion tokens, summed over the run's requests.
    pub output_tokens: u64,
}

/// How a step (one tool call) went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StepStatus {
    /// The model asked for the call; it is running.
    Started,
    /// The tool answered without an error.
    Ok,
    /// The tool answered with an error (or could not be called); the run goes on.
    Error,
}

/// One event of a run.
#[derive(Debug, Clone, PartialEq)]
pub enum AgentEvent {
    /// Answer text (`raw_answer`) as the model streams it: never the JSON around it, never a
    /// thought.
    Chunk {
        /// Always `answer`: the one text stream of a run.
        stream_id: String,
        /// Position of this chunk in the run's answer stream, from 0.
        seq: u64,
        /// The next characters of the answer.
        text: String,
        /// True on the last chunk (whose `text` is empty).
        done: bool,
    },
    /// The answer text streamed so far (since the last reset) will not be the answer: drop it.
    /// Sent before the replacement streams, when the model is asked again (`repair`), when the
    /// reply turned out to be tool calls (`tool_calls`), when the final answer is not what
    /// streamed (`replaced`), or when the run ends with a partial answer (`partial`).
    AnswerReset {
        /// Always `answer`.
        stream_id: String,
        /// The `seq` of the next `chunk`: every chunk before it is dropped.
        seq: u64,
        /// `repair`, `tool_calls`, `replaced` or `partial`.
        reason: String,
    },
    /// Tool execution progress: one when a call starts and one when it ends.
    Step {
        /// The tool, by the name the gateway lists it under (not the API name the model saw).
        node: String,
        /// Started, ended well, or ended in an error.
        status: StepStatus,
        /// Milliseconds since the call started (about 0 on `started`).
        latency_ms: f64,
        /// The model's reasoning text beside its tool call, when it wrote one.
        thought: Option<String>,
        /// The call's id in the run (`c1`, `c2`, …): tells two calls of one tool apart.
        call_id: String,
    },
    /// A piece of a streamed artifact (a `stream: true` field when its tool returns, or a
    /// tool's own `io.stowage/artifact_chunk` progress while it runs); `seq` counts per call
    /// and stream.
    ArtifactChunk {
        /// The stream: the field's `stream_id` mark, else its name, or the id a tool's own
        /// progress names.
        stream_id: String,
        /// Position of this chunk in the call's stream, from 0.
        seq: u64,
        /// The piece itself: a `stream: true` field's whole value when its tool returns, or a
        /// piece the tool sent as progress.
        chunk: Value,
        /// True on the stream's last piece.
        done: bool,
        /// `dict`, `list`, `str`, `number`, `bool`, `null`, or `reference` for a stored value.
        artifact_type: String,
        /// The call the chunk belongs to (as in its `step` events).
        call_id: String,
        /// The tool that produced it.
        tool: String,
        /// The payload key it fills: `artifacts[tool][key]`.
        key: String,
    },
    /// The run's answer, and how the run went.
    Done(Box<FinalPayload>, Box<RunInfo>),
    /// The run failed; no `done` follows.
    Error {
        /// One line saying what went wrong and how to fix it.
        error: String,
        /// The stable code ([`AgentError::code`](crate::AgentError::code)).
        code: String,
        /// The run's id, for the logs (empty when the run panicked before it had one).
        trace_id: String,
    },
}

#[derive(Serialize)]
struct StepData<'a> {
    node: &'a str,
    status: StepStatus,
    latency_ms: f64,
    thought: &'a Option<String>,
    call_id: &'a str,
}

impl AgentEvent {
    /// The SSE `event:` name.
    pub fn name(&self) -> &'static str {
        match self {
            AgentEvent::Chunk { .. } => "chunk",
            AgentEvent::AnswerReset { .. } => "answer_reset",
            AgentEvent::Step { .. } => "step",
            AgentEvent::ArtifactChunk { .. } => "artifact_chunk",
            AgentEvent::Done(..) => "done",
            AgentEvent::Error { .. } => "error",
        }
    }

    /// The SSE `data:` JSON.
    pub fn data(&self) -> Value {
        use serde_json::json;
        match self {
            AgentEvent::Chunk { stream_id, seq, text, done } => json!({"stream_id": stream_id, "seq": seq, "text": text, "done": done}),
            AgentEvent::AnswerReset { stream_id, seq, reason } => json!({"stream_id": stream_id, "seq": seq, "reason": reason}),
            AgentEvent::Step { node, status, latency_ms, thought, call_id } => {
                serde_json::to_value(StepData { node, status: *status, latency_ms: *latency_ms, thought, call_id }).expect("serialises")
            }
            AgentEvent::ArtifactChunk { stream_id, seq, chunk, done, artifact_type, call_id, tool, key } => json!({
                "stream_id": stream_id, "seq": seq, "chunk": chunk, "done": done, "artifact_type": artifact_type,
                "call_id": call_id, "tool": tool, "key": key
            }),
            AgentEvent::Done(p, run) => done_json(p, run),
            AgentEvent::Error { error, code, trace_id } => json!({"error": error, "code": code, "trace_id": trace_id}),
        }
    }

    /// The event as SSE text (`event:` + one `data:` line + blank line).
    pub fn to_sse(&self) -> String {
        format!("event: {}\ndata: {}\n\n", self.name(), self.data())
    }
}

/// The `done` data: the payload's fields, plus `run`.
pub fn done_json(p: &FinalPayload, run: &RunInfo) -> Value {
    let mut v = serde_json::to_value(p).expect("serialises");
    v["run"] = serde_json::to_value(run).expect("serialises");
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_have_the_documented_shapes() {
        let e =
            AgentEvent::Step { node: "fx_search".into(), status: StepStatus::Error, latency_ms: 1.5, thought: None, call_id: "c1".into() };
        assert_eq!(
            e.to_sse(),
            "event: step\ndata: {\"node\":\"fx_search\",\"status\":\"error\",\"latency_ms\":1.5,\"thought\":null,\"call_id\":\"c1\"}\n\n"
        );
        let run = RunInfo { trace_id: "run-1".into(), finish_reason: "answer".into(), steps: 2, ..Default::default() };
        let done = AgentEvent::Done(Box::new(FinalPayload::answer("hi")), Box::new(run)).data();
        assert_eq!((done["raw_answer"].as_str(), done["run"]["steps"].as_u64()), (Some("hi"), Some(2)));
        let e = AgentEvent::AnswerReset { stream_id: "answer".into(), seq: 7, reason: "repair".into() };
        assert_eq!(e.to_sse(), "event: answer_reset\ndata: {\"stream_id\":\"answer\",\"seq\":7,\"reason\":\"repair\"}\n\n");
        let e = AgentEvent::Error { error: "boom".into(), code: "model_http_error".into(), trace_id: "run-1".into() };
        assert_eq!(e.data(), serde_json::json!({"error": "boom", "code": "model_http_error", "trace_id": "run-1"}));
    }
}
