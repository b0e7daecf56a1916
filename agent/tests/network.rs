//! The pod network between two real nodes: each node a network namespace made by this test
//! (joined by a veth pair, 172.31.0.1 and .2), each running the kaji-agent binary with
//! `--pod-network bridge` inside it. The apiserver and the registry run in this process and are
//! reached from the nodes through a forwarder listening inside node A's namespace. Nothing
//! touches the machine's own network namespace.

mod common;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{bail, Context};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

use common::{forward_into, require_root, AGENT, WAIT};

const A_IP: &str = "172.31.0.1";
const B_IP: &str = "172.31.0.2";
const CLUSTER_CIDR: &str = "10.244.0.0/16";

fn ip(args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new("ip").args(args).output().context("cannot run ip (apt-get install iproute2)")?;
    if !out.status.success() {
        bail!("ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn in_ns(ns: &str, program: &str, args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new("nsenter")
        .arg(format!("--net=/run/netns/{ns}"))
        .arg("--")
        .arg(program)
        .args(args)
        .output()
        .context("cannot run nsenter (util-linux)")?;
    if !out.status.success() {
        bail!("{program} {} in {ns}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

struct Agent {
    ns: String,
    name: String,
    node_ip: &'static str,
    root: PathBuf,
    cgroup_parent: String,
    log: PathBuf,
    child: Option<Child>,
}

impl Agent {
    fn start(&mut self, registry: &str) -> anyhow::Result<()> {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(&self.log)?;
        let child = Command::new("nsenter")
            .arg(format!("--net=/run/netns/{}", self.ns))
            .arg("--")
            .arg(AGENT)
            .args(["--master", &format!("http://{A_IP}:6443"), "--node-name", &self.name, "--node-ip", self.node_ip])
            .arg("--root-dir")
            .arg(&self.root)
            .args(["--cgroup-parent", &self.cgroup_parent, "--pod-network", "bridge", "--cluster-cidr", CLUSTER_CIDR])
            .args(["--insecure-registry", registry, "--eviction-hard", "nodefs.available<0%", "--port", "0"])
            .args(["--healthz-port", "10248", "--healthz-bind-address", "0.0.0.0"])
            .env("RUST_LOG", "info,kaji_agent=debug")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("cannot start kaji-agent under nsenter")?;
        self.child = Some(child);
        Ok(())
    }

    /// SIGTERM and wait: the agent leaves its containers running for the next one.
    fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ =
                nix::sys::signal::kill(nix::unistd::Pid::from_raw(c.id() as i32), nix::sys::signal::Signal::SIGTERM);
            let deadline = std::time::Instant::now() + WAIT;
            while std::time::Instant::now() < deadline {
                if let Ok(Some(_)) = c.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn cleanup(&self) -> anyhow::Result<String> {
        let root = self.root.display().to_string();
        in_ns(&self.ns, AGENT, &["--root-dir", &root, "--cgroup-parent", &self.cgroup_parent, "cleanup"])
    }

    fn leases(&self) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(self.root.join("network/ipam"))
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.parse::<std::net::Ipv4Addr>().is_ok())
            .collect();
        v.sort();
        v
    }
}

struct Lab {
    namespaces: Vec<String>,
    agents: Vec<Agent>,
    dir: tempfile::TempDir,
}

impl Lab {
    fn logs(&self) -> String {
        self.agents
            .iter()
            .map(|a| format!("--- {}\n{}", a.name, std::fs::read_to_string(&a.log).unwrap_or_default()))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        for a in &mut self.agents {
            a.stop();
            let _ = a.cleanup();
        }
        for ns in &self.namespaces {
            let _ = ip(&["netns", "del", ns]);
        }
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let dir = self.dir.path().display().to_string();
        for t in mounts.lines().filter_map(|l| l.split(' ').nth(4)).filter(|t| t.starts_with(&dir)) {
            let _ = nix::mount::umount2(t, nix::mount::MntFlags::MNT_DETACH);
        }
    }
}

/// Two node namespaces joined by a veth pair.
fn make_lab() -> anyhow::Result<Lab> {
    let id = std::process::id();
    let (a, b) = (format!("kaji-nettest-{id}-a"), format!("kaji-nettest-{id}-b"));
    let dir = tempfile::Builder::new().prefix("kaji-nettest").tempdir_in("/tmp")?;
    let mut lab = Lab { namespaces: vec![], agents: vec![], dir };
    for ns in [&a, &b] {
        ip(&["netns", "add", ns])?;
        lab.namespaces.push(ns.clone());
        ip(&["-n", ns, "link", "set", "lo", "up"])?;
    }
    let (va, vb) = (format!("kn{id}a"), format!("kn{id}b"));
    ip(&["-n", &a, "link", "add", &va, "type", "veth", "peer", "name", &vb, "netns", &b])?;
    ip(&["-n", &a, "link", "set", &va, "name", "eth0"])?;
    ip(&["-n", &b, "link", "set", &vb, "name", "eth0"])?;
    for (ns, addr) in [(&a, A_IP), (&b, B_IP)] {
        ip(&["-n", ns, "addr", "add", &format!("{addr}/24"), "dev", "eth0"])?;
        ip(&["-n", ns, "link", "set", "eth0", "up"])?;
    }
    for (ns, name, node_ip) in [(&a, "a", A_IP), (&b, "b", B_IP)] {
        lab.agents.push(Agent {
            ns: ns.clone(),
            name: format!("net-{name}-{id}"),
            node_ip,
            root: lab.dir.path().join(format!("node-{name}")),
            cgroup_parent: format!("kaji-nettest-{id}-{name}"),
            log: lab.dir.path().join(format!("agent-{name}.log")),
            child: None,
        });
    }
    Ok(lab)
}

async fn wait_for<T>(what: &str, mut f: impl AsyncFnMut() -> anyhow::Result<Option<T>>) -> anyhow::Result<T> {
    let deadline = tokio::time::Instant::now() + WAIT;
    let mut last = None;
    while tokio::time::Instant::now() < deadline {
        match f().await {
            Ok(Some(v)) => return Ok(v),
            Ok(None) => {}
            Err(e) => last = Some(e),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    bail!("timed out waiting for {what}{}", last.map(|e| format!(": {e:#}")).unwrap_or_default())
}

struct Cluster {
    client: kube::Client,
    image: String,
}

impl Cluster {
    fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), "default")
    }

    async fn pod(&self, name: &str, node: &str, spec: serde_json::Value) -> anyhow::Result<()> {
        let mut spec = spec;
        spec["nodeName"] = json!(node);
        spec["terminationGracePeriodSeconds"] = json!(1);
        for c in spec["containers"].as_array_mut().into_iter().flatten() {
            c["image"] = json!(self.image);
        }
        let pod: Pod = serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec}))?;
        self.pods().create(&PostParams::default(), &pod).await?;
        Ok(())
    }

    /// A web server pod answering `body`; returns its pod IP once it runs.
    async fn server(&self, name: &str, node: &str, body: &str, host_port: Option<u16>) -> anyhow::Result<String> {
        let mut port = json!({"containerPort": 8080});
        if let Some(hp) = host_port {
            port["hostPort"] = json!(hp);
        }
        let script = format!("mkdir -p /w && echo {body} > /w/index.html && exec httpd -f -p 8080 -h /w");
        self.pod(
            name,
            node,
            json!({"containers": [{"name": "web", "command": ["sh", "-c", script], "ports": [port]}]}),
        )
        .await?;
        self.running_ip(name).await
    }

    async fn running_ip(&self, name: &str) -> anyhow::Result<String> {
        wait_for(&format!("{name} running with a pod IP"), async || {
            let p = self.pods().get(name).await?;
            let s = p.status.unwrap_or_default();
            let running =
                s.container_statuses.iter().flatten().all(|c| c.ready) && s.phase.as_deref() == Some("Running");
            Ok(s.pod_ip.filter(|_| running))
        })
        .await
    }

    /// Runs `wget -O- url` in a fresh pod on `node`; returns what it fetched (its termination
    /// message) or fails with the pod's last state.
    async fn fetch(&self, name: &str, node: &str, url: &str) -> anyhow::Result<String> {
        // (busybox wget -T segfaults in Debian's busybox-static; timeout bounds it instead.)
        let script = format!("timeout 10 wget -q -O /dev/termination-log {url}");
        self.pod(
            name,
            node,
            json!({"restartPolicy": "Never", "containers": [{"name": "get", "command": ["sh", "-c", script]}]}),
        )
        .await?;
        let pod = wait_for(&format!("{name} to finish"), async || {
            let p = self.pods().get(name).await?;
            let phase = p.status.as_ref().and_then(|s| s.phase.clone()).unwrap_or_default();
            Ok((phase == "Succeeded" || phase == "Failed").then_some(p))
        })
        .await?;
        let status = pod.status.unwrap_or_default();
        let term = status
            .container_statuses
            .iter()
            .flatten()
            .find_map(|c| c.state.as_ref()?.terminated.clone())
            .context("no terminated state")?;
        if status.phase.as_deref() != Some("Succeeded") {
            bail!("{name} on {node} could not fetch {url}: exit {} {:?}", term.exit_code, term.message);
        }
        self.delete(name).await?;
        Ok(term.message.unwrap_or_default().trim().to_string())
    }

    async fn delete(&self, name: &str) -> anyhow::Result<()> {
        let _ = self.pods().delete(name, &DeleteParams::default()).await?;
        wait_for(&format!("{name} deleted"), async || Ok(self.pods().get_opt(name).await?.is_none().then_some(())))
            .await
    }
}

