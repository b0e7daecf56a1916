//! ReplicaSet controller. Desired: `spec.replicas` active pods matching the selector, owned by the
//! set. Observed: the pods in the cache; it adopts orphans, releases strays, creates or deletes the
//! difference (guarded by expectations) and writes the counts back to `status`.

pub mod plan;

use crate::expectations::{Expectations, Seen};
use crate::meta::{self, claim, controller_ref, pod_is_active, Claim, Selector};
use crate::shared::{Shared, RESYNC};
use futures::Stream;
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::ResourceExt;
use plan::{plan, slow_start_batches, Plan};
use serde_json::json;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

pub const NAME: &str = "replicaset";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("failed to {action} for replicaset {key}")]
    Api {
        action: &'static str,
        key: String,
        #[source]
        source: kube::Error,
    },
    #[error("{failed} of {attempted} pod creations failed for replicaset {key}")]
    Create { key: String, failed: usize, attempted: usize },
}

pub struct Ctx {
    pub shared: Shared,
    pub pods: Store<Pod>,
    pub sets: Store<ReplicaSet>,
    pub expectations: Expectations,
}

#[tracing::instrument(skip_all, fields(controller = NAME, object = %meta::key(&rs.metadata)))]
pub async fn reconcile(rs: Arc<ReplicaSet>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let key = meta::key(&rs.metadata);
    ctx.shared.reconciled(NAME, &key, sync(&rs, &ctx, &key)).await
}

pub fn error_policy(rs: Arc<ReplicaSet>, err: &Error, ctx: Arc<Ctx>) -> Action {
    ctx.shared.failed(NAME, &meta::key(&rs.metadata), err)
}

async fn sync(rs: &ReplicaSet, ctx: &Ctx, key: &str) -> Result<Action, Error> {
    let ns = rs.namespace().unwrap_or_default();
    let uid = rs.uid().unwrap_or_default();
    let spec = &rs.spec;
    let Some(selector) = Selector::for_workload(&spec.selector) else {
        tracing::warn!(replicaset = %key, "invalid or empty selector; ignoring");
        return Ok(Action::await_change());
    };
    let deleting = rs.metadata.deletion_timestamp.is_some();
    let api: Api<Pod> = Api::namespaced(ctx.shared.client.clone(), &ns);
    let all: Vec<Arc<Pod>> =
        ctx.pods.state().into_iter().filter(|p| p.metadata.namespace.as_deref() == Some(&ns)).collect();

    let mut owned: Vec<&Pod> = Vec::new();
    for pod in all.iter().filter(|p| pod_is_active(p)) {
        match claim(&uid, deleting, &pod.metadata, &selector) {
            Claim::Owned => owned.push(pod),
            Claim::Adopt => match meta::adopt(&api, &pod.metadata, controller_ref(rs)).await {
                Ok(()) => owned.push(pod),
                Err(kube::Error::Api(s)) if matches!(s.code, 404 | 409 | 422) => {}
                Err(source) => return Err(Error::Api { action: "adopt a pod", key: key.into(), source }),
            },
            Claim::Release => meta::release(&api, &pod.metadata, &uid).await.map_err(|source| Error::Api {
                action: "release a pod",
                key: key.into(),
                source,
            })?,
            Claim::Ignore => {}
        }
    }

    let by_uid: HashMap<&str, &Pod> = all.iter().filter_map(|p| Some((p.metadata.uid.as_deref()?, &**p))).collect();
    let seen = |uid: &str| match by_uid.get(uid) {
        None => Seen::Absent,
        Some(p) if p.metadata.deletion_timestamp.is_some() => Seen::Deleting,
        Some(_) => Seen::Live,
    };
    let mut requeue = RESYNC;
    if deleting {
        // The garbage collector deletes the pods; nothing to manage.
    } else if ctx.expectations.satisfied(&uid, seen) {
        manage(rs, ctx, &api, &uid, plan(rs, &owned)).await?;
    } else {
        tracing::debug!(replicaset = %key, "waiting for the cache to show our last creates/deletes");
        requeue = Duration::from_secs(5);
    }

    let status = plan::status(rs, &owned, jiff::Timestamp::now());
    if rs.status.as_ref() != Some(&status) {
        let sets: Api<ReplicaSet> = Api::namespaced(ctx.shared.client.clone(), &ns);
        let patch = Patch::Merge(json!({"status": status}));
        match sets.patch_status(&rs.name_any(), &PatchParams::default(), &patch).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(source) => return Err(Error::Api { action: "update status", key: key.into(), source }),
        }
    }
    let min_ready = spec.min_ready_seconds.unwrap_or(0);
    if min_ready > 0 && status.ready_replicas != status.available_replicas {
        requeue = requeue.min(Duration::from_secs(u64::try_from(min_ready).unwrap_or(1)));
    }
    Ok(Action::requeue(requeue))
}

