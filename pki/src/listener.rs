//! A TLS listener for `axum::serve`: TCP connections are accepted in a task of their own and
//! each handshake runs concurrently (with a deadline), so a slow or silent client never holds
//! up the others. Each connection's [`Peer`] — its address and the certificate chain it
//! presented — reaches handlers as `ConnectInfo<Peer>`.

use axum::extract::connect_info::Connected;
use axum::serve::{IncomingStream, Listener};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

/// How long a client may take to finish its handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// A connection's peer.
#[derive(Clone, Debug, Default)]
pub struct Peer {
    pub addr: Option<SocketAddr>,
    /// The client's certificate chain (DER, leaf first); empty without TLS or without one.
    pub client_chain: Arc<Vec<Vec<u8>>>,
}

impl Connected<IncomingStream<'_, TlsListener>> for Peer {
    fn connect_info(stream: IncomingStream<'_, TlsListener>) -> Self {
        stream.remote_addr().clone()
    }
}

impl Connected<IncomingStream<'_, TcpListener>> for Peer {
    fn connect_info(stream: IncomingStream<'_, TcpListener>) -> Self {
        Peer { addr: Some(*stream.remote_addr()), client_chain: Arc::default() }
    }
}

/// Accepted, handshaken TLS connections.
pub struct TlsListener {
    local: SocketAddr,
    ready: tokio::sync::mpsc::Receiver<(TlsStream<TcpStream>, Peer)>,
}

impl TlsListener {
    /// Serve TLS on `tcp` with `config`. The accept task ends when the listener is dropped.
    pub fn new(tcp: TcpListener, config: rustls::ServerConfig) -> std::io::Result<Self> {
        let local = tcp.local_addr()?;
        let acceptor = TlsAcceptor::from(Arc::new(config));
        let (tx, ready) = tokio::sync::mpsc::channel(64);
        tokio::spawn(async move {
            loop {
                let (sock, addr) = tokio::select! {
                    r = tcp.accept() => match r {
                        Ok(x) => x,
                        Err(e) => {
                            // Out of file descriptors and the like: wait rather than spin.
                            tracing::warn!(error = %e, "accept failed");
                            tokio::time::sleep(Duration::from_millis(100)).await;
                            continue;
                        }
                    },
                    _ = tx.closed() => return,
                };
                let _ = sock.set_nodelay(true);
                let (acceptor, tx) = (acceptor.clone(), tx.clone());
                tokio::spawn(async move {
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(sock)).await {
                        Ok(Ok(tls)) => {
                            let chain = tls
                                .get_ref()
                                .1
                                .peer_certificates()
                                .map(|c| c.iter().map(|d| d.as_ref().to_vec()).collect())
                                .unwrap_or_default();
                            let peer = Peer { addr: Some(addr), client_chain: Arc::new(chain) };
                            let _ = tx.send((tls, peer)).await;
                        }
                        Ok(Err(e)) => tracing::debug!(peer = %addr, error = %e, "TLS handshake failed"),
                        Err(_) => tracing::debug!(peer = %addr, "TLS handshake timed out"),
                    }
                });
            }
        });
        Ok(Self { local, ready })
    }
}

impl Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = Peer;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(c) => c,
            // The accept task only ends once this listener is gone.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(Peer { addr: Some(self.local), client_chain: Arc::default() })
    }
}
