//! /version, aggregated discovery (v2 and v2beta1) and legacy discovery, built from the resource table.

use kaji_api::resources::{groups, ResourceInfo, Subresource, RESOURCES};
use serde_json::{json, Value};

/// Kubernetes' version.Info; kubectl's dispatcher picks its client from `minor`.
pub fn version() -> Value {
    json!({
        "major": kaji_api::version::MAJOR,
        "minor": kaji_api::version::MINOR,
        "gitVersion": kaji_api::version::git_version(),
        "gitCommit": option_env!("KAJI_GIT_COMMIT").unwrap_or("unknown"),
        "gitTreeState": "clean",
        "buildDate": "1970-01-01T00:00:00Z",
        "goVersion": "n/a (rust)",
        "compiler": "rustc",
        "platform": format!("{}/{}", std::env::consts::OS, match std::env::consts::ARCH { "x86_64" => "amd64", "aarch64" => "arm64", a => a }),
    })
}

/// Which discovery document the client asked for, from its Accept header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DiscoveryFormat {
    V2,
    V2Beta1,
    Legacy,
}

impl DiscoveryFormat {
    pub fn from_accept(accept: &str) -> Self {
        // Clients list preferences in order; take the first aggregated one offered.
        for part in accept.split(',') {
            let p = part.replace(' ', "");
            if p.contains("as=APIGroupDiscoveryList") && p.contains("g=apidiscovery.k8s.io") {
                if p.contains("v=v2beta1") {
                    return Self::V2Beta1;
                }
                if p.contains("v=v2") {
                    return Self::V2;
                }
            }
        }
        Self::Legacy
    }

    pub fn content_type(self) -> &'static str {
        match self {
            Self::V2 => "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList",
            Self::V2Beta1 => "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList",
            Self::Legacy => "application/json",
        }
    }

    fn api_version(self) -> &'static str {
        match self {
            Self::V2Beta1 => "apidiscovery.k8s.io/v2beta1",
            _ => "apidiscovery.k8s.io/v2",
        }
    }
}

fn sub_kind(r: &ResourceInfo, s: Subresource) -> (&'static str, &'static str, &'static str) {
    match s {
        Subresource::Scale => ("autoscaling", "v1", "Scale"),
        Subresource::Binding => ("", "v1", "Binding"),
        Subresource::Eviction => ("policy", "v1", "Eviction"),
        Subresource::Token => ("authentication.k8s.io", "v1", "TokenRequest"),
        _ => (r.group, r.version, r.kind),
    }
}

fn sub_verbs(s: Subresource) -> Vec<&'static str> {
    match s {
        Subresource::Binding | Subresource::Token | Subresource::Eviction => vec!["create"],
        Subresource::Finalize => vec!["update"],
        _ => vec!["get", "patch", "update"],
    }
}

/// Subresources served by connecting to a node's agent rather than from the store:
/// (kind, subresource, verbs). Their response kind is the resource's own, as in Kubernetes.
const CONNECT_SUBRESOURCES: &[(&str, &str, &[&str])] = &[("Pod", super::logs::SUBRESOURCE, &["get"])];

fn connect_subresources(r: &ResourceInfo) -> impl Iterator<Item = (&'static str, &'static [&'static str])> + '_ {
    CONNECT_SUBRESOURCES.iter().filter(move |(k, _, _)| *k == r.kind).map(|(_, s, v)| (*s, *v))
}

fn aggregated_resource(r: &ResourceInfo) -> Value {
    let own = json!({"group": r.group, "version": r.version, "kind": r.kind});
    let subs: Vec<Value> = r
        .subresources
        .iter()
        .map(|s| {
            let (g, v, k) = sub_kind(r, *s);
            json!({"subresource": s.name(), "responseKind": {"group": g, "version": v, "kind": k}, "verbs": sub_verbs(*s)})
        })
        .chain(connect_subresources(r).map(|(s, verbs)| json!({"subresource": s, "responseKind": own, "verbs": verbs})))
        .collect();
    let mut v = json!({
        "resource": r.plural,
        "responseKind": {"group": r.group, "version": r.version, "kind": r.kind},
        "scope": if r.namespaced { "Namespaced" } else { "Cluster" },
        "singularResource": r.singular,
        "verbs": r.verbs(),
    });
    if !r.short_names.is_empty() {
        v["shortNames"] = json!(r.short_names);
    }
    if !r.categories.is_empty() {
        v["categories"] = json!(r.categories);
    }
    if !subs.is_empty() {
        v["subresources"] = Value::Array(subs);
    }
    v
}

/// `/api` (core only) or `/apis` (named groups) as an APIGroupDiscoveryList.
pub fn aggregated(core: bool, fmt: DiscoveryFormat) -> Value {
    let items: Vec<Value> = groups()
        .into_iter()
        .filter(|g| g.is_empty() == core)
        .map(|g| {
            let resources: Vec<Value> = RESOURCES.iter().filter(|r| r.group == g).map(aggregated_resource).collect();
            json!({"metadata": {"name": g, "creationTimestamp": null},
                   "versions": [{"version": "v1", "freshness": "Current", "resources": resources}]})
        })
        .collect();
    json!({"kind": "APIGroupDiscoveryList", "apiVersion": fmt.api_version(), "metadata": {}, "items": items})
}

pub fn legacy_api(addr: &str) -> Value {
    json!({"kind": "APIVersions", "versions": ["v1"],
           "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": addr}]})
}

