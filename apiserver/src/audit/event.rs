//! An audit event (`audit.k8s.io/v1` `Event`) as kube-apiserver writes it: its fields, in its
//! order, built from what the request pipeline knows — pure.

use super::policy::{Level, Stage};
use crate::auth::{Attributes, UserInfo};
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;

pub const DECISION: &str = "authorization.k8s.io/decision";
pub const REASON: &str = "authorization.k8s.io/reason";

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Event {
    pub kind: &'static str,
    pub api_version: &'static str,
    pub level: Level,
    #[serde(rename = "auditID")]
    pub audit_id: String,
    pub stage: Stage,
    #[serde(rename = "requestURI")]
    pub request_uri: String,
    pub verb: String,
    pub user: User,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub impersonated_user: Option<User>,
    #[serde(rename = "sourceIPs")]
    pub source_ips: Vec<String>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub user_agent: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub object_ref: Option<ObjectRef>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response_status: Option<ResponseStatus>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_object: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response_object: Option<Value>,
    pub request_received_timestamp: String,
    pub stage_timestamp: String,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// `authentication.k8s.io/v1` `UserInfo`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct User {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub username: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub uid: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub extra: BTreeMap<String, Vec<String>>,
}

impl From<&UserInfo> for User {
    fn from(u: &UserInfo) -> Self {
        Self { username: u.name.clone(), uid: u.uid.clone(), groups: u.groups.clone(), extra: u.extra.clone() }
    }
}

/// The bounded fields of `metav1.Status` an event keeps, in Go's order.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ResponseStatus {
    pub metadata: serde_json::Map<String, Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub details: Option<Value>,
    pub code: u16,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectRef {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub resource: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub uid: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub api_group: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub api_version: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub resource_version: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub subresource: String,
}

/// What an event is built from: the request as first seen.
pub struct Received<'a> {
    pub audit_id: &'a str,
    pub level: Level,
    pub request_uri: &'a str,
    /// The authenticated user's attributes (Kubernetes audits before impersonation).
    pub attrs: Option<&'a Attributes>,
    pub source_ips: Vec<String>,
    pub user_agent: &'a str,
    pub received: jiff::Timestamp,
}

/// `metav1.MicroTime` as JSON: RFC 3339 with microseconds, UTC.
pub fn micro_time(t: jiff::Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%S.%6fZ").to_string()
}

impl Event {
    /// The RequestReceived event; later stages are copies with their stage and timestamp.
    pub fn new(r: &Received<'_>) -> Self {
        let ts = micro_time(r.received);
        let (verb, user, object_ref) = match r.attrs {
            Some(a) => (a.verb.clone(), User::from(a.user.as_ref()), object_ref(a)),
            None => (String::new(), User::default(), None),
        };
        Event {
            kind: "Event",
            api_version: "audit.k8s.io/v1",
            level: r.level,
            audit_id: r.audit_id.to_string(),
            stage: Stage::RequestReceived,
            request_uri: r.request_uri.to_string(),
            verb,
            user,
            impersonated_user: None,
            source_ips: r.source_ips.clone(),
            user_agent: r.user_agent.to_string(),
            object_ref,
            response_status: None,
            request_object: None,
            response_object: None,
            request_received_timestamp: ts.clone(),
            stage_timestamp: ts,
            annotations: BTreeMap::new(),
        }
    }

    /// This event at `stage`, now.
    pub fn at(&self, stage: Stage, now: jiff::Timestamp) -> Self {
        Self { stage, stage_timestamp: micro_time(now), ..self.clone() }
    }

    /// The authorizer's decision, as `WithAuthorization` annotates it.
    pub fn authorized(&mut self, allowed: bool, reason: &str) {
        self.annotations.insert(DECISION.into(), if allowed { "allow" } else { "forbid" }.into());
        self.annotations.insert(REASON.into(), reason.into());
    }

    /// An authorizer failed and none allowed: kube-apiserver records only the reason.
    pub fn authorization_failed(&mut self) {
        self.annotations.insert(REASON.into(), "internal error".into());
    }

