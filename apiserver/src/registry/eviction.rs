//! `POST pods/{name}/eviction` (policy/v1 Eviction): delete a pod unless a PodDisruptionBudget
//! forbids it, as kube-apiserver's EvictionREST does — a pod that is not running is deleted at
//! once; a running one only if the one budget that selects it allows a disruption, which the
//! eviction takes (`disruptionsAllowed` down by one, the pod in `disruptedPods`) before the pod,
//! marked `DisruptionTarget`, is deleted.

use super::{decode_stored, meta, DeleteOptions, Outcome, Registry, WriteOptions};
use crate::http::errors::{ApiError, ApiResult};
use kaji_api::resources::{by_kind, Subresource};
use kaji_api::selector::LabelSelector;
use serde_json::{json, Value};

const TOO_MANY: &str = "Cannot evict pod as it would violate the pod's disruption budget.";
/// `MaxDisruptedPodSize`: evictions the disruption controller has not yet confirmed.
const MAX_DISRUPTED_PODS: usize = 2000;

fn success() -> Outcome {
    Outcome {
        code: 201,
        body: json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}),
        warnings: vec![],
    }
}

/// 429 with the DisruptionBudget cause (`errors.NewTooManyRequests` + the cause eviction adds).
fn too_many_requests(cause: String, retry_after: u64) -> ApiError {
    let mut e = ApiError::new(429, "TooManyRequests", TOO_MANY);
    let mut details = json!({"causes": [{"reason": "DisruptionBudget", "message": cause}]});
    if retry_after > 0 {
        details["retryAfterSeconds"] = json!(retry_after);
    }
    e.details = Some(details);
    e
}

fn forbidden_budget(name: &str, why: &str, cause: String) -> ApiError {
    let mut e = crate::auth::authz::message::resource_forbidden("policy", "poddisruptionbudget", name, why);
    if let Some(d) = e.details.as_mut() {
        d["causes"] = json!([{"reason": "DisruptionBudget", "message": cause}]);
    }
    e
}

fn phase(pod: &Value) -> &str {
    pod.pointer("/status/phase").and_then(Value::as_str).unwrap_or("")
}

/// `canIgnorePDB`: terminal, pending or already terminating pods need no budget.
fn can_ignore_budget(pod: &Value) -> bool {
    matches!(phase(pod), "Succeeded" | "Failed" | "Pending") || meta::is_deleting(pod)
}

fn is_ready(pod: &Value) -> bool {
    pod.pointer("/status/conditions").and_then(Value::as_array).into_iter().flatten().any(|c| {
        c.get("type").and_then(Value::as_str) == Some("Ready")
            && c.get("status").and_then(Value::as_str) == Some("True")
    })
}

fn int(v: &Value, path: &str) -> i64 {
    v.pointer(path).and_then(Value::as_i64).unwrap_or(0)
}

