//! ResourceQuota controller (Kubernetes' pkg/controller/resourcequota). Desired: each quota's
//! status says its spec's `hard` and, for exactly those resources, what the namespace's objects
//! under its scopes use. Observed: the shared caches of the kinds quota counts (a live list for
//! any other `count/<resource>.<group>`). A quota is recomputed when its spec changes, when an
//! object it counts is deleted or changes in a way that may lower usage
//! (`kaji_api::quota::replenish`), and every 5 minutes; a status equal to the computed one is
//! never written. Creations and status-only changes (admission's charges) do not wake it, as in
//! Kubernetes: quota admission charged the creation already, and the object may not be in the
//! cache yet — a recount then would hand the charged unit back.

use crate::informer::UpdateFilter;
use crate::shared::{Shared, RESYNC};
use futures::stream::BoxStream;
use futures::StreamExt;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{
    ConfigMap, PersistentVolumeClaim, Pod, ReplicationController, ResourceQuota, Secret, Service,
};
use kaji_api::quota::{calculate, list, replenish, scopes, ResourceList};
use kube::api::{Api, ListParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde_json::Value;
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

pub const NAME: &str = "resourcequota";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("failed to list {resource} in {namespace} to count them")]
    List {
        resource: String,
        namespace: String,
        #[source]
        source: kube::Error,
    },
    #[error("failed to write the status of quota {namespace}/{name}")]
    Status {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("failed to encode quota {0}")]
    Encode(String, #[source] serde_json::Error),
}

/// The caches of what quota counts without a live list.
pub struct Stores {
    pub quotas: Store<ResourceQuota>,
    pub pods: Store<Pod>,
    pub services: Store<Service>,
    pub config_maps: Store<ConfigMap>,
    pub secrets: Store<Secret>,
    pub claims: Store<PersistentVolumeClaim>,
    pub replication_controllers: Store<ReplicationController>,
    pub replica_sets: Store<ReplicaSet>,
    pub deployments: Store<Deployment>,
    pub stateful_sets: Store<StatefulSet>,
    pub daemon_sets: Store<DaemonSet>,
    pub jobs: Store<Job>,
    pub cron_jobs: Store<CronJob>,
}

pub struct Ctx {
    pub shared: Shared,
    pub stores: Stores,
}

type Trigger<K> = BoxStream<'static, Result<K, watcher::Error>>;

/// The changes that may lower a quota's usage, one stream per cached kind (`replenish`'s filter:
/// deletions and the updates `kaji_api::quota::replenish::on_update` names).
pub struct Triggers {
    /// Quotas deleted (the others' `resourcequotas` count falls).
    pub quotas: Trigger<ResourceQuota>,
    pub pods: Trigger<Pod>,
    pub services: Trigger<Service>,
    pub config_maps: Trigger<ConfigMap>,
    pub secrets: Trigger<Secret>,
    pub claims: Trigger<PersistentVolumeClaim>,
    pub replication_controllers: Trigger<ReplicationController>,
    pub replica_sets: Trigger<ReplicaSet>,
    pub deployments: Trigger<Deployment>,
    pub stateful_sets: Trigger<StatefulSet>,
    pub daemon_sets: Trigger<DaemonSet>,
    pub jobs: Trigger<Job>,
    pub cron_jobs: Trigger<CronJob>,
}

/// The informer filter of one kind's replenishment: updates that may lower usage pass.
pub fn replenish<K: Serialize + 'static>(group: &'static str, resource: &'static str) -> UpdateFilter<K> {
    if !matches!((group, resource), ("", "pods" | "services" | "persistentvolumeclaims")) {
        return Box::new(|_, _| false);
    }
    Box::new(move |old: &K, new: &K| {
        let (Ok(old), Ok(new)) = (serde_json::to_value(old), serde_json::to_value(new)) else { return true };
        replenish::on_update(group, resource, &old, &new, jiff::Timestamp::now().as_second())
    })
}

