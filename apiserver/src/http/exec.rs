//! `pods/{name}/exec`, `pods/{name}/attach` and `pods/{name}/portforward`: Kubernetes'
//! `ExecLocation`/`AttachLocation`/`PortForwardLocation` (which container, which node, the
//! kubelet path and query) and then the upgraded connection proxied to the node's agent byte
//! for byte, as Kubernetes' upgrade-aware proxy does — the client and the agent negotiate the
//! protocol between themselves (WebSocket `v5.channel.k8s.io`/`v4.channel.k8s.io`, SPDY/3.1
//! with `X-Stream-Protocol-Version`, SPDY tunnelled in WebSocket for port-forward), and a
//! refusal from the agent (any answer but 101) reaches the client unchanged.

use super::errors::{ApiError, ApiResult};
use super::Shared;
use crate::registry::pod_log::agent_endpoint;
use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, Request, Response, StatusCode};
use axum::response::IntoResponse;
use http_body_util::Empty;
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use serde_json::Value;
use std::net::SocketAddr;
use std::time::Instant;
use tracing::Instrument;

/// The subresource's name in the path.
pub const SUBRESOURCE: &str = "exec";

/// The streaming subresources, each with its kubelet path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Exec,
    Attach,
    PortForward,
}

impl Kind {
    fn resource(self) -> &'static str {
        match self {
            Kind::Exec => "pods/exec",
            Kind::Attach => "pods/attach",
            Kind::PortForward => "pods/portforward",
        }
    }
}

/// `PodExecOptions` from the query kubectl sends.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExecOptions {
    pub container: Option<String>,
    pub command: Vec<String>,
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
    pub tty: bool,
}

impl ExecOptions {
    /// The options object admission webhooks are sent for this CONNECT (PodExecOptions,
    /// PodAttachOptions or PodPortForwardOptions, core/v1).
    pub fn connect_options(&self, kind: Kind, query: &str) -> serde_json::Value {
        let mut o = serde_json::json!({"apiVersion": "v1", "stdin": self.stdin, "stdout": self.stdout,
            "stderr": self.stderr, "tty": self.tty});
        if let Some(c) = &self.container {
            o["container"] = c.as_str().into();
        }
        match kind {
            Kind::Exec => {
                o["kind"] = "PodExecOptions".into();
                o["command"] = self.command.clone().into();
            }
            Kind::Attach => o["kind"] = "PodAttachOptions".into(),
            Kind::PortForward => {
                let pairs: Vec<(String, String)> = serde_urlencoded::from_str(query).unwrap_or_default();
                let ports: Vec<i64> =
                    pairs.iter().filter(|(k, _)| k == "ports").filter_map(|(_, v)| v.parse().ok()).collect();
                o = serde_json::json!({"apiVersion": "v1", "kind": "PodPortForwardOptions"});
                if !ports.is_empty() {
                    o["ports"] = ports.into();
                }
            }
        }
        o
    }

    /// Query booleans as Kubernetes converts them: present and not `0`/`false` is true.
    pub fn parse(query: &str) -> ApiResult<Self> {
        let pairs: Vec<(String, String)> =
            serde_urlencoded::from_str(query).map_err(|e| ApiError::bad_request(format!("invalid query: {e}")))?;
        let first = |k: &str| pairs.iter().find(|(key, _)| key == k).map(|(_, v)| v.as_str());
        let flag = |k: &str| first(k).is_some_and(|v| v != "0" && !v.eq_ignore_ascii_case("false"));
        Ok(Self {
            container: first("container").filter(|c| !c.is_empty()).map(str::to_string),
            command: pairs.iter().filter(|(k, _)| k == "command").map(|(_, v)| v.clone()).collect(),
            stdin: flag("stdin"),
            stdout: flag("stdout"),
            stderr: flag("stderr"),
            tty: flag("tty"),
        })
    }

    /// The kubelet's query (`streamParams`): `input`/`output`/`error`/`tty` as `1`, one `command`
    /// per argument, keys sorted as Go's `url.Values.Encode` sorts them.
    pub fn agent_query(&self) -> String {
        let mut params: Vec<(&str, &str)> = self.command.iter().map(|c| ("command", c.as_str())).collect();
        for (on, key) in [(self.stderr, "error"), (self.stdin, "input"), (self.stdout, "output"), (self.tty, "tty")] {
            if on {
                params.push((key, "1"));
            }
        }
        serde_urlencoded::to_string(&params).unwrap_or_default()
    }
}

