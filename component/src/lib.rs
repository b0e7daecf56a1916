//! What every kaji control-plane binary shares: the API client from flags, tracing setup,
//! SIGTERM handling, an election identity, and Lease leader election.

pub mod duration;
pub mod events;
pub mod failover;
pub mod leader;
pub mod malloc;
pub mod reflector;
pub mod sdnotify;

use anyhow::Context;
use std::path::PathBuf;

/// How to reach the apiserver (`--master`, `--kubeconfig`); flatten into a binary's flags.
#[derive(clap::Args, Debug, Clone)]
pub struct ApiArgs {
    /// API server URL (e.g. https://127.0.0.1:6443); overrides the kubeconfig's server. Several,
    /// comma-separated, for several apiservers: the client moves to a live one when its own
    /// dies (through a local balancer, see `failover`).
    #[arg(long)]
    pub master: Option<String>,
    /// Kubeconfig file; default: $KUBECONFIG, ~/.kube/config, or in-cluster.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
}

/// Where a pod's projected ServiceAccount token, CA and namespace are.
pub const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// A config with the pod's ServiceAccount credentials in `dir` (the token file is re-read as it
/// is refreshed), or with none when `dir` has no token; the server is set by the caller.
fn in_pod_config(dir: &std::path::Path) -> anyhow::Result<kube::Config> {
    let mut config = kube::Config::new("http://127.0.0.1".parse()?);
    let token = dir.join("token");
    if token.exists() {
        config.auth_info.token_file = Some(token.to_string_lossy().into_owned());
        let ca = dir.join("ca.crt");
        if let Ok(pem) = std::fs::read_to_string(&ca) {
            let certs = kaji_pki::cert::certs(&pem, "ca.crt").with_context(|| format!("reading {}", ca.display()))?;
            config.root_cert = Some(certs.into_iter().map(|c| c.to_vec()).collect());
        }
    }
    Ok(config)
}

impl ApiArgs {
    /// A kube-rs client for these flags that sends `user_agent` ("<binary>/<version>"): the
    /// apiserver records the writes of a client that names no fieldManager under the
    /// User-Agent's product, as Kubernetes does (kube-rs sends none of its own).
    pub async fn client(&self, user_agent: &str) -> anyhow::Result<kube::Client> {
        Ok(kube::Client::try_from(self.config(user_agent).await?)?)
    }

    /// The kube-rs config [`ApiArgs::client`] builds a client from.
    pub async fn config(&self, user_agent: &str) -> anyhow::Result<kube::Config> {
        kaji_pki::install_crypto_provider();
        let mut config = match &self.kubeconfig {
            Some(path) => {
                let kc =
                    kube::config::Kubeconfig::read_from(path).with_context(|| format!("reading {}", path.display()))?;
                kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default()).await?
            }
            // In a pod, as client-go's BuildConfigFromFlags: the pod's ServiceAccount token and CA
            // with the given server (kaji-dns in the lab, where pods get no service variables).
            None if self.master.is_some() => in_pod_config(std::path::Path::new(SERVICE_ACCOUNT_DIR))?,
            None => kube::Config::infer().await.context("no kubeconfig or in-cluster config; pass --master")?,
        };
        if let Some(master) = &self.master {
            let urls: Vec<&str> = master.split(',').map(str::trim).filter(|u| !u.is_empty()).collect();
            if urls.len() > 1 {
                let first: http::Uri = urls[0].parse().with_context(|| format!("--master {}", urls[0]))?;
                let servers = failover::Servers::new(failover::resolve(&urls).await?)?;
                let local = failover::start(servers).await?;
                let scheme = first.scheme_str().unwrap_or("http");
                config.cluster_url = format!("{scheme}://{local}").parse()?;
                // TLS still ends at the apiserver: check its certificate for the servers' name.
                if config.tls_server_name.is_none() {
                    config.tls_server_name = first.host().map(str::to_string);
                }
            } else {
                config.cluster_url = master.parse().with_context(|| format!("--master {master}"))?;
            }
        }
        // kube-rs builds its TLS connector even for a plain-HTTP apiserver, and without a CA it
        // loads the system's roots — which a minimal pod image (kaji-dns) does not have, so the
        // client failed to build. Plain HTTP trusts no certificate: give it an empty set.
        if config.cluster_url.scheme_str() == Some("http") && config.root_cert.is_none() {
            config.root_cert = Some(Vec::new());
        }
        let value = http::HeaderValue::from_str(user_agent).with_context(|| format!("user agent {user_agent:?}"))?;
        config.headers.push((http::header::USER_AGENT, value));
        Ok(config)
    }
}

