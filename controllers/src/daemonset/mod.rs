//! DaemonSet controller. Desired: one pod on every node that should run it (node name, node
//! affinity, taints against the template's tolerations plus the daemon ones). Each pod names its
//! node through required node affinity on `metadata.name` and the scheduler places it, as
//! Kubernetes does. The controller records the template in ControllerRevisions (for `kubectl
//! rollout history/undo`), creates and deletes pods (guarded by expectations), rolls updates out
//! under maxUnavailable/maxSurge (or leaves them to OnDelete) and writes the counts to `status`
//! only when they change.

pub mod history;
pub mod plan;

use crate::expectations::{Expectations, Seen};
use crate::meta::{self, claim, controller_of, controller_ref, Claim, Selector};
use crate::replicaset::plan::{slow_start_batches, PodRef};
use crate::shared::{Shared, RESYNC};
use futures::Stream;
use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::ResourceExt;
use plan::{REVISION_HASH, TEMPLATE_GENERATION};
use serde_json::{json, Value};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub const NAME: &str = "daemonset";

/// Kubernetes' failed-pod back-off per node: 1 s doubling to 15 min.
const FAILED_BACKOFF: (Duration, Duration) = (Duration::from_secs(1), Duration::from_secs(900));

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("failed to {action} for daemonset {key}")]
    Api {
        action: &'static str,
        key: String,
        #[source]
        source: kube::Error,
    },
    #[error("{failed} of {attempted} pod creations failed for daemonset {key}")]
    Create { key: String, failed: usize, attempted: usize },
    #[error("hash collision for daemonset {0}: collisionCount raised")]
    Collision(String),
}

pub struct Ctx {
    pub shared: Shared,
    pub sets: Store<DaemonSet>,
    pub pods: Store<Pod>,
    pub nodes: Store<Node>,
    pub revisions: Store<ControllerRevision>,
    pub expectations: Expectations,
    /// When each `<ds uid>/<node>` last had a failed pod deleted, and its current delay.
    failed: Mutex<HashMap<String, (Instant, Duration)>>,
}

impl Ctx {
    pub fn new(
        shared: Shared,
        sets: Store<DaemonSet>,
        pods: Store<Pod>,
        nodes: Store<Node>,
        revisions: Store<ControllerRevision>,
    ) -> Self {
        Self {
            shared,
            sets,
            pods,
            nodes,
            revisions,
            expectations: Expectations::default(),
            failed: Mutex::new(HashMap::new()),
        }
    }

    /// How much longer a node's failed pods wait before the next deletion, if at all.
    fn failed_backoff(&self, key: &str, now: Instant) -> Option<Duration> {
        let map = self.failed.lock().ok()?;
        let (at, delay) = map.get(key)?;
        delay.checked_sub(now.duration_since(*at)).filter(|d| !d.is_zero())
    }

    /// Records a failed-pod deletion: the delay doubles, or starts over after a quiet spell.
    fn failed_next(&self, key: String, now: Instant) {
        let Ok(mut map) = self.failed.lock() else { return };
        let (base, max) = FAILED_BACKOFF;
        let delay = match map.get(&key) {
            Some((at, d)) if now.duration_since(*at) <= max * 2 => (*d * 2).min(max),
            _ => base,
        };
        map.insert(key, (now, delay));
    }
}

#[tracing::instrument(skip_all, fields(controller = NAME, object = %meta::key(&ds.metadata)))]
pub async fn reconcile(ds: Arc<DaemonSet>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let key = meta::key(&ds.metadata);
    ctx.shared.reconciled(NAME, &key, sync(&ds, &ctx, &key)).await
}

pub fn error_policy(ds: Arc<DaemonSet>, err: &Error, ctx: Arc<Ctx>) -> Action {
    ctx.shared.failed(NAME, &meta::key(&ds.metadata), err)
}

fn api_err<'a>(action: &'static str, key: &'a str) -> impl FnOnce(kube::Error) -> Error + 'a {
    move |source| Error::Api { action, key: key.into(), source }
}

