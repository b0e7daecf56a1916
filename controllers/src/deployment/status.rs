//! The Deployment status, pure: counts summed over its ReplicaSets, and the Available and
//! Progressing conditions with Kubernetes' reasons, which `kubectl rollout status` reads.

use k8s_openapi::api::apps::v1::{Deployment, DeploymentCondition, DeploymentStatus, ReplicaSet};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

pub const DEFAULT_PROGRESS_DEADLINE: i32 = 600;

fn counts(rs: &ReplicaSet) -> (i32, i32, i32) {
    let s = rs.status.clone().unwrap_or_default();
    (s.replicas, s.ready_replicas.unwrap_or(0), s.available_replicas.unwrap_or(0))
}

/// What happened in this sync, for the Progressing condition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// The new ReplicaSet was created in this sync.
    Created,
    /// Anything else.
    Synced,
}

/// The status of `d` given its ReplicaSets (`new` among them) at `now`.
pub fn compute(
    d: &Deployment,
    all: &[&ReplicaSet],
    new: Option<&ReplicaSet>,
    max_unavailable: i32,
    step: Step,
    now: jiff::Timestamp,
) -> DeploymentStatus {
    let spec = d.spec.clone();
    let want = spec.replicas.unwrap_or(1);
    let old = d.status.clone().unwrap_or_default();
    let (mut replicas, mut ready, mut available) = (0, 0, 0);
    for rs in all {
        let (r, re, a) = counts(rs);
        replicas += r;
        ready += re;
        available += a;
    }
    let updated = new.map(|rs| counts(rs).0).unwrap_or(0);
    let mut status = DeploymentStatus {
        replicas: Some(replicas),
        updated_replicas: Some(updated),
        ready_replicas: Some(ready),
        available_replicas: Some(available),
        unavailable_replicas: Some((want - available).max(0)),
        observed_generation: d.metadata.generation,
        collision_count: old.collision_count,
        conditions: old.conditions.clone(),
        terminating_replicas: old.terminating_replicas,
    };
    let t = Time(now);
    let available_cond = if available >= want - max_unavailable {
        cond("Available", "True", "MinimumReplicasAvailable", "Deployment has minimum availability.", &t)
    } else {
        cond("Available", "False", "MinimumReplicasUnavailable", "Deployment does not have minimum availability.", &t)
    };
    set(&mut status, available_cond);

    let rs_name = new.and_then(|rs| rs.metadata.name.clone()).unwrap_or_default();
    let current = find(&status, "Progressing").cloned();
    let complete = updated == want && replicas == want && available == want;
    let progressed = old.updated_replicas != status.updated_replicas
        || old.replicas != status.replicas
        || old.ready_replicas != status.ready_replicas
        || old.available_replicas != status.available_replicas;
    let deadline = spec.progress_deadline_seconds.unwrap_or(DEFAULT_PROGRESS_DEADLINE);
    let progressing = if spec.paused == Some(true) {
        Some(cond("Progressing", "Unknown", "DeploymentPaused", "Deployment is paused", &t))
    } else if step == Step::Created {
        Some(cond("Progressing", "True", "NewReplicaSetCreated", &format!("Created new replica set \"{rs_name}\""), &t))
    } else if complete && new.is_some() {
        Some(cond(
            "Progressing",
            "True",
            "NewReplicaSetAvailable",
            &format!("ReplicaSet \"{rs_name}\" has successfully progressed."),
            &t,
        ))
    } else if progressed || current.is_none() {
        Some(cond("Progressing", "True", "ReplicaSetUpdated", &format!("ReplicaSet \"{rs_name}\" is progressing."), &t))
    } else {
        let timed_out = current.as_ref().is_some_and(|c| {
            c.reason.as_deref() != Some("NewReplicaSetAvailable")
                && c.last_update_time.as_ref().is_some_and(|u| u.0.as_second() + i64::from(deadline) < now.as_second())
        });
        timed_out.then(|| {
            cond(
                "Progressing",
                "False",
                "ProgressDeadlineExceeded",
                &format!("ReplicaSet \"{rs_name}\" has timed out progressing."),
                &t,
            )
        })
    };
    if let Some(p) = progressing {
        // A fresh lastUpdateTime marks progress; an unchanged reason and message is no news.
        let same =
            current.as_ref().is_some_and(|c| c.status == p.status && c.reason == p.reason && c.message == p.message);
        if !same || progressed {
            set(&mut status, p);
        }
    }
    status
}

