//! Storage admission plugins: DefaultStorageClass (a claim that names no class gets the default
//! StorageClass).

use super::{Admission, AdmissionRequest, Operation};
use crate::http::errors::{ApiError, ApiResult};
use crate::registry::decode_stored;
use crate::storage::Store;
use kaji_api::resources::by_kind;
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
        let info = by_kind("StorageClass").expect("storage classes are served");
        let (kvs, _) = self.store.list(&info.key_prefix()).map_err(ApiError::internal)?;
        let mut defaults = Vec::new();
        for kv in &kvs {
            let sc = decode_stored(kv)?;
            if is_default_class(&sc) {
                let meta = sc.get("metadata");
                let field = |k: &str| meta.and_then(|m| m.get(k)).and_then(Value::as_str).unwrap_or("").to_string();
                defaults.push((field("creationTimestamp"), field("name")));
            }
        }
        defaults.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
        Ok(defaults.into_iter().next().map(|(_, name)| name))
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
