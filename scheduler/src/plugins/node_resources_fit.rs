//! NodeResourcesFit: the pod's requests must fit in what is left of the node's allocatable;
//! scoring prefers the least (default) or the most allocated nodes.

use crate::framework::{CycleState, FilterPlugin, ScorePlugin, Status, MAX_NODE_SCORE};
use crate::nodeinfo::{NodeInfo, PodInfo};
use std::str::FromStr;

pub const NAME: &str = "NodeResourcesFit";

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ScoringStrategy {
    /// Spread load: favour nodes with the most free cpu and memory.
    #[default]
    LeastAllocated,
    /// Bin-pack: favour nodes with the least free cpu and memory.
    MostAllocated,
}

impl FromStr for ScoringStrategy {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "LeastAllocated" => Ok(Self::LeastAllocated),
            "MostAllocated" => Ok(Self::MostAllocated),
            other => Err(format!("unknown scoring strategy {other:?} (LeastAllocated or MostAllocated)")),
        }
    }
}

pub struct NodeResourcesFit {
    pub strategy: ScoringStrategy,
}

/// The reasons the pod does not fit: "Too many pods", "Insufficient cpu", ... (empty if it fits).
pub fn insufficient(pod: &PodInfo, node: &NodeInfo) -> Vec<String> {
    let (want, used, alloc) = (&pod.requests, &node.requested, &node.allocatable);
    let mut out = Vec::new();
    if node.pods.len() as i64 + 1 > alloc.pods {
        out.push("Too many pods".to_string());
    }
    let short = |want: i64, used: i64, alloc: i64| want > 0 && alloc < want.saturating_add(used);
    if short(want.milli_cpu, used.milli_cpu, alloc.milli_cpu) {
        out.push("Insufficient cpu".into());
    }
    if short(want.memory, used.memory, alloc.memory) {
        out.push("Insufficient memory".into());
    }
    if short(want.ephemeral_storage, used.ephemeral_storage, alloc.ephemeral_storage) {
        out.push("Insufficient ephemeral-storage".into());
    }
    for (name, &w) in &want.scalar {
        let u = used.scalar.get(name).copied().unwrap_or(0);
        if short(w, u, alloc.scalar.get(name).copied().unwrap_or(0)) {
            out.push(format!("Insufficient {name}"));
        }
    }
    out
}

impl FilterPlugin for NodeResourcesFit {
    fn name(&self) -> &'static str {
        NAME
    }

    fn filter(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let reasons = insufficient(pod, node);
        if reasons.is_empty() {
            Status::Success
        } else {
            Status::Unschedulable(reasons.into_iter().map(Into::into).collect())
        }
    }
}

/// Score of one resource: free share (least allocated) or used share (most allocated), 0..=100.
pub fn resource_score(strategy: ScoringStrategy, requested: i64, capacity: i64) -> i64 {
    if capacity <= 0 {
        return 0;
    }
    match strategy {
        ScoringStrategy::LeastAllocated if requested > capacity => 0,
        ScoringStrategy::LeastAllocated => (capacity - requested) * MAX_NODE_SCORE / capacity,
        ScoringStrategy::MostAllocated => requested.min(capacity) * MAX_NODE_SCORE / capacity,
    }
}

impl ScorePlugin for NodeResourcesFit {
    fn name(&self) -> &'static str {
        NAME
    }

    /// cpu and memory, weight 1 each, counting unset requests at the non-zero defaults.
    fn score(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> i64 {
        let (want, used, alloc) = (&pod.non_zero_requests, &node.non_zero_requested, &node.allocatable);
        let mut total = 0;
        let mut weights = 0;
        for (req, cap) in
            [(want.milli_cpu + used.milli_cpu, alloc.milli_cpu), (want.memory + used.memory, alloc.memory)]
        {
            if cap > 0 {
                total += resource_score(self.strategy, req, cap);
                weights += 1;
            }
        }
        if weights == 0 {
            0
        } else {
            total / weights
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::test_util::{filter, node, pod, pod_with};
    use serde_json::json;
    use std::sync::Arc;

    fn req(cpu: &str, mem: &str) -> serde_json::Value {
        json!({"containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": cpu, "memory": mem}}}]})
    }

    fn reasons(s: Status) -> Vec<String> {
        match s {
            Status::Success => vec![],
            Status::Unschedulable(r) => r.into_iter().map(|r| r.into_owned()).collect(),
        }
    }

    #[test]
    fn requests_must_fit_in_what_is_left() {
        let fit = NodeResourcesFit { strategy: ScoringStrategy::LeastAllocated };
        // Node: 4 cpu, 8Gi; already running 3 cpu, 4Gi.
        let cases: [(&str, serde_json::Value, &[&str]); 5] = [
            ("fits", req("1", "4Gi"), &[]),
            ("cpu short", req("1500m", "1Gi"), &["Insufficient cpu"]),
            ("memory short", req("100m", "5Gi"), &["Insufficient memory"]),
            ("both short", req("2", "5Gi"), &["Insufficient cpu", "Insufficient memory"]),
            (
                "extended resource absent",
                json!({"containers": [{"name": "c", "image": "x", "resources": {"requests": {"example.com/gpu": "1"}}}]}),
                &["Insufficient example.com/gpu"],
            ),
        ];
        for (name, spec, want) in cases {
            let mut n = node("n", json!({}), json!({}));
            n.add_pod(Arc::new(pod_with("busy", json!({}), req("3", "4Gi"))));
            assert_eq!(reasons(filter(&fit, &pod(spec), &[n], 0)), want, "{name}");
        }
    }

    #[test]
    fn full_nodes_have_too_many_pods() {
        let fit = NodeResourcesFit { strategy: ScoringStrategy::LeastAllocated };
        let mut n = node("n", json!({}), json!({}));
        n.allocatable.pods = 1;
        assert_eq!(reasons(filter(&fit, &pod(json!({})), std::slice::from_ref(&n), 0)), Vec::<String>::new());
        n.add_pod(Arc::new(pod_with("other", json!({}), json!({}))));
        assert_eq!(reasons(filter(&fit, &pod(json!({})), &[n], 0)), ["Too many pods"]);
    }

    #[test]
    fn least_and_most_allocated_scores() {
        let cases = [
            (ScoringStrategy::LeastAllocated, 0, 4000, 100),
            (ScoringStrategy::LeastAllocated, 1000, 4000, 75),
            (ScoringStrategy::LeastAllocated, 5000, 4000, 0),
            (ScoringStrategy::MostAllocated, 1000, 4000, 25),
            (ScoringStrategy::MostAllocated, 5000, 4000, 100),
            (ScoringStrategy::MostAllocated, 1, 0, 0),
        ];
        for (s, req, cap, want) in cases {
            assert_eq!(resource_score(s, req, cap), want, "{s:?} {req}/{cap}");
        }
        // 1 cpu + 2Gi requested of 4 cpu + 8Gi: both 75% free.
        let p = pod(req("1", "2Gi"));
        let n = node("n", json!({}), json!({}));
        let least = NodeResourcesFit { strategy: ScoringStrategy::LeastAllocated };
        let most = NodeResourcesFit { strategy: ScoringStrategy::MostAllocated };
        assert_eq!(least.score(&CycleState::default(), &p, &n), 75);
        assert_eq!(most.score(&CycleState::default(), &p, &n), 25);
    }

    #[test]
    fn strategies_parse_from_their_kubernetes_names() {
        assert_eq!("MostAllocated".parse(), Ok(ScoringStrategy::MostAllocated));
        assert!("Bogus".parse::<ScoringStrategy>().is_err());
    }
}
