//! Strategic merge patch for the built-in kinds: lists merge by Kubernetes' patch merge keys,
//! with the directives `$patch`, `$setElementOrder/`, `$retainKeys`, `$deleteFromPrimitiveList/`.

use serde_json::{Map, Value};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatchError {
    #[error("the strategic merge patch must be a JSON object")]
    NotAnObject,
    #[error("invalid $patch directive {0:?} at {1}")]
    BadDirective(String, String),
    #[error("{0}: elements of a list merged by {1:?} must be objects")]
    NotAMap(String, &'static str),
}

/// How a list field is patched (Kubernetes' patchStrategy/patchMergeKey struct tags).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListStrategy {
    /// The patch's list replaces the original (no patchStrategy).
    Replace,
    /// Elements are objects matched by this key; matches merge, others are added.
    MergeByKey(&'static str),
    /// A list of scalars merged as a set (e.g. metadata.finalizers).
    MergePrimitives,
}

/// The strategy for the list at `path` (field names from the object root, no indices).
pub fn list_strategy(kind: &str, path: &[&str]) -> ListStrategy {
    use ListStrategy::*;
    let Some((field, parents)) = path.split_last() else { return Replace };
    let parent = parents.last().copied().unwrap_or("");
    // Is `parents` a PodSpec (pod spec, or a workload template's)?
    let in_pod_spec = matches!(parents, ["spec"] if kind == "Pod") || parents.ends_with(&["template", "spec"]);
    let in_container = parents.len() >= 2
        && matches!(parents[parents.len() - 1], "containers" | "initContainers" | "ephemeralContainers")
        && (matches!(&parents[..parents.len() - 1], ["spec"] if kind == "Pod")
            || parents[..parents.len() - 1].ends_with(&["template", "spec"]));
    match *field {
        "finalizers" if parent == "metadata" => MergePrimitives,
        "ownerReferences" if parent == "metadata" => MergeByKey("uid"),
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "volumes"
        | "imagePullSecrets"
        | "schedulingGates"
        | "resourceClaims"
            if in_pod_spec =>
        {
            MergeByKey("name")
        }
        "hostAliases" if in_pod_spec => MergeByKey("ip"),
        "topologySpreadConstraints" if in_pod_spec => MergeByKey("topologyKey"),
        "ports" if in_container => MergeByKey("containerPort"),
        "env" if in_container => MergeByKey("name"),
        "volumeMounts" if in_container => MergeByKey("mountPath"),
        "volumeDevices" if in_container => MergeByKey("devicePath"),
        "ports" if kind == "Service" && parents == ["spec"] => MergeByKey("port"),
        "conditions" if parent == "status" => MergeByKey("type"),
        "addresses" if kind == "Node" && parents == ["status"] => MergeByKey("type"),
        "podCIDRs" if kind == "Node" && parents == ["spec"] => MergePrimitives,
        _ => Replace,
    }
}

/// Apply a strategic merge patch to `original` (an object of `kind`).
pub fn apply(kind: &str, original: &Value, patch: &Value) -> Result<Value, PatchError> {
    let (Some(o), Some(p)) = (original.as_object(), patch.as_object()) else {
        return Err(PatchError::NotAnObject);
    };
    let mut path = Vec::new();
    Ok(merge_map(kind, o, p, &mut path)?.map(Value::Object).unwrap_or(Value::Object(Map::new())))
}

fn dotted(path: &[&str]) -> String {
    path.join(".")
}

/// Merge `patch` into `orig`; None means the map itself is deleted (`$patch: delete`).
fn merge_map<'a>(
    kind: &str,
    orig: &Map<String, Value>,
    patch: &'a Map<String, Value>,
    path: &mut Vec<&'a str>,
) -> Result<Option<Map<String, Value>>, PatchError> {
    match patch.get("$patch").and_then(Value::as_str) {
        None | Some("merge") => {}
        Some("replace") => return Ok(Some(strip_directives(patch))),
        Some("delete") => return Ok(None),
        Some(other) => return Err(PatchError::BadDirective(other.to_string(), dotted(path))),
    }
    let mut out = orig.clone();
    for (k, v) in patch {
        if k.starts_with('$') {
            continue;
        }
        path.push(k.as_str());
        let merged = match (out.get(k), v) {
            (_, Value::Null) => None,
            (Some(Value::Object(o)), Value::Object(p)) => merge_map(kind, o, p, path)?.map(Value::Object),
            (_, Value::Object(p)) => match p.get("$patch").and_then(Value::as_str) {
                Some("delete") => None,
                _ => Some(Value::Object(strip_directives_deep(p))),
            },
            (orig_list, Value::Array(p)) => {
                let o = orig_list.and_then(Value::as_array).cloned().unwrap_or_default();
                Some(Value::Array(merge_list(kind, &o, p, path)?))
            }
            (_, other) => Some(other.clone()),
        };
        path.pop();
        match merged {
            Some(v) => {
                out.insert(k.clone(), v);
            }
            None => {
                out.remove(k);
            }
        }
    }
    // Directives that act on sibling fields after the merge.
    for (k, v) in patch {
        if let Some(field) = k.strip_prefix("$deleteFromPrimitiveList/") {
            if let (Some(Value::Array(list)), Some(remove)) = (out.get_mut(field), v.as_array()) {
                list.retain(|x| !remove.contains(x));
            }
        } else if let Some(field) = k.strip_prefix("$setElementOrder/") {
            path.push(field);
            let strategy = list_strategy(kind, path);
            path.pop();
            if let (Some(Value::Array(list)), Some(order)) = (out.get_mut(field), v.as_array()) {
                reorder(list, order, strategy);
            }
        }
    }
    if let Some(keep) = patch.get("$retainKeys").and_then(Value::as_array) {
        let keep: Vec<&str> = keep.iter().filter_map(Value::as_str).collect();
        out.retain(|k, _| keep.contains(&k.as_str()));
    }
    Ok(Some(out))
}

