//! The end-to-end harness: a real `kaji lab` — the same command and code path a user runs —
//! with kubectl as the client, taken down (and checked) at the end.
//!
//! It runs the built `target/<profile>/kaji` (beside this test's `deps/` directory) and needs
//! root, `kubectl` on PATH and what `kaji lab up` checks (iproute2, util-linux's nsenter,
//! busybox-static). A missing requirement fails the test; it never skips.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

pub use serde_json::{json, Value};

pub mod api;
pub mod ha;

/// A running lab in a temp dir; `kaji lab down --purge` runs on drop if the test did not.
pub struct Lab {
    pub dir: PathBuf,
    pub port: u16,
    pub nodes: u8,
    /// What `kaji lab up` printed on stderr (its progress lines).
    pub progress: String,
    kaji: PathBuf,
    tmp: tempfile::TempDir,
    down: bool,
}

/// The workspace's `kaji` binary, beside the directory holding this test executable — or in
/// `$KAJI_E2E_BIN_DIR` when set (another build of the same binaries, e.g. an installed one).
pub fn kaji_binary() -> PathBuf {
    let profile_dir = match std::env::var_os("KAJI_E2E_BIN_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => {
            let exe = std::env::current_exe().expect("the test executable has a path");
            exe.parent().and_then(Path::parent).expect("tests run from target/<profile>/deps").to_path_buf()
        }
    };
    let kaji = profile_dir.join("kaji");
    assert!(
        kaji.exists(),
        "{} is not built: run `cargo build -p kaji-cli -p kaji-agent -p kaji-apiserver -p kaji-controllers \
         -p kaji-scheduler -p kaji-proxy -p kaji-dns` first (`cargo test --workspace` builds them)",
        kaji.display()
    );
    kaji
}

/// A port nobody listens on right now (the lab refuses clearly if it is taken meanwhile).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("a free port")
}

/// Fails (never skips) unless the machine can run a lab.
pub fn require_lab_requirements() {
    assert!(nix::unistd::geteuid().is_root(), "the end-to-end tests need root (they run `kaji lab up`)");
    let kubectl = Command::new("kubectl").args(["version", "--client"]).output();
    assert!(kubectl.is_ok_and(|o| o.status.success()), "kubectl is required on PATH (the tests use it as the client)");
}

impl Lab {
    /// `kaji lab up --dir <tmp> --port <free> --nodes <nodes>`; panics with its output on failure.
    pub fn up(nodes: u8) -> Lab {
        Self::up_with(nodes, &[])
    }

