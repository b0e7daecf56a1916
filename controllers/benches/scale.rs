//! Deployment scale-up and scale-down, end to end: an in-process kaji apiserver (embedded store in
//! a temp dir) and the `kaji-controller-manager` binary as its own process (so its RSS is its
//! own). A helper in the bench plays the kubelets: it marks each new pod Running and Ready through
//! the pods/status subresource. Pods stay unbound (no scheduler, no agents), so the apiserver
//! deletes them at once when the ReplicaSet controller scales down.
//!
//! Reports: scale-up PATCH → all pods created, → Deployment status converged; scale-down PATCH →
//! all pods gone, → status converged; the manager's RSS idle, at N ready pods and afterwards.
//!
//! `cargo bench -p kaji-controllers --bench scale` (optional: `-- --replicas 1000`).

use anyhow::{bail, Context};
use futures::TryStreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use serde_json::json;
use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, watch, Semaphore};

const MANAGER: &str = env!("CARGO_BIN_EXE_kaji-controller-manager");
/// Every wait is bounded by this, so a stuck controller fails the bench instead of hanging it.
const TIMEOUT: Duration = Duration::from_secs(600);
/// Status writes in flight from the helper that plays the kubelets.
const KUBELET_CONCURRENCY: usize = 32;
const NAME: &str = "scale";
const SELECTOR: &str = "app=scale";

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1).cloned())
}

/// A `/proc/<pid>/status` field in KiB (VmRSS, VmHWM), 0 if unreadable.
fn proc_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

async fn within<F: Future>(what: &str, f: F) -> anyhow::Result<F::Output> {
    tokio::time::timeout(TIMEOUT, f).await.with_context(|| format!("timed out waiting for {what}"))
}

/// The manager process; killed on drop if the bench fails before stopping it.
struct Manager {
    child: Child,
    metrics: String,
    log: PathBuf,
}

impl Manager {
    fn start(server: &str, dir: &Path) -> anyhow::Result<Self> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let log = dir.join("controller-manager.log");
        let out = std::fs::File::create(&log)?;
        let child = Command::new(MANAGER)
            .args(["--master", server, "--bind-address", "127.0.0.1", "--metrics-port", &port.to_string()])
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .context("starting kaji-controller-manager")?;
        Ok(Self { child, metrics: format!("127.0.0.1:{port}"), log })
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `controller_runtime_reconcile_total` for one controller and result.
    async fn reconciles(&self, controller: &str, result: &str) -> u64 {
        let series = format!("controller_runtime_reconcile_total{{controller=\"{controller}\",result=\"{result}\"}}");
        let Ok(text) = http_get(&self.metrics, "/metrics").await else { return 0 };
        text.lines().find_map(|l| l.strip_prefix(&series)).and_then(|v| v.trim().parse().ok()).unwrap_or(0)
    }

