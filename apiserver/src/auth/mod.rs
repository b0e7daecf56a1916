//! The apiserver's security pipeline, as kube-apiserver's: authenticate → authorize → admit.
//! This module is the interface every part plugs into: who is asking ([`UserInfo`], Kubernetes'
//! `user.Info`), what they ask ([`Attributes`], `authorizer.Attributes`), the [`Authenticator`],
//! [`Authorizer`] and [`Admission`] traits with their union chains. The HTTP layer
//! (`http/pipeline.rs`) runs authentication and authorization once per request; the registry runs
//! admission on every write. Handlers never check identities: a request carries its `UserInfo`.

pub mod authn;
pub mod authz;
pub mod compound;
pub mod impersonation;
pub mod request_info;
pub mod storage;

use crate::http::errors::ApiResult;
use kaji_api::resources::ResourceInfo;
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Well-known users and groups (Kubernetes' `k8s.io/apiserver/pkg/authentication/user`).
pub mod names {
    pub const SYSTEM_PRIVILEGED_GROUP: &str = "system:masters";
    pub const NODES_GROUP: &str = "system:nodes";
    pub const ALL_UNAUTHENTICATED: &str = "system:unauthenticated";
    pub const ALL_AUTHENTICATED: &str = "system:authenticated";
    pub const ANONYMOUS: &str = "system:anonymous";
    pub const APISERVER_USER: &str = "system:apiserver";
    pub const KUBE_PROXY: &str = "system:kube-proxy";
    pub const KUBE_CONTROLLER_MANAGER: &str = "system:kube-controller-manager";
    pub const KUBE_SCHEDULER: &str = "system:kube-scheduler";
    /// The insecure port's user (kube-apiserver's `InsecureSuperuser`, before 1.20 removed it).
    pub const INSECURE_SUPERUSER: &str = "system:unsecured";
    /// Bootstrap tokens authenticate as `system:bootstrap:<token id>` in this group.
    pub const BOOTSTRAP_USER_PREFIX: &str = "system:bootstrap:";
    pub const BOOTSTRAP_DEFAULT_GROUP: &str = "system:bootstrappers";
    /// Node identities: `system:node:<name>` in `system:nodes`.
    pub const NODE_USER_PREFIX: &str = "system:node:";
    /// ServiceAccount identities: `system:serviceaccount:<ns>:<name>`.
    pub const SERVICE_ACCOUNT_USER_PREFIX: &str = "system:serviceaccount:";
    pub const SERVICE_ACCOUNTS_GROUP: &str = "system:serviceaccounts";
}

/// An authenticated identity (Kubernetes' `user.Info`).
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct UserInfo {
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uid: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub extra: BTreeMap<String, Vec<String>>,
}

impl UserInfo {
    pub fn new(name: impl Into<String>, groups: &[&str]) -> Self {
        Self { name: name.into(), groups: groups.iter().map(|g| g.to_string()).collect(), ..Default::default() }
    }

    /// `system:anonymous` in `system:unauthenticated`.
    pub fn anonymous() -> Self {
        Self::new(names::ANONYMOUS, &[names::ALL_UNAUTHENTICATED])
    }

    /// The apiserver's own identity, for writes it makes itself (bootstrap, reconcilers).
    pub fn apiserver() -> Self {
        Self::new(names::APISERVER_USER, &[names::SYSTEM_PRIVILEGED_GROUP, names::ALL_AUTHENTICATED])
    }

    pub fn in_group(&self, group: &str) -> bool {
        self.groups.iter().any(|g| g == group)
    }

    /// The node name of a `system:node:<name>` in `system:nodes` (Kubernetes' `NodeIdentifier`).
    pub fn node_name(&self) -> Option<&str> {
        self.name.strip_prefix(names::NODE_USER_PREFIX).filter(|n| !n.is_empty() && self.in_group(names::NODES_GROUP))
    }
}

/// What a request asks to do (Kubernetes' `authorizer.Attributes`, filled from the request as
/// its `RequestInfoFactory` does: see [`request_info`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Attributes {
    pub user: Arc<UserInfo>,
    /// Resource requests: get, list, watch, create, update, patch, delete, deletecollection
    /// (and proxy); others: the lowercased HTTP method.
    pub verb: String,
    pub namespace: String,
    pub api_group: String,
    pub api_version: String,
    pub resource: String,
    pub subresource: String,
    pub name: String,
    /// The request's path (what non-resource rules match).
    pub path: String,
    pub resource_request: bool,
}

