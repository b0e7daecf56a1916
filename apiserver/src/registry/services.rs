//! Service rules: ClusterIP and NodePort allocation, kept across updates and released on delete.

use super::alloc::{AllocError, Owner};
use super::meta;
use super::{encode_for_store, Registry};
use crate::http::errors::{ApiError, ApiResult};
use kaji_api::validation::Cause;
use serde_json::{json, Value};
use std::net::{Ipv4Addr, SocketAddr};

/// What one write allocated (to release if the write fails) and freed (to release once it lands).
#[derive(Debug, Default)]
pub struct Allocation {
    ips: Vec<Ipv4Addr>,
    ports: Vec<u16>,
    freed_ips: Vec<Ipv4Addr>,
    freed_ports: Vec<u16>,
}

impl Allocation {
    /// The write failed or was a dry run: give back what it took.
    pub fn release(self, reg: &Registry) {
        self.ips.iter().for_each(|ip| reg.ips.release(*ip));
        self.ports.iter().for_each(|p| reg.ports.release(*p));
    }

    /// The write landed: give back what the old object held and the new one no longer does.
    pub fn commit(self, reg: &Registry) {
        self.freed_ips.iter().for_each(|ip| reg.ips.release(*ip));
        self.freed_ports.iter().for_each(|p| reg.ports.release(*p));
    }
}

fn svc_type(svc: &Value) -> &str {
    svc.pointer("/spec/type").and_then(Value::as_str).unwrap_or("ClusterIP")
}

fn cluster_ip(svc: &Value) -> Option<Ipv4Addr> {
    svc.pointer("/spec/clusterIP").and_then(Value::as_str).and_then(|s| s.parse().ok())
}

fn node_ports(svc: &Value) -> Vec<u16> {
    svc.pointer("/spec/ports")
        .and_then(Value::as_array)
        .map(|ps| {
            ps.iter()
                .filter_map(|p| p.get("nodePort").and_then(Value::as_u64))
                .filter(|p| *p > 0)
                .map(|p| p as u16)
                .collect()
        })
        .unwrap_or_default()
}

fn owner(svc: &Value) -> Owner {
    Owner {
        namespace: meta::meta_str(svc, "namespace").unwrap_or("default").to_string(),
        name: meta::name(svc).to_string(),
    }
}

fn wants_node_ports(svc: &Value) -> bool {
    matches!(svc_type(svc), "NodePort" | "LoadBalancer")
}

fn invalid(svc: &Value, field: &str, value: impl std::fmt::Display, err: AllocError) -> ApiError {
    let cause = Cause {
        reason: "FieldValueInvalid".into(),
        message: format!("Invalid value: {value}: {err}"),
        field: field.into(),
    };
    ApiError::invalid("", "Service", meta::name(svc), &[cause])
}

/// Allocate what `svc` needs that `old` (on update) did not already hold.
pub fn allocate(reg: &Registry, svc: &mut Value, old: Option<&Value>) -> ApiResult<Allocation> {
    let mut a = Allocation::default();
    let result = allocate_into(reg, svc, old, &mut a);
    match result {
        Ok(()) => Ok(a),
        Err(e) => {
            a.release(reg);
            Err(e)
        }
    }
}

