//! kaji-agent: parse flags, install tracing, run the agent until SIGTERM/SIGINT. Also the hidden
//! `fork-server` verb (the runtime execs this binary once to fork every container's monitor) and `image` for air-gapped nodes.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand};

/// kaji's node agent (kubelet): registers the node and runs the pods bound to it.
#[derive(Parser, Debug)]
#[command(name = "kaji-agent", version)]
struct Args {
    #[command(flatten)]
    api: kaji_component::ApiArgs,
    /// A kubeconfig with a bootstrap token: when --kubeconfig is missing or its client certificate
    /// has expired, ask for a node certificate with it (a CertificateSigningRequest) and write
    /// --kubeconfig using the certificate issued.
    #[arg(long)]
    bootstrap_kubeconfig: Option<PathBuf>,
    /// Where the bootstrapped and rotated client keys and certificates go (default: <root-dir>/pki).
    #[arg(long)]
    cert_dir: Option<PathBuf>,
    /// Renew the client certificate of --kubeconfig at 70-90% of its lifetime through a
    /// CertificateSigningRequest (kubelet's --rotate-certificates, which kubeadm turns on).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    rotate_certificates: bool,
    /// Node name (default: the host name).
    #[arg(long)]
    node_name: Option<String>,
    /// The node's InternalIP. Default: the first IPv4 address of --interface, else of the
    /// interface the default route leaves by (pin it on machines with a NAT interface first,
    /// such as Vagrant's eth0).
    #[arg(long)]
    node_ip: Option<IpAddr>,
    /// Take the node IP from this interface's first IPv4 address.
    #[arg(long)]
    interface: Option<String>,
    /// Images, container state, pod directories and logs live here.
    #[arg(long, default_value = "/var/lib/kaji-agent")]
    root_dir: PathBuf,
    /// Pod cgroups are created under <parent>/kubepods in every hierarchy (cgroupfs driver).
    #[arg(long, default_value = "kaji")]
    cgroup_parent: String,
    /// `systemd` (pods and shims in a scope systemd delegates, kubepods.slice/kaji-pods.scope;
    /// pure cgroup v2), `cgroupfs` (<cgroup-parent>/kubepods), or `auto`: systemd when it is PID 1
    /// on a pure cgroup v2 host.
    #[arg(long, default_value = "auto")]
    cgroup_driver: kaji_agent::cgroup::Driver,
    /// Container runtime: `native`, or the path of an OCI runtime binary such as runc.
    #[arg(long, default_value = "native")]
    runtime: String,
    /// Resources held back from pods, e.g. cpu=100m,memory=256Mi,ephemeral-storage=1Gi.
    #[arg(long, default_value = "")]
    reserved: kaji_agent::node::Reserved,
    /// Pressure thresholds, kubelet's syntax (kind-style labs use nodefs.available<0%).
    #[arg(long, default_value = "memory.available<100Mi,nodefs.available<10%,pid.available<10%")]
    eviction_hard: kaji_agent::node::Eviction,
    #[arg(long, default_value_t = 110)]
    max_pods: u32,
    /// Registries (host[:port]) reached over plain HTTP; loopback registries always are.
    #[arg(long)]
    insecure_registry: Vec<String>,
    /// The cluster DNS server(s) (the kube-dns Service's ClusterIP, e.g. 10.96.0.10; repeatable or
    /// comma-separated): the nameservers of pods with dnsPolicy ClusterFirst. Without it those pods
    /// fall back to Default (with a MissingClusterDNS warning event), as kubelet's.
    #[arg(long, value_delimiter = ',')]
    cluster_dns: Vec<IpAddr>,
    /// The cluster's DNS domain: ClusterFirst pods search `<ns>.svc.<domain> svc.<domain> <domain>`.
    #[arg(long, default_value = "cluster.local")]
    cluster_domain: String,
    /// The node's resolver configuration, the base of dnsPolicy Default pods (and of hostNetwork
    /// pods with ClusterFirst); its search domains also follow the cluster's for ClusterFirst
    /// pods. Empty: pods with dnsPolicy Default ask 127.0.0.1.
    #[arg(long, default_value = "/etc/resolv.conf")]
    resolv_conf: PathBuf,
    /// Extra node labels, key=value.
    #[arg(long)]
    node_label: Vec<String>,
    /// Address for the agent server (/healthz, /metrics, /pods, /containerLogs, /stats/summary).
    #[arg(long, default_value = "0.0.0.0")]
    address: IpAddr,
    /// Port of the agent server (0 disables it).
    #[arg(long, default_value_t = 10250)]
    port: u16,
    /// Port of the plain-HTTP /healthz (kubelet's healthz port; 0 disables it).
    #[arg(long, default_value_t = 10248)]
    healthz_port: u16,
    /// Address of the healthz port.
    #[arg(long, default_value = "127.0.0.1")]
    healthz_bind_address: IpAddr,
    /// Serve the agent's port over HTTPS with this certificate (PEM); required unless `--port 0`.
    #[arg(long, requires_all = ["tls_private_key_file", "client_ca_file"])]
    tls_cert_file: Option<PathBuf>,
    #[arg(long, requires = "tls_cert_file")]
    tls_private_key_file: Option<PathBuf>,
    /// Clients of the agent's port must present a certificate from this CA; only the
    /// apiserver's (kube-apiserver-kubelet-client) or system:masters are let in.
    #[arg(long, requires = "tls_cert_file")]
    client_ca_file: Option<PathBuf>,
    #[arg(long, default_value_t = 85)]
    image_gc_high_threshold: u8,
    #[arg(long, default_value_t = 80)]
    image_gc_low_threshold: u8,
    /// Pod network: `bridge` (a kaji0 bridge with the node's podCIDR, a veth per pod, routes to
    /// other nodes' podCIDRs, masquerading and hostPorts, in the namespace the agent runs in) or
    /// `none` (pods get loopback only).
    #[arg(long, default_value = "bridge", value_parser = ["bridge", "none"])]
    pod_network: String,
    /// The whole pod network (as the controller manager's --cluster-cidr); pod traffic to
    /// anywhere else is masqueraded.
    #[arg(long, default_value = "10.244.0.0/16")]
    cluster_cidr: ipnet::Ipv4Net,
    /// Log as JSON lines instead of text.
    #[arg(long)]
    log_json: bool,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Manage the node's images without a registry.
    Image {
        #[command(subcommand)]
        verb: ImageVerb,
    },
    /// Remove every container, sandbox, volume and pod cgroup of this node (the agent must be stopped).
    Cleanup,
    /// Forks a shim per container for the runtime (see kaji_runtime::forkserver).
    #[command(hide = true)]
    ForkServer {
        /// The runtime state root it serves (shown in `ps`; the requests carry their own).
        #[arg(long)]
        root: Option<PathBuf>,
    },
    /// Keeps the systemd driver's scope alive until the agent that started it ends.
    #[command(hide = true)]
    Hold,
    /// Holds a `hostUsers: false` pod's new namespaces while the agent sets them up.
    #[command(hide = true)]
    UsernsHold {
        #[arg(long)]
        net: bool,
        #[arg(long)]
        ipc: bool,
        #[arg(long)]
        uts: bool,
    },
    /// The exec helper: joins a container's namespaces and cgroup and runs a command there.
    #[command(hide = true)]
    Nsenter {
        #[arg(long)]
        root: PathBuf,
        #[arg(long)]
        id: String,
        #[arg(long)]
        process: PathBuf,
        #[arg(long)]
        tty: bool,
    },
}

