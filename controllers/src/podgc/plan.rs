//! Which pods the pod garbage collector deletes, and why — pure functions over the caches.

use k8s_openapi::api::core::v1::Pod;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    /// One of the oldest terminated pods above the threshold.
    Terminated,
    /// Bound to a node that no longer exists.
    Orphaned,
    /// Being deleted but never scheduled: no kubelet will ever confirm it.
    Unscheduled,
}

impl Reason {
    /// The `reason` label of Kubernetes' pod GC metrics.
    pub fn label(self) -> &'static str {
        match self {
            Reason::Terminated => "terminated",
            Reason::Orphaned => "orphaned",
            Reason::Unscheduled => "unscheduled",
        }
    }
}

fn phase(p: &Pod) -> Option<&str> {
    p.status.as_ref()?.phase.as_deref()
}

fn node_name(p: &Pod) -> Option<&str> {
    p.spec.as_ref()?.node_name.as_deref().filter(|n| !n.is_empty())
}

/// Not Pending, Running or Unknown (Kubernetes' isPodTerminated).
pub fn is_terminated(p: &Pod) -> bool {
    !matches!(phase(p), None | Some("Pending" | "Running" | "Unknown"))
}

fn is_evicted(p: &Pod) -> bool {
    phase(p) == Some("Failed") && p.status.as_ref().and_then(|s| s.reason.as_deref()) == Some("Evicted")
}

/// The terminated pods beyond `threshold`, in deletion order: evicted first, then oldest, by name.
pub fn terminated(pods: &[Arc<Pod>], threshold: usize) -> Vec<Arc<Pod>> {
    let mut done: Vec<Arc<Pod>> = pods.iter().filter(|p| is_terminated(p)).cloned().collect();
    let excess = done.len().saturating_sub(threshold);
    if excess == 0 {
        return Vec::new();
    }
    done.sort_by(|a, b| {
        let created = |p: &Pod| p.metadata.creation_timestamp.as_ref().map(|t| t.0);
        is_evicted(b)
            .cmp(&is_evicted(a))
            .then_with(|| created(a).cmp(&created(b)))
            .then_with(|| a.metadata.name.cmp(&b.metadata.name))
    });
    done.truncate(excess);
    done
}

/// The nodes pods are bound to that the node cache does not show.
pub fn missing_nodes(pods: &[Arc<Pod>], nodes: &HashSet<String>) -> BTreeSet<String> {
    pods.iter().filter_map(|p| node_name(p)).filter(|n| !nodes.contains(*n)).map(str::to_string).collect()
}

/// The pods bound to one of the `gone` nodes.
pub fn orphaned(pods: &[Arc<Pod>], gone: &HashSet<String>) -> Vec<Arc<Pod>> {
    pods.iter().filter(|p| node_name(p).is_some_and(|n| gone.contains(n))).cloned().collect()
}

/// The pods being deleted that were never bound to a node.
pub fn unscheduled_terminating(pods: &[Arc<Pod>]) -> Vec<Arc<Pod>> {
    pods.iter().filter(|p| p.metadata.deletion_timestamp.is_some() && node_name(p).is_none()).cloned().collect()
}

/// Nodes missing from the cache, held for a quarantine before a live read may confirm them gone
/// (the cache may simply not have caught up with a new node).
#[derive(Debug, Default)]
pub struct Quarantine {
    since: HashMap<String, Instant>,
}

impl Quarantine {
    /// Notes the nodes missing `now`; returns those missing for at least `wait`, which start a new
    /// quarantine if they are still missing next time.
    pub fn due(&mut self, missing: &BTreeSet<String>, now: Instant, wait: Duration) -> Vec<String> {
        self.since.retain(|n, _| missing.contains(n));
        let mut due = Vec::new();
        for n in missing {
            let since = *self.since.entry(n.clone()).or_insert(now);
            if now.duration_since(since) >= wait {
                due.push(n.clone());
                self.since.remove(n);
            }
        }
        due
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodSpec, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

    fn pod(name: &str, created: &str, phase: &str, node: Option<&str>) -> Arc<Pod> {
        Arc::new(Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                creation_timestamp: Some(Time(created.parse().expect("time"))),
                ..ObjectMeta::default()
            },
            spec: Some(PodSpec { node_name: node.map(str::to_string), ..PodSpec::default() }),
            status: Some(PodStatus { phase: Some(phase.into()), ..PodStatus::default() }),
        })
    }

    fn names(pods: &[Arc<Pod>]) -> Vec<&str> {
        pods.iter().filter_map(|p| p.metadata.name.as_deref()).collect()
    }

    #[test]
    fn terminated_pods_above_the_threshold_go_evicted_then_oldest_first() {
        let mut evicted = (*pod("evicted", "2025-01-03T00:00:00Z", "Failed", None)).clone();
        evicted.status.as_mut().expect("status").reason = Some("Evicted".into());
        let pods = vec![
            pod("new", "2025-01-04T00:00:00Z", "Succeeded", None),
            pod("old", "2025-01-01T00:00:00Z", "Failed", None),
            pod("running", "2024-01-01T00:00:00Z", "Running", None),
            pod("b-same", "2025-01-02T00:00:00Z", "Succeeded", None),
            pod("a-same", "2025-01-02T00:00:00Z", "Succeeded", None),
            Arc::new(evicted),
        ];
        assert_eq!(names(&terminated(&pods, 5)), Vec::<&str>::new(), "five terminated, threshold five");
        assert_eq!(names(&terminated(&pods, 2)), ["evicted", "old", "a-same"]);
        assert_eq!(terminated(&pods, 0).len(), 5, "a running pod is never collected");
    }

    #[test]
    fn orphans_are_pods_on_nodes_gone_and_unbound_pods_being_deleted() {
        let pods = vec![
            pod("on-live", "2025-01-01T00:00:00Z", "Running", Some("n1")),
            pod("on-gone", "2025-01-01T00:00:00Z", "Running", Some("n2")),
            pod("unbound", "2025-01-01T00:00:00Z", "Pending", None),
        ];
        let nodes: HashSet<String> = ["n1".to_string()].into();
        assert_eq!(missing_nodes(&pods, &nodes), BTreeSet::from(["n2".to_string()]));
        assert_eq!(names(&orphaned(&pods, &["n2".to_string()].into())), ["on-gone"]);
        assert!(unscheduled_terminating(&pods).is_empty());
        let mut deleting = (*pods[2]).clone();
        deleting.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::UNIX_EPOCH));
        assert_eq!(names(&unscheduled_terminating(&[Arc::new(deleting)])), ["unbound"]);
    }

    #[test]
    fn a_missing_node_is_due_only_after_the_quarantine() {
        let mut q = Quarantine::default();
        let t0 = Instant::now();
        let wait = Duration::from_secs(40);
        let missing = BTreeSet::from(["n2".to_string()]);
        assert!(q.due(&missing, t0, wait).is_empty());
        assert!(q.due(&missing, t0 + Duration::from_secs(39), wait).is_empty());
        assert_eq!(q.due(&missing, t0 + wait, wait), ["n2"]);
        assert!(q.due(&missing, t0 + wait, wait).is_empty(), "a new quarantine starts");
        // A node that shows up again is forgotten.
        assert!(q.due(&BTreeSet::new(), t0 + wait * 3, wait).is_empty());
        assert!(q.due(&missing, t0 + wait * 3, wait).is_empty());
    }
}
