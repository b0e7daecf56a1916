//! rbac.authorization.k8s.io/v1 validation: policy rules, role references and subjects, with
//! Kubernetes' messages (`pkg/apis/rbac/validation`).

use serde_json::Value;

use super::apps::validate_label_selector;
use super::causes::{go_quote, BadValue, Cause};
use super::json::{arr, st, strs};
use super::names::dns1123_subdomain_errors;
use super::obj_or_null;

pub const GROUP: &str = "rbac.authorization.k8s.io";

/// `path.IsValidPathSegmentName`: what RBAC object names (and role references) must satisfy.
pub fn path_segment_errors(name: &str) -> Vec<String> {
    match name {
        "." => return vec!["may not be '.'".into()],
        ".." => return vec!["may not be '..'".into()],
        _ => {}
    }
    let mut out = Vec::new();
    for c in ['/', '%'] {
        if name.contains(c) {
            out.push(format!("may not contain '{c}'"));
        }
    }
    out
}

fn validate_rule(rule: &Value, namespaced: bool, path: &str, out: &mut Vec<Cause>) {
    if arr(rule, "verbs").is_empty() {
        out.push(Cause::required(format!("{path}.verbs"), "verbs must contain at least one value"));
    }
    let urls = strs(rule, "nonResourceURLs");
    if !urls.is_empty() {
        let shown = BadValue::Raw(go_string_slice(&urls));
        if namespaced {
            out.push(Cause::invalid(
                format!("{path}.nonResourceURLs"),
                shown.clone(),
                "namespaced rules cannot apply to non-resource URLs",
            ));
        }
        if !arr(rule, "apiGroups").is_empty()
            || !arr(rule, "resources").is_empty()
            || !arr(rule, "resourceNames").is_empty()
        {
            out.push(Cause::invalid(
                format!("{path}.nonResourceURLs"),
                shown,
                "rules cannot apply to both regular resources and non-resource URLs",
            ));
        }
        return;
    }
    if arr(rule, "apiGroups").is_empty() {
        out.push(Cause::required(format!("{path}.apiGroups"), "resource rules must supply at least one api group"));
    }
    if arr(rule, "resources").is_empty() {
        out.push(Cause::required(format!("{path}.resources"), "resource rules must supply at least one resource"));
    }
}

/// Go's `%v` of a `[]string`: `[a b]`.
fn go_string_slice(items: &[String]) -> String {
    format!("[{}]", items.join(" "))
}

/// Role (namespaced) or ClusterRole rules, and a ClusterRole's aggregationRule.
pub(super) fn validate_role(obj: &Value, namespaced: bool, out: &mut Vec<Cause>) {
    for (i, rule) in arr(obj, "rules").iter().enumerate() {
        validate_rule(rule, namespaced, &format!("rules[{i}]"), out);
    }
    if let Some(agg) = obj.get("aggregationRule").filter(|a| !a.is_null()) {
        let selectors = arr(agg, "clusterRoleSelectors");
        if selectors.is_empty() {
            out.push(Cause::required(
                "aggregationRule.clusterRoleSelectors",
                "at least one clusterRoleSelector required if aggregationRule is non-nil",
            ));
        }
        for (i, sel) in selectors.iter().enumerate() {
            validate_label_selector(sel, &format!("aggregationRule.clusterRoleSelectors[{i}]"), out);
        }
    }
}

/// RoleBinding (`namespaced`) or ClusterRoleBinding: the role reference and every subject.
pub(super) fn validate_binding(obj: &Value, namespaced: bool, out: &mut Vec<Cause>) {
    let role_ref = obj_or_null(obj, "roleRef");
    let group = st(role_ref, "apiGroup");
    if group != GROUP {
        out.push(Cause::not_supported("roleRef.apiGroup", group, &[GROUP]));
    }
    let kinds: &[&str] = if namespaced { &["Role", "ClusterRole"] } else { &["ClusterRole"] };
    let kind = st(role_ref, "kind");
    if !kinds.contains(&kind) {
        out.push(Cause::not_supported("roleRef.kind", kind, kinds));
    }
    let name = st(role_ref, "name");
    if name.is_empty() {
        out.push(Cause::required("roleRef.name", ""));
    } else {
        out.extend(path_segment_errors(name).iter().map(|m| Cause::invalid("roleRef.name", name, m)));
    }
    for (i, s) in arr(obj, "subjects").iter().enumerate() {
        validate_subject(s, namespaced, &format!("subjects[{i}]"), out);
    }
}

