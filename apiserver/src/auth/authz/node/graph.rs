//! Which node needs which object: an index of every scheduled pod's references (Kubernetes'
//! node authorizer graph, flattened to edges object → nodes). Fed by the watch cache's pod
//! events, so it follows binding, deletion and spec changes.

use crate::cache::{Cache, WatchEventType};
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, RwLock};
use tokio::sync::broadcast::error::RecvError;

/// The kinds of objects a pod refers to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    Secret,
    ConfigMap,
    ServiceAccount,
    PersistentVolumeClaim,
    Pod,
}

/// One referenced object.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Ref {
    pub kind: Kind,
    pub namespace: String,
    pub name: String,
}

#[derive(Default)]
struct Data {
    /// pod key → (node, refs), for pods with `spec.nodeName`.
    pods: HashMap<String, (String, Vec<Ref>)>,
    /// object → node → how many of the node's pods refer to it.
    edges: HashMap<Ref, HashMap<String, u32>>,
}

impl Data {
    fn remove(&mut self, key: &str) {
        let Some((node, refs)) = self.pods.remove(key) else { return };
        for r in refs {
            if let Some(nodes) = self.edges.get_mut(&r) {
                if let Some(n) = nodes.get_mut(&node) {
                    *n -= 1;
                    if *n == 0 {
                        nodes.remove(&node);
                    }
                }
                if nodes.is_empty() {
                    self.edges.remove(&r);
                }
            }
        }
    }

    fn upsert(&mut self, key: &str, pod: &Value) {
        self.remove(key);
        let Some((node, refs)) = pod_refs(pod) else { return };
        for r in &refs {
            *self.edges.entry(r.clone()).or_default().entry(node.clone()).or_default() += 1;
        }
        self.pods.insert(key.to_string(), (node, refs));
    }
}

/// The graph, shared by the authorizer and the task that follows pods.
#[derive(Default)]
pub struct Graph {
    data: RwLock<Data>,
}

impl Graph {
    /// Whether a pod bound to `node` refers to the object.
    pub fn has_path(&self, node: &str, kind: Kind, namespace: &str, name: &str) -> bool {
        let r = Ref { kind, namespace: namespace.into(), name: name.into() };
        let d = self.data.read().unwrap_or_else(|p| p.into_inner());
        d.edges.get(&r).is_some_and(|nodes| nodes.contains_key(node))
    }

    /// Record a pod's current state (`None` = deleted).
    pub fn set_pod(&self, key: &str, pod: Option<&Value>) {
        let mut d = self.data.write().unwrap_or_else(|p| p.into_inner());
        match pod {
            Some(p) => d.upsert(key, p),
            None => d.remove(key),
        }
    }

    fn clear(&self) {
        *self.data.write().unwrap_or_else(|p| p.into_inner()) = Data::default();
    }

    /// Follow the watch cache's pods until `stop`: every change re-indexes one pod.
    pub fn follow(self: Arc<Self>, cache: Arc<Cache>, mut stop: tokio::sync::watch::Receiver<bool>) {
        tokio::spawn(async move {
            let Some(pods) = cache.resource("Pod").cloned() else { return };
            loop {
                let sub = match pods.subscribe(None, cache.revision()) {
                    Ok(s) => s,
                    Err(e) => {
                        tracing::error!(error = %e, "node authorizer cannot watch pods");
                        return;
                    }
                };
                self.clear();
                for ev in &sub.initial {
                    self.set_pod(&ev.object.key, Some(&ev.object.value()));
                }
                let mut live = sub.live;
                loop {
                    let ev = tokio::select! {
                        ev = live.recv() => ev,
                        _ = stop.changed() => return,
                    };
                    match ev {
                        Ok(ev) if ev.kind == WatchEventType::Deleted => self.set_pod(&ev.object.key, None),
                        Ok(ev) => self.set_pod(&ev.object.key, Some(&ev.object.value())),
                        // Missed events: start over from the cache's current state.
                        Err(RecvError::Lagged(n)) => {
                            tracing::warn!(missed = n, "node authorizer fell behind the pod watch; re-indexing");
                            break;
                        }
                        Err(RecvError::Closed) => return,
                    }
                }
            }
        });
    }
}

fn s<'a>(v: &'a Value, p: &str) -> &'a str {
    v.pointer(p).and_then(Value::as_str).unwrap_or("")
}

fn items<'a>(v: &'a Value, p: &str) -> &'a [Value] {
    v.pointer(p).and_then(Value::as_array).map_or(&[], Vec::as_slice)
}

