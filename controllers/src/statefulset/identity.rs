//! A StatefulSet pod's stable identity, pure: its ordinal name `<set>-<i>`, hostname and subdomain
//! (the headless Service's DNS name `<set>-<i>.<service>`), the pod-name and pod-index labels, and
//! its claims `<template>-<set>-<i>` from volumeClaimTemplates (Kubernetes' stateful_set_utils).

use super::revision;
use crate::meta::controller_ref;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{
    PersistentVolumeClaim, PersistentVolumeClaimVolumeSource, Pod, PodTemplateSpec, Volume,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

pub const POD_NAME_LABEL: &str = "statefulset.kubernetes.io/pod-name";
pub const POD_INDEX_LABEL: &str = "apps.kubernetes.io/pod-index";

/// The ordinal of a pod named `<set>-<n>`, `None` for a pod that is not a member of this set.
pub fn ordinal(set_name: &str, pod_name: &str) -> Option<i32> {
    let (parent, n) = pod_name.rsplit_once('-')?;
    if parent != set_name || n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    n.parse().ok()
}

pub fn pod_name(set: &StatefulSet, ordinal: i32) -> String {
    format!("{}-{ordinal}", set.metadata.name.as_deref().unwrap_or_default())
}

/// The name of a claim from template `claim` for the pod with this ordinal.
pub fn claim_name(set: &StatefulSet, claim: &PersistentVolumeClaim, ordinal: i32) -> String {
    let template = claim.metadata.name.as_deref().unwrap_or_default();
    format!("{template}-{}", pod_name(set, ordinal))
}

/// The claims the pod with this ordinal mounts: each template named for the pod, labelled with the
/// set's matchLabels. They have no owner: kept when pods and the set go, as Kubernetes' default
/// Retain policy.
pub fn claims(set: &StatefulSet, ordinal: i32) -> Vec<PersistentVolumeClaim> {
    let match_labels = set.spec.selector.match_labels.clone().unwrap_or_default();
    set.spec
        .volume_claim_templates
        .iter()
        .flatten()
        .map(|t| {
            let mut labels = t.metadata.labels.clone().unwrap_or_default();
            labels.extend(match_labels.clone());
            PersistentVolumeClaim {
                metadata: ObjectMeta {
                    name: Some(claim_name(set, t, ordinal)),
                    namespace: set.metadata.namespace.clone(),
                    labels: Some(labels),
                    annotations: t.metadata.annotations.clone(),
                    ..ObjectMeta::default()
                },
                spec: t.spec.clone(),
                status: None,
            }
        })
        .collect()
}

/// The pod with this ordinal from `template` at revision `revision_name`.
pub fn new_pod(set: &StatefulSet, template: &PodTemplateSpec, revision_name: &str, ordinal: i32) -> Pod {
    let tmeta = template.metadata.clone().unwrap_or_default();
    let name = pod_name(set, ordinal);
    let mut labels = tmeta.labels.unwrap_or_default();
    labels.insert(POD_NAME_LABEL.into(), name.clone());
    labels.insert(POD_INDEX_LABEL.into(), ordinal.to_string());
    labels.insert(revision::LABEL.into(), revision_name.into());
    let mut spec = template.spec.clone().unwrap_or_default();
    spec.hostname = Some(name.clone());
    spec.subdomain = set.spec.service_name.clone().filter(|s| !s.is_empty());
    let templates = set.spec.volume_claim_templates.as_ref();
    let mut volumes: Vec<Volume> = spec.volumes.take().unwrap_or_default();
    for t in templates.into_iter().flatten() {
        let vol_name = t.metadata.name.clone().unwrap_or_default();
        volumes.retain(|v| v.name != vol_name);
        volumes.push(Volume {
            name: vol_name,
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: claim_name(set, t, ordinal),
                read_only: None,
            }),
            ..Volume::default()
        });
    }
    spec.volumes = (!volumes.is_empty()).then_some(volumes);
    Pod {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: set.metadata.namespace.clone(),
            labels: Some(labels),
            annotations: tmeta.annotations,
            finalizers: tmeta.finalizers,
            owner_references: Some(vec![controller_ref(set)]),
            ..ObjectMeta::default()
        },
        spec: Some(spec),
        status: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn set() -> StatefulSet {
        serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "shop", "uid": "u"},
            "spec": {
                "serviceName": "web",
                "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}}, "spec": {
                    "containers": [{"name": "c", "image": "i"}],
                    "volumes": [{"name": "data", "emptyDir": {}}, {"name": "cfg", "emptyDir": {}}]}},
                "volumeClaimTemplates": [{"metadata": {"name": "data", "labels": {"tier": "db"}},
                    "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}]
            }
        }))
        .expect("valid set")
    }

    #[test]
    fn ordinals_parse_only_for_members() {
        assert_eq!(ordinal("web", "web-0"), Some(0));
        assert_eq!(ordinal("web", "web-12"), Some(12));
        assert_eq!(ordinal("web", "web-db-1"), None);
        assert_eq!(ordinal("web-db", "web-db-1"), Some(1));
        assert_eq!(ordinal("web", "web-"), None);
        assert_eq!(ordinal("web", "web-x1"), None);
        assert_eq!(ordinal("web", "other-1"), None);
    }

    #[test]
    fn pods_carry_their_identity_and_claims() {
        let s = set();
        let template = s.spec.template.clone();
        let pod = new_pod(&s, &template, "web-abc", 2);
        assert_eq!(pod.metadata.name.as_deref(), Some("web-2"));
        let labels = pod.metadata.labels.expect("labels");
        assert_eq!(labels.get(POD_NAME_LABEL).map(String::as_str), Some("web-2"));
        assert_eq!(labels.get(POD_INDEX_LABEL).map(String::as_str), Some("2"));
        assert_eq!(labels.get(revision::LABEL).map(String::as_str), Some("web-abc"));
        assert_eq!(labels.get("app").map(String::as_str), Some("web"));
        let spec = pod.spec.expect("spec");
        assert_eq!((spec.hostname.as_deref(), spec.subdomain.as_deref()), (Some("web-2"), Some("web")));
        let vols: Vec<(String, Option<String>)> = spec
            .volumes
            .expect("volumes")
            .into_iter()
            .map(|v| (v.name, v.persistent_volume_claim.map(|c| c.claim_name)))
            .collect();
        assert_eq!(vols, vec![("cfg".into(), None), ("data".into(), Some("data-web-2".into()))]);
        assert_eq!(pod.metadata.owner_references.expect("owner")[0].name, "web");
    }

    #[test]
    fn claims_are_named_for_the_pod_and_labelled_with_the_selector() {
        let c = claims(&set(), 1);
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].metadata.name.as_deref(), Some("data-web-1"));
        assert_eq!(c[0].metadata.namespace.as_deref(), Some("shop"));
        let labels = c[0].metadata.labels.clone().expect("labels");
        assert_eq!(labels.get("app").map(String::as_str), Some("web"));
        assert_eq!(labels.get("tier").map(String::as_str), Some("db"));
        assert!(c[0].metadata.owner_references.is_none(), "retained by default");
    }
}
