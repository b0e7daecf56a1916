//! OpenAPI as kube-apiserver serves it: v3 (`/openapi/v3`, an index, and one document per
//! group-version at `/openapi/v3/<api/v1|apis/g/v>?hash=...`) and v2 (`/openapi/v2`, one
//! document, as protobuf when asked, which kubectl ≤ 1.28 reads first and every kubectl uses for
//! client-side apply's patch metadata). `kubectl explain` and kubectl's validation read them.
//!
//! Every schema comes from the Kubernetes types (build/openapi.rs: k8s-openapi's schemas and
//! the Go markers of k8s-pb); the documents are built from the resource table — paths and
//! operations of every served resource, its kind's schema and everything it references, with
//! `x-kubernetes-group-version-kind` — once, on first use, and kept serialized with their hashes.

mod gnostic;

use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use kaji_api::resources::{ResourceInfo, Subresource, RESOURCES};
use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::OnceLock;

static DEFINITIONS: &str = include_str!(concat!(env!("OUT_DIR"), "/openapi-definitions.json"));

/// kube-apiserver's media type for v2 protobuf. kubectl asks with `spec.v2@v1.0`, but an `@`
/// in the answer's Content-Type breaks Go's mime parser (kubectl-wire.md §3).
pub const V2_PROTOBUF: &str = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf";

/// A document as sent, with its hash (the v3 index's `?hash=` and the ETag).
pub struct Served {
    pub body: bytes::Bytes,
    pub hash: String,
}

pub struct Documents {
    pub index: Served,
    /// By group-version path: `api/v1`, `apis/apps/v1`.
    pub v3: BTreeMap<String, Served>,
    pub v2_json: Served,
    pub v2_protobuf: Served,
}

impl Documents {
    /// The index's URL of a group-version document (its hash busts clients' caches).
    pub fn index_url(&self, gv: &str) -> String {
        format!("/openapi/v3/{gv}?hash={}", self.v3.get(gv).map(|d| d.hash.as_str()).unwrap_or_default())
    }
}

/// The documents, built on first use.
pub fn documents() -> &'static Documents {
    static DOCS: OnceLock<Documents> = OnceLock::new();
    DOCS.get_or_init(|| build(serde_json::from_str(DEFINITIONS).expect("build.rs writes valid JSON")))
}

fn served(body: Vec<u8>) -> Served {
    // FNV-1a, upper-case hex like kube-openapi's hashes.
    let mut h: u64 = 0xcbf29ce484222325;
    for b in &body {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x100000001b3);
    }
    Served { body: body.into(), hash: format!("{h:016X}") }
}

const META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1";
const REF: &str = "#/components/schemas/";

fn gv_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// The definitions build.rs extracted, with the served kinds' list types and GVKs added.
struct Definitions {
    defs: Map<String, Value>,
    /// Schema name of each served kind (and its list kind).
    served: BTreeMap<String, String>,
}

impl Definitions {
    fn new(mut extracted: Value) -> Self {
        let mut defs = match extracted["definitions"].take() {
            Value::Object(m) => m,
            _ => Map::new(),
        };
        let kinds = &extracted["kinds"];
        let mut served = BTreeMap::new();
        let mut scale = false;
        for r in RESOURCES {
            let gvk = format!("{}/{}", r.api_version(), r.kind);
            let Some(name) = kinds[&gvk].as_str() else {
                tracing::warn!(kind = %gvk, "no OpenAPI schema for a served kind");
                continue;
            };
            let gvk_ext = |kind: &str| json!([{"group": r.group, "kind": kind, "version": r.version}]);
            if let Some(d) = defs.get_mut(name).and_then(Value::as_object_mut) {
                d.insert("x-kubernetes-group-version-kind".into(), gvk_ext(r.kind));
            }
            let list_name = format!("{name}List");
            let list = list_schema(&defs, name, &r.list_kind());
            defs.insert(list_name.clone(), list);
            if let Some(d) = defs.get_mut(&list_name).and_then(Value::as_object_mut) {
                d.insert("x-kubernetes-group-version-kind".into(), gvk_ext(&r.list_kind()));
            }
            served.insert(gvk, name.to_string());
            served.insert(format!("{}/{}", r.api_version(), r.list_kind()), list_name);
            scale |= r.has(Subresource::Scale);
        }
        // Types every document's operations name, with the GVKs Kubernetes gives them.
        let mut tag = |name: &str, gvks: Value| {
            if let Some(d) = defs.get_mut(name).and_then(Value::as_object_mut) {
                d.insert("x-kubernetes-group-version-kind".into(), gvks);
            }
        };
        tag(&format!("{META}.Status"), json!([{"group": "", "kind": "Status", "version": "v1"}]));
        if scale {
            tag("io.k8s.api.autoscaling.v1.Scale", json!([{"group": "autoscaling", "kind": "Scale", "version": "v1"}]));
        }
        let mut groups: BTreeSet<(&str, &str)> = RESOURCES.iter().map(|r| (r.group, r.version)).collect();
        groups.insert(("", "v1"));
        let gvks: Vec<Value> =
            groups.iter().map(|(g, v)| json!({"group": g, "kind": "DeleteOptions", "version": v})).collect();
        tag(&format!("{META}.DeleteOptions"), Value::Array(gvks));
        Self { defs, served }
    }