fn allocate_into(reg: &Registry, svc: &mut Value, old: Option<&Value>, a: &mut Allocation) -> ApiResult<()> {
    let old_ip = old.and_then(cluster_ip);
    let owner = owner(svc);
    if svc_type(svc) == "ExternalName" {
        if let Some(o) = svc.get_mut("spec").and_then(Value::as_object_mut) {
            o.remove("clusterIP");
            o.remove("clusterIPs");
        }
    } else {
        let requested = svc.pointer("/spec/clusterIP").and_then(Value::as_str).unwrap_or("").to_string();
        let ip = match requested.as_str() {
            "None" => None,
            "" => {
                let ip = reg.ips.allocate_next(&owner).map_err(|e| invalid(svc, "spec.clusterIPs", "\"\"", e))?;
                a.ips.push(ip);
                Some(ip)
            }
            s => {
                let ip: Ipv4Addr = s.parse().map_err(|_| {
                    let cause = Cause {
                        reason: "FieldValueInvalid".into(),
                        message: format!(
                            "Invalid value: \"{s}\": must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)"
                        ),
                        field: "spec.clusterIPs[0]".into(),
                    };
                    ApiError::invalid("", "Service", meta::name(svc), &[cause])
                })?;
                if old_ip != Some(ip) {
                    reg.ips
                        .allocate(ip, &owner)
                        .map_err(|e| invalid(svc, "spec.clusterIPs[0]", format!("\"{s}\""), e))?;
                    a.ips.push(ip);
                }
                Some(ip)
            }
        };
        let spec = &mut svc["spec"];
        match ip {
            Some(ip) => {
                spec["clusterIP"] = ip.to_string().into();
                spec["clusterIPs"] = json!([ip.to_string()]);
            }
            None => {
                spec["clusterIP"] = "None".into();
                spec["clusterIPs"] = json!(["None"]);
            }
        }
    }
    if let Some(oip) = old_ip {
        if cluster_ip(svc) != Some(oip) {
            a.freed_ips.push(oip);
        }
    }
    let old_ports = old.map(node_ports).unwrap_or_default();
    let wants = wants_node_ports(svc);
    let name = meta::name(svc).to_string();
    if let Some(ports) = svc.pointer_mut("/spec/ports").and_then(Value::as_array_mut) {
        for (i, p) in ports.iter_mut().enumerate() {
            let field = format!("spec.ports[{i}].nodePort");
            let cur = p.get("nodePort").and_then(Value::as_u64).unwrap_or(0);
            if !wants {
                if let Some(o) = p.as_object_mut() {
                    o.remove("nodePort");
                }
                continue;
            }
            if cur == 0 {
                let np = reg.ports.allocate_next(&owner).map_err(|e| {
                    let cause = Cause {
                        reason: "FieldValueInvalid".into(),
                        message: format!("Invalid value: 0: {e}"),
                        field: field.clone(),
                    };
                    ApiError::invalid("", "Service", &name, &[cause])
                })?;
                a.ports.push(np);
                p["nodePort"] = np.into();
            } else if !old_ports.contains(&(cur as u16)) {
                let port = u16::try_from(cur).unwrap_or(0);
                reg.ports.allocate(port, &owner).map_err(|e| {
                    let cause = Cause {
                        reason: "FieldValueInvalid".into(),
                        message: format!("Invalid value: {cur}: {e}"),
                        field: field.clone(),
                    };
                    ApiError::invalid("", "Service", &name, &[cause])
                })?;
                a.ports.push(port);
            }
        }
    }
    let now_ports = node_ports(svc);
    a.freed_ports.extend(old_ports.into_iter().filter(|p| !now_ports.contains(p)));
    Ok(())
}

/// Kubernetes' patchAllocatedValues: an update that leaves clusterIP or nodePort unset keeps the old ones.
pub fn keep_allocated(new: &mut Value, old: &Value) {
    if svc_type(new) != "ExternalName" {
        let unset = new.pointer("/spec/clusterIP").and_then(Value::as_str).is_none_or(str::is_empty);
        if unset {
            if let Some(ip) = old.pointer("/spec/clusterIP").cloned() {
                new["spec"]["clusterIP"] = ip;
                if let Some(ips) = old.pointer("/spec/clusterIPs").cloned() {
                    new["spec"]["clusterIPs"] = ips;
                }
            }
        }
    }
    if !wants_node_ports(new) {
        return;
    }
    let old_ports = old.pointer("/spec/ports").and_then(Value::as_array).cloned().unwrap_or_default();
    if let Some(ports) = new.pointer_mut("/spec/ports").and_then(Value::as_array_mut) {
        for p in ports.iter_mut() {
            if p.get("nodePort").and_then(Value::as_u64).unwrap_or(0) != 0 {
                continue;
            }
            let same = old_ports.iter().find(|o| {
                o.get("port") == p.get("port")
                    && o.get("protocol").or(Some(&json!("TCP"))) == p.get("protocol").or(Some(&json!("TCP")))
            });
            if let Some(np) = same.and_then(|o| o.get("nodePort")).cloned() {
                p["nodePort"] = np;
            }
        }
    }
}

/// A Service was deleted: free its address and ports.
pub fn release(reg: &Registry, svc: &Value) {
    if let Some(ip) = cluster_ip(svc) {
        reg.ips.release(ip);
    }
    node_ports(svc).into_iter().for_each(|p| reg.ports.release(p));
}

/// Make the allocators' stored claims agree with what stored Services hold (see `alloc`): at
/// start and then every few minutes on every apiserver. Writes only where they disagree.
pub fn repair_allocators(reg: &Registry) -> ApiResult<()> {
    let info = kaji_api::resources::by_kind("Service").expect("services are served");
    let (items, _) = reg.store.list(&info.key_prefix()).map_err(ApiError::internal)?;
    let (mut ips, mut ports) = (Vec::new(), Vec::new());
    for kv in items {
        let svc: Value = serde_json::from_slice(&kv.value).map_err(ApiError::internal)?;
        let o = owner(&svc);
        if let Some(ip) = cluster_ip(&svc) {
            ips.push((ip, o.clone()));
        }
        ports.extend(node_ports(&svc).into_iter().map(|p| (p, o.clone())));
    }
    let now = meta::now();
    reg.ips.repair(&ips, now).map_err(ApiError::internal)?;
    reg.ports.repair(&ports, now).map_err(ApiError::internal)
}

