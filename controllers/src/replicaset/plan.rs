//! The replica decisions, pure: how many pods to create, which to delete (Kubernetes' order),
//! the slow-start batches, and the status the pods add up to — for either kind it runs.

use super::kinds::Replicated;
use crate::meta::{pod_is_available, pod_is_ready, pod_ready_since};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::{json, Value};
use std::cmp::{Ordering, Reverse};

/// Kubernetes' burstReplicas: at most this many creates or deletes per sync.
pub const BURST: usize = 500;

/// The condition a failed create or delete sets (`ReplicaSetReplicaFailure`).
pub const REPLICA_FAILURE: &str = "ReplicaFailure";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodRef {
    pub name: String,
    pub uid: String,
}

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Plan {
    pub create: usize,
    pub delete: Vec<PodRef>,
}

/// What to do so that `replicas` of the owner's active `pods` (those it owns) remain.
pub fn plan(replicas: i32, pods: &[&Pod]) -> Plan {
    let want = usize::try_from(replicas).unwrap_or(0);
    let have = pods.len();
    if have < want {
        return Plan { create: (want - have).min(BURST), delete: Vec::new() };
    }
    let mut ranked = pods.to_vec();
    ranked.sort_by_key(|p| deletion_rank(p));
    let delete = ranked
        .into_iter()
        .take((have - want).min(BURST))
        .map(|p| PodRef {
            name: p.metadata.name.clone().unwrap_or_default(),
            uid: p.metadata.uid.clone().unwrap_or_default(),
        })
        .collect();
    Plan { create: 0, delete }
}

/// A ReplicaSet's or ReplicationController's status: the same fields in both kinds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Status {
    pub replicas: i32,
    pub fully_labeled_replicas: i32,
    pub ready_replicas: i32,
    pub available_replicas: i32,
    pub observed_generation: Option<i64>,
    pub conditions: Vec<Condition>,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Time>,
}

impl Status {
    /// The merge patch that writes this status. Zero counts and no conditions are removed, as
    /// Kubernetes' `omitempty` leaves them out; other status fields are left as they are.
    pub fn patch(&self) -> Value {
        let count = |n: i32| if n == 0 { Value::Null } else { json!(n) };
        let conditions = if self.conditions.is_empty() { Value::Null } else { json!(self.conditions) };
        json!({"status": {
            "replicas": self.replicas,
            "fullyLabeledReplicas": count(self.fully_labeled_replicas),
            "readyReplicas": count(self.ready_replicas),
            "availableReplicas": count(self.available_replicas),
            "observedGeneration": self.observed_generation,
            "conditions": conditions,
        }})
    }
}

pub(crate) type Rank = (bool, u8, bool, i64, Reverse<i64>, Reverse<i32>, Reverse<i64>);

/// Smaller = deleted first: unassigned, then pending < unknown < running, not ready, lower
/// pod-deletion-cost, ready for less time, more restarts, newer.
pub(crate) fn deletion_rank(pod: &Pod) -> Rank {
    let spec = pod.spec.as_ref();
    let status = pod.status.as_ref();
    let assigned = spec.and_then(|s| s.node_name.as_deref()).is_some_and(|n| !n.is_empty());
    let phase = match status.and_then(|s| s.phase.as_deref()) {
        Some("Pending") | None => 0,
        Some("Running") => 2,
        Some(_) => 1,
    };
    let cost = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get("controller.kubernetes.io/pod-deletion-cost"))
        .and_then(|c| c.parse::<i64>().ok())
        .unwrap_or(0);
    let ready_since = match pod_ready_since(pod) {
        Some(Some(t)) => t.as_millisecond(),
        _ => i64::MAX,
    };
    let restarts = status
        .and_then(|s| s.container_statuses.as_ref())
        .map(|cs| cs.iter().map(|c| c.restart_count).max().unwrap_or(0))
        .unwrap_or(0);
    let created = pod.metadata.creation_timestamp.as_ref().map(|t| t.0.as_millisecond()).unwrap_or(i64::MAX);
    (assigned, phase, pod_is_ready(pod), cost, Reverse(ready_since), Reverse(restarts), Reverse(created))
}

/// Slow start: batches of 1, 2, 4, ... adding up to `n`. A failure in one batch skips the rest.
pub fn slow_start_batches(n: usize) -> Vec<usize> {
    let mut batches = Vec::new();
    let (mut left, mut size) = (n, 1);
    while left > 0 {
        let b = size.min(left);
        batches.push(b);
        left -= b;
        size *= 2;
    }
    batches
}

