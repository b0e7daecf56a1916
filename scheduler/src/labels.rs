//! Matching labels: metav1 LabelSelectors (pods) and NodeSelectorTerms (nodes).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use std::collections::BTreeMap;

pub type Labels = BTreeMap<String, String>;

/// Whether `labels` match a metav1 LabelSelector. An empty selector matches everything; an
/// unknown operator matches nothing (the apiserver rejects those).
pub fn selector_matches(sel: &LabelSelector, labels: &Labels) -> bool {
    for (k, v) in sel.match_labels.iter().flatten() {
        if labels.get(k) != Some(v) {
            return false;
        }
    }
    sel.match_expressions.iter().flatten().all(|e| {
        let values = e.values.as_deref().unwrap_or_default();
        let got = labels.get(&e.key);
        match e.operator.as_str() {
            "In" => got.is_some_and(|v| values.contains(v)),
            "NotIn" => got.is_none_or(|v| !values.contains(v)),
            "Exists" => got.is_some(),
            "DoesNotExist" => got.is_none(),
            _ => false,
        }
    })
}

pub use kaji_api::scheduling::{requirement_matches, term_matches};

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{NodeSelectorRequirement, NodeSelectorTerm};
    use serde_json::json;

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn node_selector_operators() {
        let req = |op: &str, values: &[&str]| NodeSelectorRequirement {
            key: "k".into(),
            operator: op.into(),
            values: Some(values.iter().map(|s| s.to_string()).collect()),
        };
        let cases = [
            ("In", vec!["a", "b"], Some("b"), true),
            ("In", vec!["a"], None, false),
            ("NotIn", vec!["a"], Some("b"), true),
            ("NotIn", vec!["a"], None, true),
            ("NotIn", vec!["a"], Some("a"), false),
            ("Exists", vec![], Some(""), true),
            ("Exists", vec![], None, false),
            ("DoesNotExist", vec![], None, true),
            ("DoesNotExist", vec![], Some("x"), false),
            ("Gt", vec!["5"], Some("6"), true),
            ("Gt", vec!["5"], Some("5"), false),
            ("Gt", vec!["5"], Some("six"), false),
            ("Lt", vec!["5"], Some("-1"), true),
            ("Lt", vec!["5"], None, false),
            ("Bogus", vec![], Some("x"), false),
        ];
        for (op, values, got, want) in cases {
            assert_eq!(requirement_matches(&req(op, &values), got), want, "{op} {values:?} {got:?}");
        }
    }

    #[test]
    fn label_selectors_combine_match_labels_and_expressions() {
        let sel: LabelSelector = serde_json::from_value(json!({
            "matchLabels": {"app": "web"},
            "matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["db"]}],
        }))
        .expect("selector");
        assert!(selector_matches(&sel, &labels(&[("app", "web")])));
        assert!(selector_matches(&sel, &labels(&[("app", "web"), ("tier", "fe")])));
        assert!(!selector_matches(&sel, &labels(&[("app", "web"), ("tier", "db")])));
        assert!(!selector_matches(&sel, &labels(&[("app", "api")])));
        assert!(selector_matches(&LabelSelector::default(), &labels(&[])));
    }

    #[test]
    fn node_selector_terms_need_every_requirement_and_match_fields_by_name() {
        let term: NodeSelectorTerm = serde_json::from_value(json!({
            "matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}],
            "matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}],
        }))
        .expect("term");
        assert!(term_matches(&term, "n1", &labels(&[("zone", "a")])));
        assert!(!term_matches(&term, "n2", &labels(&[("zone", "a")])));
        assert!(!term_matches(&term, "n1", &labels(&[("zone", "b")])));
        assert!(!term_matches(&NodeSelectorTerm::default(), "n1", &labels(&[])));
    }
}
