//! `pods/log` through the in-process kaji-apiserver, with `kubectl logs` as one of the clients.
//!
//! The kubelet endpoint here is NOT the agent: the real agent (crate `agent`) needs root to run
//! containers, so each test serves `/containerLogs/...` from a small HTTP server on a real
//! loopback socket with canned text, registered as the node's InternalIP and kubelet port. What
//! is under test is the apiserver: how it finds the agent, which request it sends (recorded
//! here), how it maps the agent's errors, and that it streams the agent's answer as it arrives.
//! The agent's own log semantics (tailLines, timestamps, ...) are tested in the agent crate.

mod common;

use anyhow::{ensure, Context};
use axum::body::{Body, Bytes};
use axum::extract::{Path, RawQuery, State};
use axum::http::{Request, Response, StatusCode};
use axum::response::IntoResponse;
use common::Kubectl;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use serde_json::{json, Value};
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

const WEB_LOG: &str = "hello from web\nsecond line\n";

/// What one followed stream sends: chunks as the test pushes them; `closed` fires when the
/// stream is dropped (it ended, or the apiserver hung up).
struct FollowScript {
    chunks: mpsc::UnboundedReceiver<String>,
    /// Held, never sent: dropping it is the signal.
    _closed: oneshot::Sender<()>,
}

#[derive(Default)]
struct KubeletState {
    /// `path?query` of every request, in order.
    requests: Mutex<Vec<String>>,
    follows: Mutex<VecDeque<FollowScript>>,
}

async fn container_logs(
    State(st): State<Arc<KubeletState>>,
    Path((ns, pod, container)): Path<(String, String, String)>,
    RawQuery(query): RawQuery,
) -> axum::response::Response {
    let query = query.unwrap_or_default();
    st.requests.lock().expect("lock").push(format!("/containerLogs/{ns}/{pod}/{container}?{query}"));
    if pod == "elsewhere" {
        return (StatusCode::NOT_FOUND, format!("pod {ns}/{pod} is not running on this node")).into_response();
    }
    if container == "waiting" {
        let msg = format!("container \"{container}\" in pod \"{pod}\" is waiting to start: ContainerCreating");
        return (StatusCode::BAD_REQUEST, msg).into_response();
    }
    let plain = [(axum::http::header::CONTENT_TYPE, "text/plain; charset=utf-8")];
    if query.split('&').any(|p| p == "follow=true") {
        let Some(script) = st.follows.lock().expect("lock").pop_front() else {
            return (StatusCode::INTERNAL_SERVER_ERROR, "the test queued no follow script").into_response();
        };
        let stream = futures::stream::unfold(script, |mut s| async move {
            let chunk = s.chunks.recv().await?;
            Some((Ok::<_, std::io::Error>(Bytes::from(chunk)), s))
        });
        return (plain, Body::from_stream(stream)).into_response();
    }
    let text = if pod == "web" { WEB_LOG.to_string() } else { format!("log of {pod}/{container}\n") };
    (plain, text).into_response()
}

/// The kubelet endpoint: a real HTTP server on 127.0.0.1 with canned answers.
struct Kubelet {
    addr: SocketAddr,
    state: Arc<KubeletState>,
}

impl Kubelet {
    async fn start() -> anyhow::Result<Self> {
        let state = Arc::new(KubeletState::default());
        let app = axum::Router::new()
            .route("/containerLogs/{ns}/{pod}/{container}", axum::routing::get(container_logs))
            .with_state(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        tokio::spawn(async move { axum::serve(listener, app).await });
        Ok(Self { addr, state })
    }

    fn requests(&self) -> Vec<String> {
        self.state.requests.lock().expect("lock").clone()
    }

    /// Queue the script the next followed stream plays; returns its sender and close signal.
    fn queue_follow(&self) -> (mpsc::UnboundedSender<String>, oneshot::Receiver<()>) {
        let (tx, chunks) = mpsc::unbounded_channel();
        let (closed, on_close) = oneshot::channel();
        self.state.follows.lock().expect("lock").push_back(FollowScript { chunks, _closed: closed });
        (tx, on_close)
    }
}

struct Cluster {
    server: kaji_apiserver::Server,
    kubelet: Kubelet,
    _dir: tempfile::TempDir,
}

impl Cluster {
    /// An apiserver whose node `n1` is served by the test's kubelet endpoint, with pods `web`
    /// (one container), `multi` (init container `setup`, containers `a`, `b` and `waiting`) and
    /// `elsewhere` on it, and `pending` on no node.
    async fn start() -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        let mut config = kaji_apiserver::Config::new(([127, 0, 0, 1], 0).into(), dir.path().join("data"));
        config.agent_timeout = Duration::from_secs(1);
        let server = kaji_apiserver::start(config).await?;
        let kubelet = Kubelet::start().await?;
        let c = Self { server, kubelet, _dir: dir };
        c.node(
            "n1",
            json!([{"type": "Hostname", "address": "n1"}, {"type": "InternalIP", "address": "127.0.0.1"}]),
            c.kubelet.addr.port(),
        )
        .await?;
        c.pod("web", Some("n1"), &[], &["web"]).await?;
        c.pod("multi", Some("n1"), &["setup"], &["a", "b", "waiting"]).await?;
        c.pod("elsewhere", Some("n1"), &[], &["web"]).await?;
        c.pod("pending", None, &[], &["web"]).await?;
        Ok(c)
    }

