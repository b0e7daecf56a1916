//! Helpers for the high-availability lab (`kaji lab up --ha`): raw HTTPS through the forwarder,
//! who leads etcd, who holds a leader-election Lease. Shared by tests/ha.rs and the failover bench.

use crate::api::Api;
use crate::{Lab, Value};

/// One HTTP/1.1 request (JSON body) through the lab's forwarder, over TLS as the admin;
/// (status, body). 0 = no answer.
pub fn http(api: &Api, method: &str, path: &str, body: &str) -> (u16, String) {
    api.http(method, path, "application/json", body)
}

/// The index (1-based) of the etcd member that leads now, asked inside the lab namespace.
pub fn etcd_leader(lab: &Lab) -> Result<u8, String> {
    let eps = "http://127.0.0.1:2379,http://127.0.0.1:2389,http://127.0.0.1:2399";
    let out = lab.in_lab_netns("etcdctl", &["--endpoints", eps, "endpoint", "status", "-w", "json"]);
    let v: Value = serde_json::from_slice(&out.stdout).map_err(|e| format!("etcdctl: {e}"))?;
    for st in v.as_array().ok_or("not a list")? {
        let member = st.pointer("/Status/header/member_id").and_then(Value::as_u64);
        if member.is_some() && member == st.pointer("/Status/leader").and_then(Value::as_u64) {
            let ep = st.get("Endpoint").and_then(Value::as_str).unwrap_or_default();
            return Ok(match ep {
                e if e.ends_with(":2379") => 1,
                e if e.ends_with(":2389") => 2,
                _ => 3,
            });
        }
    }
    Err("no leader".into())
}

/// Which instance of `prefix` (scheduler / controller-manager) holds `lease`: the one whose log
/// says it acquired the lease under the identity the Lease names now.
pub fn leader_instance(lab: &Lab, prefix: &str, lease: &str) -> Result<(String, String), String> {
    let h = holder(lab, lease);
    if h.is_empty() {
        return Err(format!("{lease} has no holder"));
    }
    (1..=2)
        .map(|i| format!("{prefix}-{i}"))
        .find(|name| {
            let log = std::fs::read_to_string(lab.dir.join(format!("{name}.log"))).unwrap_or_default();
            log.lines().any(|l| l.contains("acquired the lease") && l.contains(&h))
        })
        .map(|name| (name, h.clone()))
        .ok_or_else(|| format!("no {prefix} instance logged acquiring {lease} as {h}"))
}

pub fn holder(lab: &Lab, lease: &str) -> String {
    lab.get_json(&["lease", "-n", "kube-system", lease])["spec"]["holderIdentity"].as_str().unwrap_or("").to_string()
}
