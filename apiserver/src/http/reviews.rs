//! The create-only review kinds: authorization.k8s.io/v1 SelfSubjectAccessReview,
//! SubjectAccessReview, LocalSubjectAccessReview, SelfSubjectRulesReview, and
//! authentication.k8s.io/v1 SelfSubjectReview and TokenReview — answered from the authorizers
//! and authenticators, never stored (what `kubectl auth can-i` and `kubectl auth whoami` ask).

use super::errors::{ApiError, ApiResult};
use super::pipeline::Security;
use super::{decode_body, json_response, Shared};
use crate::auth::{names, Attributes, AuthorizationMode, Decision, UserInfo};
use axum::body::Bytes;
use axum::http::{header, HeaderMap, Method};
use axum::response::Response;
use k8s_openapi::api::rbac::v1::PolicyRule;
use kaji_api::resources::ResourceInfo;
use kaji_api::validation::{BadValue, Cause};
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::sync::Arc;

fn s<'a>(v: &'a Value, p: &str) -> &'a str {
    v.pointer(p).and_then(Value::as_str).unwrap_or("")
}

fn strings(v: &Value, p: &str) -> Vec<String> {
    v.pointer(p).and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str).map(str::to_string).collect()
}

/// `ResourceAttributesFrom` / `NonResourceAttributesFrom`.
pub fn attributes_from(user: Arc<UserInfo>, spec: &Value) -> Attributes {
    match spec.get("resourceAttributes").filter(|r| !r.is_null()) {
        Some(r) => Attributes {
            user,
            verb: s(r, "/verb").into(),
            namespace: s(r, "/namespace").into(),
            api_group: s(r, "/group").into(),
            api_version: s(r, "/version").into(),
            resource: s(r, "/resource").into(),
            subresource: s(r, "/subresource").into(),
            name: s(r, "/name").into(),
            path: String::new(),
            resource_request: true,
        },
        None => Attributes {
            user,
            verb: s(spec, "/nonResourceAttributes/verb").into(),
            path: s(spec, "/nonResourceAttributes/path").into(),
            ..Default::default()
        },
    }
}

/// `ValidateSelfSubjectAccessReviewSpec` (and the user check of SubjectAccessReviews).
fn validate_access_spec(spec: &Value, needs_subject: bool) -> Vec<Cause> {
    let has = |k: &str| spec.get(k).is_some_and(|v| !v.is_null());
    let mut out = Vec::new();
    if has("resourceAttributes") && has("nonResourceAttributes") {
        out.push(Cause::invalid(
            "spec.nonResourceAttributes",
            BadValue::Raw(spec["nonResourceAttributes"].to_string()),
            "cannot be specified in combination with resourceAttributes",
        ));
    }
    if !has("resourceAttributes") && !has("nonResourceAttributes") {
        out.push(Cause::invalid(
            "spec.resourceAttributes",
            "null",
            "exactly one of nonResourceAttributes or resourceAttributes must be specified",
        ));
    }
    if needs_subject && s(spec, "/user").is_empty() && strings(spec, "/groups").is_empty() {
        out.push(Cause::invalid("spec.user", s(spec, "/user"), "at least one of user or group must be specified"));
    }
    out
}

/// `SubjectAccessReviewStatus`: allowed, and denied/reason/evaluationError when set.
fn access_status(sec: &Security, attrs: &Attributes) -> Value {
    let v = sec.authz.authorize(attrs);
    let mut st = json!({"allowed": v.decision == Decision::Allow});
    if v.decision == Decision::Deny {
        st["denied"] = json!(true);
    }
    if !v.reason.is_empty() {
        st["reason"] = json!(v.reason);
    }
    if let Some(e) = v.error {
        st["evaluationError"] = json!(e);
    }
    st
}

