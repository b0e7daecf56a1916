//! The scheduler against a real (in-process) kaji apiserver: the placements and explanations a
//! user sees with `kubectl get pods -o wide` and `kubectl describe pod`.

mod common;

use common::{http_get, within, Cluster};
use k8s_openapi::api::coordination::v1::Lease;
use kaji_scheduler::leader::LeaderElection;
use kube::api::Api;
use serde_json::json;
use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

#[tokio::test]
async fn pods_land_on_a_node_that_fits_and_get_a_scheduled_event() -> anyhow::Result<()> {
    let c = Cluster::start().await?;
    c.node("small", "1", "1Gi", json!({})).await?;
    c.node("big", "8", "16Gi", json!({})).await?;
    let s = c.default_scheduler().await?;
    c.pod("web", "2", "4Gi", json!({})).await?;
    assert_eq!(c.bound("web").await?, "big");
    assert_eq!(c.event("web", "Scheduled").await?, "Successfully assigned default/web to big");
    within(s.shutdown()).await??;
    c.stop().await
}

#[tokio::test]
async fn assumed_pods_count_so_a_burst_does_not_overcommit_a_node() -> anyhow::Result<()> {
    let c = Cluster::start().await?;
    c.node("only", "2", "4Gi", json!({})).await?;
    for i in 0..3 {
        c.pod(&format!("p{i}"), "1", "1Gi", json!({})).await?;
    }
    // All three are pending before the scheduler starts, so it decides them back to back.
    let s = c.default_scheduler().await?;
    let mut bound = 0;
    let mut messages = Vec::new();
    for i in 0..3 {
        let name = format!("p{i}");
        let outcome = tokio::select! {
            n = c.bound(&name) => Ok(n?),
            m = c.unschedulable(&name) => Err(m?),
        };
        match outcome {
            Ok(_) => bound += 1,
            Err(m) => messages.push(m),
        }
    }
    assert_eq!(bound, 2);
    assert_eq!(messages, ["0/1 nodes are available: 1 Insufficient cpu."]);
    within(s.shutdown()).await??;
    c.stop().await
}

#[tokio::test]
async fn unschedulable_pods_explain_why_and_are_placed_once_a_node_fits() -> anyhow::Result<()> {
    let c = Cluster::start().await?;
    let taint = json!({"spec": {"taints": [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]}});
    c.node("tiny", "4", "1Gi", json!({})).await?;
    c.node("gpu-1", "4", "16Gi", taint.clone()).await?;
    c.node("gpu-2", "4", "16Gi", taint).await?;
    let s = c.default_scheduler().await?;
    c.pod("db", "1", "8Gi", json!({})).await?;
    let want = "0/3 nodes are available: 1 Insufficient memory, 2 node(s) had untolerated taint {dedicated: gpu}.";
    assert_eq!(c.unschedulable("db").await?, want);
    assert_eq!(c.event("db", "FailedScheduling").await?, want);
    assert_eq!(c.node_of("db").await?, None);

    c.node("roomy", "4", "16Gi", json!({})).await?;
    assert_eq!(c.bound("db").await?, "roomy");
    within(s.shutdown()).await??;
    c.stop().await
}

#[tokio::test]
async fn taints_tolerations_readiness_and_cordons_are_respected() -> anyhow::Result<()> {
    let c = Cluster::start().await?;
    c.node(
        "tainted",
        "4",
        "8Gi",
        json!({"spec": {"taints": [{"key": "team", "value": "ml", "effect": "NoSchedule"}]}}),
    )
    .await?;
    let not_ready =
        json!({"status": {"conditions": [{"type": "Ready", "status": "False", "reason": "KubeletNotReady"}]}});
    c.node("down", "4", "8Gi", not_ready).await?;
    c.node("cordoned", "4", "8Gi", json!({"spec": {"unschedulable": true}})).await?;
    let s = c.default_scheduler().await?;

    c.pod("plain", "100m", "64Mi", json!({})).await?;
    let msg = c.unschedulable("plain").await?;
    assert_eq!(
        msg,
        "0/3 nodes are available: 1 node(s) had untolerated taint {node.kubernetes.io/not-ready: }, \
         1 node(s) had untolerated taint {team: ml}, 1 node(s) were unschedulable."
    );
    let tolerating =
        json!({"spec": {"tolerations": [{"key": "team", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}]}});
    c.pod("ml", "100m", "64Mi", tolerating).await?;
    assert_eq!(c.bound("ml").await?, "tainted");
    within(s.shutdown()).await??;
    c.stop().await
}

