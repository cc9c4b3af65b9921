//! The inferred shape of a JSON value, as a model reads it before it queries: every path (in
//! jq syntax, `.orders[].total`) with its types and how often each was seen, the distinct
//! values of low-cardinality fields, the min and max of numbers, the lengths of arrays and
//! strings.
//!
//! One description for two readers: the gateway's `artifact_describe` tool renders it within
//! the host's page, and the typed preview of a value cut to nothing (`warehouses: []`, its
//! items each too big to keep) carries it so the model still sees what was there. It lives
//! here, beside the pipeline, because both the pipeline and the gateway use it and the
//! pipeline may depend only on `stowage-core`.
//!
//! One pass over the value, bounded whatever its size: at most [`MAX_PATHS`] paths (a path
//! past that is counted, not described), at most [`MAX_DISTINCT`] distinct values remembered
//! per path (each cut to [`VALUE_CHARS`] characters), and an object with more than
//! [`MAP_KEYS`] keys is read as a map (its values described under `[]`, as jq iterates them)
//! rather than giving each key a path of its own.

use std::collections::HashMap;
use std::fmt::Write as _;

use serde_json::Value;

/// Paths described at most; keys past this are counted in [`Shape::paths_left_out`].
pub const MAX_PATHS: usize = 2_000;
/// Distinct scalar values remembered per path: up to this many, a field's values can be
/// listed, and past it the description says "at least this many distinct".
pub const MAX_DISTINCT: usize = 256;
/// A field with at most this many distinct values (each seen more than once on average) is
/// low-cardinality: its values are listed with their counts.
pub const LOW_CARDINALITY: usize = 12;
/// An object with more keys than this is a map (ids to records): its values share one path.
pub const MAP_KEYS: usize = 64;
/// Characters of a remembered value (a longer string is remembered by its first ones).
pub const VALUE_CHARS: usize = 48;

/// The JSON types, in the order a description lists them.
const TYPES: [&str; 7] = ["object", "array", "string", "integer", "number", "boolean", "null"];

#[derive(Debug, Default)]
struct Node {
    path: String,
    depth: usize,
    /// Values seen at this path, per type (indices of [`TYPES`]).
    types: [u64; 7],
    min: f64,
    max: f64,
    /// Distinct scalars (their JSON text, cut), with counts; `overflow` once past the cap.
    values: HashMap<String, u64>,
    overflow: bool,
    len_min: usize,
    len_max: usize,
    str_min: usize,
    str_max: usize,
    /// Object keys (in first-seen order) and the node each leads to.
    children: Vec<(String, usize)>,
    /// The node of array items (and of a map's values).
    items: Option<usize>,
    /// Objects read as maps here, and their most keys.
    maps: u64,
    map_keys_max: usize,
    map_key_example: Option<String>,
}

impl Node {
    fn seen(&self) -> u64 {
        self.types.iter().sum()
    }
}

/// The shape of one value (see the module docs); [`Shape::render`] writes it for a model.
#[derive(Debug)]
pub struct Shape {
    nodes: Vec<Node>,
    left_out: u64,
}

/// Describes `value` (see the module docs).
pub fn describe(value: &Value) -> Shape {
    let mut shape = Shape { nodes: vec![Node { path: ".".into(), ..Node::default() }], left_out: 0 };
    shape.visit(0, value);
    shape
}

/// Describes several values as one stream (the rows of a CSV, the lines of NDJSON): as if
/// they were the items of one array, without building it.
pub fn describe_items<'a>(items: impl IntoIterator<Item = &'a Value>) -> Shape {
    let mut shape = Shape { nodes: vec![Node { path: ".".into(), ..Node::default() }], left_out: 0 };
    let mut n = 0usize;
    let item = shape.items_of(0);
    for v in items {
        shape.visit(item, v);
        n += 1;
    }
    let root = &mut shape.nodes[0];
    root.types[1] = 1;
    root.len_min = n;
    root.len_max = n;
    shape
}

