//! The deletion conditions the namespace controller keeps on a terminating namespace, computed from
//! one pass over its content (Kubernetes' namespaceConditionUpdater).

use k8s_openapi::api::core::v1::NamespaceCondition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use std::collections::BTreeMap;

pub const DISCOVERY_FAILURE: &str = "NamespaceDeletionDiscoveryFailure";
pub const GROUP_VERSION_PARSING_FAILURE: &str = "NamespaceDeletionGroupVersionParsingFailure";
pub const CONTENT_FAILURE: &str = "NamespaceDeletionContentFailure";
pub const CONTENT_REMAINING: &str = "NamespaceContentRemaining";
pub const FINALIZERS_REMAINING: &str = "NamespaceFinalizersRemaining";

/// Every condition type the controller maintains, in the order they are first added.
const TYPES: [&str; 5] =
    [DISCOVERY_FAILURE, GROUP_VERSION_PARSING_FAILURE, CONTENT_FAILURE, CONTENT_REMAINING, FINALIZERS_REMAINING];

/// What one pass over a terminating namespace's content found.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Report {
    /// Why discovery failed, if it did.
    pub discovery_error: Option<String>,
    /// Resources whose content could not be deleted, and why.
    pub errors: Vec<String>,
    /// Instances left per group resource (`pods.`, `deployments.apps`, as Kubernetes prints them).
    pub remaining: BTreeMap<String, usize>,
    /// Instances left per finalizer they carry.
    pub finalizers: BTreeMap<String, usize>,
    /// Seconds until what remains is expected to be gone; 0 when there is nothing to wait for.
    pub estimate: u64,
}

/// The failing conditions the report calls for (the others are set to their "ok" variant).
fn failing(report: &Report) -> Vec<(&'static str, &'static str, String)> {
    let mut out = Vec::new();
    if let Some(e) = &report.discovery_error {
        out.push((DISCOVERY_FAILURE, "DiscoveryFailed", e.clone()));
    }
    if !report.errors.is_empty() {
        let mut msgs = report.errors.clone();
        msgs.sort();
        let message = format!("Failed to delete all resource types, {} remaining: {}", msgs.len(), msgs.join(", "));
        out.push((CONTENT_FAILURE, "ContentDeletionFailed", message));
    }
    if !report.remaining.is_empty() {
        let parts: Vec<String> =
            report.remaining.iter().map(|(r, n)| format!("{r} has {n} resource instances")).collect();
        out.push((
            CONTENT_REMAINING,
            "SomeResourcesRemain",
            format!("Some resources are remaining: {}", parts.join(", ")),
        ));
    }
    if !report.finalizers.is_empty() {
        let parts: Vec<String> =
            report.finalizers.iter().map(|(f, n)| format!("{f} in {n} resource instances")).collect();
        let message = format!("Some finalizers are remaining: {}", parts.join(", "));
        out.push((FINALIZERS_REMAINING, "SomeFinalizerRemain", message));
    }
    out
}

fn ok_variant(type_: &str) -> (&'static str, &'static str) {
    match type_ {
        DISCOVERY_FAILURE => ("ResourcesDiscovered", "All resources successfully discovered"),
        GROUP_VERSION_PARSING_FAILURE => ("ParsedGroupVersions", "All legacy kube types successfully parsed"),
        CONTENT_FAILURE => ("ContentDeleted", "All content successfully deleted, may be waiting on finalization"),
        _ => ("ContentRemoved", "All content successfully removed"),
    }
}

/// The namespace's conditions after `report`, or `None` when nothing changed. A condition's
/// transition time moves only when its status flips.
pub fn update(existing: &[NamespaceCondition], report: &Report, now: Time) -> Option<Vec<NamespaceCondition>> {
    let failing = failing(report);
    let mut out = existing.to_vec();
    let mut changed = false;
    for type_ in TYPES {
        let (status, reason, message) = match failing.iter().find(|(t, _, _)| *t == type_) {
            Some((_, reason, message)) => ("True", reason.to_string(), message.clone()),
            None => {
                let (reason, message) = ok_variant(type_);
                ("False", reason.to_string(), message.to_string())
            }
        };
        match out.iter_mut().find(|c| c.type_ == type_) {
            None => {
                out.push(NamespaceCondition {
                    type_: type_.into(),
                    status: status.into(),
                    reason: Some(reason),
                    message: Some(message),
                    last_transition_time: Some(now.clone()),
                });
                changed = true;
            }
            Some(c) => {
                let same =
                    c.status == status && c.reason.as_ref() == Some(&reason) && c.message.as_ref() == Some(&message);
                if !same {
                    if c.status != status {
                        c.last_transition_time = Some(now.clone());
                    }
                    c.status = status.into();
                    c.reason = Some(reason);
                    c.message = Some(message);
                    changed = true;
                }
            }
        }
    }
    changed.then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> Time {
        Time(s.parse().expect("time"))
    }

    fn find<'a>(conds: &'a [NamespaceCondition], type_: &str) -> &'a NamespaceCondition {
        conds.iter().find(|c| c.type_ == type_).expect("condition present")
    }

    #[test]
    fn remaining_content_and_finalizers_are_reported_as_kubernetes_words_them() {
        let report = Report {
            remaining: BTreeMap::from([("pods.".into(), 2), ("replicasets.apps".into(), 1)]),
            finalizers: BTreeMap::from([("example.com/hold".into(), 1)]),
            estimate: 30,
            ..Report::default()
        };
        let conds = update(&[], &report, at("2025-01-01T00:00:00Z")).expect("all five added");
        let types: Vec<&str> = conds.iter().map(|c| c.type_.as_str()).collect();
        assert_eq!(types, TYPES);
        let remaining = find(&conds, CONTENT_REMAINING);
        assert_eq!(remaining.status, "True");
        assert_eq!(
            remaining.message.as_deref(),
            Some("Some resources are remaining: pods. has 2 resource instances, replicasets.apps has 1 resource instances")
        );
        assert_eq!(
            find(&conds, FINALIZERS_REMAINING).message.as_deref(),
            Some("Some finalizers are remaining: example.com/hold in 1 resource instances")
        );
        let discovered = find(&conds, DISCOVERY_FAILURE);
        assert_eq!((discovered.status.as_str(), discovered.reason.as_deref()), ("False", Some("ResourcesDiscovered")));
    }

    #[test]
    fn failures_flip_status_and_an_unchanged_report_changes_nothing() {
        let t0 = at("2025-01-01T00:00:00Z");
        let t1 = at("2025-01-01T00:01:00Z");
        let clean = update(&[], &Report::default(), t0.clone()).expect("added");
        assert_eq!(update(&clean, &Report::default(), t1.clone()), None);

        let report = Report { errors: vec!["b failed".into(), "a failed".into()], ..Report::default() };
        let failed = update(&clean, &report, t1.clone()).expect("changed");
        let c = find(&failed, CONTENT_FAILURE);
        assert_eq!(c.status, "True");
        assert_eq!(c.message.as_deref(), Some("Failed to delete all resource types, 2 remaining: a failed, b failed"));
        assert_eq!(c.last_transition_time.as_ref(), Some(&t1));
        assert_eq!(find(&failed, CONTENT_REMAINING).last_transition_time.as_ref(), Some(&t0), "untouched");

        let report = Report { discovery_error: Some("no route".into()), ..Report::default() };
        let c = update(&clean, &report, t1).expect("changed");
        assert_eq!(find(&c, DISCOVERY_FAILURE).reason.as_deref(), Some("DiscoveryFailed"));
    }
}
