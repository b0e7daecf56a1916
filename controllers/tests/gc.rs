//! The garbage collector against a real apiserver: cascading deletion in the three propagation
//! modes (Background, Foreground, Orphan), objects whose owners are gone or replaced, and an owner
//! reference that can never be valid.

mod common;

use common::{deployment, merge, metrics, pod_count, poll, replicaset, sample, Cluster};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod, Secret};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::ResourceExt;
use serde_json::{json, Value};

const HOLD: &str = "example.com/hold";

fn owner_refs(p: &Pod) -> Vec<String> {
    p.metadata.owner_references.iter().flatten().map(|r| r.uid.clone()).collect()
}

async fn gone<K>(api: &Api<K>, name: &str) -> anyhow::Result<()>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    poll(&format!("{name} to be gone"), || async { Ok(api.get_opt(name).await?.is_none().then_some(())) }).await
}

async fn sets(c: &Cluster, selector: &str) -> anyhow::Result<Vec<ReplicaSet>> {
    Ok(c.api::<ReplicaSet>().list(&ListParams::default().labels(selector)).await?.items)
}

/// Every pod with this label selector, deleting or not.
async fn all_pods(c: &Cluster, selector: &str) -> anyhow::Result<Vec<Pod>> {
    Ok(c.api::<Pod>().list(&ListParams::default().labels(selector)).await?.items)
}

#[tokio::test]
async fn background_deletion_of_a_deployment_removes_its_replica_sets_and_pods() -> anyhow::Result<()> {
    let c = Cluster::start().await?;
    let m = c.manager().await?;
    c.create::<Deployment>(deployment("web", "web", 2, "registry.example/app:1")).await?;
    pod_count(&c, "app=web", 2).await?;
    let rs = sets(&c, "app=web").await?;
    assert_eq!(rs.len(), 1);

    // What `kubectl delete deployment web` sends.
    c.api::<Deployment>().delete("web", &DeleteParams::background()).await?;
    gone(&c.api::<Deployment>(), "web").await?;
    gone(&c.api::<ReplicaSet>(), &rs[0].name_any()).await?;
    poll("the pods to be gone", || async { Ok(all_pods(&c, "app=web").await?.is_empty().then_some(())) }).await?;

    let text = metrics(&m).await?;
    assert!(
        sample(&text, r#"controller_runtime_reconcile_total{controller="garbagecollector",result="success"}"#) > 0.0
    );
    m.shutdown().await?;
    c.stop().await
}

#[tokio::test]
async fn foreground_deletion_keeps_the_owner_until_its_dependents_are_gone() -> anyhow::Result<()> {
    let c = Cluster::start().await?;
    let m = c.manager().await?;
    // The pods carry a finalizer the test plays: they cannot go until it is removed.
    let mut d = deployment("fg", "fg", 2, "registry.example/app:1");
    merge(&mut d, json!({"spec": {"template": {"metadata": {"finalizers": [HOLD]}}}}));
    c.create::<Deployment>(d).await?;
    let pods = pod_count(&c, "app=fg", 2).await?;
    let rs_name = sets(&c, "app=fg").await?.remove(0).name_any();

    // What `kubectl delete deployment fg --cascade=foreground` sends.
    c.api::<Deployment>().delete("fg", &DeleteParams::foreground()).await?;
    poll("the pods to be deleted", || async {
        let pods = all_pods(&c, "app=fg").await?;
        Ok((pods.len() == 2 && pods.iter().all(|p| p.metadata.deletion_timestamp.is_some())).then_some(()))
    })
    .await?;
    let held_d = c.api::<Deployment>().get("fg").await?;
    let held_rs = c.api::<ReplicaSet>().get(&rs_name).await?;
    for (what, meta) in [("deployment", &held_d.metadata), ("replicaset", &held_rs.metadata)] {
        assert!(meta.deletion_timestamp.is_some(), "{what} is being deleted");
        assert!(meta.finalizers.iter().flatten().any(|f| f == "foregroundDeletion"), "{what} waits: {meta:?}");
    }

    // The pods' own finalizer comes off: they go, then the set, then the deployment.
    for p in &pods {
        let patch = Patch::Merge(json!({"metadata": {"finalizers": null}}));
        c.api::<Pod>().patch(&p.name_any(), &PatchParams::default(), &patch).await?;
    }
    gone(&c.api::<ReplicaSet>(), &rs_name).await?;
    gone(&c.api::<Deployment>(), "fg").await?;
    assert!(all_pods(&c, "app=fg").await?.is_empty());
    m.shutdown().await?;
    c.stop().await
}

#[tokio::test]
async fn orphan_deletion_leaves_the_pods_without_the_owner_reference() -> anyhow::Result<()> {
    let c = Cluster::start().await?;
    let m = c.manager().await?;
    let rs: ReplicaSet = c.create(replicaset("orph", "orph", 2)).await?;
    let uid = rs.uid().unwrap_or_default();
    let before = pod_count(&c, "app=orph", 2).await?;
    assert!(before.iter().all(|p| owner_refs(p) == [uid.clone()]));

    // What `kubectl delete rs orph --cascade=orphan` sends.
    c.api::<ReplicaSet>().delete("orph", &DeleteParams::orphan()).await?;
    gone(&c.api::<ReplicaSet>(), "orph").await?;
    let after = c.pods("app=orph").await?;
    let names = |ps: &[Pod]| ps.iter().map(|p| p.name_any()).collect::<std::collections::BTreeSet<_>>();
    assert_eq!(names(&after), names(&before), "the same pods live on");
    assert!(after.iter().all(|p| owner_refs(p).is_empty()), "no reference to the deleted set: {after:?}");
    m.shutdown().await?;
    c.stop().await
}

fn config_map(name: &str, owners: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "ownerReferences": owners}})
}

