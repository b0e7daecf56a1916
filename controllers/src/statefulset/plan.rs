//! The StatefulSet decisions, pure (Kubernetes' updateStatefulSet): which ordinals to create and
//! from which revision, which pods to delete (failed ones to recreate, condemned ones past
//! `replicas` from the highest ordinal down, outdated ones for a RollingUpdate above the
//! partition), one at a time and only over healthy predecessors under OrderedReady, all at once
//! under Parallel; and the status the pods add up to.

use super::identity::ordinal;
use super::revision;
use crate::meta::{pod_is_available, pod_is_ready};
use crate::replicaset::plan::PodRef;
use k8s_openapi::api::apps::v1::{StatefulSet, StatefulSetStatus};
use k8s_openapi::api::core::v1::Pod;
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Why {
    /// The pod failed or succeeded; it is recreated with the same name.
    Finished,
    /// Its ordinal is past `replicas` (scale down).
    Condemned,
    /// A RollingUpdate replaces it with the update revision.
    Outdated,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Create the pod (and its claims) with this ordinal, from the current revision when `current`
    /// (below the partition), else from the update revision.
    Create {
        ordinal: i32,
        current: bool,
    },
    Delete {
        pod: PodRef,
        why: Why,
    },
}

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Plan {
    pub steps: Vec<Step>,
    /// Look again after this long (a pod is Ready but not yet available for minReadySeconds).
    pub requeue: Option<Duration>,
}

/// The revision a pod was made from (its `controller-revision-hash` label).
pub fn pod_revision(pod: &Pod) -> Option<&str> {
    pod.metadata.labels.as_ref()?.get(revision::LABEL).map(String::as_str)
}

fn terminating(p: &Pod) -> bool {
    p.metadata.deletion_timestamp.is_some()
}

fn phase(p: &Pod) -> Option<&str> {
    p.status.as_ref()?.phase.as_deref()
}

fn running_and_ready(p: &Pod) -> bool {
    phase(p) == Some("Running") && pod_is_ready(p)
}

fn healthy(p: &Pod) -> bool {
    running_and_ready(p) && !terminating(p)
}

fn pod_ref(p: &Pod) -> PodRef {
    PodRef { name: p.metadata.name.clone().unwrap_or_default(), uid: p.metadata.uid.clone().unwrap_or_default() }
}

fn min_ready(set: &StatefulSet) -> i32 {
    set.spec.min_ready_seconds.unwrap_or(0)
}

fn start_ordinal(set: &StatefulSet) -> i32 {
    set.spec.ordinals.as_ref().and_then(|o| o.start).unwrap_or(0).max(0)
}

fn replicas(set: &StatefulSet) -> i32 {
    set.spec.replicas.unwrap_or(1).max(0)
}

fn on_delete(set: &StatefulSet) -> bool {
    set.spec.update_strategy.as_ref().and_then(|u| u.type_.as_deref()) == Some("OnDelete")
}

/// The partition of a RollingUpdate (0 without one).
fn partition(set: &StatefulSet) -> i32 {
    let strategy = set.spec.update_strategy.as_ref();
    strategy.and_then(|u| u.rolling_update.as_ref()?.partition).unwrap_or(0)
}

/// Whether a missing pod with this ordinal is made from the current revision: below the partition
/// of a RollingUpdate (or, without a rollingUpdate block, below status.currentReplicas).
fn from_current(set: &StatefulSet, ordinal: i32) -> bool {
    if on_delete(set) {
        return false;
    }
    let rolling = set.spec.update_strategy.as_ref().and_then(|u| u.rolling_update.as_ref());
    match rolling {
        Some(r) => ordinal < r.partition.unwrap_or(0),
        None => ordinal < set.status.as_ref().and_then(|s| s.current_replicas).unwrap_or(0),
    }
}

