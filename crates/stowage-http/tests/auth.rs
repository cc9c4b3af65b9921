//! JWT and API-key authentication with real keys generated for the test (RSA 2048 and EC P-256
//! by openssl), checked the way a client would meet them: accepted identities, and refusals
//! for expired tokens, wrong audiences, wrong issuers, foreign keys and unknown keys.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

use jsonwebtoken::{Algorithm, EncodingKey, Header, encode};
use serde_json::json;
use stowage_http::{ApiKeyConfig, AuthConfig, Authenticator, Identity, JwtConfig, hash_api_key};

struct Keys {
    _dir: tempfile::TempDir,
    rsa_private: Vec<u8>,
    rsa_public: PathBuf,
    other_rsa_private: Vec<u8>,
    ec_private: Vec<u8>,
    ec_public: PathBuf,
}

fn openssl(dir: &Path, args: &[&str]) {
    let st = Command::new("openssl").current_dir(dir).args(args).output().expect("openssl is installed (scripts/test installs it)");
    assert!(st.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&st.stderr));
}

fn keys() -> Keys {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    openssl(d, &["genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", "rsa.pem"]);
    openssl(d, &["pkey", "-in", "rsa.pem", "-pubout", "-out", "rsa.pub.pem"]);
    openssl(d, &["genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", "other.pem"]);
    openssl(d, &["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", "ec.pem"]);
    openssl(d, &["pkey", "-in", "ec.pem", "-pubout", "-out", "ec.pub.pem"]);
    Keys {
        rsa_private: std::fs::read(d.join("rsa.pem")).unwrap(),
        rsa_public: d.join("rsa.pub.pem"),
        other_rsa_private: std::fs::read(d.join("other.pem")).unwrap(),
        ec_private: std::fs::read(d.join("ec.pem")).unwrap(),
        ec_public: d.join("ec.pub.pem"),
        _dir: dir,
    }
}

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs()
}

fn jwt_config(keys: &Keys) -> JwtConfig {
    JwtConfig {
        algorithms: vec!["RS256".into(), "ES256".into()],
        issuer: Some("https://idp.example".into()),
        audience: vec!["stowage".into()],
        hs256_secret_env: None,
        public_key_files: vec![keys.rsa_public.clone(), keys.ec_public.clone()],
        jwks_file: None,
        tenant_claim: Some("org".into()),
        leeway_secs: 0,
    }
}

fn claims(overrides: serde_json::Value) -> serde_json::Value {
    let mut c = json!({"sub": "user-1", "iss": "https://idp.example", "aud": "stowage", "exp": now() + 300, "org": "acme"});
    for (k, v) in overrides.as_object().unwrap() {
        if v.is_null() {
            c.as_object_mut().unwrap().remove(k);
        } else {
            c[k] = v.clone();
        }
    }
    c
}

fn sign(alg: Algorithm, pem: &[u8], c: &serde_json::Value) -> String {
    let key = match alg {
        Algorithm::RS256 => EncodingKey::from_rsa_pem(pem).unwrap(),
        Algorithm::ES256 => EncodingKey::from_ec_pem(pem).unwrap(),
        _ => unreachable!(),
    };
    encode(&Header::new(alg), c, &key).unwrap()
}

fn bearer(t: &str) -> String {
    format!("Bearer {t}")
}

