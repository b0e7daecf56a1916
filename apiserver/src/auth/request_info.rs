//! What a request asks to do, from its method, path and query alone — Kubernetes'
//! `RequestInfoFactory.NewRequestInfo`, so authorizers see the verbs, names and scopes
//! kube-apiserver's do (`/api/v1/namespaces/x` has namespace `x`; a list with
//! `fieldSelector=metadata.name=n` is about `n`; DELETE on a collection is `deletecollection`).

use super::Attributes;
use kaji_api::selector::{FieldOp, FieldSelector};
use std::sync::Arc;

/// The attributes of a request (without its user); `query` is the raw query string.
pub fn attributes(method: &str, path: &str, query: Option<&str>) -> Attributes {
    let mut a = Attributes { path: path.to_string(), verb: method.to_ascii_lowercase(), ..Default::default() };
    let parts: Vec<&str> = path.trim_matches('/').split('/').filter(|p| !p.is_empty()).collect();
    // Non-resource unless /api/<v>/<resource>... or /apis/<g>/<v>/<resource>...
    let (group, rest) = match parts.as_slice() {
        ["api", rest @ ..] if rest.len() >= 2 => ("", rest),
        ["apis", group, rest @ ..] if rest.len() >= 2 => (*group, rest),
        _ => return a,
    };
    a.resource_request = true;
    a.api_group = group.to_string();
    a.api_version = rest[0].to_string();
    let mut rest = &rest[1..];
    let mut by_method = false;
    // /{watch,proxy}/... prefixes name the verb.
    if matches!(rest[0], "watch" | "proxy") {
        if rest.len() < 2 {
            return Attributes { resource_request: false, ..a };
        }
        a.verb = rest[0].to_string();
        rest = &rest[1..];
    } else {
        by_method = true;
        a.verb = match method {
            "POST" => "create",
            "GET" | "HEAD" => "get",
            "PUT" => "update",
            "PATCH" => "patch",
            "DELETE" => "delete",
            _ => "",
        }
        .to_string();
    }
    if rest[0] == "namespaces" {
        if let Some(ns) = rest.get(1) {
            a.namespace = ns.to_string();
            // /namespaces/<ns>/<resource>... unless <resource> is a namespace subresource.
            if rest.len() > 2 && !matches!(rest[2], "status" | "finalize") {
                rest = &rest[2..];
            }
        }
    }
    // resource/name/subresource/...
    if rest.len() >= 3 && a.verb != "proxy" {
        a.subresource = rest[2].to_string();
    }
    if rest.len() >= 2 {
        a.name = rest[1].to_string();
    }
    a.resource = rest[0].to_string();
    if by_method && a.verb == "get" && a.name.is_empty() {
        let q = Query::parse(query);
        a.verb = if q.watch { "watch" } else { "list" }.to_string();
        if let Some(name) = q.field_name.filter(|n| valid_path_segment(n)) {
            a.name = name;
        }
    }
    if by_method && a.verb == "delete" && a.name.is_empty() {
        a.verb = "deletecollection".to_string();
    }
    a
}

/// With a user: what the authorizers get.
pub fn for_user(user: Arc<super::UserInfo>, method: &str, path: &str, query: Option<&str>) -> Attributes {
    Attributes { user, ..attributes(method, path, query) }
}

/// The two query parameters that change what a GET on a collection asks.
struct Query {
    watch: bool,
    /// `metadata.name` when the field selector requires exactly that name.
    field_name: Option<String>,
}

impl Query {
    fn parse(query: Option<&str>) -> Self {
        let pairs: Vec<(String, String)> = serde_urlencoded::from_str(query.unwrap_or("")).unwrap_or_default();
        let last = |k: &str| pairs.iter().rev().find(|(key, _)| key == k).map(|(_, v)| v.as_str());
        let watch = matches!(last("watch"), Some("1" | "t" | "T" | "true" | "TRUE" | "True"));
        let field_name = last("fieldSelector").and_then(|s| FieldSelector::parse(s).ok()).and_then(|sel| {
            sel.requirements()
                .iter()
                .find(|r| r.field == "metadata.name" && r.op == FieldOp::Eq)
                .map(|r| r.value.clone())
        });
        Self { watch, field_name }
    }
}

