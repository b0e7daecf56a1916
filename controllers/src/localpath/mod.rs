//! The local-path provisioner (what k3s ships as Rancher's local-path-provisioner), in the
//! controller manager because it only talks to the API: the directory itself is made by the agent
//! on the node when a pod first mounts the volume, and removed on the node by a helper pod.
//! Desired: every claim of a `kaji.io/local-path` class that the scheduler placed (the
//! `volume.kubernetes.io/selected-node` annotation) is bound to a hostPath volume on that node;
//! a volume whose claim is gone is Released (Retain) or its directory removed and it deleted
//! (Delete). Observed: claims, volumes and classes in the caches, and the helper pods.

pub mod plan;

use crate::meta;
use crate::shared::Shared;
use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::ResourceExt;
use plan::VolumeNext;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

pub const NAME: &str = "local-path";

#[derive(Clone, Debug)]
pub struct Settings {
    /// Where a node keeps its volumes; `{node}` is replaced by the node's name (a lab's nodes
    /// share one disk, a real node has its own).
    pub dir: String,
    /// The image of the helper pod that removes a deleted volume's directory (needs `rm`).
    pub helper_image: String,
    /// Where helper pods run.
    pub namespace: String,
}

impl Default for Settings {
    fn default() -> Self {
        Self { dir: "/var/lib/kaji/local-path".into(), helper_image: "busybox".into(), namespace: "kube-system".into() }
    }
}

#[derive(Debug, thiserror::Error)]
#[error("failed to {action} for {key}")]
pub struct Error {
    action: &'static str,
    key: String,
    #[source]
    source: kube::Error,
}

pub struct Ctx {
    pub shared: Shared,
    pub settings: Settings,
    pub claims: Store<PersistentVolumeClaim>,
    pub volumes: Store<PersistentVolume>,
    pub classes: Store<StorageClass>,
    pub pods: Store<Pod>,
}

fn ok_if(codes: &'static [u16]) -> impl Fn(kube::Error) -> Result<(), kube::Error> {
    move |e| match e {
        kube::Error::Api(s) if codes.contains(&s.code) => Ok(()),
        e => Err(e),
    }
}

#[tracing::instrument(skip_all, fields(controller = NAME, object = %meta::key(&claim.metadata)))]
pub async fn reconcile_claim(claim: Arc<PersistentVolumeClaim>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let key = meta::key(&claim.metadata);
    ctx.shared.reconciled(NAME, &key, provision(&claim, &ctx, &key)).await
}

/// Provisions and binds a placed claim of our class; a bound one gets its Bound phase.
async fn provision(claim: &PersistentVolumeClaim, ctx: &Ctx, key: &str) -> Result<Action, Error> {
    let err = |action| move |source| Error { action, key: key.to_string(), source };
    let spec = claim.spec.clone().unwrap_or_default();
    if claim.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    if let Some(bound_to) = spec.volume_name.as_deref().filter(|v| !v.is_empty()) {
        // Bound to our volume: a bind cut short after its first write is finished here.
        if bound_to != plan::volume_name(claim) {
            return Ok(Action::await_change());
        }
        return match ctx.volumes.get(&ObjectRef::new(bound_to)) {
            Some(pv) => mark_bound(claim, &pv, ctx, key).await,
            None => Ok(Action::requeue(Duration::from_secs(1))),
        };
    }
    let class_name = spec.storage_class_name.clone().unwrap_or_default();
    let Some(class) = ctx.classes.get(&ObjectRef::new(&class_name)) else { return Ok(Action::await_change()) };
    if class.provisioner != plan::PROVISIONER {
        return Ok(Action::await_change());
    }
    let node = claim.annotations().get(plan::SELECTED_NODE).cloned();
    let Some(node) = node.filter(|n| !n.is_empty()) else {
        // Waits for the scheduler to place its first pod.
        return Ok(Action::await_change());
    };
    let ns = claim.namespace().unwrap_or_default();
    let root = plan::node_root(&ctx.settings.dir, &node);
    let pv = plan::volume_for(claim, &class, &node, &root);
    let pv_name = pv.name_any();
    let volumes: Api<PersistentVolume> = Api::all(ctx.shared.client.clone());
    match volumes.create(&PostParams::default(), &pv).await {
        Ok(_) => {
            tracing::info!(claim = %key, volume = %pv_name, node = %node, "provisioned a volume");
            let msg = format!("Successfully provisioned volume {pv_name}");
            ctx.shared.recorder.normal(claim, "ProvisioningSucceeded", msg).await;
        }
        Err(e) => ok_if(&[409])(e).map_err(err("create a volume"))?,
    }
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(ctx.shared.client.clone(), &ns);
    let bind = json!({
        "metadata": {"annotations": {
            "pv.kubernetes.io/bind-completed": "yes",
            "pv.kubernetes.io/bound-by-controller": "yes",
            "volume.kubernetes.io/storage-provisioner": plan::PROVISIONER,
        }},
        "spec": {"volumeName": pv_name},
    });
    claims.patch(&claim.name_any(), &PatchParams::default(), &Patch::Merge(bind)).await.map_err(err("bind a claim"))?;
    mark_bound(claim, &pv, ctx, key).await
}

