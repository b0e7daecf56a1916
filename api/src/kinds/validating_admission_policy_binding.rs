//! admissionregistration.k8s.io/v1 ValidatingAdmissionPolicyBinding: which policy applies, with
//! which parameters, to which requests, and what a violation does (Deny, Warn, Audit).

use k8s_openapi::api::admissionregistration::v1 as reg;
use serde_json::Value;

use super::{roundtrip, Strategy};
use crate::resources::ResourceInfo;
use crate::schema::SchemaError;
use crate::table::columns::{Column, AGE};
use crate::table::obj::Obj;
use crate::validation::policy::{default_binding, validate_binding};
use crate::validation::Cause;

pub struct ValidatingAdmissionPolicyBinding;

pub const INFO: ResourceInfo = crate::kind_info!(
    "admissionregistration.k8s.io",
    "ValidatingAdmissionPolicyBinding",
    "validatingadmissionpolicybindings",
    "validatingadmissionpolicybinding",
    false,
    &[],
    &[],
    &ValidatingAdmissionPolicyBinding
);

impl Strategy for ValidatingAdmissionPolicyBinding {
    fn normalize(&self, obj: &Value) -> Result<Value, SchemaError> {
        roundtrip::<reg::ValidatingAdmissionPolicyBinding>(obj)
    }

    fn defaults(&self, obj: &mut Value) {
        default_binding(obj);
    }

    fn validate(&self, obj: &Value, out: &mut Vec<Cause>) {
        validate_binding(obj, out);
    }

    fn tracks_generation(&self) -> bool {
        true
    }

    fn columns(&self) -> Vec<Column> {
        vec![
            ("PolicyName", "string", "", 0, "PolicyName indicates the name of the policy this binding refers to"),
            ("ParamRef", "string", "", 0, "ParamRef indicates the param resource this binding refers to"),
            AGE,
        ]
    }

    fn cells(&self, obj: Obj<'_>, age: &Value) -> Vec<Value> {
        let spec = obj.0.get("spec").unwrap_or(&Value::Null);
        let s = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        let param = match spec.get("paramRef").filter(|p| p.is_object()) {
            Some(pr) if !s(pr, "name").is_empty() => match s(pr, "namespace") {
                ns if ns.is_empty() => format!("*/{}", s(pr, "name")),
                ns => format!("{ns}/{}", s(pr, "name")),
            },
            Some(pr) if pr.get("selector").is_some_and(Value::is_object) => {
                crate::validation::apps::label_selector_string(pr.get("selector"))
            }
            _ => "<unset>".into(),
        };
        vec![Value::from(s(spec, "policyName")), Value::from(param), age.clone()]
    }
}

#[cfg(test)]
mod tests {
    use crate::kinds::test_support::{cells, create_causes};
    use serde_json::json;

    #[test]
    fn a_binding_prints_its_policy_and_parameters() {
        let kind = "ValidatingAdmissionPolicyBinding";
        let obj = json!({"metadata": {"name": "b"}, "spec": {"policyName": "replicas", "validationActions": ["Deny"],
            "paramRef": {"name": "limits", "parameterNotFoundAction": "Allow"}}});
        assert_eq!(create_causes(kind, &obj), vec![]);
        assert_eq!(&cells(kind, &obj)[1..3], &[json!("replicas"), json!("*/limits")]);
    }
}
