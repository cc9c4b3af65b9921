//! The natives `jaq-json` gives jaq's own values, given to ours ([`super::value::Val`]):
//! `fromjson`, `tojson`, `length`, `contains`, `has`, `indices`, `bsearch`. (`tobytes`, for
//! jaq's byte strings, which jq has not, is left out.) And three that jaq defines in jq
//! itself, made natives because a data question spends its time in them:
//! - `add`, defined with `reduce`: summing 20,000 numbers that way took 40 ms;
//! - `select(f)` and `map(f)`, the steps of nearly every filter: as definitions they cost
//!   about a dozen interpreter steps per element (a rejected one builds and iterates an
//!   empty object, jaq's `empty`). `select` keeps jq's paths and updates
//!   (`del(.[] | select(…))`, `(.[] | select(…)) |= …`); `map` has none, as in jq.

use std::rc::Rc;

use bytes::Bytes;
use jaq_core::box_iter::box_once;
use jaq_core::native::{Filter, Fun, bome, run, unary, v};
use jaq_core::{Bind, DataT, Exn, Native, RunPtr};

use super::doc;
use super::value::{Error, Shape, Val, ValR, ValX, ValXs};

/// The natives, for a data type whose values are ours.
pub(crate) fn funs<D: for<'a> DataT<V<'a> = Val>>() -> impl Iterator<Item = Fun<D>> {
    natives().into_vec().into_iter().map(run).chain(with_filters())
}

/// The natives taking a filter: `select(f)` (with paths and updates) and `map(f)`.
fn with_filters<D: for<'a> DataT<V<'a> = Val>>() -> [Fun<D>; 2] {
    let f = || -> Box<[Bind]> { Box::new([Bind::Fun(())]) };
    let select = Native::new(|mut cv| {
        let (f, fc) = cv.0.pop_fun();
        let v: Val = cv.1;
        Box::new(f.run((fc, v.clone())).filter_map(move |c| kept(c, || v.clone())))
    })
    .with_paths(|mut cv| {
        let (f, fc) = cv.0.pop_fun();
        let (v, p): (Val, _) = cv.1;
        Box::new(f.run((fc, v.clone())).filter_map(move |c| kept(c, || (v.clone(), p.clone()))))
    })
    .with_update(|mut cv, update| {
        let (f, fc) = cv.0.pop_fun();
        let v: Val = cv.1;
        let conds: Vec<ValX<'_>> = f.run((fc, v.clone())).collect();
        select_update(Rc::from(conds), 0, v, update)
    });
    let map = Native::new(|mut cv| {
        // `[.[] | f]`: the first error (of `.[]` or of `f`) is the answer.
        let (f, fc) = cv.0.pop_fun();
        let v: Val = cv.1;
        let items = jaq_core::ValT::values(v).flat_map(move |x| match x {
            Ok(x) => f.run((fc.clone(), x)),
            Err(e) => box_once(Err(Exn::from(e))),
        });
        box_once(items.collect())
    });
    [("select", f(), select), ("map", f(), map)]
}

/// What `select` gives for one output `c` of its condition: `v` when `c` is true, nothing
/// when false, and the error when it failed.
fn kept<'a, T>(c: ValX<'a>, v: impl FnOnce() -> T) -> Option<Result<T, Exn<'a, Val>>> {
    match c {
        Ok(c) => jaq_core::ValT::as_bool(&c).then(|| Ok(v())),
        Err(e) => Some(Err(e)),
    }
}

/// `v | select(f) |= u`, as jaq runs `if f then . else empty end` as an update: for each
/// output of `f` on the original value in turn, `u` updates the value when it is true and
/// leaves it when false; several outputs of `u` branch, depth first; an error ends its branch.
fn select_update<'a, U>(conds: Rc<[ValX<'a>]>, at: usize, v: Val, update: U) -> ValXs<'a>
where
    U: Fn(Val) -> ValXs<'a> + Clone + 'a,
{
    match conds.get(at) {
        None => box_once(Ok(v)),
        Some(Err(e)) => box_once(Err(e.clone())),
        Some(Ok(c)) if !jaq_core::ValT::as_bool(c) => select_update(conds, at + 1, v, update),
        Some(Ok(_)) if at + 1 == conds.len() => update(v),
        Some(Ok(_)) => Box::new(update.clone()(v).flat_map(move |y| match y {
            Ok(y) => select_update(conds.clone(), at + 1, y, update.clone()),
            Err(e) => box_once(Err(e)),
        })),
    }
}

fn natives<D: for<'a> DataT<V<'a> = Val>>() -> Box<[Filter<RunPtr<D>>]> {
    Box::new([
        ("fromjson", v(0), |cv| bome(from_json(&cv.1))),
        ("tojson", v(0), |cv| bome(Ok(Val::from(cv.1.to_json())))),
        ("length", v(0), |cv| bome(cv.1.length())),
        ("add", v(0), |cv| bome(add(cv.1))),
        ("contains", v(1), |cv| unary(cv, |x, y| Ok(Val::from(x.contains(&y))))),
        ("has", v(1), |cv| unary(cv, |x, k| has(&x, &k).map(Val::from))),
        ("indices", v(1), |cv| unary(cv, |x, y| indices(&x, &y))),
        ("bsearch", v(1), |cv| unary(cv, |a, x| bsearch(&a, &x))),
    ])
}

/// `fromjson`: the string parsed as one JSON value (read in place, like an artifact).
fn from_json(s: &Val) -> ValR {
    let Some(text) = s.as_str_bytes() else { return Err(Error::typ(s.clone(), "string")) };
    let parsed = doc::json(Bytes::copy_from_slice(text)).map_err(|e| Error::str(format_args!("cannot parse {s} as JSON: {e}")))?;
    Ok(Val::of(&Rc::new(parsed), 0))
}

