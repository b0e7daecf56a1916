//! Exec into real containers, as root: the agent's `/exec` over a WebSocket (the remotecommand
//! channel protocol, v5 and v4) — stdout, stderr, stdin and its close signal, a terminal and its
//! resizes, the exit status on channel 3 — and then the whole path kubectl takes: real kubectl
//! → the apiserver → the agent → the container.

mod common;

use std::time::Duration;

use anyhow::{bail, Context};
use common::{phase, Node};
use futures::{SinkExt, StreamExt};
use kube::api::DeleteParams;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;

type Ws = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Opens `/exec/default/{pod}/{container}?{query}` offering `protocol`; returns the socket and
/// the protocol the agent chose.
async fn open(node: &Node, pod: &str, query: &str, protocol: &str) -> anyhow::Result<(Ws, String)> {
    let url = format!("{}/exec/default/{pod}/app?{query}", node.server_url().replacen("http", "ws", 1));
    let mut req = url.into_client_request()?;
    req.headers_mut().insert("Sec-WebSocket-Protocol", protocol.parse()?);
    let (ws, resp) = tokio::time::timeout(common::WAIT, tokio_tungstenite::connect_async(req)).await??;
    let chosen = resp.headers().get("sec-websocket-protocol").and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
    Ok((ws, chosen))
}

/// Everything the agent sends until it closes: (stdout, stderr, status, close code).
#[derive(Debug, Default)]
struct Session {
    stdout: String,
    stderr: String,
    status: Value,
    close: Option<u16>,
}

async fn collect(ws: &mut Ws) -> anyhow::Result<Session> {
    let mut s = Session::default();
    let read = async {
        while let Some(msg) = ws.next().await {
            match msg? {
                Message::Binary(b) => match b.split_first() {
                    Some((1, d)) => s.stdout.push_str(&String::from_utf8_lossy(d)),
                    Some((2, d)) => s.stderr.push_str(&String::from_utf8_lossy(d)),
                    Some((3, d)) => s.status = serde_json::from_slice(d)?,
                    other => bail!("unexpected frame {other:?}"),
                },
                Message::Close(f) => {
                    s.close = f.map(|f| u16::from(f.code));
                    break;
                }
                _ => {}
            }
        }
        anyhow::Ok(())
    };
    tokio::time::timeout(common::WAIT, read).await.context("the exec never ended")??;
    Ok(s)
}

/// The query for `command` plus the stream flags, each argument percent-encoded.
fn q(command: &[&str], streams: &str) -> String {
    let enc = |s: &str| -> String {
        s.bytes()
            .map(|b| {
                if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                    (b as char).to_string()
                } else {
                    format!("%{b:02X}")
                }
            })
            .collect()
    };
    let mut parts: Vec<String> = command.iter().map(|c| format!("command={}", enc(c))).collect();
    parts.push(streams.to_string());
    parts.join("&")
}

