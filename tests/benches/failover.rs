//! Failover times on `kaji lab up --ha` (3 etcd members, 3 apiservers, 2 schedulers and 2
//! controller managers): how long what a user or a component notices lasts when a part of the
//! control plane is killed with SIGKILL. tests/ha.rs asserts that each failover happens; this
//! measures it, several rounds on one lab (the killed part is restarted between rounds):
//!
//! 1. **apiserver loss seen by a client**: writers POST ConfigMaps through kubectl's forwarder
//!    while the apiserver it prefers is killed; the longest time without an acknowledged write
//!    from the kill on, and how many writes failed.
//! 2. **leader change**: the scheduler's and the controller manager's leader is killed; the time
//!    until their Lease names the other instance (lease 15 s, retry 2 s, as Kubernetes').
//! 3. **etcd leader loss**: the same writers while the etcd leader is killed; the same figures
//!    (the members elect a new leader: etcd's election timeout is 1 s).
//!
//! A bench, not a test: it measures and reports. It runs the binaries beside it
//! (`target/release/kaji` under `cargo bench`) or those in `$KAJI_E2E_BIN_DIR`:
//! `cargo build --release --bins && cargo bench -p kaji-e2e --bench failover -- --rounds 3`
//! Options: `--rounds N` (3), `--writers W` (8). Needs root and what `kaji lab up` needs.

use kaji_e2e::api::Api;
use kaji_e2e::ha::{etcd_leader, http, leader_instance};
use kaji_e2e::{wait_for, Lab, Value};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(|v| v.parse().unwrap_or_else(|_| panic!("{name}: not a number: {v}")))
        .unwrap_or(default)
}

