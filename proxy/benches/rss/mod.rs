//! The proxy's own memory: the real `kaji-proxy` binary in a throwaway network namespace, fed
//! N Services and EndpointSlices by an apiserver that runs in this process on a thread that
//! joined the same namespace (its listener lives there; nothing is configured outside it).

use k8s_openapi::api::core::v1::{Namespace, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use std::fs::File;
use std::process::Command;
use std::time::{Duration, Instant};

const NODE: &str = "bench-node";
/// Endpoint changes applied (and synced) before the memory is read.
const CHANGES: usize = 20;

pub struct Report {
    pub create: Duration,
    /// The proxy's own `took_ms` for its first (full) sync, from its log.
    pub first_sync: Duration,
    /// The median `took_ms` of the partial syncs after each endpoint change, and the median of
    /// their `model_ms` (the model assembled from the caches, part of `took_ms`).
    pub partial_sync: Duration,
    pub partial_model: Duration,
    pub rss_kb: u64,
    pub hwm_kb: u64,
    /// Of `rss_kb`: anonymous memory (heap, stacks) and mapped files (the binary's pages).
    pub anon_kb: u64,
    pub file_kb: u64,
}

pub fn measure(netns: &str, n: usize, mode: &str, writer: &str) -> Report {
    let path = format!("/var/run/netns/{netns}");
    let (netns, mode, writer) = (netns.to_string(), mode.to_string(), writer.to_string());
    std::thread::spawn(move || {
        let file = File::open(&path).unwrap_or_else(|e| panic!("open {path}: {e}"));
        nix::sched::setns(&file, nix::sched::CloneFlags::CLONE_NEWNET).expect("join the bench namespace");
        // Built on this thread: its workers inherit the namespace.
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
        rt.block_on(run(&netns, n, &mode, &writer)).unwrap_or_else(|e| panic!("rss bench: {e:#}"))
    })
    .join()
    .expect("rss bench thread panicked")
}

async fn run(netns: &str, n: usize, mode: &str, writer: &str) -> anyhow::Result<Report> {
    let data = tempfile::tempdir()?;
    let server = kaji_apiserver::start(kaji_apiserver::Config::new("127.0.0.1:0".parse()?, data.path().into())).await?;
    let url = format!("http://{}", server.addr);
    let client = kube::Client::try_from(kube::Config::new(url.parse()?))?;

    let started = Instant::now();
    create_objects(&client, n).await?;
    let create = started.elapsed();

    let log = File::create(data.path().join("proxy.log"))?;
    let mut proxy = Command::new("ip")
        .args(["netns", "exec", netns, env!("CARGO_BIN_EXE_kaji-proxy")])
        .args(["--master", &url, "--proxy-mode", mode, "--nftables-writer", writer, "--hostname-override", NODE])
        .args(["--cluster-cidr", "10.244.0.0/16", "--sync-period", "1h", "--min-sync-period", "100ms"])
        .args(["--metrics-port", "0", "--log-json"])
        .env("RUST_LOG", "info")
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()?;
    let pid = proxy.id();
    let log = data.path().join("proxy.log");
    let result = async {
        let (first, _) = synced(&log, 0, Duration::from_secs(900)).await?;
        // Endpoints change, one service at a time, each change synced before the next; the
        // memory is read after the last.
        let mut partials = Vec::new();
        let mut moved = std::collections::HashMap::new();
        for round in 0..CHANGES {
            let i = round * 10 % n;
            let m = moved.entry(i).or_insert(false);
            *m = !*m;
            let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), &format!("ns{}", i % 50));
            let patch = json!({"endpoints": endpoints(i, *m)});
            slices.patch(&format!("svc-{i}-abcde"), &PatchParams::default(), &Patch::Merge(&patch)).await?;
            partials.push(synced(&log, round + 1, Duration::from_secs(120)).await?);
        }
        partials.sort();
        let (partial, partial_model) = partials[partials.len() / 2];
        tokio::time::sleep(Duration::from_secs(1)).await;
        let [rss_kb, hwm_kb, anon_kb, file_kb] = memory(pid);
        anyhow::Ok(Report {
            create,
            first_sync: first,
            partial_sync: partial,
            partial_model,
            rss_kb,
            hwm_kb,
            anon_kb,
            file_kb,
        })
    }
    .await;
    let _ = proxy.kill();
    let _ = proxy.wait();
    if result.is_err() || std::env::var_os("KAJI_BENCH_SHOW_LOG").is_some() {
        let log = std::fs::read_to_string(&log).unwrap_or_default();
        eprintln!("kaji-proxy log:\n{}", log.lines().rev().take(30).collect::<Vec<_>>().join("\n"));
    }
    let _ = server.shutdown().await;
    result
}

