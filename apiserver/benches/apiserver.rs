//! Benchmark of the real `kaji-apiserver` binary over loopback HTTP/1.1: create throughput and
//! latency (closed loop and paced), LIST, watch fan-out latency and peak memory.
//!
//! Run with `cargo build --release -p kaji-apiserver && cargo bench -p kaji-apiserver --bench apiserver`.
//! `KAJI_BENCH_PODS` sets N (default 10,000); `KAJI_APISERVER_BIN` points at another binary;
//! `KAJI_BENCH_STORAGE=etcd` runs the same on etcd (one member started beside it);
//! `KAJI_BENCH_TLS=1` over HTTPS with an admin client certificate and Node,RBAC authorization.

use anyhow::{ensure, Context, Result};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::header::CONTENT_TYPE;
use hyper::{Method, Request, StatusCode};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tokio::task::JoinSet;

#[path = "apiserver/server.rs"]
mod server;
use server::Server;

const CONCURRENCY: usize = 64;
const PACED_RATE: u32 = 500;
const WATCHERS: usize = 1_000;
const WATCH_CHANGES: usize = 5;
const LIST_RUNS: usize = 5;
const SELECTOR_LIST_RUNS: usize = 20;
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
const PODS: &str = "/api/v1/namespaces/default/pods";
const CHANGE_MARKER: &[u8] = b"\"bench.kaji.dev/change\":\"change-";

const TARGET_PACED_P99: Duration = Duration::from_millis(10);
const TARGET_WATCH_P99: Duration = Duration::from_millis(100);
const TARGET_RSS_KB: u64 = 150 * 1024;

type HttpClient = Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>;

/// One keep-alive pool for every request; over HTTPS it verifies the server against the bench's
/// CA and presents the admin certificate (each pooled connection pays one handshake).
fn new_client(tls: Option<&server::ClientTls>) -> Result<HttpClient> {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    connector.enforce_http(false);
    // Plain HTTP never uses the config; the connector's type needs one.
    let mut config = match tls {
        Some(t) => kaji_pki::tls::client_config(&t.ca_pem, Some((&t.cert_pem, &t.key_pem)))?,
        None => kaji_pki::tls::unverified_client_config(None)?,
    };
    // hyper-rustls sets ALPN itself (enable_http1) and refuses a config that has it.
    config.alpn_protocols.clear();
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(config)
        .https_or_http()
        .enable_http1()
        .wrap_connector(connector);
    Ok(Client::builder(TokioExecutor::new()).pool_max_idle_per_host(CONCURRENCY * 2).build(https))
}

async fn send(
    client: &HttpClient,
    method: Method,
    uri: &str,
    content_type: &str,
    body: Bytes,
) -> Result<(StatusCode, Bytes)> {
    let req = Request::builder().method(method).uri(uri).header(CONTENT_TYPE, content_type).body(Full::new(body))?;
    let work = async {
        let resp = client.request(req).await?;
        let status = resp.status();
        let body = resp.into_body().collect().await?.to_bytes();
        anyhow::Ok((status, body))
    };
    tokio::time::timeout(REQUEST_TIMEOUT, work).await.with_context(|| format!("request to {uri} timed out"))?
}

async fn get(client: &HttpClient, uri: &str) -> Result<Bytes> {
    let (status, body) = send(client, Method::GET, uri, "application/json", Bytes::new()).await?;
    ensure!(status == StatusCode::OK, "GET {uri}: {status}: {}", String::from_utf8_lossy(&body));
    Ok(body)
}

/// A realistic ~1 KB pod: labels (one shard label per 1%), annotations, one container with
/// ports, env, resources and a probe.
fn pod_body(name: &str, i: usize) -> Result<Bytes> {
    let pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": {
                "app": "storefront", "tier": "frontend", "version": "v1.4.2",
                "shard": format!("s{:02}", i % 100), "bench.kaji.dev/index": i.to_string(),
            },
            "annotations": {"bench.kaji.dev/owner": "team-storefront", "prometheus.io/scrape": "true", "prometheus.io/port": "9090"},
        },
        "spec": {
            "containers": [{
                "name": "web",
                "image": "registry.example.com/storefront/web:1.4.2",
                "command": ["/app/server"],
                "args": ["--listen=:8080", "--metrics=:9090", "--log-level=info"],
                "ports": [
                    {"name": "http", "containerPort": 8080, "protocol": "TCP"},
                    {"name": "metrics", "containerPort": 9090, "protocol": "TCP"},
                ],
                "env": [
                    {"name": "POD_INDEX", "value": i.to_string()},
                    {"name": "LOG_FORMAT", "value": "json"},
                    {"name": "UPSTREAM_URL", "value": "http://catalog.default.svc.cluster.local:8080"},
                    {"name": "CACHE_TTL_SECONDS", "value": "300"},
                ],
                "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"cpu": "500m", "memory": "256Mi"}},
                "readinessProbe": {"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 5},
            }],
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 30,
        },
    });
    Ok(Bytes::from(serde_json::to_vec(&pod)?))
}

