//! ClusterRole aggregation controller. Desired: a ClusterRole with an `aggregationRule` holds the
//! rules of every other ClusterRole its selectors match (by name order, each rule once), as
//! Kubernetes builds `admin`, `edit` and `view`. Observed: the ClusterRoles cache; any change to
//! a ClusterRole re-checks every aggregated one.

use crate::meta::Selector;
use crate::shared::Shared;
use futures::Stream;
use k8s_openapi::api::rbac::v1::{ClusterRole, PolicyRule};
use kube::api::{Api, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::ResourceExt;
use std::sync::Arc;

pub const NAME: &str = "clusterrole-aggregation";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("failed to update the rules of clusterrole {name}")]
    Update {
        name: String,
        #[source]
        source: kube::Error,
    },
}

pub struct Ctx {
    pub shared: Shared,
    pub roles: Store<ClusterRole>,
}

/// The rules `role` aggregates from `all`, or `None` when it has no aggregation rule.
pub fn aggregate(role: &ClusterRole, all: &[Arc<ClusterRole>]) -> Option<Vec<PolicyRule>> {
    let selectors = role.aggregation_rule.as_ref()?.cluster_role_selectors.clone().unwrap_or_default();
    let mut sorted: Vec<&Arc<ClusterRole>> = all.iter().collect();
    sorted.sort_by_key(|r| r.name_any());
    let mut out: Vec<PolicyRule> = Vec::new();
    for sel in &selectors {
        let Some(sel) = Selector::new(Some(sel)) else { continue };
        for other in
            sorted.iter().filter(|r| r.name_any() != role.name_any() && sel.matches(r.metadata.labels.as_ref()))
        {
            for rule in other.rules.iter().flatten() {
                if !out.contains(rule) {
                    out.push(rule.clone());
                }
            }
        }
    }
    Some(out)
}

#[tracing::instrument(skip_all, fields(controller = NAME, object = %role.name_any()))]
pub async fn reconcile(role: Arc<ClusterRole>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let name = role.name_any();
    ctx.shared.reconciled(NAME, &name, sync(&role, &ctx, &name)).await
}

pub fn error_policy(role: Arc<ClusterRole>, err: &Error, ctx: Arc<Ctx>) -> Action {
    ctx.shared.failed(NAME, &role.name_any(), err)
}

async fn sync(role: &ClusterRole, ctx: &Ctx, name: &str) -> Result<Action, Error> {
    let Some(rules) = aggregate(role, &ctx.roles.state()) else { return Ok(Action::await_change()) };
    if role.rules.as_deref().unwrap_or_default() == rules.as_slice() {
        return Ok(Action::await_change());
    }
    let mut next = role.clone();
    next.rules = Some(rules);
    match Api::<ClusterRole>::all(ctx.shared.client.clone()).replace(name, &PostParams::default(), &next).await {
        Ok(_) => tracing::info!(clusterrole = %name, "aggregated rules"),
        // The cache was behind; the watch brings the newer role and another pass.
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(source) => return Err(Error::Update { name: name.into(), source }),
    }
    Ok(Action::await_change())
}

/// Runs the controller until `stop` resolves.
pub async fn run(
    ctx: Arc<Ctx>,
    roles: impl Stream<Item = Result<ClusterRole, watcher::Error>> + Send + 'static,
    changes: impl Stream<Item = Result<ClusterRole, watcher::Error>> + Send + 'static,
    stop: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let store = ctx.roles.clone();
    let controller = Controller::for_stream(roles, ctx.roles.clone()).watches_stream(changes, move |_| {
        store
            .state()
            .iter()
            .filter(|r| r.aggregation_rule.is_some())
            .map(|r| ObjectRef::from_obj(&**r))
            .collect::<Vec<_>>()
    });
    crate::shared::drive(controller, reconcile, error_policy, ctx, stop).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn role(v: serde_json::Value) -> Arc<ClusterRole> {
        Arc::new(serde_json::from_value(v).expect("clusterrole"))
    }

    #[test]
    fn aggregated_roles_gather_matching_rules_once_in_name_order() {
        let edit = role(json!({"metadata": {"name": "edit", "labels": {"agg-admin": "true"}},
            "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"agg-edit": "true"}}]}, "rules": [
                {"verbs": ["create"], "apiGroups": [""], "resources": ["pods"]}]}));
        let admin = role(json!({"metadata": {"name": "admin"},
            "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"agg-admin": "true"}}]}}));
        let b = role(json!({"metadata": {"name": "b-extra", "labels": {"agg-edit": "true"}},
            "rules": [{"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]}]}));
        let a = role(json!({"metadata": {"name": "a-extra", "labels": {"agg-edit": "true"}},
            "rules": [{"verbs": ["list"], "apiGroups": [""], "resources": ["pods"]},
                      {"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]}]}));
        let all = vec![edit.clone(), admin.clone(), a, b];
        let rules = aggregate(&edit, &all).expect("aggregated");
        assert_eq!(rules.iter().map(|r| r.verbs[0].as_str()).collect::<Vec<_>>(), ["list", "get"]);
        assert_eq!(aggregate(&admin, &all).expect("aggregated").len(), 1, "edit's current rules");
        assert!(aggregate(&all[2], &all).is_none());
    }
}
