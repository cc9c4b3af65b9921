//! The compact read token: `c.<key id>.<expiry>.<mac>`, about 40 characters, so a download link
//! a model reads costs few tokens (a `v1` token with its owner ids in a JSON payload is ~250).
//!
//! It carries no owner: the MAC covers the operation, the artifact id, the owner's tenant and
//! user ids and the expiry, and the verifier tries it against the owners that hold the artifact
//! (the store knows them). Nothing else is weakened: the MAC is HMAC-SHA256 truncated to 128
//! bits (RFC 2104's floor of half the hash length), compared in constant time, and checked
//! before the expiry, so a forged, tampered, truncated or swapped token learns nothing but
//! "forbidden". The expiry is Unix seconds in base 36.
//!
//! The session is deliberately not bound: an owner is (tenant, user) under the store's default
//! isolation, the same bytes under one user are the same artifact whichever session stored
//! them, and a record's session can change when a later session stores the same content.

use hmac::Mac;
use stowage_core::Owner;

use crate::token::TokenError;

/// Every compact token starts with this.
pub const COMPACT_PREFIX: &str = "c.";
/// Bytes of the MAC a compact token carries (128 bits).
const MAC_LEN: usize = 16;

/// Whether `token` is a compact one (else a `v1` token, or not a token).
pub fn is_compact(token: &str) -> bool {
    token.starts_with(COMPACT_PREFIX)
}

/// What the MAC covers: operation (always read), target, tenant, user, expiry; each owner id
/// marked present or absent so `None` and `""` differ, and separated by a byte no id contains.
pub(crate) fn signed_bytes(target: &str, owner: &Owner, expires_at: u64) -> Vec<u8> {
    let id = |v: &Option<String>| match v {
        Some(s) => format!("1{s}"),
        None => "0".to_owned(),
    };
    format!("c\u{1f}r\u{1f}{target}\u{1f}{}\u{1f}{}\u{1f}{expires_at}", id(&owner.tenant_id), id(&owner.user_id)).into_bytes()
}

/// The token for a MAC computed over [`signed_bytes`].
pub(crate) fn encode(key_id: &str, expires_at: u64, mac: &[u8]) -> String {
    use base64::Engine as _;
    let mut t = format!("{COMPACT_PREFIX}{key_id}.{}.", base36(expires_at));
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode_string(&mac[..MAC_LEN], &mut t);
    t
}

/// The parts of a compact token before its MAC is checked.
pub(crate) struct Parts<'t> {
    pub key_id: &'t str,
    pub expires_at: u64,
    pub mac: [u8; MAC_LEN],
}

pub(crate) fn split(token: &str) -> Result<Parts<'_>, TokenError> {
    use base64::Engine as _;
    let rest = token.strip_prefix(COMPACT_PREFIX).ok_or(TokenError::NotAToken)?;
    // From here on it claims to be a token: every defect is "forbidden".
    let mut it = rest.split('.');
    let (Some(key_id), Some(exp), Some(mac_b64), None) = (it.next(), it.next(), it.next(), it.next()) else {
        return Err(TokenError::Forbidden);
    };
    let expires_at = u64::from_str_radix(exp, 36).map_err(|_| TokenError::Forbidden)?;
    if exp != base36(expires_at) {
        // One canonical spelling (no leading zeros, lowercase): a token is never valid twice.
        return Err(TokenError::Forbidden);
    }
    let mut mac = [0u8; MAC_LEN];
    match base64::engine::general_purpose::URL_SAFE_NO_PAD.decode_slice(mac_b64, &mut mac) {
        Ok(MAC_LEN) if mac_b64.len() == 22 => {}
        _ => return Err(TokenError::Forbidden),
    }
    Ok(Parts { key_id, expires_at, mac })
}

/// Checks a MAC prepared over [`signed_bytes`] against the token's, in constant time.
pub(crate) fn matches<M: Mac>(mac: M, parts: &Parts<'_>) -> bool {
    mac.verify_truncated_left(&parts.mac).is_ok()
}

fn base36(mut n: u64) -> String {
    const DIGITS: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    if n == 0 {
        return "0".to_owned();
    }
    let mut out = Vec::new();
    while n > 0 {
        out.push(DIGITS[(n % 36) as usize]);
        n /= 36;
    }
    out.reverse();
    String::from_utf8(out).expect("ascii digits")
}

/// [`base36`], for the key ring's tests.
#[cfg(test)]
pub(crate) fn tests_base36(n: u64) -> String {
    base36(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expiries_have_one_spelling() {
        assert_eq!(base36(0), "0");
        assert_eq!(base36(1_795_000_000), "top2v4");
        assert_eq!(u64::from_str_radix("top2v4", 36).unwrap(), 1_795_000_000);
        let mac = [7u8; 32];
        let t = encode("k1", 1_795_000_000, &mac);
        assert!(split(&t).is_ok());
        assert!(matches!(split(&t.replace(".top2v4.", ".0top2v4.")), Err(TokenError::Forbidden)));
        assert!(matches!(split(&t.replace(".top2v4.", ".TOP2V4.")), Err(TokenError::Forbidden)));
    }
}