#[tokio::test]
async fn node_selector_and_node_affinity_choose_the_node() -> anyhow::Result<()> {
    let c = Cluster::start().await?;
    for (name, zone, disk) in [("a1", "a", "hdd"), ("b1", "b", "ssd"), ("b2", "b", "hdd")] {
        c.node(name, "4", "8Gi", json!({"metadata": {"labels": {"zone": zone, "disk": disk}}})).await?;
    }
    let s = c.default_scheduler().await?;
    c.pod("selected", "100m", "64Mi", json!({"spec": {"nodeSelector": {"zone": "b", "disk": "ssd"}}})).await?;
    assert_eq!(c.bound("selected").await?, "b1");

    let required = json!({"spec": {"affinity": {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": "zone", "operator": "NotIn", "values": ["b"]}]}]}}}}});
    c.pod("not-b", "100m", "64Mi", required).await?;
    assert_eq!(c.bound("not-b").await?, "a1");

    let preferred = json!({"spec": {"affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 100, "preference": {"matchExpressions": [{"key": "disk", "operator": "In", "values": ["hdd"]},
                                                             {"key": "zone", "operator": "In", "values": ["b"]}]}}]}}}});
    c.pod("prefers-b2", "100m", "64Mi", preferred).await?;
    assert_eq!(c.bound("prefers-b2").await?, "b2");

    c.pod("nowhere", "100m", "64Mi", json!({"spec": {"nodeSelector": {"zone": "c"}}})).await?;
    assert_eq!(
        c.unschedulable("nowhere").await?,
        "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector."
    );
    within(s.shutdown()).await??;
    c.stop().await
}

#[tokio::test]
async fn anti_affinity_puts_replicas_on_different_hosts() -> anyhow::Result<()> {
    let c = Cluster::start().await?;
    for n in ["n1", "n2", "n3"] {
        c.node(n, "4", "8Gi", json!({})).await?;
    }
    let s = c.default_scheduler().await?;
    let anti = json!({
        "metadata": {"labels": {"app": "cache"}},
        "spec": {"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "cache"}}, "topologyKey": "kubernetes.io/hostname"}]}}},
    });
    let mut hosts = HashSet::new();
    for i in 0..3 {
        c.pod(&format!("cache-{i}"), "100m", "64Mi", anti.clone()).await?;
        hosts.insert(c.bound(&format!("cache-{i}")).await?);
    }
    assert_eq!(hosts.len(), 3, "one replica per host: {hosts:?}");
    c.pod("cache-3", "100m", "64Mi", anti).await?;
    assert_eq!(
        c.unschedulable("cache-3").await?,
        "0/3 nodes are available: 3 node(s) didn't match pod anti-affinity rules."
    );
    // Deleting a replica frees its host for the waiting one.
    c.pods().delete("cache-0", &kube::api::DeleteParams::default().grace_period(0)).await?;
    common::poll("cache-0 to be gone", || async { Ok(c.pods().get_opt("cache-0").await?.is_none().then_some(())) })
        .await?;
    let host = c.bound("cache-3").await?;
    assert!(hosts.contains(&host));
    within(s.shutdown()).await??;
    c.stop().await
}

#[tokio::test]
async fn topology_spread_balances_pods_across_zones() -> anyhow::Result<()> {
    let c = Cluster::start().await?;
    for (name, zone) in [("a1", "a"), ("a2", "a"), ("a3", "a"), ("b1", "b")] {
        c.node(name, "4", "8Gi", json!({"metadata": {"labels": {"topology.kubernetes.io/zone": zone}}})).await?;
    }
    let s = c.default_scheduler().await?;
    let spread = json!({
        "metadata": {"labels": {"app": "web"}},
        "spec": {"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
            "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": "web"}}}]},
    });
    let mut per_zone: BTreeMap<&str, usize> = BTreeMap::new();
    for i in 0..6 {
        let name = format!("web-{i}");
        c.pod(&name, "100m", "64Mi", spread.clone()).await?;
        let node = c.bound(&name).await?;
        *per_zone.entry(if node == "b1" { "b" } else { "a" }).or_default() += 1;
    }
    assert_eq!(per_zone, BTreeMap::from([("a", 3), ("b", 3)]), "zone b's single node takes half the pods");
    within(s.shutdown()).await??;
    c.stop().await
}

#[tokio::test]
async fn host_ports_conflict_and_other_schedulers_pods_are_left_alone() -> anyhow::Result<()> {
    let c = Cluster::start().await?;
    c.node("n1", "4", "8Gi", json!({})).await?;
    let s = c.default_scheduler().await?;
    let port = json!({"spec": {"containers": [{"name": "app", "image": "registry.example/app:1",
        "ports": [{"containerPort": 80, "hostPort": 8080}]}]}});
    c.pod("first", "100m", "64Mi", port.clone()).await?;
    assert_eq!(c.bound("first").await?, "n1");
    c.pod("second", "100m", "64Mi", port).await?;
    assert_eq!(
        c.unschedulable("second").await?,
        "0/1 nodes are available: 1 node(s) didn't have free ports for the requested pod ports."
    );
    c.pod("theirs", "100m", "64Mi", json!({"spec": {"schedulerName": "other-scheduler"}})).await?;
    c.pod("ours", "100m", "64Mi", json!({})).await?;
    assert_eq!(c.bound("ours").await?, "n1");
    assert_eq!(c.node_of("theirs").await?, None, "a pod for another scheduler is not ours to place");
    within(s.shutdown()).await??;
    c.stop().await
}

