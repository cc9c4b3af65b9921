//! Inputs that take file bytes, detected from a tool's `inputSchema` when its catalog is
//! fetched, and the catalog entry the model sees for them.
//!
//! Every property is walked (nested objects, array items, `anyOf`/`oneOf` branches, local
//! `$ref`s) and each string property is classified by what its schema says:
//! - base64 bytes: `contentEncoding: base64`, `format: byte` or `base64`, a binary
//!   `contentMediaType`, a name like `*_base64`, or a file-like name (`data`, `content`,
//!   `file`, `image`, `audio`, `attachment(s)`, …) beside a `mime_type`/`content_type` sibling;
//! - a URL: `url`, `*_url`, `*_uri` names (with or without `format: uri`), or `format: uri`
//!   on a file-like name;
//! - a local path (stdio upstreams only, whose files are this machine's): `format: path` or
//!   `file-path`, `file_path`, `*_path` names of file-like things;
//! - text: a textual `contentMediaType` with no encoding.
//!
//! A property whose signals disagree (a URL by one, base64 by another) is not chained and the
//! tool's notes say why, in one line: a guess could send the wrong bytes. The walk is bounded
//! (depth, properties visited, `$ref` cycles), so no schema costs more than a bounded time.
//!
//! The user's rules (`[gateway.chaining.inputs]`) override per property, and a tool that
//! declares its blobs (`_awp.blob`, `x-mcp-file`) is never detected: the author said which.
//!
//! In the catalog, a chained property's description gains one sentence saying it also takes
//! an `artifact://` URI. Its schema is widened (`anyOf` with `{type: string, format: uri,
//! pattern: ^artifact://}`) only where the schema would reject such a URI (a `pattern`, a
//! `maxLength` under a URI's length, `format: byte`, an `enum`) and where a branch can be
//! added without changing what else validates (not inside `oneOf` or `not`); elsewhere the
//! sentence alone.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::{Map, Value, json};

use super::config::{InputMode, Rule, ToolRule};

/// Most nested levels followed from the schema's root.
const MAX_DEPTH: usize = 12;
/// Most property schemas visited in one tool's schema: past it, detection stops with a note.
pub const MAX_VISITED: usize = 4096;
/// Longest artifact URI (`artifact://` + a 48-character namespace + `_` + 16 hex).
const LONGEST_URI: u64 = 76;
/// A representative artifact URI, tried against a property's `pattern`.
const SAMPLE_URI: &str = "artifact://tool_0123456789abcdef";

/// One step from a tool's arguments to a property.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Into an object's property.
    Key(String),
    /// Into every item of an array.
    Items,
}

/// A property chained for `artifact://` URIs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DetectedInput {
    /// The property's path in the arguments: `content_base64`, `attachments[].content_base64`.
    pub path: String,
    /// The same path as steps, to walk the arguments by.
    #[serde(skip)]
    pub steps: Vec<Step>,
    /// What the URI is replaced with.
    pub form: InputMode,
    /// What decided the form (`contentEncoding base64`, `name *_url`, `rule`, …).
    pub signal: String,
    /// The property's `maxLength`, checked against the filled value (base64-counted).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_length: Option<u64>,
    /// Media types the property takes (`contentMediaType`, or the mime sibling's `enum`);
    /// empty: any.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub media_types: Vec<String>,
    /// A sibling the gateway fills with the artifact's media type when the model left it empty.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mime_sibling: Option<String>,
    /// A sibling the gateway fills with the artifact's file name when the model left it empty.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub filename_sibling: Option<String>,
    /// Whether the catalog's schema was widened to admit an `artifact://` URI.
    pub widened: bool,
    /// Where the property's string schema is, in the input schema (a JSON Pointer).
    #[serde(skip)]
    schema_ptr: String,
    /// Where its description goes (the property's own schema, above `anyOf` branches).
    #[serde(skip)]
    describe_ptr: String,
    /// The `anyOf` a branch may be added to, when the string schema is one of its branches.
    #[serde(skip)]
    any_of_ptr: Option<String>,
    #[serde(skip)]
    in_one_of: bool,
}

/// What detection found for one tool.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ToolInputs {
    /// The properties chained, in schema order.
    pub inputs: Vec<DetectedInput>,
    /// What was not chained and why, one line each (disagreeing signals, a walk cut short, a
    /// rule naming no property).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

impl ToolInputs {
    /// Nothing chained and nothing to say about it.
    pub fn is_empty(&self) -> bool {
        self.inputs.is_empty() && self.notes.is_empty()
    }
}