    /// The same with more `kaji lab up` flags (`--ha`, `--no-demo`).
    pub fn up_with(nodes: u8, flags: &[&str]) -> Lab {
        require_lab_requirements();
        let kaji = kaji_binary();
        let tmp = tempfile::Builder::new().prefix("kaji-e2e-").tempdir().expect("tempdir");
        let dir = tmp.path().join("lab");
        let port = free_port();
        let mut lab = Lab { dir, port, nodes, progress: String::new(), kaji, tmp, down: false };
        let n = nodes.to_string();
        let mut args = vec!["up", "--nodes", n.as_str()];
        args.extend(flags);
        let out = lab.kaji(&args);
        lab.progress = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "kaji lab up failed:\n{}\n{}", lab.progress, lab.all_logs());
        lab
    }

    /// `kaji lab <args…> --dir <dir>` (and `--port` for `up`).
    pub fn kaji(&self, args: &[&str]) -> Output {
        let mut c = Command::new(&self.kaji);
        c.arg("lab").args(args).arg("--dir").arg(&self.dir);
        if args.first() == Some(&"up") {
            c.args(["--port", &self.port.to_string()]);
        }
        c.stdin(Stdio::null()).output().expect("kaji runs")
    }

    /// The everyday `kaji` CLI (not `kaji lab`) with the lab's kubeconfig; the raw output.
    pub fn kaji_cli(&self, args: &[&str]) -> Output {
        Command::new(&self.kaji)
            .arg("--kubeconfig")
            .arg(self.kubeconfig())
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("kaji runs")
    }

    pub fn kubeconfig(&self) -> PathBuf {
        self.dir.join("kubeconfig")
    }

    /// Raw HTTPS to the API as the lab's admin.
    pub fn api(&self) -> api::Api {
        api::Api::from_kubeconfig(&self.kubeconfig(), self.port)
    }

    /// `kaji --kubeconfig <lab>` (the everyday CLI), not yet run.
    pub fn kaji_cli_command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(&self.kaji);
        c.arg("--kubeconfig").arg(self.kubeconfig()).args(args);
        c
    }

    pub fn kubectl_command(&self, args: &[&str]) -> Command {
        let mut c = Command::new("kubectl");
        c.arg("--kubeconfig").arg(self.kubeconfig()).arg("--cache-dir").arg(self.tmp.path().join("kube-cache"));
        c.args(args);
        c
    }

    /// kubectl with the lab's kubeconfig; the raw output.
    pub fn kubectl_output(&self, args: &[&str], stdin: Option<&str>) -> Output {
        let mut c = self.kubectl_command(args);
        c.stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = c.spawn().expect("kubectl runs");
        if let Some(input) = stdin {
            use std::io::Write as _;
            child.stdin.take().expect("piped stdin").write_all(input.as_bytes()).expect("write kubectl stdin");
        }
        child.wait_with_output().expect("kubectl finishes")
    }

    /// kubectl that must succeed; its stdout.
    pub fn kubectl(&self, args: &[&str]) -> String {
        let out = self.kubectl_output(args, None);
        assert!(out.status.success(), "kubectl {} failed: {}", args.join(" "), String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `kubectl get <args> -o json`, parsed.
    pub fn get_json(&self, args: &[&str]) -> Value {
        let mut all = vec!["get"];
        all.extend(args);
        all.extend(["-o", "json"]);
        serde_json::from_str(&self.kubectl(&all)).expect("kubectl -o json prints JSON")
    }

    /// The apiserver's `/metrics` (Prometheus text), read through kubectl.
    pub fn metrics(&self) -> String {
        self.kubectl(&["get", "--raw", "/metrics"])
    }

    /// `kubectl apply -f -` of `object`.
    pub fn apply(&self, object: &Value) {
        let out = self.kubectl_output(&["apply", "-f", "-"], Some(&object.to_string()));
        assert!(out.status.success(), "kubectl apply failed: {}\n{object}", String::from_utf8_lossy(&out.stderr));
    }

    /// The pid `kaji lab up` recorded for component `name`.
    pub fn pid(&self, name: &str) -> i32 {
        let p = self.dir.join(format!("{name}.pid"));
        std::fs::read_to_string(&p)
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or_else(|| panic!("no pid in {}", p.display()))
    }

    /// SIGKILL component `name` (a crash), by the pid the lab recorded.
    pub fn kill9(&self, name: &str) {
        let pid = self.pid(name);
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
    }

    /// `cmd args…` inside the lab's network namespace (etcdctl, curl-like probes).
    pub fn in_lab_netns(&self, cmd: &str, args: &[&str]) -> Output {
        Command::new("nsenter")
            .arg(format!("--net=/run/netns/kaji-lab-{}", self.port))
            .arg("--")
            .arg(cmd)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("nsenter runs")
    }

    /// The root directory of node `i`'s agent.
    pub fn node_dir(&self, i: u8) -> PathBuf {
        self.dir.join(format!("node-{i}"))
    }

    pub fn node_name(i: u8) -> String {
        format!("kaji-lab-node-{i}")
    }

    pub fn node_ip(i: u8) -> String {
        format!("172.30.0.{}", 10 + u16::from(i))
    }

    /// Every component log, for failure messages.
    pub fn all_logs(&self) -> String {
        let mut out = String::new();
        let Ok(entries) = std::fs::read_dir(&self.dir) else { return out };
        let mut logs: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "log"))
            .collect();
        logs.sort();
        for p in logs {
            let text = std::fs::read_to_string(&p).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(30).collect();
            out += &format!("--- {} (last {} lines)\n", p.display(), tail.len());
            for l in tail.into_iter().rev() {
                out += l;
                out.push('\n');
            }
        }
        out
    }

    /// `kaji lab down --purge`; its output. Drop will not run it again.
    pub fn down(&mut self) -> Output {
        self.down = true;
        self.kaji(&["down", "--purge"])
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        if !self.down {
            let out = self.kaji(&["down", "--purge"]);
            if !out.status.success() {
                eprintln!("kaji lab down after a failure: {}", String::from_utf8_lossy(&out.stderr));
            }
        }
    }
}

