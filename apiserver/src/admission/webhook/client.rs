//! Calling a webhook: where its clientConfig points (a URL, or a Service resolved to one of its
//! ready endpoints, as kube-apiserver with `--enable-aggregator-routing`), an HTTPS POST of the
//! AdmissionReview verified against the webhook's `caBundle` (the system roots without one), the
//! whole call bounded by the webhook's `timeoutSeconds`.

use crate::cache::Cache;
use base64::Engine as _;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use serde_json::Value;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio_rustls::rustls::pki_types::ServerName;

/// The system's trust store, for webhooks given by URL without a caBundle.
const SYSTEM_ROOTS: &str = "/etc/ssl/certs/ca-certificates.crt";
/// The most of a response read (kube-apiserver's webhook client reads up to its request limit).
const MAX_RESPONSE: usize = 3 * 1024 * 1024;

/// Where a webhook is reached.
#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    /// What the error messages call it: the URL as Kubernetes prints it.
    pub url: String,
    /// The TLS name the certificate must carry.
    pub server_name: String,
    pub addr: Endpoint,
    pub path: String,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Endpoint {
    Resolved(SocketAddr),
    /// A host name from a URL, resolved when called.
    Host(String, u16),
}

/// The webhook's target; `Err` is the reason the call fails (a missing Service, no endpoint).
pub fn target(cache: &Cache, hook: &Value, timeout: Duration) -> Result<Target, String> {
    let cc = hook.get("clientConfig").unwrap_or(&Value::Null);
    let query = format!("?timeout={}s", timeout.as_secs());
    if let Some(raw) = cc.get("url").and_then(Value::as_str) {
        let u = url::Url::parse(raw).map_err(|e| format!("invalid url {raw:?}: {e}"))?;
        let host = u.host_str().unwrap_or("").trim_start_matches('[').trim_end_matches(']').to_string();
        let port = u.port_or_known_default().unwrap_or(443);
        let addr = match host.parse::<std::net::IpAddr>() {
            Ok(ip) => Endpoint::Resolved(SocketAddr::new(ip, port)),
            Err(_) => Endpoint::Host(host.clone(), port),
        };
        return Ok(Target {
            url: format!("{raw}{query}"),
            server_name: host,
            addr,
            path: format!("{}{query}", u.path()),
        });
    }
    let svc = cc.get("service").unwrap_or(&Value::Null);
    let field = |k: &str| svc.get(k).and_then(Value::as_str).unwrap_or("");
    let (ns, name) = (field("namespace"), field("name"));
    let port = svc.get("port").and_then(Value::as_u64).and_then(|p| u16::try_from(p).ok()).unwrap_or(443);
    let path = match field("path") {
        "" => "/".to_string(),
        p => p.to_string(),
    };
    let host = format!("{name}.{ns}.svc");
    let url = format!("https://{host}:{port}{path}{query}");
    let addr =
        resolve_service(cache, ns, name, port).map_err(|e| format!("failed to call webhook: Post {url:?}: {e}"))?;
    Ok(Target { url, server_name: host, addr: Endpoint::Resolved(addr), path: format!("{path}{query}") })
}

/// A ready endpoint of the Service's port (`ResolveEndpoint`): the service port by number, its
/// endpoint port by name in the Service's EndpointSlices.
fn resolve_service(cache: &Cache, ns: &str, name: &str, port: u16) -> Result<SocketAddr, String> {
    let services = cache.resource("Service").ok_or("services are not cached")?;
    let info = kaji_api::resources::by_kind("Service").ok_or("services are not served")?;
    let svc = services.get(&info.key(Some(ns), name)).ok_or_else(|| format!("service \"{name}\" not found"))?.value();
    let port_name = crate::endpoints::port_name(&svc, u64::from(port))
        .ok_or_else(|| format!("no service port {port} found for service \"{name}\""))?;
    crate::endpoints::ready(cache, ns, name, &port_name)?
        .first()
        .map(|(addr, _)| *addr)
        .ok_or_else(|| format!("service \"{name}\" has no ready endpoint for port {port}"))
}

/// The roots a webhook's certificate must chain to.
pub fn tls_config(hook: &Value) -> Result<Arc<tokio_rustls::rustls::ClientConfig>, String> {
    let bundle = hook.pointer("/clientConfig/caBundle").and_then(Value::as_str).unwrap_or("");
    let pem = if bundle.is_empty() {
        std::fs::read_to_string(SYSTEM_ROOTS)
            .map_err(|e| format!("no caBundle and no system roots ({SYSTEM_ROOTS}): {e}"))?
    } else {
        let bytes = base64::engine::general_purpose::STANDARD.decode(bundle).map_err(|e| format!("caBundle: {e}"))?;
        String::from_utf8(bytes).map_err(|e| format!("caBundle: {e}"))?
    };
    kaji_pki::tls::client_config(&pem, None).map(Arc::new).map_err(|e| format!("caBundle: {e}"))
}

/// POSTs `body` and returns the response body; an error says why, as Go's client would.
pub async fn post(
    target: &Target,
    tls: Arc<tokio_rustls::rustls::ClientConfig>,
    body: Vec<u8>,
    timeout: Duration,
) -> Result<Vec<u8>, String> {
    let call = async {
        let tcp = match &target.addr {
            Endpoint::Resolved(a) => tokio::net::TcpStream::connect(a).await,
            Endpoint::Host(h, p) => tokio::net::TcpStream::connect((h.as_str(), *p)).await,
        }
        .map_err(|e| format!("dial tcp: {e}"))?;
        let _ = tcp.set_nodelay(true);
        let name = ServerName::try_from(target.server_name.clone()).map_err(|e| format!("tls: {e}"))?;
        let tls = tokio_rustls::TlsConnector::from(tls).connect(name, tcp).await.map_err(|e| format!("tls: {e}"))?;
        let (mut sender, conn) =
            hyper::client::conn::http1::handshake(TokioIo::new(tls)).await.map_err(|e| e.to_string())?;
        tokio::spawn(conn);
        let req = hyper::Request::post(&target.path)
            .header(hyper::header::HOST, target.server_name.as_str())
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .header(hyper::header::ACCEPT, "application/json, */*")
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| e.to_string())?;
        let resp = sender.send_request(req).await.map_err(|e| e.to_string())?;
        let status = resp.status();
        let bytes = Limited::new(resp.into_body(), MAX_RESPONSE).collect().await.map_err(|e| e.to_string())?.to_bytes();
        if !status.is_success() {
            let text = String::from_utf8_lossy(&bytes[..bytes.len().min(256)]).into_owned();
            return Err(format!(
                "the server responded with the status code {} but did not return more information: {text}",
                status.as_u16()
            ));
        }
        Ok(bytes.to_vec())
    };
    match tokio::time::timeout(timeout, call).await {
        Ok(Ok(b)) => Ok(b),
        Ok(Err(e)) => Err(format!("failed to call webhook: Post {:?}: {e}", target.url)),
        Err(_) => Err(format!("failed to call webhook: Post {:?}: context deadline exceeded", target.url)),
    }
}
