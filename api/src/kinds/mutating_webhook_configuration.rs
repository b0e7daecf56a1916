//! admissionregistration.k8s.io/v1 MutatingWebhookConfiguration: HTTPS endpoints the apiserver
//! asks to change or refuse writes before they are validated (the MutatingAdmissionWebhook plugin).

use k8s_openapi::api::admissionregistration::v1 as reg;
use serde_json::Value;

use super::validating_webhook_configuration::{webhook_cells, webhook_columns};
use super::{roundtrip, Strategy};
use crate::resources::ResourceInfo;
use crate::schema::SchemaError;
use crate::table::columns::Column;
use crate::table::obj::Obj;
use crate::validation::webhook::{default_webhooks, validate_webhooks};
use crate::validation::Cause;

pub struct MutatingWebhookConfiguration;

pub const INFO: ResourceInfo = crate::kind_info!(
    "admissionregistration.k8s.io",
    "MutatingWebhookConfiguration",
    "mutatingwebhookconfigurations",
    "mutatingwebhookconfiguration",
    false,
    &[],
    &[],
    &MutatingWebhookConfiguration
);

impl Strategy for MutatingWebhookConfiguration {
    fn normalize(&self, obj: &Value) -> Result<Value, SchemaError> {
        roundtrip::<reg::MutatingWebhookConfiguration>(obj)
    }

    fn defaults(&self, obj: &mut Value) {
        default_webhooks(obj, true);
    }

    fn validate(&self, obj: &Value, out: &mut Vec<Cause>) {
        validate_webhooks(obj, true, out);
    }

    fn tracks_generation(&self) -> bool {
        true
    }

    fn columns(&self) -> Vec<Column> {
        webhook_columns()
    }

    fn cells(&self, obj: Obj<'_>, age: &Value) -> Vec<Value> {
        webhook_cells(obj, age)
    }
}

#[cfg(test)]
mod tests {
    use crate::kinds::test_support::{cells, create_causes, defaulted, fields};
    use serde_json::json;

    #[test]
    fn a_configuration_is_defaulted_validated_and_printed_with_its_webhook_count() {
        let hook = json!({"name": "a.b.c", "sideEffects": "None", "admissionReviewVersions": ["v1"],
            "clientConfig": {"url": "https://hook.example.com/check"}});
        let obj = json!({"metadata": {"name": "deny"}, "webhooks": [hook]});
        let kind = "MutatingWebhookConfiguration";
        assert_eq!(create_causes(kind, &obj), vec![]);
        let stored = defaulted(kind, obj.clone());
        assert_eq!(stored["webhooks"][0]["failurePolicy"], "Fail");
        assert_eq!(stored["webhooks"][0]["reinvocationPolicy"], "Never");
        assert_eq!(cells(kind, &stored)[1], json!(1));
        let mut bad = obj;
        bad["webhooks"][0]["sideEffects"] = json!("Unknown");
        assert_eq!(fields(&create_causes(kind, &bad)), ["webhooks[0].sideEffects"]);
    }
}
