//! The HTTP routes as a client meets them, through the real router and a real store: status
//! codes, the error bodies, the headers that keep artifacts safe on our origin, ranges,
//! conditional requests, links under either store isolation, and single-use upload slots —
//! opened through the `LinkService` and uploaded to over a real loopback connection; and what a
//! browser may do with bytes whose claimed media type lies.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use http_body_util::BodyExt;
use serde_json::Value;
use sha2::{Digest, Sha256};
use stowage_core::{ArtifactId, ArtifactRef, ArtifactScope, Isolation, Owner, PutOptions};
use stowage_http::{HttpState, LinkService, SlotRequest, SlotSpec, SlotState, routes};
use stowage_links::{KeyRing, LinkSigner, LinksConfig, Operation};
use stowage_store::{Access, ArtifactStore, MemoryStore, RetentionConfig};
use tokio::io::AsyncWriteExt;
use tower::ServiceExt;

const NOW: u64 = 1_900_000_000;

fn fixed_now() -> u64 {
    NOW
}

/// A memory store whose clock reads [`NOW`] too, so artifacts' expiries and links' agree.
fn store_at_now(isolation: Isolation) -> Arc<dyn ArtifactStore> {
    let clock = stowage_store::ManualClock::new(time::OffsetDateTime::from_unix_timestamp(NOW as i64).unwrap());
    Arc::new(MemoryStore::builder().clock(Arc::new(clock)).isolation(isolation).build())
}

struct World {
    store: Arc<dyn ArtifactStore>,
    signer: Arc<LinkSigner>,
    state: HttpState,
}

impl World {
    fn new() -> World {
        let store: Arc<dyn ArtifactStore> = Arc::new(MemoryStore::new(RetentionConfig::default()));
        let ring = KeyRing::new([("k1", vec![5u8; 32])]).unwrap();
        let signer = Arc::new(LinkSigner::new(ring, &LinksConfig::default()));
        let mut state = HttpState::new(store.clone(), signer.clone());
        state.clock = fixed_now;
        World { store, signer, state }
    }

    fn app(&self) -> Router {
        routes(self.state.clone())
    }

    async fn put(&self, scope: &ArtifactScope, bytes: &[u8], mime: &str, filename: Option<&str>) -> ArtifactRef {
        let mut opts = PutOptions::scoped(scope.clone()).mime(mime);
        opts.filename = filename.map(str::to_owned);
        self.store.put_bytes(bytes.to_vec().into(), opts).await.unwrap()
    }

    fn token(&self, op: Operation, target: &str, owner: &Owner, exp: u64) -> String {
        self.signer.ring().mint(op, target, owner, exp)
    }

    /// The path part of a fresh signed link for `r`, as its owner would get it.
    fn link(&self, r: &ArtifactRef) -> String {
        path_of(&self.signer.artifact_link(&r.id, &r.scope.owner(), NOW, None).url)
    }

    async fn send(&self, req: Request<Body>) -> (StatusCode, axum::http::HeaderMap, Vec<u8>) {
        let resp = self.app().oneshot(req).await.unwrap();
        let status = resp.status();
        let headers = resp.headers().clone();
        let body = resp.into_body().collect().await.unwrap().to_bytes().to_vec();
        (status, headers, body)
    }

    async fn get(&self, uri: &str, headers: &[(&str, &str)]) -> (StatusCode, axum::http::HeaderMap, Vec<u8>) {
        let mut req = Request::get(uri);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        self.send(req.body(Body::empty()).unwrap()).await
    }
}

/// The path and query of a link minted for the default public URL.
fn path_of(url: &str) -> String {
    url.strip_prefix("http://127.0.0.1:8787").unwrap().to_owned()
}

/// Each `(what, uri, status, code)` is refused with that status and error code, as JSON, and
/// without a byte of the artifact.
async fn assert_refused(w: &World, cases: impl IntoIterator<Item = (&str, String, StatusCode, &str)>) {
    for (what, uri, status, code) in cases {
        let (got, h, body) = w.get(&uri, &[]).await;
        assert_eq!(got, status, "{what}: {}", String::from_utf8_lossy(&body));
        assert_eq!(error_code(&body), code, "{what}");
        assert_eq!(h["content-type"], "application/json", "{what}");
        assert!(!String::from_utf8_lossy(&body).contains("secret bytes"), "{what}");
    }
}

fn error_code(body: &[u8]) -> String {
    let v: Value = serde_json::from_slice(body).unwrap_or_else(|_| panic!("json error body: {}", String::from_utf8_lossy(body)));
    v["error"]["code"].as_str().unwrap().to_string()
}

fn s1() -> ArtifactScope {
    ArtifactScope::session("s1")
}

#[tokio::test]
async fn download_streams_bytes_with_safe_headers() {
    let w = World::new();
    let bytes: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
    let r = w.put(&s1(), &bytes, "image/png", Some("chart 1.png")).await;
    let (status, h, body) = w.get(&w.link(&r), &[]).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body, bytes);
    assert_eq!(h["content-type"], "image/png");
    assert_eq!(h["content-length"], "10000");
    assert_eq!(h["etag"], format!("\"{}\"", r.sha256).as_str());
    assert_eq!(h["accept-ranges"], "bytes");
    assert_eq!(h["x-content-type-options"], "nosniff");
    assert!(h["content-disposition"].to_str().unwrap().starts_with("inline; filename=\"chart 1.png\""));
    assert!(h["content-security-policy"].to_str().unwrap().starts_with("sandbox"));

    // HEAD: same headers, no body.
    let path = w.link(&r);
    let (status, h2, body) = w.send(Request::builder().method(Method::HEAD).uri(&path).body(Body::empty()).unwrap()).await;
    assert_eq!(status, StatusCode::OK);
    assert!(body.is_empty());
    assert_eq!(h2["content-length"], "10000");
    assert_eq!(h2["etag"], h["etag"]);

    // Meta.
    let meta_path = path.replacen(&format!("/artifacts/{}", r.id), &format!("/artifacts/{}/meta", r.id), 1);
    let (status, _, body) = w.get(&meta_path, &[]).await;
    assert_eq!(status, StatusCode::OK);
    let meta: ArtifactRef = serde_json::from_slice(&body).unwrap();
    assert_eq!(meta, r);
}

