//! kubelet's `/exec/{namespace}/{pod}/{container}`: a command run in a container, its streams
//! carried by Kubernetes' remotecommand protocol (`remotecommand`: WebSocket v5/v4 or SPDY v4).

use std::io::{Read, Write};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, Query, Request as HttpRequest, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use kaji_runtime::ExecOptions;
use serde_json::{json, Value};
use tokio::sync::mpsc;

use crate::pods::Manager;
use crate::remotecommand::{self, Incoming, Input, Output, Streams, STDERR, STDOUT};
use crate::runtime::Runtime;

pub use crate::remotecommand::{V4, V5};

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

    pub fn streams(&self) -> Streams {
        Streams { stdin: self.stdin, stdout: self.stdout, stderr: self.stderr, tty: self.tty }
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

fn error(code: StatusCode, message: impl Into<String>) -> Response {
    (code, message.into()).into_response()
}

/// `GET /exec/{namespace}/{pod}/{container}?command=...&input=1&output=1&error=1&tty=1`.
pub async fn serve(
    State(m): State<Manager>,
    Path((ns, pod, container)): Path<(String, String, String)>,
    Query(query): Query<Vec<(String, String)>>,
    http: HttpRequest,
) -> Response {
    let Some(p) = m.pod(&ns, &pod) else {
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
    tracing::info!(pod = %format!("{ns}/{pod}"), container = %container, command = ?req.command, tty = req.tty, "exec");
    let id = run.id;
    let streams = req.streams();
    remotecommand::upgrade(http, streams, move |input, output| session(runtime, id, req, input, output)).await
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

/// One exec: start, stream, return the exit status. A client that goes away takes the command
/// with it.
async fn session(runtime: Runtime, id: String, req: Request, mut input: Input, output: Output) -> Value {
    let (rt, cmd, opts) = (runtime.clone(), req.command.clone(), req.options());
    let started = tokio::task::spawn_blocking(move || rt.exec(&id, &cmd, &opts)).await;
    let mut exec = match started {
        Ok(Ok(e)) => e,
        Ok(Err(e)) => return error_status(&chain(&e)),
        Err(e) => return error_status(&e.to_string()),
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
            event = input.recv() => match event {
                Some(Incoming::Stdin(bytes)) => {
                    if let Some(tx) = &stdin {
                        let _ = tx.send(bytes);
                    }
                }
                Some(Incoming::Resize(size)) => {
                    let c = control.clone();
                    let _ = tokio::task::spawn_blocking(move || c.resize(size)).await;
                }
                Some(Incoming::CloseStdin) => stdin = None,
                Some(Incoming::Ignored) => {}
                // The client is gone: so is the command.
                Some(Incoming::Gone) | None => {
                    if exit.is_none() {
                        control.kill();
                        let _ = (&mut waiter).await;
                    }
                    return exit_status(&req.command, exit.unwrap_or(255));
                }
            },
            out = out_rx.recv(), if outputs_open => match out {
                Some(chunk) => {
                    if output.send(chunk).await.is_err() {
                        control.kill();
                        return exit_status(&req.command, 255);
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
    exit_status(&req.command, exit.unwrap_or(255))
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
}
