//! The Node authorizer (`--authorization-mode Node`): a `system:node:<name>` in `system:nodes`
//! may read the secrets, configmaps, claims and ServiceAccount tokens its own pods use (found in
//! the [`graph`]), only its own Lease, and otherwise what Kubernetes' `NodeRules()` grant.
//! Writes to other nodes' objects are stopped by NodeRestriction admission, as in Kubernetes.
//!
//! Nodes, and pods by list/watch, are authorized by the static rules (Kubernetes before its
//! `AuthorizeNodeWithSelectors`): kaji's agent routes to every node's pod CIDR, so it reads all Nodes.

pub mod graph;

use super::bootstrap::cluster_roles::node_rules;
use super::rbac::rule::rule_allows;
use crate::auth::{names, Attributes, Authorizer, Verdict};
use crate::cache::Cache;
use graph::{Graph, Kind};
use k8s_openapi::api::rbac::v1::PolicyRule;
use std::sync::Arc;

pub struct NodeAuthorizer {
    graph: Arc<Graph>,
    rules: Vec<PolicyRule>,
}

impl NodeAuthorizer {
    /// An authorizer over `graph` (kept current elsewhere, e.g. by [`NodeAuthorizer::start`]).
    pub fn new(graph: Arc<Graph>) -> Self {
        Self { graph, rules: node_rules() }
    }

    /// An authorizer whose graph follows the watch cache's pods until `stop`.
    pub fn start(cache: Arc<Cache>, stop: tokio::sync::watch::Receiver<bool>) -> Self {
        let graph = Arc::new(Graph::default());
        graph.clone().follow(cache, stop);
        Self::new(graph)
    }

    fn related(&self, node: &str, kind: Kind, attrs: &Attributes) -> Verdict {
        if attrs.name.is_empty() {
            return Verdict::no_opinion("No Object name found");
        }
        if self.graph.has_path(node, kind, &attrs.namespace, &attrs.name) {
            Verdict::allow("")
        } else {
            Verdict::no_opinion(format!("no relationship found between node '{node}' and this object"))
        }
    }

    /// Secrets and configmaps: get, list and watch of single objects its pods use.
    fn read_namespaced(&self, node: &str, kind: Kind, attrs: &Attributes) -> Verdict {
        if !matches!(attrs.verb.as_str(), "get" | "list" | "watch") {
            return Verdict::no_opinion("can only read resources of this type");
        }
        if !attrs.subresource.is_empty() {
            return Verdict::no_opinion("cannot read subresource");
        }
        if attrs.namespace.is_empty() {
            return Verdict::no_opinion("can only read namespaced object of this type");
        }
        self.related(node, kind, attrs)
    }

    fn get(&self, node: &str, kind: Kind, attrs: &Attributes) -> Verdict {
        if attrs.verb != "get" {
            return Verdict::no_opinion("can only get individual resources of this type");
        }
        if !attrs.subresource.is_empty() {
            return Verdict::no_opinion("cannot get subresource");
        }
        self.related(node, kind, attrs)
    }

    fn create_token(&self, node: &str, attrs: &Attributes) -> Verdict {
        if attrs.verb != "create" || attrs.name.is_empty() {
            return Verdict::no_opinion("can only create tokens for individual service accounts");
        }
        if attrs.subresource != "token" {
            return Verdict::no_opinion("can only create token subresource of serviceaccount");
        }
        self.related(node, Kind::ServiceAccount, attrs)
    }

    fn lease(&self, node: &str, attrs: &Attributes) -> Verdict {
        if !matches!(attrs.verb.as_str(), "get" | "create" | "update" | "patch" | "delete") {
            return Verdict::no_opinion("can only get, create, update, patch, or delete a node lease");
        }
        if attrs.namespace != "kube-node-lease" {
            return Verdict::no_opinion("can only access leases in the \"kube-node-lease\" system namespace");
        }
        // The name of a create is checked by NodeRestriction (the authorizer does not see it).
        if attrs.verb != "create" && attrs.name != node {
            return Verdict::no_opinion("can only access node lease with the same name as the requesting node");
        }
        Verdict::allow("")
    }
}

