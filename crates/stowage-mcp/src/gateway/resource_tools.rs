//! Generated resource tools, for hosts that never show resources to the model: every upstream
//! that lists at least one resource or template gets `{server}{sep}resources_list`, `{server}{sep}resources_read` (`uri`) and
//! `{server}{sep}resources_templates_list`, which answer with what the resource methods
//! answer — reads already through the pipeline, so a blob comes back as a line with its
//! reference and link, never as base64. `gateway.resources.generated_tools` turns them off.
//!
//! A name an upstream's own tool already has stays the upstream's: the generated one is not
//! listed.

use std::sync::Arc;

use serde_json::{Value, json};

use super::Gateway;
use crate::error::GatewayError;
use crate::outbox::Outbox;
use crate::session::Session;

/// What a generated tool does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ResourceOp {
    List,
    Read,
    Templates,
}

const OPS: [(ResourceOp, &str); 3] =
    [(ResourceOp::List, "resources_list"), (ResourceOp::Read, "resources_read"), (ResourceOp::Templates, "resources_templates_list")];

impl Gateway {
    /// Whether upstream `i` gets generated resource tools: it lists at least one resource or
    /// template (FastMCP declares the capability with nothing behind it; three tools that can
    /// only say "nothing here" would cost every `tools/list` about a kilobyte). Its listing may
    /// be the one kept from its last run while it is down: its tools stay the same, and calls
    /// say why they fail.
    fn lists_resources(&self, catalog: &crate::catalog::Catalog, i: usize) -> bool {
        catalog.resources.iter().any(|(k, _)| *k == i) || catalog.templates.iter().any(|(k, _)| *k == i)
    }

    /// The generated tools' definitions, one set per upstream that lists resources.
    pub(super) fn resource_tool_defs(&self) -> Vec<Value> {
        if !self.config.resources.generated_tools {
            return Vec::new();
        }
        let catalog = self.catalog();
        let mut defs = Vec::new();
        for u in self.upstreams.iter().filter(|u| self.lists_resources(&catalog, u.index)) {
            for (op, suffix) in OPS {
                let name = format!("{}{}{suffix}", u.name(), self.config.separator);
                if catalog.tool(&name).is_some() {
                    continue;
                }
                defs.push(def(&name, u.name(), op));
            }
        }
        defs
    }

    /// The upstream and operation of a generated tool's name (asked only for a name no
    /// upstream tool has: theirs come first).
    pub(super) fn resource_tool(&self, name: &str) -> Option<(usize, ResourceOp)> {
        if !self.config.resources.generated_tools {
            return None;
        }
        let catalog = self.catalog();
        self.upstreams.iter().enumerate().filter(|(i, _)| self.lists_resources(&catalog, *i)).find_map(|(i, u)| {
            let rest = name.strip_prefix(u.name())?.strip_prefix(self.config.separator.as_str())?;
            OPS.iter().find(|(_, s)| *s == rest).map(|(op, _)| (i, *op))
        })
    }

    /// Runs a generated tool for `session`; always a CallToolResult (errors are `isError`).
    pub(super) async fn call_resource_tool(
        self: &Arc<Self>,
        session: &Arc<Session>,
        u: usize,
        op: ResourceOp,
        arguments: &Value,
        outbox: &Outbox,
    ) -> Value {
        let name = self.upstreams[u].name().to_owned();
        let outcome = match op {
            ResourceOp::List => self.upstream_resources(session, u, "resources", "resources/list", outbox).await.map(|items| {
                let lines: Vec<String> = items.iter().map(describe).collect();
                let text = if lines.is_empty() { format!("{name} lists no resources.") } else { lines.join("\n") };
                json!({"content": [{"type": "text", "text": text}], "structuredContent": {"resources": items}})
            }),
            ResourceOp::Templates => {
                self.upstream_resources(session, u, "resourceTemplates", "resources/templates/list", outbox).await.map(|items| {
                    let lines: Vec<String> = items.iter().map(describe).collect();
                    let text = if lines.is_empty() { format!("{name} has no resource templates.") } else { lines.join("\n") };
                    json!({"content": [{"type": "text", "text": text}], "structuredContent": {"resourceTemplates": items}})
                })
            }
            ResourceOp::Read => match arguments.get("uri").and_then(Value::as_str).filter(|s| !s.trim().is_empty()) {
                None => Err(GatewayError::InvalidParams(format!(
                    "{name}{}resources_read needs \"uri\": one of {name}'s resource URIs",
                    self.config.separator
                ))),
                Some(uri) => self.read_for_tool(session, u, uri, outbox).await,
            },
        };
        outcome.unwrap_or_else(|e| {
            let code = match &e {
                GatewayError::ResourceNotFound(_) => "resource_not_found",
                GatewayError::InvalidParams(_) => stowage_core::ErrorCode::BadRequest.as_str(),
                _ => "upstream_error",
            };
            json!({"content": [{"type": "text", "text": format!("{code}: {e}")}], "isError": true})
        })
    }

