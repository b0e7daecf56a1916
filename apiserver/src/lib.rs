//! kaji-apiserver: a Kubernetes-compatible REST API over a durable store, with a watch cache.

pub mod admission;
pub mod agent_client;
pub mod audit;
pub mod auth;
pub mod cache;
pub mod endpoints;
pub mod event_ttl;
pub mod fieldmanager;
pub mod http;
pub mod metrics;
pub mod peers;
pub mod registry;
pub mod serviceaccount;
pub mod storage;

use anyhow::Context;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Where objects are kept.
#[derive(Debug, Clone, Default)]
pub enum StorageConfig {
    /// redb in `data_dir` (one machine).
    #[default]
    Embedded,
    /// An etcd cluster, shared by every apiserver pointed at it.
    Etcd(storage::etcd::EtcdConfig),
}

/// Everything `run` needs; the binary fills it from flags.
#[derive(Debug, Clone)]
pub struct Config {
    pub bind: SocketAddr,
    pub data_dir: PathBuf,
    pub storage: StorageConfig,
    pub service_cluster_ip_range: String,
    pub service_node_port_range: (u16, u16),
    /// Events kept per resource in the watch cache.
    pub watch_cache_size: usize,
    /// Most store revisions of history kept after compaction (each compaction also drops
    /// everything older than the previous one, as kube-apiserver's compactor does).
    pub event_history: u64,
    pub compaction_interval: Duration,
    /// How long an Event lives after its last write (`--event-ttl`); zero keeps them forever.
    pub event_ttl: Duration,
    /// How long connecting to a node's agent and waiting for its answer to begin may take.
    pub agent_timeout: Duration,
    /// Who may authenticate how.
    pub authentication: auth::authn::Config,
    /// `--authorization-mode`, in order (a union: the first allow wins).
    pub authorization_modes: Vec<auth::AuthorizationMode>,
    /// The address other members of the cluster reach this apiserver at (the `kubernetes`
    /// Service's endpoint); default: the bound address, or 127.0.0.1 when bound to all.
    pub advertise_address: Option<std::net::IpAddr>,
    /// Keep the `kubernetes` Endpoints listing every live apiserver through leases
    /// (`--endpoint-reconciler-type=lease`); otherwise it lists this one.
    pub endpoint_leases: bool,
    /// `--enable-admission-plugins` (run in Kubernetes' order).
    pub admission_plugins: Vec<admission::Plugin>,
    /// PodSecurity's defaults and exemptions, from `--admission-control-config-file`.
    pub pod_security: admission::pod_security::config::Config,
    /// HTTPS with this certificate (chain) and key; None: plain HTTP, the insecure port.
    pub tls: Option<Serving>,
    /// How to reach the nodes' agents: None is plain HTTP (test agents).
    pub kubelet_tls: Option<KubeletTls>,
    /// `--encryption-provider-config`: what is encrypted at rest, with which keys.
    pub encryption_provider_config: Option<PathBuf>,
    /// `--service-account-*`: the keys, issuer and audiences of ServiceAccount tokens.
    pub service_accounts: serviceaccount::Config,
    /// `--max-request-body-bytes`, `--max-requests-inflight`, `--max-mutating-requests-inflight`,
    /// `--request-timeout`, and how long a connection may take to send its headers.
    pub limits: http::limits::Limits,
    /// `--audit-policy-file` and `--audit-log-*`.
    pub audit: audit::Config,
}

/// `--tls-cert-file` and `--tls-private-key-file`.
#[derive(Debug, Clone)]
pub struct Serving {
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
}

/// `--kubelet-client-certificate`/`--kubelet-client-key` and `--kubelet-certificate-authority`.
#[derive(Debug, Clone)]
pub struct KubeletTls {
    pub client_cert_file: PathBuf,
    pub client_key_file: PathBuf,
    /// Without it the agents' certificates are not verified (kube-apiserver's default).
    pub ca_file: Option<PathBuf>,
}

impl KubeletTls {
    fn client_config(&self) -> anyhow::Result<tokio_rustls::rustls::ClientConfig> {
        let cert = kaji_pki::files::read(&self.client_cert_file)?;
        let key = kaji_pki::files::read(&self.client_key_file)?;
        let identity = Some((cert.as_str(), key.as_str()));
        Ok(match &self.ca_file {
            Some(ca) => kaji_pki::tls::client_config(&kaji_pki::files::read(ca)?, identity)?,
            None => {
                tracing::warn!("no --kubelet-certificate-authority: the agents' serving certificates are not verified");
                kaji_pki::tls::unverified_client_config(identity)?
            }
        })
    }
}