async fn sync(ds: &DaemonSet, ctx: &Ctx, key: &str) -> Result<Action, Error> {
    if ds.metadata.deletion_timestamp.is_some() {
        // The garbage collector deletes the pods and revisions.
        return Ok(Action::await_change());
    }
    let ns = ds.namespace().unwrap_or_default();
    let uid = ds.uid().unwrap_or_default();
    let spec = &ds.spec;
    let Some(selector) = Selector::for_workload(&spec.selector) else {
        tracing::warn!(daemonset = %key, "invalid or empty selector; ignoring");
        return Ok(Action::await_change());
    };
    let pods_api: Api<Pod> = Api::namespaced(ctx.shared.client.clone(), &ns);
    let all: Vec<Arc<Pod>> =
        ctx.pods.state().into_iter().filter(|p| p.metadata.namespace.as_deref() == Some(&ns)).collect();
    let mut owned: Vec<&Pod> = Vec::new();
    for pod in &all {
        match claim(&uid, false, &pod.metadata, &selector) {
            Claim::Owned => owned.push(pod),
            Claim::Adopt => match meta::adopt(&pods_api, &pod.metadata, controller_ref(ds)).await {
                Ok(()) => owned.push(pod),
                Err(kube::Error::Api(s)) if matches!(s.code, 404 | 409 | 422) => {}
                Err(source) => return Err(Error::Api { action: "adopt a pod", key: key.into(), source }),
            },
            Claim::Release => {
                meta::release(&pods_api, &pod.metadata, &uid).await.map_err(api_err("release a pod", key))?
            }
            Claim::Ignore => {}
        }
    }

    let (hash, old) = construct_history(ds, ctx, key, &selector, &owned).await?;
    let nodes_arc = ctx.nodes.state();
    let nodes: Vec<&Node> = nodes_arc.iter().map(|n| &**n).collect();
    let by_node = plan::by_node(&owned);
    let now = jiff::Timestamp::now();

    let by_uid: HashMap<&str, &Pod> = all.iter().filter_map(|p| Some((p.metadata.uid.as_deref()?, &**p))).collect();
    let seen = |uid: &str| match by_uid.get(uid) {
        None => Seen::Absent,
        Some(p) if p.metadata.deletion_timestamp.is_some() => Seen::Deleting,
        Some(_) => Seen::Live,
    };
    let mut requeue = RESYNC;
    if ctx.expectations.satisfied(&uid, seen) {
        let instant = Instant::now();
        let mut wait: Option<Duration> = None;
        let backing_off = |node: &str| {
            let remaining = ctx.failed_backoff(&format!("{uid}/{node}"), instant);
            if let Some(r) = remaining {
                wait = Some(wait.map_or(r, |w| w.min(r)));
            }
            remaining.is_some()
        };
        let managed = plan::manage(ds, &nodes, &by_node, &hash, now, backing_off);
        if let Some(w) = wait {
            requeue = requeue.min(w);
        }
        if !managed.is_empty() {
            for (node, pod) in &managed.failed {
                let msg = format!("Found failed daemon pod {ns}/{} on node {node}, will try to kill it", pod.name);
                ctx.shared.recorder.warning(ds, "FailedDaemonPod", msg).await;
                ctx.failed_next(format!("{uid}/{node}"), instant);
            }
            let mut delete = managed.delete;
            delete.extend(managed.failed.into_iter().map(|(_, p)| p));
            sync_nodes(ds, ctx, &pods_api, &uid, &delete, &managed.create_on, &hash).await?;
        } else if is_rolling(ds) {
            let rollout = plan::rolling_update(ds, &nodes, &by_node, &hash, now);
            sync_nodes(ds, ctx, &pods_api, &uid, &rollout.delete, &rollout.create_on, &hash).await?;
        }
        cleanup_history(ds, ctx, key, &old, &owned).await?;
    } else {
        tracing::debug!(daemonset = %key, "waiting for the cache to show our last creates/deletes");
        requeue = requeue.min(Duration::from_secs(5));
    }

    let status = plan::status(ds, &nodes, &by_node, &hash, now);
    if ds.status.as_ref() != Some(&status) {
        write_status(ds, ctx, key, &status).await?;
    }
    let min_ready = spec.min_ready_seconds.unwrap_or(0);
    if min_ready > 0 && status.number_ready != status.number_available.unwrap_or(0) {
        requeue = requeue.min(Duration::from_secs(u64::try_from(min_ready).unwrap_or(1)));
    }
    Ok(Action::requeue(requeue))
}

fn is_rolling(ds: &DaemonSet) -> bool {
    let strategy = ds.spec.update_strategy.as_ref();
    strategy.and_then(|s| s.type_.as_deref()).unwrap_or("RollingUpdate") == "RollingUpdate"
}

