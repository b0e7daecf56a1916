//! The security filters every request passes before any handler, in kube-apiserver's order:
//! authentication (401 `Unauthorized` when nothing vouches for the request), impersonation
//! (`auth/impersonation.rs`: the identity `Impersonate-*` asks for, if the requester may), then authorization
//! (403 with Kubernetes' `User "x" cannot ...` message), and the second verb some requests need
//! ([`compound::also_required`]: `create` for exec, attach and portforward). The user travels on as a request
//! extension (`Arc<UserInfo>`), which the write path hands to admission. Between authentication and
//! authorization, the in-flight limit (429); around the handler, the timeout of requests that are not
//! long-running.

use super::errors::ApiError;
use super::limits;
use super::Shared;
use crate::auth::authn::{self, AuthnRequest};
use crate::auth::{compound, request_info, Attributes, Authorizer, Decision, UserInfo};
use axum::extract::connect_info::ConnectInfo;
use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures::FutureExt;
use kaji_pki::listener::Peer;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

/// Who decides: the authentication chain and the authorizer (the union of the modes), with the
/// modes and the stateful authorizers themselves (rule listings, escalation checks).
pub struct Security {
    pub authn: authn::Chain,
    pub authz: Arc<dyn Authorizer>,
    pub modes: Vec<crate::auth::AuthorizationMode>,
    pub parts: Arc<crate::auth::authz::Parts>,
}

/// The middleware: audit (`audit/record.rs`) around authenticate, authorize, then the handlers.
/// Without `--audit-policy-file` and `--audit-log-path` no audit work is done at all.
pub async fn filter(State(s): State<Shared>, req: Request, next: Next) -> Response {
    let Some(audit) = s.audit.clone() else { return secured(s, req, next, None).await };
    let mut recorder = crate::audit::Recorder::new(audit, &req);
    // A handler's panic is recorded at stage Panic (kube-apiserver's WithAudit), then goes on.
    match AssertUnwindSafe(secured(s, req, next, Some(&mut recorder))).catch_unwind().await {
        Ok(response) => recorder.finish(response),
        Err(panic) => {
            recorder.panicked(panic.as_ref());
            std::panic::resume_unwind(panic)
        }
    }
}

async fn secured(s: Shared, mut req: Request, next: Next, mut audit: Option<&mut crate::audit::Recorder>) -> Response {
    let peer = req.extensions().get::<ConnectInfo<Peer>>().map(|p| p.0.client_chain.clone());
    let chain: &[Vec<u8>] = peer.as_deref().map(Vec::as_slice).unwrap_or(&[]);
    let authn_req = AuthnRequest { headers: req.headers(), path: req.uri().path(), client_chain: chain };
    let user = match s.security.authn.authenticate(&authn_req) {
        Ok(Some(user)) => Arc::new(user),
        Ok(None) => return unauthorized(None),
        Err(e) => return unauthorized(Some(&e)),
    };
    // Credentials stay here: nothing behind the filters may be tempted to pass them on.
    req.headers_mut().remove(header::AUTHORIZATION);
    if let Some(a) = audit.as_deref_mut() {
        a.authenticated(&user, &mut req);
    }
    // From here on the request is whoever it may impersonate (`Impersonate-*`, then removed).
    let user = match crate::auth::impersonation::apply(s.security.authz.as_ref(), user, &mut req) {
        Ok(user) => user,
        Err(refused) => return refused.into_response(),
    };
    if let Some(a) = audit.as_deref_mut() {
        if req.extensions().get::<crate::auth::impersonation::Impersonator>().is_some() {
            a.impersonated(&user);
        }
    }
    let attrs = request_info::for_user(user.clone(), req.method().as_str(), req.uri().path(), req.uri().query());
    // kube-apiserver's maxinflight filter sits here, after authentication and before authorization.
    let long_running = limits::long_running(&attrs);
    let permit = match long_running {
        true => None,
        false => match s.inflight.admit(&attrs) {
            Some(p) => Some(p),
            None => {
                tracing::debug!(user = %user.name, verb = %attrs.verb, path = %attrs.path, "too many requests in flight");
                return limits::too_many_requests();
            }
        },
    };
    let verdict = s.security.authz.authorize(&attrs);
    if let Some(a) = audit {
        a.authorized(&verdict);
    }
    if verdict.decision != Decision::Allow {
        if let Some(err) = verdict.error {
            tracing::error!(error = %err, user = %user.name, path = %attrs.path, "authorization failed");
            return ApiError::internal(err).into_response();
        }
        tracing::debug!(user = %user.name, verb = %attrs.verb, path = %attrs.path, reason = %verdict.reason, "forbidden");
        return forbidden(&attrs, &verdict.reason).into_response();
    }
    // exec, attach and portforward also need `create`, whatever the transport's verb.
    if let Some(extra) = compound::also_required(&attrs) {
        if let Err(e) = compound::require(&*s.security.authz, &extra) {
            tracing::debug!(user = %user.name, verb = %extra.verb, path = %attrs.path, "forbidden");
            return e.into_response();
        }
    }
    req.extensions_mut().insert(user);
    let timeout = s.limits.request_timeout;
    if long_running || timeout.is_zero() {
        return next.run(req).await;
    }
    limits::within(timeout, async move {
        let _slot = permit;
        next.run(req).await
    })
    .await
}

