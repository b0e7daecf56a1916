//! `pods/exec` through the in-process kaji-apiserver, driven by the real `kubectl exec`.
//!
//! The node's agent here is a small WebSocket server on loopback that plays kubelet's side of
//! the remotecommand protocol from a script per command, and records what reached it: the path
//! and query the apiserver sent, the subprotocols offered, what came in on stdin and whether
//! the v5 close signal did. What is under test is the apiserver — validation, where it sends
//! the exec, and that it carries the upgraded connection both ways unchanged — and that real
//! kubectl, through it, prints the output and exits with the command's exit code. The agent's
//! own exec is tested in the agent crate.

mod common;

use anyhow::{ensure, Context};
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use common::Kubectl;
use serde_json::{json, Value};
use std::io::Write;
use std::net::SocketAddr;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Default)]
struct Seen {
    /// `METHOD path?query [offered subprotocols]` of every request.
    requests: Vec<String>,
    /// What `cat` sessions got on stdin, and whether the v5 close signal ended it.
    stdin: Vec<(String, bool)>,
    /// Every `Impersonate-*` header that reached the agent (none should: the apiserver consumes them).
    impersonate: Vec<String>,
}

type Shared = Arc<Mutex<Seen>>;

fn frame(channel: u8, data: &[u8]) -> Message {
    let mut v = vec![channel];
    v.extend_from_slice(data);
    Message::Binary(v.into())
}

fn success() -> Value {
    json!({"metadata": {}, "status": "Success"})
}

fn exit_code(code: u8) -> Value {
    json!({"metadata": {}, "status": "Failure", "reason": "NonZeroExitCode",
           "message": format!("command terminated with non-zero exit code: exit code {code}"),
           "details": {"causes": [{"reason": "ExitCode", "message": code.to_string()}]}})
}

/// Plays one command: `echo ARGS`, `fail CODE` (stderr, then the exit status), `cat` (stdin
/// echoed until the client closes it).
async fn play(mut ws: WebSocket, command: Vec<String>, seen: Shared) {
    // A real command takes a few milliseconds to start; this script would answer at once. kubectl
    // (client-go's websocket executor) registers its streams only after the upgrade returns, in a
    // goroutine racing its reader, which drops a frame for a stream not yet registered ("Unknown
    // stream id 2, discarding message"). The pause stands for the process start, so what is
    // tested is the apiserver's relay, not that client race.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let status = match command.first().map(String::as_str) {
        Some("echo") => {
            let _ = ws.send(frame(1, format!("{}\n", command[1..].join(" ")).as_bytes())).await;
            success()
        }
        Some("fail") => {
            let _ = ws.send(frame(2, b"something went wrong\n")).await;
            exit_code(command.get(1).and_then(|c| c.parse().ok()).unwrap_or(1))
        }
        Some("cat") => {
            let (mut got, mut closed) = (Vec::new(), false);
            while let Some(Ok(msg)) = ws.recv().await {
                match msg.into_data().as_ref() {
                    [255, 0] => {
                        closed = true;
                        break;
                    }
                    [0, data @ ..] => {
                        got.extend_from_slice(data);
                        let _ = ws.send(frame(1, data)).await;
                    }
                    _ => {}
                }
            }
            seen.lock().expect("lock").stdin.push((String::from_utf8_lossy(&got).into_owned(), closed));
            success()
        }
        _ => exit_code(127),
    };
    let _ = ws.send(frame(3, status.to_string().as_bytes())).await;
    // kubectl reads the status once the connection closes normally (1000); any other close
    // is an error to it.
    let _ = ws.send(Message::Close(Some(CloseFrame { code: 1000, reason: "".into() }))).await;
    while let Some(Ok(_)) = ws.recv().await {}
}

