//! PersistentVolume, PersistentVolumeClaim and StorageClass defaults (`pkg/apis/core/v1/defaults.go`,
//! `pkg/apis/storage/v1/defaults.go`).

use serde_json::{Map, Value};

use super::json::{child_of, default_str};

pub(super) fn default_persistent_volume(obj: &mut Value) {
    let Some(m) = obj.as_object_mut() else { return };
    if let Some(spec) = child_of(m, "spec") {
        default_str(spec, "persistentVolumeReclaimPolicy", "Retain");
        default_str(spec, "volumeMode", "Filesystem");
        if let Some(hp) = spec.get_mut("hostPath").and_then(Value::as_object_mut) {
            default_str(hp, "type", "");
        }
    }
    if let Some(status) = child_of(m, "status") {
        default_str(status, "phase", "Pending");
    }
}

pub(super) fn default_persistent_volume_claim(obj: &mut Value) {
    let Some(m) = obj.as_object_mut() else { return };
    if let Some(spec) = child_of(m, "spec") {
        default_claim_spec(spec);
    }
    if let Some(status) = child_of(m, "status") {
        default_str(status, "phase", "Pending");
    }
}

/// SetDefaults_PersistentVolumeClaimSpec.
pub(super) fn default_claim_spec(spec: &mut Map<String, Value>) {
    default_str(spec, "volumeMode", "Filesystem");
}

pub(super) fn default_storage_class(obj: &mut Value) {
    let Some(m) = obj.as_object_mut() else { return };
    default_str(m, "reclaimPolicy", "Delete");
    default_str(m, "volumeBindingMode", "Immediate");
}

#[cfg(test)]
mod tests {

    use crate::defaults::test_support::defaulted;
    use serde_json::json;

    #[test]
    fn volumes_are_retained_filesystems_pending_a_claim() {
        let pv = defaulted(
            "PersistentVolume",
            json!({"spec": {"capacity": {"storage": "1Gi"}, "hostPath": {"path": "/data"}}}),
        );
        assert_eq!(pv["spec"]["persistentVolumeReclaimPolicy"], "Retain");
        assert_eq!(pv["spec"]["volumeMode"], "Filesystem");
        assert_eq!(pv["spec"]["hostPath"]["type"], "");
        assert_eq!(pv["status"]["phase"], "Pending");
        let pvc = defaulted("PersistentVolumeClaim", json!({"spec": {"accessModes": ["ReadWriteOnce"]}}));
        assert_eq!(pvc["spec"]["volumeMode"], "Filesystem");
        assert_eq!(pvc["status"]["phase"], "Pending");
    }

    #[test]
    fn storage_classes_delete_and_bind_immediately_unless_told() {
        let sc = defaulted("StorageClass", json!({"provisioner": "rancher.io/local-path"}));
        assert_eq!(
            (sc["reclaimPolicy"].as_str(), sc["volumeBindingMode"].as_str()),
            (Some("Delete"), Some("Immediate"))
        );
        let wffc = defaulted("StorageClass", json!({"volumeBindingMode": "WaitForFirstConsumer"}));
        assert_eq!(wffc["volumeBindingMode"], "WaitForFirstConsumer");
    }
}
