//! Container probes — startup, liveness, readiness — with Kubernetes' timing (initialDelaySeconds,
//! periodSeconds, timeoutSeconds, success/failureThreshold). tcpSocket and httpGet probes connect
//! from inside the pod's network namespace (a short-lived thread that joins it), so they need no
//! route to the pod. exec probes run their command in the container (the runtime's exec): exit 0
//! passes, anything else fails with the command's output; past timeoutSeconds it is killed.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::runtime::Runtime;

/// One probe's result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Success,
    Failure(String),
    /// A probe kind this agent cannot run (counted as success).
    Unsupported(String),
}

/// Resolves a probe port: a number, or the name of one of the container's ports.
pub fn port(p: &IntOrString, c: &Container) -> Result<u16, String> {
    match p {
        IntOrString::Int(n) => u16::try_from(*n).map_err(|_| format!("invalid port {n}")),
        IntOrString::String(name) => {
            if let Ok(n) = name.parse::<u16>() {
                return Ok(n);
            }
            c.ports
                .iter()
                .flatten()
                .find(|cp| cp.name.as_deref() == Some(name.as_str()))
                .and_then(|cp| u16::try_from(cp.container_port).ok())
                .ok_or_else(|| format!("port {name:?} is not a named port of container {:?}", c.name))
        }
    }
}

/// What a probe does, decided before any IO (pure, so it is table-tested).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    Tcp { addr: SocketAddr },
    Http { addr: SocketAddr, host: String, path: String, headers: Vec<(String, String)> },
    Exec { command: Vec<String> },
    Unsupported(String),
}

pub fn action(probe: &Probe, c: &Container) -> Result<Action, String> {
    let host = |h: &Option<String>| -> Result<std::net::IpAddr, String> {
        match h.as_deref().filter(|h| !h.is_empty()) {
            None => Ok(std::net::IpAddr::from([127, 0, 0, 1])),
            Some(h) => h.parse().map_err(|_| format!("probe host {h:?} is not an IP address")),
        }
    };
    if let Some(t) = &probe.tcp_socket {
        return Ok(Action::Tcp { addr: SocketAddr::new(host(&t.host)?, port(&t.port, c)?) });
    }
    if let Some(h) = &probe.http_get {
        if h.scheme.as_deref().is_some_and(|s| s.eq_ignore_ascii_case("HTTPS")) {
            return Ok(Action::Unsupported("HTTPS probes are not supported yet".into()));
        }
        let addr = SocketAddr::new(host(&h.host)?, port(&h.port, c)?);
        let headers: Vec<(String, String)> =
            h.http_headers.iter().flatten().map(|x| (x.name.clone(), x.value.clone())).collect();
        let host_header = headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case("host"))
            .map(|(_, v)| v.clone())
            .unwrap_or_else(|| addr.to_string());
        let path = h.path.clone().filter(|p| !p.is_empty()).unwrap_or_else(|| "/".into());
        let path = if path.starts_with('/') { path } else { format!("/{path}") };
        return Ok(Action::Http { addr, host: host_header, path, headers });
    }
    if let Some(e) = &probe.exec {
        let command = e.command.clone().unwrap_or_default();
        if command.is_empty() {
            return Err("exec probe has no command".into());
        }
        return Ok(Action::Exec { command });
    }
    if probe.grpc.is_some() {
        return Ok(Action::Unsupported("gRPC probes are not supported yet".into()));
    }
    Err("probe has no handler".into())
}

/// Kubernetes' HTTP probe rule: 200 ≤ status < 400 passes.
pub fn http_status_ok(response_head: &str) -> Result<u16, String> {
    let line = response_head.lines().next().unwrap_or("");
    let code: u16 = line
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("malformed HTTP response {line:?}"))?;
    if (200..400).contains(&code) {
        Ok(code)
    } else {
        Err(format!("HTTP probe failed with statuscode: {code}"))
    }
}

fn tcp(addr: SocketAddr, timeout: Duration) -> Result<TcpStream, String> {
    let s = TcpStream::connect_timeout(&addr, timeout).map_err(|e| format!("dial tcp {addr}: {e}"))?;
    let _ = s.set_read_timeout(Some(timeout));
    let _ = s.set_write_timeout(Some(timeout));
    Ok(s)
}

/// kubelet keeps at most this much of an exec probe's output.
const MAX_OUTPUT: usize = 10 * 1024;