const V5: &str = "v5.channel.k8s.io";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_over_websocket_and_kubectl_exec_reach_the_container() -> anyhow::Result<()> {
    let node = Node::start().await?;
    node.pod("box", json!({"containers": [{"name": "app", "command": ["sh", "-c", "exec sleep 3600"], "env": [{"name": "GREETING", "value": "hi"}]}]}))
        .await?;
    node.wait_pod("box", "Running", |p| phase(p) == "Running").await?;

    // stdout, stderr and a non-zero exit, in the container's view (hostname, env, pid 1).
    let script = "hostname; echo $GREETING; cat /proc/1/cmdline | tr '\\0' ' '; echo; echo oops >&2; exit 3";
    let (mut ws, proto) = open(&node, "box", &q(&["sh", "-c", script], "output=1&error=1"), V5).await?;
    assert_eq!(proto, V5);
    let s = collect(&mut ws).await?;
    assert_eq!(s.stdout, "box\nhi\nsleep 3600 \n", "{s:?}");
    assert_eq!(s.stderr, "oops\n");
    assert_eq!(s.status["status"], "Failure");
    assert_eq!(s.status["reason"], "NonZeroExitCode");
    assert_eq!(s.status["details"]["causes"], json!([{"reason": "ExitCode", "message": "3"}]));
    assert_eq!(s.close, Some(1000), "a normal close, or kubectl reports an error");

    // stdin, ended by v5's close signal; success.
    let (mut ws, _) = open(&node, "box", &q(&["cat"], "input=1&output=1"), V5).await?;
    ws.send(Message::Binary(b"\x00hello ".to_vec().into())).await?;
    ws.send(Message::Binary(b"\x00stdin".to_vec().into())).await?;
    ws.send(Message::Binary(vec![255, 0].into())).await?;
    let s = collect(&mut ws).await?;
    assert_eq!((s.stdout.as_str(), &s.status), ("hello stdin", &json!({"metadata": {}, "status": "Success"})));

    // A terminal: its size follows resize messages; v4 is spoken too.
    let (mut ws, proto) = open(
        &node,
        "box",
        &q(&["sh", "-c", "read x; stty size; echo $TERM"], "input=1&output=1&tty=1"),
        "v4.channel.k8s.io",
    )
    .await?;
    assert_eq!(proto, "v4.channel.k8s.io");
    ws.send(Message::Binary(b"\x04{\"Width\":91,\"Height\":27}".to_vec().into())).await?;
    ws.send(Message::Binary(b"\x00go\n".to_vec().into())).await?;
    let s = collect(&mut ws).await?;
    assert!(s.stdout.contains("27 91\r\nxterm\r\n"), "{s:?}");
    assert_eq!(s.status["status"], "Success");

    // A command that cannot start is an InternalError status, not a hang.
    let (mut ws, _) = open(&node, "box", &q(&["no-such-binary"], "output=1"), V5).await?;
    let s = collect(&mut ws).await?;
    assert_eq!(s.status["reason"], "InternalError", "{s:?}");
    assert!(s.status["message"].as_str().is_some_and(|m| m.contains("no-such-binary")), "{s:?}");

    // A client that goes away takes its command with it.
    let (mut ws, _) = open(&node, "box", &q(&["sleep", "321"], "output=1"), V5).await?;
    ws.next().await;
    drop(ws);
    let mut gone = false;
    for _ in 0..50 {
        let (mut ws, _) = open(&node, "box", &q(&["ps"], "output=1"), V5).await?;
        if !collect(&mut ws).await?.stdout.contains("sleep 321") {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(gone, "the exec'd command outlived its client");

    // Refusals before any upgrade, in kubelet's words.
    let (code, body) = node.get("/exec/default/nope/app?command=ls&output=1").await?;
    assert_eq!((code, body.as_str()), (404, "pod does not exist"));
    let (code, body) = node.get("/exec/default/box/app?command=ls").await?;
    assert_eq!((code, body.as_str()), (400, "you must specify at least 1 of stdin, stdout, stderr"));
    let (code, body) = node.get("/exec/default/box/other?command=ls&output=1").await?;
    assert_eq!((code, body.as_str()), (500, "container not found (\"other\")"));

    // The whole path: real kubectl → apiserver → agent → container, exit code included.
    let kubeconfig = node.dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- cluster: {{server: \"http://{}\"}}\n  name: k\ncontexts:\n- context: {{cluster: k, user: u}}\n  name: k\ncurrent-context: k\nusers:\n- name: u\n  user: {{}}\n",
            node.server.addr
        ),
    )?;
    let kubectl = |args: &[&str], input: &'static str| {
        let mut cmd = std::process::Command::new("kubectl");
        cmd.arg("--kubeconfig").arg(&kubeconfig).arg("--cache-dir").arg(node.dir.path().join("cache")).args(args);
        async move {
            tokio::task::spawn_blocking(move || -> anyhow::Result<(i32, String, String)> {
                use std::io::Write;
                use std::process::Stdio;
                let mut child = cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn()?;
                child.stdin.take().context("stdin")?.write_all(input.as_bytes())?;
                let out = child.wait_with_output()?;
                let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
                Ok((out.status.code().unwrap_or(-1), text(&out.stdout), text(&out.stderr)))
            })
            .await?
        }
    };
    let (code, out, err) = kubectl(&["exec", "box", "--", "sh", "-c", "echo from $(hostname); exit 5"], "").await?;
    // client-go's WebSocket reader starts before it registers its streams, so the server's empty
    // "streams are open" frame on stdout (kubelet sends it too) may come first and be logged as
    // discarded; that line is the client's, not an error of the session.
    let err: String = err.lines().filter(|l| !l.contains("Unknown stream id")).map(|l| format!("{l}\n")).collect();
    assert_eq!((code, out.as_str(), err.as_str()), (5, "from box\n", "command terminated with exit code 5\n"));
    let (code, out, _) = kubectl(&["exec", "-i", "box", "-c", "app", "--", "tr", "a-z", "A-Z"], "shout\n").await?;
    assert_eq!((code, out.as_str()), (0, "SHOUT\n"));

    node.pods("default").delete("box", &DeleteParams::default().grace_period(0)).await?;
    node.wait_gone("box").await?;
    node.assert_nothing_left(common::WAIT).await;
    Ok(())
}

fn ready(p: &k8s_openapi::api::core::v1::Pod) -> bool {
    common::container(p, "app").is_some_and(|c| c.ready)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_probes_run_their_command_in_the_container() -> anyhow::Result<()> {
    let node = Node::start().await?;
    let probe = |cmd: &str| json!({"exec": {"command": ["sh", "-c", cmd]}, "periodSeconds": 1, "failureThreshold": 1});
    node.pod(
        "probed",
        json!({"terminationGracePeriodSeconds": 1, "containers": [{"name": "app", "command": ["sh", "-c", "exec sleep 3600"],
            "readinessProbe": probe("cat /tmp/ready"), "livenessProbe": probe("test ! -f /tmp/die")}]}),
    )
    .await?;
    node.wait_pod("probed", "Running", |p| phase(p) == "Running").await?;
    // Not ready while the readiness command fails (an unsupported probe would count as passing).
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(!ready(&node.pods("default").get("probed").await?), "ready before /tmp/ready exists");
    let (mut ws, _) = open(&node, "probed", &q(&["touch", "/tmp/ready"], "output=1"), V5).await?;
    assert_eq!(collect(&mut ws).await?.status["status"], "Success");
    node.wait_pod("probed", "Ready", ready).await?;

    // A failing liveness command restarts the container.
    let (mut ws, _) = open(&node, "probed", &q(&["touch", "/tmp/die"], "output=1"), V5).await?;
    assert_eq!(collect(&mut ws).await?.status["status"], "Success");
    node.wait_pod("probed", "restarted", |p| common::container(p, "app").is_some_and(|c| c.restart_count >= 1)).await?;

    node.pods("default").delete("probed", &DeleteParams::default().grace_period(0)).await?;
    node.wait_gone("probed").await?;
    Ok(())
}

/// `kubectl run -it`'s pod: `tty`, `stdin`, `stdinOnce`. Attaching with a terminal shows the
/// shell's prompt before any newline, carries keystrokes and resizes, and the shell exits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attach_to_a_tty_container_gets_its_terminal() -> anyhow::Result<()> {
    let node = Node::start().await?;
    let app = json!({"name": "app", "command": ["sh"], "tty": true, "stdin": true, "stdinOnce": true});
    node.pod("tty", json!({"restartPolicy": "Never", "containers": [app]})).await?;
    node.wait_pod("tty", "Running", |p| phase(p) == "Running").await?;

    let url = format!("{}/attach/default/tty/app?input=1&output=1&tty=1", node.server_url().replacen("http", "ws", 1));
    let mut req = url.into_client_request()?;
    req.headers_mut().insert("Sec-WebSocket-Protocol", V5.parse()?);
    let (mut ws, _) = tokio::time::timeout(common::WAIT, tokio_tungstenite::connect_async(req)).await??;
    // The prompt: output the shell printed before the attach would not be sent, so it is asked
    // for again with an empty line.
    ws.send(Message::Binary(b"\x00\n".to_vec().into())).await?;
    let mut screen = String::new();
    let deadline = tokio::time::Instant::now() + common::WAIT;
    while !screen.contains("/ # ") {
        let msg = tokio::time::timeout_at(deadline, ws.next()).await.context("no prompt")?;
        if let Some(Message::Binary(b)) = msg.transpose()? {
            if let Some((1, d)) = b.split_first() {
                screen.push_str(&String::from_utf8_lossy(d));
            }
        }
    }
    ws.send(Message::Binary(b"\x04{\"Width\":91,\"Height\":27}".to_vec().into())).await?;
    // The size and the keystrokes travel separately to the terminal: wait for the size.
    let line = "for i in $(seq 50); do s=$(stty size 2>/dev/null); [ -n \"$s\" ] && break; sleep 0.1; done; echo size:$s $TERM; tty; exit 7\n";
    ws.send(Message::Binary([b"\x00".as_slice(), line.as_bytes()].concat().into())).await?;
    let s = collect(&mut ws).await?;
    let all = screen + &s.stdout;
    assert!(all.contains("size:27 91 xterm\r\n/dev/pts/0\r\n"), "{all:?}");
    assert_eq!(s.status["status"], "Success", "{s:?}");
    node.wait_pod("tty", "Failed", |p| phase(p) == "Failed").await?;

    node.pods("default").delete("tty", &DeleteParams::default().grace_period(0)).await?;
    node.wait_gone("tty").await?;
    node.assert_nothing_left(common::WAIT).await;
    Ok(())
}
