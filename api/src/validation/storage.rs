//! PersistentVolume, PersistentVolumeClaim and StorageClass validation
//! (`pkg/apis/core/validation`, `pkg/apis/storage/validation`).

use serde_json::{Map, Value};

use super::apps::validate_label_selector;
use super::causes::{BadValue, Cause};
use super::json::{arr, has, obj, semantic_eq, st, strs};
use super::names::{dns1123_subdomain_errors, qualified_name_errors, IMMUTABLE_MSG, QUANTITY_MSG};
use super::obj_or_null;
use super::quantity::{quantity_of, quantity_text};

const ACCESS_MODES: &[&str] = &["ReadOnlyMany", "ReadWriteMany", "ReadWriteOnce", "ReadWriteOncePod"];

/// The volume sources a PersistentVolume may carry (exactly one).
const PV_SOURCES: &[&str] = &[
    "hostPath",
    "local",
    "nfs",
    "csi",
    "iscsi",
    "fc",
    "rbd",
    "cephfs",
    "cinder",
    "glusterfs",
    "flexVolume",
    "azureFile",
    "azureDisk",
    "vsphereVolume",
    "quobyte",
    "awsElasticBlockStore",
    "gcePersistentDisk",
    "portworxVolume",
    "scaleIO",
    "storageos",
    "photonPersistentDisk",
    "flocker",
];

fn validate_access_modes(spec: &Value, path: &str, out: &mut Vec<Cause>) {
    let modes = strs(spec, "accessModes");
    if modes.is_empty() {
        out.push(Cause::required(format!("{path}.accessModes"), "at least 1 access mode is required"));
    }
    for m in &modes {
        if !ACCESS_MODES.contains(&m.as_str()) {
            out.push(Cause::not_supported(format!("{path}.accessModes"), m.as_str(), ACCESS_MODES));
        }
    }
    if modes.len() > 1 && modes.iter().any(|m| m == "ReadWriteOncePod") {
        out.push(Cause::forbidden(
            format!("{path}.accessModes"),
            "may not use ReadWriteOncePod with other access modes",
        ));
    }
}

fn validate_storage_class_name(spec: &Value, path: &str, out: &mut Vec<Cause>) {
    let class = st(spec, "storageClassName");
    if !class.is_empty() {
        out.extend(
            dns1123_subdomain_errors(class)
                .iter()
                .map(|m| Cause::invalid(format!("{path}.storageClassName"), class, m)),
        );
    }
}

fn validate_volume_mode(spec: &Value, path: &str, out: &mut Vec<Cause>) {
    let mode = st(spec, "volumeMode");
    if has(spec, "volumeMode") && !matches!(mode, "Block" | "Filesystem") {
        out.push(Cause::not_supported(format!("{path}.volumeMode"), mode, &["Block", "Filesystem"]));
    }
}

/// ValidatePersistentVolumeClaimSpec (also used for StatefulSet claim templates).
pub(super) fn validate_claim_spec(spec: &Value, path: &str, out: &mut Vec<Cause>) {
    validate_access_modes(spec, path, out);
    if let Some(sel) = spec.get("selector").filter(|s| !s.is_null()) {
        validate_label_selector(sel, &format!("{path}.selector"), out);
    }
    let requests = obj(obj_or_null(spec, "resources"), "requests");
    match requests.and_then(|r| r.get("storage")) {
        None => out.push(Cause::required(format!("{path}.resources[storage]"), "")),
        Some(q) => match quantity_of(q) {
            None => out.push(Cause::invalid(format!("{path}.resources[storage]"), quantity_text(q), QUANTITY_MSG)),
            Some(n) if n <= 0 => out.push(Cause::invalid(
                format!("{path}.resources[storage]"),
                quantity_text(q),
                "must be greater than zero",
            )),
            Some(_) => {}
        },
    }
    validate_storage_class_name(spec, path, out);
    validate_volume_mode(spec, path, out);
}

pub(super) fn validate_claim(pvc: &Value, out: &mut Vec<Cause>) {
    validate_claim_spec(obj_or_null(pvc, "spec"), "spec", out);
}