impl Authorizer for NodeAuthorizer {
    fn authorize(&self, attrs: &Attributes) -> Verdict {
        let user = &attrs.user;
        if !user.in_group(names::NODES_GROUP) || !user.name.starts_with(names::NODE_USER_PREFIX) {
            return Verdict::no_opinion("");
        }
        let Some(node) = user.node_name() else {
            return Verdict::no_opinion(format!("unknown node for user {:?}", user.name));
        };
        if attrs.resource_request {
            let kind = match (attrs.api_group.as_str(), attrs.resource.as_str()) {
                ("", "secrets") => return self.read_namespaced(node, Kind::Secret, attrs),
                ("", "configmaps") => return self.read_namespaced(node, Kind::ConfigMap, attrs),
                ("", "persistentvolumeclaims") if attrs.subresource == "status" => {
                    if !matches!(attrs.verb.as_str(), "update" | "patch") {
                        return Verdict::no_opinion("can only get/update/patch this type");
                    }
                    Some(Kind::PersistentVolumeClaim)
                }
                ("", "persistentvolumeclaims") => return self.get(node, Kind::PersistentVolumeClaim, attrs),
                ("", "serviceaccounts") => return self.create_token(node, attrs),
                ("coordination.k8s.io", "leases") => return self.lease(node, attrs),
                _ => None,
            };
            if let Some(kind) = kind {
                return self.related(node, kind, attrs);
            }
        }
        if self.rules.iter().any(|r| rule_allows(attrs, r)) {
            Verdict::allow("")
        } else {
            Verdict::no_opinion("")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::authz::rbac::rule::tests::attrs;
    use crate::auth::{Decision, UserInfo};
    use serde_json::json;

    fn authorizer() -> NodeAuthorizer {
        let g = Arc::new(Graph::default());
        let pod = json!({"metadata": {"name": "web", "namespace": "app"},
                         "spec": {"nodeName": "n1", "serviceAccountName": "default",
                                  "volumes": [{"name": "s", "secret": {"secretName": "db"}}]}});
        g.set_pod("/registry/pods/app/web", Some(&pod));
        NodeAuthorizer::new(g)
    }

    fn as_node(node: &str, mut a: Attributes) -> Attributes {
        a.user = Arc::new(UserInfo::new(format!("system:node:{node}"), &["system:nodes", "system:authenticated"]));
        a
    }

    #[test]
    fn a_node_reads_only_the_secrets_its_pods_use() {
        let n = authorizer();
        let get = |node: &str, name: &str| n.authorize(&as_node(node, attrs("get", "", "secrets", "", "app", name)));
        assert_eq!(get("n1", "db").decision, Decision::Allow);
        let other = get("n2", "db");
        assert_eq!(
            (other.decision, other.reason.as_str()),
            (Decision::NoOpinion, "no relationship found between node 'n2' and this object")
        );
        assert_eq!(get("n1", "admin-token").decision, Decision::NoOpinion);
        let list_all = n.authorize(&as_node("n1", attrs("list", "", "secrets", "", "", "")));
        assert_eq!(list_all.reason, "can only read namespaced object of this type");
        let write = n.authorize(&as_node("n1", attrs("update", "", "secrets", "", "app", "db")));
        assert_eq!(write.reason, "can only read resources of this type");
    }

    #[test]
    fn tokens_only_for_service_accounts_of_its_pods() {
        let n = authorizer();
        let t =
            |node: &str| n.authorize(&as_node(node, attrs("create", "", "serviceaccounts", "token", "app", "default")));
        assert_eq!(t("n1").decision, Decision::Allow);
        assert_eq!(t("n2").decision, Decision::NoOpinion);
        let read = n.authorize(&as_node("n1", attrs("get", "", "serviceaccounts", "", "app", "default")));
        assert_eq!(read.reason, "can only create tokens for individual service accounts");
    }

    #[test]
    fn leases_only_its_own_in_kube_node_lease() {
        let n = authorizer();
        let l = |verb: &str, ns: &str, name: &str| {
            n.authorize(&as_node("n1", attrs(verb, "coordination.k8s.io", "leases", "", ns, name)))
        };
        assert_eq!(l("update", "kube-node-lease", "n1").decision, Decision::Allow);
        assert_eq!(l("create", "kube-node-lease", "").decision, Decision::Allow);
        assert_eq!(
            l("update", "kube-node-lease", "n2").reason,
            "can only access node lease with the same name as the requesting node"
        );
        assert_eq!(l("get", "kube-system", "n1").decision, Decision::NoOpinion);
    }

    #[test]
    fn other_requests_follow_the_node_rules_and_others_get_no_opinion() {
        let n = authorizer();
        let allowed = ["patch nodes status", "create events ", "list pods ", "patch pods status", "list services "];
        for a in allowed {
            let mut parts = a.split(' ');
            let (verb, res, sub) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""), parts.next().unwrap_or(""));
            let v = n.authorize(&as_node("n1", attrs(verb, "", res, sub, "", "x")));
            assert_eq!(v.decision, Decision::Allow, "{a}");
        }
        assert_eq!(
            n.authorize(&as_node("n1", attrs("delete", "", "nodes", "", "", "n2"))).decision,
            Decision::NoOpinion
        );
        assert_eq!(
            n.authorize(&as_node("n1", attrs("create", "", "pods", "exec", "app", "web"))).decision,
            Decision::NoOpinion
        );
        let alice = n.authorize(&attrs("get", "", "secrets", "", "app", "db"));
        assert_eq!((alice.decision, alice.reason.as_str()), (Decision::NoOpinion, ""));
        let nameless =
            Attributes { user: Arc::new(UserInfo::new("system:node:", &["system:nodes"])), ..Default::default() };
        assert_eq!(n.authorize(&nameless).reason, "unknown node for user \"system:node:\"");
    }
}
