//! The pod network's cost: sandbox network setup per pod (veth pair, address, route, NAT rules)
//! and pod-to-pod TCP round-trip latency across two nodes vs. within one. Two node network
//! namespaces made here and joined by a veth pair, each driven by the agent's own `Network` on a
//! thread that joined it; pod namespaces are real sandboxes. Root only; nothing touches the
//! machine's own network namespace, and everything is removed at the end.
//!
//! `cargo bench -p kaji-agent --bench network` (optional: `--pods 30 --round-trips 5000`).

use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use k8s_openapi::api::core::v1::{Node, Pod};
use kaji_agent::network::{Network, Settings};
use kaji_agent::sandbox::{Sandbox, Wanted};
use serde_json::json;

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn ip(args: &[&str]) -> anyhow::Result<()> {
    let out = Command::new("ip").args(args).output().context("ip")?;
    if !out.status.success() {
        bail!("ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(())
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1]
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

fn us(d: Duration) -> String {
    format!("{:.0} µs", d.as_secs_f64() * 1e6)
}

fn node(name: &str, cidr: &str, ip: &str) -> Arc<Node> {
    Arc::new(
        serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"podCIDR": cidr},
            "status": {"addresses": [{"type": "InternalIP", "address": ip}]}
        }))
        .expect("node"),
    )
}

fn pod(uid: &str) -> Pod {
    serde_json::from_value(
        json!({"metadata": {"name": uid, "namespace": "bench", "uid": uid}, "spec": {"containers": []}}),
    )
    .expect("pod")
}

/// Runs `f` on a thread that joined the network namespace file `ns`.
fn in_netns<T: Send + 'static>(
    ns: PathBuf,
    f: impl FnOnce() -> anyhow::Result<T> + Send + 'static,
) -> anyhow::Result<T> {
    std::thread::spawn(move || {
        nix::sched::setns(std::fs::File::open(&ns)?, nix::sched::CloneFlags::CLONE_NEWNET)?;
        f()
    })
    .join()
    .map_err(|_| anyhow::anyhow!("thread panicked"))?
}

struct NodeNs {
    name: String,
    ns: PathBuf,
    root: PathBuf,
    config: kaji_agent::Config,
}

/// Each attach's duration, and the sandboxes with their addresses.
type Attached = (Vec<Duration>, Vec<(Sandbox, Ipv4Addr)>);

/// On the node's thread: pod CIDR and routes, then `pods` sandboxes attached one after another.
/// Returns each attach's duration and the sandboxes with their addresses.
fn setup_node(n: &NodeNs, nodes: Vec<Arc<Node>>, pods: usize) -> anyhow::Result<Attached> {
    let (config, root, name) = (n.config.clone(), n.root.clone(), n.name.clone());
    in_netns(n.ns.clone(), move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        rt.block_on(async move {
            let net = Network::new(&config, Settings { cluster_cidr: "10.244.0.0/16".parse()? });
            net.apply_nodes(&nodes).await?;
            let mut times = Vec::new();
            let mut out = Vec::new();
            for i in 0..pods {
                let uid = format!("{name}-pod-{i}");
                let sb = Sandbox::new(
                    root.join("pods").join(&uid),
                    Wanted { net: true, ipc: false, uts: false, user: None },
                );
                let s2 = sb.clone();
                tokio::task::spawn_blocking(move || s2.ensure("p", std::path::Path::new("kaji-agent"))).await??;
                let netns = sb.netns().context("netns")?;
                let t = Instant::now();
                let addr = net.attach(&pod(&uid), &netns).await?;
                times.push(t.elapsed());
                out.push((sb, addr));
            }
            Ok((times, out))
        })
    })
}

/// An echo server inside `pod`'s namespace; returns when it listens.
fn echo_server(pod: &Sandbox) -> anyhow::Result<()> {
    let ns = pod.netns().context("netns")?;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || -> anyhow::Result<()> {
        nix::sched::setns(std::fs::File::open(&ns)?, nix::sched::CloneFlags::CLONE_NEWNET)?;
        let l = TcpListener::bind("0.0.0.0:7000")?;
        let _ = tx.send(());
        for conn in l.incoming() {
            let mut c = conn?;
            c.set_nodelay(true)?;
            std::thread::spawn(move || {
                let mut buf = [0u8; 64];
                while c.read_exact(&mut buf).is_ok() && c.write_all(&buf).is_ok() {}
            });
        }
        Ok(())
    });
    rx.recv_timeout(Duration::from_secs(5)).context("echo server did not start")
}

