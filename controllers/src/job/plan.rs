//! The Job decisions, pure: which finished pods to account for (finalizer-based tracking), which
//! pods to create or delete, and the status and conditions they add up to.

use super::backoff::{self, Record};
use super::indexes::{self, pod_index};
use crate::meta::pod_is_ready;
use crate::replicaset::plan::{deletion_rank, PodRef};
use k8s_openapi::api::batch::v1::{Job, JobCondition, JobStatus, UncountedTerminatedPods};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use std::collections::{BTreeSet, HashSet};
use std::time::Duration;

/// The finalizer that keeps a finished pod until the Job has counted it.
pub const TRACKING_FINALIZER: &str = "batch.kubernetes.io/job-tracking";
/// Pods created or deleted per sync at most (Kubernetes' MaxBatchSize).
pub const BATCH: usize = 500;

/// A condition the Job reached, with Kubernetes' reason and message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Outcome {
    pub reason: &'static str,
    pub message: &'static str,
}

pub const COMPLETIONS_REACHED: Outcome =
    Outcome { reason: "CompletionsReached", message: "Reached expected number of succeeded pods" };
pub const BACKOFF_LIMIT_EXCEEDED: Outcome =
    Outcome { reason: "BackoffLimitExceeded", message: "Job has reached the specified backoff limit" };
pub const DEADLINE_EXCEEDED: Outcome =
    Outcome { reason: "DeadlineExceeded", message: "Job was active longer than specified deadline" };

/// An Event the sync should record about the Job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    pub warning: bool,
    pub reason: &'static str,
    pub message: String,
}

/// What one sync does.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    /// Written before any finalizer is removed, when it records newly finished pods as uncounted
    /// (so a crash between the two never loses or double-counts a pod).
    pub record_uncounted: Option<JobStatus>,
    pub remove_finalizers: Vec<PodRef>,
    /// New pods: their completion index for Indexed Jobs.
    pub create: Vec<Option<i32>>,
    pub delete: Vec<PodRef>,
    /// The status once the above succeeded.
    pub status: JobStatus,
    pub events: Vec<Event>,
    /// When to look again (a back-off or deadline running out).
    pub requeue: Option<Duration>,
    /// The back-off record after the pods that finished in this sync.
    pub backoff: Record,
}

pub struct Input<'a> {
    pub job: &'a Job,
    /// Every pod the Job owns, in any phase.
    pub pods: &'a [&'a Pod],
    /// Pods whose tracking finalizer this controller already removed (the cache lags).
    pub finalizer_removed: &'a HashSet<String>,
    pub backoff: Record,
    pub settings: backoff::Settings,
    /// Whether the cache shows every pod this controller created or deleted (expectations).
    pub may_manage: bool,
    pub now: jiff::Timestamp,
}

fn uid(p: &Pod) -> String {
    p.metadata.uid.clone().unwrap_or_default()
}

fn pod_ref(p: &Pod) -> PodRef {
    PodRef { name: p.metadata.name.clone().unwrap_or_default(), uid: uid(p) }
}

fn phase(p: &Pod) -> &str {
    p.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("Pending")
}

fn condition_true(status: &JobStatus, type_: &str) -> Option<JobCondition> {
    status.conditions.iter().flatten().find(|c| c.type_ == type_ && c.status == "True").cloned()
}

/// Whether the Job has its terminal condition (Complete or Failed).
pub fn is_finished(job: &Job) -> bool {
    job.status
        .as_ref()
        .is_some_and(|s| condition_true(s, "Complete").is_some() || condition_true(s, "Failed").is_some())
}

/// When the Job finished (its terminal condition's transition), if it has.
pub fn finish_time(job: &Job) -> Option<jiff::Timestamp> {
    let s = job.status.as_ref()?;
    let c = condition_true(s, "Complete").or_else(|| condition_true(s, "Failed"))?;
    c.last_transition_time.map(|t| t.0)
}

