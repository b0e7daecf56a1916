//! Service validation: ports, types, cluster IPs, and what an update may change.

use std::collections::HashSet;
use std::net::IpAddr;

use serde_json::Value;

use super::causes::{go_quote, go_slice, BadValue, Cause};
use super::container::validate_port_num_or_name;
use super::json::{arr, has, int, obj, st, strs};
use super::meta::validate_labels;
use super::names::{dns1123_label_errors, dns1123_subdomain_errors, port_num_errors, IP_MSG};
use super::obj_or_null;
use super::pod::PROTOCOLS;

fn service_cluster_ips(spec: &Value) -> Vec<String> {
    let ips = strs(spec, "clusterIPs");
    if !ips.is_empty() {
        return ips;
    }
    match st(spec, "clusterIP") {
        "" => Vec::new(),
        ip => vec![ip.to_string()],
    }
}

fn is_headless(spec: &Value) -> bool {
    let ips = service_cluster_ips(spec);
    ips.len() == 1 && ips[0] == "None"
}

pub(super) fn validate_service(svc: &Value, out: &mut Vec<Cause>) {
    let spec = obj_or_null(svc, "spec");
    let ty = st(spec, "type");
    let headless = is_headless(spec);
    let ports = arr(spec, "ports");
    if ports.is_empty() && !headless && ty != "ExternalName" {
        out.push(Cause::required("spec.ports", ""));
    }
    match ty {
        "LoadBalancer" | "NodePort" if headless => out.push(Cause::invalid(
            "spec.clusterIPs[0]",
            "None",
            &format!("may not be set to 'None' for {ty} services"),
        )),
        "ExternalName" => {
            if !service_cluster_ips(spec).is_empty() {
                out.push(Cause::forbidden("spec.clusterIPs", "may not be set for ExternalName services"));
            }
            if !arr(spec, "ipFamilies").is_empty() {
                out.push(Cause::forbidden("spec.ipFamilies", "may not be set for ExternalName services"));
            }
            if has(spec, "ipFamilyPolicy") {
                out.push(Cause::forbidden("spec.ipFamilyPolicy", "may not be set for ExternalName services"));
            }
            let cname = st(spec, "externalName");
            let cname = cname.strip_suffix('.').unwrap_or(cname);
            if cname.is_empty() {
                out.push(Cause::required("spec.externalName", ""));
            } else {
                out.extend(
                    dns1123_subdomain_errors(cname).iter().map(|m| Cause::invalid("spec.externalName", cname, m)),
                );
            }
        }
        _ => {}
    }
    let mut names = HashSet::new();
    for (i, port) in ports.iter().enumerate() {
        let p = format!("spec.ports[{i}]");
        let name = st(port, "name");
        if ports.len() > 1 && name.is_empty() {
            out.push(Cause::required(format!("{p}.name"), ""));
        } else if !name.is_empty() {
            out.extend(dns1123_label_errors(name).iter().map(|m| Cause::invalid(format!("{p}.name"), name, m)));
            if !names.insert(name) {
                out.push(Cause::duplicate(format!("{p}.name"), name));
            }
        }
        let num = int(port, "port").unwrap_or(0);
        out.extend(port_num_errors(num).iter().map(|m| Cause::invalid(format!("{p}.port"), num, m)));
        let proto = st(port, "protocol");
        if !proto.is_empty() && !PROTOCOLS.contains(&proto) {
            out.push(Cause::not_supported(format!("{p}.protocol"), proto, &PROTOCOLS));
        }
        if let Some(tp) = port.get("targetPort").filter(|v| !v.is_null()) {
            validate_port_num_or_name(Some(tp), &format!("{p}.targetPort"), out);
        }
        let node_port = int(port, "nodePort").unwrap_or(0);
        if node_port != 0 {
            match ty {
                "ClusterIP" | "" => {
                    out.push(Cause::forbidden(format!("{p}.nodePort"), "may not be used when `type` is 'ClusterIP'"))
                }
                "ExternalName" => {
                    out.push(Cause::forbidden(format!("{p}.nodePort"), "may not be used when `type` is 'ExternalName'"))
                }
                _ if !(30000..=32767).contains(&node_port) => out.push(Cause::invalid(
                    format!("{p}.nodePort"),
                    node_port,
                    "provided port is not in the valid range. The range of valid ports is 30000-32767",
                )),
                _ => {}
            }
        }
    }
    validate_labels(obj(spec, "selector"), "spec.selector", out);

    let affinity = st(spec, "sessionAffinity");
    match affinity {
        "" | "None" => {
            if has(spec, "sessionAffinityConfig") && affinity == "None" {
                out.push(Cause::forbidden(
                    "spec.sessionAffinityConfig",
                    "must not be set when session affinity is None",
                ));
            }
        }
        "ClientIP" => {
            let timeout = spec
                .get("sessionAffinityConfig")
                .and_then(|c| c.get("clientIP"))
                .and_then(|c| c.get("timeoutSeconds"))
                .and_then(Value::as_i64);
            if let Some(t) = timeout {
                if !(1..=86400).contains(&t) {
                    out.push(Cause::invalid(
                        "spec.sessionAffinityConfig.clientIP.timeoutSeconds",
                        t,
                        "must be greater than 0 and less than 86400",
                    ));
                }
            }
        }
        other => out.push(Cause::not_supported("spec.sessionAffinity", other, &["ClientIP", "None"])),
    }

    if ty != "ExternalName" {
        validate_cluster_ips(spec, out);
    }
    for (i, ip) in strs(spec, "externalIPs").iter().enumerate() {
        validate_non_special_ip(ip, &format!("spec.externalIPs[{i}]"), out);
    }
    let types = ["ClusterIP", "ExternalName", "LoadBalancer", "NodePort"];
    if !ty.is_empty() && !types.contains(&ty) {
        out.push(Cause::not_supported("spec.type", ty, &types));
    }

    let mut node_ports = HashSet::new();
    let mut seen_ports = HashSet::new();
    for (i, port) in ports.iter().enumerate() {
        let proto = match st(port, "protocol") {
            "" => "TCP",
            p => p,
        };
        let node_port = int(port, "nodePort").unwrap_or(0);
        if node_port != 0 && !node_ports.insert((proto, node_port)) {
            out.push(Cause::duplicate(format!("spec.ports[{i}].nodePort"), node_port));
        }
        let num = int(port, "port").unwrap_or(0);
        if !seen_ports.insert((proto, num)) {
            let shown = format!(
                "core.ServicePort{{Name:\"\", Protocol:{}, AppProtocol:(*string)(nil), Port:{num}, TargetPort:intstr.IntOrString{{Type:0, IntVal:0, StrVal:\"\"}}, NodePort:0}}",
                go_quote(proto)
            );
            out.push(Cause::duplicate(format!("spec.ports[{i}]"), BadValue::Raw(shown)));
        }
    }
    if has(spec, "allocateLoadBalancerNodePorts") && ty != "LoadBalancer" {
        out.push(Cause::forbidden(
            "spec.allocateLoadBalancerNodePorts",
            "may only be used when `type` is 'LoadBalancer'",
        ));
    }
    let external =
        matches!(ty, "LoadBalancer" | "NodePort") || (ty == "ClusterIP" && !arr(spec, "externalIPs").is_empty());
    let etp = st(spec, "externalTrafficPolicy");
    if !etp.is_empty() {
        if !external {
            out.push(Cause::invalid(
                "spec.externalTrafficPolicy",
                etp,
                "may only be set for externally-accessible services",
            ));
        } else if etp != "Cluster" && etp != "Local" {
            out.push(Cause::not_supported("spec.externalTrafficPolicy", etp, &["Cluster", "Local"]));
        }
    }
    let itp = st(spec, "internalTrafficPolicy");
    if !itp.is_empty() && itp != "Cluster" && itp != "Local" {
        out.push(Cause::not_supported("spec.internalTrafficPolicy", itp, &["Cluster", "Local"]));
    }
}

