//! Pod rules: graceful deletion and binding to a node.

use super::meta::{self, meta_str};
use super::{Outcome, Registry, WriteOptions};
use crate::auth::{AdmissionRequest, Operation};
use crate::http::errors::{ApiError, ApiResult};
use serde_json::{json, Value};

/// Seconds a pod gets to terminate: 0 when no node runs it or it already finished.
pub fn grace_period(pod: &Value, requested: Option<i64>) -> i64 {
    let bound = pod.pointer("/spec/nodeName").and_then(Value::as_str).is_some_and(|s| !s.is_empty());
    let terminal = matches!(pod.pointer("/status/phase").and_then(Value::as_str), Some("Succeeded" | "Failed"));
    if !bound || terminal {
        return 0;
    }
    requested
        .or_else(|| pod.pointer("/spec/terminationGracePeriodSeconds").and_then(Value::as_i64))
        .unwrap_or(30)
        .max(0)
}

pub fn bind(reg: &Registry, ns: &str, name: &str, body: Value, opts: &WriteOptions) -> ApiResult<Outcome> {
    let info = kaji_api::resources::by_kind("Pod").expect("pods are served");
    let known = kaji_api::schema::normalize("Binding", &body)
        .map_err(|e| ApiError::bad_request(format!("error decoding Binding: {e}")))?;
    if let Some(n) = meta_str(&known, "name") {
        if n != name {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({n}) does not match the name on the URL ({name})"
            )));
        }
    }
    let node = known.pointer("/target/name").and_then(Value::as_str).unwrap_or("").to_string();
    if node.is_empty() {
        let cause = kaji_api::validation::Cause {
            reason: "FieldValueRequired".into(),
            message: "Required value".into(),
            field: "target.name".into(),
        };
        return Err(ApiError::invalid("", "Binding", name, &[cause]));
    }
    let mut binding = known;
    let req = AdmissionRequest {
        user: &opts.user,
        operation: Operation::Create,
        resource: info,
        subresource: Some("binding"),
        namespace: Some(ns),
        name,
        old: None,
        dry_run: opts.dry_run,
        options: None,
    };
    reg.admission.admit(&req, Some(&mut binding))?;
    reg.admission.validate(&req, Some(&binding))?;
    for _ in 0..5 {
        let (old, kv) = reg.get_raw(info, Some(ns), name)?;
        if meta::is_deleting(&old) {
            return Err(ApiError::conflict(
                "",
                "pods",
                name,
                &format!("pod {name} is being deleted, cannot be assigned to a host"),
            ));
        }
        if let Some(cur) = old.pointer("/spec/nodeName").and_then(Value::as_str).filter(|s| !s.is_empty()) {
            return Err(ApiError::conflict(
                "",
                "pods",
                name,
                &format!("pod {name} is already assigned to node \"{cur}\""),
            ));
        }
        let mut new = old.clone();
        new["spec"]["nodeName"] = node.clone().into();
        let cond = json!({"type": "PodScheduled", "status": "True", "lastProbeTime": null,
            "lastTransitionTime": meta::timestamp(meta::now())});
        let conds = new["status"]["conditions"].as_array().cloned().unwrap_or_default();
        let mut conds: Vec<Value> = conds.into_iter().filter(|c| c["type"] != "PodScheduled").collect();
        conds.push(cond);
        new["status"]["conditions"] = Value::Array(conds);
        if opts.dry_run {
            break;
        }
        let bytes = serde_json::to_vec(&{
            let mut v = new.clone();
            meta::meta_mut(&mut v).remove("resourceVersion");
            v
        })
        .map_err(ApiError::internal)?;
        match reg.store.update(&info.key(Some(ns), name), &bytes, kv.mod_revision) {
            Ok(_) => break,
            Err(crate::storage::Error::Conflict { .. }) => continue,
            Err(e) => return Err(ApiError::internal(e)),
        }
    }
    Ok(Outcome {
        code: 201,
        body: json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}),
        warnings: vec![],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unbound_and_finished_pods_are_deleted_at_once() {
        assert_eq!(grace_period(&json!({"spec": {"terminationGracePeriodSeconds": 30}}), None), 0);
        let finished = json!({"spec": {"nodeName": "n1"}, "status": {"phase": "Succeeded"}});
        assert_eq!(grace_period(&finished, Some(10)), 0);
    }

    #[test]
    fn bound_pods_get_the_requested_or_their_own_grace() {
        let pod =
            json!({"spec": {"nodeName": "n1", "terminationGracePeriodSeconds": 45}, "status": {"phase": "Running"}});
        assert_eq!(grace_period(&pod, None), 45);
        assert_eq!(grace_period(&pod, Some(0)), 0);
        assert_eq!(grace_period(&pod, Some(5)), 5);
    }
}