/// Sets a condition of `type_` (new ones get probe and transition times `now`; an existing one
/// keeps its transition time unless its status flips).
fn set_condition(conds: &mut Vec<JobCondition>, type_: &str, status: &str, o: Outcome, now: jiff::Timestamp) -> bool {
    if let Some(c) = conds.iter_mut().find(|c| c.type_ == type_) {
        if c.status == status && c.reason.as_deref() == Some(o.reason) {
            return false;
        }
        if c.status != status {
            c.last_transition_time = Some(Time(now));
        }
        c.status = status.to_string();
        c.reason = Some(o.reason.to_string());
        c.message = Some(o.message.to_string());
        c.last_probe_time = Some(Time(now));
        return true;
    }
    conds.push(JobCondition {
        type_: type_.to_string(),
        status: status.to_string(),
        reason: Some(o.reason.to_string()),
        message: Some(o.message.to_string()),
        last_probe_time: Some(Time(now)),
        last_transition_time: Some(Time(now)),
    });
    true
}

/// The container restarts of active pods, which count against backoffLimit for OnFailure Jobs.
fn restarts(pods: &[&Pod]) -> i64 {
    pods.iter()
        .flat_map(|p| p.status.iter().flat_map(|s| s.container_statuses.iter().chain(s.init_container_statuses.iter())))
        .flatten()
        .map(|c| i64::from(c.restart_count))
        .sum()
}