fn validate_cluster_ips(spec: &Value, out: &mut Vec<Cause>) {
    let cluster_ip = st(spec, "clusterIP");
    let listed = strs(spec, "clusterIPs");
    if !cluster_ip.is_empty() && !listed.is_empty() && listed[0] != cluster_ip {
        let refs: Vec<&str> = listed.iter().map(String::as_str).collect();
        out.push(Cause::invalid(
            "spec.clusterIPs",
            BadValue::Raw(go_slice("string", &refs)),
            "first value must match `clusterIP`",
        ));
    }
    let families = strs(spec, "ipFamilies");
    let mut seen = HashSet::new();
    for (i, f) in families.iter().enumerate() {
        if f != "IPv4" && f != "IPv6" {
            out.push(Cause::not_supported(format!("spec.ipFamilies[{i}]"), f, &["IPv4", "IPv6"]));
        }
        if !seen.insert(f) {
            out.push(Cause::duplicate(format!("spec.ipFamilies[{i}]"), f));
        }
    }
    let policy = st(spec, "ipFamilyPolicy");
    let policies = ["PreferDualStack", "RequireDualStack", "SingleStack"];
    if has(spec, "ipFamilyPolicy") && !policies.contains(&policy) {
        out.push(Cause::not_supported("spec.ipFamilyPolicy", policy, &policies));
    }
    // Validate clusterIPs if given, else the lone clusterIP at its own path.
    let (ips, field): (Vec<String>, &str) = if listed.is_empty() {
        (service_cluster_ips(spec), "spec.clusterIP")
    } else {
        (listed.clone(), "spec.clusterIPs")
    };
    let mut bad = false;
    for (i, ip) in ips.iter().enumerate() {
        let p = if listed.is_empty() { field.to_string() } else { format!("{field}[{i}]") };
        if i == 0 && ip == "None" {
            if ips.len() > 1 {
                bad = true;
                let refs: Vec<&str> = ips.iter().map(String::as_str).collect();
                out.push(Cause::invalid(
                    field,
                    BadValue::Raw(go_slice("string", &refs)),
                    "'None' must be the first and only value",
                ));
            }
            continue;
        }
        if ip.parse::<IpAddr>().is_err() {
            bad = true;
            out.push(Cause::invalid(p, ip, IP_MSG));
        }
    }
    if ips.len() > 2 {
        let refs: Vec<&str> = ips.iter().map(String::as_str).collect();
        out.push(Cause::invalid(field, BadValue::Raw(go_slice("string", &refs)), "may only hold up to 2 values"));
    }
    if bad {
        return;
    }
    if ips.len() == 2 {
        let v6: Vec<bool> = ips.iter().map(|ip| ip.parse::<IpAddr>().is_ok_and(|a| a.is_ipv6())).collect();
        if v6[0] == v6[1] {
            let refs: Vec<&str> = ips.iter().map(String::as_str).collect();
            out.push(Cause::invalid(
                field,
                BadValue::Raw(go_slice("string", &refs)),
                "may specify no more than one IP for each IP family",
            ));
        }
    }
    if !is_headless(spec) {
        for (i, (ip, fam)) in ips.iter().zip(&families).enumerate() {
            let is_v6 = ip.parse::<IpAddr>().is_ok_and(|a| a.is_ipv6());
            let p = if listed.is_empty() { field.to_string() } else { format!("{field}[{i}]") };
            if fam == "IPv4" && is_v6 {
                out.push(Cause::invalid(p, ip, &format!("expected an IPv4 value as indicated by `ipFamilies[{i}]`")));
            } else if fam == "IPv6" && !is_v6 {
                out.push(Cause::invalid(p, ip, &format!("expected an IPv6 value as indicated by `ipFamilies[{i}]`")));
            }
        }
    }
}

