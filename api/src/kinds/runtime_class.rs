//! node.k8s.io/v1 RuntimeClass: a container runtime configuration pods choose by name.

use k8s_openapi::api::node::v1 as node;
use serde_json::{json, Value};

use super::{roundtrip, Strategy};
use crate::resources::ResourceInfo;
use crate::schema::SchemaError;
use crate::table::columns::{Column, AGE};
use crate::table::obj::Obj;
use crate::validation::json::{arr, obj, st};
use crate::validation::names::{dns1123_label_errors, label_value_errors, qualified_name_errors, IMMUTABLE_MSG};
use crate::validation::quantity::{quantity_of, quantity_text};
use crate::validation::Cause;

pub struct RuntimeClass;

pub const INFO: ResourceInfo =
    crate::kind_info!("node.k8s.io", "RuntimeClass", "runtimeclasses", "runtimeclass", false, &[], &[], &RuntimeClass);

impl Strategy for RuntimeClass {
    fn normalize(&self, obj: &Value) -> Result<Value, SchemaError> {
        roundtrip::<node::RuntimeClass>(obj)
    }

    fn validate(&self, o: &Value, out: &mut Vec<Cause>) {
        let handler = st(o, "handler");
        if handler.is_empty() {
            out.push(Cause::required("handler", ""));
        } else {
            out.extend(dns1123_label_errors(handler).iter().map(|m| Cause::invalid("handler", handler, m)));
        }
        if let Some(pod_fixed) = o.pointer("/overhead/podFixed").and_then(Value::as_object) {
            for (name, q) in pod_fixed {
                let p = format!("overhead.podFixed[{name}]");
                out.extend(qualified_name_errors(name).iter().map(|m| Cause::invalid(p.as_str(), name.as_str(), m)));
                match quantity_of(q) {
                    Some(v) if v >= 0 => {}
                    Some(_) => out.push(Cause::invalid(p, quantity_text(q), "must be greater than or equal to 0")),
                    None => out.push(Cause::invalid(p, quantity_text(q), "must be a valid quantity")),
                }
            }
        }
        if let Some(scheduling) = o.get("scheduling").filter(|s| s.is_object()) {
            for (k, v) in obj(scheduling, "nodeSelector").into_iter().flatten() {
                let p = format!("scheduling.nodeSelector[{k}]");
                out.extend(qualified_name_errors(k).iter().map(|m| Cause::invalid(p.as_str(), k.as_str(), m)));
                let v = v.as_str().unwrap_or("");
                out.extend(label_value_errors(v).iter().map(|m| Cause::invalid(p.as_str(), v, m)));
            }
            crate::validation::pod::validate_tolerations(arr(scheduling, "tolerations"), "scheduling.tolerations", out);
        }
    }

    fn validate_update(&self, new: &Value, old: &Value, out: &mut Vec<Cause>) {
        if st(new, "handler") != st(old, "handler") {
            out.push(Cause::invalid("handler", st(new, "handler"), IMMUTABLE_MSG));
        }
    }

    fn columns(&self) -> Vec<Column> {
        vec![("Handler", "string", "", 0, "Handler specifies the underlying runtime and configuration that the CRI implementation will use to handle pods of this class."), AGE]
    }

    fn cells(&self, o: Obj<'_>, age: &Value) -> Vec<Value> {
        vec![json!(o.str("handler")), age.clone()]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kinds::test_support::{cells, create_causes, fields, update_causes};

    #[test]
    fn the_handler_is_a_required_immutable_dns_label() {
        let rc = json!({"metadata": {"name": "gvisor"}, "handler": "runsc", "overhead": {"podFixed": {"cpu": "250m"}}});
        assert_eq!(create_causes("RuntimeClass", &rc), vec![]);
        assert_eq!(fields(&create_causes("RuntimeClass", &json!({"metadata": {"name": "x"}}))), ["handler"]);
        assert_eq!(
            fields(&create_causes("RuntimeClass", &json!({"metadata": {"name": "x"}, "handler": "Run_SC"}))),
            ["handler"]
        );
        let mut changed = rc.clone();
        changed["handler"] = json!("runc");
        assert_eq!(fields(&update_causes("RuntimeClass", &changed, &rc)), ["handler"]);
        let negative = json!({"metadata": {"name": "x"}, "handler": "h", "overhead": {"podFixed": {"memory": "-1"}}});
        assert_eq!(fields(&create_causes("RuntimeClass", &negative)), ["overhead.podFixed[memory]"]);
        assert_eq!(cells("RuntimeClass", &rc)[..2], [json!("gvisor"), json!("runsc")]);
    }
}
