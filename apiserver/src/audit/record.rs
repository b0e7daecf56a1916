//! One request's audit record, driven by `http/pipeline.rs` as kube-apiserver's `WithAuditInit`,
//! `WithAudit` and `WithFailedAuthenticationAudit` drive theirs: an `Audit-Id` on every response;
//! with a policy, RequestReceived once authenticated, ResponseStarted for long-running requests
//! when their headers go out, ResponseComplete when the body ends (or the client goes away).
//! Bodies are tapped as they stream, never buffered ahead of the handler.

use super::event::{Bodies, Event, Received, User};
use super::policy::{Level, RequestConfig, Stage};
use super::Audit;
use crate::auth::{request_info, Attributes, Decision, UserInfo, Verdict};
use axum::body::Body;
use axum::extract::connect_info::ConnectInfo;
use axum::extract::Request;
use axum::http::{HeaderMap, HeaderValue};
use axum::response::Response;
use bytes::Bytes;
use http_body::{Frame, SizeHint};
use kaji_pki::listener::Peer;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

/// Kubernetes' `Audit-ID` header (Go writes it `Audit-Id`).
pub const HEADER: &str = "audit-id";
/// The most of a body an event keeps (beyond it the object is left out).
const MAX_BODY: usize = 4 * 1024 * 1024;

/// What a request carried, taken before the filters change it.
pub struct Recorder {
    audit: Arc<Audit>,
    id: String,
    received: jiff::Timestamp,
    uri: String,
    method: String,
    path: String,
    query: Option<String>,
    user_agent: String,
    source_ips: Vec<String>,
    /// The failed-authentication message: what credentials were tried.
    auth_methods: String,
    authenticated: bool,
    active: Option<Active>,
}

struct Active {
    audit: Arc<Audit>,
    config: RequestConfig,
    event: Event,
    long_running: bool,
    request_body: Option<(Arc<Mutex<Capture>>, String)>,
}

impl Recorder {
    /// The audit ID is the request's own `Audit-ID` if it has one, else a new UUID.
    pub fn new(audit: Arc<Audit>, req: &Request) -> Self {
        let headers = req.headers();
        let peer = req.extensions().get::<ConnectInfo<Peer>>().map(|p| &p.0);
        let remote = peer.and_then(|p| p.addr).map(|a| a.ip());
        let client_cert = peer.is_some_and(|p| !p.client_chain.is_empty());
        let id = header(headers, HEADER).filter(|v| !v.is_empty()).unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
        Self {
            audit,
            id,
            received: jiff::Timestamp::now(),
            uri: req.uri().path_and_query().map(|p| p.to_string()).unwrap_or_else(|| req.uri().path().to_string()),
            method: req.method().as_str().to_string(),
            path: req.uri().path().to_string(),
            query: req.uri().query().map(str::to_string),
            user_agent: header(headers, "user-agent").unwrap_or_default(),
            source_ips: source_ips(headers, remote),
            auth_methods: auth_methods(headers, req.uri().query(), client_cert),
            authenticated: false,
            active: None,
        }
    }

    fn attributes(&self, user: Arc<UserInfo>) -> Attributes {
        request_info::for_user(user, &self.method, &self.path, self.query.as_deref())
    }

    /// The request is `user` (before any impersonation): the policy decides, RequestReceived is
    /// written, and at Request level and above the body is tapped as the handler reads it.
    pub fn authenticated(&mut self, user: &Arc<UserInfo>, req: &mut Request) {
        self.authenticated = true;
        let attrs = self.attributes(user.clone());
        let Some(mut active) = self.activate(&attrs) else { return };
        // Creates and updates name their object in the body; higher levels keep every body.
        if active.config.level >= Level::Request || matches!(attrs.verb.as_str(), "create" | "update") {
            let capture = Arc::new(Mutex::new(Capture::default()));
            let content_type = header(req.headers(), "content-type").unwrap_or_default();
            let body = std::mem::take(req.body_mut());
            *req.body_mut() = Body::new(RequestTap { inner: body, capture: capture.clone() });
            active.request_body = Some((capture, content_type));
        }
        active.emit(Stage::RequestReceived);
        self.active = Some(active);
    }

    fn activate(&self, attrs: &Attributes) -> Option<Active> {
        let audit = self.audit.clone();
        let config = audit.policy.evaluate(attrs);
        if config.level == Level::None {
            return None;
        }
        let event = Event::new(&Received {
            audit_id: &self.id,
            level: config.level,
            request_uri: &self.uri,
            attrs: Some(attrs),
            source_ips: self.source_ips.clone(),
            user_agent: &self.user_agent,
            received: self.received,
        });
        let long_running = attrs.verb == "watch"
            || attrs.verb == "proxy"
            || matches!(attrs.subresource.as_str(), "attach" | "exec" | "proxy" | "log" | "portforward");
        Some(Active { audit, config, event, long_running, request_body: None })
    }

