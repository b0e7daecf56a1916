//! Root CA publisher (kube-controller-manager's `root-ca-cert-publisher`). Desired: every
//! namespace that is not being deleted holds the ConfigMap `kube-root-ca.crt` whose `ca.crt` is
//! the cluster CA bundle (`--root-ca-file`), which pods mount to verify the apiserver. Observed:
//! the ConfigMaps of that name; one that differs is put back.

use crate::serviceaccount::wants_default;
use crate::shared::Shared;
use futures::Stream;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, ObjectMeta, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::ResourceExt;
use std::collections::BTreeMap;
use std::sync::Arc;

pub const NAME: &str = "root-ca-cert-publisher";
pub const CONFIG_MAP: &str = "kube-root-ca.crt";
pub const KEY: &str = "ca.crt";
const DESCRIPTION_ANNOTATION: &str = "kubernetes.io/description";
const DESCRIPTION: &str = "Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such as the internal service IP or kubernetes.default.svc. No other usage is guaranteed across distributions of Kubernetes clusters.";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("failed to {action} {CONFIG_MAP} in {namespace}")]
    Api {
        action: &'static str,
        namespace: String,
        #[source]
        source: kube::Error,
    },
}

pub struct Ctx {
    pub shared: Shared,
    /// The CA bundle, PEM.
    pub ca: String,
    pub namespaces: Store<Namespace>,
    pub config_maps: Store<ConfigMap>,
}

/// The ConfigMap `namespace` should hold, or what `current` should become (`None`: it is right).
pub fn desired(ca: &str, namespace: &str, current: Option<&ConfigMap>) -> Option<ConfigMap> {
    let data = BTreeMap::from([(KEY.to_string(), ca.to_string())]);
    match current {
        None => Some(ConfigMap {
            metadata: ObjectMeta {
                name: Some(CONFIG_MAP.into()),
                namespace: Some(namespace.into()),
                annotations: Some(BTreeMap::from([(DESCRIPTION_ANNOTATION.into(), DESCRIPTION.into())])),
                ..Default::default()
            },
            data: Some(data),
            ..Default::default()
        }),
        Some(cm) => {
            let annotated = cm.annotations().get(DESCRIPTION_ANNOTATION).map(String::as_str) == Some(DESCRIPTION);
            if cm.data.as_ref() == Some(&data) && cm.binary_data.is_none() && annotated {
                return None;
            }
            let mut next = cm.clone();
            next.data = Some(data);
            next.binary_data = None;
            next.annotations_mut().insert(DESCRIPTION_ANNOTATION.into(), DESCRIPTION.into());
            Some(next)
        }
    }
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
    if !wants_default(ns) {
        return Ok(Action::await_change());
    }
    let current = ctx.config_maps.get(&ObjectRef::new(CONFIG_MAP).within(name));
    let Some(want) = desired(&ctx.ca, name, current.as_deref()) else { return Ok(Action::await_change()) };
    let api: Api<ConfigMap> = Api::namespaced(ctx.shared.client.clone(), name);
    let pp = PostParams::default();
    let (action, result) = match current {
        None => ("create", api.create(&pp, &want).await.map(|_| ())),
        Some(_) => ("update", api.replace(CONFIG_MAP, &pp, &want).await.map(|_| ())),
    };
    match result {
        Ok(()) => tracing::info!(namespace = %name, action, "published the root CA"),
        // A stale cache or a terminating namespace: the watch brings what changed.
        Err(kube::Error::Api(e)) if e.code == 409 || e.code == 403 => {}
        Err(source) => return Err(Error::Api { action, namespace: name.into(), source }),
    }
    Ok(Action::await_change())
}

/// Runs the controller until `stop` resolves.
pub async fn run(
    ctx: Arc<Ctx>,
    namespaces: impl Stream<Item = Result<Namespace, watcher::Error>> + Send + 'static,
    config_maps: impl Stream<Item = Result<ConfigMap, watcher::Error>> + Send + 'static,
    stop: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let controller = Controller::for_stream(namespaces, ctx.namespaces.clone()).watches_stream(config_maps, |cm| {
        (cm.name_any() == CONFIG_MAP).then(|| ObjectRef::<Namespace>::new(&cm.namespace().unwrap_or_default()))
    });
    crate::shared::drive(controller, reconcile, error_policy, ctx, stop).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_config_map_is_made_then_only_mended() {
        let made = desired("PEM", "team", None).expect("created");
        assert_eq!(made.data.as_ref().and_then(|d| d.get(KEY)).map(String::as_str), Some("PEM"));
        assert_eq!(made.annotations().get(DESCRIPTION_ANNOTATION).map(String::as_str), Some(DESCRIPTION));
        assert!(desired("PEM", "team", Some(&made)).is_none(), "unchanged: no write");
        let mut edited = made.clone();
        edited.data = Some(BTreeMap::from([(KEY.to_string(), "EVIL".to_string()), ("x".to_string(), "y".to_string())]));
        let fixed = desired("PEM", "team", Some(&edited)).expect("mended");
        assert_eq!(fixed.data, made.data);
        assert!(desired("NEW", "team", Some(&made)).is_some(), "a rotated CA is published");
    }
}
