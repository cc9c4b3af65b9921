//! The input side of a call: URIs in a tool's arguments, checked against the scheme policy and
//! materialized by the tool's input rule before the call is forwarded.

use std::sync::Arc;
use stowage_core::ErrorCode;

use base64::Engine;
use serde_json::Value;
use stowage_core::{ArtifactId, ArtifactRef, ArtifactScope, StoreError};
use stowage_links::LinkSigner;
use stowage_store::{Access, ArtifactStore};

use super::{ChainingConfig, InputMode, S3Buckets};
use crate::tool_error::ToolError;

/// What translating one call's inputs needs from the gateway.
pub(crate) struct InputEnv<'a> {
    pub store: Option<&'a Arc<dyn ArtifactStore>>,
    pub signer: Option<&'a Arc<LinkSigner>>,
    pub config: &'a ChainingConfig,
    pub s3: &'a dyn S3Buckets,
}

/// What a translated call holds until it ends: the files written for `path` mode live in a
/// private directory removed when this is dropped (after the upstream answered, or when the
/// call is cancelled and its future dropped).
#[derive(Debug, Default)]
pub(crate) struct Materialized {
    dir: Option<tempfile::TempDir>,
    /// How many URIs were rewritten.
    pub rewritten: usize,
    /// Bytes materialized for the call so far (inline or in files), and written to files.
    bytes: u64,
    file_bytes: u64,
}

impl Materialized {
    /// Counts `size` more bytes materialized for the call in `mode` (a file too for `path`),
    /// refusing what would pass `[gateway.chaining]`'s per-call caps.
    pub(super) fn take(&mut self, env: &InputEnv<'_>, tool: &str, mode: InputMode, size: u64) -> Result<(), ToolError> {
        let (bytes, files) =
            (self.bytes.saturating_add(size), self.file_bytes.saturating_add(if mode == InputMode::Path { size } else { 0 }));
        check_call_totals(env, tool, bytes, files, None)?;
        (self.bytes, self.file_bytes) = (bytes, files);
        Ok(())
    }
}

/// Refuses a call whose inputs would come to `bytes` materialized (`files` of them in
/// temporary files) past `[gateway.chaining]`'s per-call caps, in one line naming the cap.
/// `count`: how many artifacts, when known.
pub(super) fn check_call_totals(env: &InputEnv<'_>, tool: &str, bytes: u64, files: u64, count: Option<usize>) -> Result<(), ToolError> {
    let of = count.map(|n| format!(" ({n} input{})", if n == 1 { "" } else { "s" })).unwrap_or_default();
    let max = env.config.max_materialize_bytes_per_call;
    if bytes > max {
        return Err(ToolError::bad_request(format!(
            "{tool}'s inputs would put {bytes} bytes inline or in files{of}, over the {max} bytes one call may ([gateway.chaining] max_materialize_bytes_per_call); pass fewer or smaller artifacts, or give {tool} the url input mode"
        )));
    }
    let max = env.config.max_file_bytes_per_call;
    if files > max {
        return Err(ToolError::bad_request(format!(
            "{tool}'s inputs would write {files} bytes of files{of}, over the {max} bytes one call may ([gateway.chaining] max_file_bytes_per_call); pass fewer or smaller artifacts, or give {tool} the url input mode"
        )));
    }
    Ok(())
}

fn forbidden(message: String) -> ToolError {
    ToolError { code: ErrorCode::ArtifactForbidden.as_str(), message }
}

/// The scheme of `s` if the whole string is one URI (`scheme://rest`, no whitespace).
pub(super) fn scheme_of(s: &str) -> Option<&str> {
    let (scheme, rest) = s.split_once("://")?;
    let mut chars = scheme.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphabetic());
    let ok = first_ok && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    (ok && !rest.is_empty() && !s.chars().any(char::is_whitespace)).then_some(scheme)
}

/// JSON Pointers of every string in `v` that is a URI.
fn uri_positions(v: &Value, at: &mut String, out: &mut Vec<String>) {
    match v {
        Value::String(s) if scheme_of(s).is_some() => out.push(at.clone()),
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                let len = at.len();
                at.push_str(&format!("/{i}"));
                uri_positions(item, at, out);
                at.truncate(len);
            }
        }
        Value::Object(map) => {
            for (k, item) in map {
                let len = at.len();
                at.push('/');
                at.push_str(&k.replace('~', "~0").replace('/', "~1"));
                uri_positions(item, at, out);
                at.truncate(len);
            }
        }
        _ => {}
    }
}

