//! `POST /api/v1/namespaces/{ns}/serviceaccounts/{name}/token`: an authentication.k8s.io/v1
//! TokenRequest, answered with a signed token and never stored (Kubernetes' `TokenREST`). Its
//! spec's audiences default to the API audiences and expirationSeconds to an hour (at least ten
//! minutes, at most `--service-account-max-token-expiration`); a boundObjectRef to a Pod or a
//! Secret must name an existing object (with its uid, when given) and a pod must run as this
//! account. Admission sees it as a create of `serviceaccounts/token` (NodeRestriction does).

use super::token::{KubeClaims, ObjectRef, Request};
use super::Tokens;
use crate::auth::{AdmissionRequest, Operation};
use crate::http::errors::{ApiError, ApiResult};
use crate::registry::{meta, Outcome, Registry, WriteOptions};
use kaji_api::validation::Cause;
use serde_json::{json, Value};

pub const GROUP: &str = "authentication.k8s.io";
pub const KIND: &str = "TokenRequest";
pub const DEFAULT_EXPIRATION_SECONDS: i64 = 3600;
pub const MIN_EXPIRATION_SECONDS: i64 = 10 * 60;
pub const MAX_EXPIRATION_SECONDS: i64 = 1 << 32;

fn str_at<'a>(v: &'a Value, ptr: &str) -> &'a str {
    v.pointer(ptr).and_then(Value::as_str).unwrap_or("")
}

fn invalid(name: &str, field: &str, message: String) -> ApiError {
    let cause = Cause { reason: "FieldValueInvalid".into(), message, field: field.into() };
    ApiError::invalid(GROUP, KIND, name, &[cause])
}

/// The TokenRequest `body` with its spec defaulted and checked (`ValidateTokenRequest`).
pub fn defaulted(ns: &str, name: &str, body: &Value, api_audiences: &[String]) -> ApiResult<Value> {
    if !body.is_object() {
        return Err(ApiError::bad_request("the body is not a TokenRequest object"));
    }
    let mut req = body.clone();
    let body_name = str_at(&req, "/metadata/name");
    if !body_name.is_empty() && body_name != name {
        let m = format!("Invalid value: {body_name:?}: must match the service account name if specified");
        return Err(invalid(name, "metadata.name", m));
    }
    let body_ns = str_at(&req, "/metadata/namespace");
    if !body_ns.is_empty() && body_ns != ns {
        let m = format!("Invalid value: {body_ns:?}: must match the service account namespace if specified");
        return Err(invalid(name, "metadata.namespace", m));
    }
    if !req.get("spec").is_some_and(Value::is_object) {
        req["spec"] = json!({});
    }
    let spec = &mut req["spec"];
    let audiences: Vec<String> = match spec.get("audiences") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) => {
            a.iter().map(|v| v.as_str().map(str::to_string)).collect::<Option<_>>().ok_or_else(|| {
                ApiError::bad_request("error decoding TokenRequest: spec.audiences must be a list of strings")
            })?
        }
        Some(_) => return Err(ApiError::bad_request("error decoding TokenRequest: spec.audiences must be a list")),
    };
    spec["audiences"] = json!(if audiences.is_empty() { api_audiences.to_vec() } else { audiences });
    let exp = match spec.get("expirationSeconds") {
        None | Some(Value::Null) => DEFAULT_EXPIRATION_SECONDS,
        Some(v) => v.as_i64().ok_or_else(|| {
            ApiError::bad_request("error decoding TokenRequest: spec.expirationSeconds must be an integer")
        })?,
    };
    spec["expirationSeconds"] = json!(exp);
    if exp < MIN_EXPIRATION_SECONDS {
        let m = format!("Invalid value: {exp}: may not specify a duration less than 10 minutes");
        return Err(invalid(name, "spec.expirationSeconds", m));
    }
    if exp > MAX_EXPIRATION_SECONDS {
        let m = format!("Too long: may not specify a duration larger than 2^32 seconds (got {exp})");
        return Err(invalid(name, "spec.expirationSeconds", m));
    }
    req["apiVersion"] = json!("authentication.k8s.io/v1");
    req["kind"] = json!(KIND);
    if !req.get("metadata").is_some_and(Value::is_object) {
        req["metadata"] = json!({});
    }
    req["metadata"]["name"] = json!(name);
    req["metadata"]["namespace"] = json!(ns);
    Ok(req)
}

fn object_ref(v: &Value) -> ObjectRef {
    ObjectRef { name: str_at(v, "/metadata/name").into(), uid: str_at(v, "/metadata/uid").into() }
}