    /// `roots` and every definition they reference, by name.
    fn closure<'a>(&self, roots: impl IntoIterator<Item = &'a str>) -> Map<String, Value> {
        let mut out = Map::new();
        let mut todo: Vec<String> = roots.into_iter().map(str::to_string).collect();
        while let Some(name) = todo.pop() {
            if out.contains_key(&name) {
                continue;
            }
            let Some(d) = self.defs.get(&name) else { continue };
            refs(d, &mut todo);
            out.insert(name, d.clone());
        }
        out.sort_keys();
        out
    }
}

/// Every `$ref` target under `v`.
fn refs(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            if let Some(r) = m.get("$ref").and_then(Value::as_str) {
                out.push(r.trim_start_matches(REF).to_string());
            }
            m.values().for_each(|c| refs(c, out));
        }
        Value::Array(a) => a.iter().for_each(|c| refs(c, out)),
        _ => {}
    }
}

/// `<Kind>List`, the shape every Kubernetes list type has (its field texts from the kind's).
fn list_schema(defs: &Map<String, Value>, item: &str, list_kind: &str) -> Value {
    let kind = item.rsplit('.').next().unwrap_or(item);
    let prop = |p: &str| defs.get(item).and_then(|d| d.pointer(&format!("/properties/{p}"))).cloned();
    json!({
        "description": format!("{list_kind} is a list of {kind} objects."),
        "type": "object",
        "required": ["items"],
        "properties": {
            "apiVersion": prop("apiVersion").unwrap_or(json!({"type": "string"})),
            "items": {"description": format!("Items is the list of {kind} objects."), "type": "array",
                      "items": {"$ref": format!("{REF}{item}")}},
            "kind": prop("kind").unwrap_or(json!({"type": "string"})),
            "metadata": {"$ref": format!("{REF}{META}.ListMeta"), "description": "Standard list metadata."},
        },
    })
}

/// A query or path parameter: name, type.
type Param = (&'static str, &'static str);

const LIST: &[Param] = &[
    ("allowWatchBookmarks", "boolean"),
    ("continue", "string"),
    ("fieldSelector", "string"),
    ("labelSelector", "string"),
    ("limit", "integer"),
    ("resourceVersion", "string"),
    ("resourceVersionMatch", "string"),
    ("sendInitialEvents", "boolean"),
    ("timeoutSeconds", "integer"),
    ("watch", "boolean"),
];
const WRITE: &[Param] = &[("dryRun", "string"), ("fieldManager", "string"), ("fieldValidation", "string")];
const PATCH: &[Param] =
    &[("dryRun", "string"), ("fieldManager", "string"), ("fieldValidation", "string"), ("force", "boolean")];
const DELETE: &[Param] = &[
    ("dryRun", "string"),
    ("gracePeriodSeconds", "integer"),
    ("orphanDependents", "boolean"),
    ("propagationPolicy", "string"),
];

/// One operation, before it is written as v3 or v2.
struct Op {
    method: &'static str,
    action: &'static str,
    id: String,
    query: Vec<Param>,
    /// Schema names of the request body and the response.
    body: Option<String>,
    response: String,
    gvk: (String, String, String),
}

/// `Core`, `Apps`, `RbacAuthorization`: the group as Kubernetes' operation ids spell it.
fn group_word(group: &str) -> String {
    let g = if group.is_empty() { "core" } else { group.trim_end_matches(".k8s.io") };
    g.split('.').map(title).collect()
}

