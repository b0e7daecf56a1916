//! kaji-controller-manager: parse flags, install tracing, run the controllers until SIGTERM/SIGINT.

use anyhow::Context;
use clap::Parser;
use kaji_controllers::leader::LeaderElection;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

/// kaji's controller manager: the ReplicaSet and Deployment loops.
#[derive(Parser, Debug)]
#[command(name = "kaji-controller-manager", version)]
struct Args {
    /// API server URL (e.g. http://127.0.0.1:6443); overrides the kubeconfig's server.
    #[arg(long)]
    master: Option<String>,
    /// Kubeconfig file; default: $KUBECONFIG, ~/.kube/config, or in-cluster.
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// Take a Lease before acting, so only one of several managers acts.
    #[arg(long)]
    leader_elect: bool,
    #[arg(long, default_value = "kube-controller-manager")]
    leader_elect_resource_name: String,
    #[arg(long, default_value = "kube-system")]
    leader_elect_resource_namespace: String,
    /// Seconds a lease lasts without renewal.
    #[arg(long, default_value_t = 15)]
    leader_elect_lease_duration: u64,
    /// Seconds the leader keeps trying to renew before it gives up.
    #[arg(long, default_value_t = 10)]
    leader_elect_renew_deadline: u64,
    /// Seconds between acquire/renew attempts.
    #[arg(long, default_value_t = 2)]
    leader_elect_retry_period: u64,
    /// Address for /healthz and /metrics.
    #[arg(long, default_value = "0.0.0.0")]
    bind_address: IpAddr,
    /// Port for /healthz and /metrics (0 disables them).
    #[arg(long, default_value_t = 10257)]
    metrics_port: u16,
    /// Log as JSON lines instead of text.
    #[arg(long)]
    log_json: bool,
}

async fn client(args: &Args) -> anyhow::Result<kube::Client> {
    let mut config = match &args.kubeconfig {
        Some(path) => {
            let kc =
                kube::config::Kubeconfig::read_from(path).with_context(|| format!("reading {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default()).await?
        }
        None if args.master.is_some() => kube::Config::new("http://127.0.0.1".parse()?),
        None => kube::Config::infer().await.context("no kubeconfig or in-cluster config; pass --master")?,
    };
    if let Some(master) = &args.master {
        config.cluster_url = master.parse().with_context(|| format!("--master {master}"))?;
    }
    Ok(kube::Client::try_from(config)?)
}

fn identity() -> String {
    let host = std::fs::read_to_string("/etc/hostname").map(|h| h.trim().to_string()).unwrap_or_default();
    format!("{}_{:016x}", if host.is_empty() { "kaji-controller-manager" } else { &host }, fastrand::u64(..))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into());
    if args.log_json {
        tracing_subscriber::fmt().with_env_filter(filter).json().init();
    } else {
        tracing_subscriber::fmt().with_env_filter(filter).init();
    }
    let leader_election = args.leader_elect.then(|| LeaderElection {
        lease_name: args.leader_elect_resource_name.clone(),
        namespace: args.leader_elect_resource_namespace.clone(),
        identity: identity(),
        lease_duration: Duration::from_secs(args.leader_elect_lease_duration),
        renew_deadline: Duration::from_secs(args.leader_elect_renew_deadline),
        retry_period: Duration::from_secs(args.leader_elect_retry_period),
    });
    let config = kaji_controllers::Config {
        leader_election,
        metrics_addr: (args.metrics_port != 0).then_some(SocketAddr::new(args.bind_address, args.metrics_port)),
    };
    let handle = kaji_controllers::start(client(&args).await?, config).await?;
    let stop = handle.stopper();
    tokio::spawn(async move {
        let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(s) => s,
            Err(e) => {
                tracing::error!(error = %e, "cannot listen for SIGTERM");
                return;
            }
        };
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
        tracing::info!("shutting down: finishing reconciles in flight");
        let _ = stop.send(true);
    });
    handle.wait().await?;
    tracing::info!("stopped");
    Ok(())
}
