//! NodeName: a pod that names its node (`spec.nodeName`) fits only that node.

use crate::framework::{CycleState, FilterPlugin, Status};
use crate::nodeinfo::{NodeInfo, PodInfo};

pub const NAME: &str = "NodeName";
pub const REASON: &str = "node(s) didn't match the requested node name";

pub struct NodeName;

impl FilterPlugin for NodeName {
    fn name(&self) -> &'static str {
        NAME
    }

    fn filter(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        match pod.pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) {
            Some(want) if !want.is_empty() && want != node.name => Status::unschedulable(REASON),
            _ => Status::Success,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::test_util::{filter, node, pod, unschedulable};
    use serde_json::json;

    #[test]
    fn only_the_named_node_fits() {
        let nodes = [node("a", json!({}), json!({})), node("b", json!({}), json!({}))];
        let named = pod(json!({"nodeName": "b"}));
        assert_eq!(filter(&NodeName, &named, &nodes, 0), unschedulable(REASON));
        assert_eq!(filter(&NodeName, &named, &nodes, 1), Status::Success);
        assert_eq!(filter(&NodeName, &pod(json!({})), &nodes, 0), Status::Success);
    }
}
