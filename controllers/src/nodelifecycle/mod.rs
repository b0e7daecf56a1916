//! Node lifecycle controller. Desired: a node silent for longer than the grace period has its
//! kubelet conditions Unknown; every node carries the taints its conditions call for; pods on a
//! node that is not Ready are not Ready either (Kubernetes' MarkPodsNotReady); pods on a
//! NoExecute-tainted node that do not tolerate it (any longer) are deleted. Observed: the Node, its
//! Lease in `kube-node-lease`, and the pods bound to it.

pub mod eviction;
pub mod health;
pub mod limiter;
pub mod pods;

use crate::meta::{self, pod_is_active};
use crate::shared::Shared;
use eviction::{decide, tainted_since, Eviction};
use futures::Stream;
use health::{assess, hold_back_eviction, Grace};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod, Taint};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::ResourceExt;
use limiter::{Take, TokenBucket};
use serde_json::json;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub const NAME: &str = "nodelifecycle";
pub const LEASE_NAMESPACE: &str = "kube-node-lease";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("failed to {action} for node {node}")]
    Api {
        action: &'static str,
        node: String,
        #[source]
        source: kube::Error,
    },
}

/// The controller's flags.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Settings {
    /// `--node-monitor-grace-period` and `--node-startup-grace-period`.
    pub grace: Grace,
    /// `--node-monitor-period`: how often every node is checked.
    pub period: Duration,
    /// `--node-eviction-rate`: nodes per second whose pods may start being evicted.
    pub eviction_rate: f64,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            grace: Grace { monitor: Duration::from_secs(40), startup: Duration::from_secs(60) },
            period: Duration::from_secs(5),
            eviction_rate: 0.1,
        }
    }
}

pub struct Ctx {
    pub shared: Shared,
    pub settings: Settings,
    pub nodes: Store<Node>,
    pub leases: Store<Lease>,
    pub pods: Store<Pod>,
    pub limiter: Mutex<TokenBucket>,
    /// Pods already deleted (uid → when), so a cache that has not caught up does not evict twice.
    evicted: Mutex<HashMap<String, Instant>>,
}

impl Ctx {
    pub fn new(shared: Shared, settings: Settings, nodes: Store<Node>, leases: Store<Lease>, pods: Store<Pod>) -> Self {
        let limiter = Mutex::new(TokenBucket::new(settings.eviction_rate, 1, Instant::now()));
        Self { shared, settings, nodes, leases, pods, limiter, evicted: Mutex::new(HashMap::new()) }
    }

    /// Whether the pod with `uid` was evicted recently; remembers it if `mark`.
    fn evicted(&self, uid: &str, mark: bool) -> bool {
        let Ok(mut seen) = self.evicted.lock() else { return false };
        let now = Instant::now();
        seen.retain(|_, at| now.duration_since(*at) < EVICTED_MEMORY);
        let known = seen.contains_key(uid);
        if mark {
            seen.insert(uid.to_string(), now);
        }
        known
    }
}

/// How long an eviction is remembered: far longer than any cache lag.
const EVICTED_MEMORY: Duration = Duration::from_secs(300);

#[tracing::instrument(skip_all, fields(controller = NAME, object = %node.name_any()))]
pub async fn reconcile(node: Arc<Node>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let key = node.name_any();
    ctx.shared.reconciled(NAME, &key, sync(&node, &ctx, &key)).await
}

pub fn error_policy(node: Arc<Node>, err: &Error, ctx: Arc<Ctx>) -> Action {
    ctx.shared.failed(NAME, &node.name_any(), err)
}