/// A claim's spec is fixed once created, except its storage request and attributes class, and
/// the volumeName the binder sets on an unbound claim.
pub(super) fn validate_claim_update(new_spec: &Value, old_spec: &Value, out: &mut Vec<Cause>) {
    let comparable = |spec: &Value, volume_name: &str| {
        let mut v = spec.clone();
        if let Some(m) = v.as_object_mut() {
            m.remove("volumeAttributesClassName");
            if let Some(res) = m.get_mut("resources").and_then(Value::as_object_mut) {
                res.remove("requests");
            }
            m.insert("volumeName".into(), Value::String(volume_name.to_string()));
        }
        v
    };
    let old_name = st(old_spec, "volumeName");
    // Binding: an unbound claim may gain a volumeName.
    let volume_name = if old_name.is_empty() { st(new_spec, "volumeName") } else { old_name };
    let new_cmp = comparable(new_spec, st(new_spec, "volumeName"));
    let old_cmp = comparable(old_spec, volume_name);
    if !semantic_eq(Some(&new_cmp), Some(&old_cmp)) {
        out.push(Cause::forbidden(
            "spec",
            "spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims",
        ));
    }
}

pub(super) fn validate_volume(pv: &Value, out: &mut Vec<Cause>) {
    let spec = obj_or_null(pv, "spec");
    validate_access_modes(spec, "spec", out);
    let capacity = obj(spec, "capacity");
    match capacity {
        None => out.push(Cause::required("spec.capacity", "")),
        Some(c) if c.is_empty() => out.push(Cause::required("spec.capacity", "")),
        Some(c) => {
            if !c.contains_key("storage") || c.len() > 1 {
                out.push(Cause::not_supported("spec.capacity", BadValue::Raw(go_resource_list(c)), &["storage"]));
            }
            if let Some(q) = c.get("storage") {
                match quantity_of(q) {
                    None => out.push(Cause::invalid("spec.capacity[storage]", quantity_text(q), QUANTITY_MSG)),
                    Some(n) if n < 0 => out.push(Cause::invalid(
                        "spec.capacity[storage]",
                        quantity_text(q),
                        "must be greater than or equal to 0",
                    )),
                    Some(_) => {}
                }
            }
        }
    }
    let policy = st(spec, "persistentVolumeReclaimPolicy");
    if !policy.is_empty() && !matches!(policy, "Retain" | "Delete" | "Recycle") {
        out.push(Cause::not_supported("spec.persistentVolumeReclaimPolicy", policy, &["Delete", "Recycle", "Retain"]));
    }
    let mut sources = 0;
    for src in PV_SOURCES {
        if !has(spec, src) {
            continue;
        }
        sources += 1;
        if sources > 1 {
            out.push(Cause::forbidden(format!("spec.{src}"), "may not specify more than 1 volume type"));
            continue;
        }
        let v = obj_or_null(spec, src);
        match *src {
            "hostPath" | "local" if st(v, "path").is_empty() => {
                out.push(Cause::required(format!("spec.{src}.path"), ""));
            }
            "nfs" => {
                for key in ["server", "path"] {
                    if st(v, key).is_empty() {
                        out.push(Cause::required(format!("spec.nfs.{key}"), ""));
                    }
                }
            }
            _ => {}
        }
    }
    if sources == 0 {
        out.push(Cause::required("spec", "must specify a volume type"));
    }
    let affinity = obj_or_null(spec, "nodeAffinity");
    if has(spec, "local") && affinity.is_null() {
        out.push(Cause::required("spec.nodeAffinity", "Local volume requires node affinity"));
    }
    if !affinity.is_null() {
        let required = obj_or_null(affinity, "required");
        if required.is_null() && has(spec, "local") {
            out.push(Cause::required("spec.nodeAffinity.required", "must have at least one node selector term"));
        } else if !required.is_null() && arr(required, "nodeSelectorTerms").is_empty() {
            out.push(Cause::required(
                "spec.nodeAffinity.required.nodeSelectorTerms",
                "must have at least one node selector term",
            ));
        }
    }
    validate_storage_class_name(spec, "spec", out);
    validate_volume_mode(spec, "spec", out);
}

