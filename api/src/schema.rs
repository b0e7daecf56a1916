//! Type-checks an object against its k8s-openapi schema and finds fields the schema does not know.

use k8s_openapi::api::{
    apps, authentication, authorization, batch, certificates, coordination, core, discovery, rbac, storage,
};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::OnceLock;

/// What decoding an object against its schema found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchemaError {
    /// The JSON does not fit the kind's types (a string where a number belongs...).
    #[error("{0}")]
    Decode(String),
    /// The kind is not one this crate has a schema for.
    #[error("no schema for kind {0:?}")]
    UnknownKind(String),
}

pub(crate) fn roundtrip<T: serde::de::DeserializeOwned + serde::Serialize>(v: &Value) -> Result<Value, SchemaError> {
    let typed: T = serde_json::from_value(v.clone()).map_err(|e| SchemaError::Decode(e.to_string()))?;
    serde_json::to_value(&typed).map_err(|e| SchemaError::Decode(e.to_string()))
}

/// Decode `obj` as `kind` and re-encode it: the result holds exactly the fields the schema knows.
pub fn normalize(kind: &str, obj: &Value) -> Result<Value, SchemaError> {
    if let Some((_, s)) = crate::kinds::strategy(kind) {
        return s.normalize(obj);
    }
    match kind {
        "Namespace" => roundtrip::<core::v1::Namespace>(obj),
        "Pod" => roundtrip::<core::v1::Pod>(obj),
        "Node" => roundtrip::<core::v1::Node>(obj),
        "Service" => roundtrip::<core::v1::Service>(obj),
        "Endpoints" => roundtrip::<core::v1::Endpoints>(obj),
        "Event" => roundtrip::<core::v1::Event>(obj),
        "ConfigMap" => roundtrip::<core::v1::ConfigMap>(obj),
        "Secret" => roundtrip::<core::v1::Secret>(obj),
        "ServiceAccount" => roundtrip::<core::v1::ServiceAccount>(obj),
        "PersistentVolume" => roundtrip::<core::v1::PersistentVolume>(obj),
        "PersistentVolumeClaim" => roundtrip::<core::v1::PersistentVolumeClaim>(obj),
        "PodTemplate" => roundtrip::<core::v1::PodTemplate>(obj),
        "ResourceQuota" => roundtrip::<core::v1::ResourceQuota>(obj),
        "ReplicationController" => roundtrip::<core::v1::ReplicationController>(obj),
        "Deployment" => roundtrip::<apps::v1::Deployment>(obj),
        "ReplicaSet" => roundtrip::<apps::v1::ReplicaSet>(obj),
        "DaemonSet" => roundtrip::<apps::v1::DaemonSet>(obj),
        "StatefulSet" => roundtrip::<apps::v1::StatefulSet>(obj),
        "ControllerRevision" => roundtrip::<apps::v1::ControllerRevision>(obj),
        "Job" => roundtrip::<batch::v1::Job>(obj),
        "CronJob" => roundtrip::<batch::v1::CronJob>(obj),
        "StorageClass" => roundtrip::<storage::v1::StorageClass>(obj),
        "CertificateSigningRequest" => roundtrip::<certificates::v1::CertificateSigningRequest>(obj),
        "EndpointSlice" => roundtrip::<discovery::v1::EndpointSlice>(obj),
        "Lease" => roundtrip::<coordination::v1::Lease>(obj),
        "ClusterRole" => roundtrip::<rbac::v1::ClusterRole>(obj),
        "ClusterRoleBinding" => roundtrip::<rbac::v1::ClusterRoleBinding>(obj),
        "Role" => roundtrip::<rbac::v1::Role>(obj),
        "RoleBinding" => roundtrip::<rbac::v1::RoleBinding>(obj),
        "SelfSubjectAccessReview" => roundtrip::<authorization::v1::SelfSubjectAccessReview>(obj),
        "SelfSubjectRulesReview" => roundtrip::<authorization::v1::SelfSubjectRulesReview>(obj),
        "SubjectAccessReview" => roundtrip::<authorization::v1::SubjectAccessReview>(obj),
        "LocalSubjectAccessReview" => roundtrip::<authorization::v1::LocalSubjectAccessReview>(obj),
        "SelfSubjectReview" => roundtrip::<authentication::v1::SelfSubjectReview>(obj),
        "TokenReview" => roundtrip::<authentication::v1::TokenReview>(obj),
        "TokenRequest" => roundtrip::<authentication::v1::TokenRequest>(obj),
        "Binding" => roundtrip::<core::v1::Binding>(obj),
        "Eviction" => roundtrip::<k8s_openapi::api::policy::v1::Eviction>(obj),
        "Scale" => roundtrip::<k8s_openapi::api::autoscaling::v1::Scale>(obj),
        "DeleteOptions" => roundtrip::<k8s_openapi::apimachinery::pkg::apis::meta::v1::DeleteOptions>(obj),
        other => Err(SchemaError::UnknownKind(other.to_string())),
    }
}

