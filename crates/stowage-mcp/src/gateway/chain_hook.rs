//! Blob chaining's hook into the catalog: each time an upstream's lists are fetched, the
//! inputs that take file bytes are detected for every tool, shown to the model, logged (what
//! was not chained, and why) and published as an event.

use super::Gateway;
use crate::catalog::Catalog;
use crate::config::TransportSpec;
use crate::events::GatewayEvent;

impl Gateway {
    /// Detects the chained inputs of `catalog`'s tools (rebuilt after upstream `index`'s
    /// lists were fetched) and reports upstream `index`'s.
    pub(super) fn chain_detected(&self, catalog: &mut Catalog, index: usize) {
        let stdio = |i: usize| self.upstreams.get(i).is_some_and(|u| matches!(u.spec.transport, TransportSpec::Stdio { .. }));
        let tools = crate::chaining::expose_inputs(catalog.entries(), &self.config.chaining, stdio, index);
        let Some(upstream) = self.upstreams.get(index).map(|u| u.name().to_owned()) else { return };
        for t in &tools {
            let chained: Vec<String> = t.inputs.inputs.iter().map(|d| format!("{} ({})", d.path, d.form)).collect();
            if !chained.is_empty() {
                tracing::debug!(target: "stowage::chaining", upstream = %upstream, tool = %t.tool, "takes artifacts in {}", chained.join(", "));
            }
            for n in &t.inputs.notes {
                tracing::info!(target: "stowage::chaining", upstream = %upstream, tool = %t.tool, "{n}");
            }
        }
        if !tools.is_empty() {
            self.parts.events.publish(GatewayEvent::InputsDetected { upstream, tools });
        }
    }

    /// The same detection for one client's own catalog: what it came to was reported when
    /// the gateway's catalog was built.
    pub(super) fn chain_quietly(&self, catalog: &mut Catalog) {
        let stdio = |i: usize| self.upstreams.get(i).is_some_and(|u| matches!(u.spec.transport, TransportSpec::Stdio { .. }));
        crate::chaining::expose_inputs(catalog.entries(), &self.config.chaining, stdio, usize::MAX);
    }
}
