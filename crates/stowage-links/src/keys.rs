//! [`KeyRing`]: signing keys, rotation, and the embedded default key file.

use std::io::Write;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;
use stowage_core::Owner;

use crate::compact;
use crate::token::{self, Claims, Operation, TokenError};

type HmacSha256 = Hmac<Sha256>;

/// The embedded default key's file, inside the store directory.
pub const KEY_FILE_NAME: &str = "links.key";

/// Shortest secret accepted: 32 bytes, the HMAC-SHA256 block-size recommendation's floor.
const MIN_SECRET_LEN: usize = 32;

/// What a key's fingerprint is the MAC of (never a token's bytes: no token starts so).
const FINGERPRINT_LABEL: &[u8] = b"stowage link-signing key fingerprint v1";

/// Why a key ring cannot be built or loaded.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// A ring needs at least one key.
    #[error("no signing key configured")]
    Empty,
    /// A secret shorter than 32 bytes.
    #[error("signing key {id:?} is {len} bytes; use at least {MIN_SECRET_LEN} random bytes")]
    TooShort {
        /// The key's id.
        id: String,
        /// Its secret's length in bytes.
        len: usize,
    },
    /// Two keys with one id (a token names the key that signed it).
    #[error("signing key id {0:?} is used twice")]
    DuplicateId(String),
    /// An id that cannot sit in a token.
    #[error("signing key id {0:?} must be 1-32 characters of [A-Za-z0-9_-]")]
    BadId(String),
    /// The embedded default key file cannot be read, written or parsed.
    #[error("key file {path}: {detail}")]
    File {
        /// The key file.
        path: PathBuf,
        /// What went wrong.
        detail: String,
    },
    /// A configured key's secret (`secret_env` or `secret_file`) cannot be read or decoded.
    #[error("secret of signing key {id:?} in {origin}: {detail}")]
    Secret {
        /// The key's id.
        id: String,
        /// Where its secret was looked for (an environment variable or a file).
        origin: String,
        /// What went wrong.
        detail: String,
    },
    /// The system's random source failed while making the default key.
    #[error("cannot get random bytes for a new signing key: {0}")]
    Random(String),
}

#[derive(Clone)]
struct Key {
    id: String,
    /// The keyed HMAC state, prepared once; cloning it is cheaper than re-keying per token.
    mac: HmacSha256,
}

/// Signing keys, newest first: the first key signs, every key verifies. Cloned where two
/// signers share one loaded ring (its `Debug` prints ids only).
#[derive(Clone)]
pub struct KeyRing {
    keys: Vec<Key>,
}

impl std::fmt::Debug for KeyRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print secrets; ids are enough to debug rotation.
        f.debug_struct("KeyRing").field("key_ids", &self.key_ids()).finish()
    }
}

