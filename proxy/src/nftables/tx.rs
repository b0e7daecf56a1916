//! One sync's transaction, whoever writes it: the fixed part of the table (base chains, the
//! chains they dispatch through, the maps), a full rewrite or a partial one, as calls on a
//! [`Writer`] — nft's text (`text`) or the kernel's netlink messages (`netlink`).

use crate::model::Model;
use crate::nftables::plan::Partial;
use crate::nftables::render::REJECT_CHAIN;
use crate::nftables::render::{service_objects, Elements, Hairpin, Key, Map, Verdict, MARK_MASQ_CHAIN, MASQ_MARK};
use crate::nftables::rule::{Action, Rule};
use std::io;
use std::net::Ipv4Addr;

/// A base chain: hooked into netfilter.
#[derive(Clone, Copy, Debug)]
pub struct BaseChain {
    pub name: &'static str,
    /// `nat` or `filter`.
    pub kind: &'static str,
    /// `NF_INET_*` hook number.
    pub hook: u32,
    pub priority: i32,
    /// As `add chain` takes it.
    pub spec: &'static str,
}

/// Base chains: hooked into netfilter at the same points as the iptables mode's jump rules.
/// `dstnat`/`srcnat` are -100/100; the filter chains run at `filter` (0), after DNAT on the
/// output path, so locally generated traffic that was DNATed is not mistaken for traffic to a
/// service without endpoints (as the iptables mode's filter OUTPUT rules see it).
pub const BASE_CHAINS: [BaseChain; 6] = {
    const fn base(name: &'static str, kind: &'static str, hook: u32, priority: i32, spec: &'static str) -> BaseChain {
        BaseChain { name, kind, hook, priority, spec }
    }
    // NF_INET_PRE_ROUTING 0, LOCAL_IN 1, FORWARD 2, LOCAL_OUT 3, POST_ROUTING 4.
    [
        base("nat-prerouting", "nat", 0, -100, "type nat hook prerouting priority dstnat; policy accept;"),
        base("nat-output", "nat", 3, -100, "type nat hook output priority -100; policy accept;"),
        base("nat-postrouting", "nat", 4, 100, "type nat hook postrouting priority srcnat; policy accept;"),
        base("filter-input", "filter", 1, 0, "type filter hook input priority filter; policy accept;"),
        base("filter-forward", "filter", 2, 0, "type filter hook forward priority filter; policy accept;"),
        base("filter-output", "filter", 3, 0, "type filter hook output priority filter; policy accept;"),
    ]
};

/// Every chain that is not a service's: base chains and the ones they dispatch through.
pub const FIXED_CHAINS: [&str; 11] = [
    "nat-prerouting",
    "nat-output",
    "nat-postrouting",
    "filter-input",
    "filter-forward",
    "filter-output",
    MARK_MASQ_CHAIN,
    "masquerading",
    REJECT_CHAIN,
    "services",
    "endpoints-check",
];

/// The fixed chains' rules, in an order where every chain exists before a rule jumps to it.
pub fn fixed_rules() -> [(&'static str, Vec<Rule>); 11] {
    let dispatch = |ips: Map, ports: Map| vec![Rule::DispatchIps(ips.name()), Rule::DispatchNodePorts(ports.name())];
    let jump = |chain: &str| Rule::Always(Action::Jump(chain.into()));
    [
        (MARK_MASQ_CHAIN, vec![Rule::MarkOr(MASQ_MARK)]),
        ("masquerading", vec![Rule::ReturnUnmarked(MASQ_MARK), Rule::MarkXor(MASQ_MARK), Rule::Masquerade]),
        (REJECT_CHAIN, vec![Rule::Reject]),
        ("services", dispatch(Map::ServiceIps, Map::ServiceNodePorts)),
        ("endpoints-check", dispatch(Map::NoEndpointServices, Map::NoEndpointNodePorts)),
        ("nat-prerouting", vec![jump("services")]),
        ("nat-output", vec![jump("services")]),
        (
            "nat-postrouting",
            vec![Rule::Hairpin { set: Map::Hairpin.name(), chain: MARK_MASQ_CHAIN }, jump("masquerading")],
        ),
        ("filter-input", vec![Rule::NewConnections("endpoints-check")]),
        ("filter-forward", vec![Rule::NewConnections("endpoints-check")]),
        ("filter-output", vec![Rule::NewConnections("endpoints-check")]),
    ]
}

/// A map or set element to add or delete.
#[derive(Clone, Copy, Debug)]
pub enum Element<'a> {
    /// A map key, with its verdict when added.
    Key(&'a Key, Option<&'a Verdict>),
    /// An endpoint address in the hairpin set (`ip . ip`).
    Hairpin(&'a Ipv4Addr),
}

/// What a transaction is made of. Each call adds to one transaction, applied whole or not at
/// all; objects are named as in table `ip kaji-proxy`.
pub trait Writer {
    /// `add table` (with its comment).
    fn add_table(&mut self);
    /// Every rule of the table removed (maps and sets keep their elements).
    fn flush_table(&mut self);
    fn base_chain(&mut self, chain: &BaseChain);
    /// Declares a map (or the hairpin set), if it does not exist.
    fn add_map(&mut self, map: Map);
    fn flush_map(&mut self, map: Map);
    /// Declares a chain, if it does not exist, and appends `rules`.
    fn chain(&mut self, name: &str, rules: &[Rule]) -> io::Result<()>;
    /// Declares an affinity set (client addresses with a timeout each).
    fn affinity_set(&mut self, name: &str);
    fn flush_chain(&mut self, name: &str);
    fn delete_chain(&mut self, name: &str);
    fn delete_set(&mut self, name: &str);
    /// Adds or deletes elements of `map`; returns how many.
    fn elements(&mut self, map: Map, add: bool, elements: &mut dyn Iterator<Item = Element<'_>>) -> io::Result<usize>;
}

/// What a transaction wrote.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub chains_written: usize,
    pub chains_deleted: usize,
    pub elements_written: usize,
}

/// A transaction being written by a [`Writer`].
pub struct Tx<'w> {
    w: &'w mut dyn Writer,
    /// Stale chains are emptied but not deleted (a kernel that still counts a reference from
    /// a map element removed in the same transaction refuses the delete with EBUSY).
    pub keep_stale_chains: bool,
    pub counts: Counts,
}

