//! [`LinkService`]: fresh signed links for an owner's own artifacts, and upload slots.
//!
//! The artifact outlives its links, so callers (the gateway's `artifact_url` tool) can ask
//! for a new one at any time while the artifact lives. The lookup runs *as the caller's
//! owner*: another owner's id, a guessed id and an expired artifact all give the same
//! `artifact_not_found`.
//!
//! Upload slots ([`LinkService::open_upload_slot`]) are where a tool writes an output blob
//! (blob chaining): the gateway opens one for the caller's scope and hands the tool a
//! write-only link; `PUT /uploads/{slot}` stores what arrives as an artifact of that scope. The
//! slot must live in the same [`SlotRegistry`] as the route, so a `LinkService` that can open
//! slots comes from [`crate::HttpState::link_service`].

use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use stowage_core::{ArtifactId, ArtifactRef, ArtifactScope, PutOptions};
use stowage_links::{LinkSigner, MAX_TTL, MIN_TTL, SignedLink};
use stowage_store::{Access, ArtifactStore};

use crate::upload::{Expected, Staged};
use crate::{ApiError, SlotRegistry, SlotSpec, SlotState};

/// Fresh links and upload slots for in-process callers (the gateway's tools), as the caller's
/// owner.
#[derive(Clone)]
pub struct LinkService {
    store: Arc<dyn ArtifactStore>,
    signer: Arc<LinkSigner>,
    /// `None` when built with [`LinkService::new`]: no route would ever see its slots.
    slots: Option<Arc<SlotRegistry>>,
    clock: fn() -> u64,
}

/// What an upload slot accepts, for [`LinkService::open_upload_slot`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SlotRequest {
    /// Largest accepted body, in bytes (at least 1; the store's own limits apply too).
    pub max_bytes: u64,
    /// Accepted media types (`image/png`, `image/*`, `*/*`); empty accepts anything. With a
    /// list, the upload must send a matching `Content-Type`.
    pub accept: Vec<String>,
    /// How long the slot and its link live (1 to 60 minutes); default: the links' TTL.
    pub ttl: Option<Duration>,
    /// Recorded as the artifact's filename.
    pub filename: Option<String>,
    /// The artifact id's namespace (`{namespace}_{sha256 prefix}`), usually the tool's name.
    pub namespace: Option<String>,
}

/// An open upload slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UploadSlot {
    /// The slot id, for [`LinkService::slot_state`].
    pub slot: String,
    /// The write-only link to `PUT` the bytes to; it expires with the slot. The artifact's
    /// id and `artifact://` URI exist only once the bytes have arrived (ids are content
    /// addresses): read them from [`SlotState::Done`].
    pub link: SignedLink,
}

impl LinkService {
    /// A service that mints read links only: [`LinkService::open_upload_slot`] refuses, because
    /// no upload route would share its slots. Use [`crate::HttpState::link_service`] to get one
    /// that can open slots.
    pub fn new(store: Arc<dyn ArtifactStore>, signer: Arc<LinkSigner>) -> Self {
        LinkService { store, signer, slots: None, clock: stowage_links::unix_now }
    }

    /// A service whose upload slots are the ones `slots` holds (what the routes read).
    pub(crate) fn with_slots(store: Arc<dyn ArtifactStore>, signer: Arc<LinkSigner>, slots: Arc<SlotRegistry>, clock: fn() -> u64) -> Self {
        LinkService { store, signer, slots: Some(slots), clock }
    }

    /// Replaces the clock (Unix seconds), for tests.
    pub fn with_clock(mut self, clock: fn() -> u64) -> Self {
        self.clock = clock;
        self
    }

    /// The signer links are minted with.
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

    /// Opens a single-use upload slot whose artifact will belong to `scope` (its owner ids,
    /// session and trace), and returns its id and write-only link. The link's token carries
    /// `scope`'s owner ids; only a token with exactly those ids can upload.
    pub fn open_upload_slot(&self, scope: &ArtifactScope, request: SlotRequest) -> Result<UploadSlot, ApiError> {
        self.open_slot(scope, request, None)
    }

