//! An artifact read for jq, kept compact: one 8-byte node per value on a flat tape, strings
//! read in place from the artifact's own bytes. A query over a 10 MB document holds about 2×
//! its size (the tape, reserved from an upper bound of its nodes, and what the program
//! builds); jaq's own values took 17× (an allocation per string, a hash map per object),
//! which kept jq over 10 MB at 176 MiB of heap.
//!
//! The tape is written once, by serde_json's parser (JSON, NDJSON) or the `csv` crate (CSV,
//! TSV), and never changed: a program's values point into it ([`super::value::Val::Node`]),
//! and whatever a program builds is an ordinary owned value beside it.
//!
//! A node is a tag in the top 4 bits and 60 bits of payload:
//! - null, false, true; a small integer inline; any other number by its place in `nums`;
//! - a string of up to 7 bytes inside the node itself (most keys, and values such as
//!   `"north"`), so comparing keys reads no other memory; a longer one by offset and length,
//!   in the artifact's bytes or (when it had escapes, or a CSV field was quoted) in `extra`;
//! - an array or object by its live child count and the index just past its last descendant,
//!   so a reader skips a whole subtree in one step. An object's children are key, value pairs;
//!   a key that a later duplicate replaces is marked dead (JSON's last value wins, as in jq);
//! - a CSV row holds only its values: its keys are the header's, once for all rows.

use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt;
use std::rc::Rc;

use bytes::Bytes;
use jaq_json::Num;
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

pub(crate) const NULL: u8 = 0;
pub(crate) const FALSE: u8 = 1;
pub(crate) const TRUE: u8 = 2;
pub(crate) const INT: u8 = 3;
pub(crate) const NUM: u8 = 4;
pub(crate) const STR: u8 = 5;
pub(crate) const STR_EXTRA: u8 = 6;
pub(crate) const ARR: u8 = 7;
pub(crate) const OBJ: u8 = 8;
const DEAD_KEY: u8 = 9;
pub(crate) const ROW: u8 = 10;
pub(crate) const STR_INLINE: u8 = 11;

/// The longest string kept inside its node.
const INLINE: usize = 7;

const PAYLOAD: u64 = (1 << 60) - 1;
/// Longest string a node spans (28 bits); inputs are capped far below.
const MAX_LEN: usize = (1 << 28) - 1;
/// Arrays larger than this keep an index of their elements once one is read by position.
const INDEXED_FROM: u32 = 64;

/// The parsed artifact: the tape and what its nodes point into.
pub(crate) struct Doc {
    text: Bytes,
    extra: Vec<u8>,
    nums: Vec<Num>,
    /// Each node as little-endian bytes: the tag is the top 4 bits of the last byte, and an
    /// inline string's bytes are the first ones, so [`Doc::str`] can lend them.
    nodes: Vec<[u8; 8]>,
    /// A CSV's header: each column's key, and whether it is the last of that name (the one
    /// whose value a row shows). Shared, so a value can hold a key without copying it.
    columns: Vec<(Rc<[u8]>, bool)>,
    /// Columns by name (the last of each name).
    column_of: HashMap<Box<[u8]>, u32>,
    /// Element positions of large arrays read by index, built on first use.
    positions: RefCell<HashMap<u32, Rc<[u32]>>>,
}

impl fmt::Debug for Doc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Doc({} nodes over {} bytes)", self.nodes.len(), self.text.len())
    }
}

/// What a node is.
pub(crate) fn tag(node: u64) -> u8 {
    (node >> 60) as u8
}

fn pack(tag: u8, payload: u64) -> u64 {
    (u64::from(tag) << 60) | (payload & PAYLOAD)
}

/// A span's payload: 32 bits of offset, 28 of length.
fn span(offset: usize, len: usize) -> u64 {
    ((offset as u64) << 28) | len as u64
}

/// A container's payload: 28 bits of count, 32 of end.
fn container(count: usize, end: usize) -> u64 {
    ((count as u64) << 32) | end as u64
}

impl Doc {
    fn new(text: Bytes, nodes: usize) -> Doc {
        Doc {
            text,
            extra: Vec::new(),
            nums: Vec::new(),
            nodes: Vec::with_capacity(nodes),
            columns: Vec::new(),
            column_of: HashMap::new(),
            positions: RefCell::default(),
        }
    }