#[derive(Subcommand, Debug)]
enum ImageVerb {
    /// Import an OCI layout directory or a docker-archive tar; with --tag, a root filesystem
    /// (directory or plain tar) as a one-layer image, like `docker import`.
    Import {
        path: PathBuf,
        /// Name for a root filesystem import (e.g. kaji.local/busybox:1).
        #[arg(long)]
        tag: Option<String>,
        /// The image's Cmd (repeat for each argument).
        #[arg(long = "cmd")]
        cmd: Vec<String>,
        /// The image's Env (KEY=value, repeatable).
        #[arg(long = "env")]
        env: Vec<String>,
    },
    /// List the images on this node.
    List,
    /// Pull an image into the node's store.
    Pull { reference: String },
    /// Remove an image (by reference or digest).
    Remove { reference: String },
}

/// The interface of the IPv4 default route (the lowest metric) in `/proc/net/route`'s format.
fn default_route_interface(table: &str) -> Option<String> {
    table
        .lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            // Iface Destination Gateway Flags RefCnt Use Metric Mask ...; RTF_UP = 1.
            let up = f.get(3).and_then(|x| u32::from_str_radix(x, 16).ok()).is_some_and(|x| x & 1 == 1);
            (f.len() > 7 && f[1] == "00000000" && f[7] == "00000000" && up)
                .then(|| (f[6].parse::<u32>().unwrap_or(u32::MAX), f[0].to_string()))
        })
        .min()
        .map(|(_, iface)| iface)
}