    /// SIGTERM, then SIGKILL if it is still running after 15 s.
    async fn stop(&mut self) -> anyhow::Result<()> {
        Command::new("kill").args(["-TERM", &self.pid().to_string()]).status()?;
        let deadline = Instant::now() + Duration::from_secs(15);
        while self.child.try_wait()?.is_none() {
            if Instant::now() > deadline {
                self.child.kill()?;
                self.child.wait()?;
                bail!("kaji-controller-manager did not stop within 15 s of SIGTERM");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(())
    }

    /// The WARN and ERROR lines of its log.
    fn complaints(&self) -> Vec<String> {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        text.lines().filter(|l| l.contains("WARN") || l.contains("ERROR")).map(str::to_string).collect()
    }
}

impl Drop for Manager {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

async fn http_get(addr: &str, path: &str) -> anyhow::Result<String> {
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").as_bytes()).await?;
    let mut out = String::new();
    s.read_to_string(&mut out).await?;
    Ok(out.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default())
}

#[derive(Debug, Default, Clone, Copy)]
struct PodCounts {
    /// The first list has been received.
    synced: bool,
    /// Distinct pods (by UID) ever seen.
    seen: usize,
    /// Pods that exist now (deleting or not).
    live: usize,
}

/// Watches the bench's pods: publishes the counts, records when each new pod was first seen, and
/// hands every pod that is not Running yet to the kubelet helper once.
async fn watch_pods(
    api: Api<Pod>,
    counts: watch::Sender<PodCounts>,
    arrivals: Arc<Mutex<Vec<Instant>>>,
    kubelet: mpsc::UnboundedSender<String>,
) -> anyhow::Result<()> {
    let mut stream = std::pin::pin!(watcher(api, watcher::Config::default().labels(SELECTOR)));
    let (mut seen, mut handed) = (HashSet::new(), HashSet::new());
    let (mut live, mut relist) = (HashMap::new(), HashMap::new());
    while let Some(event) = stream.try_next().await? {
        let mut apply = |p: Pod, live: &mut HashMap<String, ()>| {
            let (Some(name), Some(uid)) = (p.metadata.name.clone(), p.metadata.uid.clone()) else { return };
            if seen.insert(uid.clone()) {
                arrivals.lock().expect("no panics while holding the lock").push(Instant::now());
            }
            let running = p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
            if !running && p.metadata.deletion_timestamp.is_none() && handed.insert(uid) {
                let _ = kubelet.send(name.clone());
            }
            live.insert(name, ());
        };
        let mut synced = counts.borrow().synced;
        match event {
            watcher::Event::Apply(p) => apply(p, &mut live),
            watcher::Event::Delete(p) => {
                live.remove(&p.metadata.name.unwrap_or_default());
            }
            watcher::Event::Init => relist.clear(),
            watcher::Event::InitApply(p) => apply(p, &mut relist),
            watcher::Event::InitDone => {
                live = std::mem::take(&mut relist);
                synced = true;
            }
        }
        counts.send_replace(PodCounts { synced, seen: seen.len(), live: live.len() });
    }
    Ok(())
}

/// Plays the kubelets: marks each pod it is handed Running and Ready through pods/status.
async fn kubelet(api: Api<Pod>, mut pods: mpsc::UnboundedReceiver<String>, failures: Arc<AtomicUsize>) {
    let slots = Arc::new(Semaphore::new(KUBELET_CONCURRENCY));
    let mut n: u32 = 0;
    while let Some(name) = pods.recv().await {
        let Ok(slot) = slots.clone().acquire_owned().await else { return };
        n += 1;
        let now = jiff::Timestamp::now().to_string();
        let patch = Patch::Merge(json!({"status": {
            "phase": "Running",
            "podIP": format!("10.{}.{}.{}", 64 + (n >> 16) % 64, (n >> 8) % 256, n % 256),
            "startTime": now,
            "conditions": [
                {"type": "Ready", "status": "True", "lastTransitionTime": now},
                {"type": "ContainersReady", "status": "True", "lastTransitionTime": now},
            ],
        }}));
        let (api, failures) = (api.clone(), failures.clone());
        tokio::spawn(async move {
            for attempt in 0..5 {
                match api.patch_status(&name, &PatchParams::default(), &patch).await {
                    Ok(_) => break,
                    Err(kube::Error::Api(s)) if s.code == 404 => break,
                    Err(_) if attempt < 4 => tokio::time::sleep(Duration::from_millis(100)).await,
                    Err(_) => {
                        failures.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            drop(slot);
        });
    }
}

/// Publishes the bench's Deployment every time it changes.
async fn watch_deployment(api: Api<Deployment>, latest: watch::Sender<Option<Deployment>>) -> anyhow::Result<()> {
    let cfg = watcher::Config::default().labels(SELECTOR);
    let mut stream = std::pin::pin!(watcher(api, cfg));
    while let Some(event) = stream.try_next().await? {
        if let watcher::Event::Apply(d) | watcher::Event::InitApply(d) = event {
            latest.send_replace(Some(d));
        }
    }
    Ok(())
}

/// `replicas`, `updatedReplicas`, `readyReplicas` and `availableReplicas` all `n`, for the current
/// generation.
fn converged(d: Option<&Deployment>, n: i32) -> bool {
    let Some(d) = d else { return false };
    let s = d.status.clone().unwrap_or_default();
    s.observed_generation.is_some()
        && s.observed_generation >= d.metadata.generation
        && d.spec.replicas == Some(n)
        && [s.replicas, s.updated_replicas, s.ready_replicas, s.available_replicas].iter().all(|v| v.unwrap_or(0) == n)
}

async fn set_replicas(api: &Api<Deployment>, n: i32) -> anyhow::Result<Instant> {
    let t = Instant::now();
    api.patch(NAME, &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": n}}))).await?;
    Ok(t)
}

fn secs(d: Duration) -> String {
    format!("{:.2} s", d.as_secs_f64())
}

async fn run(n: usize) -> anyhow::Result<()> {
    let replicas = i32::try_from(n).context("--replicas is too large")?;
    let dir = tempfile::tempdir()?;
    let config = kaji_apiserver::Config::new("127.0.0.1:0".parse()?, dir.path().join("store"));
    let server = kaji_apiserver::start(config).await?;
    let url = format!("http://{}", server.addr);
    let client = kube::Client::try_from(kube::Config::new(url.parse()?))?;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();

    let mut manager = Manager::start(&url, dir.path())?;
    let pid = manager.pid();
    let (counts_tx, mut counts) = watch::channel(PodCounts::default());
    let (kubelet_tx, kubelet_rx) = mpsc::unbounded_channel();
    let arrivals = Arc::new(Mutex::new(Vec::with_capacity(n)));
    let failures = Arc::new(AtomicUsize::new(0));
    let pod_watch = tokio::spawn(watch_pods(pods.clone(), counts_tx, arrivals.clone(), kubelet_tx));
    let helper = tokio::spawn(kubelet(pods.clone(), kubelet_rx, failures.clone()));
    let (d_tx, mut d) = watch::channel(None);
    let d_watch = tokio::spawn(watch_deployment(deployments.clone(), d_tx));

    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": {"name": NAME, "labels": {"app": NAME}},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": {"app": NAME}},
            "template": {
                "metadata": {"labels": {"app": NAME}},
                "spec": {"containers": [{"name": "app", "image": "registry.example/app:1",
                    "ports": [{"name": "http", "containerPort": 8080}],
                    "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]},
            },
        },
    }))?;
    deployments.create(&PostParams::default(), &deployment).await?;
    within("the manager to observe the deployment", d.wait_for(|d| converged(d.as_ref(), 0))).await??;
    within("the pod watch to sync", counts.wait_for(|c| c.synced)).await??;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss_idle = proc_kib(pid, "VmRSS:");

    let up = set_replicas(&deployments, replicas).await?;
    within("all pods to be created", counts.wait_for(|c| c.seen >= n)).await??;
    let created = up.elapsed();
    within("the deployment to converge", d.wait_for(|d| converged(d.as_ref(), replicas))).await??;
    let ready = up.elapsed();
    let rss_full = proc_kib(pid, "VmRSS:");
    let (rs_up, d_up) =
        (manager.reconciles("replicaset", "success").await, manager.reconciles("deployment", "success").await);

    let down = set_replicas(&deployments, 0).await?;
    within("all pods to be deleted", counts.wait_for(|c| c.live == 0)).await??;
    let deleted = down.elapsed();
    within("the deployment to converge at 0", d.wait_for(|d| converged(d.as_ref(), 0))).await??;
    let emptied = down.elapsed();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (rss_after, rss_peak) = (proc_kib(pid, "VmRSS:"), proc_kib(pid, "VmHWM:"));
    let errors = manager.reconciles("replicaset", "error").await + manager.reconciles("deployment", "error").await;
    let (rs_all, d_all) =
        (manager.reconciles("replicaset", "success").await, manager.reconciles("deployment", "success").await);
    manager.stop().await?;
    pod_watch.abort();
    helper.abort();
    d_watch.abort();
    server.shutdown().await?;

    let arrivals = arrivals.lock().expect("no panics while holding the lock").clone();
    let at = |k: usize| arrivals.get(k.clamp(1, n) - 1).map(|t| t.duration_since(up)).unwrap_or_default();
    let per_sec = |d: Duration| n as f64 / d.as_secs_f64().max(1e-9);
    println!("## Deployment 0 → {n} → 0: kaji-controller-manager (own process) + in-process kaji-apiserver\n");
    println!(
        "build: {}; {} CPUs; load average at start: {}; pods unbound, made Running/Ready by a helper \
         ({KUBELET_CONCURRENCY} status writes in flight)\n",
        if cfg!(debug_assertions) { "debug" } else { "release" },
        std::thread::available_parallelism().map_or(0, |p| p.get()),
        load.split_whitespace().take(3).collect::<Vec<_>>().join(" "),
    );
    println!("| measurement | result |");
    println!("|---|---|");
    println!("| scale-up PATCH → all {n} pods created | {} ({:.0} pods/s) |", secs(created), per_sec(created));
    println!(
        "| … first / 10% / 50% / 90% of the pods seen | {:.0} / {:.0} / {:.0} / {:.0} ms |",
        at(1).as_secs_f64() * 1e3,
        at(n / 10).as_secs_f64() * 1e3,
        at(n / 2).as_secs_f64() * 1e3,
        at(n * 9 / 10).as_secs_f64() * 1e3,
    );
    println!("| scale-up PATCH → Deployment status converged ({n} ready, available, updated) | {} |", secs(ready));
    println!("| scale-down PATCH → all pods deleted | {} ({:.0} pods/s) |", secs(deleted), per_sec(deleted));
    println!("| scale-down PATCH → Deployment status converged (0) | {} |", secs(emptied));
    println!("| manager RSS idle (caches synced, no pods) | {:.1} MiB |", mib(rss_idle));
    println!("| manager RSS with {n} ready pods | {:.1} MiB |", mib(rss_full));
    println!("| manager RSS after scale-down / peak (VmHWM) | {:.1} / {:.1} MiB |", mib(rss_after), mib(rss_peak));
    println!("| reconciles during scale-up: replicaset / deployment | {rs_up} / {d_up} |");
    println!("| reconciles in all: replicaset / deployment (errors) | {rs_all} / {d_all} ({errors}) |");
    let failed = failures.load(Ordering::Relaxed);
    if failed > 0 {
        println!("\n{failed} pod status writes failed after 5 attempts");
    }
    let complaints = manager.complaints();
    if !complaints.is_empty() {
        println!("\n{} WARN/ERROR lines from the manager (first 10):", complaints.len());
        for line in complaints.iter().take(10) {
            println!("  {line}");
        }
    }
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // Only `cargo bench` passes --bench; `cargo test --benches` and test listings must not run it.
    let args: Vec<String> = std::env::args().collect();
    if !args.iter().any(|a| a == "--bench") || args.iter().any(|a| a == "--test" || a == "--list") {
        return Ok(());
    }
    let n: usize = arg("--replicas").map(|v| v.parse()).transpose().context("--replicas")?.unwrap_or(1000);
    anyhow::ensure!(n >= 1, "--replicas must be at least 1");
    run(n).await
}
