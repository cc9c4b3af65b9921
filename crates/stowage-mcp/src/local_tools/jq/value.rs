//! The values jq programs run on here: jaq's value semantics (those of `jaq-json`, whose
//! numbers this reuses), with one more kind of value, a node of an artifact read in place
//! ([`Val::Node`], see [`super::doc`]). Reading `.orders[] | select(.status == "refunded")`
//! over a 10 MB artifact then copies nothing: each step is a node index and a reference count.
//! Values a program builds (`[…]`, `{…}`, arithmetic) are owned, as in jaq.
//!
//! Most operations read a value through [`Val::kind`], the same for both representations;
//! the few that change a container (`|=`, `+` of arrays) first [`Val::expand`] a node one
//! level into an owned container of nodes.

use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::rc::Rc;

use jaq_core::box_iter::box_once;
use jaq_core::path::Opt;
use jaq_core::{Exn, ops};
use jaq_json::Num;

use super::doc::{self, Doc};

/// An object: insertion-ordered, keys always strings.
pub(crate) type Map = indexmap::IndexMap<Val, Val, foldhash::fast::RandomState>;

pub(crate) type Error = jaq_core::Error<Val>;
pub(crate) type ValR<T = Val> = jaq_core::ValR<T, Val>;
pub(crate) type ValX<'a> = jaq_core::ValX<'a, Val>;
pub(crate) type ValXs<'a> = jaq_core::ValXs<'a, Val>;

/// A jq value.
#[derive(Clone, Debug, Default)]
pub(crate) enum Val {
    #[default]
    Null,
    Bool(bool),
    Num(Num),
    /// A string (UTF-8 as far as the program keeps it so).
    Str(Rc<[u8]>),
    Arr(Rc<Vec<Val>>),
    Obj(Rc<Map>),
    /// A string, number, array, object or CSV row of an artifact, read in place (never a
    /// null or boolean: those are made owned when read).
    Node(Rc<Doc>, u32),
}

