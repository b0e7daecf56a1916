//! Resource lists (`corev1.ResourceList`) and the set arithmetic quota does on them
//! (k8s.io/apiserver/pkg/quota/v1/resources.go): add, subtract, mask, compare, print.

use super::quantity::Quantity;
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// Resource name → quantity, sorted by name (so printing is sorted, as Kubernetes sorts).
pub type ResourceList = BTreeMap<String, Quantity>;

/// Reads a JSON resource list; entries that are not quantities are skipped (validation refuses them).
pub fn from_json(v: Option<&Value>) -> ResourceList {
    let mut out = ResourceList::new();
    for (k, v) in v.and_then(Value::as_object).into_iter().flatten() {
        let q = match v {
            Value::String(s) => Quantity::parse(s),
            Value::Number(n) => Quantity::parse(&n.to_string()),
            _ => None,
        };
        if let Some(q) = q {
            out.insert(k.clone(), q);
        }
    }
    out
}

pub fn to_json(list: &ResourceList) -> Value {
    Value::Object(list.iter().map(|(k, q)| (k.clone(), Value::String(q.to_string()))).collect::<Map<_, _>>())
}

/// a + b, key by key (keys of either).
pub fn add(a: &ResourceList, b: &ResourceList) -> ResourceList {
    let mut out = a.clone();
    for (k, q) in b {
        out.entry(k.clone()).and_modify(|v| *v = v.plus(*q)).or_insert(*q);
    }
    out
}

/// a − b, never below zero per key (SubtractWithNonNegativeResult).
pub fn subtract_non_negative(a: &ResourceList, b: &ResourceList) -> ResourceList {
    let zero = Quantity::zero();
    let mut out = ResourceList::new();
    for (k, q) in a {
        let v = match b.get(k) {
            Some(o) => q.minus(*o),
            None => *q,
        };
        out.insert(k.clone(), if v.nanos < 0 { Quantity { nanos: 0, ..v } } else { v });
    }
    for k in b.keys().filter(|k| !a.contains_key(*k)) {
        out.insert(k.clone(), zero);
    }
    out
}

/// Only the entries whose names are in `names`.
pub fn mask<'a>(list: &ResourceList, names: impl IntoIterator<Item = &'a String>) -> ResourceList {
    let mut out = ResourceList::new();
    for n in names {
        if let Some(q) = list.get(n) {
            out.insert(n.clone(), *q);
        }
    }
    out
}

/// Whether every entry of `a` that `b` limits is within it, and the names that are not.
pub fn less_than_or_equal(a: &ResourceList, b: &ResourceList) -> (bool, Vec<String>) {
    let exceeded: Vec<String> =
        a.iter().filter(|(k, q)| b.get(*k).is_some_and(|limit| *q > limit)).map(|(k, _)| k.clone()).collect();
    (exceeded.is_empty(), exceeded)
}

pub fn remove_zeros(list: &ResourceList) -> ResourceList {
    list.iter().filter(|(_, q)| !q.is_zero()).map(|(k, q)| (k.clone(), *q)).collect()
}

/// Same names and amounts (quota.Equals).
pub fn equals(a: &ResourceList, b: &ResourceList) -> bool {
    a.len() == b.len() && a.iter().all(|(k, q)| b.get(k) == Some(q))
}

pub fn negative_names(list: &ResourceList) -> Vec<String> {
    list.iter().filter(|(_, q)| q.nanos < 0).map(|(k, _)| k.clone()).collect()
}

/// `cpu=500m,memory=1Gi`: sorted, as the admission messages print lists.
pub fn pretty_print(list: &ResourceList) -> String {
    list.iter().map(|(k, q)| format!("{k}={q}")).collect::<Vec<_>>().join(",")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn list(v: Value) -> ResourceList {
        from_json(Some(&v))
    }

    #[test]
    fn adds_subtracts_and_compares_by_name() {
        let a = list(json!({"cpu": "500m", "pods": "1"}));
        let b = list(json!({"cpu": "600m", "memory": "1Gi"}));
        assert_eq!(pretty_print(&add(&a, &b)), "cpu=1100m,memory=1Gi,pods=1");
        assert_eq!(pretty_print(&subtract_non_negative(&a, &b)), "cpu=0,memory=0,pods=1");
        let (ok, exceeded) = less_than_or_equal(&add(&a, &b), &list(json!({"cpu": "1", "pods": "5"})));
        assert!(!ok);
        assert_eq!(exceeded, vec!["cpu".to_string()]);
        assert!(equals(&list(json!({"memory": "1024Mi"})), &list(json!({"memory": "1Gi"}))));
        assert_eq!(to_json(&list(json!({"memory": "1024Mi"}))), json!({"memory": "1Gi"}));
    }
}
