//! InterPodAffinity (required anti-affinity): a pod may not land in a topology domain that holds
//! a pod its anti-affinity terms select, nor where an existing pod's anti-affinity selects it.

use crate::framework::{CycleState, FilterPlugin, Snapshot, Status};
use crate::nodeinfo::{NodeInfo, PodInfo};
use std::collections::HashSet;

pub const NAME: &str = "InterPodAffinity";
pub const REASON_POD: &str = "node(s) didn't match pod anti-affinity rules";
pub const REASON_EXISTING: &str = "node(s) didn't satisfy existing pods anti-affinity rules";

#[derive(Default)]
struct State {
    /// Per term of the incoming pod: topology values holding a pod the term selects.
    incoming: Vec<HashSet<String>>,
    /// (topology key, value) pairs where an existing pod's anti-affinity selects the incoming pod.
    existing: HashSet<(String, String)>,
}

pub struct InterPodAffinity;

impl FilterPlugin for InterPodAffinity {
    fn name(&self) -> &'static str {
        NAME
    }

    fn pre_filter(&self, pod: &PodInfo, snapshot: &Snapshot<'_>, state: &mut CycleState) {
        let mut s = State { incoming: vec![HashSet::new(); pod.required_anti_affinity.len()], ..State::default() };
        for node in snapshot.nodes {
            for (term, values) in pod.required_anti_affinity.iter().zip(s.incoming.iter_mut()) {
                let Some(value) = node.labels.get(&term.topology_key) else { continue };
                if !values.contains(value) && node.pods.iter().any(|p| term.matches(&p.namespace, &p.labels)) {
                    values.insert(value.clone());
                }
            }
            for existing in &node.pods_with_anti_affinity {
                for term in &existing.required_anti_affinity {
                    if let Some(value) = node.labels.get(&term.topology_key) {
                        if term.matches(&pod.namespace, &pod.labels) {
                            s.existing.insert((term.topology_key.clone(), value.clone()));
                        }
                    }
                }
            }
        }
        if !s.existing.is_empty() || s.incoming.iter().any(|v| !v.is_empty()) {
            state.insert(NAME, s);
        }
    }

    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let Some(s) = state.get::<State>(NAME) else { return Status::Success };
        for (term, values) in pod.required_anti_affinity.iter().zip(&s.incoming) {
            if node.labels.get(&term.topology_key).is_some_and(|v| values.contains(v)) {
                return Status::unschedulable(REASON_POD);
            }
        }
        if s.existing.iter().any(|(k, v)| node.labels.get(k) == Some(v)) {
            return Status::unschedulable(REASON_EXISTING);
        }
        Status::Success
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::test_util::{filter, node, pod_with, unschedulable};
    use serde_json::{json, Value};
    use std::sync::Arc;

    fn anti(app: &str, key: &str) -> Value {
        json!({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": key}]}}})
    }

    fn cluster(existing: PodInfo) -> Vec<NodeInfo> {
        let mut a = node("a", json!({"kubernetes.io/hostname": "a", "zone": "z1"}), json!({}));
        a.add_pod(Arc::new(existing));
        let b = node("b", json!({"kubernetes.io/hostname": "b", "zone": "z1"}), json!({}));
        let c = node("c", json!({"kubernetes.io/hostname": "c", "zone": "z2"}), json!({}));
        vec![a, b, c]
    }

    #[test]
    fn incoming_anti_affinity_avoids_domains_with_selected_pods() {
        let web = || pod_with("web-0", json!({"app": "web"}), json!({}));
        let cases = [
            ("hostname: only the node with a web pod", "kubernetes.io/hostname", [false, true, true]),
            ("zone: the whole zone", "zone", [false, false, true]),
        ];
        for (name, key, want) in cases {
            let nodes = cluster(web());
            let p = pod_with("web-1", json!({"app": "web"}), anti("web", key));
            let got: Vec<bool> = (0..3).map(|i| filter(&InterPodAffinity, &p, &nodes, i) == Status::Success).collect();
            assert_eq!(got, want, "{name}");
        }
        let nodes = cluster(web());
        let p = pod_with("web-1", json!({"app": "web"}), anti("web", "kubernetes.io/hostname"));
        assert_eq!(filter(&InterPodAffinity, &p, &nodes, 0), unschedulable(REASON_POD));
    }

    #[test]
    fn existing_pods_anti_affinity_is_symmetric() {
        let nodes = cluster(pod_with("db-0", json!({"app": "db"}), anti("web", "kubernetes.io/hostname")));
        let web = pod_with("web-0", json!({"app": "web"}), json!({}));
        assert_eq!(filter(&InterPodAffinity, &web, &nodes, 0), unschedulable(REASON_EXISTING));
        assert_eq!(filter(&InterPodAffinity, &web, &nodes, 1), Status::Success);
        let other = pod_with("api-0", json!({"app": "api"}), json!({}));
        assert_eq!(filter(&InterPodAffinity, &other, &nodes, 0), Status::Success);
    }

    #[test]
    fn terms_only_select_pods_in_their_namespaces() {
        let mut elsewhere = (*pod_with("web-0", json!({"app": "web"}), json!({})).pod).clone();
        elsewhere.metadata.namespace = Some("other".into());
        let nodes = cluster(PodInfo::new(Arc::new(elsewhere)));
        let p = pod_with("web-1", json!({"app": "web"}), anti("web", "kubernetes.io/hostname"));
        assert_eq!(filter(&InterPodAffinity, &p, &nodes, 0), Status::Success);
    }
}
