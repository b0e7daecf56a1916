//! Cluster DNS from one pod of a real 2-node `kaji lab` (no demo): queries per second and
//! latency percentiles of UDP questions to kube-dns (10.96.0.10, through kube-proxy's rules to
//! the kaji-dns replicas), for a Service name and for a name kaji-dns forwards to the lab's
//! dnsmasq; dnsmasq asked directly from the same pod as the reference; and how long a new
//! Service takes to resolve after `kubectl create` returns.
//!
//! The client runs in the pod's network namespace (each worker thread enters it with setns), so
//! its packets take the pod's path: its veth, the node's rules, the pod network.
//!
//! `cargo bench -p kaji-e2e --bench dns` (root). KAJI_BENCH_SECONDS (default 5) per load run,
//! KAJI_BENCH_WORKERS (default 4) questions in flight, KAJI_BENCH_NEW_SERVICES (default 5).

use hickory_server::proto::op::{Message, Query, ResponseCode};
use hickory_server::proto::rr::{Name, RecordType};
use kaji_e2e::{json, wait_for, Lab};
use std::net::{SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const NS: &str = "dns-bench";
const IMAGE: &str = "kaji.local/busybox:lab";

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// The pid of the pod's `sleep <marker>`, found in /proc.
fn pid_of_sleep(marker: &str) -> Option<u32> {
    std::fs::read_dir("/proc").ok()?.filter_map(Result::ok).find_map(|e| {
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
        let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).filter(|a| !a.is_empty()).collect();
        (args.len() == 2 && args[0].ends_with(b"sleep") && args[1] == marker.as_bytes()).then_some(pid)
    })
}

/// Moves the calling thread into the network namespace at `netns`.
fn enter(netns: &Path) {
    let f = std::fs::File::open(netns).expect("the pod's netns");
    nix::sched::setns(f, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns into the pod's netns");
}

fn query(id: u16, name: &Name) -> Vec<u8> {
    let mut m = Message::query();
    m.metadata.id = id;
    m.metadata.recursion_desired = true;
    m.add_query(Query::query(name.clone(), RecordType::A));
    m.to_vec().expect("encodes")
}

/// One question over `socket` (connected); the reply's code, or None on a timeout.
fn ask(socket: &UdpSocket, id: u16, name: &Name, buf: &mut [u8]) -> Option<(ResponseCode, usize)> {
    socket.send(&query(id, name)).ok()?;
    loop {
        let n = socket.recv(buf).ok()?;
        let Ok(reply) = Message::from_vec(&buf[..n]) else { continue };
        if reply.metadata.id == id {
            return Some((reply.metadata.response_code, reply.answers.len()));
        }
    }
}

struct Load {
    answered: usize,
    failed: usize,
    lost: usize,
    latencies: Vec<Duration>,
    elapsed: Duration,
}

/// `workers` threads in the pod's namespace, each asking `name` of `server` back to back.
fn load(netns: &Path, server: SocketAddr, name: &str, workers: u64, seconds: u64) -> Load {
    let name = Name::from_ascii(name).expect("a name");
    let start = Instant::now();
    let until = start + Duration::from_secs(seconds);
    let threads: Vec<_> = (0..workers)
        .map(|w| {
            let (netns, name) = (netns.to_path_buf(), name.clone());
            std::thread::spawn(move || {
                enter(&netns);
                let socket = UdpSocket::bind("0.0.0.0:0").expect("bind");
                socket.connect(server).expect("connect");
                socket.set_read_timeout(Some(Duration::from_secs(2))).expect("timeout");
                let mut buf = vec![0u8; 4096];
                let (mut out, mut failed, mut lost) = (Vec::new(), 0, 0);
                let mut id = (w as u16).wrapping_mul(10007);
                while Instant::now() < until {
                    id = id.wrapping_add(1);
                    let t = Instant::now();
                    match ask(&socket, id, &name, &mut buf) {
                        Some((ResponseCode::NoError, n)) if n > 0 => out.push(t.elapsed()),
                        Some(_) => failed += 1,
                        None => lost += 1,
                    }
                }
                (out, failed, lost)
            })
        })
        .collect();
    let mut all = Load { answered: 0, failed: 0, lost: 0, latencies: Vec::new(), elapsed: Duration::ZERO };
    for t in threads {
        let (lat, failed, lost) = t.join().expect("worker");
        all.answered += lat.len();
        all.failed += failed;
        all.lost += lost;
        all.latencies.extend(lat);
    }
    all.elapsed = start.elapsed();
    all.latencies.sort();
    all
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1]
}

