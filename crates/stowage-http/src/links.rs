//! [`LinkService`]: fresh signed links for an owner's own artifacts.
//!
//! The artifact outlives its links, so callers (the gateway's `artifact_url` tool) can ask
//! for a new one at any time while the artifact lives. The lookup runs *as the caller's
//! owner*: another owner's id, a guessed id and an expired artifact all give the same
//! `artifact_not_found`.

use std::sync::Arc;

use stowage_core::{ArtifactId, ArtifactRef, ArtifactScope};
use stowage_links::{LinkSigner, SignedLink};
use stowage_store::{Access, ArtifactStore};

use crate::ApiError;

#[derive(Clone)]
pub struct LinkService {
    store: Arc<dyn ArtifactStore>,
    signer: Arc<LinkSigner>,
    clock: fn() -> u64,
}

impl LinkService {
    pub fn new(store: Arc<dyn ArtifactStore>, signer: Arc<LinkSigner>) -> Self {
        LinkService { store, signer, clock: stowage_links::unix_now }
    }

    /// Replaces the clock (Unix seconds), for tests.
    pub fn with_clock(mut self, clock: fn() -> u64) -> Self {
        self.clock = clock;
        self
    }

    pub fn signer(&self) -> &Arc<LinkSigner> {
        &self.signer
    }

    /// A fresh read link to `id` (bare or `artifact://`) for the owner of `scope`.
    pub async fn fresh_link(&self, scope: &ArtifactScope, id: &str) -> Result<(ArtifactRef, SignedLink), ApiError> {
        let id = ArtifactId::parse_loose(id.trim()).map_err(|_| ApiError::not_found())?;
        let meta = self.store.meta(&Access::owner_of(scope), &id).await?;
        let link = self.signer.link_for(&meta, (self.clock)(), None);
        Ok((meta, link))
    }

    /// A link for an artifact the caller already holds a reference to (just stored for it).
    pub fn link_for(&self, artifact: &ArtifactRef) -> SignedLink {
        self.signer.link_for(artifact, (self.clock)(), None)
    }
}