fn names<'a>(pod: &'a Value, list: &str) -> Vec<&'a str> {
    pod.pointer(&format!("/spec/{list}"))
        .and_then(Value::as_array)
        .map(|cs| cs.iter().filter_map(|c| c.get("name").and_then(Value::as_str)).collect())
        .unwrap_or_default()
}

/// The container to run in, with Kubernetes' `streamLocation` errors (400s). Pure.
pub fn choose_container(pod: &Value, name: &str, requested: Option<&str>) -> ApiResult<String> {
    let (init, regular, ephemeral) =
        (names(pod, "initContainers"), names(pod, "containers"), names(pod, "ephemeralContainers"));
    if let Some(c) = requested {
        if init.contains(&c) || regular.contains(&c) || ephemeral.contains(&c) {
            return Ok(c.to_string());
        }
        return Err(ApiError::bad_request(format!("container {c} is not valid for pod {name}")));
    }
    match regular.as_slice() {
        [only] => Ok(only.to_string()),
        [] => Err(ApiError::bad_request(format!("a container name must be specified for pod {name}"))),
        _ => {
            let mut msg =
                format!("a container name must be specified for pod {name}, choose one of: [{}]", regular.join(" "));
            if !init.is_empty() {
                msg.push_str(&format!(" or one of the init containers: [{}]", init.join(" ")));
            }
            Err(ApiError::bad_request(msg))
        }
    }
}

/// The agent's path for a request: `/exec/{ns}/{pod}/{container}?...`,
/// `/attach/{ns}/{pod}/{container}?...` or `/portForward/{ns}/{pod}`. Pure.
pub fn agent_path(kind: Kind, ns: &str, name: &str, container: &str, opts: &ExecOptions) -> String {
    match kind {
        Kind::Exec => format!("/exec/{ns}/{name}/{container}?{}", opts.agent_query()),
        Kind::Attach => format!("/attach/{ns}/{name}/{container}?{}", opts.agent_query()),
        Kind::PortForward => format!("/portForward/{ns}/{name}"),
    }
}

/// Where the request goes: the node, its agent and the agent's path.
fn location(
    s: &Shared,
    kind: Kind,
    ns: &str,
    name: &str,
    opts: &ExecOptions,
) -> ApiResult<(String, SocketAddr, String)> {
    let by_kind = |k: &str| kaji_api::resources::by_kind(k).expect("pods and nodes are served");
    let pod = s.registry.get(by_kind("Pod"), Some(ns), name)?;
    let container = match kind {
        Kind::PortForward => String::new(),
        Kind::Exec | Kind::Attach => choose_container(&pod, name, opts.container.as_deref())?,
    };
    let Some(node) = pod.pointer("/spec/nodeName").and_then(Value::as_str).filter(|n| !n.is_empty()) else {
        return Err(ApiError::bad_request(format!("pod {name} does not have a host assigned")));
    };
    let addr = agent_endpoint(&s.registry.get(by_kind("Node"), None, node)?)?;
    Ok((node.to_string(), addr, agent_path(kind, ns, name, &container, opts)))
}

/// An HTTP/1.1 upgrade request: `Connection: upgrade` and an `Upgrade` protocol.
fn is_upgrade(headers: &HeaderMap) -> bool {
    let connection = headers.get_all(header::CONNECTION).iter().filter_map(|v| v.to_str().ok());
    connection.flat_map(|v| v.split(',')).any(|t| t.trim().eq_ignore_ascii_case("upgrade"))
        && headers.contains_key(header::UPGRADE)
}

/// `GET|POST /api/v1/namespaces/{ns}/pods/{name}/exec`.
pub async fn serve(state: State<Shared>, path: Path<(String, String)>, req: Request<Body>) -> Response<Body> {
    serve_kind(Kind::Exec, state, path, req).await
}

