//! networking.k8s.io/v1 ServiceCIDR: a range Service cluster IPs are allocated from.

use k8s_openapi::api::networking::v1 as net;
use serde_json::{json, Value};

use super::{roundtrip, Strategy};
use crate::resources::{ResourceInfo, Subresource};
use crate::schema::SchemaError;
use crate::table::columns::{Column, AGE};
use crate::table::obj::Obj;
use crate::validation::json::strs;
use crate::validation::names::{valid_cidr, CIDR_MSG};
use crate::validation::{BadValue, Cause};

pub struct ServiceCidr;

pub const INFO: ResourceInfo = crate::kind_info!(
    "networking.k8s.io",
    "ServiceCIDR",
    "servicecidrs",
    "servicecidr",
    false,
    &[],
    &[Subresource::Status],
    &ServiceCidr
);

fn cidrs(o: &Value) -> Vec<String> {
    o.get("spec").map(|s| strs(s, "cidrs")).unwrap_or_default()
}

impl Strategy for ServiceCidr {
    fn normalize(&self, obj: &Value) -> Result<Value, SchemaError> {
        roundtrip::<net::ServiceCIDR>(obj)
    }

    fn validate(&self, o: &Value, out: &mut Vec<Cause>) {
        let list = cidrs(o);
        match list.len() {
            0 => out.push(Cause::required("spec.cidrs", "at least one CIDR required")),
            n if n > 2 => out.push(Cause::too_many("spec.cidrs", n, 2)),
            _ => {}
        }
        let mut families = Vec::new();
        for (i, c) in list.iter().enumerate() {
            if !valid_cidr(c) {
                out.push(Cause::invalid(format!("spec.cidrs[{i}]"), c, CIDR_MSG));
                continue;
            }
            families.push(c.contains(':'));
        }
        if families.len() == 2 && families[0] == families[1] {
            out.push(Cause::invalid(
                "spec.cidrs",
                BadValue::Raw(format!("{list:?}")),
                "may specify no more than one IP for each IP family, i.e 192.168.0.0/24 and 2001:db8::/64",
            ));
        }
    }

    fn validate_update(&self, new: &Value, old: &Value, out: &mut Vec<Cause>) {
        // ValidateServiceCIDRUpdate: CIDRs never change; a single-stack range may gain the other family.
        let (n, o) = (cidrs(new), cidrs(old));
        let upgrade = o.len() == 1 && n.len() == 2 && n[0] == o[0];
        if n != o && !upgrade {
            out.push(Cause::invalid("spec.cidrs", BadValue::Raw(format!("{n:?}")), "field is immutable"));
        }
    }

    fn resets_status_on_create(&self) -> bool {
        true
    }

    fn columns(&self) -> Vec<Column> {
        vec![("CIDRs", "string", "", 0, "CIDRs defines the IP blocks in CIDR notation (e.g. \"192.168.0.0/24\" or \"2001:db8::/64\") from which to assign service cluster IPs. Max of two CIDRs is allowed, one of each IP family. This field is immutable."), AGE]
    }

    fn cells(&self, o: Obj<'_>, age: &Value) -> Vec<Value> {
        let list: Vec<&str> = o.list("spec.cidrs").iter().filter_map(Value::as_str).collect();
        vec![json!(list.join(",")), age.clone()]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kinds::test_support::{cells, create_causes, fields, update_causes};

    fn cidr(list: Value) -> Value {
        json!({"metadata": {"name": "extra"}, "spec": {"cidrs": list}})
    }

    #[test]
    fn one_range_per_family_fixed_but_for_gaining_a_family() {
        assert_eq!(create_causes("ServiceCIDR", &cidr(json!(["10.96.0.0/16", "fd00::/108"]))), vec![]);
        assert_eq!(
            fields(&create_causes("ServiceCIDR", &cidr(json!(["10.96.0.0/16", "10.97.0.0/16"])))),
            ["spec.cidrs"]
        );
        assert_eq!(fields(&create_causes("ServiceCIDR", &cidr(json!(["10.96.0.0/33"])))), ["spec.cidrs[0]"]);
        let one = cidr(json!(["10.96.0.0/16"]));
        assert_eq!(update_causes("ServiceCIDR", &cidr(json!(["10.96.0.0/16", "fd00::/108"])), &one), vec![]);
        assert_eq!(fields(&update_causes("ServiceCIDR", &cidr(json!(["10.97.0.0/16"])), &one)), ["spec.cidrs"]);
        assert_eq!(cells("ServiceCIDR", &one)[..2], [json!("extra"), json!("10.96.0.0/16")]);
    }
}
