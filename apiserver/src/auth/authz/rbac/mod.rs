//! The RBAC authorizer: Roles, ClusterRoles and their bindings, read from the watch cache. The
//! resolved [`policy::Policy`] is rebuilt only when one of the four kinds changed.

pub mod escalation;
pub mod policy;
pub mod rule;

use crate::auth::{Attributes, Authorizer, UserInfo, Verdict};
use crate::cache::Cache;
use kaji_api::selector::{FieldSelector, LabelSelector};
use policy::{Policy, Rules};
use serde_json::Value;
use std::sync::{Arc, RwLock};

const KINDS: [&str; 4] = ["ClusterRole", "Role", "ClusterRoleBinding", "RoleBinding"];

/// `--authorization-mode RBAC`.
pub struct Rbac {
    cache: Arc<Cache>,
    current: RwLock<(Option<[u64; 4]>, Arc<Policy>)>,
}

impl Rbac {
    pub fn new(cache: Arc<Cache>) -> Self {
        Self { cache, current: RwLock::new((None, Arc::new(Policy::default()))) }
    }

    fn stamp(&self) -> [u64; 4] {
        KINDS.map(|k| self.cache.resource(k).map_or(0, |rc| rc.revision()))
    }

    fn objects(&self, kind: &str) -> Vec<Value> {
        let Some(rc) = self.cache.resource(kind) else { return vec![] };
        let all = rc.list(None, &LabelSelector::default(), &FieldSelector::default(), None, None, 0);
        all.items.iter().map(|o| o.value()).collect()
    }

    /// The policy as the cache holds it now.
    pub fn policy(&self) -> Arc<Policy> {
        let stamp = self.stamp();
        {
            let cur = self.current.read().unwrap_or_else(|p| p.into_inner());
            if cur.0 == Some(stamp) {
                return cur.1.clone();
            }
        }
        let [cr, r, crb, rb] = KINDS.map(|k| self.objects(k));
        let policy = Arc::new(Policy::build(&cr, &r, &crb, &rb));
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = (Some(stamp), policy.clone());
        policy
    }

    /// Every rule `user` holds in `namespace` (Kubernetes' `RulesFor`).
    pub fn rules_for(&self, user: &UserInfo, namespace: &str) -> Rules {
        self.policy().rules_for(user, namespace)
    }
}

impl Authorizer for Rbac {
    fn authorize(&self, attrs: &Attributes) -> Verdict {
        match self.policy().allows(attrs) {
            Ok(reason) => Verdict::allow(reason),
            Err(errors) if errors.is_empty() => Verdict::no_opinion(""),
            Err(errors) => Verdict::no_opinion(format!("RBAC: {}", aggregate(&errors))),
        }
    }
}

/// apimachinery's `NewAggregate(...).Error()`: one message, or `[a, b]`.
pub fn aggregate(errors: &[String]) -> String {
    match errors {
        [one] => one.clone(),
        many => format!("[{}]", many.join(", ")),
    }
}
