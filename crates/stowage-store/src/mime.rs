//! The media type a put records: the caller's claim, normalized, or else one sniffed from the
//! bytes (magic numbers first, then text).
//!
//! A claim that is not one well-formed type (a list such as `image/png,text/html`, a wildcard,
//! garbage, over 255 bytes) is treated as no claim: the bytes are sniffed instead, which gives
//! `application/octet-stream` when they are nothing we know. Not refused, because the claim
//! usually comes from an upstream tool, and refusing would fail the user's whole tool call
//! (a store failure never falls back to inline base64) over a label; not recorded as
//! octet-stream outright, because the bytes often say exactly what they are (a real PNG whose
//! upstream sent `image/png,text/html` is still served as the image it is).

/// How many leading bytes are kept for sniffing; `infer` needs far fewer for every type it
/// knows, and a UTF-8 check on a prefix is a good enough guess for text.
pub(crate) const SNIFF_LEN: usize = 8192;

/// The media type to record for content whose first bytes are `head` and whose producer
/// claimed `claimed`.
pub(crate) fn media_type(claimed: Option<&str>, head: &[u8], complete: bool) -> String {
    match claimed.map(stowage_core::normalize_media_type) {
        Some(Ok(media_type)) => media_type,
        Some(Err(e)) => {
            tracing::warn!(target: "stowage::store", error = %e, "ignoring the claimed media type; typing the artifact from its bytes");
            sniff(head, complete)
        }
        None => sniff(head, complete),
    }
}

/// Sniffs the media type from the first bytes of the content. `complete` says whether `head`
/// is the whole content: a prefix may end in the middle of a multi-byte UTF-8 character.
pub(crate) fn sniff(head: &[u8], complete: bool) -> String {
    if let Some(kind) = infer::get(head) {
        return kind.mime_type().to_owned();
    }
    let is_text = match std::str::from_utf8(head) {
        Ok(_) => true,
        // A cut inside the last character is fine; invalid bytes anywhere else are not.
        Err(e) => !complete && e.error_len().is_none(),
    };
    if is_text && !head.is_empty() { "text/plain; charset=utf-8".to_owned() } else { "application/octet-stream".to_owned() }
}

#[cfg(test)]
mod tests {
    use super::{media_type, sniff};

    #[test]
    fn claims_are_normalized_and_bad_ones_fall_back_to_the_bytes() {
        let png: &[u8] = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR";
        let html: &[u8] = b"<html><script>alert(1)</script></html>";
        let long = format!("image/{}", "x".repeat(300));
        let cases: &[(Option<&str>, &[u8], &str)] = &[
            (Some("IMAGE/PNG; name=a.html"), png, "image/png"),
            (Some("text/plain; charset=UTF-8"), b"hi", "text/plain; charset=utf-8"),
            // Regression: stored as given, then served verbatim; Chromium rendered it as HTML.
            (Some("image/png,text/html"), png, "image/png"),
            (Some("image/png,text/html"), html, "text/html"),
            (Some("image/png,text/html"), b"\x00\x01\x02\xff\xfe", "application/octet-stream"),
            (Some(&long), png, "image/png"),
            (Some("*/*"), b"plain words", "text/plain; charset=utf-8"),
            (Some("image/png\r\nX-Evil: 1"), b"\x00\x01\x02\xff\xfe", "application/octet-stream"),
            (None, png, "image/png"),
        ];
        for (claimed, head, want) in cases {
            assert_eq!(media_type(*claimed, head, true), *want, "{claimed:?}");
        }
    }

    #[test]
    fn sniffing() {
        let cases: &[(&[u8], bool, &str)] = &[
            (b"%PDF-1.7\n%\xe2\xe3", true, "application/pdf"),
            (b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR", true, "image/png"),
            (b"{\"a\": 1}", true, "text/plain; charset=utf-8"),
            ("h\u{e9}llo".as_bytes(), true, "text/plain; charset=utf-8"),
            // A prefix cut inside "é" is still text.
            (b"hello \xc3", false, "text/plain; charset=utf-8"),
            (b"hello \xc3", true, "application/octet-stream"),
            (b"\x00\x01\x02\xff\xfe", true, "application/octet-stream"),
            (b"", true, "application/octet-stream"),
        ];
        for (bytes, complete, want) in cases {
            assert_eq!(sniff(bytes, *complete), *want, "{bytes:?}");
        }
    }
}