fn title(s: &str) -> String {
    let mut c = s.chars();
    c.next().map(|f| f.to_uppercase().collect::<String>() + c.as_str()).unwrap_or_default()
}

/// The paths and operations of one resource: `(path, path parameters, operations)`.
fn operations(r: &ResourceInfo, d: &Definitions) -> Vec<(String, Vec<Param>, Vec<Op>)> {
    let Some(kind_def) = d.served.get(&format!("{}/{}", r.api_version(), r.kind)).cloned() else {
        return Vec::new();
    };
    let (list_def, status, patch, delete_options) =
        (format!("{kind_def}List"), format!("{META}.Status"), format!("{META}.Patch"), format!("{META}.DeleteOptions"));
    let gv = format!("{}{}", group_word(r.group), title(r.version));
    let ns = if r.namespaced { "Namespaced" } else { "" };
    // listAppsV1NamespacedDeployment, deleteCoreV1CollectionNamespacedPod, readAppsV1NamespacedDeploymentScale.
    let id = |verb: &str, infix: &str, suffix: &str| format!("{verb}{gv}{infix}{}{suffix}", r.kind);
    let op = |method, action, id: String, query: &[Param], body: Option<&str>, response: &str| Op {
        method,
        action,
        id,
        query: query.to_vec(),
        body: body.map(str::to_string),
        response: response.to_string(),
        gvk: (r.group.to_string(), r.version.to_string(), r.kind.to_string()),
    };
    let prefix = format!("/{}", gv_path(r.group, r.version));
    let (collection, scope): (String, Vec<Param>) = if r.namespaced {
        (format!("{prefix}/namespaces/{{namespace}}/{}", r.plural), vec![("namespace", "string")])
    } else {
        (format!("{prefix}/{}", r.plural), vec![])
    };
    let item = format!("{collection}/{{name}}");
    let named: Vec<Param> = std::iter::once(("name", "string")).chain(scope.iter().copied()).collect();
    let list_and_delete: Vec<Param> = LIST.iter().chain(DELETE).copied().collect();
    let mut out = vec![
        (
            collection,
            scope.clone(),
            vec![
                op("get", "list", id("list", ns, ""), LIST, None, &list_def),
                op("post", "post", id("create", ns, ""), WRITE, Some(&kind_def), &kind_def),
                op(
                    "delete",
                    "deletecollection",
                    id("delete", &format!("Collection{ns}"), ""),
                    &list_and_delete,
                    Some(&delete_options),
                    &status,
                ),
            ],
        ),
        (
            item.clone(),
            named.clone(),
            vec![
                op("get", "get", id("read", ns, ""), &[], None, &kind_def),
                op("put", "put", id("replace", ns, ""), WRITE, Some(&kind_def), &kind_def),
                op("patch", "patch", id("patch", ns, ""), PATCH, Some(&patch), &kind_def),
                op("delete", "delete", id("delete", ns, ""), DELETE, Some(&delete_options), &status),
            ],
        ),
    ];
    if r.namespaced {
        let all = format!("{prefix}/{}", r.plural);
        out.push((all, vec![], vec![op("get", "list", id("list", "", "ForAllNamespaces"), LIST, None, &list_def)]));
    }
    for sub in [Subresource::Status, Subresource::Approval, Subresource::Scale].into_iter().filter(|s| r.has(*s)) {
        let (def, gvk) = match sub {
            Subresource::Scale => ("io.k8s.api.autoscaling.v1.Scale".to_string(), ("autoscaling", "v1", "Scale")),
            _ => (kind_def.clone(), (r.group, r.version, r.kind)),
        };
        let suffix = title(sub.name());
        let mut ops = vec![
            op("get", "get", id("read", ns, &suffix), &[], None, &def),
            op("put", "put", id("replace", ns, &suffix), WRITE, Some(&def), &def),
            op("patch", "patch", id("patch", ns, &suffix), PATCH, Some(&patch), &def),
        ];
        for o in &mut ops {
            o.gvk = (gvk.0.to_string(), gvk.1.to_string(), gvk.2.to_string());
        }
        out.push((format!("{item}/{}", sub.name()), named.clone(), ops));
    }
    out
}

const PATCH_TYPES: &[&str] = &[
    "application/apply-patch+yaml",
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
];

fn op_common(o: &Op) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("operationId".into(), o.id.clone().into());
    m.insert("x-kubernetes-action".into(), o.action.into());
    m.insert("x-kubernetes-group-version-kind".into(), json!({"group": o.gvk.0, "version": o.gvk.1, "kind": o.gvk.2}));
    m
}

