//! resource.k8s.io/v1 ResourceSlice: devices a driver publishes, for one node or for many.

use k8s_openapi::api::resource::v1 as dra;
use serde_json::{json, Value};

use super::csi_driver::driver_name_errors;
use super::{roundtrip, Strategy};
use crate::resources::ResourceInfo;
use crate::schema::SchemaError;
use crate::table::columns::{Column, AGE};
use crate::table::obj::Obj;
use crate::validation::json::{has, int, st};
use crate::validation::names::{dns1123_label_errors, IMMUTABLE_MSG};
use crate::validation::{BadValue, Cause};

pub struct ResourceSlice;

pub const INFO: ResourceInfo = crate::kind_info!(
    "resource.k8s.io",
    "ResourceSlice",
    "resourceslices",
    "resourceslice",
    false,
    &[],
    &[],
    &ResourceSlice
);

const NODE_FIELDS: [&str; 4] = ["nodeName", "nodeSelector", "allNodes", "perDeviceNodeSelection"];

impl Strategy for ResourceSlice {
    fn normalize(&self, obj: &Value) -> Result<Value, SchemaError> {
        roundtrip::<dra::ResourceSlice>(obj)
    }

    fn validate(&self, o: &Value, out: &mut Vec<Cause>) {
        let spec = o.get("spec").unwrap_or(&Value::Null);
        driver_name_errors(st(spec, "driver"), "spec.driver", out);
        let pool = spec.get("pool").unwrap_or(&Value::Null);
        if st(pool, "name").is_empty() {
            out.push(Cause::required("spec.pool.name", ""));
        }
        let count = int(pool, "resourceSliceCount").unwrap_or(0);
        if count <= 0 {
            out.push(Cause::invalid("spec.pool.resourceSliceCount", count, "must be greater than zero"));
        }
        let set: Vec<&str> = NODE_FIELDS
            .into_iter()
            .filter(|f| match spec.get(*f) {
                Some(Value::Bool(b)) => *b,
                Some(Value::String(s)) => !s.is_empty(),
                _ => has(spec, f),
            })
            .collect();
        if set.len() != 1 {
            out.push(Cause::required(
                "spec",
                "exactly one of `nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection` is required",
            ));
        }
        for (i, d) in spec.get("devices").and_then(Value::as_array).into_iter().flatten().enumerate() {
            let name = st(d, "name");
            let p = format!("spec.devices[{i}].name");
            if name.is_empty() {
                out.push(Cause::required(p, ""));
            } else {
                out.extend(dns1123_label_errors(name).iter().map(|m| Cause::invalid(p.as_str(), name, m)));
            }
        }
    }

    fn validate_update(&self, new: &Value, old: &Value, out: &mut Vec<Cause>) {
        for key in ["driver", "nodeName"] {
            let (n, o) = (new.pointer(&format!("/spec/{key}")), old.pointer(&format!("/spec/{key}")));
            if n != o {
                out.push(Cause::invalid(
                    format!("spec.{key}"),
                    BadValue::Raw(n.map_or("\"\"".into(), Value::to_string)),
                    IMMUTABLE_MSG,
                ));
            }
        }
    }

    fn tracks_generation(&self) -> bool {
        true
    }

    fn columns(&self) -> Vec<Column> {
        vec![
            ("Node", "string", "", 0, "NodeName identifies the node which provides the resources in this pool. A field selector can be used to list only ResourceSlice objects belonging to a certain node."),
            ("Driver", "string", "", 0, "Driver identifies the DRA driver providing the capacity information. A field selector can be used to list only ResourceSlice objects with a certain driver name."),
            ("Pool", "string", "", 0, "Name is used to identify the pool. For node-local devices, this is often the node name, but this is not required."),
            AGE,
        ]
    }

    fn cells(&self, o: Obj<'_>, age: &Value) -> Vec<Value> {
        let node = o.get("spec.nodeName").and_then(Value::as_str).filter(|n| !n.is_empty()).unwrap_or("<none>");
        vec![json!(node), json!(o.str("spec.driver")), json!(o.str("spec.pool.name")), age.clone()]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kinds::test_support::{cells, create_causes, fields};

    #[test]
    fn a_slice_names_its_driver_pool_and_exactly_one_node_scope() {
        let slice = json!({"metadata": {"name": "s"}, "spec": {"driver": "gpu.example.com", "nodeName": "n1",
            "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 1}, "devices": [{"name": "gpu-0"}]}});
        assert_eq!(create_causes("ResourceSlice", &slice), vec![]);
        let mut both = slice.clone();
        both["spec"]["allNodes"] = json!(true);
        assert_eq!(fields(&create_causes("ResourceSlice", &both)), ["spec"]);
        assert_eq!(
            cells("ResourceSlice", &slice)[..4],
            [json!("s"), json!("n1"), json!("gpu.example.com"), json!("n1")]
        );
    }
}
