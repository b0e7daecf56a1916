//! Which Node labels a node may set on itself (NodeRestriction's `getForbiddenLabels`, with the
//! kubelet's own set from `k8s.io/kubelet/pkg/apis.IsKubeletLabel`): nothing under
//! `node-restriction.kubernetes.io/`, and of the `kubernetes.io`/`k8s.io` namespaces only what a
//! kubelet sets. Otherwise a node could label itself into workloads meant for other machines
//! (`node-role.kubernetes.io/control-plane`, say).

use serde_json::Value;
use std::collections::BTreeSet;

/// `kubeletapis.kubeletLabels`.
const KUBELET_LABELS: &[&str] = &[
    "kubernetes.io/hostname",
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region",
    "beta.kubernetes.io/instance-type",
    "node.kubernetes.io/instance-type",
    "kubernetes.io/os",
    "kubernetes.io/arch",
    "beta.kubernetes.io/os",
    "beta.kubernetes.io/arch",
];

/// `kubeletapis.kubeletLabelNamespaces`: these and their subdomains.
const KUBELET_NAMESPACES: &[&str] = &["kubelet.kubernetes.io", "node.kubernetes.io"];

/// `v1.LabelNamespaceNodeRestriction`: never the node's to set.
const NODE_RESTRICTION_NAMESPACE: &str = "node-restriction.kubernetes.io";

/// The part before `/`, or empty.
fn namespace(key: &str) -> &str {
    key.split_once('/').map(|(ns, _)| ns).unwrap_or("")
}

/// `ns` is `domain` or a subdomain of it.
fn within(ns: &str, domain: &str) -> bool {
    ns == domain || ns.strip_suffix(domain).is_some_and(|rest| rest.ends_with('.'))
}

fn is_kubernetes_label(key: &str) -> bool {
    let ns = namespace(key);
    within(ns, "kubernetes.io") || within(ns, "k8s.io")
}

/// `kubeletapis.IsKubeletLabel`.
pub fn is_kubelet_label(key: &str) -> bool {
    KUBELET_LABELS.contains(&key) || KUBELET_NAMESPACES.iter().any(|d| within(namespace(key), d))
}

fn labels(obj: Option<&Value>) -> Vec<(&str, &Value)> {
    obj.and_then(|o| o.pointer("/metadata/labels"))
        .and_then(Value::as_object)
        .map(|m| m.iter().map(|(k, v)| (k.as_str(), v)).collect())
        .unwrap_or_default()
}

/// The keys added, removed or changed between `old` and `new` (`old` None: every key of `new`).
pub fn modified(new: Option<&Value>, old: Option<&Value>) -> BTreeSet<String> {
    let (a, b) = (labels(new), labels(old));
    let differs = |k: &str, v: &Value, other: &[(&str, &Value)]| {
        other.iter().find(|(k2, _)| *k2 == k).is_none_or(|(_, v2)| *v2 != v)
    };
    let mut out = BTreeSet::new();
    for (k, v) in &a {
        if differs(k, v, &b) {
            out.insert(k.to_string());
        }
    }
    for (k, v) in &b {
        if differs(k, v, &a) {
            out.insert(k.to_string());
        }
    }
    out
}

/// Of the `modified` keys, those a node may not touch, sorted (Kubernetes lists them sorted).
pub fn forbidden(modified: &BTreeSet<String>) -> Vec<String> {
    modified
        .iter()
        .filter(|k| {
            within(namespace(k), NODE_RESTRICTION_NAMESPACE) || (is_kubernetes_label(k) && !is_kubelet_label(k))
        })
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(labels: Value) -> Value {
        json!({"metadata": {"labels": labels}})
    }

    #[test]
    fn the_kubelets_own_labels_pass_and_roles_and_restricted_ones_do_not() {
        let keys = [
            "kubernetes.io/hostname",
            "kubernetes.io/os",
            "beta.kubernetes.io/arch",
            "topology.kubernetes.io/zone",
            "node.kubernetes.io/exclude-from-external-load-balancers",
            "foo.node.kubernetes.io/x",
            "kubelet.kubernetes.io/y",
            "example.com/anything",
            "plain",
            "node-role.kubernetes.io/control-plane",
            "node-restriction.kubernetes.io/pci",
            "a.node-restriction.kubernetes.io/pci",
            "kubernetes.io/role",
            "k8s.io/x",
            "sub.k8s.io/x",
        ];
        let all: BTreeSet<String> = keys.iter().map(|k| k.to_string()).collect();
        assert_eq!(
            forbidden(&all),
            [
                "a.node-restriction.kubernetes.io/pci",
                "k8s.io/x",
                "kubernetes.io/role",
                "node-restriction.kubernetes.io/pci",
                "node-role.kubernetes.io/control-plane",
                "sub.k8s.io/x",
            ]
        );
        // A look-alike domain is not a subdomain.
        assert!(!is_kubelet_label("evilnode.kubernetes.io/x"));
        assert!(is_kubernetes_label("evilnode.kubernetes.io/x"));
    }

    #[test]
    fn modified_labels_are_the_added_removed_and_changed_keys() {
        let old = node(json!({"keep": "1", "change": "a", "drop": "x"}));
        let new = node(json!({"keep": "1", "change": "b", "add": "y"}));
        let got: Vec<String> = modified(Some(&new), Some(&old)).into_iter().collect();
        assert_eq!(got, ["add", "change", "drop"]);
        let got: Vec<String> = modified(Some(&new), None).into_iter().collect();
        assert_eq!(got, ["add", "change", "keep"]);
        assert!(modified(Some(&json!({})), Some(&json!({"metadata": {}}))).is_empty());
    }
}
