//! The text `nft -f` reads: one transaction of commands and `table ip kaji-proxy { ... }`
//! blocks, written out as it is produced (a full sync of 10,000 services is ~15 MB, streamed to
//! nft's stdin rather than held).

use crate::model::Model;
use crate::nftables::plan::Partial;
use crate::nftables::render::{
    service_objects, Chain, Elements, Hairpin, Key, Map, Verdict, MARK_MASQ_CHAIN, MASQ_MARK,
};
use crate::nftables::render::{REJECT_CHAIN, TABLE};
use std::fmt::Write as _;
use std::io;
use std::net::Ipv4Addr;

/// Base chains: hooked into netfilter at the same points as the iptables mode's jump rules.
/// `dstnat`/`srcnat` are -100/100; the filter chains run at `filter` (0), after DNAT on the
/// output path, so locally generated traffic that was DNATed is not mistaken for traffic to a
/// service without endpoints (as the iptables mode's filter OUTPUT rules see it).
pub const BASE_CHAINS: [(&str, &str); 6] = [
    ("nat-prerouting", "type nat hook prerouting priority dstnat; policy accept;"),
    ("nat-output", "type nat hook output priority -100; policy accept;"),
    ("nat-postrouting", "type nat hook postrouting priority srcnat; policy accept;"),
    ("filter-input", "type filter hook input priority filter; policy accept;"),
    ("filter-forward", "type filter hook forward priority filter; policy accept;"),
    ("filter-output", "type filter hook output priority filter; policy accept;"),
];

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
fn fixed_rules() -> [(&'static str, String); 11] {
    let dispatch = |ips: &str, ports: &str| {
        format!(
            "\t\tip daddr . meta l4proto . th dport vmap @{ips}\n\
             \t\tfib daddr type local ip daddr != 127.0.0.0/8 meta l4proto . th dport vmap @{ports}\n"
        )
    };
    [
        (MARK_MASQ_CHAIN, format!("\t\tmark set mark or {MASQ_MARK}\n")),
        (
            "masquerading",
            format!(
                "\t\tmark and {MASQ_MARK} == 0 return\n\t\tmark set mark xor {MASQ_MARK}\n\t\tmasquerade fully-random\n"
            ),
        ),
        (REJECT_CHAIN, "\t\treject\n".into()),
        ("services", dispatch(Map::ServiceIps.name(), Map::ServiceNodePorts.name())),
        ("endpoints-check", dispatch(Map::NoEndpointServices.name(), Map::NoEndpointNodePorts.name())),
        ("nat-prerouting", "\t\tjump services\n".into()),
        ("nat-output", "\t\tjump services\n".into()),
        (
            "nat-postrouting",
            format!(
                "\t\tct status dnat ip saddr . ip daddr @{} jump {MARK_MASQ_CHAIN}\n\t\tjump masquerading\n",
                Map::Hairpin.name()
            ),
        ),
        ("filter-input", "\t\tct state new jump endpoints-check\n".into()),
        ("filter-forward", "\t\tct state new jump endpoints-check\n".into()),
        ("filter-output", "\t\tct state new jump endpoints-check\n".into()),
    ]
}

const SPILL_AT: usize = 64 * 1024;

/// What a transaction wrote.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub chains_written: usize,
    pub chains_deleted: usize,
    pub elements_written: usize,
}

/// A transaction being written to `out`.
pub struct Tx<W: io::Write> {
    out: W,
    buf: String,
    in_block: bool,
    /// Stale chains are emptied but not deleted (a kernel that still counts a reference from
    /// a map element removed in the same transaction refuses the delete with EBUSY).
    pub keep_stale_chains: bool,
    pub counts: Counts,
}

impl<W: io::Write> Tx<W> {
    pub fn new(out: W) -> Self {
        Self {
            out,
            buf: String::with_capacity(SPILL_AT + 4096),
            in_block: false,
            keep_stale_chains: false,
            counts: Counts::default(),
        }
    }

    fn spill(&mut self) -> io::Result<()> {
        if self.buf.len() >= SPILL_AT {
            self.out.write_all(self.buf.as_bytes())?;
            self.buf.clear();
        }
        Ok(())
    }

    /// Writes what is left and returns the sink.
    pub fn finish(mut self) -> io::Result<W> {
        self.close_block();
        self.out.write_all(self.buf.as_bytes())?;
        self.out.flush()?;
        Ok(self.out)
    }

    fn command(&mut self, args: std::fmt::Arguments<'_>) {
        self.close_block();
        let _ = writeln!(self.buf, "{args}");
    }

    fn open_block(&mut self) {
        if !self.in_block {
            let _ = writeln!(self.buf, "table ip {TABLE} {{");
            self.in_block = true;
        }
    }

    fn close_block(&mut self) {
        if self.in_block {
            self.buf.push_str("}\n");
            self.in_block = false;
        }
    }

    /// Declares a chain (creating it if needed) and appends its rules.
    pub fn chain(&mut self, c: &Chain) -> io::Result<()> {
        self.chain_rules(&c.name, &c.rules)
    }

    fn chain_rules(&mut self, name: &str, rules: &str) -> io::Result<()> {
        self.open_block();
        let _ = writeln!(self.buf, "\tchain {name} {{");
        self.buf.push_str(rules);
        self.buf.push_str("\t}\n");
        self.counts.chains_written += 1;
        self.spill()
    }

    /// An affinity set: client addresses, each remembered until its own timeout.
    pub fn set(&mut self, name: &str) {
        self.open_block();
        let _ = writeln!(self.buf, "\tset {name} {{\n\t\ttype ipv4_addr\n\t\tflags dynamic,timeout\n\t}}");
    }