/// Writers creating ConfigMaps through the forwarder until dropped; each acknowledged write's
/// time since `start`, and the count of failed ones.
struct Writers {
    start: Instant,
    stop: Arc<AtomicBool>,
    acked: Arc<Mutex<Vec<Duration>>>,
    failed: Arc<AtomicU64>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Writers {
    fn start(api: &Api, n: usize, tag: &str) -> Writers {
        let start = Instant::now();
        let stop = Arc::new(AtomicBool::new(false));
        let acked = Arc::new(Mutex::new(Vec::new()));
        let failed = Arc::new(AtomicU64::new(0));
        let threads = (0..n)
            .map(|w| {
                let (stop, acked, failed, tag) = (stop.clone(), acked.clone(), failed.clone(), tag.to_string());
                let api = api.clone();
                std::thread::spawn(move || {
                    let mut i = 0;
                    while !stop.load(Ordering::SeqCst) {
                        let body = format!("{{\"metadata\":{{\"name\":\"{tag}-{w}-{i}\"}}}}");
                        if http(&api, "POST", "/api/v1/namespaces/default/configmaps", &body).0 == 201 {
                            acked.lock().expect("lock").push(start.elapsed());
                        } else {
                            failed.fetch_add(1, Ordering::SeqCst);
                            std::thread::sleep(Duration::from_millis(5));
                        }
                        i += 1;
                    }
                })
            })
            .collect();
        Writers { start, stop, acked, failed, threads }
    }

    fn acked(&self) -> usize {
        self.acked.lock().expect("lock").len()
    }

    /// Stop; (the longest time without an acknowledged write from `kill` on — from the last ack
    /// before it to the next, and between any two after it —, failed writes).
    fn finish(self, kill: Duration) -> (Duration, u64) {
        self.stop.store(true, Ordering::SeqCst);
        for t in self.threads {
            let _ = t.join();
        }
        let mut acks = self.acked.lock().expect("lock").clone();
        acks.sort();
        let stall = acks.windows(2).filter(|p| p[1] > kill).map(|p| p[1] - p[0]).max().unwrap_or(Duration::MAX);
        (stall, self.failed.load(Ordering::SeqCst))
    }
}

/// The Lease's holder, read through the forwarder (cheaper than kubectl at 10 polls a second).
fn holder(api: &Api, lease: &str) -> String {
    let (code, body) =
        http(api, "GET", &format!("/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/{lease}"), "");
    if code != 200 {
        return String::new();
    }
    serde_json::from_str::<Value>(&body)
        .ok()
        .and_then(|v| v.pointer("/spec/holderIdentity").and_then(Value::as_str).map(str::to_string))
        .unwrap_or_default()
}

fn restart(lab: &Lab, name: &str) {
    let out = lab.kaji(&["restart", name]);
    assert!(out.status.success(), "kaji lab restart {name}: {}", String::from_utf8_lossy(&out.stderr));
}

fn wait_writes(w: &Writers, more: usize, what: &str) {
    let base = w.acked();
    wait_for(what, Duration::from_secs(120), || {
        let n = w.acked();
        if n >= base + more {
            Ok(())
        } else {
            Err(format!("{} acked", n - base))
        }
    });
}

fn ms(d: Duration) -> String {
    if d == Duration::MAX {
        "never".into()
    } else {
        format!("{:.0} ms", d.as_secs_f64() * 1000.0)
    }
}

fn summary(name: &str, values: &[Duration]) -> String {
    let mut v = values.to_vec();
    v.sort();
    let med = v[v.len() / 2];
    format!("| {name} | {} | {} | {} | {} |", ms(v[0]), ms(med), ms(v[v.len() - 1]), v.len())
}

fn main() {
    let rounds = arg("--rounds", 3).max(1);
    let writers = arg("--writers", 8).max(1);
    let mut lab = Lab::up_with(1, &["--ha", "--no-demo"]);
    let api = lab.api();
    let mut rows: Vec<(&str, Vec<Duration>)> = vec![
        ("apiserver loss: longest time without an acknowledged write", vec![]),
        ("etcd leader loss: longest time without an acknowledged write", vec![]),
        ("scheduler leader change (Lease holder moves)", vec![]),
        ("controller-manager leader change (Lease holder moves)", vec![]),
    ];
    let mut notes = Vec::new();
    for round in 1..=rounds {
        // 1. The apiserver the forwarder uses: it starts with apiserver-1 and stays on the one it
        //    moved to, so round r kills apiserver-r (mod 3).
        let apiserver = format!("apiserver-{}", (round - 1) % 3 + 1);
        let w = Writers::start(&api, writers, &format!("a{round}"));
        wait_writes(&w, 20, "writes before the apiserver is killed");
        let kill = w.start.elapsed();
        lab.kill9(&apiserver);
        wait_writes(&w, 20, "writes after the apiserver was killed");
        let (stall, failed) = w.finish(kill);
        rows[0].1.push(stall);
        notes.push(format!("round {round}: {apiserver} killed: {failed} write(s) failed"));
        restart(&lab, &apiserver);

        // 3. The etcd leader.
        let leader_no = wait_for("an etcd leader", Duration::from_secs(60), || etcd_leader(&lab));
        let w = Writers::start(&api, writers, &format!("e{round}"));
        wait_writes(&w, 20, "writes before the etcd leader is killed");
        let kill = w.start.elapsed();
        lab.kill9(&format!("etcd-{leader_no}"));
        wait_writes(&w, 20, "writes after the etcd leader was killed");
        let (stall, failed) = w.finish(kill);
        rows[1].1.push(stall);
        let now = etcd_leader(&lab).map(|l| format!("etcd-{l}")).unwrap_or_else(|e| e);
        notes.push(format!(
            "round {round}: etcd-{leader_no} (leader) killed: {failed} write(s) failed; leader now {now}"
        ));
        restart(&lab, &format!("etcd-{leader_no}"));
        wait_for("etcd members all healthy again", Duration::from_secs(60), || {
            let out = lab.in_lab_netns(
                "etcdctl",
                &[
                    "--endpoints",
                    "http://127.0.0.1:2379,http://127.0.0.1:2389,http://127.0.0.1:2399",
                    "endpoint",
                    "health",
                ],
            );
            if out.status.success() {
                Ok(())
            } else {
                Err(String::from_utf8_lossy(&out.stderr).into_owned())
            }
        });

        // 2. The elected pairs.
        for (i, (prefix, lease)) in
            [("scheduler", "kube-scheduler"), ("controller-manager", "kube-controller-manager")].into_iter().enumerate()
        {
            let (name, old) = wait_for(&format!("a {prefix} leader"), Duration::from_secs(60), || {
                leader_instance(&lab, prefix, lease)
            });
            let killed = Instant::now();
            lab.kill9(&name);
            loop {
                let h = holder(&api, lease);
                if !h.is_empty() && h != old {
                    break;
                }
                assert!(killed.elapsed() < Duration::from_secs(120), "{lease} never moved from {old}");
                std::thread::sleep(Duration::from_millis(100));
            }
            rows[2 + i].1.push(killed.elapsed());
            restart(&lab, &name);
        }
        eprintln!("round {round} of {rounds} done");
    }
    let out = lab.down();
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "\nfailover on `kaji lab up --ha`, {rounds} round(s), {writers} writers; load average at the end: {}",
        load.trim()
    );
    println!("| Measurement | min | median | max | rounds |\n|---|---|---|---|---|");
    for (name, values) in &rows {
        println!("{}", summary(name, values));
    }
    for n in notes {
        println!("- {n}");
    }
    assert!(out.status.success(), "kaji lab down: {}", String::from_utf8_lossy(&out.stderr));
}
