//! The default RBAC policy, reconciled into the store at every apiserver start (kube-apiserver's
//! `rbac/bootstrap-roles` post-start hook): missing objects are created; an existing one with the
//! `rbac.authorization.kubernetes.io/autoupdate` annotation not `"false"` gains the permissions,
//! subjects, labels and annotations it lacks (nothing is removed), and a binding whose role
//! reference differs is recreated. An unchanged object is never written.

pub mod cluster_roles;
pub mod controller_roles;
pub mod dsl;

use super::rbac::rule::covers;
use crate::http::errors::{ApiError, ApiResult};
use crate::registry::meta::{self, meta_mut};
use crate::registry::Registry;
use dsl::{service_account, AUTOUPDATE, RBAC_GROUP};
use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, PolicyRule, Subject};
use serde_json::{json, Map, Value};

/// Bindings the kubelet TLS bootstrap needs (what kubeadm creates on `init`): bootstrap tokens may
/// send CertificateSigningRequests for node client certs, which are approved automatically, and
/// nodes may renew their own.
fn node_bootstrap_bindings() -> Vec<ClusterRoleBinding> {
    use dsl::group;
    let named = |name: &str, role: &str, subjects: Vec<Subject>| {
        let mut b = dsl::cluster_binding(role, subjects);
        b.metadata.name = Some(name.into());
        b
    };
    vec![
        named("kaji:kubelet-bootstrap", "system:node-bootstrapper", vec![group("system:bootstrappers")]),
        named(
            "kaji:node-autoapprove-bootstrap",
            "system:certificates.k8s.io:certificatesigningrequests:nodeclient",
            vec![group("system:bootstrappers")],
        ),
        named(
            "kaji:node-autoapprove-certificate-rotation",
            "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient",
            vec![group("system:nodes")],
        ),
    ]
}

/// Every object of the default policy, as (kind, JSON object), in creation order.
pub fn objects() -> Vec<(&'static str, Value)> {
    let to = |kind: &str, v: Value| {
        let mut v = v;
        v["apiVersion"] = json!(format!("{RBAC_GROUP}/v1"));
        v["kind"] = json!(kind);
        v
    };
    let mut out = Vec::new();
    for r in cluster_roles::cluster_roles().into_iter().chain(controller_roles::controller_roles()) {
        out.push(("ClusterRole", to("ClusterRole", serde_json::to_value(r).unwrap_or_default())));
    }
    for b in cluster_roles::cluster_role_bindings()
        .into_iter()
        .chain(controller_roles::controller_role_bindings())
        .chain(node_bootstrap_bindings())
    {
        out.push(("ClusterRoleBinding", to("ClusterRoleBinding", serde_json::to_value(b).unwrap_or_default())));
    }
    out
}

/// The ServiceAccounts of the controllers that have roles, `kube-system/<controller>`.
pub fn controller_service_accounts() -> Vec<Subject> {
    controller_roles::names().into_iter().map(|n| service_account("kube-system", n)).collect()
}

fn string_map(v: Option<&Value>) -> Map<String, Value> {
    v.and_then(Value::as_object).cloned().unwrap_or_default()
}

/// `merge(expected, existing)`: keys the existing map lacks are added; its own values win.
fn merge_map(existing: &mut Value, key: &str, expected: Option<&Value>) -> bool {
    let mut cur = string_map(existing.pointer(&format!("/metadata/{key}")));
    let mut changed = false;
    for (k, v) in string_map(expected) {
        if !cur.contains_key(&k) {
            cur.insert(k, v);
            changed = true;
        }
    }
    if changed {
        meta_mut(existing).insert(key.into(), Value::Object(cur));
    }
    changed
}

fn rules(v: &Value) -> Vec<PolicyRule> {
    v.get("rules").cloned().and_then(|r| serde_json::from_value(r).ok()).unwrap_or_default()
}

fn subjects(v: &Value) -> Vec<Subject> {
    v.get("subjects").cloned().and_then(|s| serde_json::from_value(s).ok()).unwrap_or_default()
}

/// What reconciling one object decides.
#[derive(Debug, PartialEq)]
pub enum Action {
    Create(Value),
    Update(Value),
    /// The role reference changed: delete and create anew.
    Recreate(Value),
    Keep,
}

