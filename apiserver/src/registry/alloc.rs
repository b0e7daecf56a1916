//! Service ClusterIP and NodePort allocators whose state is in the store, so several apiservers
//! on one etcd never hand out the same value.
//!
//! Each allocated value is one key, created if absent — an atomic claim in every backend:
//! - a ClusterIP is an `IPAddress` object (networking.k8s.io/v1, named by the address, with a
//!   `parentRef` to its Service) at `/registry/ipaddresses.networking.k8s.io/<ip>`, as Kubernetes'
//!   MultiCIDRServiceAllocator (GA in 1.33) keeps them;
//! - a NodePort is `/registry/servicenodeports/<port>` naming its Service.
//!
//! Why keys per value and not Kubernetes' older bitmap `RangeAllocation` object: a bitmap is one
//! hot key that every Service write on every apiserver must compare-and-swap (conflicts and
//! retries under parallel creates), and it cannot say who holds a value; a key per value never
//! conflicts unless two writers want the same value, and carries its owner for the repair.
//!
//! The in-memory range is only a hint of what is taken (which value to try next). `repair`
//! (at start and every few minutes) claims what stored Services hold but has no key (data from
//! before), and frees keys no Service holds once they are older than `LEAK_GRACE` (a claim made
//! just before its Service is written must not be taken for a leak).

use crate::storage::{self, Store};
use serde_json::{json, Value};
use std::collections::{BTreeSet, HashSet};
use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex};

/// A claim no Service holds is freed once it is this old.
pub const LEAK_GRACE: std::time::Duration = std::time::Duration::from_secs(120);

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
    #[error("allocation could not be stored: {0}")]
    Store(String),
}

/// The Service a value is allocated to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    pub namespace: String,
    pub name: String,
}

/// A range of integers with a rolling cursor, so a just-released value is not reused at once.
#[derive(Debug)]
struct Range {
    first: u32,
    last: u32,
    /// What this apiserver knows to be taken (a hint: the store decides).
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

    fn size(&self) -> u64 {
        (self.last - self.first) as u64 + 1
    }

    /// The `i`th value counting from `start` (wrapping).
    fn at(&self, start: u32, i: u64) -> u32 {
        self.first + ((start - self.first) as u64 + i).rem_euclid(self.size()) as u32
    }

    /// From the `*i`th value after `start` on, the first not known to be taken.
    fn next_free(&self, start: u32, i: &mut u64) -> Option<u32> {
        while *i < self.size() {
            let v = self.at(start, *i);
            *i += 1;
            if !self.used.contains(&v) {
                return Some(v);
            }
        }
        None
    }

    fn advance_past(&mut self, v: u32) {
        self.next = if v == self.last { self.first } else { v + 1 };
    }
}

/// How one kind of value is named and recorded in the store.
struct Kind {
    prefix: &'static str,
    render: fn(u32) -> String,
    parse: fn(&str) -> Option<u32>,
    record: fn(u32, &Owner) -> Value,
}

const IPS: Kind = Kind {
    prefix: "/registry/ipaddresses.networking.k8s.io/",
    render: |v| Ipv4Addr::from(v).to_string(),
    parse: |s| s.parse::<Ipv4Addr>().ok().map(u32::from),
    record: |v, o| {
        json!({"apiVersion": "networking.k8s.io/v1", "kind": "IPAddress",
            "metadata": {"name": Ipv4Addr::from(v).to_string(),
                         "labels": {"ipaddress.kubernetes.io/managed-by": "ipallocator.k8s.io"}},
            "spec": {"parentRef": {"group": "", "resource": "services", "namespace": o.namespace, "name": o.name}}})
    },
};

const PORTS: Kind = Kind {
    prefix: "/registry/servicenodeports/",
    render: |v| v.to_string(),
    parse: |s| s.parse().ok(),
    record: |v, o| json!({"port": v, "service": {"namespace": o.namespace, "name": o.name}}),
};

/// Claims of one range, kept in the store.
struct Claims {
    kind: &'static Kind,
    store: Arc<dyn Store>,
    range: Mutex<Range>,
}

