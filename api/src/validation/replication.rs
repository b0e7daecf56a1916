//! ReplicationController validation (`ValidateReplicationControllerSpec` and
//! `ValidatePodTemplateSpecForRC`): a plain-map selector, an optional pod template, no immutable
//! fields.

use serde_json::{Map, Value};

use super::apps::{validate_nonnegative, validate_workload_template};
use super::causes::{go_map, BadValue, Cause};
use super::json::obj;
use super::obj_or_null;

pub(super) fn validate_replication_controller_spec(spec: &Value, out: &mut Vec<Cause>) {
    validate_nonnegative(spec, "minReadySeconds", "spec", out);
    let selector = obj(spec, "selector").filter(|s| !s.is_empty());
    if selector.is_none() {
        out.push(Cause::required("spec.selector", ""));
    }
    validate_nonnegative(spec, "replicas", "spec", out);
    let Some(template) = spec.get("template").filter(|t| !t.is_null()) else {
        out.push(Cause::required("spec.template", ""));
        return;
    };
    let labels = obj(obj_or_null(template, "metadata"), "labels");
    if selector.is_some_and(|s| !selects(s, labels)) {
        out.push(Cause::invalid(
            "spec.template.metadata.labels",
            BadValue::Raw(go_map(labels)),
            "`selector` does not match template `labels`",
        ));
    }
    // The selector was checked above; the template's own rules are a ReplicaSet's.
    validate_workload_template(&Value::Null, template, "spec", &["Always"], Some("ReplicationController"), out);
}

/// `labels.Set(selector).AsSelector().Matches(labels)`: every selector pair is among the labels.
fn selects(selector: &Map<String, Value>, labels: Option<&Map<String, Value>>) -> bool {
    selector.iter().all(|(k, v)| labels.and_then(|l| l.get(k)).and_then(Value::as_str) == v.as_str())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::validation::test_support::{deployment, fields};
    use crate::validation::{invalid_message, validate_create, validate_status_update, validate_update};

    /// A Deployment's shape with a map selector and the restartPolicy defaulting gives.
    fn rc(selector: Value, labels: Value) -> Value {
        let mut rc = deployment(selector, labels);
        rc["spec"]["template"]["spec"]["restartPolicy"] = json!("Always");
        rc
    }

    #[test]
    fn a_matching_controller_is_valid_and_its_selector_may_change() {
        let old = rc(json!({"app": "web"}), json!({"app": "web", "v": "1"}));
        assert_eq!(validate_create("ReplicationController", &old), vec![]);
        let new = rc(json!({"app": "web", "v": "1"}), json!({"app": "web", "v": "1"}));
        assert_eq!(validate_update("ReplicationController", &new, &old), vec![], "no field is immutable");
    }

    #[test]
    fn the_selector_must_match_the_template_labels() {
        let c = rc(json!({"app": "web"}), json!({"app": "api", "tier": "x"}));
        let causes = validate_create("ReplicationController", &c);
        assert_eq!(
            invalid_message("ReplicationController", "web", &causes),
            "ReplicationController \"web\" is invalid: spec.template.metadata.labels: Invalid value: \
             map[string]string{\"app\":\"api\", \"tier\":\"x\"}: `selector` does not match template `labels`"
        );
    }

    #[test]
    fn selector_and_template_are_required() {
        let mut c = rc(json!({}), json!({"app": "web"}));
        c["spec"]["replicas"] = json!(-1);
        c["spec"]["minReadySeconds"] = json!(-5);
        c["spec"].as_object_mut().map(|s| s.remove("template"));
        let causes = validate_create("ReplicationController", &c);
        assert_eq!(fields(&causes), vec!["spec.minReadySeconds", "spec.selector", "spec.replicas", "spec.template"]);
        assert_eq!(causes[1], Cause::required("spec.selector", ""));
        assert_eq!(causes[2].message, "Invalid value: -1: must be greater than or equal to 0");
        assert_eq!(causes[3], Cause::required("spec.template", ""));
    }

    #[test]
    fn the_template_restarts_always_and_has_no_deadline() {
        let mut c = rc(json!({"app": "web"}), json!({"app": "web"}));
        c["spec"]["template"]["spec"]["restartPolicy"] = json!("OnFailure");
        c["spec"]["template"]["spec"]["activeDeadlineSeconds"] = json!(10);
        c["spec"]["template"]["spec"]["containers"][0]["image"] = json!("");
        let causes = validate_create("ReplicationController", &c);
        assert_eq!(
            fields(&causes),
            vec![
                "spec.template.spec.containers[0].image",
                "spec.template.spec.restartPolicy",
                "spec.template.spec.activeDeadlineSeconds"
            ]
        );
        assert_eq!(causes[1].message, "Unsupported value: \"OnFailure\": supported values: \"Always\"");
        assert_eq!(causes[2].message, "Forbidden: activeDeadlineSeconds in ReplicationController is not Supported");
    }

    #[test]
    fn status_counts_are_bounded_as_a_replica_sets() {
        let old = rc(json!({"app": "web"}), json!({"app": "web"}));
        let mut new = old.clone();
        new["status"] = json!({"replicas": 2, "readyReplicas": 3, "availableReplicas": 1, "observedGeneration": -1});
        let causes = validate_status_update("ReplicationController", &new, &old);
        assert_eq!(fields(&causes), vec!["status.observedGeneration", "status.readyReplicas"]);
        assert_eq!(causes[1].message, "Invalid value: 3: cannot be greater than status.replicas");
    }
}
