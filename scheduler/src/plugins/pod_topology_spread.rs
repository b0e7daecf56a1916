//! PodTopologySpread (DoNotSchedule constraints): placing the pod must not make the number of
//! matching pods in its topology domain exceed the least-loaded domain's by more than maxSkew.

use crate::framework::{CycleState, FilterPlugin, Snapshot, Status};
use crate::labels::selector_matches;
use crate::nodeinfo::{NodeInfo, PodInfo};
use crate::plugins::node_affinity::required_matches;
use crate::plugins::taint_toleration::tolerates;
use k8s_openapi::api::core::v1::TopologySpreadConstraint;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use std::collections::HashMap;

pub const NAME: &str = "PodTopologySpread";
pub const REASON: &str = "node(s) didn't match pod topology spread constraints";
pub const REASON_MISSING_LABEL: &str = "node(s) didn't match pod topology spread constraints (missing required label)";

struct Constraint {
    key: String,
    max_skew: i64,
    selector: Option<LabelSelector>,
    self_match: i64,
    counts: HashMap<String, i64>,
    min: i64,
}

/// The constraint's selector with `matchLabelKeys` folded in (key In [the pod's value]).
fn selector_of(c: &TopologySpreadConstraint, pod: &PodInfo) -> Option<LabelSelector> {
    let mut sel = c.label_selector.clone()?;
    for key in c.match_label_keys.iter().flatten() {
        if let Some(v) = pod.labels.get(key) {
            sel.match_expressions.get_or_insert_with(Vec::new).push(LabelSelectorRequirement {
                key: key.clone(),
                operator: "In".into(),
                values: Some(vec![v.clone()]),
            });
        }
    }
    Some(sel)
}

pub struct PodTopologySpread;

