//! kaji-controller-manager: parse flags, install tracing, run the controllers until SIGTERM/SIGINT.

use clap::Parser;
use std::net::{IpAddr, SocketAddr};

/// kaji's controller manager: the ReplicaSet and Deployment loops.
#[derive(Parser, Debug)]
#[command(name = "kaji-controller-manager", version)]
struct Args {
    #[command(flatten)]
    api: kaji_component::ApiArgs,
    #[command(flatten)]
    leader: kaji_component::LeaderArgs,
    #[arg(long, default_value = "kube-controller-manager")]
    leader_elect_resource_name: String,
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
    let leader_election = args.leader.election(&args.leader_elect_resource_name, "kaji-controller-manager");
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
