//! Who an artifact belongs to: [`ArtifactScope`], the [`Owner`] ids a request or a link
//! carries, and the [`Isolation`] that decides which of them a store compares.
//!
//! An artifact belongs to its tenant and user: by default ([`Isolation::User`]) access is
//! decided by (tenant, user), compared exactly, so the same user finds what it stored from any
//! of its sessions. A store built with [`Isolation::Session`] compares (tenant, user, session)
//! instead. Either way a request for another owner's artifact behaves as if the artifact did
//! not exist. The session and trace ids stay on every record whatever the isolation: they group
//! artifacts for listings and for the per-session and per-trace retention budgets.

use serde::{Deserialize, Serialize};

/// Scoping information recorded with every artifact: its owner ids and its grouping ids.
///
/// Serialises with absent fields omitted, so the common single-session scope is
/// `{"session_id":"…"}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArtifactScope {
    /// The tenant (an organisation); budgets nest under it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant_id: Option<String>,
    /// The user: with the tenant, the owner under `Isolation::User`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_id: Option<String>,
    /// The session (one client connection); part of the owner under `Isolation::Session`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// The trace (one agent run or request chain): recorded for grouping and budgets, never
    /// part of the owner.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
}

impl ArtifactScope {
    /// A scope for one session and nothing else.
    pub fn session(session_id: impl Into<String>) -> Self {
        ArtifactScope { session_id: Some(session_id.into()), ..Default::default() }
    }

    /// The scope with `tenant_id` set.
    pub fn with_tenant(mut self, tenant_id: impl Into<String>) -> Self {
        self.tenant_id = Some(tenant_id.into());
        self
    }

    /// The scope with `user_id` set.
    pub fn with_user(mut self, user_id: impl Into<String>) -> Self {
        self.user_id = Some(user_id.into());
        self
    }

    /// The scope with `trace_id` set.
    pub fn with_trace(mut self, trace_id: impl Into<String>) -> Self {
        self.trace_id = Some(trace_id.into());
        self
    }

    /// The owner ids of this scope (everything but the trace). Which of them decide access is
    /// the store's [`Isolation`].
    pub fn owner(&self) -> Owner {
        Owner { tenant_id: self.tenant_id.clone(), user_id: self.user_id.clone(), session_id: self.session_id.clone() }
    }
}

/// Which owner ids decide access to an artifact: a store-wide setting
/// (`[store] isolate_sessions` in `stowage.toml`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Isolation {
    /// (tenant, user): a user reaches its artifacts from every session. The default, because a
    /// session is often one stateless request and a user must find what it stored a request ago.
    #[default]
    User,
    /// (tenant, user, session): each session is walled off from the user's other sessions.
    Session,
}

impl Isolation {
    /// `Session` when `isolate_sessions` is set, `User` otherwise.
    pub fn from_isolate_sessions(isolate_sessions: bool) -> Self {
        if isolate_sessions { Isolation::Session } else { Isolation::User }
    }

    /// The name stores record with their data (`user` or `session`), so a store reopened under
    /// another isolation knows to re-key its records.
    pub fn as_str(self) -> &'static str {
        match self {
            Isolation::User => "user",
            Isolation::Session => "session",
        }
    }
}

impl std::str::FromStr for Isolation {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "user" => Ok(Isolation::User),
            "session" => Ok(Isolation::Session),
            other => Err(format!("unknown isolation {other:?} (want \"user\" or \"session\")")),
        }
    }
}

/// The (tenant, user, session) ids that a request, a link token or a record carries. Whether
/// two owners see the same artifacts depends on the store's [`Isolation`]: the ids it compares
/// must be equal, where an unset id differs from every set one.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Owner {
    /// The tenant, as in [`ArtifactScope::tenant_id`].
    pub tenant_id: Option<String>,
    /// The user, as in [`ArtifactScope::user_id`].
    pub user_id: Option<String>,
    /// The session, as in [`ArtifactScope::session_id`].
    pub session_id: Option<String>,
}

impl Owner {
    /// A single string that is equal for owners that share access under `isolation` and
    /// different otherwise, for use as an index key. Each part is length-prefixed so that no
    /// choice of ids can make two different owners collide (`("a:b", None)` vs `("a", "b")`),
    /// and `None` differs from `Some("")`. Under [`Isolation::Session`] the key is the one
    /// every store wrote before isolation became a setting.
    pub fn access_key(&self, isolation: Isolation) -> String {
        let session = match isolation {
            Isolation::User => None,
            Isolation::Session => Some(&self.session_id),
        };
        let mut key = String::new();
        for part in [&self.tenant_id, &self.user_id].into_iter().chain(session) {
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
        let keys: std::collections::HashSet<_> = owners.iter().map(|o| o.access_key(Isolation::Session)).collect();
        assert_eq!(keys.len(), owners.len());
        // The session-level key is the format stores wrote before isolation was a setting
        // (their index files hold it): it must never change.
        let old = Owner { tenant_id: Some("t".into()), user_id: None, session_id: Some("s1".into()) };
        assert_eq!(old.access_key(Isolation::Session), "1:t|-|2:s1|");
    }

    #[test]
    fn user_isolation_ignores_only_the_session() {
        let owner = |t: Option<&str>, u: Option<&str>, s: Option<&str>| Owner {
            tenant_id: t.map(str::to_owned),
            user_id: u.map(str::to_owned),
            session_id: s.map(str::to_owned),
        };
        let key = |o: &Owner| o.access_key(Isolation::User);
        assert_eq!(key(&owner(Some("t"), Some("u"), Some("a"))), key(&owner(Some("t"), Some("u"), Some("b"))));
        assert_eq!(key(&owner(Some("t"), Some("u"), Some("a"))), key(&owner(Some("t"), Some("u"), None)));
        assert_ne!(key(&owner(Some("t"), Some("u"), None)), key(&owner(Some("t"), Some("v"), None)));
        assert_ne!(key(&owner(Some("t"), Some("u"), None)), key(&owner(None, Some("u"), None)));
        assert_ne!(key(&owner(Some("t"), None, None)), key(&owner(Some("t"), Some(""), None)));
        // The two isolations never produce the same key for any owner, so a store can tell
        // which one wrote a key.
        let o = owner(Some("t"), Some("u"), None);
        assert_ne!(o.access_key(Isolation::User), o.access_key(Isolation::Session));
    }

    #[test]
    fn isolation_names_round_trip() {
        for i in [Isolation::User, Isolation::Session] {
            assert_eq!(i.as_str().parse::<Isolation>().unwrap(), i);
        }
        assert!("tenant".parse::<Isolation>().unwrap_err().contains("tenant"));
        assert_eq!(Isolation::from_isolate_sessions(true), Isolation::Session);
        assert_eq!(Isolation::default(), Isolation::from_isolate_sessions(false));
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