/// Detects `def`'s inputs (a tool definition, as listed). `stdio`: the upstream runs on this
/// machine (only then can a path reach it). `rule`: the tool's entry in
/// `[gateway.chaining.inputs]`, if a table of properties; `auto`: whether to detect at all.
pub fn detect(def: &Value, stdio: bool, auto: bool, rules: Option<&BTreeMap<String, Rule>>) -> ToolInputs {
    let mut out = ToolInputs::default();
    if !auto && rules.is_none() {
        return out;
    }
    let Some(root) = def.get("inputSchema").filter(|s| s.is_object()) else { return out };
    let mut walk = Walk { root, stdio, visited: 0, cut: false, stack: Vec::new(), found: Vec::new(), candidates: BTreeMap::new() };
    walk.schema(root, "", &mut Vec::new(), None, 0);
    let mut notes = Vec::new();
    if walk.cut {
        notes.push(format!(
            "its input schema is too large (over {MAX_VISITED} schemas): only the first were looked at; name the rest in [gateway.chaining.inputs] if they take files"
        ));
    }
    let mut by_path: BTreeMap<String, Result<DetectedInput, Vec<String>>> = BTreeMap::new();
    for f in walk.found {
        match f {
            Found::Input(d) => match by_path.remove(&d.path) {
                None => {
                    by_path.insert(d.path.clone(), Ok(d));
                }
                Some(Ok(prev)) if prev.form == d.form => {
                    by_path.insert(d.path.clone(), Ok(prev));
                }
                Some(Ok(prev)) => {
                    let signals = vec![format!("{} by {}", prev.form, prev.signal), format!("{} by {}", d.form, d.signal)];
                    by_path.insert(d.path.clone(), Err(signals));
                }
                Some(Err(mut s)) => {
                    s.push(format!("{} by {}", d.form, d.signal));
                    by_path.insert(d.path.clone(), Err(s));
                }
            },
            Found::Ambiguous(path, signals) => {
                by_path.insert(path, Err(signals));
            }
        }
    }
    for (path, r) in by_path {
        match r {
            Ok(d) if auto => out.inputs.push(d),
            Ok(_) => {}
            Err(signals) if auto => notes.push(format!(
                "{path}: not chained, its signals disagree ({}); set its form in [gateway.chaining.inputs]",
                signals.join(", ")
            )),
            Err(_) => {}
        }
    }
    for (path, rule) in rules.into_iter().flatten() {
        out.inputs.retain(|d| &d.path != path);
        let Rule::Mode(form) = *rule else { continue };
        match walk.candidates.get(path) {
            Some(c) => {
                let mut d = c.clone();
                d.form = form;
                d.signal = "rule".into();
                out.inputs.push(d);
            }
            None => notes.push(format!("{path}: a rule in [gateway.chaining.inputs] names it, but the tool has no such string property")),
        }
        notes.retain(|n| !n.starts_with(&format!("{path}: not chained")));
    }
    out.inputs.sort_by(|a, b| a.path.cmp(&b.path));
    out.notes = notes;
    out
}

/// The tool definition the model sees: each chained property described (and widened where
/// that is needed and safe). Marks `widened` on the inputs it widened.
pub fn llm_facing(def: &mut Value, inputs: &mut ToolInputs) {
    let Some(schema) = def.get_mut("inputSchema") else { return };
    // Widen first, deepest pointers first, so a wrap does not move a pointer still to come.
    let mut order: Vec<usize> = (0..inputs.inputs.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(inputs.inputs[i].schema_ptr.len()));
    let mut described: Vec<String> = Vec::new();
    for i in order {
        let d = &mut inputs.inputs[i];
        if !d.in_one_of && schema.pointer(&d.schema_ptr).is_some_and(rejects_artifact_uri) {
            d.widened = match &d.any_of_ptr {
                Some(p) => match schema.pointer_mut(p) {
                    Some(Value::Array(branches)) => {
                        if !branches.contains(&artifact_branch()) {
                            branches.push(artifact_branch());
                        }
                        true
                    }
                    _ => false,
                },
                None => match schema.pointer_mut(&d.schema_ptr) {
                    Some(Value::Object(s)) => {
                        let mut inner = std::mem::take(s);
                        for k in ["description", "title"] {
                            if let Some(v) = inner.remove(k) {
                                s.insert(k.into(), v);
                            }
                        }
                        s.insert("anyOf".into(), json!([Value::Object(inner), artifact_branch()]));
                        true
                    }
                    _ => false,
                },
            };
        }
        if described.contains(&d.describe_ptr) {
            continue;
        }
        described.push(d.describe_ptr.clone());
        if let Some(Value::Object(s)) = schema.pointer_mut(&d.describe_ptr) {
            let sentence = sentence(d.form, d.steps.last() == Some(&Step::Items));
            let text = match s.get("description").and_then(Value::as_str) {
                Some(t) if t.contains("artifact://") => continue,
                Some(t) if !t.trim().is_empty() => format!("{} {sentence}", ensure_period(t.trim_end())),
                _ => sentence,
            };
            s.insert("description".into(), Value::String(text));
        }
    }
}