/// The top-level `spec` and `status` Kubernetes always writes for `kind`, as written when unset.
///
/// Kubernetes' Go types hold both as structs, not pointers, so every response carries them
/// (`"status": {}` on a Deployment just created) and typed clients read `obj.status.x` at once.
/// Each is the struct's zero value as Go encodes it: `{}`, or its required fields at zero (a
/// ReplicaSet's `{"replicas": 0}`) — found by decoding `{}` into the k8s-openapi type and
/// encoding it back, so a kind without such a field (ConfigMap, Lease's status) gets nothing.
pub fn zero_parts(kind: &str) -> &'static [(&'static str, Value)] {
    static PARTS: OnceLock<HashMap<&'static str, Vec<(&'static str, Value)>>> = OnceLock::new();
    let parts = PARTS.get_or_init(|| {
        crate::resources::RESOURCES
            .iter()
            .map(|r| {
                let probe = serde_json::json!({"spec": {}, "status": {}});
                let known = normalize(r.kind, &probe).unwrap_or(Value::Null);
                let found = ["spec", "status"]
                    .into_iter()
                    .filter_map(|part| known.get(part).filter(|v| v.is_object()).map(|v| (part, v.clone())))
                    .collect();
                (r.kind, found)
            })
            .collect()
    });
    parts.get(kind).map(Vec::as_slice).unwrap_or(&[])
}

/// Paths (`spec.bogusField`, `spec.containers[0].foo`) present in `input` but unknown to the schema,
/// given `known` = `normalize(kind, input)`. Null-valued fields are not reported.
pub fn unknown_fields(input: &Value, known: &Value) -> Vec<String> {
    let mut out = Vec::new();
    walk(input, Some(known), "", &mut out);
    out
}

fn walk(input: &Value, known: Option<&Value>, path: &str, out: &mut Vec<String>) {
    match (input, known) {
        (Value::Object(i), Some(Value::Object(k))) => {
            for (key, v) in i {
                let p = if path.is_empty() { key.clone() } else { format!("{path}.{key}") };
                match k.get(key) {
                    Some(kv) => walk(v, Some(kv), &p, out),
                    None if v.is_null() => {}
                    // Free-form maps (labels, data...) round-trip whole, so a missing key is unknown.
                    None => out.push(p),
                }
            }
        }
        (Value::Array(i), Some(Value::Array(k))) => {
            for (n, v) in i.iter().enumerate() {
                walk(v, k.get(n), &format!("{path}[{n}]"), out);
            }
        }
        _ => {}
    }
}

/// Remove from `input` every field `unknown_fields` reports, keeping everything else verbatim.
pub fn strip_unknown(input: &mut Value, known: &Value) {
    match (input, known) {
        (Value::Object(i), Value::Object(k)) => {
            i.retain(|key, v| v.is_null() || k.contains_key(key));
            for (key, v) in i.iter_mut() {
                if let Some(kv) = k.get(key) {
                    strip_unknown(v, kv);
                }
            }
        }
        (Value::Array(i), Value::Array(k)) => {
            for (v, kv) in i.iter_mut().zip(k.iter()) {
                strip_unknown(v, kv);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reports_unknown_nested_fields_with_their_path() {
        let pod = json!({"apiVersion":"v1","kind":"Pod","metadata":{"name":"web","labels":{"a":"b"}},
            "spec":{"bogusField":1,"containers":[{"name":"c","image":"i","colour":"red"}]}});
        let known = normalize("Pod", &pod).expect("decodes");
        assert_eq!(unknown_fields(&pod, &known), vec!["spec.bogusField", "spec.containers[0].colour"]);
    }

    #[test]
    fn strip_keeps_known_fields_verbatim() {
        let mut pod = json!({"metadata":{"name":"web"},"spec":{"x":1,"containers":[{"name":"c","image":"i"}]}});
        let known = normalize("Pod", &pod).expect("decodes");
        strip_unknown(&mut pod, &known);
        assert_eq!(pod, json!({"metadata":{"name":"web"},"spec":{"containers":[{"name":"c","image":"i"}]}}));
    }

    #[test]
    fn spec_and_status_are_the_go_zero_values_of_their_structs() {
        let parts = |kind| zero_parts(kind).iter().map(|(p, v)| format!("{p}={v}")).collect::<Vec<_>>();
        assert_eq!(parts("Deployment"), ["spec={\"selector\":{},\"template\":{}}", "status={}"]);
        assert_eq!(parts("ReplicaSet")[1], "status={\"replicas\":0}");
        assert_eq!(parts("Node"), ["spec={}", "status={}"]);
        assert_eq!(parts("Lease"), ["spec={}"]);
        assert!(parts("ConfigMap").is_empty() && parts("Secret").is_empty() && parts("Event").is_empty());
        for r in crate::resources::RESOURCES {
            // Every served kind decodes: a kind missing from `normalize` would get no parts silently.
            assert!(normalize(r.kind, &serde_json::json!({})).is_ok(), "{} has no schema", r.kind);
        }
    }

    #[test]
    fn wrong_types_are_decode_errors() {
        let pod = json!({"metadata":{"name":"web"},"spec":{"containers":"nope"}});
        assert!(matches!(normalize("Pod", &pod), Err(SchemaError::Decode(_))));
    }
}
