//! The server's resource types (from discovery) and how a user's words name them: `po`, `pods`,
//! `pod`, `Pod`, `deployments.apps`, `deploy/web`.

use anyhow::{bail, Result};
use kube::api::ApiResource;
use kube::core::discovery::v2::{APIGroupDiscoveryList, APIResourceDiscovery};

/// One served resource type, in one version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resource {
    pub group: String,
    pub version: String,
    pub kind: String,
    pub plural: String,
    pub singular: String,
    pub short_names: Vec<String>,
    pub namespaced: bool,
    /// The group's preferred version: the one a bare name resolves to.
    pub preferred: bool,
}

impl Resource {
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// `deployments.apps`, `pods`: how Kubernetes names the resource in messages.
    pub fn qualified_plural(&self) -> String {
        qualify(&self.plural, &self.group)
    }

    /// `deployment.apps`, `pod`: kubectl's prefix in `deployment.apps/web created`.
    pub fn qualified_kind(&self) -> String {
        qualify(&self.kind.to_lowercase(), &self.group)
    }

    pub fn api_resource(&self) -> ApiResource {
        ApiResource {
            group: self.group.clone(),
            version: self.version.clone(),
            api_version: self.api_version(),
            kind: self.kind.clone(),
            plural: self.plural.clone(),
        }
    }

    /// The collection's URL path: in `namespace` (None: across all namespaces, or cluster-scoped).
    pub fn path(&self, namespace: Option<&str>) -> String {
        let root = if self.group.is_empty() {
            format!("/api/{}", self.version)
        } else {
            format!("/apis/{}/{}", self.group, self.version)
        };
        match namespace {
            Some(ns) if self.namespaced => format!("{root}/namespaces/{ns}/{}", self.plural),
            _ => format!("{root}/{}", self.plural),
        }
    }
}

fn qualify(name: &str, group: &str) -> String {
    if group.is_empty() {
        name.to_string()
    } else {
        format!("{name}.{group}")
    }
}

/// The resource `word` names, as kubectl resolves it: plural, singular, short name or kind,
/// case-insensitively, optionally followed by `.group` (`deployments.apps`) or
/// `.version.group` (`deployments.v1.apps`); the core group and preferred versions win.
pub fn resolve<'a>(resources: &'a [Resource], word: &str) -> Result<&'a Resource> {
    let lower = word.to_lowercase();
    let matches = |r: &Resource, name: &str| {
        r.plural == name
            || r.singular == name
            || r.kind.to_lowercase() == name
            || r.short_names.iter().any(|s| s == name)
    };
    let mut candidates: Vec<&Resource> = Vec::new();
    for r in resources {
        let bare = matches(r, &lower) && r.preferred;
        let with_group = lower.split_once('.').is_some_and(|(name, rest)| {
            matches(r, name) && (rest == r.group || (rest == format!("{}.{}", r.version, r.group)))
        });
        if bare || with_group {
            candidates.push(r);
        }
    }
    // kubectl's priority: the legacy core group before every other group.
    candidates.sort_by_key(|r| !r.group.is_empty());
    match candidates.first() {
        Some(r) => Ok(r),
        None => bail!("the server doesn't have a resource type {word:?}"),
    }
}

/// The resource serving `kind` in `api_version` (for manifests).
pub fn for_kind<'a>(resources: &'a [Resource], api_version: &str, kind: &str) -> Option<&'a Resource> {
    resources.iter().find(|r| r.api_version() == api_version && r.kind == kind)
}

/// Resources from aggregated discovery (`/api` and `/apis` as APIGroupDiscoveryList);
/// subresources are left out. The first version of each group is its preferred one.
pub fn from_aggregated(lists: &[APIGroupDiscoveryList]) -> Vec<Resource> {
    let mut out = Vec::new();
    for group in lists.iter().flat_map(|l| &l.items) {
        let name = group.metadata.as_ref().and_then(|m| m.name.clone()).unwrap_or_default();
        for (i, v) in group.versions.iter().enumerate() {
            let version = v.version.clone().unwrap_or_default();
            for r in &v.resources {
                if let Some(res) = from_discovery(&name, &version, i == 0, r) {
                    out.push(res);
                }
            }
        }
    }
    out
}

fn from_discovery(group: &str, version: &str, preferred: bool, r: &APIResourceDiscovery) -> Option<Resource> {
    let plural = r.resource.clone()?;
    let kind = r.response_kind.as_ref().and_then(|k| k.kind.clone())?;
    Some(Resource {
        group: group.to_string(),
        version: version.to_string(),
        singular: r.singular_resource.clone().filter(|s| !s.is_empty()).unwrap_or_else(|| kind.to_lowercase()),
        kind,
        plural,
        short_names: r.short_names.clone(),
        namespaced: r.scope.as_deref() == Some("Namespaced"),
        preferred,
    })
}

/// Discovery: aggregated (two requests), else the legacy per-group documents.
pub async fn discover(client: &kube::Client) -> Result<Vec<Resource>> {
    let aggregated = async {
        let core = client.list_core_api_versions_aggregated().await?;
        let groups = client.list_api_groups_aggregated().await?;
        Ok::<_, kube::Error>(from_aggregated(&[core, groups]))
    };
    match aggregated.await {
        Ok(list) if !list.is_empty() => Ok(list),
        Ok(_) | Err(_) => legacy(client).await,
    }
}

