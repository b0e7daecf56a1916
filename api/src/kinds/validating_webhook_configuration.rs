//! admissionregistration.k8s.io/v1 ValidatingWebhookConfiguration: HTTPS endpoints the apiserver
//! asks to accept or refuse writes (the ValidatingAdmissionWebhook plugin calls them).

use k8s_openapi::api::admissionregistration::v1 as reg;
use serde_json::Value;

use super::{roundtrip, Strategy};
use crate::resources::ResourceInfo;
use crate::schema::SchemaError;
use crate::table::columns::{Column, AGE};
use crate::table::obj::Obj;
use crate::validation::webhook::{default_webhooks, validate_webhooks};
use crate::validation::Cause;

pub struct ValidatingWebhookConfiguration;

pub const INFO: ResourceInfo = crate::kind_info!(
    "admissionregistration.k8s.io",
    "ValidatingWebhookConfiguration",
    "validatingwebhookconfigurations",
    "validatingwebhookconfiguration",
    false,
    &[],
    &[],
    &ValidatingWebhookConfiguration
);

impl Strategy for ValidatingWebhookConfiguration {
    fn normalize(&self, obj: &Value) -> Result<Value, SchemaError> {
        roundtrip::<reg::ValidatingWebhookConfiguration>(obj)
    }

    fn defaults(&self, obj: &mut Value) {
        default_webhooks(obj, false);
    }

    fn validate(&self, obj: &Value, out: &mut Vec<Cause>) {
        validate_webhooks(obj, false, out);
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

/// Name, Webhooks, Age: the printer both webhook configuration kinds share.
pub(crate) fn webhook_columns() -> Vec<Column> {
    vec![
        ("Webhooks", "integer", "", 0, "Webhooks indicates the number of webhooks registered in this configuration"),
        AGE,
    ]
}

pub(crate) fn webhook_cells(obj: Obj<'_>, age: &Value) -> Vec<Value> {
    let n = obj.0.get("webhooks").and_then(Value::as_array).map_or(0, Vec::len);
    vec![Value::from(n as i64), age.clone()]
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
        let kind = "ValidatingWebhookConfiguration";
        assert_eq!(create_causes(kind, &obj), vec![]);
        let stored = defaulted(kind, obj.clone());
        assert_eq!(stored["webhooks"][0]["failurePolicy"], "Fail");
        assert!(stored["webhooks"][0].get("reinvocationPolicy").is_none(), "{stored}");
        assert_eq!(cells(kind, &stored)[1], json!(1));
        let mut bad = obj;
        bad["webhooks"][0]["sideEffects"] = json!("Unknown");
        assert_eq!(fields(&create_causes(kind, &bad)), ["webhooks[0].sideEffects"]);
    }
}
