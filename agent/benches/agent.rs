//! Pod startup on one node: an in-process kaji apiserver, Debian's registry with the busybox
//! image, and the `kaji-agent` binary as its own process (so its RSS is its own). The image is
//! pulled once by a warm-up pod; then N pods (default 30) bound to the node are created at once
//! and a watch records when each is Running with its container ready. Reports p50/p99/max per
//! pod (create returned → Running seen through the watch), the time until all are Running, and
//! the agent's RSS idle and with the pods running. Root only.
//!
//! `cargo bench -p kaji-agent --bench agent` (optional: `--pods 30`).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::{watcher, WatchStreamExt};
use serde_json::json;

const AGENT: &str = env!("CARGO_BIN_EXE_kaji-agent");
const TIMEOUT: Duration = Duration::from_secs(120);

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1).cloned())
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

async fn run() -> anyhow::Result<()> {
    if !nix::unistd::geteuid().is_root() {
        bail!("the agent bench needs root (namespaces, cgroups, mounts)");
    }
    let n: usize = arg("--pods").map(|v| v.parse()).transpose()?.unwrap_or(30);
    let data = tempfile::tempdir()?;
    let server = kaji_apiserver::start(kaji_apiserver::Config::new("127.0.0.1:0".parse()?, data.path().into())).await?;
    let url = format!("http://{}", server.addr);
    let client = kube::Client::try_from(kube::Config::new(url.parse()?))?;
    let registry = kaji_image::testing::Registry::start()?;
    kaji_image::testing::push_busybox(&registry.addr, "kaji/busybox:1").await?;
    let image = format!("{}/kaji/busybox:1", registry.addr);
    let root = tempfile::Builder::new().prefix("kaji-agent-bench").tempdir_in("/tmp")?;
    let node = format!("bench-{}", std::process::id());
    let parent = format!("kaji-agent-bench-{}", std::process::id());
    let root_dir = root.path().join("root");
    let mut agent = std::process::Command::new(AGENT)
        .args(["--master", &url, "--node-name", &node, "--node-ip", "127.0.0.1", "--port", "0"])
        .arg("--root-dir")
        .arg(&root_dir)
        .args(["--cgroup-parent", &parent, "--eviction-hard", "nodefs.available<0%"])
        .env("RUST_LOG", "warn")
        .spawn()
        .context("starting kaji-agent")?;
    let pid = agent.id();
    let api: Api<Pod> = Api::namespaced(client.clone(), "default");
    let result = async {
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
        // Per pod: from its create returning to Running+Ready seen through the watch.
        let mut per_pod: Vec<Duration> =
            running.iter().map(|(name, seen)| seen.saturating_duration_since(start[name])).collect();
        per_pod.sort();
        let create_spread = start.values().map(|t| t.duration_since(t_all)).max().unwrap_or_default();
        println!("agent pod startup: {n} pods bound to one node at once, image present, 2 cores");
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
        Ok::<_, anyhow::Error>(())
    }
    .await;
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::Signal::SIGTERM);
    let _ = agent.wait();
    let cleanup = std::process::Command::new(AGENT)
        .arg("--root-dir")
        .arg(&root_dir)
        .args(["--cgroup-parent", &parent, "cleanup"])
        .status();
    if !cleanup.map(|s| s.success()).unwrap_or(false) {
        eprintln!("warning: kaji-agent cleanup failed");
    }
    result
}

fn main() -> anyhow::Result<()> {
    tokio::runtime::Builder::new_multi_thread().enable_all().build()?.block_on(run())
}
