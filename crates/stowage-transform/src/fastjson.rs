//! Parsing JSON that holds very long strings, fast.
//!
//! serde_json scans strings byte by byte (~0.6–1 GB/s here); a 50 MB base64 PDF inside JSON
//! text inside a text block is scanned twice that way before any layer sees it, which alone
//! would take the whole 100 ms budget. Here, strings of at least [`BIG`] bytes are *lifted*
//! out first: their ends are found by a scan that vectorises, each is replaced in a small
//! skeleton by a placeholder, serde_json parses the skeleton, and each long string is then
//! unescaped in bulk (memcpy between escapes) and put back. Anything unusual (invalid JSON, a
//! long object key, a lone surrogate, a `\u0000` escape anywhere, which is how a placeholder
//! begins) falls back to plain serde_json, so results and errors are exactly serde's.
//!
//! **No input makes this panic, by construction.** Everything that can fail is checked while
//! the source is still intact: bytes are checked to be UTF-8 first (then parsed as text, so
//! every later step is a `String` operation); every escape is decoded once while lifting; the
//! skeleton is parsed and its placeholders verified (each lifted string's exactly once, as a
//! value, never in a key); the other long strings are unescaped into their own memory. Only
//! then is the source consumed, by steps that cannot fail. (A tool result with one string over
//! 64 KiB and another spelling a placeholder, `"\u0000\u0073towage-lifted:0"`, used to reach an
//! `expect` here.)
//!
//! Each long string is read as few times as possible, since on this class of machine every
//! pass over 50 MB costs 4–7 ms: one scan finds its end, checks for control characters, and
//! validates (and remembers) its escapes; cutting it out of the source then moves it once.
//! The longest string of a parse can also come with a [`StringIndex`]: when it was JSON text
//! inside a JSON string (a text block's JSON), every quote, backslash and control character
//! in it came from an escape, so unescaping learns where they all are and parsing it as JSON
//! afterwards ([`parse_string_with_index`]) needs no scan at all.

use std::ops::Range;

use memchr::memchr;
use serde_json::Value;

use crate::path::{push_index, push_key};

/// Strings at least this long (in raw, escaped bytes) are lifted.
#[cfg(not(fuzzing))]
pub const BIG: usize = 64 * 1024;
/// Under the fuzzer (`--cfg fuzzing`) inputs are a few KiB at most: lift strings from 64 bytes
/// so it reaches the lifted path.
#[cfg(fuzzing)]
pub const BIG: usize = 64;

/// Placeholders start with a NUL, which input strings can only hold as a `\u0000` escape;
/// [`lift`] refuses any such escape, so no input string is mistaken for a placeholder (and
/// [`prepare`] checks the skeleton anyway).
const MARK: &str = "\u{0}stowage-lifted:";
const MARK_ESCAPED: &[u8] = b"\\u0000stowage-lifted:";

/// Escape positions remembered per long string; beyond this, unescaping searches for them
/// (and no [`StringIndex`] is made: it would be as large as the escapes).
const MAX_ESCAPES_KEPT: usize = 4096;

/// Where the bytes a JSON lexer stops at (quotes, backslashes, control characters) are in the
/// longest string of a parsed value, so that string can be parsed as JSON without being
/// scanned ([`parse_string_with_index`]). Made when that string looks like a JSON container
/// and all its escapes were remembered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StringIndex {
    pointer: String,
    len: usize,
    stops: Vec<usize>,
}

impl StringIndex {
    /// The RFC 6901 pointer of the string in the value it came with.
    pub fn pointer(&self) -> &str {
        &self.pointer
    }

    /// Whether this index is for `s`, found at `pointer` in the value the index came with. The
    /// caller must know that value was not changed since.
    pub fn is_for(&self, pointer: &str, s: &str) -> bool {
        self.pointer == pointer && self.len == s.len()
    }
}

/// Parses JSON text; same result as `serde_json::from_slice`, faster when it has long strings.
pub fn parse(src: &[u8]) -> Result<Value, serde_json::Error> {
    parse_at(src, BIG)
}

/// Like [`parse`], but reuses `src`'s memory for the longest string: it is unescaped in place
/// and becomes that string, so a 50 MB payload is never copied into a fresh allocation (on
/// this machine first-touching 50 MB of new memory costs ~25 ms, more than parsing it).
pub fn parse_owned(src: Vec<u8>) -> Result<Value, serde_json::Error> {
    owned_at(src, BIG).map(|(v, _)| v)
}