fn unauthorized(why: Option<&authn::AuthnError>) -> Response {
    if let Some(e) = why {
        tracing::debug!(error = %e, "unable to authenticate the request");
    }
    ApiError::new(401, "Unauthorized", "Unauthorized").into_response()
}

/// Kubernetes' `responsewriters.Forbidden`: `<resource> "<name>" is forbidden: User "u" cannot
/// <verb> resource "<r>" in API group "<g>" in the namespace "<ns>"[: <reason>]`.
pub fn forbidden(a: &Attributes, reason: &str) -> ApiError {
    let user = &a.user.name;
    let mut msg = if !a.resource_request {
        format!("User {user:?} cannot {} path {:?}", a.verb, a.path)
    } else {
        let resource =
            if a.subresource.is_empty() { a.resource.clone() } else { format!("{}/{}", a.resource, a.subresource) };
        if a.namespace.is_empty() {
            format!(
                "User {user:?} cannot {} resource {resource:?} in API group {:?} at the cluster scope",
                a.verb, a.api_group
            )
        } else {
            format!(
                "User {user:?} cannot {} resource {resource:?} in API group {:?} in the namespace {:?}",
                a.verb, a.api_group, a.namespace
            )
        }
    };
    if !reason.is_empty() {
        msg = format!("{msg}: {reason}");
    }
    let qualified = super::errors::qualify(&a.api_group, &a.resource);
    let message = match (a.resource_request && !a.resource.is_empty(), a.name.is_empty()) {
        (false, _) => format!("forbidden: {msg}"),
        (true, true) => format!("{qualified} is forbidden: {msg}"),
        (true, false) => format!("{qualified} {:?} is forbidden: {msg}", a.name),
    };
    let mut err = ApiError::forbidden(message);
    err.details = Some(serde_json::json!({"name": a.name, "group": a.api_group, "kind": a.resource}));
    err
}

/// The user the filters put on a request (the apiserver's own identity if none: a request that
/// reached a handler without the filters is internal).
pub fn user_of(extensions: &axum::http::Extensions) -> Arc<UserInfo> {
    extensions.get::<Arc<UserInfo>>().cloned().unwrap_or_else(|| Arc::new(UserInfo::apiserver()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attrs(user: &str, method: &str, path: &str, query: Option<&str>) -> Attributes {
        request_info::for_user(Arc::new(UserInfo::new(user, &[])), method, path, query)
    }

    #[test]
    fn forbidden_messages_read_as_kubernetes_writes_them() {
        let e = forbidden(&attrs("x", "GET", "/api/v1/namespaces/y/pods", None), "");
        assert_eq!(
            e.message,
            r#"pods is forbidden: User "x" cannot list resource "pods" in API group "" in the namespace "y""#
        );
        assert_eq!((e.code, e.reason), (403, "Forbidden"));
        let e = forbidden(&attrs("system:node:a", "PATCH", "/api/v1/nodes/b/status", None), "");
        assert_eq!(
            e.message,
            r#"nodes "b" is forbidden: User "system:node:a" cannot patch resource "nodes/status" in API group "" at the cluster scope"#
        );
        let e =
            forbidden(&attrs("bob", "POST", "/apis/apps/v1/namespaces/d/deployments", None), "no RBAC policy matched");
        assert_eq!(
            e.message,
            r#"deployments.apps is forbidden: User "bob" cannot create resource "deployments" in API group "apps" in the namespace "d": no RBAC policy matched"#
        );
        let e = forbidden(&attrs("system:anonymous", "GET", "/", None), "");
        assert_eq!(e.message, r#"forbidden: User "system:anonymous" cannot get path "/""#);
        assert_eq!(e.status_json()["details"], serde_json::json!({"name": "", "group": "", "kind": ""}));
    }
}
