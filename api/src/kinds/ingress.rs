//! networking.k8s.io/v1 Ingress: HTTP routes from hosts and paths to Services.

use std::net::IpAddr;

use k8s_openapi::api::networking::v1 as net;
use serde_json::{json, Value};

use super::{roundtrip, Strategy};
use crate::resources::{ResourceInfo, Subresource};
use crate::schema::SchemaError;
use crate::table::columns::{Column, AGE};
use crate::table::obj::Obj;
use crate::validation::json::{arr, has, int, st, strs};
use crate::validation::names::{dns1035_label_errors, dns1123_subdomain_errors, port_name_errors, IP_MSG};
use crate::validation::Cause;

pub struct Ingress;

pub const INFO: ResourceInfo = crate::kind_info!(
    "networking.k8s.io",
    "Ingress",
    "ingresses",
    "ingress",
    true,
    &["ing"],
    &[Subresource::Status],
    &Ingress
);

const PATH_TYPES: [&str; 3] = ["Exact", "ImplementationSpecific", "Prefix"];

impl Strategy for Ingress {
    fn normalize(&self, obj: &Value) -> Result<Value, SchemaError> {
        roundtrip::<net::Ingress>(obj)
    }

    fn defaults(&self, obj: &mut Value) {
        // IngressStatus.LoadBalancer is a struct, so every Ingress shows `loadBalancer: {}`.
        if let Some(status) = obj.get_mut("status").and_then(Value::as_object_mut) {
            crate::defaults::json::default_value(status, "loadBalancer", json!({}));
        }
    }

    fn validate(&self, obj: &Value, out: &mut Vec<Cause>) {
        let spec = obj.get("spec").unwrap_or(&Value::Null);
        let rules = arr(spec, "rules");
        let default_backend = spec.get("defaultBackend").filter(|b| !b.is_null());
        if rules.is_empty() && default_backend.is_none() {
            out.push(Cause::invalid(
                "spec",
                crate::validation::BadValue::Raw("[]".into()),
                "either `defaultBackend` or `rules` must be specified",
            ));
        }
        if let Some(b) = default_backend {
            validate_backend(b, "spec.defaultBackend", out);
        }
        for (i, rule) in rules.iter().enumerate() {
            let p = format!("spec.rules[{i}]");
            let host = st(rule, "host");
            if !host.is_empty() {
                validate_host(host, &format!("{p}.host"), out);
            }
            let Some(http) = rule.get("http").filter(|h| !h.is_null()) else {
                continue;
            };
            let paths = arr(http, "paths");
            if paths.is_empty() {
                out.push(Cause::required(format!("{p}.http.paths"), ""));
            }
            for (j, path) in paths.iter().enumerate() {
                validate_path(path, &format!("{p}.http.paths[{j}]"), out);
            }
        }
        for (i, tls) in arr(spec, "tls").iter().enumerate() {
            for (j, host) in strs(tls, "hosts").iter().enumerate() {
                validate_host(host, &format!("spec.tls[{i}].hosts[{j}]"), out);
            }
        }
        if let Some(class) = spec.get("ingressClassName").and_then(Value::as_str) {
            out.extend(
                dns1123_subdomain_errors(class).iter().map(|m| Cause::invalid("spec.ingressClassName", class, m)),
            );
        }
    }

    fn validate_status(&self, new: &Value, _old: &Value, out: &mut Vec<Cause>) {
        let ingress = new.pointer("/status/loadBalancer/ingress").and_then(Value::as_array);
        for (i, ing) in ingress.map_or(&[][..], Vec::as_slice).iter().enumerate() {
            let p = format!("status.loadBalancer.ingress[{i}]");
            let ip = st(ing, "ip");
            if !ip.is_empty() && ip.parse::<IpAddr>().is_err() {
                out.push(Cause::invalid(format!("{p}.ip"), ip, IP_MSG));
            }
            let host = st(ing, "hostname");
            if !host.is_empty() {
                out.extend(
                    dns1123_subdomain_errors(host).iter().map(|m| Cause::invalid(format!("{p}.hostname"), host, m)),
                );
                if host.parse::<IpAddr>().is_ok() {
                    out.push(Cause::invalid(format!("{p}.hostname"), host, "must be a DNS name, not an IP address"));
                }
            }
        }
    }

    fn resets_status_on_create(&self) -> bool {
        true
    }

    fn tracks_generation(&self) -> bool {
        true
    }

