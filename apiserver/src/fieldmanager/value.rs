//! Objects as field sets: which paths an object sets, how two objects differ, how an applied
//! configuration merges into a live object, and how fields leave it.

use super::fieldpath::{display, has_descendant, FieldSet, Path, PathElement};
use super::schema::{is_atomic_map, is_system_field, item_element, item_elements, list_type, ListType};
use serde_json::{Map, Value};

/// The paths `obj` sets (leaves, list items, empty maps), without server-owned metadata. `strict`
/// refuses keyed lists with missing or duplicate keys; otherwise such a list counts as one field.
pub fn to_set(kind: &str, obj: &Value, strict: bool) -> Result<FieldSet, String> {
    let mut out = FieldSet::new();
    walk(kind, obj, &mut Vec::new(), &mut Vec::new(), &mut out, strict)?;
    out.remove(&vec![PathElement::Field("metadata".into())]);
    // An empty spec or status is the struct every object carries (`schema::zero_parts`), which
    // Kubernetes' typed objects omit from their field sets (omitempty): nobody owns it.
    for part in ["spec", "status"] {
        if obj.get(part).and_then(Value::as_object).is_some_and(Map::is_empty) {
            out.remove(&vec![PathElement::Field(part.into())]);
        }
    }
    Ok(out)
}

fn walk<'a>(
    kind: &str,
    v: &'a Value,
    path: &mut Path,
    names: &mut Vec<&'a str>,
    out: &mut FieldSet,
    strict: bool,
) -> Result<(), String> {
    match v {
        Value::Object(m) if !m.is_empty() && !is_atomic_map(kind, names) => {
            for (k, child) in m {
                if is_system_field(names, k) {
                    continue;
                }
                path.push(PathElement::Field(k.clone()));
                names.push(k);
                let r = walk(kind, child, path, names, out, strict);
                names.pop();
                path.pop();
                r?;
            }
        }
        Value::Array(items) if !items.is_empty() => {
            let lt = list_type(kind, names);
            let elements = match lt {
                ListType::Atomic => None,
                _ => match item_elements(&lt, items) {
                    Ok(e) => Some(e),
                    Err(e) if strict => return Err(format!("{}: {e}", display(path))),
                    Err(_) => None,
                },
            };
            let Some(elements) = elements else {
                out.insert(path.clone());
                return Ok(());
            };
            for (pe, item) in elements.into_iter().zip(items) {
                path.push(pe);
                out.insert(path.clone());
                let r = match lt {
                    ListType::Map(_) => walk(kind, item, path, names, out, strict),
                    _ => Ok(()),
                };
                path.pop();
                r?;
            }
        }
        _ if path.is_empty() => {}
        _ => {
            out.insert(path.clone());
        }
    }
    Ok(())
}

/// The value `path` names in `obj`.
pub fn value_at<'a>(kind: &str, obj: &'a Value, path: &[PathElement]) -> Option<&'a Value> {
    let mut names: Vec<&str> = Vec::new();
    let mut cur = obj;
    for pe in path {
        match pe {
            PathElement::Field(f) => {
                cur = cur.as_object()?.get(f)?;
                names.push(f);
            }
            _ => {
                let lt = list_type(kind, &names);
                cur = cur.as_array()?.iter().find(|i| item_element(&lt, i).ok().as_ref() == Some(pe))?;
            }
        }
    }
    Some(cur)
}

/// What changed between two versions of an object, as field sets.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Diff {
    pub modified: FieldSet,
    pub added: FieldSet,
    pub removed: FieldSet,
}

pub fn compare(kind: &str, old: &Value, new: &Value) -> Diff {
    let a = to_set(kind, old, false).unwrap_or_default();
    let b = to_set(kind, new, false).unwrap_or_default();
    let modified = a
        .intersection(&b)
        .filter(|p| !has_descendant(&a, p) && !has_descendant(&b, p))
        .filter(|p| value_at(kind, old, p) != value_at(kind, new, p))
        .cloned()
        .collect();
    Diff { modified, added: b.difference(&a).cloned().collect(), removed: a.difference(&b).cloned().collect() }
}

/// Merge an applied configuration into `live`: set fields win, keyed lists merge by key, atomic
/// lists and maps are replaced, and `null` removes a field.
pub fn merge(kind: &str, live: &Value, config: &Value) -> Result<Value, String> {
    merge_value(kind, &mut Vec::new(), Some(live), config)
}

