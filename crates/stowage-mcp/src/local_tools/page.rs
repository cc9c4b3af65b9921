//! One page of a selection (`artifact_query`'s answer), sized to the host: whole items of an
//! array or a result stream, whole members of an object, or characters of a string, from
//! `offset`. The page says the selection's true size and where the next one starts, so a
//! model continues exactly where a cut answer stopped (the same call with `offset`).
//!
//! A member or item too big for a page on its own is shown as a one-line summary in its
//! place (`"<an array of 2000 items, 62.0 KB: select it with .rows>"`), so every key of an
//! object is seen and the model can select the big part by name.

use serde_json::Value;
use stowage_core::human_size;

use super::ReadHints;

/// What a selection is, for paging: see [`super::jq::Paged`].
pub(crate) use super::jq::Paged;

/// One page: the payload the model reads, the line that says what it is, and the facts.
#[derive(Debug)]
pub(crate) struct Page {
    pub payload: String,
    /// What the selection is and which part this is: `an array of 20000 items; items 0-1690
    /// here; more: offset=1691`.
    pub what: String,
    pub total: usize,
    pub returned: usize,
    pub next: Option<usize>,
    /// Parts shown as summaries (too big for one page).
    pub summarized: Vec<String>,
}

/// A serde value as the pager takes it.
pub(crate) fn paged(value: &Value) -> Paged {
    match value {
        Value::Array(items) => Paged::Items { items: items.iter().map(Value::to_string).collect(), stream: false },
        Value::Object(m) => {
            Paged::Members(m.iter().map(|(k, v)| (serde_json::to_string(k).expect("a string serialises"), v.to_string())).collect())
        }
        Value::String(s) => Paged::Text(s.clone()),
        other => Paged::Scalar(other.to_string()),
    }
}

/// The one-line stand-in for a value too big for a page: its type, size and how to select it.
fn summary(json: &str, select: &str) -> String {
    let size = human_size(json.len() as u64);
    let what = match serde_json::from_str::<Value>(json) {
        Ok(Value::Array(a)) => format!("an array of {} items", a.len()),
        Ok(Value::Object(m)) => format!("an object with {} keys", m.len()),
        Ok(Value::String(s)) => format!("a string of {} characters", s.chars().count()),
        _ => "a value".to_owned(),
    };
    format!("<{what}, {size}: too big for one page; select it with {select}>")
}

/// A jq path step for a member key (its JSON text): `.rows` or `["odd key"]`.
fn key_step(key_json: &str) -> String {
    let key: String = serde_json::from_str(key_json).unwrap_or_default();
    let ident = key.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if ident { format!(".{key}") } else { format!(".[{key_json}]") }
}

/// The page of `paged` that starts at `offset` (items, members or characters) and fits
/// `hints`. `Err`: the offset is past the end (the message says where the end is).
pub(crate) fn page(paged: &Paged, offset: usize, hints: &ReadHints) -> Result<Page, String> {
    // A part of a page may take at most this much of it: bigger ones are summarized.
    let part_max = hints.text_budget * 3 / 4;
    let past = |total: usize, unit: &str| {
        if offset > total { Err(format!("offset {offset} is past the end: the selection has {total} {unit}")) } else { Ok(()) }
    };
    match paged {
        Paged::Items { items, stream } => {
            past(items.len(), "items")?;
            let kind = if *stream {
                format!("{} results (jq's output stream, shown as an array)", items.len())
            } else {
                format!("an array of {} items", items.len())
            };
            let mut summarized = Vec::new();
            let parts: Vec<String> = items[offset..]
                .iter()
                .enumerate()
                .scan(0usize, |used, (i, t)| {
                    if *used > hints.text_budget * 2 {
                        return None;
                    }
                    let shown = if t.len() > part_max {
                        summarized.push(format!("item {}", offset + i));
                        serde_json::to_string(&summary(t, &format!(".[{}]", offset + i))).expect("a string serialises")
                    } else {
                        t.clone()
                    };
                    *used += shown.len() + 1;
                    Some(shown)
                })
                .collect();
            Ok(fit(parts, '[', ']', offset, items.len(), kind, "items", summarized, hints))
        }
        Paged::Members(members) => {
            past(members.len(), "keys")?;
            let kind = format!("an object with {} keys", members.len());
            let mut summarized = Vec::new();
            let parts: Vec<String> = members[offset..]
                .iter()
                .scan(0usize, |used, (k, v)| {
                    if *used > hints.text_budget * 2 {
                        return None;
                    }
                    let value = if v.len() > part_max {
                        let step = key_step(k);
                        let s = summary(v, &step);
                        summarized.push(format!("{} ({})", step, s.split(':').next().unwrap_or("").trim_start_matches('<')));
                        serde_json::to_string(&s).expect("a string serialises")
                    } else {
                        v.clone()
                    };
                    let part = format!("{k}:{value}");
                    *used += part.len() + 1;
                    Some(part)
                })
                .collect();
            Ok(fit(parts, '{', '}', offset, members.len(), kind, "keys", summarized, hints))
        }
        Paged::Text(text) => {
            let total = text.chars().count();
            past(total, "characters")?;
            let start = text.char_indices().nth(offset).map_or(text.len(), |(i, _)| i);
            let rest = &text[start..];
            let n = hints.page_len(rest);
            let shown = &rest[..n];
            let returned = shown.chars().count();
            let end = offset + returned;
            let next = (end < total).then_some(end);
            let what = match next {
                None if offset == 0 => format!("a string of {total} characters"),
                _ => format!("a string of {total} characters; characters {offset}-{end} here"),
            };
            Ok(Page { payload: shown.to_owned(), what, total, returned, next, summarized: Vec::new() })
        }
        Paged::Scalar(s) => {
            if offset > 0 {
                return Err(format!("offset {offset} is past the end: the selection is one value"));
            }
            Ok(Page { payload: s.clone(), what: "one value".into(), total: 1, returned: 1, next: None, summarized: Vec::new() })
        }
    }
}

