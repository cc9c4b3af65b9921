//! An artifact as a person's screen shows it (the playground, the MCP Apps viewer): its
//! metadata, what kind of preview suits it, and a fresh signed link to load it from. Every
//! string in it is the artifact's own, untrusted.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use stowage_core::ArtifactRef;
use stowage_links::SignedLink;

/// What a preview shows an artifact as, decided by its media type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// A raster image (PNG, JPEG, GIF, WebP, …).
    Image,
    /// Shown as an image only (an `<img>` runs no script), never inline.
    Svg,
    /// A PDF document.
    Pdf,
    /// Any `audio/*`.
    Audio,
    /// Any `video/*`.
    Video,
    /// JSON (`application/json` and `+json` types).
    Json,
    /// CSV.
    Csv,
    /// Other text.
    Text,
    /// Shown as text: HTML is never rendered.
    Html,
    /// Anything else: offered as a download.
    Other,
}

/// The kind of an artifact of media type `mime` (parameters and case ignored).
pub fn kind_of(mime: Option<&str>) -> Kind {
    let essence = mime.unwrap_or("").split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    let (top, sub) = essence.split_once('/').unwrap_or((essence.as_str(), ""));
    match (top, sub) {
        ("image", "svg+xml") => Kind::Svg,
        ("image", _) => Kind::Image,
        ("application", "pdf") => Kind::Pdf,
        ("audio", _) => Kind::Audio,
        ("video", _) => Kind::Video,
        ("text", "csv") => Kind::Csv,
        ("text", "html") | ("application", "xhtml+xml") => Kind::Html,
        ("application", "json") | ("application", "x-ndjson") => Kind::Json,
        (_, s) if s.ends_with("+json") => Kind::Json,
        ("text", _) | ("application", "xml") | ("application", "yaml") | ("application", "x-yaml") => Kind::Text,
        _ => Kind::Other,
    }
}

/// An artifact as the page shows it. Every string in it is the artifact's own, untrusted.
pub fn describe(meta: &ArtifactRef, link: Option<&SignedLink>) -> Value {
    let ts = |t: &time::OffsetDateTime| t.format(&time::format_description::well_known::Rfc3339).ok();
    json!({
        "id": meta.id.to_string(),
        "uri": meta.uri,
        "name": meta.filename,
        "mime_type": meta.mime_type,
        "kind": kind_of(meta.mime_type.as_deref()),
        "size_bytes": meta.size_bytes,
        "sha256": meta.sha256,
        "created_at": ts(&meta.created_at),
        "expires_at": meta.expires_at.as_ref().and_then(ts),
        "session": meta.scope.session_id,
        "width": meta.source.get("width"),
        "height": meta.source.get("height"),
        "url": link.map(|l| l.url.clone()),
        "url_expires_at": link.map(SignedLink::expires_rfc3339).filter(|e| !e.is_empty()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_from_media_types() {
        assert_eq!(kind_of(Some("image/PNG")), Kind::Image);
        assert_eq!(kind_of(Some("image/svg+xml")), Kind::Svg);
        assert_eq!(kind_of(Some("application/pdf")), Kind::Pdf);
        assert_eq!(kind_of(Some("audio/wav")), Kind::Audio);
        assert_eq!(kind_of(Some("application/json; charset=utf-8")), Kind::Json);
        assert_eq!(kind_of(Some("application/vnd.api+json")), Kind::Json);
        assert_eq!(kind_of(Some("text/csv")), Kind::Csv);
        assert_eq!(kind_of(Some("text/html")), Kind::Html);
        assert_eq!(kind_of(Some("text/plain")), Kind::Text);
        assert_eq!(kind_of(Some("application/octet-stream")), Kind::Other);
        assert_eq!(kind_of(None), Kind::Other);
    }
}
