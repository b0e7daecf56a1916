//! kaji-apiserver: parse flags, install tracing, run until SIGTERM/SIGINT.

use anyhow::Context;
use clap::Parser;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use tracing_subscriber::fmt::writer::BoxMakeWriter;

/// kaji's Kubernetes-compatible API server (embedded durable store or etcd, watch cache).
#[derive(Parser, Debug)]
#[command(name = "kaji-apiserver", version)]
struct Args {
    /// Address to serve HTTPS on.
    #[arg(long, default_value = "0.0.0.0")]
    bind_address: IpAddr,
    /// Port to serve HTTPS on (0 picks a free one).
    #[arg(long, default_value_t = 6443)]
    secure_port: u16,
    /// The serving certificate (PEM; the chain after it is sent too).
    #[arg(long)]
    tls_cert_file: Option<PathBuf>,
    /// The serving certificate's key (PEM).
    #[arg(long)]
    tls_private_key_file: Option<PathBuf>,
    /// Client certificates signed by this CA authenticate: CN is the user, each O a group.
    #[arg(long)]
    client_ca_file: Option<PathBuf>,
    /// The certificate the apiserver presents to the nodes' agents (logs, exec, attach,
    /// port-forward); with it, agents are reached over HTTPS only.
    #[arg(long, requires = "kubelet_client_key")]
    kubelet_client_certificate: Option<PathBuf>,
    #[arg(long, requires = "kubelet_client_certificate")]
    kubelet_client_key: Option<PathBuf>,
    /// Verify the agents' serving certificates against this CA (unverified without it).
    #[arg(long, requires = "kubelet_client_certificate")]
    kubelet_certificate_authority: Option<PathBuf>,
    /// Address of the plain-HTTP port.
    #[arg(long, default_value = "127.0.0.1")]
    insecure_bind_address: IpAddr,
    /// Serve plain HTTP on this port instead of HTTPS (0 picks a free one), where every request
    /// without a token is the superuser `system:unsecured`: for tests only, never reachable.
    #[arg(long)]
    insecure_port: Option<u16>,
    /// Static bearer tokens: a CSV file of token,user,uid[,"group1,group2"].
    #[arg(long)]
    token_auth_file: Option<PathBuf>,
    /// Let requests without credentials in as system:anonymous on /healthz, /livez, /readyz
    /// and /version (401 everywhere else).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    anonymous_auth: bool,
    /// Let bootstrap tokens (`<id>.<secret>`, held by Secrets of type bootstrap.kubernetes.io/token
    /// in kube-system) authenticate as system:bootstrap:<id> in system:bootstrappers: how a new
    /// node asks for its certificate.
    #[arg(long)]
    enable_bootstrap_token_auth: bool,
    /// ServiceAccount tokens are signed with this key (PEM, ECDSA P-256 PKCS#8 `PRIVATE KEY`;
    /// `kaji pki init` writes sa.key); without it TokenRequest is not served.
    #[arg(long)]
    service_account_signing_key_file: Option<PathBuf>,
    /// Public keys (PEM) that also verify ServiceAccount tokens, e.g. a previous signing key's
    /// (repeatable); the signing key's own public half always does.
    #[arg(long)]
    service_account_key_file: Vec<PathBuf>,
    /// The `iss` of the tokens issued and the only one accepted.
    #[arg(long, default_value = kaji_apiserver::serviceaccount::DEFAULT_ISSUER)]
    service_account_issuer: String,
    /// Comma-separated audiences the API accepts tokens for; default: the issuer.
    #[arg(long, value_delimiter = ',')]
    api_audiences: Vec<String>,
    /// The longest a requested token may live (24h, 3600s, 1h0m0s); longer requests are
    /// shortened. Default: no limit.
    #[arg(long)]
    service_account_max_token_expiration: Option<String>,
    /// Comma-separated authorizers, tried in order (the first allow wins; members of
    /// system:masters are always allowed): AlwaysAllow, AlwaysDeny, Node, RBAC.
    #[arg(long, default_value = "AlwaysAllow")]
    authorization_mode: String,
    /// Address the rest of the cluster reaches this apiserver at (the `kubernetes` Service's
    /// endpoint). Default: the bound address, or 127.0.0.1 when that is 0.0.0.0.
    #[arg(long)]
    advertise_address: Option<IpAddr>,
    /// How the `kubernetes` Service's Endpoints are kept: `lease` (every live apiserver, through
    /// Leases in kube-system; the default with etcd) or `none` (this apiserver only; the default
    /// with the embedded store, which serves one apiserver).
    #[arg(long, value_parser = ["lease", "none"])]
    endpoint_reconciler_type: Option<String>,
    /// Comma-separated admission plugins to run: ServiceAccount (default account, projected
    /// token volume), NodeRestriction (nodes change only their own objects), DenyServiceExternalIPs
    /// (no new Service externalIPs; off by default, as in Kubernetes). Kubernetes enables
    /// ServiceAccount by default; here it needs the controller manager's default accounts, so it
    /// is asked for (kaji lab does).
    #[arg(long, default_value = "")]
    enable_admission_plugins: String,
    /// Directory of the embedded store.
    #[arg(long, default_value = "/var/lib/kaji/apiserver")]
    data_dir: PathBuf,
    /// Where objects are kept: `embedded` (redb in --data-dir, one machine) or `etcd`
    /// (--etcd-servers; several apiservers can share it).
    #[arg(long, value_enum, default_value_t = StorageKind::Embedded)]
    storage: StorageKind,
    /// etcd client URLs, comma-separated (http://host:port, or https:// with --etcd-cafile).
    #[arg(long, value_delimiter = ',')]
    etcd_servers: Vec<String>,
    /// Put before every etcd key. kaji's keys are /registry/<resource>/<namespace>/<name>, as
    /// Kubernetes'; a prefix lets several clusters share one etcd.
    #[arg(long, default_value = "")]
    etcd_prefix: String,
    /// CA bundle that signed the etcd members' serving certificates.
    #[arg(long)]
    etcd_cafile: Option<PathBuf>,
    /// Client certificate for etcd (with --etcd-keyfile), when etcd requires one.
    #[arg(long)]
    etcd_certfile: Option<PathBuf>,
    /// Private key of --etcd-certfile.
    #[arg(long)]
    etcd_keyfile: Option<PathBuf>,
    /// How often the store's history is compacted, like kube-apiserver's flag: 300, 300s, 5m,
    /// 1h; 0 turns compaction off. Default 5m with etcd, 60s with the embedded store.
    #[arg(long)]
    etcd_compaction_interval: Option<String>,
    /// CIDR that Service ClusterIPs are allocated from.
    #[arg(long, default_value = "10.96.0.0/12")]
    service_cluster_ip_range: String,
    /// Port range for NodePort Services, as FIRST-LAST.
    #[arg(long, default_value = "30000-32767")]
    service_node_port_range: String,
    /// Most watch events kept per resource in memory for watches that resume (those of the last
    /// 75 s are kept, and at least 100, up to this many).
    #[arg(long, default_value_t = 10_000)]
    watch_cache_size: usize,
    /// Most store revisions of event history kept after compaction; each compaction also drops
    /// the history older than the previous one (so at most two compaction intervals are kept).
    #[arg(long, default_value_t = 100_000)]
    event_history: u64,
    /// How long Events are kept after their last write, like kube-apiserver's flag (1h0m0s,
    /// 30m, 3600); 0 keeps them forever.
    #[arg(long, default_value = "1h0m0s")]
    event_ttl: String,
    /// An EncryptionConfiguration (apiserver.config.k8s.io/v1, YAML or JSON): the resources it
    /// names are encrypted at rest with its first provider (aesgcm or identity); reads try all.
    #[arg(long)]
    encryption_provider_config: Option<PathBuf>,
    /// An AdmissionConfiguration (apiserver.config.k8s.io/v1, YAML or JSON); its `PodSecurity`
    /// entry (a PodSecurityConfiguration, inline or by path) sets the cluster's default levels
    /// and exemptions.
    #[arg(long)]
    admission_control_config_file: Option<PathBuf>,
    /// An audit Policy (audit.k8s.io/v1, YAML or JSON); without it nothing is audited.
    #[arg(long)]
    audit_policy_file: Option<PathBuf>,
    /// Where audit events go, one JSON line each ("-": stdout); without it none are written.
    #[arg(long)]
    audit_log_path: Option<PathBuf>,
    /// Megabytes the audit log may reach before it is rotated (0: 100, lumberjack's default).
    #[arg(long, default_value_t = 0)]
    audit_log_maxsize: u64,
    /// Rotated audit logs kept (0: all).
    #[arg(long, default_value_t = 0)]
    audit_log_maxbackup: usize,
    /// Days rotated audit logs are kept (0: forever).
    #[arg(long, default_value_t = 0)]
    audit_log_maxage: u64,
    /// Seconds to wait for a node's agent to accept a connection and begin its answer (pods/log).
    #[arg(long, default_value_t = 10)]
    agent_timeout: u64,
    /// The largest request body accepted (larger: 413); also the bytes all `copy` operations of
    /// one JSON patch may add. 0: no limit.
    #[arg(long, default_value_t = 3 * 1024 * 1024)]
    max_request_body_bytes: usize,
    /// Most read-only requests served at once (long-running ones aside); over it, 429. 0: no limit.
    #[arg(long, default_value_t = 400)]
    max_requests_inflight: usize,
    /// Most mutating requests served at once; over it, 429. 0: no limit.
    #[arg(long, default_value_t = 200)]
    max_mutating_requests_inflight: usize,
    /// How long a request that is not long-running (watch, exec, attach, port-forward, logs)
    /// may take before it is answered 504 Timeout (1m0s, 30s).
    #[arg(long, default_value = "1m0s")]
    request_timeout: String,
    /// Write the bound address (host:port) to this file once listening.
    #[arg(long)]
    address_file: Option<PathBuf>,
    /// Log as JSON lines instead of text.
    #[arg(long)]
    log_json: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum StorageKind {
    Embedded,
    Etcd,
}

fn parse_range(s: &str) -> anyhow::Result<(u16, u16)> {
    let (a, b) = s.split_once('-').context("expected FIRST-LAST")?;
    let (a, b): (u16, u16) = (a.trim().parse()?, b.trim().parse()?);
    anyhow::ensure!(a <= b, "first port must not exceed last");
    Ok((a, b))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into());
    // `--audit-log-path -` has stdout to itself: the log lines go to stderr then (as klog's do).
    let audit_to_stdout = args.audit_log_path.as_deref() == Some(std::path::Path::new("-"));
    let writer =
        if audit_to_stdout { BoxMakeWriter::new(std::io::stderr) } else { BoxMakeWriter::new(std::io::stdout) };
    if args.log_json {
        tracing_subscriber::fmt().with_env_filter(filter).with_writer(writer).json().init();
    } else {
        tracing_subscriber::fmt().with_env_filter(filter).with_writer(writer).init();
    }
    let bind = match args.insecure_port {
        Some(port) => SocketAddr::new(args.insecure_bind_address, port),
        None => SocketAddr::new(args.bind_address, args.secure_port),
    };
    let mut config = kaji_apiserver::Config::new(bind, args.data_dir);
    if args.insecure_port.is_none() {
        let (Some(cert_file), Some(key_file)) = (args.tls_cert_file, args.tls_private_key_file) else {
            anyhow::bail!("HTTPS needs --tls-cert-file and --tls-private-key-file (`kaji pki init` makes them); --insecure-port serves plain HTTP for tests");
        };
        config.tls = Some(kaji_apiserver::Serving { cert_file, key_file });
    }
    if let (Some(client_cert_file), Some(client_key_file)) = (args.kubelet_client_certificate, args.kubelet_client_key)
    {
        config.kubelet_tls = Some(kaji_apiserver::KubeletTls {
            client_cert_file,
            client_key_file,
            ca_file: args.kubelet_certificate_authority,
        });
    }
    config.authentication.client_ca_file = args.client_ca_file;
    config.authentication.token_auth_file = args.token_auth_file;
    config.authentication.anonymous = args.anonymous_auth;
    config.authentication.bootstrap_tokens = args.enable_bootstrap_token_auth;
    config.service_accounts = kaji_apiserver::serviceaccount::Config {
        signing_key_file: args.service_account_signing_key_file,
        key_files: args.service_account_key_file,
        issuer: args.service_account_issuer,
        api_audiences: args.api_audiences.into_iter().filter(|a| !a.is_empty()).collect(),
        max_expiration_seconds: match &args.service_account_max_token_expiration {
            Some(d) => Some(
                kaji_component::duration::parse_duration(d)
                    .map_err(anyhow::Error::msg)
                    .context("--service-account-max-token-expiration")?
                    .as_secs() as i64,
            ),
            None => None,
        },
    };
    config.authorization_modes =
        kaji_apiserver::auth::AuthorizationMode::parse_list(&args.authorization_mode).map_err(anyhow::Error::msg)?;
    config.admission_plugins = kaji_apiserver::admission::Plugin::parse_list(&args.enable_admission_plugins)
        .map_err(anyhow::Error::msg)
        .context("--enable-admission-plugins")?;
    config.service_cluster_ip_range = args.service_cluster_ip_range;
    config.service_node_port_range = parse_range(&args.service_node_port_range).context("--service-node-port-range")?;
    config.watch_cache_size = args.watch_cache_size.max(1);
    config.event_history = args.event_history;
    config.agent_timeout = std::time::Duration::from_secs(args.agent_timeout.max(1));
    if args.storage == StorageKind::Etcd {
        anyhow::ensure!(!args.etcd_servers.is_empty(), "--storage etcd needs --etcd-servers");
        config.storage = kaji_apiserver::StorageConfig::Etcd(kaji_apiserver::storage::etcd::EtcdConfig {
            servers: args.etcd_servers,
            prefix: args.etcd_prefix,
            ca_file: args.etcd_cafile,
            cert_file: args.etcd_certfile,
            key_file: args.etcd_keyfile,
        });
        config.compaction_interval = std::time::Duration::from_secs(300);
    }
    config.advertise_address = args.advertise_address;
    config.endpoint_leases = match args.endpoint_reconciler_type.as_deref() {
        Some(t) => t == "lease",
        None => args.storage == StorageKind::Etcd,
    };
    config.event_ttl =
        kaji_component::duration::parse_duration(&args.event_ttl).map_err(anyhow::Error::msg).context("--event-ttl")?;
    if let Some(i) = &args.etcd_compaction_interval {
        config.compaction_interval = kaji_component::duration::parse_duration(i)
            .map_err(anyhow::Error::msg)
            .context("--etcd-compaction-interval")?;
    }
    config.encryption_provider_config = args.encryption_provider_config;
    if let Some(f) = &args.admission_control_config_file {
        config.pod_security = kaji_apiserver::admission::pod_security::config::Config::load(f)
            .context("--admission-control-config-file")?;
    }
    config.limits.max_request_body_bytes = args.max_request_body_bytes;
    config.limits.max_requests_inflight = args.max_requests_inflight;
    config.limits.max_mutating_requests_inflight = args.max_mutating_requests_inflight;
    config.limits.request_timeout = kaji_component::duration::parse_duration(&args.request_timeout)
        .map_err(anyhow::Error::msg)
        .context("--request-timeout")?;
    config.audit = kaji_apiserver::audit::Config {
        policy_file: args.audit_policy_file,
        log: args.audit_log_path.map(|path| kaji_apiserver::audit::backend::LogConfig {
            path,
            max_size_mb: args.audit_log_maxsize,
            max_backups: args.audit_log_maxbackup,
            max_age_days: args.audit_log_maxage,
        }),
    };
    let server = kaji_apiserver::start(config).await?;
    if let Some(f) = &args.address_file {
        std::fs::write(f, server.addr.to_string()).with_context(|| format!("failed to write {}", f.display()))?;
    }
    kaji_component::stop_on_signal(server.stopper(), "closing watches and draining requests");
    server.wait().await?;
    tracing::info!("stopped");
    Ok(())
}