/// What to do next for `set` with its owned `pods` (any phase), given the update revision's name.
pub fn plan(set: &StatefulSet, pods: &[&Pod], update_revision: &str, now: jiff::Timestamp) -> Plan {
    let set_name = set.metadata.name.as_deref().unwrap_or_default();
    let monotonic = set.spec.pod_management_policy.as_deref() != Some("Parallel");
    let (start, count) = (start_ordinal(set), replicas(set));
    let mut slots: Vec<Option<&Pod>> = vec![None; usize::try_from(count).unwrap_or(0)];
    let mut condemned: Vec<(i32, &Pod)> = Vec::new();
    for pod in pods {
        let Some(ord) = ordinal(set_name, pod.metadata.name.as_deref().unwrap_or_default()) else { continue };
        if ord >= start && ord - start < count {
            slots[usize::try_from(ord - start).unwrap_or(0)] = Some(pod);
        } else {
            condemned.push((ord, pod));
        }
    }
    condemned.sort_by_key(|(ord, _)| *ord);
    let mut plan = Plan::default();

    for (i, slot) in slots.iter().enumerate() {
        let ord = start + i32::try_from(i).unwrap_or(i32::MAX);
        let Some(pod) = slot else {
            plan.steps.push(Step::Create { ordinal: ord, current: from_current(set, ord) });
            if monotonic {
                return plan;
            }
            continue;
        };
        if matches!(phase(pod), Some("Failed") | Some("Succeeded")) && !terminating(pod) {
            plan.steps.push(Step::Delete { pod: pod_ref(pod), why: Why::Finished });
            if monotonic {
                return plan;
            }
            continue;
        }
        if !monotonic {
            continue;
        }
        if !healthy(pod) {
            return plan;
        }
        if !pod_is_available(pod, min_ready(set), now) {
            plan.requeue = Some(Duration::from_secs(u64::try_from(min_ready(set)).unwrap_or(1).max(1)));
            return plan;
        }
    }

    // Scale down from the highest ordinal; under OrderedReady one at a time, and an unhealthy pod
    // blocks unless it is the lowest unhealthy one (it will never become healthy by waiting).
    let first_unhealthy = condemned.iter().find(|(_, p)| !healthy(p)).map(|(o, _)| *o);
    for (ord, pod) in condemned.iter().rev() {
        if terminating(pod) {
            if monotonic {
                return plan;
            }
            continue;
        }
        if monotonic && !healthy(pod) && Some(*ord) != first_unhealthy {
            return plan;
        }
        plan.steps.push(Step::Delete { pod: pod_ref(pod), why: Why::Condemned });
        if monotonic {
            return plan;
        }
    }

    if on_delete(set) || !plan.steps.is_empty() {
        return plan;
    }
    // RollingUpdate: replace the highest outdated pod at or above the partition, one at a time,
    // each only once every pod above it is healthy again.
    for (i, slot) in slots.iter().enumerate().rev() {
        let ord = start + i32::try_from(i).unwrap_or(i32::MAX);
        if ord < partition(set) {
            break;
        }
        let Some(pod) = slot else { return plan };
        if pod_revision(pod) != Some(update_revision) && !terminating(pod) {
            plan.steps.push(Step::Delete { pod: pod_ref(pod), why: Why::Outdated });
            return plan;
        }
        if !healthy(pod) {
            return plan;
        }
    }
    plan
}

