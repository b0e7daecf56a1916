//! Root-only: the proxy against a real in-process apiserver, programming a throwaway network
//! namespace — Services and EndpointSlices in, rules out, /healthz and /metrics on the side.

mod common;

use common::Netns;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use std::time::Duration;

async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    for _ in 0..200 {
        if check() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out waiting for {what}");
}

async fn get(addr: std::net::SocketAddr, path: &str) -> anyhow::Result<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").as_bytes()).await?;
    let mut out = String::new();
    s.read_to_string(&mut out).await?;
    let code = out.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    Ok((code, out))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn programs_services_and_endpoint_changes_from_the_api() -> anyhow::Result<()> {
    let ns = Netns::new("ctrl");
    let data = tempfile::tempdir()?;
    let server = kaji_apiserver::start(kaji_apiserver::Config::new("127.0.0.1:0".parse()?, data.path().into())).await?;
    let client = kube::Client::try_from(kube::Config::new(format!("http://{}", server.addr).parse()?))?;
    let config = kaji_proxy::Config {
        node_name: "node-a".into(),
        cluster_cidr: Some("10.244.0.0/16".into()),
        min_sync_period: Duration::from_millis(100),
        iptables: ns.iptables(),
        metrics_addr: Some("127.0.0.1:0".parse()?),
        ..Default::default()
    };
    let proxy = kaji_proxy::start(client.clone(), config).await?;
    let metrics = proxy.metrics_addr.expect("metrics address");

    let svcs: Api<Service> = Api::namespaced(client.clone(), "default");
    let svc: Service = serde_json::from_value(json!({"metadata": {"name": "web"}, "spec": {
        "type": "NodePort", "selector": {"app": "web"},
        "ports": [{"name": "http", "port": 80, "targetPort": 8080}]}}))?;
    let svc = svcs.create(&PostParams::default(), &svc).await?;
    let spec = svc.spec.clone().unwrap_or_default();
    let cluster_ip = spec.cluster_ip.clone().unwrap_or_default();
    let node_port = spec.ports.unwrap_or_default().first().and_then(|p| p.node_port).unwrap_or_default();
    assert!(!cluster_ip.is_empty() && node_port > 0, "allocated: {cluster_ip} {node_port}");

    // No endpoints yet: the ClusterIP is rejected in filter.
    eventually("REJECT for the service without endpoints", || {
        ns.tables().contains("default/web:http has no endpoints")
    })
    .await;

    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), "default");
    let slice: EndpointSlice = serde_json::from_value(json!({
        "metadata": {"name": "web-abc", "labels": {"kubernetes.io/service-name": "web"}},
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        "endpoints": [
            {"addresses": ["10.244.1.5"], "conditions": {"ready": true}, "nodeName": "node-a"},
            {"addresses": ["10.244.2.5"], "conditions": {"ready": true}, "nodeName": "node-b"}]}))?;
    slices.create(&PostParams::default(), &slice).await?;
    let svc_chain = kaji_proxy::names::service_chain("default/web:http", "tcp");
    eventually("the service's chains", || {
        let t = ns.tables();
        t.contains(&format!("-d {cluster_ip}/32"))
            && t.contains("--to-destination 10.244.2.5:8080")
            && t.contains(&svc_chain)
            && t.contains(&format!("--dport {node_port}"))
            && !t.contains("default/web:http has no endpoints")
    })
    .await;

    // An endpoint turns not-ready: its DNAT goes away.
    let patch = json!({"endpoints": [
        {"addresses": ["10.244.1.5"], "conditions": {"ready": true}, "nodeName": "node-a"},
        {"addresses": ["10.244.2.5"], "conditions": {"ready": false}, "nodeName": "node-b"}]});
    slices.patch("web-abc", &PatchParams::default(), &Patch::Merge(&patch)).await?;
    eventually("the not-ready endpoint removed", || !ns.tables().contains("10.244.2.5:8080")).await;

    let (code, body) = get(metrics, "/healthz").await?;
    assert_eq!(code, 200, "{body}");
    let (_, body) = get(metrics, "/metrics").await?;
    assert!(body.contains("kubeproxy_sync_proxy_rules_duration_seconds_count"), "{body}");
    assert!(body.contains(r#"kubeproxy_sync_proxy_rules_iptables_total{table="nat"}"#), "{body}");

    // Deleting the service removes its chains.
    svcs.delete("web", &Default::default()).await?;
    eventually("the service's chains removed", || !ns.tables().contains(&svc_chain)).await;

    proxy.shutdown().await?;
    let _ = server.shutdown().await;
    Ok(())
}
