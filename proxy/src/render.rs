//! The pure core: the model in, kube-proxy's iptables ruleset out — first as chains (so a sync
//! can rewrite only the chains that changed), then as one `iptables-restore` payload.

use crate::model::{Endpoint, Model, ServicePort};
use crate::names;
use std::collections::hash_map::DefaultHasher;
use std::collections::{HashMap, HashSet};
use std::fmt::Write;
use std::hash::{Hash, Hasher};

/// The mark `KUBE-MARK-MASQ` sets and `KUBE-POSTROUTING` masquerades (kube-proxy's default bit 14).
pub const MASQ_MARK: &str = "0x4000";

/// Chains kaji owns, by name or prefix: what `--cleanup` and stale-chain removal may touch.
pub const OWN_CHAIN_PREFIXES: &[&str] = &[
    "KUBE-SERVICES",
    "KUBE-EXTERNAL-SERVICES",
    "KUBE-FORWARD",
    "KUBE-NODEPORTS",
    "KUBE-POSTROUTING",
    "KUBE-MARK-MASQ",
    "KUBE-SVC-",
    "KUBE-SVL-",
    "KUBE-EXT-",
    "KUBE-SEP-",
];

pub fn is_own_chain(name: &str) -> bool {
    OWN_CHAIN_PREFIXES.iter().any(|p| if p.ends_with('-') { name.starts_with(p) } else { name == *p })
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Table {
    Filter,
    Nat,
}

impl Table {
    pub const ALL: [Table; 2] = [Table::Filter, Table::Nat];

    pub fn as_str(self) -> &'static str {
        match self {
            Table::Filter => "filter",
            Table::Nat => "nat",
        }
    }
}

/// One chain and its rules, each a full `-A <chain> ...` line ending in a newline.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chain {
    pub name: String,
    pub rules: String,
}

impl Chain {
    fn new(name: impl Into<String>) -> Self {
        Self { name: name.into(), rules: String::new() }
    }

    /// Appends `-A <chain> <args>`.
    fn add(&mut self, args: std::fmt::Arguments<'_>) {
        let _ = writeln!(self.rules, "-A {} {}", self.name, args);
    }

    pub fn rule_count(&self) -> usize {
        self.rules.lines().count()
    }

    fn digest(&self) -> u64 {
        let mut h = DefaultHasher::new();
        self.rules.hash(&mut h);
        h.finish()
    }
}

/// The whole desired ruleset.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Rules {
    pub filter: Vec<Chain>,
    pub nat: Vec<Chain>,
}

/// What was applied last: one digest per chain, enough to tell which chains changed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Fingerprint {
    chains: HashMap<(Table, String), u64>,
}

impl Fingerprint {
    pub fn len(&self) -> usize {
        self.chains.len()
    }

    pub fn is_empty(&self) -> bool {
        self.chains.is_empty()
    }

    pub fn contains(&self, table: Table, chain: &str) -> bool {
        self.chains.contains_key(&(table, chain.to_string()))
    }
}

/// A restore payload and what it holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Payload {
    pub text: String,
    /// Chains declared (flushed) and rewritten.
    pub chains_written: usize,
    /// Stale chains deleted.
    pub chains_deleted: usize,
}

impl Rules {
    pub fn table(&self, table: Table) -> &[Chain] {
        match table {
            Table::Filter => &self.filter,
            Table::Nat => &self.nat,
        }
    }

    pub fn rule_count(&self, table: Table) -> usize {
        self.table(table).iter().map(Chain::rule_count).sum()
    }

    pub fn fingerprint(&self) -> Fingerprint {
        let mut chains = HashMap::new();
        for table in Table::ALL {
            for c in self.table(table) {
                chains.insert((table, c.name.clone()), c.digest());
            }
        }
        Fingerprint { chains }
    }