impl Registry {
    /// The eviction subresource; `delete` carries the Eviction's deleteOptions (and the user).
    pub async fn evict(&self, ns: &str, name: &str, body: Value, delete: DeleteOptions) -> ApiResult<Outcome> {
        let pods = by_kind("Pod").expect("pods are served");
        let eviction = kaji_api::schema::normalize("Eviction", &body)
            .map_err(|e| ApiError::bad_request(format!("error decoding Eviction: {e}")))?;
        if meta::meta_str(&eviction, "name").unwrap_or("") != name {
            return Err(ApiError::bad_request("name in URL does not match name in Eviction object"));
        }
        let req = crate::auth::AdmissionRequest {
            user: &delete.user,
            operation: crate::auth::Operation::Create,
            resource: pods,
            subresource: Some("eviction"),
            namespace: Some(ns),
            name,
            old: None,
            dry_run: delete.dry_run,
            options: None,
        };
        let mut admitted = eviction.clone();
        self.admission.admit(&req, Some(&mut admitted))?;
        self.admission.validate(&req, Some(&admitted))?;

        let (pod, _) = self.get_raw(pods, Some(ns), name)?;
        if can_ignore_budget(&pod) {
            let mut opts = delete.clone();
            if !matches!(phase(&pod), "Succeeded" | "Failed")
                && !meta::is_deleting(&pod)
                && opts.precondition_rv.is_none()
            {
                opts.precondition_rv = meta::meta_str(&pod, "resourceVersion").map(str::to_string);
            }
            self.mark_and_delete(ns, name, &opts).await?;
            return Ok(success());
        }
        let budgets = self.budgets_of(ns, &pod)?;
        let mut opts = delete.clone();
        match budgets.as_slice() {
            [] => {}
            [_, _, ..] => {
                return Ok(Outcome {
                    code: 500,
                    body: json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "code": 500,
                        "message": "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."}),
                    warnings: vec![],
                })
            }
            [budget] => {
                let budget_name = meta::name(budget).to_string();
                let unhealthy_ok = !is_ready(&pod)
                    && (budget.pointer("/spec/unhealthyPodEvictionPolicy").and_then(Value::as_str)
                        == Some("AlwaysAllow")
                        || (int(budget, "/status/currentHealthy") >= int(budget, "/status/desiredHealthy")
                            && int(budget, "/status/desiredHealthy") > 0));
                if unhealthy_ok {
                    // Delete only the pod as it was judged: a changed pod is judged again.
                    if opts.precondition_rv.is_none() {
                        opts.precondition_rv = meta::meta_str(&pod, "resourceVersion").map(str::to_string);
                    }
                } else {
                    self.take_disruption(ns, name, &budget_name, delete.dry_run)?;
                }
            }
        }
        self.mark_and_delete(ns, name, &opts).await?;
        Ok(success())
    }

    /// The budgets in `ns` whose selector selects the pod (a budget without one selects nothing).
    fn budgets_of(&self, ns: &str, pod: &Value) -> ApiResult<Vec<Value>> {
        let info = by_kind("PodDisruptionBudget").expect("budgets are served");
        let (kvs, _) = self.store.list(&info.namespace_prefix(Some(ns))).map_err(ApiError::internal)?;
        let labels = pod.pointer("/metadata/labels").and_then(Value::as_object);
        let mut out = Vec::new();
        for kv in &kvs {
            let budget = decode_stored(kv)?;
            let Some(sel) = budget.pointer("/spec/selector").filter(|s| !s.is_null()) else { continue };
            if LabelSelector::from_json(sel).is_ok_and(|s| s.matches(labels)) {
                out.push(budget);
            }
        }
        Ok(out)
    }

    /// `checkAndDecrement`, retried on conflicts: the budget must allow a disruption, which this
    /// eviction takes.
    fn take_disruption(&self, ns: &str, pod: &str, budget: &str, dry_run: bool) -> ApiResult<()> {
        let info = by_kind("PodDisruptionBudget").expect("budgets are served");
        let key = info.key(Some(ns), budget);
        for _ in 0..20 {
            let Some(kv) = self.store.get(&key).map_err(ApiError::internal)? else {
                return Err(ApiError::not_found("policy", "poddisruptionbudgets", budget));
            };
            let mut pdb = decode_stored(&kv)?;
            if int(&pdb, "/status/observedGeneration") < meta::generation(&pdb) {
                return Err(too_many_requests(
                    format!("The disruption budget {budget} is still being processed by the server."),
                    10,
                ));
            }
            let allowed = int(&pdb, "/status/disruptionsAllowed");
            if allowed < 0 {
                return Err(forbidden_budget(
                    budget,
                    "pdb disruptions allowed is negative",
                    format!("The disruption budget {budget} does not allow evicting pods currently: pdb disruptions allowed is negative"),
                ));
            }
            let disrupted = pdb.pointer("/status/disruptedPods").and_then(Value::as_object).map_or(0, |m| m.len());
            if disrupted > MAX_DISRUPTED_PODS {
                return Err(forbidden_budget(
                    budget,
                    "DisruptedPods map too big - too many evictions not confirmed by PDB controller",
                    format!("The disruption budget {budget} does not allow evicting pods currently: too many pending evictions not confirmed by PDB controller"),
                ));
            }
            if allowed == 0 {
                return Err(too_many_requests(refusal(&pdb, budget), 0));
            }
            if dry_run {
                return Ok(());
            }
            let status = pdb["status"].as_object_mut().expect("a budget with allowed disruptions has a status");
            status.insert("disruptionsAllowed".into(), json!(allowed - 1));
            let disrupted = status.entry("disruptedPods").or_insert_with(|| json!({}));
            if !disrupted.is_object() {
                *disrupted = json!({});
            }
            disrupted[pod] = json!(meta::timestamp(meta::now()));
            if allowed - 1 == 0 {
                kaji_api::kinds::pod_disruption_budget::set_allowed_condition(&mut pdb, meta::timestamp(meta::now()));
            }
            match self.store.update(&key, &super::encode_for_store(&pdb)?, kv.mod_revision) {
                Ok(_) => return Ok(()),
                Err(crate::storage::Error::Conflict { .. }) => continue,
                Err(e) => return Err(ApiError::internal(e)),
            }
        }
        Err(ApiError::new(504, "Timeout", format!("couldn't update PodDisruptionBudget {budget:?} due to conflicts")))
    }

    /// `addConditionAndDeletePod`: the pod gets `DisruptionTarget` (EvictionByEvictionAPI), then is
    /// deleted with the eviction's options.
    async fn mark_and_delete(&self, ns: &str, name: &str, opts: &DeleteOptions) -> ApiResult<()> {
        let pods = by_kind("Pod").expect("pods are served");
        if !opts.dry_run {
            let (mut pod, _) = self.get_raw(pods, Some(ns), name)?;
            if let Some(uid) = &opts.precondition_uid {
                if meta::meta_str(&pod, "uid") != Some(uid.as_str()) {
                    let why = format!("the UID in the precondition ({uid}) does not match the UID in record ({}). The object might have been deleted and then recreated", meta::meta_str(&pod, "uid").unwrap_or(""));
                    return Err(ApiError::conflict("", "Pod", name, &why));
                }
            }
            if let Some(rv) = &opts.precondition_rv {
                if meta::meta_str(&pod, "resourceVersion") != Some(rv.as_str()) {
                    let why = format!("the ResourceVersion in the precondition ({rv}) does not match the ResourceVersion in record ({}). The object might have been modified", meta::meta_str(&pod, "resourceVersion").unwrap_or(""));
                    return Err(ApiError::conflict("", "Pod", name, &why));
                }
            }
            set_pod_condition(&mut pod, meta::timestamp(meta::now()));
            let write = WriteOptions { user: opts.user.clone(), ..Default::default() };
            let updated = self.update(pods, Some(ns), name, pod, Some(Subresource::Status), &write).await?;
            let mut opts = opts.clone();
            if opts.precondition_rv.is_some() {
                opts.precondition_rv = meta::meta_str(&updated.body, "resourceVersion").map(str::to_string);
            }
            self.delete(pods, Some(ns), name, &opts).await?;
            return Ok(());
        }
        self.delete(pods, Some(ns), name, opts).await?;
        Ok(())
    }
}

