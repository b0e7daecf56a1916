//! The `kubernetes` EndpointSlice beside the `kubernetes` Endpoints, as kube-apiserver's
//! `EndpointsAdapter` writes it: the Endpoints carry `endpointslice.kubernetes.io/skip-mirror`, so
//! no controller mirrors them, and proxies read slices — without this slice a pod's
//! `KUBERNETES_SERVICE_HOST` leads nowhere. Written only when it differs (a settled cluster writes
//! nothing).

use serde_json::{json, Value};

use crate::storage::{self, Store};

/// The slice Kubernetes derives from the Endpoints: named and labelled after them, the first
/// subset's ports, its ready then not-ready addresses; IPv6 when every address is.
pub fn slice_from_endpoints(ep: &Value) -> Value {
    let name = ep["metadata"]["name"].as_str().unwrap_or("kubernetes");
    let namespace = ep["metadata"]["namespace"].as_str().unwrap_or("default");
    let subset = &ep["subsets"][0];
    let ports: Vec<Value> = subset["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| json!({"name": p["name"].as_str().unwrap_or(""), "port": p["port"], "protocol": p["protocol"].as_str().unwrap_or("TCP")}))
        .collect();
    let addresses = |key: &str, ready: bool| -> Vec<Value> {
        subset[key]
            .as_array()
            .into_iter()
            .flatten()
            .map(|a| {
                let mut e = json!({"addresses": [a["ip"]], "conditions": {"ready": ready}});
                for (from, to) in [("targetRef", "targetRef"), ("nodeName", "nodeName"), ("hostname", "hostname")] {
                    if let Some(v) = a.get(from).filter(|v| !v.is_null()) {
                        e[to] = v.clone();
                    }
                }
                e
            })
            .collect()
    };
    let endpoints: Vec<Value> =
        addresses("addresses", true).into_iter().chain(addresses("notReadyAddresses", false)).collect();
    let all_v6 = !endpoints.is_empty()
        && endpoints
            .iter()
            .all(|e| e["addresses"][0].as_str().is_some_and(|ip| ip.parse::<std::net::Ipv6Addr>().is_ok()));
    json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": name, "namespace": namespace, "labels": {"kubernetes.io/service-name": name}},
        "addressType": if all_v6 { "IPv6" } else { "IPv4" },
        "endpoints": endpoints,
        "ports": ports,
    })
}

/// Creates or updates the slice for `ep` when it differs in endpoints, ports, labels or address
/// type (a new address type: deleted and created again, as Kubernetes does).
pub fn ensure_slice(store: &dyn Store, ep: &Value) -> storage::Result<()> {
    use storage::Error;
    let want = slice_from_endpoints(ep);
    let info = kaji_api::resources::by_kind("EndpointSlice").expect("endpointslices are served");
    let key = info.key(want["metadata"]["namespace"].as_str(), want["metadata"]["name"].as_str().unwrap_or_default());
    let encode = |v: &Value| super::encode_for_store(v).map_err(|e| Error::Backend(format!("{e:?}")));
    for _ in 0..5 {
        let res = match store.get(&key)? {
            None => {
                let mut new = want.clone();
                new["metadata"]["uid"] = uuid::Uuid::new_v4().to_string().into();
                new["metadata"]["creationTimestamp"] = super::meta::timestamp(super::meta::now()).into();
                new["metadata"]["generation"] = 1.into();
                store.create(&key, &encode(&new)?).map(drop)
            }
            Some(kv) => {
                let mut cur: Value = serde_json::from_slice(&kv.value).map_err(|e| Error::Backend(e.to_string()))?;
                let same = |f: &str| cur.get(f) == want.get(f);
                if same("endpoints")
                    && same("ports")
                    && same("addressType")
                    && cur["metadata"]["labels"] == want["metadata"]["labels"]
                {
                    return Ok(());
                }
                if !same("addressType") {
                    store.delete(&key, Some(kv.mod_revision)).map(drop)
                } else {
                    for f in ["endpoints", "ports"] {
                        cur[f] = want[f].clone();
                    }
                    cur["metadata"]["labels"] = want["metadata"]["labels"].clone();
                    let gen = cur["metadata"]["generation"].as_i64().unwrap_or(0) + 1;
                    cur["metadata"]["generation"] = gen.into();
                    store.update(&key, &encode(&cur)?, kv.mod_revision).map(drop)
                }
            }
        };
        match res {
            // Another apiserver wrote it meanwhile (or the type changed): decide again.
            Ok(()) | Err(Error::AlreadyExists(_) | Error::Conflict { .. } | Error::NotFound(_)) => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn endpoints(ips: &[&str], port: u16) -> Value {
        let addrs: Vec<Value> = ips.iter().map(|ip| json!({"ip": ip})).collect();
        json!({"metadata": {"name": "kubernetes", "namespace": "default"},
               "subsets": [{"addresses": addrs, "ports": [{"name": "https", "port": port, "protocol": "TCP"}]}]})
    }

    #[test]
    fn the_slice_is_kubernetes_own_shape_of_the_first_subset() {
        let s = slice_from_endpoints(&endpoints(&["172.30.0.1", "172.30.0.2"], 6443));
        assert_eq!(s["metadata"]["labels"], json!({"kubernetes.io/service-name": "kubernetes"}));
        assert_eq!(s["addressType"], "IPv4");
        assert_eq!(s["ports"], json!([{"name": "https", "port": 6443, "protocol": "TCP"}]));
        assert_eq!(
            s["endpoints"],
            json!([{"addresses": ["172.30.0.1"], "conditions": {"ready": true}},
                   {"addresses": ["172.30.0.2"], "conditions": {"ready": true}}])
        );
        assert_eq!(slice_from_endpoints(&endpoints(&["fd00::1"], 6443))["addressType"], "IPv6");
        assert_eq!(slice_from_endpoints(&json!({"metadata": {"name": "kubernetes"}}))["endpoints"], json!([]));
    }

    #[test]
    fn the_slice_follows_the_endpoints_and_a_settled_one_is_not_written() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = crate::storage::redb::RedbStore::open(dir.path()).expect("open");
        let info = kaji_api::resources::by_kind("EndpointSlice").expect("served");
        let key = info.key(Some("default"), "kubernetes");
        ensure_slice(&store, &endpoints(&["10.0.0.1"], 6443)).expect("create");
        let got = super::super::decode_stored(&store.get(&key).expect("get").expect("created")).expect("decode");
        assert_eq!(got["endpoints"][0]["addresses"], json!(["10.0.0.1"]));
        assert!(got["metadata"]["uid"].is_string());
        let rev = store.current_revision();
        ensure_slice(&store, &endpoints(&["10.0.0.1"], 6443)).expect("again");
        assert_eq!(store.current_revision(), rev, "nothing written when equal");
        ensure_slice(&store, &endpoints(&["10.0.0.1", "10.0.0.2"], 6443)).expect("update");
        let got = super::super::decode_stored(&store.get(&key).expect("get").expect("there")).expect("decode");
        assert_eq!(got["endpoints"].as_array().map(Vec::len), Some(2));
        assert_eq!(got["metadata"]["generation"], 2);
    }
}
