//! The pure core of the nftables mode: a service port in, the chains, affinity sets and map
//! elements it owns in table `ip kaji-proxy` out — kube-proxy's nftables layout (KEP-3866),
//! rendered from the same `Model` and endpoint policy as the iptables mode, with one
//! difference: a service without session affinity DNATs in its own chain, with no chain per
//! endpoint, and hairpin traffic is found by one `ip saddr . ip daddr` set in postrouting.
//! nft 1.0.6 lists every chain of the table before any transaction that adds a rule, so the
//! chain count is what a one-service change costs: 61,011 chains at 10,000 services × 5
//! endpoints in kube-proxy's layout, 11,000 in this one.

use crate::model::{Endpoint, Model, Protocol, ServicePort};
use crate::names;
use crate::nftables::rule::{Action, Rule};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::Ipv4Addr;
use std::sync::Arc;

/// Our table (family `ip`): nothing outside it is ever touched.
pub const TABLE: &str = "kaji-proxy";

/// The mark `mark-for-masquerade` sets and `masquerading` clears and masquerades (as iptables'
/// `crate::render::MASQ_MARK`).
pub const MASQ_MARK: u32 = 0x4000;

/// Jumped to by traffic that must leave with the node's address.
pub const MARK_MASQ_CHAIN: &str = "mark-for-masquerade";
/// Jumped to (via the no-endpoint maps) by traffic to a service without endpoints.
pub const REJECT_CHAIN: &str = "reject-chain";

/// The verdict maps the dispatch chains look traffic up in, and the hairpin set.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Map {
    /// ClusterIP and external IP traffic: `ip . proto . port` → the service's chain.
    ServiceIps,
    /// NodePort traffic to any local address: `proto . port` → the service's external chain.
    ServiceNodePorts,
    /// Service IPs with nowhere to send traffic: reject (no endpoints) or drop (none local).
    NoEndpointServices,
    /// NodePorts with nowhere to send traffic.
    NoEndpointNodePorts,
    /// A set, not a map (its elements are [`Hairpin`], not in [`Elements`]): `ip . ip` for every
    /// endpoint address. Traffic DNATed back to the pod
    /// it came from (source = destination, one of these) is masqueraded in postrouting, or the
    /// pod would answer itself directly and drop the reply as unknown — what kube-proxy does
    /// with an `ip saddr <endpoint>` rule in each endpoint chain.
    Hairpin,
}

impl Map {
    pub const ALL: [Map; 5] =
        [Map::ServiceIps, Map::ServiceNodePorts, Map::NoEndpointServices, Map::NoEndpointNodePorts, Map::Hairpin];

    pub fn name(self) -> &'static str {
        match self {
            Map::ServiceIps => "service-ips",
            Map::ServiceNodePorts => "service-nodeports",
            Map::NoEndpointServices => "no-endpoint-services",
            Map::NoEndpointNodePorts => "no-endpoint-nodeports",
            Map::Hairpin => "hairpin",
        }
    }

    /// `map` or `set`, as nft's commands name it.
    pub fn keyword(self) -> &'static str {
        match self {
            Map::Hairpin => "set",
            _ => "map",
        }
    }

    /// The map's type, as `add map` takes it.
    pub fn key_type(self) -> &'static str {
        match self {
            Map::ServiceIps | Map::NoEndpointServices => "ipv4_addr . inet_proto . inet_service : verdict",
            Map::ServiceNodePorts | Map::NoEndpointNodePorts => "inet_proto . inet_service : verdict",
            Map::Hairpin => "ipv4_addr . ipv4_addr",
        }
    }

    pub fn comment(self) -> &'static str {
        match self {
            Map::ServiceIps => "ClusterIP and external IP traffic",
            Map::ServiceNodePorts => "NodePort traffic",
            Map::NoEndpointServices => "drop or reject traffic to service IPs without endpoints",
            Map::NoEndpointNodePorts => "drop or reject NodePort traffic without endpoints",
            Map::Hairpin => "endpoints, to masquerade traffic they send themselves",
        }
    }

    /// The map's definition, as `add map` takes it (without the closing brace).
    pub fn spec(self) -> String {
        format!("type {}; comment \"{}\";", self.key_type(), self.comment())
    }
}