/// The node's address: `--node-ip`, else `--interface`'s, else the default route's interface's.
fn node_ip(args: &Args) -> anyhow::Result<IpAddr> {
    if let Some(ip) = args.node_ip {
        return Ok(ip);
    }
    let interface = match &args.interface {
        Some(i) => i.clone(),
        None => {
            let table = std::fs::read_to_string("/proc/net/route").context("reading /proc/net/route")?;
            default_route_interface(&table)
                .context("no IPv4 default route to take the node's address from: give --node-ip or --interface")?
        }
    };
    interface_ip(&interface)
}

/// The first IPv4 address of `interface` (read from the kernel's own table).
fn interface_ip(interface: &str) -> anyhow::Result<IpAddr> {
    let addrs = nix::ifaddrs::getifaddrs().context("listing interfaces")?;
    for a in addrs.filter(|a| a.interface_name == interface) {
        if let Some(ip) = a.address.as_ref().and_then(|s| s.as_sockaddr_in()) {
            return Ok(IpAddr::V4(ip.ip()));
        }
    }
    anyhow::bail!("interface {interface} has no IPv4 address")
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if let Some(Command::ForkServer { .. }) = &args.command {
        // Single-threaded on purpose: it forks the shims, which clone container inits. Under
        // the systemd driver it first moves into the delegated scope, so no shim is in the
        // agent's unit.
        kaji_agent::cgroup::systemd::join_fork_server_cgroup();
        std::process::exit(kaji_runtime::forkserver::main());
    }
    if let Some(Command::UsernsHold { net, ipc, uts }) = &args.command {
        // Single-threaded on purpose: unsharing a user namespace refuses threaded callers.
        std::process::exit(kaji_agent::sandbox::hold(*net, *ipc, *uts));
    }
    if let Some(Command::Hold) = &args.command {
        std::process::exit(kaji_agent::cgroup::systemd::hold());
    }
    if let Some(Command::Nsenter { root, id, process, tty }) = &args.command {
        // Single-threaded on purpose: setns into a mount namespace refuses threaded callers.
        let a = kaji_runtime::nsenter::Args {
            root: root.clone(),
            id: id.clone(),
            process: process.clone(),
            tty: *tty,
            ..Default::default()
        };
        std::process::exit(kaji_runtime::nsenter::main(a));
    }
    // The systemd driver's scope is set up while this process is still single-threaded: it
    // sets the environment the fork server reads. The holder lives until the agent ends.
    let _holder = match (&args.command, args.cgroup_driver) {
        (None, kaji_agent::cgroup::Driver::Systemd) => {
            let exe = std::env::current_exe().context("cannot find own executable")?;
            Some(kaji_agent::cgroup::systemd::prepare(&exe).context("setting up the systemd cgroup driver")?)
        }
        _ => None,
    };
    tokio::runtime::Builder::new_multi_thread().enable_all().build()?.block_on(run(args))
}

