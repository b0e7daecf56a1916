//! The scheduler's view of the cluster: nodes and the pods counted on them, including pods it
//! has just decided on ("assumed") but whose binding the watch has not confirmed yet.

use crate::framework::Snapshot;
use crate::nodeinfo::{NodeInfo, PodInfo};
use k8s_openapi::api::core::v1::{Node, Pod};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

struct PodState {
    node: String,
    assumed: bool,
}

#[derive(Default)]
pub struct Cache {
    /// Nodes we have a Node object for, in a stable order (the scheduling sample rotates over it).
    nodes: Vec<NodeInfo>,
    index: HashMap<String, usize>,
    /// Pods bound to nodes we have not seen (yet, or any more).
    orphans: HashMap<String, NodeInfo>,
    pods: HashMap<String, PodState>,
    /// Normalised image name → number of nodes that have it.
    image_nodes: HashMap<String, usize>,
}

/// Pods that no longer use node resources.
pub fn is_terminal(pod: &Pod) -> bool {
    matches!(pod.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Succeeded" | "Failed"))
}

/// The node a pod is bound to, if any.
pub fn node_name(pod: &Pod) -> Option<&str> {
    pod.spec.as_ref().and_then(|s| s.node_name.as_deref()).filter(|n| !n.is_empty())
}

impl Cache {
    pub fn snapshot(&self) -> Snapshot<'_> {
        Snapshot { nodes: &self.nodes, image_nodes: &self.image_nodes }
    }

    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    pub fn node(&self, name: &str) -> Option<&NodeInfo> {
        self.index.get(name).map(|&i| &self.nodes[i]).or_else(|| self.orphans.get(name))
    }

    fn node_mut(&mut self, name: &str) -> &mut NodeInfo {
        match self.index.get(name) {
            Some(&i) => &mut self.nodes[i],
            None => self
                .orphans
                .entry(name.to_string())
                .or_insert_with(|| NodeInfo { name: name.to_string(), ..NodeInfo::default() }),
        }
    }

    fn count_images(&mut self, node: &NodeInfo, delta: isize) {
        for image in node.images.keys() {
            let n = self.image_nodes.entry(image.clone()).or_default();
            *n = n.saturating_add_signed(delta);
            if *n == 0 {
                self.image_nodes.remove(image);
            }
        }
    }

    /// Adds or updates a node. Returns whether anything that could let a waiting pod fit changed
    /// (not, for example, a heartbeat).
    pub fn upsert_node(&mut self, node: Arc<Node>) -> bool {
        let name = node.metadata.name.clone().unwrap_or_default();
        if let Some(&i) = self.index.get(&name) {
            let old = self.nodes[i].clone();
            self.count_images(&old, -1);
            self.nodes[i].set_node(node);
            let new = self.nodes[i].clone();
            self.count_images(&new, 1);
            return old.labels != new.labels
                || old.taints != new.taints
                || old.unschedulable != new.unschedulable
                || old.allocatable != new.allocatable
                || old.images.len() != new.images.len();
        }
        let mut info = self.orphans.remove(&name).unwrap_or_default();
        info.set_node(node);
        self.count_images(&info, 1);
        self.index.insert(name, self.nodes.len());
        self.nodes.push(info);
        true
    }

    pub fn remove_node(&mut self, name: &str) {
        let Some(i) = self.index.remove(name) else { return };
        let mut info = self.nodes.swap_remove(i);
        if let Some(moved) = self.nodes.get(i) {
            self.index.insert(moved.name.clone(), i);
        }
        self.count_images(&info, -1);
        if !info.pods.is_empty() {
            info.node = None;
            self.orphans.insert(name.to_string(), info);
        }
    }

    /// Keeps only the named nodes (after a re-list).
    pub fn retain_nodes(&mut self, keep: &HashSet<String>) {
        let gone: Vec<String> = self.index.keys().filter(|n| !keep.contains(*n)).cloned().collect();
        for n in gone {
            self.remove_node(&n);
        }
    }

    fn add_to_node(&mut self, info: Arc<PodInfo>, node: &str, assumed: bool) {
        self.pods.insert(info.uid.clone(), PodState { node: node.to_string(), assumed });
        self.node_mut(node).add_pod(info);
    }

    /// Counts a pod on the node the scheduler chose before the binding is confirmed.
    pub fn assume(&mut self, info: Arc<PodInfo>, node: &str) {
        self.remove_pod(&info.uid);
        self.add_to_node(info, node, true);
    }

    /// Drops an assumed pod whose binding failed (a confirmed pod stays).
    pub fn forget(&mut self, uid: &str) {
        if self.pods.get(uid).is_some_and(|p| p.assumed) {
            self.remove_pod(uid);
        }
    }

    pub fn is_assumed(&self, uid: &str) -> bool {
        self.pods.get(uid).is_some_and(|p| p.assumed)
    }

    /// Applies a pod from the watch: bound, non-terminal pods are counted on their node.
    /// Returns whether resources were freed (a pod went away or finished).
    pub fn upsert_pod(&mut self, info: Arc<PodInfo>) -> bool {
        let pod = &info.pod;
        match node_name(pod) {
            Some(node) if !is_terminal(pod) => {
                let node = node.to_string();
                self.remove_pod(&info.uid);
                self.add_to_node(info, &node, false);
                false
            }
            // Unbound: if we assumed it, the watch has not caught up with our binding yet.
            None if self.is_assumed(&info.uid) => false,
            _ => self.remove_pod(&info.uid),
        }
    }

    /// Removes a pod; returns whether it was counted on a node.
    pub fn remove_pod(&mut self, uid: &str) -> bool {
        let Some(state) = self.pods.remove(uid) else { return false };
        if let Some(&i) = self.index.get(&state.node) {
            self.nodes[i].remove_pod(uid);
        } else if let Some(o) = self.orphans.get_mut(&state.node) {
            o.remove_pod(uid);
            if o.pods.is_empty() {
                self.orphans.remove(&state.node);
            }
        }
        true
    }

    /// Keeps only the pods with these uids, and assumed ones (after a re-list).
    pub fn retain_pods(&mut self, keep: &HashSet<String>) {
        let gone: Vec<String> =
            self.pods.iter().filter(|(uid, p)| !p.assumed && !keep.contains(*uid)).map(|(u, _)| u.clone()).collect();
        for uid in gone {
            self.remove_pod(&uid);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::test_util::pod_with;
    use serde_json::json;

    fn node(name: &str) -> Arc<Node> {
        Arc::new(
            serde_json::from_value(json!({"metadata": {"name": name},
                "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
                           "conditions": [{"type": "Ready", "status": "True"}]}}))
            .expect("node"),
        )
    }

    fn bound(name: &str, node: Option<&str>, phase: &str) -> Arc<PodInfo> {
        let spec = json!({"nodeName": node, "containers": [{"name": "c", "image": "x",
            "resources": {"requests": {"cpu": "1"}}}]});
        let mut p = (*pod_with(name, json!({}), spec).pod).clone();
        p.status = Some(serde_json::from_value(json!({"phase": phase})).expect("status"));
        Arc::new(PodInfo::new(Arc::new(p)))
    }

    fn cpu(cache: &Cache, node: &str) -> i64 {
        cache.node(node).map(|n| n.requested.milli_cpu).unwrap_or(-1)
    }

    #[test]
    fn assumed_pods_count_until_forgotten_or_confirmed() {
        let mut c = Cache::default();
        c.upsert_node(node("a"));
        let p = bound("p", None, "Pending");
        c.assume(p.clone(), "a");
        assert_eq!(cpu(&c, "a"), 1000);
        // A stale unbound event from the watch does not undo the assumption.
        assert!(!c.upsert_pod(p.clone()));
        assert_eq!(cpu(&c, "a"), 1000);
        c.forget(&p.uid);
        assert_eq!(cpu(&c, "a"), 0);
        // Once the watch confirms the binding, forget is a no-op.
        c.assume(p.clone(), "a");
        c.upsert_pod(bound("p", Some("a"), "Pending"));
        c.forget(&p.uid);
        assert_eq!(cpu(&c, "a"), 1000);
    }

    #[test]
    fn terminal_and_deleted_pods_free_their_node() {
        let mut c = Cache::default();
        c.upsert_node(node("a"));
        c.upsert_pod(bound("p", Some("a"), "Running"));
        c.upsert_pod(bound("q", Some("a"), "Running"));
        assert_eq!(cpu(&c, "a"), 2000);
        assert!(c.upsert_pod(bound("p", Some("a"), "Succeeded")));
        assert!(c.remove_pod("uid-q"));
        assert_eq!(cpu(&c, "a"), 0);
    }

    #[test]
    fn pods_on_unknown_nodes_wait_for_the_node() {
        let mut c = Cache::default();
        c.upsert_pod(bound("p", Some("late"), "Running"));
        assert_eq!(c.node_count(), 0);
        c.upsert_node(node("late"));
        assert_eq!((c.node_count(), cpu(&c, "late")), (1, 1000));
        c.upsert_node(node("b"));
        c.remove_node("late");
        assert_eq!(c.node_count(), 1);
        assert_eq!(c.snapshot().nodes[0].name, "b");
        assert_eq!(cpu(&c, "late"), 1000, "its pods are still known");
    }

    #[test]
    fn heartbeats_are_not_relevant_changes() {
        let mut c = Cache::default();
        assert!(c.upsert_node(node("a")));
        assert!(!c.upsert_node(node("a")));
        let mut tainted = (*node("a")).clone();
        tainted.spec =
            Some(serde_json::from_value(json!({"taints": [{"key": "k", "effect": "NoSchedule"}]})).expect("spec"));
        assert!(c.upsert_node(Arc::new(tainted)));
    }
}