    async fn node(&self, name: &str, addresses: Value, port: u16) -> anyhow::Result<()> {
        let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
            "status": {"addresses": addresses, "daemonEndpoints": {"kubeletEndpoint": {"Port": port}}}});
        let (code, body) = self.call("POST", "/api/v1/nodes", Some(node)).await?;
        ensure!(code == 201, "creating node {name}: {code} {body}");
        Ok(())
    }

    async fn pod(&self, name: &str, node: Option<&str>, init: &[&str], containers: &[&str]) -> anyhow::Result<()> {
        let list = |names: &[&str]| names.iter().map(|n| json!({"name": n, "image": "busybox"})).collect::<Vec<_>>();
        let mut pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": list(containers)}});
        if !init.is_empty() {
            pod["spec"]["initContainers"] = json!(list(init));
        }
        if let Some(n) = node {
            pod["spec"]["nodeName"] = n.into();
        }
        let (code, body) = self.call("POST", "/api/v1/namespaces/default/pods", Some(pod)).await?;
        ensure!(code == 201, "creating pod {name}: {code} {body}");
        Ok(())
    }

    /// One request on its own connection; the response once its headers arrive (within 10s).
    async fn request(&self, method: &str, path: &str, body: Option<Value>) -> anyhow::Result<Response<Incoming>> {
        let stream = tokio::net::TcpStream::connect(self.server.addr).await?;
        let (mut send, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await?;
        tokio::spawn(conn);
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        let req = Request::builder()
            .method(method)
            .uri(path)
            .header("host", self.server.addr.to_string())
            .header("content-type", "application/json")
            .body(http_body_util::Full::new(Bytes::from(body)))?;
        Ok(within(send.send_request(req)).await??)
    }

    /// One request; its status and whole body as text.
    async fn call(&self, method: &str, path: &str, body: Option<Value>) -> anyhow::Result<(u16, String)> {
        let resp = self.request(method, path, body).await?;
        let code = resp.status().as_u16();
        let bytes = within(resp.into_body().collect()).await??.to_bytes();
        Ok((code, String::from_utf8_lossy(&bytes).into_owned()))
    }

    /// A request that must fail: its code and Status.
    async fn status(&self, path: &str) -> anyhow::Result<(u16, Value)> {
        let (code, body) = self.call("GET", path, None).await?;
        let status: Value = serde_json::from_str(&body).with_context(|| format!("{path}: not a Status: {body}"))?;
        ensure!(status["kind"] == "Status" && status["code"] == code, "{path}: {status}");
        Ok((code, status))
    }
}

async fn within<T>(fut: impl std::future::Future<Output = T>) -> anyhow::Result<T> {
    tokio::time::timeout(Duration::from_secs(10), fut).await.context("timed out")
}

