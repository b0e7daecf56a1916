//! Policy rules, pure: whether a rule allows a request (`RuleAllows`), whether a subject names a
//! user (`appliesToUser`), whether one set of rules covers another (`Covers`, for escalation
//! checks) and the compact form Kubernetes prints rules in.

use crate::auth::{names, Attributes, UserInfo};
use k8s_openapi::api::rbac::v1::{PolicyRule, Subject};

pub const VERB_ALL: &str = "*";
pub const API_GROUP_ALL: &str = "*";
pub const RESOURCE_ALL: &str = "*";
pub const NON_RESOURCE_ALL: &str = "*";

/// A resource rule: `verbs` on `resources` of `groups`.
pub fn rule(verbs: &[&str], groups: &[&str], resources: &[&str]) -> PolicyRule {
    let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    PolicyRule { verbs: v(verbs), api_groups: Some(v(groups)), resources: Some(v(resources)), ..Default::default() }
}

fn list(v: &Option<Vec<String>>) -> &[String] {
    v.as_deref().unwrap_or(&[])
}

fn has(v: &[String], s: &str) -> bool {
    v.iter().any(|x| x == s)
}

fn has_all(set: &[String], wanted: &[String]) -> bool {
    wanted.iter().all(|w| has(set, w))
}

pub fn verb_matches(rule: &PolicyRule, verb: &str) -> bool {
    rule.verbs.iter().any(|v| v == VERB_ALL || v == verb)
}

pub fn api_group_matches(rule: &PolicyRule, group: &str) -> bool {
    list(&rule.api_groups).iter().any(|g| g == API_GROUP_ALL || g == group)
}

/// `resource` is `pods` or `pods/log`; a rule's `*/log` matches any resource's log.
pub fn resource_matches(rule: &PolicyRule, combined: &str, subresource: &str) -> bool {
    list(&rule.resources).iter().any(|r| {
        r == RESOURCE_ALL
            || r == combined
            || (!subresource.is_empty()
                && r.len() == subresource.len() + 2
                && r.starts_with("*/")
                && r.ends_with(subresource))
    })
}

pub fn resource_name_matches(rule: &PolicyRule, name: &str) -> bool {
    let names = list(&rule.resource_names);
    names.is_empty() || has(names, name)
}

/// `*` matches every path, `/apis/*` every path under `/apis/`.
pub fn non_resource_url_matches(rule: &PolicyRule, path: &str) -> bool {
    list(&rule.non_resource_urls).iter().any(|u| url_covers(u, path))
}

fn url_covers(owner: &str, path: &str) -> bool {
    owner == NON_RESOURCE_ALL
        || owner == path
        || (owner.ends_with('*') && path.starts_with(owner.trim_end_matches('*')))
}

/// Kubernetes' `RuleAllows`.
pub fn rule_allows(attrs: &Attributes, rule: &PolicyRule) -> bool {
    if !verb_matches(rule, &attrs.verb) {
        return false;
    }
    if !attrs.resource_request {
        return non_resource_url_matches(rule, &attrs.path);
    }
    let combined = if attrs.subresource.is_empty() {
        std::borrow::Cow::Borrowed(attrs.resource.as_str())
    } else {
        std::borrow::Cow::Owned(format!("{}/{}", attrs.resource, attrs.subresource))
    };
    api_group_matches(rule, &attrs.api_group)
        && resource_matches(rule, &combined, &attrs.subresource)
        && resource_name_matches(rule, &attrs.name)
}

/// Kubernetes' `appliesToUser`: a ServiceAccount subject without a namespace means the binding's.
pub fn applies_to(user: &UserInfo, subject: &Subject, binding_namespace: &str) -> bool {
    match subject.kind.as_str() {
        "User" => user.name == subject.name,
        "Group" => user.in_group(&subject.name),
        "ServiceAccount" => {
            let ns = subject.namespace.as_deref().filter(|n| !n.is_empty()).unwrap_or(binding_namespace);
            !ns.is_empty() && service_account_matches(&user.name, ns, &subject.name)
        }
        _ => false,
    }
}

/// `system:serviceaccount:<ns>:<name>` without building the string.
fn service_account_matches(user: &str, ns: &str, name: &str) -> bool {
    user.strip_prefix(names::SERVICE_ACCOUNT_USER_PREFIX)
        .and_then(|rest| rest.strip_prefix(ns))
        .and_then(|rest| rest.strip_prefix(':'))
        .is_some_and(|rest| rest == name)
}

