//! HTTP front: routes, request decoding, dispatch to the registry and the watch cache.

mod collection;
pub mod discovery;
pub mod errors;
pub mod exec;
pub mod limits;
mod lists;
pub mod logs;
pub mod openapi;
pub mod path;
pub mod pipeline;
pub(crate) mod protobuf;
pub mod proxy;
mod proxy_rewrite;
pub mod reviews;
pub mod serve;
pub mod table;
mod watch;

use crate::agent_client::AgentClient;
use crate::auth::UserInfo;
use crate::cache::Cache;
use crate::metrics::Metrics;
use crate::registry::{
    DeleteOptions, FieldValidation, Outcome, PatchType, Propagation, Registry, ScaleOp, WriteOptions,
};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use discovery::DiscoveryFormat;
use errors::{ApiError, ApiResult};
use kaji_api::resources::{lookup, ResourceInfo, Subresource};
use path::{ApiPath, ResourcePath};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;
use tracing::Instrument;

/// Everything a request handler needs.
pub struct AppState {
    /// Authentication and authorization, run before every handler.
    pub security: pipeline::Security,
    pub registry: Registry,
    pub cache: Arc<Cache>,
    /// Reaches the nodes' agents (pods/log, pods/exec).
    pub agents: AgentClient,
    pub metrics: Metrics,
    pub shutdown: tokio::sync::watch::Receiver<bool>,
    /// host:port clients reach this server at (legacy discovery's serverAddress).
    pub advertise: String,
    /// Issues `serviceaccounts/{name}/token` (None without `--service-account-signing-key-file`).
    pub service_account_tokens: Option<Arc<crate::serviceaccount::Tokens>>,
    /// The request limits, and the requests in flight they count.
    pub limits: limits::Limits,
    pub inflight: limits::Inflight,
    /// `--audit-policy-file` and `--audit-log-*` (None: nothing is audited).
    pub audit: Option<Arc<crate::audit::Audit>>,
}

pub type Shared = Arc<AppState>;

pub fn router(state: Shared) -> Router {
    Router::new()
        // Like go-restful, every route under /version, /api and /apis is served with or without a
        // trailing slash (the Python client asks for /version/); /api and /apis paths are parsed
        // without it. The health, metrics and OpenAPI paths are exact in Kubernetes too.
        .route("/version", get(version))
        .route("/version/", get(version))
        .route("/healthz", get(health))
        .route("/livez", get(health))
        .route("/readyz", get(health))
        .route("/metrics", get(metrics))
        .route("/openapi/v2", get(openapi::serve_v2))
        .route("/openapi/v3", get(openapi::serve_v3_index))
        .route("/openapi/v3/{*gv}", get(openapi_doc))
        .route("/api/v1/namespaces/{ns}/pods/{name}/exec", axum::routing::any(exec::serve))
        .route("/api/v1/namespaces/{ns}/pods/{name}/exec/", axum::routing::any(exec::serve))
        .route("/api/v1/namespaces/{ns}/pods/{name}/attach", axum::routing::any(exec::serve_attach))
        .route("/api/v1/namespaces/{ns}/pods/{name}/attach/", axum::routing::any(exec::serve_attach))
        .route("/api/v1/namespaces/{ns}/pods/{name}/portforward", axum::routing::any(exec::serve_portforward))
        .route("/api/v1/namespaces/{ns}/pods/{name}/portforward/", axum::routing::any(exec::serve_portforward))
        .route("/api/v1/namespaces/{ns}/pods/{name}/proxy", axum::routing::any(proxy::serve_pod))
        .route("/api/v1/namespaces/{ns}/pods/{name}/proxy/", axum::routing::any(proxy::serve_pod))
        .route("/api/v1/namespaces/{ns}/pods/{name}/proxy/{*rest}", axum::routing::any(proxy::serve_pod_path))
        .route("/api/v1/namespaces/{ns}/services/{name}/proxy", axum::routing::any(proxy::serve_service))
        .route("/api/v1/namespaces/{ns}/services/{name}/proxy/", axum::routing::any(proxy::serve_service))
        .route("/api/v1/namespaces/{ns}/services/{name}/proxy/{*rest}", axum::routing::any(proxy::serve_service_path))
        .fallback(api)
        .layer(axum::middleware::from_fn_with_state(state.clone(), pipeline::filter))
        .with_state(state)
}

