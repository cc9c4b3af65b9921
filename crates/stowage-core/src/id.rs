//! Artifact identifiers and the permanent `artifact://` URI form.
//!
//! Ids are content-addressed (`{namespace}_{first 16 hex digits of sha256}`), so the same bytes
//! stored twice by one owner dedupe to one record. Identity is *not* access: the same id can
//! exist under several owners, each with its own record (see [`crate::Owner`]). 16 hex digits
//! (64 bits) keep ids and refs short — a ref is read by a model on every turn — while an
//! accidental collision needs billions of artifacts under one owner; stores still compare the
//! full sha256 and refuse a collision rather than alias two contents.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// The URI scheme of permanent artifact references: `artifact://<id>`.
pub const ARTIFACT_URI_SCHEME: &str = "artifact://";

/// How many hex digits of the sha256 an id carries.
pub const ID_HASH_HEX_LEN: usize = 16;

const MAX_ID_LEN: usize = 128;
const MAX_NAMESPACE_LEN: usize = 48;
const DEFAULT_NAMESPACE: &str = "art";

/// Why a string is not a valid artifact id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    /// The empty string.
    #[error("artifact id is empty")]
    Empty,
    /// Longer than 128 characters.
    #[error("artifact id is longer than {MAX_ID_LEN} characters")]
    TooLong,
    /// A character that is not safe in paths, URLs and logs.
    #[error("artifact id {0:?} contains a character outside [A-Za-z0-9_.-]")]
    BadChar(String),
    /// A string parsed as an `artifact://` URI that is not one.
    #[error("{0:?} is not an artifact:// uri")]
    NotAUri(String),
}

/// A validated artifact identifier.
///
/// Only `[A-Za-z0-9_.-]` is allowed, so an id is safe in a URL path, a file name and a log line
/// without escaping.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct ArtifactId(String);

impl ArtifactId {
    /// Builds the content-addressed id for bytes whose sha256 (lowercase hex) is `sha256_hex`.
    ///
    /// The namespace is sanitised (characters outside the id alphabet become `-`, and it is cut
    /// to 48 characters); an empty namespace becomes `art`.
    pub fn from_content(namespace: Option<&str>, sha256_hex: &str) -> Self {
        let ns: String =
            namespace.unwrap_or(DEFAULT_NAMESPACE).chars().take(MAX_NAMESPACE_LEN).map(|c| if is_id_char(c) { c } else { '-' }).collect();
        let ns = if ns.is_empty() { DEFAULT_NAMESPACE } else { &ns };
        let prefix = &sha256_hex[..ID_HASH_HEX_LEN.min(sha256_hex.len())];
        ArtifactId(format!("{ns}_{prefix}"))
    }

    /// Parses either a bare id or an `artifact://<id>` URI.
    pub fn parse_loose(s: &str) -> Result<Self, IdError> {
        match s.strip_prefix(ARTIFACT_URI_SCHEME) {
            Some(rest) => rest.parse(),
            None => s.parse(),
        }
    }

    /// Parses only the `artifact://<id>` form.
    pub fn from_uri(uri: &str) -> Result<Self, IdError> {
        uri.strip_prefix(ARTIFACT_URI_SCHEME).ok_or_else(|| IdError::NotAUri(uri.to_owned()))?.parse()
    }

    /// The permanent URI of this artifact.
    pub fn uri(&self) -> String {
        format!("{ARTIFACT_URI_SCHEME}{}", self.0)
    }

    /// The id as text (`{namespace}_{16 hex}`).
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

fn is_id_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')
}

impl FromStr for ArtifactId {
    type Err = IdError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.is_empty() {
            return Err(IdError::Empty);
        }
        if s.len() > MAX_ID_LEN {
            return Err(IdError::TooLong);
        }
        // "." and ".." are made of id characters but would be path traversal in a file store.
        if !s.chars().all(is_id_char) || s.chars().all(|c| c == '.') {
            return Err(IdError::BadChar(s.to_owned()));
        }
        Ok(ArtifactId(s.to_owned()))
    }
}

impl TryFrom<String> for ArtifactId {
    type Error = IdError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl From<ArtifactId> for String {
    fn from(id: ArtifactId) -> String {
        id.0
    }
}

impl fmt::Display for ArtifactId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for ArtifactId {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHA: &str = "3f2a9c0d1e4b5a6978877665544332211000ffeeddccbbaa9988776655443322";

    #[test]
    fn content_ids() {
        let id = ArtifactId::from_content(Some("tableau"), SHA);
        assert_eq!(id.as_str(), "tableau_3f2a9c0d1e4b5a69");
        assert_eq!(id.uri(), "artifact://tableau_3f2a9c0d1e4b5a69");
        assert_eq!(ArtifactId::from_content(None, SHA).as_str(), "art_3f2a9c0d1e4b5a69");
        assert_eq!(ArtifactId::from_content(Some(""), SHA).as_str(), "art_3f2a9c0d1e4b5a69");
        // Namespaces come from tool names, which may hold '/', spaces or unicode.
        assert_eq!(ArtifactId::from_content(Some("srv/get view"), SHA).as_str(), "srv-get-view_3f2a9c0d1e4b5a69");
    }

    #[test]
    fn parsing() {
        assert!("abc_123".parse::<ArtifactId>().is_ok());
        for bad in ["", "..", ".", "a/b", "a b", "é", &"x".repeat(129)] {
            assert!(bad.parse::<ArtifactId>().is_err(), "{bad:?} should be refused");
        }
        assert_eq!(ArtifactId::parse_loose("artifact://abc").unwrap().as_str(), "abc");
        assert_eq!(ArtifactId::parse_loose("abc").unwrap().as_str(), "abc");
        assert!(ArtifactId::from_uri("abc").is_err());
        assert!(ArtifactId::from_uri("artifact://a/b").is_err());
    }

    #[test]
    fn serde_refuses_bad_ids() {
        assert!(serde_json::from_str::<ArtifactId>("\"../etc\"").is_err());
        let id: ArtifactId = serde_json::from_str("\"ok_1\"").unwrap();
        assert_eq!(serde_json::to_string(&id).unwrap(), "\"ok_1\"");
    }
}
