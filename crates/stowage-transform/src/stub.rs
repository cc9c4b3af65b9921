//! What the model reads in place of an offloaded value: summaries, one-line string stubs,
//! content blocks and the `<artifact:…>` placeholders.
//!
//! One shape everywhere, so a model learns it once: a one-line summary that names the kind,
//! the name when there is one, the size and the `artifact://` URI, followed by the details a
//! program may want (mime, short sha256, filename) in brackets.

use serde_json::{Map, Value, json};
use stowage_core::{ArtifactRef, human_size};

/// How many hex digits of the sha256 a stub shows.
pub const SHORT_SHA_LEN: usize = 12;

/// A person-readable kind for a media type: `PDF document`, `PNG image`, `WAV audio`.
pub fn describe_mime(mime: Option<&str>) -> String {
    let Some(mime) = mime else { return "Binary file".to_owned() };
    let essence = mime.split(';').next().unwrap_or(mime).trim().to_ascii_lowercase();
    let known = match essence.as_str() {
        "application/pdf" => "PDF document",
        "application/zip" => "ZIP archive",
        "application/gzip" | "application/x-gzip" => "gzip archive",
        "application/json" => "JSON document",
        "application/vnd.openxmlformats-officedocument.wordprocessingml.document" => "Word document",
        "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet" => "Excel workbook",
        "application/vnd.openxmlformats-officedocument.presentationml.presentation" => "PowerPoint presentation",
        "application/x-tar" => "tar archive",
        "application/x-bzip2" => "bzip2 archive",
        "application/x-7z-compressed" => "7z archive",
        "application/octet-stream" => "Binary file",
        "text/plain" => "Text",
        _ => "",
    };
    if !known.is_empty() {
        return known.to_owned();
    }
    match essence.split_once('/') {
        Some(("image", sub)) => format!("{} image", sub.trim_start_matches("x-").to_ascii_uppercase()),
        Some(("audio", sub)) => format!("{} audio", sub.trim_start_matches("x-").to_ascii_uppercase()),
        Some(("video", sub)) => format!("{} video", sub.trim_start_matches("x-").to_ascii_uppercase()),
        Some(("text", sub)) => format!("{} text", sub.trim_start_matches("x-").to_ascii_uppercase()),
        _ => format!("{essence} file"),
    }
}

/// The placeholders a summary or filename template can use, filled from the stored artifact
/// and the value's sibling fields.
#[derive(Debug, Clone, Default)]
pub struct TemplateVars {
    vars: Map<String, Value>,
}

impl TemplateVars {
    /// Starts from the sibling fields of the offloaded value (scalars only: nested objects
    /// would make summaries unbounded).
    pub fn from_siblings(parent: Option<&Map<String, Value>>, skip_key: Option<&str>) -> Self {
        let mut vars = Map::new();
        if let Some(parent) = parent {
            for (k, v) in parent {
                if Some(k.as_str()) == skip_key {
                    continue;
                }
                match v {
                    Value::String(s) if s.len() <= 200 => {
                        vars.insert(k.clone(), v.clone());
                        let _ = s;
                    }
                    Value::Number(_) | Value::Bool(_) => {
                        vars.insert(k.clone(), v.clone());
                    }
                    _ => {}
                }
            }
        }
        TemplateVars { vars }
    }

    /// Sets `{key}` to `value`.
    pub fn set(&mut self, key: &str, value: impl Into<Value>) {
        self.vars.insert(key.to_owned(), value.into());
    }

    /// `{key}` as text, if set.
    pub fn get(&self, key: &str) -> Option<String> {
        match self.vars.get(key)? {
            Value::String(s) => Some(s.clone()),
            Value::Null => None,
            other => Some(other.to_string()),
        }
    }

    /// The value's human name: a `name`, `title`, `filename`, `file_name` or `*_name` sibling.
    pub fn name(&self) -> Option<String> {
        for key in ["name", "title", "filename", "file_name", "fileName", "displayName"] {
            if let Some(v) = self.get(key).filter(|s| !s.is_empty()) {
                return Some(v);
            }
        }
        self.vars
            .iter()
            .find(|(k, v)| k.ends_with("_name") && v.as_str().is_some_and(|s| !s.is_empty()))
            .and_then(|(_, v)| v.as_str().map(str::to_owned))
    }

