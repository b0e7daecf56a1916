//! Pod garbage collector. Desired: no pod bound to a node that no longer exists, no unscheduled pod
//! left terminating, at most `--terminated-pod-gc-threshold` terminated pods. Observed: the pod and
//! node caches, swept every period as Kubernetes does; a node missing from the cache is confirmed
//! gone by a live read after a quarantine. Pods are marked Failed and deleted with grace 0: no
//! kubelet will ever confirm them.

pub mod plan;

use crate::meta;
use crate::shared::{backoff_delay, Shared};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::reflector::Store;
use kube::ResourceExt;
use plan::{Quarantine, Reason};
use serde_json::json;
use std::collections::HashSet;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub const NAME: &str = "podgc";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("failed to {action} {object}")]
    Api {
        action: &'static str,
        object: String,
        #[source]
        source: kube::Error,
    },
    #[error("{failed} of {attempted} pod deletions failed")]
    Deletions { failed: usize, attempted: usize },
}

/// The controller's flag and timing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Settings {
    /// `--terminated-pod-gc-threshold`: terminated pods kept before the oldest go (0 keeps all).
    pub terminated_threshold: usize,
    /// How often the caches are swept.
    pub period: Duration,
    /// How long a node must be missing from the cache before a live read may confirm it gone.
    pub quarantine: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Self { terminated_threshold: 12500, period: Duration::from_secs(20), quarantine: Duration::from_secs(40) }
    }
}

pub struct Ctx {
    pub shared: Shared,
    pub settings: Settings,
    pub pods: Store<Pod>,
    pub nodes: Store<Node>,
    quarantine: Mutex<Quarantine>,
    failures: AtomicU32,
}

impl Ctx {
    pub fn new(shared: Shared, settings: Settings, pods: Store<Pod>, nodes: Store<Node>) -> Self {
        Self { shared, settings, pods, nodes, quarantine: Mutex::default(), failures: AtomicU32::new(0) }
    }
}

/// One sweep over every pod.
#[tracing::instrument(skip_all, fields(controller = NAME))]
pub async fn reconcile(ctx: Arc<Ctx>) -> Result<(), Error> {
    let started = Instant::now();
    let result = sync(&ctx).await;
    ctx.shared.finished(NAME, NAME, started, &result);
    if result.is_ok() {
        ctx.failures.store(0, Ordering::Relaxed);
    }
    result
}

/// When to sweep again after a failed sweep: backing off, but never later than the period.
pub fn error_policy(err: &Error, ctx: Arc<Ctx>) -> Duration {
    tracing::warn!(controller = NAME, error = %err, "sweep failed; backing off");
    let n = ctx.failures.fetch_add(1, Ordering::Relaxed).saturating_add(1);
    backoff_delay(n).min(ctx.settings.period)
}

async fn sync(ctx: &Ctx) -> Result<(), Error> {
    let pods = ctx.pods.state();
    let nodes: HashSet<String> = ctx.nodes.state().iter().map(|n| n.name_any()).collect();
    let mut doomed: Vec<(Arc<Pod>, Reason)> = Vec::new();
    if ctx.settings.terminated_threshold > 0 {
        let excess = plan::terminated(&pods, ctx.settings.terminated_threshold);
        if !excess.is_empty() {
            tracing::info!(
                pods = excess.len(),
                threshold = ctx.settings.terminated_threshold,
                "collecting terminated pods"
            );
        }
        doomed.extend(excess.into_iter().map(|p| (p, Reason::Terminated)));
    }
    let missing = plan::missing_nodes(&pods, &nodes);
    let due = ctx.quarantine.lock().map(|mut q| q.due(&missing, Instant::now(), ctx.settings.quarantine));
    let mut gone = HashSet::new();
    let api: Api<Node> = Api::all(ctx.shared.client.clone());
    for node in due.unwrap_or_default() {
        match api.get_opt(&node).await {
            Ok(None) => {
                gone.insert(node);
            }
            Ok(Some(_)) => {}
            Err(source) => return Err(Error::Api { action: "read", object: format!("node {node}"), source }),
        }
    }
    doomed.extend(plan::orphaned(&pods, &gone).into_iter().map(|p| (p, Reason::Orphaned)));
    doomed.extend(plan::unscheduled_terminating(&pods).into_iter().map(|p| (p, Reason::Unscheduled)));
    let mut seen = HashSet::new();
    doomed.retain(|(p, _)| seen.insert(p.metadata.uid.clone()));

    let attempted = doomed.len();
    let results = futures::future::join_all(doomed.iter().map(|(p, r)| force_delete(ctx, p, *r))).await;
    let mut failed = 0;
    for ((pod, reason), result) in doomed.iter().zip(results) {
        let ns = pod.namespace().unwrap_or_default();
        ctx.shared.metrics.pod_gc(&ns, reason.label(), result.is_ok());
        if let Err(e) = result {
            tracing::warn!(pod = %meta::key(&pod.metadata), reason = reason.label(), error = %e, "cannot force-delete pod");
            failed += 1;
        }
    }
    if failed > 0 {
        return Err(Error::Deletions { failed, attempted });
    }
    Ok(())
}

/// Marks a pod that has not finished Failed (orphans with a DisruptionTarget condition, as
/// Kubernetes does), then deletes it with grace 0. A pod already gone or replaced is fine.
async fn force_delete(ctx: &Ctx, pod: &Pod, reason: Reason) -> Result<(), kube::Error> {
    let key = meta::key(&pod.metadata);
    let api: Api<Pod> = Api::namespaced(ctx.shared.client.clone(), &pod.namespace().unwrap_or_default());
    if !plan::is_terminated(pod) {
        let mut status = json!({"phase": "Failed"});
        if reason == Reason::Orphaned {
            status["conditions"] = json!([{
                "type": "DisruptionTarget", "status": "True", "reason": "DeletionByPodGC",
                "message": "PodGC: node no longer exists",
                "lastTransitionTime": jiff::Timestamp::now().to_string(),
            }]);
        }
        let patch = Patch::Strategic(json!({"status": status}));
        match api.patch_status(&pod.name_any(), &PatchParams::default(), &patch).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
            Err(e) => return Err(e),
        }
    }
    let dp = DeleteParams {
        grace_period_seconds: Some(0),
        preconditions: Some(Preconditions { uid: pod.uid(), resource_version: None }),
        ..DeleteParams::default()
    };
    match api.delete(&pod.name_any(), &dp).await {
        Ok(_) => {
            let node = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()).unwrap_or_default();
            tracing::info!(pod = %key, node, reason = reason.label(), "force-deleted pod");
            Ok(())
        }
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(()),
        Err(e) => Err(e),
    }
}

/// Sweeps every period (sooner after a failure) until `stop` resolves.
pub async fn run(ctx: Arc<Ctx>, stop: impl std::future::Future<Output = ()> + Send + Sync + 'static) {
    let sweep = || async {
        match reconcile(ctx.clone()).await {
            Ok(()) => ctx.settings.period,
            Err(e) => error_policy(&e, ctx.clone()),
        }
    };
    crate::shared::every(sweep, stop).await;
}
