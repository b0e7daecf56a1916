//! Deployment controller. Desired: `spec.replicas` pods of `spec.template`, rolled out by
//! `spec.strategy`. Observed: the Deployment's ReplicaSets (one per pod-template-hash); it creates
//! the new one, scales new up and old down within maxSurge/maxUnavailable (or all old first, for
//! Recreate), trims history and writes status with the Available and Progressing conditions.

pub mod hash;
pub mod rolling;
pub mod status;

use crate::meta::{self, claim, controller_of, controller_ref, Claim, Selector};
use crate::shared::{Shared, RESYNC};
use futures::Stream;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, ReplicaSetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::ResourceExt;
use rolling::Rs;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

pub const NAME: &str = "deployment";
pub const REVISION: &str = "deployment.kubernetes.io/revision";
pub const DESIRED_REPLICAS: &str = "deployment.kubernetes.io/desired-replicas";
pub const MAX_REPLICAS: &str = "deployment.kubernetes.io/max-replicas";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("failed to {action} for deployment {key}")]
    Api {
        action: &'static str,
        key: String,
        #[source]
        source: kube::Error,
    },
    #[error("deployment {key}: {source}")]
    Invalid {
        key: String,
        #[source]
        source: rolling::BadIntOrPercent,
    },
    #[error("deployment {key}: replica set {name} exists with another template; collisionCount bumped")]
    Collision { key: String, name: String },
}

pub struct Ctx {
    pub shared: Shared,
    pub sets: Store<ReplicaSet>,
    pub deployments: Store<Deployment>,
}

#[tracing::instrument(skip_all, fields(controller = NAME, object = %meta::key(&d.metadata)))]
pub async fn reconcile(d: Arc<Deployment>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let key = meta::key(&d.metadata);
    ctx.shared.reconciled(NAME, &key, sync(&d, &ctx, &key)).await
}

pub fn error_policy(d: Arc<Deployment>, err: &Error, ctx: Arc<Ctx>) -> Action {
    ctx.shared.failed(NAME, &meta::key(&d.metadata), err)
}

fn revision(rs: &ReplicaSet) -> i64 {
    rs.annotations().get(REVISION).and_then(|r| r.parse().ok()).unwrap_or(0)
}

fn replicas(rs: &ReplicaSet) -> i32 {
    rs.spec.replicas.unwrap_or(1)
}

fn as_rs(rs: &ReplicaSet) -> Rs {
    Rs { replicas: replicas(rs), available: rs.status.as_ref().and_then(|s| s.available_replicas).unwrap_or(0) }
}

