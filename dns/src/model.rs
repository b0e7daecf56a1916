//! What DNS needs of the API objects it follows (pure): a Service is its kind (ClusterIP
//! addresses, headless, or an ExternalName) and ports; an EndpointSlice is its Service and the
//! addresses of its ready endpoints with their hostnames. Everything else is dropped on arrival.

use k8s_openapi::api::core::v1::Service as ApiService;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use std::net::IpAddr;

/// The label an EndpointSlice names its Service with.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `spec.clusterIPs` (or `clusterIP`), each one answered.
    ClusterIp(Vec<IpAddr>),
    /// `clusterIP: None`: the ready endpoints are answered instead.
    Headless,
    /// `type: ExternalName`: a CNAME to this name.
    ExternalName(String),
}

/// A named or unnamed port of a Service or an EndpointSlice. `port` None is an EndpointSlice
/// without ports (a headless Service without ports): its addresses still answer A queries but
/// make no SRV record, as CoreDNS's port -1 sentinel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Port {
    pub name: String,
    pub protocol: String,
    pub port: Option<u16>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Service {
    pub namespace: String,
    pub name: String,
    pub kind: Kind,
    pub ports: Vec<Port>,
}

/// One ready endpoint: its addresses and the name it answers under (`hostname`, else the pod
/// name from `targetRef`, kept for reference).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    pub addresses: Vec<IpAddr>,
    pub hostname: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Slice {
    pub namespace: String,
    /// The Service this slice belongs to (its `kubernetes.io/service-name` label).
    pub service: String,
    pub ports: Vec<Port>,
    pub endpoints: Vec<Endpoint>,
}

/// A Service as DNS sees it; None for one that cannot answer yet (a ClusterIP Service whose
/// address is not allocated, an ExternalName without a name).
pub fn service(svc: &ApiService) -> Option<Service> {
    let namespace = svc.metadata.namespace.clone()?;
    let name = svc.metadata.name.clone()?;
    let spec = svc.spec.as_ref()?;
    let kind = if spec.type_.as_deref() == Some("ExternalName") {
        let target = spec.external_name.as_deref().unwrap_or_default().trim_end_matches('.');
        if target.is_empty() {
            return None;
        }
        Kind::ExternalName(target.to_ascii_lowercase())
    } else if spec.cluster_ip.as_deref() == Some("None") {
        Kind::Headless
    } else {
        let listed = spec.cluster_ips.clone().unwrap_or_default();
        let ips: Vec<IpAddr> = if listed.is_empty() { spec.cluster_ip.iter().cloned().collect() } else { listed }
            .iter()
            .filter_map(|ip| ip.parse().ok())
            .collect();
        if ips.is_empty() {
            return None;
        }
        Kind::ClusterIp(ips)
    };
    let ports = spec
        .ports
        .iter()
        .flatten()
        .map(|p| Port {
            name: p.name.clone().unwrap_or_default(),
            protocol: p.protocol.clone().unwrap_or_else(|| "TCP".into()),
            port: u16::try_from(p.port).ok(),
        })
        .collect();
    Some(Service { namespace, name, kind, ports })
}

/// An EndpointSlice as DNS sees it: only ready endpoints (a missing `ready` condition counts as
/// ready, as the API says), only IP address types; None for a slice that names no Service.
pub fn slice(s: &EndpointSlice) -> Option<Slice> {
    let namespace = s.metadata.namespace.clone()?;
    let service = s.metadata.labels.as_ref()?.get(SERVICE_NAME_LABEL)?.clone();
    if s.address_type != "IPv4" && s.address_type != "IPv6" {
        return None;
    }
    let ports = match s.ports.as_deref() {
        None | Some([]) => vec![Port { name: String::new(), protocol: String::new(), port: None }],
        Some(ports) => ports
            .iter()
            .map(|p| Port {
                name: p.name.clone().unwrap_or_default(),
                protocol: p.protocol.clone().unwrap_or_else(|| "TCP".into()),
                port: p.port.and_then(|n| u16::try_from(n).ok()),
            })
            .collect(),
    };
    let endpoints = s
        .endpoints
        .iter()
        .flatten()
        .filter(|e| e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true))
        .map(|e| Endpoint {
            addresses: e.addresses.iter().filter_map(|a| a.parse().ok()).collect(),
            hostname: e.hostname.clone().filter(|h| !h.is_empty()).map(|h| h.to_ascii_lowercase()),
        })
        .filter(|e| !e.addresses.is_empty())
        .collect();
    Some(Slice { namespace, service, ports, endpoints })
}

