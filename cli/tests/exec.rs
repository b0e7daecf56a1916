//! `kaji exec` through the in-process apiserver's `pods/exec`, which carries the WebSocket to
//! the node's agent; the agent here is a small WebSocket server on loopback playing kubelet's
//! side of `v5.channel.k8s.io` from a script per command.

mod common;

use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, RawQuery};
use axum::response::Response;
use common::{stderr, stdout, Cluster};
use serde_json::{json, Value};
use std::io::Write as _;
use std::process::Stdio;

fn frame(channel: u8, data: &[u8]) -> Message {
    let mut v = vec![channel];
    v.extend_from_slice(data);
    Message::Binary(v.into())
}

fn exit_code(code: u8) -> Value {
    json!({"metadata": {}, "status": "Failure", "reason": "NonZeroExitCode",
           "message": format!("command terminated with non-zero exit code: exit code {code}"),
           "details": {"causes": [{"reason": "ExitCode", "message": code.to_string()}]}})
}

/// `echo ARGS` (stdout), `fail CODE` (stderr, then that exit code), `cat` (stdin echoed until
/// the v5 close signal).
async fn play(mut ws: WebSocket, command: Vec<String>) {
    let status = match command.first().map(String::as_str) {
        Some("echo") => {
            let _ = ws.send(frame(1, format!("{}\n", command[1..].join(" ")).as_bytes())).await;
            json!({"metadata": {}, "status": "Success"})
        }
        Some("fail") => {
            let _ = ws.send(frame(2, b"something went wrong\n")).await;
            exit_code(command.get(1).and_then(|c| c.parse().ok()).unwrap_or(1))
        }
        Some("cat") => {
            while let Some(Ok(msg)) = ws.recv().await {
                match msg.into_data().as_ref() {
                    [255, 0] => break,
                    [0, data @ ..] => {
                        let _ = ws.send(frame(1, data)).await;
                    }
                    _ => {}
                }
            }
            json!({"metadata": {}, "status": "Success"})
        }
        _ => exit_code(127),
    };
    let _ = ws.send(frame(3, status.to_string().as_bytes())).await;
    let _ = ws.send(Message::Close(Some(CloseFrame { code: 1000, reason: "".into() }))).await;
    while let Some(Ok(_)) = ws.recv().await {}
}

async fn exec(
    Path((_ns, _pod, _c)): Path<(String, String, String)>,
    RawQuery(q): RawQuery,
    ws: WebSocketUpgrade,
) -> Response {
    let command: Vec<String> = q
        .unwrap_or_default()
        .split('&')
        .filter_map(|kv| kv.strip_prefix("command="))
        .map(|v| v.replace("%20", " ").replace('+', " "))
        .collect();
    ws.protocols(["v5.channel.k8s.io", "v4.channel.k8s.io"]).on_upgrade(move |s| play(s, command))
}

fn cluster() -> Cluster {
    let c = Cluster::start();
    let app = axum::Router::new().route("/exec/{ns}/{pod}/{container}", axum::routing::any(exec));
    let listener = c.rt.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).expect("bind");
    let port = listener.local_addr().expect("addr").port();
    c.rt.spawn(async move { axum::serve(listener, app).await });
    c.create(
        "/api/v1/nodes",
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"},
               "status": {"addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
                          "daemonEndpoints": {"kubeletEndpoint": {"Port": port}}}}),
    );
    c.create(
        "/api/v1/namespaces/default/pods",
        json!({"metadata": {"name": "web"}, "spec": {"nodeName": "n1", "containers": [{"name": "web", "image": "busybox"}]}}),
    );
    c
}

#[test]
fn exec_prints_the_output_and_exits_with_the_commands_code() {
    let c = cluster();
    assert_eq!(c.ok(&["exec", "web", "--", "echo", "hello", "there"]), "hello there\n");
    let out = c.run(&["exec", "web", "-c", "web", "--", "fail", "3"]);
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(stderr(&out), "something went wrong\ncommand terminated with exit code 3\n");
}

#[test]
fn exec_with_stdin_passes_it_and_ends_it() {
    let c = cluster();
    let mut child = c
        .command(&["exec", "-i", "web", "--", "cat"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    child.stdin.take().expect("stdin").write_all(b"one\ntwo\n").expect("write");
    let out = child.wait_with_output().expect("kaji exec -i");
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "one\ntwo\n");
}

#[test]
fn exec_refuses_unknown_pods_and_containers_in_one_line() {
    let c = cluster();
    assert_eq!(c.fails(&["exec", "nope", "--", "echo"]), "Error from server (NotFound): pods \"nope\" not found");
    assert_eq!(c.fails(&["exec", "web", "-c", "db", "--", "echo"]), "error: container db is not valid for pod web");
}