    pub(crate) fn node(&self, i: u32) -> u64 {
        u64::from_le_bytes(self.nodes[i as usize])
    }

    /// The index just past node `i` and everything under it.
    pub(crate) fn next(&self, i: u32) -> u32 {
        let n = self.node(i);
        match tag(n) {
            ARR | OBJ | ROW => (n & 0xffff_ffff) as u32,
            _ => i + 1,
        }
    }

    /// A container's live children (array elements, object pairs, row fields).
    pub(crate) fn count(&self, i: u32) -> usize {
        ((self.node(i) & PAYLOAD) >> 32) as usize
    }

    /// A string node's bytes.
    pub(crate) fn str(&self, i: u32) -> &[u8] {
        let raw = &self.nodes[i as usize];
        let n = u64::from_le_bytes(*raw);
        let (offset, len) = (((n & PAYLOAD) >> 28) as usize, (n & MAX_LEN as u64) as usize);
        match tag(n) {
            STR_INLINE => &raw[..usize::from(raw[7] & 0x0f)],
            STR_EXTRA => &self.extra[offset..offset + len],
            _ => &self.text[offset..offset + len],
        }
    }

    /// A number node's value.
    pub(crate) fn num(&self, i: u32) -> Num {
        let n = self.node(i);
        match tag(n) {
            // Sign-extend the 60-bit payload.
            INT => Num::Int((((n << 4) as i64) >> 4) as isize),
            _ => self.nums[(n & PAYLOAD) as usize].clone(),
        }
    }

    /// The elements of array `i`, as node indices.
    pub(crate) fn elements(&self, i: u32) -> impl Iterator<Item = u32> + '_ {
        let end = self.next(i);
        let mut at = i + 1;
        std::iter::from_fn(move || {
            (at < end).then(|| {
                let here = at;
                at = self.next(at);
                here
            })
        })
    }

    /// Element `k` of array `i` (an index kept for large arrays, so reading them by position
    /// in a loop is not quadratic).
    pub(crate) fn element(&self, i: u32, k: usize) -> Option<u32> {
        let count = self.count(i);
        if k >= count {
            return None;
        }
        if count <= INDEXED_FROM as usize {
            return self.elements(i).nth(k);
        }
        let mut positions = self.positions.borrow_mut();
        let at = positions.entry(i).or_insert_with(|| self.elements(i).collect());
        at.get(k).copied()
    }

    /// The live (key, value) node pairs of object `i`.
    pub(crate) fn pairs(&self, i: u32) -> impl Iterator<Item = (u32, u32)> + '_ {
        let end = self.next(i);
        let mut at = i + 1;
        std::iter::from_fn(move || {
            while at < end {
                let key = at;
                at = self.next(key + 1);
                if tag(self.node(key)) != DEAD_KEY {
                    return Some((key, key + 1));
                }
            }
            None
        })
    }

    /// The value node of `key` in object `i`.
    pub(crate) fn field(&self, i: u32, key: &[u8]) -> Option<u32> {
        self.pairs(i).find(|&(k, _)| same(self.str(k), key)).map(|(_, v)| v)
    }

    /// A CSV row's live (column, value node) pairs.
    pub(crate) fn row(&self, i: u32) -> impl Iterator<Item = (&Rc<[u8]>, u32)> + '_ {
        self.columns.iter().zip(i + 1..).filter(|((_, live), _)| *live).map(|((key, _), v)| (key, v))
    }

    /// The value node of `key` in CSV row `i`.
    pub(crate) fn row_field(&self, i: u32, key: &[u8]) -> Option<u32> {
        self.column_of.get(key).map(|c| i + 1 + c)
    }

    fn push(&mut self, node: u64) -> usize {
        self.nodes.push(node.to_le_bytes());
        self.nodes.len() - 1
    }

    fn push_str(&mut self, s: &[u8]) -> Result<(), String> {
        if s.len() > MAX_LEN {
            return Err(format!("a string of {} bytes is longer than jq reads here", s.len()));
        }
        if s.len() <= INLINE {
            let mut raw = [0u8; 8];
            raw[..s.len()].copy_from_slice(s);
            raw[7] = (STR_INLINE << 4) | s.len() as u8;
            self.nodes.push(raw);
            return Ok(());
        }
        let text = self.text.as_ptr() as usize;
        let at = s.as_ptr() as usize;
        if at >= text && at + s.len() <= text + self.text.len() && !s.is_empty() {
            self.push(pack(STR, span(at - text, s.len())));
        } else {
            let offset = self.extra.len();
            self.extra.extend_from_slice(s);
            self.push(pack(STR_EXTRA, span(offset, s.len())));
        }
        Ok(())
    }

    fn push_num(&mut self, n: Num) {
        if let Num::Int(i) = n
            && (-(1 << 59)..(1 << 59)).contains(&(i as i64))
        {
            self.push(pack(INT, i as u64));
            return;
        }
        self.nums.push(n);
        self.push(pack(NUM, self.nums.len() as u64 - 1));
    }

    fn close(&mut self, at: usize, tag: u8, count: usize) {
        let end = self.nodes.len();
        self.nodes[at] = pack(tag, container(count, end)).to_le_bytes();
    }

    /// Marks the earlier of any two keys of object `at` that are equal; the live count.
    fn dedup_keys(&mut self, at: u32, count: usize) -> usize {
        let mut dead = Vec::new();
        if count <= 16 {
            // Small objects (nearly all): compare pairwise on the tape, allocating nothing.
            for (k, _) in self.pairs(at) {
                let key = self.str(k);
                let mut later = self.next(k + 1);
                let end = self.next(at);
                while later < end {
                    if same(self.str(later), key) {
                        dead.push(k);
                        break;
                    }
                    later = self.next(later + 1);
                }
            }
        } else {
            let mut last: HashMap<&[u8], u32> = HashMap::with_capacity(count);
            for (k, _) in self.pairs(at) {
                if let Some(earlier) = last.insert(self.str(k), k) {
                    dead.push(earlier);
                }
            }
        }
        for &k in &dead {
            let n = self.node(k);
            self.nodes[k as usize] = pack(DEAD_KEY, n).to_le_bytes();
        }
        count - dead.len()
    }
}