fn merge_list<'a>(
    kind: &str,
    orig: &[Value],
    patch: &'a [Value],
    path: &mut Vec<&'a str>,
) -> Result<Vec<Value>, PatchError> {
    // A list-level `{"$patch": "replace"}` element replaces the whole list.
    if patch.iter().any(|e| e.get("$patch").and_then(Value::as_str) == Some("replace")) {
        return Ok(patch.iter().filter(|e| e.get("$patch").is_none()).map(strip_value).collect());
    }
    match list_strategy(kind, path) {
        ListStrategy::Replace => Ok(patch.iter().map(strip_value).collect()),
        ListStrategy::MergePrimitives => {
            let mut out = orig.to_vec();
            for v in patch {
                if !out.contains(v) {
                    out.push(v.clone());
                }
            }
            Ok(out)
        }
        ListStrategy::MergeByKey(key) => {
            let mut out = orig.to_vec();
            for p in patch {
                let pm = p.as_object().ok_or_else(|| PatchError::NotAMap(dotted(path), key))?;
                let id = pm.get(key);
                let pos = out.iter().position(|o| id.is_some() && o.get(key) == id);
                match (pos, pm.get("$patch").and_then(Value::as_str)) {
                    (Some(i), Some("delete")) => {
                        out.remove(i);
                    }
                    (None, Some("delete")) => {}
                    (Some(i), _) => {
                        let om = out[i].as_object().cloned().unwrap_or_default();
                        match merge_map(kind, &om, pm, path)? {
                            Some(m) => out[i] = Value::Object(m),
                            None => {
                                out.remove(i);
                            }
                        }
                    }
                    (None, _) => out.push(Value::Object(strip_directives_deep(pm))),
                }
            }
            Ok(patch_order_first(out, orig, patch, key))
        }
    }
}

