//! The apiserver under test: the child process, its temp dir and log, and the host it runs on.

use anyhow::{bail, ensure, Context, Result};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The apiserver child process, its temp dir, and its log; stopped with SIGTERM on drop.
pub struct Server {
    child: Child,
    pub base: String,
    pub dir: tempfile::TempDir,
    pub bin: PathBuf,
    /// With `KAJI_BENCH_STORAGE=etcd`: the etcd member the apiserver stores in.
    pub etcd: Option<kaji_apiserver::storage::etcd_member::Cluster>,
    /// With `KAJI_BENCH_TLS=1`: what the client needs to reach the HTTPS server as an admin.
    pub tls: Option<ClientTls>,
}

/// The CA a client verifies the server with, and the admin's certificate (`system:masters`).
pub struct ClientTls {
    pub ca_pem: String,
    pub cert_pem: String,
    pub key_pem: String,
}

/// `KAJI_BENCH_TLS=1`: the apiserver serves HTTPS only, authenticates client certificates of a
/// fresh CA and authorizes with `--authorization-mode Node,RBAC` (the lab's and an installed
/// server's settings); the bench's requests carry an admin certificate.
fn tls_setup(dir: &Path) -> Result<Option<(Vec<String>, ClientTls)>> {
    if std::env::var("KAJI_BENCH_TLS").as_deref() != Ok("1") {
        return Ok(None);
    }
    use kaji_pki::layout::{InitSpec, Layout};
    let pki = Layout::new(dir.join("pki"));
    let ca = pki.init(&InitSpec { server: "https://127.0.0.1:1".into(), ..Default::default() })?;
    let admin = ca.issue(&kaji_pki::CertSpec::client("bench-admin", &["system:masters"]))?;
    let path = |p: std::path::PathBuf| p.to_string_lossy().into_owned();
    let flags = vec![
        "--bind-address".into(),
        "127.0.0.1".into(),
        "--secure-port".into(),
        "0".into(),
        "--tls-cert-file".into(),
        path(pki.pki("apiserver.crt")),
        "--tls-private-key-file".into(),
        path(pki.pki("apiserver.key")),
        "--client-ca-file".into(),
        path(pki.ca_cert()),
        "--authorization-mode".into(),
        "Node,RBAC".into(),
    ];
    let tls = ClientTls { ca_pem: ca.cert_pem().into(), cert_pem: admin.cert_pem, key_pem: admin.key_pem };
    Ok(Some((flags, tls)))
}