#[derive(Default)]
struct Latencies {
    samples: Vec<Duration>,
    errors: usize,
    first_error: Option<String>,
}

impl Latencies {
    fn merge(&mut self, other: Latencies) {
        self.samples.extend(other.samples);
        self.errors += other.errors;
        self.first_error = self.first_error.take().or(other.first_error);
    }

    fn record(&mut self, took: Duration, outcome: Result<(StatusCode, Bytes)>, want: StatusCode) {
        match outcome {
            Ok((status, _)) if status == want => self.samples.push(took),
            Ok((status, body)) => self.error(format!("{status}: {}", String::from_utf8_lossy(&body))),
            Err(e) => self.error(format!("{e:#}")),
        }
    }

    fn error(&mut self, msg: String) {
        self.errors += 1;
        self.first_error.get_or_insert(msg);
    }

    /// Nearest-rank percentile.
    fn pct(&mut self, p: f64) -> Duration {
        if self.samples.is_empty() {
            return Duration::ZERO;
        }
        self.samples.sort_unstable();
        let n = self.samples.len();
        self.samples[((p * n as f64).ceil() as usize).clamp(1, n) - 1]
    }
}

/// N creates from CONCURRENCY closed-loop clients; returns the latencies and the wall time.
async fn create_burst(client: &HttpClient, base: &str, bodies: Arc<Vec<Bytes>>) -> (Latencies, Duration) {
    let next = Arc::new(AtomicUsize::new(0));
    let uri: Arc<str> = format!("{base}{PODS}").into();
    let started = Instant::now();
    let mut workers = JoinSet::new();
    for _ in 0..CONCURRENCY {
        let (client, bodies, next, uri) = (client.clone(), bodies.clone(), next.clone(), uri.clone());
        workers.spawn(async move {
            let mut lat = Latencies::default();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(body) = bodies.get(i) else { return lat };
                let t = Instant::now();
                let out = send(&client, Method::POST, &uri, "application/json", body.clone()).await;
                lat.record(t.elapsed(), out, StatusCode::CREATED);
            }
        });
    }
    let mut all = Latencies::default();
    while let Some(r) = workers.join_next().await {
        match r {
            Ok(l) => all.merge(l),
            Err(e) => all.error(format!("worker failed: {e}")),
        }
    }
    (all, started.elapsed())
}

/// Open loop: request i is due at start + i/rate and its latency counts from then, so a server
/// that falls behind is charged for the queueing it causes.
async fn create_paced(client: &HttpClient, base: &str, bodies: Vec<Bytes>, rate: u32) -> (Latencies, Duration) {
    let period = Duration::from_secs(1) / rate;
    let uri: Arc<str> = format!("{base}{PODS}").into();
    let start = tokio::time::Instant::now() + Duration::from_millis(10);
    let mut inflight = JoinSet::new();
    for (i, body) in bodies.into_iter().enumerate() {
        let due = start + period * i as u32;
        tokio::time::sleep_until(due).await;
        let (client, uri) = (client.clone(), uri.clone());
        inflight.spawn(async move {
            let out = send(&client, Method::POST, &uri, "application/json", body).await;
            (due.elapsed(), out)
        });
    }
    let mut lat = Latencies::default();
    while let Some(r) = inflight.join_next().await {
        match r {
            Ok((took, out)) => lat.record(took, out, StatusCode::CREATED),
            Err(e) => lat.error(format!("request task failed: {e}")),
        }
    }
    (lat, start.elapsed())
}

/// Time every LIST, check the item count, and return the latencies and the response size.
async fn list_runs(client: &HttpClient, uri: &str, runs: usize, want_items: usize) -> Result<(Latencies, usize)> {
    let mut lat = Latencies::default();
    let mut size = 0;
    for _ in 0..runs {
        let t = Instant::now();
        let body = get(client, uri).await?;
        lat.samples.push(t.elapsed());
        size = body.len();
        let v: Value = serde_json::from_slice(&body)?;
        let items = v["items"].as_array().map_or(0, Vec::len);
        ensure!(items == want_items, "GET {uri} returned {items} items, expected {want_items}");
    }
    Ok((lat, size))
}

