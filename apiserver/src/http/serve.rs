//! The connection loop: hyper's HTTP/1.1 server with a header-read timeout — a client that does
//! not finish a request's headers in time, or leaves its connection idle that long between
//! requests, is dropped (kube-apiserver: `ReadHeaderTimeout`) — and a graceful shutdown that
//! lets the requests being served finish.

use axum::extract::connect_info::ConnectInfo;
use axum::serve::Listener;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use kaji_pki::listener::Peer;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::sync::watch;
use tower_service::Service;

/// What a listener knows of a connection, as the [`Peer`] the filters read.
pub trait IntoPeer {
    fn into_peer(self) -> Peer;
}

impl IntoPeer for SocketAddr {
    fn into_peer(self) -> Peer {
        Peer { addr: Some(self), client_chain: Default::default() }
    }
}

impl IntoPeer for Peer {
    fn into_peer(self) -> Peer {
        self
    }
}

/// Serve `app` on `listener` until `shutdown`, then wait for every open connection to finish
/// what it is serving.
pub async fn serve<L>(
    mut listener: L,
    app: axum::Router,
    header_read_timeout: Duration,
    mut shutdown: watch::Receiver<bool>,
) where
    L: Listener,
    L::Addr: IntoPeer,
{
    // Dropping `closing` tells every connection to finish; each holds an `open` receiver, so
    // `open_tx.closed()` resolves once the last one is done.
    let (closing, closing_rx) = watch::channel(());
    let (open_tx, open) = watch::channel(());
    loop {
        let (io, addr) = tokio::select! {
            c = listener.accept() => c,
            _ = shutdown.wait_for(|stop| *stop) => break,
        };
        let peer = addr.into_peer();
        let app = app.clone();
        let service = hyper::service::service_fn(move |mut req: hyper::Request<Incoming>| {
            req.extensions_mut().insert(ConnectInfo(peer.clone()));
            // A Router is always ready: no poll_ready needed before call.
            app.clone().call(req)
        });
        let (mut closing, open) = (closing_rx.clone(), open.clone());
        tokio::spawn(async move {
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder.timer(TokioTimer::new()).header_read_timeout(header_read_timeout);
            let conn = builder.serve_connection(TokioIo::new(io), service).with_upgrades();
            tokio::pin!(conn);
            let done = tokio::select! {
                r = conn.as_mut() => r,
                _ = closing.changed() => {
                    conn.as_mut().graceful_shutdown();
                    conn.await
                }
            };
            if let Err(e) = done {
                tracing::debug!(error = %e, "connection ended");
            }
            drop(open);
        });
    }
    drop(listener);
    drop(closing);
    drop(open);
    open_tx.closed().await;
}
