//! Storage admission plugins: DefaultStorageClass (a claim that names no class gets the default
//! StorageClass).

use super::{Admission, AdmissionRequest, Operation};
use crate::http::errors::ApiResult;
use crate::storage::Store;
use kaji_api::table::is_default_class;
use serde_json::{json, Value};
use std::sync::Arc;

/// DefaultStorageClass: reads the StorageClasses from the store (there are few).
pub struct DefaultStorageClass {
    store: Arc<dyn Store>,
}

impl DefaultStorageClass {
    pub fn new(store: Arc<dyn Store>) -> Self {
        Self { store }
    }

    /// The default class's name: the newest `is-default-class` one (ties by name), if any.
    fn default_class(&self) -> ApiResult<Option<String>> {
        let classes = crate::admission::lookup::list(self.store.as_ref(), "StorageClass", None)?;
        Ok(crate::admission::lookup::newest_default(&classes, is_default_class))
    }
}

impl Admission for DefaultStorageClass {
    fn admit(&self, req: &AdmissionRequest<'_>, object: Option<&mut Value>) -> ApiResult<()> {
        if req.operation != Operation::Create
            || req.resource.kind != "PersistentVolumeClaim"
            || req.subresource.is_some()
        {
            return Ok(());
        }
        let Some(claim) = object else { return Ok(()) };
        // Only an absent class is defaulted; "" asks for no class at all.
        if claim.pointer("/spec/storageClassName").is_some_and(|c| !c.is_null()) {
            return Ok(());
        }
        if let Some(name) = self.default_class()? {
            if let Some(spec) = claim.get_mut("spec").and_then(Value::as_object_mut) {
                spec.insert("storageClassName".into(), json!(name));
            }
        }
        Ok(())
    }
}