impl Attributes {
    pub fn is_read_only(&self) -> bool {
        matches!(self.verb.as_str(), "get" | "list" | "watch")
    }
}

/// An authorizer's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Allow,
    Deny,
    NoOpinion,
}

/// A decision with the reason shown in a 403 (`User "x" cannot ...: <reason>`) and, for an
/// authorizer that could not decide, an error (the union goes on; an error with no allow is a 500).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub decision: Decision,
    pub reason: String,
    pub error: Option<String>,
}

impl Verdict {
    pub fn allow(reason: impl Into<String>) -> Self {
        Self { decision: Decision::Allow, reason: reason.into(), error: None }
    }

    pub fn deny(reason: impl Into<String>) -> Self {
        Self { decision: Decision::Deny, reason: reason.into(), error: None }
    }

    pub fn no_opinion(reason: impl Into<String>) -> Self {
        Self { decision: Decision::NoOpinion, reason: reason.into(), error: None }
    }
}

/// Decides whether a request may go on (Kubernetes' `authorizer.Authorizer`). Must be cheap and
/// must not block: it runs on every request, from in-memory state (the watch cache).
pub trait Authorizer: Send + Sync {
    fn authorize(&self, attrs: &Attributes) -> Verdict;
}

/// Kubernetes' authorizer union: the first Allow or Deny wins; otherwise NoOpinion with every
/// reason, which the pipeline answers with 403 (deny by default).
pub struct AuthorizerUnion(pub Vec<Arc<dyn Authorizer>>);

impl Authorizer for AuthorizerUnion {
    fn authorize(&self, attrs: &Attributes) -> Verdict {
        let mut reasons = Vec::new();
        let mut errors = Vec::new();
        for a in &self.0 {
            let v = a.authorize(attrs);
            match v.decision {
                Decision::Allow | Decision::Deny => return v,
                Decision::NoOpinion => {
                    if !v.reason.is_empty() {
                        reasons.push(v.reason);
                    }
                    errors.extend(v.error);
                }
            }
        }
        Verdict {
            decision: Decision::NoOpinion,
            reason: reasons.join("\n"),
            error: (!errors.is_empty()).then(|| errors.join(", ")),
        }
    }
}

/// `--authorization-mode AlwaysAllow`.
pub struct AlwaysAllow;

impl Authorizer for AlwaysAllow {
    fn authorize(&self, _: &Attributes) -> Verdict {
        Verdict::allow("")
    }
}

/// `--authorization-mode AlwaysDeny`.
pub struct AlwaysDeny;

impl Authorizer for AlwaysDeny {
    fn authorize(&self, _: &Attributes) -> Verdict {
        Verdict::no_opinion("Everything is forbidden.")
    }
}

/// `--authorization-mode` values (Kubernetes' names).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthorizationMode {
    AlwaysAllow,
    AlwaysDeny,
    /// The Node authorizer ([`authz::node`]).
    Node,
    /// Roles and bindings ([`authz::rbac`]).
    Rbac,
}

impl AuthorizationMode {
    pub const NAMES: &'static [&'static str] = &["AlwaysAllow", "AlwaysDeny", "Node", "RBAC"];

    /// A comma-separated list, in order, without repeats.
    pub fn parse_list(s: &str) -> Result<Vec<Self>, String> {
        let mut out = Vec::new();
        for part in s.split(',').map(str::trim) {
            let mode = match part {
                "AlwaysAllow" => Self::AlwaysAllow,
                "AlwaysDeny" => Self::AlwaysDeny,
                "Node" => Self::Node,
                "RBAC" => Self::Rbac,
                other => {
                    return Err(format!(
                        "authorization-mode {other:?} is not a valid mode; supported: {}",
                        Self::NAMES.join(", ")
                    ))
                }
            };
            if out.contains(&mode) {
                return Err(format!("authorization-mode {part:?} has been specified more than once"));
            }
            out.push(mode);
        }
        if out.is_empty() {
            return Err("at least one authorization-mode must be passed".into());
        }
        Ok(out)
    }
}