/// [`parse_owned`], and the longest string's [`StringIndex`] when it has one.
pub fn parse_owned_indexed(src: Vec<u8>) -> Result<(Value, Option<StringIndex>), serde_json::Error> {
    owned_at(src, BIG)
}

/// [`parse_owned`] for a `String`; on failure the string comes back untouched, so a caller
/// that was only trying (is this string JSON?) loses nothing. Succeeds exactly when serde_json
/// does, with the same value.
pub fn parse_string(src: String) -> Result<Value, String> {
    parse_string_indexed(src).map(|(v, _)| v)
}

/// [`parse_string`], and the longest string's [`StringIndex`] when it has one.
pub fn parse_string_indexed(src: String) -> Result<(Value, Option<StringIndex>), String> {
    string_at(src, BIG, None, false).map_err(Failed::into_source)
}

/// [`parse_string_indexed`] for a string an earlier parse indexed: the same result, without
/// scanning the string. An index made for another string must not be passed (debug builds
/// check); one of another length is ignored.
pub fn parse_string_with_index(src: String, index: &StringIndex) -> Result<(Value, Option<StringIndex>), String> {
    if index.len != src.len() {
        return parse_string_indexed(src);
    }
    debug_assert!(index.stops == all_stops(src.as_bytes()), "string index for another string");
    string_at(src, BIG, Some(&index.stops), false).map_err(Failed::into_source)
}

fn parse_at(src: &[u8], big: usize) -> Result<Value, serde_json::Error> {
    if src.len() >= big
        && let Some(lift) = lift(src, big, &mut Scan)
        && let Some(mut p) = prepare(src, &lift, None)
    {
        put_back(&mut p.value, &mut p.strings);
        return Ok(p.value);
    }
    serde_json::from_slice(src)
}

fn owned_at(src: Vec<u8>, big: usize) -> Result<(Value, Option<StringIndex>), serde_json::Error> {
    if src.len() < big {
        return serde_json::from_slice(&src).map(|v| (v, None));
    }
    // Checked once, up front (~4 ms for 50 MB): the same pass a `String` made of the longest
    // string would cost afterwards, and serde_json refuses what fails it anyway, with its own
    // error. From here on, everything is a `String` operation.
    match String::from_utf8(src) {
        Ok(text) => match string_at(text, big, None, true) {
            Ok(parsed) => Ok(parsed),
            Err(Failed::Serde(_, e)) => Err(e),
            // Cannot happen (see `unescape_in_place`). The source is gone by now, so say so
            // rather than guess at a value.
            Err(Failed::Lost) => Err(serde::de::Error::custom("internal error: a validated long string did not unescape")),
        },
        Err(e) => serde_json::from_slice(e.as_bytes()).map(|v| (v, None)),
    }
}

/// Why [`string_at`] gave no value: serde_json's answer for the untouched source, or (when it
/// could not happen) the source lost.
enum Failed {
    Serde(String, serde_json::Error),
    Lost,
}

impl Failed {
    /// The source back, for the `String` entry points; they never parse in place, so it is
    /// never lost (were it, an empty string, which no caller takes for JSON).
    fn into_source(self) -> String {
        match self {
            Failed::Serde(src, _) => src,
            Failed::Lost => String::new(),
        }
    }
}

/// Parses `src`; `known`: its stops, from a [`StringIndex`]. With `in_place`, a longest string
/// dense with escapes is unescaped in the source's memory (no second allocation the size of
/// it), at the price of the source if that could fail (it cannot; see `unescape_in_place`).
fn string_at(src: String, big: usize, known: Option<&[usize]>, in_place: bool) -> Result<(Value, Option<StringIndex>), Failed> {
    let fallback = |src: String| match serde_json::from_str(&src) {
        Ok(v) => Ok((v, None)),
        Err(e) => Err(Failed::Serde(src, e)),
    };
    if src.len() < big {
        return fallback(src);
    }
    let lifted = match known {
        Some(stops) => lift(src.as_bytes(), big, &mut Known { stops }),
        None => lift(src.as_bytes(), big, &mut Scan),
    };
    let Some(lift) = lifted else { return fallback(src) };
    let Some(mut p) = prepare(src.as_bytes(), &lift, Some(lift.longest)) else { return fallback(src) };
    let l = &lift.strings[lift.longest];
    let (s, stops) = if in_place && dense(l) {
        unescape_in_place(src.into_bytes(), l).ok_or(Failed::Lost)?
    } else {
        let Some(cut) = plan_cut(&src, l) else { return fallback(src) };
        cut.apply(src)
    };
    let index = index_for(&p.value, lift.longest, &s, stops);
    p.strings[lift.longest] = s;
    put_back(&mut p.value, &mut p.strings);
    Ok((p.value, index))
}

