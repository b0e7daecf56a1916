//! The models the golden tests render, shared with the root-only restore tests.

use kaji_proxy::model::{Endpoint, Model, Protocol, ServicePort};
use std::net::Ipv4Addr;

pub fn ip(s: &str) -> Ipv4Addr {
    s.parse().expect("test address")
}

pub fn ep(addr: &str, port: u16) -> Endpoint {
    Endpoint::ready(ip(addr), port, false)
}

pub fn model(services: Vec<ServicePort>) -> Model {
    Model { cluster_cidr: "10.244.0.0/16".parse().ok(), masquerade_all: false, services }
}

pub fn web() -> ServicePort {
    ServicePort {
        endpoints: vec![ep("10.244.1.2", 8080), ep("10.244.2.2", 8080), ep("10.244.3.2", 8080)],
        ..ServicePort::new("ns1", "web", "http", ip("10.96.0.10"), 80)
    }
}

pub fn golden_models() -> Vec<(&'static str, Model)> {
    let nodeport = ServicePort {
        node_port: Some(30080),
        external_ips: vec![ip("192.0.2.10")],
        endpoints: vec![ep("10.244.1.3", 8080), ep("10.244.2.3", 8080)],
        ..ServicePort::new("ns1", "np", "", ip("10.96.0.11"), 80)
    };
    let affinity = ServicePort {
        affinity_timeout: Some(600),
        endpoints: vec![ep("10.244.1.4", 80), ep("10.244.2.4", 80)],
        ..ServicePort::new("ns1", "sticky", "http", ip("10.96.0.12"), 80)
    };
    let empty = ServicePort {
        node_port: Some(30081),
        external_ips: vec![ip("192.0.2.11")],
        ..ServicePort::new("ns2", "empty", "http", ip("10.96.0.13"), 80)
    };
    let ext_local = ServicePort {
        node_port: Some(30082),
        external_local: true,
        endpoints: vec![Endpoint::ready(ip("10.244.0.5"), 8080, true), ep("10.244.2.5", 8080)],
        ..ServicePort::new("ns3", "extlocal", "http", ip("10.96.0.14"), 80)
    };
    let ext_local_none_here = ServicePort {
        node_port: Some(30083),
        external_local: true,
        endpoints: vec![ep("10.244.2.6", 8080)],
        ..ServicePort::new("ns3", "extremote", "http", ip("10.96.0.15"), 80)
    };
    let int_local = ServicePort {
        internal_local: true,
        endpoints: vec![Endpoint::ready(ip("10.244.0.7"), 8080, true), ep("10.244.2.7", 8080)],
        ..ServicePort::new("ns3", "intlocal", "http", ip("10.96.0.16"), 80)
    };
    let int_local_none_here = ServicePort {
        internal_local: true,
        endpoints: vec![ep("10.244.2.8", 8080)],
        ..ServicePort::new("ns3", "intremote", "http", ip("10.96.0.17"), 80)
    };
    let dns_tcp = ServicePort {
        endpoints: vec![ep("10.244.1.9", 53), ep("10.244.2.9", 53)],
        ..ServicePort::new("kube-system", "kube-dns", "dns-tcp", ip("10.96.0.53"), 53)
    };
    let dns_udp = ServicePort {
        protocol: Protocol::Udp,
        endpoints: vec![ep("10.244.1.9", 53), ep("10.244.2.9", 53)],
        ..ServicePort::new("kube-system", "kube-dns", "dns", ip("10.96.0.53"), 53)
    };
    let metrics = ServicePort {
        endpoints: vec![ep("10.244.1.9", 9153)],
        ..ServicePort::new("kube-system", "kube-dns", "metrics", ip("10.96.0.53"), 9153)
    };
    vec![
        ("clusterip", model(vec![web()])),
        ("nodeport", model(vec![nodeport])),
        ("affinity", model(vec![affinity])),
        ("no_endpoints", model(vec![empty])),
        ("external_local", model(vec![ext_local, ext_local_none_here])),
        ("internal_local", model(vec![int_local, int_local_none_here])),
        ("multi_port", model(vec![dns_udp, dns_tcp, metrics])),
        ("masquerade_all", Model { cluster_cidr: None, masquerade_all: true, services: vec![web()] }),
    ]
}
