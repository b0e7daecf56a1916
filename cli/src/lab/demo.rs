//! The demo workload in namespace `demo`: Service `hello` and Deployment `hello` with one pod per
//! node (a topology spread on the hostname). Each pod serves "hello from <pod> on <node>" and, in
//! a second container, fetches the Service every few seconds, so its log shows answers from pods
//! on the other nodes (`kubectl logs -n demo deploy/hello -c peers`).

use super::topology::DEMO_IMAGE;
use anyhow::{bail, Result};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Pod, Service};
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

pub const NAMESPACE: &str = "demo";

const WEB: &str = r#"echo "hello from $POD_NAME on $NODE_NAME" > /www/index.html && exec httpd -f -v -p 8080 -h /www"#;
const PEERS: &str = r#"while true; do echo "$(date +%T) $(timeout 3 wget -q -O- http://$HELLO_SERVICE_HOST:$HELLO_SERVICE_PORT/ 2>&1)"; sleep 5; done"#;

pub fn deployment(replicas: u8) -> serde_json::Value {
    let env = json!([
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
    ]);
    json!({
        "metadata": {"name": "hello", "labels": {"app": "hello"}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "hello"}},
            "template": {
                "metadata": {"labels": {"app": "hello"}},
                "spec": {
                    "terminationGracePeriodSeconds": 2,
                    "topologySpreadConstraints": [{
                        "maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
                        "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": "hello"}},
                    }],
                    "containers": [
                        {"name": "web", "image": DEMO_IMAGE, "command": ["sh", "-c", WEB], "env": env,
                         "ports": [{"containerPort": 8080}]},
                        {"name": "peers", "image": DEMO_IMAGE, "command": ["sh", "-c", PEERS]},
                    ],
                },
            },
        },
    })
}

/// Creates the namespace, the Service (first, so the pods get its environment variables) and
/// the Deployment; objects that exist are kept.
pub async fn apply(c: &kube::Client, replicas: u8) -> Result<()> {
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": NAMESPACE}}))?;
    create_or_keep(Api::<Namespace>::all(c.clone()), ns).await?;
    let svc: Service = serde_json::from_value(json!({
        "metadata": {"name": "hello"},
        "spec": {"selector": {"app": "hello"}, "ports": [{"port": 80, "targetPort": 8080}]}
    }))?;
    create_or_keep(Api::<Service>::namespaced(c.clone(), NAMESPACE), svc).await?;
    let deploy: Deployment = serde_json::from_value(deployment(replicas))?;
    create_or_keep(Api::<Deployment>::namespaced(c.clone(), NAMESPACE), deploy).await
}

pub(super) async fn create_or_keep<K>(api: Api<K>, obj: K) -> Result<()>
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + serde::Serialize,
{
    match api.create(&PostParams::default(), &obj).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Waits until `replicas` demo pods run, each on a different node.
pub async fn wait_spread(c: &kube::Client, replicas: u8, timeout: Duration) -> Result<()> {
    let pods = Api::<Pod>::namespaced(c.clone(), NAMESPACE);
    let deadline = Instant::now() + timeout;
    loop {
        let list = pods.list(&ListParams::default().labels("app=hello")).await?;
        let running: Vec<&Pod> = list
            .items
            .iter()
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .collect();
        let nodes: BTreeSet<&str> =
            running.iter().filter_map(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref())).collect();
        if running.len() == usize::from(replicas) && nodes.len() == usize::from(replicas) {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "after {}s {} of {replicas} pods run, on {} node(s): `kubectl describe pods -n {NAMESPACE}` says why",
                timeout.as_secs(),
                running.len(),
                nodes.len()
            );
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn demo_pods_are_spread_one_per_node() {
        let d: Deployment = serde_json::from_value(deployment(3)).expect("a valid Deployment");
        let spec = d.spec;
        assert_eq!(spec.replicas, Some(3));
        let pod = spec.template.spec.expect("pod spec");
        let spread = &pod.topology_spread_constraints.expect("spread")[0];
        assert_eq!((spread.max_skew, spread.topology_key.as_str()), (1, "kubernetes.io/hostname"));
        assert_eq!(spread.when_unsatisfiable, "DoNotSchedule");
    }
}