/// What a value is, and its parts, whatever holds it.
pub(crate) enum Kind<'a> {
    Null,
    Bool(bool),
    Num(Num),
    Str(&'a [u8]),
    Arr(&'a [Val]),
    DocArr(&'a Rc<Doc>, u32),
    Obj(&'a Map),
    DocObj(&'a Rc<Doc>, u32),
    DocRow(&'a Rc<Doc>, u32),
}

/// What a value is, without its parts (to dispatch on before moving the value).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Shape {
    Null,
    Bool,
    Num,
    Str,
    Arr,
    Obj,
}

impl Val {
    pub(crate) fn str(s: &[u8]) -> Val {
        Val::Str(Rc::from(s))
    }

    /// Node `i` of `doc` as a value (scalars without escapes are made owned here).
    pub(crate) fn of(doc: &Rc<Doc>, i: u32) -> Val {
        match doc::tag(doc.node(i)) {
            doc::NULL => Val::Null,
            doc::FALSE => Val::Bool(false),
            doc::TRUE => Val::Bool(true),
            doc::INT => Val::Num(doc.num(i)),
            _ => Val::Node(doc.clone(), i),
        }
    }

    pub(crate) fn kind(&self) -> Kind<'_> {
        match self {
            Val::Null => Kind::Null,
            Val::Bool(b) => Kind::Bool(*b),
            Val::Num(n) => Kind::Num(n.clone()),
            Val::Str(s) => Kind::Str(s),
            Val::Arr(a) => Kind::Arr(a),
            Val::Obj(o) => Kind::Obj(o),
            Val::Node(d, i) => match doc::tag(d.node(*i)) {
                doc::INT | doc::NUM => Kind::Num(d.num(*i)),
                doc::STR | doc::STR_EXTRA | doc::STR_INLINE => Kind::Str(d.str(*i)),
                doc::ARR => Kind::DocArr(d, *i),
                doc::OBJ => Kind::DocObj(d, *i),
                doc::ROW => Kind::DocRow(d, *i),
                _ => Kind::Null,
            },
        }
    }

    /// What the value is; the order is jq's order of types.
    pub(crate) fn shape(&self) -> Shape {
        match self {
            Val::Null => Shape::Null,
            Val::Bool(_) => Shape::Bool,
            Val::Num(_) => Shape::Num,
            Val::Str(_) => Shape::Str,
            Val::Arr(_) => Shape::Arr,
            Val::Obj(_) => Shape::Obj,
            Val::Node(d, i) => match doc::tag(d.node(*i)) {
                doc::INT | doc::NUM => Shape::Num,
                doc::STR | doc::STR_EXTRA | doc::STR_INLINE => Shape::Str,
                doc::ARR => Shape::Arr,
                doc::OBJ | doc::ROW => Shape::Obj,
                _ => Shape::Null,
            },
        }
    }

    pub(crate) fn as_num(&self) -> Option<Num> {
        match self.kind() {
            Kind::Num(n) => Some(n),
            _ => None,
        }
    }

    /// The elements, when an array.
    pub(crate) fn items(&self) -> Option<Box<dyn Iterator<Item = Val> + '_>> {
        match self.kind() {
            Kind::Arr(a) => Some(Box::new(a.iter().cloned())),
            Kind::DocArr(d, i) => Some(Box::new(d.elements(i).map(move |e| Val::of(d, e)))),
            _ => None,
        }
    }

    /// The (key, value) pairs, when an object.
    pub(crate) fn fields(&self) -> Option<Box<dyn Iterator<Item = (Val, Val)> + '_>> {
        match self.kind() {
            Kind::Obj(o) => Some(Box::new(o.iter().map(|(k, v)| (k.clone(), v.clone())))),
            Kind::DocObj(d, i) => Some(Box::new(d.pairs(i).map(move |(k, v)| (Val::Node(d.clone(), k), Val::of(d, v))))),
            Kind::DocRow(d, i) => Some(Box::new(d.row(i).map(move |(k, v)| (Val::Str(k.clone()), Val::of(d, v))))),
            _ => None,
        }
    }

    /// Arrays and objects: how many children.
    pub(crate) fn len(&self) -> Option<usize> {
        match self.kind() {
            Kind::Arr(a) => Some(a.len()),
            Kind::Obj(o) => Some(o.len()),
            Kind::DocArr(d, i) | Kind::DocObj(d, i) | Kind::DocRow(d, i) => Some(d.count(i)),
            _ => None,
        }
    }

    /// A node made owned one level down (its children stay nodes); other values unchanged.
    pub(crate) fn expand(self) -> Val {
        if !matches!(self, Val::Node(..)) {
            return self;
        }
        match self.shape() {
            Shape::Arr => Val::Arr(Rc::new(self.items().expect("an array").collect())),
            Shape::Obj => Val::Obj(Rc::new(self.fields().expect("an object").collect())),
            Shape::Num => Val::Num(self.as_num().expect("a number")),
            _ => self,
        }
    }

    /// The value of `key` in an object (`None` when absent or not an object).
    pub(crate) fn get(&self, key: &Val) -> Option<Val> {
        match self.kind() {
            Kind::Obj(o) => o.get(key).cloned(),
            Kind::DocObj(d, i) => key.as_str_bytes().and_then(|k| d.field(i, k)).map(|v| Val::of(d, v)),
            Kind::DocRow(d, i) => key.as_str_bytes().and_then(|k| d.row_field(i, k)).map(|v| Val::of(d, v)),
            _ => None,
        }
    }

    pub(crate) fn as_str_bytes(&self) -> Option<&[u8]> {
        match self.kind() {
            Kind::Str(s) => Some(s),
            _ => None,
        }
    }

    fn is_str(&self) -> bool {
        self.as_str_bytes().is_some()
    }

    fn into_owned_vec(self) -> Vec<Val> {
        match self.expand() {
            Val::Arr(a) => Rc::try_unwrap(a).unwrap_or_else(|a| (*a).clone()),
            _ => Vec::new(),
        }
    }

    fn into_owned_map(self) -> Map {
        match self.expand() {
            Val::Obj(o) => Rc::try_unwrap(o).unwrap_or_else(|o| (*o).clone()),
            _ => Map::default(),
        }
    }

    /// The value as compact JSON.
    pub(crate) fn to_json(&self) -> String {
        let mut out = Vec::new();
        self.write_json(&mut out);
        String::from_utf8(out).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
    }

    /// Writes the value as compact JSON. A number that JSON cannot spell is written as jq
    /// writes it (NaN as null, infinities as the largest finite numbers).
    pub(crate) fn write_json(&self, out: &mut Vec<u8>) {
        match self.kind() {
            Kind::Null => out.extend_from_slice(b"null"),
            Kind::Bool(b) => out.extend_from_slice(if b { b"true" } else { b"false" }),
            Kind::Num(n) => write_num(&n, out),
            Kind::Str(s) => write_str(s, out),
            Kind::Arr(_) | Kind::DocArr(..) => {
                out.push(b'[');
                for (n, x) in self.items().expect("an array").enumerate() {
                    if n > 0 {
                        out.push(b',');
                    }
                    x.write_json(out);
                }
                out.push(b']');
            }
            Kind::Obj(_) | Kind::DocObj(..) | Kind::DocRow(..) => {
                out.push(b'{');
                for (n, (k, v)) in self.fields().expect("an object").enumerate() {
                    if n > 0 {
                        out.push(b',');
                    }
                    k.write_json(out);
                    out.push(b':');
                    v.write_json(out);
                }
                out.push(b'}');
            }
        }
    }

    /// About how long the value's compact JSON is, without writing it.
    pub(crate) fn json_len(&self) -> usize {
        match self.kind() {
            Kind::Str(s) => s.len() + 2,
            Kind::Arr(_) | Kind::DocArr(..) => 2 + self.items().expect("an array").map(|x| x.json_len() + 1).sum::<usize>(),
            Kind::Obj(_) | Kind::DocObj(..) | Kind::DocRow(..) => {
                2 + self.fields().expect("an object").map(|(k, v)| k.json_len() + v.json_len() + 2).sum::<usize>()
            }
            _ => 8,
        }
    }

    fn as_pos_usize(&self) -> Result<(bool, usize), Error> {
        match self.as_num() {
            Some(Num::Int(i)) => Ok((i >= 0, i.unsigned_abs())),
            Some(Num::BigInt(_)) => Err(Error::str("index out of range")),
            _ => Err(Error::typ(self.clone(), "integer")),
        }
    }

    fn range_int(range: jaq_core::val::Range<&Val>) -> Result<(Bound, Bound), Error> {
        let f = |i: Option<&Val>| i.filter(|i| !matches!(i, Val::Null)).map(Val::as_pos_usize).transpose();
        Ok((f(range.start)?, f(range.end)?))
    }

    fn index_opt(self, index: &Val) -> Result<Option<Val>, Error> {
        use jaq_std::ValT as _;
        Ok(match (self.shape(), index.shape()) {
            (Shape::Null, _) => None,
            (Shape::Arr, Shape::Num) if index.is_int() => {
                let len = self.len().expect("an array");
                let at = index.as_pos_usize().ok().and_then(|i| abs_index(i, len));
                match (at, &self) {
                    (None, _) => None,
                    (Some(k), Val::Arr(a)) => Some(a[k].clone()),
                    (Some(k), Val::Node(d, i)) => d.element(*i, k).map(|e| Val::of(d, e)),
                    _ => None,
                }
            }
            (Shape::Arr, Shape::Arr) => {
                let x: Vec<Val> = self.items().expect("an array").collect();
                let y: Vec<Val> = index.items().expect("an array").collect();
                if y.is_empty() {
                    return Ok(Some(Val::Arr(Rc::default())));
                }
                Some(x.windows(y.len()).enumerate().filter(|(_, w)| *w == y.as_slice()).map(|(i, _)| Val::from(i)).collect())
            }
            (Shape::Obj, _) => self.get(index),
            (Shape::Str | Shape::Arr, Shape::Obj) => {
                let start = index.get(&Val::str(b"start"));
                let end = index.get(&Val::str(b"end"));
                return jaq_core::ValT::range(self, start.as_ref()..end.as_ref()).map(Some);
            }
            _ => return Err(Error::index(self, index.clone())),
        })
    }

    /// `length`: 0 for null, the absolute value of a number, characters of a string, children
    /// of an array or object.
    pub(crate) fn length(&self) -> ValR {
        match self.kind() {
            Kind::Null => Ok(Val::from(0usize)),
            Kind::Num(n) => Ok(Val::Num(match n {
                Num::Int(i) => Num::Int(i.abs()),
                Num::BigInt(i) => Num::big_int(num_abs(&i)),
                other => Num::Float(num_f64(&other).abs()),
            })),
            Kind::Str(s) => Ok(Val::from(String::from_utf8_lossy(s).chars().count())),
            Kind::Bool(_) => Err(Error::str(format_args!("{self} has no length"))),
            _ => Ok(Val::from(self.len().expect("a container"))),
        }
    }

    /// `contains`: substrings, elements contained in some element, fields contained.
    pub(crate) fn contains(&self, other: &Val) -> bool {
        match (self.kind(), other.kind()) {
            (Kind::Str(l), Kind::Str(r)) => memchr::memmem::find(l, r).is_some(),
            (Kind::Arr(_) | Kind::DocArr(..), Kind::Arr(_) | Kind::DocArr(..)) => {
                let l: Vec<Val> = self.items().expect("an array").collect();
                other.items().expect("an array").all(|r| l.iter().any(|l| l.contains(&r)))
            }
            (Kind::Obj(_) | Kind::DocObj(..) | Kind::DocRow(..), Kind::Obj(_) | Kind::DocObj(..) | Kind::DocRow(..)) => {
                other.fields().expect("an object").all(|(k, r)| self.get(&k).is_some_and(|l| l.contains(&r)))
            }
            _ => self == other,
        }
    }
}

fn num_abs(i: &num_bigint::BigInt) -> num_bigint::BigInt {
    num_bigint::BigInt::from(i.magnitude().clone())
}

/// A number as a float (jaq's own conversion is private to its crate).
pub(crate) fn num_f64(n: &Num) -> f64 {
    use num_traits::ToPrimitive;
    match n {
        Num::Int(i) => *i as f64,
        Num::BigInt(i) => i.to_f64().unwrap_or(f64::NAN),
        Num::Float(f) => *f,
        Num::Dec(s) => s.parse().unwrap_or(f64::NAN),
    }
}

fn write_num(n: &Num, out: &mut Vec<u8>) {
    use std::io::Write as _;
    let f = match n {
        Num::Float(f) => *f,
        _ => {
            let _ = write!(out, "{n}");
            return;
        }
    };
    if f.is_nan() {
        out.extend_from_slice(b"null");
    } else if f.is_infinite() {
        let _ = write!(out, "{}", if f > 0.0 { f64::MAX } else { f64::MIN });
    } else {
        let _ = write!(out, "{n}");
    }
}

fn write_str(s: &[u8], out: &mut Vec<u8>) {
    let text = String::from_utf8_lossy(s);
    serde_json::to_writer(out, text.as_ref()).expect("writing to memory");
}

/// A slice bound: whether it counts from the start, and how far.
type Bound = Option<(bool, usize)>;

/// An index counted from the end when negative, if it falls inside `len`.
fn abs_index((pos, i): (bool, usize), len: usize) -> Option<usize> {
    let i = if pos { Some(i) } else { len.checked_sub(i) };
    i.filter(|i| *i < len)
}

/// A bound of a slice, counted from the end when negative, clamped to `0..=len`.
fn abs_bound(i: Bound, len: usize, default: usize) -> usize {
    i.map_or(default, |(pos, i)| if pos { i.min(len) } else { len.saturating_sub(i) })
}

/// The char boundaries of `s` as byte offsets, for slicing strings by characters.
fn char_range(s: &[u8], from: Bound, upto: Bound) -> (usize, usize) {
    let text = String::from_utf8_lossy(s);
    let starts: Vec<usize> = text.char_indices().map(|(i, _)| i).chain([text.len()]).collect();
    let chars = starts.len() - 1;
    let (a, b) = (abs_bound(from, chars, 0), abs_bound(upto, chars, chars));
    if matches!(text, std::borrow::Cow::Borrowed(_)) { (starts[a], starts[b.max(a)]) } else { (0, 0) }
}

impl jaq_core::ValT for Val {
    fn from_num(n: &str) -> ValR {
        Ok(Val::Num(Num::from_str_radix(n, 10).unwrap_or_else(|| Num::Dec(Rc::new(n.to_owned())))))
    }

    fn from_map<I: IntoIterator<Item = (Self, Self)>>(iter: I) -> ValR {
        let mut map = Map::default();
        for (k, v) in iter {
            if !k.is_str() {
                return Err(Error::typ(k, "object key (a string)"));
            }
            map.insert(k, v);
        }
        Ok(Val::Obj(Rc::new(map)))
    }

    fn key_values(self) -> Box<dyn Iterator<Item = ValR<(Val, Val)>>> {
        match self.shape() {
            Shape::Arr => Box::new(self.into_owned_vec().into_iter().enumerate().map(|(i, x)| Ok((Val::from(i), x)))),
            Shape::Obj => Box::new(self.into_owned_map().into_iter().map(Ok)),
            _ => box_once(Err(Error::typ(self, "iterable (array or object)"))),
        }
    }

    fn values(self) -> Box<dyn Iterator<Item = ValR>> {
        match (self.shape(), &self) {
            (Shape::Arr, Val::Node(d, i)) => {
                let d = d.clone();
                let (end, mut at) = (d.next(*i), *i + 1);
                Box::new(std::iter::from_fn(move || {
                    (at < end).then(|| {
                        let here = at;
                        at = d.next(at);
                        Ok(Val::of(&d, here))
                    })
                }))
            }
            (Shape::Arr, _) => Box::new(self.into_owned_vec().into_iter().map(Ok)),
            (Shape::Obj, _) => Box::new(self.into_owned_map().into_values().map(Ok)),
            _ => box_once(Err(Error::typ(self, "iterable (array or object)"))),
        }
    }

    fn index(self, index: &Self) -> ValR {
        self.index_opt(index).map(Option::unwrap_or_default)
    }

    fn range(self, range: jaq_core::val::Range<&Self>) -> ValR {
        let (from, upto) = Val::range_int(range)?;
        match self.shape() {
            Shape::Str => {
                let s = self.as_str_bytes().expect("a string");
                let (a, b) = char_range(s, from, upto);
                Ok(Val::str(&s[a..b]))
            }
            Shape::Arr => {
                let len = self.len().expect("an array");
                let (a, b) = (abs_bound(from, len, 0), abs_bound(upto, len, len));
                Ok(self.items().expect("an array").skip(a).take(b.saturating_sub(a)).collect())
            }
            _ => Err(Error::typ(self, "rangeable (array or string)")),
        }
    }

    fn map_values<'a, I: Iterator<Item = ValX<'a>>>(self, opt: Opt, f: impl Fn(Self) -> I) -> ValX<'a> {
        match self.expand() {
            Val::Arr(a) => Ok(Rc::try_unwrap(a).unwrap_or_else(|a| (*a).clone()).into_iter().flat_map(f).collect::<Result<_, _>>()?),
            Val::Obj(o) => {
                let iter = Rc::try_unwrap(o).unwrap_or_else(|o| (*o).clone()).into_iter();
                let map = iter.filter_map(|(k, v)| f(v).next().map(|v| Ok((k, v?)))).collect::<Result<Map, Exn<'_, Val>>>()?;
                Ok(Val::Obj(Rc::new(map)))
            }
            v => opt.fail(v, |v| Exn::from(Error::typ(v, "iterable (array or object)"))),
        }
    }

    fn map_index<'a, I: Iterator<Item = ValX<'a>>>(self, index: &Self, opt: Opt, f: impl Fn(Self) -> I) -> ValX<'a> {
        let mut this = self.expand();
        if matches!(this.shape(), Shape::Arr | Shape::Str) && index.shape() == Shape::Obj {
            let (start, end) = (index.get(&Val::str(b"start")), index.get(&Val::str(b"end")));
            return this.map_range(start.as_ref()..end.as_ref(), opt, f);
        }
        match &mut this {
            Val::Obj(o) => {
                use indexmap::map::Entry::{Occupied, Vacant};
                match Rc::make_mut(o).entry(index.clone()) {
                    Occupied(mut e) => {
                        let v = std::mem::take(e.get_mut());
                        match f(v).next().transpose()? {
                            Some(y) => {
                                e.insert(y);
                            }
                            None => {
                                e.shift_remove();
                            }
                        }
                    }
                    Vacant(e) => {
                        if !index.is_str() {
                            return opt.fail(this, |v| Exn::from(Error::index(v, index.clone())));
                        }
                        if let Some(y) = f(Val::Null).next().transpose()? {
                            e.insert(y);
                        }
                    }
                }
                Ok(this)
            }
            Val::Arr(a) => {
                let at = index
                    .as_pos_usize()
                    .and_then(|i| abs_index(i, a.len()).ok_or_else(|| Error::str(format_args!("index {index} out of bounds"))));
                let i = match at {
                    Ok(i) => i,
                    Err(e) => return opt.fail(this, |_| Exn::from(e)),
                };
                let a = Rc::make_mut(a);
                let x = std::mem::take(&mut a[i]);
                match f(x).next().transpose()? {
                    Some(y) => a[i] = y,
                    None => {
                        a.remove(i);
                    }
                }
                Ok(this)
            }
            _ => opt.fail(this, |v| Exn::from(Error::typ(v, "iterable (array or object)"))),
        }
    }

    fn map_range<'a, I: Iterator<Item = ValX<'a>>>(self, range: jaq_core::val::Range<&Self>, opt: Opt, f: impl Fn(Self) -> I) -> ValX<'a> {
        let this = self.expand();
        let (from, upto) = match Val::range_int(range) {
            Ok(r) => r,
            Err(e) => return opt.fail(this, |_| Exn::from(e)),
        };
        if let Some(s) = this.as_str_bytes() {
            let (a, b) = char_range(s, from, upto);
            let y = f(Val::str(&s[a..b])).next().transpose()?.unwrap_or_else(|| Val::str(b""));
            let Some(mid) = y.as_str_bytes() else { return Err(Exn::from(Error::typ(y, "string"))) };
            return Ok(Val::Str([&s[..a], mid, &s[b..]].concat().into()));
        }
        match this {
            Val::Arr(mut a) => {
                let len = a.len();
                let (skip, upto) = (abs_bound(from, len, 0), abs_bound(upto, len, len));
                let take = upto.saturating_sub(skip);
                let slice: Val = a.iter().skip(skip).take(take).cloned().collect();
                let y = f(slice).next().transpose()?.unwrap_or_else(|| Val::Arr(Rc::default()));
                if y.shape() != Shape::Arr {
                    return Err(Exn::from(Error::typ(y, "array")));
                }
                Rc::make_mut(&mut a).splice(skip..skip + take, y.into_owned_vec());
                Ok(Val::Arr(a))
            }
            v => opt.fail(v, |v| Exn::from(Error::typ(v, "array"))),
        }
    }

    fn as_bool(&self) -> bool {
        !matches!(self, Val::Null | Val::Bool(false))
    }

    fn into_string(self) -> Self {
        if self.is_str() { self } else { Val::from(self.to_json()) }
    }
}

