//! An in-process kaji apiserver, a scheduler against it, and helpers to create nodes and pods
//! and wait (always within a timeout) for what a user would see.

#![allow(dead_code)]

use anyhow::{bail, Context};
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use kube::api::{Api, ListParams, PostParams};
use serde_json::{json, Value};
use std::future::Future;
use std::time::Duration;

/// Every wait is bounded by this, so a bug fails the test instead of hanging it.
pub const WAIT: Duration = Duration::from_secs(15);

pub struct Cluster {
    pub server: kaji_apiserver::Server,
    pub client: kube::Client,
    _data: tempfile::TempDir,
}

impl Cluster {
    pub async fn start() -> anyhow::Result<Self> {
        let data = tempfile::tempdir()?;
        let config = kaji_apiserver::Config::new("127.0.0.1:0".parse()?, data.path().to_path_buf());
        let server = within(kaji_apiserver::start(config)).await??;
        let client = kube::Client::try_from(kube::Config::new(format!("http://{}", server.addr).parse()?))?;
        Ok(Self { server, client, _data: data })
    }

    pub async fn scheduler(&self, config: kaji_scheduler::Config) -> anyhow::Result<kaji_scheduler::Handle> {
        Ok(kaji_scheduler::start(self.client.clone(), config).await?)
    }

    pub async fn default_scheduler(&self) -> anyhow::Result<kaji_scheduler::Handle> {
        let config =
            kaji_scheduler::Config { metrics_addr: Some("127.0.0.1:0".parse()?), ..kaji_scheduler::Config::default() };
        self.scheduler(config).await
    }

    pub fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), "default")
    }

    /// A Ready node with `cpu` and `memory` allocatable (110 pods), its hostname label, and `extra`
    /// merged into the object (labels, spec.taints, status.conditions...).
    pub async fn node(&self, name: &str, cpu: &str, memory: &str, extra: Value) -> anyhow::Result<()> {
        let mut node = json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "status": {
                "capacity": {"cpu": cpu, "memory": memory, "pods": "110"},
                "allocatable": {"cpu": cpu, "memory": memory, "pods": "110"},
                "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
            },
        });
        merge(&mut node, extra);
        let node: Node = serde_json::from_value(node)?;
        Api::<Node>::all(self.client.clone()).create(&PostParams::default(), &node).await?;
        Ok(())
    }

    /// A pod with one container requesting `cpu` and `memory`, and `spec`/`metadata` merged in via `extra`.
    pub async fn pod(&self, name: &str, cpu: &str, memory: &str, extra: Value) -> anyhow::Result<()> {
        let mut pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name},
            "spec": {"containers": [{"name": "app", "image": "registry.example/app:1",
                "resources": {"requests": {"cpu": cpu, "memory": memory}}}]},
        });
        merge(&mut pod, extra);
        let pod: Pod = serde_json::from_value(pod)?;
        self.pods().create(&PostParams::default(), &pod).await?;
        Ok(())
    }

    /// Waits until the pod is bound; returns its node.
    pub async fn bound(&self, name: &str) -> anyhow::Result<String> {
        let pods = self.pods();
        poll(&format!("pod {name} to be bound"), || async {
            let p = pods.get(name).await?;
            Ok(p.spec.and_then(|s| s.node_name))
        })
        .await
    }

    /// Waits until the pod has PodScheduled=False/Unschedulable; returns the condition's message.
    pub async fn unschedulable(&self, name: &str) -> anyhow::Result<String> {
        let pods = self.pods();
        poll(&format!("pod {name} to be marked unschedulable"), || async {
            let p = pods.get(name).await?;
            let cond = p.status.and_then(|s| s.conditions).unwrap_or_default().into_iter().find(|c| {
                c.type_ == "PodScheduled" && c.status == "False" && c.reason.as_deref() == Some("Unschedulable")
            });
            Ok(cond.and_then(|c| c.message))
        })
        .await
    }

    /// Waits for an event about the pod with this reason; returns its message.
    pub async fn event(&self, pod: &str, reason: &str) -> anyhow::Result<String> {
        let events: Api<Event> = Api::namespaced(self.client.clone(), "default");
        poll(&format!("a {reason} event for {pod}"), || async {
            let list = events.list(&ListParams::default()).await?;
            Ok(list
                .items
                .into_iter()
                .find(|e| e.involved_object.name.as_deref() == Some(pod) && e.reason.as_deref() == Some(reason))
                .and_then(|e| e.message))
        })
        .await
    }

    /// The pod's node right now (`None` if unbound).
    pub async fn node_of(&self, name: &str) -> anyhow::Result<Option<String>> {
        Ok(self.pods().get(name).await?.spec.and_then(|s| s.node_name))
    }

    pub async fn stop(self) -> anyhow::Result<()> {
        within(self.server.shutdown()).await??;
        Ok(())
    }
}

pub async fn within<T>(fut: impl Future<Output = T>) -> anyhow::Result<T> {
    tokio::time::timeout(WAIT, fut).await.context("timed out")
}

/// Polls `f` every 50 ms until it yields a value, for at most WAIT.
pub async fn poll<T, F, Fut>(what: &str, mut f: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<Option<T>>>,
{
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        if let Some(v) = f().await? {
            return Ok(v);
        }
        if tokio::time::Instant::now() > deadline {
            bail!("timed out waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// JSON merge (objects merged recursively, everything else replaced).
pub fn merge(base: &mut Value, patch: Value) {
    match (base, patch) {
        (Value::Object(b), Value::Object(p)) => {
            for (k, v) in p {
                merge(b.entry(k).or_insert(Value::Null), v);
            }
        }
        (b, p) => *b = p,
    }
}

/// A plain HTTP GET; returns the body.
pub async fn http_get(addr: std::net::SocketAddr, path: &str) -> anyhow::Result<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = within(tokio::net::TcpStream::connect(addr)).await??;
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").as_bytes()).await?;
    let mut out = String::new();
    within(s.read_to_string(&mut out)).await??;
    let (head, body) = out.split_once("\r\n\r\n").context("no HTTP body")?;
    anyhow::ensure!(head.starts_with("HTTP/1.0 200") || head.starts_with("HTTP/1.1 200"), "GET {path}: {head}");
    Ok(body.to_string())
}