pub fn plan(input: &Input<'_>) -> Plan {
    let Input { job, pods, now, .. } = *input;
    let spec = job.spec.clone().unwrap_or_default();
    let old = job.status.clone().unwrap_or_default();
    let indexed = spec.completion_mode.as_deref() == Some("Indexed");
    let completions = spec.completions;
    let parallelism = spec.parallelism.unwrap_or(1).max(0);
    let backoff_limit = i64::from(spec.backoff_limit.unwrap_or(6));
    let suspended = spec.suspend == Some(true);
    let only_failed_replaced = spec.pod_replacement_policy.as_deref() == Some("Failed");
    let finished = is_finished(job);
    let success_met = condition_true(&old, "SuccessCriteriaMet").is_some();
    let failure_target = condition_true(&old, "FailureTarget");
    let deleting = job.metadata.deletion_timestamp.is_some();

    // --- Account for finished pods (finalizer-based tracking).
    let old_uncounted = old.uncounted_terminated_pods.clone().unwrap_or_default();
    let mut unc_succeeded: BTreeSet<String> = old_uncounted.succeeded.clone().unwrap_or_default().into_iter().collect();
    let mut unc_failed: BTreeSet<String> = old_uncounted.failed.clone().unwrap_or_default().into_iter().collect();
    let mut completed: BTreeSet<i32> = indexes::parse(old.completed_indexes.as_deref().unwrap_or(""));
    let is_failed = |p: &Pod| {
        phase(p) == "Failed"
            || (!only_failed_replaced && p.metadata.deletion_timestamp.is_some() && phase(p) != "Succeeded")
    };
    let mut remove_finalizers = Vec::new();
    let mut new_failed: Vec<&Pod> = Vec::new();
    let mut new_succeeded = 0;
    for p in pods.iter().copied() {
        let tracked = p.metadata.finalizers.iter().flatten().any(|f| f == TRACKING_FINALIZER);
        if !tracked || input.finalizer_removed.contains(&uid(p)) {
            continue;
        }
        let u = uid(p);
        let in_range = |i: i32| completions.is_none_or(|c| i < c);
        if phase(p) == "Succeeded" && !unc_failed.contains(&u) {
            if indexed {
                if let Some(i) = pod_index(p).filter(|i| in_range(*i)) {
                    new_succeeded += usize::from(completed.insert(i));
                }
            } else if unc_succeeded.insert(u) {
                new_succeeded += 1;
            }
            remove_finalizers.push(pod_ref(p));
        } else if is_failed(p) || (finished && !success_met) || (deleting && phase(p) != "Succeeded") {
            let countable = !indexed || pod_index(p).is_some_and(in_range);
            if countable && unc_failed.insert(u) {
                new_failed.push(p);
            }
            remove_finalizers.push(pod_ref(p));
        } else if finished || deleting {
            remove_finalizers.push(pod_ref(p));
        }
    }
    let backoff = input.backoff.update(&new_failed, new_succeeded, now);
    let to_vec = |s: &BTreeSet<String>| s.iter().cloned().collect::<Vec<_>>();
    let completed_text = (indexed && !completed.is_empty()).then(|| indexes::format(&completed));
    let with_uncounted = JobStatus {
        uncounted_terminated_pods: Some(UncountedTerminatedPods {
            succeeded: Some(to_vec(&unc_succeeded)).filter(|v| !v.is_empty()),
            failed: Some(to_vec(&unc_failed)).filter(|v| !v.is_empty()),
        }),
        completed_indexes: completed_text.clone().or(old.completed_indexes.clone()),
        ..old.clone()
    };
    let old_sets = |v: &Option<Vec<String>>| v.iter().flatten().cloned().collect::<BTreeSet<String>>();
    let grew = unc_succeeded != old_sets(&old_uncounted.succeeded) || unc_failed != old_sets(&old_uncounted.failed);
    let record_uncounted =
        (grew || with_uncounted.completed_indexes != old.completed_indexes).then(|| with_uncounted.clone());

    // --- Counts once the finalizers are gone.
    let count = |n: usize| i32::try_from(n).unwrap_or(i32::MAX);
    let succeeded =
        if indexed { count(completed.len()) } else { old.succeeded.unwrap_or(0) + count(unc_succeeded.len()) };
    let failed = old.failed.unwrap_or(0) + count(unc_failed.len());
    let active: Vec<&Pod> = pods
        .iter()
        .copied()
        .filter(|p| p.metadata.deletion_timestamp.is_none() && !matches!(phase(p), "Succeeded" | "Failed"))
        .collect();
    let mut terminating = pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_some() && !matches!(phase(p), "Succeeded" | "Failed"))
        .count();

    let mut status = JobStatus {
        uncounted_terminated_pods: Some(UncountedTerminatedPods::default()),
        succeeded: Some(succeeded),
        failed: Some(failed),
        completed_indexes: (indexed && !completed.is_empty()).then(|| indexes::format(&completed)),
        ..old.clone()
    };
    let mut conds = old.conditions.clone().unwrap_or_default();
    let mut events = Vec::new();
    let mut create = Vec::new();
    let mut delete: Vec<PodRef> = Vec::new();
    let mut requeue = None;

    if !finished && !deleting {
        if status.start_time.is_none() && !suspended {
            status.start_time = Some(Time(now));
        }
        let deadline = spec.active_deadline_seconds.and_then(|ads| {
            let start = status.start_time.as_ref()?.0;
            start.checked_add(jiff::SignedDuration::from_secs(ads)).ok()
        });
        let on_failure = spec.template.spec.as_ref().and_then(|s| s.restart_policy.as_deref()) == Some("OnFailure");
        let restarts = restarts(&active);
        let past_on_failure = on_failure && if backoff_limit == 0 { restarts > 0 } else { restarts >= backoff_limit };
        let failure = match failure_target {
            Some(c) => Some(outcome_of(&c)),
            None if i64::from(failed) > backoff_limit || past_on_failure => Some(BACKOFF_LIMIT_EXCEEDED),
            None if !suspended && deadline.is_some_and(|d| d <= now) => Some(DEADLINE_EXCEEDED),
            None => None,
        };
        let reached = match completions {
            _ if indexed => completions.is_some_and(|c| succeeded >= c),
            Some(c) => succeeded >= c,
            None => succeeded > 0 && active.is_empty() && terminating == 0,
        };
        if let Some(o) = failure {
            set_condition(&mut conds, "FailureTarget", "True", o, now);
            delete.extend(active.iter().map(|p| pod_ref(p)));
        } else if success_met || reached {
            set_condition(&mut conds, "SuccessCriteriaMet", "True", COMPLETIONS_REACHED, now);
            delete.extend(active.iter().map(|p| pod_ref(p)));
        } else if suspended {
            if set_condition(
                &mut conds,
                "Suspended",
                "True",
                Outcome { reason: "JobSuspended", message: "Job suspended" },
                now,
            ) {
                events.push(Event { warning: false, reason: "Suspended", message: "Job suspended".into() });
            }
            delete.extend(active.iter().map(|p| pod_ref(p)));
        } else {
            if conds.iter().any(|c| c.type_ == "Suspended" && c.status == "True") {
                set_condition(
                    &mut conds,
                    "Suspended",
                    "False",
                    Outcome { reason: "JobResumed", message: "Job resumed" },
                    now,
                );
                events.push(Event { warning: false, reason: "Resumed", message: "Job resumed".into() });
                status.start_time = Some(Time(now));
            }
            if input.may_manage {
                let wait = backoff.remaining(now, input.settings);
                let (c, d) = manage(
                    &spec,
                    indexed,
                    &active,
                    &completed,
                    succeeded,
                    parallelism,
                    terminating,
                    only_failed_replaced,
                );
                delete.extend(d);
                if !c.is_empty() {
                    match wait {
                        Some(w) => requeue = Some(w),
                        None => create = c,
                    }
                }
            }
            if let Some(d) = deadline {
                let left = Duration::try_from(d.duration_since(now)).unwrap_or(Duration::ZERO);
                requeue = Some(requeue.map_or(left, |r: Duration| r.min(left)).max(Duration::from_millis(100)));
            }
        }
        delete.truncate(BATCH);
        terminating += delete.len();
        let active_after = active.len() - delete.len().min(active.len()) + create.len();
        let deleted: HashSet<&str> = delete.iter().map(|d| d.uid.as_str()).collect();
        let ready = active.iter().filter(|p| pod_is_ready(p) && !deleted.contains(uid(p).as_str())).count();
        status.active = Some(count(active_after));
        status.ready = Some(count(ready));
        status.terminating = Some(count(terminating));

        // The terminal condition once no pod of the Job is left running or terminating.
        let done = active_after == 0 && terminating == 0;
        if done {
            if let Some(target) = conds.iter().find(|c| c.type_ == "FailureTarget" && c.status == "True") {
                let o = outcome_of(target);
                set_condition(&mut conds, "Failed", "True", o, now);
                events.push(Event { warning: true, reason: o.reason, message: o.message.to_string() });
            } else if conds.iter().any(|c| c.type_ == "SuccessCriteriaMet" && c.status == "True") {
                set_condition(&mut conds, "Complete", "True", COMPLETIONS_REACHED, now);
                status.completion_time = Some(Time(now));
                events.push(Event { warning: false, reason: "Completed", message: "Job completed".into() });
            }
        }
    } else {
        let ready = active.iter().filter(|p| pod_is_ready(p)).count();
        status.active = Some(count(active.len()));
        status.ready = Some(count(ready));
        status.terminating = Some(count(terminating));
    }
    status.conditions = (!conds.is_empty()).then_some(conds);
    Plan { record_uncounted, remove_finalizers, create, delete, status, events, requeue, backoff }
}