/// Allows every request of a user in one of these groups (kube-apiserver puts
/// `system:masters` first in its union: that group is never subject to a mode's rules).
pub struct PrivilegedGroups(pub Vec<String>);

impl Authorizer for PrivilegedGroups {
    fn authorize(&self, attrs: &Attributes) -> Verdict {
        if self.0.iter().any(|g| attrs.user.in_group(g)) {
            Verdict::allow("")
        } else {
            Verdict::no_opinion("")
        }
    }
}

/// `system:masters`, then the modes in the order given. Node and RBAC need their `parts`
/// (they read the watch cache); without them those modes are an error.
pub fn authorizer(modes: &[AuthorizationMode], parts: Option<&authz::Parts>) -> Result<Arc<dyn Authorizer>, String> {
    let mut all: Vec<Arc<dyn Authorizer>> =
        vec![Arc::new(PrivilegedGroups(vec![names::SYSTEM_PRIVILEGED_GROUP.to_string()]))];
    for m in modes {
        let needs = || parts.ok_or_else(|| format!("authorization-mode {m:?} needs the watch cache"));
        all.push(match m {
            AuthorizationMode::AlwaysAllow => Arc::new(AlwaysAllow),
            AuthorizationMode::AlwaysDeny => Arc::new(AlwaysDeny),
            AuthorizationMode::Node => needs()?.node.clone(),
            AuthorizationMode::Rbac => needs()?.rbac.clone(),
        });
    }
    Ok(Arc::new(AuthorizerUnion(all)))
}

/// The admission plugins every registry carries, whatever `--enable-admission-plugins` says
/// (DefaultStorageClass): the bootstrap registry's chain, and the tail of `crate::admission::chain`.
pub fn admission(store: &Arc<dyn crate::storage::Store>) -> Arc<dyn Admission> {
    Arc::new(AdmissionChain(vec![Arc::new(storage::DefaultStorageClass::new(store.clone()))]))
}

/// What a write does, as admission sees it (Kubernetes' `admission.Operation`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    Create,
    Update,
    Delete,
    /// exec, attach, portforward.
    Connect,
}

impl Operation {
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Create => "CREATE",
            Operation::Update => "UPDATE",
            Operation::Delete => "DELETE",
            Operation::Connect => "CONNECT",
        }
    }
}

/// One write as admission sees it (Kubernetes' `admission.Attributes`). The object itself is
/// passed beside it: mutable to [`Admission::admit`], read-only to [`Admission::validate`].
#[derive(Debug, Clone, Copy)]
pub struct AdmissionRequest<'a> {
    pub user: &'a UserInfo,
    pub operation: Operation,
    /// The resource addressed (pods for `pods/status`).
    pub resource: &'static ResourceInfo,
    /// `status`, `binding`, `scale`, `finalize`, `exec`, ... or None.
    pub subresource: Option<&'a str>,
    pub namespace: Option<&'a str>,
    /// Empty on a create whose name is generated.
    pub name: &'a str,
    /// The stored object an update or delete replaces (None on create and connect).
    pub old: Option<&'a Value>,
    pub dry_run: bool,
    /// A CONNECT's options (PodExecOptions, PodAttachOptions, ...): what webhooks are sent as the
    /// object; the object-reading plugins never see them.
    pub options: Option<&'a Value>,
}

/// An admission plugin. `admit` runs first and may change the object (mutating admission, after
/// defaulting, before validation); `validate` sees the final object just before it is stored.
/// An error refuses the write with its Status (usually 403 Forbidden).
pub trait Admission: Send + Sync {
    fn admit(&self, _req: &AdmissionRequest<'_>, _object: Option<&mut Value>) -> ApiResult<()> {
        Ok(())
    }

