//! The node lifecycle controller against a real apiserver: a node whose Lease is renewed stays
//! Ready; a silent one goes Unknown and unreachable, its untolerating pods are evicted; it recovers
//! when the kubelet is back; Ready False gives not-ready taints; evictions are rate-limited.

mod common;

use common::{metrics, poll, sample, Cluster};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kaji_controllers::nodelifecycle::health::Grace;
use kaji_controllers::{nodelifecycle, Config};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{json, Value};
use std::time::Duration;

const UNREACHABLE: &str = "node.kubernetes.io/unreachable";
const NOT_READY: &str = "node.kubernetes.io/not-ready";

fn config(eviction_rate: f64) -> Config {
    Config {
        node_lifecycle: nodelifecycle::Settings {
            grace: Grace { monitor: Duration::from_secs(2), startup: Duration::from_secs(2) },
            period: Duration::from_millis(200),
            eviction_rate,
        },
        node_ipam: None,
        ..Config::default()
    }
}

fn now() -> String {
    jiff::Timestamp::now().to_string()
}

/// The kubelet's conditions with a fresh heartbeat.
fn conditions(ready: &str) -> Value {
    let t = now();
    json!([
        {"type": "Ready", "status": ready, "reason": "KubeletReady", "lastHeartbeatTime": t, "lastTransitionTime": t},
        {"type": "MemoryPressure", "status": "False", "lastHeartbeatTime": t, "lastTransitionTime": t},
        {"type": "DiskPressure", "status": "False", "lastHeartbeatTime": t, "lastTransitionTime": t},
        {"type": "PIDPressure", "status": "False", "lastHeartbeatTime": t, "lastTransitionTime": t},
    ])
}

fn nodes(c: &Cluster) -> Api<Node> {
    Api::all(c.client.clone())
}

fn leases(c: &Cluster) -> Api<Lease> {
    Api::namespaced(c.client.clone(), "kube-node-lease")
}

/// Registers a node as the agent does: Ready with a fresh heartbeat and a Lease.
async fn register(c: &Cluster, name: &str) -> anyhow::Result<()> {
    let node: Node = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
        "status": {"conditions": conditions("True")},
    }))?;
    nodes(c).create(&PostParams::default(), &node).await?;
    let lease: Lease = serde_json::from_value(json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": name, "namespace": "kube-node-lease"},
        "spec": {"holderIdentity": name, "leaseDurationSeconds": 40, "renewTime": MicroTime(jiff::Timestamp::now())},
    }))?;
    leases(c).create(&PostParams::default(), &lease).await?;
    Ok(())
}

async fn renew(c: &Cluster, name: &str) -> anyhow::Result<()> {
    let patch = json!({"spec": {"renewTime": MicroTime(jiff::Timestamp::now())}});
    leases(c).patch(name, &PatchParams::default(), &Patch::Merge(patch)).await?;
    Ok(())
}

async fn post_status(c: &Cluster, name: &str, ready: &str) -> anyhow::Result<()> {
    let patch = json!({"status": {"conditions": conditions(ready)}});
    nodes(c).patch_status(name, &PatchParams::default(), &Patch::Merge(patch)).await?;
    Ok(())
}

/// Plays the agent's heartbeat: renews the node's Lease every 300 ms until aborted.
fn heartbeat(c: &Cluster, name: &str) -> tokio::task::JoinHandle<()> {
    let (api, name) = (leases(c), name.to_string());
    tokio::spawn(async move {
        loop {
            let patch = json!({"spec": {"renewTime": MicroTime(jiff::Timestamp::now())}});
            let _ = api.patch(&name, &PatchParams::default(), &Patch::Merge(patch)).await;
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    })
}

fn taints(node: &Node) -> Vec<String> {
    let list = node.spec.as_ref().and_then(|s| s.taints.as_ref());
    let mut out: Vec<String> = list.into_iter().flatten().map(|t| format!("{}:{}", t.key, t.effect)).collect();
    out.sort();
    out
}

fn ready(node: &Node) -> Option<(String, Option<String>, Option<String>)> {
    let conds = node.status.as_ref()?.conditions.as_ref()?;
    let c = conds.iter().find(|c| c.type_ == "Ready")?;
    Some((c.status.clone(), c.reason.clone(), c.message.clone()))
}

/// A pod bound to `node` that tolerates unreachable nodes for `seconds`.
async fn bound_pod(c: &Cluster, name: &str, node: &str, seconds: i64) -> anyhow::Result<()> {
    c.create::<Pod>(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "on-node"}},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "app", "image": "registry.example/app:1"}],
            "tolerations": [{"key": UNREACHABLE, "operator": "Exists", "effect": "NoExecute",
                "tolerationSeconds": seconds}],
        },
    }))
    .await?;
    Ok(())
}

fn deleting(p: &Pod) -> bool {
    p.metadata.deletion_timestamp.is_some()
}

