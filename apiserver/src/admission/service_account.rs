//! The ServiceAccount admission plugin (Kubernetes' of that name), on pod creation: the pod runs
//! as `default` unless it names an account, the account must exist, its imagePullSecrets are
//! copied when the pod has none, and unless automounting is turned off (pod first, then account)
//! every container gets the projected `kube-api-access-<random>` volume at
//! `/var/run/secrets/kubernetes.io/serviceaccount`: a bound token, the cluster CA and the namespace.

use crate::auth::authz::message::resource_forbidden;
use crate::auth::{Admission, AdmissionRequest, Operation};
use crate::http::errors::ApiResult;
use crate::registry::meta::random_suffix;
use crate::storage::Store;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;

pub const NAME: &str = "ServiceAccount";
pub const DEFAULT_ACCOUNT: &str = "default";
pub const VOLUME_PREFIX: &str = "kube-api-access-";
pub const MOUNT_PATH: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
/// What kubelet asks for a projected token by default (a warn-only hour and 7 s).
pub const TOKEN_EXPIRATION_SECONDS: i64 = 3607;

pub struct ServiceAccountAdmission {
    /// Read directly (not the cache): an account created a moment ago must be found.
    pub store: Arc<dyn Store>,
}

/// Kubernetes' `TokenVolumeSource()`, with every default filled in (nothing defaults it later).
pub fn token_volume(name: &str) -> Value {
    json!({"name": name, "projected": {"defaultMode": 420, "sources": [
        {"serviceAccountToken": {"path": "token", "expirationSeconds": TOKEN_EXPIRATION_SECONDS}},
        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
        {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
    ]}})
}

/// `shouldAutomount`: the pod's `automountServiceAccountToken`, else the account's, else true.
pub fn should_automount(pod: &Value, account: &Value) -> bool {
    pod.pointer("/spec/automountServiceAccountToken")
        .and_then(Value::as_bool)
        .or_else(|| account.get("automountServiceAccountToken").and_then(Value::as_bool))
        .unwrap_or(true)
}

/// `mountServiceAccountToken`: the volume (unless one is there) and a read-only mount in every
/// container and init container that has nothing at the mount path yet.
pub fn mount_token(pod: &mut Value) {
    let existing = pod
        .pointer("/spec/volumes")
        .and_then(Value::as_array)
        .and_then(|vs| {
            vs.iter().filter_map(|v| v.get("name").and_then(Value::as_str)).find(|n| n.starts_with(VOLUME_PREFIX))
        })
        .map(str::to_string);
    let name = existing.clone().unwrap_or_else(|| format!("{VOLUME_PREFIX}{}", random_suffix()));
    let mount = json!({"name": name, "readOnly": true, "mountPath": MOUNT_PATH});
    let mut needed = false;
    for list in ["initContainers", "containers"] {
        for c in pod.pointer_mut(&format!("/spec/{list}")).and_then(Value::as_array_mut).into_iter().flatten() {
            let mounted = c
                .get("volumeMounts")
                .and_then(Value::as_array)
                .is_some_and(|ms| ms.iter().any(|m| m.get("mountPath").and_then(Value::as_str) == Some(MOUNT_PATH)));
            if mounted {
                continue;
            }
            if let Some(obj) = c.as_object_mut() {
                let mounts = obj.entry("volumeMounts").or_insert_with(|| json!([]));
                if let Some(a) = mounts.as_array_mut() {
                    a.push(mount.clone());
                    needed = true;
                }
            }
        }
    }
    if needed && existing.is_none() {
        if let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) {
            let volumes = spec.entry("volumes").or_insert_with(|| json!([]));
            if let Some(a) = volumes.as_array_mut() {
                a.push(token_volume(&name));
            }
        }
    }
}

impl ServiceAccountAdmission {
    /// The account, looked for a few times when it is `default` (the controller may be about to
    /// make it in a new namespace), as Kubernetes does.
    fn account(&self, ns: &str, name: &str) -> Option<Value> {
        let info = kaji_api::resources::by_kind("ServiceAccount").expect("serviceaccounts are served");
        let attempts = if name == DEFAULT_ACCOUNT { 10 } else { 1 };
        for i in 0..attempts {
            if i > 0 {
                // Admission runs on the request's async worker: hand its other tasks off first
                // (as the store's waits do), so a new namespace's pods stall nothing else.
                let pause = || std::thread::sleep(Duration::from_millis(150));
                match tokio::runtime::Handle::try_current() {
                    Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
                        tokio::task::block_in_place(pause)
                    }
                    _ => pause(),
                }
            }
            match self.store.get(&info.key(Some(ns), name)) {
                Ok(Some(kv)) => return serde_json::from_slice(&kv.value).ok(),
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "service account lookup failed");
                    return None;
                }
            }
        }
        None
    }
}

