//! Request limits as kube-apiserver has them: the body size (`--max-request-body-bytes`), the
//! requests in flight (`--max-requests-inflight`, `--max-mutating-requests-inflight`, the
//! maxinflight filter) and the timeout of requests that are not long-running (`--request-timeout`).

use super::errors::ApiError;
use crate::auth::Attributes;
use axum::body::{Body, Bytes};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// kube-apiserver's defaults: 3 MiB, 400 and 200 requests in flight, 1m0s.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The largest request body (0: no limit); also what one JSON patch's copies may add.
    pub max_request_body_bytes: usize,
    /// Read-only requests (get, list) served at once, long-running ones aside (0: no limit).
    pub max_requests_inflight: usize,
    /// Other requests served at once (0: no limit).
    pub max_mutating_requests_inflight: usize,
    /// How long a request that is not long-running may take before it is answered 504.
    pub request_timeout: Duration,
    /// How long a connection may take to send a request's headers, and may sit idle between
    /// requests, before it is closed (kube-apiserver: `ReadHeaderTimeout` 32s).
    pub header_read_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_request_body_bytes: 3 * 1024 * 1024,
            max_requests_inflight: 400,
            max_mutating_requests_inflight: 200,
            request_timeout: Duration::from_secs(60),
            header_read_timeout: Duration::from_secs(32),
        }
    }
}

/// Kubernetes' `BasicLongRunningRequestCheck` as kube-apiserver configures it: watches and
/// proxies, and the attach, exec, log, portforward and proxy subresources.
pub fn long_running(a: &Attributes) -> bool {
    matches!(a.verb.as_str(), "watch" | "proxy")
        || (a.resource_request && matches!(a.subresource.as_str(), "attach" | "exec" | "log" | "portforward" | "proxy"))
}

/// `request_kind` of `apiserver_current_inflight_requests`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    ReadOnly,
    Mutating,
}

impl Kind {
    /// Kubernetes' `nonMutatingRequestVerbs`: get, list, watch; everything else mutates.
    pub fn of(a: &Attributes) -> Self {
        if a.is_read_only() {
            Kind::ReadOnly
        } else {
            Kind::Mutating
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Kind::ReadOnly => "readOnly",
            Kind::Mutating => "mutating",
        }
    }
}

/// The slots of one kind: how many are taken, and how many there are (0: unlimited).
#[derive(Debug)]
struct Slots {
    limit: usize,
    used: Arc<AtomicUsize>,
}

impl Slots {
    fn new(limit: usize) -> Self {
        Self { limit, used: Arc::default() }
    }

    fn try_take(&self) -> Option<Permit> {
        let fits = |n: usize| (self.limit == 0 || n < self.limit).then_some(n + 1);
        self.used.fetch_update(Ordering::AcqRel, Ordering::Acquire, fits).ok()?;
        Some(Permit(Some(self.used.clone())))
    }
}

/// A request's slot, given back when dropped (an empty one holds nothing).
#[derive(Debug)]
pub struct Permit(Option<Arc<AtomicUsize>>);