async fn run(args: Args) -> anyhow::Result<()> {
    kaji_component::init_tracing(args.log_json);
    if let Some(Command::Image { verb }) = &args.command {
        let store = kaji_image::Store::open(
            args.root_dir.join("images"),
            kaji_image::StoreOptions { insecure_registries: args.insecure_registry.clone(), ..Default::default() },
        )?;
        match verb {
            ImageVerb::Import { path, tag: Some(tag), cmd, env } => {
                let config = kaji_image::ImageConfig { cmd: cmd.clone(), env: env.clone(), ..Default::default() };
                let i = store.import_rootfs(path, tag, &config)?;
                println!("imported {} {}", i.reference, i.manifest_digest);
            }
            ImageVerb::Import { path, tag: None, .. } => {
                for i in store.import(path)? {
                    println!("imported {} {}", i.reference, i.manifest_digest);
                }
            }
            ImageVerb::List => {
                for i in store.list()? {
                    println!("{}\t{}\t{}", i.reference, i.manifest_digest, i.size);
                }
            }
            ImageVerb::Pull { reference } => {
                let i = store.pull(reference, None).await?;
                println!("pulled {} {}", i.reference, i.manifest_digest);
            }
            ImageVerb::Remove { reference } => store.remove(reference)?,
        }
        return Ok(());
    }
    if let Some(Command::Cleanup) = &args.command {
        let mut config = kaji_agent::Config::new("cleanup", IpAddr::from([127, 0, 0, 1]), args.root_dir.clone());
        config.cgroup_parent = args.cgroup_parent.clone();
        config.cgroup_driver = args.cgroup_driver;
        config.shim_binary = std::env::current_exe().context("cannot find own executable")?;
        return kaji_agent::cleanup(&config).await;
    }
    let node_name = match &args.node_name {
        Some(n) => n.clone(),
        None => nix::unistd::gethostname()?.to_string_lossy().into_owned(),
    };
    if let Some(bootstrap) = &args.bootstrap_kubeconfig {
        let kubeconfig = args
            .api
            .kubeconfig
            .clone()
            .context("--bootstrap-kubeconfig needs --kubeconfig: where to write the result")?;
        let paths = kaji_agent::bootstrap::Paths {
            bootstrap_kubeconfig: bootstrap.clone(),
            kubeconfig,
            cert_dir: args.cert_dir.clone().unwrap_or_else(|| args.root_dir.join("pki")),
        };
        kaji_agent::bootstrap::ensure(&paths, &node_name, std::time::Duration::from_secs(3600))
            .await
            .context("failed to run the TLS bootstrap")?;
    }
    let node_ip = node_ip(&args)?;
    let mut config = kaji_agent::Config::new(node_name.clone(), node_ip, args.root_dir.clone());
    config.cgroup_parent = args.cgroup_parent.clone();
    config.cgroup_driver = args.cgroup_driver;
    tracing::info!(%node_ip, cgroup_driver = ?config.cgroup_driver, kubepods = %config.kubepods_cgroup().display(), "node");
    config.backend = match args.runtime.as_str() {
        "native" => kaji_agent::Backend::Native,
        binary => kaji_agent::Backend::Runc(PathBuf::from(binary)),
    };
    config.shim_binary = std::env::current_exe().context("cannot find own executable")?;
    if args.port != 0 && args.tls_cert_file.is_none() {
        // Exec, attach, port-forward and logs are the node's and its pods' keys: only over TLS,
        // and only to the apiserver's client certificate (kubelet never serves them in the clear).
        anyhow::bail!(
            "--port {} needs --tls-cert-file, --tls-private-key-file and --client-ca-file: the agent serves exec, attach, port-forward and logs over TLS only (--port 0 turns its server off)",
            args.port
        );
    }
    config.server_addr = (args.port != 0).then_some(SocketAddr::new(args.address, args.port));
    config.healthz_addr =
        (args.healthz_port != 0).then_some(SocketAddr::new(args.healthz_bind_address, args.healthz_port));
    if let (Some(cert_file), Some(key_file), Some(client_ca_file)) =
        (args.tls_cert_file.clone(), args.tls_private_key_file.clone(), args.client_ca_file.clone())
    {
        config.server_tls = Some(kaji_agent::http::Tls { cert_file, key_file, client_ca_file });
    }
    config.reserved = args.reserved.clone();
    config.eviction_hard = args.eviction_hard.clone();
    config.max_pods = args.max_pods;
    config.insecure_registries = args.insecure_registry.clone();
    config.cluster_dns = args.cluster_dns.clone();
    config.cluster_domain = args.cluster_domain.clone();
    config.resolv_conf = args.resolv_conf.clone();
    config.image_gc_high_percent = args.image_gc_high_threshold;
    config.image_gc_low_percent = args.image_gc_low_threshold;
    config.network =
        (args.pod_network == "bridge").then_some(kaji_agent::network::Settings { cluster_cidr: args.cluster_cidr });
    for l in &args.node_label {
        let (k, v) = l.split_once('=').with_context(|| format!("--node-label {l:?}: want key=value"))?;
        config.node_labels.insert(k.to_string(), v.to_string());
    }
    let client = client(&args, &node_name).await?;
    let handle = kaji_agent::start(client, config).await?;
    kaji_component::stop_on_signal(handle.stopper(), "containers keep running for the next agent");
    handle.wait().await?;
    tracing::info!("stopped");
    Ok(())
}

