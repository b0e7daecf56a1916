//! Pod update rules: which spec fields may change, and pod status updates.

use std::fmt::Write as _;
use std::net::IpAddr;

use serde_json::{Map, Value};

use super::causes::{BadValue, Cause};
use super::json::{arr, has, int, semantic_eq, st};
use super::names::{inclusive_range_error, IMMUTABLE_MSG, IP_MSG};
use super::obj_or_null;

const UPDATABLE_POD_SPEC_FIELDS: &str = "`spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)";

pub(super) fn pod_container_count_change(new: &Value, old: &Value) -> Option<Cause> {
    let ns = obj_or_null(new, "spec");
    let os = obj_or_null(old, "spec");
    for key in ["containers", "initContainers"] {
        if arr(ns, key).len() != arr(os, key).len() {
            return Some(Cause::forbidden(format!("spec.{key}"), "pod updates may not add or remove containers"));
        }
    }
    None
}

pub(super) fn validate_pod_spec_update(new: &Value, old: &Value, out: &mut Vec<Cause>) {
    if let Some(ads) = int(new, "activeDeadlineSeconds") {
        if !(0..=i64::from(i32::MAX)).contains(&ads) {
            out.push(Cause::invalid("spec.activeDeadlineSeconds", ads, &inclusive_range_error(0, i64::from(i32::MAX))));
            return;
        }
        if let Some(old_ads) = int(old, "activeDeadlineSeconds") {
            if old_ads < ads {
                out.push(Cause::invalid(
                    "spec.activeDeadlineSeconds",
                    ads,
                    "must be less than or equal to previous value",
                ));
                return;
            }
        }
    } else if has(old, "activeDeadlineSeconds") {
        out.push(Cause::invalid(
            "spec.activeDeadlineSeconds",
            BadValue::Raw("null".to_string()),
            "must not update from a positive integer to nil value",
        ));
    }
    // Only additions to tolerations; an existing one may change only its tolerationSeconds.
    let new_tol = arr(new, "tolerations");
    for old_t in arr(old, "tolerations") {
        let found = new_tol
            .iter()
            .any(|n| ["key", "operator", "value", "effect"].iter().all(|k| semantic_eq(n.get(*k), old_t.get(*k))));
        if !found {
            out.push(Cause::forbidden(
                "spec.tolerations",
                "existing toleration can not be modified except its tolerationSeconds",
            ));
            break;
        }
    }
    // Everything else must be unchanged: munge the updatable fields and compare.
    let mut munged = new.clone();
    if let Some(m) = munged.as_object_mut() {
        for key in ["containers", "initContainers"] {
            if let Some(Value::Array(cs)) = m.get_mut(key) {
                for (i, c) in cs.iter_mut().enumerate() {
                    let old_image = arr(old, key).get(i).and_then(|o| o.get("image")).cloned();
                    if let Some(cm) = c.as_object_mut() {
                        match old_image {
                            Some(img) => cm.insert("image".to_string(), img),
                            None => cm.remove("image"),
                        };
                    }
                }
            }
        }
        for key in ["activeDeadlineSeconds", "tolerations", "schedulingGates", "terminationGracePeriodSeconds"] {
            match old.get(key) {
                Some(v) => m.insert(key.to_string(), v.clone()),
                None => m.remove(key),
            };
        }
        // spec.nodeName may be set once (binding); changing it afterwards is caught below.
        if st(old, "nodeName").is_empty() {
            match old.get("nodeName") {
                Some(v) => m.insert("nodeName".to_string(), v.clone()),
                None => m.remove("nodeName"),
            };
        }
    }
    if !semantic_eq(Some(&munged), Some(old)) {
        let diff = spec_diff(old, &munged);
        out.push(Cause::forbidden(
            "spec",
            &format!("pod updates may not change fields other than {UPDATABLE_POD_SPEC_FIELDS}\n{diff}"),
        ));
    }
}

/// A short diff of the top-level spec fields that differ (`cmp.Diff` stands here in Kubernetes).
fn spec_diff(old: &Value, new: &Value) -> String {
    let empty = Map::new();
    let o = old.as_object().unwrap_or(&empty);
    let n = new.as_object().unwrap_or(&empty);
    let keys: std::collections::BTreeSet<&String> = o.keys().chain(n.keys()).collect();
    let mut out = String::from("  core.PodSpec{\n");
    for k in keys {
        if semantic_eq(o.get(k), n.get(k)) {
            continue;
        }
        let show = |v: Option<&Value>| v.map_or_else(|| "null".to_string(), Value::to_string);
        let _ = writeln!(out, "-  {k}: {}", show(o.get(k)));
        let _ = writeln!(out, "+  {k}: {}", show(n.get(k)));
    }
    out.push_str("  }");
    out
}

