//! Pod startup on one node: an in-process kaji apiserver, Debian's registry with the busybox
//! image, and the `kaji-agent` binary as its own process (so its RSS is its own). The agent runs
//! in a network namespace made by this bench (`kaji-bench-<pid>`, lo up), reaching the apiserver
//! and the registry through forwarders listening on the same loopback addresses inside it, and
//! its Node is given a podCIDR, so every pod gets its veth, address and routes from the agent's
//! bridge network — all of it inside that namespace, never the machine's. The image is pulled
//! once by a warm-up pod; then N pods (default 30) bound to the node are created at once and a
//! watch records when each is Running with its container ready. Reports p50/p99/max per pod
//! (create returned → Running seen through the watch), the time until all are Running, and the
//! agent's RSS idle and with the pods running. The agent is stopped, cleaned up (in the
//! namespace) and the namespace deleted at the end, also on failure or panic. Root only.
//!
//! `cargo bench -p kaji-agent --bench agent` (optional: `--pods 30`).

#[path = "../tests/common/mod.rs"]
mod common;

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::{watcher, WatchStreamExt};
use serde_json::json;

use common::{forward_into, require_root, AGENT};

const TIMEOUT: Duration = Duration::from_secs(120);
/// The node's podCIDR (the node IPAM controller's part, done by the bench).
const POD_CIDR: &str = "10.244.1.0/24";

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1).cloned())
}

fn ip(args: &[&str]) -> anyhow::Result<()> {
    let out = Command::new("ip").args(args).output().context("cannot run ip (apt-get install iproute2)")?;
    if !out.status.success() {
        bail!("ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(())
}

/// The bench's own network namespace, deleted on drop (also on error or panic).
struct NetNs {
    name: String,
}

impl NetNs {
    fn create(name: String) -> anyhow::Result<NetNs> {
        ip(&["netns", "add", &name])?;
        let ns = NetNs { name };
        ip(&["-n", &ns.name, "link", "set", "lo", "up"])?;
        Ok(ns)
    }

    fn path(&self) -> PathBuf {
        PathBuf::from(format!("/run/netns/{}", self.name))
    }
}

impl Drop for NetNs {
    fn drop(&mut self) {
        if let Err(e) = ip(&["netns", "del", &self.name]) {
            eprintln!("warning: {e:#}");
        }
    }
}

/// The `kaji-agent` process inside the namespace. On drop: SIGTERM (SIGKILL after a while),
/// `kaji-agent cleanup` in the same namespace, then whatever mounts and cgroups are still left
/// under its own root directory and cgroup parent.
struct Agent {
    child: Child,
    ns: PathBuf,
    root_dir: PathBuf,
    cgroup_parent: String,
}

impl Drop for Agent {
    fn drop(&mut self) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(30);
        while !matches!(self.child.try_wait(), Ok(Some(_))) {
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        // In the namespace: the cleanup also removes the bridge, routes and NAT rules there (and
        // fails rather than run in the machine's namespace if it is gone).
        let cleanup = Command::new("nsenter")
            .arg(format!("--net={}", self.ns.display()))
            .arg("--")
            .arg(AGENT)
            .arg("--root-dir")
            .arg(&self.root_dir)
            .args(["--cgroup-parent", &self.cgroup_parent, "cleanup"])
            .status();
        if !cleanup.map(|s| s.success()).unwrap_or(false) {
            eprintln!("warning: kaji-agent cleanup failed");
        }
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let dir = self.root_dir.display().to_string();
        let mut targets: Vec<&str> =
            mounts.lines().filter_map(|l| l.split(' ').nth(4)).filter(|t| t.starts_with(&dir)).collect();
        targets.sort_by_key(|t| std::cmp::Reverse(t.len()));
        for t in targets {
            let _ = nix::mount::umount2(t, nix::mount::MntFlags::MNT_DETACH);
        }
        let _ = kaji_agent::cgroup::remove(&PathBuf::from("/").join(&self.cgroup_parent));
    }
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:").map(|v| v.trim().trim_end_matches(" kB").trim().to_string()))
        })
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn running_and_ready(p: &Pod) -> bool {
    let s = p.status.as_ref();
    s.and_then(|s| s.phase.as_deref()) == Some("Running")
        && s.and_then(|s| s.container_statuses.as_ref()).is_some_and(|c| !c.is_empty() && c.iter().all(|c| c.ready))
}

fn pod(name: &str, node: &str, image: &str) -> anyhow::Result<Pod> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"bench": "agent"}},
        "spec": {"nodeName": node, "terminationGracePeriodSeconds": 1,
                 "containers": [{"name": "c", "image": image, "imagePullPolicy": "IfNotPresent",
                                 "command": ["sleep", "3600"]}]}
    }))?)
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}