/// A map element's key: `ip . proto . port` (service IPs) or `proto . port` (NodePorts).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Key {
    Ip(Ipv4Addr, Protocol, u16),
    Port(Protocol, u16),
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Key::Ip(ip, proto, port) => write!(f, "{ip} . {proto} . {port}"),
            Key::Port(proto, port) => write!(f, "{proto} . {port}"),
        }
    }
}

/// What a map element does with matching traffic. The service's names are shared by all its
/// elements (10,000 services' elements are kept between syncs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// `goto <prefix>-<base>`: a service's chain (`service`, `local` or `external`).
    Goto(&'static str, Arc<str>),
    /// `goto reject-chain`, commented with the service port: it has no endpoints at all.
    Reject(Arc<str>),
    /// `drop`, commented with the service port: it has endpoints, none on this node, and the
    /// policy is Local (as the iptables mode's filter rules do).
    Drop(Arc<str>),
}

impl fmt::Display for Verdict {
    /// As an element's value: `[comment "<id>" ]: <verdict>`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Verdict::Goto(prefix, base) => write!(f, ": goto {prefix}-{base}"),
            Verdict::Reject(id) => write!(f, "comment \"{id}\" : goto {REJECT_CHAIN}"),
            Verdict::Drop(id) => write!(f, "comment \"{id}\" : drop"),
        }
    }
}

/// Every map element, by map and key.
pub type Elements = BTreeMap<(Map, Key), Verdict>;

/// A regular chain and its rules.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chain {
    pub name: String,
    pub rules: Vec<Rule>,
}

impl Chain {
    fn new(name: String) -> Self {
        Self { name, rules: Vec::new() }
    }

    fn add(&mut self, rule: Rule) {
        self.rules.push(rule);
    }

    pub fn rule_count(&self) -> usize {
        self.rules.len()
    }
}

/// What one service port owns in the table, in the order it must be created: affinity sets and
/// endpoint chains (with session affinity only), the policy chains, the external chain that
/// goes to those.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServiceObjects {
    pub sets: Vec<String>,
    pub chains: Vec<Chain>,
}

/// The names `service_objects` would give, without rendering rules.
pub fn object_names(sp: &ServicePort) -> (Vec<String>, Vec<String>) {
    let base = names::nft_service(sp);
    let policy = sp.policy();
    let mut chains = Vec::new();
    let mut sets = Vec::new();
    if sp.affinity_timeout.is_some() {
        for ep in policy.reachable() {
            let b = names::nft_endpoint(sp, ep);
            sets.push(format!("affinity-{b}"));
            chains.push(format!("endpoint-{b}"));
        }
    }
    if !policy.cluster.is_empty() {
        chains.push(format!("service-{base}"));
    }
    if !policy.local.is_empty() {
        chains.push(format!("local-{base}"));
    }
    if policy.uses_external_chain {
        chains.push(format!("external-{base}"));
    }
    (chains, sets)
}

