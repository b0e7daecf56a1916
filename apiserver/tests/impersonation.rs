//! Impersonation (`Impersonate-*`, `kubectl --as`) with the real binary on the plain-HTTP test
//! port, identities from static tokens, `Node,RBAC`: a requester without `impersonate` is refused
//! with Kubernetes' message, an allowed one runs entirely as the target (the target's rights, not
//! its own; whoami names the target; a node's authorizer and NodeRestriction), for users, groups,
//! ServiceAccounts and nodes, and real kubectl's `auth can-i --as` answers for the impersonated
//! user, not the admin asking (over HTTPS).

mod common;

use common::secure::{kubectl, Secure};
use common::{http_with, ApiServer};
use kaji_pki::kubeconfig::Credentials;
use serde_json::{json, Value};

const TOKENS: &str = "root-token,root,0,system:masters\n\
lee-token,lee,1001\n\
imp-token,imp,1002\n";

const RBAC: &str = "/apis/rbac.authorization.k8s.io/v1";

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
        let api = Self { server, _dir: dir };
        // `view` is aggregated by the controller manager, which these tests do not run.
        api.cluster_role("pod-reader", json!([{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}]));
        api
    }

    /// One request as the token's user with `headers` (e.g. `Impersonate-User`); (status, JSON body).
    fn call(
        &self,
        token: &str,
        headers: &[(&str, &str)],
        method: &str,
        path: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let auth = format!("Bearer {token}");
        let mut all = vec![("Authorization", auth.as_str())];
        all.extend_from_slice(headers);
        let body = body.map(|b| b.to_string());
        let ct = if method == "PATCH" { "application/merge-patch+json" } else { "application/json" };
        let (code, text) = http_with(&self.server.addr, method, path, &all, body.as_deref(), ct);
        (code, serde_json::from_str(&text).unwrap_or(Value::String(text)))
    }

    /// A write as root that must succeed.
    fn create(&self, path: &str, body: Value) {
        let (code, v) = self.call("root-token", &[], "POST", path, Some(body));
        assert_eq!(code, 201, "POST {path}: {v}");
    }

    /// Retries until the authorizer's view (the watch cache) includes what was just written.
    fn eventually(&self, token: &str, headers: &[(&str, &str)], path: &str, want: u16) -> Value {
        for _ in 0..150 {
            let (code, v) = self.call(token, headers, "GET", path, None);
            if code == want {
                return v;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        panic!("GET {path} never answered {want}: {:?}", self.call(token, headers, "GET", path, None));
    }

    /// `subjects` get `role` (a ClusterRole) in `namespace`, or cluster-wide when None.
    fn bind(&self, name: &str, role: &str, namespace: Option<&str>, subjects: Value) {
        let binding = json!({"metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": subjects});
        match namespace {
            Some(ns) => self.create(&format!("{RBAC}/namespaces/{ns}/rolebindings"), binding),
            None => self.create(&format!("{RBAC}/clusterrolebindings"), binding),
        }
    }

    fn cluster_role(&self, name: &str, rules: Value) {
        self.create(&format!("{RBAC}/clusterroles"), json!({"metadata": {"name": name}, "rules": rules}));
    }

    /// `kubectl auth whoami`'s request, as `token` with `headers`.
    fn whoami(&self, token: &str, headers: &[(&str, &str)]) -> Value {
        let me = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"});
        let (code, v) =
            self.call(token, headers, "POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", Some(me));
        assert_eq!(code, 201, "{v}");
        v["status"]["userInfo"].clone()
    }
}

fn user(name: &str) -> Value {
    json!({"kind": "User", "name": name, "apiGroup": "rbac.authorization.k8s.io"})
}

const PODS: &str = "/api/v1/namespaces/default/pods";

#[test]
fn a_requester_without_impersonate_is_refused_as_kubernetes_refuses_it() {
    let api = Api::start();
    let (code, v) = api.call("lee-token", &[("Impersonate-User", "jane")], "GET", PODS, None);
    assert_eq!(code, 403, "{v}");
    assert_eq!(
        v["message"],
        r#"users "jane" is forbidden: User "lee" cannot impersonate resource "users" in API group "" at the cluster scope"#
    );
    let sa = [("Impersonate-User", "system:serviceaccount:team:builder")];
    let (code, v) = api.call("lee-token", &sa, "GET", PODS, None);
    assert_eq!(code, 403, "{v}");
    assert_eq!(
        v["message"],
        r#"serviceaccounts "builder" is forbidden: User "lee" cannot impersonate resource "serviceaccounts" in API group "" in the namespace "team""#
    );
    // Groups without a user: Kubernetes' 400, whoever asks.
    let (code, v) = api.call("root-token", &[("Impersonate-Group", "system:masters")], "GET", PODS, None);
    assert_eq!((code, v["reason"].as_str()), (400, Some("BadRequest")), "{v}");
    assert_eq!(v["message"], "requested [{Group  system:masters    }] without impersonating a user");
}

#[test]
fn an_allowed_impersonation_runs_with_the_targets_rights_only() {
    let api = Api::start();
    api.cluster_role(
        "impersonate-jane",
        json!([{"apiGroups": [""], "resources": ["users"], "resourceNames": ["jane"], "verbs": ["impersonate"]}]),
    );
    api.bind("imp-is-jane", "impersonate-jane", None, json!([user("imp")]));
    api.bind("jane-views", "pod-reader", Some("default"), json!([user("jane")]));
    let as_jane = [("Impersonate-User", "jane")];
    api.eventually("imp-token", &as_jane, PODS, 200);
    // jane's rights, not imp's: imp itself may not list pods; jane may not list nodes.
    let (code, v) = api.call("imp-token", &[], "GET", PODS, None);
    assert_eq!(
        (code, v["message"].as_str()),
        (
            403,
            Some(
                r#"pods is forbidden: User "imp" cannot list resource "pods" in API group "" in the namespace "default""#
            )
        )
    );
    let (code, v) = api.call("imp-token", &as_jane, "GET", "/api/v1/nodes", None);
    assert_eq!(code, 403, "{v}");
    assert_eq!(
        v["message"],
        r#"nodes is forbidden: User "jane" cannot list resource "nodes" in API group "" at the cluster scope"#
    );
    // Only the name the rule gives.
    let (code, v) = api.call("imp-token", &[("Impersonate-User", "john")], "GET", PODS, None);
    assert_eq!(code, 403, "{v}");
    assert_eq!(
        v["message"],
        r#"users "john" is forbidden: User "imp" cannot impersonate resource "users" in API group "" at the cluster scope"#
    );
    assert_eq!(api.whoami("imp-token", &as_jane), json!({"username": "jane", "groups": ["system:authenticated"]}));
    // A uid or a group is a target of its own: not granted, refused.
    let (code, v) =
        api.call("imp-token", &[("Impersonate-User", "jane"), ("Impersonate-Uid", "u-1")], "GET", PODS, None);
    assert_eq!(code, 403, "{v}");
    assert_eq!(
        v["message"],
        r#"uids.authentication.k8s.io "u-1" is forbidden: User "imp" cannot impersonate resource "uids" in API group "authentication.k8s.io" at the cluster scope"#
    );
    let to_masters = [("Impersonate-User", "jane"), ("Impersonate-Group", "system:masters")];
    let (code, v) = api.call("imp-token", &to_masters, "GET", "/api/v1/nodes", None);
    assert_eq!(code, 403, "{v}");
    assert_eq!(
        v["message"],
        r#"groups "system:masters" is forbidden: User "imp" cannot impersonate resource "groups" in API group "" at the cluster scope"#
    );
}

#[test]
fn impersonated_groups_extras_and_uid_make_the_identity() {
    let api = Api::start();
    api.cluster_role(
        "impersonator",
        json!([{"apiGroups": [""], "resources": ["users", "groups"], "verbs": ["impersonate"]},
               {"apiGroups": ["authentication.k8s.io"], "resources": ["uids", "userextras/scopes"], "verbs": ["impersonate"]}]),
    );
    api.bind("imp-impersonates", "impersonator", None, json!([user("imp")]));
    api.bind(
        "readers-view",
        "pod-reader",
        Some("default"),
        json!([{"kind": "Group", "name": "readers", "apiGroup": "rbac.authorization.k8s.io"}]),
    );
    let jane = [("Impersonate-User", "jane")];
    let jane_reader = [("Impersonate-User", "jane"), ("Impersonate-Group", "readers")];
    api.eventually("imp-token", &jane_reader, PODS, 200);
    let (code, v) = api.call("imp-token", &jane, "GET", PODS, None);
    assert_eq!(code, 403, "jane alone is not a reader: {v}");
    let full = [
        ("Impersonate-User", "jane"),
        ("Impersonate-Group", "readers"),
        ("Impersonate-Group", "devs"),
        ("Impersonate-Uid", "u-1"),
        ("Impersonate-Extra-Scopes", "view"),
        ("Impersonate-Extra-Scopes", "edit"),
    ];
    assert_eq!(
        api.whoami("imp-token", &full),
        json!({"username": "jane", "uid": "u-1", "groups": ["readers", "devs", "system:authenticated"],
               "extra": {"scopes": ["view", "edit"]}})
    );
    // An extra key the role does not name is refused, per key.
    let other = [("Impersonate-User", "jane"), ("Impersonate-Extra-Acme.io%2Fteam", "x")];
    let (code, v) = api.call("imp-token", &other, "GET", PODS, None);
    assert_eq!(code, 403, "{v}");
    assert_eq!(
        v["message"],
        r#"userextras.authentication.k8s.io "x" is forbidden: User "imp" cannot impersonate resource "userextras/acme.io/team" in API group "authentication.k8s.io" at the cluster scope"#
    );
}

#[test]
fn a_service_account_is_impersonated_through_the_serviceaccounts_resource() {
    let api = Api::start();
    api.create("/api/v1/namespaces", json!({"metadata": {"name": "team"}}));
    // impersonate on serviceaccounts in "team" only, given by a RoleBinding there.
    api.cluster_role(
        "impersonate-sas",
        json!([{"apiGroups": [""], "resources": ["serviceaccounts"], "verbs": ["impersonate"]}]),
    );
    api.bind("imp-is-team-sas", "impersonate-sas", Some("team"), json!([user("imp")]));
    api.bind(
        "builder-views",
        "pod-reader",
        Some("team"),
        json!([{"kind": "ServiceAccount", "name": "builder", "namespace": "team"}]),
    );
    let builder = [("Impersonate-User", "system:serviceaccount:team:builder")];
    api.eventually("imp-token", &builder, "/api/v1/namespaces/team/pods", 200);
    let (code, v) = api.call("imp-token", &builder, "GET", PODS, None);
    assert_eq!(code, 403, "{v}");
    assert_eq!(
        v["message"],
        r#"pods is forbidden: User "system:serviceaccount:team:builder" cannot list resource "pods" in API group "" in the namespace "default""#
    );
    assert_eq!(
        api.whoami("imp-token", &builder),
        json!({"username": "system:serviceaccount:team:builder",
               "groups": ["system:serviceaccounts", "system:serviceaccounts:team", "system:authenticated"]})
    );
    // Not a user: impersonating users would not do, and another namespace's account is refused.
    let (code, v) =
        api.call("imp-token", &[("Impersonate-User", "system:serviceaccount:other:builder")], "GET", PODS, None);
    assert_eq!(code, 403, "{v}");
    assert_eq!(
        v["message"],
        r#"serviceaccounts "builder" is forbidden: User "imp" cannot impersonate resource "serviceaccounts" in API group "" in the namespace "other""#
    );
}

#[test]
fn an_impersonated_node_is_held_to_the_node_authorizer_and_node_restriction() {
    let api = Api::start();
    for n in ["n1", "n2"] {
        api.create("/api/v1/nodes", json!({"metadata": {"name": n}}));
    }
    api.create("/api/v1/namespaces/default/secrets", json!({"metadata": {"name": "other"}, "stringData": {"k": "v"}}));
    // The admin may impersonate anyone; then it is only the node, admission included.
    let n1 = [("Impersonate-User", "system:node:n1"), ("Impersonate-Group", "system:nodes")];
    let status = json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}});
    let (code, v) = api.call("root-token", &n1, "PATCH", "/api/v1/nodes/n1/status", Some(status.clone()));
    assert_eq!(code, 200, "{v}");
    let (code, v) = api.call("root-token", &n1, "PATCH", "/api/v1/nodes/n2/status", Some(status));
    assert_eq!(
        (code, v["message"].as_str()),
        (403, Some(r#"nodes "n2" is forbidden: node "n1" is not allowed to modify node "n2""#))
    );
    let (code, v) = api.call("root-token", &n1, "GET", "/api/v1/namespaces/default/secrets/other", None);
    assert_eq!(code, 403, "{v}");
    let message = v["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with(r#"secrets "other" is forbidden: User "system:node:n1" cannot get resource "secrets" in API group "" in the namespace "default""#),
        "{message}"
    );
    assert_eq!(api.call("root-token", &[], "GET", "/api/v1/namespaces/default/secrets/other", None).0, 200);
}

/// Over HTTPS: kubectl sends a bearer token only over TLS (on the plain test port it would be
/// anonymous, the insecure port's superuser).
#[test]
fn kubectl_as_answers_for_the_impersonated_user_not_the_admin() {
    let s = Secure::start(|_, dir| {
        let tokens = dir.join("tokens.csv");
        std::fs::write(&tokens, TOKENS).expect("token file");
        let tokens = tokens.to_string_lossy().to_string();
        ["--authorization-mode", "Node,RBAC", "--token-auth-file", &tokens].map(String::from).to_vec()
    });
    let admin = s.admin();
    let imp = s.kubeconfig("imp", Credentials::Token("imp-token".into()));
    let run = |kc: &std::path::Path, args: &[&str]| {
        let (ok, out, err) = kubectl(kc, args);
        (ok, out.trim().to_string(), err)
    };
    assert_eq!(run(&admin, &["auth", "can-i", "delete", "nodes"]).1, "yes");
    let (ok, out, err) = run(&admin, &["auth", "can-i", "delete", "nodes", "--as", "someone"]);
    assert_eq!((ok, out.as_str()), (false, "no"), "{err}");
    let (_, out, err) = run(&admin, &["auth", "whoami", "--as", "someone", "--as-group", "devs", "-o", "json"]);
    let me: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out} {err}"));
    assert_eq!(me["status"]["userInfo"], json!({"username": "someone", "groups": ["devs", "system:authenticated"]}));

    for args in [
        &["create", "clusterrole", "pod-reader", "--verb=get,list", "--resource=pods"][..],
        &[
            "create",
            "clusterrole",
            "impersonate-jane",
            "--verb=impersonate",
            "--resource=users",
            "--resource-name=jane",
        ],
        &["create", "clusterrolebinding", "imp-is-jane", "--clusterrole=impersonate-jane", "--user=imp"],
        &["create", "rolebinding", "jane-reads", "--clusterrole=pod-reader", "--user=jane", "-n", "default"],
    ] {
        let (ok, out, err) = run(&admin, args);
        assert!(ok, "{args:?}: {out} {err}");
    }
    let jane_lists = || run(&imp, &["--as", "jane", "get", "pods", "-n", "default"]);
    for _ in 0..150 {
        if jane_lists().0 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let (ok, out, err) = jane_lists();
    assert!(ok, "{out} {err}");
    assert!(err.contains("No resources found in default namespace."), "{err}");
    let (ok, _, err) = run(&imp, &["get", "pods", "-n", "default"]);
    assert!(!ok);
    assert!(err.contains(r#"User "imp" cannot list resource "pods""#), "{err}");
    let (ok, _, err) = run(&imp, &["--as", "lee", "get", "pods", "-n", "default"]);
    assert!(!ok);
    assert!(
        err.contains(r#"users "lee" is forbidden: User "imp" cannot impersonate resource "users" in API group "" at the cluster scope"#),
        "{err}"
    );
    assert_eq!(run(&imp, &["auth", "whoami", "--as", "jane", "-o", "jsonpath={.status.userInfo.username}"]).1, "jane");
}
