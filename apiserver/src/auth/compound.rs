//! Compound authorization: requests that must also be allowed a verb other than their own. An
//! update or server-side apply that creates its object needs `create` on it (Kubernetes'
//! `withAuthorization` in the update and patch handlers), and exec, attach and portforward need
//! `create` whatever their transport — a WebSocket upgrade arrives as GET, authorized as `get`
//! (Kubernetes 1.35's `ensureAuthorizedForVerb`, gate `AuthorizePodWebsocketUpgradeCreatePermission`,
//! on by default). Either refusal is apimachinery's `NewForbidden` with the authorizer's reason.

use super::authz::message::resource_forbidden;
use super::{Attributes, Authorizer, Decision, UserInfo};
use crate::http::errors::{ApiError, ApiResult};
use kaji_api::resources::ResourceInfo;
use std::sync::Arc;

/// The pod subresources that must be allowed `create`, whatever the request's verb.
const CONNECT_SUBRESOURCES: &[&str] = &["exec", "attach", "portforward"];

/// What an update or apply that creates `name` must also be allowed: `create` on the object.
pub fn create_on_update(user: Arc<UserInfo>, info: &ResourceInfo, ns: Option<&str>, name: &str) -> Attributes {
    let ns = ns.filter(|_| info.namespaced).unwrap_or("");
    let prefix =
        if info.group.is_empty() { "/api/v1".to_string() } else { format!("/apis/{}/{}", info.group, info.version) };
    let scope = if ns.is_empty() { String::new() } else { format!("/namespaces/{ns}") };
    Attributes {
        user,
        verb: "create".into(),
        namespace: ns.into(),
        api_group: info.group.into(),
        api_version: info.version.into(),
        resource: info.plural.into(),
        subresource: String::new(),
        name: name.into(),
        path: format!("{prefix}{scope}/{}/{name}", info.plural),
        resource_request: true,
    }
}

/// The second check a request needs beyond its own authorization, if any: `create` for exec,
/// attach and portforward on pods when the request's verb is not already `create`.
pub fn also_required(a: &Attributes) -> Option<Attributes> {
    let connect = a.resource_request
        && a.api_group.is_empty()
        && a.resource == "pods"
        && CONNECT_SUBRESOURCES.contains(&a.subresource.as_str());
    (connect && a.verb != "create").then(|| Attributes { verb: "create".into(), ..a.clone() })
}

/// Allowed, or the 403 Kubernetes answers (`<resource> "<name>" is forbidden: <reason>`); an
/// authorizer error without an allow is a 500.
pub fn require(authz: &dyn Authorizer, a: &Attributes) -> ApiResult<()> {
    let v = authz.authorize(a);
    if v.decision == Decision::Allow {
        return Ok(());
    }
    if let Some(err) = v.error {
        return Err(ApiError::internal(err));
    }
    Err(resource_forbidden(&a.api_group, &a.resource, &a.name, &v.reason))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::request_info;
    use crate::auth::Verdict;

    /// Allows exactly one verb.
    struct Only(&'static str);
    impl Authorizer for Only {
        fn authorize(&self, a: &Attributes) -> Verdict {
            if a.verb == self.0 {
                Verdict::allow("")
            } else {
                Verdict::no_opinion("")
            }
        }
    }

    fn user() -> Arc<UserInfo> {
        Arc::new(UserInfo::new("u", &[]))
    }

    #[test]
    fn a_websocket_exec_also_needs_create_and_a_post_does_not_ask_twice() {
        for sub in ["exec", "attach", "portforward"] {
            let get = request_info::for_user(user(), "GET", &format!("/api/v1/namespaces/ns/pods/p/{sub}"), None);
            let extra = also_required(&get).expect("a GET upgrade needs create");
            assert_eq!((extra.verb.as_str(), extra.subresource.as_str(), extra.name.as_str()), ("create", sub, "p"));
            let post = request_info::for_user(user(), "POST", &format!("/api/v1/namespaces/ns/pods/p/{sub}"), None);
            assert_eq!(also_required(&post), None);
        }
        for path in ["/api/v1/namespaces/ns/pods/p/log", "/api/v1/namespaces/ns/pods/p", "/api/v1/nodes/n/proxy/x"] {
            assert_eq!(also_required(&request_info::for_user(user(), "GET", path, None)), None, "{path}");
        }
    }

    #[test]
    fn a_refusal_names_the_object_and_the_authorizers_reason() {
        let get = request_info::for_user(user(), "GET", "/api/v1/namespaces/ns/pods/p/exec", None);
        let extra = also_required(&get).expect("needs create");
        let err = require(&Only("get"), &extra).expect_err("only get");
        assert_eq!((err.code, err.message.as_str()), (403, r#"pods "p" is forbidden: "#));
        assert!(require(&Only("create"), &extra).is_ok());
    }

    #[test]
    fn creating_on_update_asks_create_on_the_objects_own_path() {
        let leases = kaji_api::resources::by_kind("Lease").expect("served");
        let a = create_on_update(user(), leases, Some("ns"), "l");
        let from_path = request_info::for_user(user(), "POST", &a.path, None);
        assert_eq!(a.path, "/apis/coordination.k8s.io/v1/namespaces/ns/leases/l");
        assert_eq!(
            (a.verb.as_str(), a.namespace.as_str(), a.api_group.as_str(), a.resource.as_str()),
            (from_path.verb.as_str(), "ns", "coordination.k8s.io", "leases")
        );
        let err = require(&Only("update"), &a).expect_err("only update");
        assert_eq!(err.message, r#"leases.coordination.k8s.io "l" is forbidden: "#);
    }
}