async fn version() -> Response {
    json_response(200, &discovery::version())
}

async fn health(State(s): State<Shared>) -> Response {
    if *s.shutdown.borrow() {
        return (StatusCode::SERVICE_UNAVAILABLE, "shutting down").into_response();
    }
    "ok".into_response()
}

async fn metrics(State(s): State<Shared>) -> Response {
    s.metrics.watchers.set(s.cache.total_watchers() as i64);
    for kind in [limits::Kind::ReadOnly, limits::Kind::Mutating] {
        s.metrics.set_inflight(kind.label(), s.inflight.current(kind));
    }
    if let Some(size) = s.registry.store.size() {
        s.metrics.set_storage_size(size);
    }
    for r in kaji_api::resources::RESOURCES {
        if let Some(rc) = s.cache.resource(r.kind) {
            let labels = crate::metrics::ResourceLabels { resource: r.plural.into() };
            s.metrics.objects.get_or_create(&labels).set(rc.len() as i64);
        }
    }
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], s.metrics.render()).into_response()
}

async fn openapi_doc(
    axum::extract::Path(gv): axum::extract::Path<String>,
    axum::extract::RawQuery(query): axum::extract::RawQuery,
    headers: HeaderMap,
) -> Response {
    openapi::serve_v3(gv, query, headers).await
}

pub fn json_response(code: u16, body: &Value) -> Response {
    let code = StatusCode::from_u16(code).unwrap_or(StatusCode::OK);
    (code, [(header::CONTENT_TYPE, "application/json")], serde_json::to_vec(body).unwrap_or_default()).into_response()
}

fn not_found() -> ApiError {
    ApiError::new(404, "NotFound", "the server could not find the requested resource")
}

/// Query parameters as a map (the last value wins).
#[derive(Default)]
pub struct Query(HashMap<String, String>);

impl Query {
    fn parse(uri: &Uri) -> ApiResult<Self> {
        let q = uri.query().unwrap_or("");
        let pairs: Vec<(String, String)> =
            serde_urlencoded::from_str(q).map_err(|e| ApiError::bad_request(format!("invalid query: {e}")))?;
        Ok(Self(pairs.into_iter().collect()))
    }

    pub fn get(&self, k: &str) -> Option<&str> {
        self.0.get(k).map(String::as_str)
    }

    pub fn flag(&self, k: &str) -> bool {
        matches!(self.get(k), Some("true" | "1"))
    }

    pub fn int(&self, k: &str) -> ApiResult<Option<i64>> {
        match self.get(k).filter(|s| !s.is_empty()) {
            None => Ok(None),
            Some(s) => s.parse().map(Some).map_err(|_| ApiError::bad_request(format!("invalid value for {k}: {s:?}"))),
        }
    }
}

fn content_type(headers: &HeaderMap) -> String {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|s| s.split(';').next().unwrap_or("").trim().to_ascii_lowercase())
        .unwrap_or_default()
}

/// Decode a JSON, YAML or Kubernetes protobuf request body.
fn decode_body(headers: &HeaderMap, body: &[u8]) -> ApiResult<Value> {
    let ct = content_type(headers);
    match ct.as_str() {
        // A missing Content-Type is JSON, as the real apiserver's first serializer.
        "" | "application/json" | "*/*" => {
            serde_json::from_slice(body).map_err(|e| ApiError::bad_request(format!("error decoding JSON body: {e}")))
        }
        "application/yaml" | "application/x-yaml" | "text/yaml" => {
            let text = std::str::from_utf8(body).map_err(|_| ApiError::bad_request("the YAML body is not UTF-8"))?;
            serde_saphyr::from_str::<Value>(text)
                .map_err(|e| ApiError::bad_request(format!("error decoding YAML body: {e}")))
        }
        protobuf::MEDIA_TYPE => Ok(protobuf::decode(body)?),
        other => Err(ApiError::unsupported_media_type(other)),
    }
}

/// The manager a write is recorded under: `fieldManager`, else the User-Agent's product (as Kubernetes).
fn field_manager(q: &Query, headers: &HeaderMap) -> ApiResult<String> {
    if let Some(m) = q.get("fieldManager").filter(|m| !m.is_empty()) {
        if m.len() > 128 || m.chars().any(char::is_control) {
            return Err(ApiError::bad_request("fieldManager: Invalid value: must be at most 128 printable characters"));
        }
        return Ok(m.to_string());
    }
    let ua = headers.get(header::USER_AGENT).and_then(|v| v.to_str().ok()).unwrap_or("");
    let product = ua.split('/').next().unwrap_or("");
    Ok(product.chars().filter(|c| !c.is_control()).take(128).collect())
}

