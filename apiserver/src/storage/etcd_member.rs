//! Real etcd members for tests and benchmarks: `etcd` (Debian's `etcd-server`) processes on free
//! loopback ports with their data in a directory the caller owns, stopped by pid when dropped.
//! The flags are the ones `kaji lab up --ha` gives its members too (`member_args`).

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The flags of member `name` of a cluster whose members are `peers` (name, peer URL).
pub fn member_args(
    name: &str,
    data_dir: &Path,
    client_url: &str,
    peer_url: &str,
    peers: &[(String, String)],
) -> Vec<String> {
    let cluster: Vec<String> = peers.iter().map(|(n, u)| format!("{n}={u}")).collect();
    vec![
        "--name".into(),
        name.into(),
        "--data-dir".into(),
        data_dir.display().to_string(),
        "--listen-client-urls".into(),
        client_url.into(),
        "--advertise-client-urls".into(),
        client_url.into(),
        "--listen-peer-urls".into(),
        peer_url.into(),
        "--initial-advertise-peer-urls".into(),
        peer_url.into(),
        "--initial-cluster".into(),
        cluster.join(","),
        "--initial-cluster-state".into(),
        "new".into(),
        "--initial-cluster-token".into(),
        format!("kaji-{}", peers.first().map(|(_, u)| u.as_str()).unwrap_or("")),
        // Keep the disk small: a snapshot every 10k writes, 2 GiB quota as Kubernetes suggests.
        "--snapshot-count".into(),
        "10000".into(),
        "--quota-backend-bytes".into(),
        (2u64 << 30).to_string(),
        "--log-level".into(),
        "warn".into(),
        "--logger".into(),
        "zap".into(),
    ]
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).unwrap_or(0)
}

/// One member: its process and where it listens.
pub struct Member {
    pub name: String,
    pub client_url: String,
    pub peer_url: String,
    pub data_dir: PathBuf,
    args: Vec<String>,
    /// Dies with the thread that started it (tests whose handle may never be dropped).
    tied: bool,
    child: Option<Child>,
}

impl Member {
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    pub fn running(&self) -> bool {
        self.child.is_some()
    }