/// Rewrites every URI in `arguments` for a tool whose input rule is `mode`, as the owner of
/// `scope`. Nothing is changed unless every URI is accepted: one refused URI refuses the call.
pub(crate) async fn translate_inputs(
    env: &InputEnv<'_>,
    tool: &str,
    mode: InputMode,
    scope: &ArtifactScope,
    arguments: &mut Value,
) -> Result<Materialized, ToolError> {
    let mut positions = Vec::new();
    uri_positions(arguments, &mut String::new(), &mut positions);
    let mut done = Materialized::default();
    // The call's total, from the artifacts' sizes, before a byte of any is read.
    if mode != InputMode::Url {
        let mut total = 0u64;
        let mut count = 0;
        for at in &positions {
            let Some(Value::String(uri)) = arguments.pointer(at) else { continue };
            if scheme_of(uri).is_some_and(|s| s.eq_ignore_ascii_case("artifact")) {
                let (meta, _) = lookup(env, scope, uri).await?;
                total = total.saturating_add(meta.size_bytes);
                count += 1;
            }
        }
        let files = if mode == InputMode::Path { total } else { 0 };
        check_call_totals(env, tool, total, files, Some(count))?;
    }
    let mut replacements = Vec::with_capacity(positions.len());
    for at in positions {
        let Some(Value::String(uri)) = arguments.pointer(&at) else { continue };
        let uri = uri.clone();
        if let Some(new) = materialize(env, tool, mode, scope, &uri, &mut done).await? {
            replacements.push((at, new));
        }
    }
    for (at, new) in replacements {
        if let Some(slot) = arguments.pointer_mut(&at) {
            *slot = Value::String(new);
            done.rewritten += 1;
        }
    }
    Ok(done)
}

/// One URI: `None` to pass it through as written, else its replacement.
pub(super) async fn materialize(
    env: &InputEnv<'_>,
    tool: &str,
    mode: InputMode,
    scope: &ArtifactScope,
    uri: &str,
    done: &mut Materialized,
) -> Result<Option<String>, ToolError> {
    let scheme = scheme_of(uri).unwrap_or_default().to_ascii_lowercase();
    match scheme.as_str() {
        "artifact" => {
            let (meta, store) = lookup(env, scope, uri).await?;
            let ttl = env.config.input_link_ttl();
            match mode {
                InputMode::Url => {
                    if env.config.presign_direct {
                        // The backend's own URL: the same access and expiry checks as a read.
                        let direct = store.direct_url(&Access::owner_of(scope), &meta.id, ttl).await.map_err(store_error(uri))?;
                        if let Some(url) = direct {
                            return Ok(Some(url));
                        }
                    }
                    let signer = env.signer.ok_or_else(|| {
                        ToolError::bad_request(format!(
                            "{tool} takes artifacts as signed URLs, but signed links are off: enable [links] or set another input mode for it in [gateway.chaining.inputs]"
                        ))
                    })?;
                    Ok(Some(signer.link_for(&meta, stowage_links::unix_now(), Some(ttl)).url))
                }
                _ => {
                    check_size(env, tool, uri, meta.size_bytes)?;
                    done.take(env, tool, mode, meta.size_bytes)?;
                    let bytes = store.get(&Access::owner_of(scope), &meta.id).await.map_err(store_error(uri))?;
                    inline(tool, mode, uri, meta.id.as_str(), &bytes, done).map(Some)
                }
            }
        }
        "https" => match mode {
            // The tool fetches it itself, as it would without the gateway.
            InputMode::Url => Ok(None),
            _ => {
                let bytes = fetch(env, tool, uri, done, mode).await?;
                inline(tool, mode, uri, "fetched", &bytes, done).map(Some)
            }
        },
        "s3" => {
            let bucket = uri["s3://".len()..].split('/').next().unwrap_or_default();
            match (env.s3.owns(bucket), mode) {
                // The store's own bucket: a `url` tool reads it with its own access to the
                // bucket, as it would an https:// URL; the gateway only vouches for the bucket.
                (true, InputMode::Url) => Ok(None),
                (true, _) => Err(forbidden(format!(
                    "{uri}: {tool} takes content, not object keys; pass the artifact:// URI of the result instead and the gateway gives it the bytes"
                ))),
                (false, _) => Err(forbidden(format!(
                    "{uri}: bucket \"{bucket}\" is not a bucket of this gateway's store; pass an artifact:// URI or an https:// URL"
                ))),
            }
        }
        other => Err(forbidden(format!(
            "{uri}: the {other}:// scheme is not accepted in {tool}'s arguments; use an artifact:// URI from an earlier result or an https:// URL"
        ))),
    }
}