    /// The Panic stage's status (kube-apiserver's `WithAudit` recovering a handler's panic).
    pub fn panicked(&mut self, message: &str) {
        self.response_status = Some(ResponseStatus {
            metadata: serde_json::Map::new(),
            status: Some("Failure".into()),
            message: Some(format!("APIServer panic'd: {message}").into()),
            reason: Some("InternalError".into()),
            details: None,
            code: 500,
        });
    }

    /// No answer was written: kube-apiserver's status for a connection closed early.
    pub fn closed_early(&mut self) {
        self.response_status = Some(ResponseStatus {
            metadata: serde_json::Map::new(),
            status: Some("Success".into()),
            message: Some("Connection closed early".into()),
            reason: None,
            details: None,
            code: 200,
        });
    }

    /// The response's code and, when the body is a Status, its bounded fields (at any level);
    /// the body itself only at RequestResponse.
    pub fn responded(&mut self, code: u16, body: Option<Value>, omit_managed_fields: bool) {
        let status = body.as_ref().filter(|b| b["kind"] == "Status");
        let field = |key: &str| status.and_then(|s| s.get(key)).cloned();
        self.response_status = Some(ResponseStatus {
            metadata: serde_json::Map::new(),
            status: field("status"),
            message: field("message"),
            reason: field("reason"),
            details: field("details"),
            code,
        });
        if self.level >= Level::RequestResponse {
            self.response_object = body.map(|b| strip(b, omit_managed_fields));
        }
    }

    /// The request's object (a create's or update's body): it completes `objectRef` at any level
    /// (what the path does not say: a created object's name, its uid and resourceVersion, as
    /// Kubernetes' `LogRequestObject`) and is kept itself at Request and above.
    pub fn requested(&mut self, body: Option<Value>, omit_managed_fields: bool) {
        if let (Some(r), Some(meta)) = (self.object_ref.as_mut(), body.as_ref().and_then(|b| b.get("metadata"))) {
            let fill = |field: &mut String, key: &str| {
                if field.is_empty() {
                    *field = meta.get(key).and_then(Value::as_str).unwrap_or_default().to_string();
                }
            };
            fill(&mut r.namespace, "namespace");
            fill(&mut r.name, "name");
            fill(&mut r.uid, "uid");
            fill(&mut r.resource_version, "resourceVersion");
        }
        if self.level >= Level::Request {
            self.request_object = body.map(|b| strip(b, omit_managed_fields));
        }
    }
}

/// The bodies a ResponseComplete event is finished with, as captured: decoded on the audit
/// writer's thread, never on a request's.
#[derive(Debug, Default)]
pub struct Bodies {
    /// The request's body and Content-Type (None: none kept, or past the capture's limit).
    pub request: Option<(Vec<u8>, String)>,
    /// The response's body (JSON), when the level or an error asks for it.
    pub response: Option<Vec<u8>>,
    pub code: u16,
    pub omit_managed_fields: bool,
}

impl Event {
    /// Completes the event from its bodies: the request's object (a patch is kept as sent and
    /// names nothing), the response's status and, at RequestResponse, its object.
    pub fn complete(&mut self, bodies: Bodies) {
        let omit = bodies.omit_managed_fields;
        if let Some((bytes, content_type)) = &bodies.request {
            match decode(bytes, content_type) {
                Some(patch) if self.verb == "patch" => {
                    if self.level >= Level::Request {
                        self.request_object = Some(patch);
                    }
                }
                object => self.requested(object, omit),
            }
        }
        let response = bodies.response.as_deref().and_then(|b| decode(b, "application/json"));
        self.responded(bodies.code, response, omit);
    }
}

/// A body as JSON: YAML and protobuf converted, as Kubernetes logs decoded objects; None when
/// it is none of them (or empty).
pub fn decode(bytes: &[u8], content_type: &str) -> Option<Value> {
    if bytes.is_empty() {
        return None;
    }
    if content_type.contains("protobuf") {
        return crate::http::protobuf::decode(bytes).ok();
    }
    serde_json::from_slice(bytes).ok().or_else(|| serde_saphyr::from_str(std::str::from_utf8(bytes).ok()?).ok())
}