    /// A read routed to upstream `u` (a URI another upstream listed is refused), as tool
    /// content: each entry's text, or a small blob as an image, audio or embedded resource.
    async fn read_for_tool(self: &Arc<Self>, session: &Arc<Session>, u: usize, uri: &str, outbox: &Outbox) -> Result<Value, GatewayError> {
        let routed = self.resource_route(session, uri);
        if routed.is_some_and(|r| r != u) {
            return Err(GatewayError::InvalidParams(format!(
                "{uri} is not one of {}'s resources; use the resources_read tool of the server that lists it",
                self.upstreams[u].name()
            )));
        }
        let result = self.read_result(session, u, uri, outbox).await?;
        let mut content = Vec::new();
        for entry in result.get("contents").and_then(Value::as_array).into_iter().flatten() {
            let mime = entry.get("mimeType").and_then(Value::as_str).unwrap_or("");
            if let Some(text) = entry.get("text").and_then(Value::as_str) {
                content.push(json!({"type": "text", "text": text}));
            } else if let Some(blob) = entry.get("blob").and_then(Value::as_str) {
                content.push(match mime.split('/').next() {
                    Some("image") => json!({"type": "image", "data": blob, "mimeType": mime}),
                    Some("audio") => json!({"type": "audio", "data": blob, "mimeType": mime}),
                    _ => json!({"type": "resource", "resource": entry}),
                });
            }
        }
        let mut out = json!({"content": content});
        if let Some(meta) = result.get("_meta") {
            out["_meta"] = meta.clone();
        }
        Ok(out)
    }
}

/// One line for a listed resource or template.
fn describe(r: &Value) -> String {
    let uri = r.get("uri").or_else(|| r.get("uriTemplate")).and_then(Value::as_str).unwrap_or("?");
    let mut line = uri.to_owned();
    if let Some(n) = r.get("name").and_then(Value::as_str) {
        line.push_str(&format!(" — {n}"));
    }
    if let Some(m) = r.get("mimeType").and_then(Value::as_str) {
        line.push_str(&format!(" ({m})"));
    }
    if let Some(d) = r.get("description").and_then(Value::as_str) {
        line.push_str(&format!(": {}", d.lines().next().unwrap_or("")));
    }
    line
}

fn def(name: &str, server: &str, op: ResourceOp) -> Value {
    let (title, description, input) = match op {
        ResourceOp::List => (
            format!("List {server}'s resources"),
            format!("Lists the resources server {server} offers (URI, name, type)."),
            json!({"type": "object", "properties": {}}),
        ),
        ResourceOp::Read => (
            format!("Read one of {server}'s resources"),
            format!(
                "Reads a resource of server {server} by URI. Small text comes back inline; large text and binary content come back as an artifact reference and a download link."
            ),
            json!({"type": "object", "properties": {"uri": {"type": "string", "description": "the resource's URI"}}, "required": ["uri"]}),
        ),
        ResourceOp::Templates => (
            format!("List {server}'s resource templates"),
            format!("Lists the URI templates of resources server {server} can read."),
            json!({"type": "object", "properties": {}}),
        ),
    };
    json!({
        "name": name,
        "title": title,
        "description": description,
        "inputSchema": input,
        "annotations": {"readOnlyHint": true, "openWorldHint": false},
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listed_items_read_as_one_line_each() {
        let r = json!({"uri": "fx://docs/a.pdf", "name": "a.pdf", "mimeType": "application/pdf", "description": "first\nsecond"});
        assert_eq!(describe(&r), "fx://docs/a.pdf — a.pdf (application/pdf): first");
        assert_eq!(describe(&json!({"uriTemplate": "fx://docs/{name}"})), "fx://docs/{name}");
    }
}
