//! NodeAffinity: `nodeSelector` and required node affinity must hold; preferred terms add their
//! weights to the score.

use crate::framework::{normalize_scores, CycleState, FilterPlugin, ScorePlugin, Status};
use crate::labels::term_matches;
use crate::nodeinfo::{NodeInfo, PodInfo};

pub const NAME: &str = "NodeAffinity";
pub const REASON: &str = "node(s) didn't match Pod's node affinity/selector";

/// Whether the node satisfies the pod's nodeSelector and its required node affinity (any term).
pub fn required_matches(pod: &PodInfo, node: &NodeInfo) -> bool {
    let Some(spec) = pod.pod.spec.as_ref() else { return true };
    if let Some(sel) = &spec.node_selector {
        if sel.iter().any(|(k, v)| node.labels.get(k) != Some(v)) {
            return false;
        }
    }
    let required = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|a| a.required_during_scheduling_ignored_during_execution.as_ref());
    required.is_none_or(|r| r.node_selector_terms.iter().any(|t| term_matches(t, &node.name, &node.labels)))
}

pub struct NodeAffinity;

impl FilterPlugin for NodeAffinity {
    fn name(&self) -> &'static str {
        NAME
    }

    fn filter(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        if required_matches(pod, node) {
            Status::Success
        } else {
            Status::unschedulable(REASON)
        }
    }
}

impl ScorePlugin for NodeAffinity {
    fn name(&self) -> &'static str {
        NAME
    }

    /// The sum of the weights of the preferred terms the node matches.
    fn score(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> i64 {
        let preferred = pod
            .pod
            .spec
            .as_ref()
            .and_then(|s| s.affinity.as_ref())
            .and_then(|a| a.node_affinity.as_ref())
            .and_then(|a| a.preferred_during_scheduling_ignored_during_execution.as_ref());
        preferred
            .into_iter()
            .flatten()
            .filter(|p| term_matches(&p.preference, &node.name, &node.labels))
            .map(|p| i64::from(p.weight))
            .sum()
    }

    fn normalize(&self, scores: &mut [i64]) {
        normalize_scores(scores, false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::test_util::{filter, node, pod, unschedulable};
    use serde_json::json;

    #[test]
    fn node_selector_and_required_affinity_must_hold() {
        let affinity = |op: &str, values: serde_json::Value| {
            json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {"matchExpressions": [{"key": "disk", "operator": op, "values": values}]},
                {"matchExpressions": [{"key": "gen", "operator": "Gt", "values": ["3"]}]},
            ]}}}})
        };
        let n = || node("n", json!({"disk": "ssd", "gen": "2", "zone": "a"}), json!({}));
        let cases = [
            ("no constraints", json!({}), Status::Success),
            ("selector matches", json!({"nodeSelector": {"zone": "a"}}), Status::Success),
            ("selector differs", json!({"nodeSelector": {"zone": "b"}}), unschedulable(REASON)),
            ("selector label missing", json!({"nodeSelector": {"gpu": "yes"}}), unschedulable(REASON)),
            ("In matches", affinity("In", json!(["ssd"])), Status::Success),
            ("NotIn excludes, second term fails too", affinity("NotIn", json!(["ssd"])), unschedulable(REASON)),
            ("Exists", affinity("Exists", json!([])), Status::Success),
            ("DoesNotExist", affinity("DoesNotExist", json!([])), unschedulable(REASON)),
        ];
        for (name, spec, want) in cases {
            assert_eq!(filter(&NodeAffinity, &pod(spec), &[n()], 0), want, "{name}");
        }
    }

    #[test]
    fn preferred_terms_add_their_weight() {
        let p = pod(json!({"affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 10, "preference": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}},
            {"weight": 5, "preference": {"matchExpressions": [{"key": "disk", "operator": "Exists"}]}},
        ]}}}));
        let state = CycleState::default();
        let nodes = [
            node("a", json!({"zone": "a", "disk": "ssd"}), json!({})),
            node("b", json!({"disk": "ssd"}), json!({})),
            node("c", json!({}), json!({})),
        ];
        let mut scores: Vec<i64> = nodes.iter().map(|n| NodeAffinity.score(&state, &p, n)).collect();
        assert_eq!(scores, [15, 5, 0]);
        ScorePlugin::normalize(&NodeAffinity, &mut scores);
        assert_eq!(scores, [100, 33, 0]);
    }
}
