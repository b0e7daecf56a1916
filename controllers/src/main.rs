//! kaji-controller-manager: parse flags, install tracing, run the controllers until SIGTERM/SIGINT.

use clap::{ArgAction, Parser};
use kaji_component::duration::parse_duration;
use kaji_controllers::nodeipam::cidr::Cidr;
use kaji_controllers::nodelifecycle::health::Grace;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

/// kaji's controller manager: the workload, endpoints, node lifecycle, node IPAM, garbage
/// collection, namespace and pod GC loops.
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
    /// How long a node may go without renewing its Lease or posting status before it is Unknown.
    #[arg(long, default_value = "40s", value_parser = parse_duration)]
    node_monitor_grace_period: Duration,
    /// How long a node that never posted status may stay silent after it registered.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    node_startup_grace_period: Duration,
    /// How often every node's health is checked.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    node_monitor_period: Duration,
    /// Nodes per second whose pods may start being evicted (0 stops evictions).
    #[arg(long, default_value_t = 0.1)]
    node_eviction_rate: f64,
    /// Give every node a pod CIDR out of --cluster-cidr.
    #[arg(long, default_value_t = true, action = ArgAction::Set)]
    allocate_node_cidrs: bool,
    /// The pod network that node pod CIDRs are cut from.
    #[arg(long, default_value = "10.244.0.0/16")]
    cluster_cidr: Cidr,
    /// The prefix length of each node's pod CIDR.
    #[arg(long, default_value_t = 24)]
    node_cidr_mask_size: u8,
    /// Delete objects whose owners are gone, and honour foreground and orphan deletion.
    #[arg(long, default_value_t = true, action = ArgAction::Set)]
    enable_garbage_collector: bool,
    /// Garbage collector reconciles in flight at once, per resource.
    #[arg(long, default_value_t = 20)]
    concurrent_gc_syncs: u16,
    /// Namespaces being emptied at once.
    #[arg(long, default_value_t = 10)]
    concurrent_namespace_syncs: u16,
    /// How often every namespace is looked at again.
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    namespace_sync_period: Duration,
    /// Terminated pods kept before the oldest are deleted (0 keeps them all).
    #[arg(long, default_value_t = 12500)]
    terminated_pod_gc_threshold: usize,
    /// The cluster CA bundle (PEM) to publish as the ConfigMap kube-root-ca.crt in every
    /// namespace, for pods to verify the apiserver with; without it nothing is published.
    #[arg(long)]
    root_ca_file: Option<std::path::PathBuf>,
    /// The cluster CA certificate (PEM) csrsigning issues certificates with; without it and
    /// --cluster-signing-key-file nothing is signed.
    #[arg(long)]
    cluster_signing_cert_file: Option<std::path::PathBuf>,
    /// The cluster CA's private key (PEM).
    #[arg(long)]
    cluster_signing_key_file: Option<std::path::PathBuf>,
    /// The longest certificate csrsigning issues (a request may ask for less, not for more).
    #[arg(long, default_value = "8760h", value_parser = parse_duration)]
    cluster_signing_duration: Duration,
    /// Run the local-path provisioner: a default `local-path` StorageClass whose claims get a
    /// directory on the node their first pod is scheduled to.
    #[arg(long, default_value_t = true, action = ArgAction::Set)]
    local_path_provisioner: bool,
    /// Where each node keeps local-path volumes; `{node}` is replaced by the node's name.
    #[arg(long, default_value = "/var/lib/kaji/local-path")]
    local_path_dir: String,
    /// The image of the helper pod that removes a deleted volume's directory on its node.
    #[arg(long, default_value = "busybox")]
    local_path_helper_image: String,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    kaji_component::init_tracing(args.log_json);
    let leader_election = args.leader.election(&args.leader_elect_resource_name, "kaji-controller-manager")?;
    let root_ca = match &args.root_ca_file {
        Some(path) => {
            Some(std::fs::read_to_string(path).map_err(|e| anyhow::anyhow!("--root-ca-file {}: {e}", path.display()))?)
        }
        None => None,
    };
    let csr_signing = csr_signing(&args)?;
    let config = kaji_controllers::Config {
        leader_election,
        metrics_addr: (args.metrics_port != 0).then_some(SocketAddr::new(args.bind_address, args.metrics_port)),
        node_lifecycle: kaji_controllers::nodelifecycle::Settings {
            grace: Grace { monitor: args.node_monitor_grace_period, startup: args.node_startup_grace_period },
            period: args.node_monitor_period,
            eviction_rate: args.node_eviction_rate,
        },
        node_ipam: args.allocate_node_cidrs.then_some(kaji_controllers::nodeipam::Settings {
            cluster_cidr: args.cluster_cidr,
            node_mask_size: args.node_cidr_mask_size,
        }),
        garbage_collector: args
            .enable_garbage_collector
            .then_some(kaji_controllers::gc::Settings { workers: args.concurrent_gc_syncs }),
        namespace: kaji_controllers::namespace::Settings {
            resync: args.namespace_sync_period,
            workers: args.concurrent_namespace_syncs,
        },
        pod_gc: kaji_controllers::podgc::Settings {
            terminated_threshold: args.terminated_pod_gc_threshold,
            ..Default::default()
        },
        root_ca,
        csr_signing,
        job_backoff: kaji_controllers::job::backoff::Settings::default(),
        local_path: args.local_path_provisioner.then(|| kaji_controllers::localpath::Settings {
            dir: args.local_path_dir.clone(),
            helper_image: args.local_path_helper_image.clone(),
            ..Default::default()
        }),
    };
    let handle = kaji_controllers::start(
        args.api.client(concat!("kaji-controller-manager/", env!("CARGO_PKG_VERSION"))).await?,
        config,
    )
    .await?;
    let stop = handle.stopper();
    kaji_component::stop_on_signal(stop, "finishing reconciles in flight");
    handle.wait().await?;
    tracing::info!("stopped");
    Ok(())
}