async fn sync(d: &Deployment, ctx: &Ctx, key: &str) -> Result<Action, Error> {
    let ns = d.namespace().unwrap_or_default();
    let uid = d.uid().unwrap_or_default();
    let spec = &d.spec;
    if d.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let Some(selector) = Selector::for_workload(&spec.selector) else {
        tracing::warn!(deployment = %key, "invalid or empty selector; ignoring");
        return Ok(Action::await_change());
    };
    let api: Api<ReplicaSet> = Api::namespaced(ctx.shared.client.clone(), &ns);
    let err = |action| move |source| Error::Api { action, key: key.to_string(), source };

    // Claim ReplicaSets; oldest first, as Kubernetes orders them.
    let mut owned: Vec<ReplicaSet> = Vec::new();
    for rs in ctx.sets.state().iter().filter(|r| r.metadata.namespace.as_deref() == Some(&ns)) {
        match claim(&uid, false, &rs.metadata, &selector) {
            Claim::Owned => owned.push((**rs).clone()),
            Claim::Adopt => match meta::adopt(&api, &rs.metadata, controller_ref(d)).await {
                Ok(()) => owned.push((**rs).clone()),
                Err(kube::Error::Api(s)) if matches!(s.code, 404 | 409 | 422) => {}
                Err(source) => return Err(err("adopt a replica set")(source)),
            },
            Claim::Release => meta::release(&api, &rs.metadata, &uid).await.map_err(err("release a replica set"))?,
            Claim::Ignore => {}
        }
    }
    owned.sort_by_key(|r| (r.metadata.creation_timestamp.as_ref().map(|t| t.0), r.name_any()));

    let want = spec.replicas.unwrap_or(1);
    let rolling_update = spec.strategy.as_ref().and_then(|s| s.rolling_update.clone()).unwrap_or_default();
    let recreate = spec.strategy.as_ref().and_then(|s| s.type_.as_deref()) == Some("Recreate");
    let (surge, unavailable) = if recreate {
        (0, 0)
    } else {
        rolling::resolve_fenceposts(rolling_update.max_surge.as_ref(), rolling_update.max_unavailable.as_ref(), want)
            .map_err(|source| Error::Invalid { key: key.into(), source })?
    };
    let template = spec.template.clone();
    let new_idx =
        owned.iter().position(|rs| rs.spec.template.as_ref().map(hash::without_hash) == Some(template.clone()));
    let mut new = new_idx.map(|i| owned.remove(i));
    let mut olds = owned;
    let max_old_revision = olds.iter().map(revision).max().unwrap_or(0);
    let mut step = status::Step::Synced;

    if spec.paused != Some(true) {
        // Recreate: every old pod gone before the new ReplicaSet gets any.
        let olds_running = olds.iter().any(|r| replicas(r) > 0 || r.status.as_ref().is_some_and(|s| s.replicas > 0));
        if recreate && olds_running {
            for rs in olds.iter_mut().filter(|r| replicas(r) > 0) {
                scale(ctx, &api, d, rs, 0).await.map_err(err("scale down a replica set"))?;
            }
        } else {
            let new_rs = match new.take() {
                Some(rs) => ensure_revision(&api, rs, max_old_revision + 1).await.map_err(err("update a revision"))?,
                None => {
                    let olds_rs: Vec<Rs> = olds.iter().map(as_rs).collect();
                    let initial = if recreate { want } else { rolling::new_rs_replicas(want, surge, 0, &olds_rs) };
                    step = status::Step::Created;
                    create_new(ctx, &api, d, key, initial, surge, max_old_revision + 1).await?
                }
            };
            let new_rs = new.insert(new_rs);
            let olds_rs: Vec<Rs> = olds.iter().map(as_rs).collect();
            let target =
                if recreate { want } else { rolling::new_rs_replicas(want, surge, replicas(new_rs), &olds_rs) };
            if target != replicas(new_rs) {
                scale(ctx, &api, d, new_rs, target).await.map_err(err("scale the new replica set"))?;
            }
            if !recreate {
                let sizes = rolling::scale_down_olds(want, unavailable, as_rs(new_rs), &olds_rs);
                for (rs, size) in olds.iter_mut().zip(sizes) {
                    if size != replicas(rs) {
                        scale(ctx, &api, d, rs, size).await.map_err(err("scale down a replica set"))?;
                    }
                }
            }
        }
        if let Some(rev) = new.as_ref().map(revision) {
            if d.annotations().get(REVISION).and_then(|r| r.parse::<i64>().ok()) != Some(rev) {
                let patch = Patch::Merge(json!({"metadata": {"annotations": {REVISION: rev.to_string()}}}));
                Api::<Deployment>::namespaced(ctx.shared.client.clone(), &ns)
                    .patch(&d.name_any(), &PatchParams::default(), &patch)
                    .await
                    .map_err(err("annotate the revision"))?;
            }
        }
        cleanup(&api, spec.revision_history_limit.unwrap_or(10), &olds).await.map_err(err("clean up history"))?;
    }

    let mut all: Vec<&ReplicaSet> = olds.iter().collect();
    all.extend(new.as_ref());
    let status = status::compute(d, &all, new.as_ref(), unavailable, step, jiff::Timestamp::now());
    if d.status.as_ref() != Some(&status) {
        let patch = Patch::Merge(json!({"status": status}));
        match Api::<Deployment>::namespaced(ctx.shared.client.clone(), &ns)
            .patch_status(&d.name_any(), &PatchParams::default(), &patch)
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(source) => return Err(err("update status")(source)),
        }
    }
    let deadline = spec.progress_deadline_seconds.unwrap_or(status::DEFAULT_PROGRESS_DEADLINE);
    let complete = status.updated_replicas == Some(want) && status.available_replicas == Some(want);
    let requeue = if complete { RESYNC } else { Duration::from_secs(u64::try_from(deadline).unwrap_or(600) + 1) };
    Ok(Action::requeue(requeue.min(RESYNC)))
}

