//! A program's constant field steps (`.status`, `.["region"]`, each step of `.a.b`) rewritten
//! into calls of one native, `_stowage_key(n)`, which reads field `n` of the program's key
//! table. jaq runs a path step through its general path machinery, about 17 allocations and
//! a microsecond per value; the native call costs a third of that, and a filter over 60,000
//! orders takes such steps several times per order.
//!
//! The meaning is unchanged, paths and updates included: the native answers with
//! [`jaq_core::ValT::index`] as jaq's step does, gives the same path for `path(…)`, `del(…)`
//! and `|=`, and updates through [`jaq_core::ValT::map_index`]. A path is split into steps
//! (`.a.b[0]` into `.a | .b | .[0]`, which jq defines as the same) only when every part's
//! index is a constant: an index computed from the input (`.a[.i]`) is computed from the
//! whole path's input, which splitting would change. Optional steps (`.a?`) stay jaq's.

use jaq_core::box_iter::box_once;
use jaq_core::load::lex::StrPart;
use jaq_core::load::parse::{BinaryOp, Term};
use jaq_core::path::{Opt, Part, Path};
use jaq_core::{Exn, Native};

use super::Data;
use super::value::Val;

/// The native's name (a program may call it, to the same effect).
pub(super) const KEY_NATIVE: &str = "_stowage_key";

/// Keys one program's table holds at most; further keys stay jaq's steps.
const MAX_KEYS: usize = 64;

/// The table's positions as the numbers a program's text spells them (a term borrows its text).
const POSITIONS: [&str; MAX_KEYS] = [
    "0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11", "12", "13", "14", "15", "16", "17", "18", "19", "20", "21", "22", "23",
    "24", "25", "26", "27", "28", "29", "30", "31", "32", "33", "34", "35", "36", "37", "38", "39", "40", "41", "42", "43", "44", "45",
    "46", "47", "48", "49", "50", "51", "52", "53", "54", "55", "56", "57", "58", "59", "60", "61", "62", "63",
];

/// `term` with its constant field steps rewritten, and the key table they read.
pub(super) fn rewrite(term: Term<&str>) -> (Term<&str>, Vec<Val>) {
    let mut keys = Vec::new();
    let term = walk(term, &mut keys);
    (term, keys.into_iter().map(|k: &str| Val::from(k.to_owned())).collect())
}

/// The native reading field `n` of the key table: runs, paths and updates as jaq's step.
pub(super) fn key_native() -> Native<Data> {
    Native::new(|mut cv| {
        let n = cv.0.pop_var();
        let data: &super::Shared<'_> = cv.0.data();
        let key = key_at(data.keys, &n);
        let v: Val = cv.1;
        box_once(jaq_core::ValT::index(v, &key).map_err(Exn::from))
    })
    .with_paths(|mut cv| {
        let n = cv.0.pop_var();
        let data: &super::Shared<'_> = cv.0.data();
        let key = key_at(data.keys, &n);
        let (v, p): (Val, _) = cv.1;
        box_once(jaq_core::ValT::index(v, &key).map(|x| (x, p.cons(key))).map_err(Exn::from))
    })
    .with_update(|mut cv, update| {
        let n = cv.0.pop_var();
        let data: &super::Shared<'_> = cv.0.data();
        let key = key_at(data.keys, &n);
        let v: Val = cv.1;
        box_once(jaq_core::ValT::map_index(v, &key, Opt::Essential, &update))
    })
}

/// Key `n` of the table; null for a position the table has not (only a program calling the
/// native itself can ask for one).
fn key_at(keys: &[Val], n: &Val) -> Val {
    jaq_std::ValT::as_isize(n).and_then(|n| usize::try_from(n).ok()).and_then(|n| keys.get(n)).cloned().unwrap_or_default()
}

