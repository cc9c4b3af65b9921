//! Authentication on `/mcp`: static API keys (stored hashed) and JWT bearer tokens.
//!
//! The resulting [`Identity`] becomes the artifact scope's owner. API keys and JWTs are
//! separate identity spaces, so that whoever controls an identity provider's `sub` values
//! cannot become an API key's user (or the other way round): the user id is
//! `key:<user>` for an API key (its configured `user`, else its `id`) and `jwt:<sub>` for a
//! JWT, and no two credentials of different kinds ever produce the same (tenant, user). The
//! tenant is the API key's `tenant`, or the JWT claim named by `tenant_claim`. Artifact
//! *downloads* never go through here — their signed link is the credential — so no auth token
//! ever has to appear in a URL.
//!
//! A JWT is accepted only with a valid signature by a configured key and algorithm, an `exp`
//! in the future and an `nbf` (when present) in the past, both within `leeway_secs`, a
//! non-empty string `sub`, and — when `issuer` or `audience` is configured — an `iss` or
//! `aud` that is present and matches (a token without them, or with `null`, is refused).
//!
//! API keys are long random strings, so a single SHA-256 is the right hash for them (a slow
//! password hash buys nothing against 128+ bits of entropy and would cost every request).

use std::path::PathBuf;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::ApiError;

/// `[auth]` in stowage.toml. Empty means no authentication (allowed on loopback only).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuthConfig {
    /// Static API keys, each stored as the hex SHA-256 of the key (`stowage hash-key` prints it).
    pub api_keys: Vec<ApiKeyConfig>,
    /// JWT bearer tokens; absent means JWTs are not accepted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub jwt: Option<JwtConfig>,
}

/// One `[[auth.api_keys]]` entry: a key known by its hash.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApiKeyConfig {
    /// Key id: recorded with artifacts as the API key id, and the user id unless `user` is set.
    pub id: String,
    /// Hex SHA-256 of the key itself.
    pub sha256: String,
    /// The user its callers act as (default: the key id).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// The tenant its callers belong to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
}

/// `[auth.jwt]`: which bearer tokens are accepted and how they map onto owners.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JwtConfig {
    /// Accepted algorithms, any of HS256, RS256, ES256.
    pub algorithms: Vec<String>,
    /// When set, every token must carry an `iss` equal to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issuer: Option<String>,
    /// When not empty, every token must carry an `aud` naming one of these.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub audience: Vec<String>,
    /// Environment variable holding the HS256 shared secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hs256_secret_env: Option<String>,
    /// PEM public keys (RSA or EC) for RS256/ES256.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub public_key_files: Vec<PathBuf>,
    /// A JWKS JSON file (keys picked by `kid`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jwks_file: Option<PathBuf>,
    /// Claim holding the tenant id, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant_claim: Option<String>,
    /// Allowed clock skew in seconds for `exp` and `nbf`.
    #[serde(default = "default_leeway")]
    pub leeway_secs: u64,
}

fn default_leeway() -> u64 {
    30
}

/// Prefix of the user id of every API-key identity (`key:ci-bot`).
pub const API_KEY_USER_PREFIX: &str = "key:";
/// Prefix of the user id of every JWT identity (`jwt:<sub>`).
pub const JWT_USER_PREFIX: &str = "jwt:";

/// Who is calling, as far as artifact ownership is concerned.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Identity {
    /// `key:<user>` or `jwt:<sub>`: the two kinds of credential never share a user id.
    pub user_id: Option<String>,
    /// The tenant: the key's `tenant`, or the token's `tenant_claim`.
    pub tenant_id: Option<String>,
    /// The API key's id, when the caller used one (recorded with its artifacts).
    pub api_key_id: Option<String>,
}

impl Identity {
    /// The identity of a verified API key.
    pub fn api_key(key: &ApiKeyConfig) -> Identity {
        let user = key.user.as_deref().unwrap_or(&key.id);
        Identity { user_id: Some(format!("{API_KEY_USER_PREFIX}{user}")), tenant_id: key.tenant.clone(), api_key_id: Some(key.id.clone()) }
    }

    /// The identity of a verified JWT with subject `sub`.
    pub fn jwt(sub: &str, tenant: Option<String>) -> Identity {
        Identity { user_id: Some(format!("{JWT_USER_PREFIX}{sub}")), tenant_id: tenant, api_key_id: None }
    }
}

/// Why `[auth]` cannot be put to use; each message names the key to fix.
#[derive(Debug, thiserror::Error)]
pub enum AuthSetupError {
    /// An algorithm other than HS256, RS256 and ES256.
    #[error("auth.jwt: unsupported algorithm {0:?}; use HS256, RS256 or ES256")]
    Algorithm(String),
    /// A verification key (secret, PEM or JWKS) that cannot be read or parsed.
    #[error("auth.jwt: {0}")]
    Key(String),
    /// An API key hash that is not 64 hex digits.
    #[error("auth.api_keys {0:?}: sha256 must be 64 hex digits (the hash of the key, not the key)")]
    BadHash(String),
}