/// The one sentence a chained property's description gains.
fn sentence(form: InputMode, items: bool) -> String {
    let what = if items { "Each item may also be" } else { "May also be" };
    let then = match form {
        InputMode::Base64 => "the gateway sends its bytes as base64",
        InputMode::Url => "the gateway sends a read-only link to it",
        InputMode::Text => "the gateway sends its text",
        InputMode::Path => "the gateway sends the path of a read-only copy",
    };
    format!("{what} an artifact:// URI from an earlier result; {then}.")
}

fn ensure_period(t: &str) -> String {
    if t.ends_with(['.', '!', '?', ':']) { t.to_owned() } else { format!("{t}.") }
}

fn artifact_branch() -> Value {
    json!({"type": "string", "format": "uri", "pattern": "^artifact://"})
}

/// Whether a JSON Schema validator (with format assertions, as ajv-formats does) could refuse
/// an `artifact://` URI at this string schema.
fn rejects_artifact_uri(s: &Value) -> bool {
    let num = |k: &str| s.get(k).and_then(Value::as_u64);
    if num("maxLength").is_some_and(|m| m < LONGEST_URI) || num("minLength").is_some_and(|m| m > 16) {
        return true;
    }
    if s.get("enum").is_some() || s.get("const").is_some() {
        return true;
    }
    if s.get("format").and_then(Value::as_str).is_some_and(|f| !matches!(f, "uri" | "uri-reference" | "iri" | "iri-reference" | "path")) {
        return true;
    }
    match s.get("pattern").and_then(Value::as_str) {
        // A pattern the regex crate cannot read (ECMA look-arounds) may refuse it too.
        Some(p) => regex::Regex::new(p).map_or(true, |r| !r.is_match(SAMPLE_URI)),
        None => false,
    }
}

enum Found {
    Input(DetectedInput),
    Ambiguous(String, Vec<String>),
}

struct Walk<'a> {
    root: &'a Value,
    stdio: bool,
    visited: usize,
    cut: bool,
    /// `$ref` targets on the path from the root: a cycle stops there.
    stack: Vec<String>,
    found: Vec<Found>,
    /// Every string property by path (what a rule may name), as if detected.
    candidates: BTreeMap<String, DetectedInput>,
}

/// Where a string schema sits relative to the property that holds it.
#[derive(Clone)]
struct Place {
    describe_ptr: String,
    any_of_ptr: Option<String>,
    in_one_of: bool,
}

impl<'a> Walk<'a> {
    /// A local `$ref` followed (to its end), with the pointer of the schema reached; `None` for
    /// a cycle or a reference outside the document.
    fn resolve(&self, mut s: &'a Value, mut ptr: String) -> Option<(&'a Value, String)> {
        for _ in 0..8 {
            let Some(r) = s.get("$ref").and_then(Value::as_str) else { return Some((s, ptr)) };
            let target = r.strip_prefix('#')?;
            if self.stack.iter().any(|p| p == target) || target == ptr {
                return None;
            }
            s = self.root.pointer(target)?;
            ptr = target.to_owned();
        }
        None
    }

    /// Walks the schema at `ptr` (the value reached by `steps`). `name`: the property it
    /// belongs to; `place`: set when inside that property's branches.
    fn schema(&mut self, s: &'a Value, ptr: &str, steps: &mut Vec<Step>, place: Option<(&str, &Siblings, Place)>, depth: usize) {
        if depth > MAX_DEPTH || self.cut {
            return;
        }
        self.visited += 1;
        if self.visited > MAX_VISITED {
            self.cut = true;
            return;
        }
        let Some((s, target)) = self.resolve(s, ptr.to_owned()) else { return };
        // Inside a `$ref`'s target until the walk leaves it: a reference back to it is a cycle.
        let pushed = target != ptr;
        let ptr = target;
        if pushed {
            self.stack.push(ptr.clone());
        }
        self.visit(s, &ptr, steps, place, depth);
        if pushed {
            self.stack.pop();
        }
    }

