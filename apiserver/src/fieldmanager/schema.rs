//! How server-side apply sees each field: keyed lists, sets, atomic lists and maps — the same merge
//! keys the strategic merge patch uses, plus the defaulted `protocol` key of ports.

use super::fieldpath::PathElement;
use kaji_api::strategic::{list_strategy, ListStrategy};
use serde_json::Value;

/// A list's relationship to its items (Kubernetes' `x-kubernetes-list-type`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListType {
    /// Replaced whole; owned as one field.
    Atomic,
    /// Scalars merged as a set; items are `v:<value>`.
    Set,
    /// Objects merged by key fields (with their defaults); items are `k:{...}`.
    Map(Vec<(&'static str, Option<&'static str>)>),
}

/// The list type of the field at `names` (field names from the root, no list indices).
pub fn list_type(kind: &str, names: &[&str]) -> ListType {
    match list_strategy(kind, names) {
        ListStrategy::Replace => ListType::Atomic,
        ListStrategy::MergePrimitives => ListType::Set,
        // Kubernetes keys ports by number and protocol; the protocol defaults to TCP.
        ListStrategy::MergeByKey(k @ ("containerPort" | "port")) => {
            ListType::Map(vec![(k, None), ("protocol", Some("TCP"))])
        }
        ListStrategy::MergeByKey(k) => ListType::Map(vec![(k, None)]),
    }
}

/// Maps that are replaced whole (`+mapType=atomic`, `+structType=atomic`).
pub fn is_atomic_map(kind: &str, names: &[&str]) -> bool {
    match names {
        ["spec", "selector"] => {
            matches!(
                kind,
                "Service" | "ReplicationController" | "Deployment" | "ReplicaSet" | "DaemonSet" | "StatefulSet" | "Job"
            )
        }
        ["spec", "jobTemplate", "spec", "selector"] => kind == "CronJob",
        ["spec", "nodeSelector"] => kind == "Pod",
        [.., "template", "spec", "nodeSelector"] => true,
        _ => false,
    }
}

/// Server-owned fields no manager owns (Kubernetes strips them from every field set).
pub fn is_system_field(names: &[&str], field: &str) -> bool {
    match names {
        [] => matches!(field, "apiVersion" | "kind"),
        ["metadata"] => matches!(
            field,
            "name"
                | "namespace"
                | "uid"
                | "resourceVersion"
                | "generation"
                | "creationTimestamp"
                | "selfLink"
                | "managedFields"
                | "deletionTimestamp"
                | "deletionGracePeriodSeconds"
        ),
        _ => false,
    }
}

/// The path element naming `item` in a list of type `lt`.
pub fn item_element(lt: &ListType, item: &Value) -> Result<PathElement, String> {
    match lt {
        ListType::Atomic => Err("an atomic list has no item paths".into()),
        ListType::Set => Ok(PathElement::value(item)),
        ListType::Map(keys) => {
            let m = item.as_object().ok_or("associative list items must be objects")?;
            let mut fields = Vec::with_capacity(keys.len());
            for (k, default) in keys {
                match (m.get(*k).filter(|v| !v.is_null()), default) {
                    (Some(v), _) => fields.push((*k, v.clone())),
                    (None, Some(d)) => fields.push((*k, Value::from(*d))),
                    (None, None) => {
                        return Err(format!("associative list with keys has an element that omits key field {k:?}"))
                    }
                }
            }
            Ok(PathElement::key(fields))
        }
    }
}

/// The elements of a keyed or set list's items, refusing missing keys and duplicates.
pub fn item_elements(lt: &ListType, items: &[Value]) -> Result<Vec<PathElement>, String> {
    let mut seen = std::collections::BTreeSet::new();
    items
        .iter()
        .map(|item| {
            let pe = item_element(lt, item)?;
            if !seen.insert(pe.clone()) {
                return Err(format!("duplicate entries for key {}", super::fieldpath::display(&[pe])));
            }
            Ok(pe)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn container_ports_are_keyed_by_number_and_defaulted_protocol() {
        let lt = list_type("Pod", &["spec", "containers", "ports"]);
        let pe = item_element(&lt, &json!({"containerPort": 80})).expect("keyed");
        assert_eq!(pe, PathElement::Key(r#"{"containerPort":80,"protocol":"TCP"}"#.into()));
        assert_eq!(
            list_type("Deployment", &["spec", "template", "spec", "containers"]),
            ListType::Map(vec![("name", None)])
        );
        // A PodTemplate's template sits at the root, not under spec.
        assert_eq!(list_type("PodTemplate", &["template", "spec", "containers"]), ListType::Map(vec![("name", None)]));
        assert!(is_atomic_map("PodTemplate", &["template", "spec", "nodeSelector"]));
        assert_eq!(list_type("Pod", &["spec", "tolerations"]), ListType::Atomic);
        assert_eq!(list_type("Pod", &["metadata", "finalizers"]), ListType::Set);
    }

    #[test]
    fn missing_keys_and_duplicates_are_refused() {
        let lt = list_type("Pod", &["spec", "containers"]);
        assert!(item_element(&lt, &json!({"image": "x"})).is_err());
        assert!(item_element(&lt, &json!("web")).is_err());
        let dup = item_elements(&lt, &[json!({"name": "a"}), json!({"name": "a"})]).expect_err("duplicate");
        assert_eq!(dup, r#"duplicate entries for key [name="a"]"#);
    }
}
