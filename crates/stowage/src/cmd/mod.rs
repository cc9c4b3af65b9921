//! One module per subcommand; each exposes its clap arguments and a `run`.
pub mod agent;
pub mod artifacts;
pub mod check_config;
pub mod demo;
pub mod serve;
pub mod sign_url;
pub mod transform;

/// The owner flags of commands that store, or look up, one owner's artifacts.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct OwnerArgs {
    /// Tenant id of the owner.
    #[arg(long)]
    pub tenant: Option<String>,
    /// User id of the owner.
    #[arg(long)]
    pub user: Option<String>,
    /// Session id of the owner.
    #[arg(long)]
    pub session: Option<String>,
}

impl OwnerArgs {
    pub fn is_set(&self) -> bool {
        self.tenant.is_some() || self.user.is_some() || self.session.is_some()
    }

    pub fn scope(self, trace_id: Option<String>) -> stowage_core::ArtifactScope {
        stowage_core::ArtifactScope { tenant_id: self.tenant, user_id: self.user, session_id: self.session, trace_id }
    }
}
