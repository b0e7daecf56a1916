//! Typed, defaulting reads from an object's JSON by dotted path.

use jiff::Timestamp;
use serde_json::{Map, Value};

/// Read-only path access into a JSON object; absent or mistyped fields read as empty.
#[derive(Clone, Copy)]
pub struct Obj<'a>(pub(crate) &'a Value);

static EMPTY_MAP: std::sync::LazyLock<Map<String, Value>> = std::sync::LazyLock::new(Map::new);

impl<'a> Obj<'a> {
    pub(crate) fn get(self, path: &str) -> Option<&'a Value> {
        path.split('.').try_fold(self.0, |v, key| v.get(key))
    }

    pub(crate) fn str(self, path: &str) -> &'a str {
        self.get(path).and_then(Value::as_str).unwrap_or("")
    }

    pub(crate) fn int(self, path: &str) -> i64 {
        self.int_or(path, 0)
    }

    pub(crate) fn int_or(self, path: &str, default: i64) -> i64 {
        self.get(path).and_then(Value::as_i64).unwrap_or(default)
    }

    pub(crate) fn bool(self, path: &str) -> bool {
        self.get(path).and_then(Value::as_bool).unwrap_or(false)
    }

    pub(crate) fn list(self, path: &str) -> &'a [Value] {
        self.get(path).and_then(Value::as_array).map_or(&[], Vec::as_slice)
    }

    pub(crate) fn map(self, path: &str) -> &'a Map<String, Value> {
        self.get(path).and_then(Value::as_object).unwrap_or(&EMPTY_MAP)
    }

    pub(crate) fn map_len(self, path: &str) -> usize {
        self.map(path).len()
    }

    pub(crate) fn time(self, path: &str) -> Option<Timestamp> {
        self.get(path).and_then(Value::as_str).and_then(|s| s.parse().ok())
    }

    /// The `status` of the first condition of `type_` in the list at `path`.
    pub(crate) fn condition(self, path: &str, type_: &str) -> Option<&'a str> {
        self.list(path).iter().find(|c| Obj(c).str("type") == type_).map(|c| Obj(c).str("status"))
    }
}

pub(crate) fn none_if_empty(s: &str) -> &str {
    if s.is_empty() {
        "<none>"
    } else {
        s
    }
}
