//! Client-side apply's decision, as a pure function: the JSON merge patch that makes the live
//! object match the manifest, given the manifest applied last time (kubectl's
//! `last-applied-configuration` annotation, so fields removed from the manifest are removed).

use serde_json::{Map, Value};

/// Annotation holding the last applied manifest; kubectl's, so both tools see each other's applies.
pub const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// The merge patch from `live` to `desired`: values that differ, `null` for fields `original`
/// had and `desired` dropped. Lists are replaced whole (merge patch has no list merging), but
/// only when they differ: a live list equal to the manifest's apart from fields the server
/// filled in (defaults) counts as equal. Empty when nothing needs to change.
pub fn three_way(original: Option<&Value>, desired: &Value, live: &Value) -> Map<String, Value> {
    match (desired.as_object(), live.as_object()) {
        (Some(d), Some(l)) => diff(original.and_then(Value::as_object), d, l),
        _ => Map::new(),
    }
}

fn diff(
    original: Option<&Map<String, Value>>,
    desired: &Map<String, Value>,
    live: &Map<String, Value>,
) -> Map<String, Value> {
    let mut patch = Map::new();
    for (k, d) in desired {
        match (d, live.get(k)) {
            (Value::Null, None) => {}
            (Value::Null, Some(_)) => {
                patch.insert(k.clone(), Value::Null);
            }
            (Value::Object(dm), Some(Value::Object(lm))) => {
                let om = original.and_then(|o| o.get(k)).and_then(Value::as_object);
                let sub = diff(om, dm, lm);
                if !sub.is_empty() {
                    patch.insert(k.clone(), Value::Object(sub));
                }
            }
            (d, Some(l)) if subset(d, l) => {}
            (d, _) => {
                patch.insert(k.clone(), d.clone());
            }
        }
    }
    for k in original.into_iter().flat_map(Map::keys) {
        if !desired.contains_key(k) && live.contains_key(k) {
            patch.insert(k.clone(), Value::Null);
        }
    }
    patch
}

/// Whether `live` holds everything `desired` says: maps may have more keys, lists must have
/// the same length with each item a subset, scalars must be equal.
pub fn subset(desired: &Value, live: &Value) -> bool {
    match (desired, live) {
        (Value::Object(d), Value::Object(l)) => d.iter().all(|(k, v)| match l.get(k) {
            Some(lv) => subset(v, lv),
            None => v.is_null(),
        }),
        (Value::Array(d), Value::Array(l)) => d.len() == l.len() && d.iter().zip(l).all(|(a, b)| subset(a, b)),
        (Value::Number(a), Value::Number(b)) => a.as_f64() == b.as_f64(),
        (a, b) => a == b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment(image: &str, env: Value) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
               "spec": {"replicas": 2, "template": {"spec": {"containers": [{"name": "web", "image": image, "env": env}]}}}})
    }

    /// `desired` as the server would store it: defaults filled in, server metadata added.
    fn defaulted(desired: &Value) -> Value {
        let mut live = desired.clone();
        live["metadata"]["uid"] = json!("u-1");
        live["metadata"]["resourceVersion"] = json!("42");
        live["spec"]["strategy"] = json!({"type": "RollingUpdate"});
        live["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"] = json!("IfNotPresent");
        live["status"] = json!({"replicas": 2});
        live
    }

    #[test]
    fn a_manifest_the_server_only_added_defaults_to_needs_no_patch() {
        let d = deployment("web:1", json!([{"name": "A", "value": "1"}]));
        assert!(three_way(Some(&d), &d, &defaulted(&d)).is_empty());
    }

    #[test]
    fn a_changed_image_replaces_the_container_list() {
        let old = deployment("web:1", json!([{"name": "A", "value": "1"}]));
        let new = deployment("web:2", json!([{"name": "A", "value": "1"}]));
        let patch = three_way(Some(&old), &new, &defaulted(&old));
        assert_eq!(
            Value::Object(patch),
            json!({"spec": {"template": {"spec": {"containers": new["spec"]["template"]["spec"]["containers"]}}}})
        );
    }

    #[test]
    fn a_field_dropped_from_the_manifest_is_removed_but_server_fields_stay() {
        let mut old = deployment("web:1", json!([]));
        old["metadata"]["labels"] = json!({"app": "web", "tier": "fe"});
        let mut new = old.clone();
        new["metadata"]["labels"] = json!({"app": "web"});
        new["spec"].as_object_mut().expect("spec").remove("replicas");
        let patch = three_way(Some(&old), &new, &defaulted(&old));
        assert_eq!(Value::Object(patch), json!({"metadata": {"labels": {"tier": null}}, "spec": {"replicas": null}}));
    }

    #[test]
    fn without_a_last_applied_manifest_nothing_is_removed() {
        let old = deployment("web:1", json!([]));
        let mut new = old.clone();
        new["spec"].as_object_mut().expect("spec").remove("replicas");
        assert!(three_way(None, &new, &defaulted(&old)).is_empty());
    }

    #[test]
    fn lists_of_different_length_or_content_are_not_subsets() {
        assert!(subset(&json!([{"a": 1}]), &json!([{"a": 1, "b": 2}])));
        assert!(!subset(&json!([{"a": 1}]), &json!([{"a": 1}, {"a": 2}])));
        assert!(!subset(&json!({"a": "1"}), &json!({"a": 1})));
        assert!(subset(&json!({"n": 1}), &json!({"n": 1.0})));
    }
}
