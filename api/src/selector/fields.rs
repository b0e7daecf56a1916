//! The selectable fields of each kind and how their values are read from an object.

use serde_json::Value;

/// Field labels a kind can be selected by, as the Kubernetes registries declare them.
pub fn supported_fields(kind: &str) -> Vec<&'static str> {
    let mut fields = vec!["metadata.name", "metadata.namespace"];
    fields.extend_from_slice(match kind {
        "Pod" => &[
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        ][..],
        "Event" => &[
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ],
        "Node" => &["spec.unschedulable"],
        "Secret" => &["type"],
        "Namespace" => &["status.phase"],
        "ReplicaSet" | "ReplicationController" => &["status.replicas"],
        "Job" => &["status.successful"],
        _ => &[],
    });
    fields
}

/// The value of a field label on an object, `None` when the field is absent or not supported
/// for `kind`. Typed fields report their Go zero value when absent (`spec.hostNetwork` is
/// `"false"`, `status.replicas` is `"0"`), so `spec.hostNetwork=false` selects such objects.
pub fn field_value(kind: &str, obj: &Value, field: &str) -> Option<String> {
    if !supported_fields(kind).contains(&field) {
        return None;
    }
    let at = |path: &str| lookup(obj, path).and_then(scalar);
    match (kind, field) {
        ("Pod", "spec.hostNetwork") | ("Node", "spec.unschedulable") => {
            Some(at(field).unwrap_or_else(|| "false".to_owned()))
        }
        ("ReplicaSet" | "ReplicationController", "status.replicas") => {
            Some(at(field).unwrap_or_else(|| "0".to_owned()))
        }
        // The field label names `status.succeeded`.
        ("Job", "status.successful") => Some(at("status.succeeded").unwrap_or_else(|| "0".to_owned())),
        ("Pod", "status.podIP") => lookup(obj, "status.podIPs")
            .and_then(|ips| ips.get(0))
            .and_then(|ip| ip.get("ip"))
            .and_then(scalar)
            .or_else(|| at("status.podIP")),
        ("Event", "source") => at("source.component").filter(|s| !s.is_empty()).or_else(|| at("reportingComponent")),
        _ => at(field),
    }
}

fn lookup<'a>(obj: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.').try_fold(obj, |v, key| v.get(key))
}

fn scalar(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn field_values_come_from_the_object() {
        let pod = json!({
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"nodeName": "n1"},
            "status": {"phase": "Running", "podIPs": [{"ip": "10.0.0.5"}]}
        });
        assert_eq!(field_value("Pod", &pod, "metadata.name").as_deref(), Some("web"));
        assert_eq!(field_value("Pod", &pod, "status.phase").as_deref(), Some("Running"));
        assert_eq!(field_value("Pod", &pod, "status.podIP").as_deref(), Some("10.0.0.5"));
        assert_eq!(field_value("Pod", &pod, "spec.hostNetwork").as_deref(), Some("false"));
        assert_eq!(field_value("Pod", &pod, "spec.schedulerName"), None);
        assert_eq!(field_value("Pod", &pod, "spec.containers"), None);
        let rs = json!({"status": {"replicas": 3}});
        assert_eq!(field_value("ReplicaSet", &rs, "status.replicas").as_deref(), Some("3"));
        assert_eq!(field_value("ReplicationController", &json!({}), "status.replicas").as_deref(), Some("0"));
        let job = json!({"status": {"succeeded": 5}});
        assert_eq!(field_value("Job", &job, "status.successful").as_deref(), Some("5"));
        assert_eq!(field_value("Job", &json!({}), "status.successful").as_deref(), Some("0"));
        let node = json!({"spec": {"unschedulable": true}});
        assert_eq!(field_value("Node", &node, "spec.unschedulable").as_deref(), Some("true"));
        let event = json!({"involvedObject": {"kind": "Pod"}, "reportingComponent": "kubelet"});
        assert_eq!(field_value("Event", &event, "involvedObject.kind").as_deref(), Some("Pod"));
        assert_eq!(field_value("Event", &event, "source").as_deref(), Some("kubelet"));
    }

    #[test]
    fn supported_fields_extend_the_metadata_fields_per_kind() {
        assert_eq!(supported_fields("ConfigMap"), vec!["metadata.name", "metadata.namespace"]);
        assert!(supported_fields("Pod").contains(&"status.phase"));
        assert!(supported_fields("Event").contains(&"involvedObject.uid"));
        assert!(supported_fields("Secret").contains(&"type"));
        assert!(!supported_fields("Service").contains(&"status.phase"));
    }
}
