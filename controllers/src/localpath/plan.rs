//! The local-path decisions, pure: the default StorageClass, the PersistentVolume for a claim on
//! its selected node (a hostPath directory `<dir>/<pv>_<namespace>_<claim>` with node affinity to
//! that node, pre-bound to the claim, as Rancher's local-path-provisioner makes it), what a volume
//! whose claim is gone needs, and the helper pod that removes a directory on its node.

use k8s_openapi::api::core::v1::{
    Container, HostPathVolumeSource, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, ObjectReference,
    PersistentVolume, PersistentVolumeClaim, PersistentVolumeSpec, Pod, PodSpec, Toleration, Volume, VolumeMount,
    VolumeNodeAffinity,
};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use std::collections::BTreeMap;

/// The provisioner name on the classes this controller serves.
pub const PROVISIONER: &str = "kaji.io/local-path";
/// The default class, named as k3s names it.
pub const CLASS: &str = "local-path";
pub const SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";
pub const PROVISIONED_BY: &str = "pv.kubernetes.io/provisioned-by";
pub const DEFAULT_CLASS: &str = "storageclass.kubernetes.io/is-default-class";
/// Where the node's directory goes in a template of `--local-path-dir`.
pub const NODE_PLACEHOLDER: &str = "{node}";

/// The `local-path` StorageClass: default, WaitForFirstConsumer, reclaim Delete.
pub fn default_class() -> StorageClass {
    StorageClass {
        metadata: ObjectMeta {
            name: Some(CLASS.into()),
            annotations: Some([(DEFAULT_CLASS.to_string(), "true".to_string())].into()),
            ..ObjectMeta::default()
        },
        provisioner: PROVISIONER.into(),
        reclaim_policy: Some("Delete".into()),
        volume_binding_mode: Some("WaitForFirstConsumer".into()),
        ..StorageClass::default()
    }
}

/// The directory holding a node's volumes: the template with `{node}` replaced.
pub fn node_root(template: &str, node: &str) -> String {
    template.replace(NODE_PLACEHOLDER, node)
}

/// The PV name for a claim (`pvc-<claim uid>`, as external provisioners name them).
pub fn volume_name(claim: &PersistentVolumeClaim) -> String {
    format!("pvc-{}", claim.metadata.uid.as_deref().unwrap_or_default())
}

/// The volume for `claim` of class `class` on `node`, with its directory under `root`.
pub fn volume_for(claim: &PersistentVolumeClaim, class: &StorageClass, node: &str, root: &str) -> PersistentVolume {
    let name = volume_name(claim);
    let ns = claim.metadata.namespace.clone().unwrap_or_default();
    let claim_name = claim.metadata.name.clone().unwrap_or_default();
    let spec = claim.spec.clone().unwrap_or_default();
    let capacity = spec.resources.as_ref().and_then(|r| r.requests.as_ref()?.get("storage").cloned());
    let path = format!("{}/{name}_{ns}_{claim_name}", root.trim_end_matches('/'));
    PersistentVolume {
        metadata: ObjectMeta {
            name: Some(name),
            annotations: Some([(PROVISIONED_BY.to_string(), PROVISIONER.to_string())].into()),
            ..ObjectMeta::default()
        },
        spec: Some(PersistentVolumeSpec {
            access_modes: spec.access_modes.clone(),
            capacity: capacity.map(|q| BTreeMap::from([("storage".to_string(), q)])),
            claim_ref: Some(ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("PersistentVolumeClaim".into()),
                namespace: Some(ns),
                name: Some(claim_name),
                uid: claim.metadata.uid.clone(),
                ..ObjectReference::default()
            }),
            host_path: Some(HostPathVolumeSource { path, type_: Some("DirectoryOrCreate".into()) }),
            node_affinity: Some(VolumeNodeAffinity {
                required: Some(NodeSelector {
                    node_selector_terms: vec![NodeSelectorTerm {
                        match_expressions: Some(vec![NodeSelectorRequirement {
                            key: "kubernetes.io/hostname".into(),
                            operator: "In".into(),
                            values: Some(vec![node.to_string()]),
                        }]),
                        match_fields: None,
                    }],
                }),
            }),
            persistent_volume_reclaim_policy: Some(class.reclaim_policy.clone().unwrap_or_else(|| "Delete".into())),
            storage_class_name: class.metadata.name.clone(),
            volume_mode: spec.volume_mode.clone(),
            ..PersistentVolumeSpec::default()
        }),
        status: None,
    }
}