pub(super) fn validate_pod_status_update(new: &Value, old: &Value, out: &mut Vec<Cause>) {
    let status = obj_or_null(new, "status");
    let old_status = obj_or_null(old, "status");
    let phases = ["Pending", "Running", "Succeeded", "Failed", "Unknown"];
    let phase = st(status, "phase");
    if !phase.is_empty() && !phases.contains(&phase) {
        out.push(Cause::not_supported("status.phase", phase, &phases));
    }
    if st(obj_or_null(new, "spec"), "nodeName") != st(obj_or_null(old, "spec"), "nodeName") {
        out.push(Cause::forbidden("status.nodeName", "may not be changed directly"));
    }
    let old_qos = st(old_status, "qosClass");
    if !old_qos.is_empty() && st(status, "qosClass") != old_qos {
        out.push(Cause::invalid("status.qosClass", st(status, "qosClass"), IMMUTABLE_MSG));
    }
    for key in ["podIPs", "hostIPs"] {
        for (i, ip) in arr(status, key).iter().enumerate() {
            let ip = st(ip, "ip");
            if ip.parse::<IpAddr>().is_err() {
                out.push(Cause::invalid(format!("status.{key}[{i}].ip"), ip, IP_MSG));
            }
        }
    }
    let restart = st(obj_or_null(old, "spec"), "restartPolicy");
    if restart != "Always" {
        let new_statuses = arr(status, "containerStatuses");
        for (i, os) in arr(old_status, "containerStatuses").iter().enumerate() {
            let Some(term) = os.get("state").and_then(|s| s.get("terminated")).filter(|t| !t.is_null()) else {
                continue;
            };
            if int(term, "exitCode").unwrap_or(0) != 0 && restart == "OnFailure" {
                continue;
            }
            let revived = new_statuses.iter().any(|ns| {
                st(ns, "name") == st(os, "name")
                    && ns.get("state").and_then(|s| s.get("terminated")).is_none_or(Value::is_null)
            });
            if revived {
                out.push(Cause::forbidden(
                    format!("status.containerStatuses[{i}].state"),
                    "may not be transitioned to non-terminated state",
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::validation::test_support::{fields, pod};
    use crate::validation::{validate_status_update, validate_update};

    #[test]
    fn pod_update_may_change_only_image_and_a_few_fields() {
        let old = pod(json!({"containers": [{"name": "a", "image": "x:1"}], "nodeName": "n1"}));
        let mut new = old.clone();
        new["spec"]["containers"][0]["image"] = json!("x:2");
        new["spec"]["activeDeadlineSeconds"] = json!(30);
        assert_eq!(validate_update("Pod", &new, &old), vec![]);

        new["spec"]["restartPolicy"] = json!("Never");
        let causes = validate_update("Pod", &new, &old);
        assert_eq!(fields(&causes), vec!["spec"]);
        assert!(causes[0].message.starts_with(
            "Forbidden: pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`"
        ));
        assert!(causes[0].message.contains("+  restartPolicy: \"Never\""));
    }

    #[test]
    fn pod_node_name_can_be_set_once_but_not_changed() {
        let old = pod(json!({"containers": [{"name": "a", "image": "x"}]}));
        let mut bound = old.clone();
        bound["spec"]["nodeName"] = json!("n1");
        assert_eq!(validate_update("Pod", &bound, &old), vec![]);
        let mut moved = bound.clone();
        moved["spec"]["nodeName"] = json!("n2");
        assert_eq!(fields(&validate_update("Pod", &moved, &bound)), vec!["spec"]);
    }

    #[test]
    fn pod_update_may_not_add_containers() {
        let old = pod(json!({"containers": [{"name": "a", "image": "x"}]}));
        let mut new = old.clone();
        new["spec"]["containers"] = json!([{"name": "a", "image": "x"}, {"name": "b", "image": "y"}]);
        let causes = validate_update("Pod", &new, &old);
        assert_eq!(causes, vec![Cause::forbidden("spec.containers", "pod updates may not add or remove containers")]);
    }

    #[test]
    fn tolerations_may_only_be_added() {
        let old = pod(json!({"containers": [{"name": "a", "image": "x"}],
            "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}]}));
        let mut new = old.clone();
        new["spec"]["tolerations"][0]["tolerationSeconds"] = json!(10);
        new["spec"]["tolerations"]
            .as_array_mut()
            .into_iter()
            .for_each(|a| a.push(json!({"key": "z", "operator": "Exists"})));
        assert_eq!(validate_update("Pod", &new, &old), vec![]);
        new["spec"]["tolerations"] = json!([]);
        assert_eq!(fields(&validate_update("Pod", &new, &old)), vec!["spec.tolerations"]);
    }

    #[test]
    fn pod_status_update_checks_phase_and_node_name() {
        let old = json!({"metadata": {"name": "p", "namespace": "d"}, "spec": {"nodeName": "n1", "restartPolicy": "Never"},
            "status": {"phase": "Running", "qosClass": "BestEffort",
                "containerStatuses": [{"name": "a", "state": {"terminated": {"exitCode": 0}}}]}});
        let mut new = old.clone();
        new["status"]["phase"] = json!("Done");
        new["spec"]["nodeName"] = json!("n2");
        new["status"]["containerStatuses"] = json!([{"name": "a", "state": {"running": {}}}]);
        let causes = validate_status_update("Pod", &new, &old);
        assert_eq!(fields(&causes), vec!["status.phase", "status.nodeName", "status.containerStatuses[0].state"]);
        assert_eq!(
            causes[0].message,
            "Unsupported value: \"Done\": supported values: \"Pending\", \"Running\", \"Succeeded\", \"Failed\", \"Unknown\""
        );
    }
}
