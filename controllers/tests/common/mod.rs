//! An in-process kaji apiserver, a controller manager against it, and helpers to create workloads,
//! play the node agent (mark pods Running/Ready) and wait — always within a timeout.

#![allow(dead_code)]

use anyhow::{bail, Context};
use k8s_openapi::api::core::v1::{Event, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::{json, Value};
use std::future::Future;
use std::time::Duration;

/// Every wait is bounded by this, so a bug fails the test instead of hanging it.
pub const WAIT: Duration = Duration::from_secs(20);

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

    pub async fn manager(&self) -> anyhow::Result<kaji_controllers::Handle> {
        self.manager_with(kaji_controllers::Config::default()).await
    }

    /// A manager with `config` (metrics always served on a free port).
    pub async fn manager_with(&self, config: kaji_controllers::Config) -> anyhow::Result<kaji_controllers::Handle> {
        let config = kaji_controllers::Config { metrics_addr: Some("127.0.0.1:0".parse()?), ..config };
        Ok(kaji_controllers::start(self.client.clone(), config).await?)
    }

    pub fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
        K::DynamicType: Default,
    {
        Api::namespaced(self.client.clone(), "default")
    }

    /// Creates any namespaced object in `default` from JSON (kind and apiVersion included).
    pub async fn create<K>(&self, obj: Value) -> anyhow::Result<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + serde::de::DeserializeOwned
            + serde::Serialize
            + std::fmt::Debug,
        K::DynamicType: Default,
    {
        let obj: K = serde_json::from_value(obj)?;
        Ok(self.api::<K>().create(&Default::default(), &obj).await?)
    }

    /// The pods in `default` with this label selector, not being deleted.
    pub async fn pods(&self, selector: &str) -> anyhow::Result<Vec<Pod>> {
        let list = self.api::<Pod>().list(&ListParams::default().labels(selector)).await?;
        Ok(list.items.into_iter().filter(|p| p.metadata.deletion_timestamp.is_none()).collect())
    }

    /// Plays the agent: marks every pod matching `selector` Running and Ready with an IP.
    pub async fn make_ready(&self, selector: &str) -> anyhow::Result<usize> {
        let pods = self.pods(selector).await?;
        for p in &pods {
            let name = p.metadata.name.clone().context("pod name")?;
            if p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running") {
                continue;
            }
            let n = fastrand::u8(1..250);
            let m = fastrand::u8(1..250);
            self.set_status(
                &name,
                json!({
                    "phase": "Running",
                    "podIP": format!("10.244.{n}.{m}"),
                    "conditions": [{"type": "Ready", "status": "True",
                        "lastTransitionTime": jiff::Timestamp::now().to_string()}],
                }),
            )
            .await?;
        }
        Ok(pods.len())
    }

    pub async fn set_status(&self, pod: &str, status: Value) -> anyhow::Result<()> {
        let patch = Patch::Merge(json!({"status": status}));
        self.api::<Pod>().patch_status(pod, &PatchParams::default(), &patch).await?;
        Ok(())
    }

    /// Events in `default` about `name` with this reason.
    pub async fn events(&self, name: &str, reason: &str) -> anyhow::Result<Vec<Event>> {
        let list = self.api::<Event>().list(&ListParams::default()).await?;
        Ok(list
            .items
            .into_iter()
            .filter(|e| e.involved_object.name.as_deref() == Some(name) && e.reason.as_deref() == Some(reason))
            .collect())
    }

    pub async fn stop(self) -> anyhow::Result<()> {
        within(self.server.shutdown()).await??;
        Ok(())
    }
}

/// The manager's /metrics text.
pub async fn metrics(handle: &kaji_controllers::Handle) -> anyhow::Result<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = handle.metrics_addr.context("metrics are served")?;
    let mut stream = within(tokio::net::TcpStream::connect(addr)).await??;
    stream.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").await?;
    let mut body = String::new();
    within(stream.read_to_string(&mut body)).await??;
    Ok(body)
}

/// The value of one sample line (`name{labels}`) in Prometheus text, 0 when absent.
pub fn sample(text: &str, series: &str) -> f64 {
    text.lines().find_map(|l| l.strip_prefix(series).and_then(|v| v.trim().parse().ok())).unwrap_or(0.0)
}

pub async fn within<F: Future>(f: F) -> anyhow::Result<F::Output> {
    tokio::time::timeout(WAIT, f).await.context("timed out")
}

/// Polls `check` every 50 ms until it returns `Some`, for at most `WAIT`.
pub async fn poll<T, F, Fut>(what: &str, mut check: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<Option<T>>>,
{
    let deadline = tokio::time::Instant::now() + WAIT;
    let mut last_err = None;
    loop {
        match check().await {
            Ok(Some(v)) => return Ok(v),
            Ok(None) => {}
            Err(e) => last_err = Some(e),
        }
        if tokio::time::Instant::now() >= deadline {
            match last_err {
                Some(e) => bail!("timed out waiting for {what}: last error: {e:#}"),
                None => bail!("timed out waiting for {what}"),
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until exactly `n` live pods match `selector`; returns them.
pub async fn pod_count(c: &Cluster, selector: &str, n: usize) -> anyhow::Result<Vec<Pod>> {
    poll(&format!("{n} pods with {selector}"), || async {
        let pods = c.pods(selector).await?;
        Ok((pods.len() == n).then_some(pods))
    })
    .await
}

/// Merges `patch` into `base` (JSON merge patch semantics, without deletes).
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

pub fn replicaset(name: &str, app: &str, replicas: i32) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": app}},
            "template": {
                "metadata": {"labels": {"app": app}},
                "spec": {"containers": [{"name": "app", "image": "registry.example/app:1",
                    "ports": [{"name": "http", "containerPort": 8080}]}]},
            },
        },
    })
}

pub fn deployment(name: &str, app: &str, replicas: i32, image: &str) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": app}},
            "template": {
                "metadata": {"labels": {"app": app}},
                "spec": {"containers": [{"name": "app", "image": image,
                    "ports": [{"name": "http", "containerPort": 8080}]}]},
            },
        },
    })
}