/// Why a request's credentials were refused: each one line that says what to do, sent as the
/// 401's message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// No `Authorization: Bearer …` header, or an empty token.
    #[error("missing bearer token: send Authorization: Bearer <api key or jwt>")]
    MissingBearer,
    /// A token that is neither a configured API key nor a JWT this gateway verifies.
    #[error("invalid credentials")]
    InvalidCredentials,
    /// A token shaped like a JWT whose header cannot be decoded.
    #[error("malformed jwt")]
    MalformedJwt,
    /// A JWT signed with an algorithm outside `auth.jwt.algorithms`.
    #[error("jwt algorithm {0:?} is not accepted")]
    Algorithm(Algorithm),
    /// No configured key has the JWT's algorithm and key id.
    #[error("no key matches the jwt")]
    NoKey,
    /// No configured key verifies the JWT's signature.
    #[error("invalid jwt signature")]
    Signature,
    /// A validly signed JWT past its `exp` (beyond the leeway).
    #[error("jwt expired; get a fresh token")]
    Expired,
    /// A validly signed JWT whose `nbf` is still in the future.
    #[error("jwt not valid yet (its nbf is in the future); check the clocks or wait")]
    NotYetValid,
    /// A validly signed JWT for another audience.
    #[error("jwt audience not accepted; request a token for this gateway's audience")]
    Audience,
    /// A validly signed JWT from another issuer.
    #[error("jwt issuer not accepted; use a token from the configured issuer")]
    Issuer,
    /// A JWT without a claim this gateway requires (`exp`, `sub`, and `iss`/`aud` when configured).
    #[error("jwt lacks the {0} claim, which this gateway requires")]
    MissingClaim(String),
    /// A JWT whose time claim is not a number of seconds.
    #[error("jwt claim {0} is malformed; it must be a number of seconds")]
    MalformedClaim(String),
    /// A JWT whose `sub` is the empty string.
    #[error("jwt has an empty sub claim; issue tokens whose sub names the user")]
    EmptySubject,
}

/// Verifies bearer credentials against the configuration.
pub struct Authenticator {
    api_keys: Vec<(ApiKeyConfig, [u8; 32])>,
    jwt: Option<JwtVerifier>,
}

struct JwtVerifier {
    keys: Vec<(Option<String>, Algorithm, DecodingKey)>,
    validation: Validation,
    tenant_claim: Option<String>,
}

impl Authenticator {
    /// Builds the verifier, reading key files now so that a bad file fails at start-up.
    pub fn new(config: &AuthConfig) -> Result<Option<Arc<Authenticator>>, AuthSetupError> {
        if config.api_keys.is_empty() && config.jwt.is_none() {
            return Ok(None);
        }
        let mut api_keys = Vec::new();
        for k in &config.api_keys {
            let bytes = hex::decode(k.sha256.trim()).ok().filter(|b| b.len() == 32).ok_or_else(|| AuthSetupError::BadHash(k.id.clone()))?;
            api_keys.push((k.clone(), bytes.try_into().expect("32 bytes")));
        }
        let jwt = config.jwt.as_ref().map(JwtVerifier::new).transpose()?;
        Ok(Some(Arc::new(Authenticator { api_keys, jwt })))
    }

    /// Checks an `Authorization` header value.
    pub fn authenticate(&self, authorization: Option<&str>) -> Result<Identity, AuthError> {
        let token = authorization
            .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")))
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .ok_or(AuthError::MissingBearer)?;
        if token.split('.').count() == 3
            && let Some(jwt) = &self.jwt
        {
            return jwt.verify(token);
        }
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        for (k, hash) in &self.api_keys {
            if bool::from(digest.ct_eq(hash)) {
                return Ok(Identity::api_key(k));
            }
        }
        Err(AuthError::InvalidCredentials)
    }
}