    fn validate(&self, _req: &AdmissionRequest<'_>, _object: Option<&Value>) -> ApiResult<()> {
        Ok(())
    }

    /// `Warning` headers for a write `validate` let through (PodSecurity's warn mode).
    fn warnings(&self, _req: &AdmissionRequest<'_>, _object: Option<&Value>) -> Vec<String> {
        Vec::new()
    }
}

/// Plugins in order; every mutating phase before every validating one, as Kubernetes runs them.
#[derive(Default, Clone)]
pub struct AdmissionChain(pub Vec<Arc<dyn Admission>>);

impl Admission for AdmissionChain {
    fn admit(&self, req: &AdmissionRequest<'_>, mut object: Option<&mut Value>) -> ApiResult<()> {
        for p in &self.0 {
            p.admit(req, object.as_deref_mut())?;
        }
        Ok(())
    }

    fn validate(&self, req: &AdmissionRequest<'_>, object: Option<&Value>) -> ApiResult<()> {
        for p in &self.0 {
            p.validate(req, object)?;
        }
        Ok(())
    }

    fn warnings(&self, req: &AdmissionRequest<'_>, object: Option<&Value>) -> Vec<String> {
        self.0.iter().flat_map(|p| p.warnings(req, object)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fixed(Verdict);
    impl Authorizer for Fixed {
        fn authorize(&self, _: &Attributes) -> Verdict {
            self.0.clone()
        }
    }

    fn union(vs: &[Verdict]) -> Verdict {
        let all = vs.iter().map(|v| Arc::new(Fixed(v.clone())) as Arc<dyn Authorizer>).collect();
        AuthorizerUnion(all).authorize(&Attributes::default())
    }

    #[test]
    fn the_first_allow_or_deny_wins_and_silence_denies() {
        let v = union(&[Verdict::no_opinion("no rbac rule"), Verdict::allow("node"), Verdict::deny("late")]);
        assert_eq!(v.decision, Decision::Allow);
        let v = union(&[Verdict::deny("nope"), Verdict::allow("too late")]);
        assert_eq!((v.decision, v.reason.as_str()), (Decision::Deny, "nope"));
        let v = union(&[Verdict::no_opinion("a"), Verdict::no_opinion("b")]);
        assert_eq!((v.decision, v.reason.as_str(), v.error), (Decision::NoOpinion, "a\nb", None));
        assert_eq!(union(&[]).decision, Decision::NoOpinion);
    }

    #[test]
    fn authorization_modes_parse_as_kubernetes_names_them() {
        assert_eq!(AuthorizationMode::parse_list("AlwaysAllow"), Ok(vec![AuthorizationMode::AlwaysAllow]));
        assert!(AuthorizationMode::parse_list("AlwaysAllow,AlwaysAllow").is_err());
        let err = AuthorizationMode::parse_list("Magic").expect_err("unknown");
        assert!(err.contains("\"Magic\" is not a valid mode"), "{err}");
        let deny = authorizer(&[AuthorizationMode::AlwaysDeny], None)
            .expect("no parts needed")
            .authorize(&Attributes::default());
        assert_eq!(deny.decision, Decision::NoOpinion);
        let admin = Attributes { user: Arc::new(UserInfo::new("admin", &["system:masters"])), ..Default::default() };
        let v = authorizer(&[AuthorizationMode::AlwaysDeny], None).expect("no parts needed").authorize(&admin);
        assert_eq!(v.decision, Decision::Allow, "system:masters is never subject to the modes");
    }

    #[test]
    fn node_identities_need_the_nodes_group() {
        assert_eq!(UserInfo::new("system:node:n1", &[names::NODES_GROUP]).node_name(), Some("n1"));
        assert_eq!(UserInfo::new("system:node:n1", &[]).node_name(), None);
        assert_eq!(UserInfo::new("system:node:", &[names::NODES_GROUP]).node_name(), None);
    }
}
