//! Benchmark (not a test; needs root): both proxy modes with 1,000 and 10,000 services × 5
//! endpoints inside a throwaway network namespace — render, first sync, full resync, no-op sync,
//! one changed service — and the proxy's own RSS (the real binary, fed by an apiserver in this
//! process). Run: `cargo bench -p kaji-proxy --bench proxy`. `KAJI_BENCH_SERVICES=N` picks one
//! size, `KAJI_BENCH_MODE=iptables,nftables,rss` the parts (all by default; rss runs the
//! nftables mode, `KAJI_BENCH_RSS_MODE=iptables` the other), `KAJI_BENCH_IPTABLES=
//! iptables-legacy|iptables-nft` the iptables backend, `KAJI_BENCH_SHOW_LOG=1` prints the tail of
//! the rss part's proxy log (each sync's `took_ms` and `model_ms`). Every iptables and nft command runs under
//! `ip netns exec`; the namespaces are deleted at the end.

mod rss;

use kaji_proxy::iptables::Iptables;
use kaji_proxy::model::{Endpoint, Model, ServicePort};
use kaji_proxy::nftables::{self, Nft};
use kaji_proxy::render::{build, Table};
use kaji_proxy::sync::Syncer;
use std::net::Ipv4Addr;
use std::process::Command;
use std::time::{Duration, Instant};

struct Netns(String);

impl Netns {
    fn new(role: &str) -> Self {
        let name = format!("kaji-proxybench-{role}-{:08x}", std::process::id());
        let ok = Command::new("ip").args(["netns", "add", &name]).status().map(|s| s.success()).unwrap_or(false);
        assert!(ok, "ip netns add {name} failed: the bench needs root and iproute2");
        let ok = Command::new("ip")
            .args(["netns", "exec", &name, "ip", "link", "set", "lo", "up"])
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        assert!(ok, "cannot bring up lo in {name}");
        Self(name)
    }

    fn prefix(&self) -> Vec<String> {
        vec!["ip".into(), "netns".into(), "exec".into(), self.0.clone()]
    }

    fn iptables(&self) -> Iptables {
        let ipt = Iptables::with_prefix(self.prefix());
        match std::env::var("KAJI_BENCH_IPTABLES") {
            Ok(base) => ipt.backend(&base),
            Err(_) => ipt,
        }
    }