/// Which change (if any) a watch line announces as MODIFIED, found without parsing the JSON.
fn modified_change(line: &[u8]) -> Option<usize> {
    if !line.starts_with(b"{\"type\":\"MODIFIED\"") {
        return None;
    }
    let at = line.windows(CHANGE_MARKER.len()).position(|w| w == CHANGE_MARKER)? + CHANGE_MARKER.len();
    let digits = line[at..].iter().take_while(|b| b.is_ascii_digit()).count();
    std::str::from_utf8(&line[at..at + digits]).ok()?.parse().ok()
}

/// One watch stream: report readiness once the headers arrive, then the arrival instant of
/// every MODIFIED event carrying a change marker.
async fn watcher(
    client: HttpClient,
    uri: String,
    ready: mpsc::Sender<Result<()>>,
    seen: mpsc::UnboundedSender<(usize, Instant)>,
) {
    let opened = async {
        let req = Request::builder().uri(&uri).body(Full::new(Bytes::new()))?;
        let resp = tokio::time::timeout(REQUEST_TIMEOUT, client.request(req)).await.context("watch timed out")??;
        ensure!(resp.status() == StatusCode::OK, "watch answered {}", resp.status());
        Ok(resp.into_body())
    };
    let mut body = match opened.await {
        Ok(b) => {
            let _ = ready.send(Ok(())).await;
            b
        }
        Err(e) => {
            let _ = ready.send(Err(e)).await;
            return;
        }
    };
    let mut buf = Vec::new();
    while let Some(Ok(frame)) = body.frame().await {
        let now = Instant::now();
        let Ok(data) = frame.into_data() else { continue };
        buf.extend_from_slice(&data);
        while let Some(end) = buf.iter().position(|b| *b == b'\n') {
            if let Some(k) = modified_change(&buf[..end]) {
                let _ = seen.send((k, now));
            }
            buf.drain(..=end);
        }
    }
}

struct FanOut {
    from_response: Latencies,
    from_request: Latencies,
    opened: usize,
    open_time: Duration,
    missed: usize,
}