    fn columns(&self) -> Vec<Column> {
        vec![
            ("Class", "string", "", 0, "The name of the IngressClass resource that should be used for this Ingress."),
            ("Hosts", "string", "", 0, "Hosts that incoming requests are matched against before the ingress rule"),
            ("Address", "string", "", 0, "Address is a list containing ingress points for the load-balancer"),
            ("Ports", "string", "", 0, "Ports of TLS configurations that open"),
            AGE,
        ]
    }

    fn cells(&self, o: Obj<'_>, age: &Value) -> Vec<Value> {
        let class = o.get("spec.ingressClassName").and_then(Value::as_str).unwrap_or("<none>");
        let hosts: Vec<&str> = o.list("spec.rules").iter().map(|r| st(r, "host")).filter(|h| !h.is_empty()).collect();
        let hosts = match hosts.len() {
            0 => "*".to_owned(),
            n if n > 3 => format!("{} + {} more...", hosts[..3].join(","), n - 3),
            _ => hosts.join(","),
        };
        let address: Vec<&str> = o
            .list("status.loadBalancer.ingress")
            .iter()
            .map(|i| if has(i, "ip") { st(i, "ip") } else { st(i, "hostname") })
            .filter(|a| !a.is_empty())
            .collect();
        let ports = if o.list("spec.tls").is_empty() { "80" } else { "80, 443" };
        vec![json!(class), json!(hosts), json!(address.join(",")), json!(ports), age.clone()]
    }
}

/// A rule or TLS host: a DNS subdomain, a wildcard one (`*.example.com`), never an IP address.
fn validate_host(host: &str, p: &str, out: &mut Vec<Cause>) {
    if host.parse::<IpAddr>().is_ok() {
        out.push(Cause::invalid(p, host, "must be a DNS name, not an IP address"));
        return;
    }
    if let Some(rest) = host.strip_prefix("*.") {
        if dns1123_subdomain_errors(rest).is_empty() {
            return;
        }
        out.push(Cause::invalid(
            p,
            host,
            "a wildcard DNS-1123 subdomain must start with '*.', followed by a valid DNS subdomain, which must consist of lower case alphanumeric characters, '-' or '.' and end with an alphanumeric character (e.g. '*.example.com', regex used for validation is '\\*\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
        ));
        return;
    }
    out.extend(dns1123_subdomain_errors(host).iter().map(|m| Cause::invalid(p, host, m)));
}

fn validate_path(path: &Value, p: &str, out: &mut Vec<Cause>) {
    let value = st(path, "path");
    match path.get("pathType").and_then(Value::as_str) {
        None | Some("") => out.push(Cause::required(format!("{p}.pathType"), "pathType must be specified")),
        Some("Exact" | "Prefix") => {
            if !value.starts_with('/') {
                out.push(Cause::invalid(format!("{p}.path"), value, "must be an absolute path"));
            } else if value.contains("//") {
                out.push(Cause::invalid(format!("{p}.path"), value, "must not contain '//'"));
            }
        }
        Some("ImplementationSpecific") => {
            if !value.is_empty() && !value.starts_with('/') {
                out.push(Cause::invalid(format!("{p}.path"), value, "must be an absolute path"));
            }
        }
        Some(other) => out.push(Cause::not_supported(format!("{p}.pathType"), other, &PATH_TYPES)),
    }
    match path.get("backend").filter(|b| !b.is_null()) {
        Some(b) => validate_backend(b, &format!("{p}.backend"), out),
        None => out.push(Cause::required(format!("{p}.backend"), "")),
    }
}