/// Kubernetes' `computeReconciledRole` / `computeReconciledRoleBinding` (adding only), pure.
pub fn reconcile_one(kind: &str, expected: &Value, existing: Option<&Value>) -> Action {
    let Some(existing) = existing else { return Action::Create(expected.clone()) };
    if existing.pointer(&format!("/metadata/annotations/{}", AUTOUPDATE.replace('/', "~1"))).and_then(Value::as_str)
        == Some("false")
    {
        return Action::Keep;
    }
    let mut out = existing.clone();
    let mut changed = merge_map(&mut out, "labels", expected.pointer("/metadata/labels"));
    changed |= merge_map(&mut out, "annotations", expected.pointer("/metadata/annotations"));
    match kind {
        "ClusterRole" | "Role" => {
            let aggregated = expected.get("aggregationRule").is_some_and(|a| !a.is_null());
            if aggregated {
                // The aggregation controller owns the rules; only the selectors are reconciled.
                let want = expected.pointer("/aggregationRule/clusterRoleSelectors").cloned().unwrap_or(json!([]));
                let mut have = out
                    .pointer("/aggregationRule/clusterRoleSelectors")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                for sel in want.as_array().into_iter().flatten() {
                    if !have.contains(sel) {
                        have.push(sel.clone());
                        changed = true;
                    }
                }
                if changed {
                    out["aggregationRule"] = json!({"clusterRoleSelectors": have});
                }
            } else {
                let have = rules(&out);
                let (ok, missing) = covers(&have, &rules(expected));
                if !ok {
                    let mut all = have;
                    all.extend(missing);
                    out["rules"] = serde_json::to_value(all).unwrap_or_default();
                    changed = true;
                }
            }
        }
        _ => {
            if existing.get("roleRef") != expected.get("roleRef") {
                return Action::Recreate(expected.clone());
            }
            let mut have = subjects(&out);
            let before = have.len();
            for s in subjects(expected) {
                if !have.contains(&s) {
                    have.push(s);
                }
            }
            if have.len() != before {
                out["subjects"] = serde_json::to_value(have).unwrap_or_default();
                changed = true;
            }
        }
    }
    if changed {
        Action::Update(out)
    } else {
        Action::Keep
    }
}

/// Reconcile the default policy straight into the store (before the watch cache starts).
/// Another apiserver on the same store may reconcile at the same moment: a write that lost a race
/// (conflict, already there, gone) reads the object again and decides anew.
/// Returns how many objects were written.
pub fn reconcile(reg: &Registry) -> ApiResult<usize> {
    let mut written = 0;
    for (kind, expected) in objects() {
        let mut tries = 0;
        loop {
            tries += 1;
            match reconcile_object(reg, kind, &expected) {
                Ok(true) => written += 1,
                Ok(false) => {}
                Err(crate::storage::Error::Conflict { .. })
                | Err(crate::storage::Error::AlreadyExists(_))
                | Err(crate::storage::Error::NotFound(_))
                    if tries < 5 =>
                {
                    continue
                }
                Err(e) => return Err(ApiError::internal(e)),
            }
            break;
        }
    }
    Ok(written)
}