/// An exec probe: the command in the container, stdout and stderr combined. Blocking.
fn exec(runtime: &Runtime, id: &str, command: &[String], timeout: Duration) -> Outcome {
    let opts = kaji_runtime::ExecOptions { stdout: true, stderr: true, ..Default::default() };
    let mut e = match runtime.exec(id, command, &opts) {
        Ok(e) => e,
        Err(err) => return Outcome::Failure(format!("failed to exec in container: {err}")),
    };
    let output = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let readers: Vec<_> = [e.stdout.take(), e.stderr.take()]
        .into_iter()
        .flatten()
        .map(|mut f| {
            let out = output.clone();
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n @ 1..) = f.read(&mut buf) {
                    if let Ok(mut o) = out.lock() {
                        let room = MAX_OUTPUT.saturating_sub(o.len());
                        o.extend_from_slice(&buf[..n.min(room)]);
                    }
                }
            })
        })
        .collect();
    let control = e.control();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(e.wait());
    });
    let code = match rx.recv_timeout(timeout) {
        Ok(Ok(code)) => code,
        Ok(Err(err)) => return Outcome::Failure(format!("failed to wait for the probe command: {err}")),
        Err(_) => {
            control.kill();
            return Outcome::Failure(format!("command {:?} timed out", command.join(" ")));
        }
    };
    for r in readers {
        let _ = r.join();
    }
    let text = output.lock().map(|o| String::from_utf8_lossy(&o).into_owned()).unwrap_or_default();
    if code == 0 {
        Outcome::Success
    } else if text.is_empty() {
        Outcome::Failure(format!("command {:?} exited with {code}", command.join(" ")))
    } else {
        Outcome::Failure(text)
    }
}

fn perform(action: &Action, timeout: Duration) -> Outcome {
    match action {
        Action::Unsupported(why) => Outcome::Unsupported(why.clone()),
        Action::Exec { .. } => Outcome::Unsupported("exec probes need the container runtime".into()),
        Action::Tcp { addr } => match tcp(*addr, timeout) {
            Ok(_) => Outcome::Success,
            Err(e) => Outcome::Failure(e),
        },
        Action::Http { addr, host, path, headers } => {
            let mut s = match tcp(*addr, timeout) {
                Ok(s) => s,
                Err(e) => return Outcome::Failure(format!("Get \"http://{addr}{path}\": {e}")),
            };
            let (major, minor) = (kaji_api::version::MAJOR, kaji_api::version::MINOR);
            let mut req = format!(
                "GET {path} HTTP/1.0\r\nHost: {host}\r\nUser-Agent: kube-probe/{major}.{minor}\r\nAccept: */*\r\n"
            );
            for (k, v) in headers.iter().filter(|(k, _)| !k.eq_ignore_ascii_case("host")) {
                req.push_str(&format!("{k}: {v}\r\n"));
            }
            req.push_str("Connection: close\r\n\r\n");
            if let Err(e) = s.write_all(req.as_bytes()) {
                return Outcome::Failure(format!("Get \"http://{addr}{path}\": {e}"));
            }
            let mut buf = vec![0u8; 1024];
            let mut n = 0;
            while n < buf.len() {
                match s.read(&mut buf[n..]) {
                    Ok(0) => break,
                    Ok(k) => {
                        n += k;
                        if buf[..n].windows(2).any(|w| w == b"\r\n") {
                            break;
                        }
                    }
                    Err(e) => return Outcome::Failure(format!("Get \"http://{addr}{path}\": {e}")),
                }
            }
            match http_status_ok(&String::from_utf8_lossy(&buf[..n])) {
                Ok(_) => Outcome::Success,
                Err(e) => Outcome::Failure(e),
            }
        }
    }
}

/// Runs one probe: an exec probe in container `target.1`, the others from inside `netns` if
/// given (a fresh thread joins it; tokio's threads never do).
pub async fn run(probe: &Probe, c: &Container, netns: Option<PathBuf>, target: (&Runtime, &str)) -> Outcome {
    let action = match action(probe, c) {
        Ok(a) => a,
        Err(e) => return Outcome::Failure(e),
    };
    if let Action::Unsupported(why) = action {
        return Outcome::Unsupported(why);
    }
    let timeout = Duration::from_secs(probe.timeout_seconds.unwrap_or(1).max(1) as u64);
    if let Action::Exec { command } = action {
        let (runtime, id) = (target.0.clone(), target.1.to_string());
        return tokio::task::spawn_blocking(move || exec(&runtime, &id, &command, timeout))
            .await
            .unwrap_or_else(|_| Outcome::Failure("probe task died".into()));
    }
    let (tx, rx) = tokio::sync::oneshot::channel();
    let spawned = std::thread::Builder::new().name("probe".into()).spawn(move || {
        if let Some(ns) = netns {
            let joined = std::fs::File::open(&ns).map_err(|e| e.to_string()).and_then(|f| {
                nix::sched::setns(f.as_fd(), nix::sched::CloneFlags::CLONE_NEWNET).map_err(|e| e.to_string())
            });
            if let Err(e) = joined {
                let _ = tx.send(Outcome::Failure(format!("cannot enter the pod network namespace: {e}")));
                return;
            }
        }
        let _ = tx.send(perform(&action, timeout));
    });
    if let Err(e) = spawned {
        return Outcome::Failure(format!("cannot start probe thread: {e}"));
    }
    rx.await.unwrap_or_else(|_| Outcome::Failure("probe thread died".into()))
}

