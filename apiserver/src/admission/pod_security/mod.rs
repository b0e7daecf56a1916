//! PodSecurity (Kubernetes' built-in admission plugin of that name, `pod-security-admission/
//! admission/admission.go`): a namespace's `pod-security.kubernetes.io/{enforce,audit,warn}`
//! labels (over the cluster defaults of `--admission-control-config-file`) decide which Pod
//! Security Standard its pods must meet. Enforce refuses a pod (403); warn answers `Warning`
//! headers, for pods and for the pod templates of workloads (which are never refused); audit
//! would annotate the audit event, and kaji has no audit log, so it does nothing.

pub mod config;
pub mod namespace;

use crate::auth::authz::message::resource_forbidden;
use crate::auth::{Admission, AdmissionRequest, Operation};
use crate::http::errors::{ApiError, ApiResult};
use crate::storage::Store;
use config::Config;
use kaji_api::pod_security::{self as pss, Level, Policy, PolicyError};
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Arc;

pub const NAME: &str = "PodSecurity";

pub struct PodSecurity {
    /// Where namespaces' labels are read: the store, so a label just written is the one judged.
    pub store: Arc<dyn Store>,
    pub config: Config,
}

/// What the plugin decides for one object: refuse with this message, or pass with these warnings.
#[derive(Debug, PartialEq)]
pub enum Decision {
    Forbid(String),
    Allow(Vec<String>),
}

/// The decision for a pod or pod template under `policy` (`EvaluatePod`): enforce refuses
/// (only when `enforce` — workloads are never refused); warnings only on what passes.
pub fn decide(policy: &Policy, meta: &Value, spec: &Value, enforce: bool) -> Decision {
    if enforce {
        let failed = pss::evaluate(policy.enforce, meta, spec);
        if !failed.is_empty() {
            return Decision::Forbid(format!(
                "violates PodSecurity \"{}\": {}",
                policy.enforce,
                pss::forbidden_detail(&failed)
            ));
        }
    }
    let failed = pss::evaluate(policy.warn, meta, spec);
    if failed.is_empty() {
        return Decision::Allow(Vec::new());
    }
    Decision::Allow(vec![format!("would violate PodSecurity \"{}\": {}", policy.warn, pss::forbidden_detail(&failed))])
}

/// `isSignificantPodUpdate`: an update is judged only if it changes what the checks could see
/// change on a running pod (an image, the container count, a new ephemeral container, a seccomp
/// annotation); the rest of a pod's spec is immutable, and metadata is not judged.
pub fn significant_pod_update(new: &Value, old: &Value) -> bool {
    let ann = |p: &Value, k: &str| p.pointer("/metadata/annotations").and_then(|a| a.get(k)).cloned();
    if ann(new, "seccomp.security.alpha.kubernetes.io/pod") != ann(old, "seccomp.security.alpha.kubernetes.io/pod") {
        return true;
    }
    let list =
        |p: &Value, k: &str| p.pointer(&format!("/spec/{k}")).and_then(Value::as_array).cloned().unwrap_or_default();
    let name = |c: &Value| c.get("name").and_then(Value::as_str).unwrap_or("").to_string();
    let changed = |c: &Value, o: &Value| {
        let key = format!("container.seccomp.security.alpha.kubernetes.io/{}", name(c));
        c.get("image") != o.get("image") || ann(new, &key) != ann(old, &key)
    };
    for k in ["containers", "initContainers"] {
        let (n, o) = (list(new, k), list(old, k));
        if n.len() != o.len() || n.iter().zip(&o).any(|(c, oc)| changed(c, oc)) {
            return true;
        }
    }
    let old_ephemeral = list(old, "ephemeralContainers");
    list(new, "ephemeralContainers").iter().any(|c| match old_ephemeral.iter().find(|o| name(o) == name(c)) {
        None => true,
        Some(o) => changed(c, o),
    })
}

