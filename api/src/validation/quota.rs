//! ResourceQuota validation (ValidateResourceQuota, ValidateResourceQuotaUpdate,
//! ValidateResourceQuotaStatusUpdate): resource names quota knows, non-negative (and for counts,
//! whole) quantities, and scopes that exist, fit the limited resources and do not conflict.

use serde_json::Value;

use super::causes::{BadValue, Cause};
use super::json::{arr, st, strs};
use super::names::{qualified_name_errors, IMMUTABLE_MSG, IS_NEGATIVE_MSG};
use crate::quota::Quantity;

/// Names that may stand without a domain in a resource list (standardResources).
const STANDARD_RESOURCES: &[&str] = &[
    "cpu",
    "memory",
    "ephemeral-storage",
    "requests.cpu",
    "requests.memory",
    "requests.ephemeral-storage",
    "limits.cpu",
    "limits.memory",
    "limits.ephemeral-storage",
    "pods",
    "services",
    "replicationcontrollers",
    "resourcequotas",
    "secrets",
    "configmaps",
    "persistentvolumeclaims",
    "storage",
    "requests.storage",
    "services.nodeports",
    "services.loadbalancers",
];

/// Names a quota may limit without a domain (standardQuotaResources).
const QUOTA_RESOURCES: &[&str] = &[
    "cpu",
    "memory",
    "ephemeral-storage",
    "requests.cpu",
    "requests.memory",
    "requests.storage",
    "requests.ephemeral-storage",
    "limits.cpu",
    "limits.memory",
    "limits.ephemeral-storage",
    "pods",
    "services",
    "replicationcontrollers",
    "resourcequotas",
    "secrets",
    "persistentvolumeclaims",
    "configmaps",
    "services.nodeports",
    "services.loadbalancers",
];

const INTEGER_RESOURCES: &[&str] = &[
    "pods",
    "resourcequotas",
    "services",
    "replicationcontrollers",
    "secrets",
    "configmaps",
    "persistentvolumeclaims",
    "services.nodeports",
    "services.loadbalancers",
];

const SCOPES: &[&str] = &[
    "Terminating",
    "NotTerminating",
    "BestEffort",
    "NotBestEffort",
    "PriorityClass",
    "CrossNamespacePodAffinity",
    "VolumeAttributesClass",
];

const POD_COMPUTE: &[&str] = &["cpu", "memory", "limits.cpu", "limits.memory", "requests.cpu", "requests.memory"];
const CLAIM_RESOURCES: &[&str] = &["persistentvolumeclaims", "requests.storage"];

const EXISTS_ONLY: &str = "must be 'Exist' when scope is any of ResourceQuotaScopeTerminating, ResourceQuotaScopeNotTerminating, ResourceQuotaScopeBestEffort, ResourceQuotaScopeNotBestEffort or ResourceQuotaScopeCrossNamespacePodAffinity";

fn is_hugepages_quota(n: &str) -> bool {
    n.starts_with("hugepages-") || n.starts_with("requests.hugepages-")
}

fn is_quota_resource(n: &str) -> bool {
    QUOTA_RESOURCES.contains(&n) || is_hugepages_quota(n)
}

/// IsExtendedResourceName: a resource outside Kubernetes' domains, not already `requests.`.
fn is_extended(n: &str) -> bool {
    let native = !n.contains('/') || n.contains("kubernetes.io/");
    !native && !n.starts_with("requests.") && qualified_name_errors(&format!("requests.{n}")).is_empty()
}

/// ValidateResourceQuotaResourceName.
fn validate_name(name: &str, path: &str, out: &mut Vec<Cause>) {
    let errs = qualified_name_errors(name);
    if !errs.is_empty() {
        out.extend(errs.iter().map(|m| Cause::invalid(path, name, m)));
        return;
    }
    if !name.contains('/') {
        if !STANDARD_RESOURCES.contains(&name) && !is_hugepages_quota(name) {
            out.push(Cause::invalid(path, name, "must be a standard resource type or fully qualified"));
        } else if !is_quota_resource(name) {
            out.push(Cause::invalid(path, name, "must be a standard resource for quota"));
        }
    }
}

/// Each name and quantity of a `hard` or `used` list.
fn validate_list(list: Option<&Value>, path: &str, out: &mut Vec<Cause>) {
    for (name, v) in list.and_then(Value::as_object).into_iter().flatten() {
        let at = format!("{path}[{name}]");
        validate_name(name, &at, out);
        let text = v.as_str().map_or_else(|| v.to_string(), String::from);
        let Some(q) = Quantity::parse(&text) else { continue };
        if q.nanos < 0 {
            out.push(Cause::invalid(&at, q.to_string(), IS_NEGATIVE_MSG));
        }
        if (INTEGER_RESOURCES.contains(&name.as_str()) || is_extended(name)) && !q.is_integer() {
            out.push(Cause::invalid(&at, q.to_string(), "must be an integer"));
        }
    }
}

