//! The namespace controller against a real apiserver: deleting a namespace empties it of every kind
//! of object and then removes it; a terminating pod holds it, with conditions that say so.

mod common;

use common::{deployment, poll, Cluster};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, NamespaceCondition, Node, Pod, Secret, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::{json, Value};

const NS: &str = "team";

fn namespaces(c: &Cluster) -> Api<Namespace> {
    Api::all(c.client.clone())
}

fn in_ns<K>(c: &Cluster) -> Api<K>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    Api::namespaced(c.client.clone(), NS)
}

async fn create<K>(c: &Cluster, obj: Value) -> anyhow::Result<K>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    Ok(in_ns::<K>(c).create(&PostParams::default(), &serde_json::from_value(obj)?).await?)
}

async fn count<K>(c: &Cluster) -> anyhow::Result<usize>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    Ok(in_ns::<K>(c).list(&ListParams::default()).await?.items.len())
}

async fn make_namespace(c: &Cluster) -> anyhow::Result<()> {
    let ns: Namespace =
        serde_json::from_value(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}))?;
    namespaces(c).create(&PostParams::default(), &ns).await?;
    Ok(())
}

async fn namespace_gone(c: &Cluster) -> anyhow::Result<()> {
    poll("the namespace to be gone", || async { Ok(namespaces(c).get_opt(NS).await?.is_none().then_some(())) }).await
}

fn condition(ns: &Namespace, type_: &str) -> Option<NamespaceCondition> {
    ns.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == type_).cloned()
}

#[tokio::test]
async fn a_deleted_namespace_is_emptied_then_removed() -> anyhow::Result<()> {
    let c = Cluster::start().await?;
    let m = c.manager().await?;
    make_namespace(&c).await?;
    create::<ConfigMap>(&c, json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings"}})).await?;
    create::<Secret>(&c, json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "token"}})).await?;
    create::<Service>(
        &c,
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
        "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]}}),
    )
    .await?;
    create::<Deployment>(&c, deployment("web", "web", 2, "registry.example/app:1")).await?;
    poll("the deployment's pods", || async { Ok((count::<Pod>(&c).await? == 2).then_some(())) }).await?;
    poll("the service's endpoint slice", || async { Ok((count::<EndpointSlice>(&c).await? > 0).then_some(())) })
        .await?;

    namespaces(&c).delete(NS, &DeleteParams::default()).await?;
    namespace_gone(&c).await?;
    assert_eq!(count::<ConfigMap>(&c).await?, 0);
    assert_eq!(count::<Secret>(&c).await?, 0);
    assert_eq!(count::<Service>(&c).await?, 0);
    assert_eq!(count::<Deployment>(&c).await?, 0);
    assert_eq!(count::<ReplicaSet>(&c).await?, 0);
    assert_eq!(count::<Pod>(&c).await?, 0);
    assert_eq!(count::<EndpointSlice>(&c).await?, 0);
    m.shutdown().await?;
    c.stop().await
}

#[tokio::test]
async fn a_terminating_pod_holds_its_namespace_until_it_is_gone() -> anyhow::Result<()> {
    let c = Cluster::start().await?;
    let m = c.manager().await?;
    make_namespace(&c).await?;
    let node: Node = serde_json::from_value(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}}))?;
    Api::<Node>::all(c.client.clone()).create(&PostParams::default(), &node).await?;
    // Bound to a node, so its deletion is graceful and waits for a kubelet — played by the test.
    create::<Pod>(
        &c,
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "slow"},
        "spec": {"nodeName": "n1", "terminationGracePeriodSeconds": 3,
            "containers": [{"name": "app", "image": "registry.example/app:1"}]}}),
    )
    .await?;

    namespaces(&c).delete(NS, &DeleteParams::default()).await?;
    let pods = in_ns::<Pod>(&c);
    poll("the pod to be terminating", || async {
        Ok(pods.get("slow").await?.metadata.deletion_timestamp.is_some().then_some(()))
    })
    .await?;
    let remaining = poll("a ContentRemaining condition", || async {
        let ns = namespaces(&c).get(NS).await?;
        Ok(condition(&ns, "NamespaceContentRemaining").filter(|c| c.status == "True"))
    })
    .await?;
    assert_eq!(remaining.message.as_deref(), Some("Some resources are remaining: pods. has 1 resource instances"));
    // Past the pod's grace period the namespace keeps waiting, and says why.
    let failure = poll("a ContentFailure condition", || async {
        let ns = namespaces(&c).get(NS).await?;
        Ok(condition(&ns, "NamespaceDeletionContentFailure").filter(|c| c.status == "True"))
    })
    .await?;
    assert!(
        failure.message.as_deref().is_some_and(|m| m.contains("unexpected items still remain in namespace: team")),
        "{failure:?}"
    );
    assert!(namespaces(&c).get_opt(NS).await?.is_some());

    // The kubelet confirms the pod is gone.
    pods.delete("slow", &DeleteParams::default().grace_period(0)).await?;
    namespace_gone(&c).await?;
    m.shutdown().await?;
    c.stop().await
}
