//! storage.k8s.io/v1 VolumeAttachment: the intent to attach a volume to a node (the attacher
//! reports the result in status).

use k8s_openapi::api::storage::v1 as storage;
use serde_json::{json, Value};

use super::csi_driver::driver_name_errors;
use super::{roundtrip, Strategy};
use crate::resources::{ResourceInfo, Subresource};
use crate::schema::SchemaError;
use crate::table::columns::{Column, AGE};
use crate::table::obj::Obj;
use crate::validation::json::{has, st};
use crate::validation::names::{dns1123_subdomain_errors, IMMUTABLE_MSG};
use crate::validation::{BadValue, Cause};

pub struct VolumeAttachment;

pub const INFO: ResourceInfo = crate::kind_info!(
    "storage.k8s.io",
    "VolumeAttachment",
    "volumeattachments",
    "volumeattachment",
    false,
    &[],
    &[Subresource::Status],
    &VolumeAttachment
);

impl Strategy for VolumeAttachment {
    fn normalize(&self, obj: &Value) -> Result<Value, SchemaError> {
        roundtrip::<storage::VolumeAttachment>(obj)
    }

    fn validate(&self, o: &Value, out: &mut Vec<Cause>) {
        let spec = o.get("spec").unwrap_or(&Value::Null);
        driver_name_errors(st(spec, "attacher"), "spec.attacher", out);
        let node = st(spec, "nodeName");
        if node.is_empty() {
            out.push(Cause::required("spec.nodeName", ""));
        } else {
            out.extend(dns1123_subdomain_errors(node).iter().map(|m| Cause::invalid("spec.nodeName", node, m)));
        }
        let source = spec.get("source").unwrap_or(&Value::Null);
        let pv = has(source, "persistentVolumeName");
        let inline = has(source, "inlineVolumeSpec");
        if pv == inline {
            out.push(Cause::required(
                "spec.source",
                "must specify exactly one of inlineVolumeSpec and persistentVolumeName",
            ));
        }
        if pv {
            let name = st(source, "persistentVolumeName");
            if name.is_empty() {
                out.push(Cause::required(
                    "spec.source.persistentVolumeName",
                    "must specify non empty persistentVolumeName",
                ));
            }
        }
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

    fn validate_status(&self, new: &Value, _old: &Value, out: &mut Vec<Cause>) {
        let status = new.get("status").unwrap_or(&Value::Null);
        for key in ["attachError", "detachError"] {
            if let Some(e) = status.get(key).filter(|e| !e.is_null()) {
                if st(e, "message").len() > 1024 {
                    out.push(Cause::too_long(format!("status.{key}.message"), 1024));
                }
            }
        }
    }

    fn resets_status_on_create(&self) -> bool {
        true
    }

    fn columns(&self) -> Vec<Column> {
        vec![
            ("Attacher", "string", "name", 0, "attacher indicates the name of the volume driver that MUST handle this request. This is the name returned by GetPluginName()."),
            ("PV", "string", "", 0, "persistentVolumeName represents the name of the persistent volume to attach."),
            ("Node", "string", "", 0, "nodeName represents the node that the volume should be attached to."),
            ("Attached", "boolean", "", 0, "attached indicates the volume is successfully attached. This field must only be set by the entity completing the attach operation, i.e. the external-attacher."),
            ("Attach Error", "string", "", 1, "message represents the error encountered during Attach or Detach operation. This string may be logged, so it should not contain sensitive information."),
            ("Detach Error", "string", "", 1, "message represents the error encountered during Attach or Detach operation. This string may be logged, so it should not contain sensitive information."),
            AGE,
        ]
    }

    fn cells(&self, o: Obj<'_>, age: &Value) -> Vec<Value> {
        let error = |key: &str| o.get(key).and_then(|e| e.get("message")).and_then(Value::as_str).unwrap_or("<none>");
        vec![
            json!(o.str("spec.attacher")),
            json!(o.str("spec.source.persistentVolumeName")),
            json!(o.str("spec.nodeName")),
            json!(o.bool("status.attached")),
            json!(error("status.attachError")),
            json!(error("status.detachError")),
            age.clone(),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kinds::test_support::{cells, create_causes, fields, update_causes};

    fn attachment(node: &str) -> Value {
        json!({"metadata": {"name": "va"}, "spec": {"attacher": "csi.io", "nodeName": node,
            "source": {"persistentVolumeName": "pv1"}}})
    }

    #[test]
    fn one_source_and_a_spec_that_never_changes() {
        assert_eq!(create_causes("VolumeAttachment", &attachment("n1")), vec![]);
        let neither =
            json!({"metadata": {"name": "va"}, "spec": {"attacher": "csi.io", "nodeName": "n1", "source": {}}});
        assert_eq!(fields(&create_causes("VolumeAttachment", &neither)), ["spec.source"]);
        assert_eq!(fields(&update_causes("VolumeAttachment", &attachment("n2"), &attachment("n1"))), ["spec"]);
        assert_eq!(
            cells("VolumeAttachment", &attachment("n1"))[..5],
            [json!("va"), json!("csi.io"), json!("pv1"), json!("n1"), json!(false)]
        );
    }
}
