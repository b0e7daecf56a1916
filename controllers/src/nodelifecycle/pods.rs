//! Kubernetes' `MarkPodsNotReady`: when a node stops being Ready, the pods on it stop being Ready
//! too, so Services stop sending them traffic long before the taint manager evicts them (5 min by
//! default). Pure: what to write for one pod.

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Pod, PodCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// The pod's conditions with Ready set to False (its reason and message kept, the transition time
/// now), or None when its Ready condition is not True: nothing to write.
pub fn not_ready_conditions(pod: &Pod, now: Timestamp) -> Option<Vec<PodCondition>> {
    let mut conditions = pod.status.as_ref()?.conditions.clone()?;
    let ready = conditions.iter_mut().find(|c| c.type_ == "Ready" && c.status == "True")?;
    ready.status = "False".into();
    ready.last_transition_time = Some(Time(now));
    Some(conditions)
}

/// Whether the node's pods are to be marked: its Ready condition is not True (kubelet said so, or
/// the controller set it Unknown because the kubelet went silent).
pub fn node_not_ready(node: &k8s_openapi::api::core::v1::Node) -> bool {
    super::health::condition(node, "Ready").is_some_and(|c| c.status != "True")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(conditions: serde_json::Value) -> Pod {
        serde_json::from_value(json!({"metadata": {"name": "p"}, "status": {"conditions": conditions}})).expect("pod")
    }

    #[test]
    fn a_ready_pod_becomes_not_ready_and_keeps_its_other_conditions() {
        let now: Timestamp = "2026-12-02T10:00:00Z".parse().expect("time");
        let p = pod(json!([
            {"type": "Initialized", "status": "True"},
            {"type": "Ready", "status": "True", "lastTransitionTime": "2026-12-01T00:00:00Z"},
            {"type": "ContainersReady", "status": "True"},
        ]));
        let c = not_ready_conditions(&p, now).expect("a write");
        assert_eq!(c.len(), 3);
        assert_eq!((c[1].type_.as_str(), c[1].status.as_str()), ("Ready", "False"));
        assert_eq!(c[1].last_transition_time, Some(Time(now)));
        assert_eq!(c[0].status, "True");
        assert_eq!(c[2].status, "True", "Kubernetes changes only Ready");
    }

    #[test]
    fn a_pod_not_ready_already_or_without_conditions_is_left_alone() {
        let now = Timestamp::UNIX_EPOCH;
        assert_eq!(not_ready_conditions(&pod(json!([{"type": "Ready", "status": "False"}])), now), None);
        assert_eq!(not_ready_conditions(&pod(json!([{"type": "PodScheduled", "status": "True"}])), now), None);
        let bare: Pod = serde_json::from_value(json!({"metadata": {"name": "p"}})).expect("pod");
        assert_eq!(not_ready_conditions(&bare, now), None);
    }

    #[test]
    fn only_a_node_whose_ready_is_not_true_marks_its_pods() {
        let node = |status: &str| -> k8s_openapi::api::core::v1::Node {
            serde_json::from_value(json!({"metadata": {"name": "n"},
                "status": {"conditions": [{"type": "Ready", "status": status}]}}))
            .expect("node")
        };
        assert!(!node_not_ready(&node("True")));
        assert!(node_not_ready(&node("Unknown")));
        assert!(node_not_ready(&node("False")));
    }
}
