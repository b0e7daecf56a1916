//! The text `nft -f` reads: one transaction of commands and `table ip kaji-proxy { ... }`
//! blocks, written out as it is produced (a full sync of 10,000 services is ~7 MB, streamed to
//! nft's stdin rather than held). The netlink writer (`netlink`) writes the same transactions
//! straight to the kernel; this one is what the golden files hold and what `nft -f` replays.

use crate::nftables::render::{Map, TABLE};
use crate::nftables::rule::Rule;
use crate::nftables::tx::{BaseChain, Element, Writer};
use std::fmt::Write as _;
use std::io;

const SPILL_AT: usize = 64 * 1024;

/// A transaction's text being written to `out`.
pub struct Text<W: io::Write> {
    out: W,
    buf: String,
    in_block: bool,
}

impl<W: io::Write> Text<W> {
    pub fn new(out: W) -> Self {
        Self { out, buf: String::with_capacity(SPILL_AT + 4096), in_block: false }
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
}

impl<W: io::Write> Writer for Text<W> {
    fn add_table(&mut self) {
        self.command(format_args!("add table ip {TABLE} {{ comment \"rules for kaji-proxy\"; }}"));
    }

    fn flush_table(&mut self) {
        self.command(format_args!("flush table ip {TABLE}"));
    }

    fn base_chain(&mut self, c: &BaseChain) {
        self.command(format_args!("add chain ip {TABLE} {} {{ {} }}", c.name, c.spec));
    }

    fn add_map(&mut self, map: Map) {
        self.command(format_args!("add {} ip {TABLE} {} {{ {} }}", map.keyword(), map.name(), map.spec()));
    }

    fn flush_map(&mut self, map: Map) {
        self.command(format_args!("flush {} ip {TABLE} {}", map.keyword(), map.name()));
    }

    fn chain(&mut self, name: &str, rules: &[Rule]) -> io::Result<()> {
        self.open_block();
        let _ = writeln!(self.buf, "\tchain {name} {{");
        for rule in rules {
            let _ = writeln!(self.buf, "\t\t{rule}");
        }
        self.buf.push_str("\t}\n");
        self.spill()
    }

    fn affinity_set(&mut self, name: &str) {
        self.open_block();
        let _ = writeln!(self.buf, "\tset {name} {{\n\t\ttype ipv4_addr\n\t\tflags dynamic,timeout\n\t}}");
    }

    fn flush_chain(&mut self, name: &str) {
        self.command(format_args!("flush chain ip {TABLE} {name}"));
    }

    fn delete_chain(&mut self, name: &str) {
        self.command(format_args!("delete chain ip {TABLE} {name}"));
    }

    fn delete_set(&mut self, name: &str) {
        self.command(format_args!("delete set ip {TABLE} {name}"));
    }

    /// One `add map|set ... elements = { ... }` (which declares the map as it is, then adds to
    /// it) or `delete element ... { ... }` command, an element per line.
    fn elements(&mut self, map: Map, add: bool, elements: &mut dyn Iterator<Item = Element<'_>>) -> io::Result<usize> {
        let mut elements = elements.peekable();
        if elements.peek().is_none() {
            return Ok(0);
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
        let mut n = 0;
        for e in elements {
            let _ = match e {
                Element::Key(key, Some(v)) => writeln!(self.buf, "\t\t{key} {v},"),
                Element::Key(key, None) => writeln!(self.buf, "\t\t{key},"),
                Element::Hairpin(ip) => writeln!(self.buf, "\t\t{ip} . {ip},"),
            };
            n += 1;
            self.spill()?;
        }
        self.buf.push_str(if add { "\t}; }\n" } else { "\t}\n" });
        Ok(n)
    }
}