/// The chains and sets of one service port.
pub fn service_objects(model: &Model, sp: &ServicePort) -> ServiceObjects {
    let base = names::nft_service(sp);
    let policy = sp.policy();
    let mut objects = ServiceObjects::default();

    // With session affinity, one chain per endpoint: the client remembered, then DNAT.
    let reachable: Vec<(&Endpoint, String)> = match sp.affinity_timeout {
        Some(_) => policy.reachable().into_iter().map(|e| (e, names::nft_endpoint(sp, e))).collect(),
        None => Vec::new(),
    };
    if let Some(timeout) = sp.affinity_timeout {
        for (ep, b) in &reachable {
            let mut c = Chain::new(format!("endpoint-{b}"));
            objects.sets.push(format!("affinity-{b}"));
            c.add(Rule::RememberClient { set: format!("affinity-{b}"), timeout });
            c.add(Rule::Always(Action::Dnat(sp.protocol, ep.ip, ep.port)));
            objects.chains.push(c);
        }
    }

    // The policy chains: masquerade rule (internal policy chain only), then endpoint choice.
    let cidr = model.cluster_cidr;
    let masquerade = |c: &mut Chain| {
        if model.masquerade_all || cidr.is_some() {
            c.add(Rule::ToService {
                ip: sp.cluster_ip,
                proto: sp.protocol,
                port: sp.port,
                not_from: if model.masquerade_all { None } else { cidr },
                chain: MARK_MASQ_CHAIN,
            });
        }
    };
    // Where a chosen endpoint's traffic goes: its chain (affinity), or DNAT right here.
    let target = |e: &Endpoint| -> Action {
        match reachable.iter().find(|(r, _)| (r.ip, r.port) == (e.ip, e.port)) {
            Some((_, b)) => Action::Goto(format!("endpoint-{b}")),
            None => Action::Dnat(sp.protocol, e.ip, e.port),
        }
    };
    for (prefix, eps, internal) in
        [("service", &policy.cluster, !sp.internal_local), ("local", &policy.local, sp.internal_local)]
    {
        if eps.is_empty() {
            continue;
        }
        let mut c = Chain::new(format!("{prefix}-{base}"));
        if internal {
            masquerade(&mut c);
        }
        // Session affinity first: a client seen recently goes where it went before.
        for e in eps.iter() {
            if let Some((_, b)) = reachable.iter().find(|(r, _)| (r.ip, r.port) == (e.ip, e.port)) {
                c.add(Rule::KnownClient { set: format!("affinity-{b}"), then: Action::Goto(format!("endpoint-{b}")) });
            }
        }
        let targets: Vec<Action> = eps.iter().map(|e| target(e)).collect();
        select_endpoint(&mut c, targets);
        objects.chains.push(c);
    }

    // NodePort and external IP traffic enters here.
    if policy.uses_external_chain {
        let mut c = Chain::new(format!("external-{base}"));
        let mark = || Action::Jump(MARK_MASQ_CHAIN.into());
        if sp.external_local {
            // Pods and the node itself reach an external destination with Cluster policy,
            // as if through an outside load balancer (node traffic masqueraded).
            if let Some(cidr) = cidr {
                c.add(Rule::From(cidr, Action::Goto(format!("service-{base}"))));
            }
            c.add(Rule::FromNode(mark()));
            c.add(Rule::FromNode(Action::Goto(format!("service-{base}"))));
        } else {
            c.add(Rule::Always(mark()));
        }
        if policy.has_external {
            let target = if sp.external_local { "local" } else { "service" };
            c.add(Rule::Always(Action::Goto(format!("{target}-{base}"))));
        }
        objects.chains.push(c);
    }
    objects
}

/// A uniform random choice: endpoint i of n is taken with probability 1/(n-i), so each gets
/// 1/n overall — the iptables mode's `statistic` cascade, as `numgen` rules. (One `numgen
/// random mod n vmap { ... }` rule per service, as kube-proxy writes it, makes an anonymous set
/// per service, and the kernel walks the whole transaction to bind each one: 68 s for 10,000
/// services; named maps per service cost 0.4 ms each in the kernel.)
fn select_endpoint(c: &mut Chain, targets: Vec<Action>) {
    let n = targets.len();
    for (i, t) in targets.into_iter().enumerate() {
        if i + 1 < n {
            c.add(Rule::OneIn((n - i) as u32, t));
        } else {
            c.add(Rule::Always(t));
        }
    }
}