async fn exec(
    State(seen): State<Shared>,
    Path((ns, pod, container)): Path<(String, String, String)>,
    RawQuery(query): RawQuery,
    method: axum::http::Method,
    headers: HeaderMap,
    ws: Result<WebSocketUpgrade, axum::extract::ws::rejection::WebSocketUpgradeRejection>,
) -> Response {
    let query = query.unwrap_or_default();
    let offered = headers.get("sec-websocket-protocol").and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
    seen.lock().expect("lock").requests.push(format!("{method} /exec/{ns}/{pod}/{container}?{query} [{offered}]"));
    let impersonate = headers.keys().map(|k| k.as_str()).filter(|k| k.starts_with("impersonate-")).map(String::from);
    seen.lock().expect("lock").impersonate.extend(impersonate);
    if pod == "stopped" {
        return (StatusCode::INTERNAL_SERVER_ERROR, format!("container not found ({container:?})")).into_response();
    }
    let Ok(ws) = ws else {
        return (StatusCode::BAD_REQUEST, "this agent speaks WebSocket only").into_response();
    };
    let command: Vec<String> = serde_urlencoded::from_str::<Vec<(String, String)>>(&query)
        .unwrap_or_default()
        .into_iter()
        .filter(|(k, _)| k == "command")
        .map(|(_, v)| v)
        .collect();
    ws.protocols(["v5.channel.k8s.io", "v4.channel.k8s.io"]).on_upgrade(move |s| play(s, command, seen))
}

struct Cluster {
    server: kaji_apiserver::Server,
    seen: Shared,
    kubectl: Arc<Kubectl>,
    _dir: tempfile::TempDir,
}

