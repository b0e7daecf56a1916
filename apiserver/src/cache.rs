//! The watch cache: one store watch for everything, an in-memory copy of every object per
//! resource, a bounded event history, and fan-out to any number of client watches.
//!
//! The history keeps what Kubernetes' watch cache keeps: the events of the last 75 s
//! (`eventFreshDuration`, the 60-s bookmark period plus a margin, so a watch that ends resumes
//! from its last event or bookmark), at least the last 100 whatever their age, and never more than
//! `--watch-cache-size`. Kept by count alone, each resource's history grew until it held that many
//! events — under steady churn tens of MiB of objects long deleted (see docs/benchmarks.md).

use crate::storage::{self, EventKind, KeyValue, Store};
use bytes::Bytes;
use kaji_api::resources::{ResourceInfo, RESOURCES};
use kaji_api::selector::{field_value, supported_fields, FieldSelector, LabelSelector};
use serde_json::{Map, Value};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};
use tokio::sync::{broadcast, watch};

/// An object as the cache holds it: its JSON (with resourceVersion set) and what selectors need.
#[derive(Debug)]
pub struct CachedObject {
    pub key: String,
    pub namespace: Option<String>,
    pub name: String,
    pub rv: u64,
    pub labels: Option<Map<String, Value>>,
    /// Field-label values for the kind's supported field selectors.
    pub fields: Vec<(&'static str, Option<String>)>,
    /// The full object, ready to send.
    pub json: Bytes,
}

impl CachedObject {
    pub fn value(&self) -> Value {
        serde_json::from_slice(&self.json).unwrap_or(Value::Null)
    }

    pub fn matches(&self, ns: Option<&str>, labels: &LabelSelector, fields: &FieldSelector) -> bool {
        if let Some(ns) = ns {
            if self.namespace.as_deref() != Some(ns) {
                return false;
            }
        }
        labels.matches(self.labels.as_ref())
            && fields.matches(|f| match f {
                "metadata.name" => Some(self.name.clone()),
                "metadata.namespace" => self.namespace.clone(),
                other => self.fields.iter().find(|(n, _)| *n == other).and_then(|(_, v)| v.clone()),
            })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchEventType {
    Added,
    Modified,
    Deleted,
}

impl WatchEventType {
    pub fn as_str(self) -> &'static str {
        match self {
            WatchEventType::Added => "ADDED",
            WatchEventType::Modified => "MODIFIED",
            WatchEventType::Deleted => "DELETED",
        }
    }
}

#[derive(Debug)]
pub struct WatchEvent {
    pub kind: WatchEventType,
    pub rev: u64,
    pub object: Arc<CachedObject>,
    pub prev: Option<Arc<CachedObject>>,
}

#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    #[error("too old resource version: {requested} ({oldest})")]
    Gone { requested: u64, oldest: u64 },
    #[error("Too large resource version: {requested}, current resource version: {current}")]
    TooLarge { requested: u64, current: u64 },
    #[error(transparent)]
    Store(#[from] storage::Error),
}

struct State {
    objects: BTreeMap<String, Arc<CachedObject>>,
    /// Events with the time the cache applied them.
    history: VecDeque<(Instant, Arc<WatchEvent>)>,
    /// Every event with a revision above this one is in `history`.
    history_start: u64,
    /// The revision of the last change (or load) of this resource: what derived views compare.
    last_rev: u64,
}

/// How long an event stays in the history (Kubernetes' `eventFreshDuration`).
pub const HISTORY_WINDOW: Duration = Duration::from_secs(75);
/// Events kept per resource however old (Kubernetes' lower bound of the history's capacity).
pub const HISTORY_FLOOR: usize = 100;

/// One resource's cached objects and watchers.
pub struct ResourceCache {
    pub info: &'static ResourceInfo,
    state: RwLock<State>,
    tx: broadcast::Sender<Arc<WatchEvent>>,
    history_limit: usize,
}

/// What a new watch starts with: events to send first, then the live receiver.
pub struct Subscription {
    pub initial: Vec<Arc<WatchEvent>>,
    pub live: broadcast::Receiver<Arc<WatchEvent>>,
    pub rev: u64,
}

pub struct ListResult {
    pub items: Vec<Arc<CachedObject>>,
    pub rev: u64,
    /// Key of the first object not returned, when `limit` cut the list.
    pub next_key: Option<String>,
    pub remaining: usize,
}

fn inject_rv(kv: &KeyValue) -> Result<(Value, Bytes), storage::Error> {
    let mut v: Value = serde_json::from_slice(&kv.value)
        .map_err(|e| storage::Error::Backend(format!("stored object {} is not JSON: {e}", kv.key)))?;
    if let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.insert("resourceVersion".into(), Value::String(kv.mod_revision.to_string()));
    }
    let json = Bytes::from(serde_json::to_vec(&v).map_err(|e| storage::Error::Backend(e.to_string()))?);
    Ok((v, json))
}

impl ResourceCache {
    fn new(info: &'static ResourceInfo, history_limit: usize) -> Self {
        let (tx, _) = broadcast::channel(8192);
        Self {
            info,
            state: RwLock::new(State {
                objects: BTreeMap::new(),
                history: VecDeque::new(),
                history_start: 0,
                last_rev: 0,
            }),
            tx,
            history_limit,
        }
    }