/// Two keys are equal: lengths and first bytes first, which settles nearly every unequal
/// pair without a call to `memcmp`.
pub(crate) fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.first() == b.first() && a == b
}

/// Nodes a JSON text needs at most: every key and value but the first is preceded by one of
/// `,:[{` (inside strings too, so this overcounts), which reserves the tape in one go.
fn json_nodes(text: &[u8]) -> usize {
    // Counted in blocks of 255 into a byte, so the compiler vectorises the comparisons (a
    // plain `filter().count()` took 9–16 ms over 10 MB, this about 2 ms).
    let mut n = 1;
    for block in text.chunks(255) {
        let mut c = 0u8;
        for &b in block {
            c += u8::from(b == b',') + u8::from(b == b':') + u8::from(b == b'[') + u8::from(b == b'{');
        }
        n += usize::from(c);
    }
    n
}

/// One JSON text.
pub(crate) fn json(text: Bytes) -> Result<Doc, serde_json::Error> {
    let mut doc = Doc::new(text.clone(), json_nodes(&text));
    // Valid UTF-8 checked once here lets serde skip checking each string (its `from_str`).
    match std::str::from_utf8(&text) {
        Ok(s) => build(&mut doc, serde_json::Deserializer::from_str(s))?,
        Err(_) => build(&mut doc, serde_json::Deserializer::from_slice(&text))?,
    }
    Ok(doc)
}

fn build<'de, R: serde_json::de::Read<'de>>(doc: &mut Doc, mut de: serde_json::Deserializer<R>) -> Result<(), serde_json::Error> {
    // The builder bounds the depth, at MAX_DEPTH (the runner's stack is large).
    de.disable_recursion_limit();
    Builder(doc, 0).deserialize(&mut de)?;
    de.end()
}

/// One JSON value per non-empty line, as an array. The error names the line.
pub(crate) fn ndjson(text: Bytes) -> Result<Doc, (usize, serde_json::Error)> {
    let mut doc = Doc::new(text.clone(), json_nodes(&text) + 1);
    doc.push(0);
    let mut count = 0;
    let body = std::str::from_utf8(&text).map_err(|e| (1, de::Error::custom(e)))?;
    for (n, line) in body.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        build(&mut doc, serde_json::Deserializer::from_str(line)).map_err(|e| (n + 1, e))?;
        count += 1;
    }
    doc.close(0, ARR, count);
    Ok(doc)
}