/// A read link for a declared input blob: `artifact://` becomes a short-lived signed GET URL
/// (with the artifact's media type), `https://` passes through, every other URI is refused
/// like in a tool with a `url` rule.
pub(crate) async fn resolve_link(
    env: &InputEnv<'_>,
    tool: &str,
    scope: &ArtifactScope,
    uri: &str,
) -> Result<(String, Option<String>), ToolError> {
    let mut unused = Materialized::default();
    if scheme_of(uri).is_some_and(|s| s.eq_ignore_ascii_case("artifact")) {
        let (meta, _) = lookup(env, scope, uri).await?;
        let url = materialize(env, tool, InputMode::Url, scope, uri, &mut unused).await?.unwrap_or_else(|| uri.to_owned());
        return Ok((url, meta.mime_type));
    }
    if scheme_of(uri).is_none() {
        return Err(ToolError::bad_request(format!(
            "{tool} needs a URI here, not {uri:?}: the artifact:// URI of an earlier result, or an https:// URL"
        )));
    }
    let url = materialize(env, tool, InputMode::Url, scope, uri, &mut unused).await?.unwrap_or_else(|| uri.to_owned());
    Ok((url, None))
}

/// The artifact as the caller's owner: another owner's id answers exactly like a missing one.
pub(super) async fn lookup<'a>(
    env: &InputEnv<'a>,
    scope: &ArtifactScope,
    uri: &str,
) -> Result<(ArtifactRef, &'a Arc<dyn ArtifactStore>), ToolError> {
    let store = env.store.filter(|s| !s.is_noop()).ok_or_else(|| {
        ToolError::bad_request(format!("{uri}: this gateway keeps no artifacts (its store keeps nothing), so none can be passed to a tool"))
    })?;
    let not_found = || ToolError {
        code: ErrorCode::ArtifactNotFound.as_str(),
        message: format!("{uri}: no such artifact for this user (it may have expired); pass a URI from one of your own tool results"),
    };
    let id = ArtifactId::parse_loose(uri).map_err(|_| not_found())?;
    match store.meta(&Access::owner_of(scope), &id).await {
        Ok(meta) => Ok((meta, store)),
        Err(StoreError::NotFound { .. }) if another_session_of_the_caller(store, scope, &id).await => Err(forbidden(format!(
            "{uri} belongs to another of your sessions, and this store keeps each session's artifacts to itself ([store] isolate_sessions); produce it again in this session"
        ))),
        Err(e) => Err(store_error(uri)(e)),
    }
}

/// Whether `id`, which the caller's owner cannot reach, is held by another session of the
/// same tenant and user (a store that isolates sessions). Only then may the answer differ from
/// a missing artifact's: the user may know what their own sessions stored, while another
/// user's id must stay indistinguishable from one that never existed. The operator view is
/// used only to take that decision, and only a record of the caller's own user counts.
async fn another_session_of_the_caller(store: &Arc<dyn ArtifactStore>, scope: &ArtifactScope, id: &ArtifactId) -> bool {
    let Ok(meta) = store.meta(&Access::Operator, id).await else { return false };
    let (theirs, mine) = (&meta.scope, scope);
    theirs.user_id.is_some() && theirs.tenant_id == mine.tenant_id && theirs.user_id == mine.user_id && theirs.session_id != mine.session_id
}

pub(super) fn store_error(uri: &str) -> impl Fn(StoreError) -> ToolError + '_ {
    move |e| match e {
        StoreError::NotFound { .. } => ToolError {
            code: ErrorCode::ArtifactNotFound.as_str(),
            message: format!("{uri}: no such artifact for this user (it may have expired); pass a URI from one of your own tool results"),
        },
        StoreError::Expired { .. } => ToolError {
            code: ErrorCode::ArtifactUrlExpired.as_str(),
            message: format!("{uri}: this artifact has expired; produce it again"),
        },
        e => ToolError { code: e.code().as_str(), message: format!("{uri}: the store could not read it ({})", e.code()) },
    }
}

pub(super) fn check_size(env: &InputEnv<'_>, tool: &str, what: &str, size: u64) -> Result<(), ToolError> {
    let max = env.config.max_materialize_bytes;
    if size > max {
        return Err(ToolError::bad_request(format!(
            "{what} is {size} bytes, over the {max} bytes {tool} may get inline or as a file ([gateway.chaining] max_materialize_bytes); raise it, or give {tool} the url input mode"
        )));
    }
    Ok(())
}

/// The bytes in the form `mode` asks for.
pub(super) fn inline(
    tool: &str,
    mode: InputMode,
    what: &str,
    name: &str,
    bytes: &[u8],
    done: &mut Materialized,
) -> Result<String, ToolError> {
    match mode {
        InputMode::Url => unreachable!("url mode never inlines"),
        InputMode::Base64 => Ok(base64::engine::general_purpose::STANDARD.encode(bytes)),
        InputMode::Text => String::from_utf8(bytes.to_vec()).map_err(|_| {
            ToolError::bad_request(format!(
                "{what} is not UTF-8 text, and {tool} takes its inputs as text; give {tool} the base64 or url input mode"
            ))
        }),
        InputMode::Path => write_file(done, name, bytes).map_err(|e| ToolError {
            code: ErrorCode::ArtifactStorageFailed.as_str(),
            message: format!("{what}: cannot write the file for {tool}: {e}"),
        }),
    }
}