/// Kubernetes' `path.IsValidPathSegmentName`.
fn valid_path_segment(name: &str) -> bool {
    name != "." && name != ".." && !name.contains('/') && !name.contains('%')
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (verb, namespace, group, resource, subresource, name, resource request)
    fn info(method: &str, path: &str, query: Option<&str>) -> (String, String, String, String, String, String, bool) {
        let a = attributes(method, path, query);
        (a.verb, a.namespace, a.api_group, a.resource, a.subresource, a.name, a.resource_request)
    }

    fn s(v: (&str, &str, &str, &str, &str, &str, bool)) -> (String, String, String, String, String, String, bool) {
        (v.0.into(), v.1.into(), v.2.into(), v.3.into(), v.4.into(), v.5.into(), v.6)
    }

    #[test]
    fn resource_requests_read_like_kubernetes_request_info() {
        let cases = [
            ("GET", "/api/v1/namespaces/default/pods", None, ("list", "default", "", "pods", "", "", true)),
            (
                "GET",
                "/api/v1/namespaces/default/pods",
                Some("watch=true"),
                ("watch", "default", "", "pods", "", "", true),
            ),
            ("GET", "/api/v1/pods", Some("watch=1&resourceVersion=5"), ("watch", "", "", "pods", "", "", true)),
            ("GET", "/api/v1/namespaces/default/pods/web", None, ("get", "default", "", "pods", "", "web", true)),
            ("GET", "/api/v1/namespaces/d/pods/web/log", None, ("get", "d", "", "pods", "log", "web", true)),
            ("POST", "/api/v1/namespaces/d/pods/web/exec", None, ("create", "d", "", "pods", "exec", "web", true)),
            ("PATCH", "/api/v1/nodes/n1/status", None, ("patch", "", "", "nodes", "status", "n1", true)),
            (
                "PUT",
                "/apis/apps/v1/namespaces/d/deployments/x/scale",
                None,
                ("update", "d", "apps", "deployments", "scale", "x", true),
            ),
            ("DELETE", "/api/v1/namespaces/d/pods", None, ("deletecollection", "d", "", "pods", "", "", true)),
            ("DELETE", "/api/v1/namespaces/d/pods/p", None, ("delete", "d", "", "pods", "", "p", true)),
            (
                "POST",
                "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases",
                None,
                ("create", "kube-node-lease", "coordination.k8s.io", "leases", "", "", true),
            ),
            // A namespace is in itself; status and finalize are its subresources.
            (
                "GET",
                "/api/v1/namespaces/kube-system",
                None,
                ("get", "kube-system", "", "namespaces", "", "kube-system", true),
            ),
            ("PUT", "/api/v1/namespaces/x/finalize", None, ("update", "x", "", "namespaces", "finalize", "x", true)),
            ("GET", "/api/v1/namespaces", None, ("list", "", "", "namespaces", "", "", true)),
            // The legacy /watch/ prefix.
            ("GET", "/api/v1/watch/namespaces/d/pods", None, ("watch", "d", "", "pods", "", "", true)),
            // A list or watch of one name by field selector is about that name.
            (
                "GET",
                "/api/v1/nodes",
                Some("fieldSelector=metadata.name%3Dn1&watch=true"),
                ("watch", "", "", "nodes", "", "n1", true),
            ),
            (
                "GET",
                "/api/v1/nodes",
                Some("fieldSelector=metadata.name!%3Dn1"),
                ("list", "", "", "nodes", "", "", true),
            ),
        ];
        for (method, path, query, want) in cases {
            assert_eq!(info(method, path, query), s(want), "{method} {path}?{query:?}");
        }
    }

    #[test]
    fn discovery_and_other_paths_are_not_resource_requests() {
        for path in
            ["/api", "/api/v1", "/apis", "/apis/apps", "/apis/apps/v1", "/healthz", "/version", "/", "/openapi/v3"]
        {
            let a = attributes("GET", path, None);
            assert!(!a.resource_request, "{path}");
            assert_eq!((a.verb.as_str(), a.path.as_str()), ("get", path));
        }
        assert_eq!(attributes("POST", "/livez", None).verb, "post");
        assert!(!attributes("GET", "/api/v1/watch", None).resource_request);
    }
}