    /// Chains in `previous` that these rules no longer have.
    pub fn stale_since(&self, previous: &Fingerprint) -> Vec<(Table, String)> {
        let now: HashSet<(Table, &str)> =
            Table::ALL.iter().flat_map(|t| self.table(*t).iter().map(move |c| (*t, c.name.as_str()))).collect();
        let mut stale: Vec<(Table, String)> =
            previous.chains.keys().filter(|(t, n)| !now.contains(&(*t, n.as_str()))).cloned().collect();
        stale.sort();
        stale
    }

    /// The `iptables-restore --noflush` payload. With `previous`, only chains whose rules differ
    /// from it are declared (which flushes them) and rewritten, and `None` means nothing changed;
    /// without it every chain is. `stale` chains are flushed, then deleted once nothing refers
    /// to them, all in the same transaction.
    pub fn restore(&self, previous: Option<&Fingerprint>, stale: &[(Table, String)]) -> Option<Payload> {
        let mut text = String::with_capacity(self.table(Table::Nat).iter().map(|c| c.rules.len() + 40).sum());
        let (mut written, mut deleted) = (0, 0);
        for table in Table::ALL {
            let changed: Vec<&Chain> = self
                .table(table)
                .iter()
                .filter(|c| match previous {
                    None => true,
                    Some(p) => p.chains.get(&(table, c.name.clone())) != Some(&c.digest()),
                })
                .collect();
            let gone: Vec<&str> = stale.iter().filter(|(t, _)| *t == table).map(|(_, n)| n.as_str()).collect();
            if changed.is_empty() && gone.is_empty() {
                continue;
            }
            let _ = writeln!(text, "*{}", table.as_str());
            for name in changed.iter().map(|c| c.name.as_str()).chain(gone.iter().copied()) {
                let _ = writeln!(text, ":{name} - [0:0]");
            }
            for c in &changed {
                text.push_str(&c.rules);
            }
            for name in &gone {
                let _ = writeln!(text, "-X {name}");
            }
            text.push_str("COMMIT\n");
            written += changed.len();
            deleted += gone.len();
        }
        if previous.is_some() && written == 0 && deleted == 0 {
            return None;
        }
        Some(Payload { text, chains_written: written, chains_deleted: deleted })
    }
}

/// The full restore payload for `model`, as if nothing were installed yet.
pub fn render(model: &Model) -> String {
    build(model).restore(None, &[]).map(|p| p.text).unwrap_or_default()
}

/// Builds every chain for `model`, in kube-proxy's iptables-mode layout.
pub fn build(model: &Model) -> Rules {
    let mut b = Builder {
        model,
        f_services: Chain::new("KUBE-SERVICES"),
        f_external: Chain::new("KUBE-EXTERNAL-SERVICES"),
        n_services: Chain::new("KUBE-SERVICES"),
        n_nodeports: Chain::new("KUBE-NODEPORTS"),
        per_service: Vec::with_capacity(model.services.len() * 4),
    };
    for sp in &model.services {
        b.service(sp);
    }
    let Builder { f_services, f_external, mut n_services, n_nodeports, per_service, .. } = b;
    n_services.add(format_args!(
        "-m comment --comment \"kubernetes service nodeports; NOTE: this must be the last rule in this chain\" \
         -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS"
    ));
    let mut forward = Chain::new("KUBE-FORWARD");
    forward.add(format_args!("-m conntrack --ctstate INVALID -j DROP"));
    forward.add(format_args!(
        "-m comment --comment \"kubernetes forwarding rules\" -m mark --mark {MASQ_MARK}/{MASQ_MARK} -j ACCEPT"
    ));
    forward.add(format_args!(
        "-m comment --comment \"kubernetes forwarding conntrack rule\" -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT"
    ));
    let mut postrouting = Chain::new("KUBE-POSTROUTING");
    postrouting.add(format_args!("-m mark ! --mark {MASQ_MARK}/{MASQ_MARK} -j RETURN"));
    postrouting.add(format_args!("-j MARK --xor-mark {MASQ_MARK}"));
    postrouting.add(format_args!("-m comment --comment \"kubernetes service traffic requiring SNAT\" -j MASQUERADE"));
    let mut mark = Chain::new("KUBE-MARK-MASQ");
    mark.add(format_args!("-j MARK --or-mark {MASQ_MARK}"));
    let mut nat = vec![n_services, n_nodeports, postrouting, mark];
    nat.extend(per_service);
    Rules { filter: vec![f_services, f_external, forward], nat }
}