/// Resource requests name their object; non-resource requests have none.
fn object_ref(a: &Attributes) -> Option<ObjectRef> {
    a.resource_request.then(|| ObjectRef {
        resource: a.resource.clone(),
        namespace: a.namespace.clone(),
        name: a.name.clone(),
        uid: String::new(),
        api_group: a.api_group.clone(),
        api_version: a.api_version.clone(),
        resource_version: String::new(),
        subresource: a.subresource.clone(),
    })
}

/// `omitManagedFields`: the object (or each item of a list) without `metadata.managedFields`.
fn strip(mut v: Value, omit_managed_fields: bool) -> Value {
    if omit_managed_fields {
        if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
            m.remove("managedFields");
        }
        if let Some(items) = v.get_mut("items").and_then(Value::as_array_mut) {
            for item in items {
                if let Some(m) = item.get_mut("metadata").and_then(Value::as_object_mut) {
                    m.remove("managedFields");
                }
            }
        }
    }
    v
}

#[cfg(test)]
pub mod tests_support {
    use super::*;

    /// A Metadata-level event about a create.
    pub fn event() -> Event {
        let user = std::sync::Arc::new(UserInfo::new("jane", &[]));
        let attrs = crate::auth::request_info::for_user(user, "POST", "/api/v1/namespaces/a/configmaps", None);
        Event::new(&Received {
            audit_id: "id",
            level: Level::Metadata,
            request_uri: "/api/v1/namespaces/a/configmaps",
            attrs: Some(&attrs),
            source_ips: vec![],
            user_agent: "",
            received: jiff::Timestamp::now(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::request_info;
    use serde_json::json;
    use std::sync::Arc;

    fn received(level: Level, attrs: &Attributes) -> Event {
        let t: jiff::Timestamp = "2026-12-07T05:39:13.123456789Z".parse().expect("time");
        Event::new(&Received {
            audit_id: "f3a2",
            level,
            request_uri: "/api/v1/namespaces/a/secrets",
            attrs: Some(attrs),
            source_ips: vec!["127.0.0.1".into()],
            user_agent: "kubectl/v1.33.0",
            received: t,
        })
    }

    fn secret_create() -> Attributes {
        let user = UserInfo::new("jane", &["system:authenticated"]);
        request_info::for_user(Arc::new(user), "POST", "/api/v1/namespaces/a/secrets", None)
    }

    #[test]
    fn an_event_serializes_with_kubernetes_names_and_order() {
        let mut e = received(Level::Metadata, &secret_create());
        e.authorized(true, "");
        e.responded(201, Some(json!({"kind": "Secret", "data": {"k": "c2VjcmV0"}})), false);
        let line = serde_json::to_string(&e).expect("json");
        assert_eq!(
            line,
            r#"{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"f3a2","stage":"RequestReceived","requestURI":"/api/v1/namespaces/a/secrets","verb":"create","user":{"username":"jane","groups":["system:authenticated"]},"sourceIPs":["127.0.0.1"],"userAgent":"kubectl/v1.33.0","objectRef":{"resource":"secrets","namespace":"a","apiVersion":"v1"},"responseStatus":{"metadata":{},"code":201},"requestReceivedTimestamp":"2026-12-07T05:39:13.123456Z","stageTimestamp":"2026-12-07T05:39:13.123456Z","annotations":{"authorization.k8s.io/decision":"allow","authorization.k8s.io/reason":""}}"#
        );
    }

    #[test]
    fn bodies_are_kept_only_at_the_levels_that_ask_for_them() {
        let body = json!({"kind": "Secret", "data": {"k": "c2VjcmV0"}});
        for (level, request, response) in
            [(Level::Metadata, false, false), (Level::Request, true, false), (Level::RequestResponse, true, true)]
        {
            let mut e = received(level, &secret_create());
            e.requested(Some(body.clone()), false);
            e.responded(201, Some(body.clone()), false);
            assert_eq!(e.request_object.is_some(), request, "{level:?}");
            assert_eq!(e.response_object.is_some(), response, "{level:?}");
        }
    }

    #[test]
    fn a_failure_status_is_recorded_at_metadata_with_its_bounded_fields() {
        let mut e = received(Level::Metadata, &secret_create());
        let status = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "secrets is forbidden", "reason": "Forbidden", "details": {"kind": "secrets"}, "code": 403});
        e.responded(403, Some(status), false);
        assert_eq!(
            serde_json::to_string(&e.response_status).expect("json"),
            r#"{"metadata":{},"status":"Failure","message":"secrets is forbidden","reason":"Forbidden","details":{"kind":"secrets"},"code":403}"#
        );
        assert!(e.response_object.is_none());
    }

    #[test]
    fn omit_managed_fields_strips_them_from_objects_and_list_items() {
        let mut e = received(Level::RequestResponse, &secret_create());
        let obj = json!({"metadata": {"name": "a", "managedFields": [{}]}});
        e.requested(Some(obj.clone()), true);
        e.responded(200, Some(json!({"items": [obj]})), true);
        assert_eq!(e.request_object, Some(json!({"metadata": {"name": "a"}})));
        assert_eq!(e.response_object, Some(json!({"items": [{"metadata": {"name": "a"}}]})));
    }

    #[test]
    fn a_created_objects_name_completes_the_object_ref_even_at_metadata() {
        let mut e = received(Level::Metadata, &secret_create());
        e.requested(
            Some(json!({"metadata": {"name": "s1", "resourceVersion": "7"}, "data": {"k": "c2VjcmV0"}})),
            false,
        );
        let r = e.object_ref.as_ref().expect("objectRef");
        assert_eq!((r.name.as_str(), r.namespace.as_str(), r.resource_version.as_str()), ("s1", "a", "7"));
        assert!(e.request_object.is_none());
    }

    #[test]
    fn completing_decodes_json_and_yaml_bodies_and_keeps_a_patch_as_sent() {
        let mut e = received(Level::RequestResponse, &secret_create());
        e.complete(Bodies {
            request: Some((b"metadata:\n  name: s2\ndata:\n  k: dg==\n".to_vec(), "application/yaml".into())),
            response: Some(br#"{"kind":"Secret","metadata":{"name":"s2"}}"#.to_vec()),
            code: 201,
            omit_managed_fields: false,
        });
        assert_eq!(e.request_object, Some(json!({"metadata": {"name": "s2"}, "data": {"k": "dg=="}})));
        assert_eq!(e.object_ref.as_ref().map(|r| r.name.as_str()), Some("s2"));
        assert_eq!(e.response_object, Some(json!({"kind": "Secret", "metadata": {"name": "s2"}})));
        assert_eq!(e.response_status.as_ref().map(|s| s.code), Some(201));

        let patch = request_info::for_user(
            Arc::new(UserInfo::new("jane", &[])),
            "PATCH",
            "/api/v1/namespaces/a/secrets/s1",
            None,
        );
        let patch_body = br#"{"metadata":{"name":"elsewhere"}}"#.to_vec();
        for (level, kept) in [(Level::Metadata, false), (Level::Request, true)] {
            let mut e = received(level, &patch);
            let bodies = Bodies {
                request: Some((patch_body.clone(), "application/merge-patch+json".into())),
                code: 200,
                ..Default::default()
            };
            e.complete(bodies);
            assert_eq!(e.object_ref.as_ref().map(|r| r.name.as_str()), Some("s1"), "a patch names nothing");
            assert_eq!(e.request_object.is_some(), kept, "{level:?}");
            assert!(e.response_object.is_none());
        }
    }

    #[test]
    fn a_panic_is_a_500_internal_error() {
        let mut e = received(Level::Metadata, &secret_create());
        e.panicked("boom");
        assert_eq!(
            serde_json::to_value(&e.response_status).expect("json"),
            json!({"metadata": {}, "status": "Failure", "message": "APIServer panic'd: boom",
                "reason": "InternalError", "code": 500})
        );
    }

    #[test]
    fn non_resource_requests_have_no_object_ref() {
        let a = request_info::for_user(Arc::new(UserInfo::new("jane", &[])), "GET", "/healthz", None);
        let e = received(Level::Metadata, &a);
        assert_eq!((e.object_ref, e.verb.as_str()), (None, "get"));
    }
}
