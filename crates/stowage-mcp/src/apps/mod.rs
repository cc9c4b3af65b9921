//! MCP Apps (the `io.modelcontextprotocol/ui` extension): an artifact viewer and uploader that
//! hosts render inside the conversation, so people see the bytes Stowage keeps out of the
//! model's context, and hand files to tools without pasting them through the model.
//!
//! Only a client that declares the extension with the `text/html;profile=mcp-app` MIME type
//! (in `initialize`, or on 2026-07-28 in each request's client capabilities) sees anything of
//! it: the view resource `ui://stowage/viewer`, the model-visible `artifact_view` tool, and the
//! app-only tools the view calls through the host (`artifact_fetch`, the three upload tools,
//! `artifact_viewer_asset`). Every other client sees the gateway as before.
//!
//! The view's HTML is not built here: whoever serves the page components (the playground
//! crate, through the binary) hands it over as a [`Viewer`], so the front-end lives in one
//! place and dependencies keep pointing inward. Every tool looks artifacts up as the calling
//! session's owner: another owner's id answers like one that never existed.

mod tools;
mod uploads;

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

pub(crate) use tools::defs as tool_defs;
pub use tools::{APP_TOOLS, ARTIFACT_VIEW_TOOL};

/// The extension's id in `capabilities.extensions`.
pub const EXTENSION_ID: &str = "io.modelcontextprotocol/ui";
/// The MIME type of an MCP Apps view.
pub const APP_MIME: &str = "text/html;profile=mcp-app";
/// The one view this gateway offers.
pub const VIEWER_URI: &str = "ui://stowage/viewer";

/// `[apps]` in `stowage.toml`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AppsConfig {
    /// Upstream tools (their names as the gateway exposes them; `*` matches any run of
    /// characters) whose results hosts show in the viewer: their listing for apps clients
    /// carries `_meta.ui.resourceUri`. Default: none.
    pub attach_viewer: Vec<String>,
    /// The largest file the view may upload, in bytes (the store's own limits apply too).
    /// Default 104857600 (100 MiB).
    pub max_upload_bytes: u64,
    /// How long an upload may stay uncommitted before it is dropped with its bytes, in
    /// seconds. Default 600.
    pub upload_ttl_secs: u64,
}

impl Default for AppsConfig {
    fn default() -> Self {
        AppsConfig { attach_viewer: Vec::new(), max_upload_bytes: 100 * 1024 * 1024, upload_ttl_secs: 600 }
    }
}

/// The view, as its builder hands it over.
#[derive(Debug, Clone)]
pub struct Viewer {
    /// The self-contained HTML document.
    pub html: String,
    /// What the view loads lazily by name through `artifact_viewer_asset` (a PDF renderer).
    pub assets: Vec<(&'static str, &'static str)>,
    /// The resource's `_meta.ui` (its `csp`, `prefersBorder`).
    pub ui_meta: Value,
}

/// The apps feature of a running gateway: its settings, the view and the uploads in flight.
pub struct Apps {
    pub(crate) config: AppsConfig,
    pub(crate) viewer: Viewer,
    pub(crate) uploads: uploads::Uploads,
    attach: Vec<wildmatch::WildMatch>,
}

impl Apps {
    /// The apps feature with its viewer; inside a Tokio runtime it also starts the task that
    /// drops abandoned uploads after `upload_ttl_secs`.
    pub fn new(config: AppsConfig, viewer: Viewer) -> Arc<Apps> {
        let attach = config.attach_viewer.iter().map(|g| wildmatch::WildMatch::new(g)).collect();
        let ttl = Duration::from_secs(config.upload_ttl_secs.max(1));
        let apps = Arc::new(Apps { config, viewer, uploads: uploads::Uploads::new(ttl), attach });
        // Abandoned uploads go with their bytes even when nobody calls again.
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(uploads::sweep(Arc::downgrade(&apps)));
        }
        apps
    }

    /// Whether the exposed tool `name` shows its results in the viewer.
    pub fn attaches(&self, name: &str) -> bool {
        self.attach.iter().any(|g| g.matches(name))
    }

    /// The view's `resources/list` entry.
    pub fn resource_entry(&self) -> Value {
        json!({
            "uri": VIEWER_URI,
            "name": "stowage-viewer",
            "title": "Artifact viewer",
            "description": "Shows the artifacts Stowage stored (images, PDFs, audio, video, tables, JSON, text) and takes uploads",
            "mimeType": APP_MIME,
            "_meta": {"ui": self.viewer.ui_meta},
        })
    }

    /// `resources/read` of the view.
    pub fn read_result(&self) -> Value {
        json!({"contents": [{
            "uri": VIEWER_URI,
            "mimeType": APP_MIME,
            "text": self.viewer.html,
            "_meta": {"ui": self.viewer.ui_meta},
        }]})
    }
}

/// Whether client `capabilities` declare the extension with the MCP Apps MIME type.
pub fn supports_apps(capabilities: &Value) -> bool {
    let Some(types) = capabilities.get("extensions").and_then(|e| e.get(EXTENSION_ID)).and_then(|u| u.get("mimeTypes")) else {
        return false;
    };
    // Parameters may be spaced or cased differently; the type is the same.
    let canonical = |s: &str| s.chars().filter(|c| !c.is_whitespace()).collect::<String>().to_ascii_lowercase();
    types.as_array().into_iter().flatten().filter_map(Value::as_str).any(|t| canonical(t) == APP_MIME)
}

/// Marks a tool definition as shown in the viewer (`_meta.ui.resourceUri`, and the flat key
/// older hosts read).
pub fn attach_viewer(def: &mut Value) {
    let Some(obj) = def.as_object_mut() else { return };
    let meta = obj.entry("_meta").or_insert_with(|| json!({}));
    if let Some(m) = meta.as_object_mut() {
        let ui = m.entry("ui").or_insert_with(|| json!({}));
        if let Some(ui) = ui.as_object_mut() {
            ui.insert("resourceUri".into(), json!(VIEWER_URI));
        }
        m.insert("ui/resourceUri".into(), json!(VIEWER_URI));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_app_mime_type_counts() {
        let caps = |types: Value| json!({"extensions": {EXTENSION_ID: {"mimeTypes": types}}});
        assert!(supports_apps(&caps(json!(["text/html;profile=mcp-app"]))));
        assert!(supports_apps(&caps(json!(["text/html; profile=MCP-APP"]))));
        assert!(!supports_apps(&caps(json!(["text/html"]))));
        assert!(!supports_apps(&json!({"extensions": {EXTENSION_ID: {}}})));
        assert!(!supports_apps(&json!({})));
    }

    #[test]
    fn attached_tools_name_the_viewer_twice() {
        let mut def = json!({"name": "get_chart", "_meta": {"other": 1}});
        attach_viewer(&mut def);
        assert_eq!(def["_meta"]["ui"]["resourceUri"], VIEWER_URI);
        assert_eq!(def["_meta"]["ui/resourceUri"], VIEWER_URI);
        assert_eq!(def["_meta"]["other"], 1);
    }
}
