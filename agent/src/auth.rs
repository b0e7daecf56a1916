//! Who may use the agent's port, as kubelet decides it with x509 authentication: the TLS
//! handshake already checked that a client certificate chains to `--client-ca-file`; here the
//! certificate's subject is authorized. `/healthz` is open; everything else (exec, attach,
//! port-forward, container logs, pods, metrics, stats) needs a certificate of the apiserver's
//! kubelet client (`kube-apiserver-kubelet-client`) or of `system:masters` — the identities
//! Kubernetes' default policy lets through to `nodes/proxy`. Refusals read as kubelet's:
//! `Unauthorized`, `Forbidden (user=..., verb=..., resource=nodes, subresource(s)=[proxy])`.

use axum::extract::{ConnectInfo, Request};
use axum::http::{Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use kaji_pki::listener::Peer;

/// The apiserver's identity towards agents (kubeadm's name).
pub const APISERVER_KUBELET_CLIENT: &str = "kube-apiserver-kubelet-client";
pub const MASTERS: &str = "system:masters";

/// The subresource of `nodes` kubelet authorizes a path as.
pub fn subresource(path: &str) -> &'static str {
    let first = path.trim_start_matches('/').split('/').next().unwrap_or("");
    match first {
        "stats" => "stats",
        "metrics" => "metrics",
        "logs" => "log",
        "spec" => "spec",
        _ => "proxy",
    }
}

/// Kubelet's verb for a method.
pub fn verb(method: &Method) -> String {
    match *method {
        Method::GET | Method::HEAD => "get".into(),
        Method::POST => "create".into(),
        Method::PUT => "update".into(),
        Method::PATCH => "patch".into(),
        Method::DELETE => "delete".into(),
        ref other => other.as_str().to_ascii_lowercase(),
    }
}

/// Whether a certificate's subject may use the agent.
pub fn allowed(common_name: &str, organizations: &[String]) -> bool {
    common_name == APISERVER_KUBELET_CLIENT || organizations.iter().any(|o| o == MASTERS)
}

/// The middleware (only installed when the agent serves TLS).
pub async fn filter(req: Request, next: Next) -> Response {
    if req.uri().path() == "/healthz" {
        return next.run(req).await;
    }
    let leaf = req.extensions().get::<ConnectInfo<Peer>>().and_then(|p| p.0.client_chain.first().cloned());
    let Some(leaf) = leaf else {
        return (StatusCode::UNAUTHORIZED, "Unauthorized").into_response();
    };
    let id = match kaji_pki::Identity::parse(&leaf) {
        Ok(id) => id,
        Err(e) => {
            tracing::debug!(error = %e, "unreadable client certificate");
            return (StatusCode::UNAUTHORIZED, "Unauthorized").into_response();
        }
    };
    if !allowed(&id.common_name, &id.organizations) {
        let msg = format!(
            "Forbidden (user={}, verb={}, resource=nodes, subresource(s)=[{}])\n",
            id.common_name,
            verb(req.method()),
            subresource(req.uri().path())
        );
        tracing::debug!(user = %id.common_name, path = %req.uri().path(), "forbidden");
        return (StatusCode::FORBIDDEN, msg).into_response();
    }
    next.run(req).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_map_to_kubelets_subresources() {
        assert_eq!(subresource("/exec/default/p/c"), "proxy");
        assert_eq!(subresource("/containerLogs/default/p/c"), "proxy");
        assert_eq!(subresource("/stats/summary"), "stats");
        assert_eq!(subresource("/metrics"), "metrics");
        assert_eq!(verb(&Method::POST), "create");
    }

    #[test]
    fn only_the_apiserver_and_masters_get_through() {
        assert!(allowed(APISERVER_KUBELET_CLIENT, &[]));
        assert!(allowed("kubernetes-admin", &[MASTERS.to_string()]));
        assert!(!allowed("system:node:n2", &["system:nodes".to_string()]));
        assert!(!allowed("system:kube-proxy", &[]));
    }
}
