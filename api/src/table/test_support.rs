//! Helpers shared by the table tests.

use jiff::Timestamp;
use serde_json::Value;

use super::cells;

pub(super) fn now() -> Timestamp {
    "2025-01-01T12:00:00Z".parse().expect("valid timestamp")
}

pub(super) fn cell_strings(kind: &str, obj: &Value) -> Vec<String> {
    cells(kind, obj, now())
        .into_iter()
        .map(|c| match c {
            Value::String(s) => s,
            other => other.to_string(),
        })
        .collect()
}
