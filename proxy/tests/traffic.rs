//! Root-only: real rules in a network namespace carry real TCP connections, in both proxy modes.
//! A "node" namespace (the proxy's rules, the client) and a "pods" namespace (three backends)
//! joined by a veth pair; nothing runs or is configured outside them.

mod common;

use common::{netns_exists, Netns};
use kaji_proxy::backend::Syncer;
use kaji_proxy::model::{Endpoint, Model, ServicePort};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

const BACKENDS: [&str; 3] = ["10.244.0.11", "10.244.0.12", "10.244.0.13"];

/// TCP servers that answer every connection with their address, then close it.
struct Backends {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl Backends {
    fn start(pods: &Netns) -> Self {
        let listeners: Vec<TcpListener> = pods.run(|| {
            BACKENDS
                .iter()
                .map(|ip| {
                    let l = TcpListener::bind(format!("{ip}:8080")).expect("bind backend");
                    l.set_nonblocking(true).expect("nonblocking listener");
                    l
                })
                .collect()
        });
        let stop = Arc::new(AtomicBool::new(false));
        let threads = listeners
            .into_iter()
            .zip(BACKENDS)
            .map(|(l, ip)| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        match l.accept() {
                            Ok((mut s, _)) => {
                                let _ = s.write_all(ip.as_bytes());
                            }
                            Err(_) => std::thread::sleep(Duration::from_millis(1)),
                        }
                    }
                })
            })
            .collect();
        Self { stop, threads }
    }
}

impl Drop for Backends {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// Connects `n` times from the node namespace; counts answers by backend.
fn spread(node: &Netns, target: &'static str, n: usize) -> BTreeMap<String, usize> {
    node.run(move || {
        let addr: SocketAddr = target.parse().expect("target address");
        let mut counts = BTreeMap::new();
        for _ in 0..n {
            let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(3))
                .unwrap_or_else(|e| panic!("connect {target}: {e}"));
            s.set_read_timeout(Some(Duration::from_secs(3))).expect("read timeout");
            let mut who = String::new();
            s.read_to_string(&mut who).unwrap_or_else(|e| panic!("read from {target}: {e}"));
            *counts.entry(who).or_insert(0) += 1;
        }
        counts
    })
}

fn model(ready: [bool; 3]) -> Model {
    let eps: Vec<Endpoint> = BACKENDS
        .iter()
        .zip(ready)
        .map(|(ip, ready)| Endpoint { ready, ..Endpoint::ready(ip.parse().expect("ip"), 8080, false) })
        .collect();
    let web = ServicePort {
        node_port: Some(30080),
        endpoints: eps,
        ..ServicePort::new("demo", "web", "http", "10.96.0.10".parse().expect("ip"), 80)
    };
    let empty = ServicePort::new("demo", "empty", "", "10.96.0.20".parse().expect("ip"), 80);
    // One endpoint, the first backend: a client there reaching the service reaches itself.
    let own = ServicePort {
        endpoints: vec![Endpoint::ready(BACKENDS[0].parse().expect("ip"), 8080, false)],
        ..ServicePort::new("demo", "own", "", "10.96.0.30".parse().expect("ip"), 80)
    };
    Model { cluster_cidr: "10.244.0.0/16".parse().ok(), masquerade_all: false, services: vec![empty, web, own] }
}

#[test]
fn iptables_mode_spreads_follows_readiness_serves_node_ports_and_cleans_up() {
    spreads_follows_readiness_serves_node_ports_and_cleans_up("iptables");
}

#[test]
fn nftables_mode_spreads_follows_readiness_serves_node_ports_and_cleans_up() {
    spreads_follows_readiness_serves_node_ports_and_cleans_up("nftables");
}