fn group_json(g: &str) -> Value {
    let gv = format!("{g}/v1");
    json!({"name": g, "versions": [{"groupVersion": gv, "version": "v1"}],
           "preferredVersion": {"groupVersion": gv, "version": "v1"}})
}

pub fn legacy_apis() -> Value {
    let groups: Vec<Value> = groups().into_iter().filter(|g| !g.is_empty()).map(group_json).collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `/apis/<group>` as an APIGroup, if served.
pub fn legacy_group(g: &str) -> Option<Value> {
    groups().contains(&g).then(|| {
        let mut v = group_json(g);
        v["kind"] = "APIGroup".into();
        v["apiVersion"] = "v1".into();
        v
    })
}

/// `/api/v1` or `/apis/<g>/<v>` as an APIResourceList, if served.
pub fn resource_list(group: &str, version: &str) -> Option<Value> {
    if version != "v1" || !groups().contains(&group) {
        return None;
    }
    let mut resources = Vec::new();
    for r in RESOURCES.iter().filter(|r| r.group == group) {
        let mut v = json!({"name": r.plural, "singularName": r.singular, "namespaced": r.namespaced,
                           "kind": r.kind, "verbs": r.verbs()});
        if !r.short_names.is_empty() {
            v["shortNames"] = json!(r.short_names);
        }
        if !r.categories.is_empty() {
            v["categories"] = json!(r.categories);
        }
        resources.push(v);
        for s in r.subresources {
            let (g, ver, k) = sub_kind(r, *s);
            let mut sv = json!({"name": format!("{}/{}", r.plural, s.name()), "singularName": "",
                                "namespaced": r.namespaced, "kind": k, "verbs": sub_verbs(*s)});
            if g != r.group {
                sv["group"] = g.into();
                sv["version"] = ver.into();
            }
            resources.push(sv);
        }
        for (s, verbs) in connect_subresources(r) {
            resources.push(json!({"name": format!("{}/{s}", r.plural), "singularName": "",
                                  "namespaced": r.namespaced, "kind": r.kind, "verbs": verbs}));
        }
    }
    let gv = if group.is_empty() { "v1".to_string() } else { format!("{group}/v1") };
    Some(json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_the_first_aggregated_format_offered() {
        let kubectl = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";
        assert_eq!(DiscoveryFormat::from_accept(kubectl), DiscoveryFormat::V2);
        let old = "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";
        assert_eq!(DiscoveryFormat::from_accept(old), DiscoveryFormat::V2Beta1);
        assert_eq!(DiscoveryFormat::from_accept("application/json, */*"), DiscoveryFormat::Legacy);
    }

    #[test]
    fn aggregated_discovery_lists_deployments_with_scale() {
        let apis = aggregated(false, DiscoveryFormat::V2);
        let apps = apis["items"]
            .as_array()
            .expect("items")
            .iter()
            .find(|i| i["metadata"]["name"] == "apps")
            .expect("apps group");
        let deploy = apps["versions"][0]["resources"]
            .as_array()
            .expect("resources")
            .iter()
            .find(|r| r["resource"] == "deployments")
            .expect("deployments");
        assert_eq!(deploy["shortNames"], json!(["deploy"]));
        assert_eq!(deploy["subresources"][1]["responseKind"]["kind"], "Scale");
        let core = aggregated(true, DiscoveryFormat::V2);
        assert_eq!(core["items"][0]["metadata"]["name"], "");
    }

    #[test]
    fn both_discovery_forms_list_the_pod_log_subresource() {
        let core = aggregated(true, DiscoveryFormat::V2);
        let pods = core["items"][0]["versions"][0]["resources"]
            .as_array()
            .expect("resources")
            .iter()
            .find(|r| r["resource"] == "pods")
            .expect("pods");
        let log = pods["subresources"]
            .as_array()
            .expect("subresources")
            .iter()
            .find(|s| s["subresource"] == "log")
            .expect("pods/log");
        assert_eq!((&log["verbs"], &log["responseKind"]["kind"]), (&json!(["get"]), &json!("Pod")));
        let legacy = resource_list("", "v1").expect("core list");
        let log = legacy["resources"].as_array().expect("resources").iter().find(|r| r["name"] == "pods/log");
        assert_eq!(
            log,
            Some(&json!({"name": "pods/log", "singularName": "", "namespaced": true, "kind": "Pod", "verbs": ["get"]}))
        );
    }

    #[test]
    fn version_has_every_field_strict_clients_need() {
        let v = version();
        for f in [
            "major",
            "minor",
            "gitVersion",
            "gitCommit",
            "gitTreeState",
            "buildDate",
            "goVersion",
            "compiler",
            "platform",
        ] {
            assert!(v[f].is_string(), "{f}");
        }
        assert_eq!(v["minor"], "37");
        assert_eq!(v["gitVersion"], format!("v1.37.2-kaji.{}", env!("CARGO_PKG_VERSION")));
    }
}