/// `add`: the sum of an array's elements or an object's values, as `reduce .[] as $x (null;
/// . + $x)` gives it; strings are joined in one buffer (adding them pairwise is quadratic).
fn add(v: Val) -> ValR {
    let items: Box<dyn Iterator<Item = Val> + '_> = match (v.items(), v.fields()) {
        (Some(items), _) => items,
        (None, Some(fields)) => Box::new(fields.map(|(_, x)| x)),
        (None, None) => return Err(Error::typ(v.clone(), "iterable (array or object)")),
    };
    let mut sum = Val::Null;
    let mut text: Option<Vec<u8>> = None;
    for x in items {
        match (&mut text, x.as_str_bytes()) {
            (Some(buf), Some(s)) => buf.extend_from_slice(s),
            (None, Some(s)) if sum.shape() == Shape::Str => {
                text = Some([sum.as_str_bytes().expect("a string"), s].concat());
            }
            _ => {
                if let Some(buf) = text.take() {
                    sum = Val::str(&buf);
                }
                sum = (sum + x)?;
            }
        }
    }
    Ok(text.map_or(sum, |buf| Val::str(&buf)))
}

/// `has(k)`: an object's key, or an array's index within bounds.
fn has(x: &Val, k: &Val) -> Result<bool, Error> {
    use jaq_std::ValT as _;
    match (x.shape(), k.shape()) {
        (Shape::Obj, Shape::Str) => Ok(x.get(k).is_some()),
        (Shape::Arr, Shape::Num) if k.is_int() => Ok(k.as_isize().is_some_and(|i| i >= 0 && (i as usize) < x.len().expect("an array"))),
        _ => Err(Error::index(x.clone(), k.clone())),
    }
}

/// `indices(y)`: where `y` occurs in a string (by character) or array (as a sub-array, or
/// as an element).
fn indices(x: &Val, y: &Val) -> ValR {
    match (x.shape(), y.shape()) {
        (Shape::Str, Shape::Str) => {
            let (x, y) = (x.as_str_bytes().expect("a string"), y.as_str_bytes().expect("a string"));
            if y.is_empty() {
                return Ok(Val::Arr(Rc::default()));
            }
            let text = String::from_utf8_lossy(x);
            Ok(text
                .char_indices()
                .enumerate()
                .filter(|(_, (at, _))| text.as_bytes()[*at..].starts_with(y))
                .map(|(n, _)| Val::from(n))
                .collect())
        }
        (Shape::Arr, Shape::Arr) => {
            let (x, y): (Vec<Val>, Vec<Val>) = (x.items().expect("an array").collect(), y.items().expect("an array").collect());
            if y.is_empty() {
                return Ok(Val::Arr(Rc::default()));
            }
            Ok(x.windows(y.len()).enumerate().filter(|(_, w)| *w == y.as_slice()).map(|(n, _)| Val::from(n)).collect())
        }
        (Shape::Arr, _) => Ok(x.items().expect("an array").enumerate().filter(|(_, e)| e == y).map(|(n, _)| Val::from(n)).collect()),
        _ => Err(Error::index(x.clone(), y.clone())),
    }
}

/// `bsearch(x)`: where `x` is in a sorted array, or `-1 - ` where it would go.
fn bsearch(a: &Val, x: &Val) -> ValR {
    if a.shape() != Shape::Arr {
        return Err(Error::typ(a.clone(), "array"));
    }
    let items: Vec<Val> = a.items().expect("an array").collect();
    Ok(Val::from(items.binary_search(x).map_or_else(|i| -1 - i as isize, |i| i as isize)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(t: &str) -> Val {
        Val::from(t.to_owned())
    }

    #[test]
    fn the_json_natives_answer_as_jq_does() {
        let v = from_json(&s(r#"{"a": [1, 2, 3], "b": "x"}"#)).unwrap();
        assert!(has(&v, &s("a")).unwrap() && !has(&v, &s("z")).unwrap());
        let a = v.get(&s("a")).unwrap();
        assert!(has(&a, &Val::from(2usize)).unwrap() && !has(&a, &Val::from(3usize)).unwrap());
        assert_eq!(indices(&s("a,b, cd, efg"), &s(", ")).unwrap().to_json(), "[3,7]");
        assert_eq!(indices(&a, &Val::from(2usize)).unwrap().to_json(), "[1]");
        assert_eq!(bsearch(&a, &Val::from(3usize)).unwrap().to_json(), "2");
        assert_eq!(bsearch(&a, &Val::from(0usize)).unwrap().to_json(), "-1");
        let e = from_json(&s("{oops")).unwrap_err().into_val();
        assert!(e.as_str_bytes().unwrap().starts_with(b"cannot parse \"{oops\" as JSON: "), "{e}");
        assert!(v.contains(&from_json(&s(r#"{"a": [3]}"#)).unwrap()));
        let sum = |json: &str| add(from_json(&s(json)).unwrap()).map(|v| v.to_json()).map_err(|e| e.to_string());
        assert_eq!(sum("[1, 2.5, null, 3]").unwrap(), "6.5");
        assert_eq!(sum(r#"["a", "b", null, "c"]"#).unwrap(), r#""abc""#);
        assert_eq!(sum(r#"[null, "a", "b"]"#).unwrap(), r#""ab""#);
        assert_eq!(sum("[[1], [2, 3], []]").unwrap(), "[1,2,3]");
        assert_eq!(sum(r#"{"x": 1, "y": 2}"#).unwrap(), "3");
        assert_eq!(sum("[]").unwrap(), "null");
        assert!(sum(r#"[1, "a"]"#).unwrap_err().contains("cannot calculate"));
        assert!(sum("3").unwrap_err().contains("cannot use 3 as iterable"));
    }
}