fn secret_ref(name: &str, uid: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Secret", "name": name, "uid": uid})
}

#[tokio::test]
async fn objects_whose_owners_are_gone_or_replaced_are_collected() -> anyhow::Result<()> {
    let c = Cluster::start().await?;
    let m = c.manager().await?;
    let live: Secret = c.create(json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "live"}})).await?;
    let live_uid = live.uid().unwrap_or_default();
    c.create::<ConfigMap>(config_map("orphaned", json!([secret_ref("never-was", "0000-gone")]))).await?;
    c.create::<ConfigMap>(config_map("namesake", json!([secret_ref("live", "1111-an-older-live")]))).await?;
    c.create::<ConfigMap>(config_map("kept", json!([secret_ref("live", &live_uid), secret_ref("x", "2222-gone")])))
        .await?;
    let cms = c.api::<ConfigMap>();
    gone(&cms, "orphaned").await?;
    gone(&cms, "namesake").await?;
    poll("the dangling reference to be dropped", || async {
        let refs: Vec<String> =
            cms.get("kept").await?.metadata.owner_references.iter().flatten().map(|r| r.uid.clone()).collect();
        Ok((refs == [live_uid.clone()]).then_some(()))
    })
    .await?;

    // Its last owner goes: so does it.
    c.api::<Secret>().delete("live", &DeleteParams::default()).await?;
    gone(&cms, "kept").await?;
    m.shutdown().await?;
    c.stop().await
}

#[tokio::test]
async fn a_cluster_scoped_object_with_a_namespaced_owner_is_left_alone_with_a_warning() -> anyhow::Result<()> {
    let c = Cluster::start().await?;
    let m = c.manager().await?;
    let nodes: Api<Node> = Api::all(c.client.clone());
    let node: Node = serde_json::from_value(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1",
        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "3333"}]}}))?;
    nodes.create(&PostParams::default(), &node).await?;
    let event = poll("an OwnerRefInvalidNamespace event", || async {
        Ok(c.events("n1", "OwnerRefInvalidNamespace").await?.into_iter().next())
    })
    .await?;
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    assert!(nodes.get_opt("n1").await?.is_some(), "never deleted for an invalid reference");
    m.shutdown().await?;
    c.stop().await
}
