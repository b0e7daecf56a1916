//! Parses resource request paths: `/api/v1/...` and `/apis/<group>/<version>/...`.

/// The resource a request addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourcePath {
    pub group: String,
    pub version: String,
    pub namespace: Option<String>,
    pub resource: String,
    pub name: Option<String>,
    pub subresource: Option<String>,
}

/// What a path under /api or /apis names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApiPath {
    /// `/api/v1` or `/apis/<g>/<v>`: a group-version's resource list.
    GroupVersion {
        group: String,
        version: String,
    },
    /// `/apis/<g>`: one group.
    Group {
        group: String,
    },
    Resource(ResourcePath),
}

/// `None` when the path is not under /api or /apis, or has too many segments.
pub fn parse(path: &str) -> Option<ApiPath> {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    if segs.iter().any(|s| s.is_empty()) {
        return None;
    }
    let (group, version, rest) = match segs.as_slice() {
        ["api", version, rest @ ..] => ("", *version, rest),
        ["apis", group] => return Some(ApiPath::Group { group: group.to_string() }),
        ["apis", group, version, rest @ ..] => (*group, *version, rest),
        _ => return None,
    };
    let r = |ns: Option<&str>, resource: &str, name: Option<&&str>, sub: Option<&&str>| {
        Some(ApiPath::Resource(ResourcePath {
            group: group.to_string(),
            version: version.to_string(),
            namespace: ns.map(str::to_string),
            resource: resource.to_string(),
            name: name.map(|s| s.to_string()),
            subresource: sub.map(|s| s.to_string()),
        }))
    };
    match rest {
        [] => Some(ApiPath::GroupVersion { group: group.to_string(), version: version.to_string() }),
        // namespaces/<name>/status|finalize is the namespace's own subresource.
        ["namespaces", name, sub @ ("status" | "finalize")] if group.is_empty() => {
            r(None, "namespaces", Some(name), Some(sub))
        }
        ["namespaces", ns, resource, more @ ..] if more.len() <= 2 => r(Some(ns), resource, more.first(), more.get(1)),
        [resource, more @ ..] if more.len() <= 2 => r(None, resource, more.first(), more.get(1)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn res(p: &str) -> ResourcePath {
        match parse(p) {
            Some(ApiPath::Resource(r)) => r,
            other => panic!("{p}: {other:?}"),
        }
    }

    #[test]
    fn parses_namespaced_and_cluster_paths() {
        let r = res("/api/v1/namespaces/default/pods/web/status");
        assert_eq!(
            (r.namespace.as_deref(), r.resource.as_str(), r.name.as_deref(), r.subresource.as_deref()),
            (Some("default"), "pods", Some("web"), Some("status"))
        );
        let r = res("/apis/apps/v1/deployments");
        assert_eq!((r.group.as_str(), r.namespace, r.resource.as_str(), r.name), ("apps", None, "deployments", None));
        let r = res("/api/v1/namespaces/kube-system");
        assert_eq!((r.resource.as_str(), r.name.as_deref(), r.namespace), ("namespaces", Some("kube-system"), None));
        let r = res("/api/v1/namespaces/foo/finalize");
        assert_eq!(
            (r.resource.as_str(), r.name.as_deref(), r.subresource.as_deref()),
            ("namespaces", Some("foo"), Some("finalize"))
        );
        let r = res("/api/v1/namespaces/foo/pods");
        assert_eq!((r.namespace.as_deref(), r.resource.as_str()), (Some("foo"), "pods"));
    }

    #[test]
    fn group_versions_and_garbage() {
        assert_eq!(parse("/api/v1"), Some(ApiPath::GroupVersion { group: "".into(), version: "v1".into() }));
        assert_eq!(parse("/apis/apps"), Some(ApiPath::Group { group: "apps".into() }));
        assert_eq!(parse("/apis/apps/v1/namespaces/a/deployments/b/scale/x"), None);
        assert_eq!(parse("/api//v1"), None);
        assert_eq!(parse("/foo"), None);
    }
}
