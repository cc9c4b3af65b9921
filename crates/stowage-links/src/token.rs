//! The token format: `v1.<key id>.<payload>.<mac>`, payload and MAC unpadded base64url.
//!
//! The key id travels in clear (it is `[A-Za-z0-9_-]`, so it cannot contain the separator)
//! so the verifier can pick the key without decoding anything. The payload is a small JSON
//! object with one-letter keys (`o` operation, `a` artifact id or slot, `t`/`u`/`s` owner
//! ids, `e` expiry in Unix seconds); the MAC is HMAC-SHA256 over `<key id>.<payload>` as
//! sent, so verification never decodes or parses anything untrusted before the signature
//! has been checked. Verification order matters for what leaks: shape,
//! then key, then MAC (constant time), and only then expiry, operation and target, so an
//! attacker learns nothing from a forged token but "forbidden".

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use serde::{Deserialize, Serialize};
use stowage_core::Owner;

/// Every token starts with this; anything else is "not a token" (`bad_request`).
pub const TOKEN_PREFIX: &str = "v1.";

/// What a token allows. A read token cannot write and a write token cannot read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operation {
    /// Download an artifact.
    Read,
    /// Upload into a slot.
    Write,
}

impl Operation {
    fn code(self) -> &'static str {
        match self {
            Operation::Read => "r",
            Operation::Write => "w",
        }
    }
}

/// What a verified token says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claims {
    /// The id of the key that signed it.
    pub key_id: String,
    /// What it allows.
    pub operation: Operation,
    /// The artifact id (read) or upload slot id (write).
    pub target: String,
    /// Whose artifact or slot it is.
    pub owner: Owner,
    /// Unix seconds after which the token is refused.
    pub expires_at: u64,
}

/// Why a token was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// No `token` parameter.
    #[error("missing token: add ?token=… from a fresh link")]
    Missing,
    /// Not in either token format.
    #[error("not a link token")]
    NotAToken,
    /// A bad MAC, an unknown key, or a token for another target, operation or owner: all
    /// one answer, so nothing is learnt from trying.
    #[error("token is not valid for this artifact")]
    Forbidden,
    /// A valid token past its expiry.
    #[error("link expired; ask for a fresh link")]
    Expired {
        /// When it expired (Unix seconds).
        expired_at: u64,
    },
}

impl TokenError {
    /// The stable wire code, as in every other refusal (`bad_request`, `artifact_forbidden`, …).
    pub fn code(&self) -> stowage_core::ErrorCode {
        use stowage_core::ErrorCode;
        match self {
            TokenError::NotAToken => ErrorCode::BadRequest,
            TokenError::Missing | TokenError::Forbidden => ErrorCode::ArtifactForbidden,
            TokenError::Expired { .. } => ErrorCode::ArtifactUrlExpired,
        }
    }
}

#[derive(Serialize)]
struct Payload<'a> {
    o: &'a str,
    a: &'a str,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    t: Option<&'a str>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    u: Option<&'a str>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    s: Option<&'a str>,
    e: u64,
}

/// The decoding twin of [`Payload`]: owned strings, because ids may contain characters that
/// JSON escapes and a borrowed `&str` cannot hold an unescaped copy.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PayloadIn {
    o: String,
    a: String,
    #[serde(default)]
    t: Option<String>,
    #[serde(default)]
    u: Option<String>,
    #[serde(default)]
    s: Option<String>,
    e: u64,
}

/// Encodes claims; `sign` computes the MAC over the encoded payload.
pub(crate) fn encode(claims: &Claims, sign: impl FnOnce(&[u8]) -> [u8; 32]) -> String {
    let payload = Payload {
        o: claims.operation.code(),
        a: &claims.target,
        t: claims.owner.tenant_id.as_deref(),
        u: claims.owner.user_id.as_deref(),
        s: claims.owner.session_id.as_deref(),
        e: claims.expires_at,
    };
    // Serialising a struct of strings and an integer cannot fail.
    let json = serde_json::to_vec(&payload).expect("payload serialises");
    let mut token = String::with_capacity(TOKEN_PREFIX.len() + json.len() * 4 / 3 + 48);
    token.push_str(TOKEN_PREFIX);
    token.push_str(&claims.key_id);
    token.push('.');
    B64.encode_string(&json, &mut token);
    let mac = sign(&token.as_bytes()[TOKEN_PREFIX.len()..]);
    token.push('.');
    B64.encode_string(mac, &mut token);
    token
}

/// The parts of a token before its MAC is checked.
pub(crate) struct Unverified<'t> {
    pub key_id: &'t str,
    /// `<key id>.<payload>`: the bytes the MAC covers.
    pub signed: &'t [u8],
    pub encoded_payload: &'t str,
    pub mac: [u8; 32],
}

pub(crate) fn split(token: &str) -> Result<Unverified<'_>, TokenError> {
    let rest = token.strip_prefix(TOKEN_PREFIX).ok_or(TokenError::NotAToken)?;
    // From here on it claims to be a token, so every defect is "forbidden": a truncated or
    // altered token is an invalid credential, not a malformed request.
    let (signed, mac_b64) = rest.rsplit_once('.').ok_or(TokenError::Forbidden)?;
    let (key_id, encoded_payload) = signed.split_once('.').ok_or(TokenError::Forbidden)?;
    let mut mac = [0u8; 32];
    match B64.decode_slice(mac_b64, &mut mac) {
        Ok(32) => {}
        _ => return Err(TokenError::Forbidden),
    }
    Ok(Unverified { key_id, signed: signed.as_bytes(), encoded_payload, mac })
}

/// Decodes a payload whose MAC has been verified.
pub(crate) fn claims(key_id: &str, encoded: &str) -> Result<Claims, TokenError> {
    let json = B64.decode(encoded).map_err(|_| TokenError::Forbidden)?;
    let p: PayloadIn = serde_json::from_slice(&json).map_err(|_| TokenError::Forbidden)?;
    let operation = match p.o.as_str() {
        "r" => Operation::Read,
        "w" => Operation::Write,
        _ => return Err(TokenError::Forbidden),
    };
    Ok(Claims {
        key_id: key_id.to_owned(),
        operation,
        target: p.a,
        owner: Owner { tenant_id: p.t, user_id: p.u, session_id: p.s },
        expires_at: p.e,
    })
}
