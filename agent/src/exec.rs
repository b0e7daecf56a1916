//! kubelet's `/exec/{namespace}/{pod}/{container}`: a command run in a container, its streams
//! carried over a WebSocket with Kubernetes' remotecommand channel protocol — `v5.channel.k8s.io`
//! (what kubectl ≥ 1.30 speaks) or `v4.channel.k8s.io`. Every binary message starts with its
//! channel: 0 stdin, 1 stdout, 2 stderr, 3 the final status (a metav1.Status), 4 terminal
//! resizes (`{"Width":..,"Height":..}`); v5 adds `[255, channel]`, the client closing a stream.
//! SPDY, the older transport, is not spoken: such requests get a 400 saying so.

use std::io::{Read, Write};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use kaji_runtime::{ExecOptions, WindowSize};
use serde_json::{json, Value};
use tokio::sync::mpsc;

use crate::pods::Manager;
use crate::runtime::Runtime;

pub const V5: &str = "v5.channel.k8s.io";
pub const V4: &str = "v4.channel.k8s.io";

const STDIN: u8 = 0;
const STDOUT: u8 = 1;
const STDERR: u8 = 2;
const STATUS: u8 = 3;
const RESIZE: u8 = 4;
const CLOSE: u8 = 255;

/// How long output may keep coming after the command exited (a background child can hold the
/// stream open forever; kubelet's runtimes stop copying too).
const DRAIN: Duration = Duration::from_secs(1);

/// Which streams the client asked for, and the command (Kubernetes' `remotecommand.Options`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub command: Vec<String>,
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
    pub tty: bool,
}

impl Request {
    /// Reads the query the apiserver sends (`input`, `output`, `error`, `tty` = `1`, one
    /// `command` per argument; `stdin`/`stdout`/`stderr` are accepted too). Pure.
    pub fn parse(query: &[(String, String)]) -> Result<Self, String> {
        let on = |names: &[&str]| query.iter().any(|(k, v)| names.contains(&k.as_str()) && (v == "1" || v == "true"));
        let command: Vec<String> = query.iter().filter(|(k, _)| k == "command").map(|(_, v)| v.clone()).collect();
        let tty = on(&["tty"]);
        let r = Request {
            stdin: on(&["input", "stdin"]),
            stdout: on(&["output", "stdout"]),
            // A terminal has no separate stderr: it is dropped, as kubelet does.
            stderr: on(&["error", "stderr"]) && !tty,
            tty,
            command,
        };
        if !r.stdin && !r.stdout && !r.stderr {
            return Err("you must specify at least 1 of stdin, stdout, stderr".into());
        }
        if r.command.is_empty() {
            return Err("you must specify a command to run".into());
        }
        Ok(r)
    }

    fn options(&self) -> ExecOptions {
        ExecOptions { stdin: self.stdin, stdout: self.stdout, stderr: self.stderr, tty: self.tty, size: None }
    }
}

/// The status sent on channel 3 when the command ends, as kubelet writes it: Success, or
/// Failure with reason NonZeroExitCode and the code as the ExitCode cause. Pure.
pub fn exit_status(command: &[String], code: i32) -> Value {
    if code == 0 {
        return json!({"metadata": {}, "status": "Success"});
    }
    json!({
        "metadata": {},
        "status": "Failure",
        "message": format!(
            "command terminated with non-zero exit code: error executing command [{}], exit code {code}",
            command.join(" ")
        ),
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": code.to_string()}]},
    })
}

/// The status for a command that could not be run (Kubernetes' InternalError). Pure.
pub fn error_status(why: &str) -> Value {
    let message = format!("error executing command in container: {why}");
    json!({
        "metadata": {},
        "status": "Failure",
        "message": format!("Internal error occurred: {message}"),
        "reason": "InternalError",
        "details": {"causes": [{"message": message}]},
        "code": 500,
    })
}

/// A client's message, decoded. Pure.
#[derive(Debug, PartialEq, Eq)]
pub enum Incoming {
    Stdin(Vec<u8>),
    Resize(WindowSize),
    /// v5: the client closed its stdin.
    CloseStdin,
    Ignored,
}

pub fn decode(data: &[u8], v5: bool) -> Incoming {
    match data {
        [STDIN, rest @ ..] if !rest.is_empty() => Incoming::Stdin(rest.to_vec()),
        [RESIZE, rest @ ..] => {
            #[derive(serde::Deserialize)]
            struct Size {
                #[serde(rename = "Width")]
                width: u16,
                #[serde(rename = "Height")]
                height: u16,
            }
            match serde_json::from_slice::<Size>(rest) {
                Ok(s) => Incoming::Resize(WindowSize { cols: s.width, rows: s.height }),
                Err(_) => Incoming::Ignored,
            }
        }
        [CLOSE, STDIN] if v5 => Incoming::CloseStdin,
        _ => Incoming::Ignored,
    }
}

