//! What the proxy programs: service ports with their endpoints, already resolved for this node.

use std::fmt;
use std::net::Ipv4Addr;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Protocol {
    Tcp,
    Udp,
    Sctp,
}

impl Protocol {
    /// Parses a Kubernetes protocol ("TCP", "UDP", "SCTP"); `None` means TCP, as defaulting does.
    pub fn parse(s: Option<&str>) -> Option<Self> {
        match s.unwrap_or("TCP") {
            "TCP" => Some(Self::Tcp),
            "UDP" => Some(Self::Udp),
            "SCTP" => Some(Self::Sctp),
            _ => None,
        }
    }

    /// The lowercase name iptables and the chain hashes use.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Tcp => "tcp",
            Self::Udp => "udp",
            Self::Sctp => "sctp",
        }
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One endpoint of a service port, as an EndpointSlice describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    pub ip: Ipv4Addr,
    pub port: u16,
    pub ready: bool,
    pub serving: bool,
    pub terminating: bool,
    /// On this node (`nodeName` equals ours): eligible for `Local` traffic policies.
    pub local: bool,
}

impl Endpoint {
    /// A ready endpoint (serving, not terminating), on this node or not.
    pub fn ready(ip: Ipv4Addr, port: u16, local: bool) -> Self {
        Self { ip, port, ready: true, serving: true, terminating: false, local }
    }

    /// "ip:port", as it appears in comments, DNAT targets and the SEP hash.
    pub fn addr(&self) -> String {
        format!("{}:{}", self.ip, self.port)
    }
}

/// One port of one Service: the unit kube-proxy gives a `KUBE-SVC-` chain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServicePort {
    pub namespace: String,
    pub name: String,
    /// The port's name; empty for a single unnamed port.
    pub port_name: String,
    pub protocol: Protocol,
    pub cluster_ip: Ipv4Addr,
    pub port: u16,
    pub node_port: Option<u16>,
    pub external_ips: Vec<Ipv4Addr>,
    /// `sessionAffinity: ClientIP` with its timeout in seconds.
    pub affinity_timeout: Option<u32>,
    /// `externalTrafficPolicy: Local`.
    pub external_local: bool,
    /// `internalTrafficPolicy: Local`.
    pub internal_local: bool,
    pub endpoints: Vec<Endpoint>,
}

impl ServicePort {
    /// A plain ClusterIP service port with no endpoints; fill in the rest with struct update syntax.
    pub fn new(namespace: &str, name: &str, port_name: &str, cluster_ip: Ipv4Addr, port: u16) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
            port_name: port_name.into(),
            protocol: Protocol::Tcp,
            cluster_ip,
            port,
            node_port: None,
            external_ips: Vec::new(),
            affinity_timeout: None,
            external_local: false,
            internal_local: false,
            endpoints: Vec::new(),
        }
    }

    /// "namespace/name:port" (or "namespace/name" for an unnamed port), kube-proxy's
    /// ServicePortName: the comment on its rules and the input of its chain hashes.
    pub fn id(&self) -> String {
        if self.port_name.is_empty() {
            format!("{}/{}", self.namespace, self.name)
        } else {
            format!("{}/{}:{}", self.namespace, self.name, self.port_name)
        }
    }

    /// Reachable from outside the cluster network: a NodePort or external IPs.
    pub fn externally_accessible(&self) -> bool {
        self.node_port.is_some() || !self.external_ips.is_empty()
    }
}

/// Everything one sync programs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Model {
    /// Traffic to a ClusterIP from outside this CIDR is masqueraded (`--cluster-cidr`).
    pub cluster_cidr: Option<String>,
    /// Masquerade all traffic to ClusterIPs (`--masquerade-all`).
    pub masquerade_all: bool,
    /// Sorted by namespace, name, port name, protocol (`build` sorts them).
    pub services: Vec<ServicePort>,
}
