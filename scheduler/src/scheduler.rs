//! The scheduler's loops: reflectors feed pods and nodes into the cache and the queue; one loop
//! pops a pod, decides (pure, under the cache lock), assumes it, and binds it in the background.

use crate::binder::{self, Recorder, Report};
use crate::cache::{is_terminal, node_name, Cache};
use crate::framework::Framework;
use crate::metrics::Metrics;
use crate::nodeinfo::PodInfo;
use crate::plugins::volume_binding::{self, VolumeBinding};
use crate::queue::{QueuedPod, SchedulingQueue};
use crate::Config;
use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{watcher, WatchStreamExt};
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use tokio::sync::{watch, Semaphore};
use tokio::time::Instant;
use tracing::Instrument;

/// State shared by the watchers, the scheduling loop, the binding tasks and /metrics.
pub struct Shared {
    pub cache: Mutex<Cache>,
    pub queue: SchedulingQueue,
    pub metrics: Metrics,
}

impl Shared {
    pub fn new(profile: &str) -> Self {
        Self { cache: Mutex::new(Cache::default()), queue: SchedulingQueue::default(), metrics: Metrics::new(profile) }
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, Cache> {
        self.cache.lock().expect("cache lock poisoned")
    }
}

/// Applies one pod from the watch to the cache and the queue.
fn on_pod(shared: &Shared, scheduler_name: &str, pod: Pod) {
    let info = Arc::new(PodInfo::new(Arc::new(pod)));
    let uid = info.uid.clone();
    let pod = &info.pod;
    let ours =
        pod.spec.as_ref().and_then(|s| s.scheduler_name.as_deref()).unwrap_or("default-scheduler") == scheduler_name;
    if node_name(pod).is_some() || is_terminal(pod) {
        let freed = shared.cache().upsert_pod(info);
        shared.queue.with(|q| {
            q.done(&uid);
            if freed {
                q.move_all(Instant::now());
            }
        });
    } else if ours && pod.metadata.deletion_timestamp.is_none() {
        if !shared.cache().is_assumed(&uid) {
            shared.queue.with(|q| q.add(info, Instant::now()));
        }
    } else {
        shared.queue.with(|q| q.done(&uid));
    }
}

fn on_pod_deleted(shared: &Shared, pod: Pod) {
    let uid = PodInfo::new(Arc::new(pod)).uid;
    let freed = shared.cache().remove_pod(&uid);
    shared.queue.with(|q| {
        q.done(&uid);
        if freed {
            q.move_all(Instant::now());
        }
    });
}

fn uid_of(meta: &kube::api::ObjectMeta) -> String {
    meta.uid.clone().unwrap_or_else(|| {
        format!("{}/{}", meta.namespace.as_deref().unwrap_or(""), meta.name.as_deref().unwrap_or(""))
    })
}

/// Follows all pods; signals `synced` after the first complete list.
pub async fn watch_pods(
    stream: impl Stream<Item = Result<watcher::Event<Pod>, watcher::Error>>,
    shared: Arc<Shared>,
    scheduler_name: String,
    synced: watch::Sender<bool>,
) {
    let mut seen = HashSet::new();
    let mut stream = std::pin::pin!(stream);
    while let Some(ev) = stream.next().await {
        match ev {
            Ok(watcher::Event::Init) => seen.clear(),
            Ok(watcher::Event::InitApply(p)) => {
                seen.insert(uid_of(&p.metadata));
                on_pod(&shared, &scheduler_name, p);
            }
            Ok(watcher::Event::InitDone) => {
                shared.cache().retain_pods(&seen);
                shared.queue.with(|q| q.retain(&seen));
                let _ = synced.send(true);
            }
            Ok(watcher::Event::Apply(p)) => on_pod(&shared, &scheduler_name, p),
            Ok(watcher::Event::Delete(p)) => on_pod_deleted(&shared, p),
            Err(e) => tracing::warn!(error = %e, "pod watch failed; retrying"),
        }
    }
}

/// Follows all nodes; signals `synced` after the first complete list.
pub async fn watch_nodes(
    stream: impl Stream<Item = Result<watcher::Event<Node>, watcher::Error>>,
    shared: Arc<Shared>,
    synced: watch::Sender<bool>,
) {
    let mut seen = HashSet::new();
    let mut stream = std::pin::pin!(stream);
    let moved = |shared: &Shared, relevant: bool| {
        if relevant {
            shared.queue.with(|q| q.move_all(Instant::now()));
        }
    };
    while let Some(ev) = stream.next().await {
        match ev {
            Ok(watcher::Event::Init) => seen.clear(),
            Ok(watcher::Event::InitApply(n)) => {
                seen.insert(n.metadata.name.clone().unwrap_or_default());
                let relevant = shared.cache().upsert_node(Arc::new(n));
                moved(&shared, relevant);
            }
            Ok(watcher::Event::InitDone) => {
                shared.cache().retain_nodes(&seen);
                let _ = synced.send(true);
            }
            Ok(watcher::Event::Apply(n)) => {
                let relevant = shared.cache().upsert_node(Arc::new(n));
                moved(&shared, relevant);
            }
            Ok(watcher::Event::Delete(n)) => shared.cache().remove_node(n.metadata.name.as_deref().unwrap_or_default()),
            Err(e) => tracing::warn!(error = %e, "node watch failed; retrying"),
        }
    }
}

/// Starts the reflectors; returns the pod store and a receiver that turns true once both listed.
/// The watchers stop when `stop` turns true.
pub fn start_watchers(
    client: &kube::Client,
    shared: &Arc<Shared>,
    scheduler_name: &str,
    stop: &watch::Receiver<bool>,
) -> (Store<Pod>, watch::Receiver<bool>) {
    // managedFields are the apiserver's bookkeeping that no plugin reads: dropped before
    // anything is cached, as kube-scheduler's informers do (they were half the scheduler's
    // memory with 5,000 nodes). Nodes live in the scheduling cache only; pods also in the
    // reflector store the binder checks bindings against.
    let (pods, pod_writer) = reflector::store();
    let pod_stream = reflector::reflector(
        pod_writer,
        watcher(Api::<Pod>::all(client.clone()), watcher::Config::default())
            .default_backoff()
            .modify(|p| p.metadata.managed_fields = None),
    );
    let node_stream = watcher(Api::<Node>::all(client.clone()), watcher::Config::default())
        .default_backoff()
        .modify(|n| n.metadata.managed_fields = None);
    let (pods_synced, mut pods_rx) = watch::channel(false);
    let (nodes_synced, mut nodes_rx) = watch::channel(false);
    let until_stopped = |fut| {
        let mut stop = stop.clone();
        async move {
            tokio::select! {
                _ = stop.wait_for(|s| *s) => {}
                _ = fut => {}
            }
        }
    };
    tokio::spawn(until_stopped(
        Box::pin(watch_pods(pod_stream, shared.clone(), scheduler_name.to_string(), pods_synced))
            as std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>,
    ));
    tokio::spawn(until_stopped(Box::pin(watch_nodes(node_stream, shared.clone(), nodes_synced))));
    let (all_tx, all_rx) = watch::channel(false);
    tokio::spawn(async move {
        if pods_rx.wait_for(|s| *s).await.is_ok() && nodes_rx.wait_for(|s| *s).await.is_ok() {
            let _ = all_tx.send(true);
        }
    });
    (pods, all_rx)
}

/// Reflectors for the claims, volumes and storage classes the VolumeBinding filter reads; a change
/// to a claim or volume lets parked pods try again. The stores are ready once listed.
pub fn start_volume_watchers(
    client: &kube::Client,
    shared: &Arc<Shared>,
    stop: &watch::Receiver<bool>,
) -> volume_binding::Stores {
    fn follow<K>(api: Api<K>, shared: Option<Arc<Shared>>, stop: watch::Receiver<bool>) -> Store<K>
    where
        K: kaji_component::reflector::Watched,
    {
        let (store, writer) = reflector::store();
        let stream = reflector::reflector(
            writer,
            watcher(api, watcher::Config::default()).default_backoff().modify(|o| o.meta_mut().managed_fields = None),
        );
        let mut stop = stop;
        tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            loop {
                tokio::select! {
                    _ = stop.wait_for(|s| *s) => break,
                    ev = stream.next() => match ev {
                        Some(Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_))) => {
                            if let Some(shared) = &shared {
                                shared.queue.with(|q| q.move_all(Instant::now()));
                            }
                        }
                        Some(_) => {}
                        None => break,
                    },
                }
            }
        });
        store
    }
    volume_binding::Stores {
        claims: follow(Api::<PersistentVolumeClaim>::all(client.clone()), Some(shared.clone()), stop.clone()),
        volumes: follow(Api::<PersistentVolume>::all(client.clone()), Some(shared.clone()), stop.clone()),
        // A class that appears (the local-path one is made when the controller manager starts)
        // wakes the pods parked on it, as Kubernetes requeues on StorageClass add/update.
        classes: follow(Api::<StorageClass>::all(client.clone()), Some(shared.clone()), stop.clone()),
    }
}