/// Describes JSON text as [`describe`] describes its parsed value, in one read and without
/// building the value: memory follows the shape (its paths and remembered values), not the
/// document, which a parsed 10 MB document would hold about sixteen times over. A first,
/// byte-level pass finds the objects read as maps (more than [`MAP_KEYS`] keys), since
/// whether an object's keys are paths must be known before its first key is. The error is
/// serde_json's, as parsing the text would give it.
pub fn describe_json(text: &str) -> Result<Shape, serde_json::Error> {
    use serde::de::DeserializeSeed as _;
    let mut walk = stream::Walk {
        shape: Shape { nodes: vec![Node { path: ".".into(), ..Node::default() }], left_out: 0 },
        maps: stream::wide_objects(text.as_bytes()),
        objects: 0,
    };
    let mut de = serde_json::Deserializer::from_str(text);
    stream::At { walk: &mut walk, at: 0 }.deserialize(&mut de)?;
    de.end()?;
    Ok(walk.shape)
}

impl Shape {
    /// Paths not described because [`MAX_PATHS`] were already.
    pub fn paths_left_out(&self) -> u64 {
        self.left_out
    }

    /// How many paths the shape has.
    pub fn paths(&self) -> usize {
        self.nodes.len()
    }

    fn new_node(&mut self, path: String, depth: usize) -> Option<usize> {
        if self.nodes.len() >= MAX_PATHS {
            self.left_out += 1;
            return None;
        }
        self.nodes.push(Node { path, depth, ..Node::default() });
        Some(self.nodes.len() - 1)
    }

    fn items_of(&mut self, at: usize) -> usize {
        if let Some(i) = self.nodes[at].items {
            return i;
        }
        let path = format!("{}[]", self.nodes[at].path);
        let depth = self.nodes[at].depth + 1;
        match self.new_node(path, depth) {
            Some(i) => {
                self.nodes[at].items = Some(i);
                i
            }
            // Past the cap: items are described nowhere (their count is in `left_out`).
            None => usize::MAX,
        }
    }

    fn child(&mut self, at: usize, name: &str) -> usize {
        if let Some((_, i)) = self.nodes[at].children.iter().find(|(k, _)| k == name) {
            return *i;
        }
        let parent = &self.nodes[at].path;
        let key = jq_key(name);
        let path = match parent.as_str() {
            "." if key.starts_with('.') => key,
            _ => format!("{parent}{key}"),
        };
        let depth = self.nodes[at].depth + 1;
        match self.new_node(path, depth) {
            Some(i) => {
                self.nodes[at].children.push((name.to_owned(), i));
                i
            }
            None => usize::MAX,
        }
    }

    fn remember(&mut self, at: usize, text: impl FnOnce() -> String) {
        let node = &mut self.nodes[at];
        if node.overflow {
            return;
        }
        let key = text();
        if let Some(n) = node.values.get_mut(&key) {
            *n += 1;
        } else if node.values.len() < MAX_DISTINCT {
            node.values.insert(key, 1);
        } else {
            node.overflow = true;
        }
    }

    fn visit(&mut self, at: usize, value: &Value) {
        if at == usize::MAX {
            return;
        }
        match value {
            Value::Object(map) => {
                self.nodes[at].types[0] += 1;
                if map.len() > MAP_KEYS {
                    self.map(at, map.len(), map.keys().next().map_or("", String::as_str));
                    let item = self.items_of(at);
                    for v in map.values() {
                        self.visit(item, v);
                    }
                } else {
                    for (k, v) in map {
                        let c = self.child(at, k);
                        self.visit(c, v);
                    }
                }
            }
            Value::Array(items) => {
                self.array(at, items.len());
                if !items.is_empty() {
                    let item = self.items_of(at);
                    for v in items {
                        self.visit(item, v);
                    }
                }
            }
            Value::String(s) => self.string(at, s),
            Value::Number(n) => self.number(at, n),
            Value::Bool(b) => self.boolean(at, *b),
            Value::Null => self.nodes[at].types[6] += 1,
        }
    }

    fn string(&mut self, at: usize, s: &str) {
        let chars = if s.len() < 64 { s.len() } else { s.chars().count() };
        let node = &mut self.nodes[at];
        let first = node.types[2] == 0;
        node.types[2] += 1;
        node.str_min = if first { chars } else { node.str_min.min(chars) };
        node.str_max = node.str_max.max(chars);
        self.remember(at, || serde_json::to_string(&cut(s)).unwrap_or_default());
    }

