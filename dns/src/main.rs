//! kaji-dns: parse flags, install tracing, answer DNS until SIGTERM/SIGINT (then a lame-duck
//! period).

use anyhow::Context;
use clap::Parser;
use hickory_server::proto::rr::Name;
use kaji_component::duration::parse_duration;
use kaji_dns::answer::{Pods, Settings};
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

/// kaji's cluster DNS: answers for Services and their endpoints under the cluster domain (as
/// CoreDNS's kubernetes plugin) and forwards everything else to the upstream resolvers.
#[derive(Parser, Debug)]
#[command(name = "kaji-dns", version)]
struct Args {
    #[command(flatten)]
    api: kaji_component::ApiArgs,
    /// The zone answered from the cluster's Services (the agents' --cluster-domain).
    #[arg(long, default_value = "cluster.local")]
    cluster_domain: String,
    /// UDP and TCP address to answer on.
    #[arg(long, default_value = "0.0.0.0:53")]
    listen: SocketAddr,
    /// TTL of answers and of negative answers, in seconds (CoreDNS's default).
    #[arg(long, default_value_t = 5)]
    ttl: u32,
    /// Whether `<a-b-c-d>.<namespace>.pod.<zone>` answers.
    #[arg(long, value_enum, default_value = "insecure")]
    pods: Pods,
    /// The Service (namespace/name) whose ClusterIP is the zone's name server (ns.dns.<zone>).
    #[arg(long, default_value = "kube-system/kube-dns")]
    dns_service: String,
    /// Upstream resolvers (IP or IP:port, repeatable); default: the nameservers of --resolv-conf.
    #[arg(long)]
    upstream: Vec<String>,
    /// Where the upstream resolvers are read from unless --upstream is given.
    #[arg(long, default_value = "/etc/resolv.conf")]
    resolv_conf: PathBuf,
    /// How long one try at one upstream may take, e.g. 2s.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    forward_timeout: Duration,
    /// After SIGTERM, keep answering this long while reporting not ready, e.g. 5s.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    lameduck: Duration,
    /// Address for /healthz, /readyz and /metrics (port 0 disables them).
    #[arg(long, default_value = "0.0.0.0:9153")]
    metrics_address: SocketAddr,
    /// Log as JSON lines instead of text.
    #[arg(long)]
    log_json: bool,
}

fn upstream(s: &str) -> anyhow::Result<SocketAddr> {
    if let Ok(ip) = s.parse::<IpAddr>() {
        return Ok(SocketAddr::new(ip, 53));
    }
    s.parse().with_context(|| format!("--upstream {s:?}: want IP or IP:port"))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    // hickory-server logs every request at info.
    kaji_component::init_tracing_with(args.log_json, "info,hickory_server=warn,hickory_net=warn");
    let zone = Name::from_ascii(format!("{}.", args.cluster_domain.trim_end_matches('.')))
        .with_context(|| format!("--cluster-domain {:?} is not a domain name", args.cluster_domain))?;
    let (ns, name) = args
        .dns_service
        .split_once('/')
        .with_context(|| format!("--dns-service {:?}: want namespace/name", args.dns_service))?;
    let upstreams = if args.upstream.is_empty() {
        kaji_dns::forward::nameservers(&args.resolv_conf)?
    } else {
        args.upstream.iter().map(|u| upstream(u)).collect::<anyhow::Result<_>>()?
    };
    if upstreams.is_empty() {
        tracing::warn!(resolv_conf = %args.resolv_conf.display(), "no upstream resolver: names outside the cluster get SERVFAIL");
    }
    let config = kaji_dns::Config {
        listen: args.listen,
        settings: Settings { zone, ttl: args.ttl, pods: args.pods, dns_service: (ns.into(), name.into()) },
        upstreams,
        forward_timeout: args.forward_timeout,
        tcp_idle_timeout: Duration::from_secs(10),
        lameduck: args.lameduck,
        metrics_addr: (args.metrics_address.port() != 0).then_some(args.metrics_address),
    };
    let client = args.api.client(concat!("kaji-dns/", env!("CARGO_PKG_VERSION"))).await?;
    let handle = kaji_dns::start(client, config).await?;
    kaji_component::stop_on_signal(handle.stopper(), "lame duck, then stop");
    handle.wait().await?;
    tracing::info!("stopped");
    Ok(())
}