/// The map elements of one service port, in a stable order.
pub fn service_elements(sp: &ServicePort, mut add: impl FnMut(Map, Key, Verdict)) {
    let base: Arc<str> = names::nft_service(sp).into();
    let policy = sp.policy();
    let ip_key = |ip: Ipv4Addr| Key::Ip(ip, sp.protocol, sp.port);
    // Reject without endpoints at all; drop when there are some, but none here for Local.
    let id: std::cell::OnceCell<Arc<str>> = std::cell::OnceCell::new();
    let nowhere = |no_local: bool| {
        let id = id.get_or_init(|| sp.id().into()).clone();
        if no_local {
            Verdict::Drop(id)
        } else {
            Verdict::Reject(id)
        }
    };

    if policy.has_internal {
        let prefix = if sp.internal_local { "local" } else { "service" };
        add(Map::ServiceIps, ip_key(sp.cluster_ip), Verdict::Goto(prefix, base.clone()));
    } else {
        add(Map::NoEndpointServices, ip_key(sp.cluster_ip), nowhere(sp.internal_local && policy.has_any));
    }
    let external = || Verdict::Goto("external", base.clone());
    let no_local_external = sp.external_local && policy.has_any;
    for ip in &sp.external_ips {
        if policy.uses_external_chain {
            add(Map::ServiceIps, ip_key(*ip), external());
        }
        if !policy.has_external {
            add(Map::NoEndpointServices, ip_key(*ip), nowhere(no_local_external));
        }
    }
    if let Some(np) = sp.node_port {
        if policy.uses_external_chain {
            add(Map::ServiceNodePorts, Key::Port(sp.protocol, np), external());
        }
        if !policy.has_external {
            add(Map::NoEndpointNodePorts, Key::Port(sp.protocol, np), nowhere(no_local_external));
        }
    }
}

/// The hairpin set's members: every endpoint address (a plain set: 50,000 endpoints cost
/// 4 bytes each, not a map entry).
pub type Hairpin = BTreeSet<Ipv4Addr>;

/// The hairpin set of `model`: the address of every endpoint that may be used (ready, or
/// serving while terminating). That is a superset of what the rules DNAT to — harmless, as a
/// member only matters to a packet DNATed back to its own source — and needs no endpoint
/// policy per service, which keeps it cheap at 10,000 services.
pub fn hairpin(model: &Model) -> Hairpin {
    let mut all: Vec<Ipv4Addr> = model
        .services
        .iter()
        .flat_map(|sp| sp.endpoints.iter().filter(|e| e.ready || (e.serving && e.terminating)).map(|e| e.ip))
        .collect();
    all.sort_unstable();
    all.dedup();
    all.into_iter().collect()
}

/// Every map element of `model`. Two service ports claiming the same key (two services listing one
/// external IP and port) cannot both have it: the first in model order keeps it, as the first
/// iptables rule would win, and the other is reported.
pub fn elements(model: &Model) -> (Elements, Vec<String>) {
    // Collected, stably sorted and built in one go: cheaper than 11,000 inserts at 10,000
    // services, and the first of equal keys (model order) is still the one kept.
    let mut all: Vec<((Map, Key), Verdict, usize)> = Vec::with_capacity(model.services.len() * 2);
    for (i, sp) in model.services.iter().enumerate() {
        service_elements(sp, |map, key, verdict| all.push(((map, key), verdict, i)));
    }
    all.sort_by_key(|e| e.0);
    let mut conflicts = Vec::new();
    let mut kept: Vec<((Map, Key), Verdict)> = Vec::with_capacity(all.len());
    for (mk, verdict, i) in all {
        match kept.last() {
            Some((last, _)) if *last == mk => conflicts.push((i, mk)),
            _ => kept.push((mk, verdict)),
        }
    }
    conflicts.sort_by_key(|(i, _)| *i);
    let conflicts = conflicts
        .into_iter()
        .map(|(i, (map, key))| {
            format!("service {}: {key} in {} is taken by another service", model.services[i].id(), map.name())
        })
        .collect();
    (kept.into_iter().collect(), conflicts)
}

/// The whole transaction for `model` as if the table held nothing yet: the text a first sync
/// runs (and the golden files hold).
pub fn render(model: &Model) -> String {
    let (elements, _) = elements(model);
    let mut text = crate::nftables::text::Text::new(Vec::new());
    let out = crate::nftables::tx::Tx::new(&mut text)
        .full(model, &elements, &hairpin(model), &[], &[])
        .and_then(|_| text.finish())
        .expect("writing to a Vec cannot fail");
    String::from_utf8(out).expect("the transaction is UTF-8")
}