/// Applies a plan: creates in slow-start batches, deletes all at once.
async fn manage(rs: &ReplicaSet, ctx: &Ctx, api: &Api<Pod>, uid: &str, plan: Plan) -> Result<(), Error> {
    let key = meta::key(&rs.metadata);
    if plan.create > 0 {
        let pod = new_pod(rs);
        let pp = PostParams::default();
        let mut created = 0;
        for batch in slow_start_batches(plan.create) {
            let results = futures::future::join_all((0..batch).map(|_| api.create(&pp, &pod))).await;
            let mut failed = None;
            for r in results {
                match r {
                    Ok(p) => {
                        created += 1;
                        ctx.expectations.expect_create(uid, p.uid().unwrap_or_default());
                        ctx.shared
                            .recorder
                            .normal(rs, "SuccessfulCreate", format!("Created pod: {}", p.name_any()))
                            .await;
                    }
                    Err(e) => failed = Some(e),
                }
            }
            if let Some(e) = failed {
                ctx.shared.recorder.warning(rs, "FailedCreate", format!("Error creating: {e}")).await;
                return Err(Error::Create { key, failed: plan.create - created, attempted: plan.create });
            }
        }
        tracing::info!(replicaset = %key, created, "created pods");
    }
    if !plan.delete.is_empty() {
        for p in &plan.delete {
            ctx.expectations.expect_delete(uid, p.uid.clone());
        }
        let dp = DeleteParams::default();
        let results = futures::future::join_all(plan.delete.iter().map(|p| api.delete(&p.name, &dp))).await;
        let mut first_error = None;
        for (p, r) in plan.delete.iter().zip(results) {
            match r {
                Ok(_) => {
                    ctx.shared.recorder.normal(rs, "SuccessfulDelete", format!("Deleted pod: {}", p.name)).await;
                }
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(source) => {
                    ctx.expectations.lower_delete(uid, &p.uid);
                    first_error.get_or_insert(source);
                }
            }
        }
        if let Some(source) = first_error {
            return Err(Error::Api { action: "delete pods", key, source });
        }
        tracing::info!(replicaset = %key, deleted = plan.delete.len(), "deleted pods");
    }
    Ok(())
}

/// A pod from the set's template, named `<set>-<random>` by the apiserver.
fn new_pod(rs: &ReplicaSet) -> Pod {
    let template = rs.spec.template.clone().unwrap_or_default();
    let tmeta = template.metadata.unwrap_or_default();
    Pod {
        metadata: ObjectMeta {
            generate_name: Some(format!("{}-", rs.name_any())),
            namespace: rs.namespace(),
            labels: tmeta.labels,
            annotations: tmeta.annotations,
            finalizers: tmeta.finalizers,
            owner_references: Some(vec![controller_ref(rs)]),
            ..ObjectMeta::default()
        },
        spec: template.spec,
        status: None,
    }
}

/// The sets a pod change concerns: its controller if that is a ReplicaSet, else (an orphan) every
/// set in its namespace whose selector matches it.
pub fn sets_for_pod(sets: &Store<ReplicaSet>, pod: &Pod) -> Vec<ObjectRef<ReplicaSet>> {
    meta::owners_of(sets, &pod.metadata, |rs| Some(&rs.spec.selector))
}

/// Runs the controller until `stop` resolves.
pub async fn run(
    ctx: Arc<Ctx>,
    sets: impl Stream<Item = Result<ReplicaSet, watcher::Error>> + Send + 'static,
    pods: impl Stream<Item = Result<Pod, watcher::Error>> + Send + 'static,
    stop: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let store = ctx.sets.clone();
    crate::shared::run_owner_of_pods(ctx, store, sets, pods, sets_for_pod, reconcile, error_policy, stop).await;
}