fn v3_operation(o: &Op) -> Value {
    let mut m = op_common(o);
    let param = |(name, ty): &Param| json!({"name": name, "in": "query", "schema": {"type": ty, "uniqueItems": true}});
    m.insert("parameters".into(), o.query.iter().map(param).collect());
    if let Some(body) = &o.body {
        let schema = json!({"schema": {"$ref": format!("{REF}{body}")}});
        let types: Vec<&str> = if o.method == "patch" { PATCH_TYPES.to_vec() } else { vec!["*/*"] };
        let content: Map<String, Value> = types.into_iter().map(|t| (t.to_string(), schema.clone())).collect();
        m.insert("requestBody".into(), json!({"content": content, "required": o.method != "delete"}));
    }
    let ok = json!({"description": "OK", "content": {"application/json": {"schema": {"$ref": format!("{REF}{}", o.response)}}}});
    m.insert("responses".into(), json!({"200": ok}));
    Value::Object(m)
}

fn v2_operation(o: &Op) -> Value {
    let mut m = op_common(o);
    let mut params: Vec<Value> = o
        .query
        .iter()
        .map(|(name, ty)| json!({"name": name, "in": "query", "type": ty, "uniqueItems": true}))
        .collect();
    if let Some(body) = &o.body {
        let required = o.method != "delete";
        params.insert(0, json!({"name": "body", "in": "body", "required": required, "schema": {"$ref": format!("#/definitions/{body}")}}));
    }
    m.insert("parameters".into(), params.into());
    let consumes: Vec<&str> = if o.method == "patch" { PATCH_TYPES.to_vec() } else { vec!["*/*"] };
    m.insert("consumes".into(), json!(consumes));
    m.insert("produces".into(), json!(["application/json", "application/yaml", "application/vnd.kubernetes.protobuf"]));
    m.insert("schemes".into(), json!(["https"]));
    m.insert(
        "responses".into(),
        json!({"200": {"description": "OK", "schema": {"$ref": format!("#/definitions/{}", o.response)}}}),
    );
    Value::Object(m)
}

fn path_params(params: &[Param], v3: bool) -> Value {
    params
        .iter()
        .map(|(name, ty)| {
            if v3 {
                json!({"name": name, "in": "path", "required": true, "schema": {"type": ty, "uniqueItems": true}})
            } else {
                json!({"name": name, "in": "path", "required": true, "type": ty, "uniqueItems": true})
            }
        })
        .collect()
}

/// v3 spells a described reference `{"description", "allOf": [{"$ref"}]}` (OpenAPI 3.0 ignores
/// a `$ref`'s siblings); v2 keeps them side by side and names `#/definitions/`.
fn shape(v: &mut Value, v3: bool) {
    match v {
        Value::Object(m) => {
            m.values_mut().for_each(|c| shape(c, v3));
            if let Some(Value::String(r)) = m.get_mut("$ref") {
                if !v3 {
                    *r = r.replacen(REF, "#/definitions/", 1);
                } else if m.len() > 1 {
                    let r = m.remove("$ref").unwrap_or_default();
                    m.insert("allOf".into(), json!([{"$ref": r}]));
                }
            }
        }
        Value::Array(a) => a.iter_mut().for_each(|c| shape(c, v3)),
        _ => {}
    }
}

fn info() -> Value {
    json!({"title": "Kubernetes", "version": super::discovery::version()["gitVersion"]})
}