/// apimachinery's `normalizeElementOrder` for a list merged by `key`: the items the patch names
/// in the patch's order, the server-only items in the original's order, the two interleaved by
/// their places in the original (`mergeSortedSlice`) — so an item only the patch has comes
/// before the server-only items that follow it, as Kubernetes orders it.
fn patch_order_first(merged: Vec<Value>, orig: &[Value], patch: &[Value], key: &str) -> Vec<Value> {
    let id = |v: &Value| v.get(key).cloned();
    let patch_ids: Vec<Value> = patch.iter().filter(|p| p.get("$patch").is_none()).filter_map(id).collect();
    let original: Vec<Value> = orig.iter().filter_map(id).collect();
    let (mut right, mut left): (Vec<Value>, Vec<Value>) =
        merged.into_iter().partition(|v| id(v).is_some_and(|k| patch_ids.contains(&k)));
    let rank = |order: &[Value], v: &Value| id(v).and_then(|k| order.iter().position(|o| *o == k));
    right.sort_by_key(|v| rank(&patch_ids, v).unwrap_or(usize::MAX));
    left.sort_by_key(|v| rank(&original, v).unwrap_or(usize::MAX));
    let mut out = Vec::with_capacity(left.len() + right.len());
    let (mut l, mut r) = (left.into_iter().peekable(), right.into_iter().peekable());
    loop {
        let take_left = match (l.peek(), r.peek()) {
            (None, None) => break,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (Some(a), Some(b)) => match (rank(&original, a), rank(&original, b)) {
                (Some(x), Some(y)) => x < y,
                _ => false,
            },
        };
        out.extend(if take_left { l.next() } else { r.next() });
    }
    out
}

/// Order `list` as `order` says (elements or their merge keys); the rest keep their order after.
fn reorder(list: &mut [Value], order: &[Value], strategy: ListStrategy) {
    let rank = |v: &Value| -> usize {
        let found = match strategy {
            ListStrategy::MergeByKey(key) => {
                order.iter().position(|o| o.get(key).is_some() && o.get(key) == v.get(key))
            }
            _ => order.iter().position(|o| o == v),
        };
        found.unwrap_or(usize::MAX)
    };
    list.sort_by_key(|v| rank(v));
}

fn strip_directives(m: &Map<String, Value>) -> Map<String, Value> {
    m.iter().filter(|(k, _)| !k.starts_with('$')).map(|(k, v)| (k.clone(), v.clone())).collect()
}

fn strip_directives_deep(m: &Map<String, Value>) -> Map<String, Value> {
    m.iter().filter(|(k, _)| !k.starts_with('$')).map(|(k, v)| (k.clone(), strip_value(v))).collect()
}

