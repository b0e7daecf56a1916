//! resource.k8s.io/v1 ResourceClaimTemplate: the claim each pod that names it gets.

use k8s_openapi::api::resource::v1 as dra;
use serde_json::Value;

use super::resource_claim::{default_requests, validate_claim_spec};
use super::{roundtrip, Strategy};
use crate::resources::ResourceInfo;
use crate::schema::SchemaError;
use crate::validation::names::IMMUTABLE_MSG;
use crate::validation::{BadValue, Cause};

pub struct ResourceClaimTemplate;

pub const INFO: ResourceInfo = crate::kind_info!(
    "resource.k8s.io",
    "ResourceClaimTemplate",
    "resourceclaimtemplates",
    "resourceclaimtemplate",
    true,
    &[],
    &[],
    &ResourceClaimTemplate
);

impl Strategy for ResourceClaimTemplate {
    fn normalize(&self, obj: &Value) -> Result<Value, SchemaError> {
        roundtrip::<dra::ResourceClaimTemplate>(obj)
    }

    fn defaults(&self, obj: &mut Value) {
        default_requests(obj.pointer_mut("/spec/spec/devices/requests"));
    }

    fn validate(&self, o: &Value, out: &mut Vec<Cause>) {
        let spec = o.pointer("/spec/spec").unwrap_or(&Value::Null);
        validate_claim_spec(spec, "spec.spec", out);
    }

    fn validate_update(&self, new: &Value, old: &Value, out: &mut Vec<Cause>) {
        if new.get("spec") != old.get("spec") {
            out.push(Cause::invalid(
                "spec",
                BadValue::Raw(new.get("spec").map_or("{}".into(), Value::to_string)),
                IMMUTABLE_MSG,
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::kinds::test_support::{create_causes, fields};

    #[test]
    fn the_template_holds_a_valid_claim_spec() {
        let t = |class: &str| {
            json!({"metadata": {"name": "t", "namespace": "d"},
            "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": class}}]}}}})
        };
        assert_eq!(create_causes("ResourceClaimTemplate", &t("gpu.example.com")), vec![]);
        assert_eq!(
            fields(&create_causes("ResourceClaimTemplate", &t(""))),
            ["spec.spec.devices.requests[0].exactly.deviceClassName"]
        );
    }
}
