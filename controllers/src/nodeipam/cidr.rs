//! CIDRs and the node CIDR allocator: the cluster CIDR cut into node-sized subnets, handed out in
//! rotation (Kubernetes' cidrset), rebuilt from the CIDRs the nodes already hold.

use std::collections::BTreeSet;
use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Error {
    #[error("invalid CIDR {0:?}")]
    Parse(String),
    #[error("node CIDR mask size {node} must be between the cluster's /{cluster} and /{bits}")]
    MaskSize { node: u8, cluster: u8, bits: u8 },
    #[error("node CIDR mask size {node} is too big for IPv6 cluster CIDR /{cluster} (at most 16 bits more)")]
    SubnetTooBig { node: u8, cluster: u8 },
    #[error("{cidr} is outside the cluster CIDR {cluster}")]
    OutOfRange { cidr: Cidr, cluster: Cidr },
}

/// An IPv4 or IPv6 network: address (host bits cleared) and prefix length.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Cidr {
    addr: IpAddr,
    prefix: u8,
}

impl Cidr {
    pub fn prefix(&self) -> u8 {
        self.prefix
    }

    fn bits(&self) -> u8 {
        if self.addr.is_ipv4() {
            32
        } else {
            128
        }
    }

    fn to_u128(self) -> u128 {
        match self.addr {
            IpAddr::V4(a) => u128::from(u32::from(a)),
            IpAddr::V6(a) => u128::from(a),
        }
    }

    /// The network of `value` (host bits cleared) in this CIDR's family.
    fn with(&self, value: u128, prefix: u8) -> Cidr {
        let value = value & mask(self.bits(), prefix);
        let addr = match self.addr {
            IpAddr::V4(_) => IpAddr::V4(u32::try_from(value).unwrap_or(u32::MAX).into()),
            IpAddr::V6(_) => IpAddr::V6(value.into()),
        };
        Cidr { addr, prefix }
    }
}

/// The network mask of `prefix` bits in an address of `bits` bits, as an integer.
fn mask(bits: u8, prefix: u8) -> u128 {
    let all = ones(bits);
    let host = bits.saturating_sub(prefix);
    if host >= 128 {
        0
    } else {
        all & !((1u128 << host) - 1)
    }
}

/// An address of `bits` bits with every bit set.
fn ones(bits: u8) -> u128 {
    if bits >= 128 {
        u128::MAX
    } else {
        (1u128 << bits) - 1
    }
}

impl FromStr for Cidr {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        let bad = || Error::Parse(s.to_string());
        let (addr, prefix) = s.split_once('/').ok_or_else(bad)?;
        let addr: IpAddr = addr.parse().map_err(|_| bad())?;
        let prefix: u8 = prefix.parse().map_err(|_| bad())?;
        let probe = Cidr { addr, prefix };
        if prefix > probe.bits() {
            return Err(bad());
        }
        Ok(probe.with(probe.to_u128(), prefix))
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

/// The node subnets of one cluster CIDR and which are taken.
#[derive(Clone, Debug)]
pub struct CidrSet {
    cluster: Cidr,
    node_prefix: u8,
    /// How many node subnets the cluster CIDR holds.
    size: u64,
    used: BTreeSet<u64>,
    /// Where the next search starts, so a just-released subnet is not handed out again at once.
    next: u64,
}

impl CidrSet {
    pub fn new(cluster: Cidr, node_prefix: u8) -> Result<Self, Error> {
        let bits = cluster.bits();
        if node_prefix < cluster.prefix || node_prefix > bits {
            return Err(Error::MaskSize { node: node_prefix, cluster: cluster.prefix, bits });
        }
        let diff = node_prefix - cluster.prefix;
        if bits == 128 && diff > 16 {
            return Err(Error::SubnetTooBig { node: node_prefix, cluster: cluster.prefix });
        }
        Ok(Self { cluster, node_prefix, size: 1u64 << diff, used: BTreeSet::new(), next: 0 })
    }