/// `GET|POST /api/v1/namespaces/{ns}/pods/{name}/attach`.
pub async fn serve_attach(state: State<Shared>, path: Path<(String, String)>, req: Request<Body>) -> Response<Body> {
    serve_kind(Kind::Attach, state, path, req).await
}

/// `GET|POST /api/v1/namespaces/{ns}/pods/{name}/portforward`.
pub async fn serve_portforward(
    state: State<Shared>,
    path: Path<(String, String)>,
    req: Request<Body>,
) -> Response<Body> {
    serve_kind(Kind::PortForward, state, path, req).await
}

async fn serve_kind(
    kind: Kind,
    State(s): State<Shared>,
    Path((ns, name)): Path<(String, String)>,
    req: Request<Body>,
) -> Response<Body> {
    let started = Instant::now();
    let span = tracing::info_span!("request", verb = "CONNECT", resource = kind.resource());
    let resp = async {
        match connect(&s, kind, &ns, &name, req).await {
            Ok(r) => r,
            Err(e) => {
                tracing::debug!(error = %e, pod = %format!("{ns}/{name}"), "{} refused", kind.resource());
                e.into_response()
            }
        }
    }
    .instrument(span)
    .await;
    s.metrics.observe("CONNECT", kind.resource(), resp.status().as_u16(), started.elapsed().as_secs_f64());
    resp
}