impl Config {
    pub fn new(bind: SocketAddr, data_dir: PathBuf) -> Self {
        Self {
            bind,
            data_dir,
            storage: StorageConfig::Embedded,
            service_cluster_ip_range: "10.96.0.0/12".into(),
            service_node_port_range: (30000, 32767),
            watch_cache_size: 10_000,
            event_history: 100_000,
            compaction_interval: Duration::from_secs(60),
            event_ttl: Duration::from_secs(3600),
            agent_timeout: Duration::from_secs(10),
            authentication: auth::authn::Config::default(),
            authorization_modes: vec![auth::AuthorizationMode::AlwaysAllow],
            advertise_address: None,
            endpoint_leases: false,
            admission_plugins: Vec::new(),
            pod_security: Default::default(),
            tls: None,
            kubelet_tls: None,
            encryption_provider_config: None,
            audit: audit::Config::default(),
            service_accounts: serviceaccount::Config::default(),
            limits: http::limits::Limits::default(),
        }
    }
}

/// A started server: its address and the handle to stop it.
pub struct Server {
    pub addr: SocketAddr,
    stop: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
}

impl Server {
    /// Close watches, stop accepting, and wait for in-flight requests.
    pub async fn shutdown(self) -> anyhow::Result<()> {
        let _ = self.stop.send(true);
        self.task.await.context("server task panicked")?
    }

    /// Wait until the server ends by itself.
    pub async fn wait(self) -> anyhow::Result<()> {
        self.task.await.context("server task panicked")?
    }

    pub fn stopper(&self) -> tokio::sync::watch::Sender<bool> {
        self.stop.clone()
    }
}

