//! Disruption controller. Desired: each PodDisruptionBudget's status says how many of its pods are
//! expected, must stay healthy and are, and so how many disruptions the eviction subresource may
//! allow. Observed: the budgets, the pods they select, and the scale of those pods' controllers
//! (ReplicaSet or its Deployment, ReplicationController, StatefulSet). The arithmetic is `plan`'s.

pub mod plan;

use crate::meta::{self, Selector};
use crate::shared::Shared;
use futures::Stream;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{Pod, ReplicationController};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::api::{Api, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::ResourceExt;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

pub const NAME: &str = "disruption";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("failed to write the status of {key}")]
    Write {
        key: String,
        #[source]
        source: kube::Error,
    },
}

pub struct Ctx {
    pub shared: Shared,
    pub budgets: Store<PodDisruptionBudget>,
    pub pods: Store<Pod>,
    pub replica_sets: Store<ReplicaSet>,
    pub replication_controllers: Store<ReplicationController>,
    pub deployments: Store<Deployment>,
    pub stateful_sets: Store<StatefulSet>,
}

/// The pods a budget selects: none without a selector, all of its namespace with an empty one.
fn selected<'a>(pdb: &PodDisruptionBudget, pods: impl IntoIterator<Item = &'a Pod>) -> Vec<&'a Pod> {
    let Some(selector) = pdb.spec.as_ref().and_then(|s| s.selector.as_ref()) else { return Vec::new() };
    let Some(selector) = Selector::new(Some(selector)) else { return Vec::new() };
    pods.into_iter()
        .filter(|p| p.metadata.namespace == pdb.metadata.namespace)
        .filter(|p| selector.matches(p.metadata.labels.as_ref()))
        .collect()
}

/// The budgets selecting `pod` (what a pod change wakes).
fn budgets_for_pod(budgets: &Store<PodDisruptionBudget>, pod: &Pod) -> Vec<ObjectRef<PodDisruptionBudget>> {
    budgets.state().iter().filter(|b| !selected(b, [pod]).is_empty()).map(|b| ObjectRef::from_obj(&**b)).collect()
}

fn find<K: kube::Resource<DynamicType = ()> + Clone>(
    store: &Store<K>,
    ns: &str,
    name: &str,
    uid: &str,
) -> Option<Arc<K>> {
    store.get(&ObjectRef::new(name).within(ns)).filter(|o| o.meta().uid.as_deref() == Some(uid))
}

/// `getExpectedScale`: the summed replicas of the pods' controllers (each counted once); pods
/// without a controller count for nothing; a controller kaji cannot find is an error.
fn expected_scale(ctx: &Ctx, pods: &[&Pod]) -> Result<i32, String> {
    let mut scales: BTreeMap<String, i32> = BTreeMap::new();
    for pod in pods {
        let Some(owner) = meta::controller_of(&pod.metadata) else { continue };
        if scales.contains_key(&owner.uid) {
            continue;
        }
        let ns = pod.metadata.namespace.as_deref().unwrap_or("");
        let scale = match (owner.api_version.as_str(), owner.kind.as_str()) {
            ("apps/v1", "ReplicaSet") => find(&ctx.replica_sets, ns, &owner.name, &owner.uid).map(|rs| {
                // A Deployment's ReplicaSet: the Deployment's scale counts.
                let deployment = meta::controller_of(&rs.metadata)
                    .filter(|d| d.kind == "Deployment")
                    .and_then(|d| find(&ctx.deployments, ns, &d.name, &d.uid).map(|d| (d.uid(), d)));
                match deployment {
                    Some((uid, d)) => (uid.unwrap_or_default(), d.spec.replicas.unwrap_or(1)),
                    None => (owner.uid.clone(), rs.spec.replicas.unwrap_or(1)),
                }
            }),
            ("v1", "ReplicationController") => find(&ctx.replication_controllers, ns, &owner.name, &owner.uid)
                .map(|rc| (owner.uid.clone(), rc.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1))),
            ("apps/v1", "StatefulSet") => find(&ctx.stateful_sets, ns, &owner.name, &owner.uid)
                .map(|s| (owner.uid.clone(), s.spec.replicas.unwrap_or(1))),
            _ => None,
        };
        let Some((uid, scale)) = scale else {
            return Err(format!("found no controllers for pod {:?}", pod.metadata.name.as_deref().unwrap_or("")));
        };
        scales.insert(owner.uid.clone(), 0);
        scales.insert(uid, scale);
    }
    Ok(scales.values().sum())
}

