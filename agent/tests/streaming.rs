//! kubectl's streaming commands against real containers, as root: real kubectl (1.32, which
//! tunnels SPDY in a WebSocket for port-forward, and 1.28, which speaks SPDY/3.1 natively for
//! port-forward, exec and attach), and the official Python client (exec and attach with stdin)
//! → the in-process apiserver → the agent → busybox containers.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use anyhow::{ensure, Context};
use common::{phase, Node};
use kube::api::DeleteParams;
use serde_json::json;

/// `kubectl` (1.32) or one of the versioned binaries beside it (`kubectl.1.28`); a missing one
/// fails the test.
fn kubectl_binary(version: Option<&str>) -> PathBuf {
    let Some(v) = version else { return PathBuf::from("kubectl") };
    let which = Command::new("sh").args(["-c", "readlink -f \"$(command -v kubectl)\""]).output().expect("sh runs");
    let dir = PathBuf::from(String::from_utf8_lossy(&which.stdout).trim());
    let path = dir.parent().map(|d| d.join(format!("kubectl.{v}"))).unwrap_or_default();
    assert!(path.exists(), "needs {} (kubectl {v}) beside kubectl", path.display());
    path
}

struct Kubectl {
    bin: PathBuf,
    kubeconfig: PathBuf,
    cache: PathBuf,
}