/// Open the store, bootstrap, bind, and serve in the background.
pub async fn start(config: Config) -> anyhow::Result<Server> {
    let sa_tokens = config.service_accounts.load().context("failed to load the service account keys")?;
    let store = open_store(&config)?;
    let listener =
        tokio::net::TcpListener::bind(config.bind).await.with_context(|| format!("failed to bind {}", config.bind))?;
    let addr = listener.local_addr()?;
    let advertise = match config.advertise_address {
        Some(ip) => SocketAddr::new(ip, addr.port()),
        None if addr.ip().is_unspecified() => SocketAddr::from(([127, 0, 0, 1], addr.port())),
        None => addr,
    };
    let ips = registry::alloc::IpAllocator::new(&config.service_cluster_ip_range, store.clone())
        .map_err(|e| anyhow::anyhow!("--service-cluster-ip-range: {e}"))?;
    let (first_port, last_port) = config.service_node_port_range;
    let ports = registry::alloc::PortAllocator::new(first_port, last_port, store.clone());
    let admission = auth::admission(&store);
    let bootstrap = registry::Registry {
        store: store.clone(),
        cache: placeholder_cache(&store)?,
        ips,
        ports,
        admission,
        // Only the apiserver's own writes go through the bootstrap registry.
        authorizer: Arc::new(auth::AlwaysAllow),
        max_request_body_bytes: config.limits.max_request_body_bytes,
    };
    bootstrap.bootstrap(advertise, config.endpoint_leases).map_err(|e| anyhow::anyhow!("bootstrap failed: {e}"))?;
    auth::authz::bootstrap::reconcile(&bootstrap)
        .map_err(|e| anyhow::anyhow!("failed to reconcile the default RBAC policy: {e}"))?;
    let cache =
        cache::Cache::start(store.clone(), config.watch_cache_size).context("failed to load the watch cache")?;
    let (stop, shutdown) = tokio::sync::watch::channel(false);
    let parts = Arc::new(auth::authz::Parts::start(&cache, shutdown.clone()));
    let authz = auth::authorizer(&config.authorization_modes, Some(&parts)).map_err(anyhow::Error::msg)?;
    let admission = admission::chain(
        &config.admission_plugins,
        &admission::Deps {
            store: store.clone(),
            cache: cache.clone(),
            rbac: parts.rbac.clone(),
            authorizer: authz.clone(),
            pod_security: config.pod_security.clone(),
        },
    );
    let registry = registry::Registry { cache: cache.clone(), admission, authorizer: authz.clone(), ..bootstrap };
    // Plain HTTP is the explicit insecure port: everyone there is the insecure superuser.
    let fallback = match config.tls {
        Some(_) => auth::authn::Fallback::public_paths(),
        None => auth::authn::Fallback::InsecureSuperuser,
    };
    let mut authentication = config.authentication.clone();
    authentication.service_accounts = sa_tokens.clone();
    let authn = auth::authn::chain(&authentication, fallback, &cache).context("failed to set up authentication")?;
    let kubelet_tls = config.kubelet_tls.as_ref().map(KubeletTls::client_config).transpose()?;
    let security =
        http::pipeline::Security { authn, authz, modes: config.authorization_modes.clone(), parts: parts.clone() };
    let metrics = metrics::Metrics::default();
    let audit = audit::Audit::start(&config.audit, metrics.audit.clone()).context("failed to set up audit logging")?;
    let state = Arc::new(http::AppState {
        security,
        registry,
        cache,
        agents: agent_client::AgentClient::new(config.agent_timeout, kubelet_tls),
        metrics,
        shutdown: shutdown.clone(),
        advertise: advertise.to_string(),
        service_account_tokens: sa_tokens,
        limits: config.limits,
        inflight: http::limits::Inflight::new(&config.limits),
        audit: audit.map(Arc::new),
    });
    spawn_compactor(store.clone(), config.event_history, config.compaction_interval, shutdown.clone());
    spawn_allocator_repair(state.clone(), shutdown.clone());
    // A tick of a tenth of the TTL (at most a minute): Events outlive it by at most that much.
    let sweep = (config.event_ttl / 10).clamp(Duration::from_secs(1), Duration::from_secs(60));
    event_ttl::spawn(store.clone(), config.event_ttl, sweep, shutdown.clone());
    let peers = config.endpoint_leases.then(|| spawn_endpoint_reconciler(state.clone(), advertise, shutdown.clone()));
    let audit = state.audit.clone();
    let app = http::router(state);
    let header_read_timeout = config.limits.header_read_timeout;
    let served = match &config.tls {
        None => tokio::spawn(serve(listener, app, header_read_timeout, shutdown.clone())),
        Some(tls) => {
            let ca = config.authentication.client_ca_file.as_deref().map(kaji_pki::files::read).transpose()?;
            let client_auth = match ca {
                Some(ca_pem) => kaji_pki::tls::ClientAuth::VerifyLater { ca_pem },
                None => kaji_pki::tls::ClientAuth::None,
            };
            let server_config = kaji_pki::tls::server_config(
                &kaji_pki::files::read(&tls.cert_file)?,
                &kaji_pki::files::read(&tls.key_file)?,
                &client_auth,
            )
            .context("failed to set up TLS")?;
            let listener = kaji_pki::listener::TlsListener::new(listener, server_config)?;
            tokio::spawn(serve(listener, app, header_read_timeout, shutdown.clone()))
        }
    };
    let task = tokio::spawn(async move {
        served.await.context("server task panicked")??;
        if let Some(p) = peers {
            // It gives this apiserver's lease up and leaves the Endpoints first.
            let _ = tokio::time::timeout(Duration::from_secs(5), p).await;
        }
        if let Some(audit) = audit {
            // The last requests' events are written before the process exits.
            let flushed = tokio::task::spawn_blocking(move || audit.flush(Duration::from_secs(5))).await;
            if !flushed.unwrap_or(false) {
                tracing::warn!("audit events still queued at exit were not all written");
            }
        }
        // Dropping the last store handle closes redb cleanly; every commit is already durable.
        drop(store);
        Ok(())
    });
    let scheme = if config.tls.is_some() { "https" } else { "http (insecure port)" };
    tracing::info!(addr = %addr, scheme, data_dir = %config.data_dir.display(), "apiserver listening");
    Ok(Server { addr, stop, task })
}

/// The configured backend; nothing above the `Store` trait knows which one it got.
fn open_store(config: &Config) -> anyhow::Result<Arc<dyn storage::Store>> {
    // Read before the store opens: a bad config stops the start, and nothing is written with it.
    let encryption = match &config.encryption_provider_config {
        Some(path) => Some(storage::encryption::Encryption::load(path).map_err(anyhow::Error::msg)?),
        None => None,
    };
    let store: Arc<dyn storage::Store> = match &config.storage {
        StorageConfig::Embedded => Arc::new(
            storage::redb::RedbStore::open(&config.data_dir)
                .with_context(|| format!("failed to open the store in {}", config.data_dir.display()))?,
        ),
        StorageConfig::Etcd(etcd) => {
            let store = storage::etcd::EtcdStore::connect(etcd)
                .with_context(|| format!("failed to reach etcd at {}", etcd.servers.join(",")))?;
            tracing::info!(servers = %etcd.servers.join(","), prefix = %etcd.prefix, "storing objects in etcd");
            Arc::new(store)
        }
    };
    Ok(match encryption {
        Some(enc) => {
            tracing::info!("encrypting at rest what the encryption provider config names");
            Arc::new(storage::encryption::EncryptedStore::new(store, enc))
        }
        None => store,
    })
}