/// The status the owned `pods` add up to (Kubernetes' computeReplicaStatus), with the rolling update
/// marked complete once every pod is updated and ready; conditions are kept as they were.
pub fn status(
    set: &StatefulSet,
    pods: &[&Pod],
    current: &str,
    update: &str,
    now: jiff::Timestamp,
) -> StatefulSetStatus {
    let count = |f: &dyn Fn(&Pod) -> bool| i32::try_from(pods.iter().filter(|p| f(p)).count()).unwrap_or(i32::MAX);
    let created = |p: &Pod| phase(p).is_some_and(|s| !s.is_empty());
    let live = |p: &Pod| created(p) && !terminating(p);
    let old = set.status.as_ref();
    let mut s = StatefulSetStatus {
        observed_generation: set.metadata.generation,
        replicas: count(&created),
        ready_replicas: Some(count(&running_and_ready)),
        available_replicas: Some(count(&|p| running_and_ready(p) && pod_is_available(p, min_ready(set), now))),
        current_replicas: Some(count(&|p| live(p) && pod_revision(p) == Some(current))),
        updated_replicas: Some(count(&|p| live(p) && pod_revision(p) == Some(update))),
        current_revision: Some(current.to_string()),
        update_revision: Some(update.to_string()),
        collision_count: old.and_then(|s| s.collision_count),
        conditions: old.and_then(|s| s.conditions.clone()),
    };
    let all_updated = s.updated_replicas == Some(s.replicas) && s.ready_replicas == Some(s.replicas);
    if !on_delete(set) && all_updated && current != update {
        s.current_replicas = s.updated_replicas;
        s.current_revision = Some(update.to_string());
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodCondition, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use serde_json::json;

    const NOW: i64 = 1_700_000_100;

    fn set(extra: serde_json::Value) -> StatefulSet {
        let mut v = json!({
            "metadata": {"name": "web", "namespace": "default", "uid": "u", "generation": 2},
            "spec": {"replicas": 3, "serviceName": "web", "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}},
        });
        if let (Some(spec), Some(e)) = (v["spec"].as_object_mut(), extra.as_object()) {
            spec.extend(e.clone());
        }
        serde_json::from_value(v).expect("valid set")
    }

    /// A pod `web-<ord>` of revision `rev` in `phase`, Ready since second 0 when `ready`.
    fn pod(ord: i32, rev: &str, phase: &str, ready: bool) -> Pod {
        Pod {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: Some(format!("web-{ord}")),
                uid: Some(format!("uid-{ord}")),
                labels: Some([(revision::LABEL.to_string(), rev.to_string())].into()),
                ..Default::default()
            },
            spec: None,
            status: Some(PodStatus {
                phase: Some(phase.into()),
                conditions: ready.then(|| {
                    vec![PodCondition {
                        type_: "Ready".into(),
                        status: "True".into(),
                        last_transition_time: Some(Time(jiff::Timestamp::from_second(1_700_000_000).expect("t"))),
                        ..PodCondition::default()
                    }]
                }),
                ..PodStatus::default()
            }),
        }
    }

    fn run(set: &StatefulSet, pods: &[Pod]) -> Vec<String> {
        let refs: Vec<&Pod> = pods.iter().collect();
        let now = jiff::Timestamp::from_second(NOW).expect("now");
        plan(set, &refs, "new", now)
            .steps
            .iter()
            .map(|s| match s {
                Step::Create { ordinal, current } => {
                    format!("create {ordinal}{}", if *current { " current" } else { "" })
                }
                Step::Delete { pod, why } => format!("delete {} {why:?}", pod.name),
            })
            .collect()
    }

    fn deleting(mut p: Pod) -> Pod {
        p.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::from_second(NOW).expect("t")));
        p
    }

    #[test]
    fn ordered_ready_creates_one_at_a_time_over_ready_predecessors() {
        let s = set(json!({}));
        assert_eq!(run(&s, &[]), vec!["create 0"]);
        assert_eq!(run(&s, &[pod(0, "new", "Pending", false)]), Vec::<String>::new(), "waits for web-0");
        assert_eq!(run(&s, &[pod(0, "new", "Running", false)]), Vec::<String>::new(), "waits for Ready");
        assert_eq!(run(&s, &[pod(0, "new", "Running", true)]), vec!["create 1"]);
        let two = [pod(0, "new", "Running", true), pod(1, "new", "Running", true)];
        assert_eq!(run(&s, &two), vec!["create 2"]);
        assert_eq!(run(&s, &[pod(1, "new", "Running", true)]), vec!["create 0"], "a deleted pod comes back first");
    }

    #[test]
    fn parallel_creates_every_missing_pod_at_once() {
        let s = set(json!({"podManagementPolicy": "Parallel"}));
        assert_eq!(run(&s, &[]), vec!["create 0", "create 1", "create 2"]);
        assert_eq!(run(&s, &[pod(1, "new", "Pending", false)]), vec!["create 0", "create 2"]);
    }

    #[test]
    fn failed_pods_are_deleted_to_be_recreated() {
        let s = set(json!({}));
        let pods = [pod(0, "new", "Failed", false), pod(1, "new", "Running", true)];
        assert_eq!(run(&s, &pods), vec!["delete web-0 Finished"]);
        assert_eq!(run(&s, &[deleting(pod(0, "new", "Failed", false))]), Vec::<String>::new(), "waits for it to go");
    }

    #[test]
    fn scale_down_removes_the_highest_ordinal_first() {
        let s = set(json!({"replicas": 1}));
        let pods = [pod(0, "new", "Running", true), pod(1, "new", "Running", true), pod(2, "new", "Running", true)];
        assert_eq!(run(&s, &pods), vec!["delete web-2 Condemned"]);
        let pods =
            [pod(0, "new", "Running", true), pod(1, "new", "Running", true), deleting(pod(2, "new", "Running", true))];
        assert_eq!(run(&s, &pods), Vec::<String>::new(), "one at a time");
        let pods = [pod(0, "new", "Running", false), pod(1, "new", "Running", true)];
        assert_eq!(run(&s, &pods), Vec::<String>::new(), "not over an unhealthy replica");
        let pods = [pod(0, "new", "Running", true), pod(1, "new", "Pending", false), pod(2, "new", "Pending", false)];
        assert_eq!(run(&s, &pods), Vec::<String>::new(), "an unhealthy pod waits for the lower unhealthy one");
        let pods = [pod(0, "new", "Running", true), pod(1, "new", "Running", true), pod(2, "new", "Pending", false)];
        assert_eq!(run(&s, &pods), vec!["delete web-2 Condemned"], "the lowest unhealthy one goes");
        let p = set(json!({"replicas": 1, "podManagementPolicy": "Parallel"}));
        let pods = [pod(0, "new", "Running", true), pod(1, "new", "Pending", false), pod(2, "new", "Running", true)];
        assert_eq!(run(&p, &pods), vec!["delete web-2 Condemned", "delete web-1 Condemned"]);
    }

    #[test]
    fn rolling_update_replaces_from_the_highest_ordinal_down_to_the_partition() {
        let s = set(json!({"updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 1}}}));
        let old = [pod(0, "old", "Running", true), pod(1, "old", "Running", true), pod(2, "old", "Running", true)];
        assert_eq!(run(&s, &old), vec!["delete web-2 Outdated"]);
        let mid = [pod(0, "old", "Running", true), pod(1, "old", "Running", true), pod(2, "new", "Pending", false)];
        assert_eq!(run(&s, &mid), Vec::<String>::new(), "waits for the updated pod");
        let mid = [pod(0, "old", "Running", true), pod(1, "old", "Running", true), pod(2, "new", "Running", true)];
        assert_eq!(run(&s, &mid), vec!["delete web-1 Outdated"]);
        let done = [pod(0, "old", "Running", true), pod(1, "new", "Running", true), pod(2, "new", "Running", true)];
        assert_eq!(run(&s, &done), Vec::<String>::new(), "the partition keeps web-0");
        assert_eq!(run(&s, &done[1..]), vec!["create 0 current"], "below the partition: current revision");
        let ondelete = set(json!({"updateStrategy": {"type": "OnDelete"}}));
        assert_eq!(run(&ondelete, &old), Vec::<String>::new());
        assert_eq!(run(&ondelete, &old[1..]), vec!["create 0"], "OnDelete recreates from the update revision");
    }

    #[test]
    fn min_ready_seconds_holds_the_next_pod_back() {
        let s = set(json!({"minReadySeconds": 300}));
        let p = plan(&s, &[&pod(0, "new", "Running", true)], "new", jiff::Timestamp::from_second(NOW).expect("now"));
        assert!(p.steps.is_empty());
        assert_eq!(p.requeue, Some(Duration::from_secs(300)));
    }

    #[test]
    fn status_counts_revisions_and_completes_the_rollout() {
        let s = set(json!({}));
        let now = jiff::Timestamp::from_second(NOW).expect("now");
        let pods = [pod(0, "old", "Running", true), pod(1, "new", "Running", true), pod(2, "new", "Pending", false)];
        let refs: Vec<&Pod> = pods.iter().collect();
        let st = status(&s, &refs, "old", "new", now);
        assert_eq!(st.replicas, 3);
        assert_eq!((st.ready_replicas, st.available_replicas), (Some(2), Some(2)));
        assert_eq!((st.current_replicas, st.updated_replicas), (Some(1), Some(2)));
        assert_eq!(st.current_revision.as_deref(), Some("old"));
        assert_eq!(st.observed_generation, Some(2));
        let pods = [pod(0, "new", "Running", true), pod(1, "new", "Running", true), pod(2, "new", "Running", true)];
        let refs: Vec<&Pod> = pods.iter().collect();
        let st = status(&s, &refs, "old", "new", now);
        assert_eq!((st.current_revision.as_deref(), st.current_replicas), (Some("new"), Some(3)));
    }
}
