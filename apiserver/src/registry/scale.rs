//! The autoscaling/v1 Scale subresource of Deployments and ReplicaSets.

use super::meta::{self, meta_str};
use super::{Outcome, PatchType, Registry, WriteOptions};
use crate::http::errors::{ApiError, ApiResult};
use kaji_api::resources::ResourceInfo;
use kaji_api::selector::LabelSelector;
use kaji_api::validation::Cause;
use serde_json::{json, Value};

pub enum ScaleOp<'a> {
    Get,
    Put(Value),
    Patch(PatchType, &'a [u8]),
}

fn to_scale(obj: &Value) -> Value {
    let m = meta::meta(obj).cloned().unwrap_or_default();
    let selector = obj
        .pointer("/spec/selector")
        .map(|s| LabelSelector::from_json(s).map(|l| l.to_string()).unwrap_or_default())
        .unwrap_or_default();
    json!({
        "kind": "Scale", "apiVersion": "autoscaling/v1",
        "metadata": {"name": m.get("name"), "namespace": m.get("namespace"), "uid": m.get("uid"),
                     "resourceVersion": m.get("resourceVersion"), "creationTimestamp": m.get("creationTimestamp")},
        "spec": {"replicas": obj.pointer("/spec/replicas").and_then(Value::as_i64).unwrap_or(0)},
        "status": {"replicas": obj.pointer("/status/replicas").and_then(Value::as_i64).unwrap_or(0), "selector": selector},
    })
}

pub async fn handle(
    reg: &Registry,
    info: &'static ResourceInfo,
    ns: &str,
    name: &str,
    op: ScaleOp<'_>,
    opts: &WriteOptions,
) -> ApiResult<Outcome> {
    let (obj, _) = reg.get_raw(info, Some(ns), name)?;
    let current = to_scale(&obj);
    let desired = match op {
        ScaleOp::Get => return Ok(Outcome { code: 200, body: current, warnings: vec![] }),
        ScaleOp::Put(body) => body,
        ScaleOp::Patch(kind, patch) => {
            let patch_json: Value = serde_json::from_slice(patch)
                .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?;
            let mut s = current.clone();
            match kind {
                PatchType::Merge | PatchType::Strategic => json_patch::merge(&mut s, &patch_json),
                PatchType::Json => {
                    let p = super::patch_limits::decode(patch_json)?;
                    super::patch_limits::apply(&mut s, &p, reg.max_request_body_bytes as u64)?;
                }
            }
            s
        }
    };
    let known = kaji_api::schema::normalize("Scale", &desired)
        .map_err(|e| ApiError::bad_request(format!("error decoding Scale: {e}")))?;
    let replicas = known.pointer("/spec/replicas").and_then(Value::as_i64).unwrap_or(0);
    if replicas < 0 {
        let cause = Cause {
            reason: "FieldValueInvalid".into(),
            message: format!("Invalid value: {replicas}: must be greater than or equal to 0"),
            field: "spec.replicas".into(),
        };
        return Err(ApiError::invalid("autoscaling", "Scale", name, &[cause]));
    }
    let pinned = meta_str(&known, "resourceVersion").map(str::to_string);
    let opts = &WriteOptions { subresource: Some("scale"), ..opts.clone() };
    let mut obj = obj;
    let mut attempts = 0;
    let out = loop {
        attempts += 1;
        let mut new = obj.clone();
        new["spec"]["replicas"] = replicas.into();
        // The Scale's resourceVersion, if given, is a precondition on the parent; without one,
        // the write is pinned to what was read and retried on a race.
        if let Some(rv) = &pinned {
            meta::meta_mut(&mut new).insert("resourceVersion".into(), rv.clone().into());
        }
        match reg.update(info, Some(ns), name, new, None, opts).await {
            Err(e) if e.code == 409 && pinned.is_none() && attempts < 5 => obj = reg.get_raw(info, Some(ns), name)?.0,
            other => break other?,
        }
    };
    Ok(Outcome { code: 200, body: to_scale(&out.body), warnings: vec![] })
}
