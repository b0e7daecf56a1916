//! PodTemplateSpec validation (`ValidatePodTemplateSpec`), shared by every workload's template,
//! and the core/v1 PodTemplate kind (`ValidatePodTemplate`, `ValidatePodTemplateUpdate`).

use serde_json::Value;

use super::causes::Cause;
use super::json::obj;
use super::meta::{validate_annotations, validate_labels};
use super::obj_or_null;
use super::pod::validate_pod_spec;

/// `ValidatePodTemplateSpec` of the template at `path` (`template`, `spec.template`): its labels
/// and annotations (reported under `<path>.labels`, as Kubernetes names them), then its pod spec
/// as a template's — any restartPolicy a pod may have, no ephemeral containers.
pub(super) fn validate_pod_template_spec(template: &Value, path: &str, out: &mut Vec<Cause>) {
    let meta = obj_or_null(template, "metadata");
    validate_labels(obj(meta, "labels"), &format!("{path}.labels"), out);
    validate_annotations(obj(meta, "annotations"), &format!("{path}.annotations"), out);
    validate_pod_spec(obj_or_null(template, "spec"), &format!("{path}.spec"), false, out);
}

/// A PodTemplate past its object meta: its `template`. Nothing in it is immutable, so an update
/// is checked as a create is.
pub(super) fn validate_pod_template(obj: &Value, out: &mut Vec<Cause>) {
    validate_pod_template_spec(obj_or_null(obj, "template"), "template", out);
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::validation::test_support::fields;
    use crate::validation::{invalid_message, validate_create, validate_update};

    fn template(spec: Value) -> Value {
        json!({"metadata": {"name": "nginx", "namespace": "default", "labels": {"podtemplate-static": "true"}},
               "template": {"metadata": {"labels": {"app": "web"}}, "spec": spec}})
    }

    fn nginx() -> Value {
        json!({"containers": [{"name": "nginx", "image": "nginx"}]})
    }

    #[test]
    fn a_template_with_a_container_is_valid_and_may_change_freely() {
        let old = template(nginx());
        assert_eq!(validate_create("PodTemplate", &old), vec![]);
        let mut new = old.clone();
        new["template"]["spec"]["containers"][0]["image"] = json!("nginx:2");
        new["template"]["metadata"]["labels"] = json!({"app": "api"});
        new["metadata"]["annotations"] = json!({"updated": "true"});
        assert_eq!(validate_update("PodTemplate", &new, &old), vec![], "no field of the template is immutable");
    }

    #[test]
    fn any_restart_policy_a_pod_may_have_is_allowed() {
        for rp in ["Always", "OnFailure", "Never"] {
            let mut spec = nginx();
            spec["restartPolicy"] = json!(rp);
            spec["activeDeadlineSeconds"] = json!(30);
            assert_eq!(validate_create("PodTemplate", &template(spec)), vec![], "{rp}");
        }
        let mut spec = nginx();
        spec["restartPolicy"] = json!("Sometimes");
        let causes = validate_create("PodTemplate", &template(spec));
        assert_eq!(
            invalid_message("PodTemplate", "nginx", &causes),
            "PodTemplate \"nginx\" is invalid: template.spec.restartPolicy: Unsupported value: \"Sometimes\": \
             supported values: \"Always\", \"OnFailure\", \"Never\""
        );
    }

    #[test]
    fn a_template_without_containers_is_refused_at_its_own_path() {
        let mut bare = template(nginx());
        bare.as_object_mut().map(|o| o.remove("template"));
        assert_eq!(
            invalid_message("PodTemplate", "nginx", &validate_create("PodTemplate", &bare)),
            "PodTemplate \"nginx\" is invalid: template.spec.containers: Required value"
        );
    }

    #[test]
    fn meta_labels_and_pod_spec_errors_carry_template_paths() {
        let mut t = template(json!({"containers": [{"name": "a", "image": ""}],
            "ephemeralContainers": [{"name": "e", "image": "busybox"}]}));
        t["metadata"]["name"] = json!("Not_A_Name");
        t["template"]["metadata"]["labels"] = json!({"bad key!": "x"});
        t["template"]["metadata"]["annotations"] = json!({"-bad": "x"});
        let causes = validate_create("PodTemplate", &t);
        assert_eq!(
            fields(&causes),
            vec![
                "metadata.name",
                "template.labels",
                "template.annotations",
                "template.spec.containers[0].image",
                "template.spec.ephemeralContainers"
            ]
        );
        assert_eq!(causes[4].message, "Forbidden: ephemeral containers not allowed in pod template");
        let mut cluster_wide = template(nginx());
        cluster_wide["metadata"].as_object_mut().map(|m| m.remove("namespace"));
        assert_eq!(fields(&validate_create("PodTemplate", &cluster_wide)), vec!["metadata.namespace"]);
    }
}
