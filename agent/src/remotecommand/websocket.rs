//! remotecommand over a WebSocket: every binary message starts with its channel (0 stdin,
//! 1 stdout, 2 stderr, 3 the final status, 4 terminal resizes); v5 adds `[255, channel]`, the
//! client closing a stream. The status goes out on channel 3, then a normal close (1000).
//! Client messages may be binary or text (the channel is the first byte either way).

use std::future::Future;
use std::time::Duration;

use axum::extract::ws::{CloseFrame, Message, WebSocket};
use futures::{SinkExt, StreamExt};
use serde_json::Value;
use tokio::sync::mpsc;

use super::{parse_size, Incoming, Input, Output, Streams, RESIZE, STATUS, STDERR, STDIN, STDOUT};

const CLOSE: u8 = 255;

/// A client message, decoded. Pure.
pub fn decode(data: &[u8], v5: bool) -> Incoming {
    match data {
        [STDIN, rest @ ..] if !rest.is_empty() => Incoming::Stdin(rest.to_vec()),
        [RESIZE, rest @ ..] => parse_size(rest).map_or(Incoming::Ignored, Incoming::Resize),
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

/// Runs `session` over an upgraded WebSocket.
pub async fn run<F, Fut>(ws: WebSocket, v5: bool, streams: Streams, session: F)
where
    F: FnOnce(Input, Output) -> Fut,
    Fut: Future<Output = Value>,
{
    let (mut sink, mut source) = ws.split();
    // An empty message on the lowest writable channel tells the client the streams are open.
    let first = if streams.stdout {
        STDOUT
    } else if streams.stderr {
        STDERR
    } else {
        STATUS
    };
    let _ = sink.send(frame(first, &[])).await;
    let (in_tx, in_rx) = mpsc::channel(16);
    let reader = tokio::spawn(async move {
        while let Some(msg) = source.next().await {
            let event = match msg {
                Ok(Message::Binary(data)) => decode(&data, v5),
                // Kubernetes reads text and binary messages alike (the Python client sends a
                // str written to stdin as a text message: `"\x00hello\n"`).
                Ok(Message::Text(text)) => decode(text.as_bytes(), v5),
                Ok(Message::Close(_)) | Err(_) => break,
                Ok(_) => continue,
            };
            if in_tx.send(event).await.is_err() {
                // The session is over: wait for the client's close.
                while let Some(Ok(m)) = source.next().await {
                    if matches!(m, Message::Close(_)) {
                        break;
                    }
                }
                return;
            }
        }
        let _ = in_tx.send(Incoming::Gone).await;
    });
    let (out_tx, mut out_rx) = mpsc::channel::<(u8, Vec<u8>)>(16);
    let session = session(in_rx, out_tx);
    tokio::pin!(session);
    let status = loop {
        tokio::select! {
            status = &mut session => break status,
            Some((channel, data)) = out_rx.recv() => {
                let _ = sink.send(frame(channel, &data)).await;
            }
        }
    };
    while let Ok((channel, data)) = out_rx.try_recv() {
        let _ = sink.send(frame(channel, &data)).await;
    }
    // kubectl reads the status when the connection closes normally.
    let body = serde_json::to_vec(&status).unwrap_or_default();
    let _ = sink.send(frame(STATUS, &body)).await;
    let _ = sink.send(Message::Close(Some(CloseFrame { code: 1000, reason: "".into() }))).await;
    // Wait (briefly) for the client's close, so the close handshake completes.
    if tokio::time::timeout(Duration::from_secs(2), reader).await.is_err() {
        tracing::debug!("the client did not close the WebSocket");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kaji_runtime::WindowSize;

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
