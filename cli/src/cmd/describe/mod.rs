//! `kaji describe`: one readable page per object — metadata, the essentials of spec and status
//! (with more for pods, deployments, nodes, configmaps and secrets), conditions, and the Events
//! about it.

mod common;
mod config;
mod deployment;
mod node;
mod pod;
mod writer;

use super::{selector_string, targets};
use crate::cluster::{query, Cluster};
use crate::output::emit;
use crate::resources::Resource;
use anyhow::Result;
use jiff::Timestamp;
use serde_json::Value;
use writer::Out;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// TYPE [NAME...] or TYPE/NAME... (TYPE alone: every object of that type).
    #[arg(required = true, value_name = "TYPE[/NAME]")]
    pub targets: Vec<String>,
    /// With TYPE alone: only objects matching this label selector.
    #[arg(short = 'l', long)]
    pub selector: Option<String>,
}

/// What some kinds show beyond the object and its Events.
#[derive(Debug, Default)]
pub struct Related {
    /// A Deployment's ReplicaSets.
    pub replica_sets: Vec<Value>,
    /// The pods on a Node.
    pub pods: Vec<Value>,
}

pub async fn run(cl: &Cluster, args: Args) -> Result<()> {
    let mut first = true;
    for t in targets(&args.targets)? {
        let r = cl.resolve(&t.kind).await?;
        let path = r.path(cl.namespace_for(&r));
        let objects = if t.names.is_empty() {
            let q = args.selector.as_deref().map(|l| query(&[("labelSelector", l)])).unwrap_or_default();
            let list = cl.get_json(&format!("{path}?{q}"), "application/json").await?;
            list["items"].as_array().cloned().unwrap_or_default()
        } else {
            let mut objs = Vec::new();
            for name in &t.names {
                objs.push(cl.get_json(&format!("{path}/{name}"), "application/json").await?);
            }
            objs
        };
        if objects.is_empty() {
            super::no_resources(cl.namespace_for(&r));
        }
        for obj in objects {
            let events = events(cl, &r, &obj).await?;
            let related = related(cl, &r, &obj).await?;
            if !first {
                emit("\n\n")?;
            }
            first = false;
            emit(&render(&r.kind, &obj, &related, &events, Timestamp::now()))?;
        }
    }
    Ok(())
}

/// The Events about `obj`: by uid in its namespace; for cluster-scoped objects (whose events
/// may sit in any namespace and, for nodes, carry the node's name as uid) by kind and name.
async fn events(cl: &Cluster, r: &Resource, obj: &Value) -> Result<Vec<Value>> {
    let m = &obj["metadata"];
    let name = m["name"].as_str().unwrap_or("");
    let events = cl.resolve("events").await?;
    let (path, fields) = match m["namespace"].as_str() {
        Some(ns) => (
            events.path(Some(ns)),
            format!(
                "involvedObject.kind={},involvedObject.name={name},involvedObject.uid={}",
                r.kind,
                m["uid"].as_str().unwrap_or("")
            ),
        ),
        None => (events.path(None), format!("involvedObject.kind={},involvedObject.name={name}", r.kind)),
    };
    let list = cl.get_json(&format!("{path}?{}", query(&[("fieldSelector", &fields)])), "application/json").await?;
    Ok(list["items"].as_array().cloned().unwrap_or_default())
}

async fn related(cl: &Cluster, r: &Resource, obj: &Value) -> Result<Related> {
    let mut out = Related::default();
    let list = |path: String, q: String| async move {
        let l = cl.get_json(&format!("{path}?{q}"), "application/json").await?;
        Ok::<_, anyhow::Error>(l["items"].as_array().cloned().unwrap_or_default())
    };
    match (r.group.as_str(), r.kind.as_str()) {
        ("apps", "Deployment") => {
            let ns = obj["metadata"]["namespace"].as_str().unwrap_or("");
            let uid = &obj["metadata"]["uid"];
            let Some(sel) = selector_string(&obj["spec"]["selector"]) else { return Ok(out) };
            let rs = cl.resolve("replicasets.apps").await?;
            let all = list(rs.path(Some(ns)), query(&[("labelSelector", &sel)])).await?;
            out.replica_sets = all
                .into_iter()
                .filter(|rs| {
                    rs["metadata"]["ownerReferences"].as_array().into_iter().flatten().any(|o| &o["uid"] == uid)
                })
                .collect();
        }
        ("", "Node") => {
            let name = obj["metadata"]["name"].as_str().unwrap_or("");
            let pods = cl.resolve("pods").await?;
            let all = list(pods.path(None), query(&[("fieldSelector", &format!("spec.nodeName={name}"))])).await?;
            out.pods = all
                .into_iter()
                .filter(|p| !matches!(p["status"]["phase"].as_str(), Some("Succeeded" | "Failed")))
                .collect();
        }
        _ => {}
    }
    Ok(out)
}