/// The node a volume lives on (from its node affinity) and its directory.
pub fn placement(pv: &PersistentVolume) -> Option<(String, String)> {
    let spec = pv.spec.as_ref()?;
    let path = spec.host_path.as_ref()?.path.clone();
    let terms = &spec.node_affinity.as_ref()?.required.as_ref()?.node_selector_terms;
    let node = terms
        .iter()
        .flat_map(|t| t.match_expressions.iter().flatten())
        .find(|r| r.key == "kubernetes.io/hostname" && r.operator == "In")?
        .values
        .as_ref()?
        .first()?
        .clone();
    Some((node, path))
}

/// What a provisioned volume needs now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VolumeNext {
    /// Its claim exists (or it is not ours): nothing.
    Keep,
    /// Its claim is gone and the policy keeps it: phase Released.
    Release,
    /// Its claim is gone and the policy deletes it: remove its directory on the node, then it.
    Reclaim,
}

/// Decides for one of our volumes, given whether the claim it was made for (by uid) still exists.
pub fn volume_next(pv: &PersistentVolume, claim_exists: bool) -> VolumeNext {
    let ours =
        pv.metadata.annotations.as_ref().and_then(|a| a.get(PROVISIONED_BY)).map(String::as_str) == Some(PROVISIONER);
    if !ours || claim_exists || pv.metadata.deletion_timestamp.is_some() {
        return VolumeNext::Keep;
    }
    let policy = pv.spec.as_ref().and_then(|s| s.persistent_volume_reclaim_policy.as_deref()).unwrap_or("Delete");
    match policy {
        "Delete" => VolumeNext::Reclaim,
        _ if pv.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Released") => VolumeNext::Keep,
        _ => VolumeNext::Release,
    }
}

