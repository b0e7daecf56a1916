//! Validation of API objects: field-level causes with Kubernetes' own field paths and wording.
//!
//! Objects are validated after defaulting (see `crate::defaults`). Fields that defaulting always
//! fills (restartPolicy, protocol, imagePullPolicy, ...) are checked only when present, so
//! validating an undefaulted object never reports a missing defaulted field.

pub(crate) mod apps;
mod batch;
pub(crate) mod causes;
mod certificates;
mod container;
pub(crate) mod json;
pub(crate) mod meta;
mod misc;
pub(crate) mod names;
pub(crate) mod pod;
mod pod_template;
mod pod_update;
pub(crate) mod policy;
pub(crate) mod quantity;
mod quota;
mod rbac;
mod replication;
mod service;
mod storage;
#[cfg(test)]
mod test_support;
pub(crate) mod webhook;
mod workloads;

pub use causes::{invalid_message, BadValue, Cause};
pub use certificates::{request_organizations, CsrWrite, USAGES as KEY_USAGES};
pub use meta::NameRule;
pub use names::{
    config_map_key_errors, dns1035_label_errors, dns1123_label_errors, dns1123_subdomain_errors, env_var_name_errors,
    label_value_errors, port_name_errors, qualified_name_errors,
};
pub use quantity::parse_quantity;

use std::net::IpAddr;

use serde_json::Value;

use apps::{label_selector_string, validate_deployment_spec, validate_replica_set_spec, validate_replica_status};
use batch::{validate_cron_job, validate_job, validate_job_status, validate_job_update};
use json::{arr, has, int, semantic_eq, st, strs};
use meta::{validate_finalizer_name, validate_meta_maps, validate_meta_update, validate_object_meta};
use misc::{
    validate_config_map, validate_endpoint_slice, validate_endpoints, validate_event, validate_immutable_data,
    validate_node, validate_node_update, validate_secret,
};
use names::{IMMUTABLE_MSG, IP_MSG, IS_NEGATIVE_MSG};
use pod::validate_pod_spec;
use pod_template::validate_pod_template;
use pod_update::{pod_container_count_change, validate_pod_spec_update, validate_pod_status_update};
use replication::validate_replication_controller_spec;
use service::{validate_service, validate_service_update};
use storage::{
    validate_claim, validate_claim_status, validate_claim_update, validate_storage_class,
    validate_storage_class_update, validate_volume, validate_volume_status, validate_volume_update,
};
use workloads::{
    validate_collision_count, validate_controller_revision, validate_controller_revision_update,
    validate_daemon_set_spec, validate_stateful_set_spec, validate_stateful_set_update,
};

#[derive(Clone, Copy, PartialEq, Eq)]
enum Op {
    Create,
    Update,
}

/// Full validation of a new object (metadata + spec). The caller already resolved
/// `generateName` and filled the namespace of namespaced kinds.
pub fn validate_create(kind: &str, obj: &Value) -> Vec<Cause> {
    validate_object(kind, obj, Op::Create)
}

/// [`validate_create`] of `new` plus what may not change relative to `old`.
///
/// Server-owned values the client may omit (uid, creationTimestamp, clusterIP) count as
/// unchanged when absent from `new`; the caller carries them over from `old`.
pub fn validate_update(kind: &str, new: &Value, old: &Value) -> Vec<Cause> {
    let mut out = Vec::new();
    validate_meta_update(new, old, &mut out);
    if kind == "Pod" {
        // ValidatePodUpdate stops early when containers are added or removed.
        if let Some(stop) = pod_container_count_change(new, old) {
            out.push(stop);
            return out;
        }
    }
    out.extend(validate_object(kind, new, Op::Update));
    if let Some((_, s)) = crate::kinds::strategy(kind) {
        s.validate_update(new, old, &mut out);
        return out;
    }
    let null = Value::Null;
    let new_spec = new.get("spec").unwrap_or(&null);
    let old_spec = old.get("spec").unwrap_or(&null);
    match kind {
        "Pod" => validate_pod_spec_update(new_spec, old_spec, &mut out),
        "Service" => validate_service_update(new_spec, old_spec, &mut out),
        "Deployment" | "ReplicaSet" | "DaemonSet" | "StatefulSet"
            if !semantic_eq(new_spec.get("selector"), old_spec.get("selector")) =>
        {
            let shown = label_selector_string(new_spec.get("selector"));
            out.push(Cause::invalid("spec.selector", BadValue::Raw(shown), IMMUTABLE_MSG));
        }
        "Secret" => {
            if st(new, "type") != st(old, "type") && has(old, "type") {
                out.push(Cause::invalid("type", st(new, "type"), IMMUTABLE_MSG));
            }
            validate_immutable_data(new, old, &["data"], &mut out);
        }
        "ConfigMap" => validate_immutable_data(new, old, &["data", "binaryData"], &mut out),
        "ResourceQuota" => quota::validate_resource_quota_update(new, old, &mut out),
        "EndpointSlice" if st(new, "addressType") != st(old, "addressType") => {
            out.push(Cause::invalid("addressType", st(new, "addressType"), IMMUTABLE_MSG));
        }
        "Node" => validate_node_update(new_spec, old_spec, &mut out),
        "RoleBinding" | "ClusterRoleBinding" => rbac::validate_binding_update(new, old, &mut out),
        "Job" => validate_job_update(new_spec, old_spec, &mut out),
        "ControllerRevision" => validate_controller_revision_update(new, old, &mut out),
        "PersistentVolume" => validate_volume_update(new_spec, old_spec, &mut out),
        "PersistentVolumeClaim" => validate_claim_update(new_spec, old_spec, &mut out),
        "StorageClass" => validate_storage_class_update(new, old, &mut out),
        "CertificateSigningRequest" => certificates::validate_update(new, old, CsrWrite::Main, &mut out),
        _ => {}
    }
    if kind == "StatefulSet" {
        validate_stateful_set_update(new_spec, old_spec, &mut out);
    }
    out
}

