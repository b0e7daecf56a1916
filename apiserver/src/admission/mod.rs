//! Admission plugins (`--enable-admission-plugins`), in Kubernetes' order: ServiceAccount,
//! NodeRestriction, then DenyServiceExternalIPs; and the RBAC escalation check every RBAC write
//! gets (Kubernetes does it in its RBAC storage, whatever the plugins); the admission webhooks;
//! ResourceQuota last.

pub mod certificates;
pub mod default_ingress_class;
pub mod deny_external_ips;
pub mod limit_ranger;
pub mod lookup;
pub mod node_labels;
pub mod node_restriction;
pub mod pod_security;
pub mod policy;
pub mod priority;
pub mod resource_quota;
pub mod runtime_class;
pub mod service_account;
pub mod webhook;

use crate::auth::authz::rbac::escalation::RbacEscalation;
use crate::auth::authz::rbac::Rbac;
use crate::auth::{Admission, AdmissionChain, Authorizer};
use crate::cache::Cache;
use crate::storage::Store;
use std::sync::Arc;

/// The plugins kaji has, by Kubernetes' names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plugin {
    ServiceAccount,
    NodeRestriction,
    DenyServiceExternalIps,
}

impl Plugin {
    pub const ALL: &'static [Plugin] =
        &[Plugin::ServiceAccount, Plugin::NodeRestriction, Plugin::DenyServiceExternalIps];

    pub fn name(self) -> &'static str {
        match self {
            Plugin::ServiceAccount => service_account::NAME,
            Plugin::NodeRestriction => node_restriction::NAME,
            Plugin::DenyServiceExternalIps => deny_external_ips::NAME,
        }
    }

    /// A comma-separated list (empty is none); unknown names are an error naming the known ones.
    pub fn parse_list(s: &str) -> Result<Vec<Plugin>, String> {
        let mut out = Vec::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let p = Self::ALL.iter().copied().find(|p| p.name() == part).ok_or_else(|| {
                let known: Vec<&str> = Self::ALL.iter().map(|p| p.name()).collect();
                format!("unknown admission plugin {part:?}; known: {}", known.join(", "))
            })?;
            if !out.contains(&p) {
                out.push(p);
            }
        }
        Ok(out)
    }
}

/// What the plugins read.
pub struct Deps {
    pub store: Arc<dyn Store>,
    pub cache: Arc<Cache>,
    pub rbac: Arc<Rbac>,
    pub authorizer: Arc<dyn Authorizer>,
    /// PodSecurity's defaults and exemptions (`--admission-control-config-file`).
    pub pod_security: pod_security::config::Config,
}

/// The chain for `enabled` (run in Kubernetes' order whatever the order given) between the plugins
/// Kubernetes enables by default (LimitRanger first; Priority, PodSecurity, DefaultStorageClass,
/// RuntimeClass, CertificateApproval/CertificateSigning, CertificateSubjectRestriction,
/// DefaultIngressClass after), then the RBAC escalation check.
pub fn chain(enabled: &[Plugin], deps: &Deps) -> Arc<dyn Admission> {
    let mut all: Vec<Arc<dyn Admission>> = Vec::new();
    // On by default in Kubernetes, and first.
    all.push(Arc::new(limit_ranger::LimitRanger { store: deps.store.clone() }));
    for p in Plugin::ALL.iter().filter(|p| enabled.contains(p)) {
        all.push(match p {
            Plugin::ServiceAccount => Arc::new(service_account::ServiceAccountAdmission { store: deps.store.clone() }),
            Plugin::NodeRestriction => Arc::new(node_restriction::NodeRestriction { cache: deps.cache.clone() }),
            Plugin::DenyServiceExternalIps => Arc::new(deny_external_ips::DenyServiceExternalIps),
        });
    }
    // On by default, as in Kubernetes; privileged unless configured or labelled, so inert until then.
    all.push(Arc::new(priority::Priority { store: deps.store.clone() }));
    all.push(Arc::new(pod_security::PodSecurity { store: deps.store.clone(), config: deps.pod_security.clone() }));
    all.push(Arc::new(crate::auth::storage::DefaultStorageClass::new(deps.store.clone())));
    all.push(Arc::new(runtime_class::RuntimeClass { store: deps.store.clone() }));
    all.push(Arc::new(certificates::CertificateAdmission { authorizer: deps.authorizer.clone() }));
    all.push(Arc::new(certificates::CertificateSubjectRestriction));
    all.push(Arc::new(default_ingress_class::DefaultIngressClass { store: deps.store.clone() }));
    all.push(Arc::new(RbacEscalation { rbac: deps.rbac.clone(), authorizer: deps.authorizer.clone() }));
    // On by default, as in Kubernetes: MutatingAdmissionWebhook last of the mutating plugins,
    // ValidatingAdmissionWebhook just before ResourceQuota.
    // ValidatingAdmissionPolicy, then the webhooks, as kube-apiserver orders them.
    all.push(Arc::new(policy::ValidatingAdmissionPolicy::new(deps.cache.clone())));
    all.push(webhook::plugin(deps.cache.clone()));
    // On by default, as in Kubernetes; last, so a write another plugin refuses is never charged.
    all.push(Arc::new(resource_quota::ResourceQuotaAdmission { store: deps.store.clone() }));
    Arc::new(AdmissionChain(all))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plugin_lists_parse_by_kubernetes_names() {
        assert_eq!(
            Plugin::parse_list("NodeRestriction,ServiceAccount"),
            Ok(vec![Plugin::NodeRestriction, Plugin::ServiceAccount])
        );
        assert_eq!(Plugin::parse_list(""), Ok(vec![]));
        let err = Plugin::parse_list("AlwaysPullImages").expect_err("unknown");
        assert!(err.contains("known: ServiceAccount, NodeRestriction, DenyServiceExternalIPs"), "{err}");
        assert_eq!(
            Plugin::parse_list("DenyServiceExternalIPs,NodeRestriction"),
            Ok(vec![Plugin::DenyServiceExternalIps, Plugin::NodeRestriction])
        );
    }
}
