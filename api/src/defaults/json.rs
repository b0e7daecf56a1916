//! In-place JSON helpers for defaulting: set a field only when it is unset.

use serde_json::{json, Map, Value};

pub(crate) fn is_unset(v: Option<&Value>) -> bool {
    matches!(v, None | Some(Value::Null))
}

/// The object at `key`, created when missing or null; `None` when `v` is not an object or the
/// field holds something else.
pub(crate) fn child<'a>(v: &'a mut Value, key: &str) -> Option<&'a mut Map<String, Value>> {
    let m = v.as_object_mut()?;
    child_of(m, key)
}

pub(crate) fn child_of<'a>(m: &'a mut Map<String, Value>, key: &str) -> Option<&'a mut Map<String, Value>> {
    let slot = m.entry(key.to_string()).or_insert(Value::Null);
    if slot.is_null() {
        *slot = Value::Object(Map::new());
    }
    slot.as_object_mut()
}

/// The elements of the array at `key` (nothing when absent or not an array).
pub(crate) fn items<'a>(v: &'a mut Value, key: &str) -> impl Iterator<Item = &'a mut Value> {
    v.get_mut(key).and_then(Value::as_array_mut).into_iter().flatten()
}

pub(crate) fn with_map(v: &mut Value, f: impl FnOnce(&mut Map<String, Value>)) {
    if let Some(m) = v.as_object_mut() {
        f(m);
    }
}

pub(crate) fn default_value(m: &mut Map<String, Value>, key: &str, value: Value) {
    if is_unset(m.get(key)) {
        m.insert(key.to_string(), value);
    }
}

/// Go string fields: unset when missing, null or empty.
pub(crate) fn default_str(m: &mut Map<String, Value>, key: &str, value: &str) {
    if m.get(key).and_then(Value::as_str).is_none_or(str::is_empty) {
        m.insert(key.to_string(), json!(value));
    }
}

/// Go non-pointer integer fields: unset when missing, null or zero.
pub(crate) fn default_nonzero(m: &mut Map<String, Value>, key: &str, value: i64) {
    if m.get(key).and_then(Value::as_i64).is_none_or(|n| n == 0) {
        m.insert(key.to_string(), json!(value));
    }
}

pub(crate) fn get_str<'a>(m: &'a Map<String, Value>, key: &str) -> &'a str {
    m.get(key).and_then(Value::as_str).unwrap_or("")
}