const LOG: &str = "/api/v1/namespaces/default/pods";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_come_from_the_nodes_agent_with_the_options_passed_on() -> anyhow::Result<()> {
    let c = Cluster::start().await?;
    let resp = c.request("GET", &format!("{LOG}/web/log"), None).await?;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "text/plain");
    let body = within(resp.into_body().collect()).await??.to_bytes();
    assert_eq!(body, WEB_LOG.as_bytes(), "the only container is read and the text passed through unchanged");

    let q = "container=b&tailLines=2&timestamps=true&sinceSeconds=60&limitBytes=100&previous=true\
             &insecureSkipTLSVerifyBackend=true&unknownParameter=x";
    assert_eq!(c.call("GET", &format!("{LOG}/multi/log?{q}"), None).await?, (200, "log of multi/b\n".into()));
    let since = "container=setup&sinceTime=2024-05-01T12%3A00%3A00.5%2B02%3A00&follow=false&previous=0";
    assert_eq!(c.call("GET", &format!("{LOG}/multi/log?{since}"), None).await?.0, 200);
    assert_eq!(
        c.kubelet.requests(),
        [
            "/containerLogs/default/web/web?",
            "/containerLogs/default/multi/b?limitBytes=100&previous=true&sinceSeconds=60&tailLines=2&timestamps=true",
            "/containerLogs/default/multi/setup?sinceTime=2024-05-01T10%3A00%3A00Z",
        ]
    );
    c.server.shutdown().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_are_statuses_worded_as_kubernetes_words_them() -> anyhow::Result<()> {
    let c = Cluster::start().await?;
    c.pod("lost", Some("ghost"), &[], &["web"]).await?;
    c.node("noip", json!([{"type": "Hostname", "address": "noip"}]), 10250).await?;
    c.pod("on-noip", Some("noip"), &[], &["web"]).await?;
    let cases: &[(&str, u16, &str, &str)] = &[
        ("nope/log", 404, "NotFound", "pods \"nope\" not found"),
        (
            "multi/log",
            400,
            "BadRequest",
            "a container name must be specified for pod multi, choose one of: [setup a b waiting]",
        ),
        ("multi/log?container=c", 400, "BadRequest", "container c is not valid for pod multi"),
        (
            "web/log?tailLines=-1",
            422,
            "Invalid",
            "PodLogOptions \"web\" is invalid: tailLines: Invalid value: -1: must be greater than or equal to 0",
        ),
        (
            "web/log?sinceSeconds=5&sinceTime=2024-05-01T10:00:00Z",
            422,
            "Invalid",
            "PodLogOptions \"web\" is invalid: : Forbidden: at most one of `sinceTime` or `sinceSeconds` may be specified",
        ),
        ("web/log?tailLines=ten", 400, "BadRequest", "invalid value for tailLines: \"ten\" is not an integer"),
        // The agent's own answers.
        (
            "multi/log?container=waiting",
            400,
            "BadRequest",
            "container \"waiting\" in pod \"multi\" is waiting to start: ContainerCreating",
        ),
        ("elsewhere/log", 404, "NotFound", "pod default/elsewhere is not running on this node"),
        // The node is not there, or cannot be reached.
        ("lost/log", 404, "NotFound", "nodes \"ghost\" not found"),
    ];
    for (path, code, reason, message) in cases {
        let (got, status) = c.status(&format!("{LOG}/{path}")).await?;
        assert_eq!((got, &status["reason"], &status["message"]), (*code, &json!(reason), &json!(message)), "{path}");
    }
    let (code, status) = c.status(&format!("{LOG}/on-noip/log")).await?;
    assert_eq!((code, &status["reason"]), (500, &json!("InternalError")));
    assert!(status["message"].as_str().is_some_and(|m| m.contains("node \"noip\" reports no InternalIP")), "{status}");

    // A pod no node has taken has no log yet: Kubernetes answers 204 with nothing.
    assert_eq!(c.call("GET", &format!("{LOG}/pending/log"), None).await?, (204, String::new()));
    let (code, status) = c.status("/api/v1/pods/web/log").await?;
    assert_eq!((code, &status["reason"]), (404, &json!("NotFound")), "pods/log is namespaced");
    let (code, body) = c.call("POST", &format!("{LOG}/web/log"), Some(json!({}))).await?;
    assert!(code == 405 && body.contains("MethodNotAllowed"), "{code} {body}");
    assert_eq!(c.kubelet.requests().len(), 2, "only the two requests that got past the apiserver reach the agent");
    c.server.shutdown().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_followed_log_streams_as_it_arrives_until_the_client_leaves_or_the_server_stops() -> anyhow::Result<()> {
    let c = Cluster::start().await?;
    let (chunks, agent_closed) = c.kubelet.queue_follow();
    chunks.send("first line\n".into())?;
    let resp = c.request("GET", &format!("{LOG}/web/log?container=web&follow=true"), None).await?;
    assert_eq!(resp.status(), 200);
    let mut body = resp.into_body();
    let mut next = async || -> anyhow::Result<String> {
        let frame = within(body.frame()).await?.context("the stream ended")??;
        Ok(String::from_utf8_lossy(&frame.into_data().map_err(|_| anyhow::anyhow!("not data"))?).into_owned())
    };
    assert_eq!(next().await?, "first line\n");
    // The second chunk does not exist until now: the apiserver cannot have buffered the answer.
    chunks.send("second line\n".into())?;
    assert_eq!(next().await?, "second line\n");
    assert!(c.kubelet.requests()[0].ends_with("?follow=true"));

    drop(body);
    within(agent_closed).await?.ok();
    assert!(chunks.send("nobody reads this\n".into()).is_err(), "the agent's stream was dropped");

    // A followed log does not hold up shutdown: it ends, as watches do.
    let (chunks, _closed) = c.kubelet.queue_follow();
    chunks.send("before shutdown\n".into())?;
    let resp = c.request("GET", &format!("{LOG}/web/log?follow=true"), None).await?;
    let mut body = resp.into_body();
    let first = within(body.frame()).await?.context("a first chunk")??;
    assert_eq!(first.into_data().ok().as_deref(), Some(&b"before shutdown\n"[..]));
    within(c.server.shutdown()).await??;
    assert!(within(body.collect()).await?.is_ok(), "the stream ended cleanly");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_that_does_not_answer_is_an_error_not_a_hang() -> anyhow::Result<()> {
    let c = Cluster::start().await?;
    // Accepts connections (the kernel's backlog) but never reads or answers.
    let silent = std::net::TcpListener::bind("127.0.0.1:0")?;
    c.node("silent", json!([{"type": "InternalIP", "address": "127.0.0.1"}]), silent.local_addr()?.port()).await?;
    c.pod("stuck", Some("silent"), &[], &["web"]).await?;
    let closed_port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    c.node("down", json!([{"type": "InternalIP", "address": "127.0.0.1"}]), closed_port).await?;
    c.pod("gone", Some("down"), &[], &["web"]).await?;

    let started = std::time::Instant::now();
    let (code, status) = c.status(&format!("{LOG}/stuck/log")).await?;
    assert_eq!((code, &status["reason"]), (504, &json!("Timeout")), "{status}");
    assert!(status["message"].as_str().is_some_and(|m| m.contains("did not answer within 1s")), "{status}");
    assert!(started.elapsed() < Duration::from_secs(5), "the 1s agent timeout applied");

    let (code, status) = c.status(&format!("{LOG}/gone/log")).await?;
    assert_eq!((code, &status["reason"]), (500, &json!("InternalError")), "{status}");
    let message = status["message"].as_str().unwrap_or_default();
    assert!(message.contains(&format!("failed to reach the agent at 127.0.0.1:{closed_port}")), "{message}");
    drop(silent);
    c.server.shutdown().await
}

/// Run kubectl off the async workers; returns (exit code, stdout, stderr).
async fn kubectl(k: &Arc<Kubectl>, args: &[&str]) -> anyhow::Result<(i32, String, String)> {
    let (k, args): (_, Vec<String>) = (k.clone(), args.iter().map(|s| s.to_string()).collect());
    let out = within(tokio::task::spawn_blocking(move || k.run(&args.iter().map(String::as_str).collect::<Vec<_>>())))
        .await??;
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    Ok((out.status.code().unwrap_or(-1), text(&out.stdout), text(&out.stderr)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_logs_reads_containers_through_the_apiserver() -> anyhow::Result<()> {
    let c = Cluster::start().await?;
    let k = Arc::new(Kubectl::for_url(&format!("http://{}", c.server.addr)));

    assert_eq!(kubectl(&k, &["logs", "web"]).await?, (0, WEB_LOG.into(), String::new()));
    assert_eq!(kubectl(&k, &["logs", "multi", "-c", "b"]).await?.1, "log of multi/b\n");
    assert_eq!(kubectl(&k, &["logs", "pod/multi", "-c", "setup", "--tail=5", "--timestamps"]).await?.0, 0);
    let (code, _, stderr) = kubectl(&k, &["logs", "multi", "-c", "waiting"]).await?;
    assert_eq!(code, 1);
    assert_eq!(
        stderr.trim(),
        "Error from server (BadRequest): container \"waiting\" in pod \"multi\" is waiting to start: ContainerCreating"
    );
    // kubectl 1.32 never sends a log request without a container: for a pod with several it
    // picks the first itself. The apiserver's own refusal shows through `get --raw`.
    assert_eq!(
        kubectl(&k, &["logs", "multi"]).await?,
        (0, "log of multi/a\n".into(), "Defaulted container \"a\" out of: a, b, waiting, setup (init)\n".into())
    );
    let (code, _, stderr) = kubectl(&k, &["get", "--raw", "/api/v1/namespaces/default/pods/multi/log"]).await?;
    assert_eq!(
        (code, stderr.trim()),
        (
            1,
            "Error from server (BadRequest): a container name must be specified for pod multi, choose one of: \
             [setup a b waiting]"
        )
    );

    // kubectl ends when the agent ends the stream.
    let (chunks, _closed) = c.kubelet.queue_follow();
    chunks.send("one\n".into())?;
    chunks.send("two\n".into())?;
    drop(chunks);
    assert_eq!(kubectl(&k, &["logs", "-f", "web"]).await?, (0, "one\ntwo\n".into(), String::new()));

    assert_eq!(
        c.kubelet.requests(),
        [
            "/containerLogs/default/web/web?",
            "/containerLogs/default/multi/b?",
            "/containerLogs/default/multi/setup?tailLines=5&timestamps=true",
            "/containerLogs/default/multi/waiting?",
            "/containerLogs/default/multi/a?",
            "/containerLogs/default/web/web?follow=true",
        ]
    );
    c.server.shutdown().await
}
