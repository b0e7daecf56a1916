//! The CronJob decisions, pure: the active list and last-success time the child Jobs add up to,
//! whether a Job is due now (schedule, startingDeadlineSeconds, concurrencyPolicy), and which
//! finished Jobs fall outside the history limits.

use super::schedule::{self, job_name, Due};
use crate::job::plan::is_finished;
use jiff::tz::TimeZone;
use jiff::Timestamp;
use k8s_openapi::api::batch::v1::{CronJob, CronJobStatus, Job};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kaji_api::cron::Schedule;
use std::collections::HashSet;
use std::time::Duration;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    pub warning: bool,
    pub reason: &'static str,
    pub message: String,
}

/// What one sync does.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    pub status: CronJobStatus,
    /// Start a Job named this, for this scheduled time.
    pub create: Option<(String, Timestamp)>,
    /// Active Jobs to delete first (concurrencyPolicy Replace).
    pub replace: Vec<ObjectReference>,
    /// Finished Jobs beyond the history limits, oldest first.
    pub prune: Vec<String>,
    pub events: Vec<Event>,
    pub requeue: Option<Duration>,
}

pub struct Input<'a> {
    pub cron_job: &'a CronJob,
    /// The Jobs this CronJob controls.
    pub jobs: &'a [&'a Job],
    /// Active-list entries whose Job a live read confirmed gone.
    pub missing: &'a HashSet<String>,
    pub schedule: Option<&'a Schedule>,
    pub tz: &'a TimeZone,
    pub now: Timestamp,
}

fn succeeded(job: &Job) -> bool {
    job.status.iter().flat_map(|s| s.conditions.iter().flatten()).any(|c| c.type_ == "Complete" && c.status == "True")
}

fn finished_condition(job: &Job) -> &'static str {
    if succeeded(job) {
        "Complete"
    } else {
        "Failed"
    }
}

/// An active-list entry for a Job.
pub fn reference(job: &Job) -> ObjectReference {
    ObjectReference {
        api_version: Some("batch/v1".into()),
        kind: Some("Job".into()),
        name: job.metadata.name.clone(),
        namespace: job.metadata.namespace.clone(),
        uid: job.metadata.uid.clone(),
        resource_version: job.metadata.resource_version.clone(),
        ..ObjectReference::default()
    }
}

