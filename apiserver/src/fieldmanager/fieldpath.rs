//! Field paths and field sets, and their FieldsV1 encoding (`f:name`, `k:{"name":"x"}`, `v:"a"`, `.`).

use serde_json::{Map, Value};
use std::collections::{BTreeMap, BTreeSet};

/// One step of a path into an object.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PathElement {
    Field(String),
    /// An item of a keyed list, by its key fields as canonical JSON (`{"name":"web"}`, fields sorted).
    Key(String),
    /// An item of a set-like list, by its value as JSON.
    Value(String),
}

pub type Path = Vec<PathElement>;

/// A set of paths; parents sort before their children, so a subtree is contiguous.
pub type FieldSet = BTreeSet<Path>;

impl PathElement {
    /// A key element from `(field, value)` pairs.
    pub fn key(mut fields: Vec<(&str, Value)>) -> Self {
        fields.sort_by(|a, b| a.0.cmp(b.0));
        let parts: Vec<String> = fields.iter().map(|(k, v)| format!("{}:{}", Value::from(*k), canonical(v))).collect();
        Self::Key(format!("{{{}}}", parts.join(",")))
    }

    pub fn value(v: &Value) -> Self {
        Self::Value(canonical(v))
    }

    /// The FieldsV1 key of this element.
    fn encode(&self) -> String {
        match self {
            Self::Field(f) => format!("f:{f}"),
            Self::Key(k) => format!("k:{k}"),
            Self::Value(v) => format!("v:{v}"),
        }
    }

    fn decode(s: &str) -> Result<Self, String> {
        if let Some(f) = s.strip_prefix("f:") {
            return Ok(Self::Field(f.to_string()));
        }
        if let Some(k) = s.strip_prefix("k:") {
            let Ok(Value::Object(m)) = serde_json::from_str::<Value>(k) else {
                return Err(format!("{s:?}: a key element must be a JSON object"));
            };
            return Ok(Self::key(m.iter().map(|(k, v)| (k.as_str(), v.clone())).collect()));
        }
        if let Some(v) = s.strip_prefix("v:") {
            let v: Value = serde_json::from_str(v).map_err(|e| format!("{s:?}: invalid value element: {e}"))?;
            return Ok(Self::value(&v));
        }
        Err(format!("{s:?}: unknown path element (expected f:, k: or v:)"))
    }

    /// Kubernetes' path notation: `.name`, `[name="web"]`, `[="a"]`.
    fn display(&self) -> String {
        match self {
            Self::Field(f) => format!(".{f}"),
            Self::Key(k) => match serde_json::from_str::<Value>(k) {
                Ok(Value::Object(m)) => {
                    let parts: Vec<String> = m.iter().map(|(k, v)| format!("{k}={v}")).collect();
                    format!("[{}]", parts.join(","))
                }
                _ => format!("[{k}]"),
            },
            Self::Value(v) => format!("[={v}]"),
        }
    }
}

/// JSON with object fields sorted, so equal values give equal strings.
pub fn canonical(v: &Value) -> String {
    match v {
        Value::Object(m) => {
            let mut fields: Vec<(&String, &Value)> = m.iter().collect();
            fields.sort_by(|a, b| a.0.cmp(b.0));
            let parts: Vec<String> =
                fields.iter().map(|(k, v)| format!("{}:{}", Value::from(k.as_str()), canonical(v))).collect();
            format!("{{{}}}", parts.join(","))
        }
        Value::Array(a) => format!("[{}]", a.iter().map(canonical).collect::<Vec<_>>().join(",")),
        other => other.to_string(),
    }
}

/// `.spec.containers[name="web"].image`
pub fn display(path: &[PathElement]) -> String {
    path.iter().map(PathElement::display).collect()
}

/// Does `set` hold a path strictly below `path`?
pub fn has_descendant(set: &FieldSet, path: &[PathElement]) -> bool {
    set.range(path.to_vec()..).find(|p| p.as_slice() != path).is_some_and(|p| p.starts_with(path))
}

#[derive(Default)]
struct Node {
    member: bool,
    children: BTreeMap<String, Node>,
}

impl Node {
    fn into_json(self) -> Value {
        let mut m = Map::new();
        if self.member && !self.children.is_empty() {
            m.insert(".".into(), Value::Object(Map::new()));
        }
        for (k, n) in self.children {
            m.insert(k, n.into_json());
        }
        Value::Object(m)
    }
}