/// Writes `bytes` read-only into the call's private directory (0700, removed after the call).
fn write_file(done: &mut Materialized, name: &str, bytes: &[u8]) -> std::io::Result<String> {
    if done.dir.is_none() {
        done.dir = Some(tempfile::Builder::new().prefix("stowage-input-").tempdir()?);
    }
    let dir = done.dir.as_ref().expect("just made").path();
    // Names are artifact ids (safe characters only), numbered so two inputs never collide.
    let n = std::fs::read_dir(dir)?.count();
    let path = dir.join(format!("{n}-{name}"));
    std::fs::write(&path, bytes)?;
    let mut perms = std::fs::metadata(&path)?.permissions();
    perms.set_readonly(true);
    std::fs::set_permissions(&path, perms)?;
    Ok(path.display().to_string())
}

/// Fetches an `https://` URL for the model, only from an allowed host, without following
/// redirects (a redirect could point anywhere) and within the size cap.
async fn fetch(env: &InputEnv<'_>, tool: &str, uri: &str, done: &mut Materialized, mode: InputMode) -> Result<Vec<u8>, ToolError> {
    let host = reqwest::Url::parse(uri).ok().and_then(|u| u.host_str().map(str::to_owned)).unwrap_or_default();
    if !env.config.may_fetch(&host) {
        return Err(forbidden(format!(
            "{uri}: the gateway fetches only from hosts in [gateway.chaining] fetch_allowed_hosts, and \"{host}\" is not one; add it there, or pass an artifact:// URI"
        )));
    }
    let failed = |e: String| ToolError { code: ErrorCode::BadRequest.as_str(), message: format!("{uri}: cannot fetch it for {tool}: {e}") };
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(std::time::Duration::from_secs(60))
        .build()
        .map_err(|e| failed(e.to_string()))?;
    let mut response = client.get(uri).send().await.map_err(|e| failed(e.to_string()))?;
    if !response.status().is_success() {
        return Err(failed(format!("the server answered {}", response.status())));
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| failed(e.to_string()))? {
        body.extend_from_slice(&chunk);
        check_size(env, tool, uri, body.len() as u64)?;
        // Counted as it arrives: a body's size is known only once it is whole.
        done.take(env, tool, mode, chunk.len() as u64)?;
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_whole_uris_are_uris() {
        assert_eq!(scheme_of("artifact://demo_0123"), Some("artifact"));
        assert_eq!(scheme_of("https://example.com/a.png"), Some("https"));
        assert_eq!(scheme_of("s3://bucket/key"), Some("s3"));
        assert_eq!(scheme_of("see artifact://x here"), None);
        assert_eq!(scheme_of("plain text"), None);
        assert_eq!(scheme_of("1ab://x"), None);
        assert_eq!(scheme_of("artifact://"), None);
    }

    /// s3:// is accepted only for the store's own bucket, and there only for `url` tools (they
    /// read the object themselves); content modes need the artifact:// URI.
    #[tokio::test]
    async fn s3_uris_pass_only_into_the_stores_own_bucket_and_only_for_url_tools() {
        struct Ours;
        impl S3Buckets for Ours {
            fn owns(&self, bucket: &str) -> bool {
                bucket == "ours"
            }
        }
        let config = ChainingConfig::default();
        let env = InputEnv { store: None, signer: None, config: &config, s3: &Ours };
        let scope = ArtifactScope::default();
        let mut done = Materialized::default();
        let own = materialize(&env, "t", InputMode::Url, &scope, "s3://ours/stowage/blobs/ab/abcd", &mut done).await;
        assert_eq!(own.unwrap(), None, "passed through as written");
        let inline = materialize(&env, "t", InputMode::Base64, &scope, "s3://ours/k", &mut done).await.unwrap_err();
        assert_eq!(inline.code, "artifact_forbidden");
        assert!(inline.message.contains("pass the artifact:// URI"), "{}", inline.message);
        let theirs = materialize(&env, "t", InputMode::Url, &scope, "s3://theirs/k", &mut done).await.unwrap_err();
        assert_eq!(theirs.code, "artifact_forbidden");
        assert!(theirs.message.contains("not a bucket of this gateway's store"), "{}", theirs.message);
    }

    #[test]
    fn positions_are_json_pointers_even_for_odd_keys() {
        let v = serde_json::json!({"a/b": "artifact://x", "list": ["https://h/1", "no", {"~k": "s3://b/k"}], "n": 1});
        let mut out = Vec::new();
        uri_positions(&v, &mut String::new(), &mut out);
        out.sort();
        assert_eq!(out, vec!["/a~1b", "/list/0", "/list/2/~0k"]);
        for p in &out {
            assert!(v.pointer(p).is_some(), "{p}");
        }
    }
}
