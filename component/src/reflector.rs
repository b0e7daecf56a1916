//! Follows one resource with a watcher and keeps each object only as its user needs it (the
//! proxy's `ServiceInfo`, DNS's Services), keyed by namespace and name: whole API objects for
//! 10,000 Services and their EndpointSlices would be most of a component's memory. Every event
//! notifies the user's `dirty`.

use futures::StreamExt;
use kube::api::Api;
use kube::runtime::{watcher, WatchStreamExt};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::{watch, Notify};

/// What a watcher can follow: a typed Kubernetes object a task may own.
pub trait Watched:
    kube::Resource<DynamicType = ()> + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + Sync + 'static
{
}

impl<K> Watched for K where
    K: kube::Resource<DynamicType = ()> + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + Sync + 'static
{
}

/// Keyed by "namespace/name".
type Items<T> = HashMap<Box<str>, Arc<T>>;

/// Pages of the initial list: each is held whole as API objects until reduced.
const PAGE_SIZE: u32 = 100;

pub struct Cache<T> {
    items: Mutex<Items<T>>,
    ready: watch::Sender<bool>,
}

impl<T: Send + Sync + 'static> Cache<T> {
    /// Starts following `api`; `reduce` turns an object into what is kept (`None`: nothing,
    /// e.g. a headless Service).
    pub fn follow<K, F>(api: Api<K>, reduce: F, dirty: Arc<Notify>, mut stop: watch::Receiver<bool>) -> Arc<Self>
    where
        K: Watched,
        F: Fn(&K) -> Option<T> + Send + 'static,
    {
        let cache = Arc::new(Self { items: Mutex::new(HashMap::new()), ready: watch::channel(false).0 });
        let this = cache.clone();
        let stream = watcher(api, watcher::Config::default().page_size(PAGE_SIZE)).default_backoff();
        tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            // Objects of a (re)list, swapped in whole once it is complete.
            let mut relist: Option<Items<T>> = None;
            loop {
                tokio::select! {
                    _ = stop.wait_for(|s| *s) => return,
                    ev = stream.next() => match ev {
                        None => return,
                        Some(Err(e)) => tracing::warn!(error = %e, kind = K::kind(&()).as_ref(), "watch failed; retrying"),
                        Some(Ok(ev)) => {
                            this.apply(ev, &reduce, &mut relist);
                            dirty.notify_one();
                        }
                    },
                }
            }
        });
        cache
    }

    fn apply<K: kube::Resource, F: Fn(&K) -> Option<T>>(
        &self,
        ev: watcher::Event<K>,
        reduce: &F,
        relist: &mut Option<Items<T>>,
    ) {
        let key = |obj: &K| -> Box<str> {
            let m = obj.meta();
            format!("{}/{}", m.namespace.as_deref().unwrap_or_default(), m.name.as_deref().unwrap_or_default()).into()
        };
        match ev {
            watcher::Event::Init => *relist = Some(HashMap::new()),
            watcher::Event::InitApply(obj) => {
                if let (Some(items), Some(v)) = (relist.as_mut(), reduce(&obj)) {
                    items.insert(key(&obj), Arc::new(v));
                }
            }
            watcher::Event::InitDone => {
                if let Some(mut items) = relist.take() {
                    items.shrink_to_fit();
                    *self.lock() = items;
                }
                self.ready.send_replace(true);
            }
            watcher::Event::Apply(obj) => match reduce(&obj) {
                Some(v) => {
                    self.lock().insert(key(&obj), Arc::new(v));
                }
                None => {
                    self.lock().remove(&key(&obj));
                }
            },
            watcher::Event::Delete(obj) => {
                self.lock().remove(&key(&obj));
            }
        }
    }

    fn lock(&self) -> MutexGuard<'_, Items<T>> {
        // The map stays consistent even if a holder panicked: every change is one call.
        self.items.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether the first complete list is in.
    pub fn is_ready(&self) -> bool {
        *self.ready.borrow()
    }

    /// Waits for the first complete list.
    pub async fn wait_until_ready(&self) {
        let _ = self.ready.subscribe().wait_for(|r| *r).await;
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Everything kept now.
    pub fn state(&self) -> Vec<Arc<T>> {
        self.lock().values().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Service;

    fn svc(name: &str) -> Service {
        serde_json::from_value(serde_json::json!({"metadata": {"namespace": "ns", "name": name}}))
            .expect("valid service")
    }

    fn names(c: &Cache<String>) -> Vec<String> {
        let mut v: Vec<String> = c.state().iter().map(|s| s.to_string()).collect();
        v.sort();
        v
    }

    #[test]
    fn a_relist_replaces_everything_once_complete_and_drops_what_was_not_listed() {
        let c = Cache { items: Mutex::new(HashMap::new()), ready: watch::channel(false).0 };
        let reduce = |s: &Service| s.metadata.name.clone().filter(|n| n != "skipped");
        let mut relist = None;
        c.apply(watcher::Event::Init, &reduce, &mut relist);
        c.apply(watcher::Event::InitApply(svc("a")), &reduce, &mut relist);
        c.apply(watcher::Event::InitApply(svc("skipped")), &reduce, &mut relist);
        assert!(c.is_empty() && !*c.ready.borrow(), "nothing until the list is complete");
        c.apply(watcher::Event::InitDone, &reduce, &mut relist);
        assert_eq!(names(&c), ["a"]);
        assert!(*c.ready.borrow());

        c.apply(watcher::Event::Apply(svc("b")), &reduce, &mut relist);
        c.apply(watcher::Event::Delete(svc("a")), &reduce, &mut relist);
        assert_eq!(names(&c), ["b"]);

        // The watch broke and "b" was deleted meanwhile: the relist forgets it.
        c.apply(watcher::Event::Init, &reduce, &mut relist);
        c.apply(watcher::Event::InitApply(svc("c")), &reduce, &mut relist);
        assert_eq!(names(&c), ["b"], "the old state serves until the relist is done");
        c.apply(watcher::Event::InitDone, &reduce, &mut relist);
        assert_eq!(names(&c), ["c"]);
    }
}