/// Consecutive results against the thresholds: Some(new state) when it flips.
#[derive(Clone, Debug, Default)]
pub struct Counter {
    successes: i32,
    failures: i32,
    pub passing: Option<bool>,
}

impl Counter {
    pub fn record(&mut self, ok: bool, success_threshold: i32, failure_threshold: i32) -> Option<bool> {
        if ok {
            self.successes += 1;
            self.failures = 0;
        } else {
            self.failures += 1;
            self.successes = 0;
        }
        let next = if self.successes >= success_threshold.max(1) {
            Some(true)
        } else if self.failures >= failure_threshold.max(1) {
            Some(false)
        } else {
            self.passing
        };
        let flipped = next != self.passing;
        self.passing = next;
        flipped.then_some(next).flatten()
    }
}

/// Readiness and startup state by container id, shared by the probers and the status writer.
pub type Results = std::sync::Arc<std::sync::Mutex<HashMap<String, ProbeState>>>;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProbeState {
    pub ready: bool,
    pub started: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn container() -> Container {
        serde_json::from_value(json!({"name": "c", "ports": [{"name": "http", "containerPort": 8080}]})).expect("valid")
    }

    fn probe(v: serde_json::Value) -> Probe {
        serde_json::from_value(v).expect("valid probe")
    }

    #[test]
    fn probes_resolve_named_ports_paths_and_hosts() {
        let c = container();
        let a = action(&probe(json!({"httpGet": {"port": "http", "path": "healthz"}})), &c).expect("valid");
        assert_eq!(
            a,
            Action::Http {
                addr: "127.0.0.1:8080".parse().expect("addr"),
                host: "127.0.0.1:8080".into(),
                path: "/healthz".into(),
                headers: vec![]
            }
        );
        let a = action(&probe(json!({"tcpSocket": {"port": 53, "host": "10.0.0.2"}})), &c).expect("valid");
        assert_eq!(a, Action::Tcp { addr: "10.0.0.2:53".parse().expect("addr") });
        assert!(action(&probe(json!({"tcpSocket": {"port": "nope"}})), &c).is_err());
        assert_eq!(
            action(&probe(json!({"exec": {"command": ["cat", "/tmp/healthy"]}})), &c),
            Ok(Action::Exec { command: vec!["cat".into(), "/tmp/healthy".into()] })
        );
        assert!(action(&probe(json!({"exec": {}})), &c).is_err(), "an exec probe needs a command");
    }

    #[test]
    fn http_success_is_200_to_399() {
        assert_eq!(http_status_ok("HTTP/1.1 200 OK\r\n"), Ok(200));
        assert_eq!(http_status_ok("HTTP/1.0 302 Found\r\n"), Ok(302));
        assert_eq!(http_status_ok("HTTP/1.1 500 Oops\r\n"), Err("HTTP probe failed with statuscode: 500".into()));
        assert!(http_status_ok("garbage").is_err());
    }

    #[test]
    fn thresholds_flip_only_after_enough_consecutive_results() {
        let mut c = Counter::default();
        assert_eq!(c.record(true, 1, 3), Some(true));
        assert_eq!(c.record(false, 1, 3), None);
        assert_eq!(c.record(false, 1, 3), None);
        assert_eq!(c.record(false, 1, 3), Some(false));
        assert_eq!(c.record(true, 2, 3), None);
        assert_eq!(c.record(true, 2, 3), Some(true));
    }

    #[test]
    fn a_tcp_probe_reaches_a_listener_and_fails_on_a_closed_port() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        assert_eq!(perform(&Action::Tcp { addr }, Duration::from_secs(1)), Outcome::Success);
        drop(listener);
        assert!(matches!(perform(&Action::Tcp { addr }, Duration::from_secs(1)), Outcome::Failure(_)));
    }
}