/// IsResourceQuotaScopeValidForResource.
fn scope_fits(scope: &str, resource: &str) -> bool {
    match scope {
        "Terminating" | "NotTerminating" | "NotBestEffort" | "PriorityClass" | "CrossNamespacePodAffinity" => {
            resource == "pods" || POD_COMPUTE.contains(&resource)
        }
        "BestEffort" => resource == "pods",
        "VolumeAttributesClass" => CLAIM_RESOURCES.contains(&resource),
        _ => true,
    }
}

fn go_strings(ty: &str, v: &[String]) -> BadValue {
    let items: Vec<String> = v.iter().map(|s| format!("{s:?}")).collect();
    BadValue::Raw(format!("[]{ty}{{{}}}", items.join(", ")))
}

fn conflicting(scopes: &[String]) -> bool {
    let has = |s: &str| scopes.iter().any(|x| x == s);
    (has("BestEffort") && has("NotBestEffort")) || (has("Terminating") && has("NotTerminating"))
}

/// ValidateResourceQuota: spec (names, quantities, scopes, scopeSelector) and status lists.
pub(super) fn validate_resource_quota(obj: &Value, out: &mut Vec<Cause>) {
    let null = Value::Null;
    let spec = obj.get("spec").unwrap_or(&null);
    validate_list(spec.get("hard"), "spec.hard", out);
    let hard: Vec<String> =
        spec.get("hard").and_then(Value::as_object).map(|m| m.keys().cloned().collect()).unwrap_or_default();
    let scopes = strs(spec, "scopes");
    if !scopes.is_empty() {
        let shown = || go_strings("core.ResourceQuotaScope", &scopes);
        for scope in &scopes {
            if !SCOPES.contains(&scope.as_str()) {
                out.push(Cause::invalid("spec.scopes", shown(), "unsupported scope"));
            }
            for k in hard.iter().filter(|k| is_quota_resource(k)) {
                if !scope_fits(scope, k) {
                    out.push(Cause::invalid("spec.scopes", shown(), "unsupported scope applied to resource"));
                }
            }
        }
        if conflicting(&scopes) {
            out.push(Cause::invalid("spec.scopes", shown(), "conflicting scopes"));
        }
    }
    if let Some(sel) = spec.get("scopeSelector").filter(|s| !s.is_null()) {
        validate_scope_selector(sel, &hard, out);
    }
    let status = obj.get("status").unwrap_or(&null);
    validate_list(status.get("hard"), "status.hard", out);
    validate_list(status.get("used"), "status.used", out);
}

fn validate_scope_selector(sel: &Value, hard: &[String], out: &mut Vec<Cause>) {
    const PATH: &str = "spec.scopeSelector.matchExpressions";
    let shown = || {
        BadValue::Raw(format!(
            "&core.ScopeSelector{{MatchExpressions:{}}}",
            sel.get("matchExpressions").unwrap_or(&Value::Null)
        ))
    };
    let mut names = Vec::new();
    for req in arr(sel, "matchExpressions") {
        let (scope, op) = (st(req, "scopeName"), st(req, "operator"));
        if !SCOPES.contains(&scope) {
            out.push(Cause::invalid(format!("{PATH}.scopeName"), scope, "unsupported scope"));
        }
        for k in hard.iter().filter(|k| is_quota_resource(k)) {
            if !scope_fits(scope, k) {
                out.push(Cause::invalid(PATH, shown(), "unsupported scope applied to resource"));
            }
        }
        if matches!(
            scope,
            "BestEffort" | "NotBestEffort" | "Terminating" | "NotTerminating" | "CrossNamespacePodAffinity"
        ) && op != "Exists"
        {
            out.push(Cause::invalid(format!("{PATH}.operator"), op, EXISTS_ONLY));
        }
        let values = strs(req, "values");
        match op {
            "In" | "NotIn" if values.is_empty() => out.push(Cause::required(
                format!("{PATH}.values"),
                "must be at least one value when `operator` is 'In' or 'NotIn' for scope selector",
            )),
            "Exists" | "DoesNotExist" if !values.is_empty() => out.push(Cause::invalid(
                format!("{PATH}.values"),
                go_strings("string", &values),
                "must be no value when `operator` is 'Exist' or 'DoesNotExist' for scope selector",
            )),
            "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
            other => out.push(Cause::invalid(format!("{PATH}.operator"), other, "not a valid selector operator")),
        }
        names.push(scope.to_string());
    }
    if conflicting(&names) {
        out.push(Cause::invalid(PATH, shown(), "conflicting scopes"));
    }
}

