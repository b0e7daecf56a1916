//! The replica controller, for ReplicaSets and — as Kubernetes runs the same code for them —
//! ReplicationControllers (`kinds.rs`). Desired: `spec.replicas` active pods matching the selector,
//! owned by the owner. Observed: the pods in the cache; it adopts orphans, releases strays, creates
//! or deletes the difference (guarded by expectations) and writes the counts back to `status`.

pub mod kinds;
pub mod plan;

pub use kinds::Replicated;

use crate::expectations::{Expectations, Seen};
use crate::meta::{self, claim, controller_ref, pod_is_active, Claim};
use crate::shared::{Shared, RESYNC};
use futures::Stream;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::ResourceExt;
use plan::{plan, slow_start_batches, Plan};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("failed to {action} for {controller} {key}")]
    Api {
        action: &'static str,
        controller: &'static str,
        key: String,
        #[source]
        source: kube::Error,
    },
    #[error("{failed} of {attempted} pod creations failed for {controller} {key}")]
    Create {
        controller: &'static str,
        key: String,
        failed: usize,
        attempted: usize,
        #[source]
        source: kube::Error,
    },
}

impl Error {
    /// What the ReplicaFailure condition says: the API's own message, as Kubernetes puts the
    /// failed request's error there.
    fn condition_message(&self) -> String {
        let (Self::Api { source, .. } | Self::Create { source, .. }) = self;
        match source {
            kube::Error::Api(s) => s.message.clone(),
            other => other.to_string(),
        }
    }
}

pub struct Ctx<K: Replicated> {
    pub shared: Shared,
    pub pods: Store<Pod>,
    pub owners: Store<K>,
    pub expectations: Expectations,
}

#[tracing::instrument(skip_all, fields(controller = K::NAME, object = %meta::key(owner.meta())))]
pub async fn reconcile<K: Replicated>(owner: Arc<K>, ctx: Arc<Ctx<K>>) -> Result<Action, Error> {
    let key = meta::key(owner.meta());
    ctx.shared.reconciled(K::NAME, &key, sync(&*owner, &ctx, &key)).await
}

pub fn error_policy<K: Replicated>(owner: Arc<K>, err: &Error, ctx: Arc<Ctx<K>>) -> Action {
    ctx.shared.failed(K::NAME, &meta::key(owner.meta()), err)
}

async fn sync<K: Replicated>(owner: &K, ctx: &Ctx<K>, key: &str) -> Result<Action, Error> {
    let api_error = |action, source| Error::Api { action, controller: K::NAME, key: key.into(), source };
    let ns = owner.namespace().unwrap_or_default();
    let uid = owner.uid().unwrap_or_default();
    let Some(selector) = owner.selector() else {
        tracing::warn!(controller = K::NAME, object = %key, "invalid or empty selector; ignoring");
        return Ok(Action::await_change());
    };
    let deleting = owner.meta().deletion_timestamp.is_some();
    let api: Api<Pod> = Api::namespaced(ctx.shared.client.clone(), &ns);
    let all: Vec<Arc<Pod>> =
        ctx.pods.state().into_iter().filter(|p| p.metadata.namespace.as_deref() == Some(&ns)).collect();

    let mut owned: Vec<&Pod> = Vec::new();
    for pod in all.iter().filter(|p| pod_is_active(p)) {
        match claim(&uid, deleting, &pod.metadata, &selector) {
            Claim::Owned => owned.push(pod),
            Claim::Adopt => match meta::adopt(&api, &pod.metadata, controller_ref(owner)).await {
                Ok(()) => owned.push(pod),
                Err(kube::Error::Api(s)) if matches!(s.code, 404 | 409 | 422) => {}
                Err(source) => return Err(api_error("adopt a pod", source)),
            },
            Claim::Release => {
                meta::release(&api, &pod.metadata, &uid).await.map_err(|source| api_error("release a pod", source))?
            }
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
    let mut managed = Ok(());
    if deleting {
        // The garbage collector deletes (or orphans) the pods; nothing to manage.
    } else if ctx.expectations.satisfied(&uid, seen) {
        managed = manage(owner, ctx, &api, &uid, plan(owner.replicas(), &owned)).await;
    } else {
        tracing::debug!(controller = K::NAME, object = %key, "waiting for the cache to show our last creates/deletes");
        requeue = Duration::from_secs(5);
    }

    // The status is written whether or not managing failed, with the failure as a condition.
    let failure = managed.as_ref().err().map(Error::condition_message);
    let status = plan::status(owner, &owned, failure.as_deref(), jiff::Timestamp::now());
    if owner.observed() != status {
        let owners: Api<K> = Api::namespaced(ctx.shared.client.clone(), &ns);
        match owners.patch_status(&owner.name_any(), &PatchParams::default(), &Patch::Merge(status.patch())).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(source) => return Err(api_error("update status", source)),
        }
    }
    managed?;
    let min_ready = owner.min_ready_seconds();
    if min_ready > 0 && status.ready_replicas != status.available_replicas {
        requeue = requeue.min(Duration::from_secs(u64::try_from(min_ready).unwrap_or(1)));
    }
    Ok(Action::requeue(requeue))
}

/// Applies a plan: creates in slow-start batches, deletes all at once.
async fn manage<K: Replicated>(owner: &K, ctx: &Ctx<K>, api: &Api<Pod>, uid: &str, plan: Plan) -> Result<(), Error> {
    let key = meta::key(owner.meta());
    if plan.create > 0 {
        let pod = new_pod(owner);
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
                            .normal(owner, "SuccessfulCreate", format!("Created pod: {}", p.name_any()))
                            .await;
                    }
                    Err(e) => failed = Some(e),
                }
            }
            if let Some(source) = failed {
                ctx.shared.recorder.warning(owner, "FailedCreate", format!("Error creating: {source}")).await;
                let (failed, attempted) = (plan.create - created, plan.create);
                return Err(Error::Create { controller: K::NAME, key, failed, attempted, source });
            }
        }
        tracing::info!(controller = K::NAME, object = %key, created, "created pods");
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
                    ctx.shared.recorder.normal(owner, "SuccessfulDelete", format!("Deleted pod: {}", p.name)).await;
                }
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(source) => {
                    ctx.expectations.lower_delete(uid, &p.uid);
                    first_error.get_or_insert(source);
                }
            }
        }
        if let Some(source) = first_error {
            return Err(Error::Api { action: "delete pods", controller: K::NAME, key, source });
        }
        tracing::info!(controller = K::NAME, object = %key, deleted = plan.delete.len(), "deleted pods");
    }
    Ok(())
}