impl KeyRing {
    /// Builds a ring from `(id, secret)` pairs, newest first.
    pub fn new<I, S>(keys: I) -> Result<KeyRing, KeyError>
    where
        I: IntoIterator<Item = (S, Vec<u8>)>,
        S: Into<String>,
    {
        let mut ring = Vec::new();
        for (id, secret) in keys {
            let id = id.into();
            if id.is_empty() || id.len() > 32 || !id.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
                return Err(KeyError::BadId(id));
            }
            if secret.len() < MIN_SECRET_LEN {
                return Err(KeyError::TooShort { id, len: secret.len() });
            }
            if ring.iter().any(|k: &Key| k.id == id) {
                return Err(KeyError::DuplicateId(id));
            }
            let mac = HmacSha256::new_from_slice(&secret).expect("hmac accepts keys of any length");
            ring.push(Key { id, mac });
        }
        if ring.is_empty() {
            return Err(KeyError::Empty);
        }
        Ok(KeyRing { keys: ring })
    }

    /// Loads `<dir>/links.key`, creating it with a fresh random key (mode 0600) when absent,
    /// so that every process on the same store (`serve`, `sign-url`) signs and verifies alike.
    pub fn load_or_create(dir: &Path) -> Result<KeyRing, KeyError> {
        let path = dir.join(KEY_FILE_NAME);
        let file_err = |detail: String| KeyError::File { path: path.clone(), detail };
        match std::fs::read_to_string(&path) {
            Ok(text) => {
                let mut keys = Vec::new();
                for line in text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')) {
                    let (id, secret) =
                        line.split_once(' ').ok_or_else(|| file_err("expected lines of `<key id> <base64url secret>`".into()))?;
                    let secret = B64.decode(secret.trim()).map_err(|e| file_err(format!("key {id:?} is not base64url: {e}")))?;
                    keys.push((id.to_owned(), secret));
                }
                KeyRing::new(keys).map_err(|e| file_err(e.to_string()))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                create_private_dir_all(dir).map_err(|e| file_err(e.to_string()))?;
                let mut secret = [0u8; 32];
                getrandom::fill(&mut secret).map_err(|e| KeyError::Random(e.to_string()))?;
                let mut id_bytes = [0u8; 4];
                getrandom::fill(&mut id_bytes).map_err(|e| KeyError::Random(e.to_string()))?;
                let id = format!("k{}", id_bytes.iter().map(|b| format!("{b:02x}")).collect::<String>());
                let line = format!("# Stowage link-signing key, generated on first use. Keep it secret.\n{id} {}\n", B64.encode(secret));
                write_new_private_file(&path, line.as_bytes()).map_err(|e| file_err(e.to_string()))?;
                // Another process may have won the race to create it; read back what is there.
                KeyRing::load_or_create(dir)
            }
            Err(e) => Err(file_err(e.to_string())),
        }
    }

    /// The keys' ids, newest (the signing key) first.
    pub fn key_ids(&self) -> Vec<&str> {
        self.keys.iter().map(|k| k.id.as_str()).collect()
    }

    /// Each key's id with a fingerprint of its secret, newest first: 16 hex digits of the
    /// key's own HMAC over a fixed label. Two instances hold the same secret under an id
    /// exactly when their fingerprints for it agree; a fingerprint tells nothing about the
    /// secret, so a shared store may record them (its identity check refuses an instance whose
    /// key differs from the fleet's).
    pub fn fingerprints(&self) -> Vec<(String, String)> {
        self.keys
            .iter()
            .map(|k| {
                let mut mac = k.mac.clone();
                mac.update(FINGERPRINT_LABEL);
                (k.id.clone(), hex::encode(&mac.finalize().into_bytes()[..8]))
            })
            .collect()
    }

    /// Mints a token for `operation` on `target` (an artifact id or slot id) owned by `owner`,
    /// valid until `expires_at` (Unix seconds). Signed with the newest key.
    pub fn mint(&self, operation: Operation, target: &str, owner: &Owner, expires_at: u64) -> String {
        let key = &self.keys[0];
        let claims = Claims { key_id: key.id.clone(), operation, target: target.to_owned(), owner: owner.clone(), expires_at };
        token::encode(&claims, |payload| {
            let mut mac = key.mac.clone();
            mac.update(payload);
            mac.finalize().into_bytes().into()
        })
    }

    /// Mints a compact read token for `target` bound to `owner`'s tenant and user, valid until
    /// `expires_at` (see [`crate::compact`]). Signed with the newest key.
    pub fn mint_compact(&self, target: &str, owner: &Owner, expires_at: u64) -> String {
        let key = &self.keys[0];
        let mut mac = key.mac.clone();
        mac.update(&compact::signed_bytes(target, owner, expires_at));
        compact::encode(&key.id, expires_at, &mac.finalize().into_bytes())
    }

    /// Verifies a compact read token for `target` against the owners that hold it
    /// (`candidates`): the MAC first, in constant time, for each; then the expiry. Returns
    /// the owner it was minted for.
    pub fn verify_compact(&self, token: &str, target: &str, candidates: &[Owner], now: u64) -> Result<Owner, TokenError> {
        let parts = compact::split(token)?;
        let key = self.keys.iter().find(|k| k.id == parts.key_id).ok_or(TokenError::Forbidden)?;
        let owner = candidates
            .iter()
            .find(|o| {
                let mut mac = key.mac.clone();
                mac.update(&compact::signed_bytes(target, o, parts.expires_at));
                compact::matches(mac, &parts)
            })
            .ok_or(TokenError::Forbidden)?;
        if now >= parts.expires_at {
            return Err(TokenError::Expired { expired_at: parts.expires_at });
        }
        Ok(owner.clone())
    }

    /// Verifies a token's signature and expiry at `now` (Unix seconds) and returns its claims.
    /// Callers must still check operation, target and owner: see [`KeyRing::verify_for`].
    pub fn verify(&self, token: &str, now: u64) -> Result<Claims, TokenError> {
        let parts = token::split(token)?;
        let key = self.keys.iter().find(|k| k.id == parts.key_id).ok_or(TokenError::Forbidden)?;
        let mut mac = key.mac.clone();
        mac.update(parts.signed);
        // `verify_slice` compares in constant time.
        mac.verify_slice(&parts.mac).map_err(|_| TokenError::Forbidden)?;
        let claims = token::claims(parts.key_id, parts.encoded_payload)?;
        if now >= claims.expires_at {
            return Err(TokenError::Expired { expired_at: claims.expires_at });
        }
        Ok(claims)
    }

    /// Verifies a token and checks that it grants `operation` on `target`.
    pub fn verify_for(&self, token: &str, operation: Operation, target: &str, now: u64) -> Result<Claims, TokenError> {
        let claims = self.verify(token, now)?;
        if claims.operation != operation || claims.target != target {
            return Err(TokenError::Forbidden);
        }
        Ok(claims)
    }
}

