//! The aggregated catalog: which exposed tool, prompt or resource belongs to which upstream.
//!
//! Tools and prompts are exposed as `{server}{separator}{name}` when prefixing is on (by
//! default whenever there is more than one upstream). Collisions are resolved
//! deterministically: upstreams in configuration order, items in the order each upstream
//! listed them; the first keeps the name and later ones get `{separator}2`, `{separator}3`, …
//! Every rename is reported so the start-up banner can show it. Resource URIs are the servers'
//! own identifiers and are kept, except when two upstreams list the same one: the later one's
//! is exposed as `stowage-upstream://<server>/<percent-encoded URI>`, which routes back to it
//! with the original URI (a reversible rewrite, reported like a renamed tool). URIs are routed
//! back by exact URI, then by template prefix, then — with a single upstream — to it.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use serde_json::Value;

use crate::output_schema::OutputSchema;

/// One upstream's lists, as last fetched.
#[derive(Debug, Clone, Default)]
pub struct UpstreamLists {
    pub name: String,
    pub tools: Vec<Value>,
    pub prompts: Vec<Value>,
    pub resources: Vec<Value>,
    pub templates: Vec<Value>,
    /// Each tool's compiled `outputSchema`, by the tool's own name (compiled when the list
    /// was fetched, not per call).
    pub output_schemas: HashMap<String, Arc<OutputSchema>>,
}

/// What one client's own upstream sessions (`per_client` upstreams) listed: a server may
/// offer a client tools and prompts by what it declared (server-everything lists its sampling
/// tool only to a client that can sample), so the client sees these rather than what the
/// gateway's control connection was offered.
#[derive(Debug, Default)]
pub struct OwnLists {
    /// By upstream index.
    pub by_upstream: HashMap<usize, OwnList>,
    /// The catalog these make with every other upstream's lists, and the catalog generation it
    /// was built on; `None` inside when they list what the catalog lists (the common case:
    /// the client then shares the catalog, at no cost).
    pub built: Option<(u64, Option<Arc<Catalog>>)>,
}

/// One upstream's tools and prompts as one client's own session (or the pristine session it
/// uses) listed them.
#[derive(Debug, Clone, Default)]
pub struct OwnList {
    /// The connection they came from: a new one (the old one ended) lists again.
    pub conn: u64,
    /// For a pristine session's listing (shared by every client using that session): which of
    /// its listings this is; the session saying its lists changed starts a new one.
    pub epoch: u64,
    /// Whether it is a pristine session's listing, the same for every client that uses it.
    pub pristine: bool,
    pub tools: Vec<Value>,
    pub prompts: Vec<Value>,
}

/// A tool or prompt as the client sees it.
#[derive(Debug, Clone)]
pub struct Exposed {
    pub name: String,
    pub upstream: usize,
    pub original: String,
    /// The definition with `name` replaced by the exposed name.
    pub def: Value,
    /// A tool's compiled `outputSchema`, when it declares one.
    pub output_schema: Option<Arc<OutputSchema>>,
    /// A tool's declared blob fields (blob chaining); `def` then shows the model their
    /// model-facing shape.
    pub blobs: Option<Arc<crate::chaining::schema::BlobFields>>,
    /// The inputs blob chaining detected (or a rule names) as taking file bytes; `def` then
    /// tells the model they also take `artifact://` URIs. Set by `chaining::expose_inputs`.
    pub inputs: Option<Arc<crate::chaining::ToolInputs>>,
}

/// The routing table built from every upstream's lists.
#[derive(Debug, Clone, Default)]
pub struct Catalog {
    pub tools: Vec<Exposed>,
    pub prompts: Vec<Exposed>,
    pub resources: Vec<(usize, Value)>,
    pub templates: Vec<(usize, Value)>,
    tool_index: HashMap<String, usize>,
    prompt_index: HashMap<String, usize>,
    resource_owner: HashMap<String, usize>,
    /// (upstream, original URI) → the URI clients see, for the URIs a collision rewrote.
    renamed_uris: HashMap<(usize, String), String>,
    /// Human-readable reports of resource URIs a collision rewrote (routine and reversible:
    /// logged at info, shown in the banner).
    pub renamed_resources: Vec<String>,
    /// Human-readable reports of renamed collisions.
    pub collisions: Vec<String>,
}