fn in_cidr(ip: &str, cidr: &str) -> bool {
    let (Ok(ip), Ok(net)) = (ip.parse::<std::net::Ipv4Addr>(), cidr.parse::<ipnet::Ipv4Net>()) else { return false };
    net.contains(&ip)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pods_on_two_nodes_reach_each_other_and_nothing_is_left_behind() {
    require_root();
    let mut lab = make_lab().expect("node namespaces");
    let result = scenario(&mut lab).await;
    if let Err(e) = &result {
        panic!("{e:#}\n{}", lab.logs());
    }
    // Cleanup of both nodes leaves no pod network behind in their namespaces.
    for a in &mut lab.agents {
        a.stop();
        a.cleanup().expect("kaji-agent cleanup");
        let links = in_ns(&a.ns, "ip", &["-o", "link"]).expect("links");
        assert!(!links.contains("kaji0") && !links.contains(" veth"), "links left on {}: {links}", a.name);
        let nat = in_ns(&a.ns, "iptables", &["-w", "5", "-t", "nat", "-S"]).expect("iptables");
        assert!(!nat.contains("KAJI-"), "nat rules left on {}: {nat}", a.name);
        let routes = in_ns(&a.ns, "ip", &["route", "show", "proto", "0x4b"]).expect("routes");
        assert!(routes.trim().is_empty(), "routes left on {}: {routes}", a.name);
        assert!(!a.root.join("network").exists(), "IPAM state left on {}", a.name);
        let parent = PathBuf::from("/").join(&a.cgroup_parent);
        let left: Vec<_> = kaji_runtime::cgroups::directories(&parent)
            .unwrap_or_default()
            .into_iter()
            .filter(|d| d.exists())
            .collect();
        assert!(left.is_empty(), "cgroups left: {left:?}");
    }
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let dir = lab.dir.path().display().to_string();
    assert!(!mounts.contains(&dir), "mounts left under {dir}");
}

async fn scenario(lab: &mut Lab) -> anyhow::Result<()> {
    let _ = tracing_subscriber::fmt().with_env_filter(tracing_subscriber::EnvFilter::from_default_env()).try_init();
    let data = tempfile::tempdir()?;
    let server = kaji_apiserver::start(kaji_apiserver::Config::new("127.0.0.1:0".parse()?, data.path().into())).await?;
    let client = kube::Client::try_from(kube::Config::new(format!("http://{}", server.addr).parse()?))?;
    let registry = kaji_image::testing::Registry::start()?;
    kaji_image::testing::push_busybox(&registry.addr, "kaji/busybox:1").await?;
    let ns_a = lab.agents[0].ns.clone();
    let ns_a_path = PathBuf::from(format!("/run/netns/{ns_a}"));
    let _forwarders = [
        forward_into(&ns_a_path, format!("{A_IP}:6443").parse()?, server.addr)?,
        forward_into(&ns_a_path, format!("{A_IP}:5000").parse()?, registry.addr.parse()?)?,
    ];
    let reg = format!("{A_IP}:5000");
    for a in &mut lab.agents {
        a.start(&reg)?;
    }
    let cluster = Cluster { client: client.clone(), image: format!("{reg}/kaji/busybox:1") };
    let nodes: Api<Node> = Api::all(client.clone());
    // The node IPAM controller's part, done by hand: a podCIDR per node.
    let cidrs = ["10.244.1.0/24", "10.244.2.0/24"];
    for (a, cidr) in lab.agents.iter().zip(cidrs) {
        wait_for(&format!("node {} registered", a.name), async || Ok(nodes.get_opt(&a.name).await?.map(|_| ())))
            .await?;
        nodes
            .patch(
                &a.name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"podCIDR": cidr, "podCIDRs": [cidr]}})),
            )
            .await?;
    }
    let (node_a, node_b) = (lab.agents[0].name.clone(), lab.agents[1].name.clone());

    // A server on each node, a client on A reaching both: across nodes and within one.
    let ip_b = cluster.server("web-b", &node_b, "hello-from-b", Some(9090)).await?;
    let ip_a = cluster.server("web-a", &node_a, "hello-from-a", None).await?;
    assert!(in_cidr(&ip_b, cidrs[1]), "pod IP {ip_b} outside node b's {}", cidrs[1]);
    assert!(in_cidr(&ip_a, cidrs[0]), "pod IP {ip_a} outside node a's {}", cidrs[0]);
    assert_eq!(cluster.fetch("get-1", &node_a, &format!("http://{ip_b}:8080/")).await?, "hello-from-b");
    assert_eq!(cluster.fetch("get-2", &node_a, &format!("http://{ip_a}:8080/")).await?, "hello-from-a");
    assert_eq!(cluster.fetch("get-3", &node_b, &format!("http://{ip_a}:8080/")).await?, "hello-from-a");
    // A pod reaches the other node's own address (the agent's /healthz there)...
    assert_eq!(cluster.fetch("get-4", &node_a, &format!("http://{B_IP}:10248/healthz")).await?, "ok");
    // ...and a hostPort on node b answers from node a's pods.
    assert_eq!(cluster.fetch("get-5", &node_a, &format!("http://{B_IP}:9090/")).await?, "hello-from-b");

    // Pod IPs are unique: every running pod's address once in its node's IPAM.
    let leases_b = lab.agents[1].leases();
    assert_eq!(leases_b, vec![ip_b.clone()], "node b's addresses");

    // Restarting node b's agent keeps its pods reachable at the same address.
    lab.agents[1].stop();
    lab.agents[1].start(&reg)?;
    assert_eq!(cluster.fetch("get-6", &node_a, &format!("http://{ip_b}:8080/")).await?, "hello-from-b");
    assert_eq!(cluster.running_ip("web-b").await?, ip_b);

    // Deleting the pods frees their addresses.
    cluster.delete("web-a").await?;
    cluster.delete("web-b").await?;
    for a in &lab.agents {
        let name = a.name.clone();
        wait_for(&format!("{name}'s addresses released"), async || Ok(a.leases().is_empty().then_some(()))).await?;
    }
    drop(server);
    Ok(())
}
