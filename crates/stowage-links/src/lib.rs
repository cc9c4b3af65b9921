//! Signed, expiring, scope-bound link tokens: the only crate that sees signing keys.
//!
//! A link to an artifact is `<public_url>/artifacts/<id>?token=<token>`; an upload slot is
//! `<public_url>/uploads/<slot>?token=<token>`. The token is a bearer credential that says
//! *what* (artifact id or slot), *how* (read or write), *whose* (the owner), *until when*, and
//! *which key* signed it, authenticated with HMAC-SHA256.
//!
//! Two forms. Read links are compact ([`compact`]): about 40 characters, the owner bound by
//! the MAC but not carried (the verifier tries the owners the store says hold the artifact),
//! so a link a model reads costs few tokens. Upload links, and read links minted by earlier
//! versions, are `v1` tokens ([`token`]) that carry all three owner ids in a small payload.
//!
//! - [`KeyRing`] holds one or more keys: the first signs, all verify (rotation). With no key
//!   configured, [`KeyRing::load_or_create`] keeps a random key in the store directory.
//! - [`KeyRing::mint`] makes a token, [`KeyRing::verify`] checks one in constant time and
//!   returns its [`Claims`], or a [`TokenError`] that maps onto the wire codes.
//!
//! Tokens carry ids only: never a filename, a prompt or any other user content.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod compact;
mod config;
mod keys;
mod token;

pub use compact::{COMPACT_PREFIX, is_compact};
pub use config::{KeySource, LinksConfig, LinksConfigError, MAX_TTL, MIN_TTL, ResourceLinkUri};
pub use keys::{KEY_FILE_NAME, KeyError, KeyRing};
pub use token::{Claims, Operation, TOKEN_PREFIX, TokenError};

/// The download URL of an artifact for a token: `<base>/artifacts/<id>?token=<token>`.
pub fn artifact_url(public_url: &str, id: &stowage_core::ArtifactId, token: &str) -> String {
    format!("{}/artifacts/{id}?token={token}", public_url.trim_end_matches('/'))
}

/// The upload URL of a slot for a token: `<base>/uploads/<slot>?token=<token>`.
pub fn upload_url(public_url: &str, slot: &str, token: &str) -> String {
    format!("{}/uploads/{slot}?token={token}", public_url.trim_end_matches('/'))
}

/// A link with its expiry, as handed to people and tools.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SignedLink {
    /// The full URL, token included.
    pub url: String,
    /// Unix seconds.
    pub expires_at: u64,
}

impl SignedLink {
    /// The expiry as RFC 3339 (`2026-11-23T18:29:55Z`), as results and tools show it.
    pub fn expires_rfc3339(&self) -> String {
        i64::try_from(self.expires_at)
            .ok()
            .and_then(|s| time::OffsetDateTime::from_unix_timestamp(s).ok())
            .and_then(|t| t.format(&time::format_description::well_known::Rfc3339).ok())
            .unwrap_or_default()
    }
}

/// Where a signer's links point: one base URL, or one asked for at each mint.
enum Base {
    Fixed(String),
    Dynamic(BaseUrl),
}

/// A base URL asked for at each mint (see [`LinkSigner::with_base`]).
pub type BaseUrl = std::sync::Arc<dyn Fn() -> String + Send + Sync>;

/// Mints links: a key ring plus where links point and how long they live.
pub struct LinkSigner {
    ring: KeyRing,
    base: Base,
    ttl: std::time::Duration,
}

impl std::fmt::Debug for LinkSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // A dynamic base is not asked here: asking may do work (start a server).
        let base = match &self.base {
            Base::Fixed(url) => url.as_str(),
            Base::Dynamic(_) => "(asked at each mint)",
        };
        f.debug_struct("LinkSigner").field("ring", &self.ring).field("public_url", &base).field("ttl", &self.ttl).finish()
    }
}

impl LinkSigner {
    /// A signer with `ring`'s newest key, `config`'s public URL and TTL.
    pub fn new(ring: KeyRing, config: &LinksConfig) -> Self {
        LinkSigner { ring, base: Base::Fixed(config.public_url.trim_end_matches('/').to_owned()), ttl: config.ttl }
    }

    /// A signer whose links point wherever `base` says at the moment each is minted (a server
    /// that may move: a stdio gateway's link server, started again on another port when the
    /// one before it died). `base` runs on every mint, so it must be quick when nothing moved.
    pub fn with_base(ring: KeyRing, ttl: std::time::Duration, base: BaseUrl) -> Self {
        LinkSigner { ring, base: Base::Dynamic(base), ttl }
    }

    /// The key ring (verifiers share it).
    pub fn ring(&self) -> &KeyRing {
        &self.ring
    }

    /// The base URL links are built on now, without a trailing `/`.
    pub fn public_url(&self) -> String {
        match &self.base {
            Base::Fixed(url) => url.clone(),
            Base::Dynamic(f) => f().trim_end_matches('/').to_owned(),
        }
    }

    /// A read link to `id` for `owner`, valid for `ttl` (default: the configured TTL) from `now`.
    pub fn artifact_link(
        &self,
        id: &stowage_core::ArtifactId,
        owner: &stowage_core::Owner,
        now: u64,
        ttl: Option<std::time::Duration>,
    ) -> SignedLink {
        self.artifact_link_until(id, owner, now + ttl.unwrap_or(self.ttl).as_secs())
    }

    /// A read link to `id` for `owner` that expires at `expires_at` (Unix seconds). Callers
    /// use it to cap a link at the artifact's own expiry.
    pub fn artifact_link_until(&self, id: &stowage_core::ArtifactId, owner: &stowage_core::Owner, expires_at: u64) -> SignedLink {
        let token = self.ring.mint_compact(id.as_str(), owner, expires_at);
        SignedLink { url: artifact_url(&self.public_url(), id, &token), expires_at }
    }

    /// A read link to an artifact for its own owner, valid for `ttl` (default: the configured
    /// TTL) but never past the artifact's own expiry: a link must not outlive what it names.
    pub fn link_for(&self, artifact: &stowage_core::ArtifactRef, now: u64, ttl: Option<std::time::Duration>) -> SignedLink {
        let mut until = now + ttl.unwrap_or(self.ttl).as_secs();
        if let Some(exp) = artifact.expires_at {
            until = until.min(exp.unix_timestamp().max(0) as u64);
        }
        self.artifact_link_until(&artifact.id, &artifact.scope.owner(), until)
    }

    /// The configured link lifetime.
    pub fn ttl(&self) -> std::time::Duration {
        self.ttl
    }

    /// A write-only link to upload slot `slot` for `owner`.
    pub fn upload_link(&self, slot: &str, owner: &stowage_core::Owner, now: u64, ttl: Option<std::time::Duration>) -> SignedLink {
        let expires_at = now + ttl.unwrap_or(self.ttl).as_secs();
        let token = self.ring.mint(Operation::Write, slot, owner, expires_at);
        SignedLink { url: upload_url(&self.public_url(), slot, &token), expires_at }
    }
}

/// Unix seconds now; the clock every link check uses unless a test injects its own.
pub fn unix_now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}