impl Admission for ServiceAccountAdmission {
    fn admit(&self, req: &AdmissionRequest<'_>, object: Option<&mut Value>) -> ApiResult<()> {
        if req.resource.kind != "Pod" || req.subresource.is_some() || req.operation != Operation::Create {
            return Ok(());
        }
        let Some(pod) = object else { return Ok(()) };
        // Mirror pods are the node's own; their spec is not touched.
        if pod.pointer("/metadata/annotations/kubernetes.io~1config.mirror").is_some() {
            return Ok(());
        }
        let ns = req.namespace.unwrap_or("default").to_string();
        let sa_name = match pod.pointer("/spec/serviceAccountName").and_then(Value::as_str).filter(|s| !s.is_empty()) {
            Some(n) => n.to_string(),
            None => DEFAULT_ACCOUNT.to_string(),
        };
        if let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) {
            spec.insert("serviceAccountName".into(), json!(sa_name));
            spec.insert("serviceAccount".into(), json!(sa_name));
        }
        let Some(account) = self.account(&ns, &sa_name) else {
            let name = if req.name.is_empty() {
                pod.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("")
            } else {
                req.name
            };
            return Err(resource_forbidden(
                "",
                "pods",
                name,
                &format!("error looking up service account {ns}/{sa_name}: serviceaccount \"{sa_name}\" not found"),
            ));
        };
        if should_automount(pod, &account) {
            mount_token(pod);
        }
        let has_pull_secrets =
            pod.pointer("/spec/imagePullSecrets").and_then(Value::as_array).is_some_and(|a| !a.is_empty());
        if !has_pull_secrets {
            if let Some(secrets) = account.get("imagePullSecrets").and_then(Value::as_array).filter(|a| !a.is_empty()) {
                let refs: Vec<Value> =
                    secrets.iter().map(|s| json!({"name": s.get("name").cloned().unwrap_or(json!(""))})).collect();
                pod["spec"]["imagePullSecrets"] = Value::Array(refs);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(v: Value) -> Value {
        json!({"metadata": {"name": "p", "namespace": "d"}, "spec": v})
    }

    #[test]
    fn every_container_gets_the_token_volume_once() {
        let mut p = pod(json!({"initContainers": [{"name": "i"}],
                               "containers": [{"name": "a"}, {"name": "b", "volumeMounts": [{"name": "own", "mountPath": MOUNT_PATH}]}]}));
        mount_token(&mut p);
        let vols = p["spec"]["volumes"].as_array().expect("volumes").clone();
        assert_eq!(vols.len(), 1);
        let name = vols[0]["name"].as_str().expect("name");
        assert!(name.starts_with(VOLUME_PREFIX) && name.len() == VOLUME_PREFIX.len() + 5, "{name}");
        assert_eq!(
            p["spec"]["initContainers"][0]["volumeMounts"][0],
            json!({"name": name, "readOnly": true, "mountPath": MOUNT_PATH})
        );
        assert_eq!(p["spec"]["containers"][0]["volumeMounts"][0]["name"], name);
        assert_eq!(p["spec"]["containers"][1]["volumeMounts"].as_array().map(Vec::len), Some(1), "its own mount stays");
        let again = p.clone();
        mount_token(&mut p);
        assert_eq!(p, again, "idempotent");
        assert_eq!(vols[0]["projected"]["sources"][0]["serviceAccountToken"]["expirationSeconds"], 3607);
    }

    #[test]
    fn automount_is_the_pods_choice_then_the_accounts() {
        let off = json!({"automountServiceAccountToken": false});
        assert!(should_automount(&pod(json!({})), &json!({})));
        assert!(!should_automount(&pod(json!({})), &off));
        assert!(should_automount(&pod(json!({"automountServiceAccountToken": true})), &off));
        assert!(!should_automount(&pod(json!({"automountServiceAccountToken": false})), &json!({})));
    }
}
