//! Which nodes a pod may run on, as Kubernetes' component-helpers decide it: node selector
//! requirements and terms (labels, and `metadata.name` fields), the pod's required node affinity,
//! and tolerations of taints. Shared by the scheduler, the DaemonSet controller and the taint
//! manager.

use k8s_openapi::api::core::v1::{NodeSelectorRequirement, NodeSelectorTerm, PodSpec, Taint, Toleration};
use std::collections::BTreeMap;

/// Whether one node selector requirement holds for a value (`None` = label absent).
pub fn requirement_matches(r: &NodeSelectorRequirement, got: Option<&str>) -> bool {
    let values = r.values.as_deref().unwrap_or_default();
    let int = |s: &str| s.trim().parse::<i64>().ok();
    match r.operator.as_str() {
        "In" => got.is_some_and(|v| values.iter().any(|x| x == v)),
        "NotIn" => got.is_none_or(|v| !values.iter().any(|x| x == v)),
        "Exists" => got.is_some(),
        "DoesNotExist" => got.is_none(),
        "Gt" | "Lt" => {
            let (Some(have), Some(want)) = (got.and_then(int), values.first().and_then(|v| int(v))) else {
                return false;
            };
            if r.operator == "Gt" {
                have > want
            } else {
                have < want
            }
        }
        _ => false,
    }
}

/// A NodeSelectorTerm: all its expressions (on labels) and fields (only `metadata.name`) hold.
/// A term with neither matches nothing, as in Kubernetes.
pub fn term_matches(term: &NodeSelectorTerm, node_name: &str, labels: &BTreeMap<String, String>) -> bool {
    let exprs = term.match_expressions.as_deref().unwrap_or_default();
    let fields = term.match_fields.as_deref().unwrap_or_default();
    if exprs.is_empty() && fields.is_empty() {
        return false;
    }
    exprs.iter().all(|r| requirement_matches(r, labels.get(&r.key).map(String::as_str)))
        && fields.iter().all(|r| r.key == "metadata.name" && requirement_matches(r, Some(node_name)))
}

/// The pod's nodeSelector and required node affinity (any of its terms) both hold for the node.
pub fn required_node_affinity_matches(spec: &PodSpec, node_name: &str, labels: &BTreeMap<String, String>) -> bool {
    if spec.node_selector.iter().flatten().any(|(k, v)| labels.get(k) != Some(v)) {
        return false;
    }
    let required = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|a| a.required_during_scheduling_ignored_during_execution.as_ref());
    required.is_none_or(|r| r.node_selector_terms.iter().any(|t| term_matches(t, node_name, labels)))
}

/// Kubernetes' Toleration.ToleratesTaint.
pub fn tolerates(t: &Toleration, taint: &Taint) -> bool {
    fn set(s: &Option<String>) -> Option<&str> {
        s.as_deref().filter(|s| !s.is_empty())
    }
    if set(&t.effect).is_some_and(|e| e != taint.effect) {
        return false;
    }
    if set(&t.key).is_some_and(|k| k != taint.key) {
        return false;
    }
    match t.operator.as_deref().unwrap_or("") {
        "" | "Equal" => t.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or(""),
        "Exists" => true,
        _ => false,
    }
}

/// The first taint with an effect `relevant` accepts that no toleration matches
/// (FindMatchingUntoleratedTaint).
pub fn untolerated<'a>(
    taints: &'a [Taint],
    tolerations: &[Toleration],
    relevant: impl Fn(&str) -> bool,
) -> Option<&'a Taint> {
    taints.iter().filter(|t| relevant(&t.effect)).find(|taint| !tolerations.iter().any(|t| tolerates(t, taint)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn node_selector_and_required_terms_both_hold() {
        let spec: PodSpec = serde_json::from_value(json!({"containers": [], "nodeSelector": {"disk": "ssd"},
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]}}}}))
        .expect("spec");
        assert!(required_node_affinity_matches(&spec, "n1", &labels(&[("disk", "ssd")])));
        assert!(!required_node_affinity_matches(&spec, "n2", &labels(&[("disk", "ssd")])));
        assert!(!required_node_affinity_matches(&spec, "n1", &labels(&[])));
        assert!(required_node_affinity_matches(&PodSpec::default(), "any", &labels(&[])));
    }

    #[test]
    fn tolerations_match_taints_by_key_effect_and_value() {
        let taint = Taint { key: "k".into(), value: Some("v".into()), effect: "NoSchedule".into(), time_added: None };
        let t = |j: serde_json::Value| -> Toleration { serde_json::from_value(j).expect("toleration") };
        assert!(tolerates(&t(json!({"key": "k", "operator": "Exists"})), &taint));
        assert!(tolerates(&t(json!({"key": "k", "value": "v"})), &taint));
        assert!(!tolerates(&t(json!({"key": "k", "value": "w"})), &taint));
        assert!(!tolerates(&t(json!({"key": "k", "operator": "Exists", "effect": "NoExecute"})), &taint));
        assert!(tolerates(&t(json!({"operator": "Exists"})), &taint));
        let taints = [taint.clone()];
        assert!(untolerated(&taints, &[], |e| e == "NoSchedule").is_some());
        assert!(untolerated(&taints, &[], |e| e == "NoExecute").is_none());
    }
}