#[tokio::test]
async fn ranges_and_conditional_requests() {
    let w = World::new();
    let bytes: Vec<u8> = (0..100u8).collect();
    let r = w.put(&s1(), &bytes, "application/octet-stream", None).await;
    let path = w.link(&r);
    for (range, want, content_range) in [
        ("bytes=0-0", 0..1, "bytes 0-0/100"),
        ("bytes=99-99", 99..100, "bytes 99-99/100"),
        ("bytes=-1", 99..100, "bytes 99-99/100"),
        ("bytes=-10", 90..100, "bytes 90-99/100"),
        ("bytes=95-", 95..100, "bytes 95-99/100"),
        ("bytes=90-1000", 90..100, "bytes 90-99/100"),
        ("bytes=-500", 0..100, "bytes 0-99/100"),
    ] {
        let (status, h, body) = w.get(&path, &[("range", range)]).await;
        assert_eq!(status, StatusCode::PARTIAL_CONTENT, "{range}");
        assert_eq!(body, bytes[want.clone()].to_vec(), "{range}");
        assert_eq!(h["content-range"], content_range, "{range}");
        assert_eq!(h["content-length"], (want.end - want.start).to_string().as_str());
    }
    for range in ["bytes=100-", "bytes=100-200", "bytes=-0"] {
        let (status, h, body) = w.get(&path, &[("range", range)]).await;
        assert_eq!(status, StatusCode::RANGE_NOT_SATISFIABLE, "{range}");
        assert_eq!(h["content-range"], "bytes */100");
        assert_eq!(error_code(&body), "bad_request");
    }
    // Multi-range and garbage are ignored: the whole body.
    for range in ["bytes=0-1,5-6", "pages=1"] {
        let (status, _, body) = w.get(&path, &[("range", range)]).await;
        assert_eq!((status, body.len()), (StatusCode::OK, 100), "{range}");
    }
    let etag = format!("\"{}\"", r.sha256);
    let (status, h, body) = w.get(&path, &[("if-none-match", &etag)]).await;
    assert_eq!(status, StatusCode::NOT_MODIFIED);
    assert!(body.is_empty());
    assert_eq!(h["etag"], etag.as_str());
    let (status, _, _) = w.get(&path, &[("if-none-match", "\"something-else\"")]).await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn active_types_are_sandboxed_attachments() {
    let w = World::new();
    for (mime, body) in [
        ("image/svg+xml", &b"<svg xmlns='http://www.w3.org/2000/svg'><script>alert(1)</script></svg>"[..]),
        ("text/html", b"<html><script>alert(document.cookie)</script></html>"),
        ("application/xml", b"<?xml version='1.0'?><x/>"),
        ("text/javascript", b"alert(1)"),
    ] {
        let r = w.put(&s1(), body, mime, Some("page")).await;
        let (status, h, _) = w.get(&w.link(&r), &[]).await;
        assert_eq!(status, StatusCode::OK);
        assert!(h["content-disposition"].to_str().unwrap().starts_with("attachment;"), "{mime}");
        assert!(h["content-security-policy"].to_str().unwrap().starts_with("sandbox"), "{mime}");
        assert_eq!(h["x-content-type-options"], "nosniff");
    }
}

#[tokio::test]
async fn compact_links_refuse_every_tampered_swapped_truncated_or_expired_form() {
    // The links the gateway hands out carry the compact token (key id, expiry, a MAC over the
    // artifact and its owner): the route gives each forgery the code a v1 token would get.
    let w = World::new();
    let r = w.put(&s1(), b"secret bytes of s1", "text/plain", None).await;
    let other = w.put(&ArtifactScope::session("s2").with_user("bob"), b"secret bytes of s2", "text/plain", None).await;
    let token_of = |path: &str| path.split_once("?token=").unwrap().1.to_owned();
    let good = w.link(&r);
    let token = token_of(&good);
    assert!(stowage_links::is_compact(&token), "{token}");
    let base = format!("/artifacts/{}", r.id);
    let mut flipped = token.clone().into_bytes();
    let last = flipped.len() - 1;
    flipped[last] = if flipped[last] == b'A' { b'B' } else { b'A' };
    let flipped = String::from_utf8(flipped).unwrap();
    // A good token of s1's, presented for s2's artifact; and one minted for s1's owner over
    // s2's artifact, which s1's owner does not hold.
    let swapped = format!("/artifacts/{}?token={token}", other.id);
    let not_theirs = path_of(&w.signer.artifact_link_until(&other.id, &r.scope.owner(), NOW + 60).url);
    let expired = path_of(&w.signer.artifact_link_until(&r.id, &r.scope.owner(), NOW).url);
    let cases = [
        ("mac changed", format!("{base}?token={flipped}"), StatusCode::FORBIDDEN, "artifact_forbidden"),
        ("truncated", format!("{base}?token={}", &token[..token.len() - 4]), StatusCode::FORBIDDEN, "artifact_forbidden"),
        ("extended", format!("{base}?token={token}A"), StatusCode::FORBIDDEN, "artifact_forbidden"),
        ("swapped to another artifact", swapped, StatusCode::FORBIDDEN, "artifact_forbidden"),
        ("minted for an owner who does not hold it", not_theirs, StatusCode::FORBIDDEN, "artifact_forbidden"),
        ("on a path that is not an artifact id", format!("/artifacts/nope?token={token}"), StatusCode::FORBIDDEN, "artifact_forbidden"),
        ("expired", expired, StatusCode::GONE, "artifact_url_expired"),
    ];
    assert_refused(&w, cases).await;
    let (status, _, body) = w.get(&good, &[]).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body, b"secret bytes of s1");
}

