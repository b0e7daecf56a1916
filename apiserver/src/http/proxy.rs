//! `pods/proxy` and `services/proxy` (`kubectl proxy` paths, `kubectl get --raw
//! .../pods/web:8080/proxy/healthz`): the request is forwarded over HTTP(S) to the pod's IP, or to a
//! ready endpoint of the Service, and the answer streamed back. As kube-apiserver: the name may carry
//! a scheme and port (`https:web:8443`); a Service port given by number is looked up by name in
//! its EndpointSlices; only endpoints that are pods are used, and loopback, link-local, unspecified
//! and multicast addresses are refused, so a writer of EndpointSlices or pod status cannot turn the
//! apiserver against the node or a metadata service. Authorization is the `proxy` subresource with
//! the verb of the method (get, create, update, patch, delete); admission sees a CONNECT with
//! PodProxyOptions or ServiceProxyOptions.

use super::errors::{ApiError, ApiResult};
use super::proxy_rewrite;
use super::Shared;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderName, Request, Response, Uri};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// `net.SplitSchemeNamePort`: `name`, `name:port` or `scheme:name:port` (http or https).
pub fn split_scheme_name_port(id: &str) -> Option<(&str, &str, &str)> {
    let parts: Vec<&str> = id.split(':').collect();
    let (scheme, name, port) = match parts.as_slice() {
        [name] => ("", *name, ""),
        [name, port] => ("", *name, *port),
        [scheme, name, port] => (*scheme, *name, *port),
        _ => return None,
    };
    if name.is_empty() || !matches!(scheme, "" | "http" | "https") {
        return None;
    }
    Some((scheme, name, port))
}

/// `proxyutil.IsProxyableIP`.
pub fn proxyable(ip: IpAddr) -> Result<(), String> {
    let refused = ip.is_loopback()
        || ip.is_unspecified()
        || ip.is_multicast()
        || match ip {
            IpAddr::V4(v4) => v4.is_link_local(),
            IpAddr::V6(v6) => (v6.segments()[0] & 0xffc0) == 0xfe80,
        };
    if refused {
        return Err("address not allowed".into());
    }
    Ok(())
}

#[derive(Clone, Copy)]
enum Target {
    Pod,
    Service,
}

pub async fn serve_pod(s: State<Shared>, p: Path<(String, String)>, req: Request<Body>) -> Response<Body> {
    serve(Target::Pod, s, p.0 .0, p.0 .1, String::new(), req).await
}

pub async fn serve_pod_path(s: State<Shared>, p: Path<(String, String, String)>, req: Request<Body>) -> Response<Body> {
    let (ns, name, rest) = p.0;
    serve(Target::Pod, s, ns, name, rest, req).await
}

pub async fn serve_service(s: State<Shared>, p: Path<(String, String)>, req: Request<Body>) -> Response<Body> {
    serve(Target::Service, s, p.0 .0, p.0 .1, String::new(), req).await
}

pub async fn serve_service_path(
    s: State<Shared>,
    p: Path<(String, String, String)>,
    req: Request<Body>,
) -> Response<Body> {
    let (ns, name, rest) = p.0;
    serve(Target::Service, s, ns, name, rest, req).await
}

async fn serve(
    target: Target,
    State(s): State<Shared>,
    ns: String,
    id: String,
    rest: String,
    req: Request<Body>,
) -> Response<Body> {
    match forward(&s, target, &ns, &id, &rest, req).await {
        Ok(r) => r,
        Err(e) => {
            tracing::debug!(error = %e.message, "proxy refused");
            axum::response::IntoResponse::into_response(e)
        }
    }
}

/// The path sent on: `/` + what followed `proxy/`, keeping a trailing slash the client sent.
fn upstream_path(rest: &str, original: &Uri) -> String {
    let mut p = format!("/{}", rest.trim_start_matches('/'));
    if original.path().ends_with('/') && !p.ends_with('/') {
        p.push('/');
    }
    match original.query() {
        Some(q) => format!("{p}?{q}"),
        None => p,
    }
}

