//! Parsing JSON that holds very long strings, fast.
//!
//! serde_json scans strings byte by byte (~0.6–1 GB/s here); a 50 MB base64 PDF inside JSON
//! text inside a text block is scanned twice that way before any layer sees it, which alone
//! would take the whole 100 ms budget. Here, strings of at least [`BIG`] bytes are *lifted*
//! out first: their ends are found with `memchr` (tens of GB/s), each is replaced in a small
//! skeleton by a placeholder, serde_json parses the skeleton, and each long string is then
//! unescaped in bulk (memcpy between escapes, SIMD UTF-8 validation) and put back. Anything
//! unusual (invalid JSON, a long object key, a lone surrogate, the placeholder text appearing
//! in the input) falls back to plain serde_json, so results and errors are exactly serde's.

use std::ops::Range;

use memchr::{memchr, memchr2, memmem};
use serde_json::Value;

/// Strings at least this long (in raw, escaped bytes) are lifted.
pub const BIG: usize = 64 * 1024;

const MARK: &str = "\u{0}stowage-lifted:";
const MARK_ESCAPED: &[u8] = b"\\u0000stowage-lifted:";

/// Parses JSON text; same result as `serde_json::from_slice`, faster when it has long strings.
pub fn parse(src: &[u8]) -> Result<Value, serde_json::Error> {
    if src.len() < BIG {
        return serde_json::from_slice(src);
    }
    match lift(src).and_then(|(skeleton, ranges)| rebuild(src, &skeleton, ranges)) {
        Some(v) => Ok(v),
        None => serde_json::from_slice(src),
    }
}

/// Like [`parse`], but reuses `src`'s memory for the longest string: it is unescaped in place
/// and becomes that string, so a 50 MB payload is never copied into a fresh allocation (on
/// this machine first-touching 50 MB of new memory costs ~30 ms, more than parsing it).
pub fn parse_owned(src: Vec<u8>) -> Result<Value, serde_json::Error> {
    if src.len() < BIG {
        return serde_json::from_slice(&src);
    }
    let Some((skeleton, ranges)) = lift_marked(&src) else { return serde_json::from_slice(&src) };
    match rebuild_owned(src, &skeleton, ranges) {
        Ok(v) => Ok(v),
        Err(src) => serde_json::from_slice(&src),
    }
}

/// [`parse_owned`] for a `String`; on failure the string comes back untouched, so a caller
/// that was only trying (is this string JSON?) loses nothing.
pub fn parse_string(src: String) -> Result<Value, String> {
    if src.len() < BIG {
        return serde_json::from_str(&src).map_err(|_| src);
    }
    let Some((skeleton, marked)) = lift_marked(src.as_bytes()) else {
        return serde_json::from_str(&src).map_err(|_| src);
    };
    let escapes: Vec<bool> = marked.iter().map(|(_, e)| *e).collect();
    let ranges: Vec<Range<usize>> = marked.into_iter().map(|(r, _)| r).collect();
    let Some(mut v) = serde_json::from_slice::<Value>(&skeleton).ok().filter(|v| !mark_in_keys(v)) else { return Err(src) };
    let longest = longest(&ranges);
    let mut strings: Vec<Option<String>> = Vec::with_capacity(ranges.len());
    for (i, r) in ranges.iter().enumerate() {
        if i == longest {
            strings.push(None);
            continue;
        }
        match unescape(&src.as_bytes()[r.clone()]) {
            Some(s) => strings.push(Some(s)),
            None => return Err(src),
        }
    }
    let r = ranges[longest].clone();
    let raw = &src.as_bytes()[r.clone()];
    if has_control(raw) {
        return Err(src);
    }
    if !escapes[longest] {
        // Already valid UTF-8 between two ASCII quotes: cut the String down to it in place.
        let mut s = src;
        s.truncate(r.end);
        s.drain(..r.start);
        strings[longest] = Some(s);
    } else {
        let bytes = src.into_bytes();
        match unescape_in_place(bytes, r, true) {
            Ok(s) => strings[longest] = Some(s),
            // Only reachable for invalid escapes, which the skeleton check cannot see; the
            // bytes were not modified before the failing escape was found.
            Err(bytes) => return Err(String::from_utf8(bytes).expect("untouched on failure")),
        }
    }
    put_back(&mut v, &mut strings).expect("placeholders are only in values (keys checked)");
    Ok(v)
}

