//! storage.k8s.io/v1 CSINode: the CSI drivers installed on one node.

use std::collections::HashSet;

use k8s_openapi::api::storage::v1 as storage;
use serde_json::{json, Value};

use super::csi_driver::driver_name_errors;
use super::{roundtrip, Strategy};
use crate::resources::ResourceInfo;
use crate::schema::SchemaError;
use crate::table::columns::{Column, AGE};
use crate::table::obj::Obj;
use crate::validation::json::{arr, st};
use crate::validation::Cause;

pub struct CsiNode;

pub const INFO: ResourceInfo =
    crate::kind_info!("storage.k8s.io", "CSINode", "csinodes", "csinode", false, &[], &[], &CsiNode);

impl Strategy for CsiNode {
    fn normalize(&self, obj: &Value) -> Result<Value, SchemaError> {
        roundtrip::<storage::CSINode>(obj)
    }

    fn validate(&self, o: &Value, out: &mut Vec<Cause>) {
        let spec = o.get("spec").unwrap_or(&Value::Null);
        let mut seen = HashSet::new();
        for (i, d) in arr(spec, "drivers").iter().enumerate() {
            let p = format!("spec.drivers[{i}]");
            let name = st(d, "name");
            driver_name_errors(name, &format!("{p}.name"), out);
            if !name.is_empty() && !seen.insert(name) {
                out.push(Cause::duplicate(format!("{p}.name"), name));
            }
            let id = st(d, "nodeID");
            if id.is_empty() {
                out.push(Cause::required(format!("{p}.nodeID"), ""));
            } else if id.len() > 256 {
                out.push(Cause::too_long(format!("{p}.nodeID"), 256));
            }
            if let Some(n) = d.pointer("/allocatable/count").and_then(Value::as_i64) {
                if n < 0 {
                    out.push(Cause::invalid(format!("{p}.allocatable.count"), n, "must be greater than or equal to 0"));
                }
            }
        }
    }

    fn validate_update(&self, new: &Value, old: &Value, out: &mut Vec<Cause>) {
        // ValidateCSINodeUpdate: a driver's node ID and topology keys never change.
        let old_drivers = arr(old.get("spec").unwrap_or(&Value::Null), "drivers");
        for (i, d) in arr(new.get("spec").unwrap_or(&Value::Null), "drivers").iter().enumerate() {
            let Some(prev) = old_drivers.iter().find(|o| st(o, "name") == st(d, "name")) else { continue };
            if st(prev, "nodeID") != st(d, "nodeID") {
                out.push(Cause::invalid(format!("spec.drivers[{i}].nodeID"), st(d, "nodeID"), "field is immutable"));
            }
            if prev.get("topologyKeys") != d.get("topologyKeys") {
                out.push(Cause::invalid(
                    format!("spec.drivers[{i}].topologyKeys"),
                    crate::validation::BadValue::Raw(d.get("topologyKeys").map_or("[]".into(), Value::to_string)),
                    "field is immutable",
                ));
            }
        }
    }

    fn columns(&self) -> Vec<Column> {
        vec![("Drivers", "integer", "", 0, "Drivers indicates the number of CSI drivers registered on the node"), AGE]
    }

    fn cells(&self, o: Obj<'_>, age: &Value) -> Vec<Value> {
        vec![json!(o.list("spec.drivers").len()), age.clone()]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kinds::test_support::{cells, create_causes, fields, update_causes};

    #[test]
    fn drivers_need_unique_names_and_a_node_id_that_stays() {
        let node =
            |id: &str| json!({"metadata": {"name": "n1"}, "spec": {"drivers": [{"name": "d.io", "nodeID": id}]}});
        assert_eq!(create_causes("CSINode", &node("n1")), vec![]);
        assert_eq!(fields(&create_causes("CSINode", &node(""))), ["spec.drivers[0].nodeID"]);
        let twice = json!({"metadata": {"name": "n1"}, "spec": {"drivers": [{"name": "d.io", "nodeID": "a"}, {"name": "d.io", "nodeID": "a"}]}});
        assert_eq!(fields(&create_causes("CSINode", &twice)), ["spec.drivers[1].name"]);
        assert_eq!(fields(&update_causes("CSINode", &node("b"), &node("a"))), ["spec.drivers[0].nodeID"]);
        assert_eq!(cells("CSINode", &node("a"))[..2], [json!("n1"), json!(1)]);
    }
}
