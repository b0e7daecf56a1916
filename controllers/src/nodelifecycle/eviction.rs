//! The taint eviction decision (Kubernetes' taint manager): whether a pod on a node with NoExecute
//! taints must go now, at some time, or may stay.

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::{Taint, Toleration};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Eviction {
    /// Delete the pod now.
    Now,
    /// Delete the pod at this time unless the taints go away first.
    At(Timestamp),
    /// The pod tolerates every NoExecute taint indefinitely.
    Never,
}

pub use kaji_api::scheduling::tolerates;

/// Decides a pod's fate from its tolerations and its node's taints. `since` is when the pod came
/// under the taints (the taints' `timeAdded`, or the pod's creation if later); the pod goes after
/// the smallest `tolerationSeconds` among the tolerations it needs, or now if some taint is not
/// tolerated at all.
pub fn decide(tolerations: &[Toleration], taints: &[Taint], since: Timestamp, now: Timestamp) -> Eviction {
    let no_execute: Vec<&Taint> = taints.iter().filter(|t| t.effect == "NoExecute").collect();
    if no_execute.is_empty() {
        return Eviction::Never;
    }
    let mut used: Vec<&Toleration> = Vec::new();
    for taint in no_execute {
        match tolerations.iter().find(|t| tolerates(t, taint)) {
            Some(t) => used.push(t),
            None => return Eviction::Now,
        }
    }
    let Some(seconds) = used.iter().filter_map(|t| t.toleration_seconds).min() else {
        return Eviction::Never;
    };
    if seconds <= 0 {
        return Eviction::Now;
    }
    match since.checked_add(SignedDuration::from_secs(seconds)) {
        Ok(at) if at <= now => Eviction::Now,
        Ok(at) => Eviction::At(at),
        Err(_) => Eviction::Never,
    }
}

/// When the pod came under the node's NoExecute taints: the earliest `timeAdded` (`now` if none
/// has one), but not before the pod existed.
pub fn tainted_since(taints: &[Taint], pod_created: Option<Timestamp>, now: Timestamp) -> Timestamp {
    let added = taints
        .iter()
        .filter(|t| t.effect == "NoExecute")
        .map(|t| t.time_added.as_ref().map_or(now, |t| t.0))
        .min()
        .unwrap_or(now);
    pod_created.map_or(added, |c| added.max(c))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + secs).expect("valid time")
    }

    fn taint(key: &str, value: Option<&str>, effect: &str) -> Taint {
        Taint { key: key.into(), value: value.map(Into::into), effect: effect.into(), time_added: None }
    }

    fn tol(key: &str, op: &str, value: Option<&str>, effect: &str, secs: Option<i64>) -> Toleration {
        let opt = |s: &str| (!s.is_empty()).then(|| s.to_string());
        Toleration {
            key: opt(key),
            operator: opt(op),
            value: value.map(Into::into),
            effect: opt(effect),
            toleration_seconds: secs,
        }
    }

    const UNREACHABLE: &str = "node.kubernetes.io/unreachable";

    #[test]
    fn tolerations_match_as_kubernetes_matches_them() {
        let t = taint("k", Some("v"), "NoExecute");
        let cases = [
            ("exists on the key", tol("k", "Exists", None, "", None), true),
            ("exists on everything", tol("", "Exists", None, "", None), true),
            ("equal value", tol("k", "Equal", Some("v"), "NoExecute", None), true),
            ("default operator is equal", tol("k", "", Some("v"), "", None), true),
            ("other value", tol("k", "Equal", Some("w"), "", None), false),
            ("other key", tol("j", "Exists", None, "", None), false),
            ("other effect", tol("k", "Exists", None, "NoSchedule", None), false),
            ("unknown operator", tol("k", "Gt", Some("v"), "", None), false),
        ];
        for (name, toleration, want) in cases {
            assert_eq!(tolerates(&toleration, &t), want, "{name}");
        }
    }

    #[test]
    fn eviction_follows_the_taint_manager() {
        let unreachable = vec![taint(UNREACHABLE, None, "NoExecute")];
        let both = vec![taint(UNREACHABLE, None, "NoExecute"), taint("maintenance", None, "NoExecute")];
        let cases: Vec<(&str, Vec<Toleration>, &Vec<Taint>, Eviction)> = vec![
            ("no toleration: now", vec![], &unreachable, Eviction::Now),
            (
                "default 300s toleration: at taint + 300s",
                vec![tol(UNREACHABLE, "Exists", None, "NoExecute", Some(300))],
                &unreachable,
                Eviction::At(at(300)),
            ),
            (
                "zero seconds: now",
                vec![tol(UNREACHABLE, "Exists", None, "NoExecute", Some(0))],
                &unreachable,
                Eviction::Now,
            ),
            ("forever: never", vec![tol(UNREACHABLE, "Exists", None, "", None)], &unreachable, Eviction::Never),
            (
                "one taint untolerated: now",
                vec![tol(UNREACHABLE, "Exists", None, "NoExecute", Some(3600))],
                &both,
                Eviction::Now,
            ),
            (
                "the shortest needed toleration wins",
                vec![
                    tol(UNREACHABLE, "Exists", None, "NoExecute", Some(3600)),
                    tol("maintenance", "Exists", None, "", Some(60)),
                ],
                &both,
                Eviction::At(at(60)),
            ),
            (
                "a toleration the pod does not need does not count",
                vec![
                    tol(UNREACHABLE, "Exists", None, "NoExecute", Some(3600)),
                    tol("unrelated", "Exists", None, "", Some(1)),
                ],
                &unreachable,
                Eviction::At(at(3600)),
            ),
        ];
        for (name, tolerations, taints, want) in cases {
            assert_eq!(decide(&tolerations, taints, at(0), at(10)), want, "{name}");
        }
    }

    #[test]
    fn only_no_execute_taints_evict() {
        let taints = vec![taint(UNREACHABLE, None, "NoSchedule")];
        assert_eq!(decide(&[], &taints, at(0), at(10)), Eviction::Never);
    }

    #[test]
    fn an_expired_toleration_evicts_now_and_a_huge_one_never() {
        let taints = vec![taint(UNREACHABLE, None, "NoExecute")];
        let short = vec![tol(UNREACHABLE, "Exists", None, "", Some(5))];
        assert_eq!(decide(&short, &taints, at(0), at(5)), Eviction::Now);
        let huge = vec![tol(UNREACHABLE, "Exists", None, "", Some(i64::MAX))];
        assert_eq!(decide(&huge, &taints, at(0), at(5)), Eviction::Never);
    }

    #[test]
    fn the_clock_starts_at_the_earliest_taint_or_the_pods_creation() {
        let mut a = taint(UNREACHABLE, None, "NoExecute");
        a.time_added = Some(Time(at(20)));
        let mut b = taint("maintenance", None, "NoExecute");
        b.time_added = Some(Time(at(10)));
        let taints = vec![a, b, taint("x", None, "NoSchedule")];
        assert_eq!(tainted_since(&taints, Some(at(0)), at(99)), at(10));
        assert_eq!(tainted_since(&taints, Some(at(15)), at(99)), at(15));
        assert_eq!(tainted_since(&[taint("m", None, "NoExecute")], None, at(99)), at(99));
    }
}
