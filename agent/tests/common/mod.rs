//! A real node for the agent's integration tests: an in-process apiserver, Debian's registry
//! with a busybox image pushed to it, and the agent itself (root only: namespaces, cgroups,
//! overlayfs) with its own root directory and cgroup parent, checked for leftovers on drop.

#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use anyhow::{bail, Context};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use serde_json::{json, Value};

/// Every wait is bounded, so a bug fails the test instead of hanging it.
pub const WAIT: Duration = Duration::from_secs(30);
pub const AGENT: &str = env!("CARGO_BIN_EXE_kaji-agent");
static COUNTER: AtomicU32 = AtomicU32::new(0);

pub struct Node {
    pub server: kaji_apiserver::Server,
    pub client: kube::Client,
    pub registry: kaji_image::testing::Registry,
    pub image: String,
    pub config: kaji_agent::Config,
    pub agent: Option<kaji_agent::Handle>,
    pub dir: tempfile::TempDir,
    /// With TLS: the cluster's certificates (apiserver and agent both serve HTTPS).
    pub pki: Option<kaji_pki::layout::Layout>,
    _data: tempfile::TempDir,
}

/// Root-only: fail (never skip) with what is missing.
pub fn require_root() {
    assert!(nix::unistd::geteuid().is_root(), "the agent's integration tests need root (namespaces, cgroups, mounts)");
    assert!(std::path::Path::new("/bin/busybox").exists(), "needs /bin/busybox: apt-get install -y busybox-static");
}

impl Node {
    pub async fn start() -> anyhow::Result<Node> {
        Self::start_with(false).await
    }

    /// As on a real node: the apiserver serves HTTPS (x509 client certificates, its kubelet
    /// client certificate towards the agent), the agent speaks as `system:node:<name>` and
    /// serves its port over HTTPS.
    pub async fn start_secure() -> anyhow::Result<Node> {
        Self::start_with(true).await
    }

    async fn start_with(secure: bool) -> anyhow::Result<Node> {
        Self::start_configured(secure, |_, _| {}).await
    }

    /// [`Node::start_secure`] with the apiserver's config changed by `tweak` (given the PKI).
    pub async fn start_secure_with(
        tweak: impl FnOnce(&mut kaji_apiserver::Config, &kaji_pki::layout::Layout),
    ) -> anyhow::Result<Node> {
        Self::start_configured(true, tweak).await
    }

    async fn start_configured(
        secure: bool,
        tweak: impl FnOnce(&mut kaji_apiserver::Config, &kaji_pki::layout::Layout),
    ) -> anyhow::Result<Node> {
        require_root();
        // RUST_LOG=kaji_agent=debug shows what the agent did when a test fails.
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .try_init();
        let data = tempfile::tempdir()?;
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let node_name = format!("node-{}-{n}", std::process::id());
        let mut api_config = kaji_apiserver::Config::new("127.0.0.1:0".parse()?, data.path().into());
        let pki = secure.then(|| kaji_pki::layout::Layout::new(data.path().join("pki-root")));
        if let Some(pki) = &pki {
            pki.init(&kaji_pki::layout::InitSpec { server: "https://127.0.0.1".into(), ..Default::default() })?;
            api_config.tls = Some(kaji_apiserver::Serving {
                cert_file: pki.pki("apiserver.crt"),
                key_file: pki.pki("apiserver.key"),
            });
            api_config.authentication.client_ca_file = Some(pki.ca_cert());
            api_config.kubelet_tls = Some(kaji_apiserver::KubeletTls {
                client_cert_file: pki.pki("apiserver-kubelet-client.crt"),
                client_key_file: pki.pki("apiserver-kubelet-client.key"),
                ca_file: Some(pki.ca_cert()),
            });
            tweak(&mut api_config, pki);
        }
        let server = kaji_apiserver::start(api_config).await?;
        let client = match &pki {
            None => kube::Client::try_from(kube::Config::new(format!("http://{}", server.addr).parse()?))?,
            Some(pki) => {
                kaji_pki::install_crypto_provider();
                let ca = pki.load_ca()?;
                let url = format!("https://{}", server.addr);
                let files = pki.issue_node(&ca, &node_name, &["127.0.0.1".parse()?], &url)?;
                let admin = pki.kubeconfig("admin");
                pki.write_kubeconfig(&ca, &admin, "kubernetes-admin", &["system:masters"], &url)?;
                let kc = kube::config::Kubeconfig::read_from(&files.kubeconfig)?;
                kube::Client::try_from(kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?)?
            }
        };
        let registry = kaji_image::testing::Registry::start()?;
        kaji_image::testing::push_busybox(&registry.addr, "kaji/busybox:1").await?;
        let image = format!("{}/kaji/busybox:1", registry.addr);
        let dir = tempfile::Builder::new().prefix("kaji-agent-test").tempdir_in("/tmp")?;
        let mut config = kaji_agent::Config::new(node_name.clone(), "127.0.0.1".parse()?, dir.path().join("root"));
        if let Some(pki) = &pki {
            let node_dir = pki.node_dir(&node_name);
            config.server_tls = Some(kaji_agent::http::Tls {
                cert_file: node_dir.join("kubelet.crt"),
                key_file: node_dir.join("kubelet.key"),
                client_ca_file: pki.ca_cert(),
            });
        }
        config.cgroup_parent = format!("kaji-agent-test-{}-{n}", std::process::id());
        config.shim_binary = PathBuf::from(AGENT);
        config.server_addr = Some("127.0.0.1:0".parse()?);
        config.lease_renew_interval = Duration::from_secs(2);
        let mut node = Node { server, client, registry, image, config, agent: None, dir, pki, _data: data };
        node.start_agent().await?;
        Ok(node)
    }