/// A long object key was lifted: the skeleton cannot be put back together; checked before
/// the source is consumed.
fn mark_in_keys(v: &Value) -> bool {
    match v {
        Value::Array(items) => items.iter().any(mark_in_keys),
        Value::Object(m) => m.iter().any(|(k, i)| k.starts_with(MARK) || mark_in_keys(i)),
        _ => false,
    }
}

fn longest(ranges: &[Range<usize>]) -> usize {
    ranges.iter().enumerate().max_by_key(|(_, r)| r.len()).map(|(i, _)| i).unwrap_or(0)
}

fn has_control(raw: &[u8]) -> bool {
    // serde refuses raw control characters in strings; so do we (a branch-free fold per
    // chunk vectorises, unlike an early-exit `any`).
    raw.chunks(256).any(|c| c.iter().fold(false, |acc, &b| acc | (b < 0x20)))
}

fn rebuild_owned(src: Vec<u8>, skeleton: &[u8], marked: Vec<(Range<usize>, bool)>) -> Result<Value, Vec<u8>> {
    let escapes: Vec<bool> = marked.iter().map(|(_, e)| *e).collect();
    let ranges: Vec<Range<usize>> = marked.into_iter().map(|(r, _)| r).collect();
    let Some(mut v) = serde_json::from_slice::<Value>(skeleton).ok().filter(|v| !mark_in_keys(v)) else { return Err(src) };
    let longest = longest(&ranges);
    let mut strings: Vec<Option<String>> = Vec::with_capacity(ranges.len());
    for (i, r) in ranges.iter().enumerate() {
        if i == longest {
            strings.push(None);
            continue;
        }
        match unescape(&src[r.clone()]) {
            Some(s) => strings.push(Some(s)),
            None => return Err(src),
        }
    }
    if has_control(&src[ranges[longest].clone()]) {
        return Err(src);
    }
    match unescape_in_place(src, ranges[longest].clone(), escapes[longest]) {
        Ok(s) => strings[longest] = Some(s),
        Err(src) => return Err(src),
    }
    put_back(&mut v, &mut strings).expect("placeholders are only in values (keys checked)");
    Ok(v)
}

/// Unescapes `buf[r]` into the start of `buf` and returns it as the string. Escapes were
/// validated by [`lift_marked`], so the buffer is only modified once success is certain
/// (short of invalid UTF-8, which serde then reports on what remains).
fn unescape_in_place(mut buf: Vec<u8>, r: Range<usize>, escapes: bool) -> Result<String, Vec<u8>> {
    let (mut i, mut w) = (r.start, 0);
    while let Some(k) = if escapes { memchr(b'\\', &buf[i..r.end]) } else { None } {
        buf.copy_within(i..i + k, w);
        w += k;
        i += k;
        let (bytes, used) = decode_escape(&buf[i..r.end]).expect("checked above");
        buf[w..w + bytes.len()].copy_from_slice(&bytes);
        w += bytes.len();
        i += used;
    }
    buf.copy_within(i..r.end, w);
    w += r.end - i;
    buf.truncate(w);
    // Invalid UTF-8 cannot be returned unmodified any more; the caller then reports serde's
    // error on what remains, which is still an error as it should be.
    String::from_utf8(buf).map_err(|e| e.into_bytes())
}

/// Decodes one escape at the start of `raw` (which begins with a backslash): the UTF-8 bytes
/// and how many input bytes it used (never fewer than it produces).
fn decode_escape(raw: &[u8]) -> Option<(Vec<u8>, usize)> {
    let b = |c: u8| Some((vec![c], 2));
    match *raw.get(1)? {
        b'"' => b(b'"'),
        b'\\' => b(b'\\'),
        b'/' => b(b'/'),
        b'b' => b(0x08),
        b'f' => b(0x0c),
        b'n' => b(b'\n'),
        b'r' => b(b'\r'),
        b't' => b(b'\t'),
        b'u' => {
            let hi = hex4(raw.get(2..6)?)?;
            let (c, used) = if (0xD800..0xDC00).contains(&hi) {
                if raw.get(6..8)? != b"\\u" {
                    return None;
                }
                let lo = hex4(raw.get(8..12)?)?;
                if !(0xDC00..0xE000).contains(&lo) {
                    return None;
                }
                (char::from_u32(0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00))?, 12)
            } else {
                (char::from_u32(hi)?, 6)
            };
            let mut buf = [0u8; 4];
            Some((c.encode_utf8(&mut buf).as_bytes().to_vec(), used))
        }
        _ => None,
    }
}

