//! StatefulSet controller. Desired: pods `<set>-0` .. `<set>-<replicas-1>`, each with a stable
//! hostname under the set's headless Service and its own claims from volumeClaimTemplates, made
//! from the update revision (or the current one below a RollingUpdate partition). Observed: the
//! set's pods and ControllerRevisions in the caches; it records the template as a revision,
//! creates and deletes pods in ordinal order (`plan`), prunes old revisions and writes status.

pub mod identity;
pub mod plan;
pub mod revision;

use crate::meta::{self, claim, controller_of, controller_ref, Claim, Selector};
use crate::shared::{Shared, RESYNC};
use futures::Stream;
use k8s_openapi::api::apps::v1::{ControllerRevision, StatefulSet};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, PodTemplateSpec};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::controller::Action;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::ResourceExt;
use plan::{Step, Why};
use serde_json::json;
use std::collections::HashSet;
use std::sync::Arc;

pub const NAME: &str = "statefulset";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("failed to {action} for statefulset {key}")]
    Api {
        action: &'static str,
        key: String,
        #[source]
        source: kube::Error,
    },
    #[error("revision {name} of statefulset {key} collides with another; retrying with collisionCount {count}")]
    Collision { key: String, name: String, count: i32 },
}

pub struct Ctx {
    pub shared: Shared,
    pub sets: Store<StatefulSet>,
    pub pods: Store<Pod>,
    pub revisions: Store<ControllerRevision>,
}

#[tracing::instrument(skip_all, fields(controller = NAME, object = %meta::key(&set.metadata)))]
pub async fn reconcile(set: Arc<StatefulSet>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let key = meta::key(&set.metadata);
    ctx.shared.reconciled(NAME, &key, sync(&set, &ctx, &key)).await
}

pub fn error_policy(set: Arc<StatefulSet>, err: &Error, ctx: Arc<Ctx>) -> Action {
    ctx.shared.failed(NAME, &meta::key(&set.metadata), err)
}

