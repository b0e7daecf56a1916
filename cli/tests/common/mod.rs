//! An in-process kaji-apiserver (on its own tokio runtime, so tests stay plain `#[test]`s) and
//! the built `kaji` binary pointed at it through a kubeconfig, as a user runs it.
#![allow(dead_code)]

use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

pub struct Cluster {
    pub rt: tokio::runtime::Runtime,
    server: Option<kaji_apiserver::Server>,
    pub client: kube::Client,
    pub url: String,
    pub dir: tempfile::TempDir,
}

impl Cluster {
    pub fn start() -> Self {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
        let dir = tempfile::tempdir().expect("tempdir");
        let config = kaji_apiserver::Config::new(([127, 0, 0, 1], 0).into(), dir.path().join("data"));
        let server = rt.block_on(kaji_apiserver::start(config)).expect("apiserver starts");
        let url = format!("http://{}", server.addr);
        let client = {
            let _guard = rt.enter();
            kube::Client::try_from(kube::Config::new(url.parse().expect("url"))).expect("client")
        };
        let c = Self { rt, server: Some(server), client, url, dir };
        c.write_kubeconfig("kubeconfig", &c.url);
        c
    }

    /// A kubeconfig with contexts `kaji` (current, no namespace) and `shop` (namespace shop).
    pub fn write_kubeconfig(&self, name: &str, url: &str) -> PathBuf {
        let kc = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- cluster: {{server: \"{url}\"}}\n  name: kaji\n\
             contexts:\n- context: {{cluster: kaji, user: admin}}\n  name: kaji\n\
             - context: {{cluster: kaji, user: admin, namespace: shop}}\n  name: shop\n\
             current-context: kaji\nusers:\n- name: admin\n  user: {{}}\n"
        );
        self.file(name, &kc)
    }

    pub fn file(&self, name: &str, content: &str) -> PathBuf {
        let p = self.dir.path().join(name);
        std::fs::write(&p, content).expect("write file");
        p
    }

    /// `kaji` with no kubeconfig flag and a HOME without ~/.kube.
    pub fn bare(&self) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_kaji"));
        c.env_remove("KUBECONFIG").env("HOME", self.dir.path()).stdin(Stdio::null());
        c
    }

    pub fn command(&self, args: &[&str]) -> Command {
        let mut c = self.bare();
        c.arg("--kubeconfig").arg(self.dir.path().join("kubeconfig")).args(args);
        c
    }

    pub fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("kaji runs")
    }

    /// Runs `kaji args` and requires success; returns stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(out.status.success(), "kaji {args:?} failed: {}{}", stderr(&out), stdout(&out));
        stdout(&out)
    }

    /// Runs `kaji args`, requires failure with exactly one line on stderr; returns that line.
    pub fn fails(&self, args: &[&str]) -> String {
        one_line_failure(&self.run(args), args)
    }

    /// `kaji args` in the background with its stdout lines on a channel.
    pub fn spawn(&self, args: &[&str]) -> Running {
        let mut child = self.command(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("kaji spawns");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        Running { child, lines }
    }

    /// One raw API call; the JSON answer (a Status for errors).
    pub fn api(&self, method: &str, path: &str, body: Option<Value>, content_type: &str) -> Value {
        let req = http::Request::builder()
            .method(method)
            .uri(path)
            .header("content-type", content_type)
            .body(body.map(|b| b.to_string().into_bytes()).unwrap_or_default())
            .expect("request");
        let text = self.rt.block_on(self.client.request_text(req)).unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        serde_json::from_str(&text).unwrap_or(Value::Null)
    }

    pub fn create(&self, path: &str, obj: Value) -> Value {
        self.api("POST", path, Some(obj), "application/json")
    }

    pub fn merge(&self, path: &str, patch: Value) -> Value {
        self.api("PATCH", path, Some(patch), "application/merge-patch+json")
    }

    pub fn get(&self, path: &str) -> Value {
        self.api("GET", path, None, "application/json")
    }

    /// An Event about `obj` (kind, name, namespace, uid taken from it).
    pub fn event(&self, obj: &Value, reason: &str, message: &str) {
        let m = &obj["metadata"];
        let ns = m["namespace"].as_str().unwrap_or("default");
        let now = jiff::Timestamp::now().to_string();
        self.create(
            &format!("/api/v1/namespaces/{ns}/events"),
            json!({"apiVersion": "v1", "kind": "Event",
                   "metadata": {"name": format!("{}.{reason}", m["name"].as_str().unwrap_or("")).to_lowercase(), "namespace": ns},
                   "involvedObject": {"kind": obj["kind"], "apiVersion": obj["apiVersion"], "name": m["name"], "namespace": ns, "uid": m["uid"]},
                   "reason": reason, "message": message, "type": "Normal", "count": 1,
                   "source": {"component": "kaji-test"}, "firstTimestamp": now, "lastTimestamp": now}),
        );
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if let Some(s) = self.server.take() {
            let _ = self.rt.block_on(s.shutdown());
        }
    }
}

pub struct Running {
    pub child: Child,
    pub lines: mpsc::Receiver<String>,
}

impl Running {
    pub fn next_line(&self, what: &str) -> String {
        self.lines.recv_timeout(Duration::from_secs(20)).unwrap_or_else(|_| panic!("no {what} line within 20s"))
    }

    /// Waits for the process to end (within 20 s); its exit status and stderr.
    pub fn finish(mut self) -> (std::process::ExitStatus, String) {
        for _ in 0..200 {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                let mut err = String::new();
                if let Some(mut e) = self.child.stderr.take() {
                    let _ = std::io::Read::read_to_string(&mut e, &mut err);
                }
                return (status, err);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("kaji did not exit within 20s");
    }

    /// Still running after `d`?
    pub fn still_running_after(&mut self, d: Duration) -> bool {
        std::thread::sleep(d);
        self.child.try_wait().expect("try_wait").is_none()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The one stderr line of a failed run (no panic, no multi-line dump).
pub fn one_line_failure(out: &Output, args: &[&str]) -> String {
    let err = stderr(out);
    assert!(!out.status.success(), "kaji {args:?} succeeded: {}", stdout(out));
    assert_eq!(out.status.code(), Some(1), "kaji {args:?}: {err}");
    assert_eq!(err.lines().count(), 1, "kaji {args:?}: one line expected, got: {err}");
    assert!(!err.contains("panicked"), "{err}");
    err.trim_end().to_string()
}

/// The whitespace-separated words of each line.
pub fn words(text: &str) -> Vec<Vec<String>> {
    text.lines().map(|l| l.split_whitespace().map(str::to_string).collect()).collect()
}

/// Whether `line`'s first words are `first`.
pub fn starts_with_words(line: &str, first: &[&str]) -> bool {
    let w: Vec<&str> = line.split_whitespace().collect();
    w.len() >= first.len() && w[..first.len()] == *first
}
