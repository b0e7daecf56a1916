//! Garbage collector. Desired: every object with owner references has an owner that exists (with
//! the referenced uid); an owner deleting in the foreground outlives its blocking dependents, one
//! deleting with `orphan` outlives the references to it. Observed: a graph of every collectable
//! object's owner references, fed by one watch per discovered resource; missing owners are
//! confirmed with a live read before anything is deleted.

mod act;
pub mod decide;
pub mod graph;
mod watch;

use crate::discovery::{self, Served};
use crate::informer::receiver_stream;
use crate::shared::{backoff_delay, Shared, RESYNC};
use act::{api_err, drop_refs, invalid_owner_event, remove_finalizer, unblock_refs};
use decide::{blocking, verdict, Owner, Verdict};
use futures::StreamExt;
use graph::{Graph, Key, Node, FOREGROUND, ORPHAN};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, DeleteParams, DynamicObject, Preconditions};
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::reflector::store::Writer;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use std::collections::HashSet;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::{mpsc, watch as signal};

pub const NAME: &str = "garbagecollector";

/// How many owner uids confirmed gone are remembered (uids are never reused).
const ABSENT_MEMORY: usize = 10_000;
/// How long the collector waits for every resource's first list before it starts anyway.
const SYNC_WAIT: Duration = Duration::from_secs(30);

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("failed to {action} {object}")]
    Api {
        action: &'static str,
        object: String,
        #[source]
        source: kube::Error,
    },
    #[error("{object} refers to an owner of a kind the apiserver does not serve: {api_version} {kind}")]
    UnknownOwnerKind { object: String, api_version: String, kind: String },
    #[error("{object} kept changing while its {finalizer} finalizer was being removed")]
    Contended { object: String, finalizer: &'static str },
}

/// The collector's flags.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Settings {
    /// `--concurrent-gc-syncs`: reconciles in flight per resource.
    pub workers: u16,
}

impl Default for Settings {
    fn default() -> Self {
        Self { workers: 20 }
    }
}

/// What the per-resource controllers share: the resources, the owner graph, and a way to ask any
/// of them to look at an object again.
pub struct Ctx {
    pub shared: Shared,
    /// Everything discovery found (owner references may point at any of it).
    pub served: Vec<Served>,
    /// What is watched and collected; `Key::resource` indexes this.
    pub resources: Vec<Served>,
    graph: Mutex<Graph>,
    /// Owner uids confirmed gone, to spare a read per dependent.
    absent: Mutex<HashSet<String>>,
    triggers: Vec<mpsc::UnboundedSender<ObjectRef<DynamicObject>>>,
}

impl Ctx {
    fn graph(&self) -> MutexGuard<'_, Graph> {
        // Every graph method leaves it consistent, so a panic elsewhere cannot corrupt it.
        self.graph.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn absent(&self) -> MutexGuard<'_, HashSet<String>> {
        self.absent.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Asks the controllers of these objects to reconcile them.
    fn trigger(&self, keys: impl IntoIterator<Item = Key>) {
        for k in keys {
            let Some(tx) = self.triggers.get(k.resource) else { continue };
            let mut r = ObjectRef::new_with(&k.name, self.resources[k.resource].ar.clone());
            if let Some(ns) = &k.namespace {
                r = r.within(ns);
            }
            let _ = tx.send(r);
        }
    }

    fn api(&self, served: &Served, namespace: Option<&str>) -> Api<DynamicObject> {
        match namespace {
            Some(ns) if served.namespaced => Api::namespaced_with(self.shared.client.clone(), ns, &served.ar),
            _ => Api::all_with(self.shared.client.clone(), &served.ar),
        }
    }

    fn api_for(&self, key: &Key) -> Api<DynamicObject> {
        self.api(&self.resources[key.resource], key.namespace.as_deref())
    }

    fn describe(&self, key: &Key) -> String {
        let kind = &self.resources[key.resource].ar.kind;
        match &key.namespace {
            Some(ns) => format!("{kind} {ns}/{}", key.name),
            None => format!("{kind} {}", key.name),
        }
    }
}

/// One resource's controller: the shared state and which resource it reconciles.
pub struct Kind {
    pub gc: Arc<Ctx>,
    pub resource: usize,
}

#[tracing::instrument(skip_all, fields(controller = NAME, object = %obj_key(&obj, &kind)))]
pub async fn reconcile(obj: Arc<DynamicObject>, kind: Arc<Kind>) -> Result<Action, Error> {
    let key = obj_key(&obj, &kind);
    kind.gc.shared.reconciled(NAME, &key, sync(&obj, &kind)).await
}

pub fn error_policy(obj: Arc<DynamicObject>, err: &Error, kind: Arc<Kind>) -> Action {
    kind.gc.shared.failed(NAME, &obj_key(&obj, &kind), err)
}

fn obj_key(obj: &DynamicObject, kind: &Kind) -> String {
    match Node::from_object(kind.resource, obj) {
        Some(n) => kind.gc.describe(&n.key),
        None => format!("{} without name or uid", kind.gc.resources[kind.resource].ar.kind),
    }
}

