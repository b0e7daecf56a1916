//! PersistentVolume, PersistentVolumeClaim and StorageClass rows and columns.

use serde_json::{json, Value};

use super::columns::{Column, AGE, NAME};
use super::obj::Obj;

pub(super) fn columns(kind: &str) -> Option<Vec<Column>> {
    Some(match kind {
        "PersistentVolume" => vec![
            NAME,
            ("Capacity", "string", "", 0, "capacity is the description of the persistent volume's resources and capacity. More info: https://kubernetes.io/docs/concepts/storage/persistent-volumes#capacity"),
            ("Access Modes", "string", "", 0, "accessModes contains all ways the volume can be mounted. More info: https://kubernetes.io/docs/concepts/storage/persistent-volumes#access-modes"),
            ("Reclaim Policy", "string", "", 0, "persistentVolumeReclaimPolicy defines what happens to a persistent volume when released from its claim. Valid options are Retain (default for manually created PersistentVolumes), Delete (default for dynamically provisioned PersistentVolumes), and Recycle (deprecated). Recycle must be supported by the volume plugin underlying this PersistentVolume. More info: https://kubernetes.io/docs/concepts/storage/persistent-volumes#reclaiming"),
            ("Status", "string", "", 0, "phase indicates if a volume is available, bound to a claim, or released by a claim. More info: https://kubernetes.io/docs/concepts/storage/persistent-volumes#phase"),
            ("Claim", "string", "", 0, "claimRef is part of a bi-directional binding between PersistentVolume and PersistentVolumeClaim. Expected to be non-nil when bound. claim.VolumeName is the authoritative bind between PV and PVC. More info: https://kubernetes.io/docs/concepts/storage/persistent-volumes#binding"),
            ("StorageClass", "string", "", 0, "StorageClass of the pv"),
            ("VolumeAttributesClass", "string", "", 0, "VolumeAttributesClass of the pv"),
            ("Reason", "string", "", 0, "reason is a brief CamelCase string that describes any failure and is meant for machine parsing and tidy display in the CLI."),
            AGE,
            ("VolumeMode", "string", "", 1, "volumeMode defines if a volume is intended to be used with a formatted filesystem or to remain in raw block state. Value of Filesystem is implied when not included in spec."),
        ],
        "PersistentVolumeClaim" => vec![
            NAME,
            ("Status", "string", "", 0, "phase represents the current phase of PersistentVolumeClaim."),
            ("Volume", "string", "", 0, "volumeName is the binding reference to the PersistentVolume backing this claim."),
            ("Capacity", "string", "", 0, "capacity represents the actual resources of the underlying volume."),
            ("Access Modes", "string", "", 0, "accessModes contains the actual access modes the volume backing the PVC has. More info: https://kubernetes.io/docs/concepts/storage/persistent-volumes#access-modes-1"),
            ("StorageClass", "string", "", 0, "StorageClass of the pvc"),
            ("VolumeAttributesClass", "string", "", 0, "VolumeAttributesClass of the pvc"),
            AGE,
            ("VolumeMode", "string", "", 1, "volumeMode defines what type of volume is required by the claim. Value of Filesystem is implied when not included in claim spec."),
        ],
        "StorageClass" => vec![
            NAME,
            ("Provisioner", "string", "", 0, "provisioner indicates the type of the provisioner."),
            ("ReclaimPolicy", "string", "", 0, "reclaimPolicy controls the reclaimPolicy for dynamically provisioned PersistentVolumes of this storage class. Defaults to Delete."),
            ("VolumeBindingMode", "string", "", 0, "volumeBindingMode indicates how PersistentVolumeClaims should be provisioned and bound.  When unset, VolumeBindingImmediate is used. This field is only honored by servers that enable the VolumeScheduling feature."),
            ("AllowVolumeExpansion", "string", "", 0, "allowVolumeExpansion shows whether the storage class allow volume expand."),
            AGE,
        ],
        _ => return None,
    })
}

/// The annotation that marks a StorageClass as the cluster's default.
pub const DEFAULT_CLASS_ANNOTATION: &str = "storageclass.kubernetes.io/is-default-class";
const BETA_CLASS_ANNOTATION: &str = "volume.beta.kubernetes.io/storage-class";