struct Builder<'a> {
    model: &'a Model,
    f_services: Chain,
    f_external: Chain,
    n_services: Chain,
    n_nodeports: Chain,
    per_service: Vec<Chain>,
}

impl Builder<'_> {
    fn service(&mut self, sp: &ServicePort) {
        let id = sp.id();
        let proto = sp.protocol.as_str();
        let svc = names::service_chain(&id, proto);
        let svl = names::local_chain(&id, proto);
        let ext = names::external_chain(&id, proto);
        let policy = sp.policy();
        let (cluster_eps, local_eps) = (&policy.cluster, &policy.local);
        let (has_any, has_internal, has_external) = (policy.has_any, policy.has_internal, policy.has_external);
        let internal_chain = if sp.internal_local { &svl } else { &svc };
        let external_policy_chain = if sp.external_local { &svl } else { &svc };
        let uses_ext_chain = policy.uses_external_chain;
        let m = format!("-m {proto} -p {proto}");

        // ClusterIP: to the internal policy chain, or reject/drop in filter.
        if has_internal {
            self.n_services.add(format_args!(
                "-m comment --comment \"{id} cluster IP\" {m} -d {} --dport {} -j {internal_chain}",
                sp.cluster_ip, sp.port
            ));
        } else {
            let (comment, target) = filter_target(&id, sp.internal_local && has_any);
            self.f_services.add(format_args!(
                "-m comment --comment \"{comment}\" {m} -d {} --dport {} -j {target}",
                sp.cluster_ip, sp.port
            ));
        }
        // External IPs and the NodePort: through KUBE-EXT, and/or reject/drop in filter.
        let (ext_comment, ext_target) = filter_target(&id, sp.external_local && has_any);
        for ip in &sp.external_ips {
            if uses_ext_chain {
                self.n_services.add(format_args!(
                    "-m comment --comment \"{id} external IP\" {m} -d {ip} --dport {} -j {ext}",
                    sp.port
                ));
            }
            if !has_external {
                self.f_external.add(format_args!(
                    "-m comment --comment \"{ext_comment}\" {m} -d {ip} --dport {} -j {ext_target}",
                    sp.port
                ));
            }
        }
        if let Some(np) = sp.node_port {
            if uses_ext_chain {
                self.n_nodeports.add(format_args!("-m comment --comment {id} {m} --dport {np} -j {ext}"));
            }
            if !has_external {
                self.f_external.add(format_args!(
                    "-m comment --comment \"{ext_comment}\" -m addrtype --dst-type LOCAL {m} --dport {np} -j {ext_target}"
                ));
            }
        }

        if uses_ext_chain {
            let mut c = Chain::new(ext.clone());
            if sp.external_local {
                if let Some(cidr) = &self.model.cluster_cidr {
                    c.add(format_args!(
                        "-m comment --comment \"pod traffic for {id} external destinations\" -s {cidr} -j {svc}"
                    ));
                }
                c.add(format_args!(
                    "-m comment --comment \"masquerade LOCAL traffic for {id} external destinations\" \
                     -m addrtype --src-type LOCAL -j KUBE-MARK-MASQ"
                ));
                c.add(format_args!(
                    "-m comment --comment \"route LOCAL traffic for {id} external destinations\" \
                     -m addrtype --src-type LOCAL -j {svc}"
                ));
            } else {
                c.add(format_args!(
                    "-m comment --comment \"masquerade traffic for {id} external destinations\" -j KUBE-MARK-MASQ"
                ));
            }
            if has_external {
                c.add(format_args!("-j {external_policy_chain}"));
            }
            self.per_service.push(c);
        }

        // The policy chains: masquerade rule (internal chain only), then endpoint selection.
        let masq = |c: &mut Chain| {
            let dst = format!("{m} -d {} --dport {}", sp.cluster_ip, sp.port);
            if self.model.masquerade_all {
                c.add(format_args!("-m comment --comment \"{id} cluster IP\" {dst} -j KUBE-MARK-MASQ"));
            } else if let Some(cidr) = &self.model.cluster_cidr {
                c.add(format_args!("-m comment --comment \"{id} cluster IP\" {dst} ! -s {cidr} -j KUBE-MARK-MASQ"));
            }
        };
        if !cluster_eps.is_empty() {
            let mut c = Chain::new(svc.clone());
            if !sp.internal_local {
                masq(&mut c);
            }
            select_endpoint(&mut c, sp, &id, cluster_eps);
            self.per_service.push(c);
        }
        if !local_eps.is_empty() {
            let mut c = Chain::new(svl.clone());
            if sp.internal_local {
                masq(&mut c);
            }
            select_endpoint(&mut c, sp, &id, local_eps);
            self.per_service.push(c);
        }

        // One KUBE-SEP per endpoint either policy chain uses.
        for ep in policy.reachable() {
            let addr = ep.addr();
            let mut c = Chain::new(names::endpoint_chain(&id, proto, &addr));
            c.add(format_args!("-m comment --comment {id} -s {} -j KUBE-MARK-MASQ", ep.ip));
            if sp.affinity_timeout.is_some() {
                let name = c.name.clone();
                c.add(format_args!(
                    "-m comment --comment {id} -m recent --name {name} --set {m} -j DNAT --to-destination {addr}"
                ));
            } else {
                c.add(format_args!("-m comment --comment {id} {m} -j DNAT --to-destination {addr}"));
            }
            self.per_service.push(c);
        }
    }
}