/// Leader-election flags (client-go's defaults); the lease name stays with each binary, whose
/// default differs.
#[derive(clap::Args, Debug, Clone)]
pub struct LeaderArgs {
    /// Take a Lease before acting, so only one of several instances acts.
    #[arg(long)]
    pub leader_elect: bool,
    #[arg(long, default_value = "kube-system")]
    pub leader_elect_resource_namespace: String,
    /// How long a lease lasts without renewal (a duration: 15s, or plain seconds).
    #[arg(long, default_value = "15s", value_parser = duration::parse_duration)]
    pub leader_elect_lease_duration: std::time::Duration,
    /// How long the leader keeps trying to renew before it gives up.
    #[arg(long, default_value = "10s", value_parser = duration::parse_duration)]
    pub leader_elect_renew_deadline: std::time::Duration,
    /// The time between acquire/renew attempts.
    #[arg(long, default_value = "2s", value_parser = duration::parse_duration)]
    pub leader_elect_retry_period: std::time::Duration,
}

impl LeaderArgs {
    /// The election these flags ask for (None without `--leader-elect`), on lease `lease_name`;
    /// durations that would allow two leaders are refused, as client-go refuses them.
    pub fn election(&self, lease_name: &str, component: &str) -> anyhow::Result<Option<leader::LeaderElection>> {
        if !self.leader_elect {
            return Ok(None);
        }
        let election = leader::LeaderElection {
            lease_name: lease_name.to_string(),
            namespace: self.leader_elect_resource_namespace.clone(),
            identity: identity(component),
            lease_duration: self.leader_elect_lease_duration,
            renew_deadline: self.leader_elect_renew_deadline,
            retry_period: self.leader_elect_retry_period,
        };
        election.validate().map_err(anyhow::Error::msg)?;
        Ok(Some(election))
    }
}

/// Install the tracing subscriber (`RUST_LOG`, default info; JSON lines if asked).
pub fn init_tracing(json: bool) {
    init_tracing_with(json, "info,libcgroups=error");
}

/// Install the tracing subscriber with `default` as the filter when `RUST_LOG` is unset (e.g.
/// to quiet a library that logs every request at info).
pub fn init_tracing_with(json: bool, default: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| default.into());
    if json {
        tracing_subscriber::fmt().with_env_filter(filter).json().init();
    } else {
        tracing_subscriber::fmt().with_env_filter(filter).init();
    }
}

/// Called once a component serves: tells systemd it is ready (`READY=1`, for `Type=notify`
/// units), and on SIGTERM or SIGINT logs `what`, tells systemd it is stopping and sends `true` on
/// `stop`.
pub fn stop_on_signal(stop: tokio::sync::watch::Sender<bool>, what: &'static str) {
    sdnotify::notify("READY=1");
    tokio::spawn(async move {
        let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(s) => s,
            Err(e) => {
                tracing::error!(error = %e, "cannot listen for SIGTERM");
                return;
            }
        };
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
        tracing::info!("shutting down: {what}");
        sdnotify::notify("STOPPING=1");
        let _ = stop.send(true);
    });
}

