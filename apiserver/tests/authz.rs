//! RBAC and the Node authorizer with the real binary on the plain-HTTP test port, identities from
//! static tokens: a user without bindings is refused with Kubernetes' message, a RoleBinding grants
//! exactly what it names, the access reviews answer the same, escalation is refused, and a node's
//! credentials reach only its own Node, Lease, pods and their secrets.

mod common;

use common::{http_with, ApiServer};
use serde_json::{json, Value};

const TOKENS: &str = "root-token,root,0,system:masters\n\
alice-token,alice,1001\n\
n1-token,system:node:n1,n1,system:nodes\n\
n2-token,system:node:n2,n2,system:nodes\n";

struct Api {
    server: ApiServer,
    _dir: tempfile::TempDir,
}

impl Api {
    fn start() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let tokens = dir.path().join("tokens.csv");
        std::fs::write(&tokens, TOKENS).expect("write tokens");
        let tokens = tokens.to_string_lossy().to_string();
        let server = ApiServer::start_with(
            &dir.path().join("data"),
            &[
                "--token-auth-file",
                &tokens,
                "--authorization-mode",
                "Node,RBAC",
                "--enable-admission-plugins",
                "NodeRestriction",
            ],
        );
        Self { server, _dir: dir }
    }

    /// One request as the token's user; (status, JSON body).
    fn call(&self, token: &str, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        let auth = format!("Bearer {token}");
        let body = body.map(|b| b.to_string());
        let ct = match method {
            "PATCH" => "application/merge-patch+json",
            _ => "application/json",
        };
        let (code, text) = http_with(&self.server.addr, method, path, &[("Authorization", &auth)], body.as_deref(), ct);
        (code, serde_json::from_str(&text).unwrap_or(Value::String(text)))
    }

    fn ok(&self, token: &str, method: &str, path: &str, body: Value) -> Value {
        let (code, v) = self.call(token, method, path, Some(body));
        assert!((200..300).contains(&code), "{method} {path}: {code} {v}");
        v
    }

    /// Retries until the authorizer's view (the watch cache) includes what was just written.
    fn eventually(&self, token: &str, method: &str, path: &str, body: Option<Value>, want: u16) -> Value {
        for _ in 0..100 {
            let (code, v) = self.call(token, method, path, body.clone());
            if code == want {
                return v;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        panic!("{method} {path} never answered {want}: {:?}", self.call(token, method, path, body));
    }
}

fn can_i(api: &Api, token: &str, attrs: Value) -> Value {
    let review = json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview", "spec": {"resourceAttributes": attrs}});
    let (code, v) = api.call(token, "POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", Some(review));
    assert_eq!(code, 201, "{v}");
    v["status"].clone()
}

#[test]
fn a_role_binding_grants_exactly_what_it_names() {
    let api = Api::start();
    let (code, v) = api.call("alice-token", "GET", "/api/v1/namespaces/default/pods", None);
    assert_eq!(code, 403);
    assert_eq!(
        v["message"],
        r#"pods is forbidden: User "alice" cannot list resource "pods" in API group "" in the namespace "default""#
    );
    assert_eq!(
        can_i(&api, "alice-token", json!({"namespace": "default", "verb": "list", "resource": "pods"})),
        json!({"allowed": false})
    );
    // Discovery and the public paths are everybody's (system:discovery, system:public-info-viewer).
    assert_eq!(api.call("alice-token", "GET", "/apis", None).0, 200);
    assert_eq!(api.call("alice-token", "GET", "/version", None).0, 200);
    let (code, v) = api.call("alice-token", "GET", "/metrics", None);
    assert_eq!((code, v["message"].as_str()), (403, Some(r#"forbidden: User "alice" cannot get path "/metrics""#)));

    api.ok(
        "root-token",
        "POST",
        "/apis/rbac.authorization.k8s.io/v1/namespaces/default/roles",
        json!({
        "metadata": {"name": "pod-reader"},
        "rules": [{"apiGroups": [""], "resources": ["pods", "pods/log"], "verbs": ["get", "list"]},
                  {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["settings"], "verbs": ["get"]}]}),
    );
    api.ok(
        "root-token",
        "POST",
        "/apis/rbac.authorization.k8s.io/v1/namespaces/default/rolebindings",
        json!({
        "metadata": {"name": "alice-reads"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-reader"},
        "subjects": [{"kind": "User", "name": "alice", "apiGroup": "rbac.authorization.k8s.io"}]}),
    );
    api.eventually("alice-token", "GET", "/api/v1/namespaces/default/pods", None, 200);
    let allowed = can_i(&api, "alice-token", json!({"namespace": "default", "verb": "list", "resource": "pods"}));
    assert_eq!(allowed["allowed"], true);
    assert_eq!(
        allowed["reason"],
        r#"RBAC: allowed by RoleBinding "alice-reads/default" of Role "pod-reader" to User "alice""#
    );
    // Nothing more: another verb, another namespace, another name, another subresource.
    assert_eq!(api.call("alice-token", "DELETE", "/api/v1/namespaces/default/pods/x", None).0, 403);
    assert_eq!(api.call("alice-token", "GET", "/api/v1/namespaces/kube-system/pods", None).0, 403);
    assert_eq!(api.call("alice-token", "GET", "/api/v1/namespaces/default/configmaps/other", None).0, 403);
    assert_eq!(
        api.call("alice-token", "GET", "/api/v1/namespaces/default/configmaps/settings", None).0,
        404,
        "allowed, absent"
    );
    assert_eq!(
        can_i(
            &api,
            "alice-token",
            json!({"namespace": "default", "verb": "create", "resource": "pods", "subresource": "exec"})
        )["allowed"],
        false
    );

    // The rules review lists them; whoami names alice.
    let rules = json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectRulesReview", "spec": {"namespace": "default"}});
    let v = api.ok("alice-token", "POST", "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews", rules);
    assert!(v["status"]["resourceRules"].to_string().contains("pods/log"), "{v}");
    assert!(v["status"]["nonResourceRules"].to_string().contains("/healthz"), "{v}");
    let me = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"});
    let v = api.ok("alice-token", "POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", me);
    assert_eq!(
        v["status"]["userInfo"],
        json!({"username": "alice", "uid": "1001", "groups": ["system:authenticated"]})
    );

    // Alice may create roles but not grant what she lacks; binding a role beyond her rights fails too.
    api.ok("root-token", "POST", "/apis/rbac.authorization.k8s.io/v1/namespaces/default/roles", json!({
        "metadata": {"name": "role-maker"},
        "rules": [{"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["roles", "rolebindings"], "verbs": ["create"]}]}));
    api.ok(
        "root-token",
        "POST",
        "/apis/rbac.authorization.k8s.io/v1/namespaces/default/rolebindings",
        json!({
        "metadata": {"name": "alice-makes-roles"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "role-maker"},
        "subjects": [{"kind": "User", "name": "alice", "apiGroup": "rbac.authorization.k8s.io"}]}),
    );
    // Both refusals are 403s: wait until the binding took effect (she may create roles), so the
    // one seen next is the escalation check's, not the authorizer's.
    let may_create_roles =
        json!({"namespace": "default", "verb": "create", "group": "rbac.authorization.k8s.io", "resource": "roles"});
    for _ in 0..100 {
        if can_i(&api, "alice-token", may_create_roles.clone())["allowed"] == true {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let secrets = json!({"metadata": {"name": "secret-reader"}, "rules": [{"apiGroups": [""], "resources": ["secrets", "pods"], "verbs": ["get"]}]});
    let (code, v) =
        api.call("alice-token", "POST", "/apis/rbac.authorization.k8s.io/v1/namespaces/default/roles", Some(secrets));
    assert_eq!(code, 403, "{v}");
    assert_eq!(
        v["message"],
        "roles.rbac.authorization.k8s.io \"secret-reader\" is forbidden: user \"alice\" (groups=[\"system:authenticated\"]) is attempting to grant RBAC permissions not currently held:\n{APIGroups:[\"\"], Resources:[\"secrets\"], Verbs:[\"get\"]}"
    );
    let within = json!({"metadata": {"name": "pod-getter"}, "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]});
    api.ok("alice-token", "POST", "/apis/rbac.authorization.k8s.io/v1/namespaces/default/roles", within);
    let bind_admin = json!({"metadata": {"name": "alice-admin"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"kind": "User", "name": "alice", "apiGroup": "rbac.authorization.k8s.io"}]});
    let (code, v) = api.call(
        "alice-token",
        "POST",
        "/apis/rbac.authorization.k8s.io/v1/namespaces/default/rolebindings",
        Some(bind_admin),
    );
    assert_eq!(code, 403, "{v}");
    assert!(
        v["message"].as_str().is_some_and(|m| m.contains("is attempting to grant RBAC permissions not currently held")),
        "{v}"
    );
}

#[test]
fn subject_access_reviews_answer_for_others() {
    let api = Api::start();
    let sar = |user: &str, groups: Value| {
        json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
               "spec": {"user": user, "groups": groups, "resourceAttributes": {"verb": "get", "resource": "nodes"}}})
    };
    let v = api.ok(
        "root-token",
        "POST",
        "/apis/authorization.k8s.io/v1/subjectaccessreviews",
        sar("system:kube-scheduler", json!([])),
    );
    assert_eq!(v["status"]["allowed"], true, "{v}");
    let v =
        api.ok("root-token", "POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", sar("bob", json!(["devs"])));
    assert_eq!(v["status"]["allowed"], false, "{v}");
    let (code, v) =
        api.call("root-token", "POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", Some(sar("", json!([]))));
    assert_eq!(code, 422, "{v}");
    // Alice may not ask about others.
    assert_eq!(
        api.call(
            "alice-token",
            "POST",
            "/apis/authorization.k8s.io/v1/subjectaccessreviews",
            Some(sar("bob", json!([])))
        )
        .0,
        403
    );
    assert_eq!(api.call("root-token", "GET", "/apis/authorization.k8s.io/v1/subjectaccessreviews", None).0, 405);
}

#[test]
fn a_node_changes_only_its_own_node_lease_and_pods() {
    let api = Api::start();
    for n in ["n1", "n2"] {
        api.ok("root-token", "POST", "/api/v1/nodes", json!({"metadata": {"name": n}}));
        api.ok(
            "root-token",
            "POST",
            "/api/v1/namespaces/default/secrets",
            json!({"metadata": {"name": format!("{n}-secret")}, "stringData": {"k": "v"}}),
        );
        api.ok(
            "root-token",
            "POST",
            "/api/v1/namespaces/default/pods",
            json!({
            "metadata": {"name": format!("{n}-pod")},
            "spec": {"nodeName": n, "containers": [{"name": "c", "image": "busybox"}],
                     "volumes": [{"name": "s", "secret": {"secretName": format!("{n}-secret")}}]}}),
        );
    }
    let status = json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}});
    api.ok("n1-token", "PATCH", "/api/v1/nodes/n1/status", status.clone());
    let (code, v) = api.call("n1-token", "PATCH", "/api/v1/nodes/n2/status", Some(status.clone()));
    assert_eq!(
        (code, v["message"].as_str()),
        (403, Some(r#"nodes "n2" is forbidden: node "n1" is not allowed to modify node "n2""#))
    );
    let (code, v) = api.call(
        "n1-token",
        "PATCH",
        "/api/v1/nodes/n1",
        Some(json!({"spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]}})),
    );
    assert_eq!(
        (code, v["message"].as_str()),
        (403, Some(r#"nodes "n1" is forbidden: node "n1" is not allowed to modify taints"#))
    );

    let pod_status = json!({"status": {"phase": "Running"}});
    api.ok("n1-token", "PATCH", "/api/v1/namespaces/default/pods/n1-pod/status", pod_status.clone());
    let (code, v) = api.call("n1-token", "PATCH", "/api/v1/namespaces/default/pods/n2-pod/status", Some(pod_status));
    assert_eq!(
        (code, v["message"].as_str()),
        (
            403,
            Some(
                r#"pods "n2-pod" is forbidden: node "n1" can only update pod status for pods with spec.nodeName set to itself"#
            )
        )
    );
    let (code, v) = api.call("n1-token", "POST", "/api/v1/namespaces/default/pods", Some(json!({
        "metadata": {"name": "sneaky"}, "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "busybox"}]}})));
    assert_eq!(code, 403, "{v}");
    assert_eq!(api.call("n1-token", "DELETE", "/api/v1/namespaces/default/pods/n2-pod", None).0, 403);

    // Secrets: only those its pods use (the graph follows the watch cache).
    api.eventually("n1-token", "GET", "/api/v1/namespaces/default/secrets/n1-secret", None, 200);
    let (code, v) = api.call("n1-token", "GET", "/api/v1/namespaces/default/secrets/n2-secret", None);
    assert_eq!(
        (code, v["message"].as_str()),
        (
            403,
            Some(
                r#"secrets "n2-secret" is forbidden: User "system:node:n1" cannot get resource "secrets" in API group "" in the namespace "default": no relationship found between node 'n1' and this object"#
            )
        )
    );
    assert_eq!(api.call("n1-token", "GET", "/api/v1/namespaces/default/secrets", None).0, 403);

    // Leases: its own, in kube-node-lease.
    let lease = |n: &str| json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": n}, "spec": {"holderIdentity": n}});
    api.ok("n1-token", "POST", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases", lease("n1"));
    let (code, v) = api.call(
        "n1-token",
        "POST",
        "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases",
        Some(lease("n2")),
    );
    assert_eq!(
        (code, v["message"].as_str()),
        (
            403,
            Some(
                r#"leases.coordination.k8s.io "n2" is forbidden: can only access node lease with the same name as the requesting node"#
            )
        )
    );
    assert_eq!(
        api.call("n1-token", "GET", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n2", None).0,
        403
    );
}