fn validate_subject(s: &Value, namespaced: bool, path: &str, out: &mut Vec<Cause>) {
    let name = st(s, "name");
    if name.is_empty() {
        out.push(Cause::required(format!("{path}.name"), ""));
    }
    let group = st(s, "apiGroup");
    match st(s, "kind") {
        "ServiceAccount" => {
            if !name.is_empty() {
                out.extend(
                    dns1123_subdomain_errors(name).iter().map(|m| Cause::invalid(format!("{path}.name"), name, m)),
                );
            }
            if !group.is_empty() {
                out.push(Cause::not_supported(format!("{path}.apiGroup"), group, &[""]));
            }
            if !namespaced && st(s, "namespace").is_empty() {
                out.push(Cause::required(format!("{path}.namespace"), ""));
            }
        }
        "User" | "Group" => {
            if group != GROUP {
                out.push(Cause::not_supported(format!("{path}.apiGroup"), group, &[GROUP]));
            }
        }
        other => out.push(Cause::not_supported(format!("{path}.kind"), other, &["ServiceAccount", "User", "Group"])),
    }
}

/// A binding's roleRef never changes: Kubernetes' `cannot change roleRef`, with the Go rendering
/// of the new reference.
pub(super) fn validate_binding_update(new: &Value, old: &Value, out: &mut Vec<Cause>) {
    let (n, o) = (obj_or_null(new, "roleRef"), obj_or_null(old, "roleRef"));
    let fields = ["apiGroup", "kind", "name"];
    if fields.iter().any(|f| st(n, f) != st(o, f)) {
        let shown = format!(
            "rbac.RoleRef{{APIGroup:{}, Kind:{}, Name:{}}}",
            go_quote(st(n, "apiGroup")),
            go_quote(st(n, "kind")),
            go_quote(st(n, "name"))
        );
        out.push(Cause::invalid("roleRef", BadValue::Raw(shown), "cannot change roleRef"));
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::validation::{invalid_message, validate_create, validate_update};

    fn binding(role_ref: serde_json::Value, subjects: serde_json::Value) -> serde_json::Value {
        json!({"metadata": {"name": "b", "namespace": "team"}, "roleRef": role_ref, "subjects": subjects})
    }

    #[test]
    fn a_role_binding_may_not_change_its_role() {
        let old = binding(
            json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "reader"}),
            json!([{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "alice"}]),
        );
        let mut new = old.clone();
        new["roleRef"]["name"] = json!("writer");
        let causes = validate_update("RoleBinding", &new, &old);
        assert_eq!(
            invalid_message("RoleBinding", "b", &causes),
            "RoleBinding \"b\" is invalid: roleRef: Invalid value: rbac.RoleRef{APIGroup:\"rbac.authorization.k8s.io\", Kind:\"Role\", Name:\"writer\"}: cannot change roleRef"
        );
        assert_eq!(validate_update("RoleBinding", &old, &old), vec![]);
    }

    #[test]
    fn bindings_check_their_role_reference_and_subjects() {
        let b = json!({"metadata": {"name": "b"}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "r"},
                       "subjects": [{"kind": "ServiceAccount", "name": "default"}, {"kind": "Robot", "name": "r2"},
                                    {"kind": "User", "name": "u"}]});
        let causes = validate_create("ClusterRoleBinding", &b);
        let shown: Vec<String> = causes.iter().map(|c| format!("{}: {}", c.field, c.message)).collect();
        assert_eq!(
            shown,
            [
                "roleRef.kind: Unsupported value: \"Role\": supported values: \"ClusterRole\"",
                "subjects[0].namespace: Required value",
                "subjects[1].kind: Unsupported value: \"Robot\": supported values: \"ServiceAccount\", \"User\", \"Group\"",
                "subjects[2].apiGroup: Unsupported value: \"\": supported values: \"rbac.authorization.k8s.io\"",
            ]
        );
    }

    #[test]
    fn rules_need_verbs_and_resources_and_roles_no_urls() {
        let role = json!({"metadata": {"name": "r", "namespace": "team"},
                          "rules": [{"apiGroups": [""], "resources": ["pods"]}, {"verbs": ["get"], "nonResourceURLs": ["/healthz"]}]});
        let shown: Vec<String> =
            validate_create("Role", &role).iter().map(|c| format!("{}: {}", c.field, c.message)).collect();
        assert_eq!(
            shown,
            [
                "rules[0].verbs: Required value: verbs must contain at least one value",
                "rules[1].nonResourceURLs: Invalid value: [/healthz]: namespaced rules cannot apply to non-resource URLs",
            ]
        );
        let cluster =
            json!({"metadata": {"name": "system:r"}, "rules": [{"verbs": ["get"], "nonResourceURLs": ["/healthz"]}]});
        assert_eq!(validate_create("ClusterRole", &cluster), vec![]);
        let bad_name = json!({"metadata": {"name": "a/b"}});
        assert_eq!(validate_create("ClusterRole", &bad_name)[0].message, "Invalid value: \"a/b\": may not contain '/'");
    }
}
