//! Prometheus metrics: the recorder is installed once per process and rendered at `/metrics`;
//! the gateway's numbers come from its event bus (every published event is [`record`]ed), so
//! what is counted is exactly what is published.
//!
//! From events: `stowage_tool_calls_total{upstream,outcome,host}` (`host`: the host profile),
//! `stowage_tool_call_seconds{upstream}`, `stowage_tool_bytes_in_total`,
//! `stowage_tool_bytes_out_total`, `stowage_tokens_saved_total{upstream,tool}` (per call, o200k
//! tokens of the upstream's result minus those of the result the client got, without the
//! transform summary; `tool` is the name as exposed), `stowage_artifacts_total` (all by upstream), `stowage_offloads_total{layer}`,
//! `stowage_observations_clamped_total`, `stowage_store_failures_total{fatal}`,
//! `stowage_upstream_up{upstream}` (1 or 0), `stowage_upstream_down_total{upstream}`,
//! `stowage_chained_inputs_total{form}` (inputs blob chaining filled from artifacts).
//! Counted where they happen: `stowage_sessions`, `stowage_stream_resumes_total`,
//! `stowage_sessions_expired_total`, `stowage_sessions_evicted_total` (ended at
//! `max_sessions_per_identity` for a new one), `stowage_replay_evicted_bytes_total` (replay
//! dropped over `resume_max_total_bytes`), `stowage_input_required_total`,
//! `stowage_messages_dropped_total{reason}` (`slow_client`, `stalled_client`,
//! `stalled_upstream`, `unattributed`), `stowage_panics_total`, `stowage_gc_runs_total`.

use std::sync::OnceLock;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

use crate::events::GatewayEvent;

static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();

/// Installs the recorder (idempotent; a no-op if another recorder is already installed).
///
/// A histogram keeps every sample until upkeep folds it into its summary: without a scrape of
/// `/metrics` that was 8 bytes and more per tool call, forever (RSS grew ~36 KB/s at 2,000
/// calls/s). A thread of its own runs the upkeep every few seconds.
pub fn install() {
    HANDLE.get_or_init(|| {
        let handle = PrometheusBuilder::new().install_recorder().ok()?;
        let upkeep = handle.clone();
        let _ = std::thread::Builder::new().name("stowage-metrics-upkeep".into()).spawn(move || {
            loop {
                std::thread::sleep(std::time::Duration::from_secs(5));
                upkeep.run_upkeep();
            }
        });
        Some(handle)
    });
}

/// The current metrics in the Prometheus text format.
pub fn render() -> String {
    match HANDLE.get().and_then(Option::as_ref) {
        Some(h) => h.render(),
        None => "# metrics recorder not installed\n".to_owned(),
    }
}

/// Records one event: the gateway's event bus calls it for every event it publishes
/// ([`crate::events::EventBus::with_recorder`]).
pub(crate) fn record(e: &GatewayEvent) {
    match e {
        GatewayEvent::ToolCallFinished {
            upstream,
            host,
            tool,
            latency,
            outcome,
            bytes_in,
            bytes_out,
            tokens_in,
            tokens_out,
            artifacts,
            ..
        } => {
            let up = upstream.clone();
            metrics::counter!("stowage_tool_calls_total", "upstream" => up.clone(), "outcome" => outcome.as_str(), "host" => host.clone())
                .increment(1);
            metrics::histogram!("stowage_tool_call_seconds", "upstream" => up.clone()).record(latency.as_secs_f64());
            metrics::counter!("stowage_tool_bytes_in_total", "upstream" => up.clone()).increment(*bytes_in);
            metrics::counter!("stowage_tool_bytes_out_total", "upstream" => up.clone()).increment(*bytes_out);
            metrics::counter!("stowage_artifacts_total", "upstream" => up.clone()).increment(*artifacts as u64);
            metrics::counter!("stowage_tokens_saved_total", "upstream" => up, "tool" => tool.clone())
                .increment(tokens_in.saturating_sub(*tokens_out));
        }
        GatewayEvent::Offloaded { layer, .. } => {
            metrics::counter!("stowage_offloads_total", "layer" => crate::shape::layer_name(*layer)).increment(1);
        }
        GatewayEvent::FinalFit { .. } => metrics::counter!("stowage_observations_clamped_total").increment(1),
        GatewayEvent::StoreFailed { fatal, .. } => {
            metrics::counter!("stowage_store_failures_total", "fatal" => if *fatal { "true" } else { "false" }).increment(1);
        }
        GatewayEvent::UpstreamUp { upstream } => metrics::gauge!("stowage_upstream_up", "upstream" => upstream.clone()).set(1.0),
        GatewayEvent::UpstreamDown { upstream, .. } => {
            metrics::gauge!("stowage_upstream_up", "upstream" => upstream.clone()).set(0.0);
            metrics::counter!("stowage_upstream_down_total", "upstream" => upstream.clone()).increment(1);
        }
        GatewayEvent::InputsFilled { inputs, .. } => {
            for i in inputs {
                metrics::counter!("stowage_chained_inputs_total", "form" => i.form.as_str()).increment(1);
            }
        }
        GatewayEvent::ToolCallStarted { .. } | GatewayEvent::InputsDetected { .. } => {}
    }
}