/// The `kubernetes` Service and its Endpoints in `default`, pointing at this apiserver.
/// The default ServiceCIDR `kubernetes`: the range Service IPs come from, Ready, as the
/// apiserver's default-servicecidr controller keeps it (written once; what exists is left).
pub fn bootstrap_service_cidr(reg: &Registry) -> ApiResult<()> {
    let info = kaji_api::resources::by_kind("ServiceCIDR").expect("service CIDRs are served");
    let key = info.key(None, "kubernetes");
    if reg.store.get(&key).map_err(ApiError::internal)?.is_some() {
        return Ok(());
    }
    let now = meta::timestamp(meta::now());
    let mut obj = json!({"apiVersion": "networking.k8s.io/v1", "kind": "ServiceCIDR",
        "metadata": {"name": "kubernetes", "uid": uuid::Uuid::new_v4().to_string(), "creationTimestamp": now},
        "spec": {"cidrs": [reg.ips.cidr()]},
        "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "", "message": "Kubernetes default Service CIDR is ready",
            "lastTransitionTime": now}]}});
    kaji_api::defaults::apply_defaults("ServiceCIDR", &mut obj);
    match reg.store.create(&key, &encode_for_store(&obj)?) {
        Ok(_) | Err(crate::storage::Error::AlreadyExists(_)) => Ok(()),
        Err(e) => Err(ApiError::internal(e)),
    }
}

pub fn bootstrap_kubernetes(reg: &Registry, advertise: SocketAddr, endpoint_leases: bool) -> ApiResult<()> {
    let svc_info = kaji_api::resources::by_kind("Service").expect("services are served");
    let ep_info = kaji_api::resources::by_kind("Endpoints").expect("endpoints are served");
    let labels = json!({"component": "apiserver", "provider": "kubernetes"});
    let stamp = |mut v: Value| {
        let m = meta::meta_mut(&mut v);
        m.insert("uid".into(), uuid::Uuid::new_v4().to_string().into());
        m.insert("creationTimestamp".into(), meta::timestamp(meta::now()).into());
        v
    };
    if reg.store.get(&svc_info.key(Some("default"), "kubernetes")).map_err(ApiError::internal)?.is_none() {
        let ip = reg.ips.first();
        let owner = Owner { namespace: "default".into(), name: "kubernetes".into() };
        if let Err(e) = reg.ips.allocate(ip, &owner) {
            tracing::warn!(ip = %ip, error = %e, "first service IP already taken");
        }
        let mut svc = stamp(json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "kubernetes", "namespace": "default", "labels": labels, "generation": 1},
            "spec": {"clusterIP": ip.to_string(), "clusterIPs": [ip.to_string()], "type": "ClusterIP",
                     "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": advertise.port()}]},
            "status": {"loadBalancer": {}}}));
        kaji_api::defaults::apply_defaults("Service", &mut svc);
        match reg.store.create(&svc_info.key(Some("default"), "kubernetes"), &encode_for_store(&svc)?) {
            Ok(_) | Err(crate::storage::Error::AlreadyExists(_)) => {}
            Err(e) => return Err(ApiError::internal(e)),
        }
    }
    let ep_key = ep_info.key(Some("default"), "kubernetes");
    let ep = stamp(json!({"apiVersion": "v1", "kind": "Endpoints",
        "metadata": {"name": "kubernetes", "namespace": "default", "labels": {"endpointslice.kubernetes.io/skip-mirror": "true"}},
        "subsets": [{"addresses": [{"ip": advertise.ip().to_string()}],
                     "ports": [{"name": "https", "port": advertise.port(), "protocol": "TCP"}]}]}));
    ensure_endpoints(reg.store.as_ref(), &ep_key, &ep, endpoint_leases).map_err(ApiError::internal)?;
    // The slice proxies read, from what the Endpoints hold now (another apiserver's, with leases).
    if let Some(kv) = reg.store.get(&ep_key).map_err(ApiError::internal)? {
        let cur: Value = serde_json::from_slice(&kv.value).map_err(ApiError::internal)?;
        super::endpoints_adapter::ensure_slice(reg.store.as_ref(), &cur).map_err(ApiError::internal)?;
    }
    Ok(())
}

