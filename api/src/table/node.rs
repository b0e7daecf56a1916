//! Node rows: status, roles, version and addresses.

use serde_json::{json, Value};

use super::obj::{none_if_empty, Obj};

pub(super) fn node_cells(node: Obj<'_>, name: Value, age: Value) -> Vec<Value> {
    let mut status = vec![match node.condition("status.conditions", "Ready") {
        Some("True") => "Ready",
        Some(_) => "NotReady",
        None => "Unknown",
    }];
    if node.bool("spec.unschedulable") {
        status.push("SchedulingDisabled");
    }
    let mut roles: Vec<&str> = node
        .map("metadata.labels")
        .iter()
        .filter_map(|(k, v)| match k.strip_prefix("node-role.kubernetes.io/") {
            Some(role) if !role.is_empty() => Some(role),
            Some(_) => None,
            None if k == "kubernetes.io/role" => v.as_str().filter(|v| !v.is_empty()),
            None => None,
        })
        .collect();
    roles.sort_unstable();
    roles.dedup();
    let address = |type_: &str| {
        node.list("status.addresses")
            .iter()
            .find(|a| Obj(a).str("type") == type_)
            .map_or("<none>", |a| Obj(a).str("address"))
    };
    let info = |field: &str| match node.str(&format!("status.nodeInfo.{field}")) {
        "" => "<unknown>".to_owned(),
        v => v.to_owned(),
    };
    vec![
        name,
        json!(status.join(",")),
        json!(none_if_empty(&roles.join(","))),
        age,
        json!(node.str("status.nodeInfo.kubeletVersion")),
        json!(address("InternalIP")),
        json!(address("ExternalIP")),
        json!(info("osImage")),
        json!(info("kernelVersion")),
        json!(info("containerRuntimeVersion")),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::test_support::cell_strings;

    #[test]
    fn node_with_roles_prints_status_roles_and_wide_columns() {
        let node = json!({
            "metadata": {
                "name": "cp1", "creationTimestamp": "2024-12-30T12:00:00Z",
                "labels": {"node-role.kubernetes.io/control-plane": "", "node-role.kubernetes.io/etcd": "",
                           "kubernetes.io/role": "master", "kubernetes.io/hostname": "cp1"}
            },
            "spec": {"unschedulable": true},
            "status": {
                "conditions": [{"type": "MemoryPressure", "status": "False"}, {"type": "Ready", "status": "True"}],
                "addresses": [{"type": "Hostname", "address": "cp1"}, {"type": "InternalIP", "address": "10.0.0.1"}],
                "nodeInfo": {"kubeletVersion": "v1.32.0", "osImage": "Debian GNU/Linux 12 (bookworm)",
                             "kernelVersion": "6.1.0", "containerRuntimeVersion": "kaji://0.1.0"}
            }
        });
        assert_eq!(
            cell_strings("Node", &node),
            [
                "cp1",
                "Ready,SchedulingDisabled",
                "control-plane,etcd,master",
                "2d",
                "v1.32.0",
                "10.0.0.1",
                "<none>",
                "Debian GNU/Linux 12 (bookworm)",
                "6.1.0",
                "kaji://0.1.0"
            ]
        );
    }

    #[test]
    fn node_status_reflects_the_ready_condition() {
        let node = |conditions: Value| json!({"status": {"conditions": conditions}});
        let status = |n: &Value| cell_strings("Node", n)[1].clone();
        assert_eq!(status(&node(json!([{"type": "Ready", "status": "False"}]))), "NotReady");
        assert_eq!(status(&node(json!([{"type": "Ready", "status": "Unknown"}]))), "NotReady");
        assert_eq!(status(&node(json!([]))), "Unknown");
        let bare = cell_strings("Node", &json!({}));
        assert_eq!(bare[2], "<none>");
        assert_eq!(bare[7..], ["<unknown>", "<unknown>", "<unknown>"]);
    }
}
