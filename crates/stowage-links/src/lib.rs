//! Signed, expiring, scope-bound link tokens: the only crate that sees signing keys.
//!
//! A link to an artifact is `<public_url>/artifacts/<id>?token=<token>`; an upload slot is
//! `<public_url>/uploads/<slot>?token=<token>`. The token is a bearer credential that says
//! *what* (artifact id or slot), *how* (read or write), *whose* (the owner: tenant, user,
//! session ids), *until when*, and *which key* signed it, authenticated with HMAC-SHA256.
//!
//! - [`KeyRing`] holds one or more keys: the first signs, all verify (rotation). With no key
//!   configured, [`KeyRing::load_or_create`] keeps a random key in the store directory.
//! - [`KeyRing::mint`] makes a token, [`KeyRing::verify`] checks one in constant time and
//!   returns its [`Claims`], or a [`TokenError`] that maps onto the wire codes.
//!
//! Tokens carry ids only: never a filename, a prompt or any other user content.
#![forbid(unsafe_code)]

mod config;
mod keys;
mod token;

pub use config::{KeySource, LinksConfig, MAX_TTL, MIN_TTL};
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