    /// [`LinkService::open_upload_slot`] for an upload whose size and sha256 are declared up
    /// front: the PUT keeps the body aside (in a temporary file, only if it is exactly
    /// `expect`), and nothing reaches the store until the caller takes it with
    /// [`LinkService::take_staged`] and stores it. An uncommitted slot leaves nothing.
    pub fn open_staged_slot(&self, scope: &ArtifactScope, request: SlotRequest, expect: Expected) -> Result<UploadSlot, ApiError> {
        self.open_slot(scope, request, Some(expect))
    }

    fn open_slot(&self, scope: &ArtifactScope, request: SlotRequest, expect: Option<Expected>) -> Result<UploadSlot, ApiError> {
        let Some(slots) = &self.slots else {
            return Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                stowage_core::ErrorCode::ArtifactStorageFailed,
                "upload slots are not available: this link service shares no slot registry with the upload route",
            ));
        };
        let ttl = request.ttl.unwrap_or(self.signer.ttl());
        if !(MIN_TTL..=MAX_TTL).contains(&ttl) {
            return Err(ApiError::bad_request(format!("an upload slot lives 1m to 60m, not {}s", ttl.as_secs())));
        }
        if request.max_bytes == 0 {
            return Err(ApiError::bad_request("an upload slot must accept at least 1 byte (max_bytes)"));
        }
        let now = (self.clock)();
        let expires_at = now + ttl.as_secs();
        let owner = scope.owner();
        let mut put = PutOptions::scoped(scope.clone());
        put.filename = request.filename;
        put.namespace = request.namespace;
        let spec = SlotSpec { owner: owner.clone(), put, max_bytes: request.max_bytes, accept: request.accept, expires_at, expect };
        let slot = slots.create(spec, now);
        let link = self.signer.upload_link(&slot, &owner, now, Some(ttl));
        Ok(UploadSlot { slot, link })
    }

    /// Where a slot opened here is: open, being uploaded to, or done with the stored artifact.
    /// `None` for an unknown or expired slot (and for every slot of a service made with
    /// [`LinkService::new`]): a done slot is kept until its expiry, so read the artifact
    /// before then.
    pub fn slot_state(&self, slot: &str) -> Option<SlotState> {
        self.slots.as_ref()?.state(slot, (self.clock)())
    }

    /// Reads a slot's outcome and ends it (see [`SlotRegistry::close`]): an open slot takes no
    /// upload after this, so a tool cannot write an output its call already reported missing.
    pub fn close_slot(&self, slot: &str) -> Option<SlotState> {
        self.slots.as_ref()?.close(slot, (self.clock)())
    }

    /// A staged slot's bytes ([`LinkService::open_staged_slot`]), ending the slot; `None`, and
    /// the slot left as it is, unless exactly the expected bytes are waiting in it.
    pub fn take_staged(&self, slot: &str) -> Option<Staged> {
        self.slots.as_ref()?.take_staged(slot, (self.clock)())
    }

    /// Ends a slot whatever its state: staged bytes are dropped, and an upload still running
    /// stores nothing.
    pub fn discard_slot(&self, slot: &str) {
        if let Some(slots) = &self.slots {
            slots.discard(slot);
        }
    }
}

/// Where every link a gateway hands out is minted: one service for tools and one for people,
/// told apart by the type so a caller says whom a link is for.
///
/// They differ in where the link points. Tools get links on this gateway's own listener, where
/// its upload slots live and which is up for as long as the call that uses them. People get
/// links that outlive the session: a stdio gateway's are served by the store's link server,
/// which stays when the host quits. Over HTTP the two are the same service.
#[derive(Clone)]
pub struct Links {
    tools: LinkService,
    people: Option<LinkService>,
}

impl Links {
    /// One service for tools and people alike (an HTTP gateway's own listener serves both).
    pub fn new(tools: LinkService) -> Self {
        Links { tools, people: None }
    }

    /// People's links come from `people` (served elsewhere than the tools' listener).
    pub fn with_people(mut self, people: LinkService) -> Self {
        self.people = Some(people);
        self
    }

    /// Links for tools during a call: blob chaining's downloads and upload slots.
    pub fn for_tools(&self) -> &LinkService {
        &self.tools
    }

    /// Links handed to people: `artifact_url`, artifact resources, `resource_link`s.
    pub fn for_people(&self) -> &LinkService {
        self.people.as_ref().unwrap_or(&self.tools)
    }
}
