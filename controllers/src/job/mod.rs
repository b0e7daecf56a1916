//! Job controller. Desired: pods of the template run until `completions` succeed (or any succeeds,
//! for a work queue), at most `parallelism` at once, within `backoffLimit` failures and
//! `activeDeadlineSeconds`. Observed: the Job's pods; finished ones are counted through the
//! `batch.kubernetes.io/job-tracking` finalizer (recorded as uncounted, finalizer removed, then
//! counted), and the conditions follow Kubernetes 1.31+: SuccessCriteriaMet or FailureTarget
//! first, Complete or Failed once no pod is left running.

pub mod backoff;
pub mod indexes;
pub mod plan;

use crate::expectations::{Expectations, Seen};
use crate::meta::{self, claim, controller_of, controller_ref, Claim, Selector};
use crate::replicaset::plan::{slow_start_batches, PodRef};
use crate::shared::{Shared, RESYNC};
use futures::{Stream, StreamExt};
use k8s_openapi::api::batch::v1::{Job, JobStatus};
use k8s_openapi::api::core::v1::{EnvVar, EnvVarSource, ObjectFieldSelector, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::controller::Action;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::ResourceExt;
use plan::{Input, Plan, TRACKING_FINALIZER};
use serde_json::json;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub const NAME: &str = "job";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("failed to {action} for job {key}")]
    Api {
        action: &'static str,
        key: String,
        #[source]
        source: kube::Error,
    },
    #[error("{failed} of {attempted} pod creations failed for job {key}")]
    Create { key: String, failed: usize, attempted: usize },
}

pub struct Ctx {
    pub shared: Shared,
    pub jobs: Store<Job>,
    pub pods: Store<Pod>,
    pub expectations: Expectations,
    pub settings: backoff::Settings,
    /// Pods whose tracking finalizer was removed, until the cache shows it (by pod uid).
    removed: Mutex<HashMap<String, Instant>>,
    /// The failure back-off of each Job (by uid), rebuilt from nothing after a restart.
    backoffs: Mutex<HashMap<String, backoff::Record>>,
}

impl Ctx {
    pub fn new(shared: Shared, jobs: Store<Job>, pods: Store<Pod>, settings: backoff::Settings) -> Self {
        Self {
            shared,
            jobs,
            pods,
            expectations: Expectations::default(),
            settings,
            removed: Mutex::new(HashMap::new()),
            backoffs: Mutex::new(HashMap::new()),
        }
    }

    /// The pod uids still shown with a finalizer this controller removed (entries the cache has
    /// caught up with, or older than the expectations timeout, are dropped).
    fn removed_set(&self, pods: &[&Pod]) -> HashSet<String> {
        let Ok(mut map) = self.removed.lock() else { return HashSet::new() };
        let tracked: HashSet<&str> = pods
            .iter()
            .filter(|p| p.metadata.finalizers.iter().flatten().any(|f| f == TRACKING_FINALIZER))
            .filter_map(|p| p.metadata.uid.as_deref())
            .collect();
        let own: HashSet<&str> = pods.iter().filter_map(|p| p.metadata.uid.as_deref()).collect();
        map.retain(|uid, at| {
            at.elapsed() < crate::expectations::TIMEOUT
                && (tracked.contains(uid.as_str()) || !own.contains(uid.as_str()))
        });
        map.keys().filter(|u| tracked.contains(u.as_str())).cloned().collect()
    }
}

#[tracing::instrument(skip_all, fields(controller = NAME, object = %meta::key(&job.metadata)))]
pub async fn reconcile(job: Arc<Job>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let key = meta::key(&job.metadata);
    ctx.shared.reconciled(NAME, &key, sync(&job, &ctx, &key)).await
}

pub fn error_policy(job: Arc<Job>, err: &Error, ctx: Arc<Ctx>) -> Action {
    ctx.shared.failed(NAME, &meta::key(&job.metadata), err)
}