    fn visit(&mut self, s: &'a Value, ptr: &str, steps: &mut Vec<Step>, place: Option<(&str, &Siblings, Place)>, depth: usize) {
        for (kw, one_of) in [("anyOf", false), ("oneOf", true)] {
            if let Some(branches) = s.get(kw).and_then(Value::as_array) {
                for (i, b) in branches.iter().enumerate() {
                    let inner = place.as_ref().map(|(n, sib, p)| {
                        let mut p = p.clone();
                        if kw == "anyOf" && !p.in_one_of {
                            p.any_of_ptr = Some(format!("{ptr}/anyOf"));
                        }
                        p.in_one_of |= one_of;
                        (*n, *sib, p)
                    });
                    self.schema(b, &format!("{ptr}/{kw}/{i}"), steps, inner, depth + 1);
                }
            }
        }
        if let Some(branches) = s.get("allOf").and_then(Value::as_array) {
            for (i, b) in branches.iter().enumerate() {
                let inner = place.as_ref().map(|(n, sib, p)| (*n, *sib, Place { any_of_ptr: None, in_one_of: true, ..p.clone() }));
                self.schema(b, &format!("{ptr}/allOf/{i}"), steps, inner, depth + 1);
            }
        }
        if let Some(props) = s.get("properties").and_then(Value::as_object) {
            let props_siblings = Siblings::of(props);
            let props = (props, &props_siblings);
            for (name, p) in props.0 {
                if self.cut {
                    return;
                }
                let child = format!("{ptr}/properties/{}", name.replace('~', "~0").replace('/', "~1"));
                let place = Place { describe_ptr: child.clone(), any_of_ptr: None, in_one_of: false };
                // The description goes on the property itself, or where its `$ref` leads.
                let place = match self.resolve(p, child.clone()) {
                    Some((_, target)) => Place { describe_ptr: target, ..place },
                    None => place,
                };
                steps.push(Step::Key(name.clone()));
                self.schema(p, &child, steps, Some((name, props.1, place)), depth + 1);
                steps.pop();
            }
        }
        if let Some(items) = s.get("items").filter(|i| i.is_object()) {
            if let Some((name, sib, _)) = place {
                let ptr = format!("{ptr}/items");
                let place = Place {
                    describe_ptr: self.resolve(items, ptr.clone()).map_or(ptr.clone(), |(_, t)| t),
                    any_of_ptr: None,
                    in_one_of: false,
                };
                steps.push(Step::Items);
                self.schema(items, &ptr, steps, Some((name, sib, place)), depth + 1);
                steps.pop();
            }
            return;
        }
        if let Some((name, siblings, place)) = place
            && is_string(s)
        {
            self.classify(s, ptr, steps, name, siblings, place);
        }
    }

