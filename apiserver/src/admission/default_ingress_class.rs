//! DefaultIngressClass: an Ingress created without a class gets the default IngressClass.

use super::lookup::{list, newest_default};
use crate::auth::{Admission, AdmissionRequest, Operation};
use crate::http::errors::ApiResult;
use crate::storage::Store;
use kaji_api::kinds::ingress_class::DEFAULT_CLASS_ANNOTATION;
use serde_json::{json, Value};
use std::sync::Arc;

pub const NAME: &str = "DefaultIngressClass";

/// The legacy annotation that names a class instead of the field.
const LEGACY_CLASS_ANNOTATION: &str = "kubernetes.io/ingress.class";

pub struct DefaultIngressClass {
    pub store: Arc<dyn Store>,
}

impl Admission for DefaultIngressClass {
    fn admit(&self, req: &AdmissionRequest<'_>, object: Option<&mut Value>) -> ApiResult<()> {
        if req.resource.kind != "Ingress" || req.operation != Operation::Create || req.subresource.is_some() {
            return Ok(());
        }
        let Some(ing) = object else { return Ok(()) };
        if ing.pointer("/spec/ingressClassName").is_some_and(|c| !c.is_null())
            || ing.pointer("/metadata/annotations").and_then(|a| a.get(LEGACY_CLASS_ANNOTATION)).is_some()
        {
            return Ok(());
        }
        // The newest default class wins (ties by name), as Kubernetes chooses since 1.30.
        let classes = list(self.store.as_ref(), "IngressClass", None)?;
        let default = newest_default(&classes, |c| {
            c.pointer("/metadata/annotations").and_then(|a| a.get(DEFAULT_CLASS_ANNOTATION)).and_then(Value::as_str)
                == Some("true")
        });
        if let (Some(name), Some(spec)) = (default, ing.get_mut("spec").and_then(Value::as_object_mut)) {
            spec.insert("ingressClassName".into(), json!(name));
        }
        Ok(())
    }
}
