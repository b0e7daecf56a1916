//! RuntimeClass: a pod that names a RuntimeClass gets its overhead and scheduling constraints,
//! and a pod naming a class that does not exist is refused.

use super::lookup::get;
use crate::auth::authz::message::resource_forbidden;
use crate::auth::{Admission, AdmissionRequest, Operation};
use crate::http::errors::{ApiError, ApiResult};
use crate::storage::Store;
use serde_json::{json, Value};
use std::sync::Arc;

pub const NAME: &str = "RuntimeClass";

pub struct RuntimeClass {
    pub store: Arc<dyn Store>,
}

impl RuntimeClass {
    /// The class a pod create names (None: the pod names none or this is not a pod create).
    fn class(&self, req: &AdmissionRequest<'_>, pod: &Value) -> ApiResult<Option<Value>> {
        if req.resource.kind != "Pod" || req.operation != Operation::Create || req.subresource.is_some() {
            return Ok(None);
        }
        let Some(name) = pod.pointer("/spec/runtimeClassName").and_then(Value::as_str).filter(|n| !n.is_empty()) else {
            return Ok(None);
        };
        match get(self.store.as_ref(), "RuntimeClass", None, name)? {
            Some(c) => Ok(Some(c)),
            None => Err(forbid(req, format!("pod rejected: RuntimeClass {name:?} not found"))),
        }
    }
}

fn forbid(req: &AdmissionRequest<'_>, why: String) -> ApiError {
    resource_forbidden(req.resource.group, req.resource.plural, req.name, &why)
}

fn has_overhead(pod: &Value) -> bool {
    pod.pointer("/spec/overhead").and_then(Value::as_object).is_some_and(|o| !o.is_empty())
}

impl Admission for RuntimeClass {
    fn admit(&self, req: &AdmissionRequest<'_>, object: Option<&mut Value>) -> ApiResult<()> {
        let Some(pod) = object else { return Ok(()) };
        let Some(class) = self.class(req, pod)? else { return Ok(()) };
        let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) else { return Ok(()) };
        // setOverhead: the class's overhead, which a pod may only repeat.
        if let Some(fixed) = class.pointer("/overhead/podFixed").filter(|f| f.is_object()) {
            let given = spec.get("overhead").filter(|o| o.as_object().is_some_and(|m| !m.is_empty()));
            if given.is_some_and(|g| !same_quantities(g, fixed)) {
                return Err(forbid(
                    req,
                    "pod rejected: Pod's Overhead doesn't match RuntimeClass's defined Overhead".into(),
                ));
            }
            spec.insert("overhead".into(), fixed.clone());
        }
        // setScheduling: the class's node selector (no conflicts) and its tolerations.
        if let Some(sched) = class.get("scheduling").filter(|s| s.is_object()) {
            if let Some(sel) = sched.get("nodeSelector").and_then(Value::as_object) {
                let slot = spec.entry("nodeSelector").or_insert_with(|| json!({}));
                if slot.is_null() {
                    *slot = json!({});
                }
                let pod_sel = slot.as_object_mut().expect("an object");
                for (k, v) in sel {
                    match pod_sel.get(k) {
                        Some(p) if p != v => {
                            let show = |x: &Value| x.as_str().unwrap_or("").to_owned();
                            return Err(forbid(
                                req,
                                format!(
                                    "conflict: runtimeClass.scheduling.nodeSelector[{k}] = {}; pod.spec.nodeSelector[{k}] = {}",
                                    show(v),
                                    show(p)
                                ),
                            ));
                        }
                        _ => {
                            pod_sel.insert(k.clone(), v.clone());
                        }
                    }
                }
            }
            if let Some(tols) = sched.get("tolerations").and_then(Value::as_array) {
                let slot = spec.entry("tolerations").or_insert_with(|| json!([]));
                if slot.is_null() {
                    *slot = json!([]);
                }
                let list = slot.as_array_mut().expect("an array");
                for t in tols {
                    if !list.contains(t) {
                        list.push(t.clone());
                    }
                }
            }
        }
        Ok(())
    }

    fn validate(&self, req: &AdmissionRequest<'_>, object: Option<&Value>) -> ApiResult<()> {
        let Some(pod) = object else { return Ok(()) };
        if req.resource.kind != "Pod" || req.operation != Operation::Create || req.subresource.is_some() {
            return Ok(());
        }
        // Only a pod that carries an overhead needs its class looked at again (admit already
        // refused a missing class).
        if !has_overhead(pod) {
            return Ok(());
        }
        let class = self.class(req, pod)?;
        let class_overhead = class.as_ref().and_then(|c| c.pointer("/overhead/podFixed")).is_some_and(Value::is_object);
        if !class_overhead {
            return Err(forbid(
                req,
                "pod rejected: Pod Overhead set without corresponding RuntimeClass defined Overhead".into(),
            ));
        }
        Ok(())
    }
}

/// Two resource lists with the same quantities (`1` and `1000m` alike).
fn same_quantities(a: &Value, b: &Value) -> bool {
    let (Some(a), Some(b)) = (a.as_object(), b.as_object()) else { return false };
    a.len() == b.len()
        && a.iter().all(|(k, v)| {
            let q = |x: &Value| x.as_str().and_then(kaji_api::validation::parse_quantity);
            b.get(k).is_some_and(|w| q(v).is_some() && q(v) == q(w))
        })
}