/// The lines of a text (without their ends), as an array of strings.
pub(crate) fn lines(text: Bytes) -> Result<Doc, std::str::Utf8Error> {
    let body = std::str::from_utf8(&text)?;
    let mut doc = Doc::new(text.clone(), 1 + body.lines().count());
    doc.push(0);
    let mut count = 0;
    for line in super::super::input::lines(body) {
        doc.push_str(line.as_bytes()).expect("a line is shorter than the input cap");
        count += 1;
    }
    doc.close(0, ARR, count);
    Ok(doc)
}

/// CSV or TSV rows of `text`, which `reader` reads, keyed by the header; a field written as
/// a JSON number is that number (see [`super::super::input::field_number`]).
pub(crate) fn delimited(text: Bytes, mut reader: csv::Reader<&[u8]>, delimiter: u8) -> Result<Doc, csv::Error> {
    let header = reader.byte_headers()?.clone();
    let mut doc = Doc::new(text.clone(), 2 + memchr::memchr_iter(b'\n', &text).count() * (header.len() + 1));
    for (c, name) in header.iter().enumerate() {
        doc.column_of.insert(name.into(), c as u32);
    }
    doc.columns = header.iter().enumerate().map(|(c, name)| (Rc::from(name), doc.column_of.get(name) == Some(&(c as u32)))).collect();
    let live = doc.columns.iter().filter(|(_, live)| *live).count();
    doc.push(0);
    let mut record = csv::ByteRecord::new();
    let mut count = 0;
    while reader.read_byte_record(&mut record)? {
        let row = doc.push(0);
        // Where the record's fields would be if none was quoted: each field found there is
        // read in place; from the first that is not (it was quoted), they are copied.
        let mut at = record.position().map_or(usize::MAX, |p| p.byte() as usize);
        for field in &record {
            let here = text.get(at..at.saturating_add(field.len()));
            let in_place = here == Some(field) && text.get(at + field.len()).is_none_or(|&b| b == delimiter || b == b'\n' || b == b'\r');
            let number = std::str::from_utf8(field).ok().and_then(super::super::input::field_number);
            match number {
                Some(n) => doc.push_num(to_num(&n)),
                None if in_place => doc.push_str(&text[at..at + field.len()]).map_err(|_| csv_too_long())?,
                None => doc.push_str(field).map_err(|_| csv_too_long())?,
            }
            at = if in_place { at + field.len() + 1 } else { usize::MAX };
        }
        doc.close(row, ROW, live);
        count += 1;
    }
    doc.close(0, ARR, count);
    Ok(doc)
}

fn csv_too_long() -> csv::Error {
    csv::Error::from(std::io::Error::other("a field is longer than jq reads here"))
}

/// A JSON number as jaq's.
fn to_num(n: &serde_json::Number) -> Num {
    if let Some(i) = n.as_i64() {
        Num::from_integral(i)
    } else if let Some(u) = n.as_u64() {
        Num::from_integral(u)
    } else {
        Num::Float(n.as_f64().unwrap_or(f64::NAN))
    }
}

/// How deeply a JSON text may nest.
pub(crate) const MAX_DEPTH: usize = 1_000;

/// What a too-deep text's error says first.
pub(crate) const TOO_DEEP: &str = "nests deeper than";

/// Writes the value serde reads onto the tape (a seed and visitor both), at a depth.
struct Builder<'d>(&'d mut Doc, usize);

