//! `https://` upstreams: a Streamable HTTP MCP server behind TLS with a self-signed
//! certificate (made here with rcgen, served with rustls on loopback). With `tls_ca_file`
//! the gateway trusts it and calls go through; without, the call fails at once with a
//! one-line error that names the certificate problem and the setting that fixes it.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use axum::response::IntoResponse;
use common::{Client, MemSink, fast_config};

use serde_json::{Value, json};
use stowage_mcp::config::ServerConfig;

/// Starts an https MCP server for `localhost` on a free port; returns its URL and the PEM of
/// its (self-signed) certificate.
async fn https_upstream() -> (String, String) {
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    let pem = cert.cert.pem();
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(cert.signing_key.serialize_der().into());
    let tls = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert.cert.der().clone()], key)
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
    let app = axum::Router::new().route("/mcp", axum::routing::post(mcp));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else { return };
            let (acceptor, app) = (acceptor.clone(), app.clone());
            tokio::spawn(async move {
                // A client that refuses our certificate ends the handshake: nothing to serve.
                let Ok(stream) = acceptor.accept(tcp).await else { return };
                let service = hyper_util::service::TowerToHyperService::new(app);
                let _ = hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new())
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    (format!("https://localhost:{port}/mcp"), pem)
}

/// A minimal MCP server: JSON answers, one `echo` tool.
async fn mcp(body: String) -> axum::response::Response {
    let msg: Value = serde_json::from_str(&body).unwrap();
    let id = msg["id"].clone();
    let result = match msg["method"].as_str() {
        Some("initialize") => {
            json!({"protocolVersion": "2025-11-25", "capabilities": {"tools": {}}, "serverInfo": {"name": "tls", "version": "1"}})
        }
        Some("tools/list") => json!({"tools": [{"name": "echo", "inputSchema": {"type": "object"}}]}),
        Some("tools/call") => {
            json!({"content": [{"type": "text", "text": format!("over tls: {}", msg["params"]["arguments"]["message"].as_str().unwrap_or(""))}]})
        }
        _ => return axum::http::StatusCode::ACCEPTED.into_response(),
    };
    axum::Json(json!({"jsonrpc": "2.0", "id": id, "result": result})).into_response()
}

#[tokio::test]
async fn an_https_upstream_with_its_ca_works_and_without_it_fails_clearly() {
    let (url, pem) = https_upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, pem).unwrap();

    let trusted = ServerConfig { url: Some(url.clone()), tls_ca_file: Some(ca), ..Default::default() };
    let spec = trusted.resolve("tls", Duration::from_secs(10)).unwrap();
    let probe = |spec| async move { stowage_mcp::probe_upstream(&spec, Duration::from_secs(5)).await.expect("an HTTP upstream is probed") };
    assert!(probe(spec.clone()).await.is_ok_and(|what| what.contains("HTTP 200")), "check-config's probe trusts the CA too");
    let c = Client::start(vec![spec], Arc::new(MemSink::default()), fast_config(), None).await;
    let r = c.call("echo", json!({"message": "hi"})).await;
    assert_eq!(r["result"]["content"][0]["text"], "over tls: hi", "{r}");

    // The same server without the CA: refused at the handshake, and the reason the gateway
    // gives (in its log, and to any call) names the certificate and the setting that fixes it.
    let untrusted = ServerConfig { url: Some(url), ..Default::default() };
    let spec = untrusted.resolve("tls", Duration::from_secs(10)).unwrap();
    match probe(spec.clone()).await {
        Err(stowage_mcp::TransportError::Unreachable(why)) => assert!(why.contains("certificate") && why.contains("tls_ca_file"), "{why}"),
        other => panic!("an untrusted server is unreachable for check-config's probe as well: {other:?}"),
    }
    let gw = stowage_mcp::Gateway::builder(fast_config(), vec![spec], common::shaper(Arc::new(MemSink::default()))).start();
    assert_eq!(gw.wait_ready(Duration::from_secs(2)).await, 0, "an untrusted server must not become ready");
    let e = gw.upstreams[0].connection(Duration::from_millis(100)).await.unwrap_err().to_string();
    assert!(e.contains("certificate") && e.contains("tls_ca_file"), "{e}");
    assert!(!e.contains('\n'), "{e}");
    gw.shutdown();

    // A CA file that is not PEM is a configuration error, named as such.
    let bad = dir.path().join("bad.pem");
    std::fs::write(&bad, "not a certificate").unwrap();
    let spec = ServerConfig { url: Some("https://localhost:1/mcp".into()), tls_ca_file: Some(bad.clone()), ..Default::default() }
        .resolve("tls", Duration::from_secs(10))
        .unwrap();
    assert!(
        matches!(probe(spec.clone()).await, Err(stowage_mcp::TransportError::CaEmpty { path }) if path == bad),
        "a CA file without certificates is a configuration fault, typed as one"
    );
    let gw = stowage_mcp::Gateway::builder(fast_config(), vec![spec], common::shaper(Arc::new(MemSink::default()))).start();
    assert!(common::eventually(5, || !gw.unready_upstreams().is_empty() && gw.unready_upstreams()[0].1 != "still starting").await);
    let e = gw.unready_upstreams()[0].1.clone();
    gw.shutdown();
    assert!(e.contains("bad.pem") && e.contains("no certificate"), "{e}");
}
