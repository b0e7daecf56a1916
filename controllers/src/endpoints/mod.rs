//! Endpoints controller. Desired: for each Service with a selector, an Endpoints object named like
//! it listing the selected pods' IPs and resolved ports (`desired.rs`). Observed: the stored
//! Endpoints; it is created or replaced only when it differs.

pub mod desired;
pub mod slice;

use crate::meta;
use crate::shared::{Shared, RESYNC};
use desired::{desired_endpoints, selector, selects};
use futures::Stream;
use k8s_openapi::api::core::v1::{Endpoints, Pod, Service};
use kube::api::{Api, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::ResourceExt;
use std::sync::Arc;

pub const NAME: &str = "endpoint";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("failed to {action} for service {key}")]
    Api {
        action: &'static str,
        key: String,
        #[source]
        source: kube::Error,
    },
}

pub struct Ctx {
    pub shared: Shared,
    pub services: Store<Service>,
    pub pods: Store<Pod>,
    pub endpoints: Store<Endpoints>,
}

#[tracing::instrument(skip_all, fields(controller = NAME, object = %meta::key(&svc.metadata)))]
pub async fn reconcile(svc: Arc<Service>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let key = meta::key(&svc.metadata);
    ctx.shared.reconciled(NAME, &key, sync(&svc, &ctx, &key)).await
}

pub fn error_policy(svc: Arc<Service>, err: &Error, ctx: Arc<Ctx>) -> Action {
    ctx.shared.failed(NAME, &meta::key(&svc.metadata), err)
}

/// The pods in the service's namespace, from the cache.
pub fn pods_of(pods: &Store<Pod>, svc: &Service) -> Vec<Pod> {
    let ns = svc.namespace();
    pods.state().into_iter().filter(|p| p.metadata.namespace == ns).map(|p| (*p).clone()).collect()
}

async fn sync(svc: &Service, ctx: &Ctx, key: &str) -> Result<Action, Error> {
    if selector(svc).is_none() || svc.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let want = desired_endpoints(svc, &pods_of(&ctx.pods, svc));
    let ns = svc.namespace().unwrap_or_default();
    let stored = ctx.endpoints.get(&ObjectRef::new(&svc.name_any()).within(&ns));
    let api: Api<Endpoints> = Api::namespaced(ctx.shared.client.clone(), &ns);
    let pp = PostParams::default();
    let result = match stored {
        None => api.create(&pp, &want).await.map(|_| ()),
        Some(cur) if same(&cur, &want) => return Ok(Action::requeue(RESYNC)),
        Some(cur) => {
            let mut next = (*cur).clone();
            next.metadata.labels = want.metadata.labels;
            next.metadata.owner_references = want.metadata.owner_references;
            next.subsets = want.subsets;
            api.replace(&svc.name_any(), &pp, &next).await.map(|_| ())
        }
    };
    match result {
        Ok(()) => tracing::debug!(service = %key, "wrote endpoints"),
        // A stale cache: the watch brings the newer object and a retry.
        Err(source) => return Err(Error::Api { action: "write endpoints", key: key.into(), source }),
    }
    Ok(Action::requeue(RESYNC))
}

fn same(cur: &Endpoints, want: &Endpoints) -> bool {
    cur.subsets == want.subsets
        && cur.metadata.labels == want.metadata.labels
        && cur.metadata.owner_references == want.metadata.owner_references
}

/// The services a pod change concerns: those in its namespace whose selector matches it.
pub fn services_for_pod(services: &Store<Service>, pod: &Pod) -> Vec<ObjectRef<Service>> {
    services
        .state()
        .iter()
        .filter(|s| s.metadata.namespace == pod.metadata.namespace)
        .filter(|s| selector(s).is_some_and(|sel| selects(sel, pod)))
        .map(|s| ObjectRef::from_obj(&**s))
        .collect()
}

/// Runs the controller until `stop` resolves.
pub async fn run(
    ctx: Arc<Ctx>,
    services: impl Stream<Item = Result<Service, watcher::Error>> + Send + 'static,
    pods: impl Stream<Item = Result<Pod, watcher::Error>> + Send + 'static,
    endpoints: impl Stream<Item = Result<Endpoints, watcher::Error>> + Send + 'static,
    stop: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let store = ctx.services.clone();
    let controller = Controller::for_stream(services, ctx.services.clone())
        .watches_stream(pods, move |pod| services_for_pod(&store, &pod))
        .watches_stream(endpoints, |ep| {
            let ns = ep.namespace().unwrap_or_default();
            Some(ObjectRef::<Service>::new(&ep.name_any()).within(&ns))
        });
    crate::shared::drive(controller, reconcile, error_policy, ctx, stop).await;
}