impl jaq_std::ValT for Val {
    fn into_seq<S: FromIterator<Self>>(self) -> Result<S, Self> {
        match self.shape() {
            Shape::Arr => Ok(self.into_owned_vec().into_iter().collect()),
            _ => Err(self),
        }
    }

    fn is_int(&self) -> bool {
        matches!(self.as_num(), Some(Num::Int(_) | Num::BigInt(_)))
    }

    fn as_isize(&self) -> Option<isize> {
        self.as_num().and_then(|n| n.as_isize())
    }

    fn as_f64(&self) -> Option<f64> {
        self.as_num().map(|n| num_f64(&n))
    }

    fn is_utf8_str(&self) -> bool {
        self.is_str()
    }

    fn as_bytes(&self) -> Option<&[u8]> {
        self.as_str_bytes()
    }

    fn as_sub_str(&self, sub: &[u8]) -> Self {
        Val::str(sub)
    }

    fn from_utf8_bytes(b: impl AsRef<[u8]> + Send + 'static) -> Self {
        Val::str(b.as_ref())
    }
}

impl From<bool> for Val {
    fn from(b: bool) -> Self {
        Val::Bool(b)
    }
}

impl From<isize> for Val {
    fn from(i: isize) -> Self {
        Val::Num(Num::Int(i))
    }
}

