//! kaji-proxy: parse flags, install tracing, program Service rules until SIGTERM/SIGINT.

use anyhow::Context;
use clap::Parser;
use kaji_proxy::backend::Backend;
use kaji_proxy::iptables::Iptables;
use kaji_proxy::nftables::Nft;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

/// How Service rules are programmed.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum ProxyMode {
    /// kube-proxy's iptables layout, applied with iptables-restore.
    Iptables,
    /// kube-proxy's nftables layout in table `ip kaji-proxy`, one transaction per sync.
    Nftables,
}

/// How the nftables mode's transactions reach the kernel.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum NftWriter {
    Netlink,
    Nft,
}

/// kaji's proxy: Service load balancing with iptables or nftables (kube-proxy's layouts).
#[derive(Parser, Debug)]
#[command(name = "kaji-proxy", version)]
struct Args {
    #[command(flatten)]
    api: kaji_component::ApiArgs,
    /// This node's name (endpoints with this nodeName are local); default: the hostname.
    #[arg(long)]
    hostname_override: Option<String>,
    /// The cluster's pod CIDR (IPv4, a.b.c.d/n): traffic to ClusterIPs from outside it is
    /// masqueraded.
    #[arg(long)]
    cluster_cidr: Option<kaji_proxy::model::Cidr>,
    /// Masquerade all traffic to ClusterIPs.
    #[arg(long)]
    masquerade_all: bool,
    /// Minimum time between syncs (changes in between are applied together), e.g. 1s, 500ms.
    #[arg(long, default_value = "1s", value_parser = kaji_component::duration::parse_duration)]
    min_sync_period: Duration,
    /// Maximum time between full rewrites of the rules, e.g. 30s, 1m.
    #[arg(long, default_value = "30s", value_parser = kaji_component::duration::parse_duration)]
    sync_period: Duration,
    /// How to program the rules.
    #[arg(long, value_enum, default_value = "iptables")]
    proxy_mode: ProxyMode,
    /// How the nftables mode writes a sync: `netlink` sends it to the kernel as one batch;
    /// `nft` pipes it as text to `nft -f -` (slower: nft parses it first).
    #[arg(long, value_enum, default_value = "netlink")]
    nftables_writer: NftWriter,
    /// Remove every kaji-proxy rule of both modes (iptables chains and jumps, the nftables
    /// table), then exit.
    #[arg(long)]
    cleanup: bool,
    /// Address for /healthz and /metrics.
    #[arg(long, default_value = "0.0.0.0")]
    bind_address: IpAddr,
    /// Port for /healthz and /metrics (0 disables them).
    #[arg(long, default_value_t = 10249)]
    metrics_port: u16,
    /// Log as JSON lines instead of text.
    #[arg(long)]
    log_json: bool,
}

// One thread is plenty for two watches and /metrics (a sync runs on a blocking thread). Every
// thread allocates from one malloc arena (`malloc::single_arena`): a second arena for the sync
// thread cost ~6 MiB at 10,000 services.
#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    kaji_component::init_tracing(args.log_json);
    if !kaji_component::malloc::single_arena() {
        tracing::debug!("cannot limit malloc arenas");
    }
    if args.cleanup {
        return cleanup(args.proxy_mode);
    }
    let node_name = match &args.hostname_override {
        Some(n) => n.clone(),
        None => std::fs::read_to_string("/etc/hostname").map(|h| h.trim().to_string()).unwrap_or_default(),
    };
    let config = kaji_proxy::Config {
        node_name,
        cluster_cidr: args.cluster_cidr,
        masquerade_all: args.masquerade_all,
        min_sync_period: args.min_sync_period,
        sync_period: args.sync_period,
        backend: match args.proxy_mode {
            ProxyMode::Iptables => Backend::Iptables(Iptables::host()),
            ProxyMode::Nftables => Backend::Nftables(match args.nftables_writer {
                NftWriter::Netlink => Nft::host(),
                NftWriter::Nft => Nft::host().through_nft(),
            }),
        },
        metrics_addr: (args.metrics_port != 0).then_some(SocketAddr::new(args.bind_address, args.metrics_port)),
    };
    let handle =
        kaji_proxy::start(args.api.client(concat!("kaji-proxy/", env!("CARGO_PKG_VERSION"))).await?, config).await?;
    let stop = handle.stopper();
    kaji_component::stop_on_signal(stop, "rules stay installed");
    handle.wait().await?;
    tracing::info!("stopped");
    Ok(())
}

/// Removes what either mode installed. The tools of the mode not in use may be missing (a node
/// that never ran it): that mode is skipped.
fn cleanup(mode: ProxyMode) -> anyhow::Result<()> {
    let missing = |e: &dyn std::error::Error| {
        e.source()
            .and_then(|s| s.downcast_ref::<std::io::Error>())
            .is_some_and(|io| io.kind() == std::io::ErrorKind::NotFound)
    };
    match Iptables::host().cleanup() {
        Ok(chains) => tracing::info!(chains, "removed kaji-proxy iptables rules"),
        Err(e) if mode != ProxyMode::Iptables && missing(&e) => tracing::debug!("no iptables here"),
        Err(e) => return Err(e).context("iptables cleanup"),
    }
    match Nft::host().cleanup() {
        Ok(existed) => tracing::info!(table = existed, "removed kaji-proxy nftables table"),
        Err(e) if mode != ProxyMode::Nftables && missing(&e) => tracing::debug!("no nft here"),
        Err(e) => return Err(e).context("nftables cleanup"),
    }
    Ok(())
}