impl PodSecurity {
    /// The namespace's policy; a namespace not found is judged by the defaults.
    fn policy(&self, ns: &str) -> Policy {
        let info = kaji_api::resources::by_kind("Namespace").expect("namespaces are served");
        let namespace: Option<Value> = match self.store.get(&info.key(None, ns)) {
            Ok(kv) => kv.and_then(|kv| serde_json::from_slice(&kv.value).ok()),
            Err(e) => {
                tracing::warn!(error = %e, namespace = ns, "namespace lookup failed; judging by the defaults");
                None
            }
        };
        let labels: BTreeMap<String, String> = namespace
            .as_ref()
            .and_then(|n| n.pointer("/metadata/labels"))
            .and_then(Value::as_object)
            .map(|m| m.iter().filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string()))).collect())
            .unwrap_or_default();
        let (policy, errs) = Policy::from_labels(&labels, self.config.defaults);
        for e in errs {
            tracing::debug!(namespace = ns, label = e.label, value = %e.value, "bad PodSecurity label: {}", e.message);
        }
        policy
    }

    /// The decision for this request, or None when the plugin has nothing to say.
    fn judge(&self, req: &AdmissionRequest<'_>, object: Option<&Value>) -> Option<Decision> {
        if !matches!(req.operation, Operation::Create | Operation::Update) {
            return None;
        }
        let kind = req.resource.kind;
        let is_pod = kind == "Pod";
        match req.subresource {
            None => {}
            Some("ephemeralcontainers") if is_pod => {}
            Some(_) => return None,
        }
        let ns = req.namespace?;
        if self.config.exempt_namespace(ns) || self.config.exempt_user(&req.user.name) {
            return None;
        }
        let object = object?;
        let (meta, spec) = pss::pod_template(kind, object)?;
        if is_pod
            && req.operation == Operation::Update
            && !req.old.is_some_and(|old| significant_pod_update(object, old))
        {
            return None;
        }
        let policy = self.policy(ns);
        let all_privileged = [policy.enforce, policy.audit, policy.warn].iter().all(|lv| lv.level == Level::Privileged);
        if all_privileged || self.config.exempt_runtime_class(spec.get("runtimeClassName").and_then(Value::as_str)) {
            return None;
        }
        Some(decide(&policy, meta, spec, is_pod))
    }
}

impl PodSecurity {
    /// A namespace write with these labels: its policy, old and new, and the new labels' errors
    /// when they are to be refused (always on create; on update only if they are new errors).
    fn namespace_policies(
        &self,
        req: &AdmissionRequest<'_>,
        object: Option<&Value>,
    ) -> Option<(Option<Policy>, Policy, Vec<PolicyError>)> {
        if req.resource.kind != "Namespace" || req.subresource.is_some() {
            return None;
        }
        let (new, errs) = Policy::from_labels(&namespace::labels(object?), self.config.defaults);
        let (old, old_errs) = match (req.operation, req.old) {
            (Operation::Create, _) => (None, Vec::new()),
            (Operation::Update, Some(old)) => {
                let (p, e) = Policy::from_labels(&namespace::labels(old), self.config.defaults);
                (Some(p), e)
            }
            _ => return None,
        };
        let refuse = if errs != old_errs || old.is_none() { errs } else { Vec::new() };
        Some((old, new, refuse))
    }

    fn existing_pods(&self, ns: &str) -> Vec<Value> {
        let info = kaji_api::resources::by_kind("Pod").expect("pods are served");
        match self.store.list(&info.namespace_prefix(Some(ns))) {
            Ok((kvs, _)) => kvs.iter().filter_map(|kv| serde_json::from_slice(&kv.value).ok()).collect(),
            Err(e) => {
                tracing::warn!(error = %e, namespace = ns, "failed to list pods for a new PodSecurity level");
                Vec::new()
            }
        }
    }
}

