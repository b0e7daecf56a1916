//! The collector's writes: dropping and unblocking owner references, taking its finalizers off,
//! and the OwnerRefInvalidNamespace warning. Objects already gone or replaced are not errors.

use super::graph::{Key, Node};
use super::{Ctx, Error, NAME};
use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::json;

/// Removes the references to these owner uids (strategic merge keyed by uid; the object's uid in
/// the patch refuses a namesake). An object already gone is fine.
pub async fn drop_refs(gc: &Ctx, item: &Node, owner_uids: &[&str]) -> Result<(), Error> {
    let refs: Vec<_> = owner_uids.iter().map(|u| json!({"$patch": "delete", "uid": u})).collect();
    let patch = json!({"metadata": {"ownerReferences": refs, "uid": item.uid}});
    patch_refs(gc, item, patch, "drop owner references of").await
}

/// Clears blockOwnerDeletion on every reference of `item` that sets it.
pub async fn unblock_refs(gc: &Ctx, item: &Node) -> Result<(), Error> {
    let refs: Vec<_> = item
        .owners
        .iter()
        .filter(|r| r.block_owner_deletion == Some(true))
        .map(|r| json!({"uid": r.uid, "blockOwnerDeletion": false}))
        .collect();
    if refs.is_empty() {
        return Ok(());
    }
    let patch = json!({"metadata": {"ownerReferences": refs, "uid": item.uid}});
    patch_refs(gc, item, patch, "unblock owner references of").await
}

async fn patch_refs(gc: &Ctx, item: &Node, patch: serde_json::Value, action: &'static str) -> Result<(), Error> {
    let api = gc.api_for(&item.key);
    match api.patch(&item.key.name, &PatchParams::default(), &Patch::Strategic(patch)).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if matches!(s.code, 404 | 409 | 422) => Ok(()),
        Err(source) => Err(api_err(action, gc, &item.key, source)),
    }
}

/// Takes `finalizer` off the live object (a merge patch pinned to its resourceVersion, retried on
/// conflicts). Removing the last finalizer of an object being deleted lets the apiserver delete it.
pub async fn remove_finalizer(gc: &Ctx, item: &Node, finalizer: &'static str) -> Result<(), Error> {
    let api = gc.api_for(&item.key);
    for _ in 0..5 {
        let current = match api.get_opt(&item.key.name).await {
            Ok(Some(o)) if o.metadata.uid.as_deref() == Some(item.uid.as_str()) => o,
            Ok(_) => return Ok(()),
            Err(source) => return Err(api_err("read", gc, &item.key, source)),
        };
        let all = current.metadata.finalizers.clone().unwrap_or_default();
        let rest: Vec<&String> = all.iter().filter(|f| *f != finalizer).collect();
        if rest.len() == all.len() {
            return Ok(());
        }
        let patch = json!({"metadata": {"finalizers": rest, "resourceVersion": current.metadata.resource_version}});
        match api.patch(&item.key.name, &PatchParams::default(), &Patch::Merge(patch)).await {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => continue,
            Err(source) => return Err(api_err("remove a finalizer from", gc, &item.key, source)),
        }
    }
    Err(Error::Contended { object: gc.describe(&item.key), finalizer })
}

pub fn api_err(action: &'static str, gc: &Ctx, key: &Key, source: kube::Error) -> Error {
    Error::Api { action, object: gc.describe(key), source }
}

/// Kubernetes' OwnerRefInvalidNamespace warning on the dependent.
pub async fn invalid_owner_event(gc: &Ctx, item: &Node, obj: &DynamicObject, r: &OwnerReference) {
    let served = &gc.resources[item.key.resource];
    let ns = item.key.namespace.clone().unwrap_or_default();
    let message = format!(
        "ownerRef [{}/{}, namespace: {ns}, name: {}, uid: {}] does not exist in namespace {ns:?}",
        r.api_version, r.kind, r.name, r.uid
    );
    tracing::warn!(object = %gc.describe(&item.key), %message, "invalid owner reference");
    let now = Time(jiff::Timestamp::now());
    let event_ns = item.key.namespace.clone().unwrap_or_else(|| "default".into());
    let event = Event {
        metadata: ObjectMeta {
            name: Some(format!("{}.{:016x}", item.key.name, fastrand::u64(..))),
            namespace: Some(event_ns.clone()),
            ..ObjectMeta::default()
        },
        involved_object: ObjectReference {
            api_version: Some(served.ar.api_version.clone()),
            kind: Some(served.ar.kind.clone()),
            name: Some(item.key.name.clone()),
            namespace: item.key.namespace.clone(),
            uid: Some(item.uid.clone()),
            resource_version: obj.metadata.resource_version.clone(),
            ..ObjectReference::default()
        },
        reason: Some("OwnerRefInvalidNamespace".into()),
        message: Some(message),
        type_: Some("Warning".into()),
        count: Some(1),
        first_timestamp: Some(now.clone()),
        last_timestamp: Some(now),
        source: Some(EventSource { component: Some(NAME.into()), host: None }),
        reporting_component: Some(NAME.into()),
        ..Event::default()
    };
    let api: Api<Event> = Api::namespaced(gc.shared.client.clone(), &event_ns);
    if let Err(e) = api.create(&PostParams::default(), &event).await {
        tracing::warn!(error = %e, "cannot record event");
    }
}
