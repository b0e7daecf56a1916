//! The resources the apiserver serves, found through discovery: what the garbage collector watches
//! and what the namespace controller empties.

use kube::discovery::{verbs, ApiCapabilities, ApiResource, Discovery, Scope};

/// One top-level resource at its group's preferred version.
#[derive(Clone, Debug, PartialEq)]
pub struct Served {
    pub ar: ApiResource,
    pub namespaced: bool,
    pub verbs: Vec<String>,
}

impl Served {
    pub fn new(ar: ApiResource, caps: &ApiCapabilities) -> Self {
        Self { ar, namespaced: caps.scope == Scope::Namespaced, verbs: caps.operations.clone() }
    }

    pub fn supports(&self, verb: &str) -> bool {
        self.verbs.iter().any(|v| v == verb)
    }

    /// `pods`, `deployments.apps`: the group-qualified resource, as Kubernetes prints it.
    pub fn group_resource(&self) -> String {
        if self.ar.group.is_empty() {
            self.ar.plural.clone()
        } else {
            format!("{}.{}", self.ar.plural, self.ar.group)
        }
    }
}

/// Every top-level resource the apiserver serves (aggregated discovery, else the legacy walk).
pub async fn discover(client: &kube::Client) -> Result<Vec<Served>, kube::Error> {
    let discovery = match Discovery::new(client.clone()).run_aggregated().await {
        Ok(d) => d,
        Err(e) => {
            tracing::debug!(error = %e, "aggregated discovery failed; walking the groups");
            Discovery::new(client.clone()).run().await?
        }
    };
    let mut out = Vec::new();
    for group in discovery.groups_alphabetical() {
        for (ar, caps) in group.recommended_resources() {
            out.push(Served::new(ar, &caps));
        }
    }
    Ok(out)
}

/// What the garbage collector covers: resources it can list, watch and delete, less events
/// (Kubernetes' default ignored resources).
pub fn collectable(all: &[Served]) -> Vec<Served> {
    all.iter()
        .filter(|s| [verbs::LIST, verbs::WATCH, verbs::DELETE].iter().all(|v| s.supports(v)))
        .filter(|s| s.ar.plural != "events" || !matches!(s.ar.group.as_str(), "" | "events.k8s.io"))
        .cloned()
        .collect()
}

/// The resource an owner reference points at: the same group and kind, at its version if
/// served, else at the served one (objects are the same across versions).
pub fn resolve<'a>(all: &'a [Served], api_version: &str, kind: &str) -> Option<(usize, &'a Served)> {
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let same_kind = |s: &&Served| s.ar.group == group && s.ar.kind == kind;
    let exact = all.iter().enumerate().find(|(_, s)| same_kind(s) && s.ar.version == version);
    exact.or_else(|| all.iter().enumerate().find(|(_, s)| same_kind(s)))
}

#[cfg(test)]
mod tests {
    use super::*;

    pub fn served(api_version: &str, kind: &str, plural: &str, namespaced: bool) -> Served {
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        let ar = ApiResource {
            group: group.into(),
            version: version.into(),
            api_version: api_version.into(),
            kind: kind.into(),
            plural: plural.into(),
        };
        let verbs = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"];
        Served { ar, namespaced, verbs: verbs.iter().map(|v| v.to_string()).collect() }
    }

    #[test]
    fn the_collector_skips_events_and_what_it_cannot_watch() {
        let mut all = vec![
            served("v1", "Pod", "pods", true),
            served("v1", "Event", "events", true),
            served("events.k8s.io/v1", "Event", "events", true),
            served("apps/v1", "ReplicaSet", "replicasets", true),
            served("v1", "Binding", "bindings", true),
        ];
        all[4].verbs = vec!["create".into()];
        let kinds: Vec<_> = collectable(&all).into_iter().map(|s| s.ar.kind).collect();
        assert_eq!(kinds, ["Pod", "ReplicaSet"]);
    }

    #[test]
    fn owner_references_resolve_by_group_and_kind() {
        let all = vec![served("v1", "Pod", "pods", true), served("apps/v1", "ReplicaSet", "replicasets", true)];
        assert_eq!(resolve(&all, "apps/v1", "ReplicaSet").map(|(i, _)| i), Some(1));
        assert_eq!(resolve(&all, "apps/v1beta2", "ReplicaSet").map(|(i, _)| i), Some(1), "another version");
        assert_eq!(resolve(&all, "extensions/v1beta1", "ReplicaSet"), None, "another group");
        assert_eq!(resolve(&all, "v1", "Pod").map(|(_, s)| s.group_resource()), Some("pods".into()));
        assert_eq!(all[1].group_resource(), "replicasets.apps");
    }
}
