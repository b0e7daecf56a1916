//! Scheduler throughput, end to end: an in-process kaji apiserver holds N fake Nodes and 5,000
//! pending pods; the `kaji-scheduler` binary (its own process, so its RSS is its own) schedules
//! and binds them all. Reports pods/s, p99 per-pod latency (algorithm + binding) and peak RSS.
//!
//! `cargo bench -p kaji-scheduler` (optional args: `--nodes 1000,5000 --pods 5000`).

use anyhow::{bail, Context};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;
use std::collections::HashMap;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const CREATE_CONCURRENCY: usize = 64;
const TIMEOUT: Duration = Duration::from_secs(600);

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1).cloned())
}

async fn http_get(addr: &str, path: &str) -> anyhow::Result<String> {
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").as_bytes()).await?;
    let mut out = String::new();
    s.read_to_string(&mut out).await?;
    Ok(out.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default())
}

/// (scheduled pods, histogram buckets (le, cumulative count)) from the scheduler's /metrics.
fn parse_metrics(text: &str) -> (u64, Vec<(f64, u64)>) {
    let mut scheduled = 0;
    let mut buckets = Vec::new();
    for line in text.lines() {
        let Some((name, value)) = line.rsplit_once(' ') else { continue };
        if name.starts_with("scheduler_schedule_attempts_total{result=\"scheduled\"") {
            scheduled = value.parse().unwrap_or(0);
        } else if let Some(le) = name.strip_prefix("scheduler_e2e_scheduling_duration_seconds_bucket{le=\"") {
            let le = le.trim_end_matches("\"}");
            let le = if le == "+Inf" { f64::INFINITY } else { le.parse().unwrap_or(f64::INFINITY) };
            buckets.push((le, value.parse().unwrap_or(0)));
        }
    }
    (scheduled, buckets)
}

/// Quantile from cumulative buckets, interpolated linearly within the bucket.
fn quantile(buckets: &[(f64, u64)], q: f64) -> f64 {
    let total = buckets.last().map(|b| b.1).unwrap_or(0) as f64;
    let want = q * total;
    let mut prev = (0.0, 0u64);
    for &(le, n) in buckets {
        if n as f64 >= want {
            if !le.is_finite() {
                return prev.0;
            }
            let span = (n - prev.1) as f64;
            let frac = if span > 0.0 { (want - prev.1 as f64) / span } else { 1.0 };
            return prev.0 + (le - prev.0) * frac;
        }
        prev = (le, n);
    }
    prev.0
}

fn proc_status_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

struct Result {
    nodes: usize,
    pods: usize,
    create_pods_per_sec: f64,
    sync_secs: f64,
    pods_per_sec: f64,
    total_secs: f64,
    p50_ms: f64,
    p99_ms: f64,
    rss_mib: f64,
}

