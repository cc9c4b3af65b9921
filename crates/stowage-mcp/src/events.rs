//! The gateway's event bus: what happened, for metrics now and for the playground and the
//! agent's run stream next.
//!
//! One bounded [`tokio::sync::broadcast`] channel: publishing never waits and never grows
//! memory; a subscriber that falls more than [`EVENT_CAPACITY`] events behind loses the
//! oldest ones and is told how many (`RecvError::Lagged`). Events carry the owner (tenant,
//! user, session) so a viewer can be shown only its own.
//!
//! Metrics are recorded from every published event, inline on the publishing thread rather
//! than by a subscriber task: recording is a few atomic increments, while waking a task on
//! another thread for each of a call's two events cost 14% of the gateway's pipelined
//! throughput on two cores (see BENCHMARKS.md). With no subscriber, an event is not even
//! allocated. The bus takes the recorder as a plain function ([`EventBus::with_recorder`]):
//! `metrics` knows the events, the events know nothing of metrics.

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use stowage_core::ArtifactScope;
use tokio::sync::broadcast;

/// Events kept for a slow subscriber before it starts losing the oldest.
pub const EVENT_CAPACITY: usize = 1024;

/// Whose call an event is about.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EventOwner {
    /// The caller's tenant; `None` without authentication or tenants.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// The caller's user (`local` without authentication).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// The session the call came in on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// The run the call belongs to (an agent run's trace id), when the caller gave one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace: Option<String>,
}

impl From<&ArtifactScope> for EventOwner {
    fn from(s: &ArtifactScope) -> Self {
        EventOwner { tenant: s.tenant_id.clone(), user: s.user_id.clone(), session: s.session_id.clone(), trace: s.trace_id.clone() }
    }
}

/// How a tool call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CallOutcome {
    /// A result the model can use.
    Ok,
    /// The tool answered `isError: true`.
    ToolError,
    /// No result: the upstream failed, timed out, or the call was refused.
    Error,
    /// The client cancelled it or went away.
    Cancelled,
}

impl CallOutcome {
    /// The `outcome` label of `stowage_tool_calls_total`.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            CallOutcome::Ok => "ok",
            CallOutcome::ToolError => "tool_error",
            CallOutcome::Error => "error",
            CallOutcome::Cancelled => "cancelled",
        }
    }
}

/// One thing that happened in the gateway.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum GatewayEvent {
    /// A tool call starts, once the upstream that answers it is known.
    ToolCallStarted {
        /// The call's number: every event of one call carries the same.
        call: u64,
        /// Whose call it is: viewers are shown only their own.
        owner: EventOwner,
        /// The tool as the client called it.
        tool: String,
        /// The upstream's configured name.
        upstream: String,
    },
    /// A tool call was answered (or failed): what it cost and what it came to.
    ToolCallFinished {
        /// The call's number: every event of one call carries the same.
        call: u64,
        /// Whose call it is: viewers are shown only their own.
        owner: EventOwner,
        /// The tool as the client called it.
        tool: String,
        /// The upstream's configured name.
        upstream: String,
        /// The host profile the result was shaped for (`default` for unknown clients).
        host: String,
        /// From the call's start to the shaped answer; serialized in milliseconds.
        #[serde(serialize_with = "millis")]
        latency: Duration,
        /// How the call ended.
        outcome: CallOutcome,
        /// The error's one line, when the call failed or the tool answered an error.
        #[serde(skip_serializing_if = "Option::is_none")]
        error: Option<String>,
        /// Bytes of the result's JSON as the upstream sent it.
        bytes_in: u64,
        /// Bytes of the result's JSON as sent to the client.
        bytes_out: u64,
        /// o200k tokens the model would have read without the gateway.
        tokens_in: u64,
        /// o200k tokens the model reads of the answer as sent.
        tokens_out: u64,
        /// Distinct artifacts the answer references.
        artifacts: usize,
    },
    /// A value left the result for the store.
    Offloaded {
        /// The call's number: every event of one call carries the same.
        call: u64,
        /// Whose call it is: viewers are shown only their own.
        owner: EventOwner,
        /// The tool as the client called it.
        tool: String,
        /// The artifact's id.
        id: String,
        /// Its `artifact://` URI.
        uri: String,
        /// Its MIME type, when the transform could tell.
        #[serde(skip_serializing_if = "Option::is_none")]
        mime_type: Option<String>,
        /// Its size in bytes.
        size: u64,
        /// Hex SHA-256 of its bytes.
        sha256: String,
        /// RFC 6901 pointer into the original result.
        pointer: String,
        /// The transform layer that moved it out.
        layer: stowage_transform::Layer,
    },
    /// The final fit (the host's budgets and `max_observation_chars`, the shaper's last step)
    /// cut or shortened a result.
    FinalFit {
        /// The call's number: every event of one call carries the same.
        call: u64,
        /// Whose call it is: viewers are shown only their own.
        owner: EventOwner,
        /// The tool as the client called it.
        tool: String,
        /// Bytes of the result's JSON as the upstream sent it.
        bytes_from_upstream: u64,
        /// Bytes of the result's JSON as sent to the client, after the fit.
        bytes_out: u64,
    },
    /// The store refused a value (fatal: the call became `artifact_storage_failed`; or not: a
    /// safety-net value was truncated instead).
    StoreFailed {
        /// The call's number: every event of one call carries the same.
        call: u64,
        /// Whose call it is: viewers are shown only their own.
        owner: EventOwner,
        /// The tool as the client called it.
        tool: String,
        /// Whether the call failed for it (else the value was truncated and the call went on).
        fatal: bool,
        /// The store's error, one line.
        message: String,
    },
    /// Blob chaining detected which inputs of an upstream's tools take file bytes (on each
    /// fetch of its tools).
    InputsDetected {
        /// The upstream's configured name.
        upstream: String,
        /// Each tool with file inputs, and those inputs.
        tools: Vec<crate::chaining::DetectedTool>,
    },
    /// Blob chaining filled a call's inputs from artifacts: where, in which form, from which
    /// artifact, how big (never the bytes).
    InputsFilled {
        /// The call's number: every event of one call carries the same.
        call: u64,
        /// Whose call it is: viewers are shown only their own.
        owner: EventOwner,
        /// The tool as the client called it.
        tool: String,
        /// One entry per filled input.
        inputs: Vec<crate::chaining::Filled>,
    },
    /// An upstream's control connection came up (first start or restart).
    UpstreamUp {
        /// The upstream's configured name.
        upstream: String,
    },
    /// An upstream's control connection failed or died; it is being restarted.
    UpstreamDown {
        /// The upstream's configured name.
        upstream: String,
        /// Why: the transport's or the handshake's error, one line.
        reason: String,
    },
}

