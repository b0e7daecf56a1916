//! A snapshot of every Role, ClusterRole, RoleBinding and ClusterRoleBinding, resolved once so a
//! request walks only the bindings and rules that can apply (Kubernetes' `VisitRulesFor`).

use super::rule::{applies_to, rule_allows};
use crate::auth::{Attributes, UserInfo};
use k8s_openapi::api::rbac::v1::{PolicyRule, RoleRef, Subject};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;

/// One binding with its role's rules resolved (or why they could not be).
#[derive(Debug, Clone)]
pub struct Binding {
    pub name: String,
    /// Empty for a ClusterRoleBinding.
    pub namespace: String,
    pub role_ref: RoleRef,
    pub subjects: Vec<Subject>,
    pub rules: Result<Arc<Vec<PolicyRule>>, String>,
}

impl Binding {
    /// `ClusterRoleBinding "x" of ClusterRole "y"` / `RoleBinding "x/ns" of Role "y"`, as
    /// Kubernetes' `String()` of its rule source.
    fn describe(&self) -> String {
        if self.namespace.is_empty() {
            format!("ClusterRoleBinding {:?} of {} {:?}", self.name, self.role_ref.kind, self.role_ref.name)
        } else {
            format!(
                "RoleBinding {:?} of {} {:?}",
                format!("{}/{}", self.name, self.namespace),
                self.role_ref.kind,
                self.role_ref.name
            )
        }
    }
}

/// Every role and binding of the cluster at one moment.
#[derive(Debug, Default)]
pub struct Policy {
    cluster_roles: HashMap<String, Arc<Vec<PolicyRule>>>,
    roles: HashMap<(String, String), Arc<Vec<PolicyRule>>>,
    cluster_bindings: Vec<Binding>,
    bindings: HashMap<String, Vec<Binding>>,
}

/// What `rules_for` found: the rules and any role that could not be resolved.
#[derive(Debug, Default, Clone)]
pub struct Rules {
    pub rules: Vec<PolicyRule>,
    pub errors: Vec<String>,
}

fn rules_of(obj: &Value) -> Vec<PolicyRule> {
    obj.get("rules").cloned().and_then(|r| serde_json::from_value(r).ok()).unwrap_or_default()
}

fn str_at<'a>(v: &'a Value, p: &str) -> &'a str {
    v.pointer(p).and_then(Value::as_str).unwrap_or("")
}

impl Policy {
    /// Build from the stored objects of the four kinds (each a JSON object).
    pub fn build<'a>(
        cluster_roles: impl IntoIterator<Item = &'a Value>,
        roles: impl IntoIterator<Item = &'a Value>,
        cluster_bindings: impl IntoIterator<Item = &'a Value>,
        bindings: impl IntoIterator<Item = &'a Value>,
    ) -> Self {
        let mut p = Policy::default();
        for r in cluster_roles {
            p.cluster_roles.insert(str_at(r, "/metadata/name").to_string(), Arc::new(rules_of(r)));
        }
        for r in roles {
            let key = (str_at(r, "/metadata/namespace").to_string(), str_at(r, "/metadata/name").to_string());
            p.roles.insert(key, Arc::new(rules_of(r)));
        }
        for b in cluster_bindings {
            if let Some(b) = p.binding(b, "") {
                p.cluster_bindings.push(b);
            }
        }
        for b in bindings {
            let ns = str_at(b, "/metadata/namespace").to_string();
            if let Some(b) = p.binding(b, &ns) {
                p.bindings.entry(ns).or_default().push(b);
            }
        }
        p
    }

    fn binding(&self, obj: &Value, namespace: &str) -> Option<Binding> {
        let role_ref: RoleRef = serde_json::from_value(obj.get("roleRef")?.clone()).ok()?;
        let subjects: Vec<Subject> =
            obj.get("subjects").cloned().and_then(|s| serde_json::from_value(s).ok()).unwrap_or_default();
        let rules = self.role_rules(&role_ref, namespace);
        Some(Binding {
            name: str_at(obj, "/metadata/name").to_string(),
            namespace: namespace.to_string(),
            role_ref,
            subjects,
            rules,
        })
    }

    /// The rules a role reference grants in `namespace` (Kubernetes' `GetRoleReferenceRules`).
    pub fn role_rules(&self, role_ref: &RoleRef, namespace: &str) -> Result<Arc<Vec<PolicyRule>>, String> {
        match role_ref.kind.as_str() {
            "ClusterRole" => self
                .cluster_roles
                .get(&role_ref.name)
                .cloned()
                .ok_or_else(|| format!("clusterrole.rbac.authorization.k8s.io {:?} not found", role_ref.name)),
            "Role" => self
                .roles
                .get(&(namespace.to_string(), role_ref.name.clone()))
                .cloned()
                .ok_or_else(|| format!("role.rbac.authorization.k8s.io {:?} not found", role_ref.name)),
            other => Err(format!("unsupported role reference kind: {other:?}")),
        }
    }

    /// Calls `visit` with every binding that names `user` and applies in `namespace` (cluster
    /// bindings first, then the namespace's); stops when it returns false.
    fn visit(&self, user: &UserInfo, namespace: &str, mut visit: impl FnMut(&Binding) -> bool) {
        for b in &self.cluster_bindings {
            if b.subjects.iter().any(|s| applies_to(user, s, "")) && !visit(b) {
                return;
            }
        }
        if namespace.is_empty() {
            return;
        }
        for b in self.bindings.get(namespace).into_iter().flatten() {
            if b.subjects.iter().any(|s| applies_to(user, s, namespace)) && !visit(b) {
                return;
            }
        }
    }

    /// The first binding and rule allowing `attrs`, as Kubernetes' reason string; or the
    /// resolution errors met on the way.
    pub fn allows(&self, attrs: &Attributes) -> Result<String, Vec<String>> {
        let mut allowed = None;
        let mut errors = Vec::new();
        self.visit(&attrs.user, &attrs.namespace, |b| match &b.rules {
            Ok(rules) => {
                if rules.iter().any(|r| rule_allows(attrs, r)) {
                    allowed = Some(format!("RBAC: allowed by {} to {}", b.describe(), subject_for(&attrs.user, b)));
                    return false;
                }
                true
            }
            Err(e) => {
                errors.push(e.clone());
                true
            }
        });
        allowed.ok_or(errors)
    }

    /// Every rule `user` holds in `namespace` (cluster-wide only when it is empty).
    pub fn rules_for(&self, user: &UserInfo, namespace: &str) -> Rules {
        let mut out = Rules::default();
        self.visit(user, namespace, |b| {
            match &b.rules {
                Ok(r) => out.rules.extend(r.iter().cloned()),
                Err(e) => out.errors.push(e.clone()),
            }
            true
        });
        out
    }
}