    fn classify(&mut self, s: &Value, ptr: &str, steps: &[Step], name: &str, siblings: &Siblings, place: Place) {
        let path = display_path(steps);
        let n = normalize(name);
        let text = |k: &str| s.get(k).and_then(Value::as_str).map(str::to_ascii_lowercase);
        let (encoding, format, media) = (text("contentEncoding"), text("format"), text("contentMediaType"));
        let mime_sibling = siblings.pick(&siblings.mimes, name);
        let mut signals: Vec<(InputMode, String)> = Vec::new();
        match encoding.as_deref() {
            Some("base64") => signals.push((InputMode::Base64, "contentEncoding base64".into())),
            // Other encodings (base32, quoted-printable, …) are not ones the gateway writes.
            Some(_) => return,
            None => {}
        }
        match format.as_deref() {
            Some(f @ ("byte" | "base64")) => signals.push((InputMode::Base64, format!("format {f}"))),
            Some(f @ ("uri" | "uri-reference" | "iri" | "iri-reference")) if is_url_name(&n) || is_file_name(&n) => {
                signals.push((InputMode::Url, format!("format {f}")))
            }
            Some(f @ ("path" | "file-path")) if self.stdio => signals.push((InputMode::Path, format!("format {f}"))),
            _ => {}
        }
        if let Some(m) = &media
            && encoding.is_none()
        {
            let form = if is_textual(m) { InputMode::Text } else { InputMode::Base64 };
            signals.push((form, format!("contentMediaType {m}")));
        }
        if is_base64_name(&n) {
            signals.push((InputMode::Base64, "its name".into()));
        } else if is_url_name(&n) {
            signals.push((InputMode::Url, "its name".into()));
        } else if self.stdio && is_path_name(&n) {
            signals.push((InputMode::Path, "its name".into()));
        } else if is_file_name(&n)
            && let Some(m) = &mime_sibling
        {
            signals.push((InputMode::Base64, format!("its name beside {m}")));
        }
        let mut media_types: Vec<String> = media.iter().cloned().collect();
        if let Some(m) = &mime_sibling
            && let Some(values) = siblings.enums.get(m)
        {
            media_types.extend(values.iter().cloned());
        }
        let candidate = DetectedInput {
            path: path.clone(),
            steps: steps.to_vec(),
            form: signals.first().map_or(InputMode::Base64, |s| s.0),
            signal: String::new(),
            max_length: s.get("maxLength").and_then(Value::as_u64),
            media_types,
            mime_sibling,
            filename_sibling: siblings.pick(&siblings.filenames, name),
            widened: false,
            schema_ptr: ptr.to_owned(),
            describe_ptr: place.describe_ptr,
            any_of_ptr: place.any_of_ptr,
            in_one_of: place.in_one_of,
        };
        self.candidates.entry(path.clone()).or_insert_with(|| candidate.clone());
        let Some((form, _)) = signals.first() else { return };
        if signals.iter().any(|(f, _)| f != form) {
            let described = signals.iter().map(|(f, s)| format!("{f} by {s}")).collect();
            self.found.push(Found::Ambiguous(path, described));
            return;
        }
        let signal = signals.iter().map(|(_, s)| s.as_str()).collect::<Vec<_>>().join(", ");
        self.found.push(Found::Input(DetectedInput { form: *form, signal, ..candidate }));
    }
}

/// `attachments[].content_base64`.
pub fn display_path(steps: &[Step]) -> String {
    let mut out = String::new();
    for s in steps {
        match s {
            Step::Key(k) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(k);
            }
            Step::Items => out.push_str("[]"),
        }
    }
    out
}

fn is_string(s: &Value) -> bool {
    match s.get("type") {
        Some(Value::String(t)) => t == "string",
        Some(Value::Array(ts)) => ts.iter().any(|t| t == "string"),
        // No type, but a keyword only strings have.
        None => ["contentEncoding", "contentMediaType", "format", "pattern", "maxLength"].iter().any(|k| s.get(*k).is_some()),
        _ => false,
    }
}

/// `imageBase64`, `image-base64` and `image_base64` alike: lowercase snake case.
fn normalize(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 4);
    let mut prev_lower = false;
    for c in name.chars() {
        if c.is_ascii_uppercase() && prev_lower {
            out.push('_');
        }
        prev_lower = c.is_ascii_lowercase() || c.is_ascii_digit();
        out.push(if c == '-' || c == ' ' { '_' } else { c.to_ascii_lowercase() });
    }
    out
}

fn is_base64_name(n: &str) -> bool {
    n == "base64" || n == "b64" || n.ends_with("_base64") || n.ends_with("_b64") || n.starts_with("base64_")
}

/// Names of URLs a tool reads from; URLs it calls or sends people to are left alone.
fn is_url_name(n: &str) -> bool {
    const NOT_CONTENT: &[&str] = &[
        "callback",
        "webhook",
        "hook",
        "redirect",
        "return",
        "base",
        "endpoint",
        "api",
        "server",
        "proxy",
        "homepage",
        "home",
        "website",
        "site",
        "repo",
        "repository",
        "git",
        "origin",
        "login",
        "auth",
        "token",
        "success",
        "cancel",
        "notify",
        "notification",
        "next",
        "prev",
        "previous",
        "page",
        "issuer",
        "jwks",
        "registry",
        "remote",
        "resource",
        "schema",
        "base_api",
    ];
    let stem = if n == "url" || n == "uri" {
        ""
    } else if let Some(s) = n.strip_suffix("_url").or_else(|| n.strip_suffix("_uri")) {
        s
    } else {
        return false;
    };
    !NOT_CONTENT.contains(&stem)
}

fn is_path_name(n: &str) -> bool {
    n == "file_path" || n == "filepath" || n.strip_suffix("_path").is_some_and(is_file_name)
}

const FILE_WORDS: &[&str] = &[
    "data",
    "content",
    "contents",
    "file",
    "image",
    "audio",
    "video",
    "attachment",
    "attachments",
    "blob",
    "document",
    "doc",
    "pdf",
    "bytes",
    "media",
    "photo",
    "picture",
    "img",
    "input",
    "source",
    "src",
];