fn endpoints(i: usize, moved: bool) -> serde_json::Value {
    let eps: Vec<serde_json::Value> = (0..5)
        .map(|e| {
            let n = 0x0af4_0000u32 + i as u32 * 8 + e + if moved && e == 4 { 6 } else { 0 };
            json!({"addresses": [std::net::Ipv4Addr::from(n).to_string()], "conditions": {"ready": true},
                   "nodeName": if e == 0 { NODE } else { "other-node" }})
        })
        .collect();
    json!(eps)
}

async fn create_objects(client: &kube::Client, n: usize) -> anyhow::Result<()> {
    use futures::{StreamExt, TryStreamExt};
    let namespaces: Api<Namespace> = Api::all(client.clone());
    for i in 0..50.min(n) {
        namespaces
            .create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": format!("ns{i}")}}))?)
            .await?;
    }
    futures::stream::iter(0..n)
        .map(|i| {
            let client = client.clone();
            async move {
                let ns = format!("ns{}", i % 50);
                let svc: Service = serde_json::from_value(json!({
                    "metadata": {"name": format!("svc-{i}")},
                    "spec": {"type": if i % 10 == 0 { "NodePort" } else { "ClusterIP" },
                             "selector": {"app": format!("svc-{i}")},
                             "ports": [{"name": "http", "port": 80, "targetPort": 8080}]}}))?;
                Api::<Service>::namespaced(client.clone(), &ns).create(&PostParams::default(), &svc).await?;
                let slice: EndpointSlice = serde_json::from_value(json!({
                    "metadata": {"name": format!("svc-{i}-abcde"),
                                 "labels": {"kubernetes.io/service-name": format!("svc-{i}")}},
                    "addressType": "IPv4",
                    "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
                    "endpoints": endpoints(i, false)}))?;
                Api::<EndpointSlice>::namespaced(client, &ns).create(&PostParams::default(), &slice).await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(16)
        .try_collect::<()>()
        .await
}

/// Waits for the proxy's log to hold more than `seen` "rules synced" lines; returns the
/// `took_ms` and `model_ms` of the next one.
async fn synced(log: &std::path::Path, seen: usize, timeout: Duration) -> anyhow::Result<(Duration, Duration)> {
    let deadline = Instant::now() + timeout;
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let took: Vec<(u64, u64)> = text
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|v| v["fields"]["message"] == "rules synced")
            .filter_map(|v| Some((v["fields"]["took_ms"].as_u64()?, v["fields"]["model_ms"].as_u64().unwrap_or(0))))
            .collect();
        if let Some((took, model)) = took.get(seen) {
            return Ok((Duration::from_millis(*took), Duration::from_millis(*model)));
        }
        anyhow::ensure!(Instant::now() < deadline, "timed out waiting for sync {}", seen + 1);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// VmRSS, VmHWM, RssAnon and RssFile of a process, in KiB.
fn memory(pid: u32) -> [u64; 4] {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
            .unwrap_or(0)
    };
    [field("VmRSS:"), field("VmHWM:"), field("RssAnon:"), field("RssFile:")]
}