/// The status the owner's active `pods` add up to (Kubernetes' calculateStatus). A failed create
/// or delete (`manage_error`, its message) sets the ReplicaFailure condition if it is not set yet; a
/// sync without one clears it. Other conditions are kept as they were.
pub fn status<K: Replicated>(owner: &K, pods: &[&Pod], manage_error: Option<&str>, now: jiff::Timestamp) -> Status {
    let min_ready = owner.min_ready_seconds();
    let template_labels = owner.template().and_then(|t| t.metadata.as_ref()?.labels.as_ref());
    let fully_labeled = pods
        .iter()
        .filter(|p| {
            let labels = p.metadata.labels.as_ref();
            template_labels.into_iter().flatten().all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v))
        })
        .count();
    let count = |n: usize| i32::try_from(n).unwrap_or(i32::MAX);
    let mut conditions = owner.observed().conditions;
    let failing = conditions.iter().any(|c| c.type_ == REPLICA_FAILURE);
    match manage_error {
        Some(message) if !failing => {
            let reason = match pods.len().cmp(&usize::try_from(owner.replicas()).unwrap_or(0)) {
                Ordering::Less => Some("FailedCreate".to_owned()),
                Ordering::Greater => Some("FailedDelete".to_owned()),
                Ordering::Equal => None,
            };
            conditions.push(Condition {
                type_: REPLICA_FAILURE.to_owned(),
                status: "True".to_owned(),
                reason,
                message: Some(message.to_owned()),
                last_transition_time: Some(Time(now)),
            });
        }
        None if failing => conditions.retain(|c| c.type_ != REPLICA_FAILURE),
        _ => {}
    }
    Status {
        replicas: count(pods.len()),
        fully_labeled_replicas: count(fully_labeled),
        ready_replicas: count(pods.iter().filter(|p| pod_is_ready(p)).count()),
        available_replicas: count(pods.iter().filter(|p| pod_is_available(p, min_ready, now)).count()),
        observed_generation: owner.meta().generation,
        conditions,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::{ReplicaSet, ReplicaSetSpec};
    use k8s_openapi::api::core::v1::{ContainerStatus, PodCondition, PodSpec, PodStatus};
    use k8s_openapi::api::core::v1::{PodTemplateSpec, ReplicationController, ReplicationControllerSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

    fn rs(replicas: i32) -> ReplicaSet {
        ReplicaSet {
            spec: ReplicaSetSpec { replicas: Some(replicas), ..ReplicaSetSpec::default() },
            ..ReplicaSet::default()
        }
    }

    /// A pod: name, created at second `created`, node, phase, ready since second `ready`, restarts.
    fn pod(name: &str, created: i64, node: Option<&str>, phase: &str, ready: Option<i64>, restarts: i32) -> Pod {
        let at = |s: i64| Time(jiff::Timestamp::from_second(1_700_000_000 + s).expect("time"));
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                uid: Some(format!("uid-{name}")),
                creation_timestamp: Some(at(created)),
                ..ObjectMeta::default()
            },
            spec: Some(PodSpec { node_name: node.map(String::from), ..PodSpec::default() }),
            status: Some(PodStatus {
                phase: Some(phase.into()),
                conditions: ready.map(|s| {
                    vec![PodCondition {
                        type_: "Ready".into(),
                        status: "True".into(),
                        last_transition_time: Some(at(s)),
                        ..PodCondition::default()
                    }]
                }),
                container_statuses: Some(vec![ContainerStatus {
                    restart_count: restarts,
                    ..ContainerStatus::default()
                }]),
                ..PodStatus::default()
            }),
        }
    }

    fn names(plan: &Plan) -> Vec<&str> {
        plan.delete.iter().map(|p| p.name.as_str()).collect()
    }

    #[test]
    fn creates_what_is_missing_capped_at_the_burst() {
        let p = pod("a", 0, None, "Pending", None, 0);
        assert_eq!(plan(3, &[&p]), Plan { create: 2, delete: vec![] });
        assert_eq!(plan(1, &[&p]), Plan::default());
        assert_eq!(plan(2000, &[]).create, BURST);
        assert_eq!(plan(0, &[&p]).delete.len(), 1);
    }

    #[test]
    fn scales_down_in_kubernetes_order() {
        let running_old = pod("running-old", 0, Some("n1"), "Running", Some(10), 0);
        let running_new = pod("running-new", 50, Some("n1"), "Running", Some(60), 0);
        let running_restarts = pod("running-restarts", 0, Some("n1"), "Running", Some(10), 5);
        let not_ready = pod("not-ready", 0, Some("n1"), "Running", None, 0);
        let pending = pod("pending", 0, Some("n1"), "Pending", None, 0);
        let unassigned = pod("unassigned", 0, None, "Pending", None, 0);
        let all = [&running_old, &running_new, &running_restarts, &not_ready, &pending, &unassigned];
        let cases = [
            (5, vec!["unassigned"]),
            (4, vec!["unassigned", "pending"]),
            (3, vec!["unassigned", "pending", "not-ready"]),
            (2, vec!["unassigned", "pending", "not-ready", "running-new"]),
            (1, vec!["unassigned", "pending", "not-ready", "running-new", "running-restarts"]),
        ];
        for (replicas, want) in cases {
            assert_eq!(names(&plan(replicas, &all)), want, "replicas={replicas}");
        }
    }

    #[test]
    fn newest_goes_first_among_equals() {
        let a = pod("a", 1, Some("n"), "Running", None, 0);
        let b = pod("b", 2, Some("n"), "Running", None, 0);
        assert_eq!(names(&plan(1, &[&a, &b])), vec!["b"]);
    }

    #[test]
    fn slow_start_doubles() {
        assert_eq!(slow_start_batches(0), Vec::<usize>::new());
        assert_eq!(slow_start_batches(1), vec![1]);
        assert_eq!(slow_start_batches(10), vec![1, 2, 4, 3]);
        assert_eq!(slow_start_batches(15), vec![1, 2, 4, 8]);
    }

    #[test]
    fn status_counts_ready_and_available() {
        let mut set = rs(3);
        set.metadata.generation = Some(4);
        set.spec.min_ready_seconds = Some(30);
        let now = jiff::Timestamp::from_second(1_700_000_100).expect("time");
        let long_ready = pod("a", 0, Some("n"), "Running", Some(10), 0);
        let just_ready = pod("b", 0, Some("n"), "Running", Some(90), 0);
        let pending = pod("c", 0, None, "Pending", None, 0);
        let s = status(&set, &[&long_ready, &just_ready, &pending], None, now);
        assert_eq!(s.replicas, 3);
        assert_eq!(s.ready_replicas, 2);
        assert_eq!(s.available_replicas, 1);
        assert_eq!(s.observed_generation, Some(4));
        assert_eq!(s.fully_labeled_replicas, 3, "no template labels: every pod is fully labeled");
        assert!(s.conditions.is_empty());
    }

    #[test]
    fn a_replication_controller_counts_fully_labeled_pods_by_its_template() {
        let template = PodTemplateSpec {
            metadata: Some(ObjectMeta { labels: Some([("app".into(), "web".into())].into()), ..ObjectMeta::default() }),
            spec: None,
        };
        let mut rc = ReplicationController {
            spec: Some(ReplicationControllerSpec { template: Some(template), ..ReplicationControllerSpec::default() }),
            ..ReplicationController::default()
        };
        rc.metadata.generation = Some(2);
        let mut labeled = pod("a", 0, Some("n"), "Running", Some(10), 0);
        labeled.metadata.labels = Some([("app".into(), "web".into())].into());
        let bare = pod("b", 0, Some("n"), "Running", None, 0);
        let now = jiff::Timestamp::from_second(1_700_000_100).expect("time");
        let s = status(&rc, &[&labeled, &bare], None, now);
        assert_eq!((s.replicas, s.fully_labeled_replicas, s.ready_replicas, s.available_replicas), (2, 1, 1, 1));
        assert_eq!(s.observed_generation, Some(2));
    }

    #[test]
    fn a_failed_sync_sets_replica_failure_once_and_a_clean_one_clears_it() {
        let now = jiff::Timestamp::from_second(1_700_000_100).expect("time");
        let failed = status(&rs(3), &[], Some("pods \"web-x\" is forbidden: quota"), now);
        let cond = failed.conditions.first().expect("a condition");
        assert_eq!((cond.type_.as_str(), cond.status.as_str()), (REPLICA_FAILURE, "True"));
        assert_eq!(cond.reason.as_deref(), Some("FailedCreate"), "fewer pods than replicas: creating failed");
        assert_eq!(cond.message.as_deref(), Some("pods \"web-x\" is forbidden: quota"));

        let mut set = rs(3);
        set.status = Some(k8s_openapi::api::apps::v1::ReplicaSetStatus {
            conditions: Some(vec![k8s_openapi::api::apps::v1::ReplicaSetCondition {
                type_: Some(REPLICA_FAILURE.into()),
                status: Some("True".into()),
                reason: Some("FailedCreate".into()),
                message: Some("first".into()),
                ..Default::default()
            }]),
            ..Default::default()
        });
        let again = status(&set, &[], Some("second"), now);
        assert_eq!(again.conditions.len(), 1);
        assert_eq!(again.conditions[0].message.as_deref(), Some("first"), "an existing failure is kept as it was");
        assert!(status(&set, &[], None, now).conditions.is_empty(), "a clean sync clears it");

        let p = pod("a", 0, Some("n"), "Running", None, 0);
        let delete = status(&rs(0), &[&p], Some("boom"), now);
        assert_eq!(delete.conditions[0].reason.as_deref(), Some("FailedDelete"));
    }

    #[test]
    fn the_status_patch_leaves_out_zero_counts_and_clears_conditions() {
        let s = Status { replicas: 0, ready_replicas: 2, observed_generation: Some(3), ..Status::default() };
        assert_eq!(
            s.patch(),
            json!({"status": {"replicas": 0, "fullyLabeledReplicas": null, "readyReplicas": 2,
                "availableReplicas": null, "observedGeneration": 3, "conditions": null}})
        );
    }
}