async fn connect(s: &Shared, kind: Kind, ns: &str, name: &str, mut req: Request<Body>) -> ApiResult<Response<Body>> {
    let opts = ExecOptions::parse(req.uri().query().unwrap_or(""))?;
    let (node, addr, path) = location(s, kind, ns, name, &opts)?;
    let pods = kaji_api::resources::by_kind("Pod").expect("pods are served");
    let sub = kind.resource().trim_start_matches("pods/");
    let options = opts.connect_options(kind, req.uri().query().unwrap_or(""));
    s.registry.admit_connect(&super::pipeline::user_of(req.extensions()), pods, ns, name, sub, options)?;
    if !is_upgrade(req.headers()) {
        return Err(ApiError::bad_request("Upgrade request required"));
    }
    let client_upgrade =
        req.extensions_mut().remove::<OnUpgrade>().ok_or_else(|| ApiError::bad_request("Upgrade request required"))?;
    tracing::debug!(node = %node, agent = %addr, path = %path, "proxying {}", kind.resource());
    let unreachable =
        |detail: String| ApiError::internal(format!("node {node:?}: failed to reach the agent at {addr}: {detail}"));
    let timeout = s.agents.timeout();
    let timed_out = || {
        ApiError::timeout(format!(
            "node {node:?}: the agent at {addr} did not answer within {}s",
            timeout.as_secs_f64()
        ))
    };
    let stream = s.agents.connect(addr).await.map_err(|e| match e {
        crate::agent_client::Error::Timeout { .. } => timed_out(),
        crate::agent_client::Error::Stream { source, .. } => unreachable(source.to_string()),
        other => unreachable(other.to_string()),
    })?;
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.map_err(|e| unreachable(e.to_string()))?;
    tokio::spawn(async move {
        if let Err(e) = conn.with_upgrades().await {
            tracing::debug!(error = %e, "agent connection ended");
        }
    });
    let mut upstream = Request::builder().method(req.method()).uri(&path);
    for (k, v) in req.headers() {
        // The agent is a different host; credentials meant for us are not passed on.
        if k != header::HOST && k != header::AUTHORIZATION {
            upstream = upstream.header(k, v);
        }
    }
    let upstream = upstream
        .header(header::HOST, addr.to_string())
        .body(Empty::<Bytes>::new())
        .map_err(|e| ApiError::internal(format!("invalid agent request {path:?}: {e}")))?;
    let mut resp = tokio::time::timeout(timeout, sender.send_request(upstream))
        .await
        .map_err(|_| timed_out())?
        .map_err(|e| unreachable(e.to_string()))?;
    if resp.status() != StatusCode::SWITCHING_PROTOCOLS {
        // The agent's refusal, as it gave it (Kubernetes passes the kubelet's through).
        let mut out = Response::builder().status(resp.status());
        if let Some(ct) = resp.headers().get(header::CONTENT_TYPE) {
            out = out.header(header::CONTENT_TYPE, ct);
        }
        let body = super::logs::read_error_bytes(resp.into_body(), timeout).await;
        return out.body(Body::from(body)).map_err(|e| ApiError::internal(e.to_string()));
    }
    let agent_upgrade = hyper::upgrade::on(&mut resp);
    let mut out = Response::builder().status(StatusCode::SWITCHING_PROTOCOLS);
    for (k, v) in resp.headers() {
        out = out.header(k, v);
    }
    let mut shutdown = s.shutdown.clone();
    tokio::spawn(async move {
        let (client, agent) = match tokio::join!(client_upgrade, agent_upgrade) {
            (Ok(c), Ok(a)) => (c, a),
            (c, a) => {
                tracing::debug!(client = ?c.err(), agent = ?a.err(), "exec upgrade failed");
                return;
            }
        };
        let (mut client, mut agent) = (TokioIo::new(client), TokioIo::new(agent));
        // Like a followed log, an exec ends with the server rather than holding up shutdown.
        tokio::select! {
            r = tokio::io::copy_bidirectional(&mut client, &mut agent) => {
                tracing::debug!(result = ?r, "exec stream ended");
            }
            _ = shutdown.wait_for(|stopping| *stopping) => {}
        }
    });
    out.body(Body::empty()).map_err(|e| ApiError::internal(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_query_kubectl_sends_becomes_the_kubelet_query() {
        let o = ExecOptions::parse("command=sh&command=-c&command=echo%20hi&container=web&stderr=true&stdout=true")
            .expect("valid");
        assert_eq!(o.command, ["sh", "-c", "echo hi"]);
        assert_eq!(
            (o.stdin, o.stdout, o.stderr, o.tty, o.container.as_deref()),
            (false, true, true, false, Some("web"))
        );
        assert_eq!(o.agent_query(), "command=sh&command=-c&command=echo+hi&error=1&output=1");
        let o = ExecOptions::parse("command=sh&stdin=true&stdout=true&tty=true&stderr=false").expect("valid");
        assert_eq!(o.agent_query(), "command=sh&input=1&output=1&tty=1");
        assert!(ExecOptions::parse("stdin=1").expect("valid").stdin);
    }

    fn pod(init: &[&str], containers: &[&str]) -> Value {
        let list = |n: &[&str]| n.iter().map(|c| json!({"name": c})).collect::<Vec<_>>();
        json!({"spec": {"initContainers": list(init), "containers": list(containers)}})
    }

    #[test]
    fn containers_are_chosen_and_refused_in_kubernetes_words() {
        assert_eq!(choose_container(&pod(&[], &["web"]), "p", None).expect("only one"), "web");
        assert_eq!(choose_container(&pod(&["init"], &["a", "b"]), "p", Some("init")).expect("init"), "init");
        let err = choose_container(&pod(&[], &["web"]), "p", Some("x")).expect_err("unknown");
        assert_eq!((err.code, err.message.as_str()), (400, "container x is not valid for pod p"));
        let err = choose_container(&pod(&["setup"], &["a", "b"]), "p", None).expect_err("ambiguous");
        assert_eq!(
            err.message,
            "a container name must be specified for pod p, choose one of: [a b] or one of the init containers: [setup]"
        );
    }

    #[test]
    fn each_subresource_goes_to_its_kubelet_path() {
        let o = ExecOptions::parse("container=b&stdout=true&stderr=true").expect("valid");
        assert_eq!(agent_path(Kind::Attach, "ns", "p", "b", &o), "/attach/ns/p/b?error=1&output=1");
        assert_eq!(agent_path(Kind::PortForward, "ns", "p", "", &o), "/portForward/ns/p");
        let o = ExecOptions::parse("command=ls&stdout=true").expect("valid");
        assert_eq!(agent_path(Kind::Exec, "ns", "p", "c", &o), "/exec/ns/p/c?command=ls&output=1");
    }

    #[test]
    fn only_upgrade_requests_are_proxied() {
        let mut h = HeaderMap::new();
        assert!(!is_upgrade(&h));
        h.insert(header::CONNECTION, "keep-alive, Upgrade".parse().expect("header"));
        h.insert(header::UPGRADE, "websocket".parse().expect("header"));
        assert!(is_upgrade(&h));
    }
}