/// Kubernetes' outcome for a condition it wrote (unknown reasons keep their text).
fn outcome_of(c: &JobCondition) -> Outcome {
    match c.reason.as_deref() {
        Some("DeadlineExceeded") => DEADLINE_EXCEEDED,
        Some("CompletionsReached") => COMPLETIONS_REACHED,
        _ => BACKOFF_LIMIT_EXCEEDED,
    }
}

/// manageJob: pods to create (their indexes) and to delete so `parallelism` pods run towards
/// `completions`.
#[allow(clippy::too_many_arguments)]
fn manage(
    spec: &k8s_openapi::api::batch::v1::JobSpec,
    indexed: bool,
    active: &[&Pod],
    completed: &BTreeSet<i32>,
    succeeded: i32,
    parallelism: i32,
    terminating: usize,
    only_failed_replaced: bool,
) -> (Vec<Option<i32>>, Vec<PodRef>) {
    let active_n = i32::try_from(active.len()).unwrap_or(i32::MAX);
    let want = match spec.completions {
        None if succeeded > 0 => active_n,
        None => parallelism,
        Some(c) => (c - succeeded).clamp(0, parallelism),
    };
    let mut delete = Vec::new();
    let mut create = Vec::new();
    if indexed {
        let c = spec.completions.unwrap_or(0);
        // One pod per index: extra, out-of-range and completed-index pods go.
        let mut seen = HashSet::new();
        let mut keep: Vec<&Pod> = Vec::new();
        let mut by_index: Vec<&Pod> = active.to_vec();
        by_index.sort_by_key(|p| (pod_index(p), std::cmp::Reverse(crate::meta::pod_is_ready(p))));
        for p in by_index {
            match pod_index(p) {
                Some(i) if i < c && !completed.contains(&i) && seen.insert(i) => keep.push(p),
                _ => delete.push(pod_ref(p)),
            }
        }
        let keep_n = i32::try_from(keep.len()).unwrap_or(i32::MAX);
        if keep_n > want {
            // Highest indexes go first.
            keep.sort_by_key(|p| std::cmp::Reverse(pod_index(p)));
            let extra = usize::try_from(keep_n - want).unwrap_or(0);
            delete.extend(keep.iter().take(extra).map(|p| pod_ref(p)));
        } else if keep_n < want {
            let n = usize::try_from(want - keep_n).unwrap_or(0).min(BATCH);
            create = (0..c).filter(|i| !completed.contains(i) && !seen.contains(i)).take(n).map(Some).collect();
        }
        return (create, delete);
    }
    if active_n > want {
        let mut ranked = active.to_vec();
        ranked.sort_by_key(|p| deletion_rank(p));
        let n = usize::try_from(active_n - want).unwrap_or(0).min(BATCH);
        delete.extend(ranked.iter().take(n).map(|p| pod_ref(p)));
    } else if active_n < want {
        let mut n = usize::try_from(want - active_n).unwrap_or(0);
        if only_failed_replaced {
            // podReplacementPolicy Failed: a terminating pod is replaced only once it has failed.
            n = n.saturating_sub(terminating);
        }
        create = vec![None; n.min(BATCH)];
    }
    (create, delete)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn job(spec: serde_json::Value, status: serde_json::Value) -> Job {
        let mut spec = spec;
        spec["template"] = json!({"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "i"}]}});
        serde_json::from_value(json!({"metadata": {"name": "j", "uid": "ju"}, "spec": spec, "status": status}))
            .expect("job")
    }

    fn pod(uid: &str, phase: &str, tracked: bool) -> Pod {
        let finalizers = if tracked { json!([TRACKING_FINALIZER]) } else { json!([]) };
        serde_json::from_value(json!({"metadata": {"name": uid, "uid": uid, "finalizers": finalizers},
            "status": {"phase": phase}}))
        .expect("pod")
    }

    fn run(job: &Job, pods: &[&Pod], backoff: Record) -> Plan {
        plan(&Input {
            job,
            pods,
            finalizer_removed: &HashSet::new(),
            backoff,
            settings: backoff::Settings::default(),
            may_manage: true,
            now: "2025-01-01T00:00:05Z".parse().expect("now"),
        })
    }

    #[test]
    fn finished_pods_are_recorded_uncounted_before_their_finalizers_go() {
        let j = job(json!({"completions": 2, "parallelism": 2, "backoffLimit": 6}), json!({}));
        let (done, failed, running) =
            (pod("a", "Succeeded", true), pod("b", "Failed", true), pod("c", "Running", true));
        let p = run(&j, &[&done, &failed, &running], Record::default());
        let unc = p.record_uncounted.and_then(|s| s.uncounted_terminated_pods).expect("recorded first");
        assert_eq!((unc.succeeded, unc.failed), (Some(vec!["a".into()]), Some(vec!["b".into()])));
        assert_eq!(p.remove_finalizers.iter().map(|r| r.uid.as_str()).collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!((p.status.succeeded, p.status.failed, p.status.active), (Some(1), Some(1), Some(1)));
        assert!(p.create.is_empty(), "one more success needs only the running pod");
    }

    #[test]
    fn counted_pods_are_not_counted_again() {
        let j = job(json!({"completions": 3, "parallelism": 1}), json!({"succeeded": 1}));
        let old = pod("a", "Succeeded", false);
        let p = run(&j, &[&old], Record::default());
        assert_eq!(p.record_uncounted, None);
        assert_eq!(p.status.succeeded, Some(1));
        assert_eq!(p.create, vec![None]);
    }

    #[test]
    fn on_failure_restarts_count_against_the_backoff_limit() {
        let mut j = job(json!({"completions": 1, "backoffLimit": 2}), json!({}));
        j.spec.as_mut().expect("spec").template.spec.as_mut().expect("pod spec").restart_policy =
            Some("OnFailure".into());
        let mut crashing = pod("a", "Running", true);
        crashing.status =
            serde_json::from_value(json!({"phase": "Running", "containerStatuses": [{"name": "c", "image": "i",
            "imageID": "", "ready": false, "restartCount": 2}]}))
            .ok();
        let p = run(&j, &[&crashing], Record::default());
        let target = p.status.conditions.iter().flatten().find(|c| c.type_ == "FailureTarget").expect("failing");
        assert_eq!(target.reason.as_deref(), Some("BackoffLimitExceeded"));
        assert_eq!(p.delete.len(), 1, "the running pod goes");
        assert!(!p.status.conditions.iter().flatten().any(|c| c.type_ == "Failed"), "Failed waits for it to terminate");
    }
}
