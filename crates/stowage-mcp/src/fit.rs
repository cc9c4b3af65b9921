//! The observation limit, held for what is finally sent.
//!
//! The transform's clamp runs inside the pipeline, before the gateway adds its contract: a
//! line, a `resource_link` (with a signed URL of about 250 characters) and an `assets[]` entry
//! per artifact. With many artifacts those additions alone can pass
//! `transform.clamp.max_observation_chars` (60 small images came to 84,000 characters against
//! 50,000). So after the contract, a result over the limit is made to fit, in this order,
//! stopping as soon as it does:
//! 1. the signed URL in one place: the `resource_link` keeps it, and an asset whose link
//!    carries it keeps only its `artifactUri`;
//! 2. the lines lose their `Download: …` note, which repeats the link that follows them;
//! 3. links from the last back are left out (the lines still name every `artifact://` URI, and
//!    one line says that `artifact_url` gives a link);
//! 4. lines from the last back give way to one line naming their `artifact://` URIs.
//!
//! References are never cut: every artifact stays named in the result, and its asset entry
//! stays. What the tool itself returned was already clamped by the pipeline.

use std::collections::HashMap;

use serde_json::{Value, json};

use crate::rewrite::ASSETS_META_KEY;

fn size(v: &Value) -> usize {
    serde_json::to_string(v).map_or(0, |s| s.chars().count())
}

/// The `assets` arrays of a result: in `structuredContent` and in `_meta`.
fn assets_mut(value: &mut Value) -> Vec<&mut Vec<Value>> {
    let mut out = Vec::new();
    let Some(obj) = value.as_object_mut() else { return out };
    for (k, v) in obj.iter_mut() {
        let arr = match k.as_str() {
            "structuredContent" => v.get_mut("assets"),
            "_meta" => v.get_mut(ASSETS_META_KEY),
            _ => None,
        };
        if let Some(Value::Array(a)) = arr {
            out.push(a);
        }
    }
    out
}

/// Fits `value` (a rewritten result) within `budget` characters, if what the contract added
/// took it over. Returns whether anything changed.
pub(crate) fn fit_to_limit(value: &mut Value, budget: usize) -> bool {
    if size(value) <= budget {
        return false;
    }
    // The download URL each artifact's link carries → its permanent URI.
    let mut permanent: HashMap<String, String> = HashMap::new();
    for assets in assets_mut(value) {
        for a in assets.iter() {
            if let (Some(u), Some(p)) = (a.get("uri").and_then(Value::as_str), a.get("artifactUri").and_then(Value::as_str)) {
                permanent.insert(u.to_owned(), p.to_owned());
            }
        }
    }
    let linked: Vec<String> = content(value)
        .iter()
        .filter(|b| b["type"] == "resource_link")
        .filter_map(|b| b["uri"].as_str().map(str::to_owned))
        .filter(|u| permanent.contains_key(u))
        .collect();
    if linked.is_empty() {
        return false;
    }

    // 1. The signed URL once: in the link.
    for assets in assets_mut(value) {
        for a in assets.iter_mut() {
            let carried = a.get("uri").and_then(Value::as_str).is_some_and(|u| linked.iter().any(|l| l == u));
            if carried
                && a.get("uri") != a.get("artifactUri")
                && let Some(m) = a.as_object_mut()
            {
                m.remove("uri");
            }
        }
    }
    if size(value) <= budget {
        return true;
    }

    // 2. Lines without the download note the link after them repeats.
    if let Some(blocks) = value.get_mut("content").and_then(Value::as_array_mut) {
        for i in 0..blocks.len().saturating_sub(1) {
            let Some(url) = blocks[i + 1]["uri"].as_str().filter(|_| blocks[i + 1]["type"] == "resource_link").map(str::to_owned) else {
                continue;
            };
            if let Some(text) = blocks[i]["text"].as_str().filter(|_| blocks[i]["type"] == "text") {
                let note = format!(" Download: {url}");
                if let Some(at) = text.find(&note) {
                    let rest = &text[at + note.len()..];
                    // The note ends with its "(expires …)" part, when it has one.
                    let end = if rest.starts_with(" (expires ") { rest.find(')').map_or(rest.len(), |p| p + 1) } else { 0 };
                    let shorter = format!("{}{}", &text[..at], &rest[end..]);
                    blocks[i]["text"] = json!(shorter);
                }
            }
        }
    }
    if size(value) <= budget {
        return true;
    }

    // 3. Links from the last back: the lines still name each artifact:// URI, and one closing
    // line says how to get a link.
    let mut dropped = false;
    while size(value) > budget {
        let Some(blocks) = value.get_mut("content").and_then(Value::as_array_mut) else { break };
        let Some(k) =
            blocks.iter().rposition(|b| b["type"] == "resource_link" && b["uri"].as_str().is_some_and(|u| permanent.contains_key(u)))
        else {
            break;
        };
        blocks.remove(k);
        if !dropped {
            blocks.push(json!({"type": "text", "text": LINKS_LEFT_OUT}));
            dropped = true;
        }
    }
    if size(value) <= budget {
        return true;
    }

    // 4. Lines from the last back give way to one line of their artifact:// URIs.
    let uris: Vec<String> = permanent.values().cloned().collect();
    let mut folded: Vec<String> = Vec::new();
    while size(value) > budget {
        let Some(blocks) = value.get_mut("content").and_then(Value::as_array_mut) else { break };
        if !folded.is_empty() {
            blocks.pop(); // the previous closing line
        }
        let names = |b: &Value| -> Option<String> {
            let t = b["text"].as_str().filter(|t| b["type"] == "text" && !t.contains('\n'))?;
            uris.iter().find(|u| t.contains(u.as_str())).cloned()
        };
        let Some((k, uri)) = blocks.iter().enumerate().rev().find_map(|(k, b)| names(b).map(|u| (k, u))) else {
            if !folded.is_empty() {
                blocks.push(folded_line(&folded));
            }
            break;
        };
        blocks.remove(k);
        folded.insert(0, uri);
        blocks.push(folded_line(&folded));
    }
    true
}