    fn number(&mut self, at: usize, n: &serde_json::Number) {
        let f = n.as_f64().unwrap_or(0.0);
        let node = &mut self.nodes[at];
        let first = node.types[3] + node.types[4] == 0;
        node.types[if n.is_f64() { 4 } else { 3 }] += 1;
        node.min = if first { f } else { node.min.min(f) };
        node.max = if first { f } else { node.max.max(f) };
        self.remember(at, || n.to_string());
    }

    fn boolean(&mut self, at: usize, b: bool) {
        self.nodes[at].types[5] += 1;
        self.remember(at, || b.to_string());
    }

    /// An array of `len` items seen at `at` (its items described on their own).
    fn array(&mut self, at: usize, len: usize) {
        let node = &mut self.nodes[at];
        let first = node.types[1] == 0;
        node.types[1] += 1;
        node.len_min = if first { len } else { node.len_min.min(len) };
        node.len_max = node.len_max.max(len);
    }

    /// An object of `keys` keys read as a map at `at`, `example` its first key.
    fn map(&mut self, at: usize, keys: usize, example: &str) {
        let node = &mut self.nodes[at];
        node.maps += 1;
        node.map_keys_max = node.map_keys_max.max(keys);
        if node.map_key_example.is_none() {
            node.map_key_example = Some(cut(example));
        }
    }

    /// One line per path, in document order, within `max_bytes` (shallower paths are kept
    /// first; a last line says how many were left out and how to see them).
    pub fn render(&self, max_bytes: usize) -> String {
        let lines: Vec<String> = self.nodes.iter().map(|n| self.line(n)).collect();
        let total: usize = lines.iter().map(|l| l.len() + 1).sum();
        let mut keep = vec![true; lines.len()];
        let mut dropped = 0usize;
        if total > max_bytes {
            // Keep the shallowest paths that fit, in document order.
            let mut order: Vec<usize> = (0..lines.len()).collect();
            order.sort_by_key(|&i| (self.nodes[i].depth, i));
            let room = max_bytes.saturating_sub(70);
            let mut used = 0;
            keep = vec![false; lines.len()];
            for i in order {
                let n = lines[i].len() + 1;
                if used + n > room {
                    continue;
                }
                used += n;
                keep[i] = true;
            }
            dropped = keep.iter().filter(|k| !**k).count();
        }
        let mut out = String::new();
        for (line, _) in lines.iter().zip(&keep).filter(|(_, k)| **k) {
            out.push_str(line);
            out.push('\n');
        }
        if dropped > 0 {
            let _ = writeln!(out, "… {dropped} deeper paths left out; describe a part to see them");
        }
        if self.left_out > 0 {
            let _ = writeln!(out, "… {} more values under paths past the first {MAX_PATHS} (not described)", self.left_out);
        }
        out
    }

    /// `.orders[].region: string ×20000, values "north" 5000, "south" 5000, …`
    fn line(&self, n: &Node) -> String {
        let seen = n.seen();
        let mut out = format!("{}: ", n.path);
        let kinds: Vec<(usize, u64)> = n.types.iter().copied().enumerate().filter(|(_, c)| *c > 0).collect();
        if kinds.is_empty() {
            out.push_str("nothing");
            return out;
        }
        if kinds.len() == 1 {
            let _ = write!(out, "{} ×{seen}", TYPES[kinds[0].0]);
        } else {
            let parts: Vec<String> = kinds.iter().map(|(t, c)| format!("{} ×{c}", TYPES[*t])).collect();
            out.push_str(&parts.join(" | "));
        }
        let has = |t: usize| n.types[t] > 0;
        if n.maps > 0 {
            let _ = write!(out, "; a map of up to {} keys", n.map_keys_max);
            if let Some(k) = &n.map_key_example {
                let _ = write!(out, " (e.g. {})", serde_json::to_string(k).unwrap_or_default());
            }
        }
        if has(1) {
            if n.len_min == n.len_max {
                let _ = write!(out, "; length {}", n.len_min);
            } else {
                let _ = write!(out, "; length {}..{}", n.len_min, n.len_max);
            }
        }
        if has(3) || has(4) {
            let _ = write!(out, "; min {} max {}", num(n.min), num(n.max));
        }
        let scalars = n.types[2] + n.types[3] + n.types[4] + n.types[5];
        if scalars > 0 {
            let distinct = n.values.len();
            let low = !n.overflow && distinct <= LOW_CARDINALITY && (distinct as u64) < scalars.max(2);
            if scalars == 1 && distinct == 1 {
                let _ = write!(out, "; value {}", n.values.keys().next().map_or("", String::as_str));
                if n.str_max > VALUE_CHARS {
                    let _ = write!(out, " ({} chars)", n.str_max);
                }
            } else if low {
                let mut vals: Vec<(&String, &u64)> = n.values.iter().collect();
                vals.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
                let listed: Vec<String> = vals.iter().map(|(v, c)| format!("{v} {c}")).collect();
                let _ = write!(out, "; values {}", listed.join(", "));
            } else if n.overflow {
                let _ = write!(out, "; over {MAX_DISTINCT} distinct");
            } else {
                let _ = write!(out, "; {distinct} distinct");
            }
            if has(2) && !low && scalars > 1 {
                // The least string remembered: the same example whatever the map's order.
                if let Some(example) = n.values.keys().filter(|v| v.starts_with('"')).min() {
                    let _ = write!(out, ", e.g. {example}");
                }
                if n.str_min == n.str_max {
                    let _ = write!(out, "; {} chars", n.str_min);
                } else {
                    let _ = write!(out, "; {}..{} chars", n.str_min, n.str_max);
                }
            }
        }
        out
    }
}

