//! The autoscaling/v1 Scale subresource of ReplicationControllers, Deployments, ReplicaSets and
//! StatefulSets.

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

/// `status.selector`: the pod selector in its string form.
fn selector_string(info: &ResourceInfo, obj: &Value) -> String {
    let Some(sel) = obj.pointer("/spec/selector") else { return String::new() };
    if info.kind == "ReplicationController" {
        // A plain map: `labels.SelectorFromSet(...).String()`, sorted `k=v` pairs.
        let mut pairs: Vec<String> = sel
            .as_object()
            .into_iter()
            .flatten()
            .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
            .collect();
        pairs.sort();
        return pairs.join(",");
    }
    LabelSelector::from_json(sel).map(|l| l.to_string()).unwrap_or_default()
}

fn to_scale(info: &ResourceInfo, obj: &Value) -> Value {
    let m = meta::meta(obj).cloned().unwrap_or_default();
    let selector = selector_string(info, obj);
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
    let current = to_scale(info, &obj);
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
    Ok(Outcome { code: 200, body: to_scale(info, &out.body), warnings: vec![] })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_selector_is_printed_from_a_label_selector_or_a_replication_controllers_map() {
        let by_kind = |kind| kaji_api::resources::by_kind(kind).expect("served");
        let rc = json!({"spec": {"replicas": 2, "selector": {"tier": "x", "app": "web"}}, "status": {"replicas": 1}});
        let scale = to_scale(by_kind("ReplicationController"), &rc);
        assert_eq!(scale["status"], json!({"replicas": 1, "selector": "app=web,tier=x"}));
        assert_eq!(scale["spec"], json!({"replicas": 2}));
        let rs = json!({"spec": {"selector": {"matchLabels": {"app": "web"}}}});
        assert_eq!(to_scale(by_kind("ReplicaSet"), &rs)["status"]["selector"], "app=web");
    }
}