fn spreads_follows_readiness_serves_node_ports_and_cleans_up(mode: &str) {
    let node = Netns::new(&format!("node-{}", &mode[..3]));
    let pods = Netns::new(&format!("pods-{}", &mode[..3]));
    let names = [node.name.clone(), pods.name.clone()];
    node.sh(&["ip", "link", "add", "kp-node", "type", "veth", "peer", "name", "kp-pod", "netns", &pods.name]);
    node.sh(&["ip", "addr", "add", "10.244.0.1/24", "dev", "kp-node"]);
    node.sh(&["ip", "link", "set", "kp-node", "up"]);
    node.sh(&["ip", "route", "add", "10.96.0.0/16", "dev", "kp-node"]);
    // The node routes hairpin traffic back to the pods namespace (this namespace only).
    node.sh(&["sysctl", "-q", "-w", "net.ipv4.ip_forward=1"]);
    for (i, ip) in BACKENDS.iter().enumerate() {
        let prefix = if i == 0 { "/24" } else { "/32" };
        pods.sh(&["ip", "addr", "add", &format!("{ip}{prefix}"), "dev", "kp-pod"]);
    }
    pods.sh(&["ip", "link", "set", "kp-pod", "up"]);
    pods.sh(&["ip", "route", "add", "default", "via", "10.244.0.1"]);
    // Something of the node's own, which kaji must leave alone.
    node.sh(&["iptables", "-t", "nat", "-A", "POSTROUTING", "-s", "10.99.0.0/16", "-j", "RETURN"]);
    node.sh(&["iptables", "-t", "filter", "-A", "INPUT", "-s", "10.99.0.0/16", "-j", "ACCEPT"]);
    node.sh(&["nft", "add table ip node-own; add chain ip node-own input { type filter hook input priority 10; }"]);
    node.sh(&["nft", "add rule ip node-own input ip saddr 10.99.0.0/16 accept"]);
    let before = node.ruleset();

    let backends = Backends::start(&pods);
    let mut syncer = Syncer::new(&node.backend(mode));
    syncer.sync(model([true; 3]), false).expect("first sync");
    let programmed = node.ruleset();
    match mode {
        "iptables" => assert!(!programmed.contains("table ip kaji-proxy"), "{programmed}"),
        _ => assert!(!programmed.contains("KUBE-SERVICES"), "{programmed}"),
    }

    // ClusterIP: 300 connections, each backend gets about a third (expected 100, sd ~8).
    let counts = spread(&node, "10.96.0.10:80", 300);
    assert_eq!(counts.len(), 3, "{counts:?}");
    for (backend, n) in &counts {
        assert!((50..=150).contains(n), "uneven spread to {backend}: {counts:?}");
    }

    // Hairpin: from the first backend's address (the primary one, so the default source) to a
    // service whose only endpoint it is. Without masquerading, the backend would get its own
    // address as the source and the connection would never complete.
    let answer = pods.run(|| {
        let mut s = TcpStream::connect_timeout(&"10.96.0.30:80".parse().expect("addr"), Duration::from_secs(3))
            .unwrap_or_else(|e| panic!("hairpin connect: {e}"));
        s.set_read_timeout(Some(Duration::from_secs(3))).expect("read timeout");
        let mut who = String::new();
        s.read_to_string(&mut who).unwrap_or_else(|e| panic!("hairpin read: {e}"));
        (s.local_addr().expect("local address"), who)
    });
    assert_eq!(answer.0.ip().to_string(), BACKENDS[0], "{answer:?}");
    assert_eq!(answer.1, BACKENDS[0], "{answer:?}");

    // The first backend turns not-ready: a partial sync moves all new traffic off it.
    let outcome = syncer.sync(model([false, true, true]), false).expect("partial sync");
    assert!(outcome.restored && !outcome.full, "{outcome:?}");
    let counts = spread(&node, "10.96.0.10:80", 100);
    assert!(!counts.contains_key(BACKENDS[0]), "{counts:?}");
    assert_eq!(counts.len(), 2, "{counts:?}");

    // NodePort on the node's own address.
    let counts = spread(&node, "10.244.0.1:30080", 30);
    assert_eq!(counts.values().sum::<usize>(), 30);
    assert!(!counts.contains_key(BACKENDS[0]), "{counts:?}");

    // No endpoints: rejected at once, not a timeout.
    let err = node
        .run(|| TcpStream::connect_timeout(&"10.96.0.20:80".parse().expect("addr"), Duration::from_secs(3)))
        .expect_err("a service without endpoints must refuse connections");
    assert_eq!(err.kind(), std::io::ErrorKind::ConnectionRefused, "{err}");

    // `kaji-proxy --cleanup` (the binary, run inside the namespace) restores the tables.
    let out = std::process::Command::new("ip")
        .args(["netns", "exec", &node.name, env!("CARGO_BIN_EXE_kaji-proxy"), "--proxy-mode", mode, "--cleanup"])
        .output()
        .expect("run kaji-proxy --cleanup");
    assert!(out.status.success(), "--cleanup: {}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(node.ruleset(), before);

    drop(backends);
    drop(node);
    drop(pods);
    for name in names {
        assert!(!netns_exists(&name), "namespace {name} left behind");
    }
}
