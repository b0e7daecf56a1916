//! NodeUnschedulable: cordoned nodes (`spec.unschedulable`) take no pods unless tolerated.

use crate::framework::{CycleState, FilterPlugin, Status};
use crate::nodeinfo::{NodeInfo, PodInfo};
use crate::plugins::taint_toleration::tolerates;
use k8s_openapi::api::core::v1::Taint;

pub const NAME: &str = "NodeUnschedulable";
pub const REASON: &str = "node(s) were unschedulable";

pub struct NodeUnschedulable;

impl FilterPlugin for NodeUnschedulable {
    fn name(&self) -> &'static str {
        NAME
    }

    fn filter(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        if !node.unschedulable {
            return Status::Success;
        }
        let taint =
            Taint { key: "node.kubernetes.io/unschedulable".into(), effect: "NoSchedule".into(), ..Taint::default() };
        if pod.tolerations.iter().any(|t| tolerates(t, &taint)) {
            Status::Success
        } else {
            Status::unschedulable(REASON)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::test_util::{filter, node, pod, unschedulable};
    use serde_json::json;

    #[test]
    fn cordoned_nodes_reject_pods_without_the_toleration() {
        let tolerating = json!({"tolerations": [{"key": "node.kubernetes.io/unschedulable", "operator": "Exists"}]});
        let cases = [
            ("schedulable node", json!({}), json!({}), Status::Success),
            ("cordoned node", json!({"unschedulable": true}), json!({}), unschedulable(REASON)),
            ("cordoned but tolerated", json!({"unschedulable": true}), tolerating, Status::Success),
        ];
        for (name, node_spec, pod_spec, want) in cases {
            let nodes = [node("n", json!({}), node_spec)];
            assert_eq!(filter(&NodeUnschedulable, &pod(pod_spec), &nodes, 0), want, "{name}");
        }
    }
}