/// A pod in `namespace` that mounts `claim` and has not terminated (`ns/name`), if any.
pub fn pod_using(pods: &[std::sync::Arc<Pod>], namespace: &str, claim: &str) -> Option<String> {
    pods.iter()
        .filter(|p| p.metadata.namespace.as_deref() == Some(namespace))
        .filter(|p| !matches!(p.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Succeeded" | "Failed")))
        .find(|p| {
            let volumes = p.spec.as_ref().and_then(|s| s.volumes.as_ref());
            volumes
                .into_iter()
                .flatten()
                .any(|v| v.persistent_volume_claim.as_ref().is_some_and(|c| c.claim_name == claim))
        })
        .map(|p| format!("{namespace}/{}", p.metadata.name.as_deref().unwrap_or_default()))
}

/// The helper pod that removes `path` on `node` (Rancher's helper-pod-delete): the parent
/// directory mounted, `rm -rf` of the volume's own directory, pinned to the node, tolerating all.
/// Only a directory directly under the node's provisioning `root` (`--local-path-dir`) is ever
/// removed, whatever a volume that claims to be ours says: no other path, no `.` or `..`.
pub fn cleanup_pod(pv_name: &str, namespace: &str, node: &str, root: &str, path: &str, image: &str) -> Option<Pod> {
    let clean = |p: &str| -> Option<Vec<String>> {
        let parts: Vec<String> = p.split('/').filter(|c| !c.is_empty()).map(String::from).collect();
        (p.starts_with('/') && parts.iter().all(|c| c != "." && c != "..")).then_some(parts)
    };
    let (root_parts, mut parts) = (clean(root)?, clean(path)?);
    if parts.len() != root_parts.len() + 1 || !parts.starts_with(&root_parts) {
        return None;
    }
    let dir = parts.pop()?;
    let parent = format!("/{}", parts.join("/"));
    Some(Pod {
        metadata: ObjectMeta {
            name: Some(helper_name(pv_name)),
            namespace: Some(namespace.into()),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            node_name: Some(node.into()),
            restart_policy: Some("Never".into()),
            tolerations: Some(vec![Toleration { operator: Some("Exists".into()), ..Toleration::default() }]),
            containers: vec![Container {
                name: "helper-pod".into(),
                image: Some(image.into()),
                command: Some(vec!["rm".into(), "-rf".into(), format!("/data/{dir}")]),
                volume_mounts: Some(vec![VolumeMount {
                    name: "data".into(),
                    mount_path: "/data".into(),
                    ..VolumeMount::default()
                }]),
                ..Container::default()
            }],
            volumes: Some(vec![Volume {
                name: "data".into(),
                host_path: Some(HostPathVolumeSource { path: parent, type_: Some("DirectoryOrCreate".into()) }),
                ..Volume::default()
            }]),
            ..PodSpec::default()
        }),
        status: None,
    })
}

pub fn helper_name(pv_name: &str) -> String {
    format!("helper-pod-delete-{pv_name}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn claim() -> PersistentVolumeClaim {
        serde_json::from_value(json!({
            "metadata": {"name": "data-web-0", "namespace": "shop", "uid": "1234"},
            "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "local-path",
                "resources": {"requests": {"storage": "1Gi"}}}
        }))
        .expect("claim")
    }

    #[test]
    fn a_volume_is_a_directory_on_the_selected_node_bound_to_its_claim() {
        let root = node_root("/var/lab/local-path/{node}", "node-2");
        assert_eq!(root, "/var/lab/local-path/node-2");
        let pv = volume_for(&claim(), &default_class(), "node-2", &root);
        assert_eq!(pv.metadata.name.as_deref(), Some("pvc-1234"));
        let spec = pv.spec.clone().expect("spec");
        assert_eq!(spec.host_path.expect("hostPath").path, "/var/lab/local-path/node-2/pvc-1234_shop_data-web-0");
        let claim_ref = spec.claim_ref.expect("claimRef");
        assert_eq!((claim_ref.name.as_deref(), claim_ref.uid.as_deref()), (Some("data-web-0"), Some("1234")));
        assert_eq!(spec.capacity.expect("capacity")["storage"].0, "1Gi");
        assert_eq!(spec.persistent_volume_reclaim_policy.as_deref(), Some("Delete"));
        assert_eq!(spec.storage_class_name.as_deref(), Some("local-path"));
        assert_eq!(
            placement(&pv),
            Some(("node-2".into(), "/var/lab/local-path/node-2/pvc-1234_shop_data-web-0".into()))
        );
    }

    #[test]
    fn a_volume_without_its_claim_is_reclaimed_or_released() {
        let mut pv = volume_for(&claim(), &default_class(), "n", "/d");
        assert_eq!(volume_next(&pv, true), VolumeNext::Keep);
        assert_eq!(volume_next(&pv, false), VolumeNext::Reclaim);
        pv.spec.as_mut().expect("spec").persistent_volume_reclaim_policy = Some("Retain".into());
        assert_eq!(volume_next(&pv, false), VolumeNext::Release);
        pv.status = Some(k8s_openapi::api::core::v1::PersistentVolumeStatus {
            phase: Some("Released".into()),
            ..Default::default()
        });
        assert_eq!(volume_next(&pv, false), VolumeNext::Keep, "released once");
        pv.metadata.annotations = None;
        assert_eq!(volume_next(&pv, false), VolumeNext::Keep, "not ours");
    }

    #[test]
    fn a_running_pod_keeps_its_claims_data() {
        let pod = |name: &str, phase: &str| {
            std::sync::Arc::new(
                serde_json::from_value::<Pod>(serde_json::json!({
                    "metadata": {"name": name, "namespace": "ns"},
                    "spec": {"containers": [], "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "data-web-0"}}]},
                    "status": {"phase": phase}}))
                .expect("pod"),
            )
        };
        assert_eq!(pod_using(&[pod("web-0", "Running")], "ns", "data-web-0").as_deref(), Some("ns/web-0"));
        assert_eq!(pod_using(&[pod("web-0", "Succeeded"), pod("job", "Failed")], "ns", "data-web-0"), None);
        assert_eq!(pod_using(&[pod("web-0", "Running")], "other", "data-web-0"), None);
        assert_eq!(pod_using(&[pod("web-0", "Running")], "ns", "data-web-1"), None);
    }

    #[test]
    fn the_cleanup_pod_removes_only_the_volume_directory_on_its_node() {
        let pod =
            cleanup_pod("pvc-1", "kube-system", "node-2", "/d/node-2", "/d/node-2/pvc-1_ns_c", "busybox").expect("pod");
        let spec = pod.spec.expect("spec");
        assert_eq!(spec.node_name.as_deref(), Some("node-2"));
        assert_eq!(spec.containers[0].command.clone().expect("cmd"), vec!["rm", "-rf", "/data/pvc-1_ns_c"]);
        assert_eq!(spec.volumes.expect("vols")[0].host_path.clone().expect("hp").path, "/d/node-2");
        for outside in
            ["/", "/d/..", "/d/node-2", "/etc", "/d/node-2/../../etc", "/d/node-2/x/y", "d/node-2/x", "/d/node-2/.."]
        {
            assert!(cleanup_pod("pvc-1", "ns", "n", "/d/node-2", outside, "busybox").is_none(), "{outside}");
        }
        let trailing = cleanup_pod("pvc-1", "ns", "n", "/d/node-2/", "/d//node-2/v/", "busybox").expect("pod");
        assert_eq!(
            trailing.spec.expect("spec").volumes.expect("vols")[0].host_path.clone().expect("hp").path,
            "/d/node-2"
        );
    }
}
