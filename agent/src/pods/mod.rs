//! The pods bound to this node: a watch (`spec.nodeName=<node>`) feeding one worker per pod UID
//! (the latest desired state wins), adoption of the containers a previous agent left running,
//! and cleanup of what belongs to pods deleted while no agent was watching.

pub mod backoff;
pub mod status;
pub mod worker;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::runtime::watcher;
use kube::runtime::WatchStreamExt;
use tokio::sync::watch;

use crate::metrics::Metrics;
use crate::runtime::{Meta, Runtime};
use crate::Config;

/// Every pod this node holds anything of: containers in the runtime or a pod directory.
pub fn pod_uids_on_disk(config: &Config, runtime: &Runtime) -> std::collections::BTreeSet<String> {
    let mut uids: std::collections::BTreeSet<String> = runtime.list().into_iter().map(|m| m.pod_uid).collect();
    for e in std::fs::read_dir(config.pods_dir()).into_iter().flatten().flatten() {
        uids.insert(e.file_name().to_string_lossy().into_owned());
    }
    uids
}

/// An Event to record about a pod: (pod, warning?, reason, message).
pub type Event = (Arc<Pod>, bool, &'static str, String);

/// Records events one after another, as they were queued.
async fn write_events(client: kube::Client, mut rx: tokio::sync::mpsc::UnboundedReceiver<Event>) {
    let recorder = kaji_component::events::Recorder::new(client, "kubelet");
    while let Some((pod, warning, reason, message)) = rx.recv().await {
        if warning {
            recorder.warning(pod.as_ref(), reason, message).await;
        } else {
            recorder.normal(pod.as_ref(), reason, message).await;
        }
    }
}

/// What every worker shares.
pub struct Shared {
    pub client: kube::Client,
    pub config: Arc<Config>,
    pub images: kaji_image::Store,
    pub runtime: Runtime,
    pub metrics: Arc<Metrics>,
    /// The pod network, when the node has one.
    pub network: Option<Arc<crate::network::Network>>,
    /// Measured once: what `resourceFieldRef` reports for a container without limits.
    pub allocatable: crate::node::Capacity,
    /// Events go through one writer so they are recorded in the order they happened.
    pub events: tokio::sync::mpsc::UnboundedSender<Event>,
    /// The pods' projected ServiceAccount tokens.
    pub tokens: crate::tokens::TokenManager,
    /// The user namespace ranges of `hostUsers: false` pods.
    pub userns: Mutex<crate::userns::Allocator>,
    workers: Mutex<HashMap<String, watch::Sender<Option<Arc<Pod>>>>>,
    /// The latest pods as the workers last saw them (served on /pods).
    pods: Mutex<HashMap<String, Arc<Pod>>>,
}

#[derive(Clone)]
pub struct Manager {
    pub shared: Arc<Shared>,
}

fn uid_of(pod: &Pod) -> String {
    pod.metadata.uid.clone().unwrap_or_default()
}

impl Manager {
    pub fn new(
        client: kube::Client,
        config: Arc<Config>,
        images: kaji_image::Store,
        runtime: Runtime,
        metrics: Arc<Metrics>,
        network: Option<Arc<crate::network::Network>>,
    ) -> Manager {
        let (events, rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(write_events(client.clone(), rx));
        let allocatable = crate::node::Capacity::measure(&config).minus(&config.reserved);
        // A restarted agent keeps the ranges its pods have (their dirs say which).
        let userns = crate::userns::load(&config.pods_dir(), config.max_pods);
        Manager {
            shared: Arc::new(Shared {
                client,
                config,
                images,
                runtime,
                metrics,
                network,
                allocatable,
                events,
                tokens: Default::default(),
                userns: Mutex::new(userns),
                workers: Mutex::new(HashMap::new()),
                pods: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// The pods the agent is running, as last seen.
    pub fn pods(&self) -> Vec<Arc<Pod>> {
        let mut pods: Vec<Arc<Pod>> =
            self.shared.pods.lock().map(|p| p.values().cloned().collect()).unwrap_or_default();
        pods.sort_by_key(|p| (p.metadata.namespace.clone(), p.metadata.name.clone()));
        pods
    }

    /// One pod of this node by namespace and name.
    pub fn pod(&self, namespace: &str, name: &str) -> Option<Arc<Pod>> {
        let pods = self.shared.pods.lock().ok()?;
        pods.values()
            .find(|p| p.metadata.namespace.as_deref() == Some(namespace) && p.metadata.name.as_deref() == Some(name))
            .cloned()
    }

    /// Watches this node's pods and drives their workers until `stop`.
    pub async fn run(self, mut stop: watch::Receiver<bool>) {
        let mut adopt: HashMap<String, Vec<Meta>> = HashMap::new();
        self.shared.runtime.sweep_incomplete();
        for m in self.shared.runtime.list() {
            adopt.entry(m.pod_uid.clone()).or_default().push(m);
        }
        tracing::info!(containers = adopt.values().map(Vec::len).sum::<usize>(), "found containers from before");
        let api: Api<Pod> = Api::all(self.shared.client.clone());
        let cfg = watcher::Config::default().fields(&format!("spec.nodeName={}", self.shared.config.node_name));
        let mut events = watcher(api, cfg).default_backoff().boxed();
        let mut seen: HashSet<String> = HashSet::new();
        let mut first_sync = true;
        tokio::spawn(self.clone().image_gc(stop.clone()));
        loop {
            let ev = tokio::select! {
                _ = stop.wait_for(|s| *s) => break,
                ev = events.next() => ev,
            };
            match ev {
                None => break,
                Some(Err(e)) => tracing::warn!(error = %e, "pod watch failed; retrying"),
                Some(Ok(watcher::Event::Init)) => seen.clear(),
                Some(Ok(watcher::Event::InitApply(pod))) => {
                    seen.insert(uid_of(&pod));
                    self.dispatch(pod, &mut adopt, &stop);
                }
                Some(Ok(watcher::Event::InitDone)) => {
                    let gone: Vec<String> = self
                        .shared
                        .workers
                        .lock()
                        .map(|w| w.keys().filter(|u| !seen.contains(*u)).cloned().collect())
                        .unwrap_or_default();
                    for uid in gone {
                        self.forget(&uid);
                    }
                    if first_sync {
                        first_sync = false;
                        self.clean_orphans(&seen, std::mem::take(&mut adopt)).await;
                        if let Some(net) = &self.shared.network {
                            let live: std::collections::BTreeSet<String> = seen.iter().cloned().collect();
                            if let Err(e) = net.release_all_but(&live).await {
                                tracing::warn!(error = %e, "cannot release the addresses of pods that are gone");
                            }
                        }
                    }
                }
                Some(Ok(watcher::Event::Apply(pod))) => self.dispatch(pod, &mut adopt, &stop),
                Some(Ok(watcher::Event::Delete(pod))) => self.forget(&uid_of(&pod)),
            }
        }
        // Workers see `stop` themselves; containers keep running for the next agent.
        let _ = stop.wait_for(|s| *s).await;
    }

    /// Every five minutes: if the disk holding the images is fuller than the high threshold,
    /// remove least recently used images no container uses until it is below the low one.
    async fn image_gc(self, mut stop: watch::Receiver<bool>) {
        loop {
            tokio::select! {
                _ = stop.wait_for(|s| *s) => return,
                _ = tokio::time::sleep(std::time::Duration::from_secs(300)) => {}
            }
            let in_use: HashSet<String> = self.shared.runtime.list().into_iter().map(|m| m.image_id).collect();
            let (high, low) = (self.shared.config.image_gc_high_percent, self.shared.config.image_gc_low_percent);
            let images = self.shared.images.clone();
            match tokio::task::spawn_blocking(move || images.gc(&in_use, high, low)).await {
                Ok(Ok(removed)) if !removed.is_empty() => tracing::info!(?removed, "image garbage collection"),
                Ok(Ok(_)) => {}
                Ok(Err(e)) => tracing::warn!(error = %e, "image garbage collection failed"),
                Err(e) => tracing::warn!(error = %e, "image garbage collection task failed"),
            }
        }
    }

    fn dispatch(&self, pod: Pod, adopt: &mut HashMap<String, Vec<Meta>>, stop: &watch::Receiver<bool>) {
        let uid = uid_of(&pod);
        if uid.is_empty() {
            return;
        }
        let pod = Arc::new(pod);
        if let Ok(mut pods) = self.shared.pods.lock() {
            pods.insert(uid.clone(), pod.clone());
        }
        let Ok(mut workers) = self.shared.workers.lock() else { return };
        if let Some(tx) = workers.get(&uid) {
            let _ = tx.send(Some(pod));
            return;
        }
        let (tx, rx) = watch::channel(Some(pod));
        workers.insert(uid.clone(), tx);
        let containers = adopt.remove(&uid).unwrap_or_default();
        let w = worker::Worker::new(self.shared.clone(), uid.clone(), rx, stop.clone(), containers);
        let shared = self.shared.clone();
        tokio::spawn(async move {
            if w.run().await {
                if let Ok(mut workers) = shared.workers.lock() {
                    workers.remove(&uid);
                }
                if let Ok(mut pods) = shared.pods.lock() {
                    pods.remove(&uid);
                }
            }
        });
    }

    /// The pod is gone from the API: its worker stops its containers and cleans up.
    fn forget(&self, uid: &str) {
        if let Ok(workers) = self.shared.workers.lock() {
            if let Some(tx) = workers.get(uid) {
                let _ = tx.send(None);
            }
        }
    }

    /// Removes containers, sandboxes, cgroups and directories of pods that no longer exist.
    async fn clean_orphans(&self, live: &HashSet<String>, adopt: HashMap<String, Vec<Meta>>) {
        for uid in pod_uids_on_disk(&self.shared.config, &self.shared.runtime).into_iter().filter(|u| !live.contains(u))
        {
            tracing::info!(uid = %uid, "cleaning up after a pod deleted while the agent was away");
            let containers = adopt.get(&uid).cloned().unwrap_or_default();
            if let Err(e) = worker::teardown(&self.shared, &uid, &containers).await {
                tracing::warn!(uid = %uid, error = %e, "cannot clean up orphaned pod");
            }
        }
    }
}