impl FilterPlugin for PodTopologySpread {
    fn name(&self) -> &'static str {
        NAME
    }

    fn pre_filter(&self, pod: &PodInfo, snapshot: &Snapshot<'_>, state: &mut CycleState) {
        let specs: Vec<&TopologySpreadConstraint> = pod
            .pod
            .spec
            .iter()
            .flat_map(|s| s.topology_spread_constraints.iter().flatten())
            .filter(|c| c.when_unsatisfiable == "DoNotSchedule")
            .collect();
        if specs.is_empty() {
            return;
        }
        let mut constraints: Vec<Constraint> = specs
            .iter()
            .map(|c| {
                let selector = selector_of(c, pod);
                let self_match = selector.as_ref().is_some_and(|s| selector_matches(s, &pod.labels));
                Constraint {
                    key: c.topology_key.clone(),
                    max_skew: i64::from(c.max_skew),
                    selector,
                    self_match: i64::from(self_match),
                    counts: HashMap::new(),
                    min: 0,
                }
            })
            .collect();
        // Kubernetes counts only nodes that have every constraint's key, pass the pod's node
        // affinity (nodeAffinityPolicy Honor, the default) and, with nodeTaintsPolicy Honor, its taints.
        let honor_affinity = specs.iter().all(|c| c.node_affinity_policy.as_deref() != Some("Ignore"));
        let honor_taints = specs.iter().any(|c| c.node_taints_policy.as_deref() == Some("Honor"));
        for node in snapshot.nodes {
            if constraints.iter().any(|c| !node.labels.contains_key(&c.key))
                || (honor_affinity && !required_matches(pod, node))
                || (honor_taints
                    && node.taints.iter().any(|t| {
                        t.effect != "PreferNoSchedule" && !pod.tolerations.iter().any(|tol| tolerates(tol, t))
                    }))
            {
                continue;
            }
            for c in constraints.iter_mut() {
                let Some(value) = node.labels.get(&c.key) else { continue };
                let matching = match &c.selector {
                    None => 0,
                    Some(sel) => node
                        .pods
                        .iter()
                        .filter(|p| {
                            p.namespace == pod.namespace
                                && p.pod.metadata.deletion_timestamp.is_none()
                                && selector_matches(sel, &p.labels)
                        })
                        .count() as i64,
                };
                *c.counts.entry(value.clone()).or_default() += matching;
            }
        }
        for (c, spec) in constraints.iter_mut().zip(&specs) {
            let domains = c.counts.len() as i64;
            c.min = if domains < i64::from(spec.min_domains.unwrap_or(1)) {
                0
            } else {
                c.counts.values().copied().min().unwrap_or(0)
            };
        }
        state.insert(NAME, constraints);
    }

    fn filter(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Status {
        let Some(constraints) = state.get::<Vec<Constraint>>(NAME) else { return Status::Success };
        for c in constraints {
            let Some(value) = node.labels.get(&c.key) else {
                return Status::unschedulable(REASON_MISSING_LABEL);
            };
            let count = c.counts.get(value).copied().unwrap_or(0);
            if count + c.self_match - c.min > c.max_skew {
                return Status::unschedulable(REASON);
            }
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

    fn spread(key: &str, max_skew: i32, extra: Value) -> Value {
        let mut c = json!({"maxSkew": max_skew, "topologyKey": key, "whenUnsatisfiable": "DoNotSchedule",
                           "labelSelector": {"matchLabels": {"app": "web"}}});
        if let (Some(c), Some(e)) = (c.as_object_mut(), extra.as_object()) {
            c.extend(e.clone());
        }
        json!({"topologySpreadConstraints": [c]})
    }

    fn web(i: usize) -> Arc<PodInfo> {
        Arc::new(pod_with(&format!("web-{i}"), json!({"app": "web"}), json!({})))
    }

    /// Zone z1: nodes a (2 web pods), b (1); zone z2: node c (0); node d has no zone label.
    fn cluster() -> Vec<NodeInfo> {
        let mut a = node("a", json!({"zone": "z1", "kubernetes.io/hostname": "a"}), json!({}));
        a.add_pod(web(0));
        a.add_pod(web(1));
        let mut b = node("b", json!({"zone": "z1", "kubernetes.io/hostname": "b"}), json!({}));
        b.add_pod(web(2));
        let c = node("c", json!({"zone": "z2", "kubernetes.io/hostname": "c"}), json!({}));
        let d = node("d", json!({"kubernetes.io/hostname": "d"}), json!({}));
        vec![a, b, c, d]
    }

    fn fits(spec: Value) -> Vec<Status> {
        let nodes = cluster();
        let p = pod_with("new", json!({"app": "web"}), spec);
        (0..nodes.len()).map(|i| filter(&PodTopologySpread, &p, &nodes, i)).collect()
    }

    #[test]
    fn zone_and_hostname_spread() {
        let ok = Status::Success;
        let skew = unschedulable(REASON);
        let missing = unschedulable(REASON_MISSING_LABEL);
        // zone counts: z1=3, z2=0 → only z2 keeps skew ≤ 1.
        assert_eq!(fits(spread("zone", 1, json!({}))), [skew.clone(), skew.clone(), ok.clone(), missing.clone()]);
        // zone, maxSkew 4: z1 would be 4 − 0 = 4.
        assert_eq!(fits(spread("zone", 4, json!({}))), [ok.clone(), ok.clone(), ok.clone(), missing]);
        // hostname counts: a=2, b=1, c=0, d=0 → min 0; a would be 3, b 2.
        let host = fits(spread("kubernetes.io/hostname", 1, json!({})));
        assert_eq!(host, [skew.clone(), skew.clone(), ok.clone(), ok.clone()]);
        // minDomains 5 with 4 hostnames: the global minimum counts as 0 either way.
        let min_domains = fits(spread("kubernetes.io/hostname", 2, json!({"minDomains": 5})));
        assert_eq!(min_domains, [skew, ok.clone(), ok.clone(), ok]);
    }

    #[test]
    fn schedule_anyway_constraints_do_not_filter() {
        let spec = json!({"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone",
            "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": {"matchLabels": {"app": "web"}}}]});
        assert!(fits(spec).iter().all(|s| *s == Status::Success));
    }

    #[test]
    fn nodes_outside_the_pods_node_affinity_are_not_counted() {
        // With nodeSelector zone=z1, only a (2) and b (1) count: min is 1, so b fits with skew 1.
        let mut spec = spread("kubernetes.io/hostname", 1, json!({}));
        spec["nodeSelector"] = json!({"zone": "z1"});
        let got = fits(spec);
        assert_eq!(got[0], unschedulable(REASON));
        assert_eq!(got[1], Status::Success);
    }
}