#[test]
fn jwt_identities_and_refusals() {
    let k = keys();
    let auth = Authenticator::new(&AuthConfig { api_keys: vec![], jwt: Some(jwt_config(&k)) }).unwrap().unwrap();
    let want = Identity { user_id: Some("user-1".into()), tenant_id: Some("acme".into()), api_key_id: None };

    let rs = sign(Algorithm::RS256, &k.rsa_private, &claims(json!({})));
    assert_eq!(auth.authenticate(Some(&bearer(&rs))).unwrap(), want);
    let es = sign(Algorithm::ES256, &k.ec_private, &claims(json!({})));
    assert_eq!(auth.authenticate(Some(&bearer(&es))).unwrap(), want);

    for (what, token, needle) in [
        ("expired", sign(Algorithm::RS256, &k.rsa_private, &claims(json!({"exp": now() - 10}))), "expired"),
        ("wrong audience", sign(Algorithm::RS256, &k.rsa_private, &claims(json!({"aud": "someone-else"}))), "audience"),
        ("wrong issuer", sign(Algorithm::RS256, &k.rsa_private, &claims(json!({"iss": "https://evil.example"}))), "issuer"),
        ("no sub", sign(Algorithm::RS256, &k.rsa_private, &claims(json!({"sub": null}))), "sub"),
        ("foreign key", sign(Algorithm::RS256, &k.other_rsa_private, &claims(json!({}))), "signature"),
    ] {
        let err = auth.authenticate(Some(&bearer(&token))).unwrap_err();
        assert!(err.contains(needle), "{what}: {err}");
    }
    // A tampered payload with the original signature.
    let mut parts: Vec<String> = rs.split('.').map(str::to_owned).collect();
    parts[1] = parts[1].chars().rev().collect();
    assert!(auth.authenticate(Some(&bearer(&parts.join(".")))).is_err());
    // HS256 is not in the accepted list: a token signed with the *public key as HMAC secret*
    // (the classic algorithm-confusion attack) must be refused.
    let pubkey = std::fs::read(&k.rsa_public).unwrap();
    let confused = encode(&Header::new(Algorithm::HS256), &claims(json!({})), &EncodingKey::from_secret(&pubkey)).unwrap();
    assert!(auth.authenticate(Some(&bearer(&confused))).is_err());
    assert!(auth.authenticate(None).unwrap_err().contains("missing bearer"));
    assert!(auth.authenticate(Some("Basic dXNlcjpwYXNz")).is_err());
}

#[test]
fn jwks_file_selects_keys_by_kid() {
    let k = keys();
    let enc = EncodingKey::from_rsa_pem(&k.rsa_private).unwrap();
    let mut jwk = jsonwebtoken::jwk::Jwk::from_encoding_key(&enc, Algorithm::RS256).unwrap();
    jwk.common.key_id = Some("kid-1".into());
    let jwks = k._dir.path().join("jwks.json");
    std::fs::write(&jwks, serde_json::to_vec(&json!({"keys": [jwk]})).unwrap()).unwrap();
    let mut c = jwt_config(&k);
    c.public_key_files.clear();
    c.algorithms = vec!["RS256".into()];
    c.jwks_file = Some(jwks);
    let auth = Authenticator::new(&AuthConfig { api_keys: vec![], jwt: Some(c) }).unwrap().unwrap();
    let mut header = Header::new(Algorithm::RS256);
    header.kid = Some("kid-1".into());
    let token = encode(&header, &claims(json!({})), &enc).unwrap();
    assert_eq!(auth.authenticate(Some(&bearer(&token))).unwrap().user_id.as_deref(), Some("user-1"));
    header.kid = Some("kid-2".into());
    let token = encode(&header, &claims(json!({})), &enc).unwrap();
    assert!(auth.authenticate(Some(&bearer(&token))).is_err(), "unknown kid");
}

#[test]
fn api_keys_are_checked_by_hash() {
    let auth = Authenticator::new(&AuthConfig {
        api_keys: vec![ApiKeyConfig {
            id: "ci-bot".into(),
            sha256: hash_api_key("sk-live-123456"),
            user: None,
            tenant: Some("acme".into()),
        }],
        jwt: None,
    })
    .unwrap()
    .unwrap();
    assert_eq!(
        auth.authenticate(Some("Bearer sk-live-123456")).unwrap(),
        Identity { user_id: Some("ci-bot".into()), tenant_id: Some("acme".into()), api_key_id: Some("ci-bot".into()) }
    );
    assert!(auth.authenticate(Some("Bearer sk-live-1234567")).is_err());
    assert!(auth.authenticate(Some("Bearer ")).is_err());
    // A config that pasted the key instead of its hash is refused at start-up.
    let bad = AuthConfig {
        api_keys: vec![ApiKeyConfig { id: "x".into(), sha256: "sk-live-123456".into(), user: None, tenant: None }],
        jwt: None,
    };
    assert!(Authenticator::new(&bad).err().unwrap().to_string().contains("64 hex digits"));
    assert!(Authenticator::new(&AuthConfig::default()).unwrap().is_none(), "no auth configured");
}
