//! Defaulting: the fields the Kubernetes apiserver fills in on create and update, applied in place.
//!
//! Covers `pkg/apis/core/v1/defaults.go`, `pkg/apis/apps/v1/defaults.go`, the discovery defaults,
//! and what the ServiceAccount, Priority and DefaultTolerationSeconds admission plugins and the
//! pod/namespace/service registry strategies add. A value the user set is never replaced; like
//! Go, an empty string counts as unset.

pub(crate) mod json;
mod objects;
mod pod;
mod storage;
#[cfg(test)]
mod test_support;
mod workloads;

use serde_json::{json, Value};

use json::{child, default_str, default_value, is_unset, items, with_map};
use objects::{default_deployment, default_namespace, default_service};
use pod::{default_pod, default_template};
use storage::{default_persistent_volume, default_persistent_volume_claim, default_storage_class};
use workloads::{
    default_cron_job, default_daemon_set, default_job, default_replication_controller, default_stateful_set,
};
pub use workloads::{JOB_NAME_LABEL, JOB_UID_LABEL, LEGACY_JOB_NAME_LABEL, LEGACY_JOB_UID_LABEL};

/// Apply Kubernetes defaulting in place (what the real apiserver adds on create and update).
/// Never removes user values.
pub fn apply_defaults(kind: &str, obj: &mut Value) {
    // Decoding into Kubernetes' Go types gives every object its spec and status structs.
    if let Some(m) = obj.as_object_mut() {
        for (part, zero) in crate::schema::zero_parts(kind) {
            if m.get(*part).is_none_or(Value::is_null) {
                m.insert((*part).to_string(), zero.clone());
            }
        }
    }
    if let Some((_, s)) = crate::kinds::strategy(kind) {
        s.defaults(obj);
        return;
    }
    match kind {
        "Pod" => default_pod(obj),
        "Deployment" => default_deployment(obj),
        "ReplicaSet" => {
            if let Some(spec) = child(obj, "spec") {
                default_value(spec, "replicas", json!(1));
                default_template(spec);
            }
        }
        "ReplicationController" => default_replication_controller(obj),
        // SetObjectDefaults_PodTemplate: the template is a struct, not a pointer, so its pod spec
        // is always defaulted, as a ReplicaSet's is.
        "PodTemplate" => with_map(obj, default_template),
        "DaemonSet" => default_daemon_set(obj),
        "StatefulSet" => default_stateful_set(obj),
        "Job" => default_job(obj),
        "CronJob" => default_cron_job(obj),
        "PersistentVolume" => default_persistent_volume(obj),
        "PersistentVolumeClaim" => default_persistent_volume_claim(obj),
        "StorageClass" => default_storage_class(obj),
        "Service" => default_service(obj),
        "Namespace" => default_namespace(obj),
        "Secret" => {
            if let Some(m) = obj.as_object_mut() {
                default_str(m, "type", "Opaque");
                merge_string_data(m);
            }
        }
        "Endpoints" => {
            for subset in items(obj, "subsets") {
                for port in items(subset, "ports") {
                    with_map(port, |m| default_str(m, "protocol", "TCP"));
                }
            }
        }
        "EndpointSlice" => {
            for port in items(obj, "ports") {
                with_map(port, |m| {
                    default_str(m, "protocol", "TCP");
                    default_value(m, "name", json!(""));
                });
            }
        }
        "Node" => {
            if let Some(status) = child(obj, "status") {
                if is_unset(status.get("allocatable")) {
                    if let Some(cap) = status.get("capacity").filter(|c| !c.is_null()).cloned() {
                        status.insert("allocatable".to_string(), cap);
                    }
                }
            }
        }
        "RoleBinding" | "ClusterRoleBinding" => default_binding(obj),
        _ => {}
    }
}