const USER_AGENT: &str = concat!("kaji-agent/", env!("CARGO_PKG_VERSION"));

/// The agent's API client; with a client certificate in --kubeconfig and --rotate-certificates,
/// one that follows the certificate as `rotation` renews it.
async fn client(args: &Args, node_name: &str) -> anyhow::Result<kube::Client> {
    let config = args.api.config(USER_AGENT).await?;
    let namespace = config.default_namespace.clone();
    let client = kube::Client::try_from(config)?;
    let Some(kubeconfig) = args.api.kubeconfig.clone() else { return Ok(client) };
    if !args.rotate_certificates || kaji_agent::bootstrap::client_identity(&kubeconfig).is_none() {
        return Ok(client);
    }
    let rotating = kaji_agent::rotation::Rotating::new(client);
    let api = args.api.clone();
    let settings = kaji_agent::rotation::Settings {
        kubeconfig,
        cert_dir: args.cert_dir.clone().unwrap_or_else(|| args.root_dir.join("pki")),
        node: node_name.to_string(),
        connect: Box::new(move || {
            let api = api.clone();
            Box::pin(async move { Ok(kube::Client::try_from(api.config(USER_AGENT).await?)?) })
        }),
    };
    tokio::spawn(kaji_agent::rotation::run(settings, rotating.clone()));
    Ok(rotating.client(&namespace))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_route_names_the_interface() {
        let table = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n\
            eth1\t0038A8C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n\
            eth0\t00000000\t0202000A\t0003\t0\t0\t100\t00000000\t0\t0\t0\n\
            eth1\t00000000\t0138A8C0\t0003\t0\t0\t50\t00000000\t0\t0\t0\n";
        assert_eq!(default_route_interface(table).as_deref(), Some("eth1"), "the lowest metric wins");
        let only_eth0 = table.lines().filter(|l| !l.starts_with("eth1")).collect::<Vec<_>>().join("\n");
        assert_eq!(default_route_interface(&only_eth0).as_deref(), Some("eth0"));
        let none = table.lines().take(2).collect::<Vec<_>>().join("\n");
        assert_eq!(default_route_interface(&none), None, "a subnet route is no default route");
    }
}