    /// A set with the CIDRs the nodes already hold taken; those outside the cluster CIDR are
    /// returned, not taken.
    pub fn rebuild(
        cluster: Cidr,
        node_prefix: u8,
        held: impl IntoIterator<Item = Cidr>,
    ) -> Result<(Self, Vec<Cidr>), Error> {
        let mut set = Self::new(cluster, node_prefix)?;
        let foreign = held.into_iter().filter(|c| set.occupy(c).is_err()).collect();
        Ok((set, foreign))
    }

    pub fn allocated(&self) -> usize {
        self.used.len()
    }

    /// The next free node subnet, or `None` when the range is exhausted.
    pub fn allocate(&mut self) -> Option<Cidr> {
        if self.used.len() as u64 >= self.size {
            return None;
        }
        let mut candidate = self.next;
        while self.used.contains(&candidate) {
            candidate = (candidate + 1) % self.size;
        }
        self.used.insert(candidate);
        self.next = (candidate + 1) % self.size;
        Some(self.subnet(candidate))
    }

    /// Marks `cidr` (any size inside the cluster CIDR) as taken. Idempotent.
    pub fn occupy(&mut self, cidr: &Cidr) -> Result<(), Error> {
        let (begin, end) = self.indices(cidr)?;
        self.used.extend(begin..=end);
        Ok(())
    }

    /// Frees `cidr`. Idempotent.
    pub fn release(&mut self, cidr: &Cidr) -> Result<(), Error> {
        let (begin, end) = self.indices(cidr)?;
        for i in begin..=end {
            self.used.remove(&i);
        }
        Ok(())
    }

    fn subnet(&self, index: u64) -> Cidr {
        let shift = self.cluster.bits() - self.node_prefix;
        let offset = if shift >= 128 { 0 } else { u128::from(index) << shift };
        self.cluster.with(self.cluster.to_u128() | offset, self.node_prefix)
    }