async fn sync(obj: &DynamicObject, kind: &Kind) -> Result<Action, Error> {
    let gc = &kind.gc;
    let Some(item) = Node::from_object(kind.resource, obj) else { return Ok(Action::await_change()) };
    if item.orphaning() {
        return orphan_dependents(gc, &item).await;
    }
    if item.deleting_dependents() {
        return await_dependents(gc, &item).await;
    }
    // Being deleted is a one-way trip: its dependents are looked at once it is gone.
    if item.deleting || item.owners.is_empty() {
        return Ok(Action::await_change());
    }
    collect(gc, &item, obj).await
}

/// An owner deleted with `orphan`: its dependents lose their references to it, then it goes.
async fn orphan_dependents(gc: &Ctx, item: &Node) -> Result<Action, Error> {
    let dependents: Vec<Node> = gc.graph().dependents(&item.uid).into_iter().cloned().collect();
    let owner = [item.uid.as_str()];
    let results = futures::future::join_all(dependents.iter().map(|d| drop_refs(gc, d, &owner))).await;
    results.into_iter().collect::<Result<Vec<()>, Error>>()?;
    if !dependents.is_empty() {
        tracing::info!(object = %gc.describe(&item.key), dependents = dependents.len(), "orphaned dependents");
    }
    remove_finalizer(gc, item, ORPHAN).await?;
    Ok(Action::requeue(RESYNC))
}

/// An owner deleted in the foreground: it goes once no blocking dependent is left; until then
/// those dependents are looked at (and so deleted).
async fn await_dependents(gc: &Ctx, item: &Node) -> Result<Action, Error> {
    let (done, wake) = {
        let graph = gc.graph();
        let dependents = graph.dependents(&item.uid);
        let held = blocking(item, &dependents);
        let wake: Vec<Key> = held.iter().filter(|d| !d.deleting_dependents()).map(|d| d.key.clone()).collect();
        (held.is_empty(), wake)
    };
    if done {
        remove_finalizer(gc, item, FOREGROUND).await?;
        tracing::info!(object = %gc.describe(&item.key), "no blocking dependents left; foreground deletion done");
    } else {
        tracing::debug!(object = %gc.describe(&item.key), waiting_on = wake.len(), "waiting for blocking dependents");
        gc.trigger(wake);
    }
    Ok(Action::requeue(RESYNC))
}

/// A live object with owner references: kept, detached from gone owners, or deleted.
async fn collect(gc: &Ctx, item: &Node, obj: &DynamicObject) -> Result<Action, Error> {
    let Some(owners) = classify(gc, item, obj).await? else { return Ok(Action::await_change()) };
    let dependents: Vec<Node> = gc.graph().dependents(&item.uid).into_iter().cloned().collect();
    match verdict(item, &owners, &dependents.iter().collect::<Vec<_>>()) {
        Verdict::Keep => Ok(Action::requeue(RESYNC)),
        Verdict::DropRefs(uids) => {
            drop_refs(gc, item, &uids.iter().map(String::as_str).collect::<Vec<_>>()).await?;
            tracing::info!(object = %gc.describe(&item.key), owners = ?uids, "dropped references to owners gone or deleting");
            Ok(Action::requeue(RESYNC))
        }
        Verdict::Delete { policy, unblock } => {
            if unblock {
                unblock_refs(gc, item).await?;
            }
            let dp = DeleteParams {
                propagation_policy: Some(policy.clone()),
                preconditions: Some(Preconditions { uid: Some(item.uid.clone()), resource_version: None }),
                ..DeleteParams::default()
            };
            match gc.api_for(&item.key).delete(&item.key.name, &dp).await {
                Ok(_) => {
                    tracing::info!(object = %gc.describe(&item.key), policy = ?policy, "deleted: no owner keeps it");
                    Ok(Action::await_change())
                }
                Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(Action::await_change()),
                Err(source) => Err(api_err("delete", gc, &item.key, source)),
            }
        }
    }
}

/// Resolves each owner reference of `item`; `None` when a reference cannot be valid (a
/// cluster-scoped object naming a namespaced owner), which leaves the object alone as Kubernetes does.
async fn classify(gc: &Ctx, item: &Node, obj: &DynamicObject) -> Result<Option<Vec<(String, Owner)>>, Error> {
    let mut out = Vec::with_capacity(item.owners.len());
    for r in &item.owners {
        let Some((_, served)) = discovery::resolve(&gc.served, &r.api_version, &r.kind) else {
            return Err(Error::UnknownOwnerKind {
                object: gc.describe(&item.key),
                api_version: r.api_version.clone(),
                kind: r.kind.clone(),
            });
        };
        if item.key.namespace.is_none() && served.namespaced {
            invalid_owner_event(gc, item, obj, r).await;
            return Ok(None);
        }
        let namespace = if served.namespaced { item.key.namespace.as_deref() } else { None };
        out.push((r.uid.clone(), owner_state(gc, item, obj, served, namespace, r).await?));
    }
    Ok(Some(out))
}