async fn sync(set: &StatefulSet, ctx: &Ctx, key: &str) -> Result<Action, Error> {
    let ns = set.namespace().unwrap_or_default();
    let uid = set.uid().unwrap_or_default();
    let spec = &set.spec;
    let Some(selector) = Selector::for_workload(&spec.selector) else {
        tracing::warn!(statefulset = %key, "invalid or empty selector; ignoring");
        return Ok(Action::await_change());
    };
    if set.metadata.deletion_timestamp.is_some() {
        // The garbage collector deletes the pods and revisions.
        return Ok(Action::await_change());
    }
    let err = |action| move |source| Error::Api { action, key: key.to_string(), source };
    let pods_api: Api<Pod> = Api::namespaced(ctx.shared.client.clone(), &ns);
    let all: Vec<Arc<Pod>> =
        ctx.pods.state().into_iter().filter(|p| p.metadata.namespace.as_deref() == Some(&ns)).collect();
    let set_name = set.name_any();
    let mut owned: Vec<&Pod> = Vec::new();
    for pod in &all {
        let member = identity::ordinal(&set_name, pod.metadata.name.as_deref().unwrap_or_default()).is_some();
        match claim(&uid, false, &pod.metadata, &selector) {
            Claim::Owned => owned.push(pod),
            Claim::Adopt if member && meta::pod_is_active(pod) => {
                match meta::adopt(&pods_api, &pod.metadata, controller_ref(set)).await {
                    Ok(()) => owned.push(pod),
                    Err(kube::Error::Api(s)) if matches!(s.code, 404 | 409 | 422) => {}
                    Err(source) => return Err(err("adopt a pod")(source)),
                }
            }
            Claim::Release => meta::release(&pods_api, &pod.metadata, &uid).await.map_err(err("release a pod"))?,
            Claim::Adopt | Claim::Ignore => {}
        }
    }

    let revs: Vec<Arc<ControllerRevision>> = ctx
        .revisions
        .state()
        .into_iter()
        .filter(|r| r.metadata.namespace.as_deref() == Some(&ns))
        .filter(|r| controller_of(&r.metadata).is_some_and(|o| o.uid == uid))
        .collect();
    let refs: Vec<&ControllerRevision> = revs.iter().map(|r| &**r).collect();
    let update = ensure_update_revision(set, ctx, &refs, key).await?;
    let current = set
        .status
        .as_ref()
        .and_then(|s| s.current_revision.as_deref())
        .and_then(|name| refs.iter().find(|r| r.metadata.name.as_deref() == Some(name)))
        .map(|r| (r.metadata.name.clone().unwrap_or_default(), revision::template(r)))
        .unwrap_or_else(|| (update.clone(), Some(spec.template.clone())));
    let current_template = current.1.unwrap_or_else(|| spec.template.clone());

    let now = jiff::Timestamp::now();
    let plan = plan::plan(set, &owned, &update, now);
    for step in &plan.steps {
        match step {
            Step::Create { ordinal, current: from_current } => {
                let (template, rev) =
                    if *from_current { (&current_template, &current.0) } else { (&spec.template, &update) };
                create(set, ctx, &pods_api, template, rev, *ordinal).await?;
            }
            Step::Delete { pod, why } => {
                let dp = DeleteParams {
                    preconditions: Some(Preconditions { uid: Some(pod.uid.clone()), resource_version: None }),
                    ..DeleteParams::default()
                };
                match pods_api.delete(&pod.name, &dp).await {
                    Ok(_) => {
                        tracing::info!(statefulset = %key, pod = %pod.name, why = ?why, "deleted pod");
                        let msg = format!("delete Pod {} in StatefulSet {set_name} successful", pod.name);
                        ctx.shared.recorder.normal(set, "SuccessfulDelete", msg).await;
                    }
                    Err(kube::Error::Api(s)) if matches!(s.code, 404 | 409) => {}
                    Err(source) => {
                        let msg = format!("delete Pod {} in StatefulSet {set_name} failed error: {source}", pod.name);
                        ctx.shared.recorder.warning(set, "FailedDelete", msg).await;
                        return Err(err("delete a pod")(source));
                    }
                }
                if *why == Why::Finished {
                    tracing::info!(statefulset = %key, pod = %pod.name, "pod finished; recreating it");
                }
            }
        }
    }

    let status = plan::status(set, &owned, &current.0, &update, now);
    if set.status.as_ref() != Some(&status) {
        let sets: Api<StatefulSet> = Api::namespaced(ctx.shared.client.clone(), &ns);
        match sets.patch_status(&set_name, &PatchParams::default(), &Patch::Merge(json!({"status": status}))).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(source) => return Err(err("update status")(source)),
        }
    }

    let mut in_use: HashSet<&str> = [current.0.as_str(), update.as_str()].into();
    in_use.extend(owned.iter().filter_map(|p| plan::pod_revision(p)));
    let limit = spec.revision_history_limit.unwrap_or(10);
    let revs_api: Api<ControllerRevision> = Api::namespaced(ctx.shared.client.clone(), &ns);
    for old in revision::to_prune(&refs, &in_use, limit) {
        match revs_api.delete(&old.name_any(), &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(source) => return Err(err("delete an old revision")(source)),
        }
    }
    Ok(Action::requeue(plan.requeue.unwrap_or(RESYNC).min(RESYNC)))
}