impl Cluster {
    /// Node `n1` served by the fake agent; pods `web` (one container), `multi` (init `setup`,
    /// containers `a`, `b`), `stopped` (the agent says its container is not running) and
    /// `pending` (no node).
    async fn start() -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        let mut config = kaji_apiserver::Config::new(([127, 0, 0, 1], 0).into(), dir.path().join("data"));
        config.agent_timeout = Duration::from_secs(2);
        let server = kaji_apiserver::start(config).await?;
        let seen = Shared::default();
        let app = axum::Router::new()
            .route("/exec/{ns}/{pod}/{container}", axum::routing::any(exec))
            .with_state(seen.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let agent: SocketAddr = listener.local_addr()?;
        tokio::spawn(async move { axum::serve(listener, app).await });
        let kubectl = Arc::new(Kubectl::for_url(&format!("http://{}", server.addr)));
        let c = Self { server, seen, kubectl, _dir: dir };
        c.create(
            "/api/v1/nodes",
            json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"},
                "status": {"addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
                           "daemonEndpoints": {"kubeletEndpoint": {"Port": agent.port()}}}}),
        )?;
        for (name, node, init, containers) in [
            ("web", Some("n1"), vec![], vec!["web"]),
            ("multi", Some("n1"), vec!["setup"], vec!["a", "b"]),
            ("stopped", Some("n1"), vec![], vec!["web"]),
            ("pending", None, vec![], vec!["web"]),
        ] {
            let list = |n: &[&str]| n.iter().map(|c| json!({"name": c, "image": "busybox"})).collect::<Vec<_>>();
            let mut pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                "spec": {"containers": list(&containers), "initContainers": list(&init)}});
            if let Some(n) = node {
                pod["spec"]["nodeName"] = n.into();
            }
            c.create("/api/v1/namespaces/default/pods", pod)?;
        }
        Ok(c)
    }

    fn create(&self, path: &str, body: Value) -> anyhow::Result<()> {
        let (code, out) =
            common::http(&self.server.addr.to_string(), "POST", path, Some(&body.to_string()), "application/json");
        ensure!(code == 201, "POST {path}: {code} {out}");
        Ok(())
    }

    /// kubectl with `args`, `input` on its stdin; (exit code, stdout, stderr).
    async fn kubectl(&self, args: &[&str], input: &str) -> anyhow::Result<(i32, String, String)> {
        let (k, args, input) =
            (self.kubectl.clone(), args.iter().map(|s| s.to_string()).collect::<Vec<_>>(), input.to_string());
        let run = tokio::task::spawn_blocking(move || -> anyhow::Result<std::process::Output> {
            let mut child =
                k.command().args(&args).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn()?;
            let mut stdin = child.stdin.take().context("stdin")?;
            stdin.write_all(input.as_bytes())?;
            drop(stdin);
            Ok(child.wait_with_output()?)
        });
        let out = tokio::time::timeout(Duration::from_secs(30), run).await.context("kubectl hung")???;
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        Ok((out.status.code().unwrap_or(-1), text(&out.stdout), text(&out.stderr)))
    }

    fn requests(&self) -> Vec<String> {
        std::mem::take(&mut self.seen.lock().expect("lock").requests)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_exec_runs_through_the_apiserver_and_returns_the_exit_code() -> anyhow::Result<()> {
    let c = Cluster::start().await?;
    assert_eq!(
        c.kubectl(&["exec", "web", "--", "echo", "hello", "world"], "").await?,
        (0, "hello world\n".into(), String::new())
    );
    assert_eq!(
        c.requests(),
        ["GET /exec/default/web/web?command=echo&command=hello&command=world&error=1&output=1 [v5.channel.k8s.io]"],
        "kubelet's query, and kubectl's subprotocol offer passed through"
    );

    let (code, out, err) = c.kubectl(&["exec", "pod/multi", "-c", "b", "--", "fail", "3"], "").await?;
    assert_eq!((code, out.as_str()), (3, ""), "{err}");
    assert_eq!(err, "something went wrong\ncommand terminated with exit code 3\n");
    assert!(c.requests()[0].starts_with("GET /exec/default/multi/b?command=fail&command=3&error=1&output=1 "));

    // stdin flows to the agent, and kubectl's end of input arrives as the v5 close signal.
    let (code, out, _) = c.kubectl(&["exec", "-i", "web", "--", "cat"], "line one\nline two\n").await?;
    assert_eq!((code, out.as_str()), (0, "line one\nline two\n"));
    assert_eq!(c.seen.lock().expect("lock").stdin, [("line one\nline two\n".to_string(), true)]);
    assert!(c.requests()[0].starts_with("GET /exec/default/web/web?command=cat&error=1&input=1&output=1 "));
    c.server.shutdown().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_refusals_are_worded_as_kubernetes_words_them() -> anyhow::Result<()> {
    let c = Cluster::start().await?;
    let cases: &[(&[&str], &str)] = &[
        (
            &["exec", "multi", "-c", "nope", "--", "echo"],
            "Error from server (BadRequest): container nope is not valid for pod multi",
        ),
        (
            &["exec", "pending", "--", "echo"],
            "Error from server (BadRequest): pod pending does not have a host assigned",
        ),
        (&["exec", "ghost", "--", "echo"], "Error from server (NotFound): pods \"ghost\" not found"),
    ];
    for (args, want) in cases {
        let (code, _, err) = c.kubectl(args, "").await?;
        assert_eq!((code, err.trim_end()), (1, *want), "{args:?}");
    }
    assert!(c.requests().is_empty(), "nothing invalid reaches the agent");

    // The agent's own refusal reaches kubectl unchanged (after its SPDY retry, which the agent
    // refuses the same way).
    let (code, _, err) = c.kubectl(&["exec", "stopped", "--", "echo"], "").await?;
    assert_eq!((code, err.trim_end()), (1, "error: unable to upgrade connection: container not found (\"web\")"));
    let reqs = c.requests();
    assert_eq!(reqs.len(), 2, "{reqs:?}");
    assert!(reqs[0].starts_with("GET ") && reqs[1].starts_with("POST "), "{reqs:?}");

    // A request that is not an upgrade is refused before anything is proxied.
    let addr = c.server.addr.to_string();
    let (code, body) =
        common::http(&addr, "GET", "/api/v1/namespaces/default/pods/web/exec?command=ls&stdout=true", None, "");
    let status: Value = serde_json::from_str(&body)?;
    assert_eq!((code, status["message"].as_str()), (400, Some("Upgrade request required")));
    let (code, body) = common::http(&addr, "GET", "/api/v1/namespaces/default/pods/web/exec?container=x", None, "");
    assert!(code == 400 && body.contains("container x is not valid for pod web"), "{code} {body}");
    assert!(c.requests().is_empty());
    c.server.shutdown().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn impersonation_headers_stop_at_the_apiserver_and_never_reach_the_agent() -> anyhow::Result<()> {
    let c = Cluster::start().await?;
    let args = ["--as", "jane", "--as-group", "devs", "--as-uid", "u-1", "exec", "web", "--", "echo", "hi"];
    assert_eq!(c.kubectl(&args, "").await?, (0, "hi\n".into(), String::new()));
    assert_eq!(c.requests().len(), 1, "the exec reached the agent");
    assert_eq!(c.seen.lock().expect("lock").impersonate, Vec::<String>::new());
    c.server.shutdown().await
}
