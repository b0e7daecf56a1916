//! The audit policy (`--audit-policy-file`, an `audit.k8s.io/v1` `Policy`) and what it decides for
//! a request: the level and the stages left out — kube-apiserver's `policy/checker.go`, pure.

use crate::auth::Attributes;
use serde::Deserialize;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("failed to read audit policy file {path}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("failed decoding audit policy: {0}")]
    Decode(String),
    #[error("invalid audit policy: {0}")]
    Invalid(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// How much of a request is recorded, in Kubernetes' order (None < Metadata < Request <
/// RequestResponse).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize, serde::Serialize)]
pub enum Level {
    None,
    Metadata,
    Request,
    RequestResponse,
}

/// The points in a request's life an event is written at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
pub enum Stage {
    RequestReceived,
    ResponseStarted,
    ResponseComplete,
    Panic,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct PolicyFile {
    #[serde(default)]
    kind: String,
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    rules: Vec<Rule>,
    #[serde(default)]
    omit_stages: Vec<Stage>,
    #[serde(default)]
    omit_managed_fields: bool,
}

/// One `rules` entry: every list given must match (an empty list matches everything).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Rule {
    pub level: Level,
    #[serde(default)]
    pub users: Vec<String>,
    #[serde(default)]
    pub user_groups: Vec<String>,
    #[serde(default)]
    pub verbs: Vec<String>,
    #[serde(default)]
    pub resources: Vec<GroupResources>,
    #[serde(default)]
    pub namespaces: Vec<String>,
    #[serde(default, rename = "nonResourceURLs")]
    pub non_resource_urls: Vec<String>,
    #[serde(default)]
    pub omit_stages: Vec<Stage>,
    #[serde(default)]
    pub omit_managed_fields: Option<bool>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupResources {
    #[serde(default)]
    pub group: String,
    #[serde(default)]
    pub resources: Vec<String>,
    #[serde(default)]
    pub resource_names: Vec<String>,
}

/// A loaded, valid policy.
#[derive(Debug, Clone)]
pub struct Policy {
    rules: Vec<Rule>,
    omit_stages: Vec<Stage>,
    omit_managed_fields: bool,
}

/// What the policy decides for one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestConfig {
    pub level: Level,
    pub omit_stages: Vec<Stage>,
    pub omit_managed_fields: bool,
}

impl RequestConfig {
    pub fn records(&self, stage: Stage) -> bool {
        self.level > Level::None && !self.omit_stages.contains(&stage)
    }
}

impl Policy {
    pub fn load(path: &std::path::Path) -> Result<Self> {
        let text =
            std::fs::read_to_string(path).map_err(|source| Error::Read { path: path.display().to_string(), source })?;
        Self::parse(&text)
    }

    /// A policy from its YAML or JSON text (JSON is YAML).
    pub fn parse(text: &str) -> Result<Self> {
        let file: PolicyFile = serde_saphyr::from_str(text).map_err(|e| Error::Decode(e.to_string()))?;
        if file.kind != "Policy" || file.api_version != "audit.k8s.io/v1" {
            return Err(Error::Decode(format!(
                "expected kind Policy in audit.k8s.io/v1, got {:?} in {:?}",
                file.kind, file.api_version
            )));
        }
        if file.rules.is_empty() {
            return Err(Error::Invalid("loaded illegal policy with 0 rules".into()));
        }
        for (i, rule) in file.rules.iter().enumerate() {
            validate(rule).map_err(|why| Error::Invalid(format!("rules[{i}].{why}")))?;
        }
        Ok(Self { rules: file.rules, omit_stages: file.omit_stages, omit_managed_fields: file.omit_managed_fields })
    }

    /// The first rule that matches decides; none matching is level None.
    pub fn evaluate(&self, attrs: &Attributes) -> RequestConfig {
        match self.rules.iter().find(|r| matches(r, attrs)) {
            Some(rule) => {
                let mut omit_stages = self.omit_stages.clone();
                omit_stages.extend(rule.omit_stages.iter().filter(|s| !self.omit_stages.contains(s)));
                RequestConfig {
                    level: rule.level,
                    omit_stages,
                    omit_managed_fields: rule.omit_managed_fields.unwrap_or(self.omit_managed_fields),
                }
            }
            None => RequestConfig {
                level: Level::None,
                omit_stages: self.omit_stages.clone(),
                omit_managed_fields: self.omit_managed_fields,
            },
        }
    }
}

/// Kubernetes' `validatePolicyRule` (levels and stages are checked by decoding).
fn validate(rule: &Rule) -> std::result::Result<(), String> {
    for (i, url) in rule.non_resource_urls.iter().enumerate() {
        if url == "*" {
            continue;
        }
        if !url.starts_with('/') {
            return Err(format!(
                "nonResourceURLs[{i}]: {url:?}: non-resource URL rules must begin with a '/' character"
            ));
        }
        if url[..url.len() - 1].contains('*') {
            return Err(format!(
                "nonResourceURLs[{i}]: {url:?}: non-resource URL wildcards '*' must be the final character of the rule"
            ));
        }
    }
    for gr in &rule.resources {
        if !gr.group.is_empty() && !is_dns_subdomain(&gr.group) {
            return Err(format!("resources.group: {:?}: not a lowercase RFC 1123 subdomain", gr.group));
        }
        if !gr.resource_names.is_empty() && gr.resources.is_empty() {
            return Err("resources.resourceNames: using resourceNames requires at least one resource".into());
        }
    }
    if !rule.non_resource_urls.is_empty() && (!rule.resources.is_empty() || !rule.namespaces.is_empty()) {
        return Err("nonResourceURLs: rules cannot apply to both regular resources and non-resource URLs".into());
    }
    Ok(())
}

/// RFC 1123 subdomain: at most 253 characters, dot-separated labels of [a-z0-9-], alphanumeric at
/// both ends.
fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253
        && s.split('.').all(|label| {
            !label.is_empty()
                && label.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

fn matches(r: &Rule, a: &Attributes) -> bool {
    if !r.users.is_empty() && !r.users.contains(&a.user.name) {
        return false;
    }
    if !r.user_groups.is_empty() && !a.user.groups.iter().any(|g| r.user_groups.contains(g)) {
        return false;
    }
    if !r.verbs.is_empty() && !r.verbs.contains(&a.verb) {
        return false;
    }
    if !r.namespaces.is_empty() || !r.resources.is_empty() {
        return matches_resource(r, a);
    }
    if !r.non_resource_urls.is_empty() {
        return !a.resource_request && r.non_resource_urls.iter().any(|spec| path_matches(&a.path, spec));
    }
    true
}

fn path_matches(path: &str, spec: &str) -> bool {
    spec == "*" || spec == path || (spec.ends_with('*') && path.starts_with(spec.trim_end_matches('*')))
}

fn matches_resource(r: &Rule, a: &Attributes) -> bool {
    if !a.resource_request {
        return false;
    }
    // Cluster-scoped resources have the namespace "".
    if !r.namespaces.is_empty() && !r.namespaces.contains(&a.namespace) {
        return false;
    }
    if r.resources.is_empty() {
        return true;
    }
    let combined =
        if a.subresource.is_empty() { a.resource.clone() } else { format!("{}/{}", a.resource, a.subresource) };
    r.resources.iter().filter(|gr| gr.group == a.api_group).any(|gr| {
        if gr.resources.is_empty() {
            return true;
        }
        if !gr.resource_names.is_empty() && !gr.resource_names.contains(&a.name) {
            return false;
        }
        gr.resources.iter().any(|res| {
            res == "*"
                || *res == combined
                || (!a.subresource.is_empty() && res.strip_prefix("*/") == Some(a.subresource.as_str()))
                || res.strip_suffix("/*") == Some(a.resource.as_str())
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::{request_info, UserInfo};
    use std::sync::Arc;

    const POLICY: &str = r#"
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: None
  userGroups: ["system:nodes"]
- level: None
  nonResourceURLs: ["/healthz*", "/version"]
- level: Metadata
  resources:
  - group: ""
    resources: ["secrets", "pods/log", "*/exec"]
- level: RequestResponse
  namespaces: ["audited"]
  omitStages: [ResponseStarted]
  omitManagedFields: true
  resources:
  - group: ""
    resources: ["configmaps"]
    resourceNames: ["watched"]
- level: Request
  verbs: ["create"]
  resources:
  - group: "apps"
    resources: ["deployments/*"]
- level: Metadata
"#;

    fn attrs(user: &str, groups: &[&str], method: &str, path: &str) -> Attributes {
        request_info::for_user(Arc::new(UserInfo::new(user, groups)), method, path, None)
    }

    fn level(p: &Policy, user: &str, groups: &[&str], method: &str, path: &str) -> Level {
        p.evaluate(&attrs(user, groups, method, path)).level
    }

    #[test]
    fn the_first_matching_rule_decides_the_level() {
        let p = Policy::parse(POLICY).expect("policy");
        let get = |path| level(&p, "jane", &["system:authenticated"], "GET", path);
        assert_eq!(level(&p, "system:node:a", &["system:nodes"], "GET", "/api/v1/namespaces/a/secrets"), Level::None);
        assert_eq!(get("/api/v1/namespaces/a/secrets/s"), Level::Metadata);
        assert_eq!(get("/api/v1/namespaces/a/pods/p/log"), Level::Metadata);
        assert_eq!(get("/api/v1/namespaces/a/pods/p/exec"), Level::Metadata);
        assert_eq!(get("/api/v1/namespaces/audited/configmaps/watched"), Level::RequestResponse);
        // resourceNames and namespaces narrow the rule; the catch-all takes the rest.
        assert_eq!(get("/api/v1/namespaces/audited/configmaps/other"), Level::Metadata);
        assert_eq!(get("/api/v1/namespaces/elsewhere/configmaps/watched"), Level::Metadata);
        assert_eq!(level(&p, "jane", &[], "POST", "/apis/apps/v1/namespaces/a/deployments/d/scale"), Level::Request);
        // As Kubernetes' checker: `deployments/*` covers the resource itself too, for its verbs only.
        assert_eq!(level(&p, "jane", &[], "POST", "/apis/apps/v1/namespaces/a/deployments"), Level::Request);
        assert_eq!(level(&p, "jane", &[], "GET", "/apis/apps/v1/namespaces/a/deployments"), Level::Metadata);
        assert_eq!(get("/healthz/etcd"), Level::None);
        assert_eq!(get("/version"), Level::None);
        assert_eq!(get("/versions"), Level::Metadata);
    }

    /// Each row: one rule, a request, whether the rule matches it (Kubernetes' `ruleMatches`).
    #[test]
    fn a_rule_matches_as_kubernetes_checker_matches() {
        let rows: &[(&str, &str, &str, bool)] = &[
            // users and userGroups: any one listed.
            ("users: [jane, bob]", "GET", "/api/v1/pods", true),
            ("users: [bob]", "GET", "/api/v1/pods", false),
            ("userGroups: [devs, ops]", "GET", "/api/v1/pods", true),
            ("userGroups: [system:masters]", "GET", "/api/v1/pods", false),
            // verbs are the request's verb, not the HTTP method.
            ("verbs: [list]", "GET", "/api/v1/pods", true),
            ("verbs: [get]", "GET", "/api/v1/pods", false),
            ("verbs: [watch]", "GET", "/api/v1/pods?watch=1", true),
            ("verbs: [delete]", "DELETE", "/api/v1/namespaces/a/pods/p", true),
            // namespaces: cluster-scoped resources are "", non-resource requests never match.
            ("namespaces: [a]", "GET", "/api/v1/namespaces/a/pods", true),
            ("namespaces: [b]", "GET", "/api/v1/namespaces/a/pods", false),
            ("namespaces: ['']", "GET", "/api/v1/nodes", true),
            ("namespaces: [a]", "GET", "/healthz", false),
            // resources: the group must be equal; "" is the core group.
            ("resources: [{group: ''}]", "GET", "/api/v1/namespaces/a/pods", true),
            ("resources: [{group: apps}]", "GET", "/api/v1/namespaces/a/pods", false),
            ("resources: [{group: apps, resources: [deployments]}]", "GET", "/apis/apps/v1/deployments", true),
            ("resources: [{resources: ['*']}]", "GET", "/api/v1/namespaces/a/pods/p/log", true),
            ("resources: [{resources: [pods]}]", "GET", "/api/v1/namespaces/a/pods/p/log", false),
            ("resources: [{resources: [pods/log]}]", "GET", "/api/v1/namespaces/a/pods/p/log", true),
            ("resources: [{resources: ['*/log']}]", "GET", "/api/v1/namespaces/a/pods/p/log", true),
            ("resources: [{resources: ['*/log']}]", "GET", "/api/v1/namespaces/a/pods/p", false),
            ("resources: [{resources: ['pods/*']}]", "GET", "/api/v1/namespaces/a/pods/p/status", true),
            ("resources: [{resources: ['pods/*']}]", "GET", "/api/v1/namespaces/a/pods/p", true),
            ("resources: [{resources: [pods], resourceNames: [p]}]", "GET", "/api/v1/namespaces/a/pods/p", true),
            ("resources: [{resources: [pods], resourceNames: [q]}]", "GET", "/api/v1/namespaces/a/pods/p", false),
            ("resources: [{resources: [pods], resourceNames: [p]}]", "GET", "/api/v1/namespaces/a/pods", false),
            ("resources: [{resources: [pods]}]", "GET", "/healthz", false),
            // nonResourceURLs: exact, a trailing '*' prefix, '*'; resource requests never match.
            ("nonResourceURLs: [/healthz]", "GET", "/healthz", true),
            ("nonResourceURLs: [/healthz]", "GET", "/healthz/etcd", false),
            ("nonResourceURLs: ['/healthz*']", "GET", "/healthz/etcd", true),
            ("nonResourceURLs: ['/apis*']", "GET", "/apis", true),
            ("nonResourceURLs: ['*']", "GET", "/metrics", true),
            ("nonResourceURLs: ['*']", "GET", "/api/v1/pods", false),
            // Every field given must match.
            ("{users: [jane], verbs: [create]}", "GET", "/api/v1/pods", false),
            ("{users: [jane], verbs: [list], resources: [{resources: [pods]}]}", "GET", "/api/v1/pods", true),
        ];
        for (rule, method, uri, want) in rows {
            let rule = if rule.starts_with('{') { rule.to_string() } else { format!("{{{rule}}}") };
            let text = format!("apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- {{level: Request, {}", &rule[1..]);
            let p = Policy::parse(&text).unwrap_or_else(|e| panic!("{rule}: {e}"));
            let (path, query) = uri.split_once('?').map_or((*uri, None), |(p, q)| (p, Some(q)));
            let user = Arc::new(UserInfo::new("jane", &["devs", "system:authenticated"]));
            let a = request_info::for_user(user, method, path, query);
            assert_eq!(p.evaluate(&a).level == Level::Request, *want, "{rule} on {method} {uri}");
        }
    }

    #[test]
    fn omitted_stages_are_the_policys_and_the_rules_together() {
        let p = Policy::parse(POLICY).expect("policy");
        let c = p.evaluate(&attrs("jane", &[], "GET", "/api/v1/namespaces/audited/configmaps/watched"));
        assert_eq!(c.omit_stages, vec![Stage::RequestReceived, Stage::ResponseStarted]);
        assert!(c.omit_managed_fields);
        assert!(!c.records(Stage::RequestReceived) && c.records(Stage::ResponseComplete));
        let c = p.evaluate(&attrs("jane", &[], "GET", "/api/v1/namespaces/a/secrets"));
        assert_eq!(c.omit_stages, vec![Stage::RequestReceived]);
        assert!(!c.omit_managed_fields);
        let none = p.evaluate(&attrs("system:node:a", &["system:nodes"], "GET", "/api/v1/pods"));
        assert!(!none.records(Stage::ResponseComplete));
    }

    #[test]
    fn no_matching_rule_is_level_none() {
        let p = Policy::parse(
            r#"{"apiVersion":"audit.k8s.io/v1","kind":"Policy","rules":[{"level":"Metadata","users":["bob"]}]}"#,
        )
        .expect("JSON policy");
        assert_eq!(level(&p, "jane", &[], "GET", "/api/v1/pods"), Level::None);
        assert_eq!(level(&p, "bob", &[], "GET", "/api/v1/pods"), Level::Metadata);
    }

    #[test]
    fn policies_kubernetes_refuses_are_refused() {
        for bad in [
            "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: []",
            "apiVersion: audit.k8s.io/v1beta1\nkind: Policy\nrules: [{level: None}]",
            "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: [{level: Everything}]",
            "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: [{level: None, omitStages: [Never]}]",
            "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: [{level: None, namespaces: [a], nonResourceURLs: [/x]}]",
            "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: [{level: None, nonResourceURLs: ['/a*b']}]",
            "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: [{level: None, nonResourceURLs: ['/a**']}]",
            "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: [{level: None, nonResourceURLs: [healthz]}]",
            "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: [{level: None, resources: [{group: apps/v1}]}]",
            "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: [{level: None, resources: [{resourceNames: [a]}]}]",
            "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [Later]\nrules: [{level: None}]",
            "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: [{users: [a]}]",
            "kind: Policy\nrules: [{level: None}]",
        ] {
            assert!(Policy::parse(bad).is_err(), "accepted {bad}");
        }
    }
}