impl From<usize> for Val {
    fn from(i: usize) -> Self {
        Val::Num(Num::from_integral(i))
    }
}

impl From<f64> for Val {
    fn from(f: f64) -> Self {
        Val::Num(Num::Float(f))
    }
}

impl From<String> for Val {
    fn from(s: String) -> Self {
        Val::Str(Rc::from(s.into_bytes().into_boxed_slice()))
    }
}

impl From<jaq_core::val::Range<Val>> for Val {
    fn from(r: jaq_core::val::Range<Val>) -> Self {
        let kvs = [("start", r.start), ("end", r.end)];
        Val::Obj(Rc::new(kvs.into_iter().filter_map(|(k, v)| Some((Val::str(k.as_bytes()), v?))).collect()))
    }
}

impl FromIterator<Val> for Val {
    fn from_iter<T: IntoIterator<Item = Val>>(iter: T) -> Self {
        Val::Arr(Rc::new(iter.into_iter().collect()))
    }
}

/// The longest string a program may build, in MiB (as its output may hold).
const MAX_STRING_MIB: usize = super::MAX_OUTPUT_BYTES / (1 << 20);

/// Two numbers, when both are.
fn nums(l: &Val, r: &Val) -> Option<(Num, Num)> {
    Some((l.as_num()?, r.as_num()?))
}

