//! A small builder for policy rules and bootstrap objects, so the role tables read like
//! Kubernetes' `bootstrappolicy` (`NewRule("get").Groups("").Resources("pods")`).

use k8s_openapi::api::rbac::v1::{
    AggregationRule, ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use std::collections::BTreeMap;

pub const READ: &[&str] = &["get", "list", "watch"];
pub const WRITE: &[&str] = &["create", "update", "patch", "delete", "deletecollection"];
pub const READ_WRITE: &[&str] = &["get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"];
pub const RBAC_GROUP: &str = "rbac.authorization.k8s.io";
/// Every bootstrap object carries this label and the auto-update annotation.
pub const BOOTSTRAP_LABEL: (&str, &str) = ("kubernetes.io/bootstrapping", "rbac-defaults");
pub const AUTOUPDATE: &str = "rbac.authorization.kubernetes.io/autoupdate";

fn strings(s: &[&str]) -> Vec<String> {
    s.iter().map(|x| x.to_string()).collect()
}

pub fn rule(verbs: &[&str]) -> PolicyRule {
    PolicyRule { verbs: strings(verbs), ..Default::default() }
}

pub trait RuleExt {
    fn groups(self, g: &[&str]) -> Self;
    fn resources(self, r: &[&str]) -> Self;
    fn names(self, n: &[&str]) -> Self;
    fn urls(self, u: &[&str]) -> Self;
}

impl RuleExt for PolicyRule {
    fn groups(mut self, g: &[&str]) -> Self {
        self.api_groups = Some(strings(g));
        self
    }
    fn resources(mut self, r: &[&str]) -> Self {
        self.resources = Some(strings(r));
        self
    }
    fn names(mut self, n: &[&str]) -> Self {
        self.resource_names = Some(strings(n));
        self
    }
    fn urls(mut self, u: &[&str]) -> Self {
        self.non_resource_urls = Some(strings(u));
        self
    }
}

/// `eventsRule()`: create/update/patch core and events.k8s.io events.
pub fn events_rule() -> PolicyRule {
    rule(&["create", "update", "patch"]).groups(&["", "events.k8s.io"]).resources(&["events"])
}

fn meta(name: &str, namespace: Option<&str>, labels: &[(&str, &str)]) -> ObjectMeta {
    let mut l: BTreeMap<String, String> = labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    l.insert(BOOTSTRAP_LABEL.0.into(), BOOTSTRAP_LABEL.1.into());
    ObjectMeta {
        name: Some(name.into()),
        namespace: namespace.map(str::to_string),
        labels: Some(l),
        annotations: Some(BTreeMap::from([(AUTOUPDATE.to_string(), "true".to_string())])),
        ..Default::default()
    }
}

pub fn cluster_role(name: &str, rules: Vec<PolicyRule>) -> ClusterRole {
    ClusterRole { metadata: meta(name, None, &[]), rules: Some(rules), ..Default::default() }
}

/// A ClusterRole whose own labels make other aggregated roles pick it up.
pub fn labelled_cluster_role(name: &str, labels: &[(&str, &str)], rules: Vec<PolicyRule>) -> ClusterRole {
    ClusterRole { metadata: meta(name, None, labels), rules: Some(rules), ..Default::default() }
}

/// A ClusterRole built by aggregation from every ClusterRole labelled `<select>: "true"`.
pub fn aggregated_cluster_role(name: &str, labels: &[(&str, &str)], select: &str) -> ClusterRole {
    ClusterRole {
        metadata: meta(name, None, labels),
        aggregation_rule: Some(AggregationRule {
            cluster_role_selectors: Some(vec![LabelSelector {
                match_labels: Some(BTreeMap::from([(select.to_string(), "true".to_string())])),
                ..Default::default()
            }]),
        }),
        rules: None,
    }
}

pub fn role(name: &str, namespace: &str, rules: Vec<PolicyRule>) -> Role {
    Role { metadata: meta(name, Some(namespace), &[]), rules: Some(rules) }
}

pub fn user(name: &str) -> Subject {
    Subject { kind: "User".into(), api_group: Some(RBAC_GROUP.into()), name: name.into(), namespace: None }
}

pub fn group(name: &str) -> Subject {
    Subject { kind: "Group".into(), api_group: Some(RBAC_GROUP.into()), name: name.into(), namespace: None }
}

pub fn service_account(namespace: &str, name: &str) -> Subject {
    Subject { kind: "ServiceAccount".into(), api_group: None, name: name.into(), namespace: Some(namespace.into()) }
}

fn role_ref(kind: &str, name: &str) -> RoleRef {
    RoleRef { api_group: Some(RBAC_GROUP.into()), kind: kind.into(), name: name.into() }
}

/// A ClusterRoleBinding named after the ClusterRole it binds.
pub fn cluster_binding(role: &str, subjects: Vec<Subject>) -> ClusterRoleBinding {
    ClusterRoleBinding {
        metadata: meta(role, None, &[]),
        role_ref: role_ref("ClusterRole", role),
        subjects: Some(subjects),
    }
}

/// A RoleBinding named after the Role it binds, in `namespace`.
pub fn role_binding(role: &str, namespace: &str, subjects: Vec<Subject>) -> RoleBinding {
    RoleBinding {
        metadata: meta(role, Some(namespace), &[]),
        role_ref: role_ref("Role", role),
        subjects: Some(subjects),
    }
}