fn build(extracted: Value) -> Documents {
    let d = Definitions::new(extracted);
    let groups: Vec<(&str, &str)> = {
        let mut g: Vec<(&str, &str)> = Vec::new();
        for r in RESOURCES {
            if !g.contains(&(r.group, r.version)) {
                g.push((r.group, r.version));
            }
        }
        g
    };
    let mut v3 = BTreeMap::new();
    let (mut v2_paths, mut v2_roots) = (Map::new(), Vec::new());
    for (group, version) in &groups {
        let mut paths = Map::new();
        let mut roots = Vec::new();
        for r in RESOURCES.iter().filter(|r| r.group == *group && r.version == *version) {
            for (path, params, ops) in operations(r, &d) {
                let (mut p3, mut p2) = (Map::new(), Map::new());
                for o in &ops {
                    roots.push(o.response.clone());
                    roots.extend(o.body.clone());
                    p3.insert(o.method.into(), v3_operation(o));
                    p2.insert(o.method.into(), v2_operation(o));
                }
                p3.insert("parameters".into(), path_params(&params, true));
                p2.insert("parameters".into(), path_params(&params, false));
                paths.insert(path.clone(), Value::Object(p3));
                v2_paths.insert(path, Value::Object(p2));
            }
        }
        let mut schemas = Value::Object(d.closure(roots.iter().map(String::as_str)));
        shape(&mut schemas, true);
        let doc = json!({"openapi": "3.0.0", "info": info(), "paths": paths, "components": {"schemas": schemas}});
        v3.insert(gv_path(group, version), served(serde_json::to_vec(&doc).unwrap_or_default()));
        v2_roots.extend(roots);
    }
    let url = |gv: &str, hash: &str| format!("/openapi/v3/{gv}?hash={hash}");
    let index: Map<String, Value> = v3
        .iter()
        .map(|(gv, doc): (&String, &Served)| (gv.clone(), json!({"serverRelativeURL": url(gv, &doc.hash)})))
        .collect();
    let mut definitions = Value::Object(d.closure(v2_roots.iter().map(String::as_str)));
    shape(&mut definitions, false);
    let v2 = json!({"swagger": "2.0", "info": info(), "paths": v2_paths, "definitions": definitions});
    Documents {
        index: served(serde_json::to_vec(&json!({"paths": index})).unwrap_or_default()),
        v3,
        v2_protobuf: served(gnostic::encode(&v2)),
        v2_json: served(serde_json::to_vec(&v2).unwrap_or_default()),
    }
}

/// The documents, built off the async workers the first time.
async fn loaded() -> &'static Documents {
    tokio::task::spawn_blocking(documents).await.unwrap_or_else(|_| documents())
}

/// A document with its ETag; `If-None-Match` with that ETag gets 304, as kube-openapi answers.
fn respond(doc: &Served, content_type: &str, headers: &HeaderMap) -> Response {
    let etag = format!("\"{}\"", doc.hash);
    let cached = headers
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.split(',').any(|t| t.trim() == etag || t.trim() == "*"));
    let mut r = if cached {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        ([(header::CONTENT_TYPE, content_type)], doc.body.clone()).into_response()
    };
    if let Ok(v) = HeaderValue::from_str(&etag) {
        r.headers_mut().insert(header::ETAG, v);
    }
    r.headers_mut().insert(header::VARY, HeaderValue::from_static("Accept"));
    r
}

/// `GET /openapi/v2`: protobuf when the Accept header names it (kubectl), JSON otherwise.
pub async fn serve_v2(headers: HeaderMap) -> Response {
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).unwrap_or("");
    let docs = loaded().await;
    if accept.contains("application/com.github.proto-openapi.spec.v2") {
        respond(&docs.v2_protobuf, V2_PROTOBUF, &headers)
    } else {
        respond(&docs.v2_json, "application/json", &headers)
    }
}

/// `GET /openapi/v3`: the index of group-version documents.
pub async fn serve_v3_index(headers: HeaderMap) -> Response {
    respond(&loaded().await.index, "application/json", &headers)
}

/// `GET /openapi/v3/<gv>`: with the current `?hash=` it may be cached for good; with an old one
/// the client is sent to the current URL (301), as kube-openapi does.
pub async fn serve_v3(gv: String, query: Option<String>, headers: HeaderMap) -> Response {
    let docs = loaded().await;
    let gv = gv.trim_matches('/');
    let Some(doc) = docs.v3.get(gv) else {
        return super::errors::ApiError::new(404, "NotFound", "the server could not find the requested resource")
            .into_response();
    };
    let hash = serde_urlencoded::from_str::<Vec<(String, String)>>(query.as_deref().unwrap_or(""))
        .unwrap_or_default()
        .into_iter()
        .find_map(|(k, v)| (k == "hash").then_some(v));
    match hash {
        Some(h) if h != doc.hash => {
            let mut r = StatusCode::MOVED_PERMANENTLY.into_response();
            if let Ok(v) = HeaderValue::from_str(&docs.index_url(gv)) {
                r.headers_mut().insert(header::LOCATION, v);
            }
            r
        }
        Some(_) => {
            let mut r = respond(doc, "application/json", &headers);
            r.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("public, immutable"));
            r
        }
        None => respond(doc, "application/json", &headers),
    }
}

#[cfg(test)]
mod tests;
