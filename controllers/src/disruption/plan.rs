//! The disruption controller's arithmetic, pure: how many of a budget's pods are expected, how
//! many must stay healthy, how many are, and the status that follows (`trySync`,
//! `getExpectedPodCount`, `countHealthyPods`, `buildDisruptedPodMap`, `updatePdbStatus`).

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use std::collections::BTreeMap;

/// How long a pod stays in `disruptedPods` waiting to be deleted (`DeletionTimeout`).
pub const DELETION_TIMEOUT: jiff::SignedDuration = jiff::SignedDuration::from_secs(120);

/// `intstr.GetScaledValueFromIntOrPercent` rounding up; `None` for a malformed percentage.
pub fn scaled(v: &IntOrString, total: i32) -> Option<i32> {
    match v {
        IntOrString::Int(n) => Some(*n),
        IntOrString::String(s) => {
            let pct: i64 = s.strip_suffix('%')?.parse().ok()?;
            let total = i64::from(total);
            i32::try_from((pct * total + 99) / 100).ok()
        }
    }
}

/// (expectedCount, desiredHealthy). `scale` is the summed scale of the pods' controllers
/// (`getExpectedScale`), asked only when the budget needs it; an error there is the sync's error.
pub fn expected<E>(
    pdb: &PodDisruptionBudget,
    pods: usize,
    scale: impl FnOnce() -> Result<i32, E>,
) -> Result<(i32, i32), E> {
    let spec = pdb.spec.clone().unwrap_or_default();
    if let Some(max) = &spec.max_unavailable {
        let expected = scale()?;
        let unavailable = scaled(max, expected).unwrap_or(0);
        return Ok((expected, (expected - unavailable).max(0)));
    }
    match &spec.min_available {
        Some(IntOrString::Int(n)) => Ok((i32::try_from(pods).unwrap_or(i32::MAX), *n)),
        Some(min @ IntOrString::String(_)) => {
            let expected = scale()?;
            Ok((expected, scaled(min, expected).unwrap_or(0)))
        }
        None => Ok((0, 0)),
    }
}

fn is_ready(pod: &Pod) -> bool {
    let conditions = pod.status.as_ref().and_then(|s| s.conditions.as_ref());
    conditions.into_iter().flatten().any(|c| c.type_ == "Ready" && c.status == "True")
}

/// The disrupted pods still expected to go, and when the earliest of them times out.
pub fn disrupted(
    pdb: &PodDisruptionBudget,
    pods: &[&Pod],
    now: jiff::Timestamp,
) -> (BTreeMap<String, Time>, Option<jiff::Timestamp>) {
    let mut out = BTreeMap::new();
    let mut recheck: Option<jiff::Timestamp> = None;
    let recorded = pdb.status.as_ref().and_then(|s| s.disrupted_pods.as_ref());
    for pod in pods {
        if pod.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let name = pod.metadata.name.clone().unwrap_or_default();
        let Some(at) = recorded.and_then(|m| m.get(&name)) else { continue };
        let Ok(deadline) = at.0.checked_add(DELETION_TIMEOUT) else { continue };
        if deadline > now {
            recheck = Some(recheck.map_or(deadline, |r| r.min(deadline)));
            out.insert(name, at.clone());
        }
    }
    (out, recheck)
}

/// Ready pods that are not being deleted nor waiting to be.
pub fn healthy(pods: &[&Pod], disrupted: &BTreeMap<String, Time>) -> i32 {
    let count = pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| !disrupted.contains_key(p.metadata.name.as_deref().unwrap_or("")))
        .filter(|p| is_ready(p))
        .count();
    i32::try_from(count).unwrap_or(i32::MAX)
}

/// The status to write, or `None` when the stored one already says it all (no write that
/// changes nothing).
pub fn next_status(
    pdb: &PodDisruptionBudget,
    current: i32,
    desired: i32,
    expected: i32,
    disrupted: BTreeMap<String, Time>,
    now: jiff::Timestamp,
) -> Option<PodDisruptionBudgetStatus> {
    let allowed = if expected <= 0 { 0 } else { (current - desired).max(0) };
    let generation = pdb.metadata.generation.unwrap_or(0);
    let old = pdb.status.clone().unwrap_or_default();
    let old_disrupted = old.disrupted_pods.clone().unwrap_or_default();
    let unchanged = old.current_healthy == Some(current)
        && old.desired_healthy == Some(desired)
        && old.expected_pods == Some(expected)
        && old.disruptions_allowed == Some(allowed)
        && old_disrupted == disrupted
        && old.observed_generation == Some(generation)
        && condition_up_to_date(&old, allowed, generation);
    if unchanged {
        return None;
    }
    let mut status = PodDisruptionBudgetStatus {
        current_healthy: Some(current),
        desired_healthy: Some(desired),
        expected_pods: Some(expected),
        disruptions_allowed: Some(allowed),
        disrupted_pods: if disrupted.is_empty() { None } else { Some(disrupted) },
        observed_generation: Some(generation),
        conditions: old.conditions.clone(),
    };
    set_allowed_condition(&mut status, now);
    Some(status)
}

