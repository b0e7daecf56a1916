//! Shared caches: one watch per kind fills a reflector store, then hands each changed object to
//! the controllers that subscribed — so a trigger always arrives after the store holds the change.

use futures::{Stream, StreamExt};
use kube::api::Api;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher::{self, watcher};
use kube::runtime::WatchStreamExt;
use kube::Resource;
use serde::de::DeserializeOwned;
use std::fmt::Debug;
use tokio::sync::{mpsc, watch};

type Sender<K> = mpsc::UnboundedSender<K>;
/// Decides, from the cached object and its new state, whether an update is sent.
pub type UpdateFilter<K> = Box<dyn Fn(&K, &K) -> bool + Send + Sync>;

/// A watch on one kind, its store, and the subscribers it fans changes out to.
pub struct Informer<K: Resource<DynamicType = ()> + Clone + 'static> {
    api: Api<K>,
    config: watcher::Config,
    store: Store<K>,
    writer: reflector::store::Writer<K>,
    changed: Vec<Sender<K>>,
    deleted: Vec<Sender<K>>,
    filtered: Vec<(Sender<K>, UpdateFilter<K>)>,
}

impl<K> Informer<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    pub fn new(api: Api<K>) -> Self {
        Self::with_config(api, watcher::Config::default())
    }

    /// An informer over a narrower watch (a field or label selector).
    pub fn with_config(api: Api<K>, config: watcher::Config) -> Self {
        let (store, writer) = reflector::store();
        Self { api, config, store, writer, changed: Vec::new(), deleted: Vec::new(), filtered: Vec::new() }
    }

    pub fn store(&self) -> Store<K> {
        self.store.clone()
    }

    /// Every object added, changed or deleted (and all objects at each (re)list), as
    /// `kube::runtime::Controller` trigger streams expect them.
    pub fn subscribe(&mut self) -> impl Stream<Item = Result<K, watcher::Error>> + Send + 'static {
        let (tx, rx) = mpsc::unbounded_channel();
        self.changed.push(tx);
        receiver_stream(rx).map(Ok)
    }

    /// Only objects that were deleted.
    pub fn subscribe_deleted(&mut self) -> impl Stream<Item = K> + Send + 'static {
        let (tx, rx) = mpsc::unbounded_channel();
        self.deleted.push(tx);
        receiver_stream(rx)
    }

    /// Objects deleted, and updates that `filter(cached, new)` accepts — never additions (a
    /// client-go handler with only UpdateFunc and DeleteFunc).
    pub fn subscribe_filtered(
        &mut self,
        filter: UpdateFilter<K>,
    ) -> impl Stream<Item = Result<K, watcher::Error>> + Send + 'static {
        let (tx, rx) = mpsc::unbounded_channel();
        self.filtered.push((tx, filter));
        receiver_stream(rx).map(Ok)
    }

    /// Runs the watch until `stop`; watch errors are retried with back-off.
    pub fn spawn(self, mut stop: watch::Receiver<bool>) {
        let Self { api, config, store, mut writer, changed, deleted, filtered } = self;
        let kind = K::kind(&()).to_string();
        tokio::spawn(async move {
            let mut events = watcher(api, config).default_backoff().boxed();
            loop {
                let event = tokio::select! {
                    _ = stop.wait_for(|s| *s) => return,
                    e = events.next() => e,
                };
                let event = match event {
                    None => return,
                    // managedFields are the apiserver's bookkeeping, never read by a controller:
                    // dropped before the cache, as kube-controller-manager's informers do (they
                    // were a third of the manager's memory with 1,000 pods).
                    Some(Ok(event)) => event.modify(|o| o.meta_mut().managed_fields = None),
                    Some(Err(e)) => {
                        tracing::warn!(kind = %kind, error = %e, "watch failed; retrying");
                        continue;
                    }
                };
                let cached = match &event {
                    watcher::Event::Apply(obj) | watcher::Event::InitApply(obj) if !filtered.is_empty() => {
                        store.get(&ObjectRef::from_obj(obj))
                    }
                    _ => None,
                };
                writer.apply_watcher_event(&event);
                match &event {
                    watcher::Event::Apply(obj) | watcher::Event::InitApply(obj) => {
                        send(&changed, obj);
                        if let Some(old) = cached {
                            for (tx, filter) in &filtered {
                                if filter(&old, obj) {
                                    let _ = tx.send(obj.clone());
                                }
                            }
                        }
                    }
                    watcher::Event::Delete(obj) => {
                        send(&changed, obj);
                        send(&deleted, obj);
                        for (tx, _) in &filtered {
                            let _ = tx.send(obj.clone());
                        }
                    }
                    watcher::Event::Init | watcher::Event::InitDone => {}
                }
            }
        });
    }
}

fn send<K: Clone>(subscribers: &[Sender<K>], obj: &K) {
    for s in subscribers {
        let _ = s.send(obj.clone());
    }
}

/// An unbounded receiver as a stream.
pub fn receiver_stream<K: Send + 'static>(rx: mpsc::UnboundedReceiver<K>) -> impl Stream<Item = K> + Send + 'static {
    futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|k| (k, rx)) })
}