/// The skeleton (long strings replaced by numbered placeholders) and the raw ranges of the
/// long strings' contents. `None` when the text cannot be lexed or holds the placeholder.
fn lift(src: &[u8]) -> Option<(Vec<u8>, Vec<Range<usize>>)> {
    lift_marked(src).map(|(s, r)| (s, r.into_iter().map(|(r, _)| r).collect()))
}

/// The long strings' raw ranges in the source, each with whether it holds escapes.
type MarkedRanges = Vec<(Range<usize>, bool)>;

/// [`lift`], also telling for each long string whether it holds escapes. Every escape met is
/// validated here, so the in-place unescape needs no separate checking pass.
fn lift_marked(src: &[u8]) -> Option<(Vec<u8>, MarkedRanges)> {
    if memmem::find(src, MARK_ESCAPED).is_some() {
        return None;
    }
    let mut skeleton = Vec::new();
    let mut ranges = Vec::new();
    let (mut pos, mut copied) = (0, 0);
    // Outside strings, every '"' opens one; inside, only '"' and '\\' matter.
    while let Some(q) = memchr(b'"', &src[pos..]) {
        let start = pos + q + 1;
        let mut i = start;
        let mut escapes = false;
        let end = loop {
            let j = i + memchr2(b'"', b'\\', src.get(i..)?)?;
            if src[j] == b'\\' {
                escapes = true;
                let (_, used) = decode_escape(&src[j..])?;
                i = j + used;
                continue;
            }
            break j;
        };
        if end - start >= BIG {
            skeleton.extend_from_slice(&src[copied..start]);
            skeleton.extend_from_slice(MARK_ESCAPED);
            skeleton.extend_from_slice(ranges.len().to_string().as_bytes());
            ranges.push((start..end, escapes));
            copied = end;
        }
        pos = end + 1;
    }
    if ranges.is_empty() {
        return None;
    }
    skeleton.extend_from_slice(&src[copied..]);
    Some((skeleton, ranges))
}

fn rebuild(src: &[u8], skeleton: &[u8], ranges: Vec<Range<usize>>) -> Option<Value> {
    let mut v: Value = serde_json::from_slice(skeleton).ok()?;
    let mut strings: Vec<Option<String>> = Vec::with_capacity(ranges.len());
    for r in ranges {
        strings.push(Some(unescape(&src[r])?));
    }
    put_back(&mut v, &mut strings)?;
    strings.iter().all(Option::is_none).then_some(v)
}

fn put_back(v: &mut Value, strings: &mut [Option<String>]) -> Option<()> {
    match v {
        Value::String(s) => {
            if let Some(n) = s.strip_prefix(MARK) {
                *s = strings.get_mut(n.parse::<usize>().ok()?)?.take()?;
            }
        }
        Value::Array(items) => {
            for i in items {
                put_back(i, strings)?;
            }
        }
        Value::Object(m) => {
            for (k, i) in m.iter_mut() {
                if k.starts_with(MARK) {
                    return None;
                }
                put_back(i, strings)?;
            }
        }
        _ => {}
    }
    Some(())
}

