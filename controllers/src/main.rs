//! kaji-controller-manager: parse flags, install tracing, run the controllers until SIGTERM/SIGINT.

use clap::Parser;
use kaji_controllers::leader::LeaderElection;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

/// kaji's controller manager: the ReplicaSet and Deployment loops.
#[derive(Parser, Debug)]
#[command(name = "kaji-controller-manager", version)]
struct Args {
    #[command(flatten)]
    api: kaji_component::ApiArgs,
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

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    kaji_component::init_tracing(args.log_json);
    let leader_election = args.leader_elect.then(|| LeaderElection {
        lease_name: args.leader_elect_resource_name.clone(),
        namespace: args.leader_elect_resource_namespace.clone(),
        identity: kaji_component::identity("kaji-controller-manager"),
        lease_duration: Duration::from_secs(args.leader_elect_lease_duration),
        renew_deadline: Duration::from_secs(args.leader_elect_renew_deadline),
        retry_period: Duration::from_secs(args.leader_elect_retry_period),
    });
    let config = kaji_controllers::Config {
        leader_election,
        metrics_addr: (args.metrics_port != 0).then_some(SocketAddr::new(args.bind_address, args.metrics_port)),
    };
    let handle = kaji_controllers::start(args.api.client().await?, config).await?;
    let stop = handle.stopper();
    kaji_component::stop_on_signal(stop, "finishing reconciles in flight");
    handle.wait().await?;
    tracing::info!("stopped");
    Ok(())
}
