//! Service, Endpoints and EndpointSlice cells: types, IPs, ports and address lists.

use serde_json::{json, Value};

use super::format_labels;
use super::obj::{none_if_empty, Obj};

pub(super) fn service_cells(svc: Obj<'_>, name: Value, age: Value) -> Vec<Value> {
    // Defaulting fills these in; read them the same way for objects stored without it.
    let type_ = match svc.str("spec.type") {
        "" => "ClusterIP",
        t => t,
    };
    let cluster_ip =
        svc.list("spec.clusterIPs").first().and_then(Value::as_str).unwrap_or_else(|| svc.str("spec.clusterIP"));
    let external: Vec<&str> = svc.list("spec.externalIPs").iter().filter_map(Value::as_str).collect();
    let external_ip = match type_ {
        "ClusterIP" | "NodePort" if external.is_empty() => "<none>".to_owned(),
        "ClusterIP" | "NodePort" => external.join(","),
        "LoadBalancer" => {
            let mut ingress: Vec<&str> = svc
                .list("status.loadBalancer.ingress")
                .iter()
                .map(|i| match Obj(i).str("ip") {
                    "" => Obj(i).str("hostname"),
                    ip => ip,
                })
                .filter(|s| !s.is_empty())
                .collect();
            ingress.sort_unstable();
            ingress.dedup();
            ingress.extend(external);
            if ingress.is_empty() {
                "<pending>".to_owned()
            } else {
                ingress.join(",")
            }
        }
        "ExternalName" => svc.str("spec.externalName").to_owned(),
        _ => "<unknown>".to_owned(),
    };
    let ports: Vec<String> = svc
        .list("spec.ports")
        .iter()
        .map(|p| {
            let p = Obj(p);
            let protocol = match p.str("protocol") {
                "" => "TCP",
                proto => proto,
            };
            match p.int("nodePort") {
                n if n > 0 => format!("{}:{n}/{protocol}", p.int("port")),
                _ => format!("{}/{protocol}", p.int("port")),
            }
        })
        .collect();
    vec![
        name,
        json!(type_),
        json!(none_if_empty(cluster_ip)),
        json!(external_ip),
        json!(none_if_empty(&ports.join(","))),
        age,
        json!(format_labels(svc.map("spec.selector"))),
    ]
}

/// `formatEndpoints`: up to three `ip:port` pairs, then ` + N more...`.
pub(super) fn format_endpoints(ep: Obj<'_>) -> String {
    let subsets = ep.list("subsets");
    if subsets.is_empty() {
        return "<none>".to_owned();
    }
    let mut all = Vec::new();
    for ss in subsets {
        let ss = Obj(ss);
        let ips = ss.list("addresses").iter().map(|a| Obj(a).str("ip"));
        let ports = ss.list("ports");
        if ports.is_empty() {
            all.extend(ips.map(str::to_owned));
        } else {
            for port in ports {
                let port = Obj(port).int("port");
                all.extend(ips.clone().map(|ip| {
                    if ip.contains(':') {
                        format!("[{ip}]:{port}")
                    } else {
                        format!("{ip}:{port}")
                    }
                }));
            }
        }
    }
    list_with_more(all.into_iter(), "")
}

/// Joins the first three items and appends ` + N more...` for the rest; `empty` when none.
pub(super) fn list_with_more(items: impl Iterator<Item = String>, empty: &str) -> String {
    const MAX: usize = 3;
    let items: Vec<String> = items.collect();
    let shown = items[..items.len().min(MAX)].join(",");
    if items.len() > MAX {
        format!("{shown} + {} more...", items.len() - MAX)
    } else if shown.is_empty() {
        empty.to_owned()
    } else {
        shown
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::test_support::cell_strings;

    #[test]
    fn node_port_service_prints_ports_and_selector() {
        let svc = json!({
            "metadata": {"name": "web", "creationTimestamp": "2025-01-01T11:58:00Z"},
            "spec": {
                "type": "NodePort", "clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10"],
                "selector": {"tier": "front", "app": "web"},
                "ports": [{"port": 80, "protocol": "TCP", "nodePort": 30080},
                          {"port": 53, "protocol": "UDP", "nodePort": 30053}]
            }
        });
        assert_eq!(
            cell_strings("Service", &svc),
            ["web", "NodePort", "10.96.0.10", "<none>", "80:30080/TCP,53:30053/UDP", "2m", "app=web,tier=front"]
        );
    }

    #[test]
    fn service_external_ips_depend_on_type() {
        let external =
            |spec: Value, status: Value| cell_strings("Service", &json!({"spec": spec, "status": status}))[3].clone();
        assert_eq!(external(json!({"externalIPs": ["1.2.3.4"]}), json!({})), "1.2.3.4");
        assert_eq!(external(json!({"type": "LoadBalancer"}), json!({})), "<pending>");
        assert_eq!(
            external(
                json!({"type": "LoadBalancer", "externalIPs": ["9.9.9.9"]}),
                json!({"loadBalancer": {"ingress": [{"ip": "5.6.7.8"}, {"hostname": "lb.example"}]}})
            ),
            "5.6.7.8,lb.example,9.9.9.9"
        );
        assert_eq!(external(json!({"type": "ExternalName", "externalName": "db.example"}), json!({})), "db.example");
        let headless = cell_strings("Service", &json!({"spec": {"clusterIP": "None", "ports": []}}));
        assert_eq!(headless[1..5], ["ClusterIP", "None", "<none>", "<none>"]);
        assert_eq!(headless[6], "<none>");
    }

    #[test]
    fn endpoints_list_three_addresses_then_a_count() {
        let ep = json!({"subsets": [{
            "addresses": [{"ip": "10.0.0.1"}, {"ip": "10.0.0.2"}, {"ip": "10.0.0.3"}, {"ip": "fd00::4"}],
            "ports": [{"port": 80}]
        }]});
        assert_eq!(cell_strings("Endpoints", &ep)[1], "10.0.0.1:80,10.0.0.2:80,10.0.0.3:80 + 1 more...");
        let two = json!({"subsets": [{"addresses": [{"ip": "fd00::1"}], "ports": [{"port": 80}, {"port": 443}]}]});
        assert_eq!(cell_strings("Endpoints", &two)[1], "[fd00::1]:80,[fd00::1]:443");
        assert_eq!(cell_strings("Endpoints", &json!({}))[1], "<none>");
    }

    #[test]
    fn endpoint_slices_print_ports_and_addresses() {
        let slice = json!({
            "metadata": {"name": "web-abc"}, "addressType": "IPv4",
            "ports": [{"port": 80}, {"name": "metrics"}, {}],
            "endpoints": [{"addresses": ["10.0.0.1"]}, {"addresses": ["10.0.0.2"]}]
        });
        assert_eq!(
            cell_strings("EndpointSlice", &slice)[..4],
            ["web-abc", "IPv4", "80,metrics,*", "10.0.0.1,10.0.0.2"]
        );
        assert_eq!(cell_strings("EndpointSlice", &json!({}))[2..4], ["<unset>", "<unset>"]);
    }
}