async fn sync(job: &Job, ctx: &Ctx, key: &str) -> Result<Action, Error> {
    let ns = job.namespace().unwrap_or_default();
    let uid = job.uid().unwrap_or_default();
    let Some(spec) = job.spec.as_ref() else { return Ok(Action::await_change()) };
    let err = |action| move |source| Error::Api { action, key: key.to_string(), source };
    let Some(selector) = spec.selector.as_ref().and_then(Selector::for_workload) else {
        tracing::warn!(job = %key, "invalid or empty selector; ignoring");
        return Ok(Action::await_change());
    };
    let pods_api: Api<Pod> = Api::namespaced(ctx.shared.client.clone(), &ns);
    let deleting = job.metadata.deletion_timestamp.is_some();
    let all: Vec<Arc<Pod>> =
        ctx.pods.state().into_iter().filter(|p| p.metadata.namespace.as_deref() == Some(&ns)).collect();
    let mut owned: Vec<&Pod> = Vec::new();
    for pod in &all {
        match claim(&uid, deleting, &pod.metadata, &selector) {
            Claim::Owned => owned.push(pod),
            Claim::Adopt if meta::pod_is_active(pod) => {
                match meta::adopt(&pods_api, &pod.metadata, controller_ref(job)).await {
                    Ok(()) => owned.push(pod),
                    Err(kube::Error::Api(s)) if matches!(s.code, 404 | 409 | 422) => {}
                    Err(source) => return Err(err("adopt a pod")(source)),
                }
            }
            Claim::Release => meta::release(&pods_api, &pod.metadata, &uid).await.map_err(err("release a pod"))?,
            Claim::Adopt | Claim::Ignore => {}
        }
    }
    let by_uid: HashMap<&str, &Pod> = all.iter().filter_map(|p| Some((p.metadata.uid.as_deref()?, &**p))).collect();
    let seen = |uid: &str| match by_uid.get(uid) {
        None => Seen::Absent,
        Some(p) if p.metadata.deletion_timestamp.is_some() => Seen::Deleting,
        Some(_) => Seen::Live,
    };
    let may_manage = ctx.expectations.satisfied(&uid, seen);
    let removed = ctx.removed_set(&owned);
    let record = ctx.backoffs.lock().ok().and_then(|b| b.get(&uid).copied()).unwrap_or_default();
    let plan = plan::plan(&Input {
        job,
        pods: &owned,
        finalizer_removed: &removed,
        backoff: record,
        settings: ctx.settings,
        may_manage,
        now: jiff::Timestamp::now(),
    });
    if let Ok(mut b) = ctx.backoffs.lock() {
        b.insert(uid.clone(), plan.backoff);
    }
    let jobs: Api<Job> = Api::namespaced(ctx.shared.client.clone(), &ns);
    let mut current = job.clone();
    if let Some(status) = &plan.record_uncounted {
        current = write_status(&jobs, &current, status.clone()).await.map_err(err("record finished pods"))?;
    }
    remove_finalizers(ctx, &pods_api, &plan.remove_finalizers).await.map_err(err("remove pod finalizers"))?;
    manage(job, ctx, &pods_api, &uid, &plan).await?;
    if current.status.as_ref() != Some(&plan.status) {
        write_status(&jobs, &current, plan.status.clone()).await.map_err(err("update status"))?;
        for e in &plan.events {
            if e.warning {
                ctx.shared.recorder.warning(job, e.reason, e.message.clone()).await;
            } else {
                ctx.shared.recorder.normal(job, e.reason, e.message.clone()).await;
            }
        }
    }
    if plan::is_finished(job) || deleting {
        return Ok(Action::requeue(RESYNC));
    }
    let mut requeue = plan.requeue.unwrap_or(RESYNC);
    if !may_manage {
        requeue = requeue.min(Duration::from_secs(5));
    }
    Ok(Action::requeue(requeue))
}

/// Replaces the Job's status at the resourceVersion this sync read: a stale cache gets a conflict
/// instead of counting a pod twice.
async fn write_status(api: &Api<Job>, job: &Job, status: JobStatus) -> Result<Job, kube::Error> {
    let mut next = job.clone();
    next.status = Some(status);
    next.metadata.managed_fields = None;
    api.replace_status(&job.name_any(), &PostParams::default(), &next).await
}