/// Serve `app` on `listener` until `shutdown`; each connection's [`Peer`] reaches the filters.
async fn serve<L>(
    listener: L,
    app: axum::Router,
    header_read_timeout: Duration,
    shutdown: tokio::sync::watch::Receiver<bool>,
) -> anyhow::Result<()>
where
    L: axum::serve::Listener,
    L::Addr: http::serve::IntoPeer,
{
    http::serve::serve(listener, app, header_read_timeout, shutdown).await;
    Ok(())
}

/// The bootstrap registry writes straight to the store; its cache is never read.
fn placeholder_cache(store: &Arc<dyn storage::Store>) -> anyhow::Result<Arc<cache::Cache>> {
    cache::Cache::unstarted(store.clone())
}

/// The lease endpoint reconciler (`peers`): renew, reconcile, repeat; leave on shutdown.
fn spawn_endpoint_reconciler(
    state: Arc<http::AppState>,
    advertise: SocketAddr,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    let rec = Arc::new(peers::Reconciler::new(advertise));
    tracing::info!(identity = %rec.id, address = %advertise, "apiserver lease endpoint reconciler");
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(peers::RENEW);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = async { let _ = shutdown.wait_for(|s| *s).await; } => {
                    let (s, r) = (state.clone(), rec.clone());
                    let _ = tokio::task::spawn_blocking(move || r.leave(s.registry.store.as_ref())).await;
                    return;
                }
            }
            let (s, r) = (state.clone(), rec.clone());
            let res = tokio::task::spawn_blocking(move || {
                let store = s.registry.store.as_ref();
                r.renew(store).and_then(|()| r.reconcile(store, false))
            });
            match res.await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::warn!(error = %e, "apiserver lease / endpoints reconcile failed"),
                Err(e) => tracing::warn!(error = %e, "endpoint reconciler task failed"),
            }
        }
    })
}

/// Kubernetes' allocator repair loops: every 3 minutes, stored claims are matched with Services.
fn spawn_allocator_repair(state: Arc<http::AppState>, mut shutdown: tokio::sync::watch::Receiver<bool>) {
    tokio::spawn(async move {
        let every = Duration::from_secs(180);
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = shutdown.changed() => return,
            }
            let s = state.clone();
            match tokio::task::spawn_blocking(move || registry::services::repair_allocators(&s.registry)).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::warn!(error = ?e, "allocator repair failed"),
                Err(e) => tracing::warn!(error = %e, "allocator repair task failed"),
            }
        }
    });
}

/// kube-apiserver's rule: each tick compacts to the revision the previous tick saw, so history
/// spans one to two intervals whatever the write rate; `keep` caps it at that many revisions.
fn compaction_target(previous_tick: u64, current: u64, keep: u64) -> u64 {
    previous_tick.max(current.saturating_sub(keep))
}

fn spawn_compactor(
    store: Arc<dyn storage::Store>,
    keep: u64,
    every: Duration,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    if every.is_zero() {
        return; // --etcd-compaction-interval=0: someone else compacts (as with kube-apiserver)
    }
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        let mut previous = 0;
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = shutdown.changed() => return,
            }
            let current = store.current_revision();
            let target = compaction_target(previous, current, keep);
            previous = current;
            if target > store.compacted_revision() {
                let s = store.clone();
                match tokio::task::spawn_blocking(move || s.compact(target)).await {
                    Ok(Ok(())) => tracing::debug!(revision = target, "compacted store history"),
                    Ok(Err(e)) => tracing::warn!(error = %e, "compaction failed"),
                    Err(e) => tracing::warn!(error = %e, "compaction task failed"),
                }
            }
        }
    });
}

#[cfg(test)]
mod tests {
    #[test]
    fn compaction_keeps_one_interval_of_history_at_most_keep_revisions() {
        // First tick: nothing seen before, only the cap applies.
        assert_eq!(super::compaction_target(0, 500, 100_000), 0);
        assert_eq!(super::compaction_target(0, 250_000, 100_000), 150_000);
        // Later ticks drop what the previous tick saw, however few revisions ago that was.
        assert_eq!(super::compaction_target(480, 500, 100_000), 480);
        assert_eq!(super::compaction_target(480, 400_000, 100_000), 300_000);
    }
}
