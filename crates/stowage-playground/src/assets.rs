//! The page's files, embedded in the binary, and the headers they are served with.
//!
//! The page is hand-written (no framework, no bundler), so what is in `assets/` is what is
//! served and `cargo build` needs no JavaScript toolchain. The one third-party file, ECharts,
//! is vendored by `scripts/vendor-playground-assets.sh` and pinned by its sha256 (a test checks
//! the embedded copy against the pin).
//!
//! Every file goes out with a Content-Security-Policy that allows scripts and styles from this
//! origin only: no inline script, no `eval`, no inline styles, and no frame of the page
//! anywhere else. Previews come from the signed download route (same origin, or
//! `links.public_url`'s origin when that differs), which serves artifacts with its own
//! sandboxing CSP.

use std::sync::{Arc, OnceLock};

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use sha2::{Digest, Sha256};
use stowage_http::BrowserGuard;

/// One embedded file.
pub struct Asset {
    pub path: &'static str,
    pub content_type: &'static str,
    pub bytes: &'static [u8],
}

/// Everything the page is made of, by the path it is served at.
pub const ASSETS: &[Asset] = &[
    Asset { path: "/", content_type: "text/html; charset=utf-8", bytes: include_bytes!("../assets/index.html") },
    Asset { path: "/assets/app.css", content_type: "text/css; charset=utf-8", bytes: include_bytes!("../assets/app.css") },
    Asset { path: "/assets/preview.css", content_type: "text/css; charset=utf-8", bytes: include_bytes!("../assets/preview.css") },
    Asset { path: "/assets/app.js", content_type: "text/javascript; charset=utf-8", bytes: include_bytes!("../assets/app.js") },
    Asset { path: "/assets/preview.js", content_type: "text/javascript; charset=utf-8", bytes: include_bytes!("../assets/preview.js") },
    Asset {
        path: "/assets/vendor/echarts.min.js",
        content_type: "text/javascript; charset=utf-8",
        bytes: include_bytes!("../assets/vendor/echarts.min.js"),
    },
];

/// The page's Content-Security-Policy; `links_origin` is where signed links point when that
/// is not the page's own origin.
pub fn page_csp(links_origin: Option<&str>) -> String {
    let extra = links_origin.map(|o| format!(" {o}")).unwrap_or_default();
    format!(
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' blob:{extra}; media-src 'self' blob:{extra}; \
         frame-src 'self'{extra}; connect-src 'self'{extra}; font-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    )
}

#[derive(Clone)]
struct Served {
    csp: HeaderValue,
}

/// `/` and `/assets/*`, behind the Host/Origin check only: the files hold no data.
pub(crate) fn router(links_origin: Option<&str>, guard: Arc<BrowserGuard>) -> Router {
    let csp = HeaderValue::from_str(&page_csp(links_origin)).unwrap_or(HeaderValue::from_static("default-src 'none'"));
    let mut r = Router::new();
    for asset in ASSETS {
        r = r.route(asset.path, get(serve));
    }
    // Browsers ask for one whatever the page says; "no content" keeps their console clean.
    r = r.route("/favicon.ico", get(|| async { StatusCode::NO_CONTENT }));
    r.with_state(Served { csp }).route_layer(middleware::from_fn_with_state(guard, refuse_foreign))
}

async fn refuse_foreign(State(guard): State<Arc<BrowserGuard>>, req: Request, next: Next) -> Response {
    match guard.refuse(&req) {
        Some(why) => (StatusCode::FORBIDDEN, why).into_response(),
        None => next.run(req).await,
    }
}

/// Strong validators, computed once: a reload revalidates with `If-None-Match` and costs a
/// 304, while a new binary's files are never served from a stale cache.
fn etags() -> &'static [String] {
    static ETAGS: OnceLock<Vec<String>> = OnceLock::new();
    ETAGS.get_or_init(|| ASSETS.iter().map(|a| format!("\"{}\"", &hex::encode(Sha256::digest(a.bytes))[..16])).collect())
}

async fn serve(State(served): State<Served>, req_headers: HeaderMap, uri: axum::http::Uri) -> Response {
    let Some(i) = ASSETS.iter().position(|a| a.path == uri.path()) else { return StatusCode::NOT_FOUND.into_response() };
    let asset = &ASSETS[i];
    let etag = &etags()[i];
    let mut h = HeaderMap::new();
    h.insert(header::CONTENT_SECURITY_POLICY, served.csp.clone());
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    // Signed links carry their token in the URL: never in a Referer.
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    if let Ok(v) = HeaderValue::from_str(etag) {
        h.insert(header::ETAG, v);
    }
    let matches =
        req_headers.get(header::IF_NONE_MATCH).and_then(|v| v.to_str().ok()).is_some_and(|v| v.split(',').any(|t| t.trim() == etag));
    if matches {
        return (StatusCode::NOT_MODIFIED, h).into_response();
    }
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(asset.content_type));
    (h, asset.bytes).into_response()
}

/// The lines of a script that are not comments: what a test may search for forbidden calls
/// (comments may name what the code avoids).
#[cfg(test)]
pub(crate) fn code_only(text: &str) -> String {
    text.lines()
        .filter(|l| {
            let t = l.trim_start();
            !t.starts_with("//") && !t.starts_with('*') && !t.starts_with("/*")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The pinned sha256 of the vendored ECharts (first line of `vendor/echarts.sha256`).
    const ECHARTS_PIN: &str = include_str!("../assets/vendor/echarts.sha256");

    #[test]
    fn the_vendored_echarts_is_the_pinned_one() {
        let pin = ECHARTS_PIN.lines().next().unwrap_or("").trim();
        let echarts = ASSETS.iter().find(|a| a.path.ends_with("echarts.min.js")).unwrap();
        assert_eq!(hex::encode(Sha256::digest(echarts.bytes)), pin, "re-run scripts/vendor-playground-assets.sh");
        assert!(ECHARTS_PIN.contains("echarts@"), "{ECHARTS_PIN}");
    }

    #[test]
    fn the_page_allows_no_inline_script_eval_or_foreign_frames() {
        let csp = page_csp(None);
        assert!(csp.contains("script-src 'self';") && csp.contains("frame-ancestors 'none'"), "{csp}");
        assert!(!csp.contains("unsafe"), "{csp}");
        assert!(page_csp(Some("https://dl.example")).contains("img-src 'self' blob: https://dl.example;"));
        // The page's own files say nothing inline the CSP would have to allow, and the scripts
        // never parse strings as HTML or code (comments may name what they avoid).
        for a in ASSETS.iter().filter(|a| a.path.ends_with(".js") && !a.path.contains("vendor")) {
            let code = code_only(std::str::from_utf8(a.bytes).unwrap());
            for bad in [
                "eval(",
                "new Function(",
                "innerHTML",
                "outerHTML",
                "insertAdjacentHTML",
                "document.write",
                "setAttribute(\"style\"",
                "setAttribute('style'",
            ] {
                assert!(!code.contains(bad), "{} contains {bad:?}", a.path);
            }
        }
        let html = std::str::from_utf8(ASSETS[0].bytes).unwrap();
        for bad in ["<script>", "<style", " style=\"", " onclick=", " onload=", " onerror=", "javascript:"] {
            assert!(!html.contains(bad), "index.html contains {bad:?}");
        }
    }
}
