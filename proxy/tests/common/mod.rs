//! Throwaway network namespaces for root-only tests: every iptables command runs inside one,
//! and the namespace is deleted on drop (even when the test fails).

#![allow(dead_code)]

pub mod models;

use kaji_proxy::iptables::Iptables;
use std::fs::File;
use std::process::Command;

/// Fails (never skips) when the test cannot run here: CI runs these as root with iptables.
pub fn require_prerequisites() {
    let uid = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("Uid:")).map(|l| l.split_whitespace().nth(1).map(String::from)))
        .flatten();
    assert_eq!(uid.as_deref(), Some("0"), "this test needs root (network namespaces, iptables); CI runs it as root");
    for tool in ["ip", "iptables", "iptables-restore", "iptables-save"] {
        let found =
            std::env::var_os("PATH").map(|p| std::env::split_paths(&p).any(|d| d.join(tool).exists())).unwrap_or(false)
                || std::path::Path::new("/usr/sbin").join(tool).exists();
        assert!(found, "{tool} is missing: apt-get install -y iptables iproute2");
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
