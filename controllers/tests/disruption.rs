//! The disruption controller and the eviction subresource together, against a real apiserver:
//! a budget's status follows its pods and their controller's scale, an eviction takes an allowed
//! disruption and is refused (429, with the budget's reason) when none is left, and a budget
//! changed to allow more lets the same eviction through — the conformance suite's "should block
//! an eviction until the PDB is updated to allow it", and what `kubectl drain` relies on.

mod common;

use common::{pod_count, poll, replicaset, Cluster};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{EvictParams, Patch, PatchParams};
use serde_json::json;

async fn status(c: &Cluster) -> anyhow::Result<(i32, i32, i32, i32, Option<i64>)> {
    let s = c.api::<PodDisruptionBudget>().get("web").await?.status.unwrap_or_default();
    Ok((
        s.expected_pods.unwrap_or(0),
        s.current_healthy.unwrap_or(0),
        s.desired_healthy.unwrap_or(0),
        s.disruptions_allowed.unwrap_or(0),
        s.observed_generation,
    ))
}

#[tokio::test]
async fn budgets_count_healthy_pods_and_gate_evictions() -> anyhow::Result<()> {
    let c = Cluster::start().await?;
    let m = c.manager().await?;
    c.create::<k8s_openapi::api::apps::v1::ReplicaSet>(replicaset("web", "web", 3)).await?;
    let pods = pod_count(&c, "app=web", 3).await?;
    c.make_ready("app=web").await?;
    let budget = json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "web"},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "web"}}}});
    c.create::<PodDisruptionBudget>(budget).await?;
    poll("the budget's first status", || async { Ok((status(&c).await? == (3, 3, 2, 1, Some(1))).then_some(())) })
        .await?;
    let pdb = c.api::<PodDisruptionBudget>().get("web").await?;
    let cond = &pdb.status.and_then(|s| s.conditions).unwrap_or_default()[0];
    assert_eq!(
        (cond.type_.as_str(), cond.status.as_str(), cond.reason.as_str()),
        ("DisruptionAllowed", "True", "SufficientPods")
    );

    let names: Vec<String> = pods.iter().filter_map(|p| p.metadata.name.clone()).collect();
    // kube-rs retries a 429 fifteen times by default; client-go and kubectl drain see it at once.
    let mut config = kube::Config::new(format!("http://{}", c.server.addr).parse()?);
    config.default_retry = false;
    let api: kube::Api<Pod> = kube::Api::namespaced(kube::Client::try_from(config)?, "default");
    api.evict(&names[0], &EvictParams::default()).await?;
    let gone = api.get_opt(&names[0]).await?;
    assert!(gone.is_none_or(|p| p.metadata.deletion_timestamp.is_some()), "the first eviction deletes the pod");

    poll("the budget to have no disruption left", || async { Ok((status(&c).await?.3 == 0).then_some(())) }).await?;
    let refused = api.evict(&names[1], &EvictParams::default()).await.expect_err("no disruption left");
    let kube::Error::Api(s) = refused else { anyhow::bail!("not an API error: {refused}") };
    assert_eq!((s.code, s.reason.as_str()), (429, "TooManyRequests"));
    assert_eq!(s.message, "Cannot evict pod as it would violate the pod's disruption budget.");
    assert!(api.get(&names[1]).await?.metadata.deletion_timestamp.is_none(), "the refused pod stays");

    // Allowing two unavailable pods lets the same eviction through once the controller has seen it.
    let more = Patch::Merge(json!({"spec": {"maxUnavailable": 2}}));
    c.api::<PodDisruptionBudget>().patch("web", &PatchParams::default(), &more).await?;
    poll("the second eviction", || async {
        match api.evict(&names[1], &EvictParams::default()).await {
            Ok(_) => Ok(Some(())),
            Err(kube::Error::Api(s)) if s.code == 429 => Ok(None),
            Err(e) => Err(e.into()),
        }
    })
    .await?;
    m.shutdown().await?;
    c.stop().await
}
