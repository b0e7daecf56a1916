//! API errors as Kubernetes `Status` objects with the right reason and code.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use kaji_api::validation::Cause;
use serde_json::{json, Value};

/// An error the API answers with; becomes a `metav1.Status`.
#[derive(Debug, Clone)]
pub struct ApiError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
    pub details: Option<Value>,
}

fn group_of(resource: &str, group: &str) -> Value {
    json!({"group": group, "kind": resource})
}

impl ApiError {
    pub fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        Self { code, reason, message: message.into(), details: None }
    }

    fn with(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }

    /// `pods "web" not found`
    pub fn not_found(group: &str, resource: &str, name: &str) -> Self {
        let qualified = qualify(group, resource);
        let mut d = group_of(resource, group);
        d["name"] = name.into();
        Self::new(404, "NotFound", format!("{qualified} \"{name}\" not found")).with(d)
    }

    pub fn already_exists(group: &str, resource: &str, name: &str) -> Self {
        let qualified = qualify(group, resource);
        let mut d = group_of(resource, group);
        d["name"] = name.into();
        Self::new(409, "AlreadyExists", format!("{qualified} \"{name}\" already exists")).with(d)
    }

    /// Optimistic-concurrency failure, worded as Kubernetes does.
    pub fn conflict(group: &str, resource: &str, name: &str, why: &str) -> Self {
        let qualified = qualify(group, resource);
        let mut d = group_of(resource, group);
        d["name"] = name.into();
        Self::new(409, "Conflict", format!("Operation cannot be fulfilled on {qualified} \"{name}\": {why}")).with(d)
    }

    pub fn stale(group: &str, resource: &str, name: &str) -> Self {
        Self::conflict(
            group,
            resource,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    pub fn invalid(group: &str, kind: &str, name: &str, causes: &[Cause]) -> Self {
        let message = kaji_api::validation::invalid_message(kind, name, causes);
        let causes: Vec<Value> =
            causes.iter().map(|c| json!({"reason": c.reason, "message": c.message, "field": c.field})).collect();
        Self::new(422, "Invalid", message).with(json!({"name": name, "group": group, "kind": kind, "causes": causes}))
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(403, "Forbidden", message)
    }

    pub fn method_not_allowed(message: impl Into<String>) -> Self {
        Self::new(405, "MethodNotAllowed", message)
    }

    pub fn unsupported_media_type(content_type: &str) -> Self {
        Self::new(415, "UnsupportedMediaType", format!("the body of the request was in an unknown format - accepted media types include: application/json, application/yaml, application/vnd.kubernetes.protobuf, application/merge-patch+json, application/json-patch+json, application/strategic-merge-patch+json, application/apply-patch+yaml (got {content_type:?})"))
    }

    /// Kubernetes' `NewRequestEntityTooLargeError`.
    pub fn entity_too_large(message: impl std::fmt::Display) -> Self {
        Self::new(413, "RequestEntityTooLarge", format!("Request entity too large: {message}"))
    }

    pub fn gone(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    pub fn timeout(message: impl Into<String>) -> Self {
        Self::new(504, "Timeout", message)
    }

    pub fn internal(message: impl std::fmt::Display) -> Self {
        Self::new(500, "InternalError", format!("Internal error occurred: {message}"))
    }

    pub fn status_json(&self) -> Value {
        let mut v = json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": self.message, "reason": self.reason, "code": self.code,
        });
        if let Some(d) = &self.details {
            v["details"] = d.clone();
        }
        v
    }
}

/// `pods` in core, `deployments.apps` elsewhere (Kubernetes' GroupResource string).
pub fn qualify(group: &str, resource: &str) -> String {
    if group.is_empty() {
        resource.to_string()
    } else {
        format!("{resource}.{group}")
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let code = StatusCode::from_u16(self.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let body = serde_json::to_vec(&self.status_json()).unwrap_or_default();
        let mut r = (code, [(axum::http::header::CONTENT_TYPE, "application/json")], body).into_response();
        // As the apiserver's response writers: a Status that says when to come back says it in
        // `Retry-After` too (client-go waits for it).
        let retry = self.details.as_ref().and_then(|d| d.get("retryAfterSeconds")).and_then(serde_json::Value::as_u64);
        if let Some(secs) = retry.filter(|s| *s > 0) {
            if let Ok(v) = axum::http::HeaderValue::from_str(&secs.to_string()) {
                r.headers_mut().insert(axum::http::header::RETRY_AFTER, v);
            }
        }
        r
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({}): {}", self.reason, self.code, self.message)
    }
}

pub type ApiResult<T> = Result<T, ApiError>;