async fn forward(
    s: &Shared,
    target: Target,
    ns: &str,
    id: &str,
    rest: &str,
    req: Request<Body>,
) -> ApiResult<Response<Body>> {
    let (scheme, name, port) = split_scheme_name_port(id).ok_or_else(|| match target {
        Target::Pod => ApiError::bad_request(format!("invalid pod request {id:?}")),
        Target::Service => ApiError::bad_request(format!("invalid service request {id:?}")),
    })?;
    let path = upstream_path(rest, req.uri());
    // An empty path is redirected to one ending in '/' (kubernetes/kubernetes#4958), as
    // kube-apiserver's proxy does for GET and HEAD.
    if rest.is_empty() && !req.uri().path().ends_with('/') && matches!(req.method().as_str(), "GET" | "HEAD") {
        let location = match req.uri().query() {
            Some(q) => format!("{}/?{q}", req.uri().path()),
            None => format!("{}/", req.uri().path()),
        };
        return Response::builder()
            .status(301)
            .header(header::LOCATION, location)
            .body(Body::empty())
            .map_err(|e| ApiError::internal(e.to_string()));
    }
    let prepend = format!(
        "/api/v1/namespaces/{ns}/{}/{id}/proxy",
        match target {
            Target::Pod => "pods",
            Target::Service => "services",
        }
    );
    let (kind, options) = match target {
        Target::Pod => ("Pod", json!({"apiVersion": "v1", "kind": "PodProxyOptions", "path": format!("/{rest}")})),
        Target::Service => {
            ("Service", json!({"apiVersion": "v1", "kind": "ServiceProxyOptions", "path": format!("/{rest}")}))
        }
    };
    let info = kaji_api::resources::by_kind(kind).expect("pods and services are served");
    s.registry.admit_connect(&super::pipeline::user_of(req.extensions()), info, ns, name, "proxy", options)?;
    let addr = match target {
        Target::Pod => pod_address(s, ns, name, port)?,
        Target::Service => service_address(s, ns, name, port)?,
    };
    proxyable(addr.ip()).map_err(ApiError::bad_request)?;
    send(addr, scheme == "https", &path, &prepend, req).await
}

fn pod_address(s: &Shared, ns: &str, name: &str, port: &str) -> ApiResult<SocketAddr> {
    let pod = s.registry.get(kaji_api::resources::by_kind("Pod").expect("served"), Some(ns), name)?;
    let port = match port {
        "" => pod
            .pointer("/spec/containers")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .find_map(|c| c.pointer("/ports/0/containerPort").and_then(Value::as_u64))
            .unwrap_or(80),
        p => p.parse::<u64>().map_err(|_| ApiError::bad_request(format!("invalid port {p:?}")))?,
    };
    let port = u16::try_from(port).map_err(|_| ApiError::bad_request(format!("invalid port {port}")))?;
    let ip = pod
        .pointer("/status/podIP")
        .and_then(Value::as_str)
        .and_then(|ip| ip.parse::<IpAddr>().ok())
        .ok_or_else(|| ApiError::new(503, "ServiceUnavailable", format!("pod {name:?} has no IP address yet")))?;
    Ok(SocketAddr::new(ip, port))
}

fn service_address(s: &Shared, ns: &str, name: &str, port: &str) -> ApiResult<SocketAddr> {
    let unavailable = |m: String| ApiError::new(503, "ServiceUnavailable", m);
    let mut port_name = port.to_string();
    if let Ok(number) = port.parse::<u64>() {
        let svc = s.registry.get(kaji_api::resources::by_kind("Service").expect("served"), Some(ns), name)?;
        port_name = crate::endpoints::port_name(&svc, number)
            .ok_or_else(|| unavailable(format!("no service port {number} found for service {name:?}")))?;
    }
    let pods = kaji_api::resources::by_kind("Pod").expect("served");
    // Only addresses of the pod the endpoint names (isValidAddress).
    let owned = |addr: &SocketAddr, ep: &Value| {
        if ep.pointer("/targetRef/kind").and_then(Value::as_str) != Some("Pod") {
            return false;
        }
        let pod_ns = ep.pointer("/targetRef/namespace").and_then(Value::as_str).unwrap_or(ns);
        let pod_name = ep.pointer("/targetRef/name").and_then(Value::as_str).unwrap_or("");
        let Ok(pod) = s.registry.get(pods, Some(pod_ns), pod_name) else { return false };
        pod.pointer("/status/podIPs")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|p| p.get("ip").and_then(Value::as_str))
            .chain(pod.pointer("/status/podIP").and_then(Value::as_str))
            .any(|a| a.parse::<IpAddr>().ok() == Some(addr.ip()))
    };
    let candidates: Vec<SocketAddr> = crate::endpoints::ready(&s.cache, ns, name, &port_name)
        .map_err(ApiError::internal)?
        .into_iter()
        .filter(|(addr, ep)| owned(addr, ep))
        .map(|(addr, _)| addr)
        .collect();
    if candidates.is_empty() {
        return Err(unavailable(format!("no endpoints available for service {name:?}")));
    }
    let pick = uuid::Uuid::new_v4().as_u128() as usize % candidates.len();
    Ok(candidates[pick])
}

/// Hop-by-hop headers, never forwarded (RFC 9110 7.6.1).
fn hop_by_hop(name: &HeaderName) -> bool {
    matches!(
        name.as_str(),
        "connection"
            | "keep-alive"
            | "proxy-authenticate"
            | "proxy-authorization"
            | "te"
            | "trailer"
            | "transfer-encoding"
            | "upgrade"
    )
}

fn copy_headers(from: &HeaderMap, to: &mut HeaderMap) {
    for (k, v) in from {
        if !hop_by_hop(k) && k != header::HOST {
            to.append(k.clone(), v.clone());
        }
    }
}

/// The most of an HTML answer buffered to rewrite its links.
const MAX_REWRITTEN: usize = 16 * 1024 * 1024;