/// `n` 64-byte round trips from `client`'s namespace to `to:7000`, sorted.
fn round_trips(client: &Sandbox, to: Ipv4Addr, n: usize) -> anyhow::Result<Vec<Duration>> {
    let ns = client.netns().context("netns")?;
    in_netns(ns, move || {
        let mut s = TcpStream::connect((to, 7000))?;
        s.set_nodelay(true)?;
        let mut buf = [7u8; 64];
        for _ in 0..100 {
            s.write_all(&buf)?;
            s.read_exact(&mut buf)?;
        }
        let mut v = Vec::with_capacity(n);
        for _ in 0..n {
            let t = Instant::now();
            s.write_all(&buf)?;
            s.read_exact(&mut buf)?;
            v.push(t.elapsed());
        }
        v.sort();
        Ok(v)
    })
}

fn main() -> anyhow::Result<()> {
    if std::env::args().any(|a| a == "--test" || a == "--list") {
        return Ok(()); // `cargo test --benches` must not run it
    }
    anyhow::ensure!(nix::unistd::geteuid().is_root(), "the network benchmark needs root (namespaces)");
    let (pods, trips) = (arg("--pods", 30), arg("--round-trips", 5000));
    let id = std::process::id();
    let dir = tempfile::Builder::new().prefix("kaji-netbench").tempdir_in("/tmp")?;
    let names = [format!("kaji-netbench-{id}-a"), format!("kaji-netbench-{id}-b")];
    let result = (|| -> anyhow::Result<()> {
        for ns in &names {
            ip(&["netns", "add", ns])?;
            ip(&["-n", ns, "link", "set", "lo", "up"])?;
        }
        let (va, vb) = (format!("kb{id}a"), format!("kb{id}b"));
        ip(&["-n", &names[0], "link", "add", &va, "type", "veth", "peer", "name", &vb, "netns", &names[1]])?;
        for (ns, dev, addr) in [(&names[0], &va, "172.31.9.1/24"), (&names[1], &vb, "172.31.9.2/24")] {
            ip(&["-n", ns, "addr", "add", addr, "dev", dev])?;
            ip(&["-n", ns, "link", "set", dev, "up"])?;
        }
        let nodes = vec![node("a", "10.244.1.0/24", "172.31.9.1"), node("b", "10.244.2.0/24", "172.31.9.2")];
        let mk = |name: &str, ns: &str| {
            let root = dir.path().join(name);
            NodeNs {
                name: name.to_string(),
                ns: PathBuf::from(format!("/run/netns/{ns}")),
                root: root.clone(),
                config: kaji_agent::Config::new(name, "127.0.0.1".parse().expect("ip"), root),
            }
        };
        let (a, b) = (mk("a", &names[0]), mk("b", &names[1]));
        let (mut times, a_pods) = setup_node(&a, nodes.clone(), pods)?;
        let (_, b_pods) = setup_node(&b, nodes, 1)?;
        times.sort();
        echo_server(&b_pods[0].0)?;
        echo_server(&a_pods[1].0)?;
        let cross = round_trips(&a_pods[0].0, b_pods[0].1, trips)?;
        let same = round_trips(&a_pods[0].0, a_pods[1].1, trips)?;
        println!("pod network setup ({pods} pods attached one after another on a node):");
        println!("  p50 {}  p99 {}  max {}", ms(pct(&times, 0.5)), ms(pct(&times, 0.99)), ms(pct(&times, 1.0)));
        println!("pod-to-pod TCP round trip (64 B, {trips} trips, one connection):");
        println!("  within a node : p50 {}  p99 {}", us(pct(&same, 0.5)), us(pct(&same, 0.99)));
        println!("  across nodes  : p50 {}  p99 {}", us(pct(&cross, 0.5)), us(pct(&cross, 0.99)));
        println!(
            "  across/within p50 ratio: {:.2}",
            pct(&cross, 0.5).as_secs_f64() / pct(&same, 0.5).as_secs_f64().max(1e-9)
        );
        for (n, sbs) in [(&a, a_pods), (&b, b_pods)] {
            let config = n.config.clone();
            in_netns(n.ns.clone(), move || {
                for (sb, _) in &sbs {
                    sb.teardown()?;
                }
                let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
                rt.block_on(kaji_agent::network::cleanup(&config))
            })?;
        }
        Ok(())
    })();
    for ns in &names {
        let _ = ip(&["netns", "del", ns]);
    }
    result
}
