//! What admission plugins read: objects of one kind straight from the store (plugins run on the
//! write path, so they see every committed write, as Kubernetes' listers nearly do).

use crate::http::errors::{ApiError, ApiResult};
use crate::registry::decode_stored;
use crate::storage::Store;
use kaji_api::resources::by_kind;
use serde_json::Value;

/// Every object of `kind` (in `namespace`, for namespaced kinds).
pub fn list(store: &dyn Store, kind: &str, namespace: Option<&str>) -> ApiResult<Vec<Value>> {
    let info = by_kind(kind).ok_or_else(|| ApiError::internal(format!("{kind} is not served")))?;
    let (kvs, _) = store.list(&info.namespace_prefix(namespace)).map_err(ApiError::internal)?;
    kvs.iter().map(decode_stored).collect()
}

/// One object of `kind` by name, if it exists.
pub fn get(store: &dyn Store, kind: &str, namespace: Option<&str>, name: &str) -> ApiResult<Option<Value>> {
    let info = by_kind(kind).ok_or_else(|| ApiError::internal(format!("{kind} is not served")))?;
    match store.get(&info.key(namespace, name)).map_err(ApiError::internal)? {
        Some(kv) => decode_stored(&kv).map(Some),
        None => Ok(None),
    }
}

/// The name of the newest of `objects` that `is_default` marks (ties by name) — how Kubernetes
/// picks among several default StorageClasses or IngressClasses.
pub fn newest_default(objects: &[Value], is_default: impl Fn(&Value) -> bool) -> Option<String> {
    let field =
        |o: &Value, k: &str| o.pointer(&format!("/metadata/{k}")).and_then(Value::as_str).unwrap_or("").to_owned();
    let mut defaults: Vec<(String, String)> =
        objects.iter().filter(|o| is_default(o)).map(|o| (field(o, "creationTimestamp"), field(o, "name"))).collect();
    defaults.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    defaults.into_iter().next().map(|(_, name)| name)
}

/// apimachinery's `utilerrors.NewAggregate(errs).Error()`: one error as itself, several in brackets.
pub fn aggregate(errs: &[String]) -> String {
    match errs {
        [one] => one.clone(),
        many => format!("[{}]", many.join(", ")),
    }
}