/// Whole parts within the host's page, joined between `open` and `close`.
#[allow(clippy::too_many_arguments)]
fn fit(
    parts: Vec<String>,
    open: char,
    close: char,
    offset: usize,
    total: usize,
    kind: String,
    unit: &str,
    mut summarized: Vec<String>,
    hints: &ReadHints,
) -> Page {
    let mut text = String::with_capacity(parts.iter().map(|p| p.len() + 1).sum::<usize>() + 2);
    text.push(open);
    let mut ends = Vec::with_capacity(parts.len());
    for (i, p) in parts.iter().enumerate() {
        if i > 0 {
            text.push(',');
        }
        text.push_str(p);
        ends.push(text.len());
    }
    text.push(close);
    let fits = hints.page_len(&text);
    // Whole parts whose end (and the closing bracket) fit; at least one, so paging moves on.
    let kept = if fits == text.len() { parts.len() } else { ends.iter().take_while(|&&e| e < fits).count().max(1).min(parts.len()) };
    let mut payload = String::with_capacity(ends.get(kept.wrapping_sub(1)).copied().unwrap_or(1) + 1);
    payload.push(open);
    payload.push_str(if kept == 0 { "" } else { &text[1..ends[kept - 1]] });
    payload.push(close);
    let end = offset + kept;
    let next = (end < total).then_some(end);
    summarized.retain(|s| {
        // Only those on this page.
        s.strip_prefix("item ").and_then(|n| n.parse::<usize>().ok()).is_none_or(|n| n < end)
    });
    let what = match next {
        None if offset == 0 => kind,
        _ if kept == 0 => format!("{kind}; none from {offset}"),
        _ => format!("{kind}; {unit} {offset}-{} here", end - 1),
    };
    Page { payload, what, total, returned: kept, next, summarized }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::hosts::builtin;

    fn hints(name: &str) -> ReadHints {
        ReadHints::for_host(&builtin().into_iter().find(|p| p.name == name).unwrap())
    }

    #[test]
    fn pages_of_a_big_array_state_the_true_total_and_continue_exactly() {
        let rows: Vec<Value> = (0..20_000).map(|i| json!({"id": format!("O-{i}"), "total": i})).collect();
        let paged = paged(&Value::Array(rows.clone()));
        for host in ["claude-code", "codex", "default"] {
            let h = if host == "default" { ReadHints::default() } else { hints(host) };
            let mut offset = 0;
            let mut seen = Vec::new();
            let mut pages = 0;
            loop {
                let p = page(&paged, offset, &h).unwrap();
                pages += 1;
                assert_eq!(p.total, 20_000, "{host}: the true total, every page");
                assert!(p.what.starts_with("an array of 20000 items"), "{host}: {}", p.what);
                let items: Vec<Value> = serde_json::from_str(&p.payload).unwrap();
                assert_eq!(items.len(), p.returned);
                seen.extend(items);
                match p.next {
                    Some(n) => {
                        assert_eq!(n, offset + p.returned, "{host}: continues where it stopped");
                        offset = n;
                    }
                    None => break,
                }
                if pages > 3 {
                    // The rest by its last page only: the end is the real end.
                    offset = 19_990;
                }
            }
            assert_eq!(seen.last().unwrap(), &rows[19_999], "{host}: the last page reaches the real end");
        }
        assert!(page(&paged, 20_001, &ReadHints::default()).unwrap_err().contains("has 20000 items"));
    }

    #[test]
    fn big_members_are_summarized_so_every_key_is_seen() {
        let doc = json!({"rows": (0..2000).map(|i| json!({"id": i, "name": format!("row {i}")})).collect::<Vec<_>>(), "count": 2000});
        let p = page(&paged(&doc), 0, &ReadHints::default()).unwrap();
        let shown: Value = serde_json::from_str(&p.payload).unwrap();
        assert_eq!(shown["count"], 2000);
        assert!(shown["rows"].as_str().unwrap().starts_with("<an array of 2000 items, "), "{shown}");
        assert_eq!(p.summarized, vec![".rows (an array of 2000 items, 56.4 KB)".to_owned()]);
        let text = page(&Paged::Text("é".repeat(50_000)), 0, &ReadHints::default()).unwrap();
        assert!(text.payload.len() <= 24_000 && text.next == Some(text.returned));
        assert_eq!(page(&Paged::Scalar("3".into()), 0, &ReadHints::default()).unwrap().payload, "3");
    }
}
