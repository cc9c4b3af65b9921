//! JSON Pointers (RFC 6901) and the field paths of per-tool rules.
//!
//! Rules accept either a JSON Pointer (`/result/pdf_data`, `/pages/*/image`) or a dot path
//! (`result.pdf_data`, `pages.*.image`, `pages[*].image`, `pages[0].image`). `*` matches every
//! element of an array and every member of an object, so one rule covers lists of files.

use std::fmt::Write as _;

use serde_json::Value;

/// Appends `/key` to a pointer, escaping `~` and `/`.
pub(crate) fn push_key(ptr: &mut String, key: &str) {
    ptr.push('/');
    if key.contains(['~', '/']) {
        ptr.push_str(&key.replace('~', "~0").replace('/', "~1"));
    } else {
        ptr.push_str(key);
    }
}

/// Appends `/index` to a pointer.
pub(crate) fn push_index(ptr: &mut String, index: usize) {
    let _ = write!(ptr, "/{index}");
}

/// Splits a pointer into its parent pointer and last (unescaped) token.
pub(crate) fn split_last(ptr: &str) -> Option<(&str, String)> {
    let cut = ptr.rfind('/')?;
    Some((&ptr[..cut], ptr[cut + 1..].replace("~1", "/").replace("~0", "~")))
}

/// One segment of a compiled [`FieldPath`].
#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    Key(String),
    Any,
}

/// Why a rule path does not parse; the message names the path as written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FieldPathError {
    /// `pages[0` with no `]`.
    #[error("unclosed '[' in field path {path:?}")]
    Unclosed {
        /// The path as written.
        path: String,
    },
    /// `pages[0]x`: something other than `[` or the end after a `]`.
    #[error("unexpected {after:?} after ']' in field path {path:?}")]
    AfterBracket {
        /// The path as written.
        path: String,
        /// What follows the `]`.
        after: String,
    },
    /// An empty path, `a..b` or `/a//b`.
    #[error("field path {path:?} has an empty segment")]
    EmptySegment {
        /// The path as written.
        path: String,
    },
}

/// A compiled rule path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldPath {
    segments: Vec<Segment>,
}

impl FieldPath {
    /// Parses a JSON Pointer (leading `/`) or a dot path; `*` is a wildcard segment.
    pub fn parse(path: &str) -> Result<Self, FieldPathError> {
        let raw: Vec<String> = if let Some(rest) = path.strip_prefix('/') {
            rest.split('/').map(|t| t.replace("~1", "/").replace("~0", "~")).collect()
        } else {
            let mut out = Vec::new();
            for part in path.split('.') {
                // `pages[*]` and `pages[0]` are sugar for `pages.*` and `pages.0`.
                let mut rest = part;
                if let Some(open) = rest.find('[') {
                    out.push(rest[..open].to_owned());
                    rest = &rest[open..];
                    while let Some(inner) = rest.strip_prefix('[') {
                        let close = inner.find(']').ok_or_else(|| FieldPathError::Unclosed { path: path.to_owned() })?;
                        out.push(inner[..close].to_owned());
                        rest = &inner[close + 1..];
                    }
                    if !rest.is_empty() {
                        return Err(FieldPathError::AfterBracket { path: path.to_owned(), after: rest.to_owned() });
                    }
                } else {
                    out.push(rest.to_owned());
                }
            }
            out
        };
        if raw.is_empty() || raw.iter().any(String::is_empty) {
            return Err(FieldPathError::EmptySegment { path: path.to_owned() });
        }
        let segments = raw.into_iter().map(|s| if s == "*" { Segment::Any } else { Segment::Key(s) }).collect();
        Ok(FieldPath { segments })
    }

