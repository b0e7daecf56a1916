//! What the proxy programs: service ports with their endpoints, already resolved for this node.

use std::fmt;
use std::net::Ipv4Addr;
use std::sync::Arc;

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
    /// Names are shared with the controller's cache: a model of 10,000 service ports is rebuilt
    /// on every sync without copying them.
    pub namespace: Arc<str>,
    pub name: Arc<str>,
    /// The port's name; empty for a single unnamed port.
    pub port_name: Arc<str>,
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

    /// Which endpoints each traffic policy may use (kube-proxy's CategorizeEndpoints); both
    /// proxy modes render from this.
    pub fn policy(&self) -> Policy<'_> {
        let external = self.externally_accessible();
        // Cluster endpoints are needed for external traffic even under external Local: pod
        // and node-local clients are short-circuited to them.
        let uses_cluster = !self.internal_local || external;
        let uses_local = self.internal_local || (self.external_local && external);
        let cluster = if uses_cluster { usable(self.endpoints.iter()) } else { Vec::new() };
        let local = if uses_local { usable(self.endpoints.iter().filter(|e| e.local)) } else { Vec::new() };
        let has_any = !usable(self.endpoints.iter()).is_empty();
        Policy {
            has_internal: if self.internal_local { !local.is_empty() } else { !cluster.is_empty() },
            has_external: if self.external_local { !local.is_empty() } else { !cluster.is_empty() },
            uses_external_chain: has_any && external,
            has_any,
            cluster,
            local,
        }
    }
}

/// A service port's endpoints sorted by traffic policy, and what that leaves reachable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Policy<'a> {
    /// Endpoints for `Cluster` policy (empty when no policy uses them).
    pub cluster: Vec<&'a Endpoint>,
    /// This node's endpoints, for `Local` policies (empty when no policy uses them).
    pub local: Vec<&'a Endpoint>,
    /// Usable endpoints anywhere in the cluster: without them traffic is rejected.
    pub has_any: bool,
    /// ClusterIP traffic has somewhere to go (its policy's endpoints are not empty).
    pub has_internal: bool,
    /// NodePort and external IP traffic has somewhere to go.
    pub has_external: bool,
    /// External traffic enters through the service's external chain (`KUBE-EXT-`/`external-`).
    pub uses_external_chain: bool,
}

impl Policy<'_> {
    /// Every endpoint either policy uses, each once, cluster ones first.
    pub fn reachable(&self) -> Vec<&Endpoint> {
        let mut all: Vec<&Endpoint> = self.cluster.clone();
        for e in &self.local {
            if !all.iter().any(|a| (a.ip, a.port) == (e.ip, e.port)) {
                all.push(e);
            }
        }
        all
    }
}

/// Ready endpoints; if there are none, the serving-but-terminating ones (so connections drain
/// to pods that are shutting down rather than fail), as kube-proxy does.
fn usable<'e>(eps: impl Iterator<Item = &'e Endpoint> + Clone) -> Vec<&'e Endpoint> {
    let ready: Vec<&Endpoint> = eps.clone().filter(|e| e.ready).collect();
    if !ready.is_empty() {
        return ready;
    }
    eps.filter(|e| e.serving && e.terminating).collect()
}

/// Everything one sync programs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Model {
    /// Traffic to a ClusterIP from outside this CIDR is masqueraded (`--cluster-cidr`).
    pub cluster_cidr: Option<Cidr>,
    /// Masquerade all traffic to ClusterIPs (`--masquerade-all`).
    pub masquerade_all: bool,
    /// Sorted by namespace, name, port name, protocol (`build` sorts them).
    pub services: Vec<ServicePort>,
}

/// An IPv4 prefix, as `--cluster-cidr` gives it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cidr {
    pub addr: Ipv4Addr,
    pub len: u8,
}

impl std::str::FromStr for Cidr {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("{s:?} is not an IPv4 CIDR (a.b.c.d/n)");
        let (addr, len) = s.split_once('/').ok_or_else(bad)?;
        let addr: Ipv4Addr = addr.parse().map_err(|_| bad())?;
        let len: u8 = len.parse().map_err(|_| bad())?;
        if len > 32 {
            return Err(bad());
        }
        // The network address, as nft prints it whatever host bits were given.
        let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
        Ok(Self { addr: Ipv4Addr::from(u32::from(addr) & mask), len })
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cidrs_parse_to_their_network() {
        assert_eq!("10.244.0.0/16".parse::<Cidr>().expect("a CIDR").to_string(), "10.244.0.0/16");
        assert_eq!("10.244.3.7/12".parse::<Cidr>().expect("a CIDR").to_string(), "10.240.0.0/12");
        for bad in ["10.244.0.0", "10.244.0.0/33", "fd00::/64", "x/8", "10.0.0.0/-1"] {
            assert!(bad.parse::<Cidr>().is_err(), "{bad}");
        }
    }
}
