//! storage.k8s.io/v1 CSIDriver: how the cluster treats the volumes of one CSI driver.

use k8s_openapi::api::storage::v1 as storage;
use serde_json::{json, Value};

use super::{roundtrip, Strategy};
use crate::defaults::json::default_value;
use crate::resources::ResourceInfo;
use crate::schema::SchemaError;
use crate::table::columns::{Column, AGE};
use crate::table::obj::Obj;
use crate::validation::json::{arr, st};
use crate::validation::names::IMMUTABLE_MSG;
use crate::validation::Cause;

pub struct CsiDriver;

pub const INFO: ResourceInfo =
    crate::kind_info!("storage.k8s.io", "CSIDriver", "csidrivers", "csidriver", false, &[], &[], &CsiDriver);

const MODES: [&str; 2] = ["Ephemeral", "Persistent"];
const FS_GROUP_POLICIES: [&str; 3] = ["File", "None", "ReadWriteOnceWithFSType"];

/// `ValidateCSIDriverName`: at most 63 characters, alphanumerics with `-`, `_` and `.` inside.
pub(crate) fn driver_name_errors(name: &str, path: &str, out: &mut Vec<Cause>) {
    if name.is_empty() {
        out.push(Cause::required(path, ""));
        return;
    }
    if name.len() > 63 {
        out.push(Cause::too_long(path, 63));
    }
    let b = name.as_bytes();
    let edge = |c: u8| c.is_ascii_alphanumeric();
    let inner = |c: u8| c.is_ascii_alphanumeric() || b"-_.".contains(&c);
    if !edge(b[0]) || !edge(b[b.len() - 1]) || !b.iter().all(|c| inner(*c)) {
        out.push(Cause::invalid(
            path,
            name,
            "a DNS-1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '^[a-zA-Z0-9][-a-zA-Z0-9_.]{0,61}[a-zA-Z-0-9]$')",
        ));
    }
}

impl Strategy for CsiDriver {
    fn normalize(&self, obj: &Value) -> Result<Value, SchemaError> {
        roundtrip::<storage::CSIDriver>(obj)
    }

    fn defaults(&self, obj: &mut Value) {
        // SetDefaults_CSIDriver.
        let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else { return };
        default_value(spec, "attachRequired", json!(true));
        default_value(spec, "podInfoOnMount", json!(false));
        default_value(spec, "storageCapacity", json!(false));
        default_value(spec, "fsGroupPolicy", json!("ReadWriteOnceWithFSType"));
        default_value(spec, "requiresRepublish", json!(false));
        default_value(spec, "seLinuxMount", json!(false));
        if spec.get("volumeLifecycleModes").and_then(Value::as_array).is_none_or(Vec::is_empty) {
            spec.insert("volumeLifecycleModes".into(), json!(["Persistent"]));
        }
    }

    fn validate(&self, o: &Value, out: &mut Vec<Cause>) {
        let name = o.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("");
        if !name.is_empty() {
            driver_name_errors(name, "metadata.name", out);
        }
        let spec = o.get("spec").unwrap_or(&Value::Null);
        for (i, m) in arr(spec, "volumeLifecycleModes").iter().enumerate() {
            let m = m.as_str().unwrap_or("");
            if !MODES.contains(&m) {
                out.push(Cause::not_supported(format!("spec.volumeLifecycleModes[{i}]"), m, &MODES));
            }
        }
        let policy = st(spec, "fsGroupPolicy");
        if !policy.is_empty() && !FS_GROUP_POLICIES.contains(&policy) {
            out.push(Cause::not_supported("spec.fsGroupPolicy", policy, &FS_GROUP_POLICIES));
        }
        for (i, t) in arr(spec, "tokenRequests").iter().enumerate() {
            if let Some(s) = t.get("expirationSeconds").and_then(Value::as_i64) {
                if s < 600 {
                    out.push(Cause::invalid(
                        format!("spec.tokenRequests[{i}].expirationSeconds"),
                        s,
                        "may not specify a duration less than 10 minutes",
                    ));
                }
            }
        }
    }