/// Writes the status; counts that went to zero are removed (a merge patch with null), as Go
/// leaves them out.
async fn write_status(
    ds: &DaemonSet,
    ctx: &Ctx,
    key: &str,
    status: &k8s_openapi::api::apps::v1::DaemonSetStatus,
) -> Result<(), Error> {
    let mut body = serde_json::to_value(status).unwrap_or(Value::Null);
    if let Value::Object(map) = &mut body {
        for field in ["numberAvailable", "numberUnavailable", "updatedNumberScheduled"] {
            map.entry(field).or_insert(Value::Null);
        }
    }
    let sets: Api<DaemonSet> = Api::namespaced(ctx.shared.client.clone(), &ds.namespace().unwrap_or_default());
    match sets.patch_status(&ds.name_any(), &PatchParams::default(), &Patch::Merge(json!({"status": body}))).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(source) => Err(Error::Api { action: "update status", key: key.into(), source }),
    }
}

/// Deletes `delete` and creates a pod on each of `create_on` (syncNodes): creates in slow-start
/// batches, all guarded by expectations.
async fn sync_nodes(
    ds: &DaemonSet,
    ctx: &Ctx,
    api: &Api<Pod>,
    uid: &str,
    delete: &[PodRef],
    create_on: &[String],
    hash: &str,
) -> Result<(), Error> {
    let key = meta::key(&ds.metadata);
    if !create_on.is_empty() {
        let pp = PostParams::default();
        let mut created = 0;
        let mut nodes = create_on.iter();
        for batch in slow_start_batches(create_on.len()) {
            let pods: Vec<Pod> = nodes.by_ref().take(batch).map(|n| new_pod(ds, n, hash)).collect();
            let results = futures::future::join_all(pods.iter().map(|p| api.create(&pp, p))).await;
            let mut failed = None;
            for r in results {
                match r {
                    Ok(p) => {
                        created += 1;
                        ctx.expectations.expect_create(uid, p.uid().unwrap_or_default());
                        let msg = format!("Created pod: {}", p.name_any());
                        ctx.shared.recorder.normal(ds, "SuccessfulCreate", msg).await;
                    }
                    Err(e) => failed = Some(e),
                }
            }
            if let Some(e) = failed {
                ctx.shared.recorder.warning(ds, "FailedCreate", format!("Error creating: {e}")).await;
                let attempted = create_on.len();
                return Err(Error::Create { key, failed: attempted - created, attempted });
            }
        }
        tracing::info!(daemonset = %key, created, "created daemon pods");
    }
    if !delete.is_empty() {
        for p in delete {
            ctx.expectations.expect_delete(uid, p.uid.clone());
        }
        let dp = DeleteParams::default();
        let results = futures::future::join_all(delete.iter().map(|p| api.delete(&p.name, &dp))).await;
        let mut first_error = None;
        for (p, r) in delete.iter().zip(results) {
            match r {
                Ok(_) => ctx.shared.recorder.normal(ds, "SuccessfulDelete", format!("Deleted pod: {}", p.name)).await,
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
        tracing::info!(daemonset = %key, deleted = delete.len(), "deleted daemon pods");
    }
    Ok(())
}

/// A daemon pod for `node` (CreatePodTemplate + the node affinity), named `<set>-<random>`.
pub fn new_pod(ds: &DaemonSet, node: &str, hash: &str) -> Pod {
    let template = ds.spec.template.clone();
    let tmeta = template.metadata.unwrap_or_default();
    let mut labels = tmeta.labels.unwrap_or_default();
    if let Some(g) = plan::template_generation(ds) {
        labels.insert(TEMPLATE_GENERATION.into(), g.to_string());
    }
    if !hash.is_empty() {
        labels.insert(REVISION_HASH.into(), hash.into());
    }
    let mut spec = template.spec.unwrap_or_default();
    plan::add_daemon_tolerations(&mut spec);
    spec.affinity = Some(plan::pin_to_node(spec.affinity.take(), node));
    Pod {
        metadata: ObjectMeta {
            generate_name: Some(format!("{}-", ds.name_any())),
            namespace: ds.namespace(),
            labels: Some(labels),
            annotations: tmeta.annotations,
            finalizers: tmeta.finalizers,
            owner_references: Some(vec![controller_ref(ds)]),
            ..ObjectMeta::default()
        },
        spec: Some(spec),
        status: None,
    }
}

/// The revisions the set owns (adopting matching orphans, releasing strays), then the current one
/// made, renumbered or deduplicated as needed (constructHistory). Returns the current revision's
/// hash and the old revisions.
async fn construct_history(
    ds: &DaemonSet,
    ctx: &Ctx,
    key: &str,
    selector: &Selector,
    pods: &[&Pod],
) -> Result<(String, Vec<Arc<ControllerRevision>>), Error> {
    let ns = ds.namespace().unwrap_or_default();
    let uid = ds.uid().unwrap_or_default();
    let api: Api<ControllerRevision> = Api::namespaced(ctx.shared.client.clone(), &ns);
    let mut owned: Vec<Arc<ControllerRevision>> = Vec::new();
    for rev in ctx.revisions.state().into_iter().filter(|r| r.metadata.namespace.as_deref() == Some(&ns)) {
        match claim(&uid, false, &rev.metadata, selector) {
            Claim::Owned => owned.push(rev),
            Claim::Adopt => match meta::adopt(&api, &rev.metadata, controller_ref(ds)).await {
                Ok(()) => owned.push(rev),
                Err(kube::Error::Api(s)) if matches!(s.code, 404 | 409 | 422) => {}
                Err(source) => return Err(Error::Api { action: "adopt a revision", key: key.into(), source }),
            },
            Claim::Release => {
                meta::release(&api, &rev.metadata, &uid).await.map_err(api_err("release a revision", key))?
            }
            Claim::Ignore => {}
        }
    }
    let refs: Vec<&ControllerRevision> = owned.iter().map(|r| &**r).collect();
    let (current, old) = history::split(ds, &refs);
    let next = history::max_revision(&old) + 1;
    let old_names: HashSet<&str> = old.iter().filter_map(|r| r.metadata.name.as_deref()).collect();
    let old: Vec<Arc<ControllerRevision>> =
        owned.iter().filter(|r| r.metadata.name.as_deref().is_some_and(|n| old_names.contains(n))).cloned().collect();

    let cur = match history::keep(&current) {
        None => snapshot(ds, ctx, key, &api, next).await?,
        Some(keep) => {
            for dup in current.iter().filter(|r| r.metadata.name != keep.metadata.name) {
                dedup(ds, ctx, key, &api, dup, keep, pods).await?;
            }
            if keep.revision.unwrap_or(0) < next {
                let patch = Patch::Merge(json!({"revision": next}));
                api.patch(&keep.name_any(), &PatchParams::default(), &patch)
                    .await
                    .map_err(api_err("renumber the current revision", key))?
            } else {
                keep.clone()
            }
        }
    };
    let hash =
        cur.metadata.labels.as_ref().and_then(|l| l.get(REVISION_HASH)).cloned().unwrap_or_else(|| cur.name_any());
    Ok((hash, old))
}

/// Creates the current revision; a namesake with other data is a hash collision: the set's
/// collisionCount goes up and the next sync names the revision anew.
async fn snapshot(
    ds: &DaemonSet,
    ctx: &Ctx,
    key: &str,
    api: &Api<ControllerRevision>,
    revision: i64,
) -> Result<ControllerRevision, Error> {
    let rev = history::snapshot(ds, revision);
    match api.create(&PostParams::default(), &rev).await {
        Ok(r) => Ok(r),
        Err(kube::Error::Api(s)) if s.code == 409 => {
            let existing = api.get(&rev.name_any()).await.map_err(api_err("get a revision", key))?;
            if history::matches(ds, &existing) {
                return Ok(existing);
            }
            let count = ds.status.as_ref().and_then(|s| s.collision_count).unwrap_or(0) + 1;
            let sets: Api<DaemonSet> = Api::namespaced(ctx.shared.client.clone(), &ds.namespace().unwrap_or_default());
            let patch = Patch::Merge(json!({"status": {"collisionCount": count}}));
            sets.patch_status(&ds.name_any(), &PatchParams::default(), &patch)
                .await
                .map_err(api_err("raise the collision count", key))?;
            Err(Error::Collision(key.into()))
        }
        Err(source) => Err(Error::Api { action: "create a revision", key: key.into(), source }),
    }
}

/// Removes a duplicate of the current revision, first moving its pods to the kept one's hash.
async fn dedup(
    ds: &DaemonSet,
    ctx: &Ctx,
    key: &str,
    api: &Api<ControllerRevision>,
    dup: &ControllerRevision,
    keep: &ControllerRevision,
    pods: &[&Pod],
) -> Result<(), Error> {
    let hash_of = |r: &ControllerRevision| r.metadata.labels.as_ref().and_then(|l| l.get(REVISION_HASH)).cloned();
    let (Some(from), Some(to)) = (hash_of(dup), hash_of(keep)) else { return Ok(()) };
    let pods_api: Api<Pod> = Api::namespaced(ctx.shared.client.clone(), &ds.namespace().unwrap_or_default());
    for pod in pods.iter().filter(|p| p.labels().get(REVISION_HASH) == Some(&from)) {
        let patch = Patch::Merge(json!({"metadata": {"labels": {REVISION_HASH: to}}}));
        match pods_api.patch(&pod.name_any(), &PatchParams::default(), &patch).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(source) => return Err(Error::Api { action: "relabel a pod", key: key.into(), source }),
        }
    }
    match api.delete(&dup.name_any(), &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(source) => Err(Error::Api { action: "delete a duplicate revision", key: key.into(), source }),
    }
}

/// Deletes old revisions beyond revisionHistoryLimit that no pod is made from (cleanupHistory).
async fn cleanup_history(
    ds: &DaemonSet,
    ctx: &Ctx,
    key: &str,
    old: &[Arc<ControllerRevision>],
    pods: &[&Pod],
) -> Result<(), Error> {
    let live: HashSet<String> = pods.iter().filter_map(|p| p.labels().get(REVISION_HASH).cloned()).collect();
    let refs: Vec<&ControllerRevision> = old.iter().map(|r| &**r).collect();
    let limit = ds.spec.revision_history_limit;
    let api: Api<ControllerRevision> = Api::namespaced(ctx.shared.client.clone(), &ds.namespace().unwrap_or_default());
    for rev in history::to_delete(limit, &refs, &live) {
        match api.delete(&rev.name_any(), &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(source) => return Err(Error::Api { action: "delete an old revision", key: key.into(), source }),
        }
    }
    Ok(())
}

/// The sets a pod change concerns: its controller if that is a DaemonSet, else (an orphan) every
/// set in its namespace whose selector matches it.
pub fn sets_for_pod(sets: &Store<DaemonSet>, pod: &Pod) -> Vec<ObjectRef<DaemonSet>> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
    if let Some(owner) = controller_of(&pod.metadata) {
        return if owner.kind == "DaemonSet" { vec![ObjectRef::new(&owner.name).within(ns)] } else { Vec::new() };
    }
    sets.state()
        .iter()
        .filter(|ds| ds.metadata.namespace.as_deref() == Some(ns))
        .filter(|ds| {
            let sel = Selector::for_workload(&ds.spec.selector);
            sel.is_some_and(|s| s.matches(pod.metadata.labels.as_ref()))
        })
        .map(|ds| ObjectRef::from_obj(&**ds))
        .collect()
}

