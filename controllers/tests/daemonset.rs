//! The DaemonSet controller against a real apiserver, playing the scheduler-less agent: a pod per
//! node named by node affinity, a new node gets its pod, a NoExecute taint takes it away, the
//! status counts, ControllerRevisions, a rolling update within maxUnavailable, OnDelete, and no
//! write once everything is settled.

mod common;

use common::{poll, within, Cluster};
use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

async fn add_node(c: &Cluster, name: &str) -> anyhow::Result<()> {
    let node: Node = serde_json::from_value(json!({"metadata": {"name": name}}))?;
    Api::<Node>::all(c.client.clone()).create(&PostParams::default(), &node).await?;
    Ok(())
}

fn daemon_set(name: &str, strategy: Value) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": name},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "updateStrategy": strategy,
            "template": {"metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": "registry.example/agent:1"}]}},
        },
    })
}

/// The node each live pod is pinned to (its node affinity's metadata.name).
fn pinned(pods: &[Pod]) -> Vec<String> {
    let mut nodes: Vec<String> = pods.iter().filter_map(kaji_controllers::daemonset::plan::target_node).collect();
    nodes.sort();
    nodes
}

async fn wait_pinned(c: &Cluster, app: &str, want: &[&str]) -> anyhow::Result<Vec<Pod>> {
    poll(&format!("daemon pods on {want:?}"), || async {
        let pods = c.pods(&format!("app={app}")).await?;
        Ok((pinned(&pods) == want).then_some(pods))
    })
    .await
}

async fn ds_status(c: &Cluster, name: &str) -> anyhow::Result<Value> {
    let ds = c.api::<DaemonSet>().get(name).await?;
    Ok(serde_json::to_value(ds.status)?)
}

async fn revisions(c: &Cluster, app: &str) -> anyhow::Result<Vec<i64>> {
    let list = c.api::<ControllerRevision>().list(&ListParams::default().labels(&format!("app={app}"))).await?;
    let mut revs: Vec<i64> = list.items.iter().filter_map(|r| r.revision).collect();
    revs.sort();
    Ok(revs)
}

#[tokio::test]
async fn a_pod_per_node_follows_nodes_and_taints_and_settles() -> anyhow::Result<()> {
    let c = Cluster::start().await?;
    add_node(&c, "n1").await?;
    add_node(&c, "n2").await?;
    let m = c.manager().await?;
    c.create::<DaemonSet>(daemon_set("agent", json!({"type": "RollingUpdate"}))).await?;
    let pods = wait_pinned(&c, "agent", &["n1", "n2"]).await?;
    for p in &pods {
        let spec = p.spec.as_ref().expect("spec");
        assert!(spec.node_name.is_none(), "the scheduler places daemon pods, not the controller");
        let keys: BTreeSet<String> = spec.tolerations.iter().flatten().filter_map(|t| t.key.clone()).collect();
        assert!(keys.contains("node.kubernetes.io/not-ready") && keys.contains("node.kubernetes.io/unschedulable"));
        let labels = p.metadata.labels.as_ref().expect("labels");
        assert!(labels.contains_key("controller-revision-hash"), "{labels:?}");
    }
    assert_eq!(revisions(&c, "agent").await?, vec![1]);
    c.make_ready("app=agent").await?;
    poll("status: 2 desired, 2 ready", || async {
        let s = ds_status(&c, "agent").await?;
        Ok((s["desiredNumberScheduled"] == 2
            && s["numberReady"] == 2
            && s["numberAvailable"] == 2
            && s["updatedNumberScheduled"] == 2
            && s["currentNumberScheduled"] == 2)
            .then_some(()))
    })
    .await?;
    assert_eq!(c.events("agent", "SuccessfulCreate").await?.len(), 2);

    add_node(&c, "n3").await?;
    wait_pinned(&c, "agent", &["n1", "n2", "n3"]).await?;

    let taint = json!({"spec": {"taints": [{"key": "dedicated", "value": "db", "effect": "NoExecute"}]}});
    Api::<Node>::all(c.client.clone()).patch("n1", &PatchParams::default(), &Patch::Merge(taint)).await?;
    wait_pinned(&c, "agent", &["n2", "n3"]).await?;
    c.make_ready("app=agent").await?;
    poll("status: 2 desired after the taint", || async {
        let s = ds_status(&c, "agent").await?;
        Ok((s["desiredNumberScheduled"] == 2 && s["numberReady"] == 2 && s["numberMisscheduled"] == 0).then_some(()))
    })
    .await?;

    // Settled: nothing is written any more.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = c.api::<DaemonSet>().get("agent").await?.metadata.resource_version;
    let pods_before: Vec<_> = c.pods("app=agent").await?.into_iter().map(|p| p.metadata.resource_version).collect();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(c.api::<DaemonSet>().get("agent").await?.metadata.resource_version, before);
    let pods_after: Vec<_> = c.pods("app=agent").await?.into_iter().map(|p| p.metadata.resource_version).collect();
    assert_eq!(pods_after, pods_before);

    within(m.shutdown()).await??;
    c.stop().await
}

