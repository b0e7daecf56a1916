//! networking.k8s.io/v1 NetworkPolicy: which traffic may reach and leave the selected pods.

use std::net::IpAddr;

use k8s_openapi::api::networking::v1 as net;
use serde_json::{json, Value};

use super::{roundtrip, Strategy};
use crate::defaults::json::default_str;
use crate::resources::ResourceInfo;
use crate::schema::SchemaError;
use crate::table::columns::{Column, AGE};
use crate::table::obj::Obj;
use crate::validation::apps::validate_label_selector;
use crate::validation::json::{arr, has, st, strs};
use crate::validation::names::{port_name_errors, valid_cidr, CIDR_MSG};
use crate::validation::{BadValue, Cause};

pub struct NetworkPolicy;

pub const INFO: ResourceInfo = crate::kind_info!(
    "networking.k8s.io",
    "NetworkPolicy",
    "networkpolicies",
    "networkpolicy",
    true,
    &["netpol"],
    &[],
    &NetworkPolicy
);

const PROTOCOLS: [&str; 3] = ["SCTP", "TCP", "UDP"];
const POLICY_TYPES: [&str; 2] = ["Egress", "Ingress"];

impl Strategy for NetworkPolicy {
    fn normalize(&self, obj: &Value) -> Result<Value, SchemaError> {
        roundtrip::<net::NetworkPolicy>(obj)
    }

    fn defaults(&self, obj: &mut Value) {
        let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else { return };
        for dir in ["ingress", "egress"] {
            for rule in spec.get_mut(dir).and_then(Value::as_array_mut).into_iter().flatten() {
                for port in rule.get_mut("ports").and_then(Value::as_array_mut).into_iter().flatten() {
                    if let Some(p) = port.as_object_mut() {
                        default_str(p, "protocol", "TCP");
                    }
                }
            }
        }
        // SetDefaults_NetworkPolicy: Ingress always, Egress when there are egress rules.
        if spec.get("policyTypes").and_then(Value::as_array).is_none_or(Vec::is_empty) {
            let mut types = vec![json!("Ingress")];
            if spec.get("egress").and_then(Value::as_array).is_some_and(|e| !e.is_empty()) {
                types.push(json!("Egress"));
            }
            spec.insert("policyTypes".into(), Value::Array(types));
        }
    }

    fn validate(&self, o: &Value, out: &mut Vec<Cause>) {
        let spec = o.get("spec").unwrap_or(&Value::Null);
        validate_label_selector(spec.get("podSelector").unwrap_or(&Value::Null), "spec.podSelector", out);
        for (dir, peers) in [("ingress", "from"), ("egress", "to")] {
            for (i, rule) in arr(spec, dir).iter().enumerate() {
                let p = format!("spec.{dir}[{i}]");
                for (j, port) in arr(rule, "ports").iter().enumerate() {
                    validate_port(port, &format!("{p}.ports[{j}]"), out);
                }
                for (j, peer) in arr(rule, peers).iter().enumerate() {
                    validate_peer(peer, &format!("{p}.{peers}[{j}]"), out);
                }
            }
        }
        let types = strs(spec, "policyTypes");
        if types.len() > 2 {
            out.push(Cause::invalid(
                "spec.policyTypes",
                BadValue::Raw(format!("{types:?}")),
                "may not specify more than two policyTypes",
            ));
        }
        for (i, t) in types.iter().enumerate() {
            if !POLICY_TYPES.contains(&t.as_str()) {
                out.push(Cause::not_supported(format!("spec.policyTypes[{i}]"), t, &POLICY_TYPES));
            }
        }
    }

    fn tracks_generation(&self) -> bool {
        true
    }

    fn columns(&self) -> Vec<Column> {
        vec![("Pod-Selector", "string", "", 0, "podSelector selects the pods to which this NetworkPolicy object applies. The array of rules is applied to any pods selected by this field. An empty selector matches all pods in the policy's namespace. Multiple network policies can select the same set of pods. In this case, the ingress rules for each are combined additively. This field is optional. If it is not specified, it defaults to an empty selector."), AGE]
    }

    fn cells(&self, o: Obj<'_>, age: &Value) -> Vec<Value> {
        // metav1.FormatLabelSelector: the selector's string, `<none>` when it selects everything.
        let selector = crate::selector::LabelSelector::from_json(o.get("spec.podSelector").unwrap_or(&Value::Null))
            .map_or_else(|e| e.to_string(), |s| s.to_string());
        let selector = if selector.is_empty() { "<none>".to_owned() } else { selector };
        vec![json!(selector), age.clone()]
    }
}

fn validate_port(port: &Value, p: &str, out: &mut Vec<Cause>) {
    let proto = st(port, "protocol");
    if !proto.is_empty() && !PROTOCOLS.contains(&proto) {
        out.push(Cause::not_supported(format!("{p}.protocol"), proto, &PROTOCOLS));
    }
    let number = port.get("port").and_then(Value::as_i64);
    match port.get("port") {
        Some(Value::String(name)) => {
            out.extend(port_name_errors(name).iter().map(|m| Cause::invalid(format!("{p}.port"), name.as_str(), m)))
        }
        Some(Value::Number(_)) => {
            let n = number.unwrap_or(0);
            if !(1..=65535).contains(&n) {
                out.push(Cause::invalid(format!("{p}.port"), n, "must be between 1 and 65535, inclusive"));
            }
        }
        _ => {}
    }
    if let Some(end) = port.get("endPort").and_then(Value::as_i64) {
        match number {
            None => out.push(Cause::required(format!("{p}.port"), "must specify port when endPort is specified")),
            Some(start) if end < start => {
                out.push(Cause::invalid(format!("{p}.endPort"), end, "must be greater than or equal to `port`"))
            }
            Some(_) if end > 65535 => {
                out.push(Cause::invalid(format!("{p}.endPort"), end, "must be between 1 and 65535, inclusive"))
            }
            Some(_) => {}
        }
    }
}