    /// Adds what is known about the stored artifact.
    pub fn with_artifact(mut self, r: &ArtifactRef, content_type: Option<&str>) -> Self {
        let mime = r.mime_type.clone();
        self.set("artifact_id", r.id.as_str());
        self.set("uri", r.uri.clone());
        self.set("size", r.size_bytes);
        self.set("size_bytes", r.size_bytes);
        self.set("size_human", human_size(r.size_bytes));
        self.set("sha256", r.sha256.clone());
        self.set("mime", mime.clone().map(Value::String).unwrap_or(Value::Null));
        self.set("kind", describe_mime(mime.as_deref()));
        let ct = content_type.map(str::to_owned).or_else(|| mime.as_deref().and_then(content_type_of));
        self.set("content_type", ct.map(Value::String).unwrap_or(Value::Null));
        if let Some(f) = &r.filename {
            self.vars.entry("filename").or_insert_with(|| Value::String(f.clone()));
        }
        self
    }

    /// Fills `{placeholder}`s. `{name}` falls back to the filename, then to the artifact id;
    /// any other unknown placeholder becomes `?` so a typo shows instead of vanishing.
    pub fn fill(&self, template: &str) -> String {
        let mut out = String::with_capacity(template.len() + 32);
        let mut rest = template;
        while let Some(open) = rest.find('{') {
            out.push_str(&rest[..open]);
            let after = &rest[open + 1..];
            match after.find('}') {
                Some(close) if is_placeholder(&after[..close]) => {
                    let key = &after[..close];
                    let value = match key {
                        "name" => self.name().or_else(|| self.get("filename")).or_else(|| self.get("artifact_id")),
                        _ => self.get(key),
                    };
                    out.push_str(value.as_deref().unwrap_or("?"));
                    rest = &after[close + 1..];
                }
                _ => {
                    out.push('{');
                    rest = after;
                }
            }
        }
        out.push_str(rest);
        out
    }
}

