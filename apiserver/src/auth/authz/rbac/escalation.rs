//! Escalation prevention on RBAC writes (Kubernetes' policy-based RBAC storage): a user may only
//! create or change a role holding permissions they already have, unless they may `escalate` on
//! it; and only bind a role whose permissions they have, unless they may `bind` it. Members of
//! `system:masters` may do both.

use super::policy::Policy;
use super::rule::{compact, compact_string, covers, rule};
use super::Rbac;
use crate::auth::authz::message::resource_forbidden;
use crate::auth::{names, Admission, AdmissionRequest, Attributes, Authorizer, Decision, Operation, UserInfo};
use crate::http::errors::{ApiError, ApiResult};
use k8s_openapi::api::rbac::v1::{PolicyRule, RoleRef};
use serde_json::Value;
use std::sync::Arc;

/// The admission plugin (kaji runs it for every write to the four RBAC kinds).
pub struct RbacEscalation {
    pub rbac: Arc<Rbac>,
    /// The whole authorizer chain, for the `escalate` and `bind` checks.
    pub authorizer: Arc<dyn Authorizer>,
}

fn go_quoted(items: &[String]) -> String {
    let q: Vec<String> = items.iter().map(|s| format!("{s:?}")).collect();
    format!("[{}]", q.join(" "))
}

/// Kubernetes' `ConfirmNoEscalation`: the rules `user` holds in `namespace` must cover `wanted`.
pub fn confirm_no_escalation(
    policy: &Policy,
    user: &UserInfo,
    namespace: &str,
    wanted: &[PolicyRule],
) -> Result<(), String> {
    let held = policy.rules_for(user, namespace);
    let (ok, missing) = covers(&held.rules, wanted);
    if ok {
        return Ok(());
    }
    let mut lines: Vec<String> = compact(missing).iter().map(compact_string).collect();
    lines.sort();
    lines.dedup();
    let mut msg = format!(
        "user {:?} (groups={}) is attempting to grant RBAC permissions not currently held:\n{}",
        user.name,
        go_quoted(&user.groups),
        lines.join("\n")
    );
    if !held.errors.is_empty() {
        msg.push_str(&format!("; resolution errors: [{}]", held.errors.join(" ")));
    }
    Err(msg)
}

fn rules_of(obj: &Value) -> Vec<PolicyRule> {
    obj.get("rules").cloned().and_then(|r| serde_json::from_value(r).ok()).unwrap_or_default()
}

fn has_aggregation(obj: Option<&Value>) -> bool {
    obj.and_then(|o| o.get("aggregationRule")).is_some_and(|a| !a.is_null())
}

/// `IsOnlyMutatingGCFields`: an update that touches nothing but owner references and finalizers.
fn only_gc_fields(new: &Value, old: &Value) -> bool {
    let strip = |v: &Value| {
        let mut v = v.clone();
        if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
            for f in ["ownerReferences", "finalizers", "resourceVersion", "managedFields", "generation"] {
                m.remove(f);
            }
        }
        v
    };
    strip(new) == strip(old)
}

impl RbacEscalation {
    fn allowed(&self, user: &Arc<UserInfo>, verb: &str, resource: &str, namespace: &str, name: &str) -> bool {
        let attrs = Attributes {
            user: user.clone(),
            verb: verb.into(),
            namespace: namespace.into(),
            api_group: "rbac.authorization.k8s.io".into(),
            api_version: "v1".into(),
            resource: resource.into(),
            name: name.into(),
            resource_request: true,
            ..Default::default()
        };
        self.authorizer.authorize(&attrs).decision == Decision::Allow
    }