/// The whole page for one object.
pub fn render(kind: &str, obj: &Value, related: &Related, events: &[Value], now: Timestamp) -> String {
    let mut out = Out::default();
    match kind {
        "Pod" => pod::describe(&mut out, obj),
        "Deployment" => deployment::describe(&mut out, obj, &related.replica_sets),
        "Node" => node::describe(&mut out, obj, &related.pods),
        "ConfigMap" => config::configmap(&mut out, obj),
        "Secret" => config::secret(&mut out, obj),
        _ => {
            common::metadata(&mut out, obj);
            let rest = obj
                .as_object()
                .into_iter()
                .flatten()
                .filter(|(k, _)| !matches!(k.as_str(), "apiVersion" | "kind" | "metadata"));
            for (k, v) in rest {
                if k == "status" {
                    let mut st = v.clone();
                    st.as_object_mut().map(|m| m.remove("conditions"));
                    common::tree(&mut out, 0, k, &st);
                } else {
                    common::tree(&mut out, 0, k, v);
                }
            }
            common::conditions(&mut out, obj);
        }
    }
    common::events(&mut out, events, now);
    out.render()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn now() -> Timestamp {
        "2025-01-06T12:00:00Z".parse().expect("timestamp")
    }

    fn event(reason: &str, message: &str) -> Value {
        json!({"type": "Normal", "reason": reason, "message": message, "source": {"component": "default-scheduler"},
               "lastTimestamp": "2025-01-06T11:59:30Z"})
    }

    #[test]
    fn a_pod_page_shows_node_containers_conditions_and_events() {
        let pod = json!({
            "metadata": {"name": "web-1", "namespace": "default", "labels": {"app": "web"},
                         "ownerReferences": [{"kind": "ReplicaSet", "name": "web-7d", "controller": true}]},
            "spec": {"nodeName": "n1", "serviceAccountName": "default",
                     "containers": [{"name": "web", "image": "nginx:1.25", "ports": [{"containerPort": 80, "protocol": "TCP"}],
                                     "env": [{"name": "MODE", "value": "fast"}]}]},
            "status": {"phase": "Running", "hostIP": "172.30.0.11", "podIP": "10.244.1.5",
                       "containerStatuses": [{"name": "web", "ready": true, "restartCount": 2,
                                              "state": {"running": {"startedAt": "2025-01-06T11:58:00Z"}}}],
                       "conditions": [{"type": "Ready", "status": "True"}]}
        });
        let text = render(
            "Pod",
            &pod,
            &Related::default(),
            &[event("Scheduled", "Successfully assigned default/web-1 to n1")],
            now(),
        );
        let want = [
            "Name:             web-1",
            "Node:             n1/172.30.0.11",
            "Status:           Running",
            "Controlled By:    ReplicaSet/web-7d",
            "    Image:          nginx:1.25",
            "    Port:           80/TCP",
            "    State:          Running",
            "      Started:      Mon, 06 Jan 2025 11:58:00 +0000",
            "    Restart Count:  2",
            "      MODE:  fast",
            "  Ready  True",
            "  Normal  Scheduled  30s  default-scheduler  Successfully assigned default/web-1 to n1",
        ];
        for line in want {
            assert!(text.lines().any(|l| l == line), "missing {line:?} in\n{text}");
        }
    }

    #[test]
    fn a_deployment_page_shows_replicas_and_its_new_replica_set() {
        let d = json!({
            "metadata": {"name": "web", "namespace": "default", "uid": "d1", "annotations": {"deployment.kubernetes.io/revision": "2"}},
            "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}}, "strategy": {"type": "RollingUpdate",
                     "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}},
                     "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "web", "image": "nginx"}]}}},
            "status": {"replicas": 3, "updatedReplicas": 3, "availableReplicas": 2, "unavailableReplicas": 1,
                       "conditions": [{"type": "Available", "status": "False", "reason": "MinimumReplicasUnavailable"}]}
        });
        let rs = |name: &str, rev: &str, n: i64| {
            json!({"metadata": {"name": name, "annotations": {"deployment.kubernetes.io/revision": rev}},
                                                         "spec": {"replicas": n}, "status": {"replicas": n}})
        };
        let related = Related { replica_sets: vec![rs("web-old", "1", 0), rs("web-new", "2", 3)], pods: vec![] };
        let text = render("Deployment", &d, &related, &[], now());
        for line in [
            "Selector:               app=web",
            "Replicas:               3 desired | 3 updated | 3 total | 2 available | 1 unavailable",
            "RollingUpdateStrategy:  25% max unavailable, 25% max surge",
            "  Available      False   MinimumReplicasUnavailable",
            "OldReplicaSets:  <none>",
            "NewReplicaSet:   web-new (3/3 replicas created)",
            "Events:          <none>",
        ] {
            assert!(text.lines().any(|l| l == line), "missing {line:?} in\n{text}");
        }
    }

    #[test]
    fn other_kinds_get_the_generic_page() {
        let svc = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": "default"},
                         "spec": {"type": "ClusterIP", "clusterIP": "10.96.0.10"}});
        let text = render("Service", &svc, &Related::default(), &[], now());
        assert!(text.contains("Spec:\n  Cluster IP:  10.96.0.10\n  Type:        ClusterIP\n"), "{text}");
        assert!(!text.contains("apiVersion"), "{text}");
    }
}