impl std::ops::Add for Val {
    type Output = ValR;
    fn add(self, r: Self) -> ValR {
        if let Some((x, y)) = nums(&self, &r) {
            return Ok(Val::Num(x + y));
        }
        match (self.shape(), r.shape()) {
            (Shape::Null, _) => Ok(r),
            (_, Shape::Null) => Ok(self),
            (Shape::Str, Shape::Str) => {
                Ok(Val::Str([self.as_str_bytes().expect("a string"), r.as_str_bytes().expect("a string")].concat().into()))
            }
            (Shape::Arr, Shape::Arr) => {
                let mut l = self.into_owned_vec();
                l.extend(r.items().expect("an array"));
                Ok(Val::Arr(Rc::new(l)))
            }
            (Shape::Obj, Shape::Obj) => {
                let mut l = self.into_owned_map();
                l.extend(r.fields().expect("an object"));
                Ok(Val::Obj(Rc::new(l)))
            }
            _ => Err(Error::math(self, ops::Math::Add, r)),
        }
    }
}

impl std::ops::Sub for Val {
    type Output = ValR;
    fn sub(self, r: Self) -> ValR {
        if let Some((x, y)) = nums(&self, &r) {
            return Ok(Val::Num(x - y));
        }
        match (self.shape(), r.shape()) {
            (Shape::Arr, Shape::Arr) => {
                let mut r: Vec<Val> = r.items().expect("an array").collect();
                r.sort();
                let mut l = self.into_owned_vec();
                l.retain(|x| r.binary_search(x).is_err());
                Ok(Val::Arr(Rc::new(l)))
            }
            _ => Err(Error::math(self, ops::Math::Sub, r)),
        }
    }
}