    fn validate_update(&self, new: &Value, old: &Value, out: &mut Vec<Cause>) {
        let (n, o) = (new.pointer("/spec/attachRequired"), old.pointer("/spec/attachRequired"));
        if n != o {
            out.push(Cause::invalid(
                "spec.attachRequired",
                crate::validation::BadValue::Raw(n.map_or("null".into(), Value::to_string)),
                IMMUTABLE_MSG,
            ));
        }
    }

    fn columns(&self) -> Vec<Column> {
        vec![
            ("AttachRequired", "boolean", "", 0, "attachRequired indicates this CSI volume driver requires an attach operation (because it implements the CSI ControllerPublishVolume() method), and that the Kubernetes attach detach controller should call the attach volume interface which checks the volumeattachment status and waits until the volume is attached before proceeding to mounting. The CSI external-attacher coordinates with CSI volume driver and updates the volumeattachment status when the attach operation is complete. If the value is specified to false, the attach operation will be skipped. Otherwise the attach operation will be called.\n\nThis field is immutable."),
            ("PodInfoOnMount", "boolean", "", 0, "podInfoOnMount indicates this CSI volume driver requires additional pod information (like podName, podUID, etc.) during mount operations, if set to true. If set to false, pod information will not be passed on mount. Default is false."),
            ("StorageCapacity", "boolean", "", 0, "storageCapacity indicates that the CSI volume driver wants pod scheduling to consider the storage capacity that the driver deployment will report by creating CSIStorageCapacity objects with capacity information, if set to true."),
            ("TokenRequests", "string", "", 0, "tokenRequests indicates the CSI driver needs pods' service account tokens it is mounting volume for to do necessary authentication."),
            ("RequiresRepublish", "boolean", "", 0, "requiresRepublish indicates the CSI driver wants `NodePublishVolume` being periodically called to reflect any possible change in the mounted volume. This field defaults to false."),
            ("Modes", "string", "", 0, "volumeLifecycleModes defines what kind of volumes this CSI volume driver supports. The default if the list is empty is \"Persistent\", which is the usage defined by the CSI specification and implemented in Kubernetes via the usual PV/PVC mechanism."),
            AGE,
        ]
    }

    fn cells(&self, o: Obj<'_>, age: &Value) -> Vec<Value> {
        let audiences: Vec<&str> = o.list("spec.tokenRequests").iter().map(|t| st(t, "audience")).collect();
        let tokens = if audiences.is_empty() { "<unset>".to_owned() } else { audiences.join(",") };
        let modes: Vec<&str> = o.list("spec.volumeLifecycleModes").iter().filter_map(Value::as_str).collect();
        let modes = if modes.is_empty() { "<none>".to_owned() } else { modes.join(",") };
        vec![
            json!(o.bool("spec.attachRequired")),
            json!(o.bool("spec.podInfoOnMount")),
            json!(o.bool("spec.storageCapacity")),
            json!(tokens),
            json!(o.bool("spec.requiresRepublish")),
            json!(modes),
            age.clone(),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kinds::test_support::{cells, create_causes, defaulted, fields, update_causes};

    #[test]
    fn drivers_are_defaulted_and_attach_required_is_fixed() {
        let d = json!({"metadata": {"name": "hostpath.csi.k8s.io"}, "spec": {}});
        let got = defaulted("CSIDriver", d.clone());
        assert_eq!(got["spec"]["attachRequired"], true);
        assert_eq!(got["spec"]["volumeLifecycleModes"], json!(["Persistent"]));
        assert_eq!(create_causes("CSIDriver", &d), vec![]);
        let mut changed = got.clone();
        changed["spec"]["attachRequired"] = json!(false);
        assert_eq!(fields(&update_causes("CSIDriver", &changed, &got)), ["spec.attachRequired"]);
        assert_eq!(
            cells("CSIDriver", &got)[..7],
            [
                json!("hostpath.csi.k8s.io"),
                json!(true),
                json!(false),
                json!(false),
                json!("<unset>"),
                json!(false),
                json!("Persistent")
            ]
        );
        let bad = json!({"metadata": {"name": "d"}, "spec": {"volumeLifecycleModes": ["Sometimes"]}});
        assert_eq!(fields(&create_causes("CSIDriver", &bad)), ["spec.volumeLifecycleModes[0]"]);
    }
}
