//! JWT and API-key authentication with real keys generated for the test (RSA 2048 and EC P-256
//! by openssl, an HS256 secret from the environment), checked the way a client would meet
//! them: accepted identities, and refusals for expired and not-yet-valid tokens, missing,
//! null or wrong issuers and audiences, foreign keys and unknown keys; and API keys and JWTs
//! as separate identity spaces.

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

/// Marks a claim to leave out of the token (a JSON `null` stays in it, as `null`).
const ABSENT: &str = "<absent>";

fn claims(overrides: serde_json::Value) -> serde_json::Value {
    let mut c = json!({"sub": "user-1", "iss": "https://idp.example", "aud": "stowage", "exp": now() + 300, "org": "acme"});
    for (k, v) in overrides.as_object().unwrap() {
        if v == ABSENT {
            c.as_object_mut().unwrap().remove(k);
        } else {
            c[k] = v.clone();
        }
    }
    c
}

fn sign(alg: Algorithm, key: &[u8], c: &serde_json::Value) -> String {
    let key = match alg {
        Algorithm::RS256 => EncodingKey::from_rsa_pem(key).unwrap(),
        Algorithm::ES256 => EncodingKey::from_ec_pem(key).unwrap(),
        Algorithm::HS256 => EncodingKey::from_secret(key),
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
    let want = Identity { user_id: Some("jwt:user-1".into()), tenant_id: Some("acme".into()), api_key_id: None };

    let rs = sign(Algorithm::RS256, &k.rsa_private, &claims(json!({})));
    assert_eq!(auth.authenticate(Some(&bearer(&rs))).unwrap(), want);
    let es = sign(Algorithm::ES256, &k.ec_private, &claims(json!({})));
    assert_eq!(auth.authenticate(Some(&bearer(&es))).unwrap(), want);

    for (what, token, needle) in [
        ("expired", sign(Algorithm::RS256, &k.rsa_private, &claims(json!({"exp": now() - 10}))), "expired"),
        ("wrong audience", sign(Algorithm::RS256, &k.rsa_private, &claims(json!({"aud": "someone-else"}))), "audience"),
        ("wrong issuer", sign(Algorithm::RS256, &k.rsa_private, &claims(json!({"iss": "https://evil.example"}))), "issuer"),
        ("no sub", sign(Algorithm::RS256, &k.rsa_private, &claims(json!({"sub": ABSENT}))), "sub"),
        ("foreign key", sign(Algorithm::RS256, &k.other_rsa_private, &claims(json!({}))), "signature"),
    ] {
        let err = auth.authenticate(Some(&bearer(&token))).unwrap_err();
        assert!(err.to_string().contains(needle), "{what}: {err}");
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
    assert!(auth.authenticate(None).unwrap_err().to_string().contains("missing bearer"));
    assert_eq!(auth.authenticate(Some("Bearer  ")), Err(stowage_http::AuthError::MissingBearer), "an empty token is no token");
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
    assert_eq!(auth.authenticate(Some(&bearer(&token))).unwrap().user_id.as_deref(), Some("jwt:user-1"));
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
        Identity { user_id: Some("key:ci-bot".into()), tenant_id: Some("acme".into()), api_key_id: Some("ci-bot".into()) }
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

/// Every way a token can fail the claims checks, for one algorithm and key, against
/// [`jwt_config`] with a 30 s leeway: each case is (what, claim overrides, expected word in
/// the refusal, or `None` when the token must be accepted).
fn check_claims(auth: &Authenticator, alg: Algorithm, key: &[u8]) {
    let t = now();
    let cases: Vec<(&str, serde_json::Value, Option<&str>)> = vec![
        ("all claims good", json!({}), None),
        // Regression: a configured issuer or audience was only compared when the token had
        // the claim, so leaving it out (or sending null) passed.
        ("no iss", json!({"iss": ABSENT}), Some("lacks the iss claim")),
        ("null iss", json!({"iss": null}), Some("lacks the iss claim")),
        ("numeric iss", json!({"iss": 7}), Some("lacks the iss claim")),
        ("wrong iss", json!({"iss": "https://evil.example"}), Some("issuer not accepted")),
        ("no aud", json!({"aud": ABSENT}), Some("lacks the aud claim")),
        ("null aud", json!({"aud": null}), Some("lacks the aud claim")),
        ("empty aud list", json!({"aud": []}), Some("audience not accepted")),
        ("wrong aud", json!({"aud": "someone-else"}), Some("audience not accepted")),
        ("aud list without ours", json!({"aud": ["a", "b"]}), Some("audience not accepted")),
        ("aud list with ours", json!({"aud": ["a", "stowage"]}), None),
        // Regression: nbf was never checked.
        ("nbf in the future", json!({"nbf": t + 300}), Some("not valid yet")),
        ("nbf just past the leeway", json!({"nbf": t + 60}), Some("not valid yet")),
        ("nbf within the leeway", json!({"nbf": t + 10}), None),
        ("nbf in the past", json!({"nbf": t - 10}), None),
        ("nbf not a number", json!({"nbf": "soon"}), Some("nbf is malformed")),
        ("exp within the leeway", json!({"exp": t - 10}), None),
        ("exp past the leeway", json!({"exp": t - 60}), Some("expired")),
        ("no exp", json!({"exp": ABSENT}), Some("lacks the exp claim")),
        ("no sub", json!({"sub": ABSENT}), Some("lacks the sub claim")),
        ("null sub", json!({"sub": null}), Some("lacks the sub claim")),
        ("numeric sub", json!({"sub": 42}), Some("lacks the sub claim")),
        ("empty sub", json!({"sub": ""}), Some("empty sub")),
    ];
    for (what, overrides, refusal) in cases {
        let token = sign(alg, key, &claims(overrides));
        let got = auth.authenticate(Some(&bearer(&token)));
        match (refusal, got) {
            (None, Ok(id)) => assert_eq!(id.user_id.as_deref(), Some("jwt:user-1"), "{alg:?} {what}"),
            (Some(word), Err(e)) => {
                assert!(e.to_string().contains(word), "{alg:?} {what}: {e}");
                assert!(!e.to_string().contains('\n'), "{e}");
            }
            (want, got) => panic!("{alg:?} {what}: wanted refusal {want:?}, got {got:?}"),
        }
    }
}

#[test]
fn rs256_and_es256_claims_are_all_enforced() {
    let k = keys();
    let mut c = jwt_config(&k);
    c.leeway_secs = 30;
    let auth = Authenticator::new(&AuthConfig { api_keys: vec![], jwt: Some(c) }).unwrap().unwrap();
    check_claims(&auth, Algorithm::RS256, &k.rsa_private);
    check_claims(&auth, Algorithm::ES256, &k.ec_private);
}

/// The HS256 secret is read from the environment variable the config names, and setting a
/// variable in this process is not allowed (`unsafe` in edition 2024, forbidden here), so the
/// HS256 checks run in a child started with it set.
const HS256_ENV: &str = "STOWAGE_TEST_HS256_SECRET";
const HS256_SECRET: &str = "a-shared-secret-of-at-least-32-bytes!";

#[test]
#[ignore = "the child half of hs256_claims_are_all_enforced"]
fn hs256_child() {
    if std::env::var(HS256_ENV).is_err() {
        return;
    }
    let c = JwtConfig {
        algorithms: vec!["HS256".into()],
        issuer: Some("https://idp.example".into()),
        audience: vec!["stowage".into()],
        hs256_secret_env: Some(HS256_ENV.into()),
        public_key_files: vec![],
        jwks_file: None,
        tenant_claim: Some("org".into()),
        leeway_secs: 30,
    };
    let auth = Authenticator::new(&AuthConfig { api_keys: vec![], jwt: Some(c) }).unwrap().unwrap();
    check_claims(&auth, Algorithm::HS256, HS256_SECRET.as_bytes());
    let forged = sign(Algorithm::HS256, b"another-secret-of-at-least-32-bytes!!", &claims(json!({})));
    assert!(auth.authenticate(Some(&bearer(&forged))).unwrap_err().to_string().contains("signature"));
    println!("hs256 checks passed");
}

#[test]
fn hs256_claims_are_all_enforced() {
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", &child_test("hs256_child"), "--ignored", "--nocapture", "--test-threads=1"])
        .env(HS256_ENV, HS256_SECRET)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && stdout.contains("hs256 checks passed"), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn without_a_configured_issuer_or_audience_tokens_need_neither() {
    let k = keys();
    let mut c = jwt_config(&k);
    c.issuer = None;
    c.audience.clear();
    let auth = Authenticator::new(&AuthConfig { api_keys: vec![], jwt: Some(c) }).unwrap().unwrap();
    let bare = sign(Algorithm::ES256, &k.ec_private, &claims(json!({"iss": ABSENT, "aud": ABSENT})));
    assert_eq!(auth.authenticate(Some(&bearer(&bare))).unwrap().user_id.as_deref(), Some("jwt:user-1"));
    // An audience in the token that nobody configured to accept is still no reason to refuse.
    let any = sign(Algorithm::ES256, &k.ec_private, &claims(json!({"iss": "whoever"})));
    assert!(auth.authenticate(Some(&bearer(&any))).is_ok());
}

/// Regression: a JWT whose `sub` equalled an API key's user became that user, with all its
/// artifacts. The two kinds of credential now live in separate user-id spaces.
#[test]
fn api_keys_and_jwts_never_share_an_identity() {
    let k = keys();
    let key = |id: &str, user: Option<&str>, secret: &str| ApiKeyConfig {
        id: id.into(),
        sha256: hash_api_key(secret),
        user: user.map(str::to_owned),
        tenant: Some("acme".into()),
    };
    let auth = Authenticator::new(&AuthConfig {
        api_keys: vec![key("user-1", None, "sk-one-0123456789"), key("bot", Some("jwt:user-1"), "sk-two-0123456789")],
        jwt: Some(jwt_config(&k)),
    })
    .unwrap()
    .unwrap();
    let by_key = auth.authenticate(Some("Bearer sk-one-0123456789")).unwrap();
    let by_jwt = auth.authenticate(Some(&bearer(&sign(Algorithm::RS256, &k.rsa_private, &claims(json!({})))))).unwrap();
    // Same tenant, same name, different users.
    assert_eq!((by_key.tenant_id.as_deref(), by_jwt.tenant_id.as_deref()), (Some("acme"), Some("acme")));
    assert_eq!(by_key.user_id.as_deref(), Some("key:user-1"));
    assert_eq!(by_jwt.user_id.as_deref(), Some("jwt:user-1"));
    // Neither side can name its way into the other's space: a key whose user is spelled like a
    // JWT identity, or a JWT whose sub is spelled like a key identity, stays in its own.
    let spelled = auth.authenticate(Some("Bearer sk-two-0123456789")).unwrap();
    assert_eq!(spelled.user_id.as_deref(), Some("key:jwt:user-1"));
    assert_ne!(spelled.user_id, by_jwt.user_id);
    let sneaky = sign(Algorithm::RS256, &k.rsa_private, &claims(json!({"sub": "key:user-1"})));
    let sneaky = auth.authenticate(Some(&bearer(&sneaky))).unwrap();
    assert_eq!(sneaky.user_id.as_deref(), Some("jwt:key:user-1"));
    assert_ne!(sneaky.user_id, by_key.user_id);
    // The prefixes are public so the gateway and its docs can name them.
    assert!(by_key.user_id.unwrap().starts_with(stowage_http::API_KEY_USER_PREFIX));
    assert!(by_jwt.user_id.unwrap().starts_with(stowage_http::JWT_USER_PREFIX));
}

/// `name`'s full test name in this binary (its module path, as libtest filters by), for a
/// child process that runs one ignored test of this file.
fn child_test(name: &str) -> String {
    let module = module_path!().split_once("::").map_or("", |(_, m)| m);
    format!("{module}::{name}")
}
