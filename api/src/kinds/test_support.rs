//! What the kinds' tests share: the full create/update path of the api crate for one object.

use serde_json::Value;

use crate::validation::Cause;

/// The object after `apply_defaults`.
pub(super) fn defaulted(kind: &str, mut obj: Value) -> Value {
    crate::defaults::apply_defaults(kind, &mut obj);
    obj
}

/// Causes of creating `obj` (defaulted first, as the apiserver does).
pub(super) fn create_causes(kind: &str, obj: &Value) -> Vec<Cause> {
    crate::validation::validate_create(kind, &defaulted(kind, obj.clone()))
}

/// Causes of updating `old` to `new` (both defaulted).
pub(super) fn update_causes(kind: &str, new: &Value, old: &Value) -> Vec<Cause> {
    crate::validation::validate_update(kind, &defaulted(kind, new.clone()), &defaulted(kind, old.clone()))
}

/// Causes of a status write from `old` to `new`.
pub(super) fn status_causes(kind: &str, new: &Value, old: &Value) -> Vec<Cause> {
    crate::validation::validate_status_update(kind, new, old)
}

pub(super) fn fields(causes: &[Cause]) -> Vec<&str> {
    causes.iter().map(|c| c.field.as_str()).collect()
}

/// The Table cells kubectl would print for `obj`.
pub(super) fn cells(kind: &str, obj: &Value) -> Vec<Value> {
    crate::table::cells(kind, obj, jiff::Timestamp::UNIX_EPOCH)
}
