//! Priority: a pod's `priority` and `preemptionPolicy` come from its PriorityClass (or the global
//! default class), and only one class may be the global default.

use super::lookup::{get, list};
use crate::auth::authz::message::resource_forbidden;
use crate::auth::{Admission, AdmissionRequest, Operation};
use crate::http::errors::ApiResult;
use crate::storage::Store;
use kaji_api::kinds::priority_class::SYSTEM_CLASSES;
use serde_json::{json, Value};
use std::sync::Arc;

pub const NAME: &str = "Priority";

pub struct Priority {
    pub store: Arc<dyn Store>,
}

/// (class name, value, preemption policy) a pod gets.
type Resolved = (String, i64, String);

fn resolved(class: &Value) -> Resolved {
    (
        class.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("").to_owned(),
        class.get("value").and_then(Value::as_i64).unwrap_or(0),
        class.get("preemptionPolicy").and_then(Value::as_str).unwrap_or("PreemptLowerPriority").to_owned(),
    )
}

impl Priority {
    /// `getDefaultPriority`: the global default class with the lowest value, else none and 0.
    fn default_priority(&self) -> ApiResult<Resolved> {
        let classes = list(self.store.as_ref(), "PriorityClass", None)?;
        let default = classes
            .iter()
            .filter(|c| c.get("globalDefault").and_then(Value::as_bool) == Some(true))
            .map(resolved)
            .min_by_key(|r| r.1);
        Ok(default.unwrap_or_else(|| (String::new(), 0, "PreemptLowerPriority".to_owned())))
    }

    fn class(&self, name: &str) -> ApiResult<Option<Resolved>> {
        if let Some(c) = get(self.store.as_ref(), "PriorityClass", None, name)? {
            return Ok(Some(resolved(&c)));
        }
        // The system classes resolve even before the apiserver has written them.
        Ok(SYSTEM_CLASSES
            .iter()
            .find(|(n, _, _)| *n == name)
            .map(|(n, v, _)| ((*n).to_owned(), *v, "PreemptLowerPriority".to_owned())))
    }
}

impl Admission for Priority {
    fn admit(&self, req: &AdmissionRequest<'_>, object: Option<&mut Value>) -> ApiResult<()> {
        if req.resource.kind != "Pod" || req.operation != Operation::Create || req.subresource.is_some() {
            return Ok(());
        }
        let Some(pod) = object else { return Ok(()) };
        let forbid = |why: String| resource_forbidden(req.resource.group, req.resource.plural, req.name, &why);
        let name = pod.pointer("/spec/priorityClassName").and_then(Value::as_str).unwrap_or("").to_owned();
        let (class, value, policy) = if name.is_empty() {
            self.default_priority()?
        } else {
            self.class(&name)?.ok_or_else(|| forbid(format!("no PriorityClass with name {name} was found")))?
        };
        let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) else { return Ok(()) };
        if let Some(given) = spec.get("priority").and_then(Value::as_i64) {
            if given != value {
                return Err(forbid(format!(
                    "the integer value of priority ({given}) must not be provided in pod spec; priority admission controller computed {value} from the given PriorityClass name"
                )));
            }
        }
        if let Some(given) = spec.get("preemptionPolicy").and_then(Value::as_str) {
            if given != policy {
                return Err(forbid(format!(
                    "the string value of PreemptionPolicy ({given}) must not be provided in pod spec; priority admission controller computed {policy} from the given PriorityClass name"
                )));
            }
        }
        if !class.is_empty() {
            spec.insert("priorityClassName".into(), json!(class));
        }
        spec.insert("priority".into(), json!(value));
        spec.insert("preemptionPolicy".into(), json!(policy));
        Ok(())
    }

    fn validate(&self, req: &AdmissionRequest<'_>, object: Option<&Value>) -> ApiResult<()> {
        if req.resource.kind != "PriorityClass" || req.subresource.is_some() {
            return Ok(());
        }
        let Some(pc) = object.filter(|pc| pc.get("globalDefault").and_then(Value::as_bool) == Some(true)) else {
            return Ok(());
        };
        let me = pc.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("");
        for other in list(self.store.as_ref(), "PriorityClass", None)? {
            let (name, _, _) = resolved(&other);
            if name != me && other.get("globalDefault").and_then(Value::as_bool) == Some(true) {
                return Err(resource_forbidden(
                    req.resource.group,
                    req.resource.plural,
                    req.name,
                    &format!("PriorityClass {name} is already marked as default. Only one default can exist"),
                ));
            }
        }
        Ok(())
    }
}
