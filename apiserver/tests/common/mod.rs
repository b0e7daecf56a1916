//! Test helpers: run the real kaji-apiserver binary, talk raw HTTP, run kubectl against it.
#![allow(dead_code)]

pub mod secure;
pub mod tokens;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// A kaji-apiserver child process; killed when dropped.
pub struct ApiServer {
    pub child: Child,
    pub addr: String,
    pub data_dir: PathBuf,
}

impl ApiServer {
    /// Start the binary on a free loopback port with `data_dir`, and wait until it serves.
    pub fn start(data_dir: &Path) -> Self {
        Self::start_with(data_dir, &[])
    }

    /// Same, with extra flags.
    pub fn start_with(data_dir: &Path, extra: &[&str]) -> Self {
        let addr_file = data_dir.with_extension("addr");
        let _ = std::fs::remove_file(&addr_file);
        let child = Command::new(env!("CARGO_BIN_EXE_kaji-apiserver"))
            .args(["--insecure-port", "0", "--data-dir"])
            .arg(data_dir)
            .arg("--address-file")
            .arg(&addr_file)
            .args(if extra.contains(&"--storage") { Vec::new() } else { storage_flags(data_dir) })
            .args(extra)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("kaji-apiserver starts");
        // Built at once, so a failed start below still kills the child (on drop).
        let mut server = Self { child, addr: String::new(), data_dir: data_dir.to_path_buf() };
        let deadline = Instant::now() + Duration::from_secs(20);
        server.addr = loop {
            if let Ok(a) = std::fs::read_to_string(&addr_file) {
                if !a.is_empty() {
                    break a;
                }
            }
            assert!(Instant::now() < deadline, "apiserver did not start within 20s");
            std::thread::sleep(Duration::from_millis(20));
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while http(&server.addr, "GET", "/readyz", None, "").0 != 200 {
            assert!(Instant::now() < deadline, "apiserver not ready within 10s");
            std::thread::sleep(Duration::from_millis(20));
        }
        server
    }

    /// The binary serving HTTPS with the certificates of `pki` (made with `Layout::init`),
    /// client certificates from its CA, and `extra` flags; ready once it listens.
    pub fn start_secure(data_dir: &Path, pki: &kaji_pki::layout::Layout, extra: &[&str]) -> Self {
        let addr_file = data_dir.with_extension("addr");
        let _ = std::fs::remove_file(&addr_file);
        let path = |p: PathBuf| p.to_string_lossy().into_owned();
        let child = Command::new(env!("CARGO_BIN_EXE_kaji-apiserver"))
            .args(["--bind-address", "127.0.0.1", "--secure-port", "0", "--data-dir"])
            .arg(data_dir)
            .args(["--tls-cert-file", &path(pki.pki("apiserver.crt"))])
            .args(["--tls-private-key-file", &path(pki.pki("apiserver.key"))])
            .args(["--client-ca-file", &path(pki.ca_cert())])
            .arg("--address-file")
            .arg(&addr_file)
            .args(extra)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("kaji-apiserver starts");
        let mut server = Self { child, addr: String::new(), data_dir: data_dir.to_path_buf() };
        let deadline = Instant::now() + Duration::from_secs(20);
        server.addr = loop {
            if let Ok(a) = std::fs::read_to_string(&addr_file) {
                if a.trim().parse::<std::net::SocketAddr>().is_ok() {
                    break a.trim().to_string();
                }
            }
            assert!(Instant::now() < deadline, "apiserver did not start within 20s");
            std::thread::sleep(Duration::from_millis(20));
        };
        server
    }

    pub fn https_url(&self) -> String {
        format!("https://{}", self.addr)
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// SIGKILL, no goodbye.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// With `KAJI_TEST_STORAGE=etcd` every test runs against etcd instead of the embedded store:
/// one single-member etcd per data directory (so a restarted apiserver finds its objects),
/// started on free loopback ports beside it and killed when the test's thread ends.
fn storage_flags(data_dir: &Path) -> Vec<String> {
    use kaji_apiserver::storage::etcd_member::Cluster;
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};
    if std::env::var("KAJI_TEST_STORAGE").as_deref() != Ok("etcd") {
        return Vec::new();
    }
    static CLUSTERS: OnceLock<Mutex<HashMap<PathBuf, Cluster>>> = OnceLock::new();
    let mut map = CLUSTERS.get_or_init(Default::default).lock().unwrap_or_else(|p| p.into_inner());
    let cluster = map.entry(data_dir.to_path_buf()).or_insert_with(|| {
        let dir = data_dir.with_extension("etcd");
        std::fs::create_dir_all(&dir).expect("etcd dir");
        Cluster::start_tied(&dir, 1).expect("etcd starts (KAJI_TEST_STORAGE=etcd)")
    });
    vec!["--storage".into(), "etcd".into(), "--etcd-servers".into(), cluster.servers_flag()]
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// An apiserver on a fresh data dir, with the dir it lives in (removed when dropped).
pub fn started() -> (tempfile::TempDir, ApiServer) {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = ApiServer::start(&dir.path().join("data"));
    (dir, server)
}

/// [`http`] with a JSON body, the answer parsed (Null when it is not JSON).
pub fn send_json(
    s: &ApiServer,
    method: &str,
    path: &str,
    body: Option<&serde_json::Value>,
    ct: &str,
) -> (u16, serde_json::Value) {
    let body = body.map(serde_json::Value::to_string);
    let (code, text) = http(&s.addr, method, path, body.as_deref(), ct);
    (code, serde_json::from_str(&text).unwrap_or(serde_json::Value::Null))
}

/// A GET, the answer parsed.
pub fn get_json(s: &ApiServer, path: &str) -> (u16, serde_json::Value) {
    send_json(s, "GET", path, None, "")
}

/// One HTTP/1.1 request with `Connection: close`; returns (status, body). Status 0 = no answer.
pub fn http(addr: &str, method: &str, path: &str, body: Option<&str>, content_type: &str) -> (u16, String) {
    http_with(addr, method, path, &[], body, content_type)
}

/// [`http`] with extra request headers.
pub fn http_with(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
    content_type: &str,
) -> (u16, String) {
    let Ok(mut s) = TcpStream::connect(addr) else {
        return (0, String::new());
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
    let body = body.unwrap_or("");
    let mut ct = if content_type.is_empty() { String::new() } else { format!("Content-Type: {content_type}\r\n") };
    for (k, v) in headers {
        ct.push_str(&format!("{k}: {v}\r\n"));
    }
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\n{ct}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    if s.write_all(req.as_bytes()).is_err() {
        return (0, String::new());
    }
    let mut out = Vec::new();
    if s.read_to_end(&mut out).is_err() && out.is_empty() {
        return (0, String::new());
    }
    let text = String::from_utf8_lossy(&out).to_string();
    let status = text.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    (status, body)
}

/// kubectl pointed at one server, with its own kubeconfig and discovery cache.
pub struct Kubectl {
    dir: tempfile::TempDir,
    bin: PathBuf,
}

/// The versioned kubectl beside the one on PATH (`kubectl.1.27` ... `kubectl.1.33`).
pub fn kubectl_binary(version: &str) -> PathBuf {
    let which = Command::new("sh").args(["-c", "readlink -f \"$(command -v kubectl)\""]).output().expect("sh runs");
    let real = PathBuf::from(String::from_utf8_lossy(&which.stdout).trim());
    let path = real.parent().map(|d| d.join(format!("kubectl.{version}"))).unwrap_or_default();
    assert!(path.exists(), "needs {} (kubectl {version}) beside kubectl", path.display());
    path
}

impl Kubectl {
    pub fn new(server: &ApiServer) -> Self {
        Self::for_url(&server.url())
    }

    /// kubectl for a server at `url` (e.g. one started in-process).
    pub fn for_url(url: &str) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let kc = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- cluster: {{server: \"{url}\"}}\n  name: kaji\ncontexts:\n- context: {{cluster: kaji, user: admin}}\n  name: kaji\ncurrent-context: kaji\nusers:\n- name: admin\n  user: {{}}\n"
        );
        std::fs::write(dir.path().join("kubeconfig"), kc).expect("write kubeconfig");
        Self { dir, bin: PathBuf::from("kubectl") }
    }

    /// A given kubectl version (see [`kubectl_binary`]) for `server`.
    pub fn version(server: &ApiServer, version: &str) -> Self {
        Self { bin: kubectl_binary(version), ..Self::new(server) }
    }

    pub fn command(&self) -> Command {
        let mut c = Command::new(&self.bin);
        c.arg("--kubeconfig").arg(self.dir.path().join("kubeconfig"));
        c.arg("--cache-dir").arg(self.dir.path().join("cache"));
        c.env_remove("KUBECONFIG");
        c
    }

    pub fn file(&self, name: &str, content: &str) -> PathBuf {
        let p = self.dir.path().join(name);
        std::fs::write(&p, content).expect("write manifest");
        p
    }

    /// Run kubectl; returns the output whatever the exit code.
    pub fn run(&self, args: &[&str]) -> Output {
        self.command().args(args).output().expect("kubectl runs (is it on PATH?)")
    }

    /// Run kubectl and require success; returns stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "kubectl {args:?} failed: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8_lossy(&out.stdout).to_string()
    }
}

/// A watch request on a raw connection, past its response head.
pub fn open_watch(s: &ApiServer, path: &str) -> BufReader<TcpStream> {
    let mut t = TcpStream::connect(&s.addr).expect("connect");
    t.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    write!(t, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").expect("send");
    let mut r = BufReader::new(t);
    let mut line = String::new();
    // Skip the response head.
    loop {
        line.clear();
        r.read_line(&mut line).expect("head");
        if line == "\r\n" || line.is_empty() {
            break;
        }
    }
    r
}

/// The next watch event in a chunked body (chunk-size lines are skipped).
pub fn next_event(r: &mut BufReader<TcpStream>) -> Option<serde_json::Value> {
    let mut line = String::new();
    loop {
        line.clear();
        if r.read_line(&mut line).ok()? == 0 {
            return None;
        }
        if let Ok(v) = serde_json::from_str::<serde_json::Value>(line.trim()) {
            if v.is_object() {
                return Some(v);
            }
        }
    }
}

/// Polls `attempt` until it returns `Some`, for at most 30 s (then the test fails naming `what`).
/// For what takes effect once the apiserver's watch cache holds an object (admission webhook
/// configurations, policies and their parameters), as in Kubernetes, where the conformance suite
/// waits the same way.
pub fn eventually<T>(what: &str, mut attempt: impl FnMut() -> Option<T>) -> T {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        if let Some(v) = attempt() {
            return v;
        }
        assert!(std::time::Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}