    /// The request now runs as `target` (`Impersonate-*`).
    pub fn impersonated(&mut self, target: &UserInfo) {
        if let Some(a) = &mut self.active {
            a.event.impersonated_user = Some(User::from(target));
        }
    }

    /// The authorizer's verdict, as the `authorization.k8s.io/*` annotations (an authorizer's
    /// error without an allow: only the reason, `internal error`, as kube-apiserver).
    pub fn authorized(&mut self, verdict: &Verdict) {
        if let Some(a) = &mut self.active {
            match (verdict.decision, &verdict.error) {
                (Decision::Allow, _) => a.event.authorized(true, &verdict.reason),
                (_, Some(_)) => a.event.authorization_failed(),
                _ => a.event.authorized(false, &verdict.reason),
            }
        }
    }

    /// The handler panicked: the Panic stage with a 500, as kube-apiserver's `WithAudit`.
    pub fn panicked(mut self, payload: &(dyn std::any::Any + Send)) {
        let message = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "Box<dyn Any>".into());
        if let Some(mut active) = self.active.take() {
            active.event.panicked(&message);
            active.emit(Stage::Panic);
        }
    }

    /// Sets `Audit-Id` on the response and sees the rest of the record written.
    pub fn finish(mut self, mut response: Response) -> Response {
        if let Ok(v) = HeaderValue::from_str(&self.id) {
            response.headers_mut().insert(HEADER, v);
        }
        let code = response.status().as_u16();
        if !self.authenticated && code == 401 {
            self.failed_authentication();
            return response;
        }
        let Some(mut active) = self.active.take() else { return response };
        if active.long_running {
            active.event.responded(code, None, false);
            active.emit(Stage::ResponseStarted);
        }
        // An error's Status is kept at any level (its reason and message); a long-running
        // request's stream never is.
        let capture_response = code >= 400 || (!active.long_running && active.config.level >= Level::RequestResponse);
        let completion = Completion { active, code, response: capture_response.then(Capture::default) };
        response.map(|inner| Body::new(ResponseTap { inner, completion: Some(completion) }))
    }

    /// Kubernetes' failed-authentication record: one ResponseStarted event, no user.
    fn failed_authentication(&mut self) {
        let attrs = self.attributes(Arc::new(UserInfo::default()));
        let Some(mut active) = self.activate(&attrs) else { return };
        active.event.responded(401, None, false);
        if let Some(status) = &mut active.event.response_status {
            status.message = Some(self.auth_methods.clone().into());
        }
        active.emit(Stage::ResponseStarted);
    }
}

impl Drop for Recorder {
    /// A request dropped before it answered (its client went away and the handler with it) still
    /// ends its record, with the status kube-apiserver gives a connection closed early.
    fn drop(&mut self) {
        if let Some(mut active) = self.active.take() {
            active.event.closed_early();
            if active.long_running {
                active.emit(Stage::ResponseStarted);
            }
            active.emit(Stage::ResponseComplete);
        }
    }
}

impl Active {
    fn emit(&self, stage: Stage) {
        if self.config.records(stage) {
            self.audit.backend.process(self.event.at(stage, jiff::Timestamp::now()));
        }
    }
}

fn header(headers: &HeaderMap, name: &str) -> Option<String> {
    headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_string)
}

/// Kubernetes' `getAuthMethods`: `Authentication failed, attempted: bearer, x509` or
/// `Authentication failed, no credentials provided`.
fn auth_methods(headers: &HeaderMap, query: Option<&str>, client_cert: bool) -> String {
    let auth = header(headers, "authorization").unwrap_or_default();
    let scheme = auth.trim().split(' ').next().unwrap_or_default().to_string();
    let has_credentials = auth.trim().split(' ').count() > 1;
    let access_token = query
        .map(|q| q.split('&').any(|kv| kv.strip_prefix("access_token=").is_some_and(|t| !t.trim().is_empty())))
        .unwrap_or(false);
    let methods: Vec<&str> = [
        (scheme.eq_ignore_ascii_case("basic") && has_credentials, "basic"),
        (scheme.eq_ignore_ascii_case("bearer") && has_credentials, "bearer"),
        (access_token, "access_token"),
        (client_cert, "x509"),
    ]
    .into_iter()
    .filter_map(|(tried, name)| tried.then_some(name))
    .collect();
    if methods.is_empty() {
        "Authentication failed, no credentials provided".into()
    } else {
        format!("Authentication failed, attempted: {}", methods.join(", "))
    }
}