/// JSON string unescaping in bulk. `None` for anything serde_json would refuse.
fn unescape(raw: &[u8]) -> Option<String> {
    if has_control(raw) {
        return None;
    }
    let Some(first) = memchr(b'\\', raw) else {
        return std::str::from_utf8(raw).ok().map(str::to_owned);
    };
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    let mut next = Some(first);
    while let Some(k) = next {
        out.extend_from_slice(&raw[i..k]);
        let esc = *raw.get(k + 1)?;
        i = k + 2;
        match esc {
            b'"' => out.push(b'"'),
            b'\\' => out.push(b'\\'),
            b'/' => out.push(b'/'),
            b'b' => out.push(0x08),
            b'f' => out.push(0x0c),
            b'n' => out.push(b'\n'),
            b'r' => out.push(b'\r'),
            b't' => out.push(b'\t'),
            b'u' => {
                let hi = hex4(raw.get(i..i + 4)?)?;
                i += 4;
                let c = if (0xD800..0xDC00).contains(&hi) {
                    if raw.get(i..i + 2)? != b"\\u" {
                        return None;
                    }
                    let lo = hex4(raw.get(i + 2..i + 6)?)?;
                    if !(0xDC00..0xE000).contains(&lo) {
                        return None;
                    }
                    i += 6;
                    char::from_u32(0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00))?
                } else {
                    char::from_u32(hi)?
                };
                let mut buf = [0u8; 4];
                out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            }
            _ => return None,
        }
        next = memchr(b'\\', &raw[i..]).map(|k| k + i);
    }
    out.extend_from_slice(&raw[i..]);
    String::from_utf8(out).ok()
}

fn hex4(b: &[u8]) -> Option<u32> {
    u32::from_str_radix(std::str::from_utf8(b).ok()?, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn same_as_serde() {
        let big = "A".repeat(BIG + 3);
        let escaped = format!("{}\"quoted\" \\ / \n\t é 😀 \u{1}", "x".repeat(BIG));
        let inner = json!({"content": big, "name": "n"}).to_string();
        let cases = vec![
            json!({"content": [{"type": "text", "text": inner}], "isError": false}),
            json!([big, escaped, {"k": big}, "small \"one\""]),
            json!(escaped),
            json!({"a": 1}),
        ];
        for v in cases {
            let text = serde_json::to_vec(&v).unwrap();
            assert_eq!(parse(&text).unwrap(), v);
            let pretty = serde_json::to_vec_pretty(&v).unwrap();
            assert_eq!(parse(&pretty).unwrap(), v);
        }
    }

    #[test]
    fn owned_entries_match() {
        let big = "A".repeat(BIG + 3);
        let escaped = format!("{}\"quoted\" \\ / \n é 😀 \u{7f}", "x".repeat(BIG));
        for v in [
            json!({"content": [{"type": "text", "text": json!({"content": big, "name": "n"}).to_string()}]}),
            json!([escaped, big, {"k": "small"}]),
            json!({"t": escaped}),
        ] {
            let text = serde_json::to_string(&v).unwrap();
            assert_eq!(parse_owned(text.clone().into_bytes()).unwrap(), v);
            assert_eq!(parse_string(text).unwrap(), v);
        }
        // Not JSON: the string comes back as it was.
        let not_json = format!("{{\"a\": \"{}\" oops}}", "z".repeat(BIG));
        assert_eq!(parse_string(not_json.clone()).unwrap_err(), not_json);
        let bad_escape = format!("[\"{}\\q\"]", "z".repeat(BIG));
        assert_eq!(parse_string(bad_escape.clone()).unwrap_err(), bad_escape);
        assert!(parse_owned(bad_escape.into_bytes()).is_err());
    }

    #[test]
    fn falls_back_to_serde() {
        let big = "B".repeat(BIG);
        for text in [
            format!("{{\"{big}\": 1}}"),                                   // long key
            format!("[\"{big}\", \"\\u0000stowage-lifted:0\"]"),           // placeholder in input
            format!("[\"{big}\\ud800\"]"),                                 // lone surrogate
            format!("[\"{big}\" 1]"),                                      // invalid json
            format!("[\"{big}\u{1}\"]"),                                    // raw control char
            format!("[\"{big}"),                                           // unterminated
        ] {
            let ours = parse(text.as_bytes());
            let serde = serde_json::from_slice::<Value>(text.as_bytes());
            assert_eq!(ours.is_ok(), serde.is_ok(), "{}", &text[text.len() - 30..]);
            if let (Ok(a), Ok(b)) = (ours, serde) {
                assert_eq!(a, b);
            }
        }
    }
}