/// Whether a string's escapes are spread so widely that cutting it out ([`plan_cut`]) would
/// copy most of it (say 50 MB of JSON text, every quote escaped): more than a tenth of it
/// outside its longest run between escapes, the point past which allocating and copying that
/// part costs more than unescaping in place and checking the UTF-8 of the result.
fn dense(l: &Lifted) -> bool {
    if l.escapes.is_empty() {
        return false;
    }
    if l.more_escapes {
        return true;
    }
    let r = &l.range;
    let (mut longest, mut from) = (0, r.start);
    for k in l.escapes.iter().copied().chain(std::iter::once(r.end)) {
        longest = longest.max(k.saturating_sub(from));
        // The next run starts after this escape (at least 2 bytes; close enough for a bound).
        from = k + 2;
    }
    r.len() - longest.min(r.len()) > r.len() / 10
}

/// The index of the longest string `s` (lifted string `n` of the skeleton `v`), when its stops
/// are known and it looks like JSON worth parsing again.
fn index_for(v: &Value, n: usize, s: &str, stops: Option<Vec<usize>>) -> Option<StringIndex> {
    let stops = stops?;
    let t = s.trim_ascii();
    let container = (t.starts_with('{') && t.ends_with('}')) || (t.starts_with('[') && t.ends_with(']'));
    if !container {
        return None;
    }
    let mut pointer = String::new();
    pointer_to(v, n, &mut pointer).then_some(StringIndex { pointer, len: s.len(), stops })
}

/// Builds in `ptr` the pointer of placeholder `n` in the skeleton `v`; false if absent.
fn pointer_to(v: &Value, n: usize, ptr: &mut String) -> bool {
    let len = ptr.len();
    let found = match v {
        Value::String(s) => return s.strip_prefix(MARK).and_then(placeholder_index) == Some(n),
        Value::Array(items) => items.iter().enumerate().any(|(i, item)| {
            ptr.truncate(len);
            push_index(ptr, i);
            pointer_to(item, n, ptr)
        }),
        Value::Object(m) => m.iter().any(|(k, item)| {
            ptr.truncate(len);
            push_key(ptr, k);
            pointer_to(item, n, ptr)
        }),
        _ => false,
    };
    if !found {
        ptr.truncate(len);
    }
    found
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

/// A source with its long strings lifted out.
#[derive(Debug)]
struct Lift {
    /// The source with each long string replaced by its placeholder.
    skeleton: Vec<u8>,
    /// Never empty.
    strings: Vec<Lifted>,
    /// Which of `strings` is the longest (the one worth keeping in the source's memory).
    longest: usize,
}

/// Finds the bytes the lexer in [`lift`] stops at: [`Scan`] looks for them, [`Known`] is told
/// where they are.
trait Stops {
    /// The first quote at or after `from`: outside strings nothing else matters.
    fn quote(&mut self, src: &[u8], from: usize) -> Option<usize>;
    /// The first quote, backslash or control character at or after `from`.
    fn special(&mut self, src: &[u8], from: usize) -> Option<usize>;
}

struct Scan;

impl Stops for Scan {
    fn quote(&mut self, src: &[u8], from: usize) -> Option<usize> {
        memchr(b'"', src.get(from..)?).map(|i| from + i)
    }

    fn special(&mut self, src: &[u8], from: usize) -> Option<usize> {
        find_special(src.get(from..)?).map(|i| from + i)
    }
}

/// Every stop of the source, in order (a [`StringIndex`]'s).
struct Known<'a> {
    stops: &'a [usize],
}

impl Known<'_> {
    fn skip_before(&mut self, from: usize) {
        let n = self.stops.partition_point(|&p| p < from);
        self.stops = &self.stops[n..];
    }
}

impl Stops for Known<'_> {
    fn quote(&mut self, src: &[u8], from: usize) -> Option<usize> {
        self.skip_before(from);
        let i = self.stops.iter().position(|&p| src.get(p) == Some(&b'"'))?;
        self.stops = &self.stops[i..];
        self.stops.first().copied()
    }

    fn special(&mut self, _: &[u8], from: usize) -> Option<usize> {
        self.skip_before(from);
        self.stops.first().copied()
    }
}