/// Kubernetes' `utilnet.SourceIPs`: every `X-Forwarded-For` address, then `X-Real-Ip` and the
/// peer unless already listed.
fn source_ips(headers: &HeaderMap, remote: Option<std::net::IpAddr>) -> Vec<String> {
    let forwarded = header(headers, "x-forwarded-for").unwrap_or_default();
    let mut ips: Vec<std::net::IpAddr> = forwarded.split(',').filter_map(|s| s.trim().parse().ok()).collect();
    let real = header(headers, "x-real-ip").and_then(|s| s.trim().parse().ok());
    for ip in real.into_iter().chain(remote) {
        if !ips.contains(&ip) {
            ips.push(ip);
        }
    }
    ips.iter().map(ToString::to_string).collect()
}

/// Up to [`MAX_BODY`] bytes of a body.
#[derive(Default)]
struct Capture {
    bytes: Vec<u8>,
    overflow: bool,
}

impl Capture {
    fn push(&mut self, data: &[u8]) {
        if self.overflow || self.bytes.len() + data.len() > MAX_BODY {
            self.overflow = true;
            self.bytes = Vec::new();
        } else {
            self.bytes.extend_from_slice(data);
        }
    }

    /// The bytes, unless the body went past the limit.
    fn into_bytes(self) -> Option<Vec<u8>> {
        (!self.overflow).then_some(self.bytes)
    }
}

struct RequestTap {
    inner: Body,
    capture: Arc<Mutex<Capture>>,
}