fn wanted(allowed: i32) -> (&'static str, &'static str) {
    if allowed > 0 {
        ("True", "SufficientPods")
    } else {
        ("False", "InsufficientPods")
    }
}

/// `ConditionsAreUpToDate`.
fn condition_up_to_date(status: &PodDisruptionBudgetStatus, allowed: i32, generation: i64) -> bool {
    let (st, reason) = wanted(allowed);
    status.conditions.iter().flatten().any(|c| {
        c.type_ == "DisruptionAllowed"
            && c.status == st
            && c.reason == reason
            && c.observed_generation == Some(generation)
    })
}

/// `UpdateDisruptionAllowedCondition` through `SetStatusCondition`: the transition time moves only
/// when the status does.
pub fn set_allowed_condition(status: &mut PodDisruptionBudgetStatus, now: jiff::Timestamp) {
    let (st, reason) = wanted(status.disruptions_allowed.unwrap_or(0));
    let generation = status.observed_generation;
    let list = status.conditions.get_or_insert_with(Vec::new);
    match list.iter_mut().find(|c| c.type_ == "DisruptionAllowed") {
        Some(c) => {
            if c.status != st {
                c.status = st.into();
                c.last_transition_time = Time(now);
            }
            c.reason = reason.into();
            c.observed_generation = generation;
        }
        None => list.push(Condition {
            type_: "DisruptionAllowed".into(),
            status: st.into(),
            reason: reason.into(),
            message: String::new(),
            observed_generation: generation,
            last_transition_time: Time(now),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pdb(spec: serde_json::Value, status: serde_json::Value) -> PodDisruptionBudget {
        serde_json::from_value(
            json!({"metadata": {"name": "b", "namespace": "d", "generation": 1}, "spec": spec, "status": status}),
        )
        .expect("pdb")
    }

    fn pod(name: &str, ready: bool) -> Pod {
        serde_json::from_value(json!({"metadata": {"name": name}, "status": {"conditions": [
            {"type": "Ready", "status": if ready { "True" } else { "False" }}]}}))
        .expect("pod")
    }

    fn now() -> jiff::Timestamp {
        "2026-01-01T00:10:00Z".parse().expect("time")
    }

    #[test]
    fn expected_and_desired_follow_min_available_or_max_unavailable() {
        let never = || -> Result<i32, ()> { panic!("an integer minAvailable needs no scale") };
        assert_eq!(expected(&pdb(json!({"minAvailable": 2}), json!({})), 3, never), Ok((3, 2)));
        assert_eq!(expected(&pdb(json!({"minAvailable": "50%"}), json!({})), 3, || Ok::<_, ()>(5)), Ok((5, 3)));
        assert_eq!(expected(&pdb(json!({"maxUnavailable": 1}), json!({})), 3, || Ok::<_, ()>(4)), Ok((4, 3)));
        assert_eq!(expected(&pdb(json!({"maxUnavailable": "30%"}), json!({})), 3, || Ok::<_, ()>(4)), Ok((4, 2)));
        assert_eq!(
            expected(&pdb(json!({"maxUnavailable": 1}), json!({})), 3, || Err("no controller")),
            Err("no controller")
        );
    }

    #[test]
    fn healthy_pods_are_ready_not_deleting_and_not_just_disrupted() {
        let recent: Time = Time("2026-01-01T00:09:00Z".parse().expect("time"));
        let old: Time = Time("2026-01-01T00:00:00Z".parse().expect("time"));
        let b = pdb(json!({"minAvailable": 1}), json!({"disruptedPods": {"a": recent, "b": old}}));
        let (pa, pb, pc) = (pod("a", true), pod("b", true), pod("c", false));
        let pods = [&pa, &pb, &pc];
        let (map, recheck) = disrupted(&b, &pods, now());
        assert_eq!(map.keys().collect::<Vec<_>>(), ["a"], "b's disruption timed out");
        assert_eq!(recheck, Some("2026-01-01T00:11:00Z".parse().expect("time")));
        assert_eq!(healthy(&pods, &map), 1);
    }

    #[test]
    fn the_status_is_written_only_when_it_changes() {
        let b = pdb(json!({"minAvailable": 1}), json!({}));
        let s = next_status(&b, 3, 1, 3, BTreeMap::new(), now()).expect("a first status");
        assert_eq!((s.disruptions_allowed, s.observed_generation), (Some(2), Some(1)));
        let c = &s.conditions.as_ref().expect("conditions")[0];
        assert_eq!((c.status.as_str(), c.reason.as_str()), ("True", "SufficientPods"));
        let mut settled = b.clone();
        settled.status = Some(s);
        assert_eq!(next_status(&settled, 3, 1, 3, BTreeMap::new(), now()), None);
        let s = next_status(&settled, 1, 1, 3, BTreeMap::new(), now()).expect("fewer healthy pods");
        assert_eq!(s.disruptions_allowed, Some(0));
        assert_eq!(s.conditions.expect("conditions")[0].reason, "InsufficientPods");
        assert_eq!(next_status(&settled, 3, 1, 0, BTreeMap::new(), now()).and_then(|s| s.disruptions_allowed), Some(0));
    }
}