/// The set a revision belongs to, if a DaemonSet controls it.
fn set_for_revision(rev: &ControllerRevision) -> Option<ObjectRef<DaemonSet>> {
    let owner = controller_of(&rev.metadata).filter(|o| o.kind == "DaemonSet")?;
    Some(ObjectRef::new(&owner.name).within(rev.metadata.namespace.as_deref().unwrap_or_default()))
}

/// Runs the controller until `stop` resolves. Any node change looks at every set (a new node gets
/// its pods, a relabelled or tainted one gains or loses them).
pub async fn run(
    ctx: Arc<Ctx>,
    sets: impl Stream<Item = Result<DaemonSet, watcher::Error>> + Send + 'static,
    pods: impl Stream<Item = Result<Pod, watcher::Error>> + Send + 'static,
    nodes: impl Stream<Item = Result<Node, watcher::Error>> + Send + 'static,
    revisions: impl Stream<Item = Result<ControllerRevision, watcher::Error>> + Send + 'static,
    stop: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let (for_pods, for_nodes) = (ctx.sets.clone(), ctx.sets.clone());
    let controller = Controller::for_stream(sets, ctx.sets.clone())
        .watches_stream(pods, move |pod| sets_for_pod(&for_pods, &pod))
        .watches_stream(nodes, move |_| {
            for_nodes.state().iter().map(|ds| ObjectRef::from_obj(&**ds)).collect::<Vec<_>>()
        })
        .watches_stream(revisions, |rev| set_for_revision(&rev));
    crate::shared::drive(controller, reconcile, error_policy, ctx, stop).await;
}