    pub fn make_object(&self, kv: &KeyValue) -> Result<CachedObject, storage::Error> {
        let (v, json) = inject_rv(kv)?;
        let meta = v.get("metadata");
        let s = |k: &str| meta.and_then(|m| m.get(k)).and_then(Value::as_str).map(str::to_string);
        let fields = supported_fields(self.info.kind)
            .into_iter()
            .filter(|f| !matches!(*f, "metadata.name" | "metadata.namespace"))
            .map(|f| (f, field_value(self.info.kind, &v, f)))
            .collect();
        Ok(CachedObject {
            key: kv.key.clone(),
            namespace: s("namespace"),
            name: s("name").unwrap_or_default(),
            rv: kv.mod_revision,
            labels: meta.and_then(|m| m.get("labels")).and_then(Value::as_object).cloned(),
            fields,
            json,
        })
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, State> {
        self.state.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, State> {
        self.state.write().unwrap_or_else(|p| p.into_inner())
    }

    fn reset(&self, objects: BTreeMap<String, Arc<CachedObject>>, rev: u64) {
        let mut st = self.write();
        st.objects = objects;
        st.history.clear();
        st.history_start = rev;
        st.last_rev = rev;
    }

    fn apply(&self, ev: &storage::Event) {
        self.apply_at(ev, Instant::now());
    }

    fn apply_at(&self, ev: &storage::Event, now: Instant) {
        let kv = KeyValue {
            key: ev.key.clone(),
            value: ev.value.clone(),
            create_revision: 0,
            mod_revision: ev.revision,
            stale: false,
        };
        let obj = match self.make_object(&kv) {
            Ok(o) => Arc::new(o),
            // A delete is a delete whatever its last value was (e.g. one no encryption key opens):
            // the cached object goes, and watchers get it in its last state they could read.
            Err(err) if ev.kind == EventKind::Delete => match self.read().objects.get(&ev.key).cloned() {
                Some(last) => match self.make_object(&KeyValue { value: last.json.to_vec().into(), ..kv }) {
                    Ok(o) => Arc::new(o),
                    Err(_) => last,
                },
                None => {
                    tracing::warn!(key = %ev.key, error = %err, "deleted object was never readable");
                    self.write().last_rev = ev.revision;
                    return;
                }
            },
            Err(err) => {
                tracing::error!(key = %ev.key, error = %err, "skipping undecodable stored object");
                return;
            }
        };
        let mut st = self.write();
        st.last_rev = ev.revision;
        let prev = match ev.kind {
            EventKind::Put => st.objects.insert(ev.key.clone(), obj.clone()),
            EventKind::Delete => st.objects.remove(&ev.key),
            EventKind::Progress => return,
        };
        let kind = match (ev.kind, &prev) {
            (EventKind::Delete | EventKind::Progress, _) => WatchEventType::Deleted,
            (EventKind::Put, None) => WatchEventType::Added,
            (EventKind::Put, Some(_)) => WatchEventType::Modified,
        };
        let we = Arc::new(WatchEvent { kind, rev: ev.revision, object: obj, prev });
        st.history.push_back((now, we.clone()));
        let floor = HISTORY_FLOOR.min(self.history_limit);
        while let Some(&(at, ref old)) = st.history.front() {
            let len = st.history.len();
            if len <= floor || len <= self.history_limit && now.saturating_duration_since(at) <= HISTORY_WINDOW {
                break;
            }
            st.history_start = old.rev;
            st.history.pop_front();
        }
        // Sent under the lock so a new subscriber sees each event exactly once.
        let _ = self.tx.send(we);
    }

    pub fn get(&self, key: &str) -> Option<Arc<CachedObject>> {
        self.read().objects.get(key).cloned()
    }

    /// Objects under `prefix` matching the selectors, starting at `start` (inclusive), at most `limit`.
    pub fn list(
        &self,
        ns: Option<&str>,
        labels: &LabelSelector,
        fields: &FieldSelector,
        start: Option<&str>,
        limit: Option<usize>,
        rev: u64,
    ) -> ListResult {
        let st = self.read();
        let prefix = self.info.namespace_prefix(ns);
        let from = match start {
            Some(s) if s > prefix.as_str() => s.to_string(),
            _ => prefix.clone(),
        };
        // metadata.name=<x> narrows to one key.
        let only = fields.exact("metadata.name").and_then(|n| match (self.info.namespaced, ns) {
            (false, _) => Some(self.info.key(None, n)),
            (true, Some(ns)) => Some(self.info.key(Some(ns), n)),
            (true, None) => None,
        });
        let mut items = Vec::new();
        let mut next_key = None;
        let mut remaining = 0;
        let iter: Box<dyn Iterator<Item = (&String, &Arc<CachedObject>)>> = match &only {
            Some(k) => Box::new(st.objects.get_key_value(k).into_iter().filter(|(k, _)| k.as_str() >= from.as_str())),
            _ => Box::new(st.objects.range(from..).take_while(|(k, _)| k.starts_with(&prefix))),
        };
        for (k, o) in iter {
            if !o.matches(ns, labels, fields) {
                continue;
            }
            if limit.is_some_and(|l| items.len() >= l) {
                if next_key.is_none() {
                    next_key = Some(k.clone());
                }
                remaining += 1;
                continue;
            }
            items.push(o.clone());
        }
        ListResult { items, rev, next_key, remaining }
    }

    /// Start a watch after revision `after` (None = synthetic ADDED events for the current state).
    pub fn subscribe(&self, after: Option<u64>, current_rev: u64) -> Result<Subscription, CacheError> {
        let st = self.read();
        let initial = match after {
            None => st
                .objects
                .values()
                .map(|o| Arc::new(WatchEvent { kind: WatchEventType::Added, rev: o.rv, object: o.clone(), prev: None }))
                .collect(),
            Some(n) if n < st.history_start => {
                return Err(CacheError::Gone { requested: n, oldest: st.history_start });
            }
            Some(n) => st.history.iter().filter(|(_, e)| e.rev > n).map(|(_, e)| e.clone()).collect(),
        };
        Ok(Subscription { initial, live: self.tx.subscribe(), rev: current_rev })
    }

    /// The revision of this resource's last change: equal values mean nothing changed between.
    pub fn revision(&self) -> u64 {
        self.read().last_rev
    }

    pub fn watcher_count(&self) -> usize {
        self.tx.receiver_count()
    }

    pub fn len(&self) -> usize {
        self.read().objects.len()
    }

    pub fn is_empty(&self) -> bool {
        self.read().objects.is_empty()
    }
}

/// All resource caches, fed by one store watch.
pub struct Cache {
    by_kind: HashMap<&'static str, Arc<ResourceCache>>,
    rev_tx: watch::Sender<u64>,
    store: Arc<dyn Store>,
}

impl Cache {
    /// Load everything from the store and start following it.
    pub fn start(store: Arc<dyn Store>, history_limit: usize) -> Result<Arc<Self>, storage::Error> {
        let by_kind = RESOURCES.iter().map(|r| (r.kind, Arc::new(ResourceCache::new(r, history_limit)))).collect();
        let (rev_tx, _) = watch::channel(0);
        let cache = Arc::new(Self { by_kind, rev_tx, store });
        let rev = cache.load()?;
        let stream = cache.store.watch("/registry/", rev)?;
        let c = cache.clone();
        tokio::spawn(async move { c.follow(stream).await });
        Ok(cache)
    }

    /// A cache that follows nothing (for bootstrap writes before the real one starts).
    pub fn unstarted(store: Arc<dyn Store>) -> anyhow::Result<Arc<Self>> {
        let (rev_tx, _) = watch::channel(0);
        Ok(Arc::new(Self { by_kind: HashMap::new(), rev_tx, store }))
    }

    fn load(&self) -> Result<u64, storage::Error> {
        let (items, rev) = self.store.list("/registry/")?;
        let mut per: HashMap<&'static str, BTreeMap<String, Arc<CachedObject>>> = HashMap::new();
        for kv in items {
            if let Some(rc) = self.for_key(&kv.key) {
                match rc.make_object(&kv) {
                    Ok(o) => {
                        per.entry(rc.info.kind).or_default().insert(kv.key.clone(), Arc::new(o));
                    }
                    Err(err) => tracing::error!(key = %kv.key, error = %err, "skipping undecodable stored object"),
                }
            }
        }
        for (kind, rc) in &self.by_kind {
            rc.reset(per.remove(kind).unwrap_or_default(), rev);
        }
        self.rev_tx.send_replace(rev);
        Ok(rev)
    }

    async fn follow(self: Arc<Self>, mut stream: storage::WatchStream) {
        loop {
            match stream.recv().await {
                Some(Ok(ev)) => {
                    if ev.kind != EventKind::Progress {
                        if let Some(rc) = self.for_key(&ev.key) {
                            rc.apply(&ev);
                        }
                    }
                    // A progress notification may name a revision below an event already
                    // seen (etcd 3.4): the cache's revision only moves forward.
                    self.rev_tx.send_if_modified(|r| {
                        let newer = ev.revision > *r;
                        *r = (*r).max(ev.revision);
                        newer
                    });
                }
                Some(Err(err)) => {
                    tracing::warn!(error = %err, "store watch broke; reloading the cache");
                    loop {
                        match self.load().and_then(|rev| self.store.watch("/registry/", rev)) {
                            Ok(s) => {
                                stream = s;
                                break;
                            }
                            Err(err) => {
                                tracing::error!(error = %err, "cache reload failed; retrying");
                                tokio::time::sleep(Duration::from_secs(1)).await;
                            }
                        }
                    }
                }
                None => return,
            }
        }
    }

    fn for_key(&self, key: &str) -> Option<&Arc<ResourceCache>> {
        self.by_kind.values().find(|rc| key.starts_with(&rc.info.key_prefix()))
    }

    pub fn resource(&self, kind: &str) -> Option<&Arc<ResourceCache>> {
        self.by_kind.get(kind)
    }

    pub fn revision(&self) -> u64 {
        *self.rev_tx.borrow()
    }

    /// Wait until the cache has seen revision `rev` (3 s at most, as Kubernetes).
    pub async fn wait_for(&self, rev: u64) -> Result<u64, CacheError> {
        let mut rx = self.rev_tx.subscribe();
        let res = tokio::time::timeout(Duration::from_secs(3), rx.wait_for(|r| *r >= rev)).await;
        match res {
            Ok(Ok(r)) => Ok(*r),
            _ => Err(CacheError::TooLarge { requested: rev, current: self.revision() }),
        }
    }

    /// Wait until the cache has everything the store has committed (a consistent read).
    pub async fn sync(&self) -> Result<u64, CacheError> {
        self.wait_for(self.store.current_revision()).await
    }

    pub fn total_watchers(&self) -> usize {
        self.by_kind.values().map(|rc| rc.watcher_count()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::redb::RedbStore;
    use serde_json::json;

    fn pod(name: &str, app: &str) -> Vec<u8> {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default", "labels": {"app": app}},
               "spec": {"nodeName": "n1"}, "status": {"phase": "Running"}})
        .to_string()
        .into_bytes()
    }

    async fn setup(history: usize) -> (tempfile::TempDir, Arc<dyn Store>, Arc<Cache>) {
        let dir = tempfile::tempdir().expect("tempdir");
        let store: Arc<dyn Store> = Arc::new(RedbStore::open(dir.path()).expect("store"));
        store.create("/registry/pods/default/a", &pod("a", "web")).expect("create");
        let cache = Cache::start(store.clone(), history).expect("cache");
        (dir, store, cache)
    }

    #[tokio::test]
    async fn lists_reflect_writes_once_synced_and_honour_selectors() {
        let (_d, store, cache) = setup(100).await;
        store.create("/registry/pods/default/b", &pod("b", "db")).expect("create");
        store.create("/registry/pods/other/c", &pod("c", "web")).expect("create");
        let rev = cache.sync().await.expect("sync");
        assert_eq!(rev, store.current_revision());
        let pods = cache.resource("Pod").expect("pods");
        let web = LabelSelector::parse("app=web").expect("selector");
        let all = pods.list(None, &web, &FieldSelector::default(), None, None, rev);
        assert_eq!(all.items.iter().map(|o| o.name.as_str()).collect::<Vec<_>>(), ["a", "c"]);
        let ns = pods.list(Some("default"), &LabelSelector::default(), &FieldSelector::default(), None, None, rev);
        assert_eq!(ns.items.len(), 2);
        let running = FieldSelector::parse("status.phase=Running,spec.nodeName=n1").expect("fields");
        assert_eq!(pods.list(None, &LabelSelector::default(), &running, None, None, rev).items.len(), 3);
        let page = pods.list(None, &LabelSelector::default(), &FieldSelector::default(), None, Some(2), rev);
        assert_eq!((page.items.len(), page.remaining), (2, 1));
        let rest = pods.list(
            None,
            &LabelSelector::default(),
            &FieldSelector::default(),
            page.next_key.as_deref(),
            Some(2),
            rev,
        );
        assert_eq!(rest.items.iter().map(|o| o.name.as_str()).collect::<Vec<_>>(), ["c"]);
        assert!(rest.next_key.is_none());
        let json: serde_json::Value = serde_json::from_slice(&all.items[0].json).expect("json");
        assert_eq!(json["metadata"]["resourceVersion"], "1", "resourceVersion is the mod revision");
    }

    #[tokio::test]
    async fn watch_from_a_revision_replays_then_follows_and_old_revisions_are_gone() {
        let (_d, store, cache) = setup(2).await;
        let pods = cache.resource("Pod").expect("pods").clone();
        let r1 = store.current_revision();
        store.create("/registry/pods/default/b", &pod("b", "web")).expect("create");
        let r3 = store.update("/registry/pods/default/b", &pod("b", "db"), r1 + 1).expect("update");
        cache.wait_for(r3).await.expect("caught up");
        let sub = pods.subscribe(Some(r1), cache.revision()).expect("within history");
        assert_eq!(
            sub.initial.iter().map(|e| (e.kind, e.rev)).collect::<Vec<_>>(),
            [(WatchEventType::Added, r1 + 1), (WatchEventType::Modified, r3)]
        );
        let mut live = sub.live;
        store.delete("/registry/pods/default/b", None).expect("delete");
        let ev = tokio::time::timeout(Duration::from_secs(5), live.recv()).await.expect("in time").expect("event");
        assert_eq!((ev.kind, ev.object.name.as_str()), (WatchEventType::Deleted, "b"));
        // History holds 2 events now: r3 and the delete; r1 is older than that.
        assert!(matches!(pods.subscribe(Some(r1), cache.revision()), Err(CacheError::Gone { .. })));
        let fresh = pods.subscribe(None, cache.revision()).expect("list-watch");
        assert_eq!(fresh.initial.len(), 1, "synthetic ADDED for the current state");
    }

    #[tokio::test]
    async fn a_delete_removes_the_object_even_when_its_last_value_is_unreadable() {
        let (_d, store, cache) = setup(10).await;
        let rev = cache.sync().await.expect("sync");
        let pods = cache.resource("Pod").expect("pods").clone();
        let mut live = pods.subscribe(Some(rev), rev).expect("sub").live;
        let key = "/registry/pods/default/a";
        let unreadable: Arc<[u8]> = Arc::from(&b""[..]);
        pods.apply(&storage::Event {
            kind: EventKind::Delete,
            revision: rev + 1,
            key: key.to_string(),
            value: unreadable.clone(),
            prev: Some(unreadable),
            created: false,
        });
        assert!(pods.get(key).is_none(), "the deleted object is gone from the cache");
        let ev = tokio::time::timeout(Duration::from_secs(5), live.recv()).await.expect("in time").expect("event");
        assert_eq!((ev.kind, ev.rev, ev.object.name.as_str()), (WatchEventType::Deleted, rev + 1, "a"));
        let json: serde_json::Value = serde_json::from_slice(&ev.object.json).expect("json");
        assert_eq!(json["metadata"]["resourceVersion"], (rev + 1).to_string(), "at the deletion's revision");
        drop(store);
    }

    #[test]
    fn history_keeps_the_last_75_seconds_and_at_least_100_events_not_the_size_limit() {
        let info = kaji_api::resources::by_kind("Pod").expect("pods");
        let pods = ResourceCache::new(info, 10_000);
        let t0 = Instant::now();
        let put = |rev: u64, name: &str, at: Instant| {
            let value: Arc<[u8]> = Arc::from(pod(name, "web"));
            let ev = storage::Event {
                kind: EventKind::Put,
                revision: rev,
                key: format!("/registry/pods/default/{name}"),
                value,
                prev: None,
                created: true,
            };
            pods.apply_at(&ev, at);
        };
        // A burst of 150 pods, then quiet: all kept until the next event.
        for rev in 1..=150 {
            put(rev, &format!("p{rev}"), t0);
        }
        assert_eq!(pods.read().history.len(), 150);
        // 80 s later one more: the old ones go down to the floor of 100.
        put(151, "late", t0 + Duration::from_secs(80));
        assert_eq!(pods.read().history.len(), HISTORY_FLOOR);
        assert!(matches!(pods.subscribe(Some(50), 151), Err(CacheError::Gone { requested: 50, oldest: 51 })));
        let resumed = pods.subscribe(Some(51), 151).expect("within history");
        assert_eq!(resumed.initial.iter().map(|e| e.rev).collect::<Vec<_>>(), (52..=151).collect::<Vec<_>>());
        // Steady churn: 200 more within the window push out every older event, none of the new.
        for rev in 152..=351 {
            put(rev, &format!("c{rev}"), t0 + Duration::from_secs(81));
        }
        let st = pods.read();
        assert_eq!(st.history.len(), 201, "the event at 80 s and the 200 at 81 s");
        assert_eq!(st.history_start, 150);
        // Within the window the size limit still holds.
        drop(st);
        let small = ResourceCache::new(info, 3);
        for rev in 1..=5 {
            let value: Arc<[u8]> = Arc::from(pod("x", "web"));
            let ev = storage::Event {
                kind: EventKind::Put,
                revision: rev,
                key: "/registry/pods/default/x".into(),
                value,
                prev: None,
                created: rev == 1,
            };
            small.apply_at(&ev, t0);
        }
        assert_eq!(small.read().history.iter().map(|(_, e)| e.rev).collect::<Vec<_>>(), [3, 4, 5]);
    }

    #[tokio::test]
    async fn one_change_reaches_many_watchers_without_store_reads() {
        let (_d, store, cache) = setup(100).await;
        let pods = cache.resource("Pod").expect("pods").clone();
        let mut subs: Vec<_> =
            (0..200).map(|_| pods.subscribe(Some(cache.revision()), cache.revision()).expect("sub").live).collect();
        assert_eq!(cache.total_watchers(), 200);
        store.create("/registry/pods/default/z", &pod("z", "web")).expect("create");
        for s in &mut subs {
            let ev = tokio::time::timeout(Duration::from_secs(5), s.recv()).await.expect("in time").expect("event");
            assert_eq!(ev.object.name, "z");
        }
    }
}
