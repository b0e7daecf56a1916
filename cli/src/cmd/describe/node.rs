//! `describe node`: roles, taints, conditions, addresses, capacity, system info and the pods
//! running on it.

use super::common::{metadata_rest, s, time};
use super::writer::Out;
use serde_json::Value;

pub fn describe(out: &mut Out, node: &Value, pods: &[Value]) {
    let (labels, spec, st) = (&node["metadata"]["labels"], &node["spec"], &node["status"]);
    let roles: Vec<&str> = labels
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(k, _)| k.strip_prefix("node-role.kubernetes.io/"))
        .collect();
    out.kv(0, "Name", s(&node["metadata"]["name"]));
    out.kv(0, "Roles", roles.join(","));
    metadata_rest(out, node);
    let taints: Vec<String> = spec["taints"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| match t["value"].as_str() {
            Some(v) => format!("{}={v}:{}", s(&t["key"]), s(&t["effect"])),
            None => format!("{}:{}", s(&t["key"]), s(&t["effect"])),
        })
        .collect();
    out.kv_list(0, "Taints", &taints);
    out.kv(0, "Unschedulable", if spec["unschedulable"] == true { "true" } else { "false" });
    let conds: Vec<Vec<String>> = st["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            let cells =
                [s(&c["type"]), s(&c["status"]), time(&c["lastHeartbeatTime"]), s(&c["reason"]), s(&c["message"])];
            cells.to_vec()
        })
        .collect();
    out.table(0, "Conditions", &["Type", "Status", "LastHeartbeatTime", "Reason", "Message"], &conds);
    section(
        out,
        "Addresses",
        st["addresses"].as_array().into_iter().flatten().map(|a| (s(&a["type"]), s(&a["address"]))),
    );
    for (title, key) in [("Capacity", "capacity"), ("Allocatable", "allocatable")] {
        section(out, title, st[key].as_object().into_iter().flatten().map(|(k, v)| (k.clone(), s(v))));
    }
    let info = &st["nodeInfo"];
    let fields = [
        ("Machine ID", "machineID"),
        ("Boot ID", "bootID"),
        ("Kernel Version", "kernelVersion"),
        ("OS Image", "osImage"),
        ("Operating System", "operatingSystem"),
        ("Architecture", "architecture"),
        ("Container Runtime Version", "containerRuntimeVersion"),
        ("Kubelet Version", "kubeletVersion"),
    ];
    section(
        out,
        "System Info",
        fields.iter().filter(|(_, k)| !info[*k].is_null()).map(|(l, k)| (l.to_string(), s(&info[*k]))),
    );
    out.kv(0, "PodCIDR", s(&spec["podCIDR"]));
    let rows: Vec<Vec<String>> =
        pods.iter().map(|p| vec![s(&p["metadata"]["namespace"]), s(&p["metadata"]["name"])]).collect();
    out.table(0, &format!("Non-terminated Pods ({} in total)", rows.len()), &["Namespace", "Name"], &rows);
}

/// `Title:` and `  key:  value` lines (`Title:  <none>` when there are none).
fn section(out: &mut Out, title: &str, entries: impl Iterator<Item = (String, String)>) {
    let entries: Vec<(String, String)> = entries.collect();
    if entries.is_empty() {
        out.kv(0, title, "");
        return;
    }
    out.header(0, &format!("{title}:"));
    for (k, v) in entries {
        out.kv(1, &k, v);
    }
}
