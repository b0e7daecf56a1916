//! Root-only: the proxy against a real in-process apiserver, programming a throwaway network
//! namespace in either mode — Services and EndpointSlices in, rules out, /healthz and /metrics
//! on the side.

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

/// What each mode's rules look like for the checks below.
struct Rules {
    mode: &'static str,
}

impl Rules {
    fn dump(&self, ns: &Netns) -> String {
        match self.mode {
            "iptables" => ns.tables(),
            _ => ns.nft().table().ok().flatten().unwrap_or_default(),
        }
    }

    fn no_endpoints(&self) -> &'static str {
        match self.mode {
            "iptables" => "default/web:http has no endpoints",
            _ => "comment \"default/web:http\" : goto reject-chain",
        }
    }

    fn cluster_ip(&self, ip: &str) -> String {
        match self.mode {
            "iptables" => format!("-d {ip}/32"),
            _ => format!("{ip} . tcp . 80 : goto service-"),
        }
    }

    fn dnat(&self, to: &str) -> String {
        match self.mode {
            "iptables" => format!("--to-destination {to}"),
            _ => format!("dnat to {to}"),
        }
    }

    fn service_chain(&self) -> String {
        match self.mode {
            "iptables" => kaji_proxy::names::service_chain("default/web:http", "tcp"),
            _ => {
                let sp = kaji_proxy::model::ServicePort::new("default", "web", "http", [0, 0, 0, 0].into(), 80);
                format!("service-{}", kaji_proxy::names::nft_service(&sp))
            }
        }
    }

    fn node_port(&self, port: i32) -> String {
        match self.mode {
            "iptables" => format!("--dport {port}"),
            _ => format!("tcp . {port} : goto external-"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn iptables_mode_programs_services_and_endpoint_changes_from_the_api() -> anyhow::Result<()> {
    programs_services_and_endpoint_changes_from_the_api(Rules { mode: "iptables" }).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nftables_mode_programs_services_and_endpoint_changes_from_the_api() -> anyhow::Result<()> {
    programs_services_and_endpoint_changes_from_the_api(Rules { mode: "nftables" }).await
}

async fn programs_services_and_endpoint_changes_from_the_api(rules: Rules) -> anyhow::Result<()> {
    let ns = Netns::new(&format!("ctrl-{}", &rules.mode[..3]));
    let data = tempfile::tempdir()?;
    let server = kaji_apiserver::start(kaji_apiserver::Config::new("127.0.0.1:0".parse()?, data.path().into())).await?;
    let client = kube::Client::try_from(kube::Config::new(format!("http://{}", server.addr).parse()?))?;
    let config = kaji_proxy::Config {
        node_name: "node-a".into(),
        cluster_cidr: "10.244.0.0/16".parse().ok(),
        min_sync_period: Duration::from_millis(100),
        backend: ns.backend(rules.mode),
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
    eventually("REJECT for the service without endpoints", || rules.dump(&ns).contains(rules.no_endpoints())).await;

    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), "default");
    let slice: EndpointSlice = serde_json::from_value(json!({
        "metadata": {"name": "web-abc", "labels": {"kubernetes.io/service-name": "web"}},
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        "endpoints": [
            {"addresses": ["10.244.1.5"], "conditions": {"ready": true}, "nodeName": "node-a"},
            {"addresses": ["10.244.2.5"], "conditions": {"ready": true}, "nodeName": "node-b"}]}))?;
    slices.create(&PostParams::default(), &slice).await?;
    let svc_chain = rules.service_chain();
    eventually("the service's chains", || {
        let t = rules.dump(&ns);
        t.contains(&rules.cluster_ip(&cluster_ip))
            && t.contains(&rules.dnat("10.244.2.5:8080"))
            && t.contains(&svc_chain)
            && t.contains(&rules.node_port(node_port))
            && !t.contains(rules.no_endpoints())
    })
    .await;

    // An endpoint turns not-ready: its DNAT goes away.
    let patch = json!({"endpoints": [
        {"addresses": ["10.244.1.5"], "conditions": {"ready": true}, "nodeName": "node-a"},
        {"addresses": ["10.244.2.5"], "conditions": {"ready": false}, "nodeName": "node-b"}]});
    slices.patch("web-abc", &PatchParams::default(), &Patch::Merge(&patch)).await?;
    eventually("the not-ready endpoint removed", || !rules.dump(&ns).contains(&rules.dnat("10.244.2.5:8080"))).await;

    let (code, body) = get(metrics, "/healthz").await?;
    assert_eq!(code, 200, "{body}");
    let (_, body) = get(metrics, "/metrics").await?;
    assert!(body.contains("kubeproxy_sync_proxy_rules_duration_seconds_count"), "{body}");
    if rules.mode == "iptables" {
        assert!(body.contains(r#"kubeproxy_sync_proxy_rules_iptables_total{table="nat"}"#), "{body}");
    }

    // Deleting the service removes its chains.
    svcs.delete("web", &Default::default()).await?;
    eventually("the service's chains removed", || !rules.dump(&ns).contains(&svc_chain)).await;

    proxy.shutdown().await?;
    let _ = server.shutdown().await;
    Ok(())
}
