//! Benchmark (not a test; needs root): render + `iptables-restore` for 1,000 and 10,000
//! services × 5 endpoints inside a throwaway network namespace, and one changed service with
//! 10,000 present. Run: `cargo bench -p kaji-proxy --bench proxy` (`KAJI_BENCH_SERVICES=N`
//! picks one size). Every iptables command runs under `ip netns exec`; the namespace is
//! deleted at the end.

use kaji_proxy::iptables::Iptables;
use kaji_proxy::model::{Endpoint, Model, ServicePort};
use kaji_proxy::render::{build, Table};
use kaji_proxy::sync::Syncer;
use std::net::Ipv4Addr;
use std::process::Command;
use std::time::{Duration, Instant};

struct Netns(String);

impl Netns {
    fn new() -> Self {
        let name = format!("kaji-proxybench-{:08x}", std::process::id());
        let ok = Command::new("ip").args(["netns", "add", &name]).status().map(|s| s.success()).unwrap_or(false);
        assert!(ok, "ip netns add {name} failed: the bench needs root and iproute2");
        Self(name)
    }

    fn iptables(&self) -> Iptables {
        let ipt = Iptables::with_prefix(vec!["ip".into(), "netns".into(), "exec".into(), self.0.clone()]);
        match std::env::var("KAJI_BENCH_IPTABLES") {
            Ok(base) => ipt.backend(&base),
            Err(_) => ipt,
        }
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

fn model(n: usize, generation: u32) -> Model {
    let services = (0..n)
        .map(|i| {
            let i = i as u32;
            let eps = (0..5u32)
                .map(|e| {
                    let ip = Ipv4Addr::from(0x0af4_0000 + i * 8 + e + generation * 4);
                    Endpoint::ready(ip, 8080, e == 0)
                })
                .collect();
            ServicePort {
                node_port: i.is_multiple_of(10).then_some(30000 + (i / 10 % 2768) as u16),
                endpoints: eps,
                ..ServicePort::new(
                    &format!("ns{}", i % 50),
                    &format!("svc-{i}"),
                    "http",
                    Ipv4Addr::from(0x0a60_0000 + i),
                    80,
                )
            }
        })
        .collect();
    Model { cluster_cidr: Some("10.244.0.0/16".into()), masquerade_all: false, services }
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

fn vm_hwm_kb() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("VmHWM:")).and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

fn bench(n: usize) {
    let ns = Netns::new();
    let mut syncer = Syncer::new(ns.iptables());
    let m = model(n, 0);

    let t = Instant::now();
    let rules = build(&m);
    let payload = rules.restore(None, &[]).map(|p| p.text).unwrap_or_default();
    let render_time = t.elapsed();
    let nat_rules = rules.rule_count(Table::Nat);

    let t = Instant::now();
    let first = syncer.apply(&rules, true).expect("first full sync");
    let first_time = t.elapsed();

    let t = Instant::now();
    syncer.sync(&m, true).expect("full resync");
    let full_time = t.elapsed();

    let t = Instant::now();
    let noop = syncer.sync(&m, false).expect("no-op sync");
    let noop_time = t.elapsed();
    assert!(!noop.restored);

    // One service's endpoints change (one replaced): build + diff + restore of its chains.
    let mut changed = m.clone();
    if let Some(sp) = changed.services.get_mut(n / 2) {
        sp.endpoints[4] = Endpoint::ready(Ipv4Addr::new(10, 250, 0, 1), 8080, false);
    }
    let t = Instant::now();
    let one = syncer.sync(&changed, false).expect("partial sync");
    let one_time = t.elapsed();

    println!(
        "| {n} | {} | {:.1} MB | {} | {} | {} | {} | {} ({} chains, {} B) |",
        nat_rules,
        payload.len() as f64 / 1e6,
        ms(render_time),
        ms(first_time),
        ms(full_time),
        ms(noop_time),
        ms(one_time),
        one.chains_written + one.chains_deleted,
        one.payload_bytes,
    );
    assert!(first.restored && one.restored && !one.full);
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let sizes: Vec<usize> = match std::env::var("KAJI_BENCH_SERVICES").ok().and_then(|s| s.parse().ok()) {
        Some(n) => vec![n],
        None => vec![1_000, 10_000],
    };
    let base = std::env::var("KAJI_BENCH_IPTABLES").unwrap_or_else(|_| "iptables".into());
    let version =
        Command::new(&base).arg("--version").output().map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    println!("iptables: {}", version.unwrap_or_else(|e| format!("unknown ({e})")));
    println!("| services × 5 eps | nat rules | payload | render | first sync (full) | full resync | no-op sync | one service changed |");
    println!("|---|---|---|---|---|---|---|---|");
    for n in sizes {
        bench(n);
    }
    println!("peak RSS of the bench process (model + rules + payload for the largest size): {} MB", vm_hwm_kb() / 1024);
}