impl Catalog {
    pub fn build(lists: &[UpstreamLists], prefix: bool, separator: &str) -> Catalog {
        let mut c = Catalog::default();
        let (tools, tool_index) = expose(lists, |l| &l.tools, "tool", prefix, separator, &mut c.collisions);
        let (prompts, prompt_index) = expose(lists, |l| &l.prompts, "prompt", prefix, separator, &mut c.collisions);
        c.tools = tools;
        for t in &mut c.tools {
            t.output_schema = lists[t.upstream].output_schemas.get(&t.original).cloned();
        }
        c.tool_index = tool_index;
        c.prompts = prompts;
        c.prompt_index = prompt_index;
        for (i, l) in lists.iter().enumerate() {
            for r in &l.resources {
                let mut r = r.clone();
                if let Some(uri) = r.get("uri").and_then(Value::as_str).map(str::to_owned) {
                    match c.resource_owner.get(&uri) {
                        Some(&j) if j != i => {
                            let exposed = collided_uri(&l.name, &uri);
                            c.renamed_resources
                                .push(format!("resource {uri} of {} is exposed as {exposed} ({} lists it too)", l.name, lists[j].name));
                            r["uri"] = Value::String(exposed.clone());
                            c.resource_owner.insert(exposed.clone(), i);
                            c.renamed_uris.insert((i, uri), exposed);
                        }
                        Some(_) => {}
                        None => {
                            c.resource_owner.insert(uri, i);
                        }
                    }
                }
                c.resources.push((i, r));
            }
            for t in &l.templates {
                c.templates.push((i, t.clone()));
            }
        }
        c
    }

    /// The tools as chaining's detection sees them (see [`crate::chaining::ToolEntry`]).
    pub(crate) fn entries(&mut self) -> impl Iterator<Item = crate::chaining::ToolEntry<'_>> {
        self.tools.iter_mut().map(|t| crate::chaining::ToolEntry {
            name: &t.name,
            upstream: t.upstream,
            declares_blobs: t.blobs.is_some(),
            def: &mut t.def,
            inputs: &mut t.inputs,
        })
    }

    pub fn tool(&self, name: &str) -> Option<&Exposed> {
        self.tool_index.get(name).map(|&i| &self.tools[i])
    }

    pub fn prompt(&self, name: &str) -> Option<&Exposed> {
        self.prompt_index.get(name).map(|&i| &self.prompts[i])
    }

    /// The URI clients know upstream `i`'s `uri` by (itself unless a collision rewrote it).
    pub fn exposed_uri<'a>(&'a self, i: usize, uri: &'a str) -> &'a str {
        self.renamed_uris.get(&(i, uri.to_owned())).map_or(uri, String::as_str)
    }

    /// Which upstream serves `uri`.
    pub fn resource_upstream(&self, uri: &str, upstream_count: usize) -> Option<usize> {
        if let Some(&i) = self.resource_owner.get(uri) {
            return Some(i);
        }
        let mut best: Option<(usize, usize)> = None;
        for (i, t) in &self.templates {
            let Some(template) = t.get("uriTemplate").and_then(Value::as_str) else { continue };
            let literal = template.split('{').next().unwrap_or(template);
            if !literal.is_empty() && uri.starts_with(literal) && best.is_none_or(|(len, _)| literal.len() > len) {
                best = Some((literal.len(), *i));
            }
        }
        best.map(|(_, i)| i).or((upstream_count == 1).then_some(0))
    }
}

/// Prefix of the URIs a collision rewrote.
pub(crate) const COLLIDED_PREFIX: &str = "stowage-upstream://";

/// Everything but unreserved characters is encoded, so the original URI survives intact.
const URI_ENCODE: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~');

/// The URI clients see for `upstream`'s `uri` when another upstream listed it first.
pub(crate) fn collided_uri(upstream: &str, uri: &str) -> String {
    format!(
        "{COLLIDED_PREFIX}{}/{}",
        percent_encoding::utf8_percent_encode(upstream, URI_ENCODE),
        percent_encoding::utf8_percent_encode(uri, URI_ENCODE)
    )
}

/// The upstream name and original URI of a rewritten one; `None` for any other URI.
pub(crate) fn split_collided(uri: &str) -> Option<(String, String)> {
    let (server, original) = uri.strip_prefix(COLLIDED_PREFIX)?.split_once('/')?;
    let decode = |s: &str| percent_encoding::percent_decode_str(s).decode_utf8().ok().map(|c| c.into_owned());
    Some((decode(server)?, decode(original)?))
}

type Index = HashMap<String, usize>;

