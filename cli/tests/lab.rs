//! `kaji lab up/status/down` as a user runs them, with kubectl reading the demo workload.

use std::path::{Path, PathBuf};
use std::process::Command;

fn kaji(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_kaji")).args(args).output().expect("kaji runs")
}

/// Runs `kaji lab down --purge` even when an assertion fails.
struct Lab(PathBuf);

impl Drop for Lab {
    fn drop(&mut self) {
        let dir = self.0.to_string_lossy().to_string();
        let _ = kaji(&["lab", "down", "--dir", &dir, "--purge"]);
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port()
}

fn pid(dir: &Path, c: &str) -> String {
    std::fs::read_to_string(dir.join(format!("{c}.pid"))).expect("pid file").trim().to_string()
}

#[test]
fn lab_up_serves_the_demo_workload_and_down_stops_everything() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("lab");
    let lab = Lab(dir.clone());
    let d = dir.to_string_lossy().to_string();
    let port = free_port().to_string();
    let up = kaji(&["lab", "up", "--dir", &d, "--port", &port]);
    let progress = String::from_utf8_lossy(&up.stderr);
    assert!(up.status.success(), "lab up failed: {progress}");
    assert!(progress.contains("starting kaji-apiserver (embedded store) ... done"), "{progress}");
    assert!(progress.contains("starting kaji-scheduler (metrics on"), "{progress}");
    assert!(progress.contains("starting kaji-controller-manager (metrics on"), "{progress}");

    let out = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(dir.join("kubeconfig"))
        .arg("--cache-dir")
        .arg(tmp.path().join("cache"))
        .args(["get", "deployment,service", "-n", "demo", "-o", "name"])
        .output()
        .expect("kubectl runs");
    let names = String::from_utf8_lossy(&out.stdout);
    assert!(names.contains("deployment.apps/hello") && names.contains("service/hello"), "{names}");

    // The controllers turn the demo Deployment into a ReplicaSet and two pods. As root the lab has
    // a node whose agent runs them; otherwise the scheduler reports them unschedulable.
    let root = nix::unistd::geteuid().is_root();
    let kubectl = |args: &[&str]| {
        let out = Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(dir.join("kubeconfig"))
            .arg("--cache-dir")
            .arg(tmp.path().join("cache"))
            .args(args)
            .output()
            .expect("kubectl runs");
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let (query, want) = if root {
        ("jsonpath={range .items[*]}{.status.phase}/{.status.containerStatuses[0].ready}{\"\\n\"}{end}", "Running/true")
    } else {
        ("jsonpath={range .items[*]}{.status.conditions[0].reason}{\"\\n\"}{end}", "Unschedulable")
    };
    loop {
        let pods = kubectl(&["get", "pods", "-n", "demo", "-o", query]);
        if pods.lines().filter(|l| *l == want).count() == 2 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "demo pods never {want}: {pods:?}");
        std::thread::sleep(std::time::Duration::from_millis(300));
    }
    if root {
        let nodes: serde_json::Value = serde_json::from_str(&kubectl(&["get", "nodes", "-o", "json"])).expect("json");
        let node = &nodes["items"][0];
        assert_eq!(node["metadata"]["name"], "kaji-lab-node-1");
        let ready = node["status"]["conditions"].as_array().into_iter().flatten().find(|c| c["type"] == "Ready");
        assert_eq!(ready.map(|c| c["status"].clone()), Some(serde_json::json!("True")), "{node}");
    }
    assert!(kubectl(&["get", "rs", "-n", "demo", "-o", "name"]).contains("replicaset.apps/hello-"));

    let status = String::from_utf8_lossy(&kaji(&["lab", "status", "--dir", &d]).stdout).to_string();
    let components: &[&str] = if root {
        &["apiserver", "controller-manager", "scheduler", "agent"]
    } else {
        &["apiserver", "controller-manager", "scheduler"]
    };
    for c in components {
        assert!(status.contains(&format!("kaji-{c}: running")), "{status}");
    }
    let pids: Vec<String> = components.iter().map(|c| pid(&dir, c)).collect();
    let parent = if root {
        std::fs::read_to_string(dir.join("node-1/cgroup-parent")).expect("cgroup parent")
    } else {
        String::new()
    };

    let again = kaji(&["lab", "up", "--dir", &d, "--port", &port]);
    assert!(!again.status.success(), "a second lab on the same dir is refused");

    assert!(kaji(&["lab", "down", "--dir", &d, "--purge"]).status.success());
    for p in &pids {
        assert!(
            !Path::new(&format!("/proc/{p}/exe")).exists() || std::fs::read_link(format!("/proc/{p}/exe")).is_err(),
            "pid {p} still running"
        );
    }
    assert!(!dir.exists(), "--purge removed the lab dir");
    if root {
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
        assert!(!mounts.contains(&d), "mounts left behind under {d}");
        for h in ["memory", "cpu", "pids"] {
            let left = Path::new("/sys/fs/cgroup").join(h).join(&parent);
            assert!(!left.exists(), "cgroup {} left behind", left.display());
        }
        let unified = Path::new("/sys/fs/cgroup").join(&parent);
        assert!(parent.is_empty() || !unified.exists(), "cgroup {} left behind", unified.display());
    }
    drop(lab);
}
