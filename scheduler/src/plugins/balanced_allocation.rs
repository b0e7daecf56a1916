//! BalancedAllocation: favour nodes whose cpu and memory would be used in similar proportions.

use crate::framework::{CycleState, ScorePlugin, MAX_NODE_SCORE};
use crate::nodeinfo::{NodeInfo, PodInfo};

pub const NAME: &str = "NodeResourcesBalancedAllocation";

pub struct BalancedAllocation;

/// (1 − standard deviation of the used fractions) × 100, fractions capped at 1.
pub fn balanced_score(fractions: &[f64]) -> i64 {
    if fractions.is_empty() {
        return 0;
    }
    let n = fractions.len() as f64;
    let mean = fractions.iter().sum::<f64>() / n;
    let var = fractions.iter().map(|f| (f - mean).powi(2)).sum::<f64>() / n;
    ((1.0 - var.sqrt()) * MAX_NODE_SCORE as f64) as i64
}

impl ScorePlugin for BalancedAllocation {
    fn name(&self) -> &'static str {
        NAME
    }

    fn score(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> i64 {
        let (want, used, alloc) = (&pod.requests, &node.requested, &node.allocatable);
        let fractions: Vec<f64> =
            [(want.milli_cpu + used.milli_cpu, alloc.milli_cpu), (want.memory + used.memory, alloc.memory)]
                .into_iter()
                .filter(|&(_, cap)| cap > 0)
                .map(|(req, cap)| (req as f64 / cap as f64).min(1.0))
                .collect();
        balanced_score(&fractions)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::test_util::{node, pod};
    use serde_json::json;

    #[test]
    fn equal_fractions_score_best() {
        for (fractions, want) in [(vec![0.5, 0.5], 100), (vec![0.0, 1.0], 50), (vec![0.25, 0.75], 75), (vec![], 0)] {
            assert_eq!(balanced_score(&fractions), want, "{fractions:?}");
        }
        let n = node("n", json!({}), json!({}));
        let balanced = pod(json!({"containers": [{"name": "c", "image": "x",
            "resources": {"requests": {"cpu": "2", "memory": "4Gi"}}}]}));
        let skewed = pod(json!({"containers": [{"name": "c", "image": "x",
            "resources": {"requests": {"cpu": "4", "memory": "0"}}}]}));
        let state = CycleState::default();
        assert!(BalancedAllocation.score(&state, &balanced, &n) > BalancedAllocation.score(&state, &skewed, &n));
    }
}
