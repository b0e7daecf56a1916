//! kaji-agent: the node's kubelet. It registers the Node and keeps its Lease and conditions fresh,
//! runs one worker per pod bound here (sandbox, volumes, images, containers, restarts, status),
//! and serves logs, stats and health on its port.

pub mod attach;
pub mod auth;
pub mod bootstrap;
pub mod cgroup;
pub mod dns;
pub mod env;
pub mod exec;
pub mod http;
pub mod lifecycle;
pub mod logs;
pub mod metrics;
pub mod network;
pub mod node;
pub mod pods;
pub mod portforward;
pub mod probes;
pub mod remotecommand;
pub mod rotation;
pub mod runtime;
pub mod sandbox;
pub mod spdy;
pub mod spec;
pub mod subpath;
pub mod tokens;
pub mod userns;
pub mod volumes;

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
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
    #[error("the agent's TLS setup: {0}")]
    Tls(#[from] kaji_pki::Error),
    #[error("failed to prepare {path}")]
    Dir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Image(#[from] kaji_image::Error),
    #[error(transparent)]
    Node(#[from] node::Error),
    #[error(transparent)]
    Runtime(#[from] runtime::Error),
    #[error("agent task failed")]
    Join(#[source] tokio::task::JoinError),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Which container runtime backend runs the containers.
#[derive(Clone, Debug)]
pub enum Backend {
    Native,
    /// An OCI runtime binary with runc's command line.
    Runc(PathBuf),
}

#[derive(Clone, Debug)]
pub struct Config {
    pub node_name: String,
    /// The node's InternalIP (reported in the Node and as the pods' hostIP).
    pub node_ip: IpAddr,
    /// Everything the agent keeps: images, container state, pod directories, logs.
    pub root_dir: PathBuf,
    /// Pod cgroups go under `<cgroup_parent>/kubepods/...` in every hierarchy (cgroupfs driver).
    pub cgroup_parent: String,
    /// How pod cgroups are laid out and made (see [`cgroup::Driver`]).
    pub cgroup_driver: cgroup::Driver,
    pub backend: Backend,
    /// The binary re-executed as each container's shim (`<it> shim ...`).
    pub shim_binary: PathBuf,
    /// Where /healthz, /metrics, /pods, /containerLogs and /stats/summary are served (port 0 picks one).
    pub server_addr: Option<SocketAddr>,
    /// Serve `server_addr` over HTTPS, letting only the apiserver's identity past /healthz.
    pub server_tls: Option<http::Tls>,
    /// kubelet's healthz port: plain-HTTP /healthz only, for probes that hold no certificate.
    pub healthz_addr: Option<SocketAddr>,
    /// Subtracted from the measured capacity to give allocatable.
    pub reserved: node::Reserved,
    /// Thresholds below which the node reports memory, disk or PID pressure.
    pub eviction_hard: node::Eviction,
    pub max_pods: u32,
    pub insecure_registries: Vec<String>,
    /// The node's resolver configuration: the base of pods with dnsPolicy Default (and of
    /// ClusterFirst ones on the host network); its search domains follow the cluster's for
    /// ClusterFirst pods. An empty path: 127.0.0.1 with no search path, as kubelet's.
    pub resolv_conf: PathBuf,
    pub cluster_dns: Vec<IpAddr>,
    pub cluster_domain: String,
    /// Seconds between Lease renewals.
    pub lease_renew_interval: std::time::Duration,
    /// Seconds between unconditional node status updates.
    pub node_status_report_frequency: std::time::Duration,
    /// Labels added to the Node at registration (`key=value`).
    pub node_labels: std::collections::BTreeMap<String, String>,
    /// Image GC thresholds (disk usage percent of the filesystem holding `root_dir`).
    pub image_gc_high_percent: u8,
    pub image_gc_low_percent: u8,
    /// The pod network (`--pod-network bridge`); `None` leaves pods with loopback only.
    pub network: Option<network::Settings>,
}

impl Config {
    /// Defaults for everything but the node's identity and directories.
    pub fn new(node_name: impl Into<String>, node_ip: IpAddr, root_dir: impl Into<PathBuf>) -> Self {
        Config {
            node_name: node_name.into(),
            node_ip,
            root_dir: root_dir.into(),
            cgroup_parent: "kaji".into(),
            cgroup_driver: cgroup::Driver::Cgroupfs,
            backend: Backend::Native,
            shim_binary: std::env::current_exe().unwrap_or_else(|_| PathBuf::from("kaji-agent")),
            server_addr: None,
            healthz_addr: None,
            server_tls: None,
            reserved: node::Reserved::default(),
            eviction_hard: node::Eviction::default(),
            max_pods: 110,
            insecure_registries: Vec::new(),
            resolv_conf: PathBuf::from("/etc/resolv.conf"),
            cluster_dns: Vec::new(),
            cluster_domain: "cluster.local".into(),
            lease_renew_interval: std::time::Duration::from_secs(10),
            // kubelet's nodeStatusReportFrequency: the Lease is the heartbeat, status is posted
            // when it changes and otherwise every 5 minutes.
            node_status_report_frequency: std::time::Duration::from_secs(300),
            node_labels: Default::default(),
            image_gc_high_percent: 85,
            image_gc_low_percent: 80,
            network: None,
        }
    }

    pub fn images_dir(&self) -> PathBuf {
        self.root_dir.join("images")
    }
    pub fn runtime_dir(&self) -> PathBuf {
        self.root_dir.join("runtime")
    }
    pub fn containers_dir(&self) -> PathBuf {
        self.root_dir.join("containers")
    }
    pub fn pods_dir(&self) -> PathBuf {
        self.root_dir.join("pods")
    }
    /// The cgroup every pod cgroup goes below.
    pub fn kubepods_cgroup(&self) -> PathBuf {
        self.cgroup_driver.kubepods(&self.cgroup_parent)
    }
}

/// A running agent.
pub struct Handle {
    /// The bound server address, if serving.
    pub server_addr: Option<SocketAddr>,
    stop: watch::Sender<bool>,
    task: JoinHandle<Result<()>>,
}

impl Handle {
    /// A sender that stops the agent when it sends `true`.
    pub fn stopper(&self) -> watch::Sender<bool> {
        self.stop.clone()
    }

    /// Runs until stopped.
    pub async fn wait(self) -> Result<()> {
        self.task.await.map_err(Error::Join)?
    }

    /// Stops the agent. Containers keep running: a restarted agent re-adopts them.
    pub async fn shutdown(self) -> Result<()> {
        let _ = self.stop.send(true);
        self.wait().await
    }
}

/// Removes every container, sandbox, volume and pod cgroup this node holds (`kaji lab down`,
/// decommissioning). The Node object is left to the control plane.
pub async fn cleanup(config: &Config) -> anyhow::Result<()> {
    let runtime = runtime::Runtime::new(config)?;
    runtime.sweep_incomplete();
    let uids = pods::pod_uids_on_disk(config, &runtime);
    for uid in &uids {
        pods::worker::teardown_pod(&runtime, config, None, uid, &[]).await?;
    }
    // Only where this agent built a pod network: never touch a network it did not make.
    if config.root_dir.join("network").exists() {
        network::cleanup(config).await?;
    }
    match config.cgroup_driver {
        cgroup::Driver::Cgroupfs => {
            cgroup::remove(&std::path::Path::new("/").join(config.cgroup_parent.trim_matches('/')))?
        }
        // Everything below the delegated scope (the scope itself is systemd's: it goes once empty).
        cgroup::Driver::Systemd => {
            let scope = cgroup::systemd::full(cgroup::systemd::SCOPE_CGROUP);
            for e in std::fs::read_dir(&scope).into_iter().flatten().flatten() {
                if e.path().is_dir() {
                    cgroup::remove(&std::path::Path::new(cgroup::systemd::SCOPE_CGROUP).join(e.file_name()))?;
                }
            }
        }
    }
    tracing::info!(pods = uids.len(), "removed every pod from this node");
    Ok(())
}

/// Adds search (x) permission for everyone to `dir`, if it lacks it.
fn traversable(dir: &std::path::Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(dir)?.permissions().mode();
    if mode & 0o001 == 0 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode((mode & 0o7777) | 0o111))?;
    }
    Ok(())
}

/// Starts the agent: directories, image store, runtime, server, node registration, pod workers.
pub async fn start(client: kube::Client, config: Config) -> Result<Handle> {
    for dir in [config.root_dir.clone(), config.containers_dir(), config.pods_dir(), config.runtime_dir()] {
        std::fs::create_dir_all(&dir).map_err(|source| Error::Dir { path: dir.clone(), source })?;
    }
    // Other users of the host may pass through the pods dir but not list it (a `hostUsers: false`
    // pod's root, nobody on the host, opens its netns under it); each pod's `volumes` is 0750.
    let pods = config.pods_dir();
    std::fs::set_permissions(&pods, <std::fs::Permissions as std::os::unix::fs::PermissionsExt>::from_mode(0o711))
        .map_err(|source| Error::Dir { path: pods.clone(), source })?;
    // The root of a `hostUsers: false` pod is nobody on the host: it must be able to pass
    // through to its rootfs and idmapped mounts under the runtime's dir (containerd's 0711).
    for dir in [config.root_dir.clone(), config.runtime_dir()] {
        traversable(&dir).map_err(|source| Error::Dir { path: dir.clone(), source })?;
    }
    let images = kaji_image::Store::open(
        config.images_dir(),
        kaji_image::StoreOptions { insecure_registries: config.insecure_registries.clone(), ..Default::default() },
    )?;
    let runtime = runtime::Runtime::new(&config)?;
    let metrics = Arc::new(metrics::Metrics::default());
    let (stop, stop_rx) = watch::channel(false);
    let config = Arc::new(config);
    let network = config.network.clone().map(|settings| network::Network::new(&config, settings));
    let manager = pods::Manager::new(client.clone(), config.clone(), images, runtime, metrics.clone(), network.clone());
    let server_addr = match config.server_addr {
        Some(addr) => {
            let tls = config.server_tls.as_ref().map(http::Tls::server_config).transpose()?;
            let listener =
                tokio::net::TcpListener::bind(addr).await.map_err(|source| Error::Listen { addr, source })?;
            let bound = listener.local_addr().map_err(|source| Error::Listen { addr, source })?;
            tokio::spawn(http::serve(listener, manager.clone(), tls, stop_rx.clone()));
            Some(bound)
        }
        None => None,
    };
    if let Some(addr) = config.healthz_addr {
        let listener = tokio::net::TcpListener::bind(addr).await.map_err(|source| Error::Listen { addr, source })?;
        tokio::spawn(http::serve_healthz(listener, stop_rx.clone()));
    }
    let mut node_config = (*config).clone();
    if let Some(addr) = server_addr {
        node_config.server_addr = Some(addr);
    }
    let node = node::Node::new(client.clone(), Arc::new(node_config));
    let posted = node.register().await?;
    let task = tokio::spawn(async move {
        let heartbeat = tokio::spawn(node.run(posted, stop_rx.clone()));
        if let Some(net) = network {
            tokio::spawn(net.run(client.clone(), stop_rx.clone()));
        }
        manager.run(stop_rx).await;
        heartbeat.abort();
        Ok(())
    });
    Ok(Handle { server_addr, stop, task })
}