/// One object: whether it was written.
fn reconcile_object(reg: &Registry, kind: &'static str, expected: &Value) -> Result<bool, crate::storage::Error> {
    let json = |e: serde_json::Error| crate::storage::Error::Backend(e.to_string());
    let info = kaji_api::resources::by_kind(kind).expect("RBAC kinds are served");
    let name = meta::name(expected).to_string();
    let key = info.key(None, &name);
    let current = reg.store.get(&key)?;
    let existing = match &current {
        Some(kv) => Some(serde_json::from_slice::<Value>(&kv.value).map_err(json)?),
        None => None,
    };
    let stamp = |mut v: Value| -> Result<Vec<u8>, crate::storage::Error> {
        let m = meta_mut(&mut v);
        m.insert("uid".into(), uuid::Uuid::new_v4().to_string().into());
        m.insert("creationTimestamp".into(), meta::timestamp(meta::now()).into());
        kaji_api::defaults::apply_defaults(kind, &mut v);
        serde_json::to_vec(&v).map_err(json)
    };
    match reconcile_one(kind, expected, existing.as_ref()) {
        Action::Keep => return Ok(false),
        Action::Create(v) => {
            reg.store.create(&key, &stamp(v)?)?;
        }
        Action::Update(v) => {
            let rev = current.as_ref().map_or(0, |kv| kv.mod_revision);
            reg.store.update(&key, &serde_json::to_vec(&v).map_err(json)?, rev)?;
        }
        Action::Recreate(v) => {
            let rev = current.as_ref().map(|kv| kv.mod_revision);
            reg.store.delete(&key, rev)?;
            reg.store.create(&key, &stamp(v)?)?;
        }
    }
    tracing::info!(kind, name = %name, "reconciled bootstrap RBAC policy");
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn find(kind: &str, name: &str) -> Value {
        objects().into_iter().find(|(k, v)| *k == kind && meta::name(v) == name).map(|(_, v)| v).expect("in the policy")
    }

    #[test]
    fn every_default_object_is_valid() {
        for (kind, mut v) in objects() {
            kaji_api::defaults::apply_defaults(kind, &mut v);
            assert_eq!(kaji_api::validation::validate_create(kind, &v), vec![], "{kind} {}", meta::name(&v));
        }
    }

    /// (verbs, resources) of every rule of a ClusterRole.
    fn verbs_and_resources(name: &str) -> Vec<(Vec<String>, Vec<String>)> {
        let strings = |v: &Value| -> Vec<String> {
            v.as_array().into_iter().flatten().filter_map(Value::as_str).map(String::from).collect()
        };
        let role = find("ClusterRole", name);
        role["rules"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|r| (strings(&r["verbs"]), strings(&r["resources"])))
            .collect()
    }

    #[test]
    fn users_read_quotas_and_only_cluster_admins_and_the_controller_write_them() {
        // view (and so edit and admin) reads quotas and their status, as Kubernetes' view does.
        let view = verbs_and_resources("system:aggregate-to-view");
        assert!(view.iter().any(|(v, r)| v.contains(&"watch".into())
            && r.contains(&"resourcequotas".into())
            && r.contains(&"resourcequotas/status".into())));
        // No namespace role writes a quota or its usage: edit rights must not lift their own limits.
        for role in ["system:aggregate-to-edit", "system:aggregate-to-admin", "system:aggregate-to-view"] {
            let writes = verbs_and_resources(role).into_iter().any(|(v, r)| {
                r.iter().any(|r| r.starts_with("resourcequotas"))
                    && v.iter().any(|v| ["create", "update", "patch", "delete", "*"].contains(&v.as_str()))
            });
            assert!(!writes, "{role} writes resourcequotas");
        }
        let controller = verbs_and_resources("system:controller:resourcequota-controller");
        assert!(controller.contains(&(vec!["update".into()], vec!["resourcequotas/status".into()])));
    }

    #[test]
    fn reconcile_adds_what_is_missing_and_leaves_the_rest() {
        let expected = find("ClusterRole", "system:kube-scheduler");
        assert!(matches!(reconcile_one("ClusterRole", &expected, None), Action::Create(_)));
        assert_eq!(reconcile_one("ClusterRole", &expected, Some(&expected)), Action::Keep);
        // A user's extra rule stays; a removed one comes back.
        let mut edited = expected.clone();
        let rules = edited["rules"].as_array_mut().expect("rules");
        rules.remove(0);
        rules.push(json!({"verbs": ["get"], "apiGroups": ["example.com"], "resources": ["widgets"]}));
        let Action::Update(fixed) = reconcile_one("ClusterRole", &expected, Some(&edited)) else { panic!("updates") };
        let (ok, _) = covers(&rules_of(&fixed), &rules_of(&expected));
        assert!(ok);
        assert!(fixed["rules"].to_string().contains("widgets"));
        // autoupdate=false protects an edited role.
        edited["metadata"]["annotations"][AUTOUPDATE] = json!("false");
        assert_eq!(reconcile_one("ClusterRole", &expected, Some(&edited)), Action::Keep);
    }

    fn rules_of(v: &Value) -> Vec<PolicyRule> {
        rules(v)
    }

    #[test]
    fn bindings_regain_subjects_and_are_recreated_for_another_role() {
        let expected = find("ClusterRoleBinding", "cluster-admin");
        let mut emptied = expected.clone();
        emptied["subjects"] = json!([{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "alice"}]);
        let Action::Update(fixed) = reconcile_one("ClusterRoleBinding", &expected, Some(&emptied)) else {
            panic!("updates")
        };
        assert_eq!(fixed["subjects"].as_array().map(Vec::len), Some(2));
        let mut moved = expected.clone();
        moved["roleRef"]["name"] = json!("view");
        assert!(matches!(reconcile_one("ClusterRoleBinding", &expected, Some(&moved)), Action::Recreate(_)));
    }

    #[test]
    fn anonymous_may_read_only_public_info() {
        let viewer = find("ClusterRoleBinding", "system:public-info-viewer");
        assert!(viewer["subjects"].to_string().contains("system:unauthenticated"));
        for (kind, v) in objects() {
            if kind == "ClusterRoleBinding" && meta::name(&v) != "system:public-info-viewer" {
                assert!(!v["subjects"].to_string().contains("system:unauthenticated"), "{}", meta::name(&v));
            }
        }
    }
}