/// One sample line of a Prometheus text exposition, `name{a="x",b="y"} value`: its name, labels
/// and value. Comments, blank and malformed lines give None.
pub fn parse_metric(line: &str) -> Option<(&str, BTreeMap<&str, String>, f64)> {
    if line.starts_with('#') {
        return None;
    }
    let (series, value) = line.trim().rsplit_once(' ')?;
    let value = value.parse().ok()?;
    let Some((name, mut rest)) = series.split_once('{') else {
        return Some((series, BTreeMap::new(), value));
    };
    let mut labels = BTreeMap::new();
    loop {
        rest = rest.trim_start_matches(',');
        if rest == "}" {
            return Some((name, labels, value));
        }
        let (label, after) = rest.split_once("=\"")?;
        let mut text = String::new();
        let mut chars = after.char_indices();
        let end = loop {
            match chars.next()? {
                (i, '"') => break i,
                (_, '\\') => match chars.next()?.1 {
                    'n' => text.push('\n'),
                    c => text.push(c),
                },
                (_, c) => text.push(c),
            }
        };
        labels.insert(label, text);
        rest = &after[end + 1..];
    }
}

/// Polls `f` until it returns Some, at most `timeout`; panics with `what` and the last attempt.
pub fn wait_for<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Result<T, String>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        match f() {
            Ok(v) => return v,
            Err(last) if Instant::now() > deadline => panic!("{what}: not after {}s; last: {last}", timeout.as_secs()),
            Err(_) => std::thread::sleep(Duration::from_millis(300)),
        }
    }
}

/// A snapshot of the host's network namespace: links, addresses, routes, forwarding, iptables.
/// The lab must leave it exactly as it was.
pub fn host_network_snapshot() -> String {
    let run = |args: &[&str]| {
        Command::new(args[0])
            .args(&args[1..])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_else(|e| format!("{args:?}: {e}"))
    };
    let links: Vec<String> =
        run(&["ip", "-o", "link", "show"]).lines().filter_map(|l| l.split(": ").nth(1).map(str::to_string)).collect();
    let addrs: Vec<String> = run(&["ip", "-o", "addr", "show"])
        .lines()
        .map(|l| l.split_whitespace().skip(1).take(3).collect::<Vec<_>>().join(" "))
        .collect();
    let forwarding = std::fs::read_to_string("/proc/sys/net/ipv4/ip_forward").unwrap_or_default();
    format!(
        "links: {links:?}\naddresses: {addrs:?}\nroutes:\n{}ip_forward: {forwarding}filter:\n{}nat:\n{}",
        run(&["ip", "route", "show", "table", "all"]),
        run(&["iptables", "-S"]),
        run(&["iptables", "-t", "nat", "-S"]),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metric_lines_parse_with_their_labels() {
        let line = r#"apiserver_request_total{verb="PATCH",resource="nodes",subresource="status",code="200"} 6"#;
        let (name, labels, value) = parse_metric(line).expect("a sample");
        assert_eq!((name, value), ("apiserver_request_total", 6.0));
        assert_eq!(labels["verb"], "PATCH");
        assert_eq!(labels["subresource"], "status");
        assert_eq!(labels.len(), 4);
        let (name, labels, value) = parse_metric("kaji_storage_live_bytes 123456").expect("a sample");
        assert_eq!((name, labels.len(), value), ("kaji_storage_live_bytes", 0, 123456.0));
        let (_, labels, _) = parse_metric(r#"m{a="x \"y\", z",b=""} 1"#).expect("escapes");
        assert_eq!((labels["a"].as_str(), labels["b"].as_str()), (r#"x "y", z"#, ""));
        assert_eq!(parse_metric("# TYPE apiserver_request_total counter"), None);
        assert_eq!(parse_metric(r#"m{a="x} 1"#), None);
        assert_eq!(parse_metric("m notanumber"), None);
    }
}
