//! ImageLocality: favour nodes that already have the pod's images, by size, discounted when
//! only a few nodes have them (so pods do not pile onto the one node that pulled an image).

use crate::framework::{CycleState, ScorePlugin, Snapshot, MAX_NODE_SCORE};
use crate::nodeinfo::{NodeInfo, PodInfo};

pub const NAME: &str = "ImageLocality";
const MB: i64 = 1024 * 1024;
const MIN_THRESHOLD: i64 = 23 * MB;
const MAX_CONTAINER_THRESHOLD: i64 = 1000 * MB;

/// For each of the pod's images, the fraction of nodes that have it.
struct Spread {
    fractions: Vec<f64>,
}

/// Scales the summed (spread-weighted) image size between the thresholds to 0..=100.
pub fn image_score(sum: i64, num_containers: usize) -> i64 {
    let max = MAX_CONTAINER_THRESHOLD * num_containers.max(1) as i64;
    let sum = sum.clamp(MIN_THRESHOLD, max);
    MAX_NODE_SCORE * (sum - MIN_THRESHOLD) / (max - MIN_THRESHOLD)
}

pub struct ImageLocality;

impl ScorePlugin for ImageLocality {
    fn name(&self) -> &'static str {
        NAME
    }

    fn pre_score(&self, pod: &PodInfo, snapshot: &Snapshot<'_>, state: &mut CycleState) {
        let total = snapshot.nodes.len().max(1) as f64;
        let fractions =
            pod.images.iter().map(|i| snapshot.image_nodes.get(i).copied().unwrap_or(0) as f64 / total).collect();
        state.insert(NAME, Spread { fractions });
    }

    fn score(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> i64 {
        let Some(spread) = state.get::<Spread>(NAME) else { return 0 };
        let sum: f64 = pod
            .images
            .iter()
            .zip(&spread.fractions)
            .filter_map(|(i, f)| node.images.get(i).map(|&size| size as f64 * f))
            .sum();
        image_score(sum as i64, pod.images.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::test_util::{node, pod};
    use serde_json::json;
    use std::collections::HashMap;

    #[test]
    fn thresholds_scale_the_score() {
        for (sum, containers, want) in
            [(0, 1, 0), (23 * MB, 1, 0), (1000 * MB, 1, 100), (5000 * MB, 1, 100), (1000 * MB, 2, 49)]
        {
            assert_eq!(image_score(sum, containers), want, "{sum} {containers}");
        }
    }

    #[test]
    fn nodes_with_the_image_score_higher() {
        let mut with = node("a", json!({}), json!({}));
        with.images.insert("docker.io/library/app:latest".into(), 500 * MB);
        let without = node("b", json!({}), json!({}));
        let nodes = [with, without];
        let image_nodes: HashMap<String, usize> = [("docker.io/library/app:latest".to_string(), 1)].into();
        let snapshot = Snapshot { nodes: &nodes, image_nodes: &image_nodes };
        let p = pod(json!({}));
        let mut state = CycleState::default();
        ImageLocality.pre_score(&p, &snapshot, &mut state);
        let a = ImageLocality.score(&state, &p, &nodes[0]);
        assert!(a > 0, "half the nodes have a 500MB image: {a}");
        assert_eq!(ImageLocality.score(&state, &p, &nodes[1]), 0);
    }
}