#[tokio::test]
async fn racing_schedulers_bind_every_pod_exactly_once() -> anyhow::Result<()> {
    let c = Cluster::start().await?;
    for i in 0..5 {
        c.node(&format!("n{i}"), "8", "16Gi", json!({})).await?;
    }
    for i in 0..40 {
        c.pod(&format!("p{i}"), "100m", "64Mi", json!({})).await?;
    }
    // Without leader election both act: each binding after the first answers 409 Conflict,
    // which must neither lose the pod nor move it.
    let a = c.default_scheduler().await?;
    let b = c.default_scheduler().await?;
    for i in 0..40 {
        c.bound(&format!("p{i}")).await?;
    }
    let cluster = &c;
    let placed: Vec<Option<String>> =
        futures::future::try_join_all((0..40).map(|i| async move { cluster.node_of(&format!("p{i}")).await })).await?;
    assert!(placed.iter().all(Option::is_some));
    assert_eq!(scheduled(&a) + scheduled(&b), 40, "each pod bound by exactly one of them");
    within(a.shutdown()).await??;
    within(b.shutdown()).await??;
    c.stop().await
}

/// How many pods this scheduler has bound, from its metrics.
fn scheduled(h: &kaji_scheduler::Handle) -> u64 {
    let text = h.shared.metrics.render((0, 0, 0));
    text.lines()
        .find(|l| l.starts_with("scheduler_schedule_attempts_total{result=\"scheduled\""))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|n| n.parse::<u64>().ok())
        .unwrap_or(0)
}

#[tokio::test]
async fn with_leader_election_only_the_lease_holder_schedules_and_a_standby_takes_over() -> anyhow::Result<()> {
    let c = Cluster::start().await?;
    c.node("n1", "4", "8Gi", json!({})).await?;
    let elect = |id: &str| kaji_scheduler::Config {
        leader_election: Some(LeaderElection {
            lease_duration: Duration::from_secs(3),
            renew_deadline: Duration::from_secs(2),
            retry_period: Duration::from_millis(200),
            ..LeaderElection::new("kube-scheduler", id.to_string())
        }),
        ..kaji_scheduler::Config::default()
    };
    let leases: Api<Lease> = Api::namespaced(c.client.clone(), "kube-system");
    let holder = || async {
        let lease = leases.get_opt("kube-scheduler").await?;
        Ok::<_, anyhow::Error>(lease.and_then(|l| l.spec).and_then(|s| s.holder_identity))
    };
    let a = c.scheduler(elect("a")).await?;
    common::poll("a to hold the lease", || async { Ok(holder().await?.filter(|h| h == "a")) }).await?;
    let b = c.scheduler(elect("b")).await?;
    c.pod("first", "100m", "64Mi", json!({})).await?;
    c.bound("first").await?;
    assert_eq!((scheduled(&a), scheduled(&b)), (1, 0), "the standby does not act");
    assert_eq!(holder().await?.as_deref(), Some("a"));

    within(a.shutdown()).await??;
    common::poll("b to take the lease", || async { Ok(holder().await?.filter(|h| h == "b")) }).await?;
    c.pod("second", "100m", "64Mi", json!({})).await?;
    c.bound("second").await?;
    assert_eq!(scheduled(&b), 1);
    within(b.shutdown()).await??;
    c.stop().await
}

#[tokio::test]
async fn healthz_and_metrics_are_served() -> anyhow::Result<()> {
    let c = Cluster::start().await?;
    c.node("n1", "4", "8Gi", json!({})).await?;
    let s = c.default_scheduler().await?;
    let addr = s.metrics_addr.expect("metrics address");
    assert_eq!(http_get(addr, "/healthz").await?, "ok");
    c.pod("web", "100m", "64Mi", json!({})).await?;
    c.pod("huge", "64", "1Gi", json!({})).await?;
    c.bound("web").await?;
    c.unschedulable("huge").await?;
    let text = http_get(addr, "/metrics").await?;
    assert!(
        text.contains(r#"scheduler_schedule_attempts_total{result="scheduled",profile="default-scheduler"} 1"#),
        "{text}"
    );
    assert!(text.contains(r#"result="unschedulable""#), "{text}");
    assert!(text.contains("scheduler_e2e_scheduling_duration_seconds_count 1"), "{text}");
    assert!(text.contains(r#"scheduler_pending_pods{queue="unschedulable"} 1"#), "{text}");
    within(s.shutdown()).await??;
    c.stop().await
}
