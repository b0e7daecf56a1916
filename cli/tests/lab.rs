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

    // The controllers turn the demo Deployment into a ReplicaSet and two pods; with no nodes the
    // scheduler reports them unschedulable.
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
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let pods = kubectl(&[
            "get",
            "pods",
            "-n",
            "demo",
            "-o",
            "jsonpath={range .items[*]}{.status.conditions[0].reason}{\"\\n\"}{end}",
        ]);
        if pods.lines().filter(|l| *l == "Unschedulable").count() == 2 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "demo pods not created and reported unschedulable: {pods:?}");
        std::thread::sleep(std::time::Duration::from_millis(300));
    }
    assert!(kubectl(&["get", "rs", "-n", "demo", "-o", "name"]).contains("replicaset.apps/hello-"));

    let status = String::from_utf8_lossy(&kaji(&["lab", "status", "--dir", &d]).stdout).to_string();
    for c in ["apiserver", "controller-manager", "scheduler"] {
        assert!(status.contains(&format!("kaji-{c}: running")), "{status}");
    }
    let pids = [pid(&dir, "apiserver"), pid(&dir, "controller-manager"), pid(&dir, "scheduler")];

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
    drop(lab);
}