    /// Whether the path reaches into a tool result's content blocks: `content`, then a block
    /// (an index or `*`), then at least one key inside it (`content[*].resource.blob`).
    pub fn reaches_into_content_blocks(&self) -> bool {
        matches!(self.segments.first(), Some(Segment::Key(k)) if k == "content")
            && self.segments.len() >= 3
            && matches!(&self.segments[1], Segment::Any | Segment::Key(_))
            && match &self.segments[1] {
                Segment::Key(k) => k.parse::<usize>().is_ok(),
                Segment::Any => true,
            }
    }

    /// Pointers of every existing value the path matches in `root`, in document order.
    pub fn resolve(&self, root: &Value) -> Vec<String> {
        let mut out = Vec::new();
        let mut ptr = String::new();
        resolve_into(&self.segments, root, &mut ptr, &mut out);
        out
    }
}

fn resolve_into(segments: &[Segment], value: &Value, ptr: &mut String, out: &mut Vec<String>) {
    let Some((first, rest)) = segments.split_first() else {
        out.push(ptr.clone());
        return;
    };
    let len = ptr.len();
    match (first, value) {
        (Segment::Key(k), Value::Object(map)) => {
            if let Some(child) = map.get(k) {
                push_key(ptr, k);
                resolve_into(rest, child, ptr, out);
            }
        }
        (Segment::Key(k), Value::Array(items)) => {
            if let Some(child) = k.parse::<usize>().ok().and_then(|i| items.get(i)) {
                push_key(ptr, k);
                resolve_into(rest, child, ptr, out);
            }
        }
        (Segment::Any, Value::Array(items)) => {
            for (i, child) in items.iter().enumerate() {
                push_index(ptr, i);
                resolve_into(rest, child, ptr, out);
                ptr.truncate(len);
            }
        }
        (Segment::Any, Value::Object(map)) => {
            for (k, child) in map {
                push_key(ptr, k);
                resolve_into(rest, child, ptr, out);
                ptr.truncate(len);
            }
        }
        _ => {}
    }
    ptr.truncate(len);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn field_paths() {
        let doc = json!({
            "content": "x",
            "result": {"pdf_data": "y", "a/b": {"~k": 1}},
            "pages": [{"image": "p0"}, {"image": "p1"}, {"other": 2}],
            "by_name": {"a": {"blob": 1}, "b": {"blob": 2}}
        });
        // (path, expected pointers): many one-line cases.
        let cases: &[(&str, &[&str])] = &[
            ("content", &["/content"]),
            ("/content", &["/content"]),
            ("result.pdf_data", &["/result/pdf_data"]),
            ("/result/pdf_data", &["/result/pdf_data"]),
            ("/result/a~1b/~0k", &["/result/a~1b/~0k"]),
            ("pages.*.image", &["/pages/0/image", "/pages/1/image"]),
            ("pages[*].image", &["/pages/0/image", "/pages/1/image"]),
            ("/pages/*/image", &["/pages/0/image", "/pages/1/image"]),
            ("pages[1].image", &["/pages/1/image"]),
            ("pages.1.image", &["/pages/1/image"]),
            ("by_name.*.blob", &["/by_name/a/blob", "/by_name/b/blob"]),
            ("missing", &[]),
            ("content.deeper", &[]),
            ("pages.7.image", &[]),
        ];
        for (path, want) in cases {
            let got = FieldPath::parse(path).unwrap().resolve(&doc);
            assert_eq!(got, *want, "{path}");
            for p in &got {
                assert!(doc.pointer(p).is_some(), "{p} must resolve with serde_json");
            }
        }
        for bad in ["", "a..b", "/", "a[*", "a[0]x"] {
            assert!(FieldPath::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn pointer_helpers() {
        let mut p = String::new();
        push_key(&mut p, "a/b");
        push_key(&mut p, "c~");
        push_index(&mut p, 3);
        assert_eq!(p, "/a~1b/c~0/3");
        assert_eq!(split_last("/a~1b/c~0"), Some(("/a~1b", "c~".to_owned())));
        assert_eq!(split_last(""), None);
    }
}
