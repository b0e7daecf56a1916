//! The ReplicaSet controller against a real apiserver: scaling, status, adoption, release, and no
//! double creation across a restart.

mod common;

use common::{pod_count, poll, replicaset, Cluster};
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Patch, PatchParams};
use serde_json::json;
use std::time::Duration;

fn owner_uid(p: &Pod) -> Option<String> {
    p.metadata.owner_references.as_ref()?.iter().find(|r| r.controller == Some(true)).map(|r| r.uid.clone())
}

#[tokio::test]
async fn scales_up_and_down_and_reports_status() -> anyhow::Result<()> {
    let c = Cluster::start().await?;
    let m = c.manager().await?;
    let rs: ReplicaSet = c.create(replicaset("web", "web", 3)).await?;
    let uid = rs.metadata.uid.clone();
    let pods = pod_count(&c, "app=web", 3).await?;
    assert!(pods.iter().all(|p| owner_uid(p) == uid), "pods are owned by the set");
    assert!(pods.iter().all(|p| p.metadata.name.as_deref().is_some_and(|n| n.starts_with("web-"))));

    c.make_ready("app=web").await?;
    let sets = c.api::<ReplicaSet>();
    poll("status to count 3 ready pods", || async {
        let s = sets.get("web").await?.status.unwrap_or_default();
        Ok((s.replicas == 3
            && s.ready_replicas == Some(3)
            && s.available_replicas == Some(3)
            && s.fully_labeled_replicas == Some(3)
            && s.observed_generation == Some(1))
        .then_some(()))
    })
    .await?;
    assert_eq!(c.events("web", "SuccessfulCreate").await?.len(), 3);

    sets.patch("web", &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": 1}}))).await?;
    pod_count(&c, "app=web", 1).await?;
    poll("status after scale-down", || async {
        let s = sets.get("web").await?.status.unwrap_or_default();
        Ok((s.replicas == 1 && s.observed_generation == Some(2)).then_some(()))
    })
    .await?;
    poll("SuccessfulDelete events", || async {
        Ok((c.events("web", "SuccessfulDelete").await?.len() == 2).then_some(()))
    })
    .await?;

    // Deleting a pod gets it replaced.
    let survivor = pod_count(&c, "app=web", 1).await?.remove(0);
    c.api::<Pod>().delete(survivor.metadata.name.as_deref().unwrap_or_default(), &Default::default()).await?;
    let replaced = pod_count(&c, "app=web", 1).await?.remove(0);
    assert_ne!(replaced.metadata.uid, survivor.metadata.uid);

    m.shutdown().await?;
    c.stop().await
}

#[tokio::test]
async fn adopts_orphans_and_releases_pods_that_stop_matching() -> anyhow::Result<()> {
    let c = Cluster::start().await?;
    for name in ["orphan-1", "orphan-2"] {
        c.create::<Pod>(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {"app": "api"}},
            "spec": {"containers": [{"name": "app", "image": "registry.example/app:1"}]},
        }))
        .await?;
    }
    let m = c.manager().await?;
    let rs: ReplicaSet = c.create(replicaset("api", "api", 3)).await?;
    let pods = pod_count(&c, "app=api", 3).await?;
    assert!(pods.iter().all(|p| owner_uid(p) == rs.metadata.uid), "all three owned: {pods:?}");
    let names: Vec<_> = pods.iter().filter_map(|p| p.metadata.name.clone()).collect();
    assert!(names.contains(&"orphan-1".to_string()) && names.contains(&"orphan-2".to_string()), "{names:?}");

    // Relabel one: it is released, and a replacement is created.
    let pods_api = c.api::<Pod>();
    let relabel = Patch::Merge(json!({"metadata": {"labels": {"app": "debug"}}}));
    pods_api.patch("orphan-1", &PatchParams::default(), &relabel).await?;
    poll("orphan-1 to be released", || async {
        Ok(owner_uid(&pods_api.get("orphan-1").await?).is_none().then_some(()))
    })
    .await?;
    pod_count(&c, "app=api", 3).await?;
    m.shutdown().await?;
    c.stop().await
}

#[tokio::test]
async fn a_restarted_manager_never_creates_more_than_replicas() -> anyhow::Result<()> {
    let c = Cluster::start().await?;
    let m = c.manager().await?;
    c.create::<ReplicaSet>(replicaset("batch", "batch", 20)).await?;
    // Crash the manager as soon as the first batch shows up, halfway through the scale-up.
    poll("the first pods", || async { Ok((!c.pods("app=batch").await?.is_empty()).then_some(())) }).await?;
    m.shutdown().await?;
    let m = c.manager().await?;
    pod_count(&c, "app=batch", 20).await?;
    // A second manager start (no expectations, fresh caches) still converges to exactly 20.
    m.shutdown().await?;
    let m = c.manager().await?;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(c.pods("app=batch").await?.len(), 20);
    m.shutdown().await?;
    c.stop().await
}

#[tokio::test]
async fn slow_caches_do_not_cause_double_creates() -> anyhow::Result<()> {
    // Many reconciles in a row (status writes, pod events) while creates are in flight must still
    // end at exactly the replica count.
    let c = Cluster::start().await?;
    let m = c.manager().await?;
    c.create::<ReplicaSet>(replicaset("burst", "burst", 40)).await?;
    pod_count(&c, "app=burst", 40).await?;
    let sets = c.api::<ReplicaSet>();
    for n in [10, 30, 5] {
        sets.patch("burst", &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": n}}))).await?;
        pod_count(&c, "app=burst", n).await?;
    }
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert_eq!(c.pods("app=burst").await?.len(), 5);
    m.shutdown().await?;
    c.stop().await
}
