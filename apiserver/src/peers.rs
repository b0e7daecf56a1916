//! `--endpoint-reconciler-type=lease`: the `kubernetes` Service's Endpoints list every live
//! apiserver, as Kubernetes' lease endpoint reconciler keeps them.
//!
//! Each apiserver holds a Lease in `kube-system` named by its identity (`kube-apiserver-<hash of
//! its advertised address>`, stable across restarts; labelled
//! `apiserver.kubernetes.io/identity=kube-apiserver` like Kubernetes' identity leases) with its
//! address in an annotation, renews it every `RENEW`, and then sets the Endpoints to the
//! addresses of the leases not yet expired — writing only when they change. On SIGTERM it
//! deletes its lease and takes itself out at once; a crashed apiserver drops out when its lease
//! expires (`LEASE_SECONDS`, Kubernetes' `--endpoint-reconciler` TTL of 15 s).

use crate::registry::{encode_for_store, meta};
use crate::storage::{self, Store};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

pub const LEASE_SECONDS: i64 = 15;
pub const RENEW: Duration = Duration::from_secs(5);
const IDENTITY_LABEL: &str = "apiserver.kubernetes.io/identity";
const ADDRESS_ANNOTATION: &str = "kaji.io/advertise-address";

/// `kube-apiserver-<FNV-1a 64 of the address>`: the same apiserver gets the same lease back.
pub fn identity(advertise: SocketAddr) -> String {
    let mut h: u64 = 0xcbf29ce484222325;
    for b in advertise.to_string().bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x100000001b3);
    }
    format!("kube-apiserver-{h:016x}")
}

fn micro_time(t: jiff::Timestamp) -> String {
    let micros = t.as_microsecond();
    jiff::Timestamp::from_microsecond(micros).unwrap_or(t).strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
}