/// The scheduling loop: runs until `stop` turns true, then waits for bindings in flight.
pub async fn schedule_loop(
    client: kube::Client,
    shared: Arc<Shared>,
    framework: Framework,
    recorder: Recorder,
    volumes: VolumeBinding,
    config: &Config,
    mut stop: watch::Receiver<bool>,
) {
    let volumes = Arc::new(volumes);
    let binds = Arc::new(Semaphore::new(config.bind_concurrency.max(1)));
    let mut next_start = 0usize;
    let mut rng = fastrand::Rng::new();
    loop {
        let qp = tokio::select! {
            _ = stop.wait_for(|s| *s) => break,
            qp = shared.queue.pop() => qp,
        };
        let Ok(permit) = binds.clone().acquire_owned().await else { break };
        let start = Instant::now();
        let span = tracing::debug_span!("schedule", pod = %qp.info.key());
        let decided = span.in_scope(|| decide(&shared, &framework, &qp, &mut next_start, &mut rng, &recorder));
        if let Some(node) = decided {
            let (client, shared, recorder) = (client.clone(), shared.clone(), recorder.clone());
            let volumes = volumes.clone();
            tokio::spawn(
                async move {
                    bind_pod(&client, &shared, &recorder, &volumes, qp, &node, start).await;
                    drop(permit);
                }
                .instrument(span),
            );
        }
    }
    let all = u32::try_from(config.bind_concurrency.max(1)).unwrap_or(u32::MAX);
    let _ = binds.acquire_many(all).await;
}

