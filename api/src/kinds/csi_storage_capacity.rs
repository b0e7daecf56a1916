//! storage.k8s.io/v1 CSIStorageCapacity: capacity a CSI driver reports for a topology segment.

use k8s_openapi::api::storage::v1 as storage;
use serde_json::{json, Value};

use super::{roundtrip, Strategy};
use crate::resources::ResourceInfo;
use crate::schema::SchemaError;
use crate::table::columns::Column;
use crate::table::obj::Obj;
use crate::validation::json::st;
use crate::validation::names::{dns1123_subdomain_errors, IS_NEGATIVE_MSG};
use crate::validation::quantity::{quantity_of, quantity_text};
use crate::validation::Cause;

pub struct CsiStorageCapacity;

pub const INFO: ResourceInfo = crate::kind_info!(
    "storage.k8s.io",
    "CSIStorageCapacity",
    "csistoragecapacities",
    "csistoragecapacity",
    true,
    &[],
    &[],
    &CsiStorageCapacity
);

impl Strategy for CsiStorageCapacity {
    fn normalize(&self, obj: &Value) -> Result<Value, SchemaError> {
        roundtrip::<storage::CSIStorageCapacity>(obj)
    }

    fn validate(&self, o: &Value, out: &mut Vec<Cause>) {
        let class = st(o, "storageClassName");
        if class.is_empty() {
            out.push(Cause::required("storageClassName", ""));
        } else {
            out.extend(dns1123_subdomain_errors(class).iter().map(|m| Cause::invalid("storageClassName", class, m)));
        }
        if let Some(sel) = o.get("nodeTopology").filter(|s| !s.is_null()) {
            crate::validation::apps::validate_label_selector(sel, "nodeTopology", out);
        }
        for key in ["capacity", "maximumVolumeSize"] {
            if let Some(q) = o.get(key).filter(|q| !q.is_null()) {
                match quantity_of(q) {
                    Some(v) if v < 0 => out.push(Cause::invalid(key, quantity_text(q), IS_NEGATIVE_MSG)),
                    Some(_) => {}
                    None => out.push(Cause::invalid(key, quantity_text(q), "must be a valid quantity")),
                }
            }
        }
    }

    fn columns(&self) -> Vec<Column> {
        vec![
            ("StorageClassName", "string", "", 0, "storageClassName represents the name of the StorageClass that the reported capacity applies to. It must meet the same requirements as the name of a StorageClass object (non-empty, DNS subdomain). If that object no longer exists, the CSIStorageCapacity object is obsolete and should be removed by its creator. This field is immutable."),
            ("Capacity", "string", "", 0, "capacity is the value reported by the CSI driver in its GetCapacityResponse for a GetCapacityRequest with topology and parameters that match the previous fields.\n\nThe semantic is currently (CSI spec 1.2) defined as: The available capacity, in bytes, of the storage that can be used to provision volumes. If not set, that information is currently unavailable."),
        ]
    }

    fn cells(&self, o: Obj<'_>, _age: &Value) -> Vec<Value> {
        let capacity = o.get("capacity").map_or("<unset>".to_owned(), quantity_text);
        vec![json!(o.str("storageClassName")), json!(capacity)]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kinds::test_support::{cells, create_causes, fields};

    #[test]
    fn a_class_is_required_and_capacities_are_not_negative() {
        let c = json!({"metadata": {"name": "c", "namespace": "d"}, "storageClassName": "fast", "capacity": "1Gi"});
        assert_eq!(create_causes("CSIStorageCapacity", &c), vec![]);
        let bad = json!({"metadata": {"name": "c", "namespace": "d"}, "capacity": "-1"});
        assert_eq!(fields(&create_causes("CSIStorageCapacity", &bad)), ["storageClassName", "capacity"]);
        assert_eq!(cells("CSIStorageCapacity", &c), [json!("c"), json!("fast"), json!("1Gi")]);
    }
}
