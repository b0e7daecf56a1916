//! GET on collections (served from the watch cache, with paging and Tables), single-object
//! responses, and deletecollection.

use super::collection::Collection;
use super::errors::{ApiError, ApiResult};
use super::table::{self, IncludeObject};
use super::{json_response, Query, Shared};
use crate::cache::CacheError;
use crate::registry::DeleteOptions;
use axum::body::Bytes;
use axum::response::Response;
use base64::Engine;
use kaji_api::resources::ResourceInfo;
use kaji_api::selector::{supported_fields, FieldSelector, LabelSelector};
use serde_json::{json, Value};

pub fn selectors(info: &ResourceInfo, q: &Query) -> ApiResult<(LabelSelector, FieldSelector)> {
    let labels =
        LabelSelector::parse(q.get("labelSelector").unwrap_or("")).map_err(|e| ApiError::bad_request(e.to_string()))?;
    let fields = FieldSelector::parse(q.get("fieldSelector").unwrap_or(""))
        .map_err(|e| ApiError::bad_request(format!("invalid field selector: {e}")))?;
    let supported = supported_fields(info.kind);
    for r in fields.requirements() {
        if !supported.contains(&r.field.as_str()) {
            return Err(ApiError::bad_request(format!("field label not supported: {}", r.field)));
        }
    }
    Ok((labels, fields))
}

pub fn cache_err(e: CacheError) -> ApiError {
    match e {
        CacheError::Gone { .. } => ApiError::gone(e.to_string()),
        CacheError::TooLarge { .. } => ApiError::timeout(e.to_string()),
        CacheError::Store(s) => ApiError::internal(s),
    }
}

/// Wait for the cache per the `resourceVersion` parameter; returns the revision to answer at.
pub async fn await_rv(s: &Shared, rv: Option<&str>) -> ApiResult<u64> {
    match rv {
        None | Some("") => s.cache.sync().await.map_err(cache_err),
        Some("0") => Ok(s.cache.revision()),
        Some(n) => {
            let n: u64 = n.parse().map_err(|_| ApiError::bad_request(format!("invalid resource version: {n:?}")))?;
            s.cache.wait_for(n).await.map_err(cache_err)
        }
    }
}

fn encode_continue(rv: u64, key: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(json!({"v": "meta.k8s.io/v1", "rv": rv, "start": key}).to_string())
}

fn decode_continue(token: &str, info: &ResourceInfo) -> ApiResult<String> {
    let bad = || ApiError::bad_request("continue key is not valid: the continue token could not be decoded");
    let raw = base64::engine::general_purpose::STANDARD.decode(token).map_err(|_| bad())?;
    let v: Value = serde_json::from_slice(&raw).map_err(|_| bad())?;
    let start = v.get("start").and_then(Value::as_str).ok_or_else(bad)?;
    if !start.starts_with(&info.key_prefix()) {
        return Err(bad());
    }
    Ok(start.to_string())
}

pub async fn list(
    s: &Shared,
    info: &'static ResourceInfo,
    ns: Option<&str>,
    q: &Query,
    accept: &str,
) -> ApiResult<Response> {
    let (labels, fields) = selectors(info, q)?;
    let start = match q.get("continue").filter(|c| !c.is_empty()) {
        Some(c) => Some(decode_continue(c, info)?),
        None => None,
    };
    let rev = await_rv(s, if start.is_some() { Some("0") } else { q.get("resourceVersion") }).await?;
    let limit = q.int("limit")?.filter(|l| *l > 0).map(|l| l as usize);
    let rc = s.cache.resource(info.kind).ok_or_else(|| ApiError::internal("no cache for resource"))?;
    let res = rc.list(ns, &labels, &fields, start.as_deref(), limit, rev);
    let mut meta = json!({"resourceVersion": res.rev.to_string()});
    if let Some(k) = &res.next_key {
        meta["continue"] = encode_continue(res.rev, k).into();
        meta["remainingItemCount"] = res.remaining.into();
    }
    if let Some(tv) = table::table_version(accept) {
        let include = IncludeObject::parse(q.get("includeObject"));
        return Ok(table::stream(info.kind, tv, res.items, meta, include).into_response());
    }
    Ok(Collection::items(list_head(info, meta), res.items).into_response())
}

