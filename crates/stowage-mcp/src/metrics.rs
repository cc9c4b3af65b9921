//! Prometheus metrics: the recorder is installed once per process and rendered at `/metrics`.
//!
//! Names: `stowage_tool_calls_total{upstream,outcome}`, `stowage_tool_call_seconds{upstream}`,
//! `stowage_tool_bytes_in_total`, `stowage_tool_bytes_out_total`, `stowage_artifacts_total`
//! (all by upstream), `stowage_upstream_restarts_total{upstream}`, `stowage_sessions`,
//! `stowage_stream_resumes_total` (SSE streams resumed with `Last-Event-ID`),
//! `stowage_sessions_expired_total` (HTTP sessions ended for idleness) and
//! `stowage_input_required_total` (input requests turned into `input_required` results).

use std::sync::OnceLock;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();

/// Installs the recorder (idempotent; a no-op if another recorder is already installed).
pub fn install() {
    HANDLE.get_or_init(|| PrometheusBuilder::new().install_recorder().ok());
}

/// The current metrics in the Prometheus text format.
pub fn render() -> String {
    match HANDLE.get().and_then(Option::as_ref) {
        Some(h) => h.render(),
        None => "# metrics recorder not installed\n".to_owned(),
    }
}