/// The advertised address of every lease in `leases` that is still live at `now`.
pub fn live_addresses(leases: &[Value], now: jiff::Timestamp) -> Vec<SocketAddr> {
    let mut out: Vec<SocketAddr> = leases
        .iter()
        .filter(|l| {
            l.pointer(&format!("/metadata/labels/{}", IDENTITY_LABEL.replace('/', "~1"))).and_then(Value::as_str)
                == Some("kube-apiserver")
        })
        .filter(|l| {
            let renew =
                l.pointer("/spec/renewTime").and_then(Value::as_str).and_then(|s| s.parse::<jiff::Timestamp>().ok());
            let secs = l.pointer("/spec/leaseDurationSeconds").and_then(Value::as_i64).unwrap_or(LEASE_SECONDS);
            renew.is_some_and(|r| r + jiff::SignedDuration::from_secs(secs) > now)
        })
        .filter_map(|l| {
            l.pointer(&format!("/metadata/annotations/{}", ADDRESS_ANNOTATION.replace('/', "~1")))
                .and_then(Value::as_str)
                .and_then(|a| a.parse().ok())
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

/// Endpoints subsets for `addrs`: one subset per port (apiservers may listen on different ones).
pub fn subsets(addrs: &[SocketAddr]) -> Value {
    let mut by_port: BTreeMap<u16, Vec<String>> = BTreeMap::new();
    for a in addrs {
        by_port.entry(a.port()).or_default().push(a.ip().to_string());
    }
    Value::Array(
        by_port
            .into_iter()
            .map(|(port, ips)| {
                let addresses: Vec<Value> = ips.into_iter().map(|ip| json!({"ip": ip})).collect();
                json!({"addresses": addresses, "ports": [{"name": "https", "port": port, "protocol": "TCP"}]})
            })
            .collect(),
    )
}

pub struct Reconciler {
    pub advertise: SocketAddr,
    pub id: String,
}

fn lease_key(id: &str) -> String {
    kaji_api::resources::by_kind("Lease").expect("leases are served").key(Some("kube-system"), id)
}

impl Reconciler {
    pub fn new(advertise: SocketAddr) -> Self {
        Self { advertise, id: identity(advertise) }
    }

    fn lease(&self, now: jiff::Timestamp, old: Option<&Value>) -> Value {
        let mut l = old.cloned().unwrap_or_else(|| {
            let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
            json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": self.id, "namespace": "kube-system",
                             "uid": uuid::Uuid::new_v4().to_string(),
                             "creationTimestamp": meta::timestamp(now),
                             "labels": {IDENTITY_LABEL: "kube-apiserver", "kubernetes.io/hostname": host.trim()}},
                "spec": {"holderIdentity": self.id, "acquireTime": micro_time(now)}})
        });
        l["metadata"]["annotations"] = json!({ADDRESS_ANNOTATION: self.advertise.to_string()});
        l["spec"]["leaseDurationSeconds"] = LEASE_SECONDS.into();
        l["spec"]["renewTime"] = micro_time(now).into();
        l
    }

    /// Renew (or take) this apiserver's lease.
    pub fn renew(&self, store: &dyn Store) -> storage::Result<()> {
        let key = lease_key(&self.id);
        let now = meta::now();
        match store.get(&key)? {
            Some(kv) => {
                let old: Value = serde_json::from_slice(&kv.value).unwrap_or(Value::Null);
                let old = old.is_object().then_some(old);
                store.update(&key, &encode(&self.lease(now, old.as_ref()))?, kv.mod_revision)?;
            }
            None => {
                store.create(&key, &encode(&self.lease(now, None))?)?;
            }
        }
        Ok(())
    }

    /// Set the `kubernetes` Endpoints to the live apiservers (`without_self` on shutdown).
    ///
    /// As Kubernetes' lease reconciler: read the Endpoints first, then the leases, and write
    /// with the Endpoints' revision. A write from a view of the leases older than another
    /// apiserver's then conflicts instead of undoing it, and a retry reads both again.
    pub fn reconcile(&self, store: &dyn Store, without_self: bool) -> storage::Result<()> {
        let ep_key =
            kaji_api::resources::by_kind("Endpoints").expect("endpoints are served").key(Some("default"), "kubernetes");
        let info = kaji_api::resources::by_kind("Lease").expect("leases are served");
        for _ in 0..5 {
            let Some(kv) = store.get(&ep_key)? else { return Ok(()) };
            let mut cur: Value = serde_json::from_slice(&kv.value).unwrap_or(Value::Null);
            if !cur.is_object() {
                return Ok(());
            }
            let (items, _) = store.list(&info.namespace_prefix(Some("kube-system")))?;
            let leases: Vec<Value> = items.iter().filter_map(|kv| serde_json::from_slice(&kv.value).ok()).collect();
            let mut addrs = live_addresses(&leases, meta::now());
            if without_self {
                addrs.retain(|a| *a != self.advertise);
            } else if !addrs.contains(&self.advertise) {
                addrs.push(self.advertise);
                addrs.sort();
            }
            let want = subsets(&addrs);
            if cur.get("subsets") == Some(&want) {
                return crate::registry::endpoints_adapter::ensure_slice(store, &cur);
            }
            cur["subsets"] = want;
            match store.update(&ep_key, &encode(&cur)?, kv.mod_revision) {
                Ok(_) => return crate::registry::endpoints_adapter::ensure_slice(store, &cur),
                // Another apiserver wrote them meanwhile: read both again.
                Err(storage::Error::Conflict { .. } | storage::Error::NotFound(_)) => continue,
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Shutdown: give the lease up and leave the Endpoints.
    pub fn leave(&self, store: &dyn Store) {
        if let Err(e) = store.delete(&lease_key(&self.id), None) {
            tracing::debug!(error = %e, "apiserver lease already gone");
        }
        if let Err(e) = self.reconcile(store, true) {
            tracing::warn!(error = %e, "could not take this apiserver out of the kubernetes Endpoints");
        }
    }
}

fn encode(v: &Value) -> storage::Result<Vec<u8>> {
    encode_for_store(v).map_err(|e| storage::Error::Backend(format!("{e:?}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(addr: &str, renewed: jiff::Timestamp) -> Value {
        json!({"metadata": {"labels": {IDENTITY_LABEL: "kube-apiserver"}, "annotations": {ADDRESS_ANNOTATION: addr}},
               "spec": {"renewTime": micro_time(renewed), "leaseDurationSeconds": LEASE_SECONDS}})
    }

    #[test]
    fn only_live_apiserver_leases_count() {
        let now = jiff::Timestamp::from_second(1_700_000_000).expect("time");
        let ago = |s| now - jiff::SignedDuration::from_secs(s);
        let mut other = lease("10.0.0.9:6443", now);
        other["metadata"]["labels"] = json!({"component": "kube-scheduler"});
        let leases =
            [lease("10.0.0.2:6443", ago(1)), lease("10.0.0.1:6443", ago(14)), lease("10.0.0.3:6443", ago(16)), other];
        let live = live_addresses(&leases, now);
        assert_eq!(
            live,
            ["10.0.0.1:6443".parse::<SocketAddr>().expect("addr"), "10.0.0.2:6443".parse().expect("addr")]
        );
    }

    #[test]
    fn one_subset_per_port() {
        let addrs: Vec<SocketAddr> =
            ["10.0.0.1:6443", "10.0.0.2:6443", "10.0.0.1:7443"].iter().map(|a| a.parse().expect("addr")).collect();
        let s = subsets(&addrs);
        assert_eq!(s[0]["addresses"], json!([{"ip": "10.0.0.1"}, {"ip": "10.0.0.2"}]));
        assert_eq!(s[1]["ports"][0]["port"], 7443);
        assert_eq!(identity(addrs[0]), identity("10.0.0.1:6443".parse().expect("addr")), "stable");
        assert_ne!(identity(addrs[0]), identity(addrs[1]));
        assert_eq!(micro_time(jiff::Timestamp::from_second(0).expect("t")), "1970-01-01T00:00:00.000000Z");
    }

    fn endpoints_ports(store: &dyn Store) -> Vec<u64> {
        let key =
            kaji_api::resources::by_kind("Endpoints").expect("endpoints are served").key(Some("default"), "kubernetes");
        let ep: Value = serde_json::from_slice(&store.get(&key).expect("get").expect("there").value).expect("json");
        ep["subsets"].as_array().expect("subsets").iter().filter_map(|s| s["ports"][0]["port"].as_u64()).collect()
    }

    #[test]
    fn apiservers_on_one_store_list_each_other_and_leave_on_shutdown() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = crate::storage::redb::RedbStore::open(dir.path()).expect("open");
        let key =
            kaji_api::resources::by_kind("Endpoints").expect("endpoints are served").key(Some("default"), "kubernetes");
        let first = json!({"metadata": {"name": "kubernetes", "namespace": "default"},
                           "subsets": subsets(&["172.30.0.1:7001".parse().expect("addr")])});
        store.create(&key, &encode(&first).expect("encode")).expect("create");
        let recs: Vec<Reconciler> =
            (7001..=7003).map(|p| Reconciler::new(format!("172.30.0.1:{p}").parse().expect("addr"))).collect();
        // Each renews its lease and reconciles from its own view, in start order and again:
        // the last writer of the first round saw every lease; the second round changes nothing.
        for r in &recs {
            r.renew(&store).expect("renew");
            r.reconcile(&store, false).expect("reconcile");
        }
        assert_eq!(endpoints_ports(&store), [7001, 7002, 7003]);
        let rev = store.current_revision();
        for r in &recs {
            r.reconcile(&store, false).expect("reconcile");
        }
        assert_eq!(store.current_revision(), rev, "a settled reconcile writes nothing");
        recs[1].leave(&store);
        assert_eq!(endpoints_ports(&store), [7001, 7003]);
        // The first one's next round does not bring the gone one back.
        recs[0].renew(&store).expect("renew");
        recs[0].reconcile(&store, false).expect("reconcile");
        assert_eq!(endpoints_ports(&store), [7001, 7003]);
    }
}