async fn run(nodes: usize, pods: usize) -> anyhow::Result<Result> {
    let data = tempfile::tempdir()?;
    let server =
        kaji_apiserver::start(kaji_apiserver::Config::new("127.0.0.1:0".parse()?, data.path().to_path_buf())).await?;
    let addr = server.addr;
    let client = kube::Client::try_from(kube::Config::new(format!("http://{addr}").parse()?))?;
    let node_api: Api<Node> = Api::all(client.clone());
    futures::stream::iter(0..nodes)
        .map(|i| {
            let api = node_api.clone();
            async move {
                let zone = format!("zone-{}", i % 3);
                let node: Node = serde_json::from_value(json!({
                    "metadata": {"name": format!("node-{i:05}"), "labels": {
                        "kubernetes.io/hostname": format!("node-{i:05}"), "topology.kubernetes.io/zone": zone}},
                    "status": {
                        "capacity": {"cpu": "32", "memory": "256Gi", "pods": "110"},
                        "allocatable": {"cpu": "32", "memory": "256Gi", "pods": "110"},
                        "conditions": [{"type": "Ready", "status": "True"}],
                    },
                }))?;
                api.create(&PostParams::default(), &node).await?;
                Ok::<_, anyhow::Error>(())
            }
        })
        .buffer_unordered(CREATE_CONCURRENCY)
        .try_collect::<Vec<_>>()
        .await?;
    let pod_api: Api<Pod> = Api::namespaced(client.clone(), "default");
    let t = Instant::now();
    futures::stream::iter(0..pods)
        .map(|i| {
            let api = pod_api.clone();
            async move {
                let pod: Pod = serde_json::from_value(json!({
                    "metadata": {"name": format!("pod-{i:05}"), "labels": {"app": format!("app-{}", i % 50)}},
                    "spec": {"containers": [{"name": "app", "image": "registry.example/app:1",
                        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}]},
                }))?;
                api.create(&PostParams::default(), &pod).await?;
                Ok::<_, anyhow::Error>(())
            }
        })
        .buffer_unordered(CREATE_CONCURRENCY)
        .try_collect::<Vec<_>>()
        .await?;
    let create_pods_per_sec = pods as f64 / t.elapsed().as_secs_f64();

    let metrics_port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let metrics = format!("127.0.0.1:{metrics_port}");
    let started = Instant::now();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_kaji-scheduler"))
        .args(["--master", &format!("http://{addr}"), "--bind-address", "127.0.0.1"])
        .args(["--metrics-port", &metrics_port.to_string()])
        .env("RUST_LOG", "warn")
        .spawn()
        .context("starting kaji-scheduler")?;
    let pid = child.id();
    let mut first: Option<Instant> = None;
    let (end, buckets) = loop {
        if started.elapsed() > TIMEOUT {
            let _ = child.kill();
            bail!("timed out: not all pods scheduled");
        }
        if let Ok(text) = http_get(&metrics, "/metrics").await {
            let (scheduled, buckets) = parse_metrics(&text);
            if scheduled > 0 && first.is_none() {
                first = Some(Instant::now());
            }
            if scheduled as usize >= pods {
                break (Instant::now(), buckets);
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let rss_kib = proc_status_kib(pid, "VmHWM:");
    let _ = std::process::Command::new("kill").args(["-TERM", &pid.to_string()]).status();
    let _ = child.wait();

    // Check the outcome a user would: every pod bound, no node over its pod capacity.
    let list = pod_api.list(&ListParams::default()).await?;
    let mut per_node: HashMap<String, usize> = HashMap::new();
    for p in &list.items {
        let node = p.spec.as_ref().and_then(|s| s.node_name.clone()).context("an unbound pod")?;
        *per_node.entry(node).or_default() += 1;
    }
    anyhow::ensure!(per_node.values().all(|&n| n <= 110), "a node got more than 110 pods");
    anyhow::ensure!(list.items.len() == pods, "expected {pods} pods, found {}", list.items.len());
    server.shutdown().await?;

    let first = first.unwrap_or(started);
    Ok(Result {
        nodes,
        pods,
        create_pods_per_sec,
        sync_secs: first.duration_since(started).as_secs_f64(),
        pods_per_sec: pods as f64 / end.duration_since(first).as_secs_f64().max(1e-9),
        total_secs: end.duration_since(started).as_secs_f64(),
        p50_ms: quantile(&buckets, 0.50) * 1000.0,
        p99_ms: quantile(&buckets, 0.99) * 1000.0,
        rss_mib: rss_kib as f64 / 1024.0,
    })
}

/// The scheduling algorithm alone (filter, score, assume; no API): decisions per second.
fn decisions(nodes: usize, pods: usize) -> anyhow::Result<(f64, f64)> {
    use kaji_scheduler::cache::Cache;
    use kaji_scheduler::nodeinfo::PodInfo;
    use std::sync::Arc;
    let mut cache = Cache::default();
    for i in 0..nodes {
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": format!("node-{i:05}"), "labels": {"kubernetes.io/hostname": format!("node-{i:05}")}},
            "status": {"allocatable": {"cpu": "32", "memory": "256Gi", "pods": "110"},
                       "conditions": [{"type": "Ready", "status": "True"}]},
        }))?;
        cache.upsert_node(Arc::new(node));
    }
    let framework = kaji_scheduler::plugins::default_framework(Default::default(), 0);
    let infos: Vec<Arc<PodInfo>> = (0..pods)
        .map(|i| {
            let pod: Pod = serde_json::from_value(json!({
                "metadata": {"name": format!("pod-{i:05}"), "namespace": "default", "uid": format!("u{i}")},
                "spec": {"containers": [{"name": "app", "image": "registry.example/app:1",
                    "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}]},
            }))?;
            Ok(Arc::new(PodInfo::new(Arc::new(pod))))
        })
        .collect::<anyhow::Result<_>>()?;
    let (mut start, mut rng) = (0, fastrand::Rng::with_seed(1));
    let mut worst = Duration::ZERO;
    let t = Instant::now();
    for info in infos {
        let one = Instant::now();
        let i =
            framework.schedule(&info, &cache.snapshot(), &mut start, &mut rng).map_err(|e| anyhow::anyhow!("{e}"))?;
        let node = cache.snapshot().nodes[i].name.clone();
        cache.assume(info, &node);
        worst = worst.max(one.elapsed());
    }
    Ok((pods as f64 / t.elapsed().as_secs_f64(), worst.as_secs_f64() * 1000.0))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // `cargo test --benches` runs benches with no arguments other than --bench; keep that cheap.
    let nodes: Vec<usize> =
        arg("--nodes").unwrap_or_else(|| "1000,5000".into()).split(',').filter_map(|s| s.trim().parse().ok()).collect();
    let pods: usize = arg("--pods").and_then(|s| s.parse().ok()).unwrap_or(5000);
    println!("Scheduling decisions alone (filter + score + assume, in process, no API):\n");
    println!("| nodes | pods | decisions/s | slowest decision (ms) |");
    println!("|---|---|---|---|");
    for &n in &nodes {
        let (rate, worst) = decisions(n, pods)?;
        println!("| {n} | {pods} | {rate:.0} | {worst:.2} |");
    }
    println!("\nEnd to end (scheduler process + in-process apiserver, binding writes included):\n");
    println!("| nodes | pods | pod creation (pods/s) | scheduler start → first bind (s) | scheduled (pods/s) | total (s) | p50 / p99 per pod (ms) | scheduler peak RSS (MiB) |");
    println!("|---|---|---|---|---|---|---|---|");
    for &n in &nodes {
        let r = run(n, pods).await?;
        println!(
            "| {} | {} | {:.0} | {:.2} | {:.0} | {:.2} | {:.1} / {:.1} | {:.0} |",
            r.nodes,
            r.pods,
            r.create_pods_per_sec,
            r.sync_secs,
            r.pods_per_sec,
            r.total_secs,
            r.p50_ms,
            r.p99_ms,
            r.rss_mib
        );
    }
    Ok(())
}
