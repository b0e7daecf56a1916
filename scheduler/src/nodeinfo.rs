//! What the scheduler knows about a pod (parsed once) and a node (its pods and their usage).

use crate::labels::{selector_matches, Labels};
use crate::resources::{pod_requests, Resources};
use k8s_openapi::api::core::v1::{Node, Pod, PodAffinityTerm, Taint, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use std::collections::HashMap;
use std::sync::Arc;

/// A host port a container asks for: (protocol, hostIP, port).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostPort {
    pub protocol: String,
    pub ip: String,
    pub port: i32,
}

impl HostPort {
    /// Two host ports clash when protocol and port are equal and the IPs overlap (0.0.0.0 is every IP).
    pub fn conflicts(&self, o: &Self) -> bool {
        self.port == o.port
            && self.protocol == o.protocol
            && (self.ip == o.ip || self.ip == "0.0.0.0" || o.ip == "0.0.0.0")
    }
}

/// A required pod (anti-)affinity term, with its namespaces resolved: `None` means all namespaces.
#[derive(Clone, Debug)]
pub struct AffinityTerm {
    pub selector: LabelSelector,
    pub namespaces: Option<Vec<String>>,
    pub topology_key: String,
}

impl AffinityTerm {
    fn new(t: &PodAffinityTerm, own_namespace: &str) -> Self {
        let listed = t.namespaces.clone().unwrap_or_default();
        // An empty namespaceSelector ({}) selects all namespaces; any other namespaceSelector would
        // need namespace labels, which the scheduler does not watch: only the listed ones count.
        let all = t.namespace_selector.as_ref().is_some_and(|s| s == &LabelSelector::default());
        let namespaces = match (all, listed.is_empty(), t.namespace_selector.is_some()) {
            (true, _, _) => None,
            (false, true, false) => Some(vec![own_namespace.to_string()]),
            _ => Some(listed),
        };
        Self {
            selector: t.label_selector.clone().unwrap_or_default(),
            namespaces,
            topology_key: t.topology_key.clone(),
        }
    }

    /// Whether the term selects `pod` (namespace and labels). A term without a label selector selects nothing.
    pub fn matches(&self, namespace: &str, labels: &Labels) -> bool {
        self.namespaces.as_ref().is_none_or(|ns| ns.iter().any(|n| n == namespace))
            && selector_matches(&self.selector, labels)
    }
}

/// A pod as the plugins need it, parsed once when it enters the queue or the cache.
#[derive(Clone, Debug)]
pub struct PodInfo {
    pub pod: Arc<Pod>,
    pub uid: String,
    pub namespace: String,
    pub name: String,
    pub labels: Labels,
    pub requests: Resources,
    pub non_zero_requests: Resources,
    pub host_ports: Vec<HostPort>,
    pub tolerations: Vec<Toleration>,
    pub required_anti_affinity: Vec<AffinityTerm>,
    pub priority: i32,
    pub owner_uid: Option<String>,
    pub images: Vec<String>,
}

impl PodInfo {
    pub fn new(pod: Arc<Pod>) -> Self {
        let meta = &pod.metadata;
        let namespace = meta.namespace.clone().unwrap_or_else(|| "default".into());
        let name = meta.name.clone().unwrap_or_default();
        let uid = meta.uid.clone().unwrap_or_else(|| format!("{namespace}/{name}"));
        let spec = pod.spec.as_ref();
        let sidecars = spec.iter().flat_map(|s| s.init_containers.iter().flatten());
        let containers: Vec<_> = spec
            .iter()
            .flat_map(|s| s.containers.iter())
            .chain(sidecars.filter(|c| c.restart_policy.as_deref() == Some("Always")))
            .collect();
        let host_ports = containers
            .iter()
            .flat_map(|c| c.ports.iter().flatten())
            .filter(|p| p.host_port.unwrap_or(0) > 0)
            .map(|p| HostPort {
                protocol: p.protocol.clone().unwrap_or_else(|| "TCP".into()),
                ip: p.host_ip.clone().filter(|s| !s.is_empty()).unwrap_or_else(|| "0.0.0.0".into()),
                port: p.host_port.unwrap_or(0),
            })
            .collect();
        let required_anti_affinity = spec
            .and_then(|s| s.affinity.as_ref())
            .and_then(|a| a.pod_anti_affinity.as_ref())
            .and_then(|a| a.required_during_scheduling_ignored_during_execution.as_ref())
            .into_iter()
            .flatten()
            .map(|t| AffinityTerm::new(t, &namespace))
            .collect();
        let owner_uid =
            meta.owner_references.iter().flatten().find(|o| o.controller == Some(true)).map(|o| o.uid.clone());
        Self {
            uid,
            labels: meta.labels.clone().unwrap_or_default(),
            requests: pod_requests(&pod, false),
            non_zero_requests: pod_requests(&pod, true),
            host_ports,
            tolerations: spec.and_then(|s| s.tolerations.clone()).unwrap_or_default(),
            required_anti_affinity,
            priority: spec.and_then(|s| s.priority).unwrap_or(0),
            owner_uid,
            images: spec
                .iter()
                .flat_map(|s| s.containers.iter())
                .filter_map(|c| c.image.as_deref())
                .map(normalize_image)
                .collect(),
            namespace,
            name,
            pod,
        }
    }