pub fn plan(input: &Input<'_>) -> Plan {
    let cj = input.cron_job;
    let spec = cj.spec.clone();
    let mut status = cj.status.clone().unwrap_or_default();
    let mut events = Vec::new();
    let mut active = status.active.clone().unwrap_or_default();

    // The active list and the last success, from the child Jobs.
    let children: HashSet<&str> = input.jobs.iter().filter_map(|j| j.metadata.uid.as_deref()).collect();
    for job in input.jobs {
        let uid = job.metadata.uid.as_deref().unwrap_or_default();
        let listed = active.iter().any(|r| r.uid.as_deref() == Some(uid));
        let name = job.metadata.name.clone().unwrap_or_default();
        if listed && is_finished(job) {
            active.retain(|r| r.uid.as_deref() != Some(uid));
            events.push(Event {
                warning: false,
                reason: "SawCompletedJob",
                message: format!("Saw completed job: {name}, condition: {}", finished_condition(job)),
            });
        } else if !listed && !is_finished(job) {
            events.push(Event {
                warning: true,
                reason: "UnexpectedJob",
                message: format!("Saw a job that the controller did not create or forgot: {name}"),
            });
        }
        if succeeded(job) {
            let done = job.status.as_ref().and_then(|s| s.completion_time.clone());
            if let Some(t) = done {
                if status.last_successful_time.as_ref().is_none_or(|last| t.0 > last.0) {
                    status.last_successful_time = Some(t);
                }
            }
        }
    }
    active.retain(|r| {
        let uid = r.uid.as_deref().unwrap_or_default();
        if children.contains(uid) || !input.missing.contains(uid) {
            return true;
        }
        let name = r.name.clone().unwrap_or_default();
        events.push(Event {
            warning: false,
            reason: "MissingJob",
            message: format!("Active job went missing: {name}"),
        });
        false
    });

    let prune = prune(&spec, input.jobs);
    let mut out = Plan { prune, ..Plan::default() };
    let deleting = cj.metadata.deletion_timestamp.is_some();
    let schedule = input.schedule;
    if let (false, false, Some(schedule)) = (deleting, spec.suspend == Some(true), schedule) {
        let created = cj.metadata.creation_timestamp.as_ref().map_or(input.now, |t| t.0);
        let last = status.last_schedule_time.as_ref().map(|t| t.0);
        let Due { time, missed } =
            schedule::most_recent(schedule, input.tz, last, created, spec.starting_deadline_seconds, input.now);
        out.requeue = schedule::until_next(schedule, input.tz, input.now);
        if missed > schedule::MISSED_WARNING {
            events.push(Event {
                warning: true,
                reason: "TooManyMissedTimes",
                message: format!(
                    "too many missed start times: {missed}. Set or decrease .spec.startingDeadlineSeconds or check clock skew"
                ),
            });
        }
        if let Some(t) = time {
            let name = job_name(cj.metadata.name.as_deref().unwrap_or_default(), t);
            let too_late = spec.starting_deadline_seconds.is_some_and(|sds| {
                t.checked_add(jiff::SignedDuration::from_secs(sds)).is_ok_and(|limit| limit < input.now)
            });
            let done_already = active.iter().any(|r| r.name.as_deref() == Some(name.as_str()))
                || status.last_schedule_time.as_ref().is_some_and(|l| l.0 == t);
            let policy = spec.concurrency_policy.as_deref().unwrap_or("Allow");
            if too_late {
                events.push(Event {
                    warning: true,
                    reason: "MissSchedule",
                    message: format!("Missed scheduled time to start a job: {}", rfc1123z(t, input.tz)),
                });
            } else if done_already {
            } else if policy == "Forbid" && !active.is_empty() {
                events.push(Event {
                    warning: false,
                    reason: "JobAlreadyActive",
                    message: "Not starting job because prior execution is running and concurrency policy is Forbid"
                        .into(),
                });
            } else {
                if policy == "Replace" {
                    out.replace = std::mem::take(&mut active);
                }
                out.create = Some((name, t));
            }
        }
    }
    status.active = (!active.is_empty()).then_some(active);
    out.status = status;
    out.events = events;
    out
}

/// The status once the Job for `scheduled` exists: it is active and was the last scheduled.
pub fn started(mut status: CronJobStatus, job: &Job, scheduled: Timestamp) -> CronJobStatus {
    let mut active = status.active.take().unwrap_or_default();
    if !active.iter().any(|r| r.uid == job.metadata.uid) {
        active.push(reference(job));
    }
    status.active = Some(active);
    status.last_schedule_time = Some(Time(scheduled));
    status
}

/// Finished Jobs beyond `successfulJobsHistoryLimit` / `failedJobsHistoryLimit`, oldest first by
/// start time (then name).
fn prune(spec: &k8s_openapi::api::batch::v1::CronJobSpec, jobs: &[&Job]) -> Vec<String> {
    let mut out = Vec::new();
    for (limit, want_success) in [(spec.successful_jobs_history_limit, true), (spec.failed_jobs_history_limit, false)] {
        let Some(limit) = limit else { continue };
        let mut finished: Vec<&&Job> = jobs
            .iter()
            .filter(|j| is_finished(j) && succeeded(j) == want_success && j.metadata.deletion_timestamp.is_none())
            .collect();
        finished.sort_by_key(|j| {
            let start = j.status.as_ref().and_then(|s| s.start_time.as_ref()).map(|t| t.0);
            (start.is_none(), start, j.metadata.name.clone())
        });
        let keep = usize::try_from(limit).unwrap_or(0);
        let extra = finished.len().saturating_sub(keep);
        out.extend(finished.iter().take(extra).filter_map(|j| j.metadata.name.clone()));
    }
    out
}