/// A volume's source never changes; node affinity only from unset.
pub(super) fn validate_volume_update(new_spec: &Value, old_spec: &Value, out: &mut Vec<Cause>) {
    let source_changed = PV_SOURCES.iter().any(|s| !semantic_eq(new_spec.get(*s), old_spec.get(*s)));
    if source_changed {
        out.push(Cause::forbidden(
            "spec.persistentvolumesource",
            "spec.persistentvolumesource is immutable after creation",
        ));
    }
    if has(old_spec, "nodeAffinity") && !semantic_eq(new_spec.get("nodeAffinity"), old_spec.get("nodeAffinity")) {
        let shown = new_spec.get("nodeAffinity").map_or_else(|| "null".to_string(), Value::to_string);
        out.push(Cause::invalid("spec.nodeAffinity", BadValue::Raw(shown), IMMUTABLE_MSG));
    }
    let mode = |s: &Value| st(s, "volumeMode").to_string();
    if mode(new_spec) != mode(old_spec) {
        out.push(Cause::invalid("spec.volumeMode", st(new_spec, "volumeMode"), IMMUTABLE_MSG));
    }
}

pub(super) fn validate_volume_status(status: &Value, out: &mut Vec<Cause>) {
    let phase = st(status, "phase");
    if !phase.is_empty() && !matches!(phase, "Pending" | "Available" | "Bound" | "Released" | "Failed") {
        out.push(Cause::not_supported("status.phase", phase, &["Available", "Bound", "Failed", "Pending", "Released"]));
    }
}

pub(super) fn validate_claim_status(status: &Value, out: &mut Vec<Cause>) {
    let phase = st(status, "phase");
    if !phase.is_empty() && !matches!(phase, "Pending" | "Bound" | "Lost") {
        out.push(Cause::not_supported("status.phase", phase, &["Bound", "Lost", "Pending"]));
    }
    for m in strs(status, "accessModes") {
        if !ACCESS_MODES.contains(&m.as_str()) {
            out.push(Cause::not_supported("status.accessModes", m.as_str(), ACCESS_MODES));
        }
    }
}

pub(super) fn validate_storage_class(sc: &Value, out: &mut Vec<Cause>) {
    let provisioner = st(sc, "provisioner");
    if provisioner.is_empty() {
        out.push(Cause::required("provisioner", ""));
    } else {
        out.extend(qualified_name_errors(provisioner).iter().map(|m| Cause::invalid("provisioner", provisioner, m)));
    }
    let reclaim = st(sc, "reclaimPolicy");
    if has(sc, "reclaimPolicy") && !matches!(reclaim, "Delete" | "Retain") {
        out.push(Cause::not_supported("reclaimPolicy", reclaim, &["Delete", "Retain"]));
    }
    match sc.get("volumeBindingMode").and_then(Value::as_str) {
        None => out.push(Cause::required("volumeBindingMode", "")),
        Some("Immediate" | "WaitForFirstConsumer") => {}
        Some(other) => {
            out.push(Cause::not_supported("volumeBindingMode", other, &["Immediate", "WaitForFirstConsumer"]))
        }
    }
}

pub(super) fn validate_storage_class_update(new: &Value, old: &Value, out: &mut Vec<Cause>) {
    if !semantic_eq(new.get("parameters"), old.get("parameters")) {
        out.push(Cause::forbidden("parameters", "updates to parameters are forbidden."));
    }
    if st(new, "provisioner") != st(old, "provisioner") {
        out.push(Cause::forbidden("provisioner", "updates to provisioner are forbidden."));
    }
    if st(new, "reclaimPolicy") != st(old, "reclaimPolicy") {
        out.push(Cause::forbidden("reclaimPolicy", "updates to reclaimPolicy are forbidden."));
    }
    if st(new, "volumeBindingMode") != st(old, "volumeBindingMode") {
        out.push(Cause::invalid("volumeBindingMode", st(new, "volumeBindingMode"), IMMUTABLE_MSG));
    }
}