/// rbac/v1 `SetDefaults_{Cluster,}RoleBinding` and `SetDefaults_Subject`: the RBAC group on the
/// role reference and on User and Group subjects.
fn default_binding(obj: &mut Value) {
    const RBAC: &str = "rbac.authorization.k8s.io";
    if let Some(role_ref) = child(obj, "roleRef") {
        default_str(role_ref, "apiGroup", RBAC);
    }
    for subject in items(obj, "subjects") {
        with_map(subject, |m| {
            if matches!(m.get("kind").and_then(Value::as_str), Some("User" | "Group")) {
                default_str(m, "apiGroup", RBAC);
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::defaults::test_support::defaulted;

    #[test]
    fn every_object_carries_the_spec_and_status_structs_of_its_kind() {
        assert_eq!(defaulted("Deployment", json!({"spec": {"replicas": 2}}))["status"], json!({}));
        assert_eq!(defaulted("ReplicaSet", json!({"spec": {}}))["status"], json!({"replicas": 0}));
        assert_eq!(defaulted("ReplicationController", json!({}))["status"], json!({"replicas": 0}));
        let node = defaulted("Node", json!({"metadata": {"name": "n"}, "status": null}));
        assert_eq!((&node["spec"], &node["status"]), (&json!({}), &json!({})));
        let kept = defaulted("Deployment", json!({"status": {"replicas": 3}}));
        assert_eq!(kept["status"], json!({"replicas": 3}), "a status that is there is kept");
        assert!(defaulted("ConfigMap", json!({"data": {}})).get("status").is_none());
    }

    #[test]
    fn secret_endpoints_and_slices_get_their_defaults() {
        assert_eq!(defaulted("Secret", json!({}))["type"], "Opaque");
        let ep = defaulted("Endpoints", json!({"subsets": [{"ports": [{"port": 80}]}]}));
        assert_eq!(ep["subsets"][0]["ports"][0]["protocol"], "TCP");
        let es = defaulted("EndpointSlice", json!({"ports": [{"port": 80}]}));
        assert_eq!(es["ports"][0], json!({"port": 80, "protocol": "TCP", "name": ""}));
    }

    #[test]
    fn bindings_get_the_rbac_group_on_their_role_and_user_subjects() {
        let b = defaulted(
            "RoleBinding",
            json!({"roleRef": {"kind": "Role", "name": "r"},
                   "subjects": [{"kind": "User", "name": "u"}, {"kind": "ServiceAccount", "name": "default"}]}),
        );
        assert_eq!(b["roleRef"]["apiGroup"], "rbac.authorization.k8s.io");
        assert_eq!(b["subjects"][0]["apiGroup"], "rbac.authorization.k8s.io");
        assert!(b["subjects"][1].get("apiGroup").is_none());
    }

    #[test]
    fn defaulting_survives_wrong_shapes() {
        for kind in [
            "Pod",
            "Deployment",
            "ReplicaSet",
            "ReplicationController",
            "PodTemplate",
            "Service",
            "Namespace",
            "Secret",
            "Endpoints",
            "EndpointSlice",
            "Node",
            "RoleBinding",
            "DaemonSet",
            "StatefulSet",
            "Job",
            "CronJob",
            "PersistentVolume",
            "PersistentVolumeClaim",
            "StorageClass",
        ] {
            let mut v = json!("not an object");
            apply_defaults(kind, &mut v);
            assert_eq!(v, json!("not an object"));
            let mut v = json!({"spec": 5, "status": [], "ports": "x", "subsets": 1});
            apply_defaults(kind, &mut v);
        }
    }
}

/// A Secret's write-only `stringData` goes into `data`, base64-encoded, each key overwriting the
/// same key of `data`, and is not kept — Kubernetes' v1 → internal conversion of a Secret.
fn merge_string_data(secret: &mut serde_json::Map<String, Value>) {
    use base64::Engine as _;
    let Some(Value::Object(string_data)) = secret.remove("stringData") else { return };
    let data = secret.entry("data").or_insert_with(|| json!({}));
    if !data.is_object() {
        *data = json!({});
    }
    if let Some(data) = data.as_object_mut() {
        for (k, v) in string_data {
            let text = v.as_str().unwrap_or_default();
            data.insert(k, json!(base64::engine::general_purpose::STANDARD.encode(text)));
        }
    }
}

#[cfg(test)]
mod string_data_tests {
    use super::*;

    #[test]
    fn string_data_is_merged_into_data_and_dropped() {
        let mut s = json!({"metadata": {"name": "s"}, "data": {"a": "MQ==", "b": "Mg=="}, "stringData": {"b": "two", "c": "3"}});
        apply_defaults("Secret", &mut s);
        assert_eq!(s["data"], json!({"a": "MQ==", "b": "dHdv", "c": "Mw=="}));
        assert!(s.get("stringData").is_none());
        assert_eq!(s["type"], "Opaque");
        let mut only = json!({"metadata": {"name": "s"}, "stringData": {"k": "v"}});
        apply_defaults("Secret", &mut only);
        assert_eq!(only["data"], json!({"k": "dg=="}));
    }
}
