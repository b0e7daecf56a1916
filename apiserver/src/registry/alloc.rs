//! Service ClusterIP and NodePort allocators. State is rebuilt from stored Services at start,
//! so nothing is handed out twice across restarts.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::sync::Mutex;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AllocError {
    #[error("provided IP is not in the valid range. The range of valid IPs is {0}")]
    OutOfRange(String),
    #[error("provided IP is already allocated")]
    Taken,
    #[error("range is full")]
    Full,
    #[error("provided port is not in the valid range. The range of valid ports is {0}")]
    PortOutOfRange(String),
    #[error("provided port is already allocated")]
    PortTaken,
    #[error("invalid CIDR {0:?}")]
    BadCidr(String),
}

/// A range of integers with a rolling cursor, so a just-released value is not reused at once.
#[derive(Debug)]
struct Range {
    first: u32,
    last: u32,
    used: BTreeSet<u32>,
    next: u32,
}

impl Range {
    fn new(first: u32, last: u32) -> Self {
        Self { first, last, used: BTreeSet::new(), next: first }
    }

    fn contains(&self, v: u32) -> bool {
        (self.first..=self.last).contains(&v)
    }

    fn allocate(&mut self) -> Option<u32> {
        let size = (self.last - self.first) as u64 + 1;
        for i in 0..size {
            let v = self.first + ((self.next - self.first) as u64 + i).rem_euclid(size) as u32;
            if self.used.insert(v) {
                self.next = if v == self.last { self.first } else { v + 1 };
                return Some(v);
            }
        }
        None
    }
}

/// The ClusterIP range (`--service-cluster-ip-range`).
#[derive(Debug)]
pub struct IpAllocator {
    cidr: String,
    range: Mutex<Range>,
}

impl IpAllocator {
    pub fn new(cidr: &str) -> Result<Self, AllocError> {
        let bad = || AllocError::BadCidr(cidr.to_string());
        let (ip, bits) = cidr.split_once('/').ok_or_else(bad)?;
        let ip: Ipv4Addr = ip.parse().map_err(|_| bad())?;
        let bits: u32 = bits.parse().map_err(|_| bad())?;
        if !(8..=30).contains(&bits) {
            return Err(bad());
        }
        let mask = u32::MAX << (32 - bits);
        let net = u32::from(ip) & mask;
        // Network and broadcast addresses are never handed out.
        Ok(Self { cidr: cidr.to_string(), range: Mutex::new(Range::new(net + 1, (net | !mask) - 1)) })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Range> {
        self.range.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The first address (the `kubernetes` Service's).
    pub fn first(&self) -> Ipv4Addr {
        Ipv4Addr::from(self.lock().first)
    }

    pub fn allocate_next(&self) -> Result<Ipv4Addr, AllocError> {
        self.lock().allocate().map(Ipv4Addr::from).ok_or(AllocError::Full)
    }

    pub fn allocate(&self, ip: Ipv4Addr) -> Result<(), AllocError> {
        let mut r = self.lock();
        if !r.contains(ip.into()) {
            return Err(AllocError::OutOfRange(self.cidr.clone()));
        }
        if r.used.insert(ip.into()) {
            Ok(())
        } else {
            Err(AllocError::Taken)
        }
    }

    pub fn release(&self, ip: Ipv4Addr) {
        self.lock().used.remove(&u32::from(ip));
    }

    pub fn used(&self) -> usize {
        self.lock().used.len()
    }
}

/// The NodePort range (`--service-node-port-range`, default 30000-32767).
#[derive(Debug)]
pub struct PortAllocator {
    range: Mutex<Range>,
}

impl PortAllocator {
    pub fn new(first: u16, last: u16) -> Self {
        Self { range: Mutex::new(Range::new(first.into(), last.into())) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Range> {
        self.range.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn allocate_next(&self) -> Result<u16, AllocError> {
        self.lock().allocate().map(|p| p as u16).ok_or(AllocError::Full)
    }

    pub fn allocate(&self, port: u16) -> Result<(), AllocError> {
        let mut r = self.lock();
        if !r.contains(port.into()) {
            return Err(AllocError::PortOutOfRange(format!("{}-{}", r.first, r.last)));
        }
        if r.used.insert(port.into()) {
            Ok(())
        } else {
            Err(AllocError::PortTaken)
        }
    }

    pub fn release(&self, port: u16) {
        self.lock().used.remove(&u32::from(port));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hands_out_each_address_once_and_skips_network_and_broadcast() {
        let a = IpAllocator::new("10.0.0.0/30").expect("valid cidr");
        assert_eq!(a.allocate_next(), Ok(Ipv4Addr::new(10, 0, 0, 1)));
        assert_eq!(a.allocate_next(), Ok(Ipv4Addr::new(10, 0, 0, 2)));
        assert_eq!(a.allocate_next(), Err(AllocError::Full));
        a.release(Ipv4Addr::new(10, 0, 0, 1));
        assert_eq!(a.allocate(Ipv4Addr::new(10, 0, 0, 2)), Err(AllocError::Taken));
        assert_eq!(a.allocate_next(), Ok(Ipv4Addr::new(10, 0, 0, 1)));
    }

    #[test]
    fn rejects_addresses_outside_the_range() {
        let a = IpAllocator::new("10.96.0.0/12").expect("valid cidr");
        assert_eq!(a.first(), Ipv4Addr::new(10, 96, 0, 1));
        assert!(matches!(a.allocate(Ipv4Addr::new(10, 112, 0, 1)), Err(AllocError::OutOfRange(_))));
        assert!(a.allocate(Ipv4Addr::new(10, 111, 255, 254)).is_ok());
        assert!(IpAllocator::new("nonsense").is_err());
    }

    #[test]
    fn released_ports_are_not_reused_immediately() {
        let p = PortAllocator::new(30000, 30002);
        assert_eq!(p.allocate_next(), Ok(30000));
        p.release(30000);
        assert_eq!(p.allocate_next(), Ok(30001));
        assert_eq!(p.allocate(30001), Err(AllocError::PortTaken));
        assert!(matches!(p.allocate(29999), Err(AllocError::PortOutOfRange(_))));
    }
}
