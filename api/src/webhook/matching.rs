//! Which requests a webhook sees: its rules (operations, groups, versions, resources with
//! subresources, scope), its namespace selector and its object selector — `rules.Matcher`,
//! `namespace.Matcher` and `object.Matcher` of k8s.io/apiserver.

use crate::selector::LabelSelector;
use serde_json::{Map, Value};

/// The request as webhooks match it.
#[derive(Debug, Clone, Copy)]
pub struct Attributes<'a> {
    /// CREATE, UPDATE, DELETE or CONNECT.
    pub operation: &'a str,
    pub group: &'a str,
    pub version: &'a str,
    pub resource: &'a str,
    /// Empty for the resource itself.
    pub subresource: &'a str,
    /// Empty for cluster-scoped resources (and for a Namespace, its own name).
    pub namespace: &'a str,
    pub object: Option<&'a Value>,
    pub old: Option<&'a Value>,
}

/// Why a webhook could not be matched: its namespace does not exist (a 404, as Kubernetes
/// answers for backwards compatibility).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamespaceNotFound(pub String);

/// The admission configuration kinds themselves are never sent to webhooks, so no webhook can
/// lock the cluster out of removing it (`IsExemptAdmissionConfigurationResource`).
pub fn exempt(group: &str, resource: &str) -> bool {
    group == "admissionregistration.k8s.io"
        && matches!(
            resource,
            "validatingwebhookconfigurations"
                | "mutatingwebhookconfigurations"
                | "validatingadmissionpolicies"
                | "validatingadmissionpolicybindings"
                | "mutatingadmissionpolicies"
                | "mutatingadmissionpolicybindings"
        )
}

/// Whether any of the webhook's rules matches (`rules.Matcher.Matches`).
pub fn rules_match(hook: &Value, a: &Attributes<'_>) -> bool {
    hook.get("rules").and_then(Value::as_array).into_iter().flatten().any(|r| rule_matches(r, a))
}

fn strings(v: &Value, key: &str) -> Vec<String> {
    v.get(key).and_then(Value::as_array).into_iter().flatten().filter_map(|s| s.as_str().map(str::to_string)).collect()
}

fn exact_or_wildcard(items: &[String], requested: &str) -> bool {
    items.iter().any(|i| i == "*" || i == requested)
}

pub fn rule_matches(rule: &Value, a: &Attributes<'_>) -> bool {
    let namespaces = a.resource == "namespaces" && a.group.is_empty();
    let scope = match rule.get("scope").and_then(Value::as_str).unwrap_or("*") {
        "*" => true,
        "Namespaced" => !namespaces && !a.namespace.is_empty(),
        "Cluster" => namespaces || a.namespace.is_empty(),
        _ => false,
    };
    let operation = strings(rule, "operations").iter().any(|o| o == "*" || o == a.operation);
    let resource = strings(rule, "resources").iter().any(|r| {
        let (res, sub) = r.split_once('/').unwrap_or((r.as_str(), ""));
        (res == "*" || res == a.resource) && (sub == "*" || sub == a.subresource)
    });
    scope
        && operation
        && exact_or_wildcard(&strings(rule, "apiGroups"), a.group)
        && exact_or_wildcard(&strings(rule, "apiVersions"), a.version)
        && resource
}

/// A policy's or binding's `MatchResources` rules: one of `resourceRules` matches (its
/// `resourceNames`, when given, naming the object; no rules match everything) and none of
/// `excludeResourceRules` does.
pub fn resource_rules_match(m: &Value, a: &Attributes<'_>, name: &str) -> bool {
    let named = |r: &Value| {
        let names = strings(r, "resourceNames");
        rule_matches(r, a) && (names.is_empty() || names.iter().any(|n| n == name))
    };
    let rules = |key: &str| m.get(key).and_then(Value::as_array).cloned().unwrap_or_default();
    let included = rules("resourceRules");
    (included.is_empty() || included.iter().any(named)) && !rules("excludeResourceRules").iter().any(named)
}

fn labels(obj: Option<&Value>) -> Option<&Map<String, Value>> {
    obj.and_then(|o| o.pointer("/metadata/labels")).and_then(Value::as_object)
}

/// `MatchObjectSelector`: the new or the old object carries matching labels (an empty selector
/// matches everything, an object without metadata nothing).
pub fn object_selector_matches(hook: &Value, a: &Attributes<'_>) -> Result<bool, String> {
    let sel =
        LabelSelector::from_json(hook.get("objectSelector").unwrap_or(&Value::Null)).map_err(|e| e.to_string())?;
    if sel.is_empty() {
        return Ok(true);
    }
    let matches = |o: Option<&Value>| o.and_then(|o| o.get("metadata")).is_some() && sel.matches(labels(o));
    Ok(matches(a.object) || matches(a.old))
}

