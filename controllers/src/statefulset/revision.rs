//! A StatefulSet's ControllerRevisions, pure: the revision data (Kubernetes' `getPatch`: the pod
//! template as a strategic-merge patch that replaces it, what `kubectl rollout undo` applies), its
//! name `<set>-<hash>`, the template a stored revision holds, and which old revisions to prune.

use crate::deployment::hash::{fnv32a, safe_encode};
use crate::meta::controller_ref;
use k8s_openapi::api::apps::v1::{ControllerRevision, StatefulSet};
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use serde_json::{json, Value};
use std::collections::HashSet;

/// The label every pod and revision of a set carries with the revision's name.
pub const LABEL: &str = "controller-revision-hash";

/// `{"spec":{"template":{..., "$patch":"replace"}}}` for the set's current template.
pub fn data(set: &StatefulSet) -> Value {
    let template = &set.spec.template;
    let mut t = serde_json::to_value(template).unwrap_or(Value::Null);
    if let Some(obj) = t.as_object_mut() {
        obj.insert("$patch".into(), json!("replace"));
    }
    json!({"spec": {"template": t}})
}

/// Kubernetes' ControllerRevisionHash: FNV-32a over the data, then the collision count, printed in
/// decimal and safe encoded (kaji hashes the JSON bytes where Kubernetes hashes a Go dump).
pub fn hash(data: &Value, collision_count: Option<i32>) -> String {
    let mut bytes = serde_json::to_vec(data).unwrap_or_default();
    if let Some(c) = collision_count {
        bytes.extend_from_slice(&c.to_le_bytes());
    }
    safe_encode(&fnv32a(&bytes).to_string())
}

/// `<set>-<hash>`, the set's name cut so the whole fits Kubernetes' 253-character limit.
pub fn name(set_name: &str, hash: &str) -> String {
    let prefix: String = set_name.chars().take(223).collect();
    format!("{prefix}-{hash}")
}

/// A new revision of `set` with `data` and number `revision`, owned by the set and labelled with
/// the template's labels, as Kubernetes' history.NewControllerRevision.
pub fn new(set: &StatefulSet, data: Value, revision: i64) -> ControllerRevision {
    let collision = set.status.as_ref().and_then(|s| s.collision_count);
    let set_name = set.metadata.name.clone().unwrap_or_default();
    let hash = hash(&data, collision);
    let mut labels = set.spec.template.metadata.as_ref().and_then(|m| m.labels.clone()).unwrap_or_default();
    labels.insert(LABEL.into(), hash.clone());
    ControllerRevision {
        metadata: ObjectMeta {
            name: Some(name(&set_name, &hash)),
            namespace: set.metadata.namespace.clone(),
            labels: Some(labels),
            owner_references: Some(vec![controller_ref(set)]),
            ..ObjectMeta::default()
        },
        data: RawExtension(data),
        revision: Some(revision),
    }
}

/// Whether a stored revision holds exactly this data.
pub fn holds(rev: &ControllerRevision, data: &Value) -> bool {
    &rev.data.0 == data
}

/// The pod template a revision holds (its patch without the `$patch` directive).
pub fn template(rev: &ControllerRevision) -> Option<PodTemplateSpec> {
    let mut t = rev.data.0.get("spec")?.get("template")?.clone();
    t.as_object_mut()?.remove("$patch");
    serde_json::from_value(t).ok()
}

/// The number the next revision gets: one past the highest.
pub fn next_number(revs: &[&ControllerRevision]) -> i64 {
    revs.iter().map(|r| r.revision.unwrap_or(0)).max().unwrap_or(0) + 1
}

/// The revisions to delete so at most `limit` remain that neither the set's status nor a live pod
/// uses, oldest first (Kubernetes' truncateHistory).
pub fn to_prune<'a>(
    revs: &[&'a ControllerRevision],
    in_use: &HashSet<&str>,
    limit: i32,
) -> Vec<&'a ControllerRevision> {
    let mut unused: Vec<&ControllerRevision> =
        revs.iter().copied().filter(|r| !in_use.contains(r.metadata.name.as_deref().unwrap_or_default())).collect();
    let limit = usize::try_from(limit).unwrap_or(0);
    if unused.len() <= limit {
        return Vec::new();
    }
    unused.sort_by_key(|r| r.revision.unwrap_or(0));
    let excess = unused.len() - limit;
    unused.into_iter().take(excess).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::StatefulSetSpec;
    use k8s_openapi::api::core::v1::{Container, PodSpec};

    fn set(image: &str) -> StatefulSet {
        StatefulSet {
            metadata: ObjectMeta { name: Some("web".into()), uid: Some("u".into()), ..ObjectMeta::default() },
            spec: StatefulSetSpec {
                template: PodTemplateSpec {
                    metadata: Some(ObjectMeta {
                        labels: Some([("app".to_string(), "web".to_string())].into()),
                        ..ObjectMeta::default()
                    }),
                    spec: Some(PodSpec {
                        containers: vec![Container {
                            name: "c".into(),
                            image: Some(image.into()),
                            ..Container::default()
                        }],
                        ..PodSpec::default()
                    }),
                },
                ..StatefulSetSpec::default()
            },
            status: None,
        }
    }

    #[test]
    fn data_replaces_the_template_and_reads_back() {
        let s = set("nginx:1");
        let d = data(&s);
        assert_eq!(d["spec"]["template"]["$patch"], "replace");
        let rev = new(&s, d.clone(), 3);
        assert!(holds(&rev, &d));
        assert!(!holds(&rev, &data(&set("nginx:2"))));
        assert_eq!(template(&rev), Some(s.spec.template));
        assert_eq!(rev.revision, Some(3));
        let name = rev.metadata.name.expect("name");
        assert!(name.starts_with("web-"), "{name}");
        assert_eq!(rev.metadata.labels.expect("labels").get(LABEL).map(|h| format!("web-{h}")), Some(name));
        assert_eq!(rev.metadata.owner_references.expect("owner")[0].kind, "StatefulSet");
    }

    #[test]
    fn hash_changes_with_template_and_collisions() {
        let a = data(&set("a"));
        assert_eq!(hash(&a, None), hash(&a, None));
        assert_ne!(hash(&a, None), hash(&data(&set("b")), None));
        assert_ne!(hash(&a, None), hash(&a, Some(1)));
    }

    #[test]
    fn prunes_the_oldest_unused_revisions_beyond_the_limit() {
        let rev = |n: &str, r: i64| ControllerRevision {
            metadata: ObjectMeta { name: Some(n.into()), ..ObjectMeta::default() },
            data: RawExtension::default(),
            revision: Some(r),
        };
        let (a, b, c, d) = (rev("a", 1), rev("b", 2), rev("c", 3), rev("d", 4));
        let all = [&d, &b, &a, &c];
        let in_use: HashSet<&str> = ["d", "a"].into();
        let names = |v: Vec<&ControllerRevision>| {
            v.iter().map(|r| r.metadata.name.clone().unwrap_or_default()).collect::<Vec<_>>()
        };
        assert_eq!(names(to_prune(&all, &in_use, 1)), vec!["b"]);
        assert_eq!(names(to_prune(&all, &in_use, 0)), vec!["b", "c"]);
        assert!(to_prune(&all, &in_use, 10).is_empty());
        assert_eq!(next_number(&all), 5);
        assert_eq!(next_number(&[]), 1);
    }
}