fn frame(channel: u8, data: &[u8]) -> Message {
    let mut v = Vec::with_capacity(data.len() + 1);
    v.push(channel);
    v.extend_from_slice(data);
    Message::Binary(v.into())
}

fn error(code: StatusCode, message: impl Into<String>) -> Response {
    (code, message.into()).into_response()
}

/// `GET /exec/{namespace}/{pod}/{container}?command=...&input=1&output=1&error=1&tty=1`.
pub async fn serve(
    State(m): State<Manager>,
    Path((ns, pod, container)): Path<(String, String, String)>,
    Query(query): Query<Vec<(String, String)>>,
    ws: Result<WebSocketUpgrade, axum::extract::ws::rejection::WebSocketUpgradeRejection>,
) -> Response {
    let Some(p) = m
        .pods()
        .into_iter()
        .find(|p| p.metadata.namespace.as_deref() == Some(&ns) && p.metadata.name.as_deref() == Some(&pod))
    else {
        return error(StatusCode::NOT_FOUND, "pod does not exist");
    };
    let req = match Request::parse(&query) {
        Ok(r) => r,
        Err(e) => return error(StatusCode::BAD_REQUEST, e),
    };
    let uid = p.metadata.uid.clone().unwrap_or_default();
    let runtime = m.shared.runtime.clone();
    let running = runtime
        .list()
        .into_iter()
        .filter(|c| c.pod_uid == uid && c.container_name == container)
        .max_by_key(|c| c.restart_count)
        .filter(|c| runtime.state(&c.id).is_ok_and(|s| s.status == kaji_runtime::Status::Running));
    let Some(run) = running else {
        // kubelet's words for a container that is not running (it looks among running ones).
        return error(StatusCode::INTERNAL_SERVER_ERROR, format!("container not found ({container:?})"));
    };
    let ws = match ws {
        Ok(ws) => ws.protocols([V5, V4]),
        Err(_) => {
            return error(
                StatusCode::BAD_REQUEST,
                format!("exec needs a WebSocket upgrade with subprotocol {V5} or {V4} (SPDY is not supported)"),
            )
        }
    };
    let Some(v5) = ws.selected_protocol().and_then(|p| p.to_str().ok()).map(|p| p == V5) else {
        return error(StatusCode::BAD_REQUEST, format!("no supported subprotocol: use {V5} or {V4}"));
    };
    tracing::info!(pod = %format!("{ns}/{pod}"), container = %container, command = ?req.command, tty = req.tty, "exec");
    let id = run.id;
    ws.on_upgrade(move |socket| session(socket, runtime, id, req, v5))
}

/// Reads `file` on a thread until EOF (or EIO, a terminal whose command is gone).
fn pump(mut file: std::fs::File, channel: u8, tx: mpsc::Sender<(u8, Vec<u8>)>) {
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 32 * 1024];
        loop {
            match file.read(&mut buf) {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    if tx.blocking_send((channel, buf[..n].to_vec())).is_err() {
                        return;
                    }
                }
            }
        }
    });
}

/// Writes what the client types to `file` on a thread; dropping the sender closes it.
fn feed(mut file: std::fs::File) -> std::sync::mpsc::Sender<Vec<u8>> {
    let (tx, rx) = std::sync::mpsc::channel::<Vec<u8>>();
    std::thread::spawn(move || {
        while let Ok(data) = rx.recv() {
            if file.write_all(&data).is_err() {
                return;
            }
        }
    });
    tx
}