/// `{"apiVersion":…,"kind":…,"metadata":…,"items":[`: the items follow as the cache holds them.
fn list_head(info: &ResourceInfo, meta: Value) -> Bytes {
    let head = json!({"kind": info.list_kind(), "apiVersion": info.api_version(), "metadata": meta}).to_string();
    let mut out = Vec::with_capacity(head.len() + 10);
    out.extend_from_slice(&head.as_bytes()[..head.len() - 1]);
    out.extend_from_slice(b",\"items\":[");
    out.into()
}

/// One object, as JSON or as a one-row Table.
pub fn single(info: &ResourceInfo, obj: Value, accept: &str) -> Response {
    match table::table_version(accept) {
        Some(tv) => {
            let rv = obj.pointer("/metadata/resourceVersion").cloned().unwrap_or(Value::Null);
            json_response(
                200,
                &table::table(info.kind, tv, &[obj], json!({"resourceVersion": rv}), IncludeObject::Metadata, true),
            )
        }
        None => json_response(200, &obj),
    }
}

pub async fn delete_collection(
    s: &Shared,
    info: &'static ResourceInfo,
    ns: Option<&str>,
    q: &Query,
    opts: &DeleteOptions,
) -> ApiResult<Response> {
    let (labels, fields) = selectors(info, q)?;
    let rev = await_rv(s, None).await?;
    let rc = s.cache.resource(info.kind).ok_or_else(|| ApiError::internal("no cache for resource"))?;
    let res = rc.list(ns, &labels, &fields, None, None, rev);
    let mut items = Vec::new();
    for o in res.items {
        match s.registry.delete(info, o.namespace.as_deref(), &o.name, opts).await {
            // A Success Status stands for the deleted object; the list carries the object.
            Ok(out) if out.body["kind"] == "Status" => items.push(o.value()),
            Ok(out) => items.push(out.body),
            Err(e) if e.code == 404 => {}
            Err(e) => return Err(e),
        }
    }
    let list = json!({"kind": info.list_kind(), "apiVersion": info.api_version(),
                      "metadata": {"resourceVersion": s.cache.revision().to_string()}, "items": items});
    Ok(json_response(200, &list))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::CachedObject;
    use crate::http::collection::tests::{cached, collect, pod};
    use std::sync::Arc;

    /// How a LIST body was built before it was streamed: one buffer, the items spliced in.
    fn one_shot(info: &ResourceInfo, meta: Value, items: &[Arc<CachedObject>]) -> Vec<u8> {
        let head = json!({"kind": info.list_kind(), "apiVersion": info.api_version(), "metadata": meta}).to_string();
        let mut body = Vec::new();
        body.extend_from_slice(&head.as_bytes()[..head.len() - 1]);
        body.extend_from_slice(b",\"items\":[");
        for (i, o) in items.iter().enumerate() {
            if i > 0 {
                body.push(b',');
            }
            body.extend_from_slice(&o.json);
        }
        body.extend_from_slice(b"]}");
        body
    }

    #[tokio::test]
    async fn a_streamed_list_is_byte_identical_to_the_one_shot_encoding() {
        let info = kaji_api::resources::lookup("", "v1", "pods").expect("pods");
        let meta = json!({"resourceVersion": "42", "continue": "abc=", "remainingItemCount": 3});
        for n in [0, 1, 5, 60] {
            let items: Vec<_> = (0..n).map(|i| cached(pod(i, i % 7 * 400))).collect();
            let (body, _, hint) = collect(Collection::items(list_head(info, meta.clone()), items.clone())).await;
            let old = one_shot(info, meta.clone(), &items);
            assert_eq!(String::from_utf8_lossy(&body), String::from_utf8_lossy(&old), "{n} items");
            assert_eq!(hint, Some(old.len() as u64), "Content-Length of {n} items");
        }
    }
}
