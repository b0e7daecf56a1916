//! A DaemonSet's history, pure: the ControllerRevision that records its template (the patch
//! `kubectl rollout undo` applies), which existing revisions match the current template, the next
//! revision number, and which old revisions the history limit lets go (Kubernetes'
//! `pkg/controller/daemon/update.go`).

use crate::deployment::hash;
use crate::meta::controller_ref;
use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use serde_json::{json, Value};
use std::collections::HashSet;

use super::plan::REVISION_HASH;

/// Kubernetes' default revisionHistoryLimit.
pub const DEFAULT_LIMIT: i32 = 10;

/// The revision data (getPatch): a strategic merge patch that replaces `spec.template` with the
/// DaemonSet's current template.
pub fn patch(ds: &DaemonSet) -> Value {
    let template = &ds.spec.template;
    let mut template = serde_json::to_value(template).unwrap_or(Value::Null);
    if let Value::Object(map) = &mut template {
        map.insert("$patch".into(), json!("replace"));
    }
    json!({"spec": {"template": template}})
}

/// The hash of the current template and collision count (ComputeHash), which names the revision.
pub fn template_hash(ds: &DaemonSet) -> String {
    let collisions = ds.status.as_ref().and_then(|s| s.collision_count);
    hash::compute(&ds.spec.template, collisions)
}

/// Whether a revision records the current template (Match).
pub fn matches(ds: &DaemonSet, rev: &ControllerRevision) -> bool {
    rev.data.0 == patch(ds)
}

/// The revision to create for the current template (snapshot).
pub fn snapshot(ds: &DaemonSet, revision: i64) -> ControllerRevision {
    let hash = template_hash(ds);
    let name = ds.metadata.name.clone().unwrap_or_default();
    let mut labels = ds.spec.template.metadata.as_ref().and_then(|m| m.labels.clone()).unwrap_or_default();
    labels.insert(REVISION_HASH.into(), hash.clone());
    ControllerRevision {
        metadata: ObjectMeta {
            name: Some(format!("{name}-{hash}")),
            namespace: ds.metadata.namespace.clone(),
            labels: Some(labels),
            annotations: ds.metadata.annotations.clone(),
            owner_references: Some(vec![controller_ref(ds)]),
            ..ObjectMeta::default()
        },
        data: RawExtension(patch(ds)),
        revision: Some(revision),
    }
}

/// The revisions sorted into those matching the current template and the rest (constructHistory).
pub fn split<'a>(
    ds: &DaemonSet,
    revisions: &[&'a ControllerRevision],
) -> (Vec<&'a ControllerRevision>, Vec<&'a ControllerRevision>) {
    revisions.iter().copied().partition(|r| matches(ds, r))
}

/// The highest revision number among `revisions` (0 for none).
pub fn max_revision(revisions: &[&ControllerRevision]) -> i64 {
    revisions.iter().map(|r| r.revision.unwrap_or(0)).max().unwrap_or(0)
}

/// Of several revisions matching the current template, the one kept: the highest revision, the
/// later one on a tie (dedupCurHistories).
pub fn keep<'a>(current: &[&'a ControllerRevision]) -> Option<&'a ControllerRevision> {
    current.iter().copied().reduce(|a, b| if b.revision >= a.revision { b } else { a })
}

/// The old revisions to delete (cleanupHistory): beyond the history limit, oldest first, never one
/// a live pod still carries the hash of.
pub fn to_delete<'a>(
    limit: Option<i32>,
    old: &[&'a ControllerRevision],
    live_hashes: &HashSet<String>,
) -> Vec<&'a ControllerRevision> {
    let keep = usize::try_from(limit.unwrap_or(DEFAULT_LIMIT)).unwrap_or(0);
    let mut kill = old.len().saturating_sub(keep);
    let mut sorted = old.to_vec();
    sorted.sort_by_key(|r| r.revision.unwrap_or(0));
    let mut out = Vec::new();
    for rev in sorted {
        if kill == 0 {
            break;
        }
        let hash = rev.metadata.labels.as_ref().and_then(|l| l.get(REVISION_HASH));
        if hash.is_some_and(|h| live_hashes.contains(h)) {
            continue;
        }
        out.push(rev);
        kill -= 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ds(image: &str) -> DaemonSet {
        serde_json::from_value(json!({
            "metadata": {"name": "d", "namespace": "n", "uid": "u"},
            "spec": {"selector": {"matchLabels": {"app": "d"}},
                "template": {"metadata": {"labels": {"app": "d"}}, "spec": {"containers": [{"name": "c", "image": image}]}}},
        }))
        .expect("ds")
    }

    fn rev(name: &str, revision: i64, hash: &str) -> ControllerRevision {
        let mut r = snapshot(&ds(name), revision);
        r.metadata.name = Some(name.into());
        r.metadata.labels = Some([(REVISION_HASH.to_string(), hash.to_string())].into());
        r
    }

    #[test]
    fn the_revision_is_a_patch_that_replaces_the_template() {
        let set = ds("a:1");
        let p = patch(&set);
        assert_eq!(p["spec"]["template"]["$patch"], "replace");
        assert_eq!(p["spec"]["template"]["spec"]["containers"][0]["image"], "a:1");
        let r = snapshot(&set, 4);
        let hash = template_hash(&set);
        assert_eq!(r.metadata.name, Some(format!("d-{hash}")));
        assert_eq!(r.metadata.labels.as_ref().and_then(|l| l.get(REVISION_HASH)), Some(&hash));
        assert_eq!(r.metadata.labels.as_ref().and_then(|l| l.get("app")).map(String::as_str), Some("d"));
        assert_eq!(r.revision, Some(4));
        assert!(matches(&set, &r));
        assert!(!matches(&ds("a:2"), &r));
    }

    #[test]
    fn the_kept_current_revision_is_the_highest() {
        let (a, b) = (rev("a:1", 2, "x"), rev("a:1", 5, "y"));
        assert_eq!(keep(&[&a, &b]).map(|r| r.revision.unwrap_or(0)), Some(5));
        assert_eq!(max_revision(&[&a, &b]), 5);
        assert_eq!(max_revision(&[]), 0);
    }

    #[test]
    fn cleanup_keeps_the_limit_and_revisions_pods_still_use() {
        let old: Vec<ControllerRevision> = (1..=4).map(|i| rev(&format!("r{i}"), i, &format!("h{i}"))).collect();
        let refs: Vec<&ControllerRevision> = old.iter().collect();
        let live: HashSet<String> = ["h1".to_string()].into();
        let gone: Vec<i64> = to_delete(Some(2), &refs, &live).iter().map(|r| r.revision.unwrap_or(0)).collect();
        assert_eq!(gone, vec![2, 3], "the oldest beyond the limit, skipping one in use");
        assert!(to_delete(None, &refs, &live).is_empty(), "the default limit is 10");
    }
}