#[tokio::test]
async fn bad_tokens_get_the_right_codes() {
    let w = World::new();
    let r = w.put(&s1(), b"secret bytes of s1", "text/plain", None).await;
    let owner = r.scope.owner();
    let base = format!("/artifacts/{}", r.id);
    let good = w.token(Operation::Read, r.id.as_str(), &owner, NOW + 60);
    let mut tampered = good.clone().into_bytes();
    let i = tampered.len() / 2;
    tampered[i] = if tampered[i] == b'A' { b'B' } else { b'A' };
    let tampered = String::from_utf8(tampered).unwrap();
    let other_ring = KeyRing::new([("k1", vec![6u8; 32])]).unwrap();
    let cases = [
        ("missing", base.clone(), StatusCode::FORBIDDEN, "artifact_forbidden"),
        ("not a token", format!("{base}?token=hello"), StatusCode::BAD_REQUEST, "bad_request"),
        ("tampered", format!("{base}?token={tampered}"), StatusCode::FORBIDDEN, "artifact_forbidden"),
        ("truncated", format!("{base}?token={}", &good[..good.len() - 4]), StatusCode::FORBIDDEN, "artifact_forbidden"),
        (
            "expired",
            format!("{base}?token={}", w.token(Operation::Read, r.id.as_str(), &owner, NOW)),
            StatusCode::GONE,
            "artifact_url_expired",
        ),
        (
            "wrong key",
            format!("{base}?token={}", other_ring.mint(Operation::Read, r.id.as_str(), &owner, NOW + 60)),
            StatusCode::FORBIDDEN,
            "artifact_forbidden",
        ),
        (
            "write token",
            format!("{base}?token={}", w.token(Operation::Write, r.id.as_str(), &owner, NOW + 60)),
            StatusCode::FORBIDDEN,
            "artifact_forbidden",
        ),
        (
            "other artifact's token",
            format!("{base}?token={}", w.token(Operation::Read, "art_0000000000000000", &owner, NOW + 60)),
            StatusCode::FORBIDDEN,
            "artifact_forbidden",
        ),
    ];
    assert_refused(&w, cases).await;
    let (status, _, _) = w.get(&format!("{base}?token={good}"), &[]).await;
    assert_eq!(status, StatusCode::OK);
}

/// Isolation over HTTP: a token minted for user A, however valid, never reaches user B's
/// artifact, and the refusal is indistinguishable from an id that nobody holds.
#[tokio::test]
async fn another_owners_artifact_looks_like_nothing() {
    let w = World::new();
    let b_scope = ArtifactScope::session("s").with_user("b");
    let rb = w.put(&b_scope, b"only for b", "text/plain", None).await;
    let a_scope = ArtifactScope::session("s").with_user("a");
    let a_owner = a_scope.owner();
    let for_b_id = w.token(Operation::Read, rb.id.as_str(), &a_owner, NOW + 60);
    let (status_b, _, body_b) = w.get(&format!("/artifacts/{}?token={for_b_id}", rb.id), &[]).await;
    let ghost: ArtifactId = "art_ffffffffffffffff".parse().unwrap();
    let for_ghost = w.token(Operation::Read, ghost.as_str(), &a_owner, NOW + 60);
    let (status_g, _, body_g) = w.get(&format!("/artifacts/{ghost}?token={for_ghost}"), &[]).await;
    assert_eq!(status_b, StatusCode::NOT_FOUND);
    assert_eq!((status_b, body_b.clone()), (status_g, body_g), "same answer as a never-existing id");
    assert_eq!(error_code(&body_b), "artifact_not_found");
    let (status, _, _) = w.get(&format!("/artifacts/{}/meta?token={for_b_id}", rb.id), &[]).await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // Same bytes stored by A as well: A's link serves A's record, B's keeps working.
    let ra = w.put(&a_scope, b"only for b", "text/plain", None).await;
    assert_eq!(ra.id, rb.id, "content-addressed");
    assert_eq!(w.get(&w.link(&ra), &[]).await.0, StatusCode::OK);
    assert!(w.store.delete(&Access::owner_of(&ra.scope), &ra.id).await.unwrap());
    let (status, _, body) = w.get(&w.link(&rb), &[]).await;
    assert_eq!((status, body), (StatusCode::OK, b"only for b".to_vec()), "deleting A's copy keeps B's");
}