fn in_namespace<K: Resource<DynamicType = ()> + Serialize + Clone>(store: &Store<K>, ns: &str) -> Vec<Value> {
    store
        .state()
        .iter()
        .filter(|o| o.namespace().as_deref() == Some(ns))
        .filter_map(|o| serde_json::to_value(&**o).ok())
        .collect()
}

impl Ctx {
    /// The namespace's objects of one kind, from its cache or listed live.
    async fn objects(&self, group: &str, resource: &str, ns: &str) -> Result<Vec<Value>, Error> {
        let s = &self.stores;
        Ok(match (group, resource) {
            ("", "pods") => in_namespace(&s.pods, ns),
            ("", "services") => in_namespace(&s.services, ns),
            ("", "configmaps") => in_namespace(&s.config_maps, ns),
            ("", "secrets") => in_namespace(&s.secrets, ns),
            ("", "persistentvolumeclaims") => in_namespace(&s.claims, ns),
            ("", "replicationcontrollers") => in_namespace(&s.replication_controllers, ns),
            ("", "resourcequotas") => in_namespace(&s.quotas, ns),
            ("apps", "replicasets") => in_namespace(&s.replica_sets, ns),
            ("apps", "deployments") => in_namespace(&s.deployments, ns),
            ("apps", "statefulsets") => in_namespace(&s.stateful_sets, ns),
            ("apps", "daemonsets") => in_namespace(&s.daemon_sets, ns),
            ("batch", "jobs") => in_namespace(&s.jobs, ns),
            ("batch", "cronjobs") => in_namespace(&s.cron_jobs, ns),
            _ => self.list_live(group, resource, ns).await?,
        })
    }

    /// Any other served kind, found by discovery and listed (metadata only: a count needs no more).
    async fn list_live(&self, group: &str, resource: &str, ns: &str) -> Result<Vec<Value>, Error> {
        let client = self.shared.client.clone();
        let err = |source| Error::List { resource: format!("{resource}.{group}"), namespace: ns.into(), source };
        let found = match kube::discovery::group(&client, group).await {
            Ok(g) => g.recommended_resources().into_iter().find(|(r, _)| r.plural == resource),
            // A group nobody serves has nothing to count.
            Err(kube::Error::Api(e)) if e.code == 404 => None,
            Err(e) => return Err(err(e)),
        };
        let Some((ar, caps)) = found else { return Ok(Vec::new()) };
        if caps.scope != kube::discovery::Scope::Namespaced {
            return Ok(Vec::new());
        }
        let api: Api<kube::api::DynamicObject> = Api::namespaced_with(client, ns, &ar);
        let items = api.list_metadata(&ListParams::default()).await.map_err(err)?;
        Ok(items.items.iter().filter_map(|o| serde_json::to_value(o).ok()).collect())
    }
}

#[tracing::instrument(skip_all, fields(controller = NAME, object = %key(&q)))]
pub async fn reconcile(q: Arc<ResourceQuota>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    ctx.shared.reconciled(NAME, &key(&q), sync(&q, &ctx)).await
}

pub fn error_policy(q: Arc<ResourceQuota>, err: &Error, ctx: Arc<Ctx>) -> Action {
    ctx.shared.failed(NAME, &key(&q), err)
}

fn key(q: &ResourceQuota) -> String {
    format!("{}/{}", q.namespace().unwrap_or_default(), q.name_any())
}