/// Go's RFC1123Z in the schedule's time zone, as the MissSchedule event prints it.
fn rfc1123z(t: Timestamp, tz: &TimeZone) -> String {
    t.to_zoned(tz.clone()).strftime("%a, %d %b %Y %H:%M:%S %z").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cron_job(spec: serde_json::Value, status: serde_json::Value) -> CronJob {
        let mut spec = spec;
        spec["jobTemplate"] = json!({"spec": {"template": {}}});
        serde_json::from_value(
            json!({"metadata": {"name": "cj", "uid": "cj-uid", "creationTimestamp": "2025-01-01T10:00:00Z"},
            "spec": spec, "status": status}),
        )
        .expect("cronjob")
    }

    fn job(name: &str, uid: &str, conditions: serde_json::Value) -> Job {
        serde_json::from_value(json!({"metadata": {"name": name, "uid": uid},
            "status": {"conditions": conditions, "startTime": "2025-01-01T10:01:00Z", "completionTime": "2025-01-01T10:01:30Z"}}))
        .expect("job")
    }

    fn run(cj: &CronJob, jobs: &[&Job], missing: &[&str], now: &str) -> Plan {
        let schedule = Schedule::parse(&cj.spec.schedule).expect("schedule");
        let missing: HashSet<String> = missing.iter().map(|s| s.to_string()).collect();
        plan(&Input {
            cron_job: cj,
            jobs,
            missing: &missing,
            schedule: Some(&schedule),
            tz: &TimeZone::UTC,
            now: now.parse().expect("now"),
        })
    }

    #[test]
    fn a_due_start_creates_its_job_once() {
        let cj = cron_job(json!({"schedule": "*/1 * * * *"}), json!({}));
        let p = run(&cj, &[], &[], "2025-01-01T10:02:10Z");
        let scheduled: Timestamp = "2025-01-01T10:02:00Z".parse().expect("time");
        assert_eq!(p.create, Some(("cj-28928762".to_string(), scheduled)));
        assert_eq!(p.requeue, Some(Duration::from_millis(50_100)));
        let ran = cron_job(json!({"schedule": "*/1 * * * *"}), json!({"lastScheduleTime": "2025-01-01T10:02:00Z"}));
        assert_eq!(run(&ran, &[], &[], "2025-01-01T10:02:10Z").create, None);
        let suspended = cron_job(json!({"schedule": "*/1 * * * *", "suspend": true}), json!({}));
        assert_eq!(run(&suspended, &[], &[], "2025-01-01T10:02:10Z").create, None);
    }

    #[test]
    fn a_start_past_its_deadline_is_missed() {
        let cj = cron_job(
            json!({"schedule": "0 * * * *", "startingDeadlineSeconds": 5}),
            json!({"lastScheduleTime": "2025-01-01T10:00:00Z"}),
        );
        let p = run(&cj, &[], &[], "2025-01-01T11:00:10Z");
        assert_eq!(p.create, None);
        assert!(p.events.is_empty(), "earliest is raised to now - deadline: nothing due, nothing missed");
        let p = run(&cj, &[], &[], "2025-01-01T11:00:04Z");
        assert!(p.create.is_some());
    }

    #[test]
    fn finished_and_vanished_jobs_leave_the_active_list() {
        let status = json!({"active": [{"name": "cj-1", "uid": "u1"}, {"name": "cj-2", "uid": "u2"}, {"name": "cj-3", "uid": "u3"}],
            "lastScheduleTime": "2025-01-01T10:02:00Z"});
        let cj = cron_job(json!({"schedule": "*/1 * * * *", "concurrencyPolicy": "Forbid"}), status);
        let done = job("cj-1", "u1", json!([{"type": "Complete", "status": "True"}]));
        let running = job("cj-2", "u2", json!([]));
        let p = run(&cj, &[&done, &running], &["u3"], "2025-01-01T10:03:05Z");
        let active: Vec<_> = p.status.active.iter().flatten().filter_map(|r| r.name.clone()).collect();
        assert_eq!(active, ["cj-2"]);
        let reasons: Vec<_> = p.events.iter().map(|e| e.reason).collect();
        assert_eq!(reasons, ["SawCompletedJob", "MissingJob", "JobAlreadyActive"]);
        assert_eq!(p.create, None, "Forbid while cj-2 runs");
        assert_eq!(p.status.last_successful_time.map(|t| t.0.to_string()), Some("2025-01-01T10:01:30Z".into()));
    }
}