    /// `namespace/name`, as Kubernetes names pods in messages.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// Docker-style image reference normalisation: `nginx` → `docker.io/library/nginx:latest`.
pub fn normalize_image(image: &str) -> String {
    let (first, rest) = image.split_once('/').unwrap_or(("", image));
    let mut out = if first.is_empty() {
        format!("docker.io/library/{rest}")
    } else if first.contains('.') || first.contains(':') || first == "localhost" {
        image.to_string()
    } else {
        format!("docker.io/{image}")
    };
    let last = out.rsplit('/').next().unwrap_or_default();
    if !last.contains(':') && !last.contains('@') {
        out.push_str(":latest");
    }
    out
}

/// A node and the pods the scheduler counts on it (bound or assumed).
#[derive(Clone, Debug, Default)]
pub struct NodeInfo {
    pub name: String,
    /// `None` while pods bound to a node we have not seen yet are known.
    pub node: Option<Arc<Node>>,
    pub labels: Labels,
    /// The node's taints plus those Kubernetes' node lifecycle controller derives from conditions.
    pub taints: Vec<Taint>,
    pub unschedulable: bool,
    pub allocatable: Resources,
    pub requested: Resources,
    pub non_zero_requested: Resources,
    pub pods: Vec<Arc<PodInfo>>,
    pub pods_with_anti_affinity: Vec<Arc<PodInfo>>,
    pub used_ports: Vec<HostPort>,
    /// Normalised image name → size in bytes, from `status.images`.
    pub images: HashMap<String, i64>,
}

fn taint(key: &str) -> Taint {
    Taint { key: key.into(), effect: "NoSchedule".into(), ..Taint::default() }
}

impl NodeInfo {
    pub fn set_node(&mut self, node: Arc<Node>) {
        self.name = node.metadata.name.clone().unwrap_or_default();
        self.labels = node.metadata.labels.clone().unwrap_or_default();
        let spec = node.spec.as_ref();
        self.unschedulable = spec.and_then(|s| s.unschedulable).unwrap_or(false);
        let mut taints = spec.and_then(|s| s.taints.clone()).unwrap_or_default();
        let status = node.status.as_ref();
        let ready = status
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
            .map(|c| c.status.as_str());
        // TaintNodesByCondition: a node that is not Ready is tainted NoSchedule; we add the taint
        // ourselves so that nodes without a lifecycle controller behave the same.
        let derived = match ready {
            Some("True") => None,
            Some("Unknown") => Some("node.kubernetes.io/unreachable"),
            _ => Some("node.kubernetes.io/not-ready"),
        };
        for key in derived.into_iter().chain(self.unschedulable.then_some("node.kubernetes.io/unschedulable")) {
            if !taints.iter().any(|t| t.key == key && t.effect == "NoSchedule") {
                taints.push(taint(key));
            }
        }
        self.taints = taints;
        self.allocatable = Resources::from_list(status.and_then(|s| s.allocatable.as_ref().or(s.capacity.as_ref())));
        self.images = status
            .and_then(|s| s.images.as_ref())
            .into_iter()
            .flatten()
            .flat_map(|i| {
                let size = i.size_bytes.unwrap_or(0);
                i.names.iter().flatten().map(move |n| (normalize_image(n), size))
            })
            .collect();
        self.node = Some(node);
    }

    pub fn add_pod(&mut self, pod: Arc<PodInfo>) {
        self.requested.add(&pod.requests);
        self.non_zero_requested.add(&pod.non_zero_requests);
        self.used_ports.extend(pod.host_ports.iter().cloned());
        if !pod.required_anti_affinity.is_empty() {
            self.pods_with_anti_affinity.push(pod.clone());
        }
        self.pods.push(pod);
    }

    /// Removes the pod with this uid; returns whether it was here.
    pub fn remove_pod(&mut self, uid: &str) -> bool {
        let Some(i) = self.pods.iter().position(|p| p.uid == uid) else { return false };
        let pod = self.pods.swap_remove(i);
        self.requested.sub(&pod.requests);
        self.non_zero_requested.sub(&pod.non_zero_requests);
        for hp in &pod.host_ports {
            if let Some(j) = self.used_ports.iter().position(|u| u == hp) {
                self.used_ports.swap_remove(j);
            }
        }
        self.pods_with_anti_affinity.retain(|p| p.uid != uid);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn images_normalise_like_docker() {
        for (input, want) in [
            ("nginx", "docker.io/library/nginx:latest"),
            ("nginx:1.27", "docker.io/library/nginx:1.27"),
            ("user/app", "docker.io/user/app:latest"),
            ("registry.example:5000/app", "registry.example:5000/app:latest"),
            ("ghcr.io/a/b@sha256:abc", "ghcr.io/a/b@sha256:abc"),
        ] {
            assert_eq!(normalize_image(input), want);
        }
    }

    #[test]
    fn not_ready_and_cordoned_nodes_get_the_lifecycle_taints() {
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": "n"},
            "spec": {"unschedulable": true},
            "status": {"conditions": [{"type": "Ready", "status": "False"}]},
        }))
        .expect("node");
        let mut info = NodeInfo::default();
        info.set_node(Arc::new(node));
        let keys: Vec<_> = info.taints.iter().map(|t| t.key.as_str()).collect();
        assert_eq!(keys, ["node.kubernetes.io/not-ready", "node.kubernetes.io/unschedulable"]);
    }

    #[test]
    fn adding_and_removing_pods_keeps_usage_and_ports() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "default", "uid": "u1"},
            "spec": {"containers": [{"name": "c", "image": "x", "ports": [{"containerPort": 80, "hostPort": 8080}],
                     "resources": {"requests": {"cpu": "1"}}}]},
        }))
        .expect("pod");
        let mut info = NodeInfo::default();
        info.add_pod(Arc::new(PodInfo::new(Arc::new(pod))));
        assert_eq!((info.requested.milli_cpu, info.requested.pods, info.used_ports.len()), (1000, 1, 1));
        assert!(info.remove_pod("u1"));
        assert!(!info.remove_pod("u1"));
        assert_eq!((info.requested.milli_cpu, info.requested.pods, info.used_ports.len()), (0, 0, 0));
    }
}
