//! The pod garbage collector against a real apiserver: pods bound to a deleted node are removed
//! (after the quarantine, marked Failed first), and terminated pods beyond the threshold go oldest
//! first while running pods stay.

mod common;

use common::{metrics, poll, sample, within, Cluster};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use kaji_controllers::{podgc, Config};
use kube::api::{Api, PostParams};
use kube::runtime::watcher::{self, watcher, Event};
use kube::ResourceExt;
use serde_json::json;
use std::time::Duration;
use tokio::sync::mpsc;

fn config(threshold: usize) -> Config {
    let pod_gc = podgc::Settings {
        terminated_threshold: threshold,
        period: Duration::from_millis(100),
        quarantine: Duration::from_millis(300),
    };
    Config { pod_gc, ..Config::default() }
}

async fn node(c: &Cluster, name: &str) -> anyhow::Result<()> {
    let node: Node = serde_json::from_value(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}))?;
    Api::<Node>::all(c.client.clone()).create(&PostParams::default(), &node).await?;
    Ok(())
}

async fn pod(c: &Cluster, name: &str, node: Option<&str>) -> anyhow::Result<()> {
    c.create::<Pod>(json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"test": "podgc"}},
        "spec": {"nodeName": node, "containers": [{"name": "app", "image": "registry.example/app:1"}]}}))
        .await?;
    Ok(())
}

async fn names(c: &Cluster) -> anyhow::Result<Vec<String>> {
    let mut names: Vec<String> = c.pods("test=podgc").await?.iter().map(|p| p.name_any()).collect();
    names.sort();
    Ok(names)
}

/// Every phase the pod named `name` is seen in, from a watch started now.
fn phases(c: &Cluster, name: &str) -> mpsc::UnboundedReceiver<String> {
    let (tx, rx) = mpsc::unbounded_channel();
    let events = watcher(c.api::<Pod>(), watcher::Config::default().fields(&format!("metadata.name={name}")));
    tokio::spawn(async move {
        let mut events = std::pin::pin!(events);
        while let Some(event) = events.next().await {
            if let Ok(Event::Apply(p) | Event::InitApply(p)) = event {
                let _ = tx.send(p.status.and_then(|s| s.phase).unwrap_or_default());
            }
        }
    });
    rx
}

#[tokio::test]
async fn pods_bound_to_a_deleted_node_are_removed() -> anyhow::Result<()> {
    let c = Cluster::start().await?;
    let m = c.manager_with(config(12500)).await?;
    node(&c, "n1").await?;
    node(&c, "n2").await?;
    let mut seen = phases(&c, "on-n1");
    pod(&c, "on-n1", Some("n1")).await?;
    pod(&c, "on-n2", Some("n2")).await?;
    c.set_status("on-n1", json!({"phase": "Running"})).await?;
    within(async { while seen.recv().await.is_some_and(|p| p != "Running") {} }).await?;

    Api::<Node>::all(c.client.clone()).delete("n1", &Default::default()).await?;
    poll("the pod on the deleted node to be gone", || async { Ok((names(&c).await? == ["on-n2"]).then_some(())) })
        .await?;
    let last = within(async {
        let mut last = String::new();
        while let Ok(Some(p)) = tokio::time::timeout(Duration::from_millis(300), seen.recv()).await {
            last = p;
        }
        last
    })
    .await?;
    assert_eq!(last, "Failed", "marked Failed before it was deleted");
    let text = metrics(&m).await?;
    assert_eq!(
        sample(&text, r#"pod_gc_collector_force_delete_pods_total{namespace="default",reason="orphaned"}"#),
        1.0
    );
    m.shutdown().await?;
    c.stop().await
}

#[tokio::test]
async fn terminated_pods_beyond_the_threshold_go_oldest_first() -> anyhow::Result<()> {
    let c = Cluster::start().await?;
    let m = c.manager_with(config(2)).await?;
    for name in ["a", "b", "c", "d", "running"] {
        pod(&c, name, None).await?;
    }
    c.set_status("running", json!({"phase": "Running"})).await?;
    for name in ["a", "b", "c", "d"] {
        c.set_status(name, json!({"phase": "Succeeded"})).await?;
    }
    poll("two terminated pods to be left", || async { Ok((names(&c).await? == ["c", "d", "running"]).then_some(())) })
        .await?;
    let text = metrics(&m).await?;
    assert_eq!(
        sample(&text, r#"pod_gc_collector_force_delete_pods_total{namespace="default",reason="terminated"}"#),
        2.0
    );
    m.shutdown().await?;
    c.stop().await
}