pub(super) fn validate_non_special_ip(ip: &str, p: &str, out: &mut Vec<Cause>) {
    let Ok(addr) = ip.parse::<IpAddr>() else {
        out.push(Cause::invalid(p, ip, IP_MSG));
        return;
    };
    if addr.is_unspecified() {
        out.push(Cause::invalid(p, ip, &format!("may not be unspecified ({ip})")));
    }
    if addr.is_loopback() {
        out.push(Cause::invalid(p, ip, "may not be in the loopback range (127.0.0.0/8, ::1/128)"));
    }
    let link_local_unicast = match addr {
        IpAddr::V4(a) => a.is_link_local(),
        IpAddr::V6(a) => (a.segments()[0] & 0xffc0) == 0xfe80,
    };
    if link_local_unicast {
        out.push(Cause::invalid(p, ip, "may not be in the link-local range (169.254.0.0/16, fe80::/10)"));
    }
    let link_local_multicast = match addr {
        IpAddr::V4(a) => a.octets()[0] == 224 && a.octets()[1] == 0 && a.octets()[2] == 0,
        IpAddr::V6(a) => (a.segments()[0] & 0xff0f) == 0xff02,
    };
    if link_local_multicast {
        out.push(Cause::invalid(p, ip, "may not be in the link-local multicast range (224.0.0.0/24, ff02::/10)"));
    }
}