#[tokio::test]
async fn a_silent_node_goes_unknown_loses_its_pods_and_recovers() -> anyhow::Result<()> {
    let c = Cluster::start().await?;
    let m = c.manager_with(config(0.1)).await?;
    register(&c, "n1").await?;
    let beat = heartbeat(&c, "n1");
    bound_pod(&c, "doomed", "n1", 0).await?;
    bound_pod(&c, "patient", "n1", 3600).await?;

    // While the Lease is renewed the node stays Ready and untainted, well past the grace period
    // (its status heartbeat is as old as its registration).
    let series = r#"controller_runtime_reconcile_total{controller="nodelifecycle",result="success"}"#;
    for _ in 0..30 {
        let n = nodes(&c).get("n1").await?;
        assert_eq!(ready(&n).map(|r| r.0).as_deref(), Some("True"), "{n:?}");
        assert!(taints(&n).is_empty(), "{n:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(sample(&metrics(&m).await?, series) >= 3.0, "the controller checked the node meanwhile");
    assert!(!deleting(&c.api::<Pod>().get("doomed").await?));

    // The kubelet goes quiet.
    beat.abort();
    let n = poll("n1 to be unreachable", || async {
        let n = nodes(&c).get("n1").await?;
        let tainted = taints(&n) == [format!("{UNREACHABLE}:NoExecute"), format!("{UNREACHABLE}:NoSchedule")];
        Ok((tainted && ready(&n).is_some_and(|r| r.0 == "Unknown")).then_some(n))
    })
    .await?;
    let (_, reason, message) = ready(&n).unwrap_or_default();
    assert_eq!(reason.as_deref(), Some("NodeStatusUnknown"));
    assert_eq!(message.as_deref(), Some("Kubelet stopped posting node status."));
    let pressures = n.status.as_ref().and_then(|s| s.conditions.clone()).unwrap_or_default();
    assert!(pressures.iter().all(|c| c.status == "Unknown"), "{pressures:?}");
    poll("a NodeNotReady event", || async { Ok((!c.events("n1", "NodeNotReady").await?.is_empty()).then_some(())) })
        .await?;

    let pods = c.api::<Pod>();
    let doomed = poll("the untolerating pod to be evicted", || async {
        let p = pods.get_opt("doomed").await?;
        Ok(match p {
            None => Some(None),
            Some(p) if deleting(&p) => Some(Some(p)),
            Some(_) => None,
        })
    })
    .await?;
    if let Some(p) = doomed {
        let conds = p.status.and_then(|s| s.conditions).unwrap_or_default();
        assert!(conds.iter().any(|c| c.type_ == "DisruptionTarget" && c.status == "True"), "{conds:?}");
    }
    assert_eq!(c.events("doomed", "TaintManagerEviction").await?.len(), 1);
    assert!(!deleting(&pods.get("patient").await?), "a pod tolerating for an hour stays");
    assert!(c.events("patient", "TaintManagerEviction").await?.is_empty());

    // The kubelet is back: Lease renewed, Ready posted.
    renew(&c, "n1").await?;
    post_status(&c, "n1", "True").await?;
    let beat = heartbeat(&c, "n1");
    poll("n1 to be untainted", || async {
        let n = nodes(&c).get("n1").await?;
        Ok(taints(&n).is_empty().then_some(()))
    })
    .await?;
    // The renewed Lease keeps it Ready (it is not forced Unknown again).
    for _ in 0..20 {
        let n = nodes(&c).get("n1").await?;
        assert_eq!(ready(&n).map(|r| r.0).as_deref(), Some("True"), "{n:?}");
        assert!(taints(&n).is_empty(), "{n:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(!deleting(&pods.get("patient").await?));
    beat.abort();
    m.shutdown().await?;
    c.stop().await
}

#[tokio::test]
async fn a_not_ready_node_is_tainted_until_it_is_ready() -> anyhow::Result<()> {
    let c = Cluster::start().await?;
    let m = c.manager_with(config(0.1)).await?;
    register(&c, "n2").await?;
    let beat = heartbeat(&c, "n2");
    post_status(&c, "n2", "False").await?;
    poll("not-ready taints", || async {
        let n = nodes(&c).get("n2").await?;
        Ok((taints(&n) == [format!("{NOT_READY}:NoExecute"), format!("{NOT_READY}:NoSchedule")]).then_some(()))
    })
    .await?;
    let n = nodes(&c).get("n2").await?;
    assert_eq!(ready(&n).map(|r| r.0).as_deref(), Some("False"), "the kubelet's verdict stands");
    post_status(&c, "n2", "True").await?;
    poll("the taints to go", || async { Ok(taints(&nodes(&c).get("n2").await?).is_empty().then_some(())) }).await?;
    beat.abort();
    m.shutdown().await?;
    c.stop().await
}

#[tokio::test]
async fn evictions_start_on_one_node_at_a_time() -> anyhow::Result<()> {
    let c = Cluster::start().await?;
    // One node per 1000 s: the first silent node is tainted NoExecute at once, the second waits.
    let m = c.manager_with(config(0.001)).await?;
    register(&c, "a").await?;
    register(&c, "b").await?;
    let both = poll("both nodes unreachable", || async {
        let (a, b) = (nodes(&c).get("a").await?, nodes(&c).get("b").await?);
        let no_schedule = format!("{UNREACHABLE}:NoSchedule");
        let no_execute = format!("{UNREACHABLE}:NoExecute");
        let marked = |n: &Node| taints(n).contains(&no_schedule);
        let evicting = [&a, &b].iter().filter(|n| taints(n).contains(&no_execute)).count();
        Ok((marked(&a) && marked(&b) && evicting == 1).then_some((a, b)))
    })
    .await?;
    // The held-back node still has no NoExecute taint a few checks later.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let held = if taints(&both.0).len() == 1 { "a" } else { "b" };
    assert_eq!(taints(&nodes(&c).get(held).await?), [format!("{UNREACHABLE}:NoSchedule")]);
    m.shutdown().await?;
    c.stop().await
}