/// [`describe_json`]'s walk: serde visitors that describe each value as the parser meets it.
mod stream {
    use std::borrow::Cow;
    use std::fmt;

    use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};

    use super::{MAP_KEYS, Shape};

    /// The shape so far, the objects read as maps (see [`wide_objects`]) and how many objects
    /// the walk has met (its position in that list).
    pub(super) struct Walk {
        pub(super) shape: Shape,
        pub(super) maps: Vec<(u32, u32)>,
        pub(super) objects: u32,
    }

    /// The objects of `json` with more than [`MAP_KEYS`] keys, as (their number in document
    /// order of their `{`, their key count), in that order. Valid JSON is assumed: for text
    /// that is not, the parse that follows fails and this answer is not used.
    pub(super) fn wide_objects(json: &[u8]) -> Vec<(u32, u32)> {
        // Per open container: its object number (objects only), entries so far, and
        // whether anything was in it.
        let mut open: Vec<(Option<u32>, u32, bool)> = Vec::new();
        let (mut objects, mut wide) = (0u32, Vec::new());
        for (_, b) in crate::fastjson::structure(json) {
            if !b.is_ascii_whitespace()
                && !matches!(b, b'}' | b']')
                && let Some(top) = open.last_mut()
            {
                top.2 = true;
            }
            match b {
                b'{' => {
                    open.push((Some(objects), 0, false));
                    objects += 1;
                }
                b'[' => open.push((None, 0, false)),
                b',' => {
                    if let Some(top) = open.last_mut() {
                        top.1 += 1;
                    }
                }
                b'}' | b']' => {
                    if let Some((Some(n), commas, any)) = open.pop() {
                        let keys = commas + u32::from(any);
                        if keys as usize > MAP_KEYS {
                            wide.push((n, keys));
                        }
                    }
                }
                _ => {}
            }
        }
        wide.sort_unstable();
        wide
    }

    /// Describes the next value at node `at` (`usize::MAX`: past the path cap, counted only).
    pub(super) struct At<'w> {
        pub(super) walk: &'w mut Walk,
        pub(super) at: usize,
    }

    /// Describes the next value as an item of the array (or map) at node `parent`; the items'
    /// node is made when the first item comes, as for a parsed value.
    struct ItemOf<'w> {
        walk: &'w mut Walk,
        parent: usize,
    }

    /// A key, borrowed from the text unless it had escapes.
    struct Key;

    impl<'de> DeserializeSeed<'de> for At<'_> {
        type Value = ();
        fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            d.deserialize_any(self)
        }
    }

    impl<'de> DeserializeSeed<'de> for ItemOf<'_> {
        type Value = ();
        fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            let at = if self.parent == usize::MAX { usize::MAX } else { self.walk.shape.items_of(self.parent) };
            d.deserialize_any(At { walk: self.walk, at })
        }
    }

    impl<'de> DeserializeSeed<'de> for Key {
        type Value = Cow<'de, str>;
        fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Cow<'de, str>, D::Error> {
            d.deserialize_str(self)
        }
    }

    impl<'de> Visitor<'de> for Key {
        type Value = Cow<'de, str>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a key")
        }
        fn visit_borrowed_str<E: de::Error>(self, s: &'de str) -> Result<Cow<'de, str>, E> {
            Ok(Cow::Borrowed(s))
        }
        fn visit_str<E: de::Error>(self, s: &str) -> Result<Cow<'de, str>, E> {
            Ok(Cow::Owned(s.to_owned()))
        }
    }

    impl<'de> Visitor<'de> for At<'_> {
        type Value = ();

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a JSON value")
        }

        fn visit_bool<E: de::Error>(self, b: bool) -> Result<(), E> {
            if self.at != usize::MAX {
                self.walk.shape.boolean(self.at, b);
            }
            Ok(())
        }

        fn visit_i64<E: de::Error>(self, n: i64) -> Result<(), E> {
            self.number(n.into())
        }

        fn visit_u64<E: de::Error>(self, n: u64) -> Result<(), E> {
            self.number(n.into())
        }

        fn visit_f64<E: de::Error>(self, f: f64) -> Result<(), E> {
            // serde_json reads no NaN or infinity, so every float it hands over is a Number.
            serde_json::Number::from_f64(f).map_or(Ok(()), |n| self.number(n))
        }

        fn visit_str<E: de::Error>(self, s: &str) -> Result<(), E> {
            if self.at != usize::MAX {
                self.walk.shape.string(self.at, s);
            }
            Ok(())
        }

        fn visit_unit<E: de::Error>(self) -> Result<(), E> {
            if self.at != usize::MAX {
                self.walk.shape.nodes[self.at].types[6] += 1;
            }
            Ok(())
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
            let mut len = 0usize;
            while seq.next_element_seed(ItemOf { walk: &mut *self.walk, parent: self.at })?.is_some() {
                len += 1;
            }
            if self.at != usize::MAX {
                self.walk.shape.array(self.at, len);
            }
            Ok(())
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            let number = self.walk.objects;
            self.walk.objects += 1;
            let wide = self.walk.maps.binary_search_by_key(&number, |(n, _)| *n).ok().map(|i| self.walk.maps[i].1);
            let at = self.at;
            if at != usize::MAX {
                self.walk.shape.nodes[at].types[0] += 1;
            }
            let mut first = true;
            while let Some(key) = map.next_key_seed(Key)? {
                match wide {
                    Some(keys) => {
                        if first && at != usize::MAX {
                            self.walk.shape.map(at, keys as usize, &key);
                        }
                        map.next_value_seed(ItemOf { walk: &mut *self.walk, parent: at })?;
                    }
                    None => {
                        let child = if at == usize::MAX { usize::MAX } else { self.walk.shape.child(at, &key) };
                        map.next_value_seed(At { walk: &mut *self.walk, at: child })?;
                    }
                }
                first = false;
            }
            Ok(())
        }
    }

    impl At<'_> {
        fn number<E>(self, n: serde_json::Number) -> Result<(), E> {
            if self.at != usize::MAX {
                self.walk.shape.number(self.at, &n);
            }
            Ok(())
        }
    }
}