/// One exec over an upgraded WebSocket: start, stream, report the exit status, close.
async fn session(mut ws: WebSocket, runtime: Runtime, id: String, req: Request, v5: bool) {
    // An empty message on the lowest writable channel tells the client the streams are open.
    let first = if req.stdout {
        STDOUT
    } else if req.stderr {
        STDERR
    } else {
        STATUS
    };
    let _ = ws.send(frame(first, &[])).await;
    let (rt, cmd, opts) = (runtime.clone(), req.command.clone(), req.options());
    let started = tokio::task::spawn_blocking(move || rt.exec(&id, &cmd, &opts)).await;
    let mut exec = match started {
        Ok(Ok(e)) => e,
        Ok(Err(e)) => return finish(ws, error_status(&chain(&e))).await,
        Err(e) => return finish(ws, error_status(&e.to_string())).await,
    };
    let control = Arc::new(exec.control());
    let (out_tx, mut out_rx) = mpsc::channel::<(u8, Vec<u8>)>(16);
    let mut stdin = None;
    if let Some(t) = exec.terminal.take() {
        if let Ok(w) = t.try_clone() {
            stdin = req.stdin.then(|| feed(w));
        }
        pump(t, STDOUT, out_tx.clone());
    }
    if let Some(w) = exec.stdin.take() {
        stdin = Some(feed(w));
    }
    for (file, channel) in [(exec.stdout.take(), STDOUT), (exec.stderr.take(), STDERR)] {
        if let Some(f) = file {
            pump(f, channel, out_tx.clone());
        }
    }
    drop(out_tx);
    let mut waiter = tokio::task::spawn_blocking(move || exec.wait());
    let mut exit: Option<i32> = None;
    let mut outputs_open = true;
    let drain = tokio::time::sleep(Duration::from_secs(365 * 24 * 3600));
    tokio::pin!(drain);
    loop {
        if exit.is_some() && !outputs_open {
            break;
        }
        tokio::select! {
            msg = ws.recv() => match msg {
                Some(Ok(Message::Binary(data))) => match decode(&data, v5) {
                    Incoming::Stdin(bytes) => {
                        if let Some(tx) = &stdin {
                            let _ = tx.send(bytes);
                        }
                    }
                    Incoming::Resize(size) => {
                        let c = control.clone();
                        let _ = tokio::task::spawn_blocking(move || c.resize(size)).await;
                    }
                    Incoming::CloseStdin => stdin = None,
                    Incoming::Ignored => {}
                },
                // The client is gone: so is the command.
                Some(Err(_)) | None | Some(Ok(Message::Close(_))) => {
                    if exit.is_none() {
                        control.kill();
                        let _ = (&mut waiter).await;
                    }
                    return;
                }
                Some(Ok(_)) => {}
            },
            out = out_rx.recv(), if outputs_open => match out {
                Some((channel, data)) => {
                    if ws.send(frame(channel, &data)).await.is_err() {
                        control.kill();
                        return;
                    }
                }
                None => outputs_open = false,
            },
            code = &mut waiter, if exit.is_none() => {
                exit = Some(match code {
                    Ok(Ok(c)) => c,
                    _ => 255,
                });
                drain.as_mut().reset(tokio::time::Instant::now() + DRAIN);
            },
            _ = &mut drain, if exit.is_some() => outputs_open = false,
        }
    }
    finish(ws, exit_status(&req.command, exit.unwrap_or(255))).await;
}

/// Sends the status on channel 3 and closes normally (kubectl reads the status at the close).
async fn finish(mut ws: WebSocket, status: Value) {
    let body = serde_json::to_vec(&status).unwrap_or_default();
    let _ = ws.send(frame(STATUS, &body)).await;
    let _ = ws.send(Message::Close(Some(CloseFrame { code: 1000, reason: "".into() }))).await;
    // Wait (briefly) for the client's close, so the close handshake completes.
    let _ = tokio::time::timeout(Duration::from_secs(2), async { while let Some(Ok(_)) = ws.recv().await {} }).await;
}

fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn the_query_names_streams_as_the_apiserver_sends_them() {
        let r = Request::parse(&q(&[
            ("command", "sh"),
            ("command", "-c"),
            ("command", "echo hi"),
            ("output", "1"),
            ("error", "1"),
        ]))
        .expect("valid");
        assert_eq!(r.command, ["sh", "-c", "echo hi"]);
        assert_eq!((r.stdin, r.stdout, r.stderr, r.tty), (false, true, true, false));
        let r =
            Request::parse(&q(&[("command", "sh"), ("stdin", "1"), ("stdout", "1"), ("stderr", "1"), ("tty", "1")]))
                .expect("valid");
        assert_eq!((r.stdin, r.stdout, r.stderr, r.tty), (true, true, false, true), "a terminal drops stderr");
        let err = Request::parse(&q(&[("command", "ls"), ("tty", "1")])).expect_err("no stream");
        assert_eq!(err, "you must specify at least 1 of stdin, stdout, stderr");
        assert!(Request::parse(&q(&[("output", "1")])).is_err(), "a command is required");
    }

    #[test]
    fn the_exit_status_is_worded_as_kubelet_words_it() {
        assert_eq!(exit_status(&["true".into()], 0), json!({"metadata": {}, "status": "Success"}));
        let s = exit_status(&["sh".into(), "-c".into(), "exit 3".into()], 3);
        assert_eq!(s["reason"], "NonZeroExitCode");
        assert_eq!(s["details"]["causes"], json!([{"reason": "ExitCode", "message": "3"}]));
        assert_eq!(
            s["message"],
            "command terminated with non-zero exit code: error executing command [sh -c exit 3], exit code 3"
        );
        let e = error_status("exec failed: executable \"nope\" not found");
        assert_eq!((e["reason"].as_str(), e["code"].as_i64()), (Some("InternalError"), Some(500)));
    }

    #[test]
    fn client_messages_decode_by_channel() {
        assert_eq!(decode(&[0, b'h', b'i'], true), Incoming::Stdin(b"hi".to_vec()));
        assert_eq!(decode(&[0], true), Incoming::Ignored, "an empty stdin frame is only a hello");
        assert_eq!(
            decode(b"\x04{\"Width\":100,\"Height\":30}\n", false),
            Incoming::Resize(WindowSize { cols: 100, rows: 30 })
        );
        assert_eq!(decode(&[255, 0], true), Incoming::CloseStdin);
        assert_eq!(decode(&[255, 0], false), Incoming::Ignored, "v4 has no close signal");
        assert_eq!(decode(&[4, b'x'], true), Incoming::Ignored);
    }
}
