//! resource.k8s.io/v1 DeviceClass: a class of devices claims can ask for (dynamic resource
//! allocation).

use k8s_openapi::api::resource::v1 as dra;
use serde_json::Value;

use super::{roundtrip, Strategy};
use crate::resources::ResourceInfo;
use crate::schema::SchemaError;
use crate::table::columns::{Column, AGE};
use crate::table::obj::Obj;
use crate::validation::json::arr;
use crate::validation::Cause;

pub struct DeviceClass;

pub const INFO: ResourceInfo =
    crate::kind_info!("resource.k8s.io", "DeviceClass", "deviceclasses", "deviceclass", false, &[], &[], &DeviceClass);

/// Each selector is a CEL expression (`cel.expression`), required.
pub(crate) fn validate_selectors(selectors: &[Value], path: &str, out: &mut Vec<Cause>) {
    const MAX: usize = 32;
    if selectors.len() > MAX {
        out.push(Cause::too_many(path, selectors.len(), MAX));
    }
    for (i, s) in selectors.iter().enumerate() {
        let expr = s.pointer("/cel/expression").and_then(Value::as_str).unwrap_or("");
        if expr.is_empty() {
            out.push(Cause::required(format!("{path}[{i}].cel.expression"), ""));
        }
    }
}

impl Strategy for DeviceClass {
    fn normalize(&self, obj: &Value) -> Result<Value, SchemaError> {
        roundtrip::<dra::DeviceClass>(obj)
    }

    fn validate(&self, o: &Value, out: &mut Vec<Cause>) {
        let spec = o.get("spec").unwrap_or(&Value::Null);
        validate_selectors(arr(spec, "selectors"), "spec.selectors", out);
    }

    fn tracks_generation(&self) -> bool {
        true
    }

    fn columns(&self) -> Vec<Column> {
        vec![AGE]
    }

    fn cells(&self, _o: Obj<'_>, age: &Value) -> Vec<Value> {
        vec![age.clone()]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kinds::test_support::{create_causes, fields};
    use serde_json::json;

    #[test]
    fn selectors_need_an_expression() {
        let class = |sel: Value| json!({"metadata": {"name": "gpu"}, "spec": {"selectors": [sel]}});
        assert_eq!(create_causes("DeviceClass", &class(json!({"cel": {"expression": "true"}}))), vec![]);
        assert_eq!(fields(&create_causes("DeviceClass", &class(json!({})))), ["spec.selectors[0].cel.expression"]);
    }
}