fn strip_value(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(strip_directives_deep(m)),
        Value::Array(a) => Value::Array(a.iter().map(strip_value).collect()),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod() -> Value {
        json!({"metadata": {"name": "web", "labels": {"app": "web"}, "finalizers": ["a"]},
               "spec": {"containers": [{"name": "web", "image": "nginx:1.25",
                                        "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                                        "ports": [{"containerPort": 80, "protocol": "TCP"}]},
                                       {"name": "side", "image": "busybox"}],
                        "tolerations": [{"key": "x", "operator": "Exists"}]}})
    }

    #[test]
    fn kubectl_apply_patch_updates_one_container_and_deletes_an_env_var() {
        // What `kubectl apply` sends after editing a manifest (see kubectl-wire.md 5.3).
        let patch = json!({"metadata": {"labels": {"tier": "frontend"}},
            "spec": {"$setElementOrder/containers": [{"name": "web"}, {"name": "side"}],
                     "containers": [{"$setElementOrder/env": [{"name": "B"}, {"name": "C"}],
                                     "env": [{"name": "C", "value": "3"}, {"$patch": "delete", "name": "A"}],
                                     "image": "nginx:1.26", "name": "web"}]}});
        let out = apply("Pod", &pod(), &patch).expect("applies");
        let web = &out["spec"]["containers"][0];
        assert_eq!(web["image"], "nginx:1.26");
        assert_eq!(web["env"], json!([{"name": "B", "value": "2"}, {"name": "C", "value": "3"}]));
        assert_eq!(web["ports"][0]["containerPort"], 80, "untouched fields stay");
        assert_eq!(out["spec"]["containers"][1]["name"], "side", "other containers stay");
        assert_eq!(out["metadata"]["labels"], json!({"app": "web", "tier": "frontend"}));
    }

    #[test]
    fn lists_without_a_merge_key_are_replaced() {
        let out = apply("Pod", &pod(), &json!({"spec": {"tolerations": [{"key": "y", "operator": "Exists"}]}}))
            .expect("applies");
        assert_eq!(out["spec"]["tolerations"], json!([{"key": "y", "operator": "Exists"}]));
    }

    #[test]
    fn null_removes_a_field_and_replace_directive_replaces_a_map() {
        let out = apply("Pod", &pod(), &json!({"metadata": {"labels": {"app": null}}})).expect("applies");
        assert_eq!(out["metadata"]["labels"], json!({}));
        let out = apply("Pod", &pod(), &json!({"metadata": {"labels": {"$patch": "replace", "only": "this"}}}))
            .expect("applies");
        assert_eq!(out["metadata"]["labels"], json!({"only": "this"}));
    }

    #[test]
    fn finalizers_merge_as_a_set_and_can_be_deleted_from() {
        let out = apply("Pod", &pod(), &json!({"metadata": {"finalizers": ["b", "a"]}})).expect("applies");
        assert_eq!(out["metadata"]["finalizers"], json!(["a", "b"]));
        let out = apply("Pod", &pod(), &json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}}))
            .expect("applies");
        assert_eq!(out["metadata"]["finalizers"], json!([]));
    }

    #[test]
    fn deployment_templates_merge_containers_by_name_and_retain_keys_clears_strategy() {
        let d = json!({"spec": {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}},
                                "template": {"spec": {"containers": [{"name": "a", "image": "x"}, {"name": "b", "image": "y"}]}}}});
        let patch = json!({"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate", "rollingUpdate": null},
                                    "template": {"spec": {"containers": [{"name": "b", "image": "z"}]}}}});
        let out = apply("Deployment", &d, &patch).expect("applies");
        assert_eq!(out["spec"]["strategy"], json!({"type": "Recreate"}));
        assert_eq!(
            out["spec"]["template"]["spec"]["containers"],
            json!([{"name": "a", "image": "x"}, {"name": "b", "image": "z"}])
        );
    }

    #[test]
    fn service_ports_merge_by_port_and_conditions_by_type() {
        let s = json!({"spec": {"ports": [{"port": 80, "targetPort": 8080}, {"port": 443}]}});
        let out =
            apply("Service", &s, &json!({"spec": {"ports": [{"port": 80, "targetPort": 9090}]}})).expect("applies");
        assert_eq!(out["spec"]["ports"], json!([{"port": 80, "targetPort": 9090}, {"port": 443}]));
        let n = json!({"status": {"conditions": [{"type": "Ready", "status": "False"}, {"type": "DiskPressure", "status": "False"}]}});
        let out = apply("Node", &n, &json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}}))
            .expect("applies");
        assert_eq!(out["status"]["conditions"][0], json!({"type": "Ready", "status": "True"}));
        assert_eq!(out["status"]["conditions"].as_array().map(Vec::len), Some(2));
    }

    #[test]
    fn items_only_the_patch_has_come_before_the_server_only_ones() {
        // The conformance suite's StatefulSet patch names a container the template does not have.
        let orig = json!({"spec": {"template": {"spec": {"containers": [{"name": "webserver", "image": "agnhost"}]}}}});
        let patch = json!({"spec": {"template": {"spec": {"containers": [{"name": "test-ss", "image": "pause"}]}}}});
        let got = apply("StatefulSet", &orig, &patch).expect("patch");
        let names: Vec<&str> = got["spec"]["template"]["spec"]["containers"]
            .as_array()
            .expect("list")
            .iter()
            .filter_map(|c| c["name"].as_str())
            .collect();
        assert_eq!(names, ["test-ss", "webserver"]);
        // Items the server has keep their places around the patched ones.
        let orig = json!({"spec": {"containers": [{"name": "a"}, {"name": "b"}, {"name": "c"}]}});
        let patch = json!({"spec": {"containers": [{"name": "b", "image": "x"}, {"name": "d"}]}});
        let got = apply("Pod", &orig, &patch).expect("patch");
        let names: Vec<&str> =
            got["spec"]["containers"].as_array().expect("list").iter().filter_map(|c| c["name"].as_str()).collect();
        assert_eq!(names, ["a", "b", "d", "c"]);
    }

    #[test]
    fn bad_directives_are_errors() {
        assert!(matches!(
            apply("Pod", &pod(), &json!({"metadata": {"$patch": "explode"}})),
            Err(PatchError::BadDirective(..))
        ));
        assert!(matches!(apply("Pod", &pod(), &json!([1])), Err(PatchError::NotAnObject)));
    }
}
