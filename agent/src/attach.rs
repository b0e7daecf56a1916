//! kubelet's `/attach/{namespace}/{pod}/{container}`: the running container's output from now
//! on, over the remotecommand protocol (as exec), read by following its CRI log file — the
//! runtime keeps the container's stdout/stderr there, not in pipes an attach could share.
//! A container with `stdin: true` has a stdin fifo in the runtime (it outlives the agent); an
//! attach with `-i` writes the client's stdin into it. `stdinOnce` is decided here: the first
//! session with stdin to end closes it for good (the process reads end of file). Without
//! `stdin: true`, attaching stdin is refused, as Kubernetes refuses it. A container with
//! `tty: true` runs on a terminal (the runtime's `process.terminal`): its output is replayed
//! record by record (a prompt shows before its newline), and resizes reach its terminal.

use std::time::Duration;

use axum::extract::{Path, Query, Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

use crate::logs;
use crate::pods::Manager;
use crate::remotecommand::{self, Incoming, Input, Output, Streams, STDERR, STDOUT};
use crate::runtime::{Meta, Runtime};

/// How often the log file is looked at for new output.
const POLL: Duration = Duration::from_millis(100);

/// The streams asked for (`input`, `output`, `error`, `tty` = `1`), and the refusals, for a
/// container whose spec has `stdin` and `tty` as given. Pure.
pub fn parse(query: &[(String, String)], container: &str, stdin: bool, container_tty: bool) -> Result<Streams, String> {
    let on = |names: &[&str]| query.iter().any(|(k, v)| names.contains(&k.as_str()) && (v == "1" || v == "true"));
    let tty = on(&["tty"]);
    let s = Streams {
        stdin: on(&["input", "stdin"]),
        stdout: on(&["output", "stdout"]),
        stderr: on(&["error", "stderr"]) && !tty,
        tty,
    };
    if !s.stdin && !s.stdout && !s.stderr {
        return Err("you must specify at least 1 of stdin, stdout, stderr".into());
    }
    if s.stdin && !stdin {
        return Err(no_stdin(container));
    }
    if s.stdin && s.tty && !container_tty {
        return Err(format!(
            "cannot attach a terminal to container {container:?}: it was not created with tty: true \
             (attach without -t)"
        ));
    }
    Ok(s)
}

fn no_stdin(container: &str) -> String {
    format!(
        "cannot attach to the stdin of container {container:?}: stdin is not enabled for this container \
         (set stdin: true in its spec; attach without -i to follow its output)"
    )
}

/// Which stream a log line goes to: stderr lines to stderr when it was asked for, everything
/// else to stdout (a terminal has one stream). Pure.
pub fn channel(stream: &str, s: Streams) -> Option<u8> {
    match stream {
        "stderr" if s.stderr => Some(STDERR),
        "stderr" if s.tty && s.stdout => Some(STDOUT),
        "stdout" if s.stdout => Some(STDOUT),
        _ => None,
    }
}

/// `GET|POST /attach/{namespace}/{pod}/{container}?output=1&error=1`.
pub async fn serve(
    State(m): State<Manager>,
    Path((ns, pod, container)): Path<(String, String, String)>,
    Query(query): Query<Vec<(String, String)>>,
    http: Request,
) -> Response {
    let Some(p) = m.pod(&ns, &pod) else {
        return (StatusCode::NOT_FOUND, "pod does not exist").into_response();
    };
    let spec = p.spec.as_ref().and_then(|s| s.containers.iter().find(|c| c.name == container));
    let spec_stdin = spec.is_some_and(|c| c.stdin == Some(true));
    let spec_tty = spec.is_some_and(|c| c.tty == Some(true));
    let streams = match parse(&query, &container, spec_stdin, spec_tty) {
        Ok(s) => s,
        // A Status, so kubectl shows the reason rather than an empty error.
        Err(e) => return bad_request(e),
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
        return (StatusCode::INTERNAL_SERVER_ERROR, format!("container not found ({container:?})")).into_response();
    };
    let stdin = match streams.stdin {
        // Created before its spec had stdin (a container's stdin is fixed at create).
        true if !run.stdin => return bad_request(no_stdin(&container)),
        true => match runtime.open_stdin(&run.id).map(tokio::net::unix::pipe::Sender::from_file) {
            Ok(Ok(w)) => Some(w),
            Ok(Err(e)) => return (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
            Err(e) => return bad_request(format!("cannot attach to the stdin of container {container:?}: {e}")),
        },
        false => None,
    };
    tracing::info!(pod = %format!("{ns}/{pod}"), container = %container, stdin = streams.stdin, "attach");
    // Output from now on: what the log already holds is `kubectl logs`'s.
    let offset = tokio::fs::metadata(&run.log_path).await.map(|m| m.len()).unwrap_or(0);
    remotecommand::upgrade(http, streams, move |input, output| async move {
        let once = stdin.is_some() && run.stdin_once;
        let (runtime, id) = (runtime.clone(), run.id.clone());
        let status = follow(runtime.clone(), run, offset, streams, stdin, input, output).await;
        if once {
            close_stdin(&runtime, &id);
        }
        status
    })
    .await
}

/// stdinOnce: the process reads end of file once our write end is gone too.
fn close_stdin(runtime: &Runtime, id: &str) {
    if let Err(e) = runtime.close_stdin(id) {
        tracing::warn!(container = %id, error = %e, "failed to close stdin");
    }
}

/// Sends the log's new lines until the container stops (Success) or the client leaves, and
/// writes the client's stdin (if any) to the container's.
async fn follow(
    runtime: Runtime,
    run: Meta,
    mut offset: u64,
    s: Streams,
    mut stdin: Option<tokio::net::unix::pipe::Sender>,
    mut input: Input,
    output: Output,
) -> Value {
    use tokio::io::AsyncWriteExt;
    let mut buf = String::new();
    loop {
        let stopped = runtime.state(&run.id).map(|st| st.status != kaji_runtime::Status::Running).unwrap_or(true);
        let data = read_from(&run.log_path, offset).await;
        offset += data.len() as u64;
        buf.push_str(&String::from_utf8_lossy(&data));
        // A terminal's records as written (a prompt has no newline yet); otherwise whole lines.
        let chunks: Vec<(String, Vec<u8>)> = if s.tty {
            let (recs, consumed) = logs::parse_records(&buf);
            buf.drain(..consumed);
            recs.into_iter()
                .map(|r| {
                    let mut text = r.text.into_bytes();
                    if !r.partial {
                        text.push(b'\n');
                    }
                    (r.stream, text)
                })
                .collect()
        } else {
            let (lines, consumed) = logs::parse_lines(&buf);
            buf.drain(..consumed);
            lines.into_iter().map(|l| (l.stream, [l.text.into_bytes(), vec![b'\n']].concat())).collect()
        };
        for (stream, text) in chunks {
            if let Some(ch) = channel(&stream, s) {
                if output.send((ch, text)).await.is_err() {
                    return success();
                }
            }
        }
        if stopped && data.is_empty() {
            return success();
        }
        tokio::select! {
            event = input.recv() => match event {
                None | Some(Incoming::Gone) => return success(),
                Some(Incoming::Stdin(data)) => {
                    if let Some(w) = stdin.as_mut() {
                        if let Err(e) = w.write_all(&data).await {
                            tracing::debug!(container = %run.id, error = %e, "stdin write failed");
                            stdin = None;
                        }
                    }
                }
                Some(Incoming::CloseStdin) => {
                    if stdin.take().is_some() && run.stdin_once {
                        close_stdin(&runtime, &run.id);
                    }
                }
                Some(Incoming::Resize(size)) => {
                    if s.tty {
                        if let Err(e) = runtime.resize(&run.id, size.cols, size.rows) {
                            tracing::debug!(container = %run.id, error = %e, "resize failed");
                        }
                    }
                }
                Some(Incoming::Ignored) => {}
            },
            _ = tokio::time::sleep(POLL) => {}
        }
    }
}

fn bad_request(message: String) -> Response {
    let status = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": "BadRequest", "code": 400});
    (StatusCode::BAD_REQUEST, axum::Json(status)).into_response()
}

fn success() -> Value {
    json!({"metadata": {}, "status": "Success"})
}

async fn read_from(path: &std::path::Path, offset: u64) -> Vec<u8> {
    use tokio::io::{AsyncReadExt, AsyncSeekExt};
    let Ok(mut f) = tokio::fs::File::open(path).await else { return Vec::new() };
    if f.seek(std::io::SeekFrom::Start(offset)).await.is_err() {
        return Vec::new();
    }
    let mut out = Vec::new();
    let _ = f.take(1 << 20).read_to_end(&mut out).await;
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn stdin_is_refused_without_stdin_true_and_output_streams_are_kept() {
        let s = parse(&q(&[("output", "1"), ("error", "1")]), "app", false, false).expect("valid");
        assert_eq!(s, Streams { stdin: false, stdout: true, stderr: true, tty: false });
        let err = parse(&q(&[("input", "1"), ("output", "1")]), "app", false, false).expect_err("no stdin");
        assert!(err.starts_with("cannot attach to the stdin of container \"app\""), "{err}");
        assert!(parse(&q(&[]), "app", true, false).is_err());
    }

    #[test]
    fn a_terminal_is_attached_only_to_a_container_created_with_one() {
        let s = parse(&q(&[("input", "1"), ("output", "1")]), "app", true, false).expect("stdin: true");
        assert_eq!(s, Streams { stdin: true, stdout: true, stderr: false, tty: false });
        let with_tty = q(&[("input", "1"), ("output", "1"), ("tty", "1")]);
        let err = parse(&with_tty, "app", true, false).expect_err("no tty");
        assert!(err.starts_with("cannot attach a terminal to container \"app\""), "{err}");
        let s = parse(&with_tty, "app", true, true).expect("tty: true");
        assert_eq!(s, Streams { stdin: true, stdout: true, stderr: false, tty: true });
    }

    #[test]
    fn log_lines_go_to_the_stream_they_came_from() {
        let both = Streams { stdin: false, stdout: true, stderr: true, tty: false };
        assert_eq!((channel("stdout", both), channel("stderr", both)), (Some(STDOUT), Some(STDERR)));
        let out_only = Streams { stderr: false, ..both };
        assert_eq!(channel("stderr", out_only), None);
        let tty = Streams { stdin: false, stdout: true, stderr: false, tty: true };
        assert_eq!(channel("stderr", tty), Some(STDOUT));
    }
}
