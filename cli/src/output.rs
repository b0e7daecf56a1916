//! Objects printed as `-o json|yaml|name`, and writing to stdout without failing on a closed
//! pipe (`kaji get pods | head`).

use anyhow::Result;
use serde::Serialize;
use serde_json::{json, Value};
use std::io::Write as _;

/// `-o` values (the default is the server's Table).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Wide,
    Json,
    Yaml,
    Name,
}

/// kubectl's JSON: four-space indentation, a final newline.
pub fn json(v: &Value) -> String {
    let mut buf = Vec::new();
    let mut ser =
        serde_json::Serializer::with_formatter(&mut buf, serde_json::ser::PrettyFormatter::with_indent(b"    "));
    // Serializing a Value into memory cannot fail.
    v.serialize(&mut ser).expect("a JSON value serializes");
    let mut s = String::from_utf8(buf).expect("serde_json writes UTF-8");
    s.push('\n');
    s
}

pub fn yaml(v: &Value) -> Result<String> {
    Ok(serde_saphyr::to_string(v)?)
}

/// Several objects as kubectl returns them: a `v1` `List`.
pub fn list(items: Vec<Value>) -> Value {
    json!({"apiVersion": "v1", "kind": "List", "items": items, "metadata": {"resourceVersion": ""}})
}

/// `deployment.apps/web`.
pub fn name(qualified_kind: &str, obj: &Value) -> String {
    format!("{qualified_kind}/{}", obj["metadata"]["name"].as_str().unwrap_or(""))
}

/// Items of a list response carry no apiVersion/kind; kubectl adds them back.
pub fn with_type(mut obj: Value, api_version: &str, kind: &str) -> Value {
    if let Some(m) = obj.as_object_mut() {
        m.entry("apiVersion").or_insert_with(|| api_version.into());
        m.entry("kind").or_insert_with(|| kind.into());
    }
    obj
}

/// `metadata.managedFields` left out, as kubectl prints objects unless `--show-managed-fields`:
/// they are the server's bookkeeping, and a manifest saved from `get -o yaml` should not carry them.
pub fn without_managed_fields(mut obj: Value) -> Value {
    if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("managedFields");
    }
    obj
}

/// Writes to stdout; a reader that went away is not an error.
pub fn emit(text: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_is_indented_four_spaces_like_kubectl() {
        assert_eq!(json(&json!({"a": {"b": 1}})), "{\n    \"a\": {\n        \"b\": 1\n    }\n}\n");
    }

    #[test]
    fn yaml_round_trips() {
        let v = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "labels": {"a": "1"}},
                       "data": {"multi": "line one\nline two\n", "n": "007", "t": "true"}});
        let text = yaml(&v).expect("yaml");
        assert!(text.contains("kind: ConfigMap"), "{text}");
        let back: Value = serde_saphyr::from_str(&text).expect("parses back");
        assert_eq!(back, v);
    }

    #[test]
    fn managed_fields_are_left_out() {
        let obj = json!({"metadata": {"name": "a", "managedFields": [{"manager": "kubectl"}]}, "spec": {}});
        assert_eq!(without_managed_fields(obj), json!({"metadata": {"name": "a"}, "spec": {}}));
        assert_eq!(without_managed_fields(json!({"kind": "X"})), json!({"kind": "X"}));
    }

    #[test]
    fn list_items_get_their_type_back() {
        let item = with_type(json!({"metadata": {"name": "web"}}), "apps/v1", "Deployment");
        assert_eq!(name("deployment.apps", &item), "deployment.apps/web");
        let l = list(vec![item]);
        assert_eq!(l["items"][0]["kind"], "Deployment");
        assert_eq!(l["kind"], "List");
    }
}