fn walk<'s>(term: Term<&'s str>, keys: &mut Vec<&'s str>) -> Term<&'s str> {
    let mut go = |t: Term<&'s str>| walk(t, keys);
    match term {
        Term::Path(head, Path(parts)) => {
            let head = go(*head);
            let parts: Vec<_> = parts
                .into_iter()
                .map(|(part, opt)| {
                    let part = match part {
                        Part::Index(t) => Part::Index(go(t)),
                        Part::Range(from, upto) => Part::Range(from.map(&mut go), upto.map(&mut go)),
                    };
                    (part, opt)
                })
                .collect();
            if parts.is_empty() || !parts.iter().all(|(part, _)| constant_part(part)) {
                return Term::Path(Box::new(head), Path(parts));
            }
            let mut steps = parts.into_iter().map(|(part, opt)| step(part, opt, keys));
            let first = if matches!(head, Term::Id) { steps.next().expect("a part") } else { head };
            steps.fold(first, |l, r| Term::BinOp(Box::new(l), BinaryOp::Pipe(None), Box::new(r)))
        }
        Term::Str(fmt, parts) => Term::Str(
            fmt,
            parts
                .into_iter()
                .map(|p| match p {
                    StrPart::Term(t) => StrPart::Term(go(t)),
                    other => other,
                })
                .collect(),
        ),
        Term::Arr(t) => Term::Arr(t.map(|t| Box::new(go(*t)))),
        Term::Obj(kvs) => Term::Obj(kvs.into_iter().map(|(k, v)| (go(k), v.map(&mut go))).collect()),
        Term::Neg(t) => Term::Neg(Box::new(go(*t))),
        Term::BinOp(l, op, r) => Term::BinOp(Box::new(go(*l)), op, Box::new(go(*r))),
        Term::Label(s, t) => Term::Label(s, Box::new(go(*t))),
        Term::Fold(s, xs, pat, args) => Term::Fold(s, Box::new(go(*xs)), pat, args.into_iter().map(go).collect()),
        Term::TryCatch(t, c) => Term::TryCatch(Box::new(go(*t)), c.map(|c| Box::new(go(*c)))),
        Term::IfThenElse(arms, other) => {
            Term::IfThenElse(arms.into_iter().map(|(c, t)| (go(c), go(t))).collect(), other.map(|e| Box::new(go(*e))))
        }
        Term::Call(name, args) => Term::Call(name, args.into_iter().map(go).collect()),
        // Definitions are refused before this runs; the rest has no terms inside.
        other => other,
    }
}

/// One part as a step of its own: a plain string key through the native, anything else as
/// jaq's one-part path.
fn step<'s>(part: Part<Term<&'s str>>, opt: Opt, keys: &mut Vec<&'s str>) -> Term<&'s str> {
    if let (Part::Index(t), Opt::Essential) = (&part, opt)
        && let Some(key) = plain_str(t)
    {
        let at = match keys.iter().position(|k| *k == key) {
            Some(at) => Some(at),
            None if keys.len() < MAX_KEYS => {
                keys.push(key);
                Some(keys.len() - 1)
            }
            None => None,
        };
        if let Some(at) = at {
            return Term::Call(KEY_NATIVE, vec![Term::Num(POSITIONS[at])]);
        }
    }
    Term::Path(Box::new(Term::Id), Path(vec![(part, opt)]))
}

/// A part whose index does not depend on the input.
fn constant_part(part: &Part<Term<&str>>) -> bool {
    match part {
        Part::Index(t) => constant(t),
        Part::Range(from, upto) => from.iter().chain(upto).all(constant),
    }
}

fn constant(t: &Term<&str>) -> bool {
    match t {
        Term::Num(_) => true,
        Term::Neg(t) => matches!(**t, Term::Num(_)),
        Term::Str(None, parts) => parts.iter().all(|p| !matches!(p, StrPart::Term(_))),
        _ => false,
    }
}

/// A string literal without escapes or interpolation: its text.
fn plain_str<'s>(t: &Term<&'s str>) -> Option<&'s str> {
    match t {
        Term::Str(None, parts) => match parts.as_slice() {
            [StrPart::Str(s)] => Some(s),
            [] => Some(""),
            _ => None,
        },
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rewritten(code: &str) -> (String, usize) {
        let term = jaq_core::load::parse(code, |p| p.term()).expect("parses");
        let (term, keys) = rewrite(term);
        (format!("{term:?}"), keys.len())
    }

    #[test]
    fn constant_steps_become_key_calls_and_computed_indices_stay_paths() {
        let (t, n) = rewritten(".orders | map(select(.status == \"refunded\")) | .[0].status");
        assert_eq!(n, 2, "{t}");
        assert_eq!(t.matches(KEY_NATIVE).count(), 3, "{t}");
        // `.a[.i]`: `.i` is read from the path's input, so the path is kept whole (its `.i`
        // is rewritten on its own).
        let (t, n) = rewritten(".a[.i]");
        assert_eq!((t.matches(KEY_NATIVE).count(), n), (1, 1), "{t}");
        let (t, _) = rewritten(".a?.b");
        assert_eq!(t.matches(KEY_NATIVE).count(), 1, "{t}");
        let (t, n) = rewritten(".[\"a\\n\"], .\"\\(1)\"");
        assert_eq!((t.matches(KEY_NATIVE).count(), n), (0, 0), "{t}");
    }
}