/// The name of the revision holding the set's template: an existing one (renumbered as the newest
/// if it is an older one, as after a rollback) or a new one.
async fn ensure_update_revision(
    set: &StatefulSet,
    ctx: &Ctx,
    revs: &[&ControllerRevision],
    key: &str,
) -> Result<String, Error> {
    let ns = set.namespace().unwrap_or_default();
    let api: Api<ControllerRevision> = Api::namespaced(ctx.shared.client.clone(), &ns);
    let data = revision::data(set);
    let next = revision::next_number(revs);
    let err = |action| move |source| Error::Api { action, key: key.to_string(), source };
    if let Some(found) = revs.iter().filter(|r| revision::holds(r, &data)).max_by_key(|r| r.revision.unwrap_or(0)) {
        let name = found.name_any();
        if found.revision != Some(next - 1) {
            let patch = Patch::Merge(json!({"revision": next}));
            api.patch(&name, &PatchParams::default(), &patch).await.map_err(err("renumber a revision"))?;
        }
        return Ok(name);
    }
    let new = revision::new(set, data.clone(), next);
    let name = new.name_any();
    match api.create(&PostParams::default(), &new).await {
        Ok(_) => Ok(name),
        Err(kube::Error::Api(s)) if s.code == 409 => {
            // Ours but not in the cache yet, or a namesake with other data: a hash collision.
            let existing = api.get(&name).await.map_err(err("read a revision"))?;
            let ours = controller_of(&existing.metadata).map(|o| o.uid.as_str()) == set.metadata.uid.as_deref();
            if ours && revision::holds(&existing, &data) {
                return Ok(name);
            }
            let count = set.status.as_ref().and_then(|s| s.collision_count).unwrap_or(0) + 1;
            let sets: Api<StatefulSet> = Api::namespaced(ctx.shared.client.clone(), &ns);
            let patch = Patch::Merge(json!({"status": {"collisionCount": count}}));
            sets.patch_status(&set.name_any(), &PatchParams::default(), &patch).await.map_err(err("update status"))?;
            Err(Error::Collision { key: key.into(), name, count })
        }
        Err(source) => Err(err("create a revision")(source)),
    }
}

/// Creates the pod with this ordinal, its claims first (those that exist are kept as they are).
async fn create(
    set: &StatefulSet,
    ctx: &Ctx,
    pods: &Api<Pod>,
    template: &PodTemplateSpec,
    revision: &str,
    ordinal: i32,
) -> Result<(), Error> {
    let key = meta::key(&set.metadata);
    let set_name = set.name_any();
    let pod_name = identity::pod_name(set, ordinal);
    let claims: Api<PersistentVolumeClaim> =
        Api::namespaced(ctx.shared.client.clone(), &set.namespace().unwrap_or_default());
    for c in identity::claims(set, ordinal) {
        let name = c.name_any();
        match claims.create(&PostParams::default(), &c).await {
            Ok(_) => {
                let msg = format!("create Claim {name} Pod {pod_name} in StatefulSet {set_name} success");
                ctx.shared.recorder.normal(set, "SuccessfulCreate", msg).await;
            }
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(source) => {
                let msg =
                    format!("create Claim {name} for Pod {pod_name} in StatefulSet {set_name} failed error: {source}");
                ctx.shared.recorder.warning(set, "FailedCreate", msg).await;
                return Err(Error::Api { action: "create a claim", key, source });
            }
        }
    }
    let pod = identity::new_pod(set, template, revision, ordinal);
    match pods.create(&PostParams::default(), &pod).await {
        Ok(_) => {
            tracing::info!(statefulset = %key, pod = %pod_name, revision, "created pod");
            let msg = format!("create Pod {pod_name} in StatefulSet {set_name} successful");
            ctx.shared.recorder.normal(set, "SuccessfulCreate", msg).await;
            Ok(())
        }
        // Created already; the cache has not shown it yet.
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(source) => {
            let msg = format!("create Pod {pod_name} in StatefulSet {set_name} failed error: {source}");
            ctx.shared.recorder.warning(set, "FailedCreate", msg).await;
            Err(Error::Api { action: "create a pod", key, source })
        }
    }
}

/// The sets a pod change concerns: its controller if that is a StatefulSet, else (an orphan) every
/// set in its namespace whose selector matches it.
pub fn sets_for_pod(sets: &Store<StatefulSet>, pod: &Pod) -> Vec<ObjectRef<StatefulSet>> {
    meta::owners_of(sets, &pod.metadata, |s| Selector::for_workload(&s.spec.selector))
}

/// Runs the controller until `stop` resolves.
pub async fn run(
    ctx: Arc<Ctx>,
    sets: impl Stream<Item = Result<StatefulSet, watcher::Error>> + Send + 'static,
    pods: impl Stream<Item = Result<Pod, watcher::Error>> + Send + 'static,
    stop: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let store = ctx.sets.clone();
    crate::shared::run_owner_of_pods(ctx, store, sets, pods, sets_for_pod, reconcile, error_policy, stop).await;
}