/// A leader-election identity: the host name (or `component`) plus a random suffix.
pub fn identity(component: &str) -> String {
    let host = std::fs::read_to_string("/etc/hostname").map(|h| h.trim().to_string()).unwrap_or_default();
    format!("{}_{:016x}", if host.is_empty() { component } else { &host }, fastrand::u64(..))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn the_client_names_itself_in_the_user_agent() -> anyhow::Result<()> {
        let args = ApiArgs { master: Some("http://127.0.0.1:1".into()), kubeconfig: None };
        let config = args.config("kaji-test/1.2.3").await?;
        let ua: Vec<&http::HeaderValue> =
            config.headers.iter().filter(|(k, _)| k == http::header::USER_AGENT).map(|(_, v)| v).collect();
        assert_eq!(ua, ["kaji-test/1.2.3"]);
        assert_eq!(config.cluster_url.to_string(), "http://127.0.0.1:1/");
        assert!(args.config("bad\nagent").await.is_err());
        Ok(())
    }

    #[test]
    fn leader_flags_take_kubernetes_durations_and_plain_seconds() {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Flags {
            #[command(flatten)]
            leader: LeaderArgs,
        }
        let f = Flags::try_parse_from([
            "x",
            "--leader-elect",
            "--leader-elect-lease-duration=15s",
            "--leader-elect-renew-deadline",
            "10",
        ])
        .expect("parses");
        let e = f.leader.election("kube-scheduler", "kaji-scheduler").expect("valid").expect("elected");
        assert_eq!(
            (e.lease_duration, e.renew_deadline, e.retry_period),
            (Duration::from_secs(15), Duration::from_secs(10), Duration::from_secs(2))
        );
        assert!(Flags::try_parse_from(["x", "--leader-elect-retry-period=2d"]).is_err());
        // Durations that would let two schedulers lead are refused before anything starts.
        for bad in [
            ["--leader-elect-lease-duration=500ms", "--leader-elect-renew-deadline=400ms"],
            ["--leader-elect-lease-duration=10s", "--leader-elect-renew-deadline=10s"],
            ["--leader-elect-renew-deadline=2s", "--leader-elect-retry-period=2s"],
            ["--leader-elect-retry-period=0s", "--leader-elect-lease-duration=15s"],
        ] {
            let f = Flags::try_parse_from(["x", "--leader-elect", bad[0], bad[1]]).expect("parses");
            assert!(f.leader.election("kube-scheduler", "kaji-scheduler").is_err(), "{bad:?}");
        }
        let off = Flags::try_parse_from(["x", "--leader-elect-lease-duration=1s"]).expect("parses");
        assert!(off.leader.election("kube-scheduler", "kaji-scheduler").expect("not checked when off").is_none());
    }

    #[tokio::test]
    async fn a_plain_http_apiserver_needs_no_trust_store() -> anyhow::Result<()> {
        // A pod image without system CA certificates must still get a client for http://.
        let plain = ApiArgs { master: Some("http://10.0.0.1:7001".into()), kubeconfig: None };
        assert_eq!(plain.config("kaji-test/1").await?.root_cert, Some(Vec::new()));
        plain.client("kaji-test/1").await?;
        // https keeps the system's roots (or the kubeconfig's CA): nothing is trusted by default.
        let tls = ApiArgs { master: Some("https://10.0.0.1:6443".into()), kubeconfig: None };
        assert_eq!(tls.config("kaji-test/1").await?.root_cert, None);
        Ok(())
    }

    #[tokio::test]
    async fn several_masters_go_through_a_local_balancer() -> anyhow::Result<()> {
        let args = ApiArgs { master: Some("http://127.0.0.1:1, http://127.0.0.1:2".into()), kubeconfig: None };
        let config = args.config("kaji-test/1").await?;
        let url = config.cluster_url.to_string();
        assert!(url.starts_with("http://127.0.0.1:") && !url.ends_with(":1/"), "{url}");
        assert_eq!(config.tls_server_name.as_deref(), Some("127.0.0.1"));
        Ok(())
    }
}
