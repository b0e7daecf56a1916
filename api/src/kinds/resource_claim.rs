//! resource.k8s.io/v1 ResourceClaim: a pod's request for devices; the scheduler allocates them
//! in status.

use k8s_openapi::api::resource::v1 as dra;
use serde_json::{json, Value};

use super::{roundtrip, Strategy};
use crate::resources::{ResourceInfo, Subresource};
use crate::schema::SchemaError;
use crate::table::columns::{Column, AGE};
use crate::table::obj::Obj;
use crate::validation::json::{arr, st};
use crate::validation::names::{dns1123_label_errors, dns1123_subdomain_errors, IMMUTABLE_MSG};
use crate::validation::{BadValue, Cause};

pub struct ResourceClaim;

pub const INFO: ResourceInfo = crate::kind_info!(
    "resource.k8s.io",
    "ResourceClaim",
    "resourceclaims",
    "resourceclaim",
    true,
    &[],
    &[Subresource::Status],
    &ResourceClaim
);

/// `validateResourceClaimSpec`: each request is named (a DNS label, unique) and names a class.
pub(crate) fn validate_claim_spec(spec: &Value, path: &str, out: &mut Vec<Cause>) {
    let devices = spec.get("devices").unwrap_or(&Value::Null);
    let mut names = std::collections::HashSet::new();
    for (i, r) in arr(devices, "requests").iter().enumerate() {
        let p = format!("{path}.devices.requests[{i}]");
        let name = st(r, "name");
        if name.is_empty() {
            out.push(Cause::required(format!("{p}.name"), ""));
        } else {
            out.extend(dns1123_label_errors(name).iter().map(|m| Cause::invalid(format!("{p}.name"), name, m)));
            if !names.insert(name) {
                out.push(Cause::duplicate(format!("{p}.name"), name));
            }
        }
        let exactly = r.get("exactly").filter(|e| !e.is_null());
        let first = arr(r, "firstAvailable");
        match (exactly, first.is_empty()) {
            (None, true) => {
                out.push(Cause::required(p.clone(), "exactly one of `exactly` or `firstAvailable` is required"))
            }
            (Some(_), false) => out.push(Cause::invalid(
                p.clone(),
                BadValue::Raw("{}".into()),
                "exactly one of `exactly` or `firstAvailable` is required, but multiple fields are set",
            )),
            _ => {}
        }
        if let Some(e) = exactly {
            let class = st(e, "deviceClassName");
            if class.is_empty() {
                out.push(Cause::required(format!("{p}.exactly.deviceClassName"), ""));
            } else {
                out.extend(
                    dns1123_subdomain_errors(class)
                        .iter()
                        .map(|m| Cause::invalid(format!("{p}.exactly.deviceClassName"), class, m)),
                );
            }
            super::device_class::validate_selectors(arr(e, "selectors"), &format!("{p}.exactly.selectors"), out);
        }
    }
}

impl Strategy for ResourceClaim {
    fn normalize(&self, obj: &Value) -> Result<Value, SchemaError> {
        roundtrip::<dra::ResourceClaim>(obj)
    }

    fn defaults(&self, obj: &mut Value) {
        default_requests(obj.pointer_mut("/spec/devices/requests"));
    }

    fn validate(&self, o: &Value, out: &mut Vec<Cause>) {
        validate_claim_spec(o.get("spec").unwrap_or(&Value::Null), "spec", out);
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

    fn resets_status_on_create(&self) -> bool {
        true
    }

    fn columns(&self) -> Vec<Column> {
        vec![("State", "string", "", 0, "A summary of the current state (allocated, pending, reserved, etc.)."), AGE]
    }

    fn cells(&self, o: Obj<'_>, age: &Value) -> Vec<Value> {
        let mut state = Vec::new();
        if o.get("metadata.deletionTimestamp").is_some() {
            state.push("deleted");
        }
        if o.get("status.allocation").is_some_and(|a| !a.is_null()) {
            state.push("allocated");
        } else {
            state.push("pending");
        }
        if !o.list("status.reservedFor").is_empty() {
            state.push("reserved");
        }
        vec![json!(state.join(",")), age.clone()]
    }
}

/// `SetDefaults_ExactDeviceRequest`: all-or-count allocation mode, one device.
pub(crate) fn default_requests(requests: Option<&mut Value>) {
    for r in requests.and_then(Value::as_array_mut).into_iter().flatten() {
        let Some(e) = r.get_mut("exactly").and_then(Value::as_object_mut) else { continue };
        crate::defaults::json::default_str(e, "allocationMode", "ExactCount");
        if e.get("allocationMode").and_then(Value::as_str) == Some("ExactCount") {
            crate::defaults::json::default_value(e, "count", json!(1));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kinds::test_support::{cells, create_causes, defaulted, fields, update_causes};

    fn claim(class: &str) -> Value {
        json!({"metadata": {"name": "c", "namespace": "d"},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": class}}]}}})
    }

    #[test]
    fn requests_name_a_class_and_the_spec_is_fixed() {
        let c = defaulted("ResourceClaim", claim("gpu.example.com"));
        assert_eq!(c["spec"]["devices"]["requests"][0]["exactly"]["count"], 1);
        assert_eq!(create_causes("ResourceClaim", &c), vec![]);
        assert_eq!(
            fields(&create_causes("ResourceClaim", &claim(""))),
            ["spec.devices.requests[0].exactly.deviceClassName"]
        );
        assert_eq!(fields(&update_causes("ResourceClaim", &claim("b"), &claim("a"))), ["spec"]);
        assert_eq!(cells("ResourceClaim", &c)[..2], [json!("c"), json!("pending")]);
    }
}