/// The FieldsV1 tree of `set`.
pub fn to_fields_v1(set: &FieldSet) -> Value {
    let mut root = Node::default();
    for path in set.iter().filter(|p| !p.is_empty()) {
        let mut node = &mut root;
        for pe in path {
            node = node.children.entry(pe.encode()).or_default();
        }
        node.member = true;
    }
    root.into_json()
}

/// Parse a FieldsV1 tree.
pub fn from_fields_v1(v: &Value) -> Result<FieldSet, String> {
    let mut out = FieldSet::new();
    let mut path = Vec::new();
    walk_fields(v, &mut path, &mut out)?;
    Ok(out)
}

fn walk_fields(v: &Value, path: &mut Path, out: &mut FieldSet) -> Result<(), String> {
    let m = v.as_object().ok_or_else(|| format!("{}: each FieldsV1 node must be an object", display(path)))?;
    if !path.is_empty() && (m.is_empty() || m.contains_key(".")) {
        out.insert(path.clone());
    }
    for (k, child) in m {
        if k == "." {
            if !child.as_object().is_some_and(Map::is_empty) {
                return Err(format!("{}: the \".\" marker must be an empty object", display(path)));
            }
            continue;
        }
        path.push(PathElement::decode(k)?);
        walk_fields(child, path, out)?;
        path.pop();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn f(s: &str) -> PathElement {
        PathElement::Field(s.into())
    }

    #[test]
    fn sets_encode_as_kubernetes_fields_v1() {
        let web = PathElement::key(vec![("name", json!("web"))]);
        let c = vec![f("spec"), f("containers"), web.clone()];
        let set: FieldSet = [
            vec![f("metadata"), f("labels"), f("app")],
            c.clone(),
            [c.clone(), vec![f("image")]].concat(),
            [c.clone(), vec![f("name")]].concat(),
            vec![f("metadata"), f("finalizers"), PathElement::value(&json!("a"))],
        ]
        .into();
        let v = to_fields_v1(&set);
        assert_eq!(
            v,
            json!({"f:metadata": {"f:labels": {"f:app": {}}, "f:finalizers": {"v:\"a\"": {}}},
                   "f:spec": {"f:containers": {"k:{\"name\":\"web\"}": {".": {}, "f:image": {}, "f:name": {}}}}})
        );
        assert_eq!(from_fields_v1(&v).expect("parses"), set);
    }

    #[test]
    fn key_elements_sort_their_fields_and_print_like_kubernetes() {
        let k = PathElement::key(vec![("protocol", json!("TCP")), ("containerPort", json!(80))]);
        assert_eq!(k, PathElement::Key(r#"{"containerPort":80,"protocol":"TCP"}"#.into()));
        let p = vec![f("spec"), f("ports"), k, f("name")];
        assert_eq!(display(&p), r#".spec.ports[containerPort=80,protocol="TCP"].name"#);
        let reparsed = from_fields_v1(&json!({"f:a": {"k:{\"protocol\": \"TCP\", \"containerPort\": 80}": {}}}));
        assert_eq!(reparsed.expect("parses").into_iter().next().expect("one")[1], p[2]);
    }

    #[test]
    fn malformed_fields_v1_is_an_error() {
        assert!(from_fields_v1(&json!({"x:spec": {}})).is_err());
        assert!(from_fields_v1(&json!({"f:spec": 1})).is_err());
        assert!(from_fields_v1(&json!({"k:[1]": {}})).is_err());
        assert!(from_fields_v1(&json!({"f:a": {".": 3}})).is_err());
        assert!(from_fields_v1(&json!([])).is_err());
    }

    #[test]
    fn descendants_are_found_in_the_sorted_set() {
        let set: FieldSet = [vec![f("a")], vec![f("a"), f("b")], vec![f("c")]].into();
        assert!(has_descendant(&set, &[f("a")]));
        assert!(!has_descendant(&set, &[f("c")]));
        assert!(!has_descendant(&set, &[f("a"), f("b")]));
        let only_child: FieldSet = [vec![f("x"), f("y")]].into();
        assert!(has_descendant(&only_child, &[f("x")]));
    }
}
