//! ServiceAccount controller. Desired: every namespace that is not being deleted has the
//! ServiceAccount `default` (what pods run as when they name none). Observed: the
//! ServiceAccounts cache; a deleted `default` is made again.

use crate::shared::Shared;
use futures::Stream;
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use kube::api::{Api, ObjectMeta, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::ResourceExt;
use std::sync::Arc;

pub const NAME: &str = "serviceaccount";
/// The ServiceAccount every namespace gets.
pub const DEFAULT: &str = "default";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("failed to create the default service account in {namespace}")]
    Create {
        namespace: String,
        #[source]
        source: kube::Error,
    },
}

pub struct Ctx {
    pub shared: Shared,
    pub namespaces: Store<Namespace>,
    pub accounts: Store<ServiceAccount>,
}

/// Whether `ns` should have the default account now (it is not going away).
pub fn wants_default(ns: &Namespace) -> bool {
    ns.metadata.deletion_timestamp.is_none()
        && ns.status.as_ref().and_then(|s| s.phase.as_deref()) != Some("Terminating")
}

#[tracing::instrument(skip_all, fields(controller = NAME, object = %ns.name_any()))]
pub async fn reconcile(ns: Arc<Namespace>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let name = ns.name_any();
    ctx.shared.reconciled(NAME, &name, sync(&ns, &ctx, &name)).await
}

pub fn error_policy(ns: Arc<Namespace>, err: &Error, ctx: Arc<Ctx>) -> Action {
    ctx.shared.failed(NAME, &ns.name_any(), err)
}

async fn sync(ns: &Namespace, ctx: &Ctx, name: &str) -> Result<Action, Error> {
    if !wants_default(ns) || ctx.accounts.get(&ObjectRef::new(DEFAULT).within(name)).is_some() {
        return Ok(Action::await_change());
    }
    let sa = ServiceAccount {
        metadata: ObjectMeta { name: Some(DEFAULT.into()), namespace: Some(name.into()), ..Default::default() },
        ..Default::default()
    };
    match Api::<ServiceAccount>::namespaced(ctx.shared.client.clone(), name).create(&PostParams::default(), &sa).await {
        Ok(_) => tracing::info!(namespace = %name, "created the default service account"),
        // The cache was behind, or the namespace began terminating meanwhile: nothing to do.
        Err(kube::Error::Api(e)) if e.code == 409 || e.code == 403 => {}
        Err(source) => return Err(Error::Create { namespace: name.into(), source }),
    }
    Ok(Action::await_change())
}

/// Runs the controller until `stop` resolves.
pub async fn run(
    ctx: Arc<Ctx>,
    namespaces: impl Stream<Item = Result<Namespace, watcher::Error>> + Send + 'static,
    accounts: impl Stream<Item = Result<ServiceAccount, watcher::Error>> + Send + 'static,
    stop: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let controller = Controller::for_stream(namespaces, ctx.namespaces.clone()).watches_stream(accounts, |sa| {
        (sa.name_any() == DEFAULT).then(|| ObjectRef::<Namespace>::new(&sa.namespace().unwrap_or_default()))
    });
    crate::shared::drive(controller, reconcile, error_policy, ctx, stop).await;
}
