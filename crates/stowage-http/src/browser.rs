//! Who may talk to the gateway from a browser: the `Host` and `Origin` allow-lists that every
//! route a web page can reach shares (`/mcp`, `/agent/runs`, the playground's `/api/*`).
//!
//! Two attacks are kept out:
//! - **DNS rebinding**: a page on `evil.example` whose name is made to resolve to 127.0.0.1
//!   reaches a loopback gateway *same-origin*, so neither CORS nor `Origin` stops its GETs.
//!   Its requests still say `Host: evil.example`, which is not on the list.
//! - **Cross-site requests**: a foreign `Origin` is refused, and a state-changing request must
//!   be `application/json`, which a cross-site form cannot send without a CORS preflight that
//!   no route here grants.

use axum::extract::{Request, State};
use axum::http::{Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::ApiError;

/// The hosts and origins a browser may reach the gateway from. Loopback names are always in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrowserGuard {
    hosts: Vec<String>,
    origins: Vec<String>,
}

impl BrowserGuard {
    /// The allow-lists for a gateway listening on `listen` (its host joins the Host list unless
    /// it is a wildcard), with `gateway.allowed_hosts` and `gateway.allowed_origins`.
    pub fn new(listen: &str, allowed_hosts: &[String], allowed_origins: &[String]) -> BrowserGuard {
        let mut hosts: Vec<String> = ["localhost", "127.0.0.1", "[::1]"].map(String::from).to_vec();
        hosts.extend(allowed_hosts.iter().map(|h| h.to_ascii_lowercase()));
        if let Some((host, _)) = listen.rsplit_once(':')
            && host != "0.0.0.0"
            && host != "[::]"
        {
            hosts.push(host.to_ascii_lowercase());
        }
        let origins = allowed_origins.iter().map(|o| o.trim_end_matches('/').to_ascii_lowercase()).collect();
        BrowserGuard { hosts, origins }
    }

    /// Why `req` may not come in (one line naming the setting that would let it), if it may not.
    pub fn refuse(&self, req: &Request) -> Option<String> {
        if let Some(why) = self.refuse_host(req) {
            return Some(why);
        }
        let headers = req.headers();
        if let Some(origin) = headers.get(header::ORIGIN) {
            let o = origin.to_str().unwrap_or("").trim_end_matches('/').to_ascii_lowercase();
            if !origin_is_loopback(&o) && !self.origins.contains(&o) {
                return Some(format!("origin {o:?} is not allowed (set gateway.allowed_origins)"));
            }
        }
        None
    }
}

impl BrowserGuard {
    /// The `Host` half of [`BrowserGuard::refuse`] alone (DNS rebinding), for routes any page
    /// may use with a token it holds, whatever its origin (signed links).
    pub fn refuse_host(&self, req: &Request) -> Option<String> {
        // HTTP/2 carries the host in the `:authority` pseudo-header, which lands in the URI,
        // not in a Host header.
        let host = req
            .headers()
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .map(str::to_owned)
            .or_else(|| req.uri().authority().map(|a| a.as_str().to_owned()))
            .unwrap_or_default()
            .to_ascii_lowercase();
        if !host_allowed(&host, &self.hosts) {
            return Some(format!("host {host:?} is not allowed (set gateway.allowed_hosts)"));
        }
        None
    }
}

/// Middleware for JSON API routes: [`BrowserGuard::refuse`] (403), and a request that changes
/// something (anything but GET and HEAD) must carry a JSON body (415).
pub async fn guard_json_api(State(guard): State<std::sync::Arc<BrowserGuard>>, req: Request, next: Next) -> Response {
    if let Some(why) = guard.refuse(&req) {
        return ApiError::new(axum::http::StatusCode::FORBIDDEN, "forbidden", why).into_response();
    }
    if req.method() != Method::GET && req.method() != Method::HEAD && !is_json(&req) {
        let status = axum::http::StatusCode::UNSUPPORTED_MEDIA_TYPE;
        return ApiError::new(status, stowage_core::ErrorCode::BadRequest, "send the body as Content-Type: application/json")
            .into_response();
    }
    next.run(req).await
}

