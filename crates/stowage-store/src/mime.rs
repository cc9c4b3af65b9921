//! Media type of stored bytes when the caller gave none: magic numbers first, then text.

/// How many leading bytes are kept for sniffing; `infer` needs far fewer for every type it
/// knows, and a UTF-8 check on a prefix is a good enough guess for text.
pub(crate) const SNIFF_LEN: usize = 8192;

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
    use super::sniff;

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
