//! What a run tells while it runs: the seed's Appendix B events (`chunk`, `step`,
//! `artifact_chunk`, `done`, `error`), each with its SSE event name and JSON data.

use serde::Serialize;
use serde_json::Value;

use crate::payload::FinalPayload;

/// How a step (one tool call) went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StepStatus {
    /// The model asked for the call; it is running.
    Started,
    Ok,
    /// The tool answered with an error (or could not be called); the run goes on.
    Error,
}

/// One event of a run.
#[derive(Debug, Clone, PartialEq)]
pub enum AgentEvent {
    /// Answer tokens as the model streams them.
    Chunk { stream_id: String, seq: u64, text: String, done: bool },
    /// Tool execution progress.
    Step { node: String, status: StepStatus, latency_ms: f64, thought: Option<String> },
    /// A piece of a streamed artifact (a `stream: true` field when its tool returns, or a
    /// tool's own `io.stowage/artifact_chunk` progress while it runs).
    ArtifactChunk { stream_id: String, seq: u64, chunk: Value, done: bool, artifact_type: String },
    /// The run's answer.
    Done(Box<FinalPayload>),
    /// The run failed; no `done` follows.
    Error { error: String, code: String, trace_id: String },
}

#[derive(Serialize)]
struct StepData<'a> {
    node: &'a str,
    status: StepStatus,
    latency_ms: f64,
    thought: &'a Option<String>,
}

impl AgentEvent {
    /// The SSE `event:` name.
    pub fn name(&self) -> &'static str {
        match self {
            AgentEvent::Chunk { .. } => "chunk",
            AgentEvent::Step { .. } => "step",
            AgentEvent::ArtifactChunk { .. } => "artifact_chunk",
            AgentEvent::Done(_) => "done",
            AgentEvent::Error { .. } => "error",
        }
    }

    /// The SSE `data:` JSON.
    pub fn data(&self) -> Value {
        use serde_json::json;
        match self {
            AgentEvent::Chunk { stream_id, seq, text, done } => json!({"stream_id": stream_id, "seq": seq, "text": text, "done": done}),
            AgentEvent::Step { node, status, latency_ms, thought } => {
                serde_json::to_value(StepData { node, status: *status, latency_ms: *latency_ms, thought }).expect("serialises")
            }
            AgentEvent::ArtifactChunk { stream_id, seq, chunk, done, artifact_type } => {
                json!({"stream_id": stream_id, "seq": seq, "chunk": chunk, "done": done, "artifact_type": artifact_type})
            }
            AgentEvent::Done(p) => serde_json::to_value(p).expect("serialises"),
            AgentEvent::Error { error, code, trace_id } => json!({"error": error, "code": code, "trace_id": trace_id}),
        }
    }

    /// The event as SSE text (`event:` + one `data:` line + blank line).
    pub fn to_sse(&self) -> String {
        format!("event: {}\ndata: {}\n\n", self.name(), self.data())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_the_seeds_shapes() {
        let e = AgentEvent::Step { node: "fx_search".into(), status: StepStatus::Error, latency_ms: 1.5, thought: None };
        assert_eq!(e.to_sse(), "event: step\ndata: {\"node\":\"fx_search\",\"status\":\"error\",\"latency_ms\":1.5,\"thought\":null}\n\n");
        let e = AgentEvent::Error { error: "boom".into(), code: "model_http_error".into(), trace_id: "run-1".into() };
        assert_eq!(e.data(), serde_json::json!({"error": "boom", "code": "model_http_error", "trace_id": "run-1"}));
    }
}