fn is_placeholder(s: &str) -> bool {
    !s.is_empty() && s.len() <= 64 && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// A short content type (`pdf`, `png`, `zip`) for a mime type.
pub fn content_type_of(mime: &str) -> Option<String> {
    let essence = mime.split(';').next()?.trim();
    let sub = essence.split('/').nth(1)?;
    let sub = sub.trim_start_matches("x-").trim_start_matches("vnd.");
    Some(match sub {
        "vnd.openxmlformats-officedocument.wordprocessingml.document" | "openxmlformats-officedocument.wordprocessingml.document" => {
            "docx".to_owned()
        }
        "openxmlformats-officedocument.spreadsheetml.sheet" => "xlsx".to_owned(),
        "openxmlformats-officedocument.presentationml.presentation" => "pptx".to_owned(),
        "jpeg" => "jpeg".to_owned(),
        "plain" => "text".to_owned(),
        other => other.to_owned(),
    })
}

/// What a summary says of content the NoOp store did not keep.
pub const NOT_KEPT: &str = "was not kept: no artifact store is configured";

/// The default summary: `PDF document 'Sales Dashboard' (499.6 KB) stored as artifact://…`.
pub fn default_summary(r: &ArtifactRef, vars: &TemplateVars) -> String {
    let kind = describe_mime(r.mime_type.as_deref());
    let size = human_size(r.size_bytes);
    // The NoOp store's marker names no artifact: nothing was kept, so nothing can be fetched.
    let what = if r.is_truncated() { NOT_KEPT.to_owned() } else { format!("stored as {}", r.uri) };
    match vars.name() {
        Some(name) => format!("{kind} '{}' ({size}) {what}", one_line(&name, 80)),
        None => format!("{kind} ({size}) {what}"),
    }
}

/// The one-line string stub that replaces a heavy string inside JSON: the summary, then the
/// media type and the filename in brackets. Kept short: the model reads it on every call,
/// and the digest and links are for programs (the gateway puts them in `_meta`).
pub fn string_stub(r: &ArtifactRef, summary: &str) -> String {
    let mut s = one_line(summary, 240);
    s.push_str(" [");
    if !summary.contains(&r.uri) && !r.is_truncated() {
        s.push_str(&r.uri);
        s.push_str(", ");
    }
    s.push_str(r.mime_type.as_deref().unwrap_or("application/octet-stream"));
    if let Some(f) = &r.filename {
        s.push_str(", file: ");
        s.push_str(&one_line(f, 80));
    }
    s.push(']');
    s
}

/// A short name for an artifact with no filename: its namespace (the tool's name) and an
/// extension for its type (`download_workbook.pdf`), cheaper for a model to read than the id.
pub fn default_name(r: &ArtifactRef) -> String {
    let id = r.id.as_str();
    let stem = id.rsplit_once('_').filter(|(_, hash)| hash.len() == stowage_core::ID_HASH_HEX_LEN).map_or(id, |(ns, _)| ns);
    let ext = r.mime_type.as_deref().and_then(content_type_of).map(|t| match t.as_str() {
        "text" => "txt".to_owned(),
        "jpeg" => "jpg".to_owned(),
        "octet-stream" => "bin".to_owned(),
        other => other.to_owned(),
    });
    match ext {
        Some(ext) if ext.len() <= 8 => format!("{stem}.{ext}"),
        _ => stem.to_owned(),
    }
}

/// The `resource_link` content block for an artifact (MCP 2025-06-18 shape).
pub fn resource_link_block(r: &ArtifactRef) -> Value {
    let mut block = Map::new();
    block.insert("type".into(), "resource_link".into());
    block.insert("uri".into(), r.uri.clone().into());
    block.insert("name".into(), r.filename.clone().unwrap_or_else(|| default_name(r)).into());
    if let Some(m) = &r.mime_type {
        block.insert("mimeType".into(), m.clone().into());
    }
    block.insert("size".into(), r.size_bytes.into());
    Value::Object(block)
}

/// The text block that accompanies a `resource_link` in a content list.
pub fn text_block(text: String) -> Value {
    json!({"type": "text", "text": text})
}

/// The placeholder for a schema-marked field: `<artifact:dict size=42KB>`,
/// `<artifact:list size=847 items>`, `<artifact:str size=12KB>`.
pub fn placeholder(value: &Value, stored_bytes: u64) -> String {
    let compact = |n: u64| human_size(n).replace(' ', "");
    match value {
        Value::Object(_) => format!("<artifact:dict size={}>", compact(stored_bytes)),
        Value::Array(items) => format!("<artifact:list size={} items>", items.len()),
        Value::String(_) => format!("<artifact:str size={}>", compact(stored_bytes)),
        Value::Number(_) => "<artifact:number>".to_owned(),
        Value::Bool(_) => "<artifact:bool>".to_owned(),
        Value::Null => "<artifact:null>".to_owned(),
    }
}

/// Whether a string is a stub this pipeline wrote (so a second pass leaves it alone).
pub fn is_stub(s: &str) -> bool {
    s.len() <= 4096 && s.contains(stowage_core::ARTIFACT_URI_SCHEME)
}

/// Cuts to `max` characters on one line (summaries must never span lines).
pub fn one_line(s: &str, max: usize) -> String {
    let mut out: String = s.chars().map(|c| if c.is_control() { ' ' } else { c }).take(max).collect();
    if s.chars().count() > max {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use stowage_core::{ArtifactId, ArtifactScope};

    pub(crate) fn sample_ref(mime: Option<&str>, filename: Option<&str>) -> ArtifactRef {
        let sha = "3f2a9c0d1e4b5a6978877665544332211000ffeeddccbbaa9988776655443322";
        let id = ArtifactId::from_content(Some("tableau"), sha);
        ArtifactRef {
            uri: id.uri(),
            id,
            mime_type: mime.map(str::to_owned),
            size_bytes: 511_590,
            filename: filename.map(str::to_owned),
            sha256: sha.into(),
            scope: ArtifactScope::default(),
            source: Map::new(),
            created_at: time::OffsetDateTime::UNIX_EPOCH,
            expires_at: None,
        }
    }

    #[test]
    fn describe() {
        for (mime, want) in [
            (Some("application/pdf"), "PDF document"),
            (Some("image/png"), "PNG image"),
            (Some("image/jpeg"), "JPEG image"),
            (Some("audio/x-wav"), "WAV audio"),
            (Some("application/zip"), "ZIP archive"),
            (Some("text/csv; charset=utf-8"), "CSV text"),
            (Some("application/x-executable"), "application/x-executable file"),
            (None, "Binary file"),
        ] {
            assert_eq!(describe_mime(mime), want, "{mime:?}");
        }
    }

    #[test]
    fn templates_fill_every_placeholder() {
        let parent: Map<String, Value> = serde_json::from_value(json!({
            "content": "JVBERi0…", "name": "Sales Dashboard", "format": "pdf", "pages": 3, "nested": {"x": 1}
        }))
        .unwrap();
        let r = sample_ref(Some("application/pdf"), Some("Sales Dashboard.pdf"));
        let vars = TemplateVars::from_siblings(Some(&parent), Some("content")).with_artifact(&r, None);
        let cases = [
            ("{name}", "Sales Dashboard"),
            ("{size_human}", "499.6 KB"),
            ("{size}", "511590"),
            ("{mime}", "application/pdf"),
            ("{filename}", "Sales Dashboard.pdf"),
            ("{content_type}", "pdf"),
            ("{artifact_id}", "tableau_3f2a9c0d1e4b5a69"),
            ("{uri}", "artifact://tableau_3f2a9c0d1e4b5a69"),
            ("{format} x{pages}", "pdf x3"),
            ("{nested}", "?"),
            ("{content}", "?"),
            ("{no_such}", "?"),
            ("{ not a placeholder }", "{ not a placeholder }"),
            ("{", "{"),
            ("Downloaded workbook '{name}' as PDF", "Downloaded workbook 'Sales Dashboard' as PDF"),
        ];
        for (t, want) in cases {
            assert_eq!(vars.fill(t), want, "{t}");
        }
    }

    #[test]
    fn name_falls_back() {
        let r = sample_ref(Some("application/pdf"), None);
        let vars = TemplateVars::default().with_artifact(&r, None);
        assert_eq!(vars.fill("{name}"), "tableau_3f2a9c0d1e4b5a69");
        let parent: Map<String, Value> = serde_json::from_value(json!({"view_name": "Revenue"})).unwrap();
        assert_eq!(TemplateVars::from_siblings(Some(&parent), None).name().as_deref(), Some("Revenue"));
    }

    #[test]
    fn stubs() {
        let r = sample_ref(Some("application/pdf"), Some("Sales Dashboard.pdf"));
        let vars = TemplateVars::from_siblings(Some(&serde_json::from_value(json!({"name": "Sales Dashboard"})).unwrap()), None);
        let summary = default_summary(&r, &vars);
        assert_eq!(summary, "PDF document 'Sales Dashboard' (499.6 KB) stored as artifact://tableau_3f2a9c0d1e4b5a69");
        assert_eq!(
            string_stub(&r, &summary),
            "PDF document 'Sales Dashboard' (499.6 KB) stored as artifact://tableau_3f2a9c0d1e4b5a69 \
             [application/pdf, file: Sales Dashboard.pdf]"
        );
        assert!(string_stub(&r, "custom\nline").starts_with("custom line [artifact://"));
        assert_eq!(resource_link_block(&r)["uri"], "artifact://tableau_3f2a9c0d1e4b5a69");
        assert_eq!(resource_link_block(&r)["name"], "Sales Dashboard.pdf");
        assert_eq!(default_name(&sample_ref(Some("application/pdf"), None)), "tableau.pdf");
        assert_eq!(default_name(&sample_ref(Some("text/plain; charset=utf-8"), None)), "tableau.txt");
        assert_eq!(default_name(&sample_ref(None, None)), "tableau");
        assert_eq!(placeholder(&json!({"a": 1}), 43_008), "<artifact:dict size=42.0KB>");
        assert_eq!(placeholder(&json!([1, 2, 3]), 7), "<artifact:list size=3 items>");
    }
}
