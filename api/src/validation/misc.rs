//! Validation of ConfigMaps, Secrets, Endpoints, EndpointSlices, Events and Nodes.

use std::collections::HashSet;
use std::net::IpAddr;

use serde_json::Value;

use super::causes::{go_quote, BadValue, Cause};
use super::json::{arr, has, int, obj, semantic_eq, st, strs};
use super::names::{
    config_map_key_errors, dns1123_label_errors, dns1123_subdomain_errors, label_value_errors, port_num_errors,
    qualified_name_errors, valid_cidr, CIDR_MSG, IP_MSG,
};
use super::obj_or_null;
use super::pod::PROTOCOLS;
use super::service::validate_non_special_ip;

const MAX_SECRET_SIZE: usize = 1024 * 1024;

fn base64_decoded_len(s: &str) -> usize {
    let s = s.trim_end_matches('=');
    s.len() * 3 / 4
}

pub(super) fn validate_config_map(cm: &Value, out: &mut Vec<Cause>) {
    let mut total = 0usize;
    let binary = obj(cm, "binaryData");
    if let Some(data) = obj(cm, "data") {
        for (k, v) in data {
            let p = format!("data[{k}]");
            out.extend(config_map_key_errors(k).iter().map(|m| Cause::invalid(p.as_str(), k, m)));
            if binary.is_some_and(|b| b.contains_key(k)) {
                out.push(Cause::invalid(p.as_str(), k, "duplicate of key present in binaryData"));
            }
            total += v.as_str().map_or(0, str::len);
        }
    }
    if let Some(data) = binary {
        for (k, v) in data {
            let p = format!("binaryData[{k}]");
            out.extend(config_map_key_errors(k).iter().map(|m| Cause::invalid(p.as_str(), k, m)));
            total += v.as_str().map_or(0, base64_decoded_len);
        }
    }
    if total > MAX_SECRET_SIZE {
        out.push(Cause::too_long("", MAX_SECRET_SIZE));
    }
}

pub(super) fn validate_secret(secret: &Value, out: &mut Vec<Cause>) {
    let mut total = 0usize;
    let data = obj(secret, "data");
    let string_data = obj(secret, "stringData");
    for (map, decode) in [(data, true), (string_data, false)] {
        let Some(map) = map else { continue };
        for (k, v) in map {
            let p = format!("data[{k}]");
            out.extend(config_map_key_errors(k).iter().map(|m| Cause::invalid(p.as_str(), k, m)));
            let s = v.as_str().unwrap_or("");
            total += if decode { base64_decoded_len(s) } else { s.len() };
        }
    }
    if total > MAX_SECRET_SIZE {
        out.push(Cause::too_long("data", MAX_SECRET_SIZE));
    }
    let has_key = |k: &str| data.is_some_and(|d| d.contains_key(k)) || string_data.is_some_and(|d| d.contains_key(k));
    let mut require = |k: &str| {
        if !has_key(k) {
            out.push(Cause::required(format!("data[{k}]"), ""));
        }
    };
    match st(secret, "type") {
        "kubernetes.io/service-account-token" => {
            let meta = obj_or_null(secret, "metadata");
            let sa = obj(meta, "annotations").and_then(|a| a.get("kubernetes.io/service-account.name"));
            if sa.and_then(Value::as_str).unwrap_or("").is_empty() {
                out.push(Cause::required("metadata.annotations[kubernetes.io/service-account.name]", ""));
            }
        }
        "kubernetes.io/dockercfg" => require(".dockercfg"),
        "kubernetes.io/dockerconfigjson" => require(".dockerconfigjson"),
        "kubernetes.io/basic-auth" if !has_key("username") && !has_key("password") => {
            require("username");
            require("password");
        }
        "kubernetes.io/ssh-auth" => require("ssh-privatekey"),
        "kubernetes.io/tls" => {
            require("tls.crt");
            require("tls.key");
        }
        _ => {}
    }
}