/// The phases of a claim bound to `pv` and of `pv`: Bound, each written only if it is not yet.
async fn mark_bound(
    claim: &PersistentVolumeClaim,
    pv: &PersistentVolume,
    ctx: &Ctx,
    key: &str,
) -> Result<Action, Error> {
    let err = |action| move |source| Error { action, key: key.to_string(), source };
    let phase = |p: Option<&str>| p == Some("Bound");
    if !phase(claim.status.as_ref().and_then(|s| s.phase.as_deref())) {
        let claims: Api<PersistentVolumeClaim> =
            Api::namespaced(ctx.shared.client.clone(), &claim.namespace().unwrap_or_default());
        let pv_spec = pv.spec.clone().unwrap_or_default();
        let status =
            json!({"status": {"phase": "Bound", "accessModes": pv_spec.access_modes, "capacity": pv_spec.capacity}});
        claims
            .patch_status(&claim.name_any(), &PatchParams::default(), &Patch::Merge(status))
            .await
            .map_err(err("mark a claim bound"))?;
    }
    if !phase(pv.status.as_ref().and_then(|s| s.phase.as_deref())) {
        let volumes: Api<PersistentVolume> = Api::all(ctx.shared.client.clone());
        let bound = json!({"status": {"phase": "Bound"}});
        volumes
            .patch_status(&pv.name_any(), &PatchParams::default(), &Patch::Merge(bound))
            .await
            .map_err(err("mark a volume bound"))?;
    }
    Ok(Action::await_change())
}

#[tracing::instrument(skip_all, fields(controller = NAME, object = %pv.name_any()))]
pub async fn reconcile_volume(pv: Arc<PersistentVolume>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let key = pv.name_any();
    ctx.shared.reconciled(NAME, &key, reclaim(&pv, &ctx, &key)).await
}