impl<'w> Tx<'w> {
    pub fn new(w: &'w mut dyn Writer) -> Self {
        Self { w, keep_stale_chains: false, counts: Counts::default() }
    }

    fn chain(&mut self, name: &str, rules: &[Rule]) -> io::Result<()> {
        self.counts.chains_written += 1;
        self.w.chain(name, rules)
    }

    /// Deletes an (empty, unreferenced) chain; nothing when stale chains are kept.
    fn delete_chain(&mut self, name: &str) {
        if !self.keep_stale_chains {
            self.w.delete_chain(name);
            self.counts.chains_deleted += 1;
        }
    }

    fn elements<'e>(&mut self, map: Map, add: bool, e: impl Iterator<Item = Element<'e>>) -> io::Result<()> {
        self.counts.elements_written += self.w.elements(map, add, &mut { e })?;
        Ok(())
    }

    /// The whole table for `model`: rules flushed and rewritten, maps flushed and refilled, the
    /// affinity sets' contents kept; then the `stale` chains and sets (emptied by the flush,
    /// referenced by nothing) deleted.
    pub fn full(
        &mut self,
        model: &Model,
        elements: &Elements,
        hairpin: &Hairpin,
        stale: &[String],
        stale_sets: &[String],
    ) -> io::Result<()> {
        self.w.add_table();
        self.w.flush_table();
        for chain in &BASE_CHAINS {
            self.w.base_chain(chain);
        }
        for map in Map::ALL {
            self.w.add_map(map);
            self.w.flush_map(map);
        }
        for (name, rules) in fixed_rules() {
            self.chain(name, &rules)?;
        }
        for sp in &model.services {
            let objects = service_objects(model, sp);
            for set in &objects.sets {
                self.w.affinity_set(set);
            }
            for c in &objects.chains {
                self.chain(&c.name, &c.rules)?;
            }
        }
        for map in Map::ALL {
            let of_map = elements.iter().filter(|((m, _), _)| *m == map);
            self.elements(map, true, of_map.map(|((_, k), v)| Element::Key(k, Some(v))))?;
        }
        self.elements(Map::Hairpin, true, hairpin.iter().map(Element::Hairpin))?;
        for name in stale {
            self.delete_chain(name);
        }
        for name in stale_sets {
            self.w.delete_set(name);
        }
        Ok(())
    }

    /// A partial sync: changed chains emptied and rewritten, new ones created, elements removed
    /// before any are added (a key may change its verdict), then stale chains emptied and
    /// deleted — last, when no element or rule refers to them any more.
    pub fn partial(&mut self, p: &Partial) -> io::Result<()> {
        for name in &p.flush {
            self.w.flush_chain(name);
        }
        for set in &p.sets {
            self.w.affinity_set(set);
        }
        for c in &p.chains {
            self.chain(&c.name, &c.rules)?;
        }
        for map in Map::ALL {
            let of_map = p.delete_elements.iter().filter(|(m, _)| *m == map);
            self.elements(map, false, of_map.map(|(_, k)| Element::Key(k, None)))?;
        }
        for map in Map::ALL {
            let of_map = p.add_elements.iter().filter(|(m, ..)| *m == map);
            self.elements(map, true, of_map.map(|(_, k, v)| Element::Key(k, Some(v))))?;
        }
        self.elements(Map::Hairpin, false, p.delete_hairpin.iter().map(Element::Hairpin))?;
        self.elements(Map::Hairpin, true, p.add_hairpin.iter().map(Element::Hairpin))?;
        for name in &p.stale_chains {
            self.w.flush_chain(name);
        }
        for name in &p.stale_chains {
            self.delete_chain(name);
        }
        for name in &p.stale_sets {
            self.w.delete_set(name);
        }
        Ok(())
    }
}
