//! One module per subcommand; each exposes its clap arguments and a `run`.
pub(crate) mod agent;
pub(crate) mod artifacts;
pub(crate) mod check_config;
pub(crate) mod demo;
pub(crate) mod links;
pub(crate) mod serve;
pub(crate) mod sign_url;
pub(crate) mod transform;

/// The owner flags of commands that store, or look up, one owner's artifacts.
///
/// Without `--user` (and `--tenant`) the owner is the local user, [`stowage_mcp::LOCAL_USER`]:
/// the owner a gateway without `[auth]` gives every client, so what `stowage artifacts put`
/// stores is what the model (`artifact_read`, `artifact_url`) and the playground reach. See
/// docs/hosts.md, "Who owns an artifact".
// Clap prints these comments as --help, where `[auth]` is a stowage.toml section and a URL is
// an example to type, not a link: rustdoc's link checks do not apply to them.
#[allow(rustdoc::broken_intra_doc_links)]
#[derive(Debug, Clone, Default, clap::Args)]
pub(crate) struct OwnerArgs {
    /// Tenant id of the owner.
    #[arg(long)]
    pub tenant: Option<String>,
    /// User id of the owner (default: `local`, the user of a gateway without [auth]).
    #[arg(long)]
    pub user: Option<String>,
    /// Session id of the owner.
    #[arg(long)]
    pub session: Option<String>,
}

impl OwnerArgs {
    pub(crate) fn is_set(&self) -> bool {
        self.tenant.is_some() || self.user.is_some() || self.session.is_some()
    }

    /// The owner's scope: the flags given, with the local user when neither `--user` nor
    /// `--tenant` names another owner.
    pub(crate) fn scope(self, trace_id: Option<String>) -> stowage_core::ArtifactScope {
        let user = self.user.or_else(|| self.tenant.is_none().then(|| stowage_mcp::LOCAL_USER.to_owned()));
        stowage_core::ArtifactScope { tenant_id: self.tenant, user_id: user, session_id: self.session, trace_id }
    }
}

/// The scope of what a command stores for the person running it: the local user's, as a
/// gateway without `[auth]` stores for its clients (`session` and `trace` for grouping).
pub(crate) fn local_scope(session: Option<String>, trace: Option<String>) -> stowage_core::ArtifactScope {
    OwnerArgs { session, ..Default::default() }.scope(trace)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_a_user_the_owner_is_the_gateways_local_user() {
        let s = OwnerArgs::default().scope(None);
        assert_eq!((s.tenant_id, s.user_id.as_deref()), (None, Some("local")));
        let s = OwnerArgs { session: Some("s1".into()), ..Default::default() }.scope(Some("t".into()));
        assert_eq!((s.user_id.as_deref(), s.session_id.as_deref(), s.trace_id.as_deref()), (Some("local"), Some("s1"), Some("t")));
        let s = OwnerArgs { user: Some("key:alice".into()), ..Default::default() }.scope(None);
        assert_eq!(s.user_id.as_deref(), Some("key:alice"));
        let s = OwnerArgs { tenant: Some("acme".into()), ..Default::default() }.scope(None);
        assert_eq!((s.tenant_id.as_deref(), s.user_id), (Some("acme"), None), "a tenant alone names its own owner");
        assert_eq!(local_scope(None, None).user_id.as_deref(), Some(stowage_mcp::LOCAL_USER));
    }
}