fn is_file_name(n: &str) -> bool {
    FILE_WORDS.contains(&n) || n.rsplit('_').next().is_some_and(|last| FILE_WORDS.contains(&last) && last != "input" && last != "source")
}

fn is_mime_name(n: &str) -> bool {
    matches!(n, "mime_type" | "mimetype" | "mime" | "content_type" | "media_type")
        || n.ends_with("_mime_type")
        || n.ends_with("_content_type")
        || n.ends_with("_media_type")
}

fn is_filename_name(n: &str) -> bool {
    matches!(n, "filename" | "file_name") || n.ends_with("_filename") || n.ends_with("_file_name")
}

/// The properties of one object that may be a blob's siblings, found once per object (a
/// schema with thousands of properties must not cost thousands of scans).
struct Siblings {
    /// (key, its normalized name) of the media type and file name candidates.
    mimes: Vec<(String, String)>,
    filenames: Vec<(String, String)>,
    /// A mime candidate's `enum`, lowercased.
    enums: BTreeMap<String, Vec<String>>,
}

impl Siblings {
    fn of(props: &Map<String, Value>) -> Siblings {
        let mut out = Siblings { mimes: Vec::new(), filenames: Vec::new(), enums: BTreeMap::new() };
        for (k, v) in props {
            if !is_string(v) && v.get("type").is_some() {
                continue;
            }
            let n = normalize(k);
            if is_mime_name(&n) {
                if let Some(values) = v.get("enum").and_then(Value::as_array) {
                    out.enums.insert(k.clone(), values.iter().filter_map(Value::as_str).map(str::to_ascii_lowercase).collect());
                }
                out.mimes.push((k.clone(), n));
            } else if is_filename_name(&n) {
                out.filenames.push((k.clone(), n));
            }
        }
        out
    }

    /// The sibling of `name` among `candidates`: one named after it (`image_mime_type` for
    /// `image_base64`) first, else the generic one (`mime_type`).
    fn pick(&self, candidates: &[(String, String)], name: &str) -> Option<String> {
        let n = normalize(name);
        let stem = format!("{}_", n.split('_').next().unwrap_or(&n));
        let mut generic = None;
        for (k, kn) in candidates {
            if k == name {
                continue;
            }
            if kn.starts_with(&stem) {
                return Some(k.clone());
            }
            if !kn.contains('_') || matches!(kn.as_str(), "mime_type" | "content_type" | "media_type" | "file_name") {
                generic.get_or_insert_with(|| k.clone());
            }
        }
        generic
    }
}

fn is_textual(m: &str) -> bool {
    let m = m.split(';').next().unwrap_or(m).trim();
    m.starts_with("text/")
        || m.ends_with("+json")
        || m.ends_with("+xml")
        || matches!(m, "application/json" | "application/xml" | "application/javascript" | "application/yaml" | "application/x-yaml")
}

/// Whether media type `m` (the artifact's) is one of `allowed` (`image/*` and `*/*` match
/// their kind).
pub fn media_type_allowed(allowed: &[String], m: &str) -> bool {
    let m = m.split(';').next().unwrap_or(m).trim().to_ascii_lowercase();
    allowed.is_empty()
        || allowed.iter().any(|a| {
            let a = a.split(';').next().unwrap_or(a).trim();
            a == m || a == "*/*" || a.strip_suffix("/*").is_some_and(|kind| m.split('/').next() == Some(kind))
        })
}

/// The tool-wide rule of a tool, if it has one.
pub fn tool_rule(rule: Option<&ToolRule>) -> Option<Rule> {
    match rule {
        Some(ToolRule::Tool(r)) => Some(*r),
        _ => None,
    }
}