pub(super) fn cells(kind: &str, o: Obj<'_>, name: Value, age: Value) -> Option<Vec<Value>> {
    let deleting = o.get("metadata.deletionTimestamp").is_some_and(|d| !d.is_null());
    let unset = |path: &str| o.get(path).and_then(Value::as_str).unwrap_or("<unset>").to_owned();
    Some(match kind {
        "PersistentVolume" => {
            let claim = match o.get("spec.claimRef") {
                Some(r) if !r.is_null() => format!("{}/{}", Obj(r).str("namespace"), Obj(r).str("name")),
                _ => String::new(),
            };
            let phase = if deleting { "Terminating" } else { o.str("status.phase") };
            vec![
                name,
                json!(quantity(o.get("spec.capacity.storage"))),
                json!(access_modes(o.list("spec.accessModes"))),
                json!(o.str("spec.persistentVolumeReclaimPolicy")),
                json!(phase),
                json!(claim),
                json!(class_of(o)),
                json!(unset("spec.volumeAttributesClassName")),
                json!(o.str("status.reason")),
                age,
                json!(unset("spec.volumeMode")),
            ]
        }
        "PersistentVolumeClaim" => {
            let phase = if deleting { "Terminating" } else { o.str("status.phase") };
            let bound = !o.str("spec.volumeName").is_empty();
            let (capacity, modes) = if bound {
                (quantity(o.get("status.capacity.storage")), access_modes(o.list("status.accessModes")))
            } else {
                (String::new(), String::new())
            };
            vec![
                name,
                json!(phase),
                json!(o.str("spec.volumeName")),
                json!(capacity),
                json!(modes),
                json!(class_of(o)),
                json!(unset("spec.volumeAttributesClassName")),
                age,
                json!(unset("spec.volumeMode")),
            ]
        }
        "StorageClass" => {
            let mut shown = o.str("metadata.name").to_owned();
            if is_default_class(o.0) {
                shown.push_str(" (default)");
            }
            let reclaim = o.get("reclaimPolicy").and_then(Value::as_str).unwrap_or("Delete");
            let binding = o.get("volumeBindingMode").and_then(Value::as_str).unwrap_or("Immediate");
            vec![
                json!(shown),
                json!(o.str("provisioner")),
                json!(reclaim),
                json!(binding),
                json!(o.bool("allowVolumeExpansion")),
                age,
            ]
        }
        _ => return None,
    })
}

/// Whether a StorageClass carries the default annotation (also the beta spelling).
pub fn is_default_class(sc: &Value) -> bool {
    let annotations = Obj(sc).map("metadata.annotations");
    [DEFAULT_CLASS_ANNOTATION, "storageclass.beta.kubernetes.io/is-default-class"]
        .iter()
        .any(|k| annotations.get(*k).and_then(Value::as_str) == Some("true"))
}

/// `GetPersistentVolume(Claim)Class`: the beta annotation, else `spec.storageClassName`.
fn class_of(o: Obj<'_>) -> String {
    match o.map("metadata.annotations").get(BETA_CLASS_ANNOTATION).and_then(Value::as_str) {
        Some(c) => c.to_owned(),
        None => o.str("spec.storageClassName").to_owned(),
    }
}

fn quantity(v: Option<&Value>) -> String {
    match v {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        _ => "0".to_owned(),
    }
}

/// `GetAccessModesAsString`: RWO, ROX, RWX, RWOP in that order, each once.
fn access_modes(modes: &[Value]) -> String {
    let has = |m: &str| modes.iter().any(|v| v.as_str() == Some(m));
    [("ReadWriteOnce", "RWO"), ("ReadOnlyMany", "ROX"), ("ReadWriteMany", "RWX"), ("ReadWriteOncePod", "RWOP")]
        .iter()
        .filter(|(m, _)| has(m))
        .map(|(_, short)| *short)
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::table::test_support::cell_strings;

    #[test]
    fn volumes_and_claims_print_as_kubectl_shows_them() {
        let pv = json!({"metadata": {"name": "pvc-1"}, "spec": {"capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"], "persistentVolumeReclaimPolicy": "Delete", "storageClassName": "local-path",
            "claimRef": {"namespace": "d", "name": "data-web-0"}, "volumeMode": "Filesystem"}, "status": {"phase": "Bound"}});
        assert_eq!(
            cell_strings("PersistentVolume", &pv),
            [
                "pvc-1",
                "1Gi",
                "RWO",
                "Delete",
                "Bound",
                "d/data-web-0",
                "local-path",
                "<unset>",
                "",
                "<unknown>",
                "Filesystem"
            ]
        );
        let pvc = json!({"metadata": {"name": "data-web-0"}, "spec": {"volumeName": "pvc-1", "storageClassName": "local-path",
            "accessModes": ["ReadWriteOnce"]}, "status": {"phase": "Bound", "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce", "ReadOnlyMany"]}});
        assert_eq!(
            cell_strings("PersistentVolumeClaim", &pvc),
            ["data-web-0", "Bound", "pvc-1", "1Gi", "RWO,ROX", "local-path", "<unset>", "<unknown>", "<unset>"]
        );
        let pending = json!({"metadata": {"name": "p"}, "spec": {}, "status": {"phase": "Pending"}});
        assert_eq!(cell_strings("PersistentVolumeClaim", &pending)[1..5], ["Pending", "", "", ""]);
    }

    #[test]
    fn the_default_class_is_marked() {
        let sc = json!({"metadata": {"name": "local-path", "annotations": {super::DEFAULT_CLASS_ANNOTATION: "true"}},
            "provisioner": "rancher.io/local-path", "volumeBindingMode": "WaitForFirstConsumer"});
        assert_eq!(
            cell_strings("StorageClass", &sc),
            ["local-path (default)", "rancher.io/local-path", "Delete", "WaitForFirstConsumer", "false", "<unknown>"]
        );
    }
}
