//! NodeRestriction on Node labels against the real binary: a node registers and relabels itself
//! only within the kubelet's label set, so it cannot claim `node-role.kubernetes.io/*` or
//! `node-restriction.kubernetes.io/*` to draw workloads meant for other machines; an admin can.

mod common;

use common::tokens::TokenApi;
use serde_json::json;

#[test]
fn a_node_sets_only_the_kubelets_labels_on_itself() {
    let api = TokenApi::start(&[], &["n1", "n2"], &["--enable-admission-plugins", "NodeRestriction"]);
    let nodes = "/api/v1/nodes";
    let node = |name: &str, labels: serde_json::Value| json!({"metadata": {"name": name, "labels": labels}});

    let (code, v) = api.call(
        "n1",
        "POST",
        nodes,
        Some(node("n1", json!({"node-role.kubernetes.io/control-plane": "", "zone": "a"}))),
    );
    assert_eq!(code, 403, "{v}");
    assert_eq!(
        v["message"],
        r#"nodes "n1" is forbidden: node "n1" is not allowed to set the following labels: node-role.kubernetes.io/control-plane"#
    );

    // What kaji's agent registers with passes, as does any label outside Kubernetes' namespaces.
    let agent_labels = json!({"kubernetes.io/hostname": "n1", "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/os": "linux", "beta.kubernetes.io/arch": "amd64", "example.com/rack": "r1"});
    api.ok("n1", "POST", nodes, node("n1", agent_labels));

    let patch = |labels: serde_json::Value| Some(json!({"metadata": {"labels": labels}}));
    let (code, v) = api.call(
        "n1",
        "PATCH",
        &format!("{nodes}/n1"),
        patch(json!({"node-restriction.kubernetes.io/pci": "true", "node-role.kubernetes.io/worker": ""})),
    );
    assert_eq!(code, 403, "{v}");
    assert_eq!(
        v["message"],
        r#"nodes "n1" is forbidden: is not allowed to modify labels: node-restriction.kubernetes.io/pci, node-role.kubernetes.io/worker"#
    );
    let v = api.ok(
        "n1",
        "PATCH",
        &format!("{nodes}/n1"),
        json!({"metadata": {"labels": {"node.kubernetes.io/pool": "p", "example.com/rack": "r2"}}}),
    );
    assert_eq!(v["metadata"]["labels"]["node.kubernetes.io/pool"], "p");

    // An admin's role label stays: the node may neither change nor remove it.
    api.ok(
        "root",
        "PATCH",
        &format!("{nodes}/n1"),
        json!({"metadata": {"labels": {"node-role.kubernetes.io/gpu": ""}}}),
    );
    let (code, v) =
        api.call("n1", "PATCH", &format!("{nodes}/n1"), patch(json!({"node-role.kubernetes.io/gpu": null})));
    assert_eq!(code, 403, "{v}");
    assert_eq!(
        v["message"],
        r#"nodes "n1" is forbidden: is not allowed to modify labels: node-role.kubernetes.io/gpu"#
    );
}