/// A key as jq writes it after a path: `.name`, or `["odd key"]`.
fn jq_key(key: &str) -> String {
    let ident = key.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if ident { format!(".{key}") } else { format!("[{}]", serde_json::to_string(key).unwrap_or_default()) }
}

fn cut(s: &str) -> String {
    match s.char_indices().nth(VALUE_CHARS) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_owned(),
    }
}

/// A number as a model reads it: integers whole, others to 6 significant digits.
fn num(x: f64) -> String {
    if x.fract() == 0.0 && x.abs() < 1e15 {
        format!("{}", x as i64)
    } else {
        let s = format!("{x:.6}");
        s.trim_end_matches('0').trim_end_matches('.').to_owned()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn paths_types_counts_values_and_ranges() {
        let orders: Vec<Value> = (0..1000)
            .map(|i| {
                let region = ["north", "south"][i % 2];
                let note = if i % 10 == 0 { Value::Null } else { json!("ok") };
                json!({"id": format!("O-{i}"), "region": region, "total": i as f64 / 4.0, "lines": vec![1; i % 5], "note": note})
            })
            .collect();
        let text = describe(&json!({"orders": orders, "count": 1000})).render(10_000);
        let line = |p: &str| text.lines().find(|l| l.starts_with(&format!("{p}: "))).unwrap_or_else(|| panic!("no {p} in\n{text}"));
        assert_eq!(line("."), ".: object ×1");
        assert_eq!(line(".orders"), ".orders: array ×1; length 1000");
        assert!(line(".orders[].id").contains("string ×1000; over 256 distinct, e.g. \"O-"), "{text}");
        assert_eq!(line(".orders[].region"), ".orders[].region: string ×1000; values \"north\" 500, \"south\" 500");
        assert!(line(".orders[].total").starts_with(".orders[].total: number ×1000; min 0 max 249.75; over 256"), "{text}");
        assert_eq!(line(".orders[].lines"), ".orders[].lines: array ×1000; length 0..4");
        assert_eq!(line(".orders[].note"), ".orders[].note: string ×900 | null ×100; values \"ok\" 900");
        assert_eq!(line(".count"), ".count: integer ×1; min 1000 max 1000; value 1000");
    }

    #[test]
    fn maps_odd_keys_and_the_budget() {
        let by_id: serde_json::Map<String, Value> = (0..500).map(|i| (format!("O-{i}"), json!({"n": i}))).collect();
        let text = describe(&json!({"by id": by_id})).render(10_000);
        assert!(text.contains(".[\"by id\"]: object ×1; a map of up to 500 keys (e.g. \"O-0\")"), "{text}");
        assert!(text.contains(".[\"by id\"][].n: integer ×500; min 0 max 499"), "{text}");
        // Within a small budget the shallow paths stay and the rest is counted.
        let deep = json!({"a": {"b": {"c": {"d": {"e": [1, 2, 3]}}}}, "z": 1});
        let small = describe(&deep).render(200);
        assert!(small.len() <= 200 && small.contains(".z: ") && small.contains("deeper paths left out"), "{small}");
    }

    /// The streaming walk reads what the value walk reads, line for line.
    #[test]
    fn reading_the_text_describes_what_parsing_it_would() {
        let by_id: serde_json::Map<String, Value> = (0..100).map(|i| (format!("O-{i}"), json!({"n": i, "ok": i % 3 == 0}))).collect();
        let docs = [
            json!({"orders": [{"id": "a\"b{", "total": 1.5, "tags": []}, {"id": "c", "total": 2, "tags": ["x", null]}], "by id": by_id, "n": -3}),
            json!([[], [[1, 2.25e3]], {"": {"deep": [true, false, null]}}]),
            json!("just a string"),
            json!({"wide": (0..65).map(|i| (format!("k{i}"), json!(i))).collect::<serde_json::Map<_, _>>(), "narrow": (0..64).map(|i| (format!("k{i}"), json!(i))).collect::<serde_json::Map<_, _>>()}),
            json!((0..3000).map(|i| json!({format!("k{i}"): {"v": i}})).collect::<Vec<_>>()),
        ];
        for doc in docs {
            let text = doc.to_string();
            let parsed = describe(&doc);
            let streamed = describe_json(&text).unwrap();
            assert_eq!(streamed.render(usize::MAX), parsed.render(usize::MAX), "{}", &text[..text.len().min(300)]);
            assert_eq!(streamed.paths_left_out(), parsed.paths_left_out());
            let pretty = serde_json::to_string_pretty(&doc).unwrap();
            assert_eq!(describe_json(&pretty).unwrap().render(usize::MAX), parsed.render(usize::MAX));
        }
    }

    #[test]
    fn text_that_is_not_json_fails_as_parsing_it_would() {
        for bad in ["{\"a\": ", "[1, 2] 3", "{\"a\": 1}\n{\"a\": 2}", "nul", ""] {
            let want = serde_json::from_str::<Value>(bad).unwrap_err().to_string();
            assert_eq!(describe_json(bad).unwrap_err().to_string(), want, "{bad:?}");
        }
    }

    #[test]
    fn stays_bounded_on_wide_documents() {
        let wide: Vec<Value> = (0..5_000).map(|i| json!({format!("k{i}"): i})).collect();
        let shape = describe(&json!(wide));
        assert_eq!(shape.paths(), MAX_PATHS);
        assert!(shape.paths_left_out() > 0);
        let items = [json!({"a": 1}), json!({"a": 2, "b": "x"})];
        let text = describe_items(items.iter()).render(1_000);
        assert!(text.starts_with(".: array ×1; length 2\n.[]: object ×2\n.[].a: integer ×2"), "{text}");
    }
}