/// A write to the status subresource: metadata rules plus kind-specific status checks.
pub fn validate_status_update(kind: &str, new: &Value, old: &Value) -> Vec<Cause> {
    let mut out = Vec::new();
    validate_meta_update(new, old, &mut out);
    let meta = new.get("metadata").unwrap_or(&Value::Null);
    validate_meta_maps(meta, &mut out);
    let null = Value::Null;
    let status = new.get("status").unwrap_or(&null);
    if let Some((_, s)) = crate::kinds::strategy(kind) {
        s.validate_status(new, old, &mut out);
        return out;
    }
    match kind {
        "Pod" => validate_pod_status_update(new, old, &mut out),
        "ResourceQuota" => quota::validate_resource_quota_status(new, &mut out),
        "Namespace" => {
            let phase = st(status, "phase");
            if has(meta, "deletionTimestamp") {
                if phase != "Terminating" {
                    out.push(Cause::invalid(
                        "status.Phase",
                        phase,
                        "may only be 'Terminating' if `deletionTimestamp` is not empty",
                    ));
                }
            } else if phase != "Active" {
                out.push(Cause::invalid("status.Phase", phase, "may only be 'Active' if `deletionTimestamp` is empty"));
            }
        }
        "Deployment" => validate_replica_status(
            status,
            &[
                "replicas",
                "updatedReplicas",
                "readyReplicas",
                "availableReplicas",
                "unavailableReplicas",
                "observedGeneration",
                "collisionCount",
            ],
            &["updatedReplicas", "readyReplicas", "availableReplicas"],
            &mut out,
        ),
        // A ReplicationController's status has the same counts and bounds.
        "ReplicaSet" | "ReplicationController" => validate_replica_status(
            status,
            &["replicas", "fullyLabeledReplicas", "readyReplicas", "availableReplicas", "observedGeneration"],
            &["fullyLabeledReplicas", "readyReplicas", "availableReplicas"],
            &mut out,
        ),
        "DaemonSet" => {
            for key in [
                "currentNumberScheduled",
                "numberMisscheduled",
                "desiredNumberScheduled",
                "numberReady",
                "observedGeneration",
                "updatedNumberScheduled",
                "numberAvailable",
                "numberUnavailable",
                "collisionCount",
            ] {
                apps::validate_nonnegative(status, key, "status", &mut out);
            }
            validate_collision_count(new, old, &mut out);
        }
        "StatefulSet" => {
            validate_replica_status(
                status,
                &[
                    "replicas",
                    "readyReplicas",
                    "currentReplicas",
                    "updatedReplicas",
                    "availableReplicas",
                    "observedGeneration",
                    "collisionCount",
                ],
                &["readyReplicas", "currentReplicas", "updatedReplicas", "availableReplicas"],
                &mut out,
            );
            validate_collision_count(new, old, &mut out);
        }
        "Job" => validate_job_status(status, &mut out),
        "CertificateSigningRequest" => certificates::validate_update(new, old, CsrWrite::Status, &mut out),
        "CronJob" => {}
        "PersistentVolume" => validate_volume_status(status, &mut out),
        "PersistentVolumeClaim" => validate_claim_status(status, &mut out),
        "Service" => {
            for (i, ing) in arr(obj_or_null(status, "loadBalancer"), "ingress").iter().enumerate() {
                let ip = st(ing, "ip");
                if !ip.is_empty() && ip.parse::<IpAddr>().is_err() {
                    out.push(Cause::invalid(format!("status.loadBalancer.ingress[{i}].ip"), ip, IP_MSG));
                }
            }
        }
        _ => {}
    }
    out
}