/// The label an endpoint answers under: its hostname, else its address with dashes
/// (`10-244-1-5`, IPv6 `fd00--1`), as CoreDNS names endpoints.
pub fn endpoint_label(hostname: Option<&str>, ip: IpAddr) -> String {
    match hostname {
        Some(h) => h.to_string(),
        None => ip.to_string().replace(['.', ':'], "-"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn svc(v: serde_json::Value) -> ApiService {
        serde_json::from_value(v).expect("a valid Service")
    }

    #[test]
    fn services_are_reduced_to_their_kind_and_ports() {
        let s = svc(json!({"metadata": {"namespace": "shop", "name": "web"},
            "spec": {"clusterIP": "10.96.0.20", "clusterIPs": ["10.96.0.20"],
                     "ports": [{"name": "http", "port": 80, "protocol": "TCP"}, {"port": 53, "protocol": "UDP"}]}}));
        let got = service(&s).expect("answers");
        assert_eq!(got.kind, Kind::ClusterIp(vec!["10.96.0.20".parse().expect("ip")]));
        assert_eq!(
            got.ports,
            [
                Port { name: "http".into(), protocol: "TCP".into(), port: Some(80) },
                Port { name: String::new(), protocol: "UDP".into(), port: Some(53) }
            ]
        );
        let headless = svc(json!({"metadata": {"namespace": "shop", "name": "db"}, "spec": {"clusterIP": "None"}}));
        assert_eq!(service(&headless).map(|s| s.kind), Some(Kind::Headless));
        let ext = svc(json!({"metadata": {"namespace": "shop", "name": "mail"},
            "spec": {"type": "ExternalName", "externalName": "Mail.Example.COM."}}));
        assert_eq!(service(&ext).map(|s| s.kind), Some(Kind::ExternalName("mail.example.com".into())));
        let pending = svc(json!({"metadata": {"namespace": "shop", "name": "new"}, "spec": {}}));
        assert_eq!(service(&pending), None, "no address allocated yet");
    }

    #[test]
    fn slices_keep_only_ready_endpoints_and_mark_portless_slices() {
        let s: EndpointSlice = serde_json::from_value(json!({
            "metadata": {"namespace": "shop", "name": "db-abc", "labels": {SERVICE_NAME_LABEL: "db"}},
            "addressType": "IPv4",
            "endpoints": [
                {"addresses": ["10.244.1.5"], "hostname": "db-0", "conditions": {"ready": true}},
                {"addresses": ["10.244.2.6"], "conditions": {"ready": false}},
                {"addresses": ["10.244.3.7"]},
            ],
        }))
        .expect("a valid slice");
        let got = slice(&s).expect("names its service");
        assert_eq!(got.service, "db");
        assert_eq!(got.ports, [Port { name: String::new(), protocol: String::new(), port: None }]);
        let ips: Vec<String> = got.endpoints.iter().map(|e| e.addresses[0].to_string()).collect();
        assert_eq!(ips, ["10.244.1.5", "10.244.3.7"], "the not-ready endpoint is left out");
        assert_eq!(got.endpoints[0].hostname.as_deref(), Some("db-0"));
        let fqdn: EndpointSlice = serde_json::from_value(json!({
            "metadata": {"namespace": "shop", "name": "x", "labels": {SERVICE_NAME_LABEL: "x"}},
            "addressType": "FQDN", "endpoints": [],
        }))
        .expect("a valid slice");
        assert_eq!(slice(&fqdn), None);
    }

    #[test]
    fn endpoints_without_a_hostname_answer_under_their_dashed_address() {
        assert_eq!(endpoint_label(None, "10.244.1.5".parse().expect("ip")), "10-244-1-5");
        assert_eq!(endpoint_label(None, "fd00::1".parse().expect("ip")), "fd00--1");
        assert_eq!(endpoint_label(Some("web-0"), "10.244.1.5".parse().expect("ip")), "web-0");
    }
}