/// Creates the ReplicaSet for the current template, named `<deployment>-<hash>`. A namesake with
/// another template is a hash collision: bump `status.collisionCount` so the next hash differs.
async fn create_new(
    ctx: &Ctx,
    api: &Api<ReplicaSet>,
    d: &Deployment,
    key: &str,
    initial: i32,
    surge: i32,
    revision: i64,
) -> Result<ReplicaSet, Error> {
    let spec = d.spec.clone();
    let collision_count = d.status.as_ref().and_then(|s| s.collision_count);
    let hash = hash::compute(&spec.template, collision_count);
    let name = format!("{}-{hash}", d.name_any());
    let mut template = spec.template.clone();
    let tmeta = template.metadata.get_or_insert_with(ObjectMeta::default);
    tmeta.labels.get_or_insert_with(Default::default).insert(hash::LABEL.into(), hash.clone());
    let mut selector: LabelSelector = spec.selector.clone();
    selector.match_labels.get_or_insert_with(Default::default).insert(hash::LABEL.into(), hash.clone());
    let want = spec.replicas.unwrap_or(1);
    let mut annotations = d.annotations().clone();
    annotations.remove("kubectl.kubernetes.io/last-applied-configuration");
    annotations.insert(REVISION.into(), revision.to_string());
    annotations.insert(DESIRED_REPLICAS.into(), want.to_string());
    annotations.insert(MAX_REPLICAS.into(), (want + surge).to_string());
    let rs = ReplicaSet {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: d.namespace(),
            labels: tmeta.labels.clone(),
            annotations: Some(annotations),
            owner_references: Some(vec![controller_ref(d)]),
            ..ObjectMeta::default()
        },
        spec: ReplicaSetSpec {
            replicas: Some(initial),
            min_ready_seconds: spec.min_ready_seconds,
            selector,
            template: Some(template),
        },
        status: None,
    };
    match api.create(&PostParams::default(), &rs).await {
        Ok(created) => {
            let msg = format!("Scaled up replica set {name} from 0 to {initial}");
            ctx.shared.recorder.normal(d, "ScalingReplicaSet", msg).await;
            Ok(created)
        }
        Err(kube::Error::Api(s)) if s.code == 409 => {
            let existing =
                api.get(&name).await.map_err(|source| Error::Api { action: "get", key: key.into(), source })?;
            let same = existing.spec.template.as_ref().map(hash::without_hash) == Some(spec.template.clone());
            if same && controller_of(&existing.metadata).is_some_and(|r| Some(&r.uid) == d.metadata.uid.as_ref()) {
                return Ok(existing);
            }
            let count = collision_count.unwrap_or(0).saturating_add(1);
            let patch = Patch::Merge(json!({"status": {"collisionCount": count}}));
            Api::<Deployment>::namespaced(ctx.shared.client.clone(), &d.namespace().unwrap_or_default())
                .patch_status(&d.name_any(), &PatchParams::default(), &patch)
                .await
                .map_err(|source| Error::Api { action: "bump collisionCount", key: key.into(), source })?;
            Err(Error::Collision { key: key.into(), name })
        }
        Err(source) => Err(Error::Api { action: "create the new replica set", key: key.into(), source }),
    }
}

