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
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
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
    pub fn as_str(self) -> &'static str {
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
    ToolCallStarted {
        call: u64,
        owner: EventOwner,
        tool: String,
        upstream: String,
    },
    ToolCallFinished {
        call: u64,
        owner: EventOwner,
        tool: String,
        upstream: String,
        /// The host profile the result was shaped for (`default` for unknown clients).
        host: String,
        #[serde(serialize_with = "millis")]
        latency: Duration,
        outcome: CallOutcome,
        #[serde(skip_serializing_if = "Option::is_none")]
        error: Option<String>,
        bytes_in: u64,
        bytes_out: u64,
        tokens_in: u64,
        tokens_out: u64,
        artifacts: usize,
    },
    /// A value left the result for the store.
    Offloaded {
        call: u64,
        owner: EventOwner,
        tool: String,
        id: String,
        uri: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        mime_type: Option<String>,
        size: u64,
        sha256: String,
        /// RFC 6901 pointer into the original result.
        pointer: String,
        layer: stowage_transform::Layer,
    },
    /// The final observation clamp changed a result.
    Clamped {
        call: u64,
        owner: EventOwner,
        tool: String,
        bytes_before_clamp: u64,
        bytes_out: u64,
    },
    /// The store refused a value (fatal: the call became `artifact_storage_failed`; or not: a
    /// safety-net value was truncated instead).
    StoreFailed {
        call: u64,
        owner: EventOwner,
        tool: String,
        fatal: bool,
        message: String,
    },
    /// Blob chaining detected which inputs of an upstream's tools take file bytes (on each
    /// fetch of its tools).
    InputsDetected {
        upstream: String,
        tools: Vec<crate::chaining::DetectedTool>,
    },
    /// Blob chaining filled a call's inputs from artifacts: where, in which form, from which
    /// artifact, how big (never the bytes).
    InputsFilled {
        call: u64,
        owner: EventOwner,
        tool: String,
        inputs: Vec<crate::chaining::Filled>,
    },
    UpstreamUp {
        upstream: String,
    },
    UpstreamDown {
        upstream: String,
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