/// `l * r` of two objects: merged deeply, `r` winning.
fn obj_merge(l: &mut Map, r: Val) {
    for (k, v) in r.fields().expect("an object").collect::<Vec<_>>() {
        match l.get_mut(&k) {
            Some(old) if old.shape() == Shape::Obj && v.shape() == Shape::Obj => {
                let mut inner = std::mem::take(old).into_owned_map();
                obj_merge(&mut inner, v);
                *old = Val::Obj(Rc::new(inner));
            }
            Some(old) => *old = v,
            None => {
                l.insert(k, v);
            }
        }
    }
}

impl std::ops::Mul for Val {
    type Output = ValR;
    fn mul(self, r: Self) -> ValR {
        if let Some((x, y)) = nums(&self, &r) {
            return Ok(Val::Num(x * y));
        }
        // A program's string may not outgrow what its output may hold.
        let repeat = |s: &[u8], n: &Num| match n.as_isize() {
            Some(i) if i > 0 && s.len().saturating_mul(i as usize) > super::MAX_OUTPUT_BYTES => Err(Error::str(format_args!(
                "a string of {} bytes repeated {i} times is larger than jq builds here ({} MiB)",
                s.len(),
                MAX_STRING_MIB
            ))),
            Some(i) if i > 0 => Ok(Val::Str(s.repeat(i as usize).into())),
            None if matches!(n, Num::BigInt(_)) => Err(Error::str("a string repeated that many times is larger than jq builds here")),
            _ => Ok(Val::Null),
        };
        match (self.shape(), r.shape()) {
            (Shape::Str, Shape::Num) => repeat(self.as_str_bytes().expect("a string"), &r.as_num().expect("a number")),
            (Shape::Num, Shape::Str) => repeat(r.as_str_bytes().expect("a string"), &self.as_num().expect("a number")),
            (Shape::Obj, Shape::Obj) => {
                let mut l = self.into_owned_map();
                obj_merge(&mut l, r);
                Ok(Val::Obj(Rc::new(l)))
            }
            _ => Err(Error::math(self, ops::Math::Mul, r)),
        }
    }
}