    pub fn flush_chain(&mut self, name: &str) {
        self.command(format_args!("flush chain ip {TABLE} {name}"));
    }

    /// Deletes an (empty, unreferenced) chain; nothing when stale chains are kept.
    pub fn delete_chain(&mut self, name: &str) {
        if self.keep_stale_chains {
            return;
        }
        self.command(format_args!("delete chain ip {TABLE} {name}"));
        self.counts.chains_deleted += 1;
    }

    pub fn delete_set(&mut self, name: &str) {
        self.command(format_args!("delete set ip {TABLE} {name}"));
    }

    pub fn delete_elements<'k>(&mut self, map: Map, keys: impl IntoIterator<Item = &'k Key>) -> io::Result<()> {
        self.element_block(map, false, keys, |buf, key| writeln!(buf, "\t\t{key},"))
    }

    /// Adds elements with `add map`/`add set` (which declares it as it is, then adds to it).
    pub fn add_elements<'e>(
        &mut self,
        map: Map,
        elements: impl IntoIterator<Item = (&'e Key, &'e Verdict)>,
    ) -> io::Result<()> {
        self.element_block(map, true, elements, |buf, (key, v)| writeln!(buf, "\t\t{key} {v},"))
    }

    /// Adds endpoint addresses to the hairpin set.
    pub fn add_hairpin<'a>(&mut self, ips: impl IntoIterator<Item = &'a Ipv4Addr>) -> io::Result<()> {
        self.element_block(Map::Hairpin, true, ips, |buf, ip| writeln!(buf, "\t\t{ip} . {ip},"))
    }

    /// Removes endpoint addresses from the hairpin set.
    pub fn delete_hairpin<'a>(&mut self, ips: impl IntoIterator<Item = &'a Ipv4Addr>) -> io::Result<()> {
        self.element_block(Map::Hairpin, false, ips, |buf, ip| writeln!(buf, "\t\t{ip} . {ip},"))
    }

    /// One `add map|set ... elements = { ... }` or `delete element ... { ... }` command, an element
    /// per line as `line` writes it; nothing at all without elements.
    fn element_block<T>(
        &mut self,
        map: Map,
        add: bool,
        elements: impl IntoIterator<Item = T>,
        line: impl Fn(&mut String, T) -> std::fmt::Result,
    ) -> io::Result<()> {
        let mut elements = elements.into_iter().peekable();
        if elements.peek().is_none() {
            return Ok(());
        }
        match add {
            true => self.command(format_args!(
                "add {} ip {TABLE} {} {{ {} elements = {{",
                map.keyword(),
                map.name(),
                map.spec()
            )),
            false => self.command(format_args!("delete element ip {TABLE} {} {{", map.name())),
        }
        for e in elements {
            let _ = line(&mut self.buf, e);
            self.counts.elements_written += 1;
            self.spill()?;
        }
        self.buf.push_str(if add { "\t}; }\n" } else { "\t}\n" });
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
        self.command(format_args!("add table ip {TABLE} {{ comment \"rules for kaji-proxy\"; }}"));
        self.command(format_args!("flush table ip {TABLE}"));
        for (name, spec) in BASE_CHAINS {
            self.command(format_args!("add chain ip {TABLE} {name} {{ {spec} }}"));
        }
        for map in Map::ALL {
            self.command(format_args!("add {} ip {TABLE} {} {{ {} }}", map.keyword(), map.name(), map.spec()));
            self.command(format_args!("flush {} ip {TABLE} {}", map.keyword(), map.name()));
        }
        for (name, rules) in fixed_rules() {
            self.chain_rules(name, &rules)?;
        }
        for sp in &model.services {
            let objects = service_objects(model, sp);
            for set in &objects.sets {
                self.set(set);
            }
            for c in &objects.chains {
                self.chain(c)?;
            }
        }
        self.elements(elements)?;
        self.add_hairpin(hairpin)?;
        for name in stale {
            self.delete_chain(name);
        }
        for name in stale_sets {
            self.delete_set(name);
        }
        Ok(())
    }

    fn elements(&mut self, elements: &Elements) -> io::Result<()> {
        for map in Map::ALL {
            self.add_elements(map, elements.iter().filter(|((m, _), _)| *m == map).map(|((_, k), v)| (k, v)))?;
        }
        Ok(())
    }

    /// A partial sync: changed chains emptied and rewritten, new ones created, elements removed
    /// before any are added (a key may change its verdict), then stale chains emptied and
    /// deleted — last, when no element or rule refers to them any more.
    pub fn partial(&mut self, p: &Partial) -> io::Result<()> {
        for name in &p.flush {
            self.flush_chain(name);
        }
        for set in &p.sets {
            self.set(set);
        }
        for c in &p.chains {
            self.chain(c)?;
        }
        for map in Map::ALL {
            self.delete_elements(map, p.delete_elements.iter().filter(|(m, _)| *m == map).map(|(_, k)| k))?;
        }
        for map in Map::ALL {
            self.add_elements(map, p.add_elements.iter().filter(|(m, ..)| *m == map).map(|(_, k, v)| (k, v)))?;
        }
        self.delete_hairpin(&p.delete_hairpin)?;
        self.add_hairpin(&p.add_hairpin)?;
        for name in &p.stale_chains {
            self.flush_chain(name);
        }
        for name in &p.stale_chains {
            self.delete_chain(name);
        }
        for name in &p.stale_sets {
            self.delete_set(name);
        }
        Ok(())
    }
}