/// One scheduling decision: a node name (the pod is then assumed there), or `None` after
/// recording why no node fits.
fn decide(
    shared: &Shared,
    framework: &Framework,
    qp: &QueuedPod,
    next_start: &mut usize,
    rng: &mut fastrand::Rng,
    recorder: &Recorder,
) -> Option<String> {
    let info = &qp.info;
    let result = {
        let mut cache = shared.cache();
        let result = framework
            .schedule(info, &cache.snapshot(), next_start, rng)
            .map(|i| cache.snapshot().nodes[i].name.clone());
        if let Ok(node) = &result {
            cache.assume(info.clone(), node);
        }
        result
    };
    match result {
        Ok(node) => {
            tracing::debug!(node = %node, "chose a node");
            Some(node)
        }
        Err(fit) => {
            let message = fit.to_string();
            tracing::info!(pod = %info.key(), reason = %message, "unschedulable");
            shared.metrics.attempt("unschedulable");
            shared.queue.with(|q| q.unschedulable(&info.uid, Instant::now()));
            recorder.report(Report::Failed { pod: info.clone(), message });
            None
        }
    }
}

async fn bind_pod(
    client: &kube::Client,
    shared: &Shared,
    recorder: &Recorder,
    volumes: &VolumeBinding,
    qp: QueuedPod,
    node: &str,
    start: Instant,
) {
    let info = qp.info;
    let bound = match select_node(client, volumes, &info, node).await {
        Ok(()) => binder::bind(client, &info, node).await,
        Err(e) => Err(e),
    };
    match bound {
        Ok(()) => {
            shared.metrics.attempt("scheduled");
            shared.metrics.e2e_duration.observe(start.elapsed().as_secs_f64());
            shared.queue.with(|q| q.done(&info.uid));
            tracing::debug!(node = %node, "bound");
            recorder.report(Report::Scheduled { pod: info, node: node.to_string() });
        }
        Err(e) => {
            shared.metrics.attempt("error");
            shared.cache().forget(&info.uid);
            let gone = matches!(&e, kube::Error::Api(s) if s.code == 404 || s.code == 409);
            if gone {
                // Deleted, or bound by someone else: the watch brings the truth.
                tracing::info!(pod = %info.key(), node = %node, error = %e, "binding rejected");
                shared.queue.with(|q| q.done(&info.uid));
            } else {
                tracing::warn!(pod = %info.key(), node = %node, error = %e, "binding failed; retrying after back-off");
                shared.queue.with(|q| q.backoff(&info.uid, Instant::now()));
                recorder.report(Report::Failed { pod: info, message: format!("Binding rejected: {e}") });
            }
        }
    }
}

/// PreBind: names the chosen node on the pod's unbound WaitForFirstConsumer claims, for their
/// provisioner to make the volume there.
async fn select_node(
    client: &kube::Client,
    volumes: &VolumeBinding,
    info: &PodInfo,
    node: &str,
) -> Result<(), kube::Error> {
    let api: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &info.namespace);
    for claim in volumes.to_select(info, node) {
        let patch = serde_json::json!({"metadata": {"annotations": {volume_binding::SELECTED_NODE: node}}});
        api.patch(&claim, &PatchParams::default(), &Patch::Merge(patch)).await?;
        tracing::debug!(claim = %claim, node = %node, "selected the node for a claim");
    }
    Ok(())
}