/// Said once when links were left out.
const LINKS_LEFT_OUT: &str =
    "Download links were left out to keep this result within its size limit; artifact_url gives one for any artifact:// reference here.";

/// The one line that names folded artifacts.
fn folded_line(folded: &[String]) -> Value {
    json!({"type": "text", "text": format!(
        "{} more artifact{}, named here only to keep this result within its size limit: {}; artifact_read, artifact_query and artifact_url take any of them",
        folded.len(),
        if folded.len() == 1 { "" } else { "s" },
        folded.join(", ")
    )})
}

fn content(value: &Value) -> Vec<Value> {
    value.get("content").and_then(Value::as_array).cloned().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A result as the contract leaves it: `n` artifacts, each a line with its download note,
    /// a link and an asset, all carrying a signed URL.
    fn contracted(n: usize) -> Value {
        let mut content = vec![json!({"type": "text", "text": "60 charts of the quarter"})];
        let mut assets = Vec::new();
        for i in 0..n {
            let permanent = format!("artifact://chart_{i:016x}");
            let url = format!("http://127.0.0.1:8787/artifacts/chart_{i:016x}?token=v1.k6edea574.{}", "x".repeat(180));
            content.push(json!({"type": "text", "text": format!("PNG image (1.2 KB), stored as {permanent} [image/png] Download: {url} (expires 2026-11-23T21:00:00Z)")}));
            content.push(
                json!({"type": "resource_link", "name": format!("chart-{i}.png"), "uri": url, "mimeType": "image/png", "size": 1234}),
            );
            assets.push(json!({"id": format!("chart_{i:016x}"), "kind": "image", "mimeType": "image/png", "size": 1234, "sha256": "ab".repeat(32), "uri": url, "artifactUri": permanent, "expiresAt": "2026-11-23T21:00:00Z"}));
        }
        json!({"content": content, "structuredContent": {"assets": assets}})
    }

    #[test]
    fn sixty_artifacts_fit_and_every_one_stays_named() {
        let mut v = contracted(60);
        assert!(size(&v) > 50_000, "{}", size(&v));
        assert!(fit_to_limit(&mut v, 50_000));
        assert!(size(&v) <= 50_000, "{}", size(&v));
        let text = v.to_string();
        for i in 0..60 {
            assert!(text.contains(&format!("artifact://chart_{i:016x}")), "artifact {i} is no longer named");
        }
        assert_eq!(v["structuredContent"]["assets"].as_array().unwrap().len(), 60, "assets stay");
        // The signed URL is in one place at most: no asset repeats a link's URL.
        assert!(v["structuredContent"]["assets"].as_array().unwrap().iter().all(|a| a.get("uri").is_none()));
    }

    #[test]
    fn a_result_under_the_limit_is_left_alone_and_small_overruns_stop_early() {
        let mut v = contracted(3);
        let before = v.clone();
        assert!(!fit_to_limit(&mut v, 50_000));
        assert_eq!(v, before);
        // Just over: dropping the repeated URLs from the assets is enough; lines keep their
        // download notes.
        let limit = size(&before) - 100;
        assert!(fit_to_limit(&mut v, limit));
        assert!(size(&v) <= limit);
        assert!(v["content"][1]["text"].as_str().unwrap().contains("Download: http://"));
        assert_eq!(v["content"].as_array().unwrap().len(), 7, "no line or link was folded");
    }

    #[test]
    fn a_tight_limit_folds_lines_and_links_into_one_line_of_references() {
        let mut v = contracted(10);
        let full = size(&v);
        // Room for the lines but not every link: links go from the last, every line stays.
        assert!(fit_to_limit(&mut v, 5_000), "{full}");
        assert!(size(&v) <= 5_000);
        let blocks = v["content"].as_array().unwrap();
        assert_eq!(blocks.last().unwrap()["text"], LINKS_LEFT_OUT);
        let lines = blocks.iter().filter(|b| b["text"].as_str().is_some_and(|t| t.contains("stored as artifact://"))).count();
        assert_eq!(lines, 10, "{v}");
        assert!(blocks[2]["type"] == "resource_link", "the first links stay: {v}");
        // Tighter still: the last lines are folded into one line of references.
        let mut v = contracted(10);
        assert!(fit_to_limit(&mut v, 3_600));
        let blocks = v["content"].as_array().unwrap();
        let last = blocks.last().unwrap()["text"].as_str().unwrap();
        assert!(last.contains("more artifact") && last.contains("artifact://chart_0000000000000009"), "{last}");
        assert_eq!(blocks[0]["text"], "60 charts of the quarter", "the tool's own text stays first");
        assert!(size(&v) <= 3_600, "{}", size(&v));
        let text = v.to_string();
        assert!((0..10).all(|i| text.contains(&format!("artifact://chart_{i:016x}"))));
    }
}