pub(super) fn validate_immutable_data(new: &Value, old: &Value, fields: &[&str], out: &mut Vec<Cause>) {
    if old.get("immutable").and_then(Value::as_bool) != Some(true) {
        return;
    }
    if new.get("immutable").and_then(Value::as_bool) != Some(true) {
        out.push(Cause::forbidden("immutable", "field is immutable when `immutable` is set"));
    }
    for f in fields {
        if !semantic_eq(new.get(*f), old.get(*f)) {
            out.push(Cause::forbidden(*f, "field is immutable when `immutable` is set"));
        }
    }
}

fn validate_endpoint_port(port: &Value, require_name: bool, port_optional: bool, p: &str, out: &mut Vec<Cause>) {
    let name = st(port, "name");
    if require_name && name.is_empty() {
        out.push(Cause::required(format!("{p}.name"), ""));
    } else if !name.is_empty() {
        out.extend(dns1123_label_errors(name).iter().map(|m| Cause::invalid(format!("{p}.name"), name, m)));
    }
    if !port_optional || has(port, "port") {
        let n = int(port, "port").unwrap_or(0);
        out.extend(port_num_errors(n).iter().map(|m| Cause::invalid(format!("{p}.port"), n, m)));
    }
    let proto = st(port, "protocol");
    if !proto.is_empty() && !PROTOCOLS.contains(&proto) {
        out.push(Cause::not_supported(format!("{p}.protocol"), proto, &PROTOCOLS));
    }
    let app = st(port, "appProtocol");
    if has(port, "appProtocol") {
        out.extend(qualified_name_errors(app).iter().map(|m| Cause::invalid(format!("{p}.appProtocol"), app, m)));
    }
}

pub(super) fn validate_endpoints(ep: &Value, out: &mut Vec<Cause>) {
    for (i, ss) in arr(ep, "subsets").iter().enumerate() {
        let p = format!("subsets[{i}]");
        if arr(ss, "addresses").is_empty() && arr(ss, "notReadyAddresses").is_empty() {
            out.push(Cause::required(p.as_str(), "must specify `addresses` or `notReadyAddresses`"));
        }
        for key in ["addresses", "notReadyAddresses"] {
            for (j, addr) in arr(ss, key).iter().enumerate() {
                let ap = format!("{p}.{key}[{j}]");
                let ip = st(addr, "ip");
                if ip.parse::<IpAddr>().is_err() {
                    out.push(Cause::invalid(format!("{ap}.ip"), ip, IP_MSG));
                }
                let hostname = st(addr, "hostname");
                if !hostname.is_empty() {
                    out.extend(
                        dns1123_label_errors(hostname)
                            .iter()
                            .map(|m| Cause::invalid(format!("{ap}.hostname"), hostname, m)),
                    );
                }
                if let Some(node) = addr.get("nodeName").and_then(Value::as_str) {
                    out.extend(
                        dns1123_subdomain_errors(node)
                            .iter()
                            .map(|m| Cause::invalid(format!("{ap}.nodeName"), node, m)),
                    );
                }
                validate_non_special_ip(ip, &format!("{ap}.ip"), out);
            }
        }
        let ports = arr(ss, "ports");
        for (k, port) in ports.iter().enumerate() {
            validate_endpoint_port(port, ports.len() > 1, false, &format!("{p}.ports[{k}]"), out);
        }
    }
}

