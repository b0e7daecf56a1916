//! The Endpoints and EndpointSlice controllers against a real apiserver: ready and not-ready pods,
//! pod deletion, named target ports, and selector-less services left alone.

mod common;

use common::{poll, Cluster};
use k8s_openapi::api::core::v1::{Endpoints, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::ListParams;
use serde_json::{json, Value};
use std::time::Duration;

fn service(name: &str, target_port: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name},
        "spec": {"selector": {"app": name},
            "ports": [{"name": "http", "port": 80, "targetPort": target_port, "protocol": "TCP"}]},
    })
}

/// Creates a pod, then plays the agent: sets its IP and Ready condition.
async fn ready_pod(c: &Cluster, name: &str, app: &str, ip: &str) -> anyhow::Result<()> {
    c.create::<Pod>(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": app}},
        "spec": {"containers": [{"name": "app", "image": "registry.example/app:1",
            "ports": [{"name": "web", "containerPort": 9090}]}]},
    }))
    .await?;
    set_ready(c, name, ip, true).await
}

async fn set_ready(c: &Cluster, name: &str, ip: &str, ready: bool) -> anyhow::Result<()> {
    let status = if ready { "True" } else { "False" };
    c.set_status(name, json!({"phase": "Running", "podIP": ip, "conditions": [{"type": "Ready", "status": status}]}))
        .await
}

/// (ready IPs, not-ready IPs, ports) across the Endpoints' subsets, sorted.
async fn endpoints(c: &Cluster, name: &str) -> anyhow::Result<Option<(Vec<String>, Vec<String>, Vec<i32>)>> {
    let Some(ep) = c.api::<Endpoints>().get_opt(name).await? else { return Ok(None) };
    let (mut ready, mut not_ready, mut ports) = (Vec::new(), Vec::new(), Vec::new());
    for ss in ep.subsets.into_iter().flatten() {
        ready.extend(ss.addresses.into_iter().flatten().map(|a| a.ip));
        not_ready.extend(ss.not_ready_addresses.into_iter().flatten().map(|a| a.ip));
        ports.extend(ss.ports.into_iter().flatten().map(|p| p.port));
    }
    ready.sort();
    not_ready.sort();
    Ok(Some((ready, not_ready, ports)))
}