pub(super) fn validate_service_update(new: &Value, old: &Value, out: &mut Vec<Cause>) {
    if st(new, "type") == "ExternalName" || st(old, "type") == "ExternalName" {
        return;
    }
    let new_ips = service_cluster_ips(new);
    let old_ips = service_cluster_ips(old);
    // Absent in the update: the server carries the allocated values over.
    if new_ips.is_empty() || old_ips.is_empty() || (is_headless(new) && is_headless(old)) {
        return;
    }
    let refs: Vec<&str> = new_ips.iter().map(String::as_str).collect();
    let shown = go_slice("string", &refs);
    if new_ips.len() == old_ips.len() {
        for (i, (n, o)) in new_ips.iter().zip(&old_ips).enumerate() {
            if n != o {
                out.push(Cause::invalid(
                    format!("spec.clusterIPs[{i}]"),
                    BadValue::Raw(shown.clone()),
                    "may not change once set",
                ));
            }
        }
    } else if new_ips[0] != old_ips[0] {
        out.push(Cause::invalid("spec.clusterIPs[0]", BadValue::Raw(shown), "may not change once set"));
    }
    let new_fam = strs(new, "ipFamilies");
    let old_fam = strs(old, "ipFamilies");
    if let (Some(n), Some(o)) = (new_fam.first(), old_fam.first()) {
        if n != o {
            let refs: Vec<&str> = new_fam.iter().map(String::as_str).collect();
            out.push(Cause::invalid(
                "spec.ipFamilies[0]",
                BadValue::Raw(go_slice("core.IPFamily", &refs)),
                "may not change once set",
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::validation::test_support::fields;
    use crate::validation::{validate_create, validate_update};

    #[test]
    fn service_names_are_dns_1035_labels() {
        let svc = json!({"metadata": {"name": "1web", "namespace": "d"}, "spec": {"ports": [{"port": 80}]}});
        let causes = validate_create("Service", &svc);
        assert_eq!(fields(&causes), vec!["metadata.name"]);
        assert!(causes[0].message.contains("a DNS-1035 label must consist of"));
    }

    #[test]
    fn services_need_ports_unless_external_name() {
        let svc = json!({"metadata": {"name": "web", "namespace": "d"}, "spec": {"type": "ClusterIP"}});
        assert_eq!(validate_create("Service", &svc), vec![Cause::required("spec.ports", "")]);
        let ext = json!({"metadata": {"name": "web", "namespace": "d"}, "spec": {"type": "ExternalName", "externalName": "example.com"}});
        assert_eq!(validate_create("Service", &ext), vec![]);
        let headless = json!({"metadata": {"name": "web", "namespace": "d"}, "spec": {"clusterIP": "None"}});
        assert_eq!(validate_create("Service", &headless), vec![]);
    }

    #[test]
    fn service_ports_need_names_when_several_and_valid_node_ports() {
        let svc = json!({"metadata": {"name": "web", "namespace": "d"}, "spec": {
            "type": "ClusterIP",
            "clusterIP": "10.0.0.300",
            "sessionAffinity": "Sticky",
            "ports": [{"port": 80, "nodePort": 30080}, {"name": "b", "port": 0}]
        }});
        let causes = validate_create("Service", &svc);
        assert_eq!(
            fields(&causes),
            vec![
                "spec.ports[0].name",
                "spec.ports[0].nodePort",
                "spec.ports[1].port",
                "spec.sessionAffinity",
                "spec.clusterIP",
            ]
        );
        let np = json!({"metadata": {"name": "web", "namespace": "d"}, "spec": {"type": "NodePort", "ports": [{"port": 80, "nodePort": 80}]}});
        assert_eq!(
            validate_create("Service", &np)[0].message,
            "Invalid value: 80: provided port is not in the valid range. The range of valid ports is 30000-32767"
        );
    }

    #[test]
    fn service_cluster_ip_may_not_change() {
        let old = json!({"metadata": {"name": "web", "namespace": "d"}, "spec": {"clusterIP": "10.0.0.10", "clusterIPs": ["10.0.0.10"], "ports": [{"port": 80}]}});
        let mut new = old.clone();
        new["spec"]["clusterIP"] = json!("10.0.0.11");
        new["spec"]["clusterIPs"] = json!(["10.0.0.11"]);
        let causes = validate_update("Service", &new, &old);
        assert_eq!(
            causes,
            vec![Cause::invalid(
                "spec.clusterIPs[0]",
                BadValue::Raw("[]string{\"10.0.0.11\"}".into()),
                "may not change once set"
            )]
        );
        let mut to_external = old.clone();
        to_external["spec"] = json!({"type": "ExternalName", "externalName": "example.com"});
        assert_eq!(validate_update("Service", &to_external, &old), vec![]);
    }
}