pub(super) fn validate_endpoint_slice(slice: &Value, out: &mut Vec<Cause>) {
    let address_type = st(slice, "addressType");
    let endpoints = arr(slice, "endpoints");
    if endpoints.len() > 1000 {
        out.push(Cause::too_many("endpoints", endpoints.len(), 1000));
    }
    for (i, ep) in endpoints.iter().enumerate() {
        let p = format!("endpoints[{i}]");
        let addrs = strs(ep, "addresses");
        if addrs.is_empty() {
            out.push(Cause::required(format!("{p}.addresses"), "must contain at least 1 address"));
        } else if addrs.len() > 100 {
            out.push(Cause::too_many(format!("{p}.addresses"), addrs.len(), 100));
        }
        for (j, a) in addrs.iter().enumerate() {
            let ap = format!("{p}.addresses[{j}]");
            match address_type {
                "IPv4" => match a.parse::<IpAddr>() {
                    Ok(IpAddr::V4(_)) => validate_non_special_ip(a, &ap, out),
                    _ => out.push(Cause::invalid(ap, a, "must be a valid IPv4 address")),
                },
                "IPv6" => match a.parse::<IpAddr>() {
                    Ok(IpAddr::V6(_)) => validate_non_special_ip(a, &ap, out),
                    _ => out.push(Cause::invalid(ap, a, "must be a valid IPv6 address")),
                },
                "FQDN" => {
                    let name = a.strip_suffix('.').unwrap_or(a);
                    let errs = dns1123_subdomain_errors(name);
                    if !errs.is_empty() {
                        out.push(Cause::invalid(ap, name, &errs.join(",")));
                    } else if name.split('.').count() < 2 {
                        out.push(Cause::invalid(
                            ap,
                            name,
                            "should be a domain with at least two segments separated by dots",
                        ));
                    }
                }
                _ => {}
            }
        }
        let hostname = st(ep, "hostname");
        if !hostname.is_empty() {
            out.extend(
                dns1123_label_errors(hostname).iter().map(|m| Cause::invalid(format!("{p}.hostname"), hostname, m)),
            );
        }
        if let Some(node) = ep.get("nodeName").and_then(Value::as_str) {
            out.extend(dns1123_subdomain_errors(node).iter().map(|m| Cause::invalid(format!("{p}.nodeName"), node, m)));
        }
    }
    let ports = arr(slice, "ports");
    if ports.len() > 100 {
        out.push(Cause::too_many("ports", ports.len(), 100));
    }
    let mut names = HashSet::new();
    for (i, port) in ports.iter().enumerate() {
        let p = format!("ports[{i}]");
        validate_endpoint_port(port, false, true, &p, out);
        let name = st(port, "name");
        if !names.insert(name) {
            out.push(Cause::duplicate(format!("{p}.name"), name));
        }
    }
    let types = ["FQDN", "IPv4", "IPv6"];
    if address_type.is_empty() {
        out.push(Cause::required("addressType", ""));
    } else if !types.contains(&address_type) {
        out.push(Cause::not_supported("addressType", address_type, &types));
    }
}

pub(super) fn validate_event(ev: &Value, out: &mut Vec<Cause>) {
    let ns = st(obj_or_null(ev, "metadata"), "namespace");
    let involved = obj_or_null(ev, "involvedObject");
    let ins = st(involved, "namespace");
    let mismatch = if ins.is_empty() { !ns.is_empty() && ns != "default" } else { ns != ins };
    if mismatch {
        out.push(Cause::invalid("involvedObject.namespace", ins, "does not match event.namespace"));
    }
}

pub(super) fn validate_node(node: &Value, out: &mut Vec<Cause>) {
    let spec = obj_or_null(node, "spec");
    let mut unique: HashSet<(String, String)> = HashSet::new();
    for (i, t) in arr(spec, "taints").iter().enumerate() {
        let p = format!("metadata.taints[{i}]");
        let key = st(t, "key");
        out.extend(qualified_name_errors(key).iter().map(|m| Cause::invalid(format!("{p}.key"), key, m)));
        let value = st(t, "value");
        let errs = label_value_errors(value);
        if !errs.is_empty() {
            out.push(Cause::invalid(format!("{p}.value"), value, &errs.join(";")));
        }
        let effect = st(t, "effect");
        let effects = ["NoSchedule", "PreferNoSchedule", "NoExecute"];
        if effect.is_empty() {
            out.push(Cause::required(format!("{p}.effect"), ""));
        } else if !effects.contains(&effect) {
            out.push(Cause::not_supported(format!("{p}.effect"), effect, &effects));
        }
        if !unique.insert((key.to_string(), effect.to_string())) {
            let mut c = Cause::duplicate(
                p.as_str(),
                BadValue::Raw(format!(
                    "core.Taint{{Key:{}, Value:{}, Effect:{}, TimeAdded:<nil>}}",
                    go_quote(key),
                    go_quote(value),
                    go_quote(effect)
                )),
            );
            c.message.push_str(": taints must be unique by key and effect pair");
            out.push(c);
        }
    }
    let cidrs = strs(spec, "podCIDRs");
    for (i, cidr) in cidrs.iter().enumerate() {
        if !valid_cidr(cidr) {
            out.push(Cause::invalid(format!("spec.podCIDRs[{i}]"), cidr, CIDR_MSG));
        }
    }
    let single = st(spec, "podCIDR");
    match cidrs.first() {
        _ if single.is_empty() => {}
        None if !valid_cidr(single) => out.push(Cause::invalid("spec.podCIDR", single, CIDR_MSG)),
        Some(first) if first != single => {
            out.push(Cause::invalid("spec.podCIDR", single, "must be the first element of spec.podCIDRs"))
        }
        _ => {}
    }
}

