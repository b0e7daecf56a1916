//! ObjectMeta validation: names, namespaces, labels, annotations, owner references, finalizers.

use std::collections::HashSet;

use serde_json::{Map, Value};

use super::causes::{go_quote, go_slice, BadValue, Cause};
use super::json::{arr, has, int, obj, st, strs};
use super::names::{
    dns1035_label_errors, dns1123_label_errors, dns1123_subdomain_errors, label_value_errors, qualified_name_errors,
    IMMUTABLE_MSG, IS_NEGATIVE_MSG,
};
use super::obj_or_null;
use super::rbac::path_segment_errors;

#[derive(Clone, Copy)]
pub enum NameRule {
    Subdomain,
    Label,
    Dns1035,
    /// RBAC names: any path segment (`path.IsValidPathSegmentName`).
    PathSegment,
}

const STANDARD_FINALIZERS: [&str; 3] = ["kubernetes", "orphan", "foregroundDeletion"];

pub(crate) fn validate_object_meta(meta: &Value, namespaced: Option<bool>, rule: NameRule, out: &mut Vec<Cause>) {
    let name = st(meta, "name");
    if name.is_empty() {
        out.push(Cause::required("metadata.name", "name or generateName is required"));
    } else {
        let errs = match rule {
            NameRule::Subdomain => dns1123_subdomain_errors(name),
            NameRule::Label => dns1123_label_errors(name),
            NameRule::Dns1035 => dns1035_label_errors(name),
            NameRule::PathSegment => path_segment_errors(name),
        };
        out.extend(errs.iter().map(|m| Cause::invalid("metadata.name", name, m)));
    }
    let ns = st(meta, "namespace");
    match namespaced {
        Some(true) if ns.is_empty() => out.push(Cause::required("metadata.namespace", "")),
        Some(true) => {
            out.extend(dns1123_label_errors(ns).iter().map(|m| Cause::invalid("metadata.namespace", ns, m)));
        }
        Some(false) if !ns.is_empty() => out.push(Cause::forbidden("metadata.namespace", "not allowed on this type")),
        _ => {}
    }
    if let Some(g) = int(meta, "generation") {
        if g < 0 {
            out.push(Cause::invalid("metadata.generation", g, IS_NEGATIVE_MSG));
        }
    }
    validate_meta_maps(meta, out);
}

/// Labels, annotations, owner references and finalizers: checked on create, update and status writes.
pub(crate) fn validate_meta_maps(meta: &Value, out: &mut Vec<Cause>) {
    validate_labels(obj(meta, "labels"), "metadata.labels", out);
    validate_annotations(obj(meta, "annotations"), "metadata.annotations", out);
    validate_owner_references(arr(meta, "ownerReferences"), out);
    let finalizers = strs(meta, "finalizers");
    for f in &finalizers {
        for m in qualified_name_errors(f) {
            out.push(Cause::invalid("metadata.finalizers", f, &m));
        }
    }
    if finalizers.iter().any(|f| f == "orphan") && finalizers.iter().any(|f| f == "foregroundDeletion") {
        let refs: Vec<&str> = finalizers.iter().map(String::as_str).collect();
        out.push(Cause::invalid(
            "metadata.finalizers",
            BadValue::Raw(go_slice("string", &refs)),
            "finalizer orphan and foregroundDeletion cannot be both set",
        ));
    }
    for (i, f) in finalizers.iter().enumerate() {
        if !f.contains('/') && !STANDARD_FINALIZERS.contains(&f.as_str()) {
            out.push(Cause::invalid(
                format!("metadata.finalizers[{i}]"),
                f,
                "name is neither a standard finalizer name nor is it fully qualified",
            ));
        }
    }
}

pub(crate) fn validate_finalizer_name(f: &str, path: &str, out: &mut Vec<Cause>) {
    out.extend(qualified_name_errors(f).iter().map(|m| Cause::invalid(path, f, m)));
    if !f.contains('/') && !STANDARD_FINALIZERS.contains(&f) {
        out.push(Cause::invalid(path, f, "name is neither a standard finalizer name nor is it fully qualified"));
    }
}