/// The claims for `req` about `account`, after looking up what it is bound to.
fn claims(reg: &Registry, ns: &str, name: &str, account: &Value, req: &Value) -> ApiResult<KubeClaims> {
    let mut claims = KubeClaims { namespace: ns.into(), serviceaccount: object_ref(account), ..Default::default() };
    let Some(bound) = req.pointer("/spec/boundObjectRef").filter(|b| !b.is_null()) else { return Ok(claims) };
    let (api_version, kind, obj_name) = (str_at(bound, "/apiVersion"), str_at(bound, "/kind"), str_at(bound, "/name"));
    let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
    let info = match (group, kind) {
        ("", "Pod" | "Secret") => kaji_api::resources::by_kind(kind).expect("pods and secrets are served"),
        _ => {
            let gvk = if group.is_empty() {
                format!("/{api_version}, Kind={kind}")
            } else {
                format!("{api_version}, Kind={kind}")
            };
            return Err(ApiError::bad_request(format!("cannot bind token to object of type {gvk}")));
        }
    };
    let obj = reg.get(info, Some(ns), obj_name)?;
    let found = object_ref(&obj);
    let want_uid = str_at(bound, "/uid");
    if !want_uid.is_empty() && want_uid != found.uid {
        return Err(ApiError::conflict(
            "",
            kind,
            obj_name,
            &format!("the UID in the bound object reference ({want_uid}) does not match the UID in record. The object might have been deleted and then recreated"),
        ));
    }
    if kind == "Pod" {
        if str_at(&obj, "/spec/serviceAccountName") != name {
            return Err(ApiError::bad_request(format!(
                "cannot bind token for serviceaccount {name:?} to pod running with different serviceaccount name."
            )));
        }
        let node = str_at(&obj, "/spec/nodeName");
        if !node.is_empty() {
            let nodes = kaji_api::resources::by_kind("Node").expect("nodes are served");
            // A node that cannot be read leaves the claim out, as Kubernetes does.
            claims.node = reg.get(nodes, None, node).ok().map(|n| object_ref(&n));
        }
        claims.pod = Some(found);
    } else {
        claims.secret = Some(found);
    }
    Ok(claims)
}

/// Issue a token for `ns/name` as `body` asks; the answer is the TokenRequest with its status.
pub fn create(
    reg: &Registry,
    tokens: &Tokens,
    ns: &str,
    name: &str,
    body: &Value,
    opts: &WriteOptions,
) -> ApiResult<Outcome> {
    let sa_info = kaji_api::resources::by_kind("ServiceAccount").expect("serviceaccounts are served");
    let account = reg.get(sa_info, Some(ns), name)?;
    let mut req = defaulted(ns, name, body, &tokens.issuer.api_audiences)?;
    let admission = AdmissionRequest {
        user: &opts.user,
        operation: Operation::Create,
        resource: sa_info,
        subresource: Some("token"),
        namespace: Some(ns),
        name,
        old: None,
        dry_run: opts.dry_run,
        options: None,
    };
    reg.admission.admit(&admission, Some(&mut req))?;
    reg.admission.validate(&admission, Some(&req))?;
    let claims = claims(reg, ns, name, &account, &req)?;
    let mut warnings = Vec::new();
    let mut exp = req["spec"]["expirationSeconds"].as_i64().unwrap_or(DEFAULT_EXPIRATION_SECONDS);
    if let Some(max) = tokens.max_expiration_seconds.filter(|m| exp > *m) {
        warnings.push(format!("requested expiration of {exp} seconds shortened to {max} seconds"));
        exp = max;
        req["spec"]["expirationSeconds"] = json!(exp);
    }
    let audiences: Vec<String> = req["spec"]["audiences"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).map(str::to_string).collect())
        .unwrap_or_default();
    let now = meta::now();
    let (token, expires) = tokens
        .issuer
        .issue(&Request { claims, audiences, expiration_seconds: exp }, now.as_second())
        .map_err(|e| ApiError::internal(format!("failed to generate token: {e}")))?;
    let expires = jiff::Timestamp::from_second(expires).map_err(ApiError::internal)?;
    req["metadata"]["creationTimestamp"] = Value::Null;
    req["status"] = json!({"token": if opts.dry_run { String::new() } else { token }, "expirationTimestamp": meta::timestamp(expires)});
    Ok(Outcome { code: 201, body: req, warnings })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn aud() -> Vec<String> {
        vec!["https://kubernetes.default.svc.cluster.local".into()]
    }

    #[test]
    fn an_empty_request_gets_the_api_audiences_and_an_hour() {
        let r =
            defaulted("app", "web", &json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest"}), &aud())
                .expect("valid");
        assert_eq!(r["spec"]["audiences"], json!(aud()));
        assert_eq!(r["spec"]["expirationSeconds"], 3600);
        assert_eq!((r["metadata"]["name"].as_str(), r["metadata"]["namespace"].as_str()), (Some("web"), Some("app")));
        let r = defaulted("app", "web", &json!({"spec": {"audiences": ["vault"], "expirationSeconds": 7200}}), &aud())
            .expect("valid");
        assert_eq!(
            (r["spec"]["audiences"].clone(), r["spec"]["expirationSeconds"].as_i64()),
            (json!(["vault"]), Some(7200))
        );
    }

    #[test]
    fn short_long_or_mismatched_requests_are_invalid() {
        let short = defaulted("app", "web", &json!({"spec": {"expirationSeconds": 599}}), &aud()).expect_err("short");
        assert_eq!((short.code, short.reason), (422, "Invalid"));
        assert!(short.message.contains("may not specify a duration less than 10 minutes"), "{}", short.message);
        let long = defaulted("app", "web", &json!({"spec": {"expirationSeconds": (1i64 << 32) + 1}}), &aud());
        assert!(long.expect_err("long").message.contains("2^32"));
        let other = defaulted("app", "web", &json!({"metadata": {"name": "db"}}), &aud()).expect_err("name");
        assert!(other.message.contains("must match the service account name"), "{}", other.message);
        let ns = defaulted("app", "web", &json!({"metadata": {"namespace": "x"}}), &aud()).expect_err("ns");
        assert_eq!(ns.code, 422);
        assert_eq!(
            defaulted("app", "web", &json!({"spec": {"expirationSeconds": "soon"}}), &aud()).expect_err("type").code,
            400
        );
        assert_eq!(defaulted("app", "web", &json!([1]), &aud()).expect_err("not an object").code, 400);
    }
}
