//! Which updates may lower what quotas charge (kube-controller-manager's `DefaultUpdateFilter`).
//! Quota admission charges a creation before it is stored, so the quota controller recomputes a
//! namespace only when usage can fall: an object deleted, or one of these updates. Recomputing on
//! a creation would race the charge — the controller's cache may not hold the new object yet, and
//! writing its count would hand the charged unit back.

use super::usage::pod_counted;
use serde_json::Value;
use std::collections::BTreeSet;

/// Whether the update of `old` to `new` (objects of `group`/`resource`) may change their quota usage
/// in a way only a recount sees. `now` is seconds since the epoch.
pub fn on_update(group: &str, resource: &str, old: &Value, new: &Value, now: i64) -> bool {
    match (group, resource) {
        ("", "pods") => {
            resources_changed(old, new)
                || terminating(old) != terminating(new)
                || (pod_counted(old, now) && !pod_counted(new, now))
        }
        ("", "services") => quota_service_type(old) != quota_service_type(new),
        ("", "persistentvolumeclaims") => {
            old.pointer("/status/allocatedResources/storage") != new.pointer("/status/allocatedResources/storage")
                || attributes_classes(old) != attributes_classes(new)
        }
        _ => false,
    }
}

/// In-place resize: a container's reported `resources` changed.
fn resources_changed(old: &Value, new: &Value) -> bool {
    ["containerStatuses", "initContainerStatuses"].iter().any(|list| {
        let statuses = |pod: &Value| -> Vec<(String, Value)> {
            pod.pointer(&format!("/status/{list}"))
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .map(|s| {
                    let name = s.get("name").and_then(Value::as_str).unwrap_or("").to_string();
                    (name, s.get("resources").cloned().unwrap_or(Value::Null))
                })
                .collect()
        };
        let now = statuses(new);
        statuses(old).iter().any(|(name, was)| now.iter().any(|(n, is)| n == name && is != was))
    })
}

/// The Terminating scope: `activeDeadlineSeconds` set (IsTerminating).
fn terminating(pod: &Value) -> bool {
    pod.pointer("/spec/activeDeadlineSeconds").and_then(Value::as_i64).is_some_and(|d| d >= 0)
}

/// GetQuotaServiceType: NodePort and LoadBalancer are charged apart, every other type alike.
fn quota_service_type(svc: &Value) -> &str {
    let t = svc.pointer("/spec/type").and_then(Value::as_str).unwrap_or("");
    if matches!(t, "NodePort" | "LoadBalancer") {
        t
    } else {
        ""
    }
}

/// The VolumeAttributesClasses a claim refers to (getReferencedVolumeAttributesClassNames).
fn attributes_classes(pvc: &Value) -> BTreeSet<&str> {
    [
        "/spec/volumeAttributesClassName",
        "/status/currentVolumeAttributesClassName",
        "/status/modifyVolumeStatus/targetVolumeAttributesClassName",
    ]
    .iter()
    .filter_map(|p| pvc.pointer(p).and_then(Value::as_str))
    .filter(|n| !n.is_empty())
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const NOW: i64 = 1_000_000;

    #[test]
    fn creations_and_plain_updates_do_not_recount() {
        let svc = json!({"spec": {"type": "ClusterIP"}});
        let relabelled = json!({"metadata": {"labels": {"a": "b"}}, "spec": {"type": "ClusterIP"}});
        assert!(!on_update("", "services", &svc, &relabelled, NOW));
        let cm = json!({"data": {"a": "1"}});
        assert!(!on_update("", "configmaps", &cm, &json!({"data": {"a": "2"}}), NOW));
        assert!(!on_update("apps", "deployments", &cm, &cm, NOW));
    }

    #[test]
    fn a_service_type_change_recounts_only_between_charged_types() {
        let t = |t: &str| json!({"spec": {"type": t}});
        assert!(on_update("", "services", &t("ClusterIP"), &t("NodePort"), NOW));
        assert!(on_update("", "services", &t("LoadBalancer"), &t("NodePort"), NOW));
        assert!(!on_update("", "services", &t("ClusterIP"), &t("ExternalName"), NOW));
    }

    #[test]
    fn a_pod_recounts_when_it_ends_changes_scope_or_is_resized() {
        let running = json!({"spec": {}, "status": {"phase": "Running"}});
        let done = json!({"spec": {}, "status": {"phase": "Succeeded"}});
        assert!(on_update("", "pods", &running, &done, NOW));
        assert!(!on_update("", "pods", &done, &done, NOW));
        assert!(!on_update("", "pods", &running, &running, NOW));
        let deadline = json!({"spec": {"activeDeadlineSeconds": 5}, "status": {"phase": "Running"}});
        assert!(on_update("", "pods", &running, &deadline, NOW));
        // Past its deletion grace a pod is no longer charged.
        let gone = json!({"metadata": {"deletionTimestamp": "1970-01-01T00:00:10Z", "deletionGracePeriodSeconds": 30},
                          "spec": {}, "status": {"phase": "Running"}});
        assert!(on_update("", "pods", &running, &gone, NOW));
        let sized = |cpu: &str| {
            json!({"spec": {}, "status": {"phase": "Running",
            "containerStatuses": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]}})
        };
        assert!(on_update("", "pods", &sized("1"), &sized("2"), NOW));
        assert!(!on_update("", "pods", &sized("1"), &sized("1"), NOW));
    }

    #[test]
    fn a_claim_recounts_when_allocation_or_attributes_class_changes() {
        let alloc = |s: &str| json!({"spec": {}, "status": {"allocatedResources": {"storage": s}}});
        assert!(on_update("", "persistentvolumeclaims", &alloc("1Gi"), &alloc("2Gi"), NOW));
        assert!(!on_update("", "persistentvolumeclaims", &alloc("1Gi"), &alloc("1Gi"), NOW));
        let vac = |c: &str| json!({"spec": {"volumeAttributesClassName": c}});
        assert!(on_update("", "persistentvolumeclaims", &vac("gold"), &vac("silver"), NOW));
    }
}
