//! Object builders shared by the validation tests.

use serde_json::{json, Value};

use super::Cause;

pub(super) fn pod(spec: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": "default"}, "spec": spec})
}

pub(super) fn fields(causes: &[Cause]) -> Vec<&str> {
    causes.iter().map(|c| c.field.as_str()).collect()
}

pub(super) fn deployment(selector: Value, labels: Value) -> Value {
    json!({
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {
            "replicas": 2,
            "selector": selector,
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "app", "image": "nginx"}]}
            }
        }
    })
}
