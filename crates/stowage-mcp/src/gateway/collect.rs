//! `artifact_collect`'s calls (the collection itself is `local_tools::collect`): each page is
//! the caller's own `tools/call` of the tool, routed through the caller's catalog to its
//! upstream session within that upstream's timeouts, and published as a call like any other
//! (started, finished, with its bytes). The raw pages feed the collection, which stores their
//! items: the transform pipeline is for what a model reads, and the model reads the
//! collection's reference.

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use serde_json::{Value, json};

use super::Gateway;
use crate::events::{CallOutcome, EventOwner, GatewayEvent};
use crate::local_tools::ToolError;
use crate::local_tools::collect::Pages;
use crate::outbox::Outbox;
use crate::session::Session;

/// The caller's tools, as a collection calls them.
pub(super) struct CallerPages<'a> {
    pub(super) gw: &'a Arc<Gateway>,
    pub(super) session: &'a Arc<Session>,
    pub(super) outbox: &'a Outbox,
    pub(super) host: String,
}

#[async_trait]
impl Pages for CallerPages<'_> {
    fn input_schema(&self, tool: &str) -> Option<Value> {
        let catalog = self.gw.catalog_for(self.session);
        let t = catalog.tool(tool)?;
        Some(t.def.get("inputSchema").cloned().unwrap_or_else(|| json!({"type": "object"})))
    }

    async fn call(&self, tool: &str, arguments: Value) -> Result<Value, ToolError> {
        let Some(exposed) = self.gw.catalog_for(self.session).tool(tool).cloned() else {
            return Err(ToolError::bad_request(format!("artifact_collect: there is no tool {tool:?}")));
        };
        let gw = self.gw;
        let upstream = gw.upstreams[exposed.upstream].name().to_owned();
        let call = gw.clients.next_call.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let owner = EventOwner::from(&self.session.scope);
        gw.parts.events.publish(GatewayEvent::ToolCallStarted {
            call,
            owner: owner.clone(),
            tool: tool.to_owned(),
            upstream: upstream.clone(),
        });
        let started = Instant::now();
        let params = json!({"name": exposed.original, "arguments": arguments});
        let reply = gw.forward(self.session, exposed.upstream, "tools/call", params, self.outbox).await;
        let (outcome, error, result) = match reply {
            Ok(mut m) => match m.result.take() {
                Some(raw) => match serde_json::from_str::<Value>(raw.get()) {
                    Ok(v) => {
                        let failed = v.get("isError").and_then(Value::as_bool) == Some(true);
                        (if failed { CallOutcome::ToolError } else { CallOutcome::Ok }, None, Ok((v, raw.len() as u64)))
                    }
                    Err(e) => (
                        CallOutcome::Error,
                        Some(e.to_string()),
                        Err(ToolError::bad_request(format!("{tool} answered a result that is not JSON ({e})"))),
                    ),
                },
                None => {
                    let e: Value = m.error.as_ref().and_then(|e| serde_json::from_str(e.get()).ok()).unwrap_or(Value::Null);
                    let message = e.get("message").and_then(Value::as_str).unwrap_or("no message").to_owned();
                    (CallOutcome::Error, Some(message.clone()), Err(ToolError::bad_request(format!("{tool} refused the call: {message}"))))
                }
            },
            Err(e) => (CallOutcome::Error, Some(e.to_string()), Err(ToolError::bad_request(format!("{tool}: {e}")))),
        };
        let bytes = result.as_ref().map_or(0, |(_, n)| *n);
        gw.parts.events.publish(GatewayEvent::ToolCallFinished {
            call,
            owner,
            tool: tool.to_owned(),
            upstream,
            host: self.host.clone(),
            latency: started.elapsed(),
            outcome,
            error,
            bytes_in: bytes,
            bytes_out: 0,
            tokens_in: 0,
            tokens_out: 0,
            artifacts: 0,
        });
        result.map(|(v, _)| v)
    }
}