fn hash(p: &Pod) -> String {
    p.metadata.labels.as_ref().and_then(|l| l.get("controller-revision-hash")).cloned().unwrap_or_default()
}

#[tokio::test]
async fn a_rolling_update_stays_within_max_unavailable_and_records_revisions() -> anyhow::Result<()> {
    let c = Cluster::start().await?;
    for n in ["n1", "n2", "n3"] {
        add_node(&c, n).await?;
    }
    let m = c.manager().await?;
    let strategy = json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}});
    c.create::<DaemonSet>(daemon_set("roll", strategy)).await?;
    let first = wait_pinned(&c, "roll", &["n1", "n2", "n3"]).await?;
    let old_hash = hash(&first[0]);
    c.make_ready("app=roll").await?;
    poll("3 ready", || async { Ok((ds_status(&c, "roll").await?["numberReady"] == 3).then_some(())) }).await?;

    let patch =
        json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "registry.example/agent:2"}]}}}});
    c.api::<DaemonSet>().patch("roll", &PatchParams::default(), &Patch::Merge(patch)).await?;
    let max_missing = AtomicUsize::new(0);
    poll("every pod updated", || async {
        let pods = c.pods("app=roll").await?;
        let running = pods.iter().filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"));
        max_missing.fetch_max(3usize.saturating_sub(running.count()), Ordering::Relaxed);
        c.make_ready("app=roll").await?;
        let updated = pods.iter().filter(|p| hash(p) != old_hash).count();
        let s = ds_status(&c, "roll").await?;
        Ok((updated == 3 && pods.len() == 3 && s["updatedNumberScheduled"] == 3 && s["numberAvailable"] == 3)
            .then_some(()))
    })
    .await?;
    let max_missing = max_missing.into_inner();
    assert!(max_missing <= 1, "at most maxUnavailable=1 node without a running pod, saw {max_missing}");
    assert_eq!(revisions(&c, "roll").await?, vec![1, 2]);

    within(m.shutdown()).await??;
    c.stop().await
}

#[tokio::test]
async fn on_delete_leaves_old_pods_until_they_are_deleted() -> anyhow::Result<()> {
    let c = Cluster::start().await?;
    add_node(&c, "n1").await?;
    let m = c.manager().await?;
    c.create::<DaemonSet>(daemon_set("manual", json!({"type": "OnDelete"}))).await?;
    let first = wait_pinned(&c, "manual", &["n1"]).await?;
    c.make_ready("app=manual").await?;
    let patch =
        json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "registry.example/agent:2"}]}}}});
    c.api::<DaemonSet>().patch("manual", &PatchParams::default(), &Patch::Merge(patch)).await?;
    poll("2 revisions", || async { Ok((revisions(&c, "manual").await? == [1, 2]).then_some(())) }).await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let still = c.pods("app=manual").await?;
    assert_eq!(still.len(), 1);
    assert_eq!(still[0].metadata.uid, first[0].metadata.uid, "OnDelete keeps the old pod");
    let name = first[0].metadata.name.clone().unwrap_or_default();
    c.api::<Pod>().delete(&name, &Default::default()).await?;
    let replaced = poll("a new pod from the new template", || async {
        let pods = c.pods("app=manual").await?;
        Ok(pods.into_iter().find(|p| p.metadata.uid != first[0].metadata.uid))
    })
    .await?;
    assert_ne!(hash(&replaced), hash(&first[0]));
    within(m.shutdown()).await??;
    c.stop().await
}