    pub async fn start_agent(&mut self) -> anyhow::Result<()> {
        let handle = kaji_agent::start(self.client.clone(), self.config.clone()).await?;
        self.agent = Some(handle);
        Ok(())
    }

    pub async fn stop_agent(&mut self) -> anyhow::Result<()> {
        if let Some(h) = self.agent.take() {
            h.shutdown().await?;
        }
        Ok(())
    }

    pub fn server_url(&self) -> String {
        format!("http://{}", self.agent.as_ref().and_then(|a| a.server_addr).expect("agent serving"))
    }

    pub fn pods(&self, ns: &str) -> Api<Pod> {
        Api::namespaced(self.client.clone(), ns)
    }

    /// Creates a pod bound to this node from `spec` (containers default to the busybox image).
    pub async fn pod(&self, name: &str, mut spec: Value) -> anyhow::Result<Pod> {
        spec["nodeName"] = json!(self.config.node_name);
        for list in ["containers", "initContainers"] {
            for c in spec[list].as_array_mut().into_iter().flatten() {
                if c.get("image").is_none() {
                    c["image"] = json!(self.image);
                }
            }
        }
        let pod: Pod = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"},
            "spec": spec,
        }))?;
        Ok(self.pods("default").create(&PostParams::default(), &pod).await?)
    }

    /// Polls the pod until `check` accepts it.
    pub async fn wait_pod(&self, name: &str, what: &str, check: impl Fn(&Pod) -> bool) -> anyhow::Result<Pod> {
        let deadline = tokio::time::Instant::now() + WAIT;
        let mut last = None;
        while tokio::time::Instant::now() < deadline {
            if let Some(p) = self.pods("default").get_opt(name).await? {
                if check(&p) {
                    return Ok(p);
                }
                last = Some(p);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        bail!("pod {name} never became {what}; last seen: {}", serde_json::to_string_pretty(&last.map(|p| p.status))?)
    }

    /// Waits up to `within` for the node to have nothing left (see [`Node::leftovers`]), then
    /// asserts it has nothing left.
    pub async fn assert_nothing_left(&self, within: std::time::Duration) {
        let deadline = tokio::time::Instant::now() + within;
        while !self.leftovers().is_empty() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        assert_eq!(self.leftovers(), Vec::<String>::new());
    }

    pub async fn wait_gone(&self, name: &str) -> anyhow::Result<()> {
        let deadline = tokio::time::Instant::now() + WAIT;
        while tokio::time::Instant::now() < deadline {
            if self.pods("default").get_opt(name).await?.is_none() {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        bail!("pod {name} was never deleted")
    }

    /// GET on the agent's server (HTTP/1.0, read to the end): status code and body.
    pub async fn get(&self, path: &str) -> anyhow::Result<(u16, String)> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let addr = self.agent.as_ref().and_then(|a| a.server_addr).context("agent not serving")?;
        let mut s = tokio::net::TcpStream::connect(addr).await?;
        s.write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes()).await?;
        let mut buf = Vec::new();
        tokio::time::timeout(WAIT, s.read_to_end(&mut buf)).await??;
        let text = String::from_utf8_lossy(&buf).into_owned();
        let (head, body) = text.split_once("\r\n\r\n").context("no HTTP header end")?;
        let code = head.split_whitespace().nth(1).context("no status")?.parse()?;
        Ok((code, body.to_string()))
    }

    /// Runtime containers, pod directories, cgroups and mounts still present.
    pub fn leftovers(&self) -> Vec<String> {
        let mut left = Vec::new();
        let root = &self.config.root_dir;
        for sub in ["containers", "pods", "runtime"] {
            for e in std::fs::read_dir(root.join(sub)).into_iter().flatten().flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if name != ".runc" {
                    left.push(format!("{sub}/{name}"));
                }
            }
        }
        let parent = PathBuf::from("/").join(&self.config.cgroup_parent);
        for d in kaji_runtime::cgroups::directories(&parent).unwrap_or_default() {
            let mut stack = vec![d];
            while let Some(d) = stack.pop() {
                for e in std::fs::read_dir(&d).into_iter().flatten().flatten().filter(|e| e.path().is_dir()) {
                    let name = e.file_name().to_string_lossy().into_owned();
                    if name.starts_with("pod") {
                        left.push(e.path().display().to_string());
                    }
                    stack.push(e.path());
                }
            }
        }
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let dir = self.dir.path().display().to_string();
        left.extend(mounts.lines().filter(|l| l.contains(&dir)).map(str::to_string));
        left
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if let Some(agent) = &self.agent {
            let _ = agent.stopper().send(true);
        }
        // Whatever a failed test left: containers (by the runtime, which kills by pid), mounts,
        // cgroups — never anything outside this node's own directories.
        let rt = kaji_runtime::Native::new(self.config.runtime_dir(), AGENT);
        use kaji_runtime::ContainerRuntime;
        for id in rt.list().unwrap_or_default() {
            let _ = rt.delete(&id, true);
        }
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let dir = self.dir.path().display().to_string();
        let mut targets: Vec<String> = mounts
            .lines()
            .filter_map(|l| l.split(' ').nth(4))
            .filter(|t| t.starts_with(&dir))
            .map(str::to_string)
            .collect();
        targets.sort_by_key(|t| std::cmp::Reverse(t.len()));
        for t in targets {
            let _ = nix::mount::umount2(t.as_str(), nix::mount::MntFlags::MNT_DETACH);
        }
        let _ = kaji_agent::cgroup::remove(&PathBuf::from("/").join(&self.config.cgroup_parent));
    }
}