/// (IP, ready) for every endpoint in the service's slices, sorted.
async fn slice_conditions(c: &Cluster, svc: &str) -> anyhow::Result<Vec<(String, bool)>> {
    let lp = ListParams::default().labels(&format!("kubernetes.io/service-name={svc}"));
    let mut out: Vec<(String, bool)> = c
        .api::<EndpointSlice>()
        .list(&lp)
        .await?
        .items
        .into_iter()
        .flat_map(|s| s.endpoints.unwrap_or_default())
        .map(|e| (e.addresses[0].clone(), e.conditions.and_then(|c| c.ready) == Some(true)))
        .collect();
    out.sort();
    Ok(out)
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[tokio::test]
async fn tracks_ready_not_ready_and_deleted_pods() -> anyhow::Result<()> {
    let c = Cluster::start().await?;
    let m = c.manager().await?;
    let svc: Service = c.create(service("web", json!(8080))).await?;
    for (i, ip) in ["10.244.0.1", "10.244.0.2", "10.244.0.3"].iter().enumerate() {
        ready_pod(&c, &format!("web-{i}"), "web", ip).await?;
    }
    let all = strings(&["10.244.0.1", "10.244.0.2", "10.244.0.3"]);
    poll("endpoints with 3 ready IPs", || async {
        Ok(endpoints(&c, "web").await?.filter(|(r, n, p)| *r == all && n.is_empty() && *p == [8080]).map(|_| ()))
    })
    .await?;
    let ep = c.api::<Endpoints>().get("web").await?;
    let owner = &ep.metadata.owner_references.unwrap_or_default()[0];
    assert_eq!((owner.uid.as_str(), owner.controller), (svc.metadata.uid.as_deref().unwrap_or(""), Some(true)));
    let addr = &ep.subsets.unwrap_or_default()[0].addresses.clone().unwrap_or_default()[0];
    let target = addr.target_ref.clone().unwrap_or_default();
    assert_eq!((target.kind.as_deref(), target.name.as_deref()), (Some("Pod"), Some("web-0")));

    // The apiserver's own `kubernetes` slice is there too: only web's are the controller's.
    let slices =
        c.api::<EndpointSlice>().list(&ListParams::default().labels("kubernetes.io/service-name=web")).await?.items;
    assert_eq!(slices.len(), 1, "{slices:?}");
    let labels = slices[0].metadata.labels.clone().unwrap_or_default();
    assert_eq!(
        labels.get("endpointslice.kubernetes.io/managed-by").map(String::as_str),
        Some("endpointslice-controller.k8s.io")
    );
    poll("slice with 3 ready endpoints", || async {
        let want: Vec<(String, bool)> = all.iter().map(|ip| (ip.clone(), true)).collect();
        Ok((slice_conditions(&c, "web").await? == want).then_some(()))
    })
    .await?;

    // One pod turns not ready.
    set_ready(&c, "web-1", "10.244.0.2", false).await?;
    poll("web-1 in notReadyAddresses", || async {
        let want = (strings(&["10.244.0.1", "10.244.0.3"]), strings(&["10.244.0.2"]));
        Ok(endpoints(&c, "web").await?.filter(|(r, n, _)| (r, n) == (&want.0, &want.1)).map(|_| ()))
    })
    .await?;
    poll("slice condition ready=false", || async {
        let want = vec![("10.244.0.1".into(), true), ("10.244.0.2".into(), false), ("10.244.0.3".into(), true)];
        Ok((slice_conditions(&c, "web").await? == want).then_some(()))
    })
    .await?;

    // Deleting a pod removes it.
    c.api::<Pod>().delete("web-2", &Default::default()).await?;
    poll("web-2 gone", || async {
        let gone = endpoints(&c, "web").await?.filter(|(r, n, _)| *r == strings(&["10.244.0.1"]) && n.len() == 1);
        let slice_gone = slice_conditions(&c, "web").await?.len() == 2;
        Ok(gone.filter(|_| slice_gone).map(|_| ()))
    })
    .await?;
    m.shutdown().await?;
    c.stop().await
}

#[tokio::test]
async fn resolves_named_target_ports_and_ignores_selectorless_services() -> anyhow::Result<()> {
    let c = Cluster::start().await?;
    let m = c.manager().await?;
    c.create::<Service>(service("api", json!("web"))).await?;
    c.create::<Service>(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "manual"},
        "spec": {"ports": [{"port": 80}]},
    }))
    .await?;
    ready_pod(&c, "api-0", "api", "10.244.1.1").await?;
    poll("endpoints on the named port", || async {
        Ok(endpoints(&c, "api").await?.filter(|(r, _, p)| *r == strings(&["10.244.1.1"]) && *p == [9090]).map(|_| ()))
    })
    .await?;
    // Converged: no more writes (a diff that never settles would rewrite on every watch event).
    let version = c.api::<Endpoints>().get("api").await?.metadata.resource_version;
    let slice_versions = |items: Vec<EndpointSlice>| -> Vec<Option<String>> {
        items.into_iter().map(|s| s.metadata.resource_version).collect()
    };
    let slices = slice_versions(c.api::<EndpointSlice>().list(&ListParams::default()).await?.items);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(c.api::<Endpoints>().get("api").await?.metadata.resource_version, version);
    assert_eq!(slice_versions(c.api::<EndpointSlice>().list(&ListParams::default()).await?.items), slices);
    assert!(c.api::<Endpoints>().get_opt("manual").await?.is_none(), "selector-less service left alone");
    m.shutdown().await?;
    c.stop().await
}