/// The 429's cause when a budget allows no disruption, in Kubernetes' order of explanations.
fn refusal(pdb: &Value, name: &str) -> String {
    let condition = pdb
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|cs| cs.iter().find(|c| c.get("type").and_then(Value::as_str) == Some("DisruptionAllowed")));
    let field = |k: &str| condition.and_then(|c| c.get(k)).and_then(Value::as_str).unwrap_or("");
    let failed = condition.is_some() && field("status") == "False" && !field("message").is_empty();
    let (current, desired) = (int(pdb, "/status/currentHealthy"), int(pdb, "/status/desiredHealthy"));
    if failed && field("reason") == "SyncFailed" {
        format!(
            "The disruption budget {name} does not allow evicting pods currently because it failed sync: {}",
            field("message")
        )
    } else if current <= desired {
        format!("The disruption budget {name} needs {desired} healthy pods and has {current} currently")
    } else if failed {
        format!(
            "The disruption budget {name} does not allow evicting pods currently ({}): {}",
            field("reason"),
            field("message")
        )
    } else {
        format!("The disruption budget {name} does not allow evicting pods currently")
    }
}

/// `podutil.UpdatePodCondition` with DisruptionTarget=True.
fn set_pod_condition(pod: &mut Value, now: String) {
    let wanted = json!({"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI",
        "message": "Eviction API: evicting", "lastTransitionTime": now});
    let Some(status) = pod.get_mut("status").and_then(Value::as_object_mut) else { return };
    let conditions = status.entry("conditions").or_insert_with(|| json!([]));
    let Some(list) = conditions.as_array_mut() else { return };
    match list.iter_mut().find(|c| c.get("type").and_then(Value::as_str) == Some("DisruptionTarget")) {
        Some(c) if c.get("status").and_then(Value::as_str) == Some("True") => {
            c["reason"] = wanted["reason"].clone();
            c["message"] = wanted["message"].clone();
        }
        Some(c) => *c = wanted,
        None => list.push(wanted),
    }
}