/// A ResourceList as Go's `%#v` shows it in NotSupported errors (sorted keys).
fn go_resource_list(m: &Map<String, Value>) -> String {
    let mut keys: Vec<&String> = m.keys().collect();
    keys.sort();
    let parts: Vec<String> = keys.iter().map(|k| format!("{k}:{}", quantity_text(&m[*k]))).collect();
    format!("map[{}]", parts.join(" "))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::validation::test_support::fields;
    use crate::validation::{invalid_message, validate_create, validate_status_update, validate_update};

    fn pvc(spec: serde_json::Value) -> serde_json::Value {
        let mut o = json!({"metadata": {"name": "data", "namespace": "d"}, "spec": spec});
        crate::defaults::apply_defaults("PersistentVolumeClaim", &mut o);
        o
    }

    #[test]
    fn claims_need_an_access_mode_and_a_positive_storage_request() {
        let ok = pvc(json!({"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}));
        assert_eq!(validate_create("PersistentVolumeClaim", &ok), vec![]);
        let bad = pvc(json!({"resources": {"requests": {"storage": "0"}}}));
        let causes = validate_create("PersistentVolumeClaim", &bad);
        assert_eq!(
            invalid_message("PersistentVolumeClaim", "data", &causes),
            "PersistentVolumeClaim \"data\" is invalid: [spec.accessModes: Required value: at least 1 access mode is required, \
             spec.resources[storage]: Invalid value: \"0\": must be greater than zero]"
        );
        let none = pvc(json!({"accessModes": ["ReadWriteOnce"]}));
        assert_eq!(fields(&validate_create("PersistentVolumeClaim", &none)), vec!["spec.resources[storage]"]);
    }

    #[test]
    fn a_claims_spec_is_fixed_but_binding_and_resizing_are_allowed() {
        let old = pvc(json!({"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}));
        let mut bound = old.clone();
        bound["spec"]["volumeName"] = json!("pvc-1");
        assert_eq!(validate_update("PersistentVolumeClaim", &bound, &old), vec![]);
        let mut grown = bound.clone();
        grown["spec"]["resources"]["requests"]["storage"] = json!("2Gi");
        assert_eq!(validate_update("PersistentVolumeClaim", &grown, &bound), vec![]);
        let mut rebound = bound.clone();
        rebound["spec"]["volumeName"] = json!("pvc-2");
        assert_eq!(fields(&validate_update("PersistentVolumeClaim", &rebound, &bound)), vec!["spec"]);
        let mut status = old.clone();
        status["status"] = json!({"phase": "Sideways"});
        assert_eq!(fields(&validate_status_update("PersistentVolumeClaim", &status, &old)), vec!["status.phase"]);
    }

    #[test]
    fn volumes_need_capacity_one_source_and_local_ones_node_affinity() {
        let mut pv = json!({"metadata": {"name": "pv1"}, "spec": {"accessModes": ["ReadWriteOnce"],
            "capacity": {"storage": "1Gi"}, "hostPath": {"path": "/data"}}});
        crate::defaults::apply_defaults("PersistentVolume", &mut pv);
        assert_eq!(validate_create("PersistentVolume", &pv), vec![]);
        let mut local = pv.clone();
        local["spec"].as_object_mut().expect("spec").remove("hostPath");
        local["spec"]["local"] = json!({"path": "/data"});
        assert_eq!(
            validate_create("PersistentVolume", &local)[0].error_string(),
            "spec.nodeAffinity: Required value: Local volume requires node affinity"
        );
        let mut nothing = pv.clone();
        nothing["spec"].as_object_mut().expect("spec").remove("hostPath");
        nothing["spec"].as_object_mut().expect("spec").remove("capacity");
        assert_eq!(fields(&validate_create("PersistentVolume", &nothing)), vec!["spec.capacity", "spec"]);
        let mut moved = pv.clone();
        moved["spec"]["hostPath"]["path"] = json!("/elsewhere");
        assert_eq!(fields(&validate_update("PersistentVolume", &moved, &pv)), vec!["spec.persistentvolumesource"]);
    }

    #[test]
    fn storage_classes_name_a_provisioner_and_keep_it() {
        let mut sc = json!({"metadata": {"name": "local-path"}, "provisioner": "rancher.io/local-path"});
        crate::defaults::apply_defaults("StorageClass", &mut sc);
        assert_eq!(validate_create("StorageClass", &sc), vec![]);
        let mut none = json!({"metadata": {"name": "x"}, "volumeBindingMode": "Later"});
        crate::defaults::apply_defaults("StorageClass", &mut none);
        assert_eq!(fields(&validate_create("StorageClass", &none)), vec!["provisioner", "volumeBindingMode"]);
        let mut changed = sc.clone();
        changed["provisioner"] = json!("example.com/other");
        changed["parameters"] = json!({"a": "b"});
        assert_eq!(fields(&validate_update("StorageClass", &changed, &sc)), vec!["parameters", "provisioner"]);
    }
}