    fn spawn(&mut self) -> std::io::Result<()> {
        let log = std::fs::File::create(self.data_dir.with_extension("log"))?;
        let mut cmd = if self.tied {
            // util-linux's setpriv: SIGKILL when the starting thread ends, then exec etcd.
            let mut c = Command::new("setpriv");
            c.args(["--pdeathsig", "KILL", "--", "etcd"]);
            c
        } else {
            Command::new("etcd")
        };
        let child = cmd.args(&self.args).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::from(log)).spawn()?;
        self.child = Some(child);
        Ok(())
    }

    /// SIGKILL (a crash, no goodbye), then reap.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Start again on the same data and ports, as after a crash.
    pub fn restart(&mut self) -> std::io::Result<()> {
        self.kill9();
        self.spawn()
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// A cluster of `n` members on loopback; dropped = every member killed (its data stays in the
/// caller's directory).
pub struct Cluster {
    pub members: Vec<Member>,
}

impl Cluster {
    /// Start `n` members with data under `dir` and wait until the cluster answers writes.
    pub fn start(dir: &Path, n: usize) -> anyhow::Result<Self> {
        Self::start_with(dir, n, false)
    }

    /// Same, but the members die with the calling thread even if this handle is leaked (a test
    /// that keeps one cluster across several apiserver restarts).
    pub fn start_tied(dir: &Path, n: usize) -> anyhow::Result<Self> {
        Self::start_with(dir, n, true)
    }

    fn start_with(dir: &Path, n: usize, tied: bool) -> anyhow::Result<Self> {
        anyhow::ensure!(n > 0, "a cluster needs a member");
        // Each member's data dir and log go under `dir` (the apiserver bench names one to make).
        std::fs::create_dir_all(dir).map_err(|e| anyhow::anyhow!("cannot create {}: {e}", dir.display()))?;
        // The ports are free when picked but not held until etcd binds them: another process
        // binding port 0 meanwhile (a test's apiserver, another test's etcd) may get one, and the
        // member then exits with "address already in use". New ports and a clean start then.
        let mut tries = 0;
        loop {
            tries += 1;
            let mut cluster = Self::spawn_all(dir, n, tied)?;
            match cluster.wait_started(Duration::from_secs(30))? {
                None => return Ok(cluster),
                Some(exited) if exited.contains("address already in use") && tries < 5 => {
                    drop(cluster);
                    for i in 0..n {
                        let data_dir = dir.join(format!("m{i}"));
                        std::fs::remove_dir_all(&data_dir)
                            .or_else(|e| if e.kind() == std::io::ErrorKind::NotFound { Ok(()) } else { Err(e) })
                            .map_err(|e| anyhow::anyhow!("cannot clean {} after {exited}: {e}", data_dir.display()))?;
                    }
                }
                Some(exited) => anyhow::bail!("etcd did not start in {tries} tries: {exited}"),
            }
        }
    }

    /// `n` members on ports free just now, data under `dir`.
    fn spawn_all(dir: &Path, n: usize, tied: bool) -> anyhow::Result<Self> {
        let ports: Vec<(u16, u16)> = (0..n).map(|_| (free_port(), free_port())).collect();
        let peers: Vec<(String, String)> =
            ports.iter().enumerate().map(|(i, (_, p))| (format!("m{i}"), format!("http://127.0.0.1:{p}"))).collect();
        let mut members = Vec::new();
        for (i, (c, _)) in ports.iter().enumerate() {
            let (name, peer_url) = peers[i].clone();
            let client_url = format!("http://127.0.0.1:{c}");
            let data_dir = dir.join(&name);
            let args = member_args(&name, &data_dir, &client_url, &peer_url, &peers);
            let mut m = Member { name, client_url, peer_url, data_dir, args, tied, child: None };
            m.spawn().map_err(|e| anyhow::anyhow!("cannot start etcd (is etcd-server installed?): {e}"))?;
            members.push(m);
        }
        Ok(Self { members })
    }

    /// [`Cluster::wait_healthy`] for a cluster just spawned, but a member that exits meanwhile
    /// ends the wait at once: `Some(what it said)`, from the tail of its log.
    fn wait_started(&mut self, within: Duration) -> anyhow::Result<Option<String>> {
        let deadline = Instant::now() + within;
        loop {
            for m in &mut self.members {
                if let Some(Ok(Some(status))) = m.child.as_mut().map(Child::try_wait) {
                    m.child = None;
                    let log = std::fs::read_to_string(m.data_dir.with_extension("log")).unwrap_or_default();
                    let last = match log.lines().find(|l| l.contains("address already in use")) {
                        Some(l) => l.to_string(),
                        None => log.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("").to_string(),
                    };
                    return Ok(Some(format!("member {} exited ({status}): {last}", m.name)));
                }
            }
            if self.members.iter().any(|m| health(&m.client_url)) {
                return Ok(None);
            }
            anyhow::ensure!(Instant::now() < deadline, "etcd cluster not healthy within {within:?}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn client_urls(&self) -> Vec<String> {
        self.members.iter().map(|m| m.client_url.clone()).collect()
    }

    /// `--etcd-servers` for an apiserver: every member, comma-separated.
    pub fn servers_flag(&self) -> String {
        self.client_urls().join(",")
    }

    /// Wait until a running member reports health (a quorum that commits).
    pub fn wait_healthy(&self, within: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + within;
        loop {
            for m in self.members.iter().filter(|m| m.running()) {
                if health(&m.client_url) {
                    return Ok(());
                }
            }
            anyhow::ensure!(Instant::now() < deadline, "etcd cluster not healthy within {within:?}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The index of the current leader, asked of the running members.
    pub fn leader(&self) -> Option<usize> {
        let urls: Vec<&str> = self.members.iter().filter(|m| m.running()).map(|m| m.client_url.as_str()).collect();
        let out = Command::new("etcdctl")
            .env("ETCDCTL_API", "3")
            .args(["--endpoints", &urls.join(","), "endpoint", "status", "-w", "json"])
            .stderr(Stdio::null())
            .output()
            .ok()?;
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
        for st in v.as_array()? {
            let member = st.pointer("/Status/header/member_id").and_then(serde_json::Value::as_u64);
            let leader = st.pointer("/Status/leader").and_then(serde_json::Value::as_u64);
            if member.is_some() && member == leader {
                let ep = st.get("Endpoint").and_then(serde_json::Value::as_str)?;
                return self.members.iter().position(|m| m.client_url == ep);
            }
        }
        None
    }
}

/// `GET /health` on a member's client URL: `{"health":"true"}` once it has a leader.
pub fn health(client_url: &str) -> bool {
    let Some(hostport) = client_url.strip_prefix("http://") else { return false };
    let Ok(addr) = hostport.parse::<std::net::SocketAddr>() else { return false };
    let Ok(mut s) = std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(500)) else { return false };
    use std::io::{Read, Write};
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    if s.write_all(format!("GET /health HTTP/1.1\r\nHost: {hostport}\r\nConnection: close\r\n\r\n").as_bytes()).is_err()
    {
        return false;
    }
    let mut body = String::new();
    let _ = s.read_to_string(&mut body);
    body.contains("\"health\":\"true\"")
}