impl Drop for Permit {
    fn drop(&mut self) {
        if let Some(used) = &self.0 {
            used.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// The maxinflight filter's state: one pool of slots per kind.
#[derive(Debug)]
pub struct Inflight {
    read_only: Slots,
    mutating: Slots,
}

impl Inflight {
    pub fn new(limits: &Limits) -> Self {
        Self {
            read_only: Slots::new(limits.max_requests_inflight),
            mutating: Slots::new(limits.max_mutating_requests_inflight),
        }
    }

    fn slots(&self, kind: Kind) -> &Slots {
        match kind {
            Kind::ReadOnly => &self.read_only,
            Kind::Mutating => &self.mutating,
        }
    }

    /// A slot for the request, or None when its kind is full. Members of `system:masters` are
    /// served anyway, holding no slot, as in kube-apiserver ("a system:master is so powerful
    /// that they should always get an answer").
    pub fn admit(&self, a: &Attributes) -> Option<Permit> {
        self.slots(Kind::of(a))
            .try_take()
            .or_else(|| a.user.in_group(crate::auth::names::SYSTEM_PRIVILEGED_GROUP).then_some(Permit(None)))
    }

    /// Requests of `kind` being served now.
    pub fn current(&self, kind: Kind) -> usize {
        self.slots(kind).used.load(Ordering::Acquire)
    }
}

/// kube-apiserver's answer when the slots are full: a plain-text 429 (`http.Error`), with
/// `Retry-After: 1`.
pub fn too_many_requests() -> Response {
    let mut r = (StatusCode::TOO_MANY_REQUESTS, "Too many requests, please try again later.\n").into_response();
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    h.insert(header::HeaderName::from_static("x-content-type-options"), HeaderValue::from_static("nosniff"));
    h.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    r
}

/// The 413 for a body over `limit` bytes (Kubernetes' `limitedReadBody`).
pub fn body_too_large(limit: usize) -> ApiError {
    ApiError::entity_too_large(format!("limit is {limit}"))
}

/// A request's body, at most `limit` bytes (0: any size). A declared Content-Length over the
/// limit is refused before anything is read; a chunked body once it passes the limit.
pub async fn read_body(headers: &HeaderMap, body: Body, limit: usize) -> Result<Bytes, ApiError> {
    let limit = if limit == 0 { usize::MAX } else { limit };
    let declared = headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(body_too_large(limit));
    }
    match Limited::new(body, limit).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.is::<LengthLimitError>() => Err(body_too_large(limit)),
        Err(e) => Err(ApiError::bad_request(format!("failed to read the request body: {e}"))),
    }
}

/// Serve `request` within `timeout`, else answer Kubernetes' 504. As in kube-apiserver the
/// request goes on to its end in the background (its writes are not cut in half); what it holds,
/// its in-flight slot included, is given back then. The handler runs in the connection's own task
/// until the deadline and is moved to a task of its own only then: spawned from the start, its
/// answer waited behind every task its write woke (a PATCH seen by 1,000 watches answered 2.4x
/// later, docs/benchmarks.md).
pub async fn within<F>(timeout: Duration, request: F) -> Response
where
    F: Future<Output = Response> + Send + 'static,
{
    use futures::FutureExt;
    let failed = |e: Box<dyn std::any::Any + Send>| {
        let why = e.downcast_ref::<&str>().map(|s| s.to_string()).or_else(|| e.downcast_ref::<String>().cloned());
        ApiError::internal(format!("the request handler failed: {}", why.unwrap_or_else(|| "panic".into())))
            .into_response()
    };
    let mut request = std::panic::AssertUnwindSafe(request).catch_unwind().boxed();
    tokio::select! {
        biased;
        done = &mut request => done.unwrap_or_else(failed),
        () = tokio::time::sleep(timeout) => {
            tokio::spawn(request);
            timed_out().into_response()
        }
    }
}

/// `Timeout: request did not complete within requested timeout - context deadline exceeded`.
pub fn timed_out() -> ApiError {
    let mut e =
        ApiError::timeout("Timeout: request did not complete within requested timeout - context deadline exceeded");
    e.details = Some(serde_json::json!({}));
    e
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::{request_info, UserInfo};

    fn attrs(groups: &[&str], method: &str, path: &str, query: Option<&str>) -> Attributes {
        request_info::for_user(Arc::new(UserInfo::new("u", groups)), method, path, query)
    }

    fn limits(read_only: usize, mutating: usize) -> Limits {
        Limits { max_requests_inflight: read_only, max_mutating_requests_inflight: mutating, ..Limits::default() }
    }

    #[test]
    fn a_full_kind_refuses_until_a_slot_is_given_back() {
        let f = Inflight::new(&limits(1, 1));
        let post = attrs(&[], "POST", "/api/v1/namespaces/d/pods", None);
        let held = f.admit(&post).expect("the first takes the slot");
        assert_eq!(f.current(Kind::Mutating), 1);
        assert!(f.admit(&post).is_none(), "the second is refused");
        let get = attrs(&[], "GET", "/api/v1/namespaces/d/pods", None);
        assert!(f.admit(&get).is_some(), "reads have their own slots");
        drop(held);
        assert_eq!(f.current(Kind::Mutating), 0);
        assert!(f.admit(&post).is_some(), "the slot came back");
    }

    #[test]
    fn system_masters_are_served_over_the_limit_without_a_slot() {
        let f = Inflight::new(&limits(1, 1));
        let _held = f.admit(&attrs(&[], "DELETE", "/api/v1/nodes/a", None)).expect("slot");
        let admin = f.admit(&attrs(&["system:masters"], "DELETE", "/api/v1/nodes/a", None));
        assert!(admin.is_some());
        assert_eq!(f.current(Kind::Mutating), 1, "the admin holds no slot");
    }

    #[test]
    fn zero_is_no_limit() {
        let f = Inflight::new(&limits(0, 0));
        let permits: Vec<_> =
            (0..1000).filter_map(|_| f.admit(&attrs(&[], "PATCH", "/api/v1/nodes/a/status", None))).collect();
        assert_eq!((permits.len(), f.current(Kind::Mutating)), (1000, 1000));
    }

    #[test]
    fn watches_exec_attach_logs_and_port_forwards_are_long_running() {
        let pod = "/api/v1/namespaces/d/pods/p";
        assert!(long_running(&attrs(&[], "GET", "/api/v1/pods", Some("watch=true"))));
        assert!(long_running(&attrs(&[], "GET", "/api/v1/watch/pods", None)));
        for sub in ["exec", "attach", "log", "portforward"] {
            assert!(long_running(&attrs(&[], "POST", &format!("{pod}/{sub}"), None)), "{sub}");
        }
        assert!(!long_running(&attrs(&[], "GET", pod, None)));
        assert!(!long_running(&attrs(&[], "PATCH", &format!("{pod}/status"), None)));
        assert!(!long_running(&attrs(&[], "GET", "/api/v1/pods", None)));
    }

    #[test]
    fn reads_and_writes_are_told_apart_as_kubernetes_does() {
        assert_eq!(Kind::of(&attrs(&[], "GET", "/api/v1/pods", None)), Kind::ReadOnly);
        assert_eq!(Kind::of(&attrs(&[], "GET", "/healthz", None)), Kind::ReadOnly);
        assert_eq!(
            Kind::of(&attrs(&[], "POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", None)),
            Kind::Mutating
        );
    }

    #[tokio::test]
    async fn a_request_past_the_timeout_is_a_504_and_runs_to_its_end() {
        let (open, gate) = tokio::sync::oneshot::channel::<()>();
        let (finished, done) = tokio::sync::oneshot::channel();
        let stuck = async move {
            let _ = gate.await;
            let _ = finished.send(());
            "late".into_response()
        };
        let r = within(Duration::from_millis(10), stuck).await;
        assert_eq!(r.status(), StatusCode::GATEWAY_TIMEOUT);
        let _ = open.send(());
        done.await.expect("the handler went on to its end after the answer");
        let e = timed_out().status_json();
        assert_eq!(e["reason"], "Timeout");
        assert_eq!(e["code"], 504);
        let fast = within(Duration::from_secs(60), async { "ok".into_response() }).await;
        assert_eq!(fast.status(), StatusCode::OK);
    }
}