impl std::ops::Div for Val {
    type Output = ValR;
    fn div(self, r: Self) -> ValR {
        if let Some((x, y)) = nums(&self, &r) {
            return Ok(Val::Num(x / y));
        }
        match (self.as_str_bytes(), r.as_str_bytes()) {
            (Some(x), Some(y)) => Ok(split(x, y).map(Val::str).collect()),
            _ => Err(Error::math(self, ops::Math::Div, r)),
        }
    }
}

/// A string split by a separator (by characters when the separator is empty; nothing when
/// the string is).
fn split<'a>(s: &'a [u8], sep: &'a [u8]) -> Box<dyn Iterator<Item = &'a [u8]> + 'a> {
    if s.is_empty() {
        Box::new(std::iter::empty())
    } else if sep.is_empty() {
        let text = std::str::from_utf8(s).unwrap_or_default();
        Box::new(text.char_indices().map(move |(i, c)| &s[i..i + c.len_utf8()]))
    } else {
        let mut rest = Some(s);
        Box::new(std::iter::from_fn(move || {
            let r = rest?;
            match memchr::memmem::find(r, sep) {
                Some(at) => {
                    rest = Some(&r[at + sep.len()..]);
                    Some(&r[..at])
                }
                None => rest.take(),
            }
        }))
    }
}

impl std::ops::Rem for Val {
    type Output = ValR;
    fn rem(self, r: Self) -> ValR {
        match nums(&self, &r) {
            Some((x, y)) if !(matches!(y, Num::Int(0)) && matches!(x, Num::Int(_) | Num::BigInt(_))) => Ok(Val::Num(x % y)),
            _ => Err(Error::math(self, ops::Math::Rem, r)),
        }
    }
}

impl std::ops::Neg for Val {
    type Output = ValR;
    fn neg(self) -> ValR {
        match self.as_num() {
            Some(n) => Ok(Val::Num(-n)),
            None => Err(Error::typ(self, "number")),
        }
    }
}

