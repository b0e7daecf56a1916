//! The ResourceQuota controller against a real apiserver: status.hard from the spec, usage of
//! pods (terminal ones not counted), configmaps, replica sets and quotas themselves, recomputed as
//! objects come and go, a kind outside the caches listed live, and a quota at rest never rewritten.

mod common;

use common::{poll, Cluster};
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, ResourceQuota};
use kube::api::{DeleteParams, Patch, PatchParams};
use serde_json::{json, Value};

/// The quota's status.used as JSON (Null until written).
async fn used(c: &Cluster, name: &str) -> anyhow::Result<Value> {
    let q = c.api::<ResourceQuota>().get(name).await?;
    Ok(serde_json::to_value(q.status.and_then(|s| s.used))?)
}

async fn wait_used(c: &Cluster, name: &str, want: Value) -> anyhow::Result<()> {
    let what = format!("quota {name} to use {want}");
    poll(&what, || async {
        let got = used(c, name).await?;
        let all = want.as_object().into_iter().flatten().all(|(k, v)| got.get(k) == Some(v));
        Ok(all.then_some(()))
    })
    .await
}

fn pod(name: &str, cpu: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {"containers": [
        {"name": "app", "image": "registry.example/app:1", "resources": {"requests": {"cpu": cpu}}}]}})
}

#[tokio::test]
async fn usage_follows_the_objects_of_the_namespace_and_rests_when_nothing_changes() -> anyhow::Result<()> {
    let c = Cluster::start().await?;
    let _m = c.manager().await?;
    let hard = json!({"pods": "5", "requests.cpu": "2", "configmaps": "10", "resourcequotas": "3",
        "count/replicasets.apps": "5", "count/leases.coordination.k8s.io": "4"});
    let q: ResourceQuota = c
        .create(json!({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "q"}, "spec": {"hard": hard}}))
        .await?;
    assert!(q.status.is_none_or(|s| s.used.is_none()));
    wait_used(
        &c,
        "q",
        json!({"pods": "0", "requests.cpu": "0", "configmaps": "0", "resourcequotas": "1",
        "count/replicasets.apps": "0", "count/leases.coordination.k8s.io": "0"}),
    )
    .await?;
    let status = c.api::<ResourceQuota>().get("q").await?.status.unwrap_or_default();
    assert_eq!(serde_json::to_value(status.hard)?, hard, "status.hard is the spec's");

    let _: Pod = c.create(pod("a", "500m")).await?;
    let _: Pod = c.create(pod("b", "250m")).await?;
    let _: ConfigMap = c.create(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}})).await?;
    let _: ReplicaSet = c.create(common::replicaset("rs", "rs", 0)).await?;
    wait_used(&c, "q", json!({"pods": "2", "requests.cpu": "750m", "configmaps": "1", "count/replicasets.apps": "1"}))
        .await?;

    // A terminal pod no longer counts; a deleted one neither.
    c.set_status("a", json!({"phase": "Succeeded"})).await?;
    wait_used(&c, "q", json!({"pods": "1", "requests.cpu": "250m"})).await?;
    c.api::<Pod>().delete("b", &DeleteParams::default()).await?;
    c.api::<ConfigMap>().delete("cm", &DeleteParams::default()).await?;
    wait_used(&c, "q", json!({"pods": "0", "requests.cpu": "0", "configmaps": "0"})).await?;

    // Another quota counts in the first's `resourcequotas`.
    let _: ResourceQuota = c
        .create(json!({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "scoped"},
            "spec": {"hard": {"pods": "1"}, "scopes": ["Terminating"]}}))
        .await?;
    wait_used(&c, "q", json!({"resourcequotas": "2"})).await?;
    wait_used(&c, "scoped", json!({"pods": "0"})).await?;

    // A kind no cache holds is listed live when the quota is recomputed (here: its spec changed).
    let _: Lease =
        c.create(json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "l"}})).await?;
    wait_used(&c, "q", json!({"count/leases.coordination.k8s.io": "1"})).await?;
    let patch = Patch::Merge(json!({"spec": {"hard": {"requests.cpu": "3"}}}));
    c.api::<ResourceQuota>().patch("q", &PatchParams::default(), &patch).await?;
    poll("status.hard to follow the spec", || async {
        let s = c.api::<ResourceQuota>().get("q").await?.status.unwrap_or_default();
        let hard = serde_json::to_value(s.hard)?;
        Ok((hard["requests.cpu"] == "3").then_some(()))
    })
    .await?;
    wait_used(&c, "q", json!({"count/leases.coordination.k8s.io": "1", "requests.cpu": "0"})).await?;

    // At rest: no write that changes nothing.
    let before = c.api::<ResourceQuota>().get("q").await?.metadata.resource_version;
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    let after = c.api::<ResourceQuota>().get("q").await?.metadata.resource_version;
    assert_eq!(before, after, "a quota at rest is not rewritten");
    Ok(())
}
