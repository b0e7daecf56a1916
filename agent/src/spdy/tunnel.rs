//! SPDY inside WebSocket binary messages (kubectl ≥ 1.31's port-forward, subprotocol
//! `SPDY/3.1+portforward.k8s.io`): the payloads, concatenated, are the SPDY byte stream.

use axum::extract::ws::{CloseFrame, Message, WebSocket};
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

/// The byte stream carried by `ws`; closing it closes the WebSocket normally.
pub fn over_websocket(ws: WebSocket) -> DuplexStream {
    let (ours, theirs) = tokio::io::duplex(64 * 1024);
    tokio::spawn(pump(ws, theirs));
    ours
}

async fn pump(mut ws: WebSocket, io: DuplexStream) {
    let (mut r, mut w) = tokio::io::split(io);
    let mut buf = vec![0u8; 32 * 1024];
    loop {
        tokio::select! {
            msg = ws.recv() => match msg {
                Some(Ok(Message::Binary(b))) => {
                    if w.write_all(&b).await.is_err() {
                        break;
                    }
                }
                Some(Ok(Message::Close(_))) | Some(Err(_)) | None => break,
                Some(Ok(_)) => {}
            },
            n = r.read(&mut buf) => match n {
                Ok(0) | Err(_) => {
                    let _ = ws.send(Message::Close(Some(CloseFrame { code: 1000, reason: "".into() }))).await;
                    break;
                }
                Ok(n) => {
                    if ws.send(Message::Binary(buf[..n].to_vec().into())).await.is_err() {
                        break;
                    }
                }
            },
        }
    }
}