/// A pod from the owner's template, named `<owner>-<random>` by the apiserver.
fn new_pod<K: Replicated>(owner: &K) -> Pod {
    let template = owner.template().cloned().unwrap_or_default();
    let tmeta = template.metadata.unwrap_or_default();
    Pod {
        metadata: ObjectMeta {
            generate_name: Some(format!("{}-", owner.name_any())),
            namespace: owner.namespace(),
            labels: tmeta.labels,
            annotations: tmeta.annotations,
            finalizers: tmeta.finalizers,
            owner_references: Some(vec![controller_ref(owner)]),
            ..ObjectMeta::default()
        },
        spec: template.spec,
        status: None,
    }
}

/// The owners a pod change concerns: its controller if that is a `K`, else (an orphan) every `K`
/// in its namespace whose selector matches it.
pub fn owners_for_pod<K: Replicated>(owners: &Store<K>, pod: &Pod) -> Vec<ObjectRef<K>> {
    meta::owners_of(owners, &pod.metadata, K::selector)
}

/// Runs the controller for `K` until `stop` resolves.
pub async fn run<K: Replicated>(
    ctx: Arc<Ctx<K>>,
    owners: impl Stream<Item = Result<K, watcher::Error>> + Send + 'static,
    pods: impl Stream<Item = Result<Pod, watcher::Error>> + Send + 'static,
    stop: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let store = ctx.owners.clone();
    crate::shared::run_owner_of_pods(ctx, store, owners, pods, owners_for_pod::<K>, reconcile, error_policy, stop)
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodTemplateSpec, ReplicationController, ReplicationControllerSpec};

    #[test]
    fn a_replication_controllers_pods_carry_its_template_and_controller_reference() {
        let template = PodTemplateSpec {
            metadata: Some(ObjectMeta {
                labels: Some([("app".into(), "web".into())].into()),
                annotations: Some([("note".into(), "x".into())].into()),
                ..ObjectMeta::default()
            }),
            spec: Some(Default::default()),
        };
        let rc = ReplicationController {
            metadata: ObjectMeta {
                name: Some("web".into()),
                namespace: Some("prod".into()),
                uid: Some("u1".into()),
                ..ObjectMeta::default()
            },
            spec: Some(ReplicationControllerSpec { template: Some(template), ..ReplicationControllerSpec::default() }),
            status: None,
        };
        let pod = new_pod(&rc);
        assert_eq!(pod.metadata.generate_name.as_deref(), Some("web-"));
        assert_eq!(pod.metadata.namespace.as_deref(), Some("prod"));
        assert_eq!(pod.metadata.labels, Some([("app".into(), "web".into())].into()));
        assert_eq!(pod.metadata.annotations, Some([("note".into(), "x".into())].into()));
        let owner = &pod.metadata.owner_references.expect("owned")[0];
        assert_eq!((owner.api_version.as_str(), owner.kind.as_str()), ("v1", "ReplicationController"));
        assert_eq!((owner.name.as_str(), owner.uid.as_str()), ("web", "u1"));
        assert_eq!((owner.controller, owner.block_owner_deletion), (Some(true), Some(true)));
    }
}
