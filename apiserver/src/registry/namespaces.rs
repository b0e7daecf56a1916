//! Namespace rules: the built-in namespaces, Terminating, and the finalize subresource.

use super::meta::{self, meta_mut};
use super::{encode_for_store, with_rv, Outcome, Registry, WriteOptions};
use crate::auth::{AdmissionRequest, Operation};
use crate::http::errors::{ApiError, ApiResult};
use kaji_api::resources::ResourceInfo;
use serde_json::{json, Value};

pub const BUILTIN: &[&str] = &["default", "kube-system", "kube-public", "kube-node-lease"];

/// True unless `obj` is a Namespace whose `spec.finalizers` still hold entries.
pub fn spec_finalizers_done(info: &ResourceInfo, obj: &Value) -> bool {
    info.kind != "Namespace" || obj.pointer("/spec/finalizers").and_then(Value::as_array).is_none_or(|a| a.is_empty())
}

pub fn bootstrap(reg: &Registry) -> ApiResult<()> {
    let info = kaji_api::resources::by_kind("Namespace").expect("namespaces are served");
    for ns in BUILTIN {
        if reg.store.get(&info.key(None, ns)).map_err(ApiError::internal)?.is_some() {
            continue;
        }
        let mut obj = json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": ns, "labels": {"kubernetes.io/metadata.name": ns}}});
        let m = meta_mut(&mut obj);
        m.insert("uid".into(), uuid::Uuid::new_v4().to_string().into());
        m.insert("creationTimestamp".into(), meta::timestamp(meta::now()).into());
        kaji_api::defaults::apply_defaults("Namespace", &mut obj);
        match reg.store.create(&info.key(None, ns), &encode_for_store(&obj)?) {
            Ok(_) | Err(crate::storage::Error::AlreadyExists(_)) => {}
            Err(e) => return Err(ApiError::internal(e)),
        }
    }
    Ok(())
}

/// Write the objects each kind's strategy says every cluster has (the system PriorityClasses)
/// when they are missing; what exists is left alone.
pub fn bootstrap_builtin_objects(reg: &Registry) -> ApiResult<()> {
    for info in kaji_api::resources::RESOURCES {
        let Some(strategy) = info.strategy else { continue };
        for mut obj in strategy.0.builtin() {
            let name = meta::name(&obj).to_string();
            let key = info.key(None, &name);
            if reg.store.get(&key).map_err(ApiError::internal)?.is_some() {
                continue;
            }
            let m = meta_mut(&mut obj);
            m.insert("uid".into(), uuid::Uuid::new_v4().to_string().into());
            m.insert("creationTimestamp".into(), meta::timestamp(meta::now()).into());
            kaji_api::defaults::apply_defaults(info.kind, &mut obj);
            match reg.store.create(&key, &encode_for_store(&obj)?) {
                Ok(_) | Err(crate::storage::Error::AlreadyExists(_)) => {}
                Err(e) => return Err(ApiError::internal(e)),
            }
        }
    }
    Ok(())
}

/// PUT namespaces/{name}/finalize: replaces spec.finalizers; an empty list on a terminating
/// namespace with no metadata finalizers removes it.
pub fn finalize(reg: &Registry, name: &str, body: Value, opts: &WriteOptions) -> ApiResult<Outcome> {
    let info = kaji_api::resources::by_kind("Namespace").expect("namespaces are served");
    let known = kaji_api::schema::normalize("Namespace", &body)
        .map_err(|e| ApiError::bad_request(format!("error decoding Namespace: {e}")))?;
    let (old, kv) = reg.get_raw(info, None, name)?;
    if let Some(rv) = meta::meta_str(&known, "resourceVersion") {
        if rv.parse::<u64>().ok() != Some(kv.mod_revision) {
            return Err(ApiError::stale("", "namespaces", name));
        }
    }
    let mut new = old.clone();
    new["spec"]["finalizers"] = known.pointer("/spec/finalizers").cloned().unwrap_or(json!([]));
    let req = AdmissionRequest {
        user: &opts.user,
        operation: Operation::Update,
        resource: info,
        subresource: Some("finalize"),
        namespace: None,
        name,
        old: Some(&old),
        dry_run: opts.dry_run,
        options: None,
    };
    reg.admission.admit(&req, Some(&mut new))?;
    reg.admission.validate(&req, Some(&new))?;
    if opts.dry_run {
        return Ok(Outcome { code: 200, body: new, warnings: vec![] });
    }
    let key = info.key(None, name);
    let done = meta::is_deleting(&new) && spec_finalizers_done(info, &new) && meta::finalizers(&new).is_empty();
    // The same finalizers again: no write (the deletion still completes if it is due).
    let rev = if meta::unchanged(&new, &old) {
        if !done {
            return Ok(Outcome { code: 200, body: old, warnings: vec![] });
        }
        kv.mod_revision
    } else {
        reg.store.update(&key, &encode_for_store(&new)?, kv.mod_revision).map_err(|e| match e {
            crate::storage::Error::Conflict { .. } => ApiError::stale("", "namespaces", name),
            other => ApiError::internal(other),
        })?
    };
    if done {
        let (drev, _) = reg.store.delete(&key, Some(rev)).map_err(ApiError::internal)?;
        return Ok(Outcome { code: 200, body: with_rv(new, drev), warnings: vec![] });
    }
    Ok(Outcome { code: 200, body: with_rv(new, rev), warnings: vec![] })
}