/// Kubernetes' `BreakdownRule`: one verb, one group, one resource (or URL), one name per rule.
pub fn breakdown(rule: &PolicyRule) -> Vec<PolicyRule> {
    let one = |s: &String| Some(vec![s.clone()]);
    let mut out = Vec::new();
    for group in list(&rule.api_groups) {
        for resource in list(&rule.resources) {
            for verb in &rule.verbs {
                let base = PolicyRule {
                    api_groups: one(group),
                    resources: one(resource),
                    verbs: vec![verb.clone()],
                    ..Default::default()
                };
                let names = list(&rule.resource_names);
                if names.is_empty() {
                    out.push(base);
                } else {
                    out.extend(names.iter().map(|n| PolicyRule { resource_names: one(n), ..base.clone() }));
                }
            }
        }
    }
    for url in list(&rule.non_resource_urls) {
        for verb in &rule.verbs {
            out.push(PolicyRule { non_resource_urls: one(url), verbs: vec![verb.clone()], ..Default::default() });
        }
    }
    out
}

fn resources_cover_all(owner: &[String], wanted: &[String]) -> bool {
    if has(owner, RESOURCE_ALL) || has_all(owner, wanted) {
        return true;
    }
    wanted
        .iter()
        .all(|path| has(owner, path) || path.split_once('/').is_some_and(|(_, sub)| has(owner, &format!("*/{sub}"))))
}

/// Kubernetes' `ruleCovers`.
fn rule_covers(owner: &PolicyRule, sub: &PolicyRule) -> bool {
    let verbs = has(&owner.verbs, VERB_ALL) || has_all(&owner.verbs, &sub.verbs);
    let groups = has(list(&owner.api_groups), API_GROUP_ALL) || has_all(list(&owner.api_groups), list(&sub.api_groups));
    let resources = resources_cover_all(list(&owner.resources), list(&sub.resources));
    let urls =
        list(&sub.non_resource_urls).iter().all(|p| list(&owner.non_resource_urls).iter().any(|o| url_covers(o, p)));
    let owner_names = list(&owner.resource_names);
    let names = owner_names.is_empty()
        || (!list(&sub.resource_names).is_empty() && has_all(owner_names, list(&sub.resource_names)));
    verbs && groups && resources && names && urls
}

/// Kubernetes' `Covers`: whether `owner` holds every permission of `wanted`, and the atomic
/// rules it lacks.
pub fn covers(owner: &[PolicyRule], wanted: &[PolicyRule]) -> (bool, Vec<PolicyRule>) {
    let missing: Vec<PolicyRule> =
        wanted.iter().flat_map(breakdown).filter(|sub| !owner.iter().any(|o| rule_covers(o, sub))).collect();
    (missing.is_empty(), missing)
}

/// Kubernetes' `CompactRules`: simple resource rules (one group, one resource, no names) that
/// differ only in their verbs become one rule.
pub fn compact(rules: Vec<PolicyRule>) -> Vec<PolicyRule> {
    let mut out: Vec<PolicyRule> = Vec::new();
    for r in rules {
        let simple = |x: &PolicyRule| {
            list(&x.api_groups).len() == 1
                && list(&x.resources).len() == 1
                && list(&x.resource_names).is_empty()
                && list(&x.non_resource_urls).is_empty()
        };
        if simple(&r) {
            if let Some(existing) =
                out.iter_mut().find(|o| simple(o) && o.api_groups == r.api_groups && o.resources == r.resources)
            {
                for v in r.verbs {
                    if !has(&existing.verbs, &v) {
                        existing.verbs.push(v);
                    }
                }
                continue;
            }
        }
        out.push(r);
    }
    out
}

/// Go's `%q` of a `[]string`: `["a" "b"]`.
fn go_quoted_list(items: &[String]) -> String {
    let quoted: Vec<String> = items.iter().map(|s| format!("{s:?}")).collect();
    format!("[{}]", quoted.join(" "))
}