/// The property rules of a tool, if it has a table of them.
pub fn property_rules(rule: Option<&ToolRule>) -> Option<&BTreeMap<String, Rule>> {
    match rule {
        Some(ToolRule::Properties(p)) => Some(p),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(props: Value) -> Value {
        json!({"name": "t", "inputSchema": {"type": "object", "properties": props}})
    }

    /// (path, form) of every input detected on a stdio upstream with no rules.
    fn found(props: Value) -> Vec<(String, InputMode)> {
        detect(&tool(props), true, true, None).inputs.into_iter().map(|d| (d.path, d.form)).collect()
    }

    fn one(path: &str, form: InputMode) -> Vec<(String, InputMode)> {
        vec![(path.to_owned(), form)]
    }

    #[test]
    fn each_signal_classifies_a_property() {
        use InputMode::*;
        let s = json!({"type": "string"});
        let cases: Vec<(Value, Vec<(String, InputMode)>)> = vec![
            (json!({"image": {"type": "string", "contentEncoding": "base64"}}), one("image", Base64)),
            (json!({"blob": {"type": "string", "format": "byte"}}), one("blob", Base64)),
            (json!({"picture": {"type": "string", "contentMediaType": "image/png"}}), one("picture", Base64)),
            (json!({"page": {"type": "string", "contentMediaType": "text/html"}}), one("page", Text)),
            (json!({"content_base64": s, "mime_type": s}), one("content_base64", Base64)),
            (json!({"fileBase64": s}), one("fileBase64", Base64)),
            (json!({"data": s, "mimeType": s}), one("data", Base64)),
            (json!({"attachment": s, "content_type": s}), one("attachment", Base64)),
            (json!({"audio_url": s}), one("audio_url", Url)),
            (json!({"url": {"type": "string", "format": "uri"}}), one("url", Url)),
            (json!({"image": {"type": "string", "format": "uri"}}), one("image", Url)),
            (json!({"file_path": s}), one("file_path", Path)),
            (json!({"doc": {"type": "string", "format": "path"}}), one("doc", Path)),
            // Not files: a free-text content, a URL the tool calls back, a plain name.
            (json!({"content": s}), vec![]),
            (json!({"data": s}), vec![]),
            (json!({"callback_url": s, "webhookUrl": s, "homepage": {"type": "string", "format": "uri"}}), vec![]),
            (json!({"name": s, "count": {"type": "integer"}, "text": {"type": "string", "contentEncoding": "quoted-printable"}}), vec![]),
            (json!({"content_base64": {"type": "integer"}}), vec![]),
        ];
        for (props, want) in cases {
            assert_eq!(found(props.clone()), want, "{props}");
        }
    }

    #[test]
    fn paths_only_for_local_upstreams() {
        let def = tool(json!({"file_path": {"type": "string"}}));
        assert!(detect(&def, false, true, None).inputs.is_empty());
        assert_eq!(detect(&def, true, true, None).inputs[0].form, InputMode::Path);
    }

    #[test]
    fn nested_objects_array_items_and_optional_branches() {
        let props = json!({
            "attachments": {"type": "array", "items": {"type": "object", "properties": {
                "filename": {"type": "string"}, "content_base64": {"type": "string"}}}},
            "options": {"type": "object", "properties": {"file": {"type": "string", "contentEncoding": "base64"}}},
            "maybe_base64": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": null},
            "images": {"type": "array", "items": {"type": "string", "format": "byte"}}
        });
        let def = tool(props);
        let got = detect(&def, false, true, None);
        let paths: Vec<_> = got.inputs.iter().map(|d| d.path.as_str()).collect();
        assert_eq!(paths, ["attachments[].content_base64", "images[]", "maybe_base64", "options.file"]);
        let a = &got.inputs[0];
        assert_eq!(a.steps, vec![Step::Key("attachments".into()), Step::Items, Step::Key("content_base64".into())]);
        assert_eq!(a.filename_sibling.as_deref(), Some("filename"));
    }

    #[test]
    fn refs_are_followed_and_cycles_stop() {
        let def = json!({"name": "t", "inputSchema": {"type": "object",
            "$defs": {
                "Node": {"type": "object", "properties": {"data_base64": {"type": "string"}, "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}}}},
                "Loop": {"$ref": "#/$defs/Loop"}
            },
            "properties": {"root": {"$ref": "#/$defs/Node"}, "odd": {"$ref": "#/$defs/Loop"}, "far": {"$ref": "https://example.invalid/s.json"}}}});
        let got = detect(&def, false, true, None);
        let paths: Vec<_> = got.inputs.iter().map(|d| d.path.as_str()).collect();
        // The recursion back into Node is a cycle: its first level is chained, not the rest.
        assert_eq!(paths, ["root.data_base64"]);
    }

    #[test]
    fn disagreeing_signals_are_not_chained_and_say_why() {
        let def = tool(json!({"image_url": {"type": "string", "contentEncoding": "base64"}}));
        let got = detect(&def, false, true, None);
        assert!(got.inputs.is_empty());
        assert_eq!(got.notes.len(), 1);
        assert!(
            got.notes[0].starts_with("image_url: not chained, its signals disagree (base64 by contentEncoding base64, url by its name)"),
            "{:?}",
            got.notes
        );
        // Two branches of one property that disagree.
        let def = tool(json!({"src": {"anyOf": [{"type": "string", "format": "byte"}, {"type": "string", "format": "uri"}]}}));
        let got = detect(&def, false, true, None);
        assert!(got.inputs.is_empty() && got.notes.len() == 1, "{got:?}");
    }

    #[test]
    fn rules_override_detection_per_property() {
        let def = tool(
            json!({"content_base64": {"type": "string"}, "notes": {"type": "string"}, "image_url": {"type": "string", "contentEncoding": "base64"}}),
        );
        let rules: BTreeMap<String, Rule> = [
            ("content_base64".to_owned(), Rule::Off),
            ("notes".to_owned(), Rule::Mode(InputMode::Text)),
            ("image_url".to_owned(), Rule::Mode(InputMode::Base64)),
            ("nope".to_owned(), Rule::Mode(InputMode::Url)),
        ]
        .into();
        let got = detect(&def, false, true, Some(&rules));
        let forms: Vec<_> = got.inputs.iter().map(|d| (d.path.as_str(), d.form, d.signal.as_str())).collect();
        assert_eq!(forms, [("image_url", InputMode::Base64, "rule"), ("notes", InputMode::Text, "rule")]);
        assert_eq!(got.notes, ["nope: a rule in [gateway.chaining.inputs] names it, but the tool has no such string property"]);
        // auto = false: only the rules.
        let got = detect(&def, false, false, Some(&rules));
        assert_eq!(got.inputs.len(), 2);
        assert!(detect(&def, false, false, None).is_empty());
    }

    #[test]
    fn a_huge_schema_is_cut_with_one_note() {
        let props: Map<String, Value> = (0..10_000).map(|i| (format!("p{i}"), json!({"type": "string"}))).collect();
        let def = tool(Value::Object(props));
        let t = std::time::Instant::now();
        let got = detect(&def, false, true, None);
        assert!(t.elapsed() < std::time::Duration::from_secs(1));
        assert_eq!(got.notes.len(), 1);
        assert!(got.notes[0].contains("too large (over 4096 schemas)"), "{:?}", got.notes);
    }

    #[test]
    fn the_catalog_gains_one_sentence_and_widens_only_where_needed() {
        let mut def = tool(json!({
            "content_base64": {"type": "string", "description": "The file"},
            "blob": {"type": "string", "format": "byte", "title": "Blob"},
            "opt_base64": {"anyOf": [{"type": "string", "pattern": "^[A-Za-z0-9+/=]*$"}, {"type": "null"}]},
            "pick_base64": {"oneOf": [{"type": "string", "maxLength": 10}, {"type": "null"}]},
            "audio_url": {"type": "string", "format": "uri"}
        }));
        let mut got = detect(&def, false, true, None);
        llm_facing(&mut def, &mut got);
        let p = &def["inputSchema"]["properties"];
        assert_eq!(
            p["content_base64"],
            json!({"type": "string", "description": "The file. May also be an artifact:// URI from an earlier result; the gateway sends its bytes as base64."})
        );
        assert_eq!(p["blob"]["title"], "Blob");
        assert_eq!(p["blob"]["anyOf"], json!([{"type": "string", "format": "byte"}, artifact_branch()]));
        assert_eq!(p["opt_base64"]["anyOf"].as_array().unwrap().len(), 3);
        assert!(p["pick_base64"]["oneOf"].as_array().unwrap().len() == 2, "never widened inside oneOf");
        assert!(p["pick_base64"]["description"].as_str().unwrap().contains("artifact://"));
        assert_eq!(p["audio_url"]["format"], "uri", "a URI already validates: not widened");
        let widened: Vec<_> = got.inputs.iter().filter(|d| d.widened).map(|d| d.path.as_str()).collect();
        assert_eq!(widened, ["blob", "opt_base64"]);
        // Listing again (a refresh) does not add a second sentence or branch.
        let mut again = def.clone();
        let mut got = detect(&again, false, true, None);
        llm_facing(&mut again, &mut got);
        assert_eq!(again, def);
    }

    #[test]
    fn media_types_match_with_wildcards() {
        let allowed = vec!["image/*".to_owned(), "application/pdf".to_owned()];
        assert!(media_type_allowed(&allowed, "image/png"));
        assert!(media_type_allowed(&allowed, "application/pdf; charset=binary"));
        assert!(!media_type_allowed(&allowed, "text/plain"));
        assert!(media_type_allowed(&[], "text/plain"));
    }
}
