//! NodePorts: a pod's host ports must be free on the node.

use crate::framework::{CycleState, FilterPlugin, Status};
use crate::nodeinfo::{NodeInfo, PodInfo};

pub const NAME: &str = "NodePorts";
pub const REASON: &str = "node(s) didn't have free ports for the requested pod ports";

pub struct NodePorts;

impl FilterPlugin for NodePorts {
    fn name(&self) -> &'static str {
        NAME
    }

    fn filter(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let clash = pod.host_ports.iter().any(|want| node.used_ports.iter().any(|used| used.conflicts(want)));
        if clash {
            Status::unschedulable(REASON)
        } else {
            Status::Success
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::test_util::{filter, node, pod, pod_with, unschedulable};
    use serde_json::json;
    use std::sync::Arc;

    fn port_spec(port: i32, protocol: &str, ip: &str) -> serde_json::Value {
        json!({"containers": [{"name": "c", "image": "x",
            "ports": [{"containerPort": 80, "hostPort": port, "protocol": protocol, "hostIP": ip}]}]})
    }

    #[test]
    fn host_ports_conflict_by_protocol_port_and_overlapping_ip() {
        let cases = [
            ("same port", port_spec(8080, "TCP", ""), unschedulable(REASON)),
            ("other port", port_spec(8081, "TCP", ""), Status::Success),
            ("other protocol", port_spec(8080, "UDP", ""), Status::Success),
            ("specific ip against wildcard", port_spec(8080, "TCP", "10.0.0.1"), unschedulable(REASON)),
        ];
        for (name, spec, want) in cases {
            let mut n = node("n", json!({}), json!({}));
            n.add_pod(Arc::new(pod_with("existing", json!({}), port_spec(8080, "TCP", "0.0.0.0"))));
            assert_eq!(filter(&NodePorts, &pod(spec), &[n], 0), want, "{name}");
        }
        let mut n = node("n", json!({}), json!({}));
        n.add_pod(Arc::new(pod_with("existing", json!({}), port_spec(8080, "TCP", "10.0.0.1"))));
        assert_eq!(filter(&NodePorts, &pod(port_spec(8080, "TCP", "10.0.0.2")), &[n], 0), Status::Success);
    }
}