/// Whether the owner exists: the graph answers yes; only a live read answers no.
async fn owner_state(
    gc: &Ctx,
    item: &Node,
    obj: &DynamicObject,
    served: &Served,
    namespace: Option<&str>,
    r: &OwnerReference,
) -> Result<Owner, Error> {
    if gc.absent().contains(&r.uid) {
        return Ok(Owner::Dangling);
    }
    let known = gc.graph().node(&r.uid).map(|n| {
        let ar = &gc.resources[n.key.resource].ar;
        let same_kind = ar.group == served.ar.group && ar.kind == served.ar.kind && n.key.name == r.name;
        (same_kind, n.key.namespace.as_deref() == namespace, n.deleting_dependents())
    });
    match known {
        Some((true, true, waiting)) => return Ok(if waiting { Owner::Waiting } else { Owner::Solid }),
        // The owner's uid lives in another namespace: references never cross namespaces.
        Some((true, false, _)) if namespace.is_some() => invalid_owner_event(gc, item, obj, r).await,
        _ => {}
    }
    let api = gc.api(served, namespace);
    let owner = api.get_opt(&r.name).await.map_err(|source| Error::Api {
        action: "read the owner of",
        object: gc.describe(&item.key),
        source,
    })?;
    match owner {
        Some(o) if o.metadata.uid.as_deref() == Some(r.uid.as_str()) => {
            let waiting = o.metadata.deletion_timestamp.is_some()
                && o.metadata.finalizers.iter().flatten().any(|f| f == FOREGROUND);
            Ok(if waiting { Owner::Waiting } else { Owner::Solid })
        }
        _ => {
            let mut absent = gc.absent();
            if absent.len() >= ABSENT_MEMORY {
                absent.clear();
            }
            absent.insert(r.uid.clone());
            Ok(Owner::Dangling)
        }
    }
}

/// Discovers the collectable resources (retrying until it works), starts one watch per resource,
/// waits until every one has listed, then runs one controller per resource until `stop`.
pub async fn run(shared: Shared, settings: Settings, stop: signal::Receiver<bool>) {
    let mut stop_wait = stop.clone();
    let mut failures = 0;
    let served = loop {
        match discovery::discover(&shared.client).await {
            Ok(all) if !all.is_empty() => break all,
            Ok(_) => tracing::warn!("discovery found no resources; retrying"),
            Err(e) => tracing::warn!(error = %e, "discovery failed; retrying"),
        }
        failures += 1;
        tokio::select! {
            _ = stop_wait.wait_for(|s| *s) => return,
            _ = tokio::time::sleep(backoff_delay(failures)) => {}
        }
    };
    let resources = discovery::collectable(&served);
    let (triggers, queues): (Vec<_>, Vec<_>) = resources.iter().map(|_| mpsc::unbounded_channel()).unzip();
    let ctx = Arc::new(Ctx {
        shared,
        served,
        resources,
        graph: Mutex::new(Graph::default()),
        absent: Mutex::new(HashSet::new()),
        triggers,
    });
    let mut stores = Vec::new();
    for (i, served) in ctx.resources.iter().enumerate() {
        let writer = Writer::new(served.ar.clone());
        stores.push(writer.as_reader());
        tokio::spawn(watch::run(ctx.clone(), i, writer, stop.clone()));
    }
    // As in Kubernetes, a resource that cannot be listed does not hold the others back for long.
    let ready = futures::future::join_all(stores.iter().map(|s| s.wait_until_ready()));
    tokio::select! {
        biased;
        _ = stop_wait.wait_for(|s| *s) => return,
        _ = tokio::time::sleep(SYNC_WAIT) => {
            tracing::warn!(waited = ?SYNC_WAIT, "not every resource could be listed; collecting anyway");
        }
        results = ready => if results.iter().any(Result::is_err) {
            if !*stop.borrow() {
                tracing::error!("a garbage collector cache stopped before it synced");
            }
            return;
        },
    }
    tracing::info!(resources = ctx.resources.len(), objects = ctx.graph().len(), "garbage collector graph synced");
    let config = controller::Config::default().concurrency(settings.workers);
    let controllers = stores.into_iter().zip(queues).enumerate().map(|(i, (store, queue))| {
        let kind = Arc::new(Kind { gc: ctx.clone(), resource: i });
        let mut stop = stop.clone();
        let idle = futures::stream::pending::<Result<DynamicObject, watcher::Error>>();
        Controller::for_stream_with(idle, store, ctx.resources[i].ar.clone())
            .reconcile_on(receiver_stream(queue))
            .with_config(config.clone())
            .graceful_shutdown_on(async move {
                let _ = stop.wait_for(|s| *s).await;
            })
            .run(reconcile, error_policy, kind)
            .for_each(|_| futures::future::ready(()))
    });
    futures::future::join_all(controllers).await;
}