/// A write to a CertificateSigningRequest's `/approval`: metadata rules, then the request's own
/// (which allow adding Approved or Denied).
pub fn validate_approval_update(new: &Value, old: &Value) -> Vec<Cause> {
    let mut out = Vec::new();
    validate_meta_update(new, old, &mut out);
    certificates::validate_update(new, old, CsrWrite::Approval, &mut out);
    out
}

fn obj_or_null<'a>(v: &'a Value, key: &str) -> &'a Value {
    static NULL: Value = Value::Null;
    v.get(key).unwrap_or(&NULL)
}

fn validate_object(kind: &str, obj: &Value, op: Op) -> Vec<Cause> {
    let mut out = Vec::new();
    let meta = obj_or_null(obj, "metadata");
    if let Some((info, s)) = crate::kinds::strategy(kind) {
        validate_object_meta(meta, Some(info.namespaced), s.name_rule(), &mut out);
        s.validate(obj, &mut out);
        return out;
    }
    let (namespaced, rule) = match kind {
        "Namespace" => (Some(false), NameRule::Label),
        "Node" | "PersistentVolume" | "StorageClass" => (Some(false), NameRule::Subdomain),
        "StatefulSet" => (Some(true), NameRule::Label),
        "Service" => (Some(true), NameRule::Dns1035),
        "Role" | "RoleBinding" => (Some(true), NameRule::PathSegment),
        "ClusterRole" | "ClusterRoleBinding" => (Some(false), NameRule::PathSegment),
        // "We don't care what you call your certificate requests" (ValidateCertificateRequestName).
        "CertificateSigningRequest" => (Some(false), NameRule::PathSegment),
        "Pod"
        | "Endpoints"
        | "Event"
        | "ConfigMap"
        | "Secret"
        | "ServiceAccount"
        | "Deployment"
        | "ReplicaSet"
        | "ReplicationController"
        | "PodTemplate"
        | "ResourceQuota"
        | "EndpointSlice"
        | "Lease"
        | "DaemonSet"
        | "ControllerRevision"
        | "Job"
        | "CronJob"
        | "PersistentVolumeClaim" => (Some(true), NameRule::Subdomain),
        _ => (None, NameRule::Subdomain),
    };
    validate_object_meta(meta, namespaced, rule, &mut out);
    let spec = obj_or_null(obj, "spec");
    match kind {
        "Pod" => {
            validate_pod_spec(spec, "spec", true, &mut out);
            if op == Op::Create && !arr(spec, "ephemeralContainers").is_empty() {
                out.push(Cause::forbidden("spec.ephemeralContainers", "cannot be set on create"));
            }
            if op == Op::Create && !st(spec, "nodeName").is_empty() && !arr(spec, "schedulingGates").is_empty() {
                out.push(Cause::forbidden(
                    "spec.nodeName",
                    "cannot be set until all schedulingGates have been cleared",
                ));
            }
        }
        "Service" => validate_service(obj, &mut out),
        "Deployment" => validate_deployment_spec(spec, &mut out),
        "ReplicaSet" => validate_replica_set_spec(spec, &mut out),
        "ReplicationController" => validate_replication_controller_spec(spec, &mut out),
        "PodTemplate" => validate_pod_template(obj, &mut out),
        "ResourceQuota" => quota::validate_resource_quota(obj, &mut out),
        "DaemonSet" => validate_daemon_set_spec(spec, &mut out),
        "StatefulSet" => validate_stateful_set_spec(spec, &mut out),
        "ControllerRevision" => validate_controller_revision(obj, &mut out),
        "Job" => validate_job(obj, &mut out),
        "CronJob" => validate_cron_job(obj, &mut out),
        "PersistentVolume" => validate_volume(obj, &mut out),
        "PersistentVolumeClaim" => validate_claim(obj, &mut out),
        "StorageClass" => validate_storage_class(obj, &mut out),
        // An update's rules depend on the endpoint and the stored object: validate_update.
        "CertificateSigningRequest" if op == Op::Create => certificates::validate_create(obj, &mut out),
        "Namespace" => {
            for f in strs(spec, "finalizers") {
                validate_finalizer_name(&f, "spec.finalizers", &mut out);
            }
        }
        "ConfigMap" => validate_config_map(obj, &mut out),
        "Secret" => validate_secret(obj, &mut out),
        "Endpoints" => validate_endpoints(obj, &mut out),
        "EndpointSlice" => validate_endpoint_slice(obj, &mut out),
        "Lease" => {
            if let Some(d) = int(spec, "leaseDurationSeconds") {
                if d <= 0 {
                    out.push(Cause::invalid("spec.leaseDurationSeconds", d, "must be greater than 0"));
                }
            }
            if let Some(t) = int(spec, "leaseTransitions") {
                if t < 0 {
                    out.push(Cause::invalid("spec.leaseTransitions", t, IS_NEGATIVE_MSG));
                }
            }
        }
        "Event" => validate_event(obj, &mut out),
        "Node" => validate_node(obj, &mut out),
        "Role" | "ClusterRole" => rbac::validate_role(obj, kind == "Role", &mut out),
        "RoleBinding" | "ClusterRoleBinding" => rbac::validate_binding(obj, kind == "RoleBinding", &mut out),
        _ => {}
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::validation::test_support::{deployment, fields, pod};

    #[test]
    fn a_valid_pod_has_no_causes() {
        let p = pod(json!({"containers": [{"name": "app", "image": "nginx:1.27", "ports": [{"containerPort": 80}]}]}));
        assert_eq!(validate_create("Pod", &p), vec![]);
    }

    #[test]
    fn a_pod_without_image_gives_the_kubernetes_message() {
        let p = pod(json!({"containers": [{"name": "app"}]}));
        let causes = validate_create("Pod", &p);
        assert_eq!(
            causes,
            vec![Cause {
                reason: "FieldValueRequired".into(),
                message: "Required value".into(),
                field: "spec.containers[0].image".into()
            }]
        );
        assert_eq!(
            invalid_message("Pod", "web", &causes),
            "Pod \"web\" is invalid: spec.containers[0].image: Required value"
        );
    }

    #[test]
    fn lease_duration_must_be_positive() {
        let l =
            json!({"metadata": {"name": "n1", "namespace": "kube-node-lease"}, "spec": {"leaseDurationSeconds": 0}});
        assert_eq!(
            validate_create("Lease", &l),
            vec![Cause::invalid("spec.leaseDurationSeconds", 0i64, "must be greater than 0")]
        );
    }

    #[test]
    fn status_updates_still_guard_metadata() {
        let old = json!({"metadata": {"name": "p", "namespace": "d"}, "status": {"replicas": 1}});
        let mut new = old.clone();
        new["metadata"]["name"] = json!("q");
        new["status"]["readyReplicas"] = json!(2);
        let causes = validate_status_update("ReplicaSet", &new, &old);
        assert_eq!(fields(&causes), vec!["metadata.name", "status.readyReplicas"]);
    }

    #[test]
    fn defaulted_objects_validate_cleanly() {
        let objects = [
            (
                "Pod",
                pod(json!({"containers": [{"name": "a", "image": "nginx", "ports": [{"containerPort": 80}],
                "readinessProbe": {"httpGet": {"port": 80}}}],
                "volumes": [{"name": "v"}]})),
            ),
            ("Deployment", deployment(json!({"matchLabels": {"app": "web"}}), json!({"app": "web"}))),
            (
                // The selector comes from the template's labels.
                "ReplicationController",
                json!({"metadata": {"name": "web", "namespace": "d"}, "spec": {"template": {
                    "metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "a", "image": "nginx"}]}}}}),
            ),
            (
                "PodTemplate",
                json!({"metadata": {"name": "web", "namespace": "d"}, "template": {
                    "spec": {"containers": [{"name": "a", "image": "nginx"}]}}}),
            ),
            (
                "Service",
                json!({"metadata": {"name": "web", "namespace": "d"},
                "spec": {"type": "NodePort", "selector": {"app": "web"}, "ports": [{"port": 80}]}}),
            ),
            ("Service", json!({"metadata": {"name": "db", "namespace": "d"}, "spec": {"clusterIP": "None"}})),
            (
                "ResourceQuota",
                json!({"metadata": {"name": "q", "namespace": "d"}, "spec": {"hard": {"pods": "5", "requests.cpu": "1"},
                "scopes": ["NotTerminating"]}}),
            ),
            ("Namespace", json!({"metadata": {"name": "team-a"}})),
            ("Secret", json!({"metadata": {"name": "s", "namespace": "d"}, "data": {"k": "dg=="}})),
            (
                "EndpointSlice",
                json!({"metadata": {"name": "s", "namespace": "d"}, "addressType": "IPv4",
                "endpoints": [{"addresses": ["10.0.0.1"]}], "ports": [{"port": 80}]}),
            ),
        ];
        for (kind, mut obj) in objects {
            crate::defaults::apply_defaults(kind, &mut obj);
            assert_eq!(validate_create(kind, &obj), vec![], "{kind}");
            assert_eq!(validate_update(kind, &obj, &obj), vec![], "{kind}");
        }
    }
}