fn merge_value<'c>(
    kind: &str,
    names: &mut Vec<&'c str>,
    live: Option<&Value>,
    cfg: &'c Value,
) -> Result<Value, String> {
    match cfg {
        Value::Object(c) if !is_atomic_map(kind, names) => {
            let mut out = live.and_then(Value::as_object).cloned().unwrap_or_default();
            for (k, cv) in c {
                if cv.is_null() {
                    out.remove(k);
                    continue;
                }
                names.push(k);
                let merged = merge_value(kind, names, out.get(k), cv);
                names.pop();
                out.insert(k.clone(), merged?);
            }
            Ok(Value::Object(out))
        }
        Value::Array(c) => {
            let lt = list_type(kind, names);
            if lt == ListType::Atomic {
                return Ok(without_nulls(cfg));
            }
            let where_ = || names.iter().map(|n| format!(".{n}")).collect::<String>();
            let c_pes = item_elements(&lt, c).map_err(|e| format!("{}: {e}", where_()))?;
            let live_items = live.and_then(Value::as_array).and_then(|l| Some((l, item_elements(&lt, l).ok()?)));
            let mut out = Vec::with_capacity(c.len());
            let mut seen: Vec<&PathElement> = Vec::new();
            if let Some((l, l_pes)) = &live_items {
                for (pe, item) in l_pes.iter().zip(l.iter()) {
                    seen.push(pe);
                    match c_pes.iter().position(|p| p == pe) {
                        Some(i) if matches!(lt, ListType::Map(_)) => {
                            out.push(merge_value(kind, names, Some(item), &c[i])?)
                        }
                        _ => out.push(item.clone()),
                    }
                }
            }
            for (pe, item) in c_pes.iter().zip(c) {
                if !seen.contains(&pe) {
                    out.push(merge_value(kind, names, None, item)?);
                }
            }
            Ok(Value::Array(out))
        }
        other => Ok(without_nulls(other)),
    }
}

fn without_nulls(v: &Value) -> Value {
    match v {
        Value::Object(m) => {
            Value::Object(m.iter().filter(|(_, v)| !v.is_null()).map(|(k, v)| (k.clone(), without_nulls(v))).collect())
        }
        Value::Array(a) => Value::Array(a.iter().map(without_nulls).collect()),
        other => other.clone(),
    }
}

/// Remove the fields in `remove` from `obj`, except those in `keep` or with a descendant there, and the
/// key fields of list items that stay. Maps and lists emptied by a removal go too.
pub fn prune(kind: &str, obj: &mut Value, remove: &FieldSet, keep: &FieldSet) {
    for p in remove.iter().rev() {
        if p.is_empty() || keep.contains(p) || has_descendant(keep, p) || is_key_field(kind, p) {
            continue;
        }
        remove_at(kind, obj, p, &mut Vec::new());
    }
}

/// Is `p` a key field of a keyed list item (`...containers[name="a"].name`)?
fn is_key_field(kind: &str, p: &[PathElement]) -> bool {
    let [parents @ .., PathElement::Key(_), PathElement::Field(f)] = p else { return false };
    let names: Vec<&str> = parents
        .iter()
        .filter_map(|pe| match pe {
            PathElement::Field(f) => Some(f.as_str()),
            _ => None,
        })
        .collect();
    matches!(list_type(kind, &names), ListType::Map(keys) if keys.iter().any(|(k, _)| *k == f.as_str()))
}

fn remove_at<'p>(kind: &str, v: &mut Value, path: &'p [PathElement], names: &mut Vec<&'p str>) -> bool {
    let Some((first, rest)) = path.split_first() else { return false };
    match first {
        PathElement::Field(f) => {
            let Some(m) = v.as_object_mut() else { return false };
            if rest.is_empty() {
                return m.remove(f).is_some();
            }
            let Some(child) = m.get_mut(f) else { return false };
            names.push(f);
            let removed = remove_at(kind, child, rest, names);
            names.pop();
            if removed && is_empty_container(child) {
                m.remove(f);
            }
            removed
        }
        _ => {
            let lt = list_type(kind, names);
            let Some(items) = v.as_array_mut() else { return false };
            let Some(i) = items.iter().position(|it| item_element(&lt, it).ok().as_ref() == Some(first)) else {
                return false;
            };
            if rest.is_empty() {
                items.remove(i);
                return true;
            }
            remove_at(kind, &mut items[i], rest, names)
        }
    }
}

fn is_empty_container(v: &Value) -> bool {
    v.as_object().is_some_and(Map::is_empty) || v.as_array().is_some_and(Vec::is_empty)
}

#[cfg(test)]
mod tests {
    use super::super::fieldpath::to_fields_v1;
    use super::*;
    use serde_json::json;

