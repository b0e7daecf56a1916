//! Emptying a namespace: for every namespaced resource the apiserver serves, delete the collection
//! (Background propagation), list what is left, and estimate how long to wait for it — Kubernetes'
//! deleteAllContent. The decisions are pure functions; `delete_all` does the IO.

use super::conditions::Report;
use crate::discovery::{self, Served};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams};
use kube::discovery::verbs;
use std::collections::BTreeMap;

/// The wait assumed for objects held by finalizers.
pub const FINALIZER_ESTIMATE: u64 = 15;

/// What is left of one resource after its deletion was requested.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Left {
    pub count: usize,
    pub finalizers: BTreeMap<String, usize>,
    /// Seconds to wait for it.
    pub estimate: u64,
    /// Items remain with nothing expected to remove them: an error that is retried.
    pub unexpected: bool,
}

/// Judges the items left (each given by its finalizers), with `estimate` the resource's own
/// graceful-termination estimate.
pub fn assess(estimate: u64, items: &[Vec<String>]) -> Left {
    if items.is_empty() {
        return Left::default();
    }
    let mut finalizers = BTreeMap::new();
    for f in items.iter().flatten() {
        *finalizers.entry(f.clone()).or_insert(0) += 1;
    }
    let count = items.len();
    if estimate > 0 {
        return Left { count, finalizers, estimate, unexpected: false };
    }
    if !finalizers.is_empty() {
        return Left { count, finalizers, estimate: FINALIZER_ESTIMATE, unexpected: false };
    }
    Left { count, finalizers, estimate: 0, unexpected: true }
}

/// How long the namespace's pods may still take to terminate: the longest grace period of a pod
/// that has not finished, or 0 once that much time has passed since the namespace began deleting.
pub fn pods_estimate(pods: &[Pod], deleted_at: jiff::Timestamp, now: jiff::Timestamp) -> u64 {
    let longest = pods
        .iter()
        .filter(|p| !matches!(p.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Succeeded" | "Failed")))
        .filter_map(|p| p.spec.as_ref()?.termination_grace_period_seconds)
        .max()
        .unwrap_or(0);
    let longest = u64::try_from(longest).unwrap_or(0);
    let elapsed = u64::try_from(now.as_second() - deleted_at.as_second()).unwrap_or(0);
    if elapsed >= longest {
        0
    } else {
        longest
    }
}

/// Deletes everything in `namespace` and reports what is left.
pub async fn delete_all(client: &kube::Client, namespace: &str, deleted_at: jiff::Timestamp) -> Report {
    let mut report = Report::default();
    let served = match discovery::discover(client).await {
        Ok(served) => served,
        Err(e) => {
            report.discovery_error = Some(e.to_string());
            Vec::new()
        }
    };
    for s in served.iter().filter(|s| s.namespaced && s.supports(verbs::DELETE)) {
        let left = match delete_resource(client, s, namespace, deleted_at).await {
            Ok(left) => left,
            Err(e) => {
                report.errors.push(e.to_string());
                continue;
            }
        };
        report.estimate = report.estimate.max(left.estimate);
        if left.count > 0 {
            report.remaining.insert(format!("{}.{}", s.ar.plural, s.ar.group), left.count);
        }
        for (f, n) in left.finalizers {
            *report.finalizers.entry(f).or_insert(0) += n;
        }
        if left.unexpected {
            report.errors.push(format!(
                "unexpected items still remain in namespace: {namespace} for gvr: {{{} {} {}}}",
                s.ar.group, s.ar.version, s.ar.plural
            ));
        }
    }
    report
}

async fn delete_resource(
    client: &kube::Client,
    s: &Served,
    namespace: &str,
    deleted_at: jiff::Timestamp,
) -> Result<Left, kube::Error> {
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &s.ar);
    let estimate = if s.ar.group.is_empty() && s.ar.plural == "pods" {
        let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
        pods_estimate(&pods.list(&ListParams::default()).await?.items, deleted_at, jiff::Timestamp::now())
    } else {
        0
    };
    // The garbage collector must not hold anything back: content goes with Background propagation.
    let background = DeleteParams::background();
    let mut deleted = false;
    if s.supports(verbs::DELETE_COLLECTION) {
        match api.delete_collection(&background, &ListParams::default()).await {
            Ok(_) => deleted = true,
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 405 => {}
            Err(e) => return Err(e),
        }
    }
    if !s.supports(verbs::LIST) {
        return Ok(Left { estimate, ..Left::default() });
    }
    if !deleted {
        for item in api.list(&ListParams::default()).await?.items {
            let name = item.metadata.name.unwrap_or_default();
            match api.delete(&name, &background).await {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 404 || e.code == 405 => {}
                Err(e) => return Err(e),
            }
        }
    }
    let items = api.list(&ListParams::default()).await?.items;
    let finalizers: Vec<Vec<String>> = items.into_iter().map(|i| i.metadata.finalizers.unwrap_or_default()).collect();
    Ok(assess(estimate, &finalizers))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodSpec, PodStatus};

    fn pod(grace: i64, phase: &str) -> Pod {
        Pod {
            spec: Some(PodSpec { termination_grace_period_seconds: Some(grace), ..PodSpec::default() }),
            status: Some(PodStatus { phase: Some(phase.into()), ..PodStatus::default() }),
            ..Pod::default()
        }
    }

    fn t(s: &str) -> jiff::Timestamp {
        s.parse().expect("time")
    }

    #[test]
    fn nothing_left_means_nothing_to_wait_for() {
        assert_eq!(assess(30, &[]), Left::default());
    }

    #[test]
    fn what_is_left_is_waited_for_or_reported() {
        let graceful = assess(30, &[vec![]]);
        assert_eq!((graceful.count, graceful.estimate, graceful.unexpected), (1, 30, false));
        let held = assess(0, &[vec!["example.com/hold".into()], vec![]]);
        assert_eq!((held.estimate, held.finalizers.get("example.com/hold")), (FINALIZER_ESTIMATE, Some(&1)));
        assert!(assess(0, &[vec![]]).unexpected, "nothing should be holding it");
    }

    #[test]
    fn pods_are_given_their_longest_grace_period_from_the_namespace_deletion() {
        let deleted = t("2025-01-01T00:00:00Z");
        let pods = [pod(30, "Running"), pod(60, "Succeeded"), pod(10, "Pending")];
        assert_eq!(pods_estimate(&pods, deleted, t("2025-01-01T00:00:05Z")), 30, "finished pods do not count");
        assert_eq!(pods_estimate(&pods, deleted, t("2025-01-01T00:00:30Z")), 0, "the grace period has passed");
        assert_eq!(pods_estimate(&[], deleted, deleted), 0);
    }
}