/// The named container's status.
pub fn container<'a>(p: &'a Pod, name: &str) -> Option<&'a k8s_openapi::api::core::v1::ContainerStatus> {
    let s = p.status.as_ref()?;
    s.container_statuses.iter().flatten().chain(s.init_container_statuses.iter().flatten()).find(|c| c.name == name)
}

pub fn phase(p: &Pod) -> &str {
    p.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("")
}

/// A listener bound to `listen` inside the network namespace at `ns` (a socket keeps the
/// namespace it was made in), forwarding every connection to `to` in this process's namespace:
/// how an agent in a namespace of its own reaches the test's apiserver and registry on loopback.
pub fn forward_into(
    ns: &std::path::Path,
    listen: std::net::SocketAddr,
    to: std::net::SocketAddr,
) -> anyhow::Result<Forwarder> {
    let ns = ns.to_path_buf();
    let listener = std::thread::spawn(move || -> anyhow::Result<std::net::TcpListener> {
        nix::sched::setns(std::fs::File::open(&ns)?, nix::sched::CloneFlags::CLONE_NEWNET)?;
        let l = std::net::TcpListener::bind(listen)?;
        l.set_nonblocking(true)?;
        Ok(l)
    })
    .join()
    .map_err(|_| anyhow::anyhow!("listener thread panicked"))??;
    let listener = tokio::net::TcpListener::from_std(listener)?;
    Ok(Forwarder(tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            tokio::spawn(async move {
                if let Ok(mut outbound) = tokio::net::TcpStream::connect(to).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    })))
}

/// Stops listening when dropped.
pub struct Forwarder(tokio::task::JoinHandle<()>);

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.0.abort();
    }
}
