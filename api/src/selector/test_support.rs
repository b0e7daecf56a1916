//! Helpers shared by the selector tests.

use serde_json::{Map, Value};

use super::LabelSelector;

pub(super) fn labels(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

pub(super) fn selects(selector: &str, l: Value) -> bool {
    let sel = LabelSelector::parse(selector).expect("test selector parses");
    sel.matches(Some(&labels(l)))
}