/// The filter rule for traffic with nowhere to go: REJECT when the service has no endpoints at
/// all, DROP when it has some but none on this node and the policy is Local.
fn filter_target(id: &str, no_local: bool) -> (String, &'static str) {
    if no_local {
        (format!("{id} has no local endpoints"), "DROP")
    } else {
        (format!("{id} has no endpoints"), "REJECT")
    }
}

/// Session-affinity checks, then the `statistic` cascade: endpoint i of n is chosen with
/// probability 1/(n-i), so each gets 1/n overall; the last one is unconditional.
fn select_endpoint(c: &mut Chain, sp: &ServicePort, id: &str, eps: &[&Endpoint]) {
    let seps: Vec<(String, String)> = eps
        .iter()
        .map(|e| {
            let addr = e.addr();
            (names::endpoint_chain(id, sp.protocol.as_str(), &addr), addr)
        })
        .collect();
    if let Some(timeout) = sp.affinity_timeout {
        for (sep, addr) in &seps {
            c.add(format_args!(
                "-m comment --comment \"{id} -> {addr}\" -m recent --name {sep} --rcheck --seconds {timeout} --reap -j {sep}"
            ));
        }
    }
    let n = seps.len();
    for (i, (sep, addr)) in seps.iter().enumerate() {
        if i + 1 < n {
            c.add(format_args!(
                "-m comment --comment \"{id} -> {addr}\" -m statistic --mode random --probability {} -j {sep}",
                probability(n - i)
            ));
        } else {
            c.add(format_args!("-m comment --comment \"{id} -> {addr}\" -j {sep}"));
        }
    }
}

/// 1/n with ten decimals, as kube-proxy prints it (`%0.10f`).
pub fn probability(n: usize) -> String {
    format!("{:.10}", 1.0 / n as f64)
}