    /// The node subnets `cidr` covers.
    fn indices(&self, cidr: &Cidr) -> Result<(u64, u64), Error> {
        let out = || Error::OutOfRange { cidr: *cidr, cluster: self.cluster };
        if cidr.bits() != self.cluster.bits() {
            return Err(out());
        }
        let outer = self.cluster.prefix.min(cidr.prefix);
        let bits = self.cluster.bits();
        if cidr.to_u128() & mask(bits, outer) != self.cluster.to_u128() & mask(bits, outer) {
            return Err(out());
        }
        let shift = bits - self.node_prefix;
        let index = |v: u128| {
            let i = if shift >= 128 { 0 } else { (v ^ self.cluster.to_u128()) >> shift };
            u64::try_from(i).unwrap_or(u64::MAX).min(self.size - 1)
        };
        if cidr.prefix <= self.cluster.prefix {
            // As large as the whole cluster CIDR (or larger): every subnet.
            return Ok((0, self.size - 1));
        }
        let first = cidr.to_u128();
        let last = first | (!mask(bits, cidr.prefix) & ones(bits));
        Ok((index(first), index(last)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cidr(s: &str) -> Cidr {
        s.parse().expect("valid cidr")
    }

    fn set(cluster: &str, prefix: u8) -> CidrSet {
        CidrSet::new(cidr(cluster), prefix).expect("valid set")
    }

    #[test]
    fn parses_and_normalises_cidrs() {
        assert_eq!(cidr("10.244.3.7/16").to_string(), "10.244.0.0/16");
        assert_eq!(cidr("fd00::1/64").to_string(), "fd00::/64");
        for bad in ["10.0.0.0", "10.0.0.0/33", "nonsense/8", "10.0.0.0/x", "::/129"] {
            assert!(bad.parse::<Cidr>().is_err(), "{bad}");
        }
    }

    #[test]
    fn allocates_consecutive_subnets_of_the_cluster_cidr() {
        let mut s = set("10.244.0.0/16", 24);
        let got: Vec<String> = (0..3).filter_map(|_| s.allocate()).map(|c| c.to_string()).collect();
        assert_eq!(got, ["10.244.0.0/24", "10.244.1.0/24", "10.244.2.0/24"]);
        assert_eq!(s.allocated(), 3);
    }

    #[test]
    fn a_released_subnet_is_handed_out_again_after_the_rotation() {
        let mut s = set("10.0.0.0/30", 31);
        let a = s.allocate().expect("first");
        let b = s.allocate().expect("second");
        assert_eq!(s.allocate(), None, "exhausted");
        s.release(&a).expect("in range");
        assert_eq!(s.allocate(), Some(a));
        assert_eq!(s.allocate(), None);
        s.release(&b).expect("in range");
        s.release(&b).expect("releasing twice is fine");
        assert_eq!(s.allocate(), Some(b));
    }

    #[test]
    fn rebuilding_takes_what_nodes_hold_and_reports_foreign_cidrs() {
        let held = [cidr("10.244.0.0/24"), cidr("10.244.2.0/24"), cidr("192.168.0.0/24")];
        let (mut s, foreign) = CidrSet::rebuild(cidr("10.244.0.0/16"), 24, held).expect("valid");
        assert_eq!(foreign, vec![cidr("192.168.0.0/24")]);
        assert_eq!(s.allocated(), 2);
        assert_eq!(s.allocate(), Some(cidr("10.244.1.0/24")));
        assert_eq!(s.allocate(), Some(cidr("10.244.3.0/24")));
    }

    #[test]
    fn occupying_a_larger_or_smaller_cidr_covers_the_right_subnets() {
        let mut s = set("10.0.0.0/22", 24);
        s.occupy(&cidr("10.0.0.0/23")).expect("in range");
        assert_eq!(s.allocated(), 2);
        s.occupy(&cidr("10.0.3.128/25")).expect("in range");
        assert_eq!(s.allocated(), 3);
        assert_eq!(s.allocate(), Some(cidr("10.0.2.0/24")));
        assert_eq!(s.allocate(), None);
        s.occupy(&cidr("10.0.0.0/8")).expect("covers the whole range");
        assert!(s.occupy(&cidr("10.1.0.0/24")).is_err());
        assert!(s.occupy(&cidr("fd00::/64")).is_err());
    }

    #[test]
    fn mask_sizes_are_checked() {
        let cluster = cidr("10.244.0.0/16");
        assert_eq!(CidrSet::new(cluster, 15).err(), Some(Error::MaskSize { node: 15, cluster: 16, bits: 32 }));
        assert!(CidrSet::new(cluster, 33).is_err());
        let mut whole = set("10.244.0.0/16", 16);
        assert_eq!(whole.allocate(), Some(cluster));
        assert_eq!(whole.allocate(), None);
        let mut hosts = set("10.244.0.0/30", 32);
        let got: Vec<String> = (0..5).filter_map(|_| hosts.allocate()).map(|c| c.to_string()).collect();
        assert_eq!(got, ["10.244.0.0/32", "10.244.0.1/32", "10.244.0.2/32", "10.244.0.3/32"]);
        let mut wide = set("10.0.0.0/8", 26);
        assert_eq!(wide.allocate(), Some(cidr("10.0.0.0/26")));
        assert_eq!(wide.allocate(), Some(cidr("10.0.0.64/26")));
    }

    #[test]
    fn ipv6_subnets_are_allocated_within_sixteen_bits() {
        let mut s = set("fd00:10:244::/56", 64);
        assert_eq!(s.allocate(), Some(cidr("fd00:10:244::/64")));
        assert_eq!(s.allocate(), Some(cidr("fd00:10:244:1::/64")));
        assert!(matches!(CidrSet::new(cidr("fd00::/32"), 64), Err(Error::SubnetTooBig { .. })));
        let mut all = set("::/0", 16);
        assert_eq!(all.allocate(), Some(cidr("::/16")));
        assert_eq!(all.allocate(), Some(cidr("1::/16")));
    }
}
