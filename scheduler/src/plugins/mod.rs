//! The plugins, one file each, and the default registry: one explicit list, in Kubernetes' order.

pub mod balanced_allocation;
pub mod image_locality;
pub mod inter_pod_affinity;
pub mod node_affinity;
pub mod node_name;
pub mod node_ports;
pub mod node_resources_fit;
pub mod node_unschedulable;
pub mod pod_topology_spread;
pub mod selector_spread;
pub mod taint_toleration;
pub mod volume_binding;

use crate::framework::Framework;
pub use node_resources_fit::ScoringStrategy;

/// The default profile: Kubernetes' filters, and its score plugins with their default weights.
pub fn default_framework(strategy: ScoringStrategy, percentage_of_nodes_to_score: u32) -> Framework {
    Framework {
        filters: vec![
            Box::new(node_unschedulable::NodeUnschedulable),
            Box::new(node_name::NodeName),
            Box::new(taint_toleration::TaintToleration),
            Box::new(node_affinity::NodeAffinity),
            Box::new(node_ports::NodePorts),
            Box::new(node_resources_fit::NodeResourcesFit { strategy }),
            Box::new(pod_topology_spread::PodTopologySpread),
            Box::new(inter_pod_affinity::InterPodAffinity),
        ],
        scores: vec![
            (Box::new(taint_toleration::TaintToleration), 3),
            (Box::new(node_affinity::NodeAffinity), 2),
            (Box::new(node_resources_fit::NodeResourcesFit { strategy }), 1),
            (Box::new(balanced_allocation::BalancedAllocation), 1),
            (Box::new(image_locality::ImageLocality), 1),
            (Box::new(selector_spread::SelectorSpread), 2),
        ],
        percentage_of_nodes_to_score,
    }
}

/// The default profile with the VolumeBinding filter over these claim, volume and class caches.
pub fn with_volumes(mut framework: Framework, stores: volume_binding::Stores) -> Framework {
    framework.filters.push(Box::new(volume_binding::VolumeBinding(stores)));
    framework
}

#[cfg(test)]
pub(crate) mod test_util {
    //! Builders for plugin table tests.
    use crate::framework::{CycleState, FilterPlugin, Snapshot, Status};
    use crate::nodeinfo::{NodeInfo, PodInfo};
    use serde_json::{json, Value};
    use std::collections::HashMap;
    use std::sync::Arc;

    /// A pod from a JSON spec (name `p`, namespace `default`), with `labels`.
    pub fn pod_with(name: &str, labels: Value, spec: Value) -> PodInfo {
        let mut spec = spec;
        if spec.get("containers").is_none() {
            spec["containers"] = json!([{"name": "c", "image": "app"}]);
        }
        let pod = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}"), "labels": labels},
            "spec": spec,
        }))
        .expect("test pod");
        PodInfo::new(Arc::new(pod))
    }

    pub fn pod(spec: Value) -> PodInfo {
        pod_with("p", json!({}), spec)
    }

    /// A Ready node with 4 cpu, 8Gi, 110 pods, and these labels and spec.
    pub fn node(name: &str, labels: Value, spec: Value) -> NodeInfo {
        let n = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": labels},
            "spec": spec,
            "status": {
                "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        }))
        .expect("test node");
        let mut info = NodeInfo::default();
        info.set_node(Arc::new(n));
        info
    }

    /// Runs one filter plugin (pre_filter over `nodes`, then filter on `nodes[i]`).
    pub fn filter(plugin: &dyn FilterPlugin, pod: &PodInfo, nodes: &[NodeInfo], i: usize) -> Status {
        let images = HashMap::new();
        let snapshot = Snapshot { nodes, image_nodes: &images };
        let mut state = CycleState::default();
        plugin.pre_filter(pod, &snapshot, &mut state);
        plugin.filter(&state, pod, &nodes[i])
    }

    pub fn unschedulable(reason: &str) -> Status {
        Status::unschedulable(reason.to_string())
    }
}
