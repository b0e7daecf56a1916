//! networking.k8s.io/v1 IPAddress: one allocated Service IP and who holds it.

use std::net::IpAddr;

use k8s_openapi::api::networking::v1 as net;
use serde_json::{json, Value};

use super::{roundtrip, Strategy};
use crate::resources::ResourceInfo;
use crate::schema::SchemaError;
use crate::table::columns::{Column, AGE};
use crate::table::obj::Obj;
use crate::validation::json::st;
use crate::validation::meta::NameRule;
use crate::validation::names::{dns1123_label_errors, dns1123_subdomain_errors, IMMUTABLE_MSG, IP_MSG};
use crate::validation::{BadValue, Cause};

pub struct IpAddress;

pub const INFO: ResourceInfo =
    crate::kind_info!("networking.k8s.io", "IPAddress", "ipaddresses", "ipaddress", false, &["ip"], &[], &IpAddress);

impl Strategy for IpAddress {
    fn normalize(&self, obj: &Value) -> Result<Value, SchemaError> {
        roundtrip::<net::IPAddress>(obj)
    }

    fn name_rule(&self) -> NameRule {
        NameRule::PathSegment
    }

    fn validate(&self, o: &Value, out: &mut Vec<Cause>) {
        // ValidateIPAddressName: the name is the address, in canonical form.
        let name = o.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("");
        if !name.is_empty() {
            match name.parse::<IpAddr>() {
                Err(_) => out.push(Cause::invalid("metadata.name", name, IP_MSG)),
                Ok(ip) if ip.to_string() != name => {
                    out.push(Cause::invalid("metadata.name", name, &format!("must be in canonical form (\"{ip}\")")))
                }
                Ok(_) => {}
            }
        }
        let parent = o.pointer("/spec/parentRef");
        let Some(parent) = parent.filter(|p| !p.is_null()) else {
            out.push(Cause::required("spec.parentRef", ""));
            return;
        };
        let group = st(parent, "group");
        if !group.is_empty() {
            out.extend(
                dns1123_subdomain_errors(group).iter().map(|m| Cause::invalid("spec.parentRef.group", group, m)),
            );
        }
        for key in ["resource", "name"] {
            if st(parent, key).is_empty() {
                out.push(Cause::required(format!("spec.parentRef.{key}"), ""));
            }
        }
        let ns = st(parent, "namespace");
        if !ns.is_empty() {
            out.extend(dns1123_label_errors(ns).iter().map(|m| Cause::invalid("spec.parentRef.namespace", ns, m)));
        }
    }

    fn validate_update(&self, new: &Value, old: &Value, out: &mut Vec<Cause>) {
        let (n, o) = (new.pointer("/spec/parentRef"), old.pointer("/spec/parentRef"));
        if n != o {
            out.push(Cause::invalid(
                "spec.parentRef",
                BadValue::Raw(n.map_or("nil".into(), Value::to_string)),
                IMMUTABLE_MSG,
            ));
        }
    }

    fn columns(&self) -> Vec<Column> {
        vec![("ParentRef", "string", "", 0, "ParentRef references the resource that an IPAddress is attached to. An IPAddress must reference a parent object."), AGE]
    }

    fn cells(&self, o: Obj<'_>, age: &Value) -> Vec<Value> {
        let mut parent = o.str("spec.parentRef.resource").to_lowercase();
        let group = o.str("spec.parentRef.group");
        if !group.is_empty() {
            parent = format!("{parent}.{group}");
        }
        parent.push('/');
        let ns = o.str("spec.parentRef.namespace");
        if !ns.is_empty() {
            parent = format!("{parent}{ns}/");
        }
        parent.push_str(o.str("spec.parentRef.name"));
        vec![json!(parent), age.clone()]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kinds::test_support::{cells, create_causes, fields};

    fn ip(name: &str) -> Value {
        json!({"metadata": {"name": name}, "spec": {"parentRef": {"resource": "services", "namespace": "d", "name": "web"}}})
    }

    #[test]
    fn the_name_is_a_canonical_address_with_a_parent() {
        assert_eq!(create_causes("IPAddress", &ip("10.0.0.1")), vec![]);
        assert_eq!(create_causes("IPAddress", &ip("2001:db8::1")), vec![]);
        let long = create_causes("IPAddress", &ip("2001:db8:0::1"));
        assert_eq!(long[0].message, "Invalid value: \"2001:db8:0::1\": must be in canonical form (\"2001:db8::1\")");
        // The typed spec always carries its (required) parent reference, empty when not sent.
        let bare = create_causes("IPAddress", &json!({"metadata": {"name": "10.0.0.1"}}));
        assert_eq!(fields(&bare), ["spec.parentRef.resource", "spec.parentRef.name"]);
        assert_eq!(cells("IPAddress", &ip("10.0.0.1"))[..2], [json!("10.0.0.1"), json!("services/d/web")]);
    }
}
