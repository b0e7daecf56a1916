//! The node IPAM controller against a real apiserver: distinct pod CIDRs, state rebuilt from the
//! nodes across a restart, freed CIDRs reused, and an exhausted range reported on the node.

mod common;

use common::{poll, Cluster};
use k8s_openapi::api::core::v1::Node;
use kaji_controllers::{nodeipam, Config};
use kube::api::{Api, PostParams};
use serde_json::json;
use std::collections::BTreeMap;
use std::time::Duration;

fn config(cluster_cidr: &str) -> anyhow::Result<Config> {
    let settings = nodeipam::Settings { cluster_cidr: cluster_cidr.parse()?, node_mask_size: 24 };
    Ok(Config { node_ipam: Some(settings), ..Config::default() })
}

fn nodes(c: &Cluster) -> Api<Node> {
    Api::all(c.client.clone())
}

async fn create(c: &Cluster, name: &str) -> anyhow::Result<()> {
    let node: Node = serde_json::from_value(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}))?;
    nodes(c).create(&PostParams::default(), &node).await?;
    Ok(())
}

/// The node's podCIDR, once podCIDR and podCIDRs are both set and agree.
fn cidr_of(node: &Node) -> Option<String> {
    let spec = node.spec.as_ref()?;
    let one = spec.pod_cidr.clone()?;
    (spec.pod_cidrs.as_deref() == Some(std::slice::from_ref(&one))).then_some(one)
}

async fn wait_cidr(c: &Cluster, name: &str) -> anyhow::Result<String> {
    poll(&format!("a pod CIDR on {name}"), || async { Ok(cidr_of(&nodes(c).get(name).await?)) }).await
}

#[tokio::test]
async fn nodes_get_distinct_cidrs_that_survive_a_restart_and_free_on_deletion() -> anyhow::Result<()> {
    let c = Cluster::start().await?;
    let m = c.manager_with(config("10.244.0.0/16")?).await?;
    let mut held = BTreeMap::new();
    for name in ["n1", "n2", "n3"] {
        create(&c, name).await?;
    }
    for name in ["n1", "n2", "n3"] {
        held.insert(wait_cidr(&c, name).await?, name);
    }
    let cidrs: Vec<&str> = held.keys().map(String::as_str).collect();
    assert_eq!(cidrs, ["10.244.0.0/24", "10.244.1.0/24", "10.244.2.0/24"], "distinct /24s from the start");

    // The node holding the middle /24 goes; a restarted manager rebuilds from the other two.
    let gone = held["10.244.1.0/24"];
    nodes(&c).delete(gone, &Default::default()).await?;
    poll("the node to be gone", || async { Ok(nodes(&c).get_opt(gone).await?.is_none().then_some(())) }).await?;
    m.shutdown().await?;
    let m = c.manager_with(config("10.244.0.0/16")?).await?;
    create(&c, "n4").await?;
    assert_eq!(wait_cidr(&c, "n4").await?, "10.244.1.0/24", "the freed /24 is reused, no other is handed out twice");
    for (cidr, name) in held.iter().filter(|(_, n)| **n != gone) {
        assert_eq!(cidr_of(&nodes(&c).get(name).await?).as_deref(), Some(cidr.as_str()), "{name} keeps its CIDR");
    }
    m.shutdown().await?;
    c.stop().await
}

#[tokio::test]
async fn an_exhausted_range_is_reported_until_a_node_frees_a_cidr() -> anyhow::Result<()> {
    let c = Cluster::start().await?;
    // A /23 holds two /24s.
    let m = c.manager_with(config("10.250.0.0/23")?).await?;
    create(&c, "a").await?;
    let a = wait_cidr(&c, "a").await?;
    create(&c, "b").await?;
    let b = wait_cidr(&c, "b").await?;
    assert_ne!(a, b);
    create(&c, "c").await?;
    poll("a CIDRNotAvailable event on c", || async {
        Ok((!c.events("c", "CIDRNotAvailable").await?.is_empty()).then_some(()))
    })
    .await?;
    assert_eq!(cidr_of(&nodes(&c).get("c").await?), None);

    nodes(&c).delete("a", &Default::default()).await?;
    assert_eq!(wait_cidr(&c, "c").await?, a, "a's CIDR went to c");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(cidr_of(&nodes(&c).get("b").await?), Some(b));
    m.shutdown().await?;
    c.stop().await
}
