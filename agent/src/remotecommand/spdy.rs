//! remotecommand over SPDY/3.1 (`v4.channel.k8s.io`): the client opens one stream per
//! `streamType` — `error`, then `stdin`, `stdout`, `stderr` as asked, and `resize` for a
//! terminal. stdin's FIN is its end; resizes are JSON lines. At the end the status (a
//! metav1.Status, as on WebSocket channel 3) is written on the error stream and every stream
//! is closed, then the connection.

use std::collections::HashMap;
use std::future::Future;
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::mpsc;

use super::{parse_size, Incoming, Input, Output, Streams, STDERR, STDOUT};
use crate::spdy::{frame::rst, header, Connection, Sender, Stream};

/// How long the client has to open the streams it asked for (kubelet's default).
const STREAM_CREATION_TIMEOUT: Duration = Duration::from_secs(30);

/// Which of the streams the client must open are still missing. Pure.
fn missing(want: Streams, got: &HashMap<String, Sender>) -> Vec<&'static str> {
    [("error", true), ("stdin", want.stdin), ("stdout", want.stdout), ("stderr", want.stderr && !want.tty)]
        .into_iter()
        .filter(|(name, wanted)| *wanted && !got.contains_key(*name))
        .map(|(name, _)| name)
        .collect()
}

/// Feeds stdin's data to the session, then its end.
async fn stdin(mut data: mpsc::Receiver<Vec<u8>>, tx: mpsc::Sender<Incoming>) {
    while let Some(data) = data.recv().await {
        if tx.send(Incoming::Stdin(data)).await.is_err() {
            return;
        }
    }
    let _ = tx.send(Incoming::CloseStdin).await;
}

/// Turns the resize stream's JSON lines into resizes.
async fn resizes(mut data: mpsc::Receiver<Vec<u8>>, tx: mpsc::Sender<Incoming>) {
    let mut buf = Vec::new();
    while let Some(data) = data.recv().await {
        buf.extend_from_slice(&data);
        while let Some(end) = buf.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buf.drain(..=end).collect();
            if let Some(size) = parse_size(&line) {
                if tx.send(Incoming::Resize(size)).await.is_err() {
                    return;
                }
            }
        }
    }
}

/// Runs `session` over an upgraded SPDY connection.
pub async fn run<T, F, Fut>(io: T, want: Streams, session: F)
where
    T: AsyncRead + AsyncWrite + Send + 'static,
    F: FnOnce(Input, Output) -> Fut,
    Fut: Future<Output = Value>,
{
    let mut conn = Connection::serve(io);
    let (in_tx, in_rx) = mpsc::channel(16);
    let mut got: HashMap<String, Sender> = HashMap::new();
    let deadline = tokio::time::Instant::now() + STREAM_CREATION_TIMEOUT;
    while !missing(want, &got).is_empty() {
        match tokio::time::timeout_at(deadline, conn.streams.recv()).await {
            Ok(Some(s)) => accept(s, &mut got, &in_tx).await,
            Ok(None) => return conn.shutdown().await,
            Err(_) => {
                tracing::debug!(missing = ?missing(want, &got), "the client never opened its streams");
                return conn.shutdown().await;
            }
        }
    }
    let (out_tx, mut out_rx) = mpsc::channel::<(u8, Vec<u8>)>(16);
    let session = session(in_rx, out_tx);
    tokio::pin!(session);
    let mut open = true;
    let status = loop {
        tokio::select! {
            status = &mut session => break status,
            Some((channel, data)) = out_rx.recv() => write(&got, channel, &data).await,
            s = conn.streams.recv(), if open => match s {
                Some(s) => accept(s, &mut got, &in_tx).await,
                None => {
                    open = false;
                    let _ = in_tx.send(Incoming::Gone).await;
                }
            },
        }
    };
    while let Ok((channel, data)) = out_rx.try_recv() {
        write(&got, channel, &data).await;
    }
    if let Some(e) = got.get("error") {
        let _ = e.write(&serde_json::to_vec(&status).unwrap_or_default()).await;
    }
    for s in got.values() {
        let _ = s.close().await;
    }
    conn.shutdown().await;
}

/// Files a stream the client opened under its type; stdin and resize start flowing at once.
async fn accept(s: Stream, got: &mut HashMap<String, Sender>, tx: &mpsc::Sender<Incoming>) {
    let kind = header(&s.headers, "streamType").unwrap_or("").to_string();
    if got.contains_key(&kind) || !["error", "stdin", "stdout", "stderr", "resize"].contains(&kind.as_str()) {
        tracing::debug!(stream_type = %kind, "unexpected remotecommand stream");
        let _ = s.sender.reset(rst::PROTOCOL_ERROR).await;
        return;
    }
    match kind.as_str() {
        "stdin" => drop(tokio::spawn(stdin(s.data, tx.clone()))),
        "resize" => drop(tokio::spawn(resizes(s.data, tx.clone()))),
        _ => {}
    }
    got.insert(kind, s.sender);
}

async fn write(got: &HashMap<String, Sender>, channel: u8, data: &[u8]) {
    let name = match channel {
        STDOUT => "stdout",
        STDERR => "stderr",
        _ => return,
    };
    if let Some(s) = got.get(name) {
        let _ = s.write(data).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_streams_to_wait_for_follow_the_request() {
        let none = HashMap::new();
        let want = Streams { stdin: true, stdout: true, stderr: true, tty: false };
        assert_eq!(missing(want, &none), ["error", "stdin", "stdout", "stderr"]);
        let tty = Streams { stdin: true, stdout: true, stderr: true, tty: true };
        assert_eq!(missing(tty, &none), ["error", "stdin", "stdout"], "a terminal has no stderr stream");
    }
}