impl JwtVerifier {
    fn new(c: &JwtConfig) -> Result<JwtVerifier, AuthSetupError> {
        let mut algorithms = Vec::new();
        for a in &c.algorithms {
            algorithms.push(match a.as_str() {
                "HS256" => Algorithm::HS256,
                "RS256" => Algorithm::RS256,
                "ES256" => Algorithm::ES256,
                other => return Err(AuthSetupError::Algorithm(other.to_owned())),
            });
        }
        if algorithms.is_empty() {
            return Err(AuthSetupError::Key("list at least one algorithm".into()));
        }
        let mut keys = Vec::new();
        if let Some(var) = &c.hs256_secret_env {
            let secret = std::env::var(var).map_err(|_| AuthSetupError::Key(format!("environment variable {var} is not set")))?;
            keys.push((None, Algorithm::HS256, DecodingKey::from_secret(secret.as_bytes())));
        }
        for path in &c.public_key_files {
            let pem = std::fs::read(path).map_err(|e| AuthSetupError::Key(format!("cannot read {}: {e}", path.display())))?;
            let key = if let Ok(k) = DecodingKey::from_rsa_pem(&pem) {
                (None, Algorithm::RS256, k)
            } else if let Ok(k) = DecodingKey::from_ec_pem(&pem) {
                (None, Algorithm::ES256, k)
            } else {
                return Err(AuthSetupError::Key(format!("{} is not an RSA or EC public key in PEM", path.display())));
            };
            keys.push(key);
        }
        if let Some(path) = &c.jwks_file {
            let text = std::fs::read_to_string(path).map_err(|e| AuthSetupError::Key(format!("cannot read {}: {e}", path.display())))?;
            let set: JwkSet =
                serde_json::from_str(&text).map_err(|e| AuthSetupError::Key(format!("{} is not a JWKS: {e}", path.display())))?;
            for jwk in &set.keys {
                let alg = match &jwk.algorithm {
                    jsonwebtoken::jwk::AlgorithmParameters::RSA(_) => Algorithm::RS256,
                    jsonwebtoken::jwk::AlgorithmParameters::EllipticCurve(_) => Algorithm::ES256,
                    _ => continue,
                };
                let key = DecodingKey::from_jwk(jwk).map_err(|e| AuthSetupError::Key(format!("{}: {e}", path.display())))?;
                keys.push((jwk.common.key_id.clone(), alg, key));
            }
        }
        keys.retain(|(_, alg, _)| algorithms.contains(alg));
        if keys.is_empty() {
            return Err(AuthSetupError::Key("no key for the configured algorithms".into()));
        }
        let mut validation = Validation::new(algorithms[0]);
        validation.algorithms = algorithms;
        validation.leeway = c.leeway_secs;
        // jsonwebtoken leaves `nbf` unchecked unless asked, and checks `iss` and `aud` only
        // when the token has them: a configured issuer or audience must also be required, or a
        // token that simply omits the claim (or sets it to null) passes.
        validation.validate_nbf = true;
        let mut required = vec!["exp", "sub"];
        if let Some(iss) = &c.issuer {
            validation.set_issuer(&[iss]);
            required.push("iss");
        }
        if c.audience.is_empty() {
            validation.validate_aud = false;
        } else {
            validation.set_audience(&c.audience);
            required.push("aud");
        }
        validation.set_required_spec_claims(&required);
        Ok(JwtVerifier { keys, validation, tenant_claim: c.tenant_claim.clone() })
    }

    fn verify(&self, token: &str) -> Result<Identity, AuthError> {
        let header = jsonwebtoken::decode_header(token).map_err(|_| AuthError::MalformedJwt)?;
        if !self.validation.algorithms.contains(&header.alg) {
            return Err(AuthError::Algorithm(header.alg));
        }
        let mut last = AuthError::NoKey;
        for (kid, alg, key) in &self.keys {
            if *alg != header.alg || (kid.is_some() && header.kid.is_some() && kid != &header.kid) {
                continue;
            }
            let mut validation = self.validation.clone();
            validation.algorithms = vec![*alg];
            match jsonwebtoken::decode::<serde_json::Map<String, serde_json::Value>>(token, key, &validation) {
                Ok(data) => {
                    let claims = data.claims;
                    // `sub` is required, so it is a string; an empty one names nobody.
                    let sub = claims.get("sub").and_then(|v| v.as_str()).filter(|s| !s.is_empty());
                    let Some(sub) = sub else { return Err(AuthError::EmptySubject) };
                    let tenant = self.tenant_claim.as_ref().and_then(|c| claims.get(c)).and_then(|v| v.as_str()).map(str::to_owned);
                    return Ok(Identity::jwt(sub, tenant));
                }
                Err(e) => {
                    use jsonwebtoken::errors::ErrorKind as K;
                    last = match e.kind() {
                        K::ExpiredSignature => AuthError::Expired,
                        K::InvalidAudience => AuthError::Audience,
                        K::InvalidIssuer => AuthError::Issuer,
                        K::ImmatureSignature => AuthError::NotYetValid,
                        K::MissingRequiredClaim(c) => AuthError::MissingClaim(c.clone()),
                        K::InvalidClaimFormat(c) => AuthError::MalformedClaim(c.clone()),
                        _ => AuthError::Signature,
                    };
                    // An expired or wrong-audience token with a valid signature is final.
                    if !matches!(e.kind(), K::InvalidSignature) {
                        return Err(last);
                    }
                }
            }
        }
        Err(last)
    }
}

/// Axum middleware: refuses unauthenticated requests with 401 and attaches the [`Identity`].
pub async fn require_auth(State(auth): State<Arc<Authenticator>>, mut req: Request, next: Next) -> Response {
    let header = req.headers().get(header::AUTHORIZATION).and_then(|v| v.to_str().ok());
    match auth.authenticate(header) {
        Ok(identity) => {
            req.extensions_mut().insert(identity);
            next.run(req).await
        }
        Err(refused) => {
            let mut resp = ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", refused.to_string()).into_response();
            resp.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            resp
        }
    }
}

/// The hex SHA-256 to put in `auth.api_keys[].sha256` for a key.
pub fn hash_api_key(key: &str) -> String {
    hex::encode(Sha256::digest(key.as_bytes()))
}