    fn nft(&self) -> Nft {
        Nft::in_netns(&self.0)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

fn service(i: u32, generation: u32) -> ServicePort {
    let eps = (0..5u32)
        .map(|e| {
            let ip = Ipv4Addr::from(0x0af4_0000 + i * 8 + e + generation * 4);
            Endpoint::ready(ip, 8080, e == 0)
        })
        .collect();
    ServicePort {
        node_port: i.is_multiple_of(10).then_some(30000 + (i / 10 % 2768) as u16),
        endpoints: eps,
        ..ServicePort::new(&format!("ns{}", i % 50), &format!("svc-{i}"), "http", Ipv4Addr::from(0x0a60_0000 + i), 80)
    }
}

fn model(n: usize, generation: u32) -> Model {
    let mut services: Vec<ServicePort> = (0..n as u32).map(|i| service(i, generation)).collect();
    sort(&mut services);
    Model { cluster_cidr: "10.244.0.0/16".parse().ok(), masquerade_all: false, services }
}

/// In key order, as the proxy's own models are (`build::assemble`).
fn sort(services: &mut [ServicePort]) {
    services.sort_by(|a, b| {
        (&a.namespace, &a.name, &a.port_name, a.protocol).cmp(&(&b.namespace, &b.name, &b.port_name, b.protocol))
    });
}

/// The model with one endpoint of one service replaced.
fn one_endpoint_replaced(m: &Model) -> Model {
    let mut changed = m.clone();
    let n = changed.services.len();
    if let Some(sp) = changed.services.get_mut(n / 2) {
        sp.endpoints[4] = Endpoint::ready(Ipv4Addr::new(10, 250, 0, 1), 8080, false);
    }
    changed
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

fn timed<T>(f: impl FnOnce() -> T) -> (T, Duration) {
    let t = Instant::now();
    let out = f();
    (out, t.elapsed())
}

fn vm_hwm_kb() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("VmHWM:")).and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

fn bench_iptables(n: usize) {
    let ns = Netns::new("ipt");
    let mut syncer = Syncer::new(ns.iptables());
    let m = model(n, 0);

    let ((rules, payload), render_time) = timed(|| {
        let rules = build(&m);
        let payload = rules.restore(None, &[]).map(|p| p.text).unwrap_or_default();
        (rules, payload)
    });
    let nat_rules = rules.rule_count(Table::Nat);
    let (first, first_time) = timed(|| syncer.apply(&rules, true).expect("first full sync"));
    let (_, full_time) = timed(|| syncer.sync(&m, true).expect("full resync"));
    let (noop, noop_time) = timed(|| syncer.sync(&m, false).expect("no-op sync"));
    assert!(!noop.restored);
    let changed = one_endpoint_replaced(&m);
    let (one, one_time) = timed(|| syncer.sync(&changed, false).expect("partial sync"));

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

/// The largest peak RSS of any child waited for so far (nft, for the text writer), in KiB.
fn children_max_rss_kb() -> i64 {
    nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_CHILDREN).map(|u| u.max_rss()).unwrap_or(0)
}

fn bench_nftables(n: usize, writer: &str) {
    let ns = Netns::new("nft");
    let nft = match writer {
        "nft" => ns.nft().through_nft(),
        _ => ns.nft(),
    };
    let mut syncer = nftables::Syncer::new(nft);
    let m = model(n, 0);

    let (payload, render_time) = timed(|| nftables::render(&m));
    let chains = payload.lines().filter(|l| l.starts_with("\tchain ")).count();
    let rules = payload.lines().filter(|l| l.starts_with("\t\t") && !l.contains(" : ")).count();
    drop(payload);
    let (first, first_time) = timed(|| syncer.sync(&m, true).expect("first full sync"));
    let (_, full_time) = timed(|| syncer.sync(&m, true).expect("full resync"));
    let (noop, noop_time) = timed(|| syncer.sync(&m, false).expect("no-op sync"));
    assert!(!noop.restored);
    let changed = one_endpoint_replaced(&m);
    let (one, one_time) = timed(|| syncer.sync(&changed, false).expect("partial sync"));
    // What a partial sync computes before it writes anything, piece by piece.
    if writer == "netlink" {
        use nftables::plan::{self, Applied};
        use nftables::render::{elements, hairpin};
        let (copy, copy_time) = timed(|| changed.clone());
        let ((e, _), e_time) = timed(|| elements(&copy));
        let (h, h_time) = timed(|| hairpin(&copy));
        let applied = Applied { model: m.clone(), elements: elements(&m).0, hairpin: hairpin(&m) };
        let (changes, changes_time) = timed(|| plan::changes(&applied.model, &copy));
        let (carried, carry_time) = timed(|| plan::carried_elements(&applied, &changes));
        assert_eq!(carried.as_ref(), Some(&e));
        let (p, p_time) = timed(|| plan::partial(&applied, &copy, &changes, &e, &h));
        assert!(!p.is_empty());
        println!(
            "(partial sync at {n}: model copy {}, changed service ports {}, map elements {} built / {} carried over, hairpin set {}, plan {})",
            ms(copy_time),
            ms(changes_time),
            ms(e_time),
            ms(carry_time),
            ms(h_time),
            ms(p_time)
        );
    }
    // A new service adds map elements: nft then loads its cache of the table (and the chain
    // emptied above is deleted in the same transaction).
    let mut added = changed.clone();
    added.services.push(service(n as u32 + 1, 0));
    sort(&mut added.services);
    let (add, add_time) = timed(|| syncer.sync(&added, false).expect("partial sync adding a service"));

    println!(
        "| {writer} | {n} | {chains} chains, {rules} rules | {:.1} MB | {} | {} | {} | {} | {} ({} chains, {} B) | {} ({} chains, {} elements) |",
        first.payload_bytes as f64 / 1e6,
        ms(render_time),
        ms(first_time),
        ms(full_time),
        ms(noop_time),
        ms(one_time),
        one.chains_written + one.chains_deleted,
        one.payload_bytes,
        ms(add_time),
        add.chains_written + add.chains_deleted,
        add.elements_written,
    );
    assert!(first.restored && one.restored && !one.full && add.restored && !add.full);
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let sizes: Vec<usize> = match std::env::var("KAJI_BENCH_SERVICES").ok().and_then(|s| s.parse().ok()) {
        Some(n) => vec![n],
        None => vec![1_000, 10_000],
    };
    let parts = std::env::var("KAJI_BENCH_MODE").unwrap_or_else(|_| "iptables,nftables,rss".into());
    let parts: Vec<&str> = parts.split(',').map(str::trim).collect();

    if parts.contains(&"iptables") {
        let base = std::env::var("KAJI_BENCH_IPTABLES").unwrap_or_else(|_| "iptables".into());
        let version = Command::new(&base)
            .arg("--version")
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
        println!("iptables mode: {}", version.unwrap_or_else(|e| format!("unknown ({e})")));
        println!("| services × 5 eps | nat rules | payload | render | first sync (full) | full resync | no-op sync | one service changed |");
        println!("|---|---|---|---|---|---|---|---|");
        for n in &sizes {
            bench_iptables(*n);
        }
        println!("peak RSS of the bench process so far: {} MiB\n", vm_hwm_kb() / 1024);
    }
    if parts.contains(&"nftables") {
        let version = Command::new("nft")
            .arg("--version")
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
        println!("nftables mode: {}", version.unwrap_or_else(|e| format!("unknown ({e})")));
        println!("| writer | services × 5 eps | objects | payload | render | first sync (full) | full resync | no-op sync | one service changed | one service added |");
        println!("|---|---|---|---|---|---|---|---|---|---|");
        // netlink first: the text writer's nft children set the children's peak RSS below.
        let writers = std::env::var("KAJI_BENCH_NFT_WRITERS").unwrap_or_else(|_| "netlink,nft".into());
        for n in &sizes {
            for writer in writers.split(',').map(str::trim) {
                bench_nftables(*n, writer);
            }
        }
        println!(
            "largest peak RSS of a child process (nft, with the text writer): {:.1} MiB\n",
            children_max_rss_kb() as f64 / 1024.0
        );
    }
    if parts.contains(&"rss") {
        let mode = std::env::var("KAJI_BENCH_RSS_MODE").unwrap_or_else(|_| "nftables".into());
        let writer = std::env::var("KAJI_BENCH_RSS_WRITER").unwrap_or_else(|_| "netlink".into());
        println!("kaji-proxy --proxy-mode {mode} --nftables-writer {writer} against an apiserver holding N Services + N EndpointSlices (RSS after 20 endpoint changes):");
        println!("| services × 5 eps | create objects | first sync (proxy's log) | one endpoint changed (log, median of 20; model part) | proxy RSS (anon + file) | proxy peak RSS |");
        println!("|---|---|---|---|---|---|");
        for n in &sizes {
            let ns = Netns::new("rss");
            let r = rss::measure(&ns.0, *n, &mode, &writer);
            println!(
                "| {n} | {:.1} s | {} | {} ({}) | {:.1} MiB ({:.1} + {:.1}) | {:.1} MiB ({:.1} MB) |",
                r.create.as_secs_f64(),
                ms(r.first_sync),
                ms(r.partial_sync),
                ms(r.partial_model),
                r.rss_kb as f64 / 1024.0,
                r.anon_kb as f64 / 1024.0,
                r.file_kb as f64 / 1024.0,
                r.hwm_kb as f64 / 1024.0,
                r.hwm_kb as f64 * 1024.0 / 1e6
            );
        }
    }
}
