//! kaji-scheduler: parse flags, install tracing, run the scheduler until SIGTERM/SIGINT.

use clap::Parser;
use kaji_scheduler::plugins::ScoringStrategy;
use std::net::{IpAddr, SocketAddr};

/// kaji's scheduler: places pending pods on nodes (filter, score, bind).
#[derive(Parser, Debug)]
#[command(name = "kaji-scheduler", version)]
struct Args {
    #[command(flatten)]
    api: kaji_component::ApiArgs,
    /// Schedule pods whose spec.schedulerName is this.
    #[arg(long, default_value = "default-scheduler")]
    scheduler_name: String,
    /// NodeResourcesFit scoring: LeastAllocated (spread) or MostAllocated (bin-pack).
    #[arg(long, default_value = "LeastAllocated")]
    scoring_strategy: ScoringStrategy,
    /// Percentage of nodes to find feasible before scoring; 0 = Kubernetes' adaptive default.
    #[arg(long, default_value_t = 0)]
    percentage_of_nodes_to_score: u32,
    /// Bindings in flight at once.
    #[arg(long, default_value_t = 64)]
    bind_concurrency: usize,
    #[command(flatten)]
    leader: kaji_component::LeaderArgs,
    #[arg(long, default_value = "kube-scheduler")]
    leader_elect_resource_name: String,
    /// Address for /healthz and /metrics.
    #[arg(long, default_value = "0.0.0.0")]
    bind_address: IpAddr,
    /// Port for /healthz and /metrics (0 disables them).
    #[arg(long, default_value_t = 10259)]
    metrics_port: u16,
    /// Log as JSON lines instead of text.
    #[arg(long)]
    log_json: bool,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    kaji_component::init_tracing(args.log_json);
    let leader_election = args.leader.election(&args.leader_elect_resource_name, "kaji-scheduler")?;
    let config = kaji_scheduler::Config {
        scheduler_name: args.scheduler_name.clone(),
        scoring_strategy: args.scoring_strategy,
        percentage_of_nodes_to_score: args.percentage_of_nodes_to_score,
        bind_concurrency: args.bind_concurrency,
        leader_election,
        metrics_addr: (args.metrics_port != 0).then_some(SocketAddr::new(args.bind_address, args.metrics_port)),
    };
    let handle =
        kaji_scheduler::start(args.api.client(concat!("kaji-scheduler/", env!("CARGO_PKG_VERSION"))).await?, config)
            .await?;
    let stop = handle.stopper();
    kaji_component::stop_on_signal(stop, "finishing bindings in flight");
    handle.wait().await?;
    tracing::info!("stopped");
    Ok(())
}
