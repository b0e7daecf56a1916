//! TaintToleration: NoSchedule/NoExecute taints the pod does not tolerate rule the node out;
//! untolerated PreferNoSchedule taints lower its score.

use crate::framework::{normalize_scores, CycleState, FilterPlugin, ScorePlugin, Status};
use crate::nodeinfo::{NodeInfo, PodInfo};
use k8s_openapi::api::core::v1::Toleration;

pub const NAME: &str = "TaintToleration";

pub use kaji_api::scheduling::tolerates;

pub struct TaintToleration;

impl FilterPlugin for TaintToleration {
    fn name(&self) -> &'static str {
        NAME
    }

    fn filter(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let untolerated = node.taints.iter().find(|taint| {
            (taint.effect == "NoSchedule" || taint.effect == "NoExecute")
                && !pod.tolerations.iter().any(|t| tolerates(t, taint))
        });
        match untolerated {
            None => Status::Success,
            Some(t) => Status::unschedulable(format!(
                "node(s) had untolerated taint {{{}: {}}}",
                t.key,
                t.value.as_deref().unwrap_or_default()
            )),
        }
    }
}

impl ScorePlugin for TaintToleration {
    fn name(&self) -> &'static str {
        NAME
    }

    /// The number of PreferNoSchedule taints not tolerated (fewer is better).
    fn score(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> i64 {
        let prefer: Vec<&Toleration> = pod
            .tolerations
            .iter()
            .filter(|t| matches!(t.effect.as_deref(), None | Some("") | Some("PreferNoSchedule")))
            .collect();
        node.taints
            .iter()
            .filter(|taint| taint.effect == "PreferNoSchedule" && !prefer.iter().any(|t| tolerates(t, taint)))
            .count() as i64
    }

    fn normalize(&self, scores: &mut [i64]) {
        normalize_scores(scores, true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::test_util::{filter, node, pod, unschedulable};
    use k8s_openapi::api::core::v1::Taint;
    use serde_json::{json, Value};

    fn taint(key: &str, value: &str, effect: &str) -> Taint {
        Taint { key: key.into(), value: Some(value.into()), effect: effect.into(), time_added: None }
    }

    fn tol(v: Value) -> Toleration {
        serde_json::from_value(v).expect("toleration")
    }

    #[test]
    fn toleration_matching() {
        let t = taint("k", "v", "NoSchedule");
        let cases = [
            (json!({"key": "k", "operator": "Equal", "value": "v", "effect": "NoSchedule"}), true),
            (json!({"key": "k", "value": "v"}), true),
            (json!({"key": "k", "value": "w"}), false),
            (json!({"key": "k", "operator": "Exists"}), true),
            (json!({"operator": "Exists"}), true),
            (json!({"key": "k", "operator": "Exists", "effect": "NoExecute"}), false),
            (json!({"key": "other", "operator": "Exists"}), false),
        ];
        for (toleration, want) in cases {
            assert_eq!(tolerates(&tol(toleration.clone()), &t), want, "{toleration}");
        }
    }

    #[test]
    fn untolerated_hard_taints_filter_the_node_with_kubernetes_message() {
        let spec = |effect: &str| json!({"taints": [{"key": "dedicated", "value": "gpu", "effect": effect}]});
        let tolerating = json!({"tolerations": [{"key": "dedicated", "operator": "Equal", "value": "gpu"}]});
        let cases = [
            ("NoSchedule", json!({}), unschedulable("node(s) had untolerated taint {dedicated: gpu}")),
            ("NoExecute", json!({}), unschedulable("node(s) had untolerated taint {dedicated: gpu}")),
            ("PreferNoSchedule", json!({}), Status::Success),
            ("NoSchedule", tolerating, Status::Success),
        ];
        for (effect, pod_spec, want) in cases {
            let nodes = [node("n", json!({}), spec(effect))];
            assert_eq!(filter(&TaintToleration, &pod(pod_spec), &nodes, 0), want, "{effect}");
        }
    }

    #[test]
    fn prefer_no_schedule_taints_lower_the_score() {
        let clean = node("a", json!({}), json!({}));
        let tainted = node("b", json!({}), json!({"taints": [{"key": "x", "effect": "PreferNoSchedule"}]}));
        let state = CycleState::default();
        let p = pod(json!({}));
        let mut scores = [TaintToleration.score(&state, &p, &clean), TaintToleration.score(&state, &p, &tainted)];
        ScorePlugin::normalize(&TaintToleration, &mut scores);
        assert_eq!(scores, [100, 0]);
        let tolerant = pod(json!({"tolerations": [{"key": "x", "operator": "Exists", "effect": "PreferNoSchedule"}]}));
        assert_eq!(TaintToleration.score(&state, &tolerant, &tainted), 0);
    }
}