pub(crate) fn validate_labels(labels: Option<&Map<String, Value>>, path: &str, out: &mut Vec<Cause>) {
    let Some(labels) = labels else { return };
    for (k, v) in labels {
        out.extend(qualified_name_errors(k).iter().map(|m| Cause::invalid(path, k, m)));
        let v = v.as_str().unwrap_or("");
        out.extend(label_value_errors(v).iter().map(|m| Cause::invalid(path, v, m)));
    }
}

const TOTAL_ANNOTATION_SIZE_LIMIT: usize = 256 * 1024;

pub(crate) fn validate_annotations(annotations: Option<&Map<String, Value>>, path: &str, out: &mut Vec<Cause>) {
    let Some(annotations) = annotations else {
        return;
    };
    let mut total = 0usize;
    for (k, v) in annotations {
        out.extend(qualified_name_errors(&k.to_lowercase()).iter().map(|m| Cause::invalid(path, k, m)));
        total += k.len() + v.as_str().map_or(0, str::len);
    }
    if total > TOTAL_ANNOTATION_SIZE_LIMIT {
        out.push(Cause::too_long(path, TOTAL_ANNOTATION_SIZE_LIMIT));
    }
}

fn owner_ref_string(r: &Value) -> String {
    let opt_bool = |k: &str| match r.get(k).and_then(Value::as_bool) {
        Some(b) => format!("(*bool)({b})"),
        None => "(*bool)(nil)".to_string(),
    };
    format!(
        "v1.OwnerReference{{APIVersion:{}, Kind:{}, Name:{}, UID:{}, Controller:{}, BlockOwnerDeletion:{}}}",
        go_quote(st(r, "apiVersion")),
        go_quote(st(r, "kind")),
        go_quote(st(r, "name")),
        go_quote(st(r, "uid")),
        opt_bool("controller"),
        opt_bool("blockOwnerDeletion"),
    )
}

fn validate_owner_references(refs: &[Value], out: &mut Vec<Cause>) {
    let path = "metadata.ownerReferences";
    let mut first_controller: Option<String> = None;
    for r in refs {
        let api_version = st(r, "apiVersion");
        let (group, version) = match api_version.rsplit_once('/') {
            Some((g, v)) => (g, v),
            None => ("", api_version),
        };
        if version.is_empty() {
            out.push(Cause::invalid(format!("{path}.apiVersion"), api_version, "version must not be empty"));
        }
        for key in ["kind", "name", "uid"] {
            if st(r, key).is_empty() {
                out.push(Cause::invalid(format!("{path}.{key}"), "", "must not be empty"));
            }
        }
        if group.is_empty() && version == "v1" && st(r, "kind") == "Event" {
            out.push(Cause::invalid(
                path,
                BadValue::Raw(owner_ref_string(r)),
                "/v1, Kind=Event is disallowed from being an owner",
            ));
        }
        if r.get("controller").and_then(Value::as_bool) == Some(true) {
            let current = format!("{}/{}", st(r, "kind"), st(r, "name"));
            match &first_controller {
                Some(first) => {
                    let all: Vec<String> = refs.iter().map(owner_ref_string).collect();
                    out.push(Cause::invalid(
                        path,
                        BadValue::Raw(format!("[]v1.OwnerReference{{{}}}", all.join(", "))),
                        &format!(
                            "Only one reference can have Controller set to true. Found \"true\" in references for {first} and {current}"
                        ),
                    ));
                }
                None => first_controller = Some(current),
            }
        }
    }
}

/// Go's `metav1.Time` rendering (`time.Time.String()`), used for immutable-timestamp errors.
fn go_time(s: &str) -> BadValue {
    match s.parse::<jiff::Timestamp>() {
        Ok(ts) => BadValue::Raw(ts.strftime("%Y-%m-%d %H:%M:%S +0000 UTC").to_string()),
        Err(_) => BadValue::Str(s.to_string()),
    }
}

