//! Several apiservers on one etcd: each keeps its own watch cache from etcd's watch, yet a
//! write on one is seen by the watchers and consistent reads of the others; Service
//! allocations never collide; the `kubernetes` Endpoints list every live apiserver.

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Endpoints, Service};
use kaji_apiserver::storage::etcd::EtcdConfig;
use kaji_apiserver::storage::etcd_member::Cluster;
use kube::api::{Api, ListParams, PostParams, WatchEvent, WatchParams};
use kube::ResourceExt;
use serde_json::json;
use std::collections::BTreeSet;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(20);

struct Apiserver {
    server: kaji_apiserver::Server,
    client: kube::Client,
    _data: tempfile::TempDir,
}

async fn apiserver(etcd: &Cluster) -> anyhow::Result<Apiserver> {
    let data = tempfile::tempdir()?;
    let mut config = kaji_apiserver::Config::new("127.0.0.1:0".parse()?, data.path().to_path_buf());
    config.storage = kaji_apiserver::StorageConfig::Etcd(EtcdConfig {
        servers: etcd.client_urls(),
        prefix: String::new(),
        ..Default::default()
    });
    config.endpoint_leases = true;
    config.service_node_port_range = (30000, 30099);
    let server = kaji_apiserver::start(config).await?;
    let client = kube::Client::try_from(kube::Config::new(format!("http://{}", server.addr).parse()?))?;
    Ok(Apiserver { server, client, _data: data })
}

fn service(name: &str) -> Service {
    serde_json::from_value(json!({"metadata": {"name": name},
        "spec": {"type": "NodePort", "ports": [{"port": 80, "targetPort": 8080}]}}))
    .expect("service")
}

/// The ports of the `kubernetes` Endpoints, once they equal `want` (within WAIT).
async fn endpoint_ports(client: &kube::Client, want: &BTreeSet<u16>) -> BTreeSet<u16> {
    let api: Api<Endpoints> = Api::namespaced(client.clone(), "default");
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let ep = api.get("kubernetes").await.expect("kubernetes endpoints");
        let ports: BTreeSet<u16> = ep
            .subsets
            .unwrap_or_default()
            .iter()
            .flat_map(|s| s.ports.iter().flatten().map(|p| p.port as u16))
            .collect();
        if &ports == want || tokio::time::Instant::now() > deadline {
            return ports;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn apiservers_on_one_etcd_share_writes_watches_allocations_and_endpoints() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let etcd = Cluster::start(dir.path(), 1)?;
    let a = apiserver(&etcd).await?;
    let b = apiserver(&etcd).await?;

    // A watch on b sees a write made through a.
    let on_a: Api<ConfigMap> = Api::namespaced(a.client.clone(), "default");
    let on_b: Api<ConfigMap> = Api::namespaced(b.client.clone(), "default");
    let rv = on_b.list(&ListParams::default()).await?.metadata.resource_version.unwrap_or_default();
    let mut watch = on_b.watch(&WatchParams::default().timeout(30), &rv).await?.boxed();
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "shared"}, "data": {"k": "v"}}))?;
    let created = on_a.create(&PostParams::default(), &cm).await?;
    let seen = tokio::time::timeout(WAIT, async {
        loop {
            match watch.next().await {
                Some(Ok(WatchEvent::Added(c))) => return c,
                Some(Ok(_)) => continue,
                other => panic!("watch ended: {other:?}"),
            }
        }
    })
    .await?;
    assert_eq!((seen.name_any(), seen.resource_version()), ("shared".into(), created.resource_version()));
    // A consistent read on b right after a write on a includes it.
    let cm2: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "second"}}))?;
    on_a.create(&PostParams::default(), &cm2).await?;
    let names: Vec<String> = on_b.list(&ListParams::default()).await?.items.iter().map(|c| c.name_any()).collect();
    assert!(names.contains(&"second".to_string()), "{names:?}");

    // Services created at once through both get distinct ClusterIPs and NodePorts.
    let mut creates = Vec::new();
    for i in 0..12 {
        for (tag, client) in [("a", a.client.clone()), ("b", b.client.clone())] {
            creates.push(tokio::spawn(async move {
                let api: Api<Service> = Api::namespaced(client, "default");
                api.create(&PostParams::default(), &service(&format!("svc-{tag}-{i}"))).await
            }));
        }
    }
    let (mut ips, mut ports) = (BTreeSet::new(), BTreeSet::new());
    for c in creates {
        let svc = c.await??;
        let spec = svc.spec.expect("spec");
        assert!(ips.insert(spec.cluster_ip.expect("clusterIP")), "a ClusterIP was handed out twice");
        let np = spec.ports.expect("ports")[0].node_port.expect("nodePort");
        assert!(ports.insert(np), "a NodePort was handed out twice");
    }
    assert_eq!((ips.len(), ports.len()), (24, 24));

    // The kubernetes Endpoints list both apiservers; one that stops leaves them.
    let both: BTreeSet<u16> = [a.server.addr.port(), b.server.addr.port()].into();
    assert_eq!(endpoint_ports(&a.client, &both).await, both);
    let b_client = b.client.clone();
    b.server.shutdown().await?;
    let only_a: BTreeSet<u16> = [a.server.addr.port()].into();
    assert_eq!(endpoint_ports(&a.client, &only_a).await, only_a);
    drop(b_client);
    a.server.shutdown().await?;
    Ok(())
}
