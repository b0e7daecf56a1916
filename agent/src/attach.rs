//! kubelet's `/attach/{namespace}/{pod}/{container}`: the running container's output from now
//! on, over the remotecommand protocol (as exec), read by following its CRI log file — the
//! runtime keeps the container's stdout/stderr there, not in pipes an attach could share.
//! The runtime gives containers no stdin, so attaching stdin is refused, as Kubernetes refuses
//! it for a container without `stdin: true`.

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

/// The streams asked for (`input`, `output`, `error`, `tty` = `1`), and the refusals. Pure.
pub fn parse(query: &[(String, String)], container: &str) -> Result<Streams, String> {
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
    if s.stdin {
        return Err(format!(
            "cannot attach to the stdin of container {container:?}: stdin is not enabled for this container \
             (kaji's runtime gives containers no stdin; attach without -i to follow its output)"
        ));
    }
    Ok(s)
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
    let Some(p) = m
        .pods()
        .into_iter()
        .find(|p| p.metadata.namespace.as_deref() == Some(&ns) && p.metadata.name.as_deref() == Some(&pod))
    else {
        return (StatusCode::NOT_FOUND, "pod does not exist").into_response();
    };
    let streams = match parse(&query, &container) {
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
    tracing::info!(pod = %format!("{ns}/{pod}"), container = %container, "attach");
    // Output from now on: what the log already holds is `kubectl logs`'s.
    let offset = tokio::fs::metadata(&run.log_path).await.map(|m| m.len()).unwrap_or(0);
    remotecommand::upgrade(http, streams, move |input, output| follow(runtime, run, offset, streams, input, output))
        .await
}

/// Sends the log's new lines until the container stops (Success) or the client leaves; the
/// container is never touched.
async fn follow(runtime: Runtime, run: Meta, mut offset: u64, s: Streams, mut input: Input, output: Output) -> Value {
    let mut buf = String::new();
    loop {
        let stopped = runtime.state(&run.id).map(|st| st.status != kaji_runtime::Status::Running).unwrap_or(true);
        let data = read_from(&run.log_path, offset).await;
        offset += data.len() as u64;
        buf.push_str(&String::from_utf8_lossy(&data));
        let (lines, consumed) = logs::parse_lines(&buf);
        buf.drain(..consumed);
        for l in lines {
            if let Some(ch) = channel(&l.stream, s) {
                let mut text = l.text.into_bytes();
                text.push(b'\n');
                if output.send((ch, text)).await.is_err() {
                    return success();
                }
            }
        }
        if stopped && data.is_empty() {
            return success();
        }
        tokio::select! {
            event = input.recv() => {
                if matches!(event, None | Some(Incoming::Gone)) {
                    return success();
                }
            }
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
    fn stdin_is_refused_and_output_streams_are_kept() {
        let s = parse(&q(&[("output", "1"), ("error", "1")]), "app").expect("valid");
        assert_eq!(s, Streams { stdin: false, stdout: true, stderr: true, tty: false });
        let err = parse(&q(&[("input", "1"), ("output", "1")]), "app").expect_err("no stdin");
        assert!(err.starts_with("cannot attach to the stdin of container \"app\""), "{err}");
        assert!(parse(&q(&[]), "app").is_err());
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