async fn send(addr: SocketAddr, tls: bool, path: &str, prepend: &str, req: Request<Body>) -> ApiResult<Response<Body>> {
    let unreachable =
        |e: String| ApiError::new(503, "ServiceUnavailable", format!("error trying to reach service: {e}"));
    let tcp = tokio::time::timeout(CONNECT_TIMEOUT, tokio::net::TcpStream::connect(addr))
        .await
        .map_err(|_| unreachable(format!("dial tcp {addr}: i/o timeout")))?
        .map_err(|e| unreachable(format!("dial tcp {addr}: {e}")))?;
    let _ = tcp.set_nodelay(true);
    let (parts, body) = req.into_parts();
    let mut out = Request::builder().method(parts.method.clone()).uri(path);
    if let Some(h) = out.headers_mut() {
        copy_headers(&parts.headers, h);
        if let Ok(host) = addr.to_string().parse() {
            h.insert(header::HOST, host);
        }
    }
    let out = out.body(body).map_err(|e| ApiError::bad_request(e.to_string()))?;
    let resp = if tls {
        // kube-apiserver does not verify pods' serving certificates either.
        let config = kaji_pki::tls::unverified_client_config(None).map_err(ApiError::internal)?;
        let name = tokio_rustls::rustls::pki_types::ServerName::IpAddress(addr.ip().into());
        let stream = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config))
            .connect(name, tcp)
            .await
            .map_err(|e| unreachable(e.to_string()))?;
        request(TokioIo::new(stream), out).await?
    } else {
        request(TokioIo::new(tcp), out).await?
    };
    let (parts, body) = resp.into_parts();
    let upstream = addr.to_string();
    let mut back = Response::builder().status(parts.status);
    let html = parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.starts_with("text/html"))
        && parts.headers.get(header::CONTENT_ENCODING).is_none_or(|e| e == "identity");
    if let Some(h) = back.headers_mut() {
        copy_headers(&parts.headers, h);
        // corsRemovingTransport: the backend's CORS answers are not the apiserver's.
        let cors: Vec<HeaderName> = h.keys().filter(|k| k.as_str().starts_with("access-control-")).cloned().collect();
        for k in cors {
            h.remove(k);
        }
        if parts.status.is_redirection() {
            let moved = h
                .get(header::LOCATION)
                .and_then(|l| l.to_str().ok())
                .map(|l| proxy_rewrite::rewrite_url(l, prepend, &upstream));
            if let Some(l) = moved.and_then(|l| l.parse().ok()) {
                h.insert(header::LOCATION, l);
            }
        }
        if html {
            h.remove(header::CONTENT_LENGTH);
        }
    }
    if !html {
        return back.body(Body::new(body)).map_err(|e| ApiError::internal(e.to_string()));
    }
    let bytes = http_body_util::BodyExt::collect(http_body_util::Limited::new(body, MAX_REWRITTEN))
        .await
        .map_err(|e| ApiError::new(502, "BadGateway", format!("error reading the proxied answer: {e}")))?
        .to_bytes();
    let rewritten = proxy_rewrite::rewrite_html(&bytes, prepend, &upstream)
        .map_err(|e| ApiError::new(502, "BadGateway", format!("error rewriting the proxied page: {e}")))?;
    back.body(Body::from(rewritten)).map_err(|e| ApiError::internal(e.to_string()))
}

async fn request<T>(io: T, req: Request<Body>) -> ApiResult<Response<hyper::body::Incoming>>
where
    T: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let unreachable =
        |e: String| ApiError::new(503, "ServiceUnavailable", format!("error trying to reach service: {e}"));
    let (mut sender, conn) = hyper::client::conn::http1::handshake(io).await.map_err(|e| unreachable(e.to_string()))?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    sender.send_request(req).await.map_err(|e| unreachable(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_split_as_kubernetes_splits_them() {
        assert_eq!(split_scheme_name_port("web"), Some(("", "web", "")));
        assert_eq!(split_scheme_name_port("web:8080"), Some(("", "web", "8080")));
        assert_eq!(split_scheme_name_port("https:web:443"), Some(("https", "web", "443")));
        assert_eq!(split_scheme_name_port("ftp:web:21"), None);
        assert_eq!(split_scheme_name_port("a:b:c:d"), None);
        assert_eq!(split_scheme_name_port(":80"), None);
    }

    #[test]
    fn the_node_and_metadata_addresses_are_not_proxied() {
        for refused in ["127.0.0.1", "169.254.169.254", "0.0.0.0", "::1", "fe80::1", "224.0.0.1"] {
            assert_eq!(proxyable(refused.parse().expect("ip")), Err("address not allowed".into()), "{refused}");
        }
        assert_eq!(proxyable("10.244.1.5".parse().expect("ip")), Ok(()));
    }

    #[test]
    fn the_upstream_path_keeps_a_trailing_slash_and_the_query() {
        let uri: Uri = "/api/v1/namespaces/a/pods/p/proxy/results/?x=1".parse().expect("uri");
        assert_eq!(upstream_path("results/", &uri), "/results/?x=1");
        let uri: Uri = "/api/v1/namespaces/a/pods/p/proxy".parse().expect("uri");
        assert_eq!(upstream_path("", &uri), "/");
    }
}
