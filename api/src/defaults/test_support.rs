//! Helpers shared by the defaulting tests.

use serde_json::Value;

use super::apply_defaults;

pub(super) fn defaulted(kind: &str, mut v: Value) -> Value {
    apply_defaults(kind, &mut v);
    v
}