#[tokio::test]
async fn upload_slots_are_single_use_and_write_only() {
    let w = World::new();
    let owner = s1().owner();
    let slot = w.state.slots.create(
        SlotSpec {
            owner: owner.clone(),
            put: PutOptions::scoped(s1()).filename("out.png"),
            max_bytes: 1000,
            accept: vec!["image/*".into()],
            expires_at: NOW + 60,
            expect: None,
        },
        NOW,
    );
    let wt = w.token(Operation::Write, &slot, &owner, NOW + 60);
    let put = |token: String, mime: &str, body: Vec<u8>| {
        Request::put(format!("/uploads/{slot}?token={token}")).header("content-type", mime).body(Body::from(body)).unwrap()
    };
    let png = b"\x89PNG\r\n\x1a\n0000000000000000".to_vec();

    // A read token cannot write.
    let rt = w.token(Operation::Read, &slot, &owner, NOW + 60);
    assert_eq!(w.send(put(rt, "image/png", png.clone())).await.0, StatusCode::FORBIDDEN);
    // Wrong type and oversize are refused, store nothing, and leave the slot usable.
    let (status, _, body) = w.send(put(wt.clone(), "text/html", b"<p>".to_vec())).await;
    assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE, "{}", String::from_utf8_lossy(&body));
    let (status, _, body) = w.send(put(wt.clone(), "image/png", vec![1u8; 5000])).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{}", String::from_utf8_lossy(&body));
    // A list that starts with an accepted type, a wildcard, garbage: the uploader's mistake,
    // refused with what to send instead (regression: `image/png,text/html` passed `image/*`).
    for bad in ["image/png,text/html", "image/*", "image/png; x=\"", &format!("image/{}", "p".repeat(300))] {
        let (status, _, body) = w.send(put(wt.clone(), bad, png.clone())).await;
        assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE, "{bad}: {}", String::from_utf8_lossy(&body));
        let message: Value = serde_json::from_slice(&body).unwrap();
        assert!(message["error"]["message"].as_str().unwrap().contains("send"), "{message}");
    }
    let listed = w.store.list(stowage_store::ListQuery { owner: Some(owner.clone()), ..Default::default() }).await.unwrap();
    assert!(listed.items.is_empty(), "refused uploads leave nothing behind");

    // A valid type is recorded as its parsed essence.
    let (status, _, body) = w.send(put(wt.clone(), "Image/PNG; name=\"a.html\"", png.clone())).await;
    assert_eq!(status, StatusCode::CREATED, "{}", String::from_utf8_lossy(&body));
    let r: ArtifactRef = serde_json::from_slice(&body).unwrap();
    assert_eq!((r.mime_type.as_deref(), r.filename.as_deref(), r.size_bytes), (Some("image/png"), Some("out.png"), png.len() as u64));
    assert_eq!(w.store.get(&Access::Owner(owner.clone()), &r.id).await.unwrap().to_vec(), png);

    // Single use.
    let (status, _, body) = w.send(put(wt, "image/png", png.clone())).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(error_code(&body), "bad_request");
    // Another owner's write token for this slot: not found, like any unknown slot.
    let other = w.token(Operation::Write, &slot, &ArtifactScope::session("x").with_user("x").owner(), NOW + 60);
    assert_eq!(w.send(put(other, "image/png", png)).await.0, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn health() {
    let w = World::new();
    assert_eq!(w.get("/healthz", &[]).await.0, StatusCode::OK);
    assert_eq!(w.get("/readyz", &[]).await.0, StatusCode::OK);
}

/// A link carries (tenant, user, session); the store's isolation decides which count. By
/// default a link minted in session a reads what the user stored from session b (and a fresh
/// link can be asked for from any session); with isolated sessions it is an unknown id.
#[tokio::test]
async fn links_follow_the_store_isolation() {
    for isolation in [Isolation::User, Isolation::Session] {
        let store = store_at_now(isolation);
        let ring = KeyRing::new([("k1", vec![5u8; 32])]).unwrap();
        let signer = Arc::new(LinkSigner::new(ring, &LinksConfig::default()));
        let mut state = HttpState::new(store.clone(), signer.clone());
        state.clock = fixed_now;
        let links = state.link_service();
        let app = routes(state);
        let get = |uri: String| {
            let app = app.clone();
            async move {
                let resp = app.oneshot(Request::get(uri).body(Body::empty()).unwrap()).await.unwrap();
                (resp.status(), resp.into_body().collect().await.unwrap().to_bytes().to_vec())
            }
        };
        let in_b = ArtifactScope::session("b").with_tenant("acme").with_user("alice");
        let in_a = ArtifactScope::session("a").with_tenant("acme").with_user("alice");
        let r = store.put_bytes(b"stored from b".to_vec().into(), PutOptions::scoped(in_b)).await.unwrap();
        let from_a = signer.ring().mint(Operation::Read, r.id.as_str(), &in_a.owner(), NOW + 60);
        let (status, body) = get(format!("/artifacts/{}?token={from_a}", r.id)).await;
        let ghost = "art_ffffffffffffffff";
        let for_ghost = signer.ring().mint(Operation::Read, ghost, &in_a.owner(), NOW + 60);
        let unknown = get(format!("/artifacts/{ghost}?token={for_ghost}")).await;
        let fresh = links.fresh_link(&in_a, r.id.as_str()).await;
        match isolation {
            Isolation::User => {
                assert_eq!((status, body), (StatusCode::OK, b"stored from b".to_vec()));
                let (_, link) = fresh.expect("a fresh link from another session of the user");
                let path = path_of(&link.url);
                assert_eq!(get(path).await.0, StatusCode::OK);
            }
            Isolation::Session => {
                assert_eq!((status, body), unknown, "another session's artifact looks like an unknown id");
                assert_eq!(fresh.unwrap_err(), stowage_http::ApiError::not_found());
            }
        }
    }
}

/// The clock of the over-HTTP slot test, which moves it past a slot's expiry.
static SLOT_CLOCK: AtomicU64 = AtomicU64::new(NOW);

fn slot_clock() -> u64 {
    SLOT_CLOCK.load(Ordering::SeqCst)
}

/// The routes on a real loopback port, links pointing at it, and the state's `LinkService`.
struct Served {
    addr: SocketAddr,
    store: Arc<dyn ArtifactStore>,
    signer: Arc<LinkSigner>,
    links: LinkService,
    http: reqwest::Client,
}

impl Served {
    async fn start(clock: fn() -> u64) -> Served {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let store = store_at_now(Isolation::default());
        let ring = KeyRing::new([("k1", vec![5u8; 32])]).unwrap();
        let config = LinksConfig { public_url: format!("http://{addr}"), ..LinksConfig::default() };
        let signer = Arc::new(LinkSigner::new(ring, &config));
        let mut state = HttpState::new(store.clone(), signer.clone());
        state.clock = clock;
        let links = state.link_service();
        let app = routes(state);
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Served { addr, store, signer, links, http: reqwest::Client::new() }
    }

    /// PUTs `body` as `mime` to `url`; the status and the error code or ArtifactRef JSON.
    async fn put(&self, url: &str, mime: &str, body: Vec<u8>) -> (StatusCode, Value) {
        let resp = self.http.put(url).header("content-type", mime).body(body).send().await.unwrap();
        let status = StatusCode::from_u16(resp.status().as_u16()).unwrap();
        (status, serde_json::from_slice(&resp.bytes().await.unwrap()).unwrap())
    }

    fn upload_url(&self, slot: &str, owner: &Owner, expires_at: u64) -> String {
        let token = self.signer.ring().mint(Operation::Write, slot, owner, expires_at);
        format!("http://{}/uploads/{slot}?token={token}", self.addr)
    }
}

#[tokio::test]
async fn upload_slots_opened_through_the_link_service_work_over_http() {
    let s = Served::start(slot_clock).await;
    let alice = ArtifactScope::session("s1").with_tenant("acme").with_user("alice").with_trace("run-7");
    let request = SlotRequest {
        max_bytes: 1000,
        accept: vec!["image/*".into()],
        ttl: Some(Duration::from_secs(300)),
        filename: Some("chart.png".into()),
        namespace: Some("render".into()),
    };
    let opened = s.links.open_upload_slot(&alice, request.clone()).unwrap();
    assert!(opened.link.url.starts_with(&format!("http://{}/uploads/{}?token=v1.", s.addr, opened.slot)), "{}", opened.link.url);
    assert_eq!(opened.link.expires_at, NOW + 300);
    assert_eq!(s.links.slot_state(&opened.slot), Some(SlotState::Open));

    // Another owner's token for this slot, even another session of alice's, is refused
    // exactly like a token for a slot that does not exist.
    let bob = ArtifactScope::session("s1").with_tenant("acme").with_user("bob").owner();
    let png = b"\x89PNG\r\n\x1a\n0000000000000000".to_vec();
    let unknown = s.put(&s.upload_url("slot_00000000000000000000000000000000", &bob, NOW + 60), "image/png", png.clone()).await;
    assert_eq!(unknown.0, StatusCode::NOT_FOUND);
    assert_eq!(unknown.1["error"]["code"], "artifact_not_found");
    assert_eq!(s.put(&s.upload_url(&opened.slot, &bob, NOW + 60), "image/png", png.clone()).await, unknown);
    let other_session = ArtifactScope::session("s2").with_tenant("acme").with_user("alice").owner();
    assert_eq!(s.put(&s.upload_url(&opened.slot, &other_session, NOW + 60), "image/png", png.clone()).await, unknown);
    assert_eq!(s.links.slot_state(&opened.slot), Some(SlotState::Open), "refusals leave the slot open");

    // The upload: stored as alice's artifact, with the slot's filename, namespace and scope.
    let (status, body) = s.put(&opened.link.url, "image/png", png.clone()).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let r: ArtifactRef = serde_json::from_value(body).unwrap();
    assert_eq!((r.filename.as_deref(), r.mime_type.as_deref(), r.scope.clone()), (Some("chart.png"), Some("image/png"), alice.clone()));
    assert!(r.id.as_str().starts_with("render_"), "{}", r.id);
    assert_eq!(s.links.slot_state(&opened.slot), Some(SlotState::Done(Box::new(r.clone()))));
    assert_eq!(s.store.get(&Access::owner_of(&alice), &r.id).await.unwrap().to_vec(), png);
    let download = s.links.link_for(&r);
    let resp = s.http.get(&download.url).send().await.unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    assert_eq!(resp.bytes().await.unwrap().to_vec(), png);

    // Single use.
    let (status, body) = s.put(&opened.link.url, "image/png", png.clone()).await;
    assert_eq!((status, body["error"]["code"].as_str()), (StatusCode::CONFLICT, Some("bad_request")));

    // An expired slot: its link has expired with it; a token that outlives the slot gets the
    // unknown-slot answer, and the slot is gone.
    let short = s.links.open_upload_slot(&alice, SlotRequest { ttl: Some(Duration::from_secs(60)), ..request }).unwrap();
    SLOT_CLOCK.store(NOW + 60, Ordering::SeqCst);
    let (status, body) = s.put(&short.link.url, "image/png", png.clone()).await;
    assert_eq!((status, body["error"]["code"].as_str()), (StatusCode::GONE, Some("artifact_url_expired")));
    let unknown_later =
        s.put(&s.upload_url("slot_00000000000000000000000000000000", &alice.owner(), NOW + 3600), "image/png", png.clone()).await;
    assert_eq!(s.put(&s.upload_url(&short.slot, &alice.owner(), NOW + 3600), "image/png", png).await, unknown_later);
    assert_eq!(unknown_later.0, StatusCode::NOT_FOUND);
    assert_eq!(s.links.slot_state(&short.slot), None);
}

static STAGED_CLOCK: AtomicU64 = AtomicU64::new(NOW);

fn staged_clock() -> u64 {
    STAGED_CLOCK.load(Ordering::SeqCst)
}

/// A staged slot (size and sha256 declared up front) keeps the body aside: nothing reaches the
/// store from the PUT, a body that is not exactly the declared one is refused and kept
/// nowhere, and bytes nobody takes are gone with the slot.
#[tokio::test]
async fn staged_slots_keep_exactly_the_declared_bytes_aside_until_taken() {
    use std::io::Read;
    let s = Served::start(staged_clock).await;
    let dana = ArtifactScope::session("s1").with_user("dana");
    let file = b"exactly these bytes".to_vec();
    let expect = stowage_http::Expected { size: file.len() as u64, sha256: hex::encode(Sha256::digest(&file)) };
    let request = SlotRequest { max_bytes: file.len() as u64, ttl: Some(Duration::from_secs(60)), ..SlotRequest::default() };
    let opened = s.links.open_staged_slot(&dana, request.clone(), expect.clone()).unwrap();

    // The wrong bytes: refused, nothing kept, the slot open for the right ones.
    let (status, body) = s.put(&opened.link.url, "text/plain", b"exactly those bytes!".to_vec()).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{body}");
    let (status, body) = s.put(&opened.link.url, "text/plain", b"exactly those bytes".to_vec()).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("not the declared 19 bytes") && message.contains("nothing was kept"), "{message}");
    assert_eq!(s.links.slot_state(&opened.slot), Some(SlotState::Open));
    assert!(s.links.take_staged(&opened.slot).is_none(), "nothing to take from an open slot");

    // The right bytes wait aside: the store has nothing until they are taken.
    let (status, body) = s.put(&opened.link.url, "text/plain", file.clone()).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!((body["size"].as_u64(), body["sha256"].as_str()), (Some(19), Some(expect.sha256.as_str())));
    assert_eq!(s.links.slot_state(&opened.slot), Some(SlotState::Staged));
    assert!(s.store.list(stowage_store::ListQuery::default()).await.unwrap().items.is_empty(), "a PUT alone stores nothing");
    let (status, _) = s.put(&opened.link.url, "text/plain", file.clone()).await;
    assert_eq!(status, StatusCode::CONFLICT, "single use");
    let mut staged = s.links.take_staged(&opened.slot).expect("the staged bytes");
    assert_eq!((staged.size, staged.sha256.as_str(), staged.mime.as_deref()), (19, expect.sha256.as_str(), Some("text/plain")));
    let mut back = Vec::new();
    staged.file.read_to_end(&mut back).unwrap();
    assert_eq!(back, file);
    assert_eq!(s.links.slot_state(&opened.slot), None, "taken: the slot is over");

    // Staged and never taken: gone once the slot expires, and a discarded one at once.
    let late = s.links.open_staged_slot(&dana, request.clone(), expect.clone()).unwrap();
    assert_eq!(s.put(&late.link.url, "text/plain", file.clone()).await.0, StatusCode::ACCEPTED);
    STAGED_CLOCK.store(NOW + 60, Ordering::SeqCst);
    assert!(s.links.take_staged(&late.slot).is_none());
    assert_eq!(s.links.slot_state(&late.slot), None);
    STAGED_CLOCK.store(NOW, Ordering::SeqCst);
    let dropped = s.links.open_staged_slot(&dana, request, expect).unwrap();
    assert_eq!(s.put(&dropped.link.url, "text/plain", file).await.0, StatusCode::ACCEPTED);
    s.links.discard_slot(&dropped.slot);
    assert!(s.links.take_staged(&dropped.slot).is_none());
    assert!(s.store.list(stowage_store::ListQuery::default()).await.unwrap().items.is_empty());
}