pub(crate) fn validate_meta_update(new: &Value, old: &Value, out: &mut Vec<Cause>) {
    let nm = obj_or_null(new, "metadata");
    let om = obj_or_null(old, "metadata");
    for key in ["name", "namespace"] {
        if st(nm, key) != st(om, key) {
            out.push(Cause::invalid(format!("metadata.{key}"), st(nm, key), IMMUTABLE_MSG));
        }
    }
    let uid = st(nm, "uid");
    if !uid.is_empty() && uid != st(om, "uid") {
        out.push(Cause::invalid("metadata.uid", uid, IMMUTABLE_MSG));
    }
    let created = st(nm, "creationTimestamp");
    if !created.is_empty() && created != st(om, "creationTimestamp") {
        out.push(Cause::invalid("metadata.creationTimestamp", go_time(created), IMMUTABLE_MSG));
    }
    if has(om, "deletionTimestamp") {
        let old_f: HashSet<String> = strs(om, "finalizers").into_iter().collect();
        let mut extra: Vec<String> = strs(nm, "finalizers").into_iter().filter(|f| !old_f.contains(f)).collect();
        extra.sort();
        extra.dedup();
        if !extra.is_empty() {
            let refs: Vec<&str> = extra.iter().map(String::as_str).collect();
            out.push(Cause::forbidden(
                "metadata.finalizers",
                &format!(
                    "no new finalizers can be added if the object is being deleted, found new finalizers {}",
                    go_slice("string", &refs)
                ),
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::validation::test_support::fields;
    use crate::validation::{validate_create, validate_update};

    #[test]
    fn metadata_name_and_uid_are_immutable() {
        let old = json!({"metadata": {"name": "a", "namespace": "default", "uid": "u1", "creationTimestamp": "2024-01-02T03:04:05Z"}, "data": {}});
        let mut new = old.clone();
        new["metadata"]["name"] = json!("b");
        new["metadata"]["uid"] = json!("u2");
        new["metadata"]["creationTimestamp"] = json!("2025-01-02T03:04:05Z");
        let causes = validate_update("ConfigMap", &new, &old);
        assert_eq!(fields(&causes), vec!["metadata.name", "metadata.uid", "metadata.creationTimestamp"]);
        assert_eq!(causes[0].message, "Invalid value: \"b\": field is immutable");
        assert_eq!(causes[2].message, "Invalid value: 2025-01-02 03:04:05 +0000 UTC: field is immutable");
        let mut omitted = old.clone();
        omitted["metadata"].as_object_mut().into_iter().for_each(|m| {
            m.remove("uid");
        });
        assert_eq!(validate_update("ConfigMap", &omitted, &old), vec![]);
    }

    #[test]
    fn labels_annotations_owner_references_and_finalizers_are_checked() {
        let cm = json!({"metadata": {
            "name": "c", "namespace": "default",
            "labels": {"bad key!": "ok", "app": "-bad"},
            "annotations": {"Example.com/Note": "fine"},
            "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "a", "uid": "1", "controller": true},
                {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "b", "uid": "2", "controller": true},
                {"apiVersion": "", "kind": "", "name": "c", "uid": "3"}
            ],
            "finalizers": ["example.com/f", "custom"]
        }});
        let causes = validate_create("ConfigMap", &cm);
        assert_eq!(
            fields(&causes),
            vec![
                "metadata.labels",
                "metadata.labels",
                "metadata.ownerReferences",
                "metadata.ownerReferences.apiVersion",
                "metadata.ownerReferences.kind",
                "metadata.finalizers[1]",
            ]
        );
        assert!(causes[2].message.ends_with(
            "Only one reference can have Controller set to true. Found \"true\" in references for ReplicaSet/a and ReplicaSet/b"
        ));
    }

    #[test]
    fn annotations_may_total_at_most_256_kib() {
        let big = "x".repeat(TOTAL_ANNOTATION_SIZE_LIMIT);
        let cm = json!({"metadata": {"name": "c", "namespace": "d", "annotations": {"a": big}}});
        let causes = validate_create("ConfigMap", &cm);
        assert_eq!(causes, vec![Cause::too_long("metadata.annotations", 262144)]);
        assert_eq!(causes[0].message, "Too long: must have at most 262144 bytes");
    }

    #[test]
    fn namespaced_kinds_need_a_namespace_and_cluster_kinds_refuse_one() {
        let cm = json!({"metadata": {"name": "c"}});
        assert_eq!(validate_create("ConfigMap", &cm), vec![Cause::required("metadata.namespace", "")]);
        let ns = json!({"metadata": {"name": "team-a", "namespace": "x"}});
        assert_eq!(fields(&validate_create("Namespace", &ns)), vec!["metadata.namespace"]);
        let ns = json!({"metadata": {"name": "team.a"}});
        assert_eq!(validate_create("Namespace", &ns)[0].message, "Invalid value: \"team.a\": must not contain dots");
    }
}