/// csrsigning's CA from `--cluster-signing-cert-file`/`--cluster-signing-key-file` (both or none).
fn csr_signing(args: &Args) -> anyhow::Result<Option<kaji_controllers::certificates::signer::Settings>> {
    Ok(match (&args.cluster_signing_cert_file, &args.cluster_signing_key_file) {
        (Some(cert), Some(key)) => {
            let read =
                |p: &std::path::Path| std::fs::read_to_string(p).map_err(|e| anyhow::anyhow!("{}: {e}", p.display()));
            let ca = kaji_pki::Ca::load(&read(cert)?, &read(key)?)
                .map_err(|e| anyhow::anyhow!("--cluster-signing-cert-file/--cluster-signing-key-file: {e}"))?;
            Some(kaji_controllers::certificates::signer::Settings {
                ca: std::sync::Arc::new(ca),
                duration: args.cluster_signing_duration,
            })
        }
        (None, None) => None,
        _ => anyhow::bail!("--cluster-signing-cert-file and --cluster-signing-key-file go together"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_flags_default_as_kubernetes_and_parse() {
        let args = Args::parse_from(["kaji-controller-manager"]);
        assert_eq!(args.node_monitor_grace_period, Duration::from_secs(40));
        assert_eq!(args.node_monitor_period, Duration::from_secs(5));
        assert!(args.allocate_node_cidrs);
        assert_eq!(args.cluster_cidr.to_string(), "10.244.0.0/16");
        let args = Args::parse_from([
            "kaji-controller-manager",
            "--node-monitor-grace-period=2s",
            "--allocate-node-cidrs=false",
            "--cluster-cidr=10.1.0.0/20",
            "--node-cidr-mask-size=26",
        ]);
        assert_eq!(args.node_monitor_grace_period, Duration::from_secs(2));
        assert!(!args.allocate_node_cidrs);
        assert_eq!((args.cluster_cidr.to_string(), args.node_cidr_mask_size), ("10.1.0.0/20".into(), 26));
        assert!(Args::try_parse_from(["kaji-controller-manager", "--cluster-cidr=10.1.0.0"]).is_err());
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
    }

    #[test]
    fn collector_flags_default_as_kubernetes_and_parse() {
        let args = Args::parse_from(["kaji-controller-manager"]);
        assert!(args.enable_garbage_collector);
        assert_eq!((args.concurrent_gc_syncs, args.concurrent_namespace_syncs), (20, 10));
        assert_eq!(args.terminated_pod_gc_threshold, 12500);
        assert_eq!(args.namespace_sync_period, Duration::from_secs(300));
        let args = Args::parse_from([
            "kaji-controller-manager",
            "--enable-garbage-collector=false",
            "--terminated-pod-gc-threshold=10",
            "--namespace-sync-period=1m",
        ]);
        assert!(!args.enable_garbage_collector);
        assert_eq!((args.terminated_pod_gc_threshold, args.namespace_sync_period), (10, Duration::from_secs(60)));
    }

    #[test]
    fn the_signer_needs_both_ca_files_and_defaults_to_a_year() {
        let args = Args::parse_from(["kaji-controller-manager"]);
        assert_eq!(args.cluster_signing_duration, Duration::from_secs(8760 * 3600));
        assert!(csr_signing(&args).expect("no signer").is_none());
        let dir = tempfile::tempdir().expect("tempdir");
        let ca = kaji_pki::Ca::generate("kubernetes", kaji_pki::ca::CA_VALIDITY).expect("ca");
        let (cert, key) = (dir.path().join("ca.crt"), dir.path().join("ca.key"));
        std::fs::write(&cert, ca.cert_pem()).expect("cert");
        std::fs::write(&key, ca.key_pem()).expect("key");
        let (cert, key) = (cert.to_string_lossy().into_owned(), key.to_string_lossy().into_owned());
        let only_cert = Args::parse_from(["kaji-controller-manager", "--cluster-signing-cert-file", &cert]);
        assert!(csr_signing(&only_cert).is_err());
        let both = Args::parse_from([
            "kaji-controller-manager",
            "--cluster-signing-cert-file",
            &cert,
            "--cluster-signing-key-file",
            &key,
            "--cluster-signing-duration=24h",
        ]);
        let settings = csr_signing(&both).expect("loads").expect("a signer");
        assert_eq!(settings.duration, Duration::from_secs(24 * 3600));
        assert_eq!(settings.ca.cert_pem(), ca.cert_pem());
    }
}