impl Kubectl {
    fn new(node: &Node, version: Option<&str>) -> anyhow::Result<Kubectl> {
        let kubeconfig = node.dir.path().join("kubeconfig");
        std::fs::write(
            &kubeconfig,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- cluster: {{server: \"http://{}\"}}\n  name: k\ncontexts:\n- context: {{cluster: k, user: u}}\n  name: k\ncurrent-context: k\nusers:\n- name: u\n  user: {{}}\n",
                node.server.addr
            ),
        )?;
        let cache = node.dir.path().join(format!("cache-{}", version.unwrap_or("default")));
        Ok(Kubectl { bin: kubectl_binary(version), kubeconfig, cache })
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(&self.bin);
        c.arg("--kubeconfig").arg(&self.kubeconfig).arg("--cache-dir").arg(&self.cache).args(args);
        c.env_remove("KUBECONFIG");
        c
    }

    /// Runs to the end with `input` on stdin: (exit code, stdout, stderr).
    async fn run(&self, args: &[&str], input: &str) -> anyhow::Result<(i32, String, String)> {
        let mut cmd = self.command(args);
        let input = input.to_string();
        let out = tokio::task::spawn_blocking(move || -> anyhow::Result<std::process::Output> {
            let mut child = cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn()?;
            child.stdin.take().context("stdin")?.write_all(input.as_bytes())?;
            Ok(child.wait_with_output()?)
        });
        let out = tokio::time::timeout(common::WAIT, out).await.context("kubectl hung")???;
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        Ok((out.status.code().unwrap_or(-1), text(&out.stdout), text(&out.stderr)))
    }

    /// Starts a long-running command; its stdout lines arrive on the receiver.
    fn spawn(&self, args: &[&str]) -> anyhow::Result<Running> {
        let mut child =
            self.command(args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn()?;
        let (tx, lines) = mpsc::channel();
        let stdout = child.stdout.take().context("stdout")?;
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        Ok(Running { child, lines })
    }
}

/// A kubectl left running; killed (by its pid) when dropped.
struct Running {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Running {
    fn line(&self) -> anyhow::Result<String> {
        self.lines.recv_timeout(common::WAIT).context("kubectl printed nothing more")
    }

    /// Stops it; returns its stderr.
    fn stop(mut self) -> String {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let mut err = String::new();
        if let Some(mut e) = self.child.stderr.take() {
            let _ = e.read_to_string(&mut err);
        }
        err
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Execs `command` with a terminal through the agent's SPDY/3.1 remotecommand (v4), as
/// kubectl ≤ 1.29 does: the error, stdin, stdout and resize streams, one resize, `input` then
/// stdin's end. Returns stdout and the status from the error stream.
async fn spdy_tty_exec(
    node: &Node,
    command: &[&str],
    resize: &[u8],
    input: &[u8],
) -> anyhow::Result<(String, serde_json::Value)> {
    use kaji_agent::spdy::compress::{Deflater, Inflater};
    use kaji_agent::spdy::frame::{self, Frame, Head};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = node.agent.as_ref().and_then(|a| a.server_addr).context("agent serving")?;
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    let query: String = command.iter().map(|c| format!("command={}&", urlencode(c))).collect();
    s.write_all(
        format!(
            "POST /exec/default/box/app?{query}input=1&output=1&tty=1 HTTP/1.1\r\nHost: {addr}\r\nConnection: Upgrade\r\n\
             Upgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: v4.channel.k8s.io\r\nContent-Length: 0\r\n\r\n"
        )
        .as_bytes(),
    )
    .await?;
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut b = [0u8; 1];
        ensure!(s.read(&mut b).await? == 1, "closed in the head: {:?}", String::from_utf8_lossy(&head));
        head.push(b[0]);
    }
    let head = String::from_utf8_lossy(&head).to_lowercase();
    ensure!(
        head.starts_with("http/1.1 101") && head.contains("x-stream-protocol-version: v4.channel.k8s.io"),
        "{head}"
    );
    let mut d = Deflater::new();
    let mut wire = Vec::new();
    let syn = |id: u32, kind: &str| Frame::SynStream {
        id,
        associated: 0,
        priority: 0,
        flags: 0,
        headers: vec![("streamtype".into(), kind.into())],
    };
    for f in [
        syn(1, "error"),
        syn(3, "stdin"),
        syn(5, "stdout"),
        syn(7, "resize"),
        Frame::Data { id: 7, fin: false, data: resize.to_vec() },
        Frame::Data { id: 3, fin: false, data: input.to_vec() },
        Frame::Data { id: 3, fin: true, data: Vec::new() },
    ] {
        frame::encode(&f, &mut d, &mut wire)?;
    }
    s.write_all(&wire).await?;
    let (mut out, mut status, mut inflater) = (Vec::new(), Vec::new(), Inflater::new());
    let read = async {
        loop {
            let mut h = [0u8; 8];
            if s.read_exact(&mut h).await.is_err() {
                break;
            }
            let head = Head::parse(h);
            let mut body = vec![0u8; head.length()];
            s.read_exact(&mut body).await?;
            match frame::decode(head, &body, &mut inflater)? {
                Frame::Data { id: 5, data, .. } => out.extend_from_slice(&data),
                Frame::Data { id: 1, data, .. } => status.extend_from_slice(&data),
                Frame::GoAway { .. } => break,
                _ => {}
            }
        }
        anyhow::Ok(())
    };
    tokio::time::timeout(common::WAIT, read).await.context("the exec never ended")??;
    Ok((String::from_utf8_lossy(&out).into_owned(), serde_json::from_slice(&status)?))
}

fn urlencode(s: &str) -> String {
    s.bytes().map(|b| if b.is_ascii_alphanumeric() { (b as char).to_string() } else { format!("%{b:02X}") }).collect()
}

/// One HTTP/1.0 exchange on a fresh connection to `port`: the whole response.
async fn http(port: u16, request: Vec<u8>) -> anyhow::Result<String> {
    tokio::task::spawn_blocking(move || -> anyhow::Result<String> {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port))?;
        s.set_read_timeout(Some(common::WAIT))?;
        s.write_all(&request)?;
        let mut out = Vec::new();
        s.read_to_end(&mut out)?;
        Ok(String::from_utf8_lossy(&out).into_owned())
    })
    .await?
}

/// The local port from kubectl's `Forwarding from 127.0.0.1:PORT -> REMOTE`.
fn forwarded_port(line: &str) -> anyhow::Result<u16> {
    let rest = line.strip_prefix("Forwarding from 127.0.0.1:").with_context(|| format!("unexpected {line:?}"))?;
    Ok(rest.split_whitespace().next().context("no port")?.parse()?)
}

/// An httpd on the pod's 127.0.0.1:8080 only: a page, and a CGI that upper-cases its body.
const HTTPD: &str = r#"mkdir -p /www/cgi-bin && echo hello from the pod > /www/index.html &&
printf '#!/bin/sh\necho Content-Type: text/plain\necho\nhead -c "$CONTENT_LENGTH" | tr a-z A-Z\n' > /www/cgi-bin/up &&
chmod +x /www/cgi-bin/up && exec httpd -f -p 127.0.0.1:8080 -h /www"#;

async fn check_port_forward(node: &Node, version: Option<&str>) -> anyhow::Result<()> {
    let k = Kubectl::new(node, version)?;
    let pf = k.spawn(&["port-forward", "pod/web", ":8080", ":9"])?;
    let first = pf.line()?;
    let port = forwarded_port(&first)?;
    let mut closed = 0;
    while let Ok(line) = pf.line() {
        // Each port is announced for 127.0.0.1 and [::1].
        if let Ok(p) = forwarded_port(&line) {
            closed = p;
            break;
        }
    }
    ensure!(closed != 0, "kubectl {version:?} never announced the second port");

    // Small, then large bodies both ways, over separate forwarded connections.
    let page = http(port, b"GET /index.html HTTP/1.0\r\n\r\n".to_vec()).await?;
    ensure!(page.starts_with("HTTP/1.") && page.ends_with("\r\n\r\nhello from the pod\n"), "{version:?}: {page:?}");
    let body: String = (0..20_000).map(|i| format!("line {i} of a long body\n")).collect();
    let mut req = format!("POST /cgi-bin/up HTTP/1.0\r\nContent-Length: {}\r\n\r\n", body.len()).into_bytes();
    req.extend_from_slice(body.as_bytes());
    let (a, b) = tokio::join!(http(port, req.clone()), http(port, req));
    for resp in [a?, b?] {
        // The CGI ends its header with a bare "\n\n".
        let got = resp.split_once("\n\n").map(|(_, b)| b).unwrap_or("");
        ensure!(
            got.len() == body.len(),
            "{version:?}: {} of {} bytes came back: {:?}",
            got.len(),
            body.len(),
            &resp[..resp.len().min(300)]
        );
        ensure!(got == body.to_uppercase(), "{version:?}: the body came back changed");
    }

    // Nothing listens on port 9: the error stream says so, and nothing panics.
    let resp = http(closed, b"GET / HTTP/1.0\r\n\r\n".to_vec()).await.unwrap_or_default();
    ensure!(resp.is_empty(), "{resp:?}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let err = pf.stop();
    ensure!(
        err.contains("error forwarding port 9 to pod web") && err.contains("failed to connect to localhost:9"),
        "kubectl {version:?} stderr: {err}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_port_forward_reaches_a_server_on_the_pods_loopback() -> anyhow::Result<()> {
    let node = Node::start().await?;
    node.pod("web", json!({"containers": [{"name": "app", "command": ["sh", "-c", HTTPD]}]})).await?;
    node.wait_pod("web", "Running", |p| phase(p) == "Running").await?;
    // The server is only on the pod's loopback: the host's has nothing on 8080.
    tokio::time::sleep(Duration::from_millis(500)).await;

    check_port_forward(&node, None).await.context("kubectl 1.32 (SPDY in WebSocket)")?;
    check_port_forward(&node, Some("1.28")).await.context("kubectl 1.28 (SPDY)")?;
    // The rest of the version matrix: native SPDY up to 1.30, tunnelled from 1.31.
    for v in ["1.27", "1.29", "1.30", "1.31", "1.33"] {
        check_port_forward(&node, Some(v)).await.with_context(|| format!("kubectl {v}"))?;
    }

    // A pod that is not running is refused by kubectl itself, with kubectl's message.
    let k = Kubectl::new(&node, None)?;
    node.pod("idle", json!({"containers": [{"name": "app", "image": "127.0.0.1:1/none:1"}]})).await?;
    let (code, _, err) = k.run(&["port-forward", "pod/idle", ":80"], "").await?;
    ensure!(code == 1 && err.contains("unable to forward port because pod is not running"), "{code} {err}");

    for name in ["web", "idle"] {
        node.pods("default").delete(name, &DeleteParams::default().grace_period(0)).await?;
        node.wait_gone(name).await?;
    }
    node.assert_nothing_left(common::WAIT).await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_1_28_exec_and_attach_speak_spdy_and_1_32_attaches_over_websocket() -> anyhow::Result<()> {
    let node = Node::start().await?;
    let ticker = "i=0; while true; do echo tick $i; echo warn $i >&2; i=$((i+1)); sleep 0.2; done";
    node.pod("box", json!({"containers": [{"name": "app", "command": ["sh", "-c", ticker]}]})).await?;
    node.wait_pod("box", "Running", |p| phase(p) == "Running").await?;
    let old = Kubectl::new(&node, Some("1.28"))?;
    let new = Kubectl::new(&node, None)?;

    // exec over SPDY: output, the exit code, stdin to its end (1.29 offers v5 first: v4 is agreed).
    for k in [&old, &Kubectl::new(&node, Some("1.29"))?] {
        let (code, out, err) = k.run(&["exec", "box", "--", "sh", "-c", "echo out; echo err >&2; exit 3"], "").await?;
        assert_eq!((code, out.as_str()), (3, "out\n"), "{err}");
        assert_eq!(err, "err\ncommand terminated with exit code 3\n");
    }
    let (code, out, _) = old.run(&["exec", "-i", "box", "-c", "app", "--", "tr", "a-z", "A-Z"], "shout\n").await?;
    assert_eq!((code, out.as_str()), (0, "SHOUT\n"));
    // A terminal over SPDY (kubectl needs a real terminal for -t): resize and stdin streams.
    // The resize and stdin streams are independent (as in the kubelet, which reads resizes in
    // a goroutine of their own): the size may land just after "go", so the script waits for it.
    let script =
        "read x; for i in $(seq 50); do s=$(stty size 2>/dev/null); [ -n \"$s\" ] && break; sleep 0.1; done; echo $s; echo $TERM $x";
    let (out, status) = spdy_tty_exec(&node, &["sh", "-c", script], b"{\"Width\":91,\"Height\":27}\n", b"go\n").await?;
    ensure!(out.contains("27 91\r\nxterm go\r\n"), "{out:?}");
    assert_eq!(status, json!({"metadata": {}, "status": "Success"}));
    // kubectl 1.32 forced onto SPDY does the same.
    let mut forced = new.command(&["exec", "box", "--", "sh", "-c", "echo $((6*7))"]);
    forced.env("KUBECTL_REMOTE_COMMAND_WEBSOCKETS", "false");
    let o = tokio::task::spawn_blocking(move || forced.output()).await??;
    assert_eq!((o.status.code(), String::from_utf8_lossy(&o.stdout).as_ref()), (Some(0), "42\n"));

    // attach: what the container prints from now on, never what it printed before.
    for (k, what) in [(&new, "1.32"), (&old, "1.28")] {
        let (_, logs, _) = k.run(&["logs", "box"], "").await?;
        let before = logs.lines().filter_map(|l| l.strip_prefix("tick ")).filter_map(|n| n.parse::<u64>().ok()).max();
        let before = before.context("the container logged nothing")?;
        let attached = k.spawn(&["attach", "box"])?;
        let mut ticks = Vec::new();
        while ticks.len() < 3 {
            let line = attached.line().with_context(|| format!("kubectl {what} attach"))?;
            if let Some(n) = line.strip_prefix("tick ").and_then(|n| n.parse::<u64>().ok()) {
                ticks.push(n);
            }
        }
        let err = attached.stop();
        ensure!(ticks[0] > before, "kubectl {what}: {ticks:?} starts before {before}: {err}");
        ensure!(ticks.windows(2).all(|w| w[1] == w[0] + 1), "kubectl {what}: {ticks:?}");
        ensure!(err.contains("warn "), "stderr lines go to stderr: {err}");
    }
    // stdin cannot be attached: a clear refusal, not a hang.
    let (code, _, err) = new.run(&["attach", "-i", "box"], "").await?;
    ensure!(code == 1 && err.contains("stdin is not enabled for this container"), "{code} {err}");
    // Attaching left the container alone.
    let (code, out, _) = new.run(&["exec", "box", "--", "echo", "still here"], "").await?;
    assert_eq!((code, out.as_str()), (0, "still here\n"));

    node.pods("default").delete("box", &DeleteParams::default().grace_period(0)).await?;
    node.wait_gone("box").await?;
    node.assert_nothing_left(common::WAIT).await;
    Ok(())
}

/// `kubectl run -it --rm ... -- sh`, kubectl on a real terminal (`script`, from bsdutils, gives it
/// one, 91×27): the shell runs on a terminal of its own, of kubectl's size, reads what is typed,
/// and the pod is gone afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_run_it_gives_a_shell_on_a_terminal() -> anyhow::Result<()> {
    let node = Node::start().await?;
    let k = Kubectl::new(&node, None)?;
    let overrides = format!(r#"{{"spec":{{"nodeName":"{}"}}}}"#, node.config.node_name);
    let run = k.command(&[
        "run",
        "-it",
        "--rm",
        "--restart=Never",
        "--image",
        &node.image,
        "--overrides",
        &overrides,
        "t",
        "--",
        "sh",
    ]);
    let quote = |s: &std::ffi::OsStr| format!("'{}'", s.to_string_lossy().replace('\'', r"'\''"));
    let line: Vec<String> = std::iter::once(quote(run.get_program())).chain(run.get_args().map(quote)).collect();
    let mut script = Command::new("script");
    script.args(["-qec", &format!("stty cols 91 rows 27; {}", line.join(" ")), "/dev/null"]);
    let mut child = script.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn()?;
    let mut stdin = child.stdin.take().context("stdin")?;
    // The size and the keystrokes reach the terminal separately: the shell waits for the size.
    // kubectl attaching to a terminal sends the size +1 in both directions first and then the
    // real one (to make a re-attached screen redraw, attach.go), so wait for the real one.
    stdin.write_all(
        b"for i in $(seq 50); do s=$(stty size); [ \"$s\" = \"27 91\" ] && break; sleep 0.1; done; \
          echo size:$s; echo hi-$((6*7)); exit\n",
    )?;
    let out = tokio::task::spawn_blocking(move || {
        let out = child.wait_with_output();
        drop(stdin);
        out
    });
    let out = tokio::time::timeout(common::WAIT, out).await.context("kubectl run -it hung")???;
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    ensure!(out.status.success(), "{text}");
    ensure!(text.contains("size:27 91\r\nhi-42\r\n"), "{text:?}");
    ensure!(text.contains("pod \"t\" deleted"), "{text:?}");
    node.wait_gone("t").await?;
    node.assert_nothing_left(common::WAIT).await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_attach_i_writes_to_a_stdin_container_and_stdin_once_closes_it() -> anyhow::Result<()> {
    let node = Node::start().await?;
    let echo = "while read l; do echo got:$l; done; echo eof";
    let pod = |stdin_once: bool| {
        json!({"restartPolicy": "Never", "containers": [{"name": "app", "command": ["sh", "-c", echo],
            "stdin": true, "stdinOnce": stdin_once}]})
    };
    for (name, version) in [("in-new", None), ("in-old", Some("1.28"))] {
        node.pod(name, pod(true)).await?;
        node.wait_pod(name, "Running", |p| phase(p) == "Running").await?;
        let k = Kubectl::new(&node, version)?;
        // stdinOnce: the end of kubectl's stdin ends the container's, so the process exits.
        let (code, out, err) = k.run(&["attach", "-i", name, "-c", "app"], "hello\nworld\n").await?;
        ensure!(code == 0 && out.contains("got:hello\ngot:world\neof\n"), "kubectl {version:?}: {code} {out:?} {err}");
        node.wait_pod(name, "Succeeded", |p| phase(p) == "Succeeded").await?;
    }

    // Without stdinOnce the stdin outlives a session: a second attach is read too.
    node.pod("keep", pod(false)).await?;
    node.wait_pod("keep", "Running", |p| phase(p) == "Running").await?;
    let k = Kubectl::new(&node, None)?;
    for word in ["first", "second"] {
        let mut attach = k.command(&["attach", "-i", "keep", "-c", "app"]);
        let mut child = attach.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::null()).spawn()?;
        let mut stdin = child.stdin.take().context("stdin")?;
        stdin.write_all(format!("{word}\n").as_bytes())?;
        let running = Running { lines: lines_of(&mut child)?, child };
        let line = running.line()?;
        ensure!(line == format!("got:{word}"), "{line:?}");
        drop(stdin);
        drop(running);
    }
    let (code, out, _) = k.run(&["exec", "keep", "--", "echo", "still here"], "").await?;
    assert_eq!((code, out.as_str()), (0, "still here\n"));

    // A container without stdin: true is still refused.
    node.pod("plain", json!({"containers": [{"name": "app", "command": ["sleep", "1000"]}]})).await?;
    node.wait_pod("plain", "Running", |p| phase(p) == "Running").await?;
    let (code, _, err) = k.run(&["attach", "-i", "plain"], "x\n").await?;
    ensure!(code == 1 && err.contains("stdin is not enabled for this container"), "{code} {err}");

    for name in ["in-new", "in-old", "keep", "plain"] {
        node.pods("default").delete(name, &DeleteParams::default().grace_period(0)).await?;
        node.wait_gone(name).await?;
    }
    node.assert_nothing_left(common::WAIT).await;
    Ok(())
}

/// The official Python client writes stdin the moment its WebSocket is open (a `str` as a text
/// message, `bytes` as a binary one), over `v5.channel.k8s.io` and `v4.channel.k8s.io`, for
/// exec and attach: every byte reaches the process (`tests/python/stream.py`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_client_writes_stdin_at_once_and_nothing_is_lost() -> anyhow::Result<()> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/python/stream.py");
    let node = Node::start().await?;
    node.pod("box", json!({"containers": [{"name": "app", "command": ["sleep", "1000"]}]})).await?;
    let echo = "while read l; do echo got:$l; done";
    node.pod("echo", json!({"containers": [{"name": "app", "command": ["sh", "-c", echo], "stdin": true}]})).await?;
    for name in ["box", "echo"] {
        node.wait_pod(name, "Running", |p| phase(p) == "Running").await?;
    }
    let mut cmd = Command::new("python3");
    cmd.arg(script).arg(format!("http://{}", node.server.addr)).args(["default", "box", "echo"]);
    cmd.env("PYTHONUNBUFFERED", "1").stdin(Stdio::null());
    let out = tokio::time::timeout(Duration::from_secs(120), tokio::task::spawn_blocking(move || cmd.output()))
        .await
        .context("stream.py hung")???;
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    println!("{text}");
    ensure!(out.status.success(), "stream.py failed ({}):\n{text}", out.status);

    for name in ["box", "echo"] {
        node.pods("default").delete(name, &DeleteParams::default().grace_period(0)).await?;
        node.wait_gone(name).await?;
    }
    node.assert_nothing_left(common::WAIT).await;
    Ok(())
}

/// The child's stdout lines, on a receiver.
fn lines_of(child: &mut Child) -> anyhow::Result<mpsc::Receiver<String>> {
    let (tx, lines) = mpsc::channel();
    let stdout = child.stdout.take().context("stdout")?;
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    Ok(lines)
}