fn cond(type_: &str, status: &str, reason: &str, message: &str, now: &Time) -> DeploymentCondition {
    DeploymentCondition {
        type_: Some(type_.into()),
        status: Some(status.into()),
        reason: Some(reason.into()),
        message: Some(message.into()),
        last_update_time: Some(now.clone()),
        last_transition_time: Some(now.clone()),
    }
}

fn find<'a>(status: &'a DeploymentStatus, type_: &str) -> Option<&'a DeploymentCondition> {
    status.conditions.iter().flatten().find(|c| c.type_.as_deref() == Some(type_))
}

/// Sets a condition: same status keeps lastTransitionTime; same status and reason keeps it whole.
fn set(status: &mut DeploymentStatus, mut c: DeploymentCondition) {
    let conds = status.conditions.get_or_insert_with(Vec::new);
    if let Some(cur) = conds.iter_mut().find(|x| x.type_ == c.type_) {
        if cur.status == c.status {
            if cur.reason == c.reason && c.type_.as_deref() != Some("Progressing") {
                return;
            }
            c.last_transition_time = cur.last_transition_time.clone();
        }
        *cur = c;
    } else {
        conds.push(c);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::{DeploymentSpec, ReplicaSetStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn d(replicas: i32) -> Deployment {
        Deployment {
            metadata: ObjectMeta { generation: Some(2), ..ObjectMeta::default() },
            spec: DeploymentSpec { replicas: Some(replicas), ..DeploymentSpec::default() },
            status: None,
        }
    }

    fn rs(name: &str, replicas: i32, available: i32) -> ReplicaSet {
        ReplicaSet {
            metadata: ObjectMeta { name: Some(name.into()), ..ObjectMeta::default() },
            status: Some(ReplicaSetStatus {
                replicas,
                ready_replicas: Some(available),
                available_replicas: Some(available),
                ..ReplicaSetStatus::default()
            }),
            ..ReplicaSet::default()
        }
    }

    fn reason(s: &DeploymentStatus, t: &str) -> (String, String) {
        let c = find(s, t).expect("condition");
        (c.status.clone().unwrap_or_default(), c.reason.clone().unwrap_or_default())
    }

    #[test]
    fn complete_rollout() {
        let now = jiff::Timestamp::now();
        let new = rs("web-abc", 3, 3);
        let s = compute(&d(3), &[&new], Some(&new), 0, Step::Synced, now);
        assert_eq!((s.replicas, s.updated_replicas, s.available_replicas), (Some(3), Some(3), Some(3)));
        assert_eq!(s.unavailable_replicas, Some(0));
        assert_eq!(s.observed_generation, Some(2));
        assert_eq!(reason(&s, "Available"), ("True".into(), "MinimumReplicasAvailable".into()));
        assert_eq!(reason(&s, "Progressing"), ("True".into(), "NewReplicaSetAvailable".into()));
    }

    #[test]
    fn mid_rollout() {
        let now = jiff::Timestamp::now();
        let new = rs("web-new", 1, 0);
        let old = rs("web-old", 3, 3);
        let s = compute(&d(3), &[&old, &new], Some(&new), 1, Step::Synced, now);
        assert_eq!((s.replicas, s.updated_replicas, s.available_replicas), (Some(4), Some(1), Some(3)));
        assert_eq!(reason(&s, "Available"), ("True".into(), "MinimumReplicasAvailable".into()));
        assert_eq!(reason(&s, "Progressing"), ("True".into(), "ReplicaSetUpdated".into()));
        let s = compute(&d(3), &[&new], Some(&new), 0, Step::Created, now);
        assert_eq!(reason(&s, "Progressing"), ("True".into(), "NewReplicaSetCreated".into()));
        assert_eq!(reason(&s, "Available"), ("False".into(), "MinimumReplicasUnavailable".into()));
    }

    #[test]
    fn no_progress_past_the_deadline_times_out() {
        let start = jiff::Timestamp::from_second(1_700_000_000).expect("time");
        let new = rs("web-new", 1, 0);
        let mut dep = d(3);
        dep.spec.progress_deadline_seconds = Some(30);
        dep.status = Some(compute(&dep, &[&new], Some(&new), 0, Step::Synced, start));
        let later = jiff::Timestamp::from_second(1_700_000_010).expect("time");
        let s = compute(&dep, &[&new], Some(&new), 0, Step::Synced, later);
        assert_eq!(reason(&s, "Progressing"), ("True".into(), "ReplicaSetUpdated".into()));
        let much_later = jiff::Timestamp::from_second(1_700_000_100).expect("time");
        let s = compute(&dep, &[&new], Some(&new), 0, Step::Synced, much_later);
        assert_eq!(reason(&s, "Progressing"), ("False".into(), "ProgressDeadlineExceeded".into()));
    }
}
