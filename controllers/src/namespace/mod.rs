//! Namespace controller. Desired: a namespace being deleted holds nothing, then loses the
//! `kubernetes` finalizer so the apiserver removes it. Observed: the namespace, and every namespaced
//! resource discovery shows, listed in it; what is left is reported in the namespace's conditions.

pub mod conditions;
pub mod content;

use crate::shared::Shared;
use futures::Stream;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use kube::ResourceExt;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

pub const NAME: &str = "namespace";
/// The spec finalizer this controller owns.
pub const FINALIZER: &str = "kubernetes";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("failed to {action} namespace {namespace}")]
    Api {
        action: &'static str,
        namespace: String,
        #[source]
        source: kube::Error,
    },
    #[error("namespace {namespace} is not empty yet: {reason}")]
    Content { namespace: String, reason: String },
    #[error("namespace {namespace} kept changing while it was being finalized")]
    Contended { namespace: String },
}

/// The controller's flags.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Settings {
    /// `--namespace-sync-period`: how often every namespace is looked at anyway.
    pub resync: Duration,
    /// `--concurrent-namespace-syncs`: namespaces emptied at once.
    pub workers: u16,
}

impl Default for Settings {
    fn default() -> Self {
        Self { resync: Duration::from_secs(300), workers: 10 }
    }
}

pub struct Ctx {
    pub shared: Shared,
    pub settings: Settings,
    pub namespaces: Store<Namespace>,
}

#[tracing::instrument(skip_all, fields(controller = NAME, object = %ns.name_any()))]
pub async fn reconcile(ns: Arc<Namespace>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let key = ns.name_any();
    ctx.shared.reconciled(NAME, &key, sync(&ns, &ctx, &key)).await
}

pub fn error_policy(ns: Arc<Namespace>, err: &Error, ctx: Arc<Ctx>) -> Action {
    ctx.shared.failed(NAME, &ns.name_any(), err)
}

fn ours(ns: &Namespace) -> bool {
    ns.spec.as_ref().and_then(|s| s.finalizers.as_ref()).is_some_and(|f| f.iter().any(|f| f == FINALIZER))
}

async fn sync(ns: &Namespace, ctx: &Ctx, name: &str) -> Result<Action, Error> {
    let Some(deleted_at) = ns.metadata.deletion_timestamp.as_ref().map(|t| t.0) else {
        return Ok(Action::requeue(ctx.settings.resync));
    };
    if !ours(ns) {
        return Ok(Action::requeue(ctx.settings.resync));
    }
    let api: Api<Namespace> = Api::all(ctx.shared.client.clone());
    let api_err = |action| move |source| Error::Api { action, namespace: name.to_string(), source };
    if ns.status.as_ref().and_then(|s| s.phase.as_deref()) != Some("Terminating") {
        let patch = Patch::Merge(json!({"status": {"phase": "Terminating"}}));
        api.patch_status(name, &PatchParams::default(), &patch).await.map_err(api_err("mark terminating"))?;
    }

    let report = content::delete_all(&ctx.shared.client, name, deleted_at).await;
    let existing = ns.status.as_ref().and_then(|s| s.conditions.clone()).unwrap_or_default();
    if let Some(conditions) = conditions::update(&existing, &report, Time(jiff::Timestamp::now())) {
        let patch = Patch::Merge(json!({"status": {"conditions": conditions}}));
        if let Err(e) = api.patch_status(name, &PatchParams::default(), &patch).await {
            tracing::warn!(namespace = %name, error = %e, "cannot update the deletion conditions");
        }
    }
    if let Some(reason) =
        report.discovery_error.clone().or_else(|| (!report.errors.is_empty()).then(|| report.errors.join("; ")))
    {
        return Err(Error::Content { namespace: name.to_string(), reason });
    }
    if report.estimate > 0 {
        tracing::info!(namespace = %name, remaining = ?report.remaining, estimate = report.estimate, "waiting for content to go");
        return Ok(Action::requeue(Duration::from_secs(report.estimate / 2 + 1)));
    }
    finalize(&api, name).await?;
    tracing::info!(namespace = %name, "namespace emptied; removed the kubernetes finalizer");
    Ok(Action::requeue(ctx.settings.resync))
}

/// PUT namespaces/{name}/finalize without our finalizer (the others kept, sorted as Kubernetes does).
async fn finalize(api: &Api<Namespace>, name: &str) -> Result<(), Error> {
    let api_err = |action| move |source| Error::Api { action, namespace: name.to_string(), source };
    for _ in 0..5 {
        let Some(mut ns) = api.get_opt(name).await.map_err(api_err("read"))? else { return Ok(()) };
        let spec = ns.spec.get_or_insert_with(Default::default);
        let mut rest: Vec<String> = spec.finalizers.iter().flatten().filter(|f| *f != FINALIZER).cloned().collect();
        rest.sort();
        rest.dedup();
        spec.finalizers = Some(rest);
        match api.replace_subresource("finalize", name, &PostParams::default(), &ns).await {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => continue,
            Err(source) => return Err(Error::Api { action: "finalize", namespace: name.to_string(), source }),
        }
    }
    Err(Error::Contended { namespace: name.to_string() })
}

/// Runs the controller until `stop` resolves.
pub async fn run(
    ctx: Arc<Ctx>,
    namespaces: impl Stream<Item = Result<Namespace, watcher::Error>> + Send + 'static,
    stop: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let config = controller::Config::default().concurrency(ctx.settings.workers);
    let controller = Controller::for_stream(namespaces, ctx.namespaces.clone()).with_config(config);
    crate::shared::drive(controller, reconcile, error_policy, ctx, stop).await;
}