/// Releases or reclaims one of our volumes whose claim is gone.
async fn reclaim(pv: &PersistentVolume, ctx: &Ctx, key: &str) -> Result<Action, Error> {
    let err = |action| move |source| Error { action, key: key.to_string(), source };
    let claim_ref = pv.spec.as_ref().and_then(|s| s.claim_ref.clone()).unwrap_or_default();
    let claim = claim_ref.name.as_deref().and_then(|name| {
        ctx.claims.get(&ObjectRef::new(name).within(claim_ref.namespace.as_deref().unwrap_or_default()))
    });
    let claim_exists = claim.is_some_and(|c| c.metadata.uid == claim_ref.uid);
    let volumes: Api<PersistentVolume> = Api::all(ctx.shared.client.clone());
    match plan::volume_next(pv, claim_exists) {
        VolumeNext::Keep => Ok(Action::await_change()),
        VolumeNext::Release => {
            let status = json!({"status": {"phase": "Released"}});
            volumes
                .patch_status(key, &PatchParams::default(), &Patch::Merge(status))
                .await
                .map_err(err("release a volume"))?;
            Ok(Action::await_change())
        }
        VolumeNext::Reclaim => {
            // A claim deleted while a pod still mounts it: its data goes only once no pod runs
            // with it (Kubernetes holds the claim itself back with its pvc-protection finalizer).
            let (ns, claim_name) = (claim_ref.namespace.as_deref().unwrap_or_default(), claim_ref.name.as_deref());
            if let Some(pod) = claim_name.and_then(|c| plan::pod_using(&ctx.pods.state(), ns, c)) {
                tracing::info!(volume = %key, pod = %pod, "the volume's claim is gone but a pod still uses it; waiting");
                return Ok(Action::requeue(Duration::from_secs(5)));
            }
            let helpers: Api<Pod> = Api::namespaced(ctx.shared.client.clone(), &ctx.settings.namespace);
            let helper = plan::helper_name(key);
            let Some((node, path)) = plan::placement(pv) else {
                tracing::warn!(volume = %key, "no node or directory to clean; deleting the volume only");
                delete_if_present(&volumes, key).await.map_err(err("delete a volume"))?;
                return Ok(Action::await_change());
            };
            let phase = helpers
                .get_opt(&helper)
                .await
                .map_err(err("read the helper pod"))?
                .map(|p| p.status.and_then(|s| s.phase).unwrap_or_default());
            match phase.as_deref() {
                None => {
                    let root = plan::node_root(&ctx.settings.dir, &node);
                    let Some(pod) = plan::cleanup_pod(
                        key,
                        &ctx.settings.namespace,
                        &node,
                        &root,
                        &path,
                        &ctx.settings.helper_image,
                    ) else {
                        tracing::warn!(volume = %key, path = %path, root = %root, "refusing to remove a directory outside the provisioner's");
                        return Ok(Action::await_change());
                    };
                    helpers
                        .create(&PostParams::default(), &pod)
                        .await
                        .map(|_| ())
                        .or_else(ok_if(&[409]))
                        .map_err(err("create the helper pod"))?;
                    tracing::info!(volume = %key, node = %node, path = %path, "removing the volume's directory on its node");
                }
                Some("Succeeded") => {
                    delete_if_present(&volumes, key).await.map_err(err("delete a volume"))?;
                    delete_if_present(&helpers, &helper).await.map_err(err("delete the helper pod"))?;
                    tracing::info!(volume = %key, "deleted the volume and its directory");
                    return Ok(Action::await_change());
                }
                Some("Failed") => {
                    ctx.shared
                        .recorder
                        .warning(pv, "VolumeFailedDelete", format!("failed to remove {path} on {node}"))
                        .await;
                    delete_if_present(&helpers, &helper).await.map_err(err("delete the helper pod"))?;
                    return Ok(Action::requeue(Duration::from_secs(30)));
                }
                Some(_) => {}
            }
            Ok(Action::requeue(Duration::from_secs(2)))
        }
    }
}

/// Deletes `name`; one already gone is fine.
async fn delete_if_present<K>(api: &Api<K>, name: &str) -> Result<(), kube::Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.delete(name, &DeleteParams::default()).await.map(|_| ()).or_else(ok_if(&[404]))
}

pub fn error_policy<K: kube::Resource>(obj: Arc<K>, err: &Error, ctx: Arc<Ctx>) -> Action {
    let key = meta::key(obj.meta());
    ctx.shared.failed(NAME, &key, err)
}

/// Makes the `local-path` class if it is missing (once, at start, as k3s deploys its manifest).
async fn ensure_class(client: &kube::Client) {
    let api: Api<StorageClass> = Api::all(client.clone());
    match api.create(&PostParams::default(), &plan::default_class()).await {
        Ok(_) => tracing::info!(class = plan::CLASS, "created the default StorageClass"),
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => tracing::warn!(error = %e, "could not create the local-path StorageClass"),
    }
}

/// Runs both loops until `stop` resolves.
pub async fn run(
    ctx: Arc<Ctx>,
    claims: impl Stream<Item = Result<PersistentVolumeClaim, watcher::Error>> + Send + 'static,
    volumes: impl Stream<Item = Result<PersistentVolume, watcher::Error>> + Send + 'static,
    claims_for_volumes: impl Stream<Item = Result<PersistentVolumeClaim, watcher::Error>> + Send + 'static,
    stop: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    ensure_class(&ctx.shared.client).await;
    let stop = futures::FutureExt::shared(Box::pin(stop));
    let claim_loop = Controller::for_stream(claims, ctx.claims.clone())
        .graceful_shutdown_on(stop.clone())
        .run(reconcile_claim, error_policy, ctx.clone())
        .for_each(|_| futures::future::ready(()));
    // A claim's deletion concerns the volume made for it (named after the claim's uid).
    let volume_loop = Controller::for_stream(volumes, ctx.volumes.clone())
        .watches_stream(claims_for_volumes, |c| Some(ObjectRef::new(&plan::volume_name(&c))))
        .graceful_shutdown_on(stop)
        .run(reconcile_volume, error_policy, ctx.clone())
        .for_each(|_| futures::future::ready(()));
    tokio::join!(claim_loop, volume_loop);
}