    fn deployment() -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
               "metadata": {"name": "web", "namespace": "default", "uid": "u", "labels": {"app": "web"}},
               "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                        "template": {"spec": {"containers": [{"name": "web", "image": "nginx:1.25",
                            "env": [{"name": "A", "value": "1"}], "ports": [{"containerPort": 80}]}]}}}})
    }

    #[test]
    fn an_object_becomes_kubernetes_fields_v1_without_server_fields() {
        let set = to_set("Deployment", &deployment(), true).expect("valid");
        assert_eq!(
            to_fields_v1(&set),
            json!({"f:metadata": {"f:labels": {"f:app": {}}},
                   "f:spec": {"f:replicas": {}, "f:selector": {},
                              "f:template": {"f:spec": {"f:containers": {"k:{\"name\":\"web\"}": {
                                  ".": {}, "f:name": {}, "f:image": {},
                                  "f:env": {"k:{\"name\":\"A\"}": {".": {}, "f:name": {}, "f:value": {}}},
                                  "f:ports": {"k:{\"containerPort\":80,\"protocol\":\"TCP\"}": {
                                      ".": {}, "f:containerPort": {}}}}}}}}})
        );
    }

    #[test]
    fn merging_keeps_live_items_and_appends_new_ones_in_order() {
        let cfg = json!({"spec": {"replicas": null, "template": {"spec": {"containers": [
            {"name": "side", "image": "busybox"},
            {"name": "web", "image": "nginx:1.26", "env": [{"name": "B", "value": "2"}]}]}}}});
        let out = merge("Deployment", &deployment(), &cfg).expect("merges");
        let c = &out["spec"]["template"]["spec"]["containers"];
        assert_eq!(c[0]["image"], "nginx:1.26");
        assert_eq!(c[0]["env"], json!([{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]));
        assert_eq!(c[1]["name"], "side");
        assert!(out["spec"].get("replicas").is_none(), "null removes");
        let bad = json!({"spec": {"template": {"spec": {"containers": [{"image": "x"}]}}}});
        assert!(merge("Deployment", &deployment(), &bad).expect_err("no key").contains("omits key field"));
    }

    #[test]
    fn atomic_maps_and_lists_are_replaced() {
        let cfg = json!({"spec": {"selector": {"matchLabels": {"tier": "x"}}}});
        let out = merge("Deployment", &deployment(), &cfg).expect("merges");
        assert_eq!(out["spec"]["selector"], json!({"matchLabels": {"tier": "x"}}));
    }

    #[test]
    fn compare_reports_changed_leaves_only() {
        let mut new = deployment();
        new["spec"]["replicas"] = 3.into();
        new["spec"]["template"]["spec"]["containers"][0]["env"] = json!([{"name": "B", "value": "2"}]);
        let d = compare("Deployment", &deployment(), &new);
        let show = |s: &FieldSet| s.iter().map(|p| display(p)).collect::<Vec<_>>();
        assert_eq!(show(&d.modified), [".spec.replicas"]);
        let c = r#".spec.template.spec.containers[name="web"].env"#;
        assert_eq!(
            show(&d.added),
            [format!("{c}[name=\"B\"]"), format!("{c}[name=\"B\"].name"), format!("{c}[name=\"B\"].value")]
        );
        assert_eq!(d.removed.len(), 3);
    }

    #[test]
    fn pruning_removes_items_and_fields_but_keeps_what_others_own() {
        let set = to_set("Deployment", &deployment(), true).expect("valid");
        let env_a: Path = set.iter().find(|p| display(p).ends_with(r#".env[name="A"]"#)).expect("env A").clone();
        let image: Path = set.iter().find(|p| display(p).ends_with(".image")).expect("image").clone();
        let labels = set.iter().find(|p| display(p) == ".metadata.labels.app").expect("label").clone();
        let value_a = [env_a.clone(), vec![PathElement::Field("value".into())]].concat();
        let name_a = [env_a.clone(), vec![PathElement::Field("name".into())]].concat();
        let remove: FieldSet = [env_a.clone(), name_a, value_a, image.clone(), labels].into();
        let mut obj = deployment();
        prune("Deployment", &mut obj, &remove, &FieldSet::new());
        let c = &obj["spec"]["template"]["spec"]["containers"][0];
        assert!(c.get("env").is_none() && c.get("image").is_none(), "{c}");
        assert!(obj["metadata"].get("labels").is_none(), "emptied maps go");
        // Someone else owns env A's value: the item and its key stay.
        let mut obj = deployment();
        let keep: FieldSet = [[env_a.clone(), vec![PathElement::Field("value".into())]].concat()].into();
        prune("Deployment", &mut obj, &remove, &keep);
        assert_eq!(obj["spec"]["template"]["spec"]["containers"][0]["env"], json!([{"name": "A", "value": "1"}]));
    }
}
