//! Parsing JSON that holds very long strings, fast.
//!
//! serde_json scans strings byte by byte (~0.6–1 GB/s here); a 50 MB base64 PDF inside JSON
//! text inside a text block is scanned twice that way before any layer sees it, which alone
//! would take the whole 100 ms budget. Here, strings of at least [`BIG`] bytes are *lifted*
//! out first: their ends are found with `memchr` (tens of GB/s), each is replaced in a small
//! skeleton by a placeholder, serde_json parses the skeleton, and each long string is then
//! unescaped in bulk (memcpy between escapes, SIMD UTF-8 validation) and put back. Anything
//! unusual (invalid JSON, a long object key, a lone surrogate, a `\u0000` escape anywhere,
//! which is how the placeholder begins) falls back to plain serde_json, so results and errors
//! are exactly serde's.
//!
//! Each long string is read as few times as possible, since on this class of machine every
//! pass over 50 MB costs 5-10 ms: one scan finds its end, checks for control characters and
//! validates (and remembers) its escapes; unescaping then copies it once, and UTF-8 is
//! validated once.

use std::ops::Range;

use memchr::memchr;
use serde_json::Value;

/// Strings at least this long (in raw, escaped bytes) are lifted.
pub const BIG: usize = 64 * 1024;

/// Placeholders start with a NUL, which input strings can only hold as a `\u0000` escape;
/// [`lift`] refuses any such escape, so no input string is mistaken for a placeholder.
const MARK: &str = "\u{0}stowage-lifted:";
const MARK_ESCAPED: &[u8] = b"\\u0000stowage-lifted:";

/// Escape positions remembered per long string; beyond this, unescaping searches for them.
const MAX_ESCAPES_KEPT: usize = 4096;

