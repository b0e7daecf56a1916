//! Kubernetes' remotecommand protocol (exec and attach), whatever carries it: a WebSocket
//! (`v5.channel.k8s.io`, `v4.channel.k8s.io`; kubectl ≥ 1.30) or SPDY/3.1 streams
//! (`v4.channel.k8s.io`; kubectl ≤ 1.29, and newer ones' fallback). A session sees the same
//! thing either way: client events in, `(channel, bytes)` out, and returns the final status.

pub mod spdy;
pub mod websocket;

use std::future::Future;

use axum::extract::ws::WebSocketUpgrade;
use axum::extract::{FromRequestParts, Request};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use kaji_runtime::WindowSize;
use serde_json::Value;
use tokio::sync::mpsc;

use crate::spdy::upgrade;

pub const V5: &str = "v5.channel.k8s.io";
pub const V4: &str = "v4.channel.k8s.io";

pub const STDIN: u8 = 0;
pub const STDOUT: u8 = 1;
pub const STDERR: u8 = 2;
pub const STATUS: u8 = 3;
pub const RESIZE: u8 = 4;

/// What the client sent, decoded.
#[derive(Debug, PartialEq, Eq)]
pub enum Incoming {
    Stdin(Vec<u8>),
    Resize(WindowSize),
    /// The client closed its stdin.
    CloseStdin,
    /// The client is gone.
    Gone,
    Ignored,
}

/// Client events for the session.
pub type Input = mpsc::Receiver<Incoming>;
/// `(channel, bytes)` for the client: [`STDOUT`] or [`STDERR`].
pub type Output = mpsc::Sender<(u8, Vec<u8>)>;

/// The streams the client asked for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Streams {
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
    pub tty: bool,
}

/// A terminal size as kubectl sends it (`{"Width":100,"Height":30}`). Pure.
pub fn parse_size(json: &[u8]) -> Option<WindowSize> {
    #[derive(serde::Deserialize)]
    struct Size {
        #[serde(rename = "Width")]
        width: u16,
        #[serde(rename = "Height")]
        height: u16,
    }
    serde_json::from_slice::<Size>(json).ok().map(|s| WindowSize { cols: s.width, rows: s.height })
}

/// Upgrades to what the client asked for — SPDY/3.1 (`v4.channel.k8s.io`) or a WebSocket
/// (`v5`/`v4.channel.k8s.io`) — and runs `session` over it.
pub async fn upgrade<F, Fut>(req: Request, streams: Streams, session: F) -> Response
where
    F: FnOnce(Input, Output) -> Fut + Send + 'static,
    Fut: Future<Output = Value> + Send + 'static,
{
    if upgrade::is_spdy(req.headers()) {
        return match upgrade::negotiate(&upgrade::offered(req.headers()), &[V4]) {
            Ok(proto) => upgrade::accept(req, proto, move |io| spdy::run(io, streams, session)),
            Err(msg) => upgrade::refuse(msg, &[V4]),
        };
    }
    let (mut parts, _) = req.into_parts();
    let Ok(ws) = WebSocketUpgrade::from_request_parts(&mut parts, &()).await else {
        let msg = format!("needs a WebSocket upgrade ({V5} or {V4}) or a SPDY/3.1 upgrade ({V4})");
        return (StatusCode::BAD_REQUEST, msg).into_response();
    };
    let ws = ws.protocols([V5, V4]);
    let Some(v5) = ws.selected_protocol().and_then(|p| p.to_str().ok()).map(|p| p == V5) else {
        return (StatusCode::BAD_REQUEST, format!("no supported subprotocol: use {V5} or {V4}")).into_response();
    };
    ws.on_upgrade(move |socket| websocket::run(socket, v5, streams, session))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminal_sizes_parse_as_kubectl_sends_them() {
        assert_eq!(parse_size(b"{\"Width\":100,\"Height\":30}\n"), Some(WindowSize { cols: 100, rows: 30 }));
        assert_eq!(parse_size(b"x"), None);
    }
}