/// Every stop in `s` (what a [`StringIndex`] lists), found the slow way: for tests and checks.
fn all_stops(s: &[u8]) -> Vec<usize> {
    s.iter().enumerate().filter(|&(_, &b)| special(b)).map(|(i, _)| i).collect()
}

/// The skeleton (long strings replaced by numbered placeholders) and the long strings. Every
/// string is scanned once, for its end, its escapes (each validated, and remembered for long
/// strings) and control characters; `None` when the text cannot be lexed, holds a control
/// character in a string, holds a `\u0000` escape (see [`MARK`]), or has no long string.
fn lift(src: &[u8], big: usize, stops: &mut impl Stops) -> Option<Lift> {
    let mut skeleton = Vec::new();
    let mut strings: Vec<Lifted> = Vec::new();
    let mut longest = 0;
    let mut escapes = Vec::new();
    let (mut pos, mut copied) = (0, 0);
    // Outside strings, every '"' opens one; inside, only '"', '\\' and control bytes matter.
    while let Some(q) = stops.quote(src, pos) {
        let start = q + 1;
        let mut i = start;
        let mut more_escapes = false;
        escapes.clear();
        let end = loop {
            let j = stops.special(src, i)?;
            match *src.get(j)? {
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
        if end - start >= big {
            skeleton.extend_from_slice(&src[copied..start]);
            skeleton.extend_from_slice(MARK_ESCAPED);
            skeleton.extend_from_slice(strings.len().to_string().as_bytes());
            if strings.get(longest).is_none_or(|l| end - start > l.range.len()) {
                longest = strings.len();
            }
            strings.push(Lifted { range: start..end, escapes: std::mem::take(&mut escapes), more_escapes });
            copied = end;
        }
        pos = end + 1;
    }
    if strings.is_empty() {
        return None;
    }
    skeleton.extend_from_slice(&src[copied..]);
    Some(Lift { skeleton, strings, longest })
}

/// The skeleton parsed and checked, and the lifted strings unescaped (all but `leave`, whose
/// slot is left empty): everything that can fail, done while the source is intact.
struct Prepared {
    value: Value,
    strings: Vec<String>,
}

fn prepare(src: &[u8], lift: &Lift, leave: Option<usize>) -> Option<Prepared> {
    let value: Value = serde_json::from_slice(&lift.skeleton).ok()?;
    let mut seen = vec![false; lift.strings.len()];
    if !placeholders_ok(&value, &mut seen) || seen.contains(&false) {
        return None;
    }
    let strings = lift
        .strings
        .iter()
        .enumerate()
        .map(|(i, l)| if Some(i) == leave { Some(String::new()) } else { unescape(&src[l.range.clone()], l) })
        .collect::<Option<Vec<_>>>()?;
    Some(Prepared { value, strings })
}

/// Whether every placeholder in `v` is a value (not a key) naming a lifted string not seen
/// before. A duplicate object key, for one, keeps only its last value, so a lifted string can
/// go missing: `seen` then has a gap, which the caller checks.
fn placeholders_ok(v: &Value, seen: &mut [bool]) -> bool {
    match v {
        Value::String(s) => match s.strip_prefix(MARK) {
            None => true,
            Some(n) => match placeholder_index(n).and_then(|i| seen.get_mut(i)) {
                Some(slot) if !*slot => {
                    *slot = true;
                    true
                }
                _ => false,
            },
        },
        Value::Array(items) => items.iter().all(|i| placeholders_ok(i, seen)),
        Value::Object(m) => m.iter().all(|(k, i)| !k.starts_with(MARK) && placeholders_ok(i, seen)),
        _ => true,
    }
}

/// The number after the mark, digits only (`usize::from_str` would also take a `+`).
fn placeholder_index(n: &str) -> Option<usize> {
    if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    n.parse().ok()
}

/// Puts each lifted string in its placeholder's place. Cannot fail: [`prepare`] checked that
/// the placeholders are values naming distinct lifted strings, all of them.
fn put_back(v: &mut Value, strings: &mut [String]) {
    match v {
        Value::String(s) => {
            if let Some(slot) = s.strip_prefix(MARK).and_then(placeholder_index).and_then(|i| strings.get_mut(i)) {
                *s = std::mem::take(slot);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|i| put_back(i, strings)),
        Value::Object(m) => m.values_mut().for_each(|i| put_back(i, strings)),
        _ => {}
    }
}

/// The escapes of `l` in order, given as offsets into `raw` (which starts at `base` in the
/// source): the remembered ones, then (past [`MAX_ESCAPES_KEPT`]) found by searching.
fn next_escape(raw: &[u8], base: usize, l: &Lifted, known: &mut std::slice::Iter<'_, usize>, from: usize) -> Option<usize> {
    match known.next() {
        Some(&k) => Some(k - base),
        None if l.more_escapes => memchr(b'\\', raw.get(from..)?).map(|k| from + k),
        None => None,
    }
}

/// Unescapes the lifted string `l` of the text `buf` into the start of `buf` and returns it as
/// the string, with its stops when all its escapes were remembered. `buf` was UTF-8 and [`lift`]
/// decoded every escape, so nothing here fails (each step still says `None` rather than
/// panic): the runs between escapes stay whole characters, each escape becomes one. The string
/// is read once here (copied, escape by escape), and once more by `String::from_utf8`.
fn unescape_in_place(mut buf: Vec<u8>, l: &Lifted) -> Option<(String, Option<Vec<usize>>)> {
    let r = l.range.clone();
    let (mut i, mut w) = (r.start, 0);
    let mut known = l.escapes.iter();
    let mut stops = (!l.more_escapes).then(Vec::new);
    while let Some(k) = next_escape(buf.get(..r.end)?, 0, l, &mut known, i) {
        // Output never overtakes input (an escape is never shorter than what it decodes to),
        // so the bytes still to be read are untouched.
        buf.copy_within(i..k, w);
        w += k - i;
        let (c, used) = decode_escape(buf.get(k..r.end)?)?;
        if let Some(stops) = stops.as_mut()
            && c.is_stop()
        {
            stops.push(w);
        }
        buf.get_mut(w..w + c.len())?.copy_from_slice(c.as_bytes());
        w += c.len();
        i = k + used;
    }
    buf.copy_within(i..r.end, w);
    w += r.end - i;
    buf.truncate(w);
    Some((String::from_utf8(buf).ok()?, stops))
}

/// How the longest string of a `String` source is cut out of it without checking UTF-8 again:
/// the longest run between two escapes (a 50 MB base64 inside escaped JSON text) stays in the
/// string, `head` (the unescaped text before it) replaces everything in front of it (one move
/// of the run), and `tail` (the unescaped text after it) is appended. Planned without touching
/// the source, so a failure leaves it as it was; applying the plan cannot fail.
struct Cut {
    run: Range<usize>,
    head: String,
    tail: String,
    stops: Option<Vec<usize>>,
}

fn plan_cut(src: &str, l: &Lifted) -> Option<Cut> {
    let bytes = src.as_bytes();
    let r = l.range.clone();
    let (mut run, mut from) = (r.start..r.start, r.start);
    let mut known = l.escapes.iter();
    while let Some(k) = next_escape(bytes.get(..r.end)?, 0, l, &mut known, from) {
        if k - from > run.len() {
            run = from..k;
        }
        from = k + decode_escape(bytes.get(k..r.end)?)?.1;
    }
    if r.end - from > run.len() {
        run = from..r.end;
    }
    // Every cut is next to an ASCII byte (a quote, a backslash, the end of an escape), so on a
    // character boundary; checked rather than assumed, as the String calls below need it.
    if !src.is_char_boundary(run.start) || !src.is_char_boundary(run.end) {
        return None;
    }
    let collect = !l.more_escapes;
    let (head, head_stops) = unescape_raw(bytes.get(r.start..run.start)?, collect)?;
    let (tail, tail_stops) = unescape_raw(bytes.get(run.end..r.end)?, collect)?;
    let at = head.len() + run.len();
    let stops = collect.then(|| head_stops.into_iter().chain(tail_stops.into_iter().map(|p| p + at)).collect());
    Some(Cut { run, head, tail, stops })
}

impl Cut {
    fn apply(self, mut s: String) -> (String, Option<Vec<usize>>) {
        s.truncate(self.run.end);
        s.replace_range(..self.run.start, &self.head);
        s.push_str(&self.tail);
        (s, self.stops)
    }
}

/// Unescapes string contents whose escapes are valid, searching for them; with `collect`, also
/// where the stops of the result are.
fn unescape_raw(raw: &[u8], collect: bool) -> Option<(String, Vec<usize>)> {
    let mut out = Vec::with_capacity(raw.len());
    let mut stops = Vec::new();
    let mut i = 0;
    while let Some(k) = memchr(b'\\', &raw[i..]).map(|k| i + k) {
        out.extend_from_slice(&raw[i..k]);
        let (c, used) = decode_escape(&raw[k..])?;
        if collect && c.is_stop() {
            stops.push(out.len());
        }
        out.extend_from_slice(c.as_bytes());
        i = k + used;
    }
    out.extend_from_slice(&raw[i..]);
    Some((String::from_utf8(out).ok()?, stops))
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
        out.extend_from_slice(raw.get(i..k)?);
        let (c, used) = decode_escape(raw.get(k..)?)?;
        out.extend_from_slice(c.as_bytes());
        i = k + used;
    }
    out.extend_from_slice(raw.get(i..)?);
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

    /// Whether it is a byte the lexer stops at (`\"`, `\\`, `\n`, `\u001f`, …).
    fn is_stop(&self) -> bool {
        self.len == 1 && special(self.bytes[0])
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
/// `memchr2` for the ends and a separate control-character check would do in two. A
/// branch-free fold per 64-byte block vectorises; only the block that has one is searched byte
/// by byte. (Hand-written: memchr has no "any byte below 0x20" search, and a second pass over
/// 50 MB costs more than this whole scan.)
fn find_special(s: &[u8]) -> Option<usize> {
    const BLOCK: usize = 64;
    // Short strings (most keys and values) end within a few bytes.
    let head = s.len().min(16);
    if let Some(i) = s[..head].iter().position(|&b| special(b)) {
        return Some(i);
    }
    let mut at = head;
    let mut blocks = s[head..].chunks_exact(BLOCK);
    for block in &mut blocks {
        if block.iter().fold(false, |acc, &b| acc | special(b)) {
            return block.iter().position(|&b| special(b)).map(|i| at + i);
        }
        at += BLOCK;
    }
    blocks.remainder().iter().position(|&b| special(b)).map(|i| at + i)
}

fn hex4(b: &[u8]) -> Option<u32> {
    if b.len() != 4 || !b.iter().all(u8::is_ascii_hexdigit) {
        return None;
    }
    u32::from_str_radix(std::str::from_utf8(b).ok()?, 16).ok()
}

/// The bytes of JSON text outside its strings, with their offsets: brackets, braces, commas,
/// colons and the characters of numbers and literals (each string's opening quote is given
/// too, its content and closing quote are not). For scans that need only the text's structure
/// (how deep it nests, how many keys an object has) without parsing it.
pub fn structure(json: &[u8]) -> impl Iterator<Item = (usize, u8)> + '_ {
    let (mut in_string, mut escaped) = (false, false);
    json.iter().enumerate().filter_map(move |(i, &b)| {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            return None;
        }
        in_string = b == b'"';
        Some((i, b))
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn structure_skips_the_insides_of_strings() {
        let text = br#"{"a{": ["x\"]", 1], "b": "\\"}"#;
        let seen: String = structure(text).map(|(_, b)| b as char).filter(|c| !c.is_whitespace()).collect();
        assert_eq!(seen, r#"{":[",1],":"}"#);
    }

    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    /// Every entry point, at lifting threshold `big`, against serde_json: the same value, or
    /// an error (with serde's message where the source is still there to give it).
    fn check_all(text: &[u8], big: usize) {
        let serde = serde_json::from_slice::<Value>(text).map_err(|e| e.to_string());
        let at = &text[text.len().saturating_sub(40)..];
        assert_eq!(parse_at(text, big).map_err(|e| e.to_string()), serde, "parse: …{}", String::from_utf8_lossy(at));
        let owned = owned_at(text.to_vec(), big);
        assert_eq!(owned.as_ref().map(|(v, _)| v.clone()).map_err(|e| e.to_string()), serde, "owned: …{}", String::from_utf8_lossy(at));
        let Ok(s) = String::from_utf8(text.to_vec()) else { return };
        match (string_at(s.clone(), big, None, false).map_err(Failed::into_source), &serde) {
            (Ok((a, index)), Ok(b)) => {
                assert_eq!(&a, b, "string: …{}", String::from_utf8_lossy(at));
                check_index(&a, index.as_ref(), big);
            }
            (Err(back), Err(_)) => assert!(back == s, "the string came back changed"),
            (got, want) => panic!("string: {:?} but serde says {want:?}", got.map(|(v, _)| v)),
        }
        if let Ok((v, index)) = owned {
            check_index(&v, index.as_ref(), big);
        }
    }

    /// An index lists exactly the stops of its string, and parsing that string with it gives
    /// what parsing it without does.
    fn check_index(v: &Value, index: Option<&StringIndex>, big: usize) {
        let Some(index) = index else { return };
        let s = v.pointer(index.pointer()).and_then(Value::as_str).expect("an index points at a string");
        assert!(index.is_for(index.pointer(), s));
        assert_eq!(index.stops, all_stops(s.as_bytes()));
        let scanned = string_at(s.to_owned(), big, None, false).map(|(v, _)| v).map_err(Failed::into_source);
        let known = string_at(s.to_owned(), big, Some(&index.stops), false).map(|(v, _)| v).map_err(Failed::into_source);
        assert_eq!(scanned, known);
    }

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
            format!("{{\"a\": \"{big}\", \"a\": 1}}"),                 // duplicate key drops a lifted string
            format!("{{\"a\": \"{big}\", \"a\": \"{big}C\"}}"),        // … and keeps the other
            format!("[\"{big}\", \"{big}\"] [\"{big}\"]"),             // trailing document
            format!("[\"{big}é\", \"{big}\\u00e9\", \"{big}😀\"]"),    // non-ASCII long strings
        ] {
            check_all(text.as_bytes(), BIG);
        }
        // Invalid UTF-8 inside the longest string: serde's own error, from the intact source.
        let mut bad = format!("[\"{big}").into_bytes();
        bad.extend_from_slice(b"\xff\xfe\"]");
        check_all(&bad, BIG);
    }

    /// The longest string keeps the source's memory, whether it is cut out (few escapes, the
    /// Tableau shape) or unescaped in place (escapes everywhere, say a big JSON text in a text
    /// block): a 50 MB payload never costs a second 50 MB allocation.
    #[test]
    fn the_longest_string_keeps_the_source_memory() {
        let sparse = json!({"content": "QUJD".repeat(BIG), "name": "n"}).to_string();
        let dense = json!({"rows": vec![json!({"k": "v\n"}); BIG / 8]}).to_string();
        for inner in [sparse, dense] {
            let text = serde_json::to_string(&json!({"content": [{"type": "text", "text": inner}]})).unwrap();
            let bytes = text.clone().into_bytes();
            let at = bytes.as_ptr();
            let v = parse_owned(bytes).unwrap();
            assert_eq!(v["content"][0]["text"].as_str().unwrap().as_ptr(), at, "parse_owned copied");
            let at = text.as_ptr();
            let v = parse_string(text).unwrap();
            assert_eq!(v["content"][0]["text"].as_str().unwrap().as_ptr(), at, "parse_string copied");
        }
    }

    /// The reported crash: one string over 64 KiB and another that unescapes to a
    /// placeholder. Every entry point answers as serde does, none panics.
    #[test]
    fn escaped_placeholder_beside_a_long_string() {
        let text = format!("{{\"a\": \"{}\", \"b\": \"\\u0000\\u0073towage-lifted:0\"}}", "x".repeat(70_000));
        let want: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(want["b"], "\u{0}stowage-lifted:0");
        assert_eq!(parse(text.as_bytes()).unwrap(), want);
        assert_eq!(parse_owned(text.clone().into_bytes()).unwrap(), want);
        assert_eq!(parse_string(text).unwrap(), want);
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

    /// The Tableau shape: the text block's JSON comes with an index that lets it be parsed
    /// without a scan, to the same value; from bytes and from a String alike.
    #[test]
    fn embedded_json_is_indexed() {
        let inner = json!({"content": "QUJD".repeat(BIG), "name": "Sales \"Q3\"\n", "format": "pdf"});
        let v = json!({"content": [{"type": "text", "text": serde_json::to_string_pretty(&inner).unwrap()}], "isError": false});
        let text = serde_json::to_string(&v).unwrap();
        let (a, ia) = parse_owned_indexed(text.clone().into_bytes()).unwrap();
        let (b, ib) = parse_string_indexed(text).unwrap();
        assert_eq!((&a, &b), (&v, &v));
        assert_eq!(ia, ib);
        let index = ia.expect("indexed");
        assert_eq!(index.pointer(), "/content/0/text");
        let s = a["content"][0]["text"].as_str().unwrap().to_owned();
        assert!(index.is_for("/content/0/text", &s) && !index.is_for("/content/0/text", "{}"));
        let (parsed, inner_index) = parse_string_with_index(s, &index).unwrap();
        assert_eq!(parsed, inner);
        assert!(inner_index.is_none(), "the base64 inside is not JSON");
        // No index for what is not a JSON container, nor for a string with too many escapes.
        assert!(parse_string_indexed(serde_json::to_string(&json!(["x".repeat(BIG)])).unwrap()).unwrap().1.is_none());
        let crowded = json!({"t": json!({"k": vec!["a"; MAX_ESCAPES_KEPT]}).to_string() + &" ".repeat(BIG)});
        assert!(parse_string_indexed(serde_json::to_string(&crowded).unwrap()).unwrap().1.is_none());
    }

    /// JSON whose strings are built from the characters and escapes that matter: quotes,
    /// backslashes, controls, NUL, non-ASCII, surrogate pairs, and the placeholder's text.
    fn hostile_json() -> impl Strategy<Value = Value> {
        let piece = prop_oneof![
            prop::sample::select(vec!["\"", "\\", "\n", "\u{1}", "\u{0}", "é", "😀", "/", "\u{0}stowage-lifted:0", "stowage-lifted:1"])
                .prop_map(str::to_owned),
            Just("{\"k\": [1, \"v\"]}".to_owned()),
            "[a-zA-Z0-9+/=]{1,24}",
        ];
        let text = prop::collection::vec(piece, 0..12).prop_map(|p| p.concat());
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i32>().prop_map(|n| json!(n)),
            text.clone().prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 48, 5, move |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
                prop::collection::vec((text.clone(), inner.clone()), 0..5)
                    .prop_map(|kv| Value::Object(kv.into_iter().collect::<serde_json::Map<_, _>>())),
                // JSON text inside a string, as in a text block.
                inner.prop_map(|v| Value::String(v.to_string())),
            ]
        })
    }

    /// Raw fragments spliced into serialised JSON, most of which serde refuses.
    const SPLICES: &[&[u8]] = &[
        b"\\u0000",
        b"\\u0073",
        b"\\u0000stowage-lifted:0",
        b"\\ud800",
        b"\\udc00",
        b"\\ud83d\\ude00",
        b"\\x",
        b"\\u12",
        b"\x01",
        b"\"",
        b"\\",
        b"\\u0022",
        b"\xff",
        b"\xc3",
        b"\xe2\x82",
        b",",
        b"}",
    ];

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, .. ProptestConfig::default() })]

        /// `parse`, `parse_owned` and `parse_string` agree with serde_json on arbitrary JSON
        /// with hostile strings and escapes, compact or pretty, with raw fragments spliced
        /// in, with every string lifted at a low threshold (so placeholders sit everywhere).
        #[test]
        fn agrees_with_serde(
            v in hostile_json(),
            pretty in any::<bool>(),
            big in prop_oneof![Just(0usize), Just(1), Just(4), Just(16)],
            splices in prop::collection::vec((any::<prop::sample::Index>(), 0..SPLICES.len()), 0..3),
        ) {
            let mut text = if pretty { serde_json::to_vec_pretty(&v).unwrap() } else { serde_json::to_vec(&v).unwrap() };
            check_all(&text, big);
            for (at, which) in splices {
                let at = at.index(text.len() + 1);
                text.splice(at..at, SPLICES[which].iter().copied());
            }
            check_all(&text, big);
        }

        /// The same at the real threshold: a few strings over [`BIG`], built by repeating
        /// hostile pieces, with fragments spliced in.
        #[test]
        fn agrees_with_serde_on_long_strings(
            v in hostile_json(),
            fill in "[a-zA-Z0-9+/]{1,8}",
            // Written as they appear in the outer text: `\\n` there is a `\n` escape in the
            // embedded JSON, a bare `\n` a raw newline in it (which that JSON may not hold).
            escaped in prop_oneof![Just(""), Just(r"\\n"), Just(r#"\\\""#), Just(r"\\u00e9"), Just(r"\\ud83d\\ude00"), Just(r"\n")],
            splices in prop::collection::vec((any::<prop::sample::Index>(), 0..SPLICES.len()), 0..2),
        ) {
            let long = fill.repeat(BIG / fill.len() + 1);
            let embedded = json!({"content": long, "v": v}).to_string();
            let doc = json!({"content": [{"type": "text", "text": embedded}], "other": [v, long.clone()]});
            let mut text = serde_json::to_vec(&doc).unwrap();
            // An escape in the middle of the long string inside the embedded JSON.
            if let Some(at) = text.windows(8).position(|w| w == &long.as_bytes()[..8]) {
                text.splice(at + 4..at + 4, escaped.bytes());
            }
            check_all(&text, BIG);
            for (at, which) in splices {
                let at = at.index(text.len() + 1);
                text.splice(at..at, SPLICES[which].iter().copied());
            }
            check_all(&text, BIG);
        }
    }
}