async fn sync(node: &Node, ctx: &Ctx, name: &str) -> Result<Action, Error> {
    if node.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let api: Api<Node> = Api::all(ctx.shared.client.clone());
    let lease = ctx.leases.get(&ObjectRef::new(name).within(LEASE_NAMESPACE));
    let now = jiff::Timestamp::now();
    let plan = assess(node, lease.as_deref(), now, ctx.settings.grace);
    let mut requeue = ctx.settings.period;
    if let Some(left) = plan.silent_in {
        requeue = requeue.min(left + Duration::from_millis(100));
    }

    let mut node = node.clone();
    if let Some(conditions) = plan.conditions {
        node.status.get_or_insert_with(Default::default).conditions = Some(conditions);
        node = api.replace_status(name, &PostParams::default(), &node).await.map_err(api_err("update status", name))?;
        tracing::info!(node = %name, "kubelet stopped posting node status; conditions set to Unknown");
        if plan.became_not_ready {
            let message = format!("Node {name} status is now: NodeNotReady");
            ctx.shared.recorder.normal(&node, "NodeNotReady", message).await;
        }
    }

    if let Some(mut taints) = plan.taints {
        let current = node.spec.as_ref().and_then(|s| s.taints.clone()).unwrap_or_default();
        if plan.starts_eviction {
            let take = ctx.limiter.lock().map(|mut l| l.try_take(Instant::now())).unwrap_or(Take::Never);
            match take {
                Take::Granted => tracing::info!(node = %name, "tainting NoExecute; evictions start"),
                Take::Wait(d) => {
                    tracing::info!(node = %name, wait = ?d, "eviction rate limit; NoExecute taint deferred");
                    taints = hold_back_eviction(&current, taints);
                    requeue = requeue.min(d.max(Duration::from_millis(100)));
                }
                Take::Never => taints = hold_back_eviction(&current, taints),
            }
        }
        if taints != current {
            node.spec.get_or_insert_with(Default::default).taints = Some(taints);
            node = api.replace(name, &PostParams::default(), &node).await.map_err(api_err("update taints", name))?;
            tracing::info!(node = %name, taints = %taint_list(&node), "updated taints");
        }
    }

    // A pod that could not be marked does not hold back the evictions (retried next sync).
    let marked = if pods::node_not_ready(&node) { mark_pods_not_ready(ctx, name).await } else { Ok(()) };

    if let Some(next) = evict(&node, ctx, name).await? {
        requeue = requeue.min(next);
    }
    marked?;
    Ok(Action::requeue(requeue))
}

/// Deletes the pods on `node` whose tolerations ran out; returns when the next one is due.
async fn evict(node: &Node, ctx: &Ctx, name: &str) -> Result<Option<Duration>, Error> {
    let taints: Vec<Taint> = node.spec.as_ref().and_then(|s| s.taints.clone()).unwrap_or_default();
    if !taints.iter().any(|t| t.effect == health::NO_EXECUTE) {
        return Ok(None);
    }
    let now = jiff::Timestamp::now();
    let mut next: Option<Duration> = None;
    let bound = ctx
        .pods
        .state()
        .into_iter()
        .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(name) && pod_is_active(p));
    for pod in bound {
        let tolerations = pod.spec.as_ref().and_then(|s| s.tolerations.clone()).unwrap_or_default();
        let created = pod.metadata.creation_timestamp.as_ref().map(|t| t.0);
        match decide(&tolerations, &taints, tainted_since(&taints, created, now), now) {
            Eviction::Never => {}
            Eviction::At(at) => {
                let left = Duration::try_from(at.duration_since(now)).unwrap_or_default();
                next = Some(next.map_or(left, |n| n.min(left)));
            }
            Eviction::Now => delete_pod(&pod, ctx).await.map_err(api_err("evict a pod", name))?,
        }
    }
    Ok(next)
}

