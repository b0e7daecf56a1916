//! Quota scopes (spec.scopes and spec.scopeSelector) and whether an object falls under them
//! (podMatchesScopeFunc; other kinds match no scope, so a scoped quota counts only pods).

use serde_json::Value;

/// One scope requirement; `spec.scopes` entries are `Exists` requirements.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScopeSelector {
    pub scope: String,
    pub operator: String,
    pub values: Vec<String>,
}

/// Every scope requirement of a quota (GetScopeSelectorsFromQuota).
pub fn selectors(quota: &Value) -> Vec<ScopeSelector> {
    let spec = quota.get("spec").unwrap_or(&Value::Null);
    let mut out: Vec<ScopeSelector> = spec
        .get("scopes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(|s| ScopeSelector { scope: s.to_string(), operator: "Exists".into(), values: Vec::new() })
        .collect();
    for e in spec.pointer("/scopeSelector/matchExpressions").and_then(Value::as_array).into_iter().flatten() {
        let text = |k: &str| e.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        let values =
            e.get("values").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str).map(String::from);
        out.push(ScopeSelector { scope: text("scopeName"), operator: text("operator"), values: values.collect() });
    }
    out
}

/// Whether `obj` of `group`/`resource` falls under every one of `selectors` (none: everything does).
pub fn matches_all(selectors: &[ScopeSelector], group: &str, resource: &str, obj: &Value) -> bool {
    selectors.iter().all(|s| matches(s, group, resource, obj))
}

fn matches(s: &ScopeSelector, group: &str, resource: &str, obj: &Value) -> bool {
    if (group, resource) != ("", "pods") {
        return false;
    }
    let spec = obj.get("spec").unwrap_or(&Value::Null);
    match s.scope.as_str() {
        "Terminating" => is_terminating(spec),
        "NotTerminating" => !is_terminating(spec),
        "BestEffort" => is_best_effort(spec),
        "NotBestEffort" => !is_best_effort(spec),
        "PriorityClass" => {
            let class = spec.get("priorityClassName").and_then(Value::as_str).filter(|c| !c.is_empty());
            match s.operator.as_str() {
                "Exists" => class.is_some(),
                "DoesNotExist" => class.is_none(),
                "In" => class.is_some_and(|c| s.values.iter().any(|v| v == c)),
                "NotIn" => class.is_none_or(|c| !s.values.iter().any(|v| v == c)),
                _ => false,
            }
        }
        "CrossNamespacePodAffinity" => uses_cross_namespace_affinity(spec),
        _ => false,
    }
}

fn is_terminating(spec: &Value) -> bool {
    spec.get("activeDeadlineSeconds").and_then(Value::as_i64).is_some_and(|d| d >= 0)
}

/// QoS BestEffort: no positive cpu or memory request or limit anywhere in the pod.
fn is_best_effort(spec: &Value) -> bool {
    let sets_compute = |resources: Option<&Value>| {
        ["requests", "limits"].iter().any(|which| {
            let list = super::list::from_json(resources.and_then(|r| r.get(*which)));
            ["cpu", "memory"].iter().any(|r| list.get(*r).is_some_and(|q| q.nanos > 0))
        })
    };
    let containers = ["containers", "initContainers"]
        .iter()
        .flat_map(|k| spec.get(*k).and_then(Value::as_array).into_iter().flatten());
    !sets_compute(spec.get("resources")) && !containers.into_iter().any(|c| sets_compute(c.get("resources")))
}

fn uses_cross_namespace_affinity(spec: &Value) -> bool {
    let cross = |t: &Value| {
        t.get("namespaces").and_then(Value::as_array).is_some_and(|n| !n.is_empty())
            || t.get("namespaceSelector").is_some_and(|s| !s.is_null())
    };
    ["podAffinity", "podAntiAffinity"].iter().any(|a| {
        let Some(a) = spec.pointer(&format!("/affinity/{a}")) else { return false };
        let required = a.get("requiredDuringSchedulingIgnoredDuringExecution").and_then(Value::as_array);
        let preferred = a.get("preferredDuringSchedulingIgnoredDuringExecution").and_then(Value::as_array);
        required.into_iter().flatten().any(cross)
            || preferred.into_iter().flatten().filter_map(|w| w.get("podAffinityTerm")).any(cross)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn quota(spec: Value) -> Vec<ScopeSelector> {
        selectors(&json!({ "spec": spec }))
    }

    #[test]
    fn terminating_scopes_follow_active_deadline_seconds() {
        let long = json!({"spec": {"containers": [{}]}});
        let deadline = json!({"spec": {"activeDeadlineSeconds": 3600, "containers": [{}]}});
        let t = quota(json!({"scopes": ["Terminating"]}));
        let nt = quota(json!({"scopes": ["NotTerminating"]}));
        assert!(matches_all(&t, "", "pods", &deadline) && !matches_all(&t, "", "pods", &long));
        assert!(matches_all(&nt, "", "pods", &long) && !matches_all(&nt, "", "pods", &deadline));
    }

    #[test]
    fn best_effort_means_no_cpu_or_memory_anywhere() {
        let be = json!({"spec": {"containers": [{"resources": {"requests": {"ephemeral-storage": "1Gi"}}}]}});
        let burstable = json!({"spec": {"containers": [{"resources": {"limits": {"memory": "400Mi"}}}]}});
        let s =
            quota(json!({"scopeSelector": {"matchExpressions": [{"scopeName": "BestEffort", "operator": "Exists"}]}}));
        assert!(matches_all(&s, "", "pods", &be));
        assert!(!matches_all(&s, "", "pods", &burstable));
    }

    #[test]
    fn priority_class_selectors_are_label_selectors_on_the_class_name() {
        let gold = json!({"spec": {"priorityClassName": "gold"}});
        let none = json!({"spec": {}});
        let sel = |op: &str, values: Value| {
            quota(json!({"scopeSelector": {"matchExpressions": [
                {"scopeName": "PriorityClass", "operator": op, "values": values}]}}))
        };
        assert!(matches_all(&sel("In", json!(["gold", "silver"])), "", "pods", &gold));
        assert!(!matches_all(&sel("In", json!(["silver"])), "", "pods", &gold));
        assert!(matches_all(&sel("NotIn", json!(["silver"])), "", "pods", &none));
        assert!(matches_all(&sel("Exists", json!([])), "", "pods", &gold));
        assert!(matches_all(&sel("DoesNotExist", json!([])), "", "pods", &none));
    }

    #[test]
    fn scoped_quotas_match_no_other_kind() {
        let s = quota(json!({"scopes": ["NotTerminating"]}));
        assert!(!matches_all(&s, "", "services", &json!({})));
        assert!(matches_all(&[], "", "services", &json!({})));
    }

    #[test]
    fn cross_namespace_affinity_needs_namespaces_or_a_selector() {
        let pod = json!({"spec": {"affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 1, "podAffinityTerm": {"namespaceSelector": {}, "topologyKey": "k"}}]}}}});
        let s = quota(json!({"scopes": ["CrossNamespacePodAffinity"]}));
        assert!(matches_all(&s, "", "pods", &pod));
        assert!(!matches_all(&s, "", "pods", &json!({"spec": {}})));
    }
}