fn write_options(q: &Query, headers: &HeaderMap, user: &Arc<UserInfo>) -> ApiResult<WriteOptions> {
    Ok(WriteOptions {
        user: user.clone(),
        field_manager: Some(field_manager(q, headers)?),
        subresource: None,
        dry_run: match q.get("dryRun") {
            None | Some("") => false,
            Some("All") => true,
            Some(other) => {
                return Err(ApiError::bad_request(format!("unsupported dryRun value {other:?}: only All is supported")))
            }
        },
        field_validation: FieldValidation::parse(q.get("fieldValidation"))?,
    })
}

fn delete_options(q: &Query, body: &[u8], headers: &HeaderMap, user: &Arc<UserInfo>) -> ApiResult<DeleteOptions> {
    let mut o =
        DeleteOptions { user: user.clone(), grace_period_seconds: q.int("gracePeriodSeconds")?, ..Default::default() };
    o.dry_run = q.get("dryRun") == Some("All");
    let mut policy = q.get("propagationPolicy").filter(|p| !p.is_empty()).map(str::to_string);
    let mut orphan = match q.get("orphanDependents").filter(|v| !v.is_empty()) {
        None => None,
        Some("1" | "t" | "T" | "true" | "TRUE" | "True") => Some(true),
        Some("0" | "f" | "F" | "false" | "FALSE" | "False") => Some(false),
        Some(other) => return Err(ApiError::bad_request(format!("invalid value for orphanDependents: {other:?}"))),
    };
    if !body.iter().all(u8::is_ascii_whitespace) {
        let v = decode_body(headers, body)?;
        let known = kaji_api::schema::normalize("DeleteOptions", &v)
            .map_err(|e| ApiError::bad_request(format!("error decoding DeleteOptions: {e}")))?;
        if let Some(g) = known.get("gracePeriodSeconds").and_then(Value::as_i64) {
            o.grace_period_seconds = Some(g);
        }
        if known.get("dryRun").and_then(Value::as_array).is_some_and(|a| a.iter().any(|d| d == "All")) {
            o.dry_run = true;
        }
        o.precondition_uid = known.pointer("/preconditions/uid").and_then(Value::as_str).map(str::to_string);
        o.precondition_rv = known.pointer("/preconditions/resourceVersion").and_then(Value::as_str).map(str::to_string);
        // A body that speaks about propagation replaces the query's say, as Kubernetes reads one or the other.
        let body_policy = known.get("propagationPolicy").and_then(Value::as_str).map(str::to_string);
        let body_orphan = known.get("orphanDependents").and_then(Value::as_bool);
        if body_policy.is_some() || body_orphan.is_some() {
            (policy, orphan) = (body_policy, body_orphan);
        }
    }
    if o.grace_period_seconds.is_some_and(|g| g < 0) {
        o.grace_period_seconds = Some(0);
    }
    o.propagation = Propagation::from_options(policy.as_deref(), orphan)?;
    o.orphan_dependents = orphan;
    Ok(o)
}

/// An Eviction's `deleteOptions` as the delete it asks for; `dryRun` from the request or the
/// options, which must agree (`propagateDryRun`).
fn eviction_delete_options(q: &Query, eviction: &Value, user: &Arc<UserInfo>) -> ApiResult<DeleteOptions> {
    let body =
        eviction.get("deleteOptions").filter(|o| !o.is_null()).map(|o| serde_json::to_vec(o).unwrap_or_default());
    let mut o = delete_options(&Query::default(), body.as_deref().unwrap_or(b""), &HeaderMap::new(), user)?;
    let query_dry = q.get("dryRun") == Some("All");
    let body_dry = eviction.pointer("/deleteOptions/dryRun").and_then(Value::as_array).filter(|d| !d.is_empty());
    if let Some(d) = body_dry {
        if q.get("dryRun").is_some() && d.iter().any(|x| x == "All") != query_dry {
            return Err(ApiError::bad_request(format!(
                "Non-matching dry-run options in request and content: [{}] and {}",
                q.get("dryRun").unwrap_or(""),
                Value::Array(d.clone())
            )));
        }
    }
    o.dry_run = o.dry_run || query_dry;
    Ok(o)
}