impl Admission for PodSecurity {
    fn validate(&self, req: &AdmissionRequest<'_>, object: Option<&Value>) -> ApiResult<()> {
        if let Some((_, _, errs)) = self.namespace_policies(req, object) {
            if errs.is_empty() {
                return Ok(());
            }
            return Err(ApiError::new(422, "Invalid", namespace::invalid_message(req.name, &errs)));
        }
        match self.judge(req, object) {
            Some(Decision::Forbid(why)) => {
                let name = if req.name.is_empty() {
                    object.and_then(|o| o.pointer("/metadata/name")).and_then(Value::as_str).unwrap_or("")
                } else {
                    req.name
                };
                Err(forbidden(req, name, &why))
            }
            _ => Ok(()),
        }
    }

    fn warnings(&self, req: &AdmissionRequest<'_>, object: Option<&Value>) -> Vec<String> {
        if let Some((old, new, _)) = self.namespace_policies(req, object) {
            let Some(old) = old else { return Vec::new() };
            if !namespace::recheck_pods(&old, &new) || self.config.exempt_namespace(req.name) {
                return Vec::new();
            }
            let pods = self.existing_pods(req.name);
            return namespace::existing_pod_warnings(req.name, new.enforce, &pods, |rc| {
                self.config.exempt_runtime_class(rc)
            });
        }
        match self.judge(req, object) {
            Some(Decision::Allow(w)) => w,
            _ => Vec::new(),
        }
    }
}

fn forbidden(req: &AdmissionRequest<'_>, name: &str, why: &str) -> ApiError {
    resource_forbidden(req.resource.group, req.resource.plural, name, why)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kaji_api::pod_security::{LevelVersion, Version};
    use serde_json::json;

    fn policy(enforce: Level, warn: Level) -> Policy {
        Policy {
            enforce: LevelVersion { level: enforce, version: Version::Latest },
            warn: LevelVersion { level: warn, version: Version::Latest },
            ..Policy::default()
        }
    }

    fn privileged_spec() -> Value {
        json!({"containers": [{"name": "c", "image": "busybox", "securityContext": {"privileged": true}}]})
    }

    #[test]
    fn enforce_refuses_a_pod_with_the_level_and_every_failure() {
        let d = decide(&policy(Level::Baseline, Level::Privileged), &json!({}), &privileged_spec(), true);
        assert_eq!(
            d,
            Decision::Forbid(
                r#"violates PodSecurity "baseline:latest": privileged (container "c" must not set securityContext.privileged=true)"#
                    .into()
            )
        );
    }

    #[test]
    fn workloads_are_only_warned_about() {
        let d = decide(&policy(Level::Baseline, Level::Baseline), &json!({}), &privileged_spec(), false);
        assert_eq!(
            d,
            Decision::Allow(vec![
                r#"would violate PodSecurity "baseline:latest": privileged (container "c" must not set securityContext.privileged=true)"#
                    .into()
            ])
        );
    }

    #[test]
    fn a_passing_pod_gets_no_warning() {
        let spec = json!({"containers": [{"name": "c", "image": "busybox"}]});
        assert_eq!(decide(&policy(Level::Baseline, Level::Baseline), &json!({}), &spec, true), Decision::Allow(vec![]));
    }

    #[test]
    fn only_image_and_container_changes_make_a_pod_update_significant() {
        let old = json!({"metadata": {"labels": {"a": "1"}}, "spec": privileged_spec()});
        let mut relabelled = old.clone();
        relabelled["metadata"]["labels"]["a"] = json!("2");
        assert!(!significant_pod_update(&relabelled, &old));
        let mut new_image = old.clone();
        new_image["spec"]["containers"][0]["image"] = json!("nginx");
        assert!(significant_pod_update(&new_image, &old));
        let mut debug = old.clone();
        debug["spec"]["ephemeralContainers"] = json!([{"name": "debug", "image": "busybox"}]);
        assert!(significant_pod_update(&debug, &old));
    }
}