/// Create the `kubernetes` Endpoints as `ep`, or (without `endpoint_leases`) set their subsets
/// to `ep`'s. Apiservers sharing a store bootstrap at the same moment: a write that lost the race
/// (already there, conflict) reads the object again and decides anew, as Kubernetes' bootstrap
/// controller does — losing it must never stop an apiserver.
pub fn ensure_endpoints(
    store: &dyn crate::storage::Store,
    key: &str,
    ep: &Value,
    endpoint_leases: bool,
) -> crate::storage::Result<()> {
    use crate::storage::Error;
    let encode = |v: &Value| encode_for_store(v).map_err(|e| Error::Backend(format!("{e:?}")));
    let mut tries = 0;
    loop {
        tries += 1;
        let res = match store.get(key)? {
            None => store.create(key, &encode(ep)?).map(drop),
            // Other apiservers are in them too: the lease reconciler keeps them.
            Some(_) if endpoint_leases => return Ok(()),
            Some(kv) => {
                let mut cur: Value = serde_json::from_slice(&kv.value).map_err(|e| Error::Backend(e.to_string()))?;
                if cur.get("subsets") == ep.get("subsets") {
                    return Ok(());
                }
                cur["subsets"] = ep["subsets"].clone();
                store.update(key, &encode(&cur)?, kv.mod_revision).map(drop)
            }
        };
        match res {
            Err(Error::AlreadyExists(_) | Error::Conflict { .. } | Error::NotFound(_)) if tries < 10 => continue,
            other => return other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::{redb::RedbStore, KeyValue, Result, Store, StoreSize, WatchStream};

    /// A store whose first read of a missing key comes just before another apiserver creates it.
    struct RacedStore {
        inner: RedbStore,
        other: Value,
        raced: std::sync::atomic::AtomicBool,
    }

    impl Store for RacedStore {
        fn current_revision(&self) -> u64 {
            self.inner.current_revision()
        }
        fn get(&self, key: &str) -> Result<Option<KeyValue>> {
            let got = self.inner.get(key)?;
            if got.is_none() && !self.raced.swap(true, std::sync::atomic::Ordering::SeqCst) {
                self.inner.create(key, &encode_for_store(&self.other).expect("encode"))?;
            }
            Ok(got)
        }
        fn list(&self, prefix: &str) -> Result<(Vec<KeyValue>, u64)> {
            self.inner.list(prefix)
        }
        fn create(&self, key: &str, value: &[u8]) -> Result<u64> {
            self.inner.create(key, value)
        }
        fn update(&self, key: &str, value: &[u8], expected: u64) -> Result<u64> {
            self.inner.update(key, value, expected)
        }
        fn delete(&self, key: &str, expected: Option<u64>) -> Result<(u64, KeyValue)> {
            self.inner.delete(key, expected)
        }
        fn watch(&self, prefix: &str, after: u64) -> Result<WatchStream> {
            self.inner.watch(prefix, after)
        }
        fn compact(&self, revision: u64) -> Result<()> {
            self.inner.compact(revision)
        }
        fn compacted_revision(&self) -> u64 {
            self.inner.compacted_revision()
        }
        fn size(&self) -> Option<StoreSize> {
            None
        }
    }

    fn endpoints(port: u16) -> Value {
        json!({"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": "kubernetes", "namespace": "default"},
               "subsets": [{"addresses": [{"ip": "10.0.0.1"}], "ports": [{"name": "https", "port": port}]}]})
    }

    fn stored(store: &dyn Store, key: &str) -> Value {
        serde_json::from_slice(&store.get(key).expect("get").expect("there").value).expect("json")
    }

    #[test]
    fn an_apiserver_that_loses_the_bootstrap_race_carries_on() {
        let key = "/registry/services/endpoints/default/kubernetes";
        for leases in [true, false] {
            let dir = tempfile::tempdir().expect("tempdir");
            let store = RacedStore {
                inner: RedbStore::open(dir.path()).expect("open"),
                other: endpoints(6443),
                raced: false.into(),
            };
            ensure_endpoints(&store, key, &endpoints(7443), leases).expect("losing the race is no error");
            let ep = stored(&store.inner, key);
            // With leases the winner's object stays (the lease reconciler merges); without,
            // the single apiserver's own address replaces it.
            let want = if leases { 6443 } else { 7443 };
            assert_eq!(ep["subsets"][0]["ports"][0]["port"], want, "leases: {leases}");
        }
    }
}
