//! Who an artifact belongs to: [`ArtifactScope`] and the isolation unit [`Owner`].
//!
//! Access is decided by the owner triple (tenant, user, session), compared exactly: a request
//! for another owner's artifact behaves as if the artifact did not exist. The trace id is not
//! part of the owner: a trace is one run inside a session, so it groups artifacts for the
//! per-trace retention limits but does not wall them off from the rest of the session.

use serde::{Deserialize, Serialize};

/// Scoping information recorded with every artifact (seed RFC 7.2).
///
/// Serialises with absent fields omitted, so the common single-session scope is
/// `{"session_id":"…"}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArtifactScope {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
}

impl ArtifactScope {
    /// A scope for one session and nothing else.
    pub fn session(session_id: impl Into<String>) -> Self {
        ArtifactScope { session_id: Some(session_id.into()), ..Default::default() }
    }

    pub fn with_tenant(mut self, tenant_id: impl Into<String>) -> Self {
        self.tenant_id = Some(tenant_id.into());
        self
    }

    pub fn with_user(mut self, user_id: impl Into<String>) -> Self {
        self.user_id = Some(user_id.into());
        self
    }

    pub fn with_trace(mut self, trace_id: impl Into<String>) -> Self {
        self.trace_id = Some(trace_id.into());
        self
    }

    /// The isolation unit this scope belongs to.
    pub fn owner(&self) -> Owner {
        Owner { tenant_id: self.tenant_id.clone(), user_id: self.user_id.clone(), session_id: self.session_id.clone() }
    }
}

/// The (tenant, user, session) triple that owns artifacts. Two scopes with equal owners see
/// the same artifacts; any difference, including one side being unset, means no access.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Owner {
    pub tenant_id: Option<String>,
    pub user_id: Option<String>,
    pub session_id: Option<String>,
}

impl Owner {
    /// A single string that is equal for equal owners and different otherwise, for use as an
    /// index key. Each part is length-prefixed so that no choice of ids can make two different
    /// owners collide (`("a:b", None)` vs `("a", "b")`), and `None` differs from `Some("")`.
    pub fn key(&self) -> String {
        let mut key = String::new();
        for part in [&self.tenant_id, &self.user_id, &self.session_id] {
            match part {
                None => key.push('-'),
                Some(s) => {
                    key.push_str(&s.len().to_string());
                    key.push(':');
                    key.push_str(s);
                }
            }
            key.push('|');
        }
        key
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_keys_are_injective() {
        let owners = [
            Owner::default(),
            Owner { session_id: Some(String::new()), ..Default::default() },
            Owner { session_id: Some("a".into()), ..Default::default() },
            Owner { user_id: Some("a".into()), ..Default::default() },
            Owner { tenant_id: Some("a|".into()), user_id: Some("b".into()), ..Default::default() },
            Owner { tenant_id: Some("a".into()), user_id: Some("|b".into()), ..Default::default() },
            Owner { tenant_id: Some("1:a".into()), ..Default::default() },
        ];
        let keys: std::collections::HashSet<_> = owners.iter().map(Owner::key).collect();
        assert_eq!(keys.len(), owners.len());
    }

    #[test]
    fn trace_is_not_part_of_the_owner() {
        let a = ArtifactScope::session("s").with_trace("t1");
        let b = ArtifactScope::session("s").with_trace("t2");
        assert_eq!(a.owner(), b.owner());
        assert_ne!(ArtifactScope::session("s").owner(), ArtifactScope::session("s").with_user("u").owner());
    }

    #[test]
    fn json_shape() {
        let s = ArtifactScope::session("s1").with_trace("t1");
        assert_eq!(serde_json::to_string(&s).unwrap(), r#"{"session_id":"s1","trace_id":"t1"}"#);
        assert!(serde_json::from_str::<ArtifactScope>(r#"{"sesion_id":"x"}"#).is_err());
    }
}