fn validate_peer(peer: &Value, p: &str, out: &mut Vec<Cause>) {
    let selectors = has(peer, "podSelector") || has(peer, "namespaceSelector");
    match (selectors, peer.get("ipBlock").filter(|b| !b.is_null())) {
        (false, None) => out.push(Cause::required(p, "must specify a peer")),
        (true, Some(_)) => out.push(Cause::forbidden(p, "may not specify both ipBlock and another peer")),
        (false, Some(block)) => validate_ip_block(block, &format!("{p}.ipBlock"), out),
        (true, None) => {
            for key in ["podSelector", "namespaceSelector"] {
                if let Some(sel) = peer.get(key).filter(|s| !s.is_null()) {
                    validate_label_selector(sel, &format!("{p}.{key}"), out);
                }
            }
        }
    }
}

fn validate_ip_block(block: &Value, p: &str, out: &mut Vec<Cause>) {
    let cidr = st(block, "cidr");
    if cidr.is_empty() {
        out.push(Cause::required(format!("{p}.cidr"), ""));
        return;
    }
    if !valid_cidr(cidr) {
        out.push(Cause::invalid(format!("{p}.cidr"), cidr, CIDR_MSG));
        return;
    }
    let Some(outer) = parse_cidr(cidr) else { return };
    for (i, except) in strs(block, "except").iter().enumerate() {
        let ep = format!("{p}.except[{i}]");
        match parse_cidr(except) {
            None => out.push(Cause::invalid(ep, except, CIDR_MSG)),
            Some(inner) if !(inner.1 > outer.1 && contains(outer, inner.0)) => {
                out.push(Cause::invalid(ep, except, "must be a strict subset of `cidr`"))
            }
            Some(_) => {}
        }
    }
}

fn parse_cidr(s: &str) -> Option<(IpAddr, u8)> {
    let (ip, bits) = s.split_once('/')?;
    Some((ip.parse().ok()?, bits.parse().ok()?))
}

fn contains((net, bits): (IpAddr, u8), ip: IpAddr) -> bool {
    let mask = |len: u32, bits: u8| if bits == 0 { 0u128 } else { !0u128 << (len - u32::from(bits).min(len)) };
    match (net, ip) {
        (IpAddr::V4(a), IpAddr::V4(b)) => {
            let m = mask(32, bits) & 0xffff_ffff;
            (u128::from(u32::from(a)) & m) == (u128::from(u32::from(b)) & m)
        }
        (IpAddr::V6(a), IpAddr::V6(b)) => {
            let m = mask(128, bits);
            (u128::from(a) & m) == (u128::from(b) & m)
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kinds::test_support::{cells, create_causes, defaulted, fields};

    fn policy(spec: Value) -> Value {
        json!({"metadata": {"name": "np", "namespace": "d"}, "spec": spec})
    }

    #[test]
    fn policy_types_and_protocols_are_defaulted() {
        let p = defaulted("NetworkPolicy", policy(json!({"podSelector": {}, "egress": [{"ports": [{"port": 53}]}]})));
        assert_eq!(p["spec"]["policyTypes"], json!(["Ingress", "Egress"]));
        assert_eq!(p["spec"]["egress"][0]["ports"][0]["protocol"], "TCP");
        let ingress_only = defaulted("NetworkPolicy", policy(json!({"podSelector": {}})));
        assert_eq!(ingress_only["spec"]["policyTypes"], json!(["Ingress"]));
        assert_eq!(cells("NetworkPolicy", &ingress_only)[..2], [json!("np"), json!("<none>")]);
    }

    #[test]
    fn peers_ports_and_ip_blocks_are_checked() {
        let ok = policy(json!({"podSelector": {"matchLabels": {"app": "db"}}, "ingress": [{
            "from": [{"ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.1.0.0/16"]}}, {"podSelector": {}}],
            "ports": [{"port": 5432, "endPort": 5440}, {"port": "pg"}]}]}));
        assert_eq!(create_causes("NetworkPolicy", &ok), vec![]);
        let bad = policy(json!({"podSelector": {}, "ingress": [{
            "from": [{}, {"ipBlock": {"cidr": "10.0.0.0/8", "except": ["192.168.0.0/16"]}}],
            "ports": [{"port": 80, "endPort": 70}, {"protocol": "ICMP"}]}]}));
        assert_eq!(
            fields(&create_causes("NetworkPolicy", &bad)),
            [
                "spec.ingress[0].ports[0].endPort",
                "spec.ingress[0].ports[1].protocol",
                "spec.ingress[0].from[0]",
                "spec.ingress[0].from[1].ipBlock.except[0]"
            ]
        );
    }
}