impl GatewayEvent {
    /// The event for one artifact a transform stored.
    pub(crate) fn offloaded(call: u64, owner: EventOwner, tool: &str, a: &stowage_transform::ArtifactRecord) -> GatewayEvent {
        GatewayEvent::Offloaded {
            call,
            owner,
            tool: tool.to_owned(),
            id: a.id.clone(),
            uri: a.uri.clone(),
            mime_type: a.mime_type.clone(),
            size: a.size_bytes,
            sha256: a.sha256.clone(),
            pointer: a.pointer.clone(),
            layer: a.layer,
        }
    }
}

fn millis<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64((d.as_secs_f64() * 10_000.0).round() / 10.0)
}

/// Publishes [`GatewayEvent`]s to a recorder (the metrics) and to every subscriber. Cheap to
/// clone.
#[derive(Clone)]
pub struct EventBus {
    tx: broadcast::Sender<Arc<GatewayEvent>>,
    recorder: Option<fn(&GatewayEvent)>,
}

impl Default for EventBus {
    fn default() -> Self {
        EventBus { tx: broadcast::channel(EVENT_CAPACITY).0, recorder: None }
    }
}

impl EventBus {
    /// A bus that also hands every event to `recorder` (the gateway's is `metrics::record`),
    /// inline on the publishing thread.
    pub(crate) fn with_recorder(recorder: fn(&GatewayEvent)) -> Self {
        EventBus { recorder: Some(recorder), ..EventBus::default() }
    }

    /// Publishes `event`: recorded, then sent to the subscribers (without subscribers it goes
    /// no further).
    pub fn publish(&self, event: GatewayEvent) {
        if let Some(record) = self.recorder {
            record(&event);
        }
        if self.tx.receiver_count() > 0 {
            let _ = self.tx.send(Arc::new(event));
        }
    }

    /// A receiver of every event published from now on; one that falls more than
    /// [`EVENT_CAPACITY`] behind loses the oldest (`RecvError::Lagged`).
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<GatewayEvent>> {
        self.tx.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_slow_subscriber_loses_the_oldest_and_is_told_how_many() {
        let bus = EventBus::default();
        let mut rx = bus.subscribe();
        for i in 0..EVENT_CAPACITY + 10 {
            bus.publish(GatewayEvent::UpstreamUp { upstream: i.to_string() });
        }
        assert!(matches!(rx.recv().await, Err(broadcast::error::RecvError::Lagged(10))));
        match &*rx.recv().await.unwrap() {
            GatewayEvent::UpstreamUp { upstream } => assert_eq!(upstream, "10"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn events_serialise_with_a_type_tag() {
        let e = GatewayEvent::UpstreamDown { upstream: "fx".into(), reason: "exited with status 3".into() };
        assert_eq!(
            serde_json::to_value(&e).unwrap(),
            serde_json::json!({"type": "upstream_down", "upstream": "fx", "reason": "exited with status 3"})
        );
    }
}