impl Server {
    pub fn start(bin: &Path) -> Result<Self> {
        let dir = tempfile::Builder::new().prefix("kaji-bench-").tempdir().context("failed to create a temp dir")?;
        let addr_file = dir.path().join("address");
        let log = std::fs::File::create(dir.path().join("server.log")).context("failed to create the server log")?;
        let etcd = match std::env::var("KAJI_BENCH_STORAGE").as_deref() {
            Ok("etcd") => Some(kaji_apiserver::storage::etcd_member::Cluster::start(&dir.path().join("etcd"), 1)?),
            _ => None,
        };
        let storage: Vec<String> = match &etcd {
            Some(c) => vec!["--storage".into(), "etcd".into(), "--etcd-servers".into(), c.servers_flag()],
            None => Vec::new(),
        };
        let (listen, tls) = match tls_setup(dir.path())? {
            Some((flags, tls)) => (flags, Some(tls)),
            None => {
                (vec!["--insecure-bind-address".into(), "127.0.0.1".into(), "--insecure-port".into(), "0".into()], None)
            }
        };
        let scheme = if tls.is_some() { "https" } else { "http" };
        let child = Command::new(bin)
            .args(&listen)
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .args(&storage)
            .arg("--address-file")
            .arg(&addr_file)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("failed to start {}", bin.display()))?;
        let mut server = Server { child, base: String::new(), dir, bin: bin.to_path_buf(), etcd, tls };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = server.child.try_wait()? {
                bail!("the apiserver exited during startup ({status}):\n{}", server.log_tail());
            }
            // The file may be half-written: accept it only once it parses.
            if let Ok(text) = std::fs::read_to_string(&addr_file) {
                if text.trim().parse::<std::net::SocketAddr>().is_ok() {
                    server.base = format!("{scheme}://{}", text.trim());
                    return Ok(server);
                }
            }
            ensure!(
                Instant::now() < deadline,
                "the apiserver did not write its address within 30s:\n{}",
                server.log_tail()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// A `kB` field of /proc/<pid>/status, e.g. VmHWM (peak RSS) or VmRSS.
    pub fn status_kb(&self, field: &str) -> Result<u64> {
        status_kb(self.pid(), field)
    }

    /// The same field of the etcd member's process (0 without etcd).
    pub fn etcd_kb(&self, field: &str) -> Result<u64> {
        match self.etcd.as_ref().and_then(|c| c.members[0].pid()) {
            Some(pid) => status_kb(pid, field),
            None => Ok(0),
        }
    }

    pub fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    pub fn log_problems(&self) -> Vec<String> {
        let log = std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default();
        log.lines()
            .filter(|l| l.contains("WARN") || l.contains("ERROR") || l.contains("panicked"))
            .map(str::to_string)
            .collect()
    }

    /// SIGTERM the child we started, wait up to 15s, then SIGKILL.
    pub fn stop(&mut self) -> Result<()> {
        if self.child.try_wait()?.is_some() {
            return Ok(());
        }
        let pid = self.pid().to_string();
        let sent = Command::new("kill").args(["-TERM", &pid]).status().map(|s| s.success()).unwrap_or(false);
        let deadline = Instant::now() + Duration::from_secs(15);
        while sent && Instant::now() < deadline {
            if let Some(status) = self.child.try_wait()? {
                ensure!(status.success(), "the apiserver exited with {status} after SIGTERM:\n{}", self.log_tail());
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        self.child.kill()?;
        self.child.wait()?;
        bail!("the apiserver did not stop within 15s of SIGTERM and was killed")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Err(e) = self.stop() {
            eprintln!("warning: {e:#}");
        }
    }
}

/// A `kB` field of /proc/<pid>/status.
pub fn status_kb(pid: u32, field: &str) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':')?.trim().strip_suffix("kB")?.trim().parse().ok())
        .with_context(|| format!("no {field} in /proc/{pid}/status"))
}

pub fn find_binary() -> Result<PathBuf> {
    let bin = match std::env::var_os("KAJI_APISERVER_BIN") {
        Some(p) => PathBuf::from(p),
        // Cargo builds the package's binaries for its benches, in the same profile, honouring
        // CARGO_TARGET_DIR; fall back to the workspace's release dir.
        None => match option_env!("CARGO_BIN_EXE_kaji-apiserver") {
            Some(p) => PathBuf::from(p),
            None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/release/kaji-apiserver"),
        },
    };
    ensure!(
        bin.is_file(),
        "{} does not exist: run `cargo build --release -p kaji-apiserver` first (or set KAJI_APISERVER_BIN)",
        bin.display()
    );
    Ok(bin)
}

/// Filesystem type of the mount holding `path` (fsync cost depends on it).
pub fn fs_type(path: &Path) -> String {
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    let path = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
    mounts
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() > 2 && path.starts_with(f[1])).then(|| (f[1].len(), format!("{} on {}", f[2], f[1])))
        })
        .max()
        .map_or_else(|| "unknown".into(), |(_, s)| s)
}

pub fn machine() -> String {
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find_map(|l| l.strip_prefix("model name").map(|m| m.trim_start_matches([' ', '\t', ':']).to_string()))
        })
        .unwrap_or_default();
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let load = load.split_whitespace().take(3).collect::<Vec<_>>().join(" ");
    format!("{cpus} CPUs ({model}), Linux {}, load average at start {load}", kernel.trim())
}

pub fn profile_of(bin: &Path) -> &'static str {
    match bin.parent().and_then(Path::file_name).and_then(|n| n.to_str()) {
        Some("release") => "release",
        Some("debug") => "debug",
        _ => "unknown",
    }
}