fn is_json(req: &Request) -> bool {
    let value = req.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
    let essence = value.split(';').next().unwrap_or("").trim();
    essence.eq_ignore_ascii_case("application/json")
}

/// `host` is `name` or `name:port`; an allow-list entry without a port matches any port.
fn host_allowed(host: &str, allowed: &[String]) -> bool {
    let name = match host.rsplit_once(':') {
        Some((n, port)) if port.chars().all(|c| c.is_ascii_digit()) && !n.is_empty() => n,
        _ => host,
    };
    allowed.iter().any(|a| a == host || a == name)
}

/// Whether a (lowercased) `Origin` is a page served from this machine: `http(s)://` and a
/// loopback name, with at most a numeric port after it. Anything else after the name
/// (`http://127.0.0.1:23101.evil.example`, a path, user info) is another origin.
pub fn origin_is_loopback(origin: &str) -> bool {
    let Some(rest) = origin.strip_prefix("http://").or_else(|| origin.strip_prefix("https://")) else { return false };
    let (name, port) = match rest.strip_prefix('[') {
        // An IPv6 literal: the name runs to its closing bracket.
        Some(v6) => match v6.split_once(']') {
            Some((addr, after)) => (&rest[..addr.len() + 2], after),
            None => return false,
        },
        None => match rest.find(':') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        },
    };
    let port_ok =
        port.is_empty() || port.strip_prefix(':').is_some_and(|p| !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()));
    port_ok && matches!(name, "localhost" | "127.0.0.1" | "[::1]")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(host: &str, origin: Option<&str>) -> Request {
        let mut b = Request::builder().uri("/api/info").header(header::HOST, host);
        if let Some(o) = origin {
            b = b.header(header::ORIGIN, o);
        }
        b.body(axum::body::Body::empty()).unwrap()
    }

    #[test]
    fn hosts_and_origins() {
        let g = BrowserGuard::new("127.0.0.1:8787", &["gw.internal:9000".into()], &["https://app.example".into()]);
        assert_eq!(g.refuse(&req("127.0.0.1:8787", None)), None);
        assert_eq!(g.refuse(&req("localhost", Some("http://localhost:6274"))), None);
        assert_eq!(g.refuse(&req("gw.internal:9000", Some("https://app.example/"))), None);
        assert!(g.refuse(&req("gw.internal:9001", None)).unwrap().contains("gateway.allowed_hosts"));
        assert!(g.refuse(&req("evil.example:8787", None)).unwrap().starts_with("host \"evil.example:8787\""));
        assert!(g.refuse(&req("", None)).is_some());
        assert!(g.refuse(&req("localhost", Some("http://localhost.evil.example"))).unwrap().contains("allowed_origins"));
        assert!(g.refuse(&req("localhost", Some("null"))).is_some());
        // A name that only starts like a loopback origin is another site.
        for foreign in [
            "http://127.0.0.1:23101.evil.example",
            "http://127.0.0.1.evil.example",
            "http://localhost:80@evil.example",
            "http://[::1]:8080.evil.example",
            "ftp://127.0.0.1",
        ] {
            assert!(!origin_is_loopback(foreign), "{foreign}");
            assert!(g.refuse(&req("127.0.0.1:8787", Some(foreign))).is_some(), "{foreign}");
        }
        for local in ["http://127.0.0.1", "http://127.0.0.1:23101", "https://localhost:6274", "http://[::1]:8080", "http://[::1]"] {
            assert!(origin_is_loopback(local), "{local}");
        }
        // A wildcard listen address names no host of its own.
        assert!(BrowserGuard::new("0.0.0.0:8787", &[], &[]).refuse(&req("0.0.0.0:8787", None)).is_some());
    }
}
