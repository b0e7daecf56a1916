//! The rules of table `ip kaji-proxy`, as values: every shape the table uses, once. Each one is
//! written either as nft's text (`Display`, what the golden files hold) or as the kernel's
//! expressions (`netlink`), and the two must list alike (`nft list table` of either is the same;
//! tests check it).

use crate::model::{Cidr, Protocol};
use std::fmt;
use std::net::Ipv4Addr;

/// Where a rule sends a packet it matched.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    Jump(String),
    Goto(String),
    /// `meta l4proto <proto> dnat to <ip>:<port>`.
    Dnat(Protocol, Ipv4Addr, u16),
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Action::Jump(chain) => write!(f, "jump {chain}"),
            Action::Goto(chain) => write!(f, "goto {chain}"),
            Action::Dnat(proto, ip, port) => write!(f, "meta l4proto {} dnat to {ip}:{port}", proto.as_str()),
        }
    }
}

/// One rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Rule {
    /// `mark set mark or <mark>`
    MarkOr(u32),
    /// `mark and <mark> == 0 return`
    ReturnUnmarked(u32),
    /// `mark set mark xor <mark>`
    MarkXor(u32),
    /// `masquerade fully-random`
    Masquerade,
    /// `reject`
    Reject,
    /// `ip daddr . meta l4proto . th dport vmap @<map>`
    DispatchIps(&'static str),
    /// `fib daddr type local ip daddr != 127.0.0.0/8 meta l4proto . th dport vmap @<map>`
    DispatchNodePorts(&'static str),
    /// `ct status dnat ip saddr . ip daddr @<set> jump <chain>`
    Hairpin { set: &'static str, chain: &'static str },
    /// `ct state new jump <chain>`
    NewConnections(&'static str),
    /// `update @<set> { ip saddr timeout <s>s }`
    RememberClient { set: String, timeout: u32 },
    /// `ip daddr <ip> <proto> dport <port> [ip saddr != <cidr>] jump <chain>`: traffic to the
    /// service to masquerade (from outside the pod network, or all of it).
    ToService { ip: Ipv4Addr, proto: Protocol, port: u16, not_from: Option<Cidr>, chain: &'static str },
    /// `ip saddr @<set> <action>`: a client the affinity set remembers.
    KnownClient { set: String, then: Action },
    /// `numgen random mod <n> == 0 <action>`
    OneIn(u32, Action),
    /// `ip saddr <cidr> <action>`
    From(Cidr, Action),
    /// `fib saddr type local <action>`: sent by the node itself.
    FromNode(Action),
    /// `<action>`
    Always(Action),
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rule::MarkOr(m) => write!(f, "mark set mark or {m:#x}"),
            Rule::ReturnUnmarked(m) => write!(f, "mark and {m:#x} == 0 return"),
            Rule::MarkXor(m) => write!(f, "mark set mark xor {m:#x}"),
            Rule::Masquerade => f.write_str("masquerade fully-random"),
            Rule::Reject => f.write_str("reject"),
            Rule::DispatchIps(map) => write!(f, "ip daddr . meta l4proto . th dport vmap @{map}"),
            Rule::DispatchNodePorts(map) => {
                write!(f, "fib daddr type local ip daddr != 127.0.0.0/8 meta l4proto . th dport vmap @{map}")
            }
            Rule::Hairpin { set, chain } => write!(f, "ct status dnat ip saddr . ip daddr @{set} jump {chain}"),
            Rule::NewConnections(chain) => write!(f, "ct state new jump {chain}"),
            Rule::RememberClient { set, timeout } => write!(f, "update @{set} {{ ip saddr timeout {timeout}s }}"),
            Rule::ToService { ip, proto, port, not_from, chain } => {
                write!(f, "ip daddr {ip} {} dport {port} ", proto.as_str())?;
                if let Some(cidr) = not_from {
                    write!(f, "ip saddr != {cidr} ")?;
                }
                write!(f, "jump {chain}")
            }
            Rule::KnownClient { set, then } => write!(f, "ip saddr @{set} {then}"),
            Rule::OneIn(n, then) => write!(f, "numgen random mod {n} == 0 {then}"),
            Rule::From(cidr, then) => write!(f, "ip saddr {cidr} {then}"),
            Rule::FromNode(then) => write!(f, "fib saddr type local {then}"),
            Rule::Always(then) => write!(f, "{then}"),
        }
    }
}
