//! kaji-dns: the cluster's DNS, as CoreDNS's kubernetes plugin serves it — records built from a
//! watch of Services, EndpointSlices and Namespaces (`zone` → `index` → `answer`, pure), served
//! over UDP and TCP by hickory-server (`server`), everything else forwarded to the upstream
//! resolvers (`forward`).

pub mod answer;
pub mod forward;
pub mod http;
pub mod index;
pub mod metrics;
pub mod model;
pub mod request;
pub mod server;
pub mod zone;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, UdpSocket};
use tokio::sync::watch;
use tokio::task::JoinHandle;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("failed to listen on {addr}")]
    Listen {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("dns task failed")]
    Join(#[source] tokio::task::JoinError),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Clone, Debug)]
pub struct Config {
    /// UDP and TCP, same port (port 0 picks one free for both).
    pub listen: SocketAddr,
    pub settings: answer::Settings,
    /// Where questions outside the cluster go (port 53 of the resolv.conf nameservers).
    pub upstreams: Vec<SocketAddr>,
    /// One try at one upstream.
    pub forward_timeout: Duration,
    /// A TCP connection without a request for this long is closed.
    pub tcp_idle_timeout: Duration,
    /// After SIGTERM: not ready at once, still answering this long (CoreDNS's `health { lameduck }`),
    /// so clients move to other replicas before this one stops.
    pub lameduck: Duration,
    /// Where /healthz, /readyz and /metrics are served; None serves nothing.
    pub metrics_addr: Option<SocketAddr>,
}

/// A running server.
pub struct Handle {
    /// The UDP and TCP address answered on.
    pub dns_addr: SocketAddr,
    pub metrics_addr: Option<SocketAddr>,
    pub current: Arc<zone::Current>,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl Handle {
    /// A sender that starts the shutdown (lame duck, then stop) when it sends `true`.
    pub fn stopper(&self) -> watch::Sender<bool> {
        self.stop.clone()
    }

    pub async fn wait(self) -> Result<()> {
        self.task.await.map_err(Error::Join)
    }

    pub async fn shutdown(self) -> Result<()> {
        let _ = self.stop.send(true);
        self.wait().await
    }
}

/// Binds the sockets, starts following the API and serving.
pub async fn start(client: kube::Client, config: Config) -> Result<Handle> {
    let (udp, tcp) = bind(config.listen).await?;
    let dns_addr = udp.local_addr().map_err(|source| Error::Listen { addr: config.listen, source })?;
    let current = Arc::new(zone::Current::default());
    let metrics = Arc::new(metrics::Metrics::new());
    let (stop, mut stop_rx) = watch::channel(false);
    let (done, done_rx) = watch::channel(false);
    let metrics_addr = match config.metrics_addr {
        Some(addr) => {
            let listener = TcpListener::bind(addr).await.map_err(|source| Error::Listen { addr, source })?;
            let bound = listener.local_addr().map_err(|source| Error::Listen { addr, source })?;
            let shared = http::Shared { current: current.clone(), metrics: metrics.clone(), stopping: stop_rx.clone() };
            tokio::spawn(http::serve(listener, shared, done_rx.clone()));
            Some(bound)
        }
        None => None,
    };
    tokio::spawn(zone::run(client, current.clone(), metrics.clone(), done_rx));
    let handler = server::Handler {
        current: current.clone(),
        settings: config.settings.clone(),
        forwarder: forward::Forwarder::new(config.upstreams.clone(), config.forward_timeout),
        metrics,
        server_label: format!("dns://:{}", dns_addr.port()),
    };
    let mut dns = hickory_server::Server::new(handler);
    dns.register_socket(udp);
    dns.register_listener(tcp, config.tcp_idle_timeout, 64);
    tracing::info!(listen = %dns_addr, zone = %config.settings.zone, upstreams = ?config.upstreams, "serving DNS");
    let lameduck = config.lameduck;
    let task = tokio::spawn(async move {
        let _ = stop_rx.wait_for(|s| *s).await;
        tracing::info!(lameduck = ?lameduck, "not ready; answering until the lame-duck period ends");
        tokio::time::sleep(lameduck).await;
        if let Err(e) = dns.shutdown_gracefully().await {
            tracing::warn!(error = %e, "dns server stopped with an error");
        }
        let _ = done.send(true);
    });
    Ok(Handle { dns_addr, metrics_addr, current, stop, task })
}

/// A UDP socket and a TCP listener on the same address; for port 0, the TCP port follows the
/// UDP one (tried a few times in case another process takes it in between).
async fn bind(addr: SocketAddr) -> Result<(UdpSocket, TcpListener)> {
    let mut last = None;
    for _ in 0..8 {
        let udp = UdpSocket::bind(addr).await.map_err(|source| Error::Listen { addr, source })?;
        let bound = udp.local_addr().map_err(|source| Error::Listen { addr, source })?;
        match TcpListener::bind(bound).await {
            Ok(tcp) => return Ok((udp, tcp)),
            Err(source) if addr.port() == 0 => last = Some(source),
            Err(source) => return Err(Error::Listen { addr: bound, source }),
        }
    }
    Err(Error::Listen { addr, source: last.unwrap_or_else(|| std::io::Error::other("no free port")) })
}
