//! SelectorSpread: favour nodes running fewer pods of the same owner (ReplicaSet, ...), so
//! replicas spread across nodes.

use crate::framework::{normalize_scores, CycleState, ScorePlugin};
use crate::nodeinfo::{NodeInfo, PodInfo};

pub const NAME: &str = "SelectorSpread";

pub struct SelectorSpread;

impl ScorePlugin for SelectorSpread {
    fn name(&self) -> &'static str {
        NAME
    }

    /// Pods on the node with the same controller owner, in the same namespace (fewer is better).
    fn score(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> i64 {
        let Some(owner) = pod.owner_uid.as_deref() else { return 0 };
        node.pods.iter().filter(|p| p.owner_uid.as_deref() == Some(owner) && p.namespace == pod.namespace).count()
            as i64
    }

    fn normalize(&self, scores: &mut [i64]) {
        normalize_scores(scores, true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::test_util::{node, pod_with};
    use serde_json::json;
    use std::sync::Arc;

    fn owned(name: &str, owner: &str) -> PodInfo {
        let mut p = pod_with(name, json!({}), json!({}));
        let mut pod = (*p.pod).clone();
        pod.metadata.owner_references = Some(vec![serde_json::from_value(json!({
            "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": owner, "uid": owner, "controller": true,
        }))
        .expect("owner")]);
        p = PodInfo::new(Arc::new(pod));
        p
    }

    #[test]
    fn nodes_with_fewer_siblings_score_higher() {
        let mut busy = node("a", json!({}), json!({}));
        busy.add_pod(Arc::new(owned("s1", "rs1")));
        busy.add_pod(Arc::new(owned("s2", "rs1")));
        busy.add_pod(Arc::new(owned("o1", "rs2")));
        let mut one = node("b", json!({}), json!({}));
        one.add_pod(Arc::new(owned("s3", "rs1")));
        let empty = node("c", json!({}), json!({}));
        let p = owned("new", "rs1");
        let state = CycleState::default();
        let mut scores: Vec<i64> = [&busy, &one, &empty].iter().map(|n| SelectorSpread.score(&state, &p, n)).collect();
        assert_eq!(scores, [2, 1, 0]);
        ScorePlugin::normalize(&SelectorSpread, &mut scores);
        assert_eq!(scores, [0, 50, 100]);
    }
}