/// The subject a binding matched, as Kubernetes prints it in the allow reason.
fn subject_for(user: &UserInfo, b: &Binding) -> String {
    b.subjects
        .iter()
        .find(|s| applies_to(user, s, &b.namespace))
        .map(|s| match s.kind.as_str() {
            "ServiceAccount" => format!(
                "ServiceAccount {:?}",
                format!("{}/{}", s.namespace.as_deref().filter(|n| !n.is_empty()).unwrap_or(&b.namespace), s.name)
            ),
            kind => format!("{kind} {:?}", s.name),
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::authz::rbac::rule::tests::attrs;
    use serde_json::json;

    fn policy() -> Policy {
        let cr = [
            json!({"metadata": {"name": "view"}, "rules": [{"verbs": ["get", "list"], "apiGroups": [""], "resources": ["pods"]}]}),
        ];
        let r = [json!({"metadata": {"name": "cm-writer", "namespace": "team"},
                        "rules": [{"verbs": ["create"], "apiGroups": [""], "resources": ["configmaps"]}]})];
        let crb = [
            json!({"metadata": {"name": "devs-view"}, "roleRef": {"kind": "ClusterRole", "name": "view", "apiGroup": "rbac.authorization.k8s.io"},
                          "subjects": [{"kind": "Group", "name": "devs", "apiGroup": "rbac.authorization.k8s.io"}]}),
        ];
        let rb = [
            json!({"metadata": {"name": "alice-cm", "namespace": "team"}, "roleRef": {"kind": "Role", "name": "cm-writer", "apiGroup": "rbac.authorization.k8s.io"},
                   "subjects": [{"kind": "User", "name": "alice", "apiGroup": "rbac.authorization.k8s.io"}]}),
            json!({"metadata": {"name": "dangling", "namespace": "team"}, "roleRef": {"kind": "Role", "name": "gone", "apiGroup": "rbac.authorization.k8s.io"},
                   "subjects": [{"kind": "User", "name": "alice", "apiGroup": "rbac.authorization.k8s.io"}]}),
        ];
        Policy::build(&cr, &r, &crb, &rb)
    }

    #[test]
    fn bindings_grant_exactly_their_roles_where_they_apply() {
        let p = policy();
        let a = attrs("create", "", "configmaps", "", "team", "c");
        assert_eq!(
            p.allows(&a),
            Ok("RBAC: allowed by RoleBinding \"alice-cm/team\" of Role \"cm-writer\" to User \"alice\"".into())
        );
        let elsewhere = attrs("create", "", "configmaps", "", "other", "c");
        assert_eq!(p.allows(&elsewhere), Err(vec![]));
        let list = attrs("list", "", "pods", "", "team", "");
        assert_eq!(p.allows(&list), Err(vec!["role.rbac.authorization.k8s.io \"gone\" not found".into()]));
        let mut dev = attrs("list", "", "pods", "", "", "");
        dev.user = Arc::new(UserInfo::new("bob", &["devs"]));
        assert_eq!(
            p.allows(&dev),
            Ok("RBAC: allowed by ClusterRoleBinding \"devs-view\" of ClusterRole \"view\" to Group \"devs\"".into())
        );
    }

    #[test]
    fn rules_for_lists_cluster_and_namespace_rules() {
        let p = policy();
        let alice = UserInfo::new("alice", &["devs"]);
        let all = p.rules_for(&alice, "team");
        assert_eq!(all.rules.len(), 2);
        assert_eq!(all.errors.len(), 1);
        assert_eq!(p.rules_for(&alice, "").rules.len(), 1);
    }
}
