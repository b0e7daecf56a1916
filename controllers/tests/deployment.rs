//! The Deployment controller against a real apiserver (pods made Ready by the test, as no agent
//! runs): creation, scaling, a rolling update that respects maxSurge/maxUnavailable at every step,
//! rollback, Recreate, and the conditions `kubectl rollout status` reads.

mod common;

use common::{deployment, merge, pod_count, poll, Cluster};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use kube::api::{ListParams, Patch, PatchParams};
use kube::ResourceExt;
use serde_json::json;

fn condition(d: &Deployment, type_: &str) -> Option<(String, String)> {
    let c = d.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_.as_deref() == Some(type_))?;
    Some((c.status.clone().unwrap_or_default(), c.reason.clone().unwrap_or_default()))
}

/// `kubectl rollout status`'s success test.
fn rolled_out(d: &Deployment) -> bool {
    let want = d.spec.replicas.unwrap_or(1);
    let s = d.status.clone().unwrap_or_default();
    s.observed_generation >= d.metadata.generation
        && s.updated_replicas == Some(want)
        && s.replicas == Some(want)
        && s.available_replicas == Some(want)
        && condition(d, "Progressing") == Some(("True".into(), "NewReplicaSetAvailable".into()))
        && condition(d, "Available") == Some(("True".into(), "MinimumReplicasAvailable".into()))
}

/// Marks pods ready until the deployment is rolled out, checking the rollout bounds each round.
async fn drive_rollout(
    c: &Cluster,
    name: &str,
    selector: &str,
    max_total: usize,
    min_ready: usize,
) -> anyhow::Result<()> {
    let api = c.api::<Deployment>();
    poll(&format!("deployment {name} to roll out"), || async {
        let pods = c.pods(selector).await?;
        let ready = pods.iter().filter(|p| kaji_controllers::meta::pod_is_ready(p)).count();
        anyhow::ensure!(pods.len() <= max_total, "{} pods exceed maxSurge bound {max_total}", pods.len());
        anyhow::ensure!(ready >= min_ready, "{ready} ready pods below maxUnavailable bound {min_ready}");
        c.make_ready(selector).await?;
        Ok(rolled_out(&api.get(name).await?).then_some(()))
    })
    .await
}

async fn sets(c: &Cluster, selector: &str) -> anyhow::Result<Vec<ReplicaSet>> {
    Ok(c.api::<ReplicaSet>().list(&ListParams::default().labels(selector)).await?.items)
}

fn set_image(image: &str) -> Patch<serde_json::Value> {
    Patch::Strategic(json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "image": image}]}}}}))
}

#[tokio::test]
async fn creates_scales_rolls_and_rolls_back() -> anyhow::Result<()> {
    let c = Cluster::start().await?;
    let m = c.manager().await?;
    let mut d = deployment("web", "web", 3, "registry.example/web:1");
    merge(
        &mut d,
        json!({"spec": {"strategy": {"type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}}}),
    );
    c.create::<Deployment>(d).await?;
    pod_count(&c, "app=web", 3).await?;
    let rs = sets(&c, "app=web").await?;
    assert_eq!(rs.len(), 1, "one ReplicaSet");
    let first = rs[0].metadata.name.clone().unwrap_or_default();
    let hash = rs[0].metadata.labels.as_ref().and_then(|l| l.get("pod-template-hash")).cloned().unwrap_or_default();
    assert_eq!(first, format!("web-{hash}"));
    assert_eq!(rs[0].annotations().get("deployment.kubernetes.io/revision").map(String::as_str), Some("1"));
    drive_rollout(&c, "web", "app=web", 3, 0).await?;
    assert!(!c.events("web", "ScalingReplicaSet").await?.is_empty());

    // Scale up.
    let api = c.api::<Deployment>();
    api.patch("web", &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": 5}}))).await?;
    pod_count(&c, "app=web", 5).await?;
    drive_rollout(&c, "web", "app=web", 6, 3).await?;

    // Rolling update: never more than 6 pods, never fewer than 5 ready.
    api.patch("web", &PatchParams::default(), &set_image("registry.example/web:2")).await?;
    drive_rollout(&c, "web", "app=web", 6, 5).await?;
    let rs = sets(&c, "app=web").await?;
    assert_eq!(rs.len(), 2, "old and new ReplicaSets");
    let second = rs.iter().find(|r| r.metadata.name.as_deref() != Some(&first)).cloned().unwrap_or_default();
    assert_eq!(second.spec.replicas, Some(5));
    assert_eq!(second.annotations().get("deployment.kubernetes.io/revision").map(String::as_str), Some("2"));
    let old = rs.iter().find(|r| r.metadata.name.as_deref() == Some(&first)).cloned().unwrap_or_default();
    assert_eq!(old.spec.replicas, Some(0));

    // Rollback: the first ReplicaSet is current again, with revision 3.
    api.patch("web", &PatchParams::default(), &set_image("registry.example/web:1")).await?;
    drive_rollout(&c, "web", "app=web", 6, 5).await?;
    let back = c.api::<ReplicaSet>().get(&first).await?;
    assert_eq!(back.spec.replicas, Some(5));
    assert_eq!(back.annotations().get("deployment.kubernetes.io/revision").map(String::as_str), Some("3"));
    let d = api.get("web").await?;
    assert_eq!(d.annotations().get("deployment.kubernetes.io/revision").map(String::as_str), Some("3"));
    assert_eq!(sets(&c, "app=web").await?.len(), 2, "no third ReplicaSet");
    m.shutdown().await?;
    c.stop().await
}

#[tokio::test]
async fn recreate_removes_old_pods_before_new_ones() -> anyhow::Result<()> {
    let c = Cluster::start().await?;
    let m = c.manager().await?;
    let mut d = deployment("db", "db", 2, "registry.example/db:1");
    merge(&mut d, json!({"spec": {"strategy": {"type": "Recreate"}}}));
    c.create::<Deployment>(d).await?;
    drive_rollout(&c, "db", "app=db", 2, 0).await?;
    let old = sets(&c, "app=db").await?.remove(0).metadata.uid;
    c.api::<Deployment>().patch("db", &PatchParams::default(), &set_image("registry.example/db:2")).await?;
    // At no point do old and new pods run together.
    poll("the recreate rollout", || async {
        let pods = c.pods("app=db").await?;
        let owners: std::collections::HashSet<_> =
            pods.iter().filter_map(|p| p.metadata.owner_references.as_ref()?.first().map(|r| r.uid.clone())).collect();
        anyhow::ensure!(owners.len() <= 1, "old and new pods together: {owners:?}");
        c.make_ready("app=db").await?;
        let done = rolled_out(&c.api::<Deployment>().get("db").await?);
        Ok((done && !owners.contains(old.as_deref().unwrap_or_default())).then_some(()))
    })
    .await?;
    m.shutdown().await?;
    c.stop().await
}