/// When each named pod was first seen Running and Ready through a watch.
async fn wait_all(api: &Api<Pod>, names: &[String]) -> anyhow::Result<HashMap<String, Instant>> {
    let mut seen: HashMap<String, Instant> = HashMap::new();
    let cfg = watcher::Config::default().labels("bench=agent");
    let mut stream = watcher(api.clone(), cfg).applied_objects().boxed();
    let deadline = Instant::now() + TIMEOUT;
    while seen.len() < names.len() {
        let next = tokio::time::timeout(deadline.saturating_duration_since(Instant::now()), stream.try_next()).await;
        let Ok(Ok(Some(p))) = next else {
            bail!("only {} of {} pods running before the timeout", seen.len(), names.len())
        };
        let name = p.metadata.name.clone().unwrap_or_default();
        if names.contains(&name) && running_and_ready(&p) {
            seen.entry(name).or_insert_with(Instant::now);
        }
    }
    Ok(seen)
}

/// Waits for the agent to register the node, then gives it its podCIDR.
async fn assign_pod_cidr(client: &kube::Client, node: &str) -> anyhow::Result<()> {
    let nodes: Api<Node> = Api::all(client.clone());
    let deadline = Instant::now() + TIMEOUT;
    while nodes.get_opt(node).await?.is_none() {
        if Instant::now() > deadline {
            bail!("node {node} never registered");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let patch = json!({"spec": {"podCIDR": POD_CIDR, "podCIDRs": [POD_CIDR]}});
    nodes.patch(node, &PatchParams::default(), &Patch::Merge(patch)).await?;
    Ok(())
}

async fn run() -> anyhow::Result<()> {
    require_root();
    let n: usize = arg("--pods").map(|v| v.parse()).transpose()?.unwrap_or(30);
    let data = tempfile::tempdir()?;
    let server = kaji_apiserver::start(kaji_apiserver::Config::new("127.0.0.1:0".parse()?, data.path().into())).await?;
    let url = format!("http://{}", server.addr);
    let client = kube::Client::try_from(kube::Config::new(url.parse()?))?;
    let registry = kaji_image::testing::Registry::start()?;
    kaji_image::testing::push_busybox(&registry.addr, "kaji/busybox:1").await?;
    let image = format!("{}/kaji/busybox:1", registry.addr);
    let root = tempfile::Builder::new().prefix("kaji-agent-bench").tempdir_in("/tmp")?;
    let id = std::process::id();
    let node = format!("bench-{id}");
    let (root_dir, cgroup_parent) = (root.path().join("root"), format!("kaji-agent-bench-{id}"));
    // Dropped in reverse order, also on error or panic: the agent (stopped, then cleaned up inside
    // the namespace), the forwarders, the namespace.
    let netns = NetNs::create(format!("kaji-bench-{id}"))?;
    let registry_addr = registry.addr.parse()?;
    let _forwarders = [
        forward_into(&netns.path(), server.addr, server.addr)?,
        forward_into(&netns.path(), registry_addr, registry_addr)?,
    ];
    let agent = Agent {
        child: Command::new("nsenter")
            .arg(format!("--net={}", netns.path().display()))
            .arg("--")
            .arg(AGENT)
            .args(["--master", &url, "--node-name", &node, "--node-ip", "127.0.0.1", "--port", "0"])
            .args(["--healthz-port", "0"])
            .arg("--root-dir")
            .arg(&root_dir)
            .args(["--cgroup-parent", &cgroup_parent, "--eviction-hard", "nodefs.available<0%"])
            .args(["--pod-network", "bridge"])
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .spawn()
            .context("starting kaji-agent under nsenter")?,
        ns: netns.path(),
        root_dir,
        cgroup_parent,
    };
    // nsenter execs the agent: the child's pid is the agent's.
    let pid = agent.child.id();
    let api: Api<Pod> = Api::namespaced(client.clone(), "default");
    assign_pod_cidr(&client, &node).await?;

    // Warm-up: the image is pulled and unpacked once, so the measured pods find it present.
    api.create(&PostParams::default(), &pod("warmup", &node, &image)?).await?;
    wait_all(&api, &["warmup".to_string()]).await?;
    api.delete("warmup", &DeleteParams::default().grace_period(0)).await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let idle = rss_kib(pid);

    let names: Vec<String> = (0..n).map(|i| format!("p{i}")).collect();
    let t_all = Instant::now();
    let mut start = HashMap::new();
    let watch = {
        let (api, names) = (api.clone(), names.clone());
        tokio::spawn(async move { wait_all(&api, &names).await })
    };
    let creates = futures::stream::iter(names.iter().map(|name| {
        let (api, image, node) = (api.clone(), image.clone(), node.clone());
        async move {
            let p = pod(name, &node, &image)?;
            api.create(&PostParams::default(), &p).await?;
            Ok::<_, anyhow::Error>((name.clone(), Instant::now()))
        }
    }))
    .buffer_unordered(n)
    .try_collect::<Vec<_>>()
    .await?;
    start.extend(creates);
    let running = watch.await??;
    let all = running.values().max().map(|t| t.duration_since(t_all)).unwrap_or_default();
    let busy = rss_kib(pid);
    // The figures include the pod network: every pod holds an address out of the node's podCIDR.
    let cidr: ipnet::Ipv4Net = POD_CIDR.parse()?;
    for p in api.list(&Default::default()).await?.items {
        let addr = p.status.and_then(|s| s.pod_ip).and_then(|a| a.parse::<std::net::Ipv4Addr>().ok());
        if !addr.is_some_and(|a| cidr.contains(&a)) {
            bail!("pod {:?} has no address in {POD_CIDR}", p.metadata.name);
        }
    }
    // Per pod: from its create returning to Running+Ready seen through the watch.
    let mut per_pod: Vec<Duration> =
        running.iter().map(|(name, seen)| seen.saturating_duration_since(start[name])).collect();
    per_pod.sort();
    let create_spread = start.values().map(|t| t.duration_since(t_all)).max().unwrap_or_default();
    let cores = std::thread::available_parallelism().map(|c| c.get()).unwrap_or(1);
    println!("agent pod startup: {n} pods bound to one node at once, image present, pod network on, {cores} cores");
    println!(
        "  all Running+Ready after     {:>8.1} ms (creates done within {:.1} ms)",
        all.as_secs_f64() * 1e3,
        create_spread.as_secs_f64() * 1e3
    );
    println!(
        "  per pod (create → Running)  p50 {:.1} ms  p99 {:.1} ms  max {:.1} ms",
        pct(&per_pod, 0.5).as_secs_f64() * 1e3,
        pct(&per_pod, 0.99).as_secs_f64() * 1e3,
        pct(&per_pod, 1.0).as_secs_f64() * 1e3
    );
    println!("  agent RSS idle {:.1} MiB, with {n} pods {:.1} MiB", idle as f64 / 1024.0, busy as f64 / 1024.0);
    for name in &names {
        api.delete(name, &DeleteParams::default().grace_period(0)).await?;
    }
    let deadline = Instant::now() + TIMEOUT;
    while !api.list(&Default::default()).await?.items.is_empty() {
        if Instant::now() > deadline {
            bail!("pods not deleted");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(())
}

fn main() -> anyhow::Result<()> {
    tokio::runtime::Builder::new_multi_thread().enable_all().build()?.block_on(async {
        // Ctrl-C drops run()'s future, so its guards still stop the agent and delete the namespace.
        tokio::select! {
            r = run() => r,
            _ = tokio::signal::ctrl_c() => bail!("interrupted"),
        }
    })
}