#[tracing::instrument(skip_all, fields(controller = NAME, object = %meta::key(&pdb.metadata)))]
pub async fn reconcile(pdb: Arc<PodDisruptionBudget>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let key = meta::key(&pdb.metadata);
    ctx.shared.reconciled(NAME, &key, sync(&pdb, &ctx, &key)).await
}

pub fn error_policy(pdb: Arc<PodDisruptionBudget>, err: &Error, ctx: Arc<Ctx>) -> Action {
    ctx.shared.failed(NAME, &meta::key(&pdb.metadata), err)
}

async fn sync(pdb: &PodDisruptionBudget, ctx: &Ctx, key: &str) -> Result<Action, Error> {
    if pdb.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let all = ctx.pods.state();
    let pods = selected(pdb, all.iter().map(|p| &**p));
    let now = jiff::Timestamp::now();
    let status = match plan::expected(pdb, pods.len(), || expected_scale(ctx, &pods)) {
        Ok((expected, desired)) => {
            let (disrupted, recheck) = plan::disrupted(pdb, &pods, now);
            let current = plan::healthy(&pods, &disrupted);
            let next = plan::next_status(pdb, current, desired, expected, disrupted, now);
            write(ctx, pdb, next, key).await?;
            if let Some(at) = recheck {
                let wait = Duration::try_from(at.duration_since(now)).unwrap_or_default();
                return Ok(Action::requeue(wait + Duration::from_secs(1)));
            }
            return Ok(Action::await_change());
        }
        Err(why) => fail_safe(pdb, &why, now),
    };
    write(ctx, pdb, status, key).await?;
    // The controllers the budget needs may appear later: look again.
    Ok(Action::requeue(Duration::from_secs(30)))
}

/// `failSafe`: no disruption allowed, and why, in the DisruptionAllowed condition (SyncFailed).
fn fail_safe(pdb: &PodDisruptionBudget, why: &str, now: jiff::Timestamp) -> Option<PodDisruptionBudgetStatus> {
    let mut status = pdb.status.clone().unwrap_or_default();
    let before = status.clone();
    status.disruptions_allowed = Some(0);
    let generation = status.observed_generation;
    let list = status.conditions.get_or_insert_with(Vec::new);
    let wanted = Condition {
        type_: "DisruptionAllowed".into(),
        status: "False".into(),
        reason: "SyncFailed".into(),
        message: why.into(),
        observed_generation: generation,
        last_transition_time: Time(now),
    };
    match list.iter_mut().find(|c| c.type_ == "DisruptionAllowed") {
        Some(c) => {
            if c.status != "False" {
                c.last_transition_time = Time(now);
            }
            c.status = "False".into();
            c.reason = wanted.reason;
            c.message = wanted.message;
            c.observed_generation = generation;
        }
        None => list.push(wanted),
    }
    (status != before).then_some(status)
}

async fn write(
    ctx: &Ctx,
    pdb: &PodDisruptionBudget,
    status: Option<PodDisruptionBudgetStatus>,
    key: &str,
) -> Result<(), Error> {
    let Some(status) = status else { return Ok(()) };
    let api: Api<PodDisruptionBudget> =
        Api::namespaced(ctx.shared.client.clone(), &pdb.namespace().unwrap_or_default());
    let mut next = pdb.clone();
    next.status = Some(status);
    next.metadata.managed_fields = None;
    match api.replace_status(&pdb.name_any(), &PostParams::default(), &next).await {
        Ok(_) => Ok(()),
        // Deleted meanwhile; or changed, and that change wakes the budget again.
        Err(kube::Error::Api(s)) if matches!(s.code, 404 | 409) => Ok(()),
        Err(source) => Err(Error::Write { key: key.into(), source }),
    }
}

/// Runs the controller until `stop` resolves.
pub async fn run(
    ctx: Arc<Ctx>,
    budgets: impl Stream<Item = Result<PodDisruptionBudget, watcher::Error>> + Send + 'static,
    pods: impl Stream<Item = Result<Pod, watcher::Error>> + Send + 'static,
    stop: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let store = ctx.budgets.clone();
    let controller = Controller::for_stream(budgets, ctx.budgets.clone())
        .watches_stream(pods, move |pod| budgets_for_pod(&store, &pod));
    crate::shared::drive(controller, reconcile, error_policy, ctx, stop).await;
}
