//! Domain types shared by every Stowage crate: what an artifact *is*, who owns it, and how the
//! rest of the system asks for one to be stored. This crate does no IO.
//!
//! The main types and how they relate:
//! - [`ArtifactId`]: a content-addressed identifier, `{namespace}_{sha256 prefix}`;
//! - [`ArtifactScope`]: who stored an artifact (tenant, user, session) and in which trace;
//!   the first three form the [`Owner`]; a store's [`Isolation`] decides whether access is
//!   per (tenant, user), the default, or per (tenant, user, session);
//! - [`ArtifactRef`]: the compact, LLM-safe reference handed out after a put;
//! - [`PutOptions`] and [`ArtifactSink`]: the small contract through which producers
//!   (the transform pipeline, tools) hand bytes to a store without knowing which one;
//! - [`StoreError`]: the one error enum every store speaks;
//! - [`normalize_media_type`]: the one rule for what media type an artifact may carry.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod error;
mod id;
mod media_type;
mod reference;
mod scope;
mod sink;

pub use error::{BoxError, ErrorCode, StoreError};
pub use id::{ARTIFACT_URI_SCHEME, ArtifactId, ID_HASH_HEX_LEN, IdError};
pub use media_type::{MAX_MEDIA_TYPE_LEN, MediaTypeError, media_type_essence, normalize_media_type};
pub use reference::{ArtifactRef, Timestamp};
pub use scope::{ArtifactScope, Isolation, Owner};
pub use sink::{ArtifactSink, PutOptions};

/// Formats a byte count for people: `512 B`, `499.6 KB`, `1.2 GB` (powers of 1024, one decimal).
///
/// Used in summaries the model reads, so it is short and stable rather than precise.
pub fn human_size(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KB", "MB", "GB", "TB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

/// The longest prefix of `s` of at most `max` bytes that ends on a character boundary: how
/// text is cut to a byte budget without splitting a character.
pub fn cut_at_char(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// The head and tail of `text` that fit `head_bytes` and `tail_bytes`, cut on character
/// boundaries and, when a line break is near the cut (within a quarter of the budget), on it:
/// what a preview of a long text shows around the part it leaves out. The exception at the end
/// of a stack trace and the first lines of a log both survive. When the two budgets cover the
/// whole text, the head is the whole text and the tail is empty.
pub fn head_and_tail(text: &str, head_bytes: usize, tail_bytes: usize) -> (&str, &str) {
    if head_bytes.saturating_add(tail_bytes) >= text.len() {
        return (text, "");
    }
    let mut head = cut_at_char(text, head_bytes);
    if let Some(nl) = head.rfind('\n').filter(|&nl| nl + 1 >= head.len() - head.len() / 4 && nl > 0) {
        head = &head[..nl];
    }
    let rest = &text[head.len()..];
    let mut start = rest.len().saturating_sub(tail_bytes);
    while !rest.is_char_boundary(start) {
        start += 1;
    }
    let mut tail = &rest[start..];
    if let Some(nl) = tail.find('\n').filter(|&nl| nl <= tail.len() / 4 && nl + 1 < tail.len()) {
        tail = &tail[nl + 1..];
    }
    (head, tail)
}

#[cfg(test)]
mod tests {
    use super::{cut_at_char, head_and_tail, human_size};

    #[test]
    fn head_and_tail_cut_on_lines_and_characters() {
        let text: String = (0..100).map(|i| format!("line {i:03} é\n")).collect();
        let (h, t) = head_and_tail(&text, 100, 50);
        assert!(h.len() <= 100 && h.ends_with('é') && h.starts_with("line 000"), "{h:?}");
        assert!(t.len() <= 50 && t.starts_with("line ") && t.ends_with("line 099 é\n"), "{t:?}");
        assert_eq!(head_and_tail("short", 3, 3), ("short", ""));
        // No line breaks: character boundaries only.
        let s = "é".repeat(100);
        let (h, t) = head_and_tail(&s, 11, 11);
        assert_eq!((h.len(), t.len()), (10, 10));
    }

    #[test]
    fn cuts_on_char_boundaries() {
        assert_eq!(cut_at_char("héllo", 2), "h");
        assert_eq!(cut_at_char("héllo", 3), "hé");
        assert_eq!(cut_at_char("abc", 10), "abc");
        assert_eq!(cut_at_char("日本", 4), "日");
    }

    #[test]
    fn human_sizes() {
        for (n, want) in [
            (0, "0 B"),
            (1023, "1023 B"),
            (1024, "1.0 KB"),
            (511_590, "499.6 KB"),
            (50 * 1024 * 1024, "50.0 MB"),
            (3 * 1024 * 1024 * 1024, "3.0 GB"),
        ] {
            assert_eq!(human_size(n), want, "{n}");
        }
    }
}