/// `299 - "<text>"` with quotes and backslashes escaped.
fn warning_header(text: &str) -> Option<HeaderValue> {
    let escaped = text.replace('\\', "\\\\").replace('"', "\\\"");
    HeaderValue::from_str(&format!("299 - \"{escaped}\"")).ok()
}

fn outcome_response(out: Outcome) -> Response {
    let mut r = json_response(out.code, &out.body);
    for w in out.warnings {
        if let Some(h) = warning_header(&w) {
            r.headers_mut().append(header::WARNING, h);
        }
    }
    r
}

/// Everything under /api and /apis, and the 404 for anything else.
async fn api(
    State(s): State<Shared>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    user: Option<axum::Extension<Arc<UserInfo>>>,
    body: axum::body::Body,
) -> Response {
    let body = match limits::read_body(&headers, body, s.limits.max_request_body_bytes).await {
        Ok(b) => b,
        Err(e) => return e.into_response(),
    };
    let user = user.map(|u| u.0).unwrap_or_else(|| Arc::new(UserInfo::apiserver()));
    let started = Instant::now();
    let parsed = path::parse(uri.path());
    let (verb, resource) = match &parsed {
        Some(ApiPath::Resource(rp)) => {
            let watch = matches!(uri.query(), Some(q) if q.contains("watch=true") || q.contains("watch=1"));
            let verb = match (&method, rp.name.is_some(), watch) {
                // Kubernetes counts log reads as CONNECT, like exec and port-forward.
                (&Method::GET, true, _) if rp.subresource.as_deref() == Some(logs::SUBRESOURCE) => "CONNECT",
                (&Method::GET, _, true) => "WATCH",
                (&Method::GET, false, _) => "LIST",
                (&Method::DELETE, false, _) => "DELETECOLLECTION",
                (&Method::PATCH, _, _) if content_type(&headers) == "application/apply-patch+yaml" => "APPLY",
                (m, _, _) => m.as_str(),
            };
            let res = match &rp.subresource {
                Some(sub) => format!("{}/{sub}", rp.resource),
                None => rp.resource.clone(),
            };
            (verb.to_string(), res)
        }
        _ => (method.as_str().to_string(), String::new()),
    };
    let span = tracing::info_span!("request", verb = %verb, resource = %resource);
    let resp = async {
        let resp = match dispatch(&s, &method, &uri, &headers, &user, body, parsed).await {
            Ok(r) => r,
            Err(e) => {
                if e.code >= 500 {
                    tracing::error!(error = %e, path = %uri.path(), "request failed");
                } else {
                    tracing::debug!(error = %e, path = %uri.path(), "request refused");
                }
                e.into_response()
            }
        };
        tracing::debug!(code = resp.status().as_u16(), "done");
        resp
    }
    .instrument(span)
    .await;
    s.metrics.observe(&verb, &resource, resp.status().as_u16(), started.elapsed().as_secs_f64());
    resp
}