/// Sets Ready=False on the node's pods that are still Ready, each with a `NodeNotReady` event, as
/// Kubernetes' MarkPodsNotReady. Every pod is tried; a pod gone (404) or changed meanwhile (409,
/// seen again on its next event) is skipped, and the first other failure is returned once all were
/// tried. Level-triggered: a failed write is retried on the next sync.
async fn mark_pods_not_ready(ctx: &Ctx, name: &str) -> Result<(), Error> {
    let mut first_error = None;
    let now = jiff::Timestamp::now();
    let on_node =
        ctx.pods.state().into_iter().filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(name));
    for pod in on_node {
        let Some(conditions) = pods::not_ready_conditions(&pod, now) else { continue };
        let mut updated = (*pod).clone();
        updated.status.get_or_insert_with(Default::default).conditions = Some(conditions);
        let api: Api<Pod> = Api::namespaced(ctx.shared.client.clone(), &pod.namespace().unwrap_or_default());
        match api.replace_status(&pod.name_any(), &PostParams::default(), &updated).await {
            Ok(_) => {
                tracing::info!(pod = %meta::key(&pod.metadata), node = %name, "updating ready status of pod to false");
                ctx.shared.recorder.warning(&updated, "NodeNotReady", "Node is not ready".to_string()).await;
            }
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
            Err(e) => {
                tracing::warn!(pod = %meta::key(&pod.metadata), node = %name, error = %e, "failed to mark a pod not ready");
                first_error.get_or_insert(api_err("mark a pod not ready", name)(e));
            }
        }
    }
    first_error.map_or(Ok(()), Err)
}

/// Marks the pod as disrupted (DisruptionTarget, as Kubernetes does) and deletes it.
async fn delete_pod(pod: &Pod, ctx: &Ctx) -> Result<(), kube::Error> {
    let uid = pod.uid().unwrap_or_default();
    if ctx.evicted(&uid, false) {
        return Ok(());
    }
    let key = meta::key(&pod.metadata);
    let api: Api<Pod> = Api::namespaced(ctx.shared.client.clone(), &pod.namespace().unwrap_or_default());
    ctx.shared.recorder.normal(pod, "TaintManagerEviction", format!("Marking for deletion Pod {key}")).await;
    let condition = json!({"status": {"conditions": [{
        "type": "DisruptionTarget", "status": "True", "reason": "DeletionByTaintManager",
        "message": "Taint manager: deleting due to NoExecute taint",
        "lastTransitionTime": jiff::Timestamp::now().to_string(),
    }]}});
    match api.patch_status(&pod.name_any(), &PatchParams::default(), &Patch::Strategic(condition)).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
        Err(e) => return Err(e),
    }
    let dp = DeleteParams {
        preconditions: Some(Preconditions { uid: pod.uid(), resource_version: None }),
        ..DeleteParams::default()
    };
    match api.delete(&pod.name_any(), &dp).await {
        Ok(_) => {
            ctx.evicted(&uid, true);
            tracing::info!(pod = %key, node = ?pod.spec.as_ref().and_then(|s| s.node_name.as_deref()), "evicted");
            Ok(())
        }
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(()),
        Err(e) => Err(e),
    }
}

fn api_err<'a>(action: &'static str, node: &'a str) -> impl FnOnce(kube::Error) -> Error + 'a {
    move |source| Error::Api { action, node: node.to_string(), source }
}

fn taint_list(node: &Node) -> String {
    let taints = node.spec.as_ref().and_then(|s| s.taints.as_ref());
    taints.into_iter().flatten().map(|t| format!("{}:{}", t.key, t.effect)).collect::<Vec<_>>().join(",")
}

/// Runs the controller until `stop` resolves: every node on its own period, and again whenever
/// its Lease or a pod bound to it changes.
pub async fn run(
    ctx: Arc<Ctx>,
    nodes: impl Stream<Item = Result<Node, watcher::Error>> + Send + 'static,
    leases: impl Stream<Item = Result<Lease, watcher::Error>> + Send + 'static,
    pods: impl Stream<Item = Result<Pod, watcher::Error>> + Send + 'static,
    stop: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let controller = Controller::for_stream(nodes, ctx.nodes.clone())
        .watches_stream(leases, |lease| {
            (lease.namespace().as_deref() == Some(LEASE_NAMESPACE)).then(|| ObjectRef::new(&lease.name_any()))
        })
        .watches_stream(pods, |pod| pod.spec.as_ref()?.node_name.as_deref().map(ObjectRef::new));
    crate::shared::drive(controller, reconcile, error_policy, ctx, stop).await;
}
