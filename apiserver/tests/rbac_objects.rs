//! rbac.authorization.k8s.io/v1 objects served to real kubectl: create, print, refuse a changed roleRef.

mod common;

use common::{ApiServer, Kubectl};

#[test]
fn kubectl_manages_roles_and_bindings() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = ApiServer::start(&dir.path().join("data"));
    let k = Kubectl::new(&server);
    k.ok(&["create", "role", "pod-reader", "--verb=get,list", "--resource=pods,pods/log", "-n", "default"]);
    k.ok(&["create", "rolebinding", "read", "--role=pod-reader", "--user=alice", "--group=devs", "-n", "default"]);
    k.ok(&["create", "clusterrole", "node-reader", "--verb=get", "--resource=nodes"]);
    k.ok(&[
        "create",
        "clusterrolebinding",
        "nodes",
        "--clusterrole=node-reader",
        "--serviceaccount=ci:builder",
        "--user=bob",
    ]);

    let role = k.ok(&["get", "role", "pod-reader", "-n", "default", "-o", "jsonpath={.rules[0].resources}"]);
    assert_eq!(role, r#"["pods","pods/log"]"#);
    let wide = k.ok(&["get", "rolebindings", "-n", "default", "-o", "wide"]);
    let lines: Vec<Vec<&str>> = wide.lines().map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(lines[0], ["NAME", "ROLE", "AGE", "USERS", "GROUPS", "SERVICEACCOUNTS"]);
    assert_eq!((lines[1][0], lines[1][1], lines[1][3], lines[1][4]), ("read", "Role/pod-reader", "alice", "devs"));
    let crb = k.ok(&["get", "clusterrolebinding", "nodes", "-o", "wide"]);
    assert!(crb.contains("ClusterRole/node-reader") && crb.contains("ci/builder"), "{crb}");
    let roles = k.ok(&["get", "clusterroles"]);
    assert!(roles.starts_with("NAME") && roles.contains("CREATED AT") && roles.contains("node-reader"), "{roles}");

    // The role a binding grants never changes: Kubernetes' message, nothing stored.
    let out = k.run(&[
        "patch",
        "rolebinding",
        "read",
        "-n",
        "default",
        "--type=merge",
        "-p",
        r#"{"roleRef":{"name":"other"}}"#,
    ]);
    assert!(!out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim(),
        "The RoleBinding \"read\" is invalid: roleRef: Invalid value: rbac.RoleRef{APIGroup:\"rbac.authorization.k8s.io\", Kind:\"Role\", Name:\"other\"}: cannot change roleRef"
    );
    assert_eq!(k.ok(&["get", "rolebinding", "read", "-n", "default", "-o", "jsonpath={.roleRef.name}"]), "pod-reader");

    // Invalid rules are refused with their field paths.
    let bad = k.file(
        "bad.yaml",
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {name: bad, namespace: default}\nrules:\n- nonResourceURLs: [/healthz]\n  verbs: [get]\n",
    );
    let out = k.run(&["create", "-f", bad.to_str().expect("utf-8 path")]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(
            "rules[0].nonResourceURLs: Invalid value: [/healthz]: namespaced rules cannot apply to non-resource URLs"
        ),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