async fn dispatch(
    s: &Shared,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    user: &Arc<UserInfo>,
    body: Bytes,
    parsed: Option<ApiPath>,
) -> ApiResult<Response> {
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
    let q = Query::parse(uri)?;
    let path = uri.path().trim_end_matches('/');
    if *method == Method::GET && (path == "/api" || path == "/apis") {
        let core = path == "/api";
        let fmt = DiscoveryFormat::from_accept(&accept);
        let doc = match (fmt, core) {
            (DiscoveryFormat::Legacy, true) => discovery::legacy_api(&s.advertise),
            (DiscoveryFormat::Legacy, false) => discovery::legacy_apis(),
            (f, c) => discovery::aggregated(c, f),
        };
        let mut r = json_response(200, &doc);
        r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(fmt.content_type()));
        return Ok(r);
    }
    let rp = match parsed {
        None => return Err(not_found()),
        Some(ApiPath::Group { group }) if *method == Method::GET => {
            return discovery::legacy_group(&group).map(|g| json_response(200, &g)).ok_or_else(not_found)
        }
        Some(ApiPath::GroupVersion { group, version }) if *method == Method::GET => {
            return discovery::resource_list(&group, &version).map(|g| json_response(200, &g)).ok_or_else(not_found)
        }
        Some(ApiPath::Resource(rp)) => rp,
        Some(_) => {
            return Err(ApiError::method_not_allowed("the server does not allow this method on the requested resource"))
        }
    };
    let info = lookup(&rp.group, &rp.version, &rp.resource).ok_or_else(not_found)?;
    if !info.namespaced && rp.namespace.is_some() {
        return Err(not_found());
    }
    if info.namespaced && rp.name.is_some() && rp.namespace.is_none() {
        return Err(not_found());
    }
    if info.kind == "Pod" && rp.subresource.as_deref() == Some(logs::SUBRESOURCE) {
        return match (method, rp.namespace.as_deref(), rp.name.as_deref()) {
            (&Method::GET, Some(ns), Some(name)) => logs::serve(s, ns, name, &q).await,
            _ => Err(ApiError::method_not_allowed(format!(
                "the server does not allow this method on the requested resource ({method} pods/log)"
            ))),
        };
    }
    let sub = match &rp.subresource {
        None => None,
        Some(name) => Some(Subresource::parse(name).filter(|sr| info.has(*sr)).ok_or_else(not_found)?),
    };
    if info.is_virtual() {
        return reviews::serve(s, info, rp.namespace.as_deref(), rp.name.is_some(), method, headers, user, &body).await;
    }
    resource_request(s, info, &rp, sub, method, &q, headers, user, &accept, body).await
}

