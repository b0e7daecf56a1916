//! kaji-scheduler: places pending pods on nodes — queue, cache with assumed pods, filter and
//! score plugins, binding — as Kubernetes' default scheduler does.

pub mod binder;
pub mod cache;
pub mod framework;
pub mod http;
pub mod labels;
pub use kaji_component::leader;
pub mod metrics;
pub mod nodeinfo;
pub mod plugins;
pub mod queue;
pub mod resources;
pub mod scheduler;

use crate::leader::LeaderElection;
use crate::plugins::ScoringStrategy;
use crate::scheduler::Shared;
use std::net::SocketAddr;
use std::sync::Arc;
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
    #[error("lost the leader lease {0}")]
    LostLease(String),
    #[error("scheduler task failed")]
    Join(#[source] tokio::task::JoinError),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Clone, Debug)]
pub struct Config {
    /// Pods whose `spec.schedulerName` is this are ours.
    pub scheduler_name: String,
    pub scoring_strategy: ScoringStrategy,
    /// 0 = Kubernetes' adaptive percentage.
    pub percentage_of_nodes_to_score: u32,
    /// Bindings in flight at once.
    pub bind_concurrency: usize,
    pub leader_election: Option<LeaderElection>,
    /// Where to serve /healthz and /metrics (port 0 picks one); `None` serves nothing.
    pub metrics_addr: Option<SocketAddr>,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            scheduler_name: "default-scheduler".into(),
            scoring_strategy: ScoringStrategy::LeastAllocated,
            percentage_of_nodes_to_score: 0,
            bind_concurrency: 64,
            leader_election: None,
            metrics_addr: None,
        }
    }
}

/// A running scheduler.
pub struct Handle {
    /// The bound /healthz and /metrics address, if serving.
    pub metrics_addr: Option<SocketAddr>,
    pub shared: Arc<Shared>,
    stop: watch::Sender<bool>,
    task: JoinHandle<Result<()>>,
}

impl Handle {
    /// A sender that stops the scheduler when it sends `true`.
    pub fn stopper(&self) -> watch::Sender<bool> {
        self.stop.clone()
    }

    /// Runs until stopped (or the lease is lost).
    pub async fn wait(self) -> Result<()> {
        self.task.await.map_err(Error::Join)?
    }

    /// Stops scheduling, waits for bindings in flight and releases the lease.
    pub async fn shutdown(self) -> Result<()> {
        let _ = self.stop.send(true);
        self.wait().await
    }
}

/// Starts the scheduler: metrics server, leader election (if configured), reflectors and the
/// scheduling loop.
pub async fn start(client: kube::Client, config: Config) -> Result<Handle> {
    let shared = Arc::new(Shared::new(&config.scheduler_name));
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
    let task = tokio::spawn(run(client, config, shared.clone(), stop_rx));
    Ok(Handle { metrics_addr, shared, stop, task })
}

async fn run(client: kube::Client, config: Config, shared: Arc<Shared>, mut stop: watch::Receiver<bool>) -> Result<()> {
    let mut stop_rx = stop.clone();
    let work = async {
        let (pods, mut synced) = scheduler::start_watchers(&client, &shared, &config.scheduler_name, &stop);
        let volumes = scheduler::start_volume_watchers(&client, &shared, &stop);
        let volumes_ready = {
            let v = volumes.clone();
            async move {
                let _ = v.claims.wait_until_ready().await;
                let _ = v.volumes.wait_until_ready().await;
                let _ = v.classes.wait_until_ready().await;
            }
        };
        tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            _ = async { let _ = synced.wait_for(|s| *s).await; volumes_ready.await } => {}
        }
        tracing::info!(nodes = shared.cache.lock().map(|c| c.node_count()).unwrap_or(0), "caches synced; scheduling");
        let (recorder, writer) = binder::Recorder::new(client.clone(), pods, config.scheduler_name.clone());
        tokio::spawn(writer);
        let framework = plugins::default_framework(config.scoring_strategy, config.percentage_of_nodes_to_score);
        let framework = plugins::with_volumes(framework, volumes.clone());
        let binding = plugins::volume_binding::VolumeBinding(volumes);
        scheduler::schedule_loop(client.clone(), shared.clone(), framework, recorder, binding, &config, stop.clone())
            .await;
    };
    if let leader::Led::Lost(name) =
        leader::while_leading(&client, config.leader_election.as_ref(), &mut stop_rx, work).await
    {
        return Err(Error::LostLease(name));
    }
    Ok(())
}
