//! EndpointSlice controller. Desired: for each Service with a selector, the IPv4 slices of
//! `desired::desired_slices`. Observed: the slices labelled with the service's name and managed by
//! us; each is created or replaced when it differs, and slices no longer desired are deleted.

use super::desired::{desired_slices, selector, MANAGED_BY, MANAGED_BY_LABEL, SERVICE_NAME_LABEL};
use super::{pods_of, services_for_pod};
use crate::meta;
use crate::shared::{Shared, RESYNC};
use futures::Stream;
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::ResourceExt;
use std::sync::Arc;

pub const NAME: &str = "endpointslice";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("failed to {action} {slice} for service {key}")]
    Api {
        action: &'static str,
        slice: String,
        key: String,
        #[source]
        source: kube::Error,
    },
}

pub struct Ctx {
    pub shared: Shared,
    pub services: Store<Service>,
    pub pods: Store<Pod>,
    pub slices: Store<EndpointSlice>,
}

#[tracing::instrument(skip_all, fields(controller = NAME, object = %meta::key(&svc.metadata)))]
pub async fn reconcile(svc: Arc<Service>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let key = meta::key(&svc.metadata);
    ctx.shared.reconciled(NAME, &key, sync(&svc, &ctx, &key)).await
}

pub fn error_policy(svc: Arc<Service>, err: &Error, ctx: Arc<Ctx>) -> Action {
    ctx.shared.failed(NAME, &meta::key(&svc.metadata), err)
}

/// The service a slice belongs to, by its service-name label, if we manage it.
fn service_of(slice: &EndpointSlice) -> Option<ObjectRef<Service>> {
    let labels = slice.metadata.labels.as_ref()?;
    if labels.get(MANAGED_BY_LABEL).map(String::as_str) != Some(MANAGED_BY) {
        return None;
    }
    let svc = labels.get(SERVICE_NAME_LABEL)?;
    Some(ObjectRef::new(svc).within(&slice.namespace().unwrap_or_default()))
}

async fn sync(svc: &Service, ctx: &Ctx, key: &str) -> Result<Action, Error> {
    if selector(svc).is_none() || svc.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let ns = svc.namespace().unwrap_or_default();
    let me = ObjectRef::from_obj(svc);
    let stored: Vec<Arc<EndpointSlice>> =
        ctx.slices.state().into_iter().filter(|s| service_of(s).as_ref() == Some(&me)).collect();
    let want = desired_slices(svc, &pods_of(&ctx.pods, svc));
    let api: Api<EndpointSlice> = Api::namespaced(ctx.shared.client.clone(), &ns);
    let pp = PostParams::default();
    let err = |action, slice: &str| {
        let (slice, key) = (slice.to_string(), key.to_string());
        move |source| Error::Api { action, slice, key, source }
    };
    for w in &want {
        let name = w.name_any();
        match stored.iter().find(|s| s.name_any() == name) {
            None => {
                api.create(&pp, w).await.map_err(err("create", &name))?;
            }
            Some(cur) if same(cur, w) => {}
            Some(cur) => {
                let mut next = (**cur).clone();
                next.metadata.labels = w.metadata.labels.clone();
                next.metadata.owner_references = w.metadata.owner_references.clone();
                next.endpoints = w.endpoints.clone();
                next.ports = w.ports.clone();
                api.replace(&name, &pp, &next).await.map_err(err("replace", &name))?;
            }
        }
    }
    for old in stored.iter().filter(|s| !want.iter().any(|w| w.name_any() == s.name_any())) {
        let name = old.name_any();
        match api.delete(&name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(source) => return Err(err("delete", &name)(source)),
        }
    }
    Ok(Action::requeue(RESYNC))
}

fn same(cur: &EndpointSlice, want: &EndpointSlice) -> bool {
    cur.endpoints == want.endpoints
        && cur.ports == want.ports
        && cur.address_type == want.address_type
        && cur.metadata.labels == want.metadata.labels
        && cur.metadata.owner_references == want.metadata.owner_references
}

/// Runs the controller until `stop` resolves.
pub async fn run(
    ctx: Arc<Ctx>,
    services: impl Stream<Item = Result<Service, watcher::Error>> + Send + 'static,
    pods: impl Stream<Item = Result<Pod, watcher::Error>> + Send + 'static,
    slices: impl Stream<Item = Result<EndpointSlice, watcher::Error>> + Send + 'static,
    stop: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let store = ctx.services.clone();
    let controller = Controller::for_stream(services, ctx.services.clone())
        .watches_stream(pods, move |pod| services_for_pod(&store, &pod))
        .watches_stream(slices, |s| service_of(&s));
    crate::shared::drive(controller, reconcile, error_policy, ctx, stop).await;
}