/// The union of the modes' `RulesFor`: (resource rules, non-resource rules, incomplete, errors).
pub fn rules_for(sec: &Security, user: &UserInfo, namespace: &str) -> (Vec<Value>, Vec<Value>, bool, Vec<String>) {
    let all = || {
        vec![
            PolicyRule {
                verbs: vec!["*".into()],
                api_groups: Some(vec!["*".into()]),
                resources: Some(vec!["*".into()]),
                ..Default::default()
            },
            PolicyRule { verbs: vec!["*".into()], non_resource_urls: Some(vec!["*".into()]), ..Default::default() },
        ]
    };
    let mut rules: Vec<PolicyRule> = Vec::new();
    let mut incomplete = false;
    let mut errors = Vec::new();
    if user.in_group(names::SYSTEM_PRIVILEGED_GROUP) {
        rules.extend(all());
    }
    for m in &sec.modes {
        match m {
            AuthorizationMode::AlwaysAllow => rules.extend(all()),
            AuthorizationMode::AlwaysDeny => {}
            AuthorizationMode::Rbac => {
                let r = sec.parts.rbac.rules_for(user, namespace);
                rules.extend(r.rules);
                errors.extend(r.errors);
            }
            AuthorizationMode::Node => {
                if user.in_group(names::NODES_GROUP) && user.name.starts_with(names::NODE_USER_PREFIX) {
                    incomplete = true;
                    errors.push("node authorizer does not support user rule resolution".into());
                }
            }
        }
    }
    let list = |v: &Option<Vec<String>>| json!(v.clone().unwrap_or_default());
    let mut resource = Vec::new();
    let mut non_resource = Vec::new();
    for r in rules {
        if r.resources.as_ref().is_some_and(|x| !x.is_empty()) {
            let mut o = json!({"verbs": r.verbs, "apiGroups": list(&r.api_groups), "resources": list(&r.resources)});
            if r.resource_names.as_ref().is_some_and(|n| !n.is_empty()) {
                o["resourceNames"] = list(&r.resource_names);
            }
            resource.push(o);
        }
        if r.non_resource_urls.as_ref().is_some_and(|x| !x.is_empty()) {
            non_resource.push(json!({"verbs": r.verbs, "nonResourceURLs": list(&r.non_resource_urls)}));
        }
    }
    (resource, non_resource, incomplete, errors)
}

/// `user.Info` as authentication.k8s.io's UserInfo.
pub fn user_info_json(u: &UserInfo) -> Value {
    let mut o = Map::new();
    o.insert("username".into(), json!(u.name));
    if !u.uid.is_empty() {
        o.insert("uid".into(), json!(u.uid));
    }
    if !u.groups.is_empty() {
        o.insert("groups".into(), json!(u.groups));
    }
    if !u.extra.is_empty() {
        o.insert("extra".into(), json!(u.extra));
    }
    Value::Object(o)
}

fn user_from_spec(spec: &Value) -> UserInfo {
    let extra: BTreeMap<String, Vec<String>> =
        spec.get("extra").cloned().and_then(|e| serde_json::from_value(e).ok()).unwrap_or_default();
    UserInfo { name: s(spec, "/user").into(), uid: s(spec, "/uid").into(), groups: strings(spec, "/groups"), extra }
}

/// POST to one of the review kinds: the body back, with its status.
#[allow(clippy::too_many_arguments)]
pub async fn serve(
    sh: &Shared,
    info: &'static ResourceInfo,
    namespace: Option<&str>,
    named: bool,
    method: &Method,
    headers: &HeaderMap,
    user: &Arc<UserInfo>,
    body: &Bytes,
) -> ApiResult<Response> {
    if *method != Method::POST || named {
        return Err(ApiError::method_not_allowed(format!(
            "the server does not allow this method on the requested resource ({method} {}.{})",
            info.plural, info.group
        )));
    }
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).unwrap_or("");
    if super::table::only_transforms(accept) {
        return Err(super::table::not_acceptable());
    }
    let mut obj = decode_body(headers, body)?;
    kaji_api::schema::normalize(info.kind, &obj)
        .map_err(|e| ApiError::bad_request(format!("error decoding {}: {e}", info.kind)))?;
    if let Some(k) = obj.get("kind").and_then(Value::as_str).filter(|k| !k.is_empty() && *k != info.kind) {
        return Err(ApiError::bad_request(format!(
            "the kind in the data ({k}) does not match the expected kind ({}) for {}",
            info.kind, info.plural
        )));
    }
    obj["apiVersion"] = json!(info.api_version());
    obj["kind"] = json!(info.kind);
    if obj.get("metadata").is_none_or(Value::is_null) {
        obj["metadata"] = json!({"creationTimestamp": null});
    }
    let sec = &sh.security;
    let spec = obj.get("spec").cloned().unwrap_or(Value::Null);
    let invalid = |causes: Vec<Cause>| ApiError::invalid(info.group, info.kind, "", &causes);
    let status = match info.kind {
        "SelfSubjectAccessReview" => {
            let causes = validate_access_spec(&spec, false);
            if !causes.is_empty() {
                return Err(invalid(causes));
            }
            access_status(sec, &attributes_from(user.clone(), &spec))
        }
        "SubjectAccessReview" | "LocalSubjectAccessReview" => {
            let causes = validate_access_spec(&spec, true);
            if !causes.is_empty() {
                return Err(invalid(causes));
            }
            if info.kind == "LocalSubjectAccessReview" {
                let ns = namespace.unwrap_or("");
                if spec.get("nonResourceAttributes").is_some_and(|v| !v.is_null()) {
                    return Err(invalid(vec![Cause::invalid(
                        "spec.nonResourceAttributes",
                        BadValue::Raw(spec["nonResourceAttributes"].to_string()),
                        "disallowed on this kind of request",
                    )]));
                }
                if s(&spec, "/resourceAttributes/namespace") != ns {
                    return Err(ApiError::bad_request(format!(
                        "spec.resourceAttributes.namespace must match namespace: {ns}"
                    )));
                }
                obj["metadata"]["namespace"] = json!(ns);
            }
            access_status(sec, &attributes_from(Arc::new(user_from_spec(&spec)), &spec))
        }
        "SelfSubjectRulesReview" => {
            let ns = s(&spec, "/namespace");
            if ns.is_empty() {
                return Err(ApiError::bad_request("no namespace on request"));
            }
            let (resource, non_resource, incomplete, errors) = rules_for(sec, user, ns);
            let mut st = json!({"resourceRules": resource, "nonResourceRules": non_resource, "incomplete": incomplete});
            if !errors.is_empty() {
                st["evaluationError"] = json!(crate::auth::authz::rbac::aggregate(&errors));
            }
            st
        }
        "SelfSubjectReview" => json!({"userInfo": user_info_json(user)}),
        "TokenReview" => token_review(sec, &spec)?,
        _ => {
            return Err(ApiError::method_not_allowed("the server does not allow this method on the requested resource"))
        }
    };
    obj["status"] = status;
    Ok(json_response(201, &obj))
}