/// ValidateResourceQuotaUpdate's own rule: the scopes are fixed once created.
pub(super) fn validate_resource_quota_update(new: &Value, old: &Value, out: &mut Vec<Cause>) {
    let null = Value::Null;
    let (new_spec, old_spec) = (new.get("spec").unwrap_or(&null), old.get("spec").unwrap_or(&null));
    let (new_scopes, old_scopes) = (strs(new_spec, "scopes"), strs(old_spec, "scopes"));
    let changed = new_scopes.len() != old_scopes.len() || new_scopes.iter().any(|s| !old_scopes.contains(s));
    if changed {
        out.push(Cause::invalid("spec.scopes", go_strings("core.ResourceQuotaScope", &new_scopes), IMMUTABLE_MSG));
    }
}

/// ValidateResourceQuotaStatusUpdate: the status lists (metadata is checked by the caller).
pub(super) fn validate_resource_quota_status(obj: &Value, out: &mut Vec<Cause>) {
    let status = obj.get("status").unwrap_or(&Value::Null);
    validate_list(status.get("hard"), "status.hard", out);
    validate_list(status.get("used"), "status.used", out);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn causes(spec: Value) -> Vec<(String, String)> {
        let mut out = Vec::new();
        validate_resource_quota(&json!({ "spec": spec }), &mut out);
        out.into_iter().map(|c| (c.field, c.message)).collect()
    }

    #[test]
    fn the_conformance_quota_is_valid() {
        let hard = json!({"pods": "5", "services": "10", "services.nodeports": "1", "services.loadbalancers": "1",
            "replicationcontrollers": "10", "resourcequotas": "1", "cpu": "1", "memory": "500Mi", "configmaps": "10",
            "secrets": "10", "persistentvolumeclaims": "10", "requests.storage": "10Gi", "ephemeral-storage": "50Gi",
            "gold.storageclass.storage.k8s.io/persistentvolumeclaims": "10",
            "gold.storageclass.storage.k8s.io/requests.storage": "10Gi",
            "count/replicasets.apps": "5", "requests.example.com/dongle": "3"});
        assert_eq!(causes(json!({ "hard": hard })), vec![]);
    }

    #[test]
    fn names_and_quantities_are_refused_as_kubernetes_refuses_them() {
        let got = causes(json!({"hard": {"storage": "1", "widgets": "1", "pods": "-1", "secrets": "1500m"}}));
        assert_eq!(
            got,
            vec![
                ("spec.hard[pods]".into(), "Invalid value: \"-1\": must be greater than or equal to 0".into()),
                ("spec.hard[secrets]".into(), "Invalid value: \"1500m\": must be an integer".into()),
                (
                    "spec.hard[storage]".into(),
                    "Invalid value: \"storage\": must be a standard resource for quota".into()
                ),
                (
                    "spec.hard[widgets]".into(),
                    "Invalid value: \"widgets\": must be a standard resource type or fully qualified".into()
                ),
            ]
        );
    }

    #[test]
    fn scopes_must_exist_fit_the_resources_and_not_conflict() {
        let got = causes(json!({"hard": {"secrets": "1"}, "scopes": ["BestEffort", "NotBestEffort"]}));
        let messages: Vec<&str> = got.iter().map(|(_, m)| m.as_str()).collect();
        assert_eq!(got[0].0, "spec.scopes");
        assert!(messages[0].ends_with("unsupported scope applied to resource"), "{messages:?}");
        assert!(messages.last().is_some_and(|m| m.ends_with("conflicting scopes")), "{messages:?}");
        assert!(messages[0].starts_with("Invalid value: []core.ResourceQuotaScope{\"BestEffort\", \"NotBestEffort\"}"));
        let got = causes(json!({"hard": {"pods": "1"}, "scopeSelector": {"matchExpressions": [
            {"scopeName": "Terminating", "operator": "In", "values": ["x"]},
            {"scopeName": "PriorityClass", "operator": "In"},
            {"scopeName": "Bogus", "operator": "Nope"}]}}));
        let fields: Vec<&str> = got.iter().map(|(f, _)| f.as_str()).collect();
        assert_eq!(
            fields,
            vec![
                "spec.scopeSelector.matchExpressions.operator",
                "spec.scopeSelector.matchExpressions.values",
                "spec.scopeSelector.matchExpressions.scopeName",
                "spec.scopeSelector.matchExpressions.operator",
            ]
        );
    }

    #[test]
    fn scopes_are_fixed_after_create() {
        let mut out = Vec::new();
        let old = json!({"spec": {"scopes": ["Terminating"]}});
        validate_resource_quota_update(&json!({"spec": {"scopes": ["NotTerminating"]}}), &old, &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].field, "spec.scopes");
    }
}
