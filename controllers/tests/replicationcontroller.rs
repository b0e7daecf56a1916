//! The ReplicationController controller (the ReplicaSet controller's code run for core/v1 RCs)
//! against a real apiserver: pods owned by the RC, scaling through `scale`, status, adoption,
//! deletion with and without propagation, and a refused pod surfacing as ReplicaFailure.

mod common;

use common::{pod_count, poll, Cluster};
use k8s_openapi::api::core::v1::{Namespace, Pod, ReplicationController};
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::{json, Value};

fn rc(name: &str, app: &str, replicas: i32) -> Value {
    json!({
        "apiVersion": "v1", "kind": "ReplicationController",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"app": app},
            "template": {
                "metadata": {"labels": {"app": app}},
                "spec": {"containers": [{"name": "app", "image": "registry.example/app:1"}]},
            },
        },
    })
}

/// The controller reference of a pod: (kind, uid).
fn controller(p: &Pod) -> Option<(String, String)> {
    let r = p.metadata.owner_references.as_ref()?.iter().find(|r| r.controller == Some(true))?;
    Some((r.kind.clone(), r.uid.clone()))
}

#[tokio::test]
async fn creates_owned_pods_scales_through_the_subresource_and_reports_status() -> anyhow::Result<()> {
    let c = Cluster::start().await?;
    let m = c.manager().await?;
    let made: ReplicationController = c.create(rc("web", "web", 3)).await?;
    let uid = made.metadata.uid.clone().unwrap_or_default();
    let pods = pod_count(&c, "app=web", 3).await?;
    for p in &pods {
        assert_eq!(controller(p), Some(("ReplicationController".into(), uid.clone())), "{p:?}");
        assert!(p.metadata.name.as_deref().is_some_and(|n| n.starts_with("web-")));
    }
    let owner = &pods[0].metadata.owner_references.as_ref().expect("owned")[0];
    assert_eq!((owner.api_version.as_str(), owner.block_owner_deletion), ("v1", Some(true)));

    c.make_ready("app=web").await?;
    let rcs = c.api::<ReplicationController>();
    poll("status to count 3 ready pods", || async {
        let s = rcs.get("web").await?.status.unwrap_or_default();
        Ok((s.replicas == 3
            && s.ready_replicas == Some(3)
            && s.available_replicas == Some(3)
            && s.fully_labeled_replicas == Some(3)
            && s.observed_generation == Some(1))
        .then_some(()))
    })
    .await?;
    assert_eq!(c.events("web", "SuccessfulCreate").await?.len(), 3);

    // What `kubectl scale rc web --replicas=1` does.
    let scale = Patch::Merge(json!({"spec": {"replicas": 1}}));
    rcs.patch_scale("web", &PatchParams::default(), &scale).await?;
    pod_count(&c, "app=web", 1).await?;
    poll("status after scale-down", || async {
        let s = rcs.get("web").await?.status.unwrap_or_default();
        Ok((s.replicas == 1 && s.observed_generation == Some(2)).then_some(()))
    })
    .await?;
    poll("SuccessfulDelete events", || async {
        Ok((c.events("web", "SuccessfulDelete").await?.len() == 2).then_some(()))
    })
    .await?;

    // Deleting the RC with propagation (what kubectl sends) takes its pods with it.
    rcs.delete("web", &DeleteParams::background()).await?;
    poll("the pods to be gone", || async { Ok(c.pods("app=web").await?.is_empty().then_some(())) }).await?;
    m.shutdown().await?;
    c.stop().await
}

#[tokio::test]
async fn adopts_orphans_and_a_delete_without_policy_orphans_the_pods() -> anyhow::Result<()> {
    let c = Cluster::start().await?;
    c.create::<Pod>(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "stray", "labels": {"app": "api"}},
        "spec": {"containers": [{"name": "app", "image": "registry.example/app:1"}]},
    }))
    .await?;
    let m = c.manager().await?;
    let made: ReplicationController = c.create(rc("api", "api", 2)).await?;
    let uid = made.metadata.uid.clone().unwrap_or_default();
    let pods = pod_count(&c, "app=api", 2).await?;
    assert!(pods.iter().all(|p| controller(p).is_some_and(|(_, u)| u == uid)), "{pods:?}");
    assert!(pods.iter().any(|p| p.metadata.name.as_deref() == Some("stray")), "the orphan was adopted");

    // core/v1's default: the garbage collector orphans the pods, then lets the RC go.
    let rcs = c.api::<ReplicationController>();
    rcs.delete("api", &DeleteParams::default()).await?;
    poll("the RC to be gone", || async { Ok(rcs.get_opt("api").await?.is_none().then_some(())) }).await?;
    let left = poll("the pods to be orphaned", || async {
        let pods = c.pods("app=api").await?;
        Ok(pods.iter().all(|p| controller(p).is_none()).then_some(pods))
    })
    .await?;
    assert_eq!(left.len(), 2, "orphaned, not deleted");
    m.shutdown().await?;
    c.stop().await
}

#[tokio::test]
async fn a_pod_refused_by_pod_security_surfaces_as_replica_failure() -> anyhow::Result<()> {
    let c = Cluster::start().await?;
    let namespaces: Api<Namespace> = Api::all(c.client.clone());
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "locked",
        "labels": {"pod-security.kubernetes.io/enforce": "baseline"}}}))?;
    namespaces.create(&Default::default(), &ns).await?;
    let m = c.manager().await?;
    let rcs: Api<ReplicationController> = Api::namespaced(c.client.clone(), "locked");
    let mut privileged = rc("root", "root", 1);
    privileged["spec"]["template"]["spec"]["containers"][0]["securityContext"] = json!({"privileged": true});
    // The RC itself is admitted (Pod Security only warns about templates); its pods are not.
    rcs.create(&Default::default(), &serde_json::from_value(privileged)?).await?;
    let cond = poll("the ReplicaFailure condition", || async {
        let s = rcs.get("root").await?.status.unwrap_or_default();
        Ok(s.conditions.into_iter().flatten().find(|c| c.type_ == "ReplicaFailure"))
    })
    .await?;
    assert_eq!((cond.status.as_str(), cond.reason.as_deref()), ("True", Some("FailedCreate")));
    let message = cond.message.unwrap_or_default();
    assert!(message.contains("violates PodSecurity \"baseline:latest\": privileged"), "{message}");
    let pods: Api<Pod> = Api::namespaced(c.client.clone(), "locked");
    assert!(pods.list(&Default::default()).await?.items.is_empty());

    // Fixed, the pod is made and the condition goes.
    let fix = json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "securityContext": null}]}}}});
    rcs.patch("root", &PatchParams::default(), &Patch::Strategic(fix)).await?;
    poll("the condition to clear", || async {
        let s = rcs.get("root").await?.status.unwrap_or_default();
        let failing = s.conditions.into_iter().flatten().any(|c| c.type_ == "ReplicaFailure");
        Ok((!failing && s.replicas == 1).then_some(()))
    })
    .await?;
    m.shutdown().await?;
    c.stop().await
}
