//! kaji-proxy: Service load balancing on each node, in kube-proxy's layouts — iptables (a pure
//! `render` of the whole ruleset, applied atomically with one `iptables-restore`) or nftables
//! (one table of our own, applied with one `nft -f` transaction).

pub mod backend;
pub mod build;
pub mod controller;
pub mod http;
pub mod iptables;
pub mod metrics;
pub mod model;
pub mod names;
pub mod nftables;
pub mod render;
pub mod sync;

pub use render::render;

use crate::controller::Shared;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
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
    #[error("proxy task failed")]
    Join(#[source] tokio::task::JoinError),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Clone, Debug)]
pub struct Config {
    /// This node's name: endpoints on it are the ones `Local` policies use.
    pub node_name: String,
    /// Pod CIDR of the cluster: ClusterIP traffic from outside it is masqueraded.
    pub cluster_cidr: Option<crate::model::Cidr>,
    pub masquerade_all: bool,
    /// Syncs are at least this far apart (changes in between are coalesced).
    pub min_sync_period: Duration,
    /// A full rewrite at least this often.
    pub sync_period: Duration,
    /// iptables (the default) or nftables, and how to run its tools.
    pub backend: backend::Backend,
    /// Where to serve /healthz and /metrics (port 0 picks one); `None` serves nothing.
    pub metrics_addr: Option<SocketAddr>,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            node_name: String::new(),
            cluster_cidr: None,
            masquerade_all: false,
            min_sync_period: Duration::from_secs(1),
            sync_period: Duration::from_secs(30),
            backend: backend::Backend::default(),
            metrics_addr: None,
        }
    }
}

/// A running proxy.
pub struct Handle {
    pub metrics_addr: Option<SocketAddr>,
    pub shared: Arc<Shared>,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl Handle {
    /// A sender that stops the proxy when it sends `true`.
    pub fn stopper(&self) -> watch::Sender<bool> {
        self.stop.clone()
    }

    pub async fn wait(self) -> Result<()> {
        self.task.await.map_err(Error::Join)
    }

    /// Stops syncing. The rules stay installed (traffic keeps flowing); `--cleanup` removes them.
    pub async fn shutdown(self) -> Result<()> {
        let _ = self.stop.send(true);
        self.wait().await
    }
}

/// Starts the metrics server and the proxy loop.
pub async fn start(client: kube::Client, config: Config) -> Result<Handle> {
    let shared = Arc::new(Shared::new(config.sync_period));
    let (stop, stop_rx) = watch::channel(false);
    let metrics_addr = match config.metrics_addr {
        Some(addr) => {
            let listener =
                tokio::net::TcpListener::bind(addr).await.map_err(|source| Error::Listen { addr, source })?;
            let bound = listener.local_addr().map_err(|source| Error::Listen { addr, source })?;
            tokio::spawn(http::serve(listener, shared.clone(), stop_rx.clone()));
            Some(bound)
        }
        None => None,
    };
    let task = tokio::spawn(controller::run(client, config, shared.clone(), stop_rx));
    Ok(Handle { metrics_addr, shared, stop, task })
}