impl<'de> DeserializeSeed<'de> for Builder<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        if self.1 > MAX_DEPTH {
            return Err(de::Error::custom(format_args!("{TOO_DEEP} {MAX_DEPTH} levels")));
        }
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Builder<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        self.0.push(pack(NULL, 0));
        Ok(())
    }

    fn visit_bool<E: de::Error>(self, b: bool) -> Result<(), E> {
        self.0.push(pack(if b { TRUE } else { FALSE }, 0));
        Ok(())
    }

    fn visit_i64<E: de::Error>(self, i: i64) -> Result<(), E> {
        self.0.push_num(Num::from_integral(i));
        Ok(())
    }

    fn visit_u64<E: de::Error>(self, u: u64) -> Result<(), E> {
        self.0.push_num(Num::from_integral(u));
        Ok(())
    }

    fn visit_f64<E: de::Error>(self, f: f64) -> Result<(), E> {
        self.0.push_num(Num::Float(f));
        Ok(())
    }

    /// A string without escapes, borrowed from the text: read in place.
    fn visit_borrowed_str<E: de::Error>(self, s: &'de str) -> Result<(), E> {
        self.0.push_str(s.as_bytes()).map_err(E::custom)
    }

    /// A string that had escapes, unescaped by serde: copied.
    fn visit_str<E: de::Error>(self, s: &str) -> Result<(), E> {
        self.0.push_str(s.as_bytes()).map_err(E::custom)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let at = self.0.push(0);
        let mut count = 0;
        while seq.next_element_seed(Builder(&mut *self.0, self.1 + 1))?.is_some() {
            count += 1;
        }
        self.0.close(at, ARR, count);
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let at = self.0.push(0);
        let mut count = 0;
        while map.next_key_seed(Builder(&mut *self.0, self.1 + 1))?.is_some() {
            map.next_value_seed(Builder(&mut *self.0, self.1 + 1))?;
            count += 1;
        }
        self.0.close(at, OBJ, count);
        let live = self.0.dedup_keys(at as u32, count);
        if live != count {
            self.0.close(at, OBJ, live);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_without_escapes_are_read_in_place_and_duplicate_keys_keep_the_last() {
        let doc = json(Bytes::from_static(br#"{"a": "plain", "b": "tab\tbed", "a": [1, 2.5, 1e300, -3, 18446744073709551615]}"#)).unwrap();
        assert_eq!(tag(doc.node(0)), OBJ);
        assert_eq!(doc.count(0), 2);
        let b = doc.field(0, b"b").unwrap();
        assert_eq!((tag(doc.node(b)), doc.str(b)), (STR_INLINE, &b"tab\tbed"[..]));
        let long = json(Bytes::from_static(br#"["a string read in place", "one with an \"escape\""]"#)).unwrap();
        let [a, e] = [1, 2].map(|i| (tag(long.node(i)), long.str(i)));
        assert_eq!(a, (STR, &b"a string read in place"[..]));
        assert_eq!(e, (STR_EXTRA, &b"one with an \"escape\""[..]));
        let a = doc.field(0, b"a").unwrap();
        let nums: Vec<String> = doc.elements(a).map(|e| doc.num(e).to_string()).collect();
        assert_eq!(nums, ["1", "2.5", "1e300", "-3", "18446744073709551615"]);
        let keys: Vec<&[u8]> = doc.pairs(0).map(|(k, _)| doc.str(k)).collect();
        assert_eq!(keys, [&b"b"[..], b"a"]);
        assert!(doc.extra.is_empty(), "short strings live in their nodes");
    }

    #[test]
    fn large_arrays_are_read_by_position_through_an_index() {
        let text = format!("[{}]", (0..1000).map(|i| format!("[{i}]")).collect::<Vec<_>>().join(","));
        let doc = json(Bytes::from(text)).unwrap();
        let e = doc.element(0, 777).unwrap();
        assert_eq!(doc.num(doc.element(e, 0).unwrap()).to_string(), "777");
        assert_eq!(doc.element(0, 1000), None);
        assert!(json_nodes(b"[1,2]") >= 3);
    }

    #[test]
    fn csv_fields_are_read_in_place_unless_quoted() {
        let text = Bytes::from_static(b"id,name,id\n1,\"Lovelace, Ada\",7\n2,Bob,x\n");
        let reader = super::super::super::input::delimited_reader("q", "t_1", &text, b',').unwrap();
        let doc = delimited(text.clone(), reader, b',').unwrap();
        assert_eq!(doc.count(0), 2);
        let rows: Vec<u32> = doc.elements(0).collect();
        let name = doc.row_field(rows[0], b"name").unwrap();
        assert_eq!(doc.str(name), b"Lovelace, Ada");
        assert_eq!(doc.num(doc.row_field(rows[0], b"id").unwrap()).to_string(), "7", "the last column of a name wins");
        let bob = doc.row_field(rows[1], b"name").unwrap();
        assert_eq!((tag(doc.node(bob)), doc.str(bob)), (STR_INLINE, &b"Bob"[..]));
        assert_eq!(doc.row(rows[1]).count(), 2);
    }
}