/// Parses JSON text; same result as `serde_json::from_slice`, faster when it has long strings.
pub fn parse(src: &[u8]) -> Result<Value, serde_json::Error> {
    if src.len() < BIG {
        return serde_json::from_slice(src);
    }
    match lift(src).and_then(|(skeleton, lifted)| rebuild(src, &skeleton, lifted)) {
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
    let Some((skeleton, lifted)) = lift(&src) else { return serde_json::from_slice(&src) };
    match rebuild_owned(src, &skeleton, lifted) {
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
    let Some((skeleton, lifted)) = lift(src.as_bytes()) else {
        return serde_json::from_str(&src).map_err(|_| src);
    };
    let Some(mut v) = serde_json::from_slice::<Value>(&skeleton).ok().filter(|v| !mark_in_keys(v)) else { return Err(src) };
    let longest = longest(&lifted);
    let mut strings: Vec<Option<String>> = Vec::with_capacity(lifted.len());
    for (i, l) in lifted.iter().enumerate() {
        if i == longest {
            strings.push(None);
            continue;
        }
        match unescape(&src.as_bytes()[l.range.clone()], l) {
            Some(s) => strings.push(Some(s)),
            None => return Err(src),
        }
    }
    let l = &lifted[longest];
    if l.escapes.is_empty() {
        // Already valid UTF-8 between two ASCII quotes: cut the String down to it in place.
        let mut s = src;
        s.truncate(l.range.end);
        s.drain(..l.range.start);
        strings[longest] = Some(s);
    } else {
        strings[longest] = Some(unescape_in_string(src, l));
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

/// One long string lifted out of the source.
#[derive(Debug)]
struct Lifted {
    /// Its raw (escaped) contents.
    range: Range<usize>,
    /// Where its escapes begin: all of them, or the first [`MAX_ESCAPES_KEPT`] when
    /// `more_escapes`. Empty: the string has none.
    escapes: Vec<usize>,
    more_escapes: bool,
}

fn longest(lifted: &[Lifted]) -> usize {
    lifted.iter().enumerate().max_by_key(|(_, l)| l.range.len()).map(|(i, _)| i).unwrap_or(0)
}

fn rebuild_owned(src: Vec<u8>, skeleton: &[u8], lifted: Vec<Lifted>) -> Result<Value, Vec<u8>> {
    let Some(mut v) = serde_json::from_slice::<Value>(skeleton).ok().filter(|v| !mark_in_keys(v)) else { return Err(src) };
    let longest = longest(&lifted);
    let mut strings: Vec<Option<String>> = Vec::with_capacity(lifted.len());
    for (i, l) in lifted.iter().enumerate() {
        if i == longest {
            strings.push(None);
            continue;
        }
        match unescape(&src[l.range.clone()], l) {
            Some(s) => strings.push(Some(s)),
            None => return Err(src),
        }
    }
    match unescape_in_place(src, &lifted[longest]) {
        Ok(s) => strings[longest] = Some(s),
        Err(src) => return Err(src),
    }
    put_back(&mut v, &mut strings).expect("placeholders are only in values (keys checked)");
    Ok(v)
}

/// The escapes of `l` in order, given as offsets into `raw` (which starts at `base` in the
/// source): the remembered ones, then (past [`MAX_ESCAPES_KEPT`]) found by searching.
fn next_escape(raw: &[u8], base: usize, l: &Lifted, known: &mut std::slice::Iter<'_, usize>, from: usize) -> Option<usize> {
    match known.next() {
        Some(&k) => Some(k - base),
        None if l.more_escapes => memchr(b'\\', &raw[from..]).map(|k| from + k),
        None => None,
    }
}

/// Unescapes the lifted string `l` into the start of `buf` and returns it as the string.
/// Escapes were validated by [`lift`], which also remembered where they are, so the
/// string is read once here (copied, escape by escape) and once more for UTF-8.
fn unescape_in_place(mut buf: Vec<u8>, l: &Lifted) -> Result<String, Vec<u8>> {
    let r = l.range.clone();
    let (mut i, mut w) = (r.start, 0);
    let mut known = l.escapes.iter();
    while let Some(k) = next_escape(&buf[..r.end], 0, l, &mut known, i) {
        buf.copy_within(i..k, w);
        w += k - i;
        let (c, used) = decode_escape(&buf[k..r.end]).expect("validated while lifting");
        buf[w..w + c.len()].copy_from_slice(c.as_bytes());
        w += c.len();
        i = k + used;
    }
    buf.copy_within(i..r.end, w);
    w += r.end - i;
    buf.truncate(w);
    // Invalid UTF-8 cannot be returned unmodified any more; the caller then reports serde's
    // error on what remains, which is still an error as it should be.
    String::from_utf8(buf).map_err(|e| e.into_bytes())
}

/// [`unescape_in_place`] for a `String`, without checking UTF-8 again: the longest run
/// between two escapes (a 50 MB base64 inside escaped JSON text) stays where it is in the
/// string, the unescaped text before it replaces everything in front of it (one move of the
/// run), and the unescaped text after it is appended. Every cut is at an ASCII byte (a quote,
/// a backslash, the end of an escape), so the string stays valid throughout.
fn unescape_in_string(mut s: String, l: &Lifted) -> String {
    let r = l.range.clone();
    let bytes = s.as_bytes();
    let (mut run, mut from) = (r.start..r.start, r.start);
    let mut known = l.escapes.iter();
    while let Some(k) = next_escape(&bytes[..r.end], 0, l, &mut known, from) {
        if k - from > run.len() {
            run = from..k;
        }
        from = k + decode_escape(&bytes[k..r.end]).expect("validated while lifting").1;
    }
    if r.end - from > run.len() {
        run = from..r.end;
    }
    let head = unescape_raw(&bytes[r.start..run.start]).expect("validated while lifting");
    let tail = unescape_raw(&bytes[run.end..r.end]).expect("validated while lifting");
    s.truncate(run.end);
    s.replace_range(..run.start, &head);
    s.push_str(&tail);
    s
}

/// Unescapes string contents whose escapes are valid, searching for them.
fn unescape_raw(raw: &[u8]) -> Option<String> {
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while let Some(k) = memchr(b'\\', &raw[i..]).map(|k| i + k) {
        out.extend_from_slice(&raw[i..k]);
        let (c, used) = decode_escape(&raw[k..])?;
        out.extend_from_slice(c.as_bytes());
        i = k + used;
    }
    out.extend_from_slice(&raw[i..]);
    String::from_utf8(out).ok()
}

/// One decoded escape: a UTF-8 encoded character (1 to 4 bytes).
struct Decoded {
    bytes: [u8; 4],
    len: usize,
}

impl Decoded {
    fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }

    fn len(&self) -> usize {
        self.len
    }
}

/// Decodes one escape at the start of `raw` (which begins with a backslash): the character
/// and how many input bytes it used (never fewer than it produces).
fn decode_escape(raw: &[u8]) -> Option<(Decoded, usize)> {
    let one = |c: u8| Some((Decoded { bytes: [c, 0, 0, 0], len: 1 }, 2));
    match *raw.get(1)? {
        b'"' => one(b'"'),
        b'\\' => one(b'\\'),
        b'/' => one(b'/'),
        b'b' => one(0x08),
        b'f' => one(0x0c),
        b'n' => one(b'\n'),
        b'r' => one(b'\r'),
        b't' => one(b'\t'),
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
            let mut bytes = [0u8; 4];
            let len = c.encode_utf8(&mut bytes).len();
            Some((Decoded { bytes, len }, used))
        }
        _ => None,
    }
}

/// Whether `b` ends a run of plain string bytes: a quote, a backslash or a control character.
#[inline]
fn special(b: u8) -> bool {
    (b == b'"') | (b == b'\\') | (b < 0x20)
}

/// The first quote, backslash or control character in `s`: one pass that does what a
/// `memchr2` for the ends and a separate control-character check did in two. A branch-free
/// fold per 64-byte block vectorises; only the block that has one is searched byte by byte.
fn find_special(s: &[u8]) -> Option<usize> {
    const BLOCK: usize = 64;
    // Short strings (most keys and values) end within a few bytes.
    let head = s.len().min(16);
    if let Some(i) = s[..head].iter().position(|&b| special(b)) {
        return Some(i);
    }
    let mut at = head;
    for block in s[head..].chunks_exact(BLOCK) {
        if block.iter().fold(false, |acc, &b| acc | special(b)) {
            return block.iter().position(|&b| special(b)).map(|i| at + i);
        }
        at += BLOCK;
    }
    s[at..].iter().position(|&b| special(b)).map(|i| at + i)
}

/// The skeleton (long strings replaced by numbered placeholders) and the long strings. Every
/// string is scanned once, for its end, its escapes (each validated, and remembered for long
/// strings) and control characters; `None` when the text cannot be lexed, holds a control
/// character in a string, or holds a `\u0000` escape (see [`MARK`]).
fn lift(src: &[u8]) -> Option<(Vec<u8>, Vec<Lifted>)> {
    let mut skeleton = Vec::new();
    let mut lifted = Vec::new();
    let mut escapes = Vec::new();
    let (mut pos, mut copied) = (0, 0);
    // Outside strings, every '"' opens one; inside, only '"', '\\' and control bytes matter.
    while let Some(q) = memchr(b'"', &src[pos..]) {
        let start = pos + q + 1;
        let mut i = start;
        let mut more_escapes = false;
        escapes.clear();
        let end = loop {
            let j = i + find_special(src.get(i..)?)?;
            match src[j] {
                b'"' => break j,
                b'\\' => {
                    let (c, used) = decode_escape(&src[j..])?;
                    if c.as_bytes() == [0] {
                        return None;
                    }
                    if escapes.len() < MAX_ESCAPES_KEPT {
                        escapes.push(j);
                    } else {
                        more_escapes = true;
                    }
                    i = j + used;
                }
                // serde refuses raw control characters in strings: let it say so.
                _ => return None,
            }
        };
        if end - start >= BIG {
            skeleton.extend_from_slice(&src[copied..start]);
            skeleton.extend_from_slice(MARK_ESCAPED);
            skeleton.extend_from_slice(lifted.len().to_string().as_bytes());
            lifted.push(Lifted { range: start..end, escapes: std::mem::take(&mut escapes), more_escapes });
            copied = end;
        }
        pos = end + 1;
    }
    if lifted.is_empty() {
        return None;
    }
    skeleton.extend_from_slice(&src[copied..]);
    Some((skeleton, lifted))
}

fn rebuild(src: &[u8], skeleton: &[u8], lifted: Vec<Lifted>) -> Option<Value> {
    let mut v: Value = serde_json::from_slice(skeleton).ok()?;
    let mut strings: Vec<Option<String>> = Vec::with_capacity(lifted.len());
    for l in &lifted {
        strings.push(Some(unescape(&src[l.range.clone()], l)?));
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

/// Unescapes the lifted string `l` (its raw bytes `raw`) into a new string, copying in bulk
/// between its escapes. `None` for invalid UTF-8.
fn unescape(raw: &[u8], l: &Lifted) -> Option<String> {
    if l.escapes.is_empty() {
        return std::str::from_utf8(raw).ok().map(str::to_owned);
    }
    let base = l.range.start;
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    let mut known = l.escapes.iter();
    while let Some(k) = next_escape(raw, base, l, &mut known, i) {
        out.extend_from_slice(&raw[i..k]);
        let (c, used) = decode_escape(&raw[k..])?;
        out.extend_from_slice(c.as_bytes());
        i = k + used;
    }
    out.extend_from_slice(&raw[i..]);
    String::from_utf8(out).ok()
}

fn hex4(b: &[u8]) -> Option<u32> {
    if b.len() != 4 || !b.iter().all(u8::is_ascii_hexdigit) {
        return None;
    }
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
            format!("{{\"{big}\": 1}}"),                               // long key
            format!("[\"{big}\", \"\\u0000stowage-lifted:0\"]"),       // placeholder in input
            format!("[\"{big}\\ud800\"]"),                             // lone surrogate
            format!("[\"{big}\" 1]"),                                  // invalid json
            format!("[\"{big}\u{1}\"]"),                               // raw control char
            format!("[\"{big}"),                                       // unterminated
            format!("[\"{big}\", \"\\u0000\\u0073towage-lifted:0\"]"), // placeholder, escaped differently
            format!("[\"{big}\", \"a\\u0000\"]"),                      // any NUL escape
            format!("[\"{big}\\u+041\"]"),                             // a sign is not a hex digit
            format!("[\"{big}\", \"a\u{1f}b\"]"),                      // control char in a short string
            format!("[\"{big}\", \"\\x\"]"),                           // bad escape in a short string
        ] {
            let serde = serde_json::from_slice::<Value>(text.as_bytes());
            let ours = parse(text.as_bytes());
            assert_eq!(ours.is_ok(), serde.is_ok(), "{}", &text[text.len() - 30..]);
            if let (Ok(a), Ok(b)) = (ours, &serde) {
                assert_eq!(&a, b);
            }
            let owned = parse_owned(text.clone().into_bytes()).map_err(|e| e.to_string());
            assert!(owned == serde.as_ref().map(Clone::clone).map_err(|e| e.to_string()), "{}", &text[text.len() - 30..]);
            // parse_string may give up on what serde accepts (a long key), never the reverse,
            // and a string it gives up on comes back unchanged.
            match (parse_string(text.clone()), &serde) {
                (Ok(a), Ok(b)) => assert!(&a == b),
                (Err(back), _) => assert!(back == text, "the string came back changed"),
                (Ok(_), Err(e)) => panic!("parse_string accepted what serde refuses: {e}"),
            }
        }
    }

    /// Long strings full of escapes (more than are remembered), unicode and surrogate pairs,
    /// in every position: all three entry points agree with serde_json.
    #[test]
    fn many_escapes_and_random_shapes_match_serde() {
        let pieces = ["\n", "\"", "\\", "é", "😀", "\t", "plain text ", "\u{7f}", "/"];
        let mut seed: u64 = 0x5eed;
        let mut next = move |n: usize| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % n as u64) as usize
        };
        for round in 0..12 {
            let mut long = String::new();
            while long.len() < BIG * (1 + round % 3) {
                long.push_str(pieces[next(pieces.len())]);
                if round % 4 == 0 {
                    long.push_str(&"Q".repeat(next(40)));
                }
            }
            let v = match round % 3 {
                0 => json!({"text": long, "n": round, "k": ["short\n", {"deep": long.clone()}]}),
                1 => json!([long, "x", {"t": json!({"inner": long}).to_string()}]),
                _ => json!({"content": [{"type": "text", "text": long}], "isError": false}),
            };
            for text in [serde_json::to_string(&v).unwrap(), serde_json::to_string_pretty(&v).unwrap()] {
                assert_eq!(parse(text.as_bytes()).unwrap(), v, "round {round}");
                assert_eq!(parse_owned(text.clone().into_bytes()).unwrap(), v, "round {round}");
                assert_eq!(parse_string(text).unwrap(), v, "round {round}");
            }
        }
    }
}