impl http_body::Body for RequestTap {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(Some(Ok(frame))) = &polled {
            if let Some(data) = frame.data_ref() {
                self.capture.lock().unwrap_or_else(|p| p.into_inner()).push(data);
            }
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// What is left to write when the response body ends.
struct Completion {
    active: Active,
    code: u16,
    response: Option<Capture>,
}

impl Completion {
    /// Hands the event and its raw bodies to the writer, which decodes them off the runtime.
    fn complete(self) {
        let Completion { active, code, response } = self;
        if !active.config.records(Stage::ResponseComplete) {
            return;
        }
        let request = active.request_body.as_ref().and_then(|(capture, content_type)| {
            let capture = std::mem::take(&mut *capture.lock().unwrap_or_else(|p| p.into_inner()));
            capture.into_bytes().map(|bytes| (bytes, content_type.clone()))
        });
        let bodies = Bodies {
            request,
            response: response.and_then(Capture::into_bytes),
            code,
            omit_managed_fields: active.config.omit_managed_fields,
        };
        let event = active.event.at(Stage::ResponseComplete, jiff::Timestamp::now());
        active.audit.backend.process_completed(event, bodies);
    }
}

struct ResponseTap {
    inner: Body,
    completion: Option<Completion>,
}

impl http_body::Body for ResponseTap {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let (Some(data), Some(c)) = (frame.data_ref(), self.completion.as_mut()) {
                    if let Some(capture) = c.response.as_mut() {
                        capture.push(data);
                    }
                }
            }
            Poll::Ready(None) | Poll::Ready(Some(Err(_))) => {
                if let Some(c) = self.completion.take() {
                    c.complete();
                }
            }
            Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for ResponseTap {
    /// A body never polled to its end (a HEAD, an empty body, a client gone) still completes;
    /// one dropped by a panic while it streamed is recorded at stage Panic.
    fn drop(&mut self) {
        if let Some(mut c) = self.completion.take() {
            if std::thread::panicking() {
                c.active.event.panicked("panic while writing the response");
                c.active.emit(Stage::Panic);
            } else {
                c.complete();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::backend::{Counters, LogConfig};
    use std::path::Path;
    use std::time::{Duration, Instant};

    fn audit(dir: &Path, policy: &str) -> Arc<Audit> {
        let policy_file = dir.join("policy.yaml");
        std::fs::write(&policy_file, policy).expect("policy");
        let log = LogConfig { path: dir.join("audit.log"), ..Default::default() };
        let config = crate::audit::Config { policy_file: Some(policy_file), log: Some(log) };
        Arc::new(Audit::start(&config, Counters::default()).expect("audit").expect("both flags given"))
    }

    /// The first `n` lines of the log, once written.
    fn lines(path: &Path, n: usize) -> Vec<serde_json::Value> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let text = std::fs::read_to_string(path).unwrap_or_default();
            let whole: Vec<&str> = text.split_inclusive('\n').filter(|l| l.ends_with('\n')).collect();
            if whole.len() >= n {
                return whole.iter().map(|l| serde_json::from_str(l).expect("a JSON line")).collect();
            }
            assert!(Instant::now() < deadline, "{} of {n} lines written", whole.len());
            std::thread::yield_now();
        }
    }

    #[test]
    fn a_handler_panic_is_recorded_at_stage_panic() {
        let dir = tempfile::tempdir().expect("tempdir");
        let audit = audit(dir.path(), "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: [{level: Metadata}]");
        let mut req = Request::builder().uri("/api/v1/namespaces/a/pods").body(Body::empty()).expect("request");
        let mut recorder = Recorder::new(audit, &req);
        recorder.authenticated(&Arc::new(UserInfo::new("jane", &[])), &mut req);
        let payload: Box<dyn std::any::Any + Send> = Box::new("boom");
        recorder.panicked(payload.as_ref());
        let events = lines(&dir.path().join("audit.log"), 2);
        assert_eq!(
            (events[0]["stage"].as_str(), events[1]["stage"].as_str()),
            (Some("RequestReceived"), Some("Panic"))
        );
        assert_eq!(
            events[1]["responseStatus"],
            serde_json::json!({"metadata": {}, "status": "Failure", "message": "APIServer panic'd: boom",
                "reason": "InternalError", "code": 500})
        );
    }

    #[test]
    fn a_response_dropped_unread_still_completes_its_record() {
        let dir = tempfile::tempdir().expect("tempdir");
        let audit = audit(dir.path(), "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: [{level: Metadata}]");
        let mut req = Request::builder().uri("/api/v1/namespaces/a/pods").body(Body::empty()).expect("request");
        let mut recorder = Recorder::new(audit, &req);
        recorder.authenticated(&Arc::new(UserInfo::new("jane", &[])), &mut req);
        let response = recorder.finish(Response::new(Body::from("{}")));
        assert!(response.headers().get(HEADER).is_some());
        drop(response);
        let events = lines(&dir.path().join("audit.log"), 2);
        assert_eq!(events[1]["stage"], "ResponseComplete");
        assert_eq!(events[1]["responseStatus"]["code"], 200);
    }

    #[test]
    fn a_request_dropped_before_it_answered_still_completes_its_record() {
        let dir = tempfile::tempdir().expect("tempdir");
        let audit = audit(dir.path(), "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: [{level: Metadata}]");
        let mut req = Request::builder().uri("/api/v1/namespaces/a/pods").body(Body::empty()).expect("request");
        let mut recorder = Recorder::new(audit, &req);
        recorder.authenticated(&Arc::new(UserInfo::new("jane", &[])), &mut req);
        drop(recorder);
        let events = lines(&dir.path().join("audit.log"), 2);
        assert_eq!(events[1]["stage"], "ResponseComplete");
        assert_eq!(
            events[1]["responseStatus"],
            serde_json::json!({"metadata": {}, "status": "Success", "message": "Connection closed early", "code": 200})
        );
    }

    #[test]
    fn source_ips_are_forwarded_real_then_peer_without_repeats() {
        let mut h = HeaderMap::new();
        h.insert("x-forwarded-for", HeaderValue::from_static("10.0.0.1, 10.0.0.2"));
        h.insert("x-real-ip", HeaderValue::from_static("10.0.0.2"));
        let ips = source_ips(&h, "127.0.0.1".parse().ok());
        assert_eq!(ips, ["10.0.0.1", "10.0.0.2", "127.0.0.1"]);
    }

    #[test]
    fn a_failed_authentication_says_which_credentials_were_tried() {
        let mut h = HeaderMap::new();
        assert_eq!(auth_methods(&h, None, false), "Authentication failed, no credentials provided");
        h.insert("authorization", HeaderValue::from_static("Bearer abc"));
        assert_eq!(
            auth_methods(&h, Some("access_token=x"), true),
            "Authentication failed, attempted: bearer, access_token, x509"
        );
    }

    #[test]
    fn a_body_past_the_limit_is_not_kept() {
        let mut c = Capture::default();
        c.push(b"{\"a\":1}");
        c.push(b"{\"b\":2}");
        assert_eq!(c.into_bytes().as_deref(), Some(&b"{\"a\":1}{\"b\":2}"[..]));
        let mut c = Capture::default();
        c.push(b"{\"a\":1}");
        c.push(&vec![b' '; MAX_BODY]);
        c.push(b"}");
        assert_eq!(c.into_bytes(), None);
    }
}
