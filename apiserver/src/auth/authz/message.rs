//! apimachinery's `NewForbidden`: the 403 an admission plugin or an escalation check answers with
//! (the request-level 403 is `http::pipeline::forbidden`).

use crate::http::errors::{qualify, ApiError};
use serde_json::json;

/// `<resource> "<name>" is forbidden: <err>` (`<resource> is forbidden: ...` without a name,
/// `forbidden: ...` without a resource), with the details Kubernetes sends.
pub fn resource_forbidden(group: &str, resource: &str, name: &str, err: &str) -> ApiError {
    let message = if resource.is_empty() {
        format!("forbidden: {err}")
    } else if name.is_empty() {
        format!("{} is forbidden: {err}", qualify(group, resource))
    } else {
        format!("{} {name:?} is forbidden: {err}", qualify(group, resource))
    };
    let mut e = ApiError::forbidden(message);
    e.details = Some(json!({"group": group, "kind": resource, "name": name}));
    e
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_the_resource_and_object() {
        let e = resource_forbidden(
            "",
            "pods",
            "web",
            "node \"n1\" can only update pod status for pods with spec.nodeName set to itself",
        );
        assert_eq!(
            e.message,
            r#"pods "web" is forbidden: node "n1" can only update pod status for pods with spec.nodeName set to itself"#
        );
        assert_eq!(e.code, 403);
        let e = resource_forbidden("rbac.authorization.k8s.io", "roles", "", "nope");
        assert_eq!(e.message, "roles.rbac.authorization.k8s.io is forbidden: nope");
        assert_eq!(e.details, Some(json!({"group": "rbac.authorization.k8s.io", "kind": "roles", "name": ""})));
    }
}