/// `MatchNamespaceSelector`: cluster-scoped requests (but Namespaces) always match; otherwise
/// the labels of the request's namespace — a Namespace's own, from the object — must.
/// `namespace_labels` looks a namespace up: `None` when it does not exist.
pub fn namespace_selector_matches(
    hook: &Value,
    a: &Attributes<'_>,
    namespace_labels: impl FnOnce(&str) -> Option<Option<Map<String, Value>>>,
) -> Result<Result<bool, NamespaceNotFound>, String> {
    let namespaces = a.resource == "namespaces" && a.group.is_empty();
    if a.namespace.is_empty() && !namespaces {
        return Ok(Ok(true));
    }
    let sel =
        LabelSelector::from_json(hook.get("namespaceSelector").unwrap_or(&Value::Null)).map_err(|e| e.to_string())?;
    if sel.is_empty() {
        return Ok(Ok(true));
    }
    // A Namespace being created or updated is not in any lister yet: its own labels decide.
    if namespaces && a.subresource.is_empty() && matches!(a.operation, "CREATE" | "UPDATE") {
        return Ok(Ok(sel.matches(labels(a.object))));
    }
    let name = match a.namespace {
        "" => a.object.or(a.old).and_then(|o| o.pointer("/metadata/name")).and_then(Value::as_str).unwrap_or(""),
        ns => ns,
    };
    Ok(match namespace_labels(name) {
        Some(l) => Ok(sel.matches(l.as_ref())),
        None => Err(NamespaceNotFound(format!("namespaces \"{name}\" not found"))),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn attrs<'a>(op: &'a str, resource: &'a str, sub: &'a str, ns: &'a str, obj: Option<&'a Value>) -> Attributes<'a> {
        Attributes {
            operation: op,
            group: "",
            version: "v1",
            resource,
            subresource: sub,
            namespace: ns,
            object: obj,
            old: None,
        }
    }

    fn rule(ops: &[&str], resources: &[&str], scope: &str) -> Value {
        json!({"operations": ops, "apiGroups": [""], "apiVersions": ["v1"], "resources": resources, "scope": scope})
    }

    #[test]
    fn rules_match_operation_resource_subresource_and_scope() {
        let a = attrs("CREATE", "pods", "", "ns", None);
        assert!(rule_matches(&rule(&["CREATE"], &["pods"], "*"), &a));
        assert!(rule_matches(&rule(&["*"], &["*"], "Namespaced"), &a));
        assert!(!rule_matches(&rule(&["UPDATE"], &["pods"], "*"), &a));
        assert!(!rule_matches(&rule(&["CREATE"], &["pods"], "Cluster"), &a));
        let status = attrs("UPDATE", "pods", "status", "ns", None);
        assert!(!rule_matches(&rule(&["*"], &["pods"], "*"), &status), "a resource rule leaves subresources out");
        assert!(!rule_matches(&rule(&["*"], &["*"], "*"), &status));
        assert!(rule_matches(&rule(&["*"], &["pods/*"], "*"), &status));
        assert!(rule_matches(&rule(&["*"], &["*/status"], "*"), &status));
        assert!(rule_matches(&rule(&["*"], &["*/*"], "*"), &status));
        let ns = attrs("CREATE", "namespaces", "", "", None);
        assert!(rule_matches(&rule(&["*"], &["namespaces"], "Cluster"), &ns));
        assert!(!rule_matches(&rule(&["*"], &["namespaces"], "Namespaced"), &ns));
        let mut other_group = rule(&["*"], &["*"], "*");
        other_group["apiGroups"] = json!(["apps"]);
        assert!(!rule_matches(&other_group, &a));
    }

    #[test]
    fn object_selectors_match_the_new_or_the_old_object() {
        let hook = json!({"objectSelector": {"matchLabels": {"hook": "yes"}}});
        let labelled = json!({"metadata": {"labels": {"hook": "yes"}}});
        let plain = json!({"metadata": {}});
        let mut a = attrs("UPDATE", "configmaps", "", "ns", Some(&plain));
        assert_eq!(object_selector_matches(&hook, &a), Ok(false));
        a.old = Some(&labelled);
        assert_eq!(object_selector_matches(&hook, &a), Ok(true));
        assert_eq!(
            object_selector_matches(&json!({"objectSelector": {}}), &attrs("CONNECT", "pods", "attach", "ns", None)),
            Ok(true)
        );
    }

    #[test]
    fn namespace_selectors_read_the_namespace_and_skip_cluster_scoped_kinds() {
        let hook = json!({"namespaceSelector": {"matchLabels": {"team": "a"}}});
        let found = |_: &str| Some(json!({"team": "a"}).as_object().cloned());
        let a = attrs("CREATE", "pods", "", "ns", None);
        assert_eq!(namespace_selector_matches(&hook, &a, found), Ok(Ok(true)));
        assert_eq!(namespace_selector_matches(&hook, &a, |_| Some(None)), Ok(Ok(false)));
        assert_eq!(
            namespace_selector_matches(&hook, &a, |_| None),
            Ok(Err(NamespaceNotFound("namespaces \"ns\" not found".into())))
        );
        let node = attrs("CREATE", "nodes", "", "", None);
        assert_eq!(namespace_selector_matches(&hook, &node, |_| None), Ok(Ok(true)));
        let labelled = json!({"metadata": {"name": "new", "labels": {"team": "a"}}});
        let ns = attrs("CREATE", "namespaces", "", "", Some(&labelled));
        assert_eq!(namespace_selector_matches(&hook, &ns, |_| None), Ok(Ok(true)));
    }

    #[test]
    fn policy_rules_name_resources_and_exclude() {
        let m = json!({"resourceRules": [{"operations": ["*"], "apiGroups": [""], "apiVersions": ["*"], "resources": ["configmaps"], "resourceNames": ["cfg"]}],
            "excludeResourceRules": [{"operations": ["DELETE"], "apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*"]}]});
        assert!(resource_rules_match(&m, &attrs("UPDATE", "configmaps", "", "ns", None), "cfg"));
        assert!(!resource_rules_match(&m, &attrs("UPDATE", "configmaps", "", "ns", None), "other"));
        assert!(!resource_rules_match(&m, &attrs("DELETE", "configmaps", "", "ns", None), "cfg"));
    }

    #[test]
    fn admission_configuration_is_exempt() {
        assert!(exempt("admissionregistration.k8s.io", "validatingwebhookconfigurations"));
        assert!(!exempt("", "configmaps"));
    }
}