    fn check(&self, req: &AdmissionRequest<'_>, obj: &Value) -> ApiResult<()> {
        let info = req.resource;
        let user = Arc::new(req.user.clone());
        let ns = req.namespace.unwrap_or("");
        let name = obj.pointer("/metadata/name").and_then(Value::as_str).unwrap_or(req.name);
        if req.user.in_group(names::SYSTEM_PRIVILEGED_GROUP) {
            return Ok(());
        }
        if req.old.is_some_and(|old| only_gc_fields(obj, old)) {
            return Ok(());
        }
        let forbid = |e: String| resource_forbidden(info.group, info.plural, name, &e);
        let policy = self.rbac.policy();
        match info.kind {
            "Role" | "ClusterRole" => {
                if self.allowed(&user, "escalate", info.plural, ns, name) {
                    return Ok(());
                }
                confirm_no_escalation(&policy, req.user, ns, &rules_of(obj)).map_err(forbid)?;
                if info.kind == "ClusterRole" && (has_aggregation(Some(obj)) || has_aggregation(req.old)) {
                    let all = [
                        rule(&["*"], &["*"], &["*"]),
                        PolicyRule {
                            verbs: vec!["*".into()],
                            non_resource_urls: Some(vec!["*".into()]),
                            ..Default::default()
                        },
                    ];
                    confirm_no_escalation(&policy, req.user, ns, &all)
                        .map_err(|_| forbid("must have cluster-admin privileges to use the aggregationRule".into()))?;
                }
                Ok(())
            }
            "RoleBinding" | "ClusterRoleBinding" => {
                let Some(role_ref) =
                    obj.get("roleRef").cloned().and_then(|r| serde_json::from_value::<RoleRef>(r).ok())
                else {
                    return Ok(()); // validation reports it
                };
                let resource = if role_ref.kind == "Role" { "roles" } else { "clusterroles" };
                if self.allowed(&user, "bind", resource, ns, &role_ref.name) {
                    return Ok(());
                }
                let rules = policy.role_rules(&role_ref, ns).map_err(|e| {
                    let (group, plural) = ("rbac.authorization.k8s.io", resource);
                    let mut err = ApiError::not_found(group, plural, &role_ref.name);
                    err.message = e;
                    err
                })?;
                confirm_no_escalation(&policy, req.user, ns, &rules).map_err(forbid)
            }
            _ => Ok(()),
        }
    }
}

impl Admission for RbacEscalation {
    fn validate(&self, req: &AdmissionRequest<'_>, object: Option<&Value>) -> ApiResult<()> {
        match (req.operation, object) {
            (Operation::Create | Operation::Update, Some(obj)) => self.check(req, obj),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn granting_more_than_held_names_what_is_missing() {
        let cr = [
            json!({"metadata": {"name": "view"}, "rules": [{"verbs": ["get", "list"], "apiGroups": [""], "resources": ["pods"]}]}),
        ];
        let crb = [
            json!({"metadata": {"name": "v"}, "roleRef": {"kind": "ClusterRole", "name": "view", "apiGroup": "rbac.authorization.k8s.io"},
                          "subjects": [{"kind": "User", "name": "bob", "apiGroup": "rbac.authorization.k8s.io"}]}),
        ];
        let p = Policy::build(&cr, &[], &crb, &[]);
        let bob = UserInfo::new("bob", &["system:authenticated"]);
        assert_eq!(confirm_no_escalation(&p, &bob, "d", &[rule(&["get"], &[""], &["pods"])]), Ok(()));
        let err = confirm_no_escalation(&p, &bob, "d", &[rule(&["get", "delete"], &[""], &["pods", "secrets"])])
            .expect_err("escalates");
        assert_eq!(
            err,
            "user \"bob\" (groups=[\"system:authenticated\"]) is attempting to grant RBAC permissions not currently held:\n{APIGroups:[\"\"], Resources:[\"pods\"], Verbs:[\"delete\"]}\n{APIGroups:[\"\"], Resources:[\"secrets\"], Verbs:[\"get\" \"delete\"]}"
        );
    }

    #[test]
    fn gc_only_updates_are_not_escalations() {
        let old = json!({"metadata": {"name": "r", "resourceVersion": "1"}, "rules": []});
        let mut new = old.clone();
        new["metadata"]["ownerReferences"] = json!([{"uid": "x"}]);
        assert!(only_gc_fields(&new, &old));
        new["rules"] = json!([{"verbs": ["*"]}]);
        assert!(!only_gc_fields(&new, &old));
    }
}