/// Creates the store directory the key lives in, when the key is made before the store is
/// opened: owner-only (0700) like every directory the store creates (stowage-store's
/// `private` module, which this crate does not depend on), and set exactly so that no umask
/// opens it up. Missing parents are made the usual way; an existing directory keeps its mode.
fn create_private_dir_all(dir: &Path) -> std::io::Result<()> {
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)?;
    }
    let mut builder = std::fs::DirBuilder::new();
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    match builder.create(dir) {
        Ok(()) => {
            #[cfg(unix)]
            {
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
            }
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && dir.is_dir() => Ok(()),
        Err(e) => Err(e),
    }
}

/// Creates `path` exclusively with owner-only permissions, writes and syncs it. An existing
/// file is left alone (the caller re-reads it).
fn write_new_private_file(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    match options.open(path) {
        Ok(mut file) => {
            file.write_all(contents)?;
            file.sync_all()
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_800_000_000;

    fn ring(ids: &[&str]) -> KeyRing {
        KeyRing::new(ids.iter().map(|id| (*id, format!("secret-for-{id}-padded-to-32-bytes!!").into_bytes()))).unwrap()
    }

    fn owner() -> Owner {
        Owner { session_id: Some("s1".into()), ..Default::default() }
    }

    #[test]
    fn fingerprints_tell_secrets_apart_and_nothing_about_them() {
        let a = ring(&["k1", "k2"]).fingerprints();
        assert_eq!(a.len(), 2);
        assert_eq!((a[0].0.as_str(), a[0].1.len()), ("k1", 16));
        assert_eq!(a, ring(&["k1", "k2"]).fingerprints(), "the same secrets, the same fingerprints");
        let other = KeyRing::new([("k1", b"another-secret-for-k1-padded-to-32-bytes".to_vec())]).unwrap().fingerprints();
        assert_eq!(other[0].0, "k1");
        assert_ne!(other[0].1, a[0].1, "another secret under the same id");
        assert_ne!(a[0].1, a[1].1);
        let secret = b"secret-for-k1-padded-to-32-bytes!!";
        assert!(!a[0].1.contains(&hex::encode(&secret[..4])), "not the secret's own bytes");
    }

    #[test]
    fn round_trip() {
        let r = ring(&["k1"]);
        let t = r.mint(Operation::Read, "art_1", &owner(), NOW + 60);
        assert!(t.starts_with("v1."));
        let c = r.verify_for(&t, Operation::Read, "art_1", NOW).unwrap();
        assert_eq!(c.owner, owner());
        assert_eq!(c.expires_at, NOW + 60);
        assert_eq!(c.key_id, "k1");
    }

    fn user(u: &str) -> Owner {
        Owner { tenant_id: Some("t".into()), user_id: Some(u.into()), session_id: Some("s1".into()) }
    }

    #[test]
    fn compact_tokens_round_trip_and_are_short() {
        let r = ring(&["k6edea574"]);
        let t = r.mint_compact("download_workbook_3f2a9c0d1e4b5a69", &user("alice"), NOW + 900);
        assert!(t.starts_with("c.k6edea574.") && t.len() <= 42, "{t} ({} chars)", t.len());
        let url = crate::artifact_url("http://127.0.0.1:8787", &"download_workbook_3f2a9c0d1e4b5a69".parse().unwrap(), &t);
        assert!(url.len() <= 120, "{url} ({} chars)", url.len());
        // Found among the holders, whichever session asks.
        let holders = [user("bob"), user("alice")];
        let o = r.verify_compact(&t, "download_workbook_3f2a9c0d1e4b5a69", &holders, NOW).unwrap();
        assert_eq!(o.user_id.as_deref(), Some("alice"));
        let other_session = Owner { session_id: Some("s9".into()), ..user("alice") };
        assert!(r.verify_compact(&t, "download_workbook_3f2a9c0d1e4b5a69", &[other_session], NOW).is_ok());
    }

    #[test]
    fn compact_tokens_refuse_every_tampered_swapped_truncated_or_expired_form() {
        let r = ring(&["k1", "k2"]);
        let id = "art_0123456789abcdef";
        let t = r.mint_compact(id, &user("alice"), NOW + 60);
        let holders = [user("alice")];
        let check =
            |tok: &str, target: &str, who: &[Owner], now: u64| r.verify_compact(tok, target, who, now).map_err(|e| e.code().as_str());
        // Another owner, another artifact, another key's id, a later expiry: forbidden.
        assert_eq!(check(&t, id, &[user("mallory")], NOW), Err("artifact_forbidden"));
        assert_eq!(check(&t, "art_fedcba9876543210", &holders, NOW), Err("artifact_forbidden"));
        assert_eq!(check(&t.replacen("c.k1.", "c.k2.", 1), id, &holders, NOW), Err("artifact_forbidden"));
        let later = t.split('.').nth(2).map(|e| u64::from_str_radix(e, 36).unwrap() + 3600).unwrap();
        let parts: Vec<&str> = t.split('.').collect();
        let extended = format!("c.{}.{}.{}", parts[1], compact::tests_base36(later), parts[3]);
        assert_eq!(check(&extended, id, &holders, NOW), Err("artifact_forbidden"));
        // Every single-character change, and every truncation: refused as forged (a change
        // or cut in the MAC, or anything that still parses) or as not a token, never as
        // expired (which would tell a forger the MAC held) and never accepted.
        let mac_at = t.rfind('.').unwrap() + 1;
        for i in 2..t.len() {
            let mut b = t.clone().into_bytes();
            b[i] = if b[i] == b'A' { b'B' } else { b'A' };
            let Ok(bad) = String::from_utf8(b) else { continue };
            if bad != t {
                let code = check(&bad, id, &holders, NOW).unwrap_err();
                if i >= mac_at {
                    assert_eq!(code, "artifact_forbidden", "{bad}");
                } else {
                    assert!(matches!(code, "artifact_forbidden" | "bad_request"), "{bad}: {code}");
                }
            }
        }
        for n in 0..t.len() {
            let code = check(&t[..n], id, &holders, NOW).unwrap_err();
            if n >= mac_at {
                assert_eq!(code, "artifact_forbidden", "{}", &t[..n]);
            } else {
                assert!(matches!(code, "artifact_forbidden" | "bad_request"), "{}: {code}", &t[..n]);
            }
        }
        assert_eq!(check(&format!("{t}A"), id, &holders, NOW), Err("artifact_forbidden"));
        // No holders at all (deleted, or a store that cannot say): forbidden, never a guess.
        assert_eq!(check(&t, id, &[], NOW), Err("artifact_forbidden"));
        // Expired, but only once the MAC is good.
        assert_eq!(check(&t, id, &holders, NOW + 60), Err("artifact_url_expired"));
        assert_eq!(check("not-a-token", id, &holders, NOW), Err("bad_request"));
    }

    #[test]
    fn refusals_have_the_right_codes() {
        let r = ring(&["k1"]);
        let t = r.mint(Operation::Read, "art_1", &owner(), NOW + 60);
        let (head, mac) = t.rsplit_once('.').unwrap();
        let mut flipped = t.clone().into_bytes();
        flipped[5] ^= 1;
        let flipped = String::from_utf8(flipped).unwrap();
        let other_mac = ring(&["k1x"]).mint(Operation::Read, "art_1", &owner(), NOW + 60);
        let forged_other_key = format!("{head}.{}", other_mac.rsplit_once('.').unwrap().1);
        let cases: Vec<(&str, String, &str)> = vec![
            ("tampered payload", flipped, "artifact_forbidden"),
            ("truncated mac", t[..t.len() - 3].to_string(), "artifact_forbidden"),
            ("mac removed", head.to_string(), "artifact_forbidden"),
            ("mac of another key", forged_other_key, "artifact_forbidden"),
            ("empty mac", format!("{head}."), "artifact_forbidden"),
            ("not a token", "hello".into(), "bad_request"),
            ("a jwt", "eyJhbGciOiJIUzI1NiJ9.e30.x".into(), "bad_request"),
            ("empty", String::new(), "bad_request"),
            ("prefix only", "v1.".into(), "artifact_forbidden"),
        ];
        for (what, token, code) in cases {
            let err = r.verify(&token, NOW).unwrap_err();
            assert_eq!(err.code(), code, "{what}: {err:?}");
        }
        assert!(!mac.is_empty());
    }

    #[test]
    fn expiry_is_checked_after_the_signature() {
        let r = ring(&["k1"]);
        let t = r.mint(Operation::Read, "a", &owner(), NOW);
        assert_eq!(r.verify(&t, NOW - 1).unwrap().target, "a");
        assert_eq!(r.verify(&t, NOW), Err(TokenError::Expired { expired_at: NOW }));
        // A forged token claiming an old expiry must not be told "expired".
        let mut forged = t.clone();
        forged.pop();
        forged.push(if t.ends_with('A') { 'B' } else { 'A' });
        assert_eq!(r.verify(&forged, NOW + 100), Err(TokenError::Forbidden));
    }

    #[test]
    fn operation_and_target_are_bound() {
        let r = ring(&["k1"]);
        let read = r.mint(Operation::Read, "art_1", &owner(), NOW + 60);
        let write = r.mint(Operation::Write, "slot_1", &owner(), NOW + 60);
        assert_eq!(r.verify_for(&read, Operation::Write, "art_1", NOW), Err(TokenError::Forbidden));
        assert_eq!(r.verify_for(&write, Operation::Read, "slot_1", NOW), Err(TokenError::Forbidden));
        assert_eq!(r.verify_for(&read, Operation::Read, "art_2", NOW), Err(TokenError::Forbidden));
    }

    #[test]
    fn rotation_newest_signs_all_verify() {
        let old = ring(&["k1"]);
        let rotated = ring(&["k2", "k1"]);
        let old_token = old.mint(Operation::Read, "a", &owner(), NOW + 60);
        assert!(rotated.verify(&old_token, NOW).is_ok());
        let new_token = rotated.mint(Operation::Read, "a", &owner(), NOW + 60);
        assert_eq!(rotated.verify(&new_token, NOW).unwrap().key_id, "k2");
        // Once k1 is retired, its tokens stop working.
        assert_eq!(ring(&["k2"]).verify(&old_token, NOW), Err(TokenError::Forbidden));
        assert_eq!(old.verify(&new_token, NOW), Err(TokenError::Forbidden));
    }

    #[test]
    fn tokens_carry_ids_only() {
        let r = ring(&["k1"]);
        let owner = Owner { tenant_id: Some("t\"1".into()), user_id: Some("ü".into()), session_id: None };
        let t = r.mint(Operation::Write, "slot", &owner, NOW + 1);
        assert_eq!(r.verify(&t, NOW).unwrap().owner, owner, "escaped ids round-trip");
        assert!(t.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b)), "url-safe: {t}");
    }

    #[test]
    fn bad_keys_are_refused() {
        assert!(matches!(KeyRing::new(Vec::<(String, Vec<u8>)>::new()), Err(KeyError::Empty)));
        assert!(matches!(KeyRing::new([("k", vec![0u8; 8])]), Err(KeyError::TooShort { .. })));
        assert!(matches!(KeyRing::new([("k", vec![0u8; 32]), ("k", vec![1u8; 32])]), Err(KeyError::DuplicateId(_))));
        assert!(matches!(KeyRing::new([("k 1", vec![0u8; 32])]), Err(KeyError::BadId(_))));
    }

    #[test]
    fn key_file_is_created_private_and_reused() {
        let dir = tempfile::tempdir().unwrap();
        let a = KeyRing::load_or_create(dir.path()).unwrap();
        let b = KeyRing::load_or_create(dir.path()).unwrap();
        assert_eq!(a.key_ids(), b.key_ids());
        let t = a.mint(Operation::Read, "x", &owner(), NOW + 5);
        assert!(b.verify(&t, NOW).is_ok(), "two processes on one store agree");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(dir.path().join(KEY_FILE_NAME)).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        std::fs::write(dir.path().join(KEY_FILE_NAME), "garbage").unwrap();
        let err = KeyRing::load_or_create(dir.path()).unwrap_err().to_string();
        assert!(err.contains("links.key") && !err.contains('\n'), "{err}");
    }

    /// The key is often the first thing made in a new store directory (`sign-url`, or
    /// `serve` before the store opens): that directory is owner-only too, whatever the umask.
    #[cfg(unix)]
    #[test]
    fn a_store_directory_made_for_the_key_is_owner_only() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let dir = tmp.path().join("parent").join(".stowage");
        KeyRing::load_or_create(&dir).unwrap();
        assert_eq!(std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777, 0o700);
        // An existing directory keeps the mode its owner chose.
        let shared = tmp.path().join("shared");
        std::fs::create_dir(&shared).unwrap();
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o750)).unwrap();
        KeyRing::load_or_create(&shared).unwrap();
        assert_eq!(std::fs::metadata(&shared).unwrap().permissions().mode() & 0o777, 0o750);
        // A parent that is a file is a one-line error naming the key file.
        let file = tmp.path().join("file");
        std::fs::write(&file, b"x").unwrap();
        let err = KeyRing::load_or_create(&file.join("store")).unwrap_err().to_string();
        assert!(err.contains("links.key") && !err.contains('\n'), "{err}");
    }
}