fn report(what: &str, l: &Load) {
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "{what}: {:.0} qps ({} answered, {} failed, {} lost in {:.1}s); latency p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        l.answered as f64 / l.elapsed.as_secs_f64(),
        l.answered,
        l.failed,
        l.lost,
        l.elapsed.as_secs_f64(),
        ms(pct(&l.latencies, 0.50)),
        ms(pct(&l.latencies, 0.99)),
        ms(l.latencies.last().copied().unwrap_or_default()),
    );
}

/// From `kubectl create service` returning to the first A answer for it, polled every 5 ms from
/// the pod's namespace.
fn new_service_latency(lab: &Lab, netns: &Path, i: u64) -> Duration {
    let svc = format!("new-{i}");
    let fqdn = Name::from_ascii(format!("{svc}.{NS}.svc.cluster.local.")).expect("a name");
    let (tx, rx) = std::sync::mpsc::channel::<Instant>();
    let netns = netns.to_path_buf();
    let poller = std::thread::spawn(move || {
        enter(&netns);
        let socket = UdpSocket::bind("0.0.0.0:0").expect("bind");
        socket.connect("10.96.0.10:53").expect("connect");
        socket.set_read_timeout(Some(Duration::from_secs(1))).expect("timeout");
        let mut buf = vec![0u8; 4096];
        let created = rx.recv().expect("created");
        for id in 0u16.. {
            if let Some((ResponseCode::NoError, n)) = ask(&socket, id, &fqdn, &mut buf) {
                if n > 0 {
                    return created.elapsed();
                }
            }
            assert!(created.elapsed() < Duration::from_secs(60), "{fqdn} never resolved");
            std::thread::sleep(Duration::from_millis(5));
        }
        unreachable!()
    });
    lab.kubectl(&["create", "service", "clusterip", &svc, "-n", NS, "--tcp=80:8080"]);
    tx.send(Instant::now()).expect("poller");
    poller.join().expect("poller")
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let (seconds, workers) = (env("KAJI_BENCH_SECONDS", 5), env("KAJI_BENCH_WORKERS", 4));
    let lab = Lab::up_with(2, &["--no-demo"]);
    lab.kubectl(&["create", "namespace", NS]);
    lab.kubectl(&["create", "service", "clusterip", "web", "-n", NS, "--tcp=80:8080"]);
    let marker = format!("{}", 300_000 + u32::from(lab.port));
    lab.apply(&json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "client", "namespace": NS},
        "spec": {"terminationGracePeriodSeconds": 1,
                 "containers": [{"name": "main", "image": IMAGE, "command": ["sleep", marker]}]}}));
    lab.kubectl(&["wait", "-n", NS, "--for=condition=Ready", "pod/client", "--timeout=120s"]);
    let pid = wait_for("the client pod's process", Duration::from_secs(30), || {
        pid_of_sleep(&marker).ok_or_else(|| "not found".to_string())
    });
    let netns = PathBuf::from(format!("/proc/{pid}/ns/net"));
    let node = lab.get_json(&["pod", "-n", NS, "client"])["spec"]["nodeName"].clone();
    let load_now = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "client pod on {node}, {workers} questions in flight, {seconds}s per run; loadavg at start: {}",
        load_now.trim()
    );

    let dns: SocketAddr = "10.96.0.10:53".parse().expect("addr");
    let upstream: SocketAddr = "172.30.0.1:53".parse().expect("addr");
    // A warm-up, so both replicas have the Service and the first packets' conntrack entries.
    let _ = load(&netns, dns, "web.dns-bench.svc.cluster.local.", workers, 1);
    report(
        "kaji-dns, Service name (web.dns-bench.svc.cluster.local)",
        &load(&netns, dns, "web.dns-bench.svc.cluster.local.", workers, seconds),
    );
    report(
        "kaji-dns, forwarded to dnsmasq (registry.kaji.lab)",
        &load(&netns, dns, "registry.kaji.lab.", workers, seconds),
    );
    report(
        "reference: dnsmasq asked directly (registry.kaji.lab)",
        &load(&netns, upstream, "registry.kaji.lab.", workers, seconds),
    );

    let n = env("KAJI_BENCH_NEW_SERVICES", 5);
    let mut times: Vec<Duration> = (0..n).map(|i| new_service_latency(&lab, &netns, i)).collect();
    times.sort();
    let ms: Vec<String> = times.iter().map(|d| format!("{:.0}", d.as_secs_f64() * 1000.0)).collect();
    println!("new Service resolvable after kubectl create returned: {} ms (sorted, {n} Services)", ms.join(", "));
    let load_end = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("loadavg at end: {}", load_end.trim());
}