/// `TokenReview`: the token through the token authenticators, judged for `spec.audiences` (the
/// API audiences when none are given). `status.audiences` says which of them the token is good
/// for; an authenticator that answers for none of those asked is a 500, as Kubernetes'
/// `error validating audiences`.
fn token_review(sec: &Security, spec: &Value) -> ApiResult<Value> {
    let token = s(spec, "/token");
    let asked = strings(spec, "/audiences");
    let api = &sec.authn.api_audiences;
    let audiences = if asked.is_empty() { api.clone() } else { asked };
    if token.is_empty() {
        return Ok(json!({"user": {}}));
    }
    Ok(match sec.authn.review_token(token, &audiences) {
        Ok((u, good)) => {
            if !audiences.is_empty() && crate::auth::authn::intersect(&audiences, &good).is_empty() {
                tracing::error!(want = ?audiences, got = ?good, "error validating audience");
                return Err(ApiError::internal("error validating audiences"));
            }
            let mut st = json!({"authenticated": true, "user": user_info_json(&u)});
            if !good.is_empty() {
                st["audiences"] = json!(good);
            }
            st
        }
        Err(e) => json!({"user": {}, "error": e.0}),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn review_specs_need_exactly_one_kind_of_attributes() {
        let both =
            json!({"resourceAttributes": {"verb": "get"}, "nonResourceAttributes": {"verb": "get", "path": "/x"}});
        assert_eq!(
            validate_access_spec(&both, false)[0].message,
            r#"Invalid value: {"path":"/x","verb":"get"}: cannot be specified in combination with resourceAttributes"#
        );
        assert_eq!(
            validate_access_spec(&json!({}), false)[0].error_string(),
            r#"spec.resourceAttributes: Invalid value: "null": exactly one of nonResourceAttributes or resourceAttributes must be specified"#
        );
        let no_subject = json!({"resourceAttributes": {"verb": "get"}});
        assert_eq!(validate_access_spec(&no_subject, true)[0].field, "spec.user");
        assert!(validate_access_spec(&no_subject, false).is_empty());
    }

    #[test]
    fn attributes_come_from_the_spec() {
        let a = attributes_from(
            Arc::new(UserInfo::new("bob", &[])),
            &json!({"resourceAttributes": {"namespace": "d", "verb": "create", "group": "apps", "resource": "deployments", "subresource": "scale", "name": "web"}}),
        );
        assert_eq!(
            (a.verb.as_str(), a.api_group.as_str(), a.subresource.as_str(), a.resource_request),
            ("create", "apps", "scale", true)
        );
        let n = attributes_from(
            Arc::new(UserInfo::new("bob", &[])),
            &json!({"nonResourceAttributes": {"verb": "get", "path": "/healthz"}}),
        );
        assert_eq!((n.path.as_str(), n.resource_request), ("/healthz", false));
    }

    #[test]
    fn user_info_leaves_out_what_is_empty() {
        assert_eq!(user_info_json(&UserInfo::new("alice", &[])), json!({"username": "alice"}));
        let mut u = UserInfo::new("system:serviceaccount:d:web", &["system:serviceaccounts"]);
        u.uid = "1".into();
        u.extra.insert("authentication.kubernetes.io/pod-name".into(), vec!["web-1".into()]);
        assert_eq!(user_info_json(&u)["extra"]["authentication.kubernetes.io/pod-name"], json!(["web-1"]));
    }
}
