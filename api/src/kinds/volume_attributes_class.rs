//! storage.k8s.io/v1 VolumeAttributesClass: mutable volume attributes a CSI driver applies.

use k8s_openapi::api::storage::v1 as storage;
use serde_json::{json, Value};

use super::csi_driver::driver_name_errors;
use super::{roundtrip, Strategy};
use crate::resources::ResourceInfo;
use crate::schema::SchemaError;
use crate::table::columns::{Column, AGE};
use crate::table::obj::Obj;
use crate::validation::json::{obj, st};
use crate::validation::names::IMMUTABLE_MSG;
use crate::validation::{BadValue, Cause};

pub struct VolumeAttributesClass;

pub const INFO: ResourceInfo = crate::kind_info!(
    "storage.k8s.io",
    "VolumeAttributesClass",
    "volumeattributesclasses",
    "volumeattributesclass",
    false,
    &["vac"],
    &[],
    &VolumeAttributesClass
);

const MAX_PARAMETERS: usize = 512;

impl Strategy for VolumeAttributesClass {
    fn normalize(&self, obj: &Value) -> Result<Value, SchemaError> {
        roundtrip::<storage::VolumeAttributesClass>(obj)
    }

    fn validate(&self, o: &Value, out: &mut Vec<Cause>) {
        driver_name_errors(st(o, "driverName"), "driverName", out);
        let params = obj(o, "parameters");
        if let Some(p) = params {
            if p.len() > MAX_PARAMETERS {
                out.push(Cause::too_many("parameters", p.len(), MAX_PARAMETERS));
            }
            if p.keys().any(String::is_empty) {
                out.push(Cause::invalid(
                    "parameters",
                    BadValue::Raw(Value::Object(p.clone()).to_string()),
                    "parameters must contain non-empty keys",
                ));
            }
        }
    }

    fn validate_update(&self, new: &Value, old: &Value, out: &mut Vec<Cause>) {
        if st(new, "driverName") != st(old, "driverName") {
            out.push(Cause::invalid("driverName", st(new, "driverName"), IMMUTABLE_MSG));
        }
        if obj(new, "parameters") != obj(old, "parameters") {
            let shown = new.get("parameters").map_or("map[]".into(), Value::to_string);
            out.push(Cause::invalid("parameters", BadValue::Raw(shown), IMMUTABLE_MSG));
        }
    }

    fn columns(&self) -> Vec<Column> {
        vec![("DriverName", "string", "", 0, "Name of the CSI driver This field is immutable."), AGE]
    }

    fn cells(&self, o: Obj<'_>, age: &Value) -> Vec<Value> {
        vec![json!(o.str("driverName")), age.clone()]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kinds::test_support::{create_causes, fields, update_causes};

    #[test]
    fn driver_and_parameters_are_fixed() {
        let vac =
            |iops: &str| json!({"metadata": {"name": "gold"}, "driverName": "csi.io", "parameters": {"iops": iops}});
        assert_eq!(create_causes("VolumeAttributesClass", &vac("100")), vec![]);
        assert_eq!(
            fields(&create_causes("VolumeAttributesClass", &json!({"metadata": {"name": "g"}}))),
            ["driverName"]
        );
        assert_eq!(fields(&update_causes("VolumeAttributesClass", &vac("200"), &vac("100"))), ["parameters"]);
    }
}