/// An object's pairs sorted by key, for comparing and hashing.
fn sorted_fields(v: &Val) -> Vec<(Val, Val)> {
    let mut kvs: Vec<(Val, Val)> = v.fields().expect("an object").collect();
    kvs.sort_by(|(a, _), (b, _)| a.as_str_bytes().cmp(&b.as_str_bytes()));
    kvs
}

impl Ord for Val {
    fn cmp(&self, other: &Self) -> Ordering {
        if let (Val::Node(a, i), Val::Node(b, j)) = (self, other)
            && Rc::ptr_eq(a, b)
            && i == j
        {
            return Ordering::Equal;
        }
        match (self.shape(), other.shape()) {
            (Shape::Num, Shape::Num) => self.as_num().cmp(&other.as_num()),
            (Shape::Bool, Shape::Bool) => matches!(self, Val::Bool(true)).cmp(&matches!(other, Val::Bool(true))),
            (Shape::Str, Shape::Str) => self.as_str_bytes().cmp(&other.as_str_bytes()),
            (Shape::Arr, Shape::Arr) => self.items().expect("an array").cmp(other.items().expect("an array")),
            (Shape::Obj, Shape::Obj) => match (self.len(), other.len()) {
                (Some(0), Some(0)) => Ordering::Equal,
                (Some(0), _) => Ordering::Less,
                (_, Some(0)) => Ordering::Greater,
                _ => {
                    let (l, r) = (sorted_fields(self), sorted_fields(other));
                    let keys = l.iter().map(|(k, _)| k).cmp(r.iter().map(|(k, _)| k));
                    keys.then_with(|| l.iter().map(|(_, v)| v).cmp(r.iter().map(|(_, v)| v)))
                }
            },
            (a, b) => a.cmp(&b),
        }
    }
}

impl PartialOrd for Val {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Val {
    fn eq(&self, other: &Self) -> bool {
        match (self.shape(), other.shape()) {
            (Shape::Str, Shape::Str) => self.as_str_bytes() == other.as_str_bytes(),
            (Shape::Num, Shape::Num) => self.as_num() == other.as_num(),
            (Shape::Obj, Shape::Obj) => {
                self.len() == other.len() && self.fields().expect("an object").all(|(k, v)| other.get(&k).is_some_and(|w| w == v))
            }
            (a, b) if a != b => false,
            _ => self.cmp(other) == Ordering::Equal,
        }
    }
}

impl Eq for Val {}

impl Hash for Val {
    fn hash<H: Hasher>(&self, state: &mut H) {
        match self.kind() {
            Kind::Num(n) => n.hash(state),
            // Num's hash starts with 0 or 1.
            Kind::Null => state.write_u8(2),
            Kind::Bool(b) => state.write_u8(if b { 3 } else { 4 }),
            Kind::Str(s) => {
                state.write_u8(5);
                s.hash(state);
            }
            Kind::Arr(_) | Kind::DocArr(..) => {
                state.write_u8(6);
                self.items().expect("an array").for_each(|x| x.hash(state));
            }
            Kind::Obj(_) | Kind::DocObj(..) | Kind::DocRow(..) => {
                state.write_u8(7);
                sorted_fields(self).iter().for_each(|kv| kv.hash(state));
            }
        }
    }
}

impl fmt::Display for Val {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_json())
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

    fn node(json: &str) -> Val {
        let d = Rc::new(doc::json(Bytes::copy_from_slice(json.as_bytes())).unwrap());
        Val::of(&d, 0)
    }

    #[test]
    fn nodes_and_owned_values_compare_hash_and_print_alike() {
        use jaq_core::ValT as _;
        let n = node(r#"{"b": [1, "x\"y", null], "a": {"c": 2.5}}"#);
        let owned = n.clone().expand();
        assert!(matches!(owned, Val::Obj(_)));
        assert_eq!(n, owned);
        assert_eq!(n.cmp(&owned), Ordering::Equal);
        let h = |v: &Val| {
            let mut s = std::hash::DefaultHasher::new();
            v.hash(&mut s);
            s.finish()
        };
        assert_eq!(h(&n), h(&owned));
        assert_eq!(n.to_json(), r#"{"b":[1,"x\"y",null],"a":{"c":2.5}}"#);
        let key = n.clone().index(&Val::from("a".to_owned())).unwrap();
        assert_eq!(key.index(&Val::from("c".to_owned())).unwrap().to_json(), "2.5");
        assert!(node("[1, 2]") < node("[1, 3]") && node("\"b\"") > Val::from("a".to_owned()) && node("[]") > node("{}").into_string());
    }
}