fn expose(
    lists: &[UpstreamLists],
    items: impl Fn(&UpstreamLists) -> &Vec<Value>,
    what: &str,
    prefix: bool,
    sep: &str,
    collisions: &mut Vec<String>,
) -> (Vec<Exposed>, Index) {
    let mut out = Vec::new();
    let mut taken: HashMap<String, String> = HashMap::new();
    let mut seen_in_server: HashSet<(usize, String)> = HashSet::new();
    for (i, l) in lists.iter().enumerate() {
        for def in items(l) {
            let Some(original) = def.get("name").and_then(Value::as_str) else { continue };
            if !seen_in_server.insert((i, original.to_owned())) {
                continue; // a server listing the same name twice: keep its first
            }
            let wanted = if prefix { format!("{}{sep}{original}", l.name) } else { original.to_owned() };
            let mut name = wanted.clone();
            let mut n = 2;
            while taken.contains_key(&name) {
                name = format!("{wanted}{sep}{n}");
                n += 1;
            }
            if name != wanted {
                collisions.push(format!(
                    "{what} {original:?} of server {:?} is exposed as {name:?} ({wanted:?} is taken by server {:?})",
                    l.name, taken[&wanted]
                ));
            }
            taken.insert(name.clone(), l.name.clone());
            let mut def = def.clone();
            if let Some(obj) = def.as_object_mut() {
                obj.insert("name".into(), Value::String(name.clone()));
            }
            let mut blobs = None;
            if what == "tool" {
                let fields = crate::chaining::schema::declared(&def);
                if !fields.is_empty() {
                    def = crate::chaining::schema::llm_facing(&def, &fields);
                    blobs = Some(Arc::new(fields));
                }
            }
            out.push(Exposed { name, upstream: i, original: original.to_owned(), def, output_schema: None, blobs, inputs: None });
        }
    }
    let index = out.iter().enumerate().map(|(k, e)| (e.name.clone(), k)).collect();
    (out, index)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn lists() -> Vec<UpstreamLists> {
        vec![
            UpstreamLists {
                name: "a".into(),
                tools: vec![json!({"name":"echo"}), json!({"name":"b_x"})],
                resources: vec![json!({"uri":"file:///one"})],
                ..Default::default()
            },
            UpstreamLists {
                name: "a_b".into(),
                tools: vec![json!({"name":"x"}), json!({"name":"echo"})],
                templates: vec![json!({"uriTemplate":"test://template/{id}/data"})],
                ..Default::default()
            },
        ]
    }

    #[test]
    fn prefixed_names_and_deterministic_collisions() {
        let c = Catalog::build(&lists(), true, "_");
        let names: Vec<_> = c.tools.iter().map(|t| t.name.as_str()).collect();
        // "a" + "b_x" and "a_b" + "x" both want "a_b_x": the first upstream keeps it.
        assert_eq!(names, ["a_echo", "a_b_x", "a_b_x_2", "a_b_echo"]);
        assert_eq!(c.collisions.len(), 1, "{:?}", c.collisions);
        let t = c.tool("a_b_x_2").unwrap();
        assert_eq!((t.upstream, t.original.as_str()), (1, "x"));
        assert_eq!(t.def["name"], "a_b_x_2");
    }

    #[test]
    fn a_uri_two_upstreams_list_is_rewritten_reversibly_for_the_second() {
        let list = |name: &str| UpstreamLists {
            name: name.into(),
            resources: vec![json!({"uri": "file:///notes/a b.txt", "name": "a"}), json!({"uri": format!("{name}://own")})],
            ..Default::default()
        };
        let c = Catalog::build(&[list("one"), list("two_2")], true, "_");
        let uris: Vec<&str> = c.resources.iter().filter_map(|(_, r)| r["uri"].as_str()).collect();
        let exposed = "stowage-upstream://two_2/file%3A%2F%2F%2Fnotes%2Fa%20b.txt";
        assert_eq!(uris, vec!["file:///notes/a b.txt", "one://own", exposed, "two_2://own"]);
        assert_eq!(c.resource_upstream("file:///notes/a b.txt", 2), Some(0));
        assert_eq!(c.resource_upstream(exposed, 2), Some(1));
        assert_eq!(split_collided(exposed), Some(("two_2".to_owned(), "file:///notes/a b.txt".to_owned())));
        assert_eq!(c.exposed_uri(1, "file:///notes/a b.txt"), exposed);
        assert_eq!(c.exposed_uri(0, "file:///notes/a b.txt"), "file:///notes/a b.txt");
        assert!(c.renamed_resources.iter().any(|m| m.contains("two_2") && m.contains(exposed)), "{:?}", c.renamed_resources);
        assert_eq!(split_collided("file:///x"), None);
    }

    #[test]
    fn unprefixed_single_upstream_is_transparent() {
        let c = Catalog::build(&lists()[..1], false, "_");
        assert_eq!(c.tool("echo").unwrap().original, "echo");
        assert!(c.collisions.is_empty());
    }

    #[test]
    fn resources_route_by_uri_then_template() {
        let c = Catalog::build(&lists(), true, "_");
        assert_eq!(c.resource_upstream("file:///one", 2), Some(0));
        assert_eq!(c.resource_upstream("test://template/7/data", 2), Some(1));
        assert_eq!(c.resource_upstream("other://x", 2), None);
        assert_eq!(c.resource_upstream("other://x", 1), Some(0));
    }
}