/// `validateIngressBackend`: a Service (name and one of port name or number) or a resource.
fn validate_backend(b: &Value, p: &str, out: &mut Vec<Cause>) {
    let service = b.get("service").filter(|s| !s.is_null());
    let resource = b.get("resource").filter(|r| !r.is_null());
    match (service, resource) {
        (Some(_), Some(_)) => out.push(Cause::invalid(
            p,
            crate::validation::BadValue::Raw("{}".into()),
            "cannot set both resource and service backends",
        )),
        (None, None) => out.push(Cause::invalid(
            p,
            crate::validation::BadValue::Raw("{}".into()),
            "resource or service backend is required",
        )),
        (None, Some(r)) => {
            if st(r, "kind").is_empty() {
                out.push(Cause::required(format!("{p}.resource.kind"), ""));
            }
            if st(r, "name").is_empty() {
                out.push(Cause::required(format!("{p}.resource.name"), ""));
            }
        }
        (Some(s), None) => {
            let name = st(s, "name");
            if name.is_empty() {
                out.push(Cause::required(format!("{p}.service.name"), ""));
            } else {
                out.extend(
                    dns1035_label_errors(name).iter().map(|m| Cause::invalid(format!("{p}.service.name"), name, m)),
                );
            }
            let port = s.get("port").unwrap_or(&Value::Null);
            let port_name = st(port, "name");
            let number = int(port, "number").unwrap_or(0);
            let pp = format!("{p}.service.port");
            match (port_name.is_empty(), number == 0) {
                (false, false) => out.push(Cause::invalid(
                    pp,
                    crate::validation::BadValue::Raw(port.to_string()),
                    "cannot set both port name & port number",
                )),
                (true, true) => out.push(Cause::invalid(
                    pp,
                    crate::validation::BadValue::Raw(port.to_string()),
                    "port name or number is required",
                )),
                (false, true) => out.extend(
                    port_name_errors(port_name).iter().map(|m| Cause::invalid(format!("{pp}.name"), port_name, m)),
                ),
                (true, false) => {
                    if !(1..=65535).contains(&number) {
                        out.push(Cause::invalid(
                            format!("{pp}.number"),
                            number,
                            "must be between 1 and 65535, inclusive",
                        ));
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kinds::test_support::{cells, create_causes, fields, status_causes};

    fn ingress(spec: Value) -> Value {
        json!({"metadata": {"name": "web", "namespace": "d"}, "spec": spec})
    }

    fn backend(port: Value) -> Value {
        json!({"service": {"name": "web", "port": port}})
    }

    #[test]
    fn rules_or_a_default_backend_are_required() {
        let causes = create_causes("Ingress", &ingress(json!({})));
        assert_eq!(
            causes[0].error_string(),
            "spec: Invalid value: []: either `defaultBackend` or `rules` must be specified"
        );
        assert_eq!(
            create_causes("Ingress", &ingress(json!({"defaultBackend": backend(json!({"number": 80}))}))),
            vec![]
        );
    }

    #[test]
    fn paths_need_a_type_an_absolute_path_and_one_port() {
        let rule = |path: Value| ingress(json!({"rules": [{"host": "a.example.com", "http": {"paths": [path]}}]}));
        let ok = rule(json!({"path": "/", "pathType": "Prefix", "backend": backend(json!({"name": "http"}))}));
        assert_eq!(create_causes("Ingress", &ok), vec![]);
        let causes = create_causes("Ingress", &rule(json!({"path": "api", "backend": backend(json!({}))})));
        assert_eq!(
            fields(&causes),
            ["spec.rules[0].http.paths[0].pathType", "spec.rules[0].http.paths[0].backend.service.port"]
        );
        let relative = create_causes(
            "Ingress",
            &rule(json!({"path": "api", "pathType": "Exact",
            "backend": backend(json!({"number": 80, "name": "http"}))})),
        );
        assert_eq!(
            fields(&relative),
            ["spec.rules[0].http.paths[0].path", "spec.rules[0].http.paths[0].backend.service.port"]
        );
    }

    #[test]
    fn hosts_are_dns_names_or_wildcards_never_ips() {
        let host = |h: &str| ingress(json!({"rules": [{"host": h}]}));
        assert_eq!(create_causes("Ingress", &host("*.example.com")), vec![]);
        assert_eq!(fields(&create_causes("Ingress", &host("10.0.0.1"))), ["spec.rules[0].host"]);
        assert_eq!(fields(&create_causes("Ingress", &host("a.*.com"))), ["spec.rules[0].host"]);
    }

    #[test]
    fn status_addresses_are_checked() {
        let old = ingress(json!({"defaultBackend": backend(json!({"number": 80}))}));
        let mut new = old.clone();
        new["status"] = json!({"loadBalancer": {"ingress": [{"ip": "10.0.0.300"}]}});
        assert_eq!(fields(&status_causes("Ingress", &new, &old)), ["status.loadBalancer.ingress[0].ip"]);
    }

    #[test]
    fn kubectl_prints_class_hosts_address_and_ports() {
        let mut ing = ingress(json!({"ingressClassName": "kaji", "tls": [{"hosts": ["a.io"]}],
            "rules": [{"host": "a.io"}, {"host": "b.io"}, {"host": "c.io"}, {"host": "d.io"}]}));
        ing["status"] = json!({"loadBalancer": {"ingress": [{"ip": "10.0.0.1"}, {"hostname": "lb.io"}]}});
        assert_eq!(
            cells("Ingress", &ing)[..5],
            [
                json!("web"),
                json!("kaji"),
                json!("a.io,b.io,c.io + 1 more..."),
                json!("10.0.0.1,lb.io"),
                json!("80, 443")
            ]
        );
        assert_eq!(cells("Ingress", &ingress(json!({})))[1..5], [json!("<none>"), json!("*"), json!(""), json!("80")]);
    }
}