async fn legacy(client: &kube::Client) -> Result<Vec<Resource>> {
    use crate::errors::api;
    let mut lists = Vec::new();
    let core = client.list_core_api_versions().await.map_err(api)?;
    for (i, v) in core.versions.iter().enumerate() {
        lists.push((String::new(), v.clone(), i == 0, client.list_core_api_resources(v).await.map_err(api)?));
    }
    for g in client.list_api_groups().await.map_err(api)?.groups {
        let preferred = g.preferred_version.as_ref().map(|p| p.version.clone());
        for v in &g.versions {
            let list = client.list_api_group_resources(&v.group_version).await.map_err(api)?;
            lists.push((g.name.clone(), v.version.clone(), preferred.as_deref() == Some(&v.version), list));
        }
    }
    let mut out = Vec::new();
    for (group, version, preferred, list) in lists {
        for r in list.resources.into_iter().filter(|r| !r.name.contains('/')) {
            out.push(Resource {
                group: group.clone(),
                version: version.clone(),
                singular: if r.singular_name.is_empty() { r.kind.to_lowercase() } else { r.singular_name },
                kind: r.kind,
                plural: r.name,
                short_names: r.short_names.unwrap_or_default(),
                namespaced: r.namespaced,
                preferred,
            });
        }
    }
    if out.is_empty() {
        bail!("discovery failed: the server lists no resource types");
    }
    Ok(out)
}

#[cfg(test)]
pub mod tests {
    use super::*;

    pub fn resource(
        group: &str,
        version: &str,
        kind: &str,
        plural: &str,
        short: &[&str],
        namespaced: bool,
    ) -> Resource {
        Resource {
            group: group.into(),
            version: version.into(),
            kind: kind.into(),
            plural: plural.into(),
            singular: kind.to_lowercase(),
            short_names: short.iter().map(|s| s.to_string()).collect(),
            namespaced,
            preferred: true,
        }
    }

    pub fn sample() -> Vec<Resource> {
        vec![
            resource("", "v1", "Pod", "pods", &["po"], true),
            resource("", "v1", "Service", "services", &["svc"], true),
            resource("", "v1", "Namespace", "namespaces", &["ns"], false),
            resource("", "v1", "Event", "events", &["ev"], true),
            resource("", "v1", "ConfigMap", "configmaps", &["cm"], true),
            resource("apps", "v1", "Deployment", "deployments", &["deploy"], true),
            resource("apps", "v1", "ReplicaSet", "replicasets", &["rs"], true),
            resource("events.k8s.io", "v1", "Event", "events", &["ev"], true),
        ]
    }

    #[test]
    fn names_resolve_like_kubectl() {
        let all = sample();
        for word in ["deploy", "deployment", "deployments", "Deployment", "DEPLOYMENTS", "deployments.apps"] {
            assert_eq!(resolve(&all, word).expect(word).plural, "deployments", "{word}");
        }
        assert_eq!(resolve(&all, "deployments.v1.apps").expect("gvr").kind, "Deployment");
        assert_eq!(resolve(&all, "po").expect("po").kind, "Pod");
        assert_eq!(resolve(&all, "svc").expect("svc").kind, "Service");
        assert_eq!(resolve(&all, "ns").expect("ns").kind, "Namespace");
    }

    #[test]
    fn the_core_group_wins_a_name_two_groups_serve() {
        let all = sample();
        assert_eq!(resolve(&all, "events").expect("events").group, "");
        assert_eq!(resolve(&all, "events.events.k8s.io").expect("qualified").group, "events.k8s.io");
    }

    #[test]
    fn an_unknown_name_is_an_error_kubectl_would_print() {
        let err = resolve(&sample(), "widgets").expect_err("unknown");
        assert_eq!(err.to_string(), "the server doesn't have a resource type \"widgets\"");
        assert!(resolve(&sample(), "pods.apps").is_err(), "pods are not in apps");
    }

    #[test]
    fn a_non_preferred_version_needs_its_version_spelled_out() {
        let mut all = sample();
        let mut beta = resource("apps", "v1beta1", "Deployment", "deployments", &["deploy"], true);
        beta.preferred = false;
        all.insert(0, beta);
        assert_eq!(resolve(&all, "deploy").expect("deploy").version, "v1");
        assert_eq!(resolve(&all, "deployments.v1beta1.apps").expect("beta").version, "v1beta1");
    }

    #[test]
    fn paths_follow_the_api_layout() {
        let all = sample();
        let deploy = resolve(&all, "deploy").expect("deploy");
        assert_eq!(deploy.path(Some("web")), "/apis/apps/v1/namespaces/web/deployments");
        assert_eq!(deploy.path(None), "/apis/apps/v1/deployments");
        let ns = resolve(&all, "ns").expect("ns");
        assert_eq!(ns.path(Some("default")), "/api/v1/namespaces");
        assert_eq!(deploy.qualified_kind(), "deployment.apps");
        assert_eq!(ns.qualified_plural(), "namespaces");
    }

    #[test]
    fn aggregated_discovery_becomes_resources() {
        let doc: APIGroupDiscoveryList = serde_json::from_value(serde_json::json!({
            "kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2", "metadata": {},
            "items": [{"metadata": {"name": "apps"}, "versions": [
                {"version": "v1", "resources": [{"resource": "deployments", "singularResource": "deployment",
                  "responseKind": {"group": "apps", "version": "v1", "kind": "Deployment"}, "scope": "Namespaced",
                  "shortNames": ["deploy"], "verbs": ["get", "list"]}]},
                {"version": "v1beta1", "resources": [{"resource": "deployments",
                  "responseKind": {"kind": "Deployment"}, "scope": "Namespaced", "verbs": ["get"]}]}]}]
        }))
        .expect("discovery document");
        let rs = from_aggregated(&[doc]);
        assert_eq!(rs.len(), 2);
        assert_eq!(rs[0], resource("apps", "v1", "Deployment", "deployments", &["deploy"], true));
        assert!(!rs[1].preferred && rs[1].singular == "deployment");
    }
}