/// The node a pod is bound to and everything it refers to (Kubernetes' `VisitPodSecretNames`,
/// `VisitPodConfigmapNames`, its ServiceAccount and claims); `None` for unscheduled pods.
pub fn pod_refs(pod: &Value) -> Option<(String, Vec<Ref>)> {
    let node = s(pod, "/spec/nodeName");
    if node.is_empty() {
        return None;
    }
    let ns = s(pod, "/metadata/namespace").to_string();
    let mut set: HashSet<Ref> = HashSet::new();
    let mut add = |kind: Kind, name: &str| {
        if !name.is_empty() {
            set.insert(Ref { kind, namespace: ns.clone(), name: name.to_string() });
        }
    };
    add(Kind::Pod, s(pod, "/metadata/name"));
    add(Kind::ServiceAccount, s(pod, "/spec/serviceAccountName"));
    for p in items(pod, "/spec/imagePullSecrets") {
        add(Kind::Secret, s(p, "/name"));
    }
    for list in ["/spec/containers", "/spec/initContainers", "/spec/ephemeralContainers"] {
        for c in items(pod, list) {
            for e in items(c, "/env") {
                add(Kind::Secret, s(e, "/valueFrom/secretKeyRef/name"));
                add(Kind::ConfigMap, s(e, "/valueFrom/configMapKeyRef/name"));
            }
            for e in items(c, "/envFrom") {
                add(Kind::Secret, s(e, "/secretRef/name"));
                add(Kind::ConfigMap, s(e, "/configMapRef/name"));
            }
        }
    }
    for v in items(pod, "/spec/volumes") {
        add(Kind::Secret, s(v, "/secret/secretName"));
        add(Kind::ConfigMap, s(v, "/configMap/name"));
        add(Kind::PersistentVolumeClaim, s(v, "/persistentVolumeClaim/claimName"));
        for src in
            ["/csi/nodePublishSecretRef/name", "/cephfs/secretRef/name", "/rbd/secretRef/name", "/iscsi/secretRef/name"]
        {
            add(Kind::Secret, s(v, src));
        }
        if v.get("ephemeral").is_some_and(|e| !e.is_null()) {
            let claim = format!("{}-{}", s(pod, "/metadata/name"), s(v, "/name"));
            add(Kind::PersistentVolumeClaim, &claim);
        }
        for p in items(v, "/projected/sources") {
            add(Kind::Secret, s(p, "/secret/name"));
            add(Kind::ConfigMap, s(p, "/configMap/name"));
        }
    }
    Some((node.to_string(), set.into_iter().collect()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(name: &str, node: &str) -> Value {
        json!({"metadata": {"name": name, "namespace": "app"},
               "spec": {"nodeName": node, "serviceAccountName": "web",
                        "containers": [{"name": "c", "envFrom": [{"configMapRef": {"name": "env"}}],
                                        "env": [{"name": "P", "valueFrom": {"secretKeyRef": {"name": "db", "key": "p"}}}]}],
                        "volumes": [{"name": "t", "projected": {"sources": [{"configMap": {"name": "kube-root-ca.crt"}}]}},
                                    {"name": "s", "secret": {"secretName": "tls"}}]}})
    }

    #[test]
    fn a_node_reaches_exactly_what_its_pods_use() {
        let g = Graph::default();
        g.set_pod("/registry/pods/app/a", Some(&pod("a", "n1")));
        for (kind, name) in [
            (Kind::Secret, "db"),
            (Kind::Secret, "tls"),
            (Kind::ConfigMap, "env"),
            (Kind::ConfigMap, "kube-root-ca.crt"),
            (Kind::ServiceAccount, "web"),
            (Kind::Pod, "a"),
        ] {
            assert!(g.has_path("n1", kind, "app", name), "{kind:?} {name}");
            assert!(!g.has_path("n2", kind, "app", name), "{kind:?} {name}");
        }
        assert!(!g.has_path("n1", Kind::Secret, "app", "other"));
        assert!(!g.has_path("n1", Kind::Secret, "elsewhere", "db"));
    }

    #[test]
    fn edges_follow_rescheduling_and_deletion() {
        let g = Graph::default();
        g.set_pod("/registry/pods/app/a", Some(&pod("a", "n1")));
        g.set_pod("/registry/pods/app/b", Some(&pod("b", "n1")));
        g.set_pod("/registry/pods/app/a", None);
        assert!(g.has_path("n1", Kind::Secret, "app", "db"), "b still uses it");
        g.set_pod("/registry/pods/app/b", Some(&pod("b", "n2")));
        assert!(!g.has_path("n1", Kind::Secret, "app", "db"));
        assert!(g.has_path("n2", Kind::Secret, "app", "db"));
        let mut unbound = pod("c", "");
        unbound["spec"]["nodeName"] = json!("");
        g.set_pod("/registry/pods/app/c", Some(&unbound));
        assert!(!g.has_path("", Kind::Pod, "app", "c"));
    }
}