/// Kubernetes' `CompactString`: `{APIGroups:[""], Resources:["pods"], Verbs:["get"]}`.
pub fn compact_string(r: &PolicyRule) -> String {
    let mut parts = Vec::new();
    for (label, items) in [
        ("APIGroups", list(&r.api_groups)),
        ("Resources", list(&r.resources)),
        ("NonResourceURLs", list(&r.non_resource_urls)),
        ("ResourceNames", list(&r.resource_names)),
        ("Verbs", r.verbs.as_slice()),
    ] {
        if !items.is_empty() {
            parts.push(format!("{label}:{}", go_quoted_list(items)));
        }
    }
    format!("{{{}}}", parts.join(", "))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::sync::Arc;

    pub fn attrs(verb: &str, group: &str, resource: &str, sub: &str, ns: &str, name: &str) -> Attributes {
        Attributes {
            user: Arc::new(UserInfo::new("alice", &[])),
            verb: verb.into(),
            namespace: ns.into(),
            api_group: group.into(),
            api_version: "v1".into(),
            resource: resource.into(),
            subresource: sub.into(),
            name: name.into(),
            path: String::new(),
            resource_request: true,
        }
    }

    #[test]
    fn rules_match_verbs_groups_resources_subresources_and_names() {
        let r = rule(&["get", "list"], &[""], &["pods", "pods/log"]);
        assert!(rule_allows(&attrs("get", "", "pods", "", "d", "web"), &r));
        assert!(rule_allows(&attrs("get", "", "pods", "log", "d", "web"), &r));
        assert!(!rule_allows(&attrs("get", "", "pods", "exec", "d", "web"), &r), "a subresource is its own resource");
        assert!(!rule_allows(&attrs("delete", "", "pods", "", "d", "web"), &r));
        assert!(!rule_allows(&attrs("get", "apps", "pods", "", "d", "web"), &r));
        let star = rule(&["*"], &["*"], &["*/scale"]);
        assert!(rule_allows(&attrs("update", "apps", "deployments", "scale", "d", "x"), &star));
        assert!(!rule_allows(&attrs("update", "apps", "deployments", "", "d", "x"), &star));
        let named = PolicyRule { resource_names: Some(vec!["cfg".into()]), ..rule(&["get"], &[""], &["configmaps"]) };
        assert!(rule_allows(&attrs("get", "", "configmaps", "", "d", "cfg"), &named));
        assert!(!rule_allows(&attrs("get", "", "configmaps", "", "d", "other"), &named));
        assert!(!rule_allows(&attrs("list", "", "configmaps", "", "d", ""), &named), "names never allow a list");
    }

    #[test]
    fn non_resource_urls_match_exactly_or_by_prefix_star() {
        let r = PolicyRule {
            verbs: vec!["get".into()],
            non_resource_urls: Some(vec!["/healthz".into(), "/apis/*".into()]),
            ..Default::default()
        };
        let path = |p: &str| Attributes { verb: "get".into(), path: p.into(), ..Default::default() };
        assert!(rule_allows(&path("/healthz"), &r));
        assert!(rule_allows(&path("/apis/apps/v1"), &r));
        assert!(!rule_allows(&path("/healthz/etcd"), &r));
        assert!(!rule_allows(&path("/metrics"), &r));
    }

    #[test]
    fn subjects_name_users_groups_and_service_accounts() {
        let sa = UserInfo::new("system:serviceaccount:ci:builder", &["system:serviceaccounts"]);
        let subject = |kind: &str, name: &str, ns: Option<&str>| Subject {
            kind: kind.into(),
            name: name.into(),
            namespace: ns.map(str::to_string),
            ..Default::default()
        };
        assert!(applies_to(&sa, &subject("ServiceAccount", "builder", None), "ci"));
        assert!(!applies_to(&sa, &subject("ServiceAccount", "builder", None), "other"));
        assert!(applies_to(&sa, &subject("ServiceAccount", "builder", Some("ci")), ""));
        assert!(!applies_to(&sa, &subject("ServiceAccount", "build", Some("ci")), ""));
        assert!(applies_to(&sa, &subject("Group", "system:serviceaccounts", None), ""));
        assert!(!applies_to(&sa, &subject("User", "builder", None), "ci"));
    }

    #[test]
    fn covers_finds_the_permissions_an_owner_lacks() {
        let owner = [rule(&["get", "list"], &[""], &["pods", "*/log"])];
        assert!(covers(&owner, &[rule(&["get"], &[""], &["pods", "pods/log"])]).0);
        let (ok, missing) = covers(&owner, &[rule(&["get", "delete", "create"], &["", "apps"], &["pods"])]);
        assert!(!ok);
        let shown: Vec<String> = compact(missing).iter().map(compact_string).collect();
        assert_eq!(
            shown,
            [
                r#"{APIGroups:[""], Resources:["pods"], Verbs:["delete" "create"]}"#,
                r#"{APIGroups:["apps"], Resources:["pods"], Verbs:["get" "delete" "create"]}"#,
            ]
        );
        let admin = [rule(&["*"], &["*"], &["*"])];
        assert!(covers(&admin, &[rule(&["escalate"], &["rbac.authorization.k8s.io"], &["roles"])]).0);
        let named = [PolicyRule { resource_names: Some(vec!["a".into()]), ..rule(&["get"], &[""], &["secrets"]) }];
        assert!(!covers(&named, &[rule(&["get"], &[""], &["secrets"])]).0, "a named grant covers no unnamed one");
    }
}