async fn sync(q: &ResourceQuota, ctx: &Ctx) -> Result<Action, Error> {
    let ns = q.namespace().unwrap_or_default();
    let name = q.name_any();
    let mut value = serde_json::to_value(q).map_err(|e| Error::Encode(key(q), e))?;
    let hard = list::from_json(value.pointer("/spec/hard"));
    let selectors = scopes::selectors(&value);
    let previous = list::from_json(value.pointer("/status/used"));
    let kinds: BTreeSet<(String, String)> = hard.keys().filter_map(|n| calculate::measured_kind(n)).collect();
    let now = jiff::Timestamp::now().as_second();
    let mut measured: Vec<ResourceList> = Vec::new();
    for (group, resource) in &kinds {
        let objects = ctx.objects(group, resource, &ns).await?;
        measured.push(calculate::kind_usage(group, resource, &hard, &selectors, &objects, now));
    }
    let used = calculate::used(&hard, &previous, &measured);
    if !calculate::status_differs(&value, &hard, &used) {
        return Ok(Action::requeue(RESYNC));
    }
    value["status"] = serde_json::json!({
        "hard": value.pointer("/spec/hard").cloned().unwrap_or_else(|| serde_json::json!({})),
        "used": list::to_json(&used),
    });
    let body: ResourceQuota = serde_json::from_value(value).map_err(|e| Error::Encode(key(q), e))?;
    // At the cached resourceVersion: a quota charged meanwhile conflicts and is recomputed.
    Api::<ResourceQuota>::namespaced(ctx.shared.client.clone(), &ns)
        .replace_status(&name, &PostParams::default(), &body)
        .await
        .map_err(|source| Error::Status { namespace: ns.clone(), name: name.clone(), source })?;
    tracing::debug!(quota = %key(q), used = %list::pretty_print(&used), "wrote quota usage");
    Ok(Action::requeue(RESYNC))
}

/// Every quota in the namespace of what changed.
fn quotas_in(store: &Store<ResourceQuota>, ns: Option<String>) -> Vec<ObjectRef<ResourceQuota>> {
    let Some(ns) = ns else { return Vec::new() };
    store
        .state()
        .iter()
        .filter(|q| q.namespace().as_deref() == Some(ns.as_str()))
        .map(|q| ObjectRef::from_obj(&**q))
        .collect()
}

fn watch<K>(
    c: Controller<ResourceQuota>,
    store: &Store<ResourceQuota>,
    trigger: Trigger<K>,
) -> Controller<ResourceQuota>
where
    K: Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let store = store.clone();
    c.watches_stream(trigger, move |o: K| quotas_in(&store, o.namespace()))
}

/// Passes a quota the first time its uid is seen and whenever its spec changes: its own status
/// writes (the controller's, admission's charges) are not a reason to recompute it.
fn spec_changes(quotas: Trigger<ResourceQuota>) -> Trigger<ResourceQuota> {
    let mut seen: HashMap<String, Value> = HashMap::new();
    quotas
        .filter(move |r| {
            let pass = match r {
                Ok(q) => {
                    let uid = q.uid().unwrap_or_default();
                    let spec = serde_json::to_value(&q.spec).unwrap_or(Value::Null);
                    let changed = seen.get(&uid) != Some(&spec);
                    if changed {
                        seen.insert(uid, spec);
                    }
                    changed
                }
                Err(_) => true,
            };
            futures::future::ready(pass)
        })
        .boxed()
}

/// Runs the controller until `stop` resolves. `own` is the quotas' stream the controller is
/// driven by; `t.quotas` the one that tells the other quotas of a namespace that a quota went.
pub async fn run(
    ctx: Arc<Ctx>,
    own: Trigger<ResourceQuota>,
    t: Triggers,
    stop: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let store = ctx.stores.quotas.clone();
    let mut c = Controller::for_stream(spec_changes(own), store.clone());
    c = watch(c, &store, t.quotas);
    c = watch(c, &store, t.pods);
    c = watch(c, &store, t.services);
    c = watch(c, &store, t.config_maps);
    c = watch(c, &store, t.secrets);
    c = watch(c, &store, t.claims);
    c = watch(c, &store, t.replication_controllers);
    c = watch(c, &store, t.replica_sets);
    c = watch(c, &store, t.deployments);
    c = watch(c, &store, t.stateful_sets);
    c = watch(c, &store, t.daemon_sets);
    c = watch(c, &store, t.jobs);
    c = watch(c, &store, t.cron_jobs);
    crate::shared::drive(c, reconcile, error_policy, ctx, stop).await;
}