/// A node's pod CIDRs as Kubernetes reads them: `podCIDRs`, or else the single `podCIDR` (which
/// the v1 conversion turns into a one-element `podCIDRs`).
fn pod_cidrs(spec: &Value) -> Vec<String> {
    let list = strs(spec, "podCIDRs");
    match st(spec, "podCIDR") {
        single if list.is_empty() && !single.is_empty() => vec![single.to_string()],
        _ => list,
    }
}

pub(super) fn validate_node_update(new: &Value, old: &Value, out: &mut Vec<Cause>) {
    let old_cidrs = pod_cidrs(old);
    if !old_cidrs.is_empty() && pod_cidrs(new) != old_cidrs {
        out.push(Cause::forbidden("spec.podCIDRs", "node updates may not change podCIDR except from \"\" to valid"));
    }
    let old_provider = st(old, "providerID");
    if !old_provider.is_empty() && st(new, "providerID") != old_provider {
        out.push(Cause::forbidden(
            "spec.providerID",
            "node updates may not change providerID except from \"\" to valid",
        ));
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::validation::test_support::fields;
    use crate::validation::{invalid_message, validate_create, validate_update};

    #[test]
    fn config_map_keys_and_immutability() {
        let cm =
            json!({"metadata": {"name": "c", "namespace": "d"}, "data": {"ok.key": "v", "bad/key": "v", "..x": "v"}});
        let causes = validate_create("ConfigMap", &cm);
        assert_eq!(fields(&causes), vec!["data[..x]", "data[bad/key]"]);
        assert_eq!(causes[0].message, "Invalid value: \"..x\": must not start with '..'");

        let old = json!({"metadata": {"name": "c", "namespace": "d"}, "immutable": true, "data": {"a": "1"}});
        let mut new = old.clone();
        new["data"]["a"] = json!("2");
        assert_eq!(
            validate_update("ConfigMap", &new, &old),
            vec![Cause::forbidden("data", "field is immutable when `immutable` is set")]
        );
    }

    #[test]
    fn secret_data_is_limited_to_one_mib_and_type_is_immutable() {
        let big = "A".repeat(1_400_000);
        let s = json!({"metadata": {"name": "s", "namespace": "d"}, "type": "Opaque", "data": {"k": big}});
        assert_eq!(validate_create("Secret", &s), vec![Cause::too_long("data", 1048576)]);
        let old = json!({"metadata": {"name": "s", "namespace": "d"}, "type": "Opaque"});
        let mut new = old.clone();
        new["type"] = json!("kubernetes.io/tls");
        let causes = validate_update("Secret", &new, &old);
        assert_eq!(fields(&causes), vec!["data[tls.crt]", "data[tls.key]", "type"]);
    }

    #[test]
    fn endpoints_and_slices_check_addresses_and_ports() {
        let ep = json!({"metadata": {"name": "e", "namespace": "d"}, "subsets": [
            {"addresses": [{"ip": "10.1.2.3"}, {"ip": "nope"}, {"ip": "127.0.0.1"}], "ports": [{"port": 80, "protocol": "TCP"}]},
            {"ports": [{"port": 80}]}
        ]});
        let causes = validate_create("Endpoints", &ep);
        assert_eq!(
            fields(&causes),
            vec![
                "subsets[0].addresses[1].ip",
                "subsets[0].addresses[1].ip",
                "subsets[0].addresses[2].ip",
                "subsets[1]",
            ]
        );
        let slice = json!({"metadata": {"name": "s", "namespace": "d"}, "addressType": "IPv4",
            "endpoints": [{"addresses": ["10.0.0.1"]}, {"addresses": ["fd00::1"]}, {"addresses": []}],
            "ports": [{"name": "http", "port": 80, "protocol": "TCP"}, {"name": "http", "port": 81}]});
        let causes = validate_create("EndpointSlice", &slice);
        assert_eq!(fields(&causes), vec!["endpoints[1].addresses[0]", "endpoints[2].addresses", "ports[1].name"]);
        let bad_type = json!({"metadata": {"name": "s", "namespace": "d"}, "addressType": "IPX"});
        assert_eq!(
            validate_create("EndpointSlice", &bad_type)[0].message,
            "Unsupported value: \"IPX\": supported values: \"FQDN\", \"IPv4\", \"IPv6\""
        );
        let mut changed = slice.clone();
        changed["addressType"] = json!("IPv6");
        changed["endpoints"] = json!([]);
        changed["ports"] = json!([]);
        assert_eq!(fields(&validate_update("EndpointSlice", &changed, &slice)), vec!["addressType"]);
        assert_eq!(
            invalid_message("EndpointSlice", "s", &[Cause::required("addressType", "")]),
            "EndpointSlice.discovery.k8s.io \"s\" is invalid: addressType: Required value"
        );
    }

    #[test]
    fn event_namespace_must_match_its_object() {
        let e =
            json!({"metadata": {"name": "e.1", "namespace": "a"}, "involvedObject": {"kind": "Pod", "namespace": "b"}});
        assert_eq!(fields(&validate_create("Event", &e)), vec!["involvedObject.namespace"]);
    }

    #[test]
    fn node_pod_cidrs_are_set_once_through_either_field() {
        let node = |spec: Value| json!({"metadata": {"name": "n1"}, "spec": spec});
        let unset = node(json!({}));
        let both = node(json!({"podCIDR": "10.244.1.0/24", "podCIDRs": ["10.244.1.0/24"]}));
        let single = node(json!({"podCIDR": "10.244.1.0/24"}));
        assert!(validate_update("Node", &both, &unset).is_empty(), "setting it once is allowed");
        assert!(validate_update("Node", &single, &unset).is_empty());
        assert!(validate_update("Node", &both, &single).is_empty(), "podCIDRs catching up with podCIDR");
        assert!(validate_update("Node", &both, &both).is_empty());
        let changed = node(json!({"podCIDR": "10.244.2.0/24", "podCIDRs": ["10.244.2.0/24"]}));
        assert_eq!(fields(&validate_update("Node", &changed, &both)), vec!["spec.podCIDRs"]);
        let changed_single = node(json!({"podCIDR": "10.244.2.0/24"}));
        assert_eq!(fields(&validate_update("Node", &changed_single, &single)), vec!["spec.podCIDRs"]);
        assert_eq!(fields(&validate_update("Node", &unset, &both)), vec!["spec.podCIDRs"], "nor unset");
        let mismatched = node(json!({"podCIDR": "10.244.9.0/24", "podCIDRs": ["10.244.1.0/24"]}));
        assert_eq!(fields(&validate_update("Node", &mismatched, &both)), vec!["spec.podCIDR"]);
        assert_eq!(fields(&validate_create("Node", &node(json!({"podCIDR": "10.244.1.0/33"})))), vec!["spec.podCIDR"]);
    }

    #[test]
    fn node_taints_need_valid_effects() {
        let n = json!({"metadata": {"name": "n1"}, "spec": {"taints": [{"key": "k", "effect": "Maybe"}], "podCIDRs": ["10.244.0.0/24", "x"]}});
        assert_eq!(fields(&validate_create("Node", &n)), vec!["metadata.taints[0].effect", "spec.podCIDRs[1]"]);
    }
}