/// A client that goes away mid-body must not leave the slot claimed forever: the server drops
/// the upload, and the slot opens again for a retry.
#[tokio::test]
async fn a_client_that_disconnects_mid_body_frees_the_slot() {
    let s = Served::start(fixed_now).await;
    let scope = ArtifactScope::session("s1").with_user("carol");
    let request = SlotRequest { max_bytes: 1 << 20, ..SlotRequest::default() };
    let opened = s.links.open_upload_slot(&scope, request).unwrap();
    let path = opened.link.url.strip_prefix(&format!("http://{}", s.addr)).unwrap().to_owned();

    let mut conn = tokio::net::TcpStream::connect(s.addr).await.unwrap();
    let head =
        format!("PUT {path} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/octet-stream\r\nContent-Length: 100000\r\n\r\n", s.addr);
    conn.write_all(head.as_bytes()).await.unwrap();
    conn.write_all(&[7u8; 10_000]).await.unwrap();
    conn.flush().await.unwrap();
    let wait_for = |want: SlotState| {
        let links = s.links.clone();
        let slot = opened.slot.clone();
        async move {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
            while links.slot_state(&slot) != Some(want.clone()) {
                assert!(tokio::time::Instant::now() < deadline, "slot never became {want:?}: {:?}", links.slot_state(&slot));
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    };
    wait_for(SlotState::Uploading).await;
    drop(conn);
    wait_for(SlotState::Open).await;
    assert!(s.store.list(stowage_store::ListQuery::default()).await.unwrap().items.is_empty(), "nothing of the cut upload is stored");

    let (status, body) = s.put(&opened.link.url, "application/octet-stream", vec![7u8; 100_000]).await;
    assert_eq!(status, StatusCode::CREATED, "the retry succeeds: {body}");
    assert_eq!(body["size_bytes"], 100_000);
}

#[tokio::test]
async fn a_link_service_without_the_routes_registry_opens_no_slots() {
    let w = World::new();
    let links = LinkService::new(w.store.clone(), w.signer.clone());
    let e = links.open_upload_slot(&s1(), SlotRequest { max_bytes: 10, ..SlotRequest::default() }).unwrap_err();
    assert_eq!((e.status, e.code), (StatusCode::SERVICE_UNAVAILABLE, "artifact_storage_failed"));
    // Bad requests name what to fix.
    let links = w.state.link_service();
    let e = links.open_upload_slot(&s1(), SlotRequest::default()).unwrap_err();
    assert!(e.message.contains("max_bytes"), "{e:?}");
    let e = links.open_upload_slot(&s1(), SlotRequest { max_bytes: 10, ttl: Some(Duration::from_secs(7200)), ..SlotRequest::default() });
    assert!(e.unwrap_err().message.contains("1m to 60m"));
}

/// A store that serves every record with the media type an older version recorded as given
/// (before the store normalized types), so the download route's own parsing is what is tested.
struct LegacyTypes {
    inner: Arc<dyn ArtifactStore>,
    raw: std::sync::Mutex<std::collections::HashMap<ArtifactId, String>>,
}

#[async_trait::async_trait]
impl ArtifactStore for LegacyTypes {
    async fn put_bytes(&self, data: axum::body::Bytes, opts: PutOptions) -> stowage_store::Result<ArtifactRef> {
        let raw = opts.mime_type.clone();
        let r = self.inner.put_bytes(data, opts).await?;
        if let Some(raw) = raw {
            self.raw.lock().unwrap().insert(r.id.clone(), raw);
        }
        Ok(r)
    }
    async fn put_stream(
        &self,
        reader: std::pin::Pin<Box<dyn tokio::io::AsyncRead + Send>>,
        opts: PutOptions,
    ) -> stowage_store::Result<ArtifactRef> {
        self.inner.put_stream(reader, opts).await
    }
    async fn get(&self, access: &Access, id: &ArtifactId) -> stowage_store::Result<axum::body::Bytes> {
        self.inner.get(access, id).await
    }
    async fn get_range(&self, access: &Access, id: &ArtifactId, range: std::ops::Range<u64>) -> stowage_store::Result<axum::body::Bytes> {
        self.inner.get_range(access, id, range).await
    }
    async fn open(
        &self,
        access: &Access,
        id: &ArtifactId,
        range: Option<std::ops::Range<u64>>,
    ) -> stowage_store::Result<stowage_store::ArtifactReader> {
        self.inner.open(access, id, range).await
    }
    async fn meta(&self, access: &Access, id: &ArtifactId) -> stowage_store::Result<ArtifactRef> {
        let mut r = self.inner.meta(access, id).await?;
        if let Some(raw) = self.raw.lock().unwrap().get(id) {
            r.mime_type = Some(raw.clone());
        }
        Ok(r)
    }
    async fn exists(&self, access: &Access, id: &ArtifactId) -> stowage_store::Result<bool> {
        self.inner.exists(access, id).await
    }
    async fn owners(&self, id: &ArtifactId) -> stowage_store::Result<Vec<Owner>> {
        self.inner.owners(id).await
    }
    async fn delete(&self, access: &Access, id: &ArtifactId) -> stowage_store::Result<bool> {
        self.inner.delete(access, id).await
    }
    async fn list(&self, query: stowage_store::ListQuery) -> stowage_store::Result<stowage_store::ListPage> {
        self.inner.list(query).await
    }
    async fn gc(&self) -> stowage_store::Result<stowage_store::GcReport> {
        self.inner.gc().await
    }
}

fn png() -> Vec<u8> {
    let mut b = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x01\0\0\0\x01\x08\x06\0\0\0".to_vec();
    b.extend((0..200u8).map(|i| i.wrapping_mul(7) & 0x3f));
    b
}

const PAGE: &[u8] = b"<html><body><h1>Your session expired</h1><form action=https://evil.example>";

/// Regression: `image/png,text/html` was stored and sent back as given, and Chromium, which
/// takes the last type of a list, rendered the bytes as a page on the gateway's origin.
#[tokio::test]
async fn claimed_media_types_never_make_a_page() {
    let w = World::new();
    let mut png_then_page = png();
    png_then_page.extend_from_slice(PAGE);
    let overlong = format!("image/{}", "p".repeat(300));
    // (claimed type, bytes, served Content-Type, inline?)
    let cases: Vec<(&str, Vec<u8>, &str, bool)> = vec![
        ("image/png", png(), "image/png", true),
        ("IMAGE/PNG; name=\"x.html\"", png(), "image/png", true),
        // The store drops the bad claim and types the bytes itself.
        ("image/png,text/html", png(), "image/png", true),
        ("image/png,text/html", PAGE.to_vec(), "text/html", false),
        ("text/html, image/png", PAGE.to_vec(), "text/html", false),
        (&overlong, png(), "image/png", true),
        // The type is right for the magic bytes, but a page follows them.
        ("image/png", png_then_page.clone(), "image/png", false),
        // A type that claims to be passive over bytes that are a page.
        ("image/png", PAGE.to_vec(), "image/png", false),
        ("text/plain", b"<script>alert(1)</script>".to_vec(), "text/plain", false),
        ("application/json", b"  function steal() { return document.cookie }".to_vec(), "application/json", false),
        ("text/plain; charset=utf-8", b"just words".to_vec(), "text/plain; charset=utf-8", true),
        // Every type we do not know is a download.
        ("application/x-shockwave-flash", b"FWS".to_vec(), "application/x-shockwave-flash", false),
        ("multipart/x-mixed-replace; boundary=x", b"--x".to_vec(), "multipart/x-mixed-replace", false),
    ];
    // One owner per case: the same owner's same bytes would dedup to the first record.
    for (i, (claimed, bytes, served, inline)) in cases.into_iter().enumerate() {
        let r = w.put(&s1().with_user(format!("u{i}")), &bytes, claimed, Some("file")).await;
        let (status, h, body) = w.get(&w.link(&r), &[]).await;
        assert_eq!((status, body), (StatusCode::OK, bytes), "{claimed}");
        assert_eq!(h["content-type"], served, "{claimed}");
        let disposition = h["content-disposition"].to_str().unwrap();
        let want = if inline { "inline;" } else { "attachment;" };
        assert!(disposition.starts_with(want), "{claimed}: {disposition}");
        assert_eq!(h["x-content-type-options"], "nosniff");
        assert!(h["content-security-policy"].to_str().unwrap().starts_with("sandbox"));
    }
}

/// Records stored before the store normalized media types may hold anything: the route
/// parses them again and serves what does not parse as a download of octet-stream.
#[tokio::test]
async fn records_with_raw_media_types_are_parsed_again_at_download() {
    let mut w = World::new();
    let legacy: Arc<dyn ArtifactStore> = Arc::new(LegacyTypes { inner: w.store.clone(), raw: Default::default() });
    w.store = legacy.clone();
    w.state.store = legacy;
    let long = format!("image/png; x={}", "y".repeat(300));
    for (i, (raw, bytes, served, inline)) in [
        ("image/png,text/html", png(), "application/octet-stream", false),
        ("image/png\r\nSet-Cookie: a=b", png(), "application/octet-stream", false),
        ("*/*", png(), "application/octet-stream", false),
        (long.as_str(), png(), "application/octet-stream", false),
        ("Image/PNG; name=evil.html", png(), "image/png", true),
        ("image/png", PAGE.to_vec(), "image/png", false),
    ]
    .into_iter()
    .enumerate()
    {
        let scope = s1().with_user(format!("u{i}"));
        let r = w.put(&scope, &bytes, raw, None).await;
        assert_eq!(w.store.meta(&Access::owner_of(&scope), &r.id).await.unwrap().mime_type.as_deref(), Some(raw), "the record is raw");
        let (status, h, _) = w.get(&w.link(&r), &[]).await;
        assert_eq!(status, StatusCode::OK, "{raw:?}");
        assert_eq!(h["content-type"], served, "{raw:?}");
        assert_eq!(h["content-disposition"].to_str().unwrap().starts_with("inline;"), inline, "{raw:?}");
        assert!(h.get("set-cookie").is_none());
    }
}

#[tokio::test]
async fn download_names_lose_bidi_and_control_characters() {
    let w = World::new();
    let r = w.put(&s1(), b"MZ not really", "application/octet-stream", Some("invoice\u{202e}fdp.exe\r\n")).await;
    let (_, h, _) = w.get(&w.link(&r), &[]).await;
    let d = h["content-disposition"].to_str().unwrap();
    assert_eq!(d, "attachment; filename=\"invoicefdp.exe__\"; filename*=UTF-8''invoicefdp.exe__");
}

#[tokio::test]
async fn conditional_requests_follow_rfc_9110() {
    let w = World::new();
    let bytes: Vec<u8> = (0..100u8).collect();
    let r = w.put(&s1(), &bytes, "application/octet-stream", None).await;
    let path = w.link(&r);
    let etag = format!("\"{}\"", r.sha256);
    let (_, h, _) = w.get(&path, &[]).await;
    let modified = h["last-modified"].to_str().unwrap().to_owned();
    assert_eq!(
        httpdate::parse_http_date(&modified).unwrap(),
        std::time::UNIX_EPOCH + Duration::from_secs(r.created_at.unix_timestamp() as u64)
    );
    let earlier = httpdate::fmt_http_date(httpdate::parse_http_date(&modified).unwrap() - Duration::from_secs(60));
    let later = httpdate::fmt_http_date(httpdate::parse_http_date(&modified).unwrap() + Duration::from_secs(60));

    // If-Range: a piece only of the representation the client has; otherwise all of it.
    // Regression: a stale If-Range still got a 206 of the new bytes.
    for (if_range, want) in [(etag.as_str(), StatusCode::PARTIAL_CONTENT), (modified.as_str(), StatusCode::PARTIAL_CONTENT)] {
        let (status, h, body) = w.get(&path, &[("range", "bytes=0-9"), ("if-range", if_range)]).await;
        assert_eq!((status, body.len()), (want, 10), "{if_range}");
        assert_eq!(h["content-range"], "bytes 0-9/100");
    }
    for stale in ["\"an-older-etag\"", &format!("W/{etag}"), &earlier, "not a validator"] {
        let (status, h, body) = w.get(&path, &[("range", "bytes=0-9"), ("if-range", stale)]).await;
        assert_eq!((status, body), (StatusCode::OK, bytes.clone()), "{stale}");
        assert!(h.get("content-range").is_none());
        assert_eq!(h["content-length"], "100");
    }

    // If-Match and If-Unmodified-Since: regression, both were ignored.
    for (name, value) in [("if-match", "\"an-older-etag\""), ("if-match", &format!("W/{etag}")), ("if-unmodified-since", &earlier)] {
        for range in [None, Some("bytes=0-9")] {
            let mut headers = vec![(name, value)];
            headers.extend(range.map(|r| ("range", r)));
            let (status, h, body) = w.get(&path, &headers).await;
            assert_eq!(status, StatusCode::PRECONDITION_FAILED, "{name}: {value}");
            assert_eq!(h["content-type"], "application/json");
            assert!(h.get("content-disposition").is_none());
            assert_eq!(error_code(&body), "bad_request");
            assert_eq!(h["etag"], etag.as_str());
        }
    }
    for (name, value) in
        [("if-match", etag.as_str()), ("if-match", "*"), ("if-unmodified-since", &modified), ("if-unmodified-since", &later)]
    {
        let (status, _, body) = w.get(&path, &[(name, value)]).await;
        assert_eq!((status, body.len()), (StatusCode::OK, 100), "{name}: {value}");
    }
    // If-Modified-Since, and If-None-Match over it.
    let (status, _, _) = w.get(&path, &[("if-modified-since", &modified)]).await;
    assert_eq!(status, StatusCode::NOT_MODIFIED);
    let (status, _, _) = w.get(&path, &[("if-modified-since", &earlier)]).await;
    assert_eq!(status, StatusCode::OK);
    let (status, _, _) = w.get(&path, &[("if-modified-since", &modified), ("if-none-match", "\"other\"")]).await;
    assert_eq!(status, StatusCode::OK);

    // 416: the body is a JSON error and is labelled as one, not as the artifact.
    let r2 = w.put(&s1(), &png(), "image/png", Some("a.png")).await;
    let (status, h, body) = w.get(&w.link(&r2), &[("range", "bytes=5000-")]).await;
    assert_eq!(status, StatusCode::RANGE_NOT_SATISFIABLE);
    assert_eq!(h["content-type"], "application/json");
    assert!(h.get("content-disposition").is_none());
    assert_eq!(h["content-range"], format!("bytes */{}", r2.size_bytes).as_str());
    assert_eq!(error_code(&body), "bad_request");
}

/// A raw HTTP/1.1 exchange, to see exactly the headers hyper writes: (status, headers).
async fn raw_exchange(addr: SocketAddr, request: &str) -> (u16, Vec<(String, String)>) {
    use tokio::io::AsyncReadExt;
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(request.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).await.unwrap();
    let text = String::from_utf8_lossy(&raw).into_owned();
    let head = text.split("\r\n\r\n").next().unwrap();
    let mut lines = head.lines();
    let status = lines.next().unwrap().split_whitespace().nth(1).unwrap().parse().unwrap();
    let headers = lines.filter_map(|l| l.split_once(':')).map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned())).collect();
    (status, headers)
}

