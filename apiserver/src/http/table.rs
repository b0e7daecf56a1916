//! meta.k8s.io/v1 Table responses: what `kubectl get` prints, computed on the server.

use super::collection::{self, Collection};
use super::errors::ApiError;
use crate::cache::CachedObject;
use serde_json::{json, Value};
use std::sync::Arc;

/// Whether the Accept header asks for a Table, and which meta.k8s.io version.
pub fn table_version(accept: &str) -> Option<&'static str> {
    for part in accept.split(',') {
        let p = part.replace(' ', "");
        if p.contains("as=Table") && p.contains("g=meta.k8s.io") {
            return Some(if p.contains("v=v1beta1") { "meta.k8s.io/v1beta1" } else { "meta.k8s.io/v1" });
        }
    }
    None
}

/// Whether every media type the Accept header lists asks for a transformed object (`as=Table`,
/// `as=PartialObjectMetadata`...), which a kind without metadata cannot give: kube-apiserver's
/// negotiation then answers 406 before it serves the request.
pub fn only_transforms(accept: &str) -> bool {
    let mut parts = accept.split(',').map(|p| p.replace(' ', "")).filter(|p| !p.is_empty()).peekable();
    parts.peek().is_some() && parts.all(|p| p.split(';').any(|param| param.starts_with("as=")))
}

/// The 406 of kube-apiserver's negotiation (`NewNotAcceptableError`), naming what it serves.
pub fn not_acceptable() -> ApiError {
    ApiError::new(
        406,
        "NotAcceptable",
        "only the following media types are accepted: application/json, application/yaml, application/vnd.kubernetes.protobuf",
    )
}

/// What each row carries as `object` (`includeObject`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IncludeObject {
    None,
    Metadata,
    Object,
}

impl IncludeObject {
    pub fn parse(s: Option<&str>) -> Self {
        match s {
            Some("None") => Self::None,
            Some("Object") => Self::Object,
            _ => Self::Metadata,
        }
    }
}

pub fn row(kind: &str, obj: &Value, include: IncludeObject, now: jiff::Timestamp) -> Value {
    let mut r = json!({"cells": kaji_api::table::cells(kind, obj, now)});
    match include {
        IncludeObject::None => {}
        IncludeObject::Object => r["object"] = obj.clone(),
        IncludeObject::Metadata => {
            r["object"] = json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                                 "metadata": obj.get("metadata").cloned().unwrap_or(json!({}))});
        }
    }
    r
}

/// A Table of `objs`; `columns` false leaves columnDefinitions null (later watch events).
pub fn table(
    kind: &str,
    api_version: &str,
    objs: &[Value],
    meta: Value,
    include: IncludeObject,
    columns: bool,
) -> Value {
    let now = jiff::Timestamp::now();
    let rows: Vec<Value> = objs.iter().map(|o| row(kind, o, include, now)).collect();
    frame(kind, api_version, meta, columns, rows)
}

/// A Table of cached objects, each parsed and turned into its row only when the body reaches it.
pub fn stream(
    kind: &'static str,
    api_version: &str,
    objs: Vec<Arc<CachedObject>>,
    meta: Value,
    include: IncludeObject,
) -> Collection {
    let now = jiff::Timestamp::now();
    let head = collection::open_array(&frame(kind, api_version, meta, true, Vec::new()));
    let encode = move |o: &CachedObject, buf: &mut Vec<u8>| {
        serde_json::to_writer(buf, &row(kind, &o.value(), include, now)).expect("a JSON value always serializes");
    };
    Collection::encoded(head, objs, Box::new(encode))
}

/// The Table around its rows (`rows` sorts last, so a streamed Table can open its array there).
fn frame(kind: &str, api_version: &str, meta: Value, columns: bool, rows: Vec<Value>) -> Value {
    json!({
        "kind": "Table", "apiVersion": api_version, "metadata": meta,
        "columnDefinitions": if columns { Value::Array(kaji_api::table::columns(kind)) } else { Value::Null },
        "rows": rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_header_of_transforms_alone_is_not_acceptable_to_a_kind_without_metadata() {
        assert!(only_transforms("application/json;as=Table;v=v1;g=meta.k8s.io"));
        assert!(only_transforms(
            "application/json;as=Table;v=v1;g=meta.k8s.io, application/json;as=Table;v=v1beta1;g=meta.k8s.io"
        ));
        assert!(
            !only_transforms("application/json;as=Table;v=v1;g=meta.k8s.io,application/json"),
            "kubectl's fallback"
        );
        assert!(!only_transforms(""));
        assert!(!only_transforms("*/*"));
        assert_eq!(not_acceptable().code, 406);
    }

    #[test]
    fn recognises_kubectls_table_accept_header() {
        let kubectl = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
        assert_eq!(table_version(kubectl), Some("meta.k8s.io/v1"));
        assert_eq!(table_version("application/json"), None);
    }

    #[test]
    fn rows_carry_partial_object_metadata() {
        let pod = json!({"metadata": {"name": "web", "namespace": "default", "labels": {"app": "web"}}, "spec": {"containers": []}});
        let t = table("Pod", "meta.k8s.io/v1", &[pod], json!({"resourceVersion": "5"}), IncludeObject::Metadata, true);
        assert_eq!(t["rows"][0]["object"]["kind"], "PartialObjectMetadata");
        assert_eq!(t["rows"][0]["object"]["metadata"]["labels"]["app"], "web");
        assert_eq!(t["rows"][0]["cells"][0], "web");
        assert_eq!(t["columnDefinitions"][0]["name"], "Name");
    }

    #[tokio::test]
    async fn a_streamed_table_is_byte_identical_to_the_one_shot_table() {
        use crate::http::collection::tests::{cached, collect, pod};
        let meta = json!({"resourceVersion": "42", "continue": "abc="});
        for include in [IncludeObject::None, IncludeObject::Metadata, IncludeObject::Object] {
            for n in [0, 1, 4, 40] {
                let pods: Vec<Value> = (0..n).map(|i| pod(i, i % 5 * 500)).collect();
                let items = pods.iter().cloned().map(cached).collect();
                let (body, _, _) = collect(stream("Pod", "meta.k8s.io/v1", items, meta.clone(), include)).await;
                let old = serde_json::to_vec(&table("Pod", "meta.k8s.io/v1", &pods, meta.clone(), include, true))
                    .expect("json");
                assert_eq!(String::from_utf8_lossy(&body), String::from_utf8_lossy(&old), "{include:?}, {n} rows");
            }
        }
    }
}
