//! Turns Services and EndpointSlices (as the API serves them) into the model, for one node.
//! Bad input never fails the whole build: the offending part is skipped with a warning.

use crate::model::{Cidr, Endpoint, Model, Protocol, ServicePort};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::sync::Arc;

/// The label that ties an EndpointSlice to its Service.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// Per-node settings the model needs beyond the API objects.
#[derive(Clone, Debug, Default)]
pub struct NodeContext {
    /// This node's name: endpoints with this `nodeName` are local.
    pub node_name: String,
    pub cluster_cidr: Option<Cidr>,
    pub masquerade_all: bool,
}

/// A Service reduced to what the model needs (the controller keeps these, not whole objects).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceInfo {
    pub namespace: Arc<str>,
    pub name: Arc<str>,
    pub cluster_ip: Ipv4Addr,
    pub ports: Vec<PortInfo>,
    pub external_ips: Vec<Ipv4Addr>,
    pub affinity_timeout: Option<u32>,
    pub external_local: bool,
    pub internal_local: bool,
    /// Parts skipped while reducing, one line each.
    pub warnings: Vec<String>,
}

/// One valid port of a Service.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortInfo {
    pub name: Arc<str>,
    pub protocol: Protocol,
    pub port: u16,
    /// Set only for NodePort and LoadBalancer services.
    pub node_port: Option<u16>,
}

/// An EndpointSlice reduced to what the model needs, for one node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SliceInfo {
    pub namespace: String,
    /// The Service it belongs to (its `kubernetes.io/service-name` label).
    pub service: String,
    pub ports: Vec<SlicePort>,
    /// Each address with its conditions; `port` is filled in per slice port.
    pub endpoints: Vec<Endpoint>,
    pub warnings: Vec<String>,
}

/// One valid endpoint port, keyed for matching against service ports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlicePort {
    pub name: String,
    pub protocol: Protocol,
    pub port: u16,
}

impl ServiceInfo {
    /// `None` for services the proxy does not program: headless, ExternalName, IPv6, no spec.
    pub fn from_service(svc: &Service) -> Option<Self> {
        let ns = svc.metadata.namespace.clone().unwrap_or_default();
        let name = svc.metadata.name.clone().unwrap_or_default();
        let spec = svc.spec.as_ref()?;
        if spec.type_.as_deref() == Some("ExternalName") {
            return None;
        }
        let cluster_ip = match spec.cluster_ip.as_deref() {
            None | Some("") | Some("None") => return None,
            // IPv6 services are for an ip6tables/ip6 mode.
            Some(ip) => ip.parse::<Ipv4Addr>().ok()?,
        };
        let mut warnings = Vec::new();
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
        let mut ports = Vec::new();
        for p in spec.ports.iter().flatten() {
            let port_name = p.name.clone().unwrap_or_default();
            let (Some(protocol), Ok(port)) = (Protocol::parse(p.protocol.as_deref()), u16::try_from(p.port)) else {
                warnings.push(format!("service {ns}/{name}: port {port_name:?} has an invalid port or protocol"));
                continue;
            };
            let node_port =
                if node_ports { p.node_port.and_then(|n| u16::try_from(n).ok()).filter(|n| *n > 0) } else { None };
            ports.push(PortInfo { name: port_name.into(), protocol, port, node_port });
        }
        ports.shrink_to_fit();
        external_ips.shrink_to_fit();
        Some(Self {
            external_local: spec.external_traffic_policy.as_deref() == Some("Local"),
            internal_local: spec.internal_traffic_policy.as_deref() == Some("Local"),
            namespace: ns.into(),
            name: name.into(),
            cluster_ip,
            ports,
            external_ips,
            affinity_timeout,
            warnings,
        })
    }
}

impl SliceInfo {
    /// `None` for slices of no Service and non-IPv4 slices. `node_name` decides which endpoints
    /// are local.
    pub fn from_slice(slice: &EndpointSlice, node_name: &str) -> Option<Self> {
        let ns = slice.metadata.namespace.clone().unwrap_or_default();
        let slice_name = slice.metadata.name.as_deref().unwrap_or_default();
        let service = slice.metadata.labels.as_ref().and_then(|l| l.get(SERVICE_NAME_LABEL))?.clone();
        if slice.address_type != "IPv4" {
            return None;
        }
        let mut warnings = Vec::new();
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
        let mut endpoints = Vec::new();
        for ep in slice.endpoints.iter().flatten() {
            let Some(addr) = ep.addresses.first() else { continue };
            let Ok(ip) = addr.parse::<Ipv4Addr>() else {
                warnings.push(format!("endpointslice {ns}/{slice_name}: address {addr:?} is not an IPv4 address"));
                continue;
            };
            let cond = ep.conditions.as_ref();
            let ready = cond.and_then(|c| c.ready).unwrap_or(true);
            endpoints.push(Endpoint {
                ip,
                port: 0,
                ready,
                serving: cond.and_then(|c| c.serving).unwrap_or(ready),
                terminating: cond.and_then(|c| c.terminating).unwrap_or(false),
                local: !node_name.is_empty() && ep.node_name.as_deref() == Some(node_name),
            });
        }
        ports.shrink_to_fit();
        endpoints.shrink_to_fit();
        Some(Self { namespace: ns, service, ports, endpoints, warnings })
    }
}