async fn remove_finalizers(ctx: &Ctx, api: &Api<Pod>, pods: &[PodRef]) -> Result<(), kube::Error> {
    let results = futures::future::join_all(pods.iter().map(|p| {
        let patch = json!({"metadata": {"uid": p.uid, "$deleteFromPrimitiveList/finalizers": [TRACKING_FINALIZER]}});
        async move { (p, api.patch(&p.name, &PatchParams::default(), &Patch::Strategic(patch)).await) }
    }))
    .await;
    let mut first_error = None;
    for (p, r) in results {
        match r {
            Ok(_) => removed(ctx, &p.uid),
            Err(kube::Error::Api(s)) if matches!(s.code, 404 | 409) => removed(ctx, &p.uid),
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    first_error.map_or(Ok(()), Err)
}

fn removed(ctx: &Ctx, uid: &str) {
    if let Ok(mut m) = ctx.removed.lock() {
        m.insert(uid.to_string(), Instant::now());
    }
}

/// Deletes, then creates in slow-start batches, as the plan says.
async fn manage(job: &Job, ctx: &Ctx, api: &Api<Pod>, uid: &str, plan: &Plan) -> Result<(), Error> {
    let key = meta::key(&job.metadata);
    if !plan.delete.is_empty() {
        for p in &plan.delete {
            ctx.expectations.expect_delete(uid, p.uid.clone());
        }
        let results = futures::future::join_all(plan.delete.iter().map(|p| {
            let dp = DeleteParams {
                preconditions: Some(Preconditions { uid: Some(p.uid.clone()), resource_version: None }),
                ..DeleteParams::default()
            };
            async move { api.delete(&p.name, &dp).await }
        }))
        .await;
        let mut first_error = None;
        for (p, r) in plan.delete.iter().zip(results) {
            match r {
                Ok(_) => ctx.shared.recorder.normal(job, "SuccessfulDelete", format!("Deleted pod: {}", p.name)).await,
                Err(kube::Error::Api(s)) if matches!(s.code, 404 | 409) => ctx.expectations.lower_delete(uid, &p.uid),
                Err(source) => {
                    ctx.expectations.lower_delete(uid, &p.uid);
                    first_error.get_or_insert(source);
                }
            }
        }
        if let Some(source) = first_error {
            return Err(Error::Api { action: "delete pods", key, source });
        }
    }
    if !plan.create.is_empty() {
        let pp = PostParams::default();
        let mut created = 0;
        let mut pending = plan.create.iter();
        for batch in slow_start_batches(plan.create.len()) {
            let pods: Vec<Pod> = pending.by_ref().take(batch).map(|i| new_pod(job, *i)).collect();
            let results = futures::future::join_all(pods.iter().map(|p| api.create(&pp, p))).await;
            let mut failed = None;
            for r in results {
                match r {
                    Ok(p) => {
                        created += 1;
                        ctx.expectations.expect_create(uid, p.uid().unwrap_or_default());
                        ctx.shared
                            .recorder
                            .normal(job, "SuccessfulCreate", format!("Created pod: {}", p.name_any()))
                            .await;
                    }
                    Err(e) => failed = Some(e),
                }
            }
            if let Some(e) = failed {
                ctx.shared.recorder.warning(job, "FailedCreate", format!("Error creating: {e}")).await;
                return Err(Error::Create { key, failed: plan.create.len() - created, attempted: plan.create.len() });
            }
        }
        tracing::info!(job = %key, created, "created pods");
    }
    Ok(())
}

/// A pod from the Job's template: named `<job>-` (`<job>-<index>-` when Indexed) plus a random
/// suffix, owned by the Job, with the tracking finalizer and, when Indexed, its completion index
/// (annotation, label, `JOB_COMPLETION_INDEX`, hostname `<job>-<index>`).
pub fn new_pod(job: &Job, index: Option<i32>) -> Pod {
    let template = job.spec.as_ref().map(|s| s.template.clone()).unwrap_or_default();
    let tmeta = template.metadata.unwrap_or_default();
    let mut spec = template.spec.unwrap_or_default();
    let name = job.name_any();
    let mut labels = tmeta.labels.unwrap_or_default();
    let mut annotations = tmeta.annotations.unwrap_or_default();
    let mut finalizers = tmeta.finalizers.unwrap_or_default();
    finalizers.push(TRACKING_FINALIZER.to_string());
    let generate_name = match index {
        Some(i) => {
            labels.insert(indexes::INDEX_KEY.to_string(), i.to_string());
            annotations.insert(indexes::INDEX_KEY.to_string(), i.to_string());
            if spec.hostname.as_deref().is_none_or(str::is_empty) {
                spec.hostname = Some(format!("{name}-{i}"));
            }
            let env = EnvVar {
                name: "JOB_COMPLETION_INDEX".into(),
                value_from: Some(EnvVarSource {
                    field_ref: Some(ObjectFieldSelector {
                        field_path: format!("metadata.annotations['{}']", indexes::INDEX_KEY),
                        api_version: None,
                    }),
                    ..EnvVarSource::default()
                }),
                value: None,
            };
            for c in spec.containers.iter_mut().chain(spec.init_containers.iter_mut().flatten()) {
                let vars = c.env.get_or_insert_with(Vec::new);
                if !vars.iter().any(|v| v.name == env.name) {
                    vars.push(env.clone());
                }
            }
            format!("{name}-{i}-")
        }
        None => format!("{name}-"),
    };
    Pod {
        metadata: ObjectMeta {
            generate_name: Some(generate_name),
            namespace: job.namespace(),
            labels: Some(labels),
            annotations: (!annotations.is_empty()).then_some(annotations),
            finalizers: Some(finalizers),
            owner_references: Some(vec![controller_ref(job)]),
            ..ObjectMeta::default()
        },
        spec: Some(spec),
        status: None,
    }
}

/// The Jobs a pod change concerns: its controller if that is a Job, else (an orphan) every Job
/// in its namespace whose selector matches it.
pub fn jobs_for_pod(jobs: &Store<Job>, pod: &Pod) -> Vec<ObjectRef<Job>> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
    if let Some(owner) = controller_of(&pod.metadata) {
        return if owner.kind == "Job" { vec![ObjectRef::new(&owner.name).within(ns)] } else { Vec::new() };
    }
    jobs.state()
        .iter()
        .filter(|j| j.metadata.namespace.as_deref() == Some(ns))
        .filter(|j| {
            let sel = j.spec.as_ref().and_then(|s| s.selector.as_ref()).and_then(Selector::for_workload);
            sel.is_some_and(|s| s.matches(pod.metadata.labels.as_ref()))
        })
        .map(|j| ObjectRef::from_obj(&**j))
        .collect()
}

/// Pods still holding the tracking finalizer of a Job that is gone lose it, so they can go (the
/// Job controller's orphan cleanup).
async fn release_orphans(ctx: Arc<Ctx>, pods: impl Stream<Item = Pod> + Send) {
    let mut pods = std::pin::pin!(pods);
    while let Some(pod) = pods.next().await {
        let tracked = pod.metadata.finalizers.iter().flatten().any(|f| f == TRACKING_FINALIZER);
        let Some(owner) = controller_of(&pod.metadata).filter(|o| o.kind == "Job") else { continue };
        if !tracked {
            continue;
        }
        let ns = pod.metadata.namespace.clone().unwrap_or_default();
        let alive = ctx
            .jobs
            .get(&ObjectRef::new(&owner.name).within(&ns))
            .is_some_and(|j| j.uid().as_deref() == Some(&owner.uid));
        if alive {
            continue;
        }
        let api: Api<Pod> = Api::namespaced(ctx.shared.client.clone(), &ns);
        let refs = [PodRef { name: pod.name_any(), uid: pod.uid().unwrap_or_default() }];
        if let Err(e) = remove_finalizers(&ctx, &api, &refs).await {
            tracing::warn!(pod = %meta::key(&pod.metadata), error = %e, "cannot release an orphaned job pod");
        }
    }
}

/// Runs the controller (and the orphan cleanup) until `stop` resolves.
pub async fn run(
    ctx: Arc<Ctx>,
    jobs: impl Stream<Item = Result<Job, watcher::Error>> + Send + 'static,
    pods: impl Stream<Item = Result<Pod, watcher::Error>> + Send + 'static,
    orphans: impl Stream<Item = Pod> + Send + 'static,
    stop: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let store = ctx.jobs.clone();
    let cleanup = tokio::spawn(release_orphans(ctx.clone(), orphans));
    crate::shared::run_owner_of_pods(ctx, store, jobs, pods, jobs_for_pod, reconcile, error_policy, stop).await;
    cleanup.abort();
}
