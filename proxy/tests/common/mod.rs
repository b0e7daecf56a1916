//! Throwaway network namespaces for root-only tests: every iptables and nft command runs inside
//! one, and the namespace is deleted on drop (even when the test fails).

#![allow(dead_code)]

pub mod golden;
pub mod models;

use kaji_proxy::backend::Backend;
use kaji_proxy::iptables::Iptables;
use kaji_proxy::nftables::Nft;
use std::fs::File;
use std::process::Command;

/// Fails (never skips) when the test cannot run here: CI runs these as root with iptables.
pub fn require_prerequisites() {
    let uid = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("Uid:")).map(|l| l.split_whitespace().nth(1).map(String::from)))
        .flatten();
    assert_eq!(uid.as_deref(), Some("0"), "this test needs root (network namespaces, iptables); CI runs it as root");
    for tool in ["ip", "iptables", "iptables-restore", "iptables-save", "nft"] {
        let found =
            std::env::var_os("PATH").map(|p| std::env::split_paths(&p).any(|d| d.join(tool).exists())).unwrap_or(false)
                || std::path::Path::new("/usr/sbin").join(tool).exists();
        assert!(found, "{tool} is missing: apt-get install -y iptables iproute2 nftables");
    }
}

pub struct Netns {
    pub name: String,
}

impl Netns {
    pub fn new(role: &str) -> Self {
        require_prerequisites();
        let name = format!("kaji-proxytest-{role}-{:08x}", fastrand::u32(..));
        let out = Command::new("ip").args(["netns", "add", &name]).output().expect("run ip netns add");
        assert!(out.status.success(), "ip netns add {name}: {}", String::from_utf8_lossy(&out.stderr));
        let ns = Self { name };
        ns.sh(&["ip", "link", "set", "lo", "up"]);
        ns
    }

    /// Runs a command inside the namespace; panics with its stderr if it fails.
    pub fn sh(&self, args: &[&str]) -> String {
        let out =
            Command::new("ip").args(["netns", "exec", &self.name]).args(args).output().expect("run ip netns exec");
        assert!(out.status.success(), "{args:?} in {}: {}", self.name, String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The iptables binaries, run inside this namespace.
    pub fn iptables(&self) -> Iptables {
        Iptables::with_prefix(vec!["ip".into(), "netns".into(), "exec".into(), self.name.clone()])
    }

    /// nf_tables inside this namespace: netlink batches, and the nft binary for listings.
    pub fn nft(&self) -> Nft {
        Nft::in_netns(&self.name)
    }

    /// As `nft`, with transactions as text to the nft binary.
    pub fn nft_text(&self) -> Nft {
        Nft::in_netns(&self.name).through_nft()
    }

    /// This namespace's tools for `mode` ("iptables" or "nftables").
    pub fn backend(&self, mode: &str) -> Backend {
        match mode {
            "iptables" => Backend::Iptables(self.iptables()),
            "nftables" => Backend::Nftables(self.nft()),
            other => panic!("unknown proxy mode {other}"),
        }
    }

    /// The iptables tables (`tables`) and every other nftables table without counters or set
    /// contents: what a test compares before and after `--cleanup`. (iptables-nft's own tables
    /// are left to `iptables-save`: it keeps built-in chains it once created, which is no change.)
    pub fn ruleset(&self) -> String {
        let mut out = self.tables();
        let mut keep = false;
        for line in self.sh(&["nft", "-s", "list", "ruleset"]).lines() {
            if line.starts_with("table ") {
                let iptables_nft =
                    ["filter", "nat", "mangle", "raw", "security"].iter().any(|t| line == format!("table ip {t} {{"));
                keep = !iptables_nft;
            }
            if keep {
                out.push_str(line);
                out.push('\n');
            }
        }
        out
    }

    /// Our nftables table, normalised for comparison: one line per rule ("chain #n: rule", n its
    /// place in the chain) and per map or set element ("map: element"), sorted, so that chain
    /// creation order and the kernel's element order do not matter. Empty without the table.
    pub fn nft_objects(&self) -> Vec<String> {
        let out = std::process::Command::new("ip")
            .args(["netns", "exec", &self.name, "nft", "-j", "-s", "list", "table", "ip", "kaji-proxy"])
            .output()
            .expect("run nft");
        if !out.status.success() {
            return Vec::new();
        }
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("nft -j prints JSON");
        let mut lines = Vec::new();
        let mut place: std::collections::HashMap<String, usize> = Default::default();
        for obj in v["nftables"].as_array().into_iter().flatten() {
            if let Some(rule) = obj.get("rule") {
                let chain = rule["chain"].as_str().unwrap_or("").to_string();
                let n = place.entry(chain.clone()).or_default();
                *n += 1;
                lines.push(format!("rule {chain} #{n}: {}", rule["expr"]));
            } else if let Some(chain) = obj.get("chain") {
                let hook = chain.get("hook").map(|h| format!(" hook {h} {}", chain["prio"])).unwrap_or_default();
                lines.push(format!("chain {}{hook}", chain["name"].as_str().unwrap_or("")));
            } else if let Some(set) = obj.get("set").or_else(|| obj.get("map")) {
                let name = set["name"].as_str().unwrap_or("");
                lines.push(format!("set {name}: {} {}", set["type"], set.get("flags").cloned().unwrap_or_default()));
                for e in set.get("elem").and_then(|e| e.as_array()).into_iter().flatten() {
                    lines.push(format!("element {name}: {e}"));
                }
            }
        }
        lines.sort();
        lines
    }

    /// Runs `f` on a thread that has joined this namespace: sockets it creates live there.
    pub fn run<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> T {
        let path = format!("/var/run/netns/{}", self.name);
        std::thread::spawn(move || {
            let file = File::open(&path).unwrap_or_else(|e| panic!("open {path}: {e}"));
            nix::sched::setns(&file, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns into the test namespace");
            f()
        })
        .join()
        .expect("thread in the test namespace panicked")
    }

    /// `iptables-save` for both tables without comments and counters: comparable snapshots.
    pub fn tables(&self) -> String {
        let mut out = String::new();
        for table in ["filter", "nat"] {
            for line in self.sh(&["iptables-save", "-t", table]).lines() {
                if line.starts_with('#') {
                    continue;
                }
                let line = match line.find(" [") {
                    Some(i) if line.starts_with(':') => &line[..i],
                    _ => line,
                };
                out.push_str(line);
                out.push('\n');
            }
        }
        out
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.name]).status();
    }
}

/// True if a namespace with this name still exists.
pub fn netns_exists(name: &str) -> bool {
    std::path::Path::new("/var/run/netns").join(name).exists()
}