/// Regression: a 304 to HEAD said `Content-Length: 0`, which claims the artifact is empty.
#[tokio::test]
async fn a_304_never_claims_the_artifact_is_empty() {
    let s = Served::start(fixed_now).await;
    let scope = s1();
    let r = s.store.put_bytes(vec![9u8; 4321].into(), PutOptions::scoped(scope.clone())).await.unwrap();
    let url = s.signer.artifact_link(&r.id, &scope.owner(), NOW, None).url;
    let path = url.split_once(&s.addr.to_string()).unwrap().1.to_owned();
    let etag = format!("\"{}\"", r.sha256);
    for method in ["HEAD", "GET"] {
        let req = format!("{method} {path} HTTP/1.1\r\nHost: {}\r\nIf-None-Match: {etag}\r\nConnection: close\r\n\r\n", s.addr);
        let (status, headers) = raw_exchange(s.addr, &req).await;
        assert_eq!(status, 304, "{method}");
        let lengths: Vec<&str> = headers.iter().filter(|(k, _)| k == "content-length").map(|(_, v)| v.as_str()).collect();
        // RFC 9110 §8.6: absent, or the length a 200 would have sent.
        assert!(lengths.is_empty() || lengths == ["4321"], "{method}: {headers:?}");
        assert!(headers.iter().any(|(k, v)| k == "etag" && *v == etag), "{method}: {headers:?}");
        assert!(!headers.iter().any(|(k, _)| k == "content-type" || k == "content-disposition"), "{method}: {headers:?}");
    }
    // And a plain HEAD states the real length.
    let req = format!("HEAD {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n", s.addr);
    let (status, headers) = raw_exchange(s.addr, &req).await;
    assert_eq!(status, 200);
    assert!(headers.iter().any(|(k, v)| k == "content-length" && v == "4321"), "{headers:?}");
}
