//! admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy: CEL validations the apiserver runs
//! in-process on the writes a binding selects (the ValidatingAdmissionPolicy plugin).

use k8s_openapi::api::admissionregistration::v1 as reg;
use serde_json::Value;

use super::{roundtrip, Strategy};
use crate::resources::{ResourceInfo, Subresource};
use crate::schema::SchemaError;
use crate::table::columns::{Column, AGE};
use crate::table::obj::Obj;
use crate::validation::policy::{default_policy, validate_policy};
use crate::validation::Cause;

pub struct ValidatingAdmissionPolicy;

pub const INFO: ResourceInfo = crate::kind_info!(
    "admissionregistration.k8s.io",
    "ValidatingAdmissionPolicy",
    "validatingadmissionpolicies",
    "validatingadmissionpolicy",
    false,
    &[],
    &[Subresource::Status],
    &ValidatingAdmissionPolicy
);

impl Strategy for ValidatingAdmissionPolicy {
    fn normalize(&self, obj: &Value) -> Result<Value, SchemaError> {
        roundtrip::<reg::ValidatingAdmissionPolicy>(obj)
    }

    fn defaults(&self, obj: &mut Value) {
        default_policy(obj);
    }

    fn validate(&self, obj: &Value, out: &mut Vec<Cause>) {
        validate_policy(obj, out);
    }

    fn resets_status_on_create(&self) -> bool {
        true
    }

    fn tracks_generation(&self) -> bool {
        true
    }

    fn columns(&self) -> Vec<Column> {
        vec![
            (
                "Validations",
                "integer",
                "",
                0,
                "Validations indicates the number of validation rules defined in this configuration",
            ),
            (
                "ParamKind",
                "string",
                "",
                0,
                "ParamKind specifies the kind of resources used to parameterize this policy",
            ),
            AGE,
        ]
    }

    fn cells(&self, obj: Obj<'_>, age: &Value) -> Vec<Value> {
        let spec = obj.0.get("spec").unwrap_or(&Value::Null);
        let n = spec.get("validations").and_then(Value::as_array).map_or(0, Vec::len);
        let param = match spec.get("paramKind").filter(|p| p.is_object()) {
            Some(p) => format!(
                "{}/{}",
                p.get("apiVersion").and_then(Value::as_str).unwrap_or(""),
                p.get("kind").and_then(Value::as_str).unwrap_or("")
            ),
            None => "<unset>".into(),
        };
        vec![Value::from(n as i64), Value::from(param), age.clone()]
    }
}

#[cfg(test)]
mod tests {
    use crate::kinds::test_support::{cells, create_causes, defaulted};
    use serde_json::json;

    #[test]
    fn a_policy_is_defaulted_validated_and_printed() {
        let kind = "ValidatingAdmissionPolicy";
        let obj = json!({"metadata": {"name": "replicas"}, "spec": {
            "matchConstraints": {"resourceRules": [{"operations": ["CREATE"], "apiGroups": ["apps"], "apiVersions": ["v1"], "resources": ["deployments"]}]},
            "validations": [{"expression": "object.spec.replicas > 1"}]}});
        assert_eq!(create_causes(kind, &obj), vec![]);
        let stored = defaulted(kind, obj);
        assert_eq!(stored["spec"]["matchConstraints"]["matchPolicy"], "Equivalent");
        assert_eq!(&cells(kind, &stored)[1..3], &[json!(1), json!("<unset>")]);
    }
}