/// A ReplicaSet that becomes current again (a rollback) gets the next revision.
async fn ensure_revision(api: &Api<ReplicaSet>, rs: ReplicaSet, next: i64) -> Result<ReplicaSet, kube::Error> {
    if revision(&rs) >= next {
        return Ok(rs);
    }
    let patch = Patch::Merge(json!({"metadata": {"annotations": {REVISION: next.to_string()}}}));
    api.patch(&rs.name_any(), &PatchParams::default(), &patch).await
}

/// Sets a ReplicaSet's size (and its desired-replicas annotation) and records ScalingReplicaSet.
async fn scale(
    ctx: &Ctx,
    api: &Api<ReplicaSet>,
    d: &Deployment,
    rs: &mut ReplicaSet,
    to: i32,
) -> Result<(), kube::Error> {
    let from = replicas(rs);
    let want = d.spec.replicas.unwrap_or(1);
    let patch = Patch::Merge(json!({
        "metadata": {"annotations": {DESIRED_REPLICAS: want.to_string()}},
        "spec": {"replicas": to},
    }));
    *rs = api.patch(&rs.name_any(), &PatchParams::default(), &patch).await?;
    let dir = if to > from { "up" } else { "down" };
    let msg = format!("Scaled {dir} replica set {} from {from} to {to}", rs.name_any());
    tracing::info!(deployment = %meta::key(&d.metadata), replicaset = %rs.name_any(), from, to, "scaled");
    ctx.shared.recorder.normal(d, "ScalingReplicaSet", msg).await;
    Ok(())
}

/// Deletes the oldest empty old ReplicaSets beyond `revisionHistoryLimit`.
async fn cleanup(api: &Api<ReplicaSet>, limit: i32, olds: &[ReplicaSet]) -> Result<(), kube::Error> {
    let limit = usize::try_from(limit).unwrap_or(0);
    let mut empty: Vec<&ReplicaSet> = olds
        .iter()
        .filter(|r| {
            let s = r.status.clone().unwrap_or_default();
            replicas(r) == 0 && s.replicas == 0 && r.metadata.deletion_timestamp.is_none()
        })
        .collect();
    if empty.len() <= limit {
        return Ok(());
    }
    empty.sort_by_key(|r| revision(r));
    for rs in &empty[..empty.len() - limit] {
        match api.delete(&rs.name_any(), &DeleteParams::background()).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// The deployments a ReplicaSet change concerns: its controller, or (an orphan) every deployment
/// in its namespace whose selector matches it.
pub fn deployments_for_rs(deployments: &Store<Deployment>, rs: &ReplicaSet) -> Vec<ObjectRef<Deployment>> {
    let ns = rs.metadata.namespace.as_deref().unwrap_or_default();
    if let Some(owner) = controller_of(&rs.metadata) {
        if owner.kind == "Deployment" {
            return vec![ObjectRef::new(&owner.name).within(ns)];
        }
        return Vec::new();
    }
    deployments
        .state()
        .iter()
        .filter(|d| d.metadata.namespace.as_deref() == Some(ns))
        .filter(|d| {
            let sel = Selector::for_workload(&d.spec.selector);
            sel.is_some_and(|s| s.matches(rs.metadata.labels.as_ref()))
        })
        .map(|d| ObjectRef::from_obj(&**d))
        .collect()
}

/// Runs the controller until `stop` resolves.
pub async fn run(
    ctx: Arc<Ctx>,
    deployments: impl Stream<Item = Result<Deployment, watcher::Error>> + Send + 'static,
    sets: impl Stream<Item = Result<ReplicaSet, watcher::Error>> + Send + 'static,
    stop: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let store = ctx.deployments.clone();
    let controller = Controller::for_stream(deployments, ctx.deployments.clone())
        .watches_stream(sets, move |rs| deployments_for_rs(&store, &rs));
    crate::shared::drive(controller, reconcile, error_policy, ctx, stop).await;
}