#[allow(clippy::too_many_arguments)]
async fn resource_request(
    s: &Shared,
    info: &'static ResourceInfo,
    rp: &ResourcePath,
    sub: Option<Subresource>,
    method: &Method,
    q: &Query,
    headers: &HeaderMap,
    user: &Arc<UserInfo>,
    accept: &str,
    body: Bytes,
) -> ApiResult<Response> {
    let ns = rp.namespace.as_deref();
    let reg = &s.registry;
    let watch = q.flag("watch");
    match (method, rp.name.as_deref(), sub) {
        (&Method::GET, None, None) if watch => watch::serve(s, info, ns, None, q, accept).await,
        (&Method::GET, None, None) => lists::list(s, info, ns, q, accept).await,
        (&Method::GET, Some(name), None) if watch => watch::serve(s, info, ns, Some(name), q, accept).await,
        (&Method::GET, Some(name), None | Some(Subresource::Status | Subresource::Approval)) => {
            let obj = reg.get(info, ns, name)?;
            Ok(lists::single(info, obj, accept))
        }
        (&Method::GET, Some(name), Some(Subresource::Scale)) => {
            let ns = ns.unwrap_or("default");
            Ok(outcome_response(reg.scale(info, ns, name, ScaleOp::Get, &write_options(q, headers, user)?).await?))
        }
        (&Method::POST, None, None) => {
            let v = decode_body(headers, &body)?;
            Ok(outcome_response(reg.create(info, ns, v, &write_options(q, headers, user)?).await?))
        }
        (&Method::POST, Some(name), Some(Subresource::Token)) => {
            // Without a signing key Kubernetes does not serve the subresource at all.
            let tokens = s.service_account_tokens.as_deref().ok_or_else(not_found)?;
            let v = decode_body(headers, &body)?;
            let opts = write_options(q, headers, user)?;
            let out = crate::serviceaccount::request::create(reg, tokens, ns.unwrap_or("default"), name, &v, &opts)?;
            Ok(outcome_response(out))
        }
        (&Method::POST, Some(name), Some(Subresource::Eviction)) => {
            let v = decode_body(headers, &body)?;
            let opts = eviction_delete_options(q, &v, user)?;
            Ok(outcome_response(reg.evict(ns.unwrap_or("default"), name, v, opts).await?))
        }
        (&Method::POST, Some(name), Some(Subresource::Binding)) => {
            let v = decode_body(headers, &body)?;
            Ok(outcome_response(reg.bind(ns.unwrap_or("default"), name, v, &write_options(q, headers, user)?).await?))
        }
        (&Method::PUT, Some(name), None | Some(Subresource::Status | Subresource::Approval)) => {
            let v = decode_body(headers, &body)?;
            Ok(outcome_response(reg.update(info, ns, name, v, sub, &write_options(q, headers, user)?).await?))
        }
        (&Method::PUT, Some(name), Some(Subresource::Scale)) => {
            let v = decode_body(headers, &body)?;
            let ns = ns.unwrap_or("default");
            Ok(outcome_response(reg.scale(info, ns, name, ScaleOp::Put(v), &write_options(q, headers, user)?).await?))
        }
        (&Method::PUT, Some(name), Some(Subresource::Finalize)) => {
            let v = decode_body(headers, &body)?;
            Ok(outcome_response(reg.finalize_namespace(name, v, &write_options(q, headers, user)?).await?))
        }
        (&Method::PATCH, Some(name), None | Some(Subresource::Status | Subresource::Approval | Subresource::Scale)) => {
            let kind = match content_type(headers).as_str() {
                "application/merge-patch+json" => PatchType::Merge,
                "application/json-patch+json" => PatchType::Json,
                "application/strategic-merge-patch+json" => PatchType::Strategic,
                "application/apply-patch+yaml" => {
                    if sub == Some(Subresource::Scale) {
                        return Err(ApiError::new(
                            415,
                            "UnsupportedMediaType",
                            "server-side apply is not served on the scale subresource; apply the object or patch its scale",
                        ));
                    }
                    if q.get("fieldManager").is_none_or(str::is_empty) {
                        return Err(ApiError::bad_request(crate::registry::REQUIRE_MANAGER));
                    }
                    let force = match q.get("force") {
                        None | Some("" | "false" | "0") => false,
                        Some("true" | "1") => true,
                        Some(other) => {
                            return Err(ApiError::bad_request(format!("invalid value for force: {other:?}")))
                        }
                    };
                    let opts = write_options(q, headers, user)?;
                    return Ok(outcome_response(reg.apply(info, ns, name, &body, sub, &opts, force).await?));
                }
                other => return Err(ApiError::unsupported_media_type(other)),
            };
            let opts = write_options(q, headers, user)?;
            let out = match sub {
                Some(Subresource::Scale) => {
                    reg.scale(info, ns.unwrap_or("default"), name, ScaleOp::Patch(kind, &body), &opts).await?
                }
                _ => reg.patch(info, ns, name, kind, &body, sub, &opts).await?,
            };
            Ok(outcome_response(out))
        }
        (&Method::DELETE, Some(name), None) => {
            let opts = delete_options(q, &body, headers, user)?;
            Ok(outcome_response(reg.delete(info, ns, name, &opts).await?))
        }
        (&Method::DELETE, None, None) => {
            let opts = delete_options(q, &body, headers, user)?;
            lists::delete_collection(s, info, ns, q, &opts).await
        }
        _ => Err(ApiError::method_not_allowed(format!(
            "the server does not allow this method on the requested resource ({} {})",
            method,
            errors::qualify(info.group, info.plural)
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(query: &str, body: &str) -> ApiResult<DeleteOptions> {
        let uri: Uri = format!("/api/v1/namespaces/default/pods/p?{query}").parse().expect("uri");
        delete_options(&Query::parse(&uri)?, body.as_bytes(), &HeaderMap::new(), &Arc::new(UserInfo::default()))
    }

    #[test]
    fn delete_options_read_the_policy_from_the_query_or_the_body() {
        let o = opts("propagationPolicy=Foreground", "").expect("valid");
        assert_eq!(o.propagation, Some(Propagation::Foreground));
        let o = opts("", r#"{"kind":"DeleteOptions","apiVersion":"v1","propagationPolicy":"Orphan"}"#).expect("valid");
        assert_eq!(o.propagation, Some(Propagation::Orphan));
        let o = opts("propagationPolicy=Orphan", r#"{"propagationPolicy":"Background"}"#).expect("valid");
        assert_eq!(o.propagation, Some(Propagation::Background), "the body wins");
        let o = opts("orphanDependents=false", "").expect("valid");
        assert_eq!((o.propagation, o.orphan_dependents), (Some(Propagation::Background), Some(false)));
        assert_eq!(opts("", "").expect("valid").propagation, None);
    }

    #[test]
    fn bad_delete_options_are_refused() {
        let err = opts("propagationPolicy=Later", "").expect_err("unknown policy");
        assert_eq!((err.code, err.reason), (422, "Invalid"));
        let err = opts("", r#"{"propagationPolicy":"Orphan","orphanDependents":true}"#).expect_err("both");
        assert_eq!(err.code, 422);
        assert_eq!(opts("orphanDependents=maybe", "").expect_err("not a bool").code, 400);
    }
}
