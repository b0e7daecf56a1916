//! Turns Services and EndpointSlices (as the API serves them) into the model, for one node.
//! Bad input never fails the whole build: the offending part is skipped with a warning.

use crate::model::{Endpoint, Model, Protocol, ServicePort};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use std::collections::{BTreeSet, HashMap};
use std::net::Ipv4Addr;

/// The label that ties an EndpointSlice to its Service.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// Per-node settings the model needs beyond the API objects.
#[derive(Clone, Debug, Default)]
pub struct NodeContext {
    /// This node's name: endpoints with this `nodeName` are local.
    pub node_name: String,
    pub cluster_cidr: Option<String>,
    pub masquerade_all: bool,
}

/// One endpoint port, keyed for matching against service ports.
struct SlicePort {
    name: String,
    protocol: Protocol,
    port: u16,
}

/// Builds the model. Returns the warnings (one line each, naming the object) alongside.
pub fn build_model<'a>(
    services: impl IntoIterator<Item = &'a Service>,
    slices: impl IntoIterator<Item = &'a EndpointSlice>,
    ctx: &NodeContext,
) -> (Model, Vec<String>) {
    let mut warnings = Vec::new();
    // (namespace, service) -> (port name, protocol) -> endpoints
    type Eps = HashMap<(String, Protocol), Vec<Endpoint>>;
    let mut by_service: HashMap<(String, String), Eps> = HashMap::new();
    for slice in slices {
        let ns = slice.metadata.namespace.clone().unwrap_or_default();
        let slice_name = slice.metadata.name.as_deref().unwrap_or_default();
        let Some(svc) = slice.metadata.labels.as_ref().and_then(|l| l.get(SERVICE_NAME_LABEL)) else {
            continue;
        };
        if slice.address_type != "IPv4" {
            continue;
        }
        let mut ports = Vec::new();
        for p in slice.ports.iter().flatten() {
            let name = p.name.clone().unwrap_or_default();
            let (Some(protocol), Some(port)) =
                (Protocol::parse(p.protocol.as_deref()), p.port.and_then(|n| u16::try_from(n).ok()).filter(|n| *n > 0))
            else {
                warnings.push(format!("endpointslice {ns}/{slice_name}: port {name:?} has no valid port or protocol"));
                continue;
            };
            ports.push(SlicePort { name, protocol, port });
        }
        let entry = by_service.entry((ns.clone(), svc.clone())).or_default();
        for ep in &slice.endpoints {
            let Some(addr) = ep.addresses.first() else { continue };
            let Ok(ip) = addr.parse::<Ipv4Addr>() else {
                warnings.push(format!("endpointslice {ns}/{slice_name}: address {addr:?} is not an IPv4 address"));
                continue;
            };
            let cond = ep.conditions.as_ref();
            let ready = cond.and_then(|c| c.ready).unwrap_or(true);
            let serving = cond.and_then(|c| c.serving).unwrap_or(ready);
            let terminating = cond.and_then(|c| c.terminating).unwrap_or(false);
            let local = !ctx.node_name.is_empty() && ep.node_name.as_deref() == Some(ctx.node_name.as_str());
            for p in &ports {
                entry.entry((p.name.clone(), p.protocol)).or_default().push(Endpoint {
                    ip,
                    port: p.port,
                    ready,
                    serving,
                    terminating,
                    local,
                });
            }
        }
    }

    let mut out = Vec::new();
    for svc in services {
        let ns = svc.metadata.namespace.clone().unwrap_or_default();
        let name = svc.metadata.name.clone().unwrap_or_default();
        let Some(spec) = &svc.spec else { continue };
        if spec.type_.as_deref() == Some("ExternalName") {
            continue;
        }
        let cluster_ip = match spec.cluster_ip.as_deref() {
            None | Some("") | Some("None") => continue,
            Some(ip) => match ip.parse::<Ipv4Addr>() {
                Ok(ip) => ip,
                Err(_) => continue, // IPv6 services are for an ip6tables mode
            },
        };
        let mut external_ips = Vec::new();
        for ip in spec.external_ips.iter().flatten() {
            match ip.parse::<Ipv4Addr>() {
                Ok(ip) => external_ips.push(ip),
                Err(_) => warnings.push(format!("service {ns}/{name}: external IP {ip:?} is not an IPv4 address")),
            }
        }
        let affinity_timeout = (spec.session_affinity.as_deref() == Some("ClientIP")).then(|| {
            spec.session_affinity_config
                .as_ref()
                .and_then(|c| c.client_ip.as_ref())
                .and_then(|c| c.timeout_seconds)
                .and_then(|t| u32::try_from(t).ok())
                .unwrap_or(10800)
        });
        let node_ports = matches!(spec.type_.as_deref(), Some("NodePort") | Some("LoadBalancer"));
        let endpoints = by_service.get(&(ns.clone(), name.clone()));
        for p in spec.ports.iter().flatten() {
            let port_name = p.name.clone().unwrap_or_default();
            let (Some(protocol), Ok(port)) = (Protocol::parse(p.protocol.as_deref()), u16::try_from(p.port)) else {
                warnings.push(format!("service {ns}/{name}: port {port_name:?} has an invalid port or protocol"));
                continue;
            };
            let mut eps = endpoints.and_then(|m| m.get(&(port_name.clone(), protocol))).cloned().unwrap_or_default();
            if eps.is_empty() && endpoints.is_some_and(|m| !m.is_empty()) {
                warnings.push(format!(
                    "service {ns}/{name}: no endpoint port matches port {port_name:?}/{protocol}; rejecting its traffic"
                ));
            }
            // Several slices may list the same endpoint: keep the first, in a stable order.
            eps.sort_by_key(|e| (e.ip, e.port));
            eps.dedup_by_key(|e| (e.ip, e.port));
            out.push(ServicePort {
                namespace: ns.clone(),
                name: name.clone(),
                port_name,
                protocol,
                cluster_ip,
                port,
                node_port: if node_ports {
                    p.node_port.and_then(|n| u16::try_from(n).ok()).filter(|n| *n > 0)
                } else {
                    None
                },
                external_ips: external_ips.clone(),
                affinity_timeout,
                external_local: spec.external_traffic_policy.as_deref() == Some("Local"),
                internal_local: spec.internal_traffic_policy.as_deref() == Some("Local"),
                endpoints: eps,
            });
        }
    }
    out.sort_by(|a, b| {
        (&a.namespace, &a.name, &a.port_name, a.protocol).cmp(&(&b.namespace, &b.name, &b.port_name, b.protocol))
    });
    // Two service ports with the same name and protocol would share chains: keep one.
    let mut seen = BTreeSet::new();
    out.retain(|sp| {
        let fresh = seen.insert((sp.namespace.clone(), sp.name.clone(), sp.port_name.clone(), sp.protocol));
        if !fresh {
            warnings.push(format!("service {}: duplicate port {:?}/{}", sp.namespace, sp.port_name, sp.protocol));
        }
        fresh
    });
    let model = Model { cluster_cidr: ctx.cluster_cidr.clone(), masquerade_all: ctx.masquerade_all, services: out };
    (model, warnings)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn svc(v: serde_json::Value) -> Service {
        serde_json::from_value(v).expect("valid service")
    }

    fn slice(v: serde_json::Value) -> EndpointSlice {
        serde_json::from_value(v).expect("valid endpointslice")
    }

    fn ctx() -> NodeContext {
        NodeContext { node_name: "node-a".into(), ..Default::default() }
    }

    #[test]
    fn matches_endpoint_ports_by_name_and_marks_local_and_not_ready() {
        let s = svc(json!({"metadata": {"namespace": "ns", "name": "web"}, "spec": {
            "type": "NodePort", "clusterIP": "10.96.0.10",
            "ports": [{"name": "http", "port": 80, "nodePort": 30080}, {"name": "metrics", "port": 9090}]}}));
        let es = slice(json!({"metadata": {"namespace": "ns", "name": "web-1",
            "labels": {"kubernetes.io/service-name": "web"}}, "addressType": "IPv4",
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
            "endpoints": [
                {"addresses": ["10.244.0.12"], "nodeName": "node-a"},
                {"addresses": ["10.244.0.11"], "nodeName": "node-b", "conditions": {"ready": false}}]}));
        let (m, warnings) = build_model([&s], [&es], &ctx());
        assert_eq!(m.services.len(), 2);
        let http = &m.services[0];
        assert_eq!((http.port_name.as_str(), http.node_port), ("http", Some(30080)));
        assert_eq!(http.endpoints.len(), 2);
        assert_eq!(http.endpoints[0].ip, Ipv4Addr::new(10, 244, 0, 11), "sorted by address");
        assert!(!http.endpoints[0].ready && !http.endpoints[0].local);
        assert!(http.endpoints[1].ready && http.endpoints[1].local);
        assert_eq!(http.endpoints[1].port, 8080);
        assert!(m.services[1].endpoints.is_empty());
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0].contains("ns/web") && warnings[0].contains("metrics"), "{warnings:?}");
    }

    #[test]
    fn skips_headless_external_name_and_malformed_parts() {
        let headless = svc(json!({"metadata": {"namespace": "ns", "name": "h"},
            "spec": {"clusterIP": "None", "ports": [{"port": 80}]}}));
        let ext = svc(json!({"metadata": {"namespace": "ns", "name": "e"},
            "spec": {"type": "ExternalName", "externalName": "example.com"}}));
        let ok = svc(json!({"metadata": {"namespace": "ns", "name": "ok"}, "spec": {"clusterIP": "10.96.0.2",
            "externalIPs": ["not-an-ip", "192.0.2.7"], "sessionAffinity": "ClientIP",
            "ports": [{"port": 80}]}}));
        let bad = slice(json!({"metadata": {"namespace": "ns", "name": "ok-1",
            "labels": {"kubernetes.io/service-name": "ok"}}, "addressType": "IPv4",
            "ports": [{"port": 80}, {"name": "x"}],
            "endpoints": [{"addresses": ["garbage"]}, {"addresses": ["10.0.0.9"]}]}));
        let (m, warnings) = build_model([&headless, &ext, &ok], [&bad], &ctx());
        assert_eq!(m.services.len(), 1);
        let sp = &m.services[0];
        assert_eq!(sp.external_ips, vec![Ipv4Addr::new(192, 0, 2, 7)]);
        assert_eq!(sp.affinity_timeout, Some(10800));
        assert_eq!(sp.endpoints, vec![Endpoint::ready(Ipv4Addr::new(10, 0, 0, 9), 80, false)]);
        assert_eq!(warnings.len(), 3, "{warnings:?}");
    }

    #[test]
    fn merges_slices_and_drops_duplicate_endpoints() {
        let s = svc(json!({"metadata": {"namespace": "ns", "name": "web"},
            "spec": {"clusterIP": "10.96.0.10", "ports": [{"port": 80}]}}));
        let mk = |name: &str, ips: &[&str]| {
            slice(json!({"metadata": {"namespace": "ns", "name": name,
                "labels": {"kubernetes.io/service-name": "web"}}, "addressType": "IPv4",
                "ports": [{"port": 80}],
                "endpoints": ips.iter().map(|ip| json!({"addresses": [ip]})).collect::<Vec<_>>()}))
        };
        let (a, b) = (mk("web-1", &["10.0.0.2", "10.0.0.1"]), mk("web-2", &["10.0.0.2", "10.0.0.3"]));
        let (m, _) = build_model([&s], [&a, &b], &ctx());
        let ips: Vec<String> = m.services[0].endpoints.iter().map(Endpoint::addr).collect();
        assert_eq!(ips, ["10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80"]);
    }
}