/// Builds the model from the API objects. Returns the warnings (one line each, naming the
/// object) alongside.
pub fn build_model<'a>(
    services: impl IntoIterator<Item = &'a Service>,
    slices: impl IntoIterator<Item = &'a EndpointSlice>,
    ctx: &NodeContext,
) -> (Model, Vec<String>) {
    let services: Vec<ServiceInfo> = services.into_iter().filter_map(ServiceInfo::from_service).collect();
    let slices: Vec<SliceInfo> = slices.into_iter().filter_map(|s| SliceInfo::from_slice(s, &ctx.node_name)).collect();
    assemble(&services, &slices, ctx)
}

/// Builds the model from reduced services and slices.
pub fn assemble<'a>(
    services: impl IntoIterator<Item = &'a ServiceInfo>,
    slices: impl IntoIterator<Item = &'a SliceInfo>,
    ctx: &NodeContext,
) -> (Model, Vec<String>) {
    let mut warnings = Vec::new();
    // (namespace, service) -> [(port name, protocol, endpoints)]: a service has a few ports.
    type Eps<'s> = Vec<(&'s str, Protocol, Vec<Endpoint>)>;
    let mut by_service: HashMap<(&str, &str), Eps<'_>> = HashMap::new();
    for slice in slices {
        warnings.extend(slice.warnings.iter().cloned());
        let entry = by_service.entry((&slice.namespace, &slice.service)).or_default();
        for p in &slice.ports {
            let i = match entry.iter().position(|(name, proto, _)| *name == p.name && *proto == p.protocol) {
                Some(i) => i,
                None => {
                    entry.push((&p.name, p.protocol, Vec::with_capacity(slice.endpoints.len())));
                    entry.len() - 1
                }
            };
            entry[i].2.extend(slice.endpoints.iter().map(|ep| Endpoint { port: p.port, ..ep.clone() }));
        }
    }

    let mut out = Vec::new();
    for svc in services {
        warnings.extend(svc.warnings.iter().cloned());
        let (ns, name) = (&svc.namespace, &svc.name);
        let mut endpoints = by_service.remove(&(&**ns, &**name));
        let has_slices = endpoints.as_ref().is_some_and(|e| !e.is_empty());
        for p in &svc.ports {
            let found =
                endpoints.as_mut().and_then(|e| e.iter_mut().find(|(n, pr, _)| *n == &*p.name && *pr == p.protocol));
            let mut eps = match found {
                Some((_, _, eps)) if !eps.is_empty() => std::mem::take(eps),
                // Taken by a duplicate of this port just before (dropped below), or none.
                Some(_) => out
                    .iter()
                    .rev()
                    .take_while(|o: &&ServicePort| o.namespace == *ns && o.name == *name)
                    .find(|o| o.port_name == p.name && o.protocol == p.protocol)
                    .map(|o| o.endpoints.clone())
                    .unwrap_or_default(),
                None => Vec::new(),
            };
            if eps.is_empty() && has_slices {
                warnings.push(format!(
                    "service {ns}/{name}: no endpoint port matches port {:?}/{}; rejecting its traffic",
                    p.name, p.protocol
                ));
            }
            // Several slices may list the same endpoint: keep the first, in a stable order.
            eps.sort_by_key(|e| (e.ip, e.port));
            eps.dedup_by_key(|e| (e.ip, e.port));
            eps.shrink_to_fit();
            out.push(ServicePort {
                namespace: ns.clone(),
                name: name.clone(),
                port_name: p.name.clone(),
                protocol: p.protocol,
                cluster_ip: svc.cluster_ip,
                port: p.port,
                node_port: p.node_port,
                external_ips: svc.external_ips.clone(),
                affinity_timeout: svc.affinity_timeout,
                external_local: svc.external_local,
                internal_local: svc.internal_local,
                endpoints: eps,
            });
        }
    }
    out.sort_by(|a, b| {
        (&a.namespace, &a.name, &a.port_name, a.protocol).cmp(&(&b.namespace, &b.name, &b.port_name, b.protocol))
    });
    // Two service ports with the same name and protocol would share chains: keep one. Sorted
    // (stably), duplicates are neighbours: no set of cloned keys at 10,000 services per sync.
    let mut kept: Vec<ServicePort> = Vec::with_capacity(out.len());
    for sp in out {
        let same = |a: &ServicePort, b: &ServicePort| {
            a.namespace == b.namespace && a.name == b.name && a.port_name == b.port_name && a.protocol == b.protocol
        };
        match kept.last() {
            Some(last) if same(last, &sp) => {
                warnings.push(format!("service {}: duplicate port {:?}/{}", sp.namespace, sp.port_name, sp.protocol))
            }
            _ => kept.push(sp),
        }
    }
    let model = Model { cluster_cidr: ctx.cluster_cidr, masquerade_all: ctx.masquerade_all, services: kept };
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
        assert_eq!((&*http.port_name, http.node_port), ("http", Some(30080)));
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
    fn a_duplicate_port_is_dropped_with_one_warning() {
        let s = svc(json!({"metadata": {"namespace": "ns", "name": "web"}, "spec": {"clusterIP": "10.96.0.10",
            "ports": [{"name": "http", "port": 80}, {"name": "http", "port": 8080}]}}));
        let es = slice(json!({"metadata": {"namespace": "ns", "name": "web-1",
            "labels": {"kubernetes.io/service-name": "web"}}, "addressType": "IPv4",
            "ports": [{"name": "http", "port": 8080}], "endpoints": [{"addresses": ["10.0.0.1"]}]}));
        let (m, warnings) = build_model([&s], [&es], &ctx());
        assert_eq!(m.services.len(), 1);
        assert_eq!(m.services[0].endpoints.len(), 1);
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0].contains("duplicate port"), "{warnings:?}");
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