fn stamp(mut record: Value) -> Vec<u8> {
    if let Some(m) = record.get_mut("metadata").and_then(Value::as_object_mut) {
        m.insert("uid".into(), uuid::Uuid::new_v4().to_string().into());
        m.insert("creationTimestamp".into(), super::meta::timestamp(super::meta::now()).into());
    } else if let Some(m) = record.as_object_mut() {
        m.insert("claimedAt".into(), super::meta::timestamp(super::meta::now()).into());
    }
    serde_json::to_vec(&record).unwrap_or_default()
}

/// When a claim was made (the IPAddress' creationTimestamp, the port record's claimedAt).
fn claimed_at(record: &Value) -> Option<jiff::Timestamp> {
    record
        .pointer("/metadata/creationTimestamp")
        .or_else(|| record.get("claimedAt"))
        .and_then(Value::as_str)
        .and_then(|s| s.parse().ok())
}

impl Claims {
    fn new(kind: &'static Kind, store: Arc<dyn Store>, first: u32, last: u32) -> Self {
        Self { kind, store, range: Mutex::new(Range::new(first, last)) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Range> {
        self.range.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn key(&self, v: u32) -> String {
        format!("{}{}", self.kind.prefix, (self.kind.render)(v))
    }

    /// Claim `v` in the store: Ok(true) claimed, Ok(false) someone holds it.
    fn claim(&self, v: u32, owner: &Owner) -> Result<bool, AllocError> {
        let r = self.store.create(&self.key(v), &stamp((self.kind.record)(v, owner)));
        let mut range = self.lock();
        match r {
            Ok(_) => {
                range.used.insert(v);
                Ok(true)
            }
            Err(storage::Error::AlreadyExists(_)) => {
                range.used.insert(v);
                Ok(false)
            }
            Err(e) => Err(AllocError::Store(e.to_string())),
        }
    }

    fn allocate_next(&self, owner: &Owner) -> Result<u32, AllocError> {
        for pass in 0..2 {
            let start = self.lock().next;
            let mut i = 0;
            loop {
                let Some(v) = self.lock().next_free(start, &mut i) else { break };
                if self.claim(v, owner)? {
                    self.lock().advance_past(v);
                    return Ok(v);
                }
            }
            // Everything looked taken: others may have freed values; learn from the store.
            if pass == 0 {
                self.reload()?;
            }
        }
        Err(AllocError::Full)
    }

    fn release(&self, v: u32) {
        match self.store.delete(&self.key(v), None) {
            Ok(_) | Err(storage::Error::NotFound(_)) => {}
            Err(e) => tracing::warn!(key = %self.key(v), error = %e, "could not free an allocation; repair will"),
        }
        self.lock().used.remove(&v);
    }

    /// Every stored claim in the range: (value, key, record, mod revision).
    fn stored(&self) -> Result<Vec<(u32, String, Value, u64)>, AllocError> {
        let (items, _) = self.store.list(self.kind.prefix).map_err(|e| AllocError::Store(e.to_string()))?;
        Ok(items
            .into_iter()
            .filter_map(|kv| {
                let v = (self.kind.parse)(kv.key.strip_prefix(self.kind.prefix)?)?;
                let record = serde_json::from_slice(&kv.value).unwrap_or(Value::Null);
                Some((v, kv.key, record, kv.mod_revision))
            })
            .collect())
    }

    fn reload(&self) -> Result<(), AllocError> {
        let stored = self.stored()?;
        let mut range = self.lock();
        range.used = stored.iter().map(|(v, ..)| *v).filter(|v| range.contains(*v)).collect();
        Ok(())
    }

    /// Claim what Services hold without a key; free keys nobody holds that are past the grace.
    /// Writes nothing when the two agree.
    fn repair(&self, held: &[(u32, Owner)], now: jiff::Timestamp) -> Result<(), AllocError> {
        let stored = self.stored()?;
        let have: HashSet<u32> = stored.iter().map(|(v, ..)| *v).collect();
        let wanted: HashSet<u32> = held.iter().map(|(v, _)| *v).collect();
        for (v, owner) in held {
            if !have.contains(v) && self.lock().contains(*v) && !self.claim(*v, owner)? {
                tracing::warn!(value = %(self.kind.render)(*v), "a Service holds a value claimed for another");
            }
        }
        for (v, key, record, rev) in &stored {
            if wanted.contains(v) {
                continue;
            }
            let old = claimed_at(record).is_none_or(|t| now.duration_since(t).unsigned_abs() > LEAK_GRACE);
            if old {
                tracing::info!(key = %key, "freeing an allocation no Service holds");
                match self.store.delete(key, Some(*rev)) {
                    Ok(_) | Err(storage::Error::NotFound(_)) | Err(storage::Error::Conflict { .. }) => {}
                    Err(e) => return Err(AllocError::Store(e.to_string())),
                }
            }
        }
        self.reload()
    }
}

/// The ClusterIP range (`--service-cluster-ip-range`).
pub struct IpAllocator {
    cidr: String,
    claims: Claims,
}

impl IpAllocator {
    pub fn new(cidr: &str, store: Arc<dyn Store>) -> Result<Self, AllocError> {
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
        Ok(Self { cidr: cidr.to_string(), claims: Claims::new(&IPS, store, net + 1, (net | !mask) - 1) })
    }

    /// The first address (the `kubernetes` Service's).
    /// The range addresses come from (`--service-cluster-ip-range`).
    pub fn cidr(&self) -> &str {
        &self.cidr
    }

    pub fn first(&self) -> Ipv4Addr {
        Ipv4Addr::from(self.claims.lock().first)
    }

    pub fn allocate_next(&self, owner: &Owner) -> Result<Ipv4Addr, AllocError> {
        self.claims.allocate_next(owner).map(Ipv4Addr::from)
    }

    pub fn allocate(&self, ip: Ipv4Addr, owner: &Owner) -> Result<(), AllocError> {
        if !self.claims.lock().contains(ip.into()) {
            return Err(AllocError::OutOfRange(self.cidr.clone()));
        }
        if self.claims.claim(ip.into(), owner)? {
            Ok(())
        } else {
            Err(AllocError::Taken)
        }
    }

    pub fn release(&self, ip: Ipv4Addr) {
        self.claims.release(ip.into())
    }

    /// Addresses this apiserver knows to be taken.
    pub fn used(&self) -> usize {
        self.claims.lock().used.len()
    }

    pub fn repair(&self, held: &[(Ipv4Addr, Owner)], now: jiff::Timestamp) -> Result<(), AllocError> {
        let held: Vec<(u32, Owner)> = held.iter().map(|(ip, o)| (u32::from(*ip), o.clone())).collect();
        self.claims.repair(&held, now)
    }
}

/// The NodePort range (`--service-node-port-range`, default 30000-32767).
pub struct PortAllocator {
    claims: Claims,
}

impl PortAllocator {
    pub fn new(first: u16, last: u16, store: Arc<dyn Store>) -> Self {
        Self { claims: Claims::new(&PORTS, store, first.into(), last.into()) }
    }

    pub fn allocate_next(&self, owner: &Owner) -> Result<u16, AllocError> {
        self.claims.allocate_next(owner).map(|p| p as u16)
    }

    pub fn allocate(&self, port: u16, owner: &Owner) -> Result<(), AllocError> {
        let (first, last, inside) = {
            let r = self.claims.lock();
            (r.first, r.last, r.contains(port.into()))
        };
        if !inside {
            return Err(AllocError::PortOutOfRange(format!("{first}-{last}")));
        }
        if self.claims.claim(port.into(), owner)? {
            Ok(())
        } else {
            Err(AllocError::PortTaken)
        }
    }

    pub fn release(&self, port: u16) {
        self.claims.release(port.into())
    }

    pub fn repair(&self, held: &[(u16, Owner)], now: jiff::Timestamp) -> Result<(), AllocError> {
        let held: Vec<(u32, Owner)> = held.iter().map(|(p, o)| (u32::from(*p), o.clone())).collect();
        self.claims.repair(&held, now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::redb::RedbStore;

    fn owner(name: &str) -> Owner {
        Owner { namespace: "default".into(), name: name.into() }
    }

    fn store() -> (tempfile::TempDir, Arc<dyn Store>) {
        let dir = tempfile::tempdir().expect("tempdir");
        let s: Arc<dyn Store> = Arc::new(RedbStore::open(dir.path()).expect("store"));
        (dir, s)
    }

    #[test]
    fn hands_out_each_address_once_and_skips_network_and_broadcast() {
        let (_d, s) = store();
        let a = IpAllocator::new("10.0.0.0/30", s).expect("valid cidr");
        assert_eq!(a.allocate_next(&owner("a")), Ok(Ipv4Addr::new(10, 0, 0, 1)));
        assert_eq!(a.allocate_next(&owner("b")), Ok(Ipv4Addr::new(10, 0, 0, 2)));
        assert_eq!(a.allocate_next(&owner("c")), Err(AllocError::Full));
        a.release(Ipv4Addr::new(10, 0, 0, 1));
        assert_eq!(a.allocate(Ipv4Addr::new(10, 0, 0, 2), &owner("c")), Err(AllocError::Taken));
        assert_eq!(a.allocate_next(&owner("c")), Ok(Ipv4Addr::new(10, 0, 0, 1)));
    }

    #[test]
    fn two_apiservers_on_one_store_never_share_a_value() {
        let (_d, s) = store();
        let a = IpAllocator::new("10.0.0.0/29", s.clone()).expect("cidr");
        let b = IpAllocator::new("10.0.0.0/29", s.clone()).expect("cidr");
        let mut got = BTreeSet::new();
        for i in 0..3 {
            assert!(got.insert(a.allocate_next(&owner(&format!("a{i}"))).expect("a allocates")));
            assert!(got.insert(b.allocate_next(&owner(&format!("b{i}"))).expect("b allocates")));
        }
        assert_eq!(a.allocate_next(&owner("x")), Err(AllocError::Full));
        // b frees one; a, which believed everything taken, finds it in the store.
        let freed = *got.iter().next().expect("one");
        b.release(freed);
        assert_eq!(a.allocate_next(&owner("y")), Ok(freed));
        let p1 = PortAllocator::new(30000, 30001, s.clone());
        let p2 = PortAllocator::new(30000, 30001, s);
        assert_eq!(p1.allocate(30001, &owner("a")), Ok(()));
        assert_eq!(p2.allocate(30001, &owner("b")), Err(AllocError::PortTaken));
        assert_eq!(p2.allocate_next(&owner("b")), Ok(30000));
        assert_eq!(p1.allocate_next(&owner("c")), Err(AllocError::Full));
    }

    #[test]
    fn repair_claims_held_values_and_frees_old_leaks_only() {
        let (_d, s) = store();
        let a = IpAllocator::new("10.0.0.0/24", s.clone()).expect("cidr");
        let leaked = a.allocate_next(&owner("gone")).expect("allocate");
        let held = vec![(Ipv4Addr::new(10, 0, 0, 9), owner("old-service"))];
        let now = super::super::meta::now();
        a.repair(&held, now).expect("repair");
        assert_eq!(a.allocate(Ipv4Addr::new(10, 0, 0, 9), &owner("x")), Err(AllocError::Taken), "held value claimed");
        assert_eq!(a.allocate(leaked, &owner("x")), Err(AllocError::Taken), "a fresh claim is not a leak yet");
        let later = now + jiff::SignedDuration::from_secs(LEAK_GRACE.as_secs() as i64 + 1);
        let rev = s.current_revision();
        a.repair(&held, later).expect("repair");
        assert!(s.current_revision() > rev);
        assert_eq!(a.allocate(leaked, &owner("x")), Ok(()), "an old leak is freed");
        let rev = s.current_revision();
        a.repair(&[(Ipv4Addr::new(10, 0, 0, 9), owner("old-service")), (leaked, owner("x"))], later).expect("repair");
        assert_eq!(s.current_revision(), rev, "nothing to repair writes nothing");
    }

    #[test]
    fn rejects_values_outside_the_range() {
        let (_d, s) = store();
        let a = IpAllocator::new("10.96.0.0/12", s.clone()).expect("valid cidr");
        assert_eq!(a.first(), Ipv4Addr::new(10, 96, 0, 1));
        assert!(matches!(a.allocate(Ipv4Addr::new(10, 112, 0, 1), &owner("a")), Err(AllocError::OutOfRange(_))));
        assert!(a.allocate(Ipv4Addr::new(10, 111, 255, 254), &owner("a")).is_ok());
        assert!(IpAllocator::new("nonsense", s.clone()).is_err());
        let p = PortAllocator::new(30000, 30002, s);
        assert_eq!(p.allocate_next(&owner("a")), Ok(30000));
        p.release(30000);
        assert_eq!(p.allocate_next(&owner("a")), Ok(30001), "a released port is not reused at once");
        assert!(matches!(p.allocate(29999, &owner("a")), Err(AllocError::PortOutOfRange(_))));
    }
}