/// WATCHERS watches selecting one pod, WATCH_CHANGES merge patches of that pod, and the delay
/// from each PATCH response (and request) to each watcher's MODIFIED event.
async fn watch_fanout(client: &HttpClient, base: &str, index: usize) -> Result<FanOut> {
    let selector = format!("labelSelector=bench.kaji.dev%2Findex%3D{index}");
    let list: Value = serde_json::from_slice(&get(client, &format!("{base}{PODS}?{selector}")).await?)?;
    let rv = list["metadata"]["resourceVersion"].as_str().context("LIST without a resourceVersion")?.to_string();
    let uri = format!("{base}{PODS}?watch=true&resourceVersion={rv}&{selector}&timeoutSeconds=600");
    let (ready_tx, mut ready_rx) = mpsc::channel(WATCHERS);
    let (seen_tx, mut seen_rx) = mpsc::unbounded_channel();
    let mut watchers = JoinSet::new();
    let t = Instant::now();
    for _ in 0..WATCHERS {
        watchers.spawn(watcher(client.clone(), uri.clone(), ready_tx.clone(), seen_tx.clone()));
    }
    drop(ready_tx);
    let mut opened = 0;
    for _ in 0..WATCHERS {
        match tokio::time::timeout(Duration::from_secs(60), ready_rx.recv()).await {
            Ok(Some(Ok(()))) => opened += 1,
            Ok(Some(Err(e))) => eprintln!("warning: a watch failed to open: {e:#}"),
            Ok(None) | Err(_) => break,
        }
    }
    let open_time = t.elapsed();
    ensure!(opened > 0, "no watch could be opened");
    let mut fan = FanOut {
        from_response: Latencies::default(),
        from_request: Latencies::default(),
        opened,
        open_time,
        missed: 0,
    };
    let name = format!("{base}{PODS}/{}", pod_name(index));
    let mut early: HashMap<usize, Vec<Instant>> = HashMap::new();
    for k in 1..=WATCH_CHANGES {
        let patch = json!({"metadata": {"annotations": {"bench.kaji.dev/change": format!("change-{k}")}}});
        let sent = Instant::now();
        let (status, body) =
            send(client, Method::PATCH, &name, "application/merge-patch+json", Bytes::from(patch.to_string())).await?;
        let answered = Instant::now();
        ensure!(status == StatusCode::OK, "PATCH {name}: {status}: {}", String::from_utf8_lossy(&body));
        let mut arrivals = early.remove(&k).unwrap_or_default();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while arrivals.len() < opened {
            match tokio::time::timeout_at(deadline, seen_rx.recv()).await {
                Ok(Some((c, at))) if c == k => arrivals.push(at),
                Ok(Some((c, at))) => early.entry(c).or_default().push(at),
                Ok(None) | Err(_) => break,
            }
        }
        fan.missed += opened - arrivals.len();
        for at in arrivals {
            fan.from_response.samples.push(at.saturating_duration_since(answered));
            fan.from_request.samples.push(at.saturating_duration_since(sent));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    watchers.shutdown().await;
    Ok(fan)
}

fn pod_name(i: usize) -> String {
    format!("bench-{i:05}")
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

fn mb(kb: u64) -> String {
    format!("{:.1} MB", kb as f64 / 1024.0)
}

fn verdict(ok: bool) -> &'static str {
    if ok {
        "met"
    } else {
        "**missed**"
    }
}

#[tokio::main]
async fn main() -> Result<()> {
    let n: usize = match std::env::var("KAJI_BENCH_PODS") {
        Ok(v) => v.parse().with_context(|| format!("KAJI_BENCH_PODS={v:?} is not a number"))?,
        Err(_) => 10_000,
    };
    ensure!(n >= 100, "KAJI_BENCH_PODS must be at least 100");
    let paced_n = n / 2;
    let bin = server::find_binary()?;
    let mut server = Server::start(&bin)?;
    let base = server.base.clone();
    eprintln!("apiserver pid {} at {base}, data in {}", server.pid(), server.dir.path().display());
    let client = new_client(server.tls.as_ref())?;
    let deadline = Instant::now() + Duration::from_secs(30);
    while get(&client, &format!("{base}/readyz")).await.is_err() {
        ensure!(Instant::now() < deadline, "the apiserver never became ready:\n{}", server.log_tail());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let bodies = (0..n).map(|i| pod_body(&pod_name(i), i)).collect::<Result<Vec<_>>>()?;
    let pod_size = bodies.iter().map(Bytes::len).sum::<usize>() / n;
    eprintln!("creating {n} pods with {CONCURRENCY} clients");
    let (mut burst, burst_wall) = create_burst(&client, &base, Arc::new(bodies)).await;
    ensure!(burst.errors == 0, "{} creates failed, first: {}", burst.errors, burst.first_error.unwrap_or_default());

    eprintln!("listing");
    let (mut full, full_size) = list_runs(&client, &format!("{base}{PODS}"), LIST_RUNS, n).await?;
    let sel_uri = format!("{base}{PODS}?labelSelector=shard%3Ds07");
    let sel_items = (0..n).filter(|i| i % 100 == 7).count();
    let (mut sel, sel_size) = list_runs(&client, &sel_uri, SELECTOR_LIST_RUNS, sel_items).await?;
    let hwm_held = server.status_kb("VmHWM")?;
    let rss_held = server.status_kb("VmRSS")?;

    eprintln!("opening {WATCHERS} watches");
    let mut fan = watch_fanout(&client, &base, 42.min(n - 1)).await?;
    let hwm_watch = server.status_kb("VmHWM")?;

    eprintln!("creating {paced_n} more pods at {PACED_RATE}/s");
    let paced_bodies = (0..paced_n).map(|i| pod_body(&format!("paced-{i:05}"), i)).collect::<Result<Vec<_>>>()?;
    let (mut paced, paced_wall) = create_paced(&client, &base, paced_bodies, PACED_RATE).await;
    let hwm_end = server.status_kb("VmHWM")?;
    let etcd_hwm = server.etcd_kb("VmHWM")?;

    drop(client);
    server.stop()?;
    let problems = server.log_problems();

    let throughput = burst.samples.len() as f64 / burst_wall.as_secs_f64();
    let paced_p99 = paced.pct(0.99);
    let watch_p99 = fan.from_response.pct(0.99);
    println!("## kaji-apiserver benchmark\n");
    println!("| Condition | Value |\n|---|---|");
    println!("| machine | {} |", server::machine());
    println!(
        "| apiserver binary | `{}` ({} profile), pid {} |",
        server.bin.display(),
        server::profile_of(&server.bin),
        server.pid()
    );
    println!(
        "| benchmark client | {} build, hyper 1 HTTP/1.1 keep-alive pool, same host over 127.0.0.1 |",
        if cfg!(debug_assertions) { "debug" } else { "release" }
    );
    println!(
        "| transport | {} |",
        if server.tls.is_some() {
            "HTTPS (rustls, TLS 1.3), admin client certificate (x509 authn), `--authorization-mode Node,RBAC`"
        } else {
            "plain HTTP (`--insecure-port`: no authentication, no authorization)"
        }
    );
    match &server.etcd {
        Some(_) => println!(
            "| store | etcd (`--storage etcd`), one member (Debian etcd-server 3.4) on loopback, data on {} |",
            server::fs_type(server.dir.path())
        ),
        None => println!("| store | embedded (redb), temp data dir, {} |", server::fs_type(server.dir.path())),
    }
    println!("| pods (N) | {n}, {pod_size} bytes of JSON each as sent |");
    println!("| create concurrency | {CONCURRENCY} closed-loop clients; paced run: {paced_n} more pods at {PACED_RATE}/s (open loop) on top of N |");
    println!("| watch fan-out | {WATCHERS} watches (selector matches 1 pod), {WATCH_CHANGES} merge patches |\n");
    println!("| Measurement | Result | Target | Verdict |\n|---|---|---|---|");
    println!(
        "| create throughput, {CONCURRENCY} clients | {throughput:.0} pods/s ({n} in {:.2} s) | — | — |",
        burst_wall.as_secs_f64()
    );
    println!(
        "| create latency p50 / p99 / max, {CONCURRENCY} clients | {} / {} / {} | — | — |",
        ms(burst.pct(0.5)),
        ms(burst.pct(0.99)),
        ms(burst.pct(1.0))
    );
    println!(
        "| create latency p50 / p99 / max at {PACED_RATE}/s | {} / {} / {} ({:.0}/s completed, {} errors) | p99 ≤ {} | {} |",
        ms(paced.pct(0.5)), ms(paced_p99), ms(paced.pct(1.0)), paced.samples.len() as f64 / paced_wall.as_secs_f64(), paced.errors,
        ms(TARGET_PACED_P99), verdict(paced_p99 <= TARGET_PACED_P99 && paced.errors == 0)
    );
    println!(
        "| LIST all {n} pods, p50 / max of {LIST_RUNS} | {} / {}, {:.1} MB | — | — |",
        ms(full.pct(0.5)),
        ms(full.pct(1.0)),
        full_size as f64 / 1e6
    );
    println!(
        "| LIST labelSelector ~1% ({sel_items} pods), p50 / max of {SELECTOR_LIST_RUNS} | {} / {}, {:.1} KB | — | — |",
        ms(sel.pct(0.5)),
        ms(sel.pct(1.0)),
        sel_size as f64 / 1e3
    );
    println!(
        "| watch delivery after PATCH response, p50 / p99 / max | {} / {} / {} ({} events, {} missed) | p99 ≤ {} | {} |",
        ms(fan.from_response.pct(0.5)), ms(watch_p99), ms(fan.from_response.pct(1.0)), fan.from_response.samples.len(), fan.missed,
        ms(TARGET_WATCH_P99), verdict(watch_p99 <= TARGET_WATCH_P99 && fan.missed == 0)
    );
    println!(
        "| watch delivery after PATCH request, p50 / p99 / max | {} / {} / {} | — | — |",
        ms(fan.from_request.pct(0.5)),
        ms(fan.from_request.pct(0.99)),
        ms(fan.from_request.pct(1.0))
    );
    println!("| opening {} watches | {:.2} s | — | — |", fan.opened, fan.open_time.as_secs_f64());
    println!(
        "| peak RSS (VmHWM) holding N pods, after LISTs | {} (VmRSS {}) | ≤ {} | {} |",
        mb(hwm_held),
        mb(rss_held),
        mb(TARGET_RSS_KB),
        verdict(hwm_held <= TARGET_RSS_KB)
    );
    println!("| peak RSS after {WATCHERS} watches | {} | — | — |", mb(hwm_watch));
    println!("| peak RSS at the end ({} pods) | {} | — | — |", n + paced_n, mb(hwm_end));
    if server.etcd.is_some() {
        println!("| etcd peak RSS (VmHWM) at the end | {} | — | — |", mb(etcd_hwm));
    }
    if !problems.is_empty() {
        println!("\nServer log warnings/errors ({}):\n", problems.len());
        for p in problems.iter().take(10) {
            println!("    {p}");
        }
    }
    Ok(())
}
