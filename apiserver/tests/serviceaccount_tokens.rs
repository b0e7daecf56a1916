//! ServiceAccount tokens through the real binary over HTTPS, with kubectl: `kubectl create token`
//! issues a TokenRequest, `kubectl auth whoami --token` is the account, the account's Role is
//! what it may do (403 beyond it), and the token ends with the account or the pod it is bound to,
//! or when it was issued for another audience. The bound-pod case inside a real pod is the
//! agent's test (`agent/tests/serviceaccount_token.rs`).

mod common;

use common::secure::{kubectl, kubectl_in, Secure, LOGGED_IN};
use kaji_pki::kubeconfig::Credentials;
use std::path::Path;

/// Node and RBAC authorization, NodeRestriction, and ServiceAccount tokens signed with the PKI's key.
fn start() -> Secure {
    Secure::start(|pki, _| {
        let key = pki.pki("sa.key").to_string_lossy().into_owned();
        [
            "--authorization-mode",
            "Node,RBAC",
            "--service-account-signing-key-file",
            &key,
            "--service-account-max-token-expiration",
            "48h",
            "--enable-admission-plugins",
            "NodeRestriction",
        ]
        .map(String::from)
        .to_vec()
    })
}

fn ok(kubeconfig: &Path, args: &[&str]) -> String {
    let (ok, out, err) = kubectl(kubeconfig, args);
    assert!(ok, "kubectl {args:?}: {out}{err}");
    out
}

/// `kubectl auth whoami --token <token>` as a client with no other credentials.
fn whoami(anonymous: &Path, token: &str) -> (bool, String, String) {
    kubectl(anonymous, &["auth", "whoami", "--token", token, "-o", "json"])
}

#[test]
fn kubectl_create_token_is_the_account_and_its_role_is_all_it_may_do() {
    let c = start();
    let admin = c.admin();
    let nobody = c.kubeconfig("nobody", Credentials::None);
    ok(&admin, &["create", "namespace", "x"]);
    ok(&admin, &["create", "serviceaccount", "default", "-n", "x"]);
    ok(&admin, &["create", "role", "pod-reader", "-n", "x", "--verb", "get,list", "--resource", "pods"]);
    ok(&admin, &["create", "rolebinding", "r", "-n", "x", "--role", "pod-reader", "--serviceaccount", "x:default"]);

    let token = ok(&admin, &["create", "token", "default", "-n", "x"]).trim().to_string();
    assert_eq!(token.matches('.').count(), 2, "a JWT: {token}");
    let (done, out, err) = whoami(&nobody, &token);
    assert!(done, "{out}{err}");
    let me: serde_json::Value = serde_json::from_str(&out).expect("json");
    let info = &me["status"]["userInfo"];
    assert_eq!(info["username"], "system:serviceaccount:x:default", "{out}");
    assert_eq!(
        info["groups"],
        serde_json::json!(["system:serviceaccounts", "system:serviceaccounts:x", "system:authenticated"])
    );
    // The plain table, as kubectl prints it.
    let (_, table, _) = kubectl(&nobody, &["auth", "whoami", "--token", &token]);
    assert!(table.contains("system:serviceaccount:x:default"), "{table}");

    // The Role: pods yes, secrets no (Kubernetes' 403 message naming the account).
    let (done, out, err) = kubectl(&nobody, &["get", "pods", "-n", "x", "--token", &token]);
    assert!(done, "{out}{err}");
    let (done, _, err) = kubectl(&nobody, &["get", "secrets", "-n", "x", "--token", &token]);
    assert!(
        !done && err.contains(r#"User "system:serviceaccount:x:default" cannot list resource "secrets" in API group "" in the namespace "x""#),
        "{err}"
    );
    // TokenReview sees the same user.
    let review =
        format!(r#"{{"apiVersion":"authentication.k8s.io/v1","kind":"TokenReview","spec":{{"token":"{token}"}}}}"#);
    let out = kubectl_in(
        &admin,
        &["create", "-f", "-", "-o", "jsonpath={.status.user.username} {.status.user.groups}"],
        Some(&review),
    );
    assert_eq!(
        out.1,
        r#"system:serviceaccount:x:default ["system:serviceaccounts","system:serviceaccounts:x","system:authenticated"]"#,
        "{out:?}"
    );

    // Another audience is not this API's.
    let vault = ok(&admin, &["create", "token", "default", "-n", "x", "--audience", "vault"]).trim().to_string();
    let (done, _, err) = whoami(&nobody, &vault);
    assert!(!done && err.contains(LOGGED_IN), "{err}");
    // Too short a life is invalid, as in Kubernetes.
    let (done, _, err) = kubectl(&admin, &["create", "token", "default", "-n", "x", "--duration", "5m"]);
    assert!(!done && err.contains("may not specify a duration less than 10 minutes"), "{err}");
    // Longer than --service-account-max-token-expiration: shortened, with Kubernetes' warning.
    let (done, out, err) = kubectl(
        &admin,
        &["create", "token", "default", "-n", "x", "--duration", "72h", "-o", "jsonpath={.spec.expirationSeconds}"],
    );
    assert!(done && out == "172800", "{out}{err}");
    assert!(err.contains("requested expiration of 259200 seconds shortened to 172800 seconds"), "{err}");
    // An account that does not exist gets no token.
    let (done, _, err) = kubectl(&admin, &["create", "token", "ghost", "-n", "x"]);
    assert!(!done && err.contains(r#"serviceaccounts "ghost" not found"#), "{err}");

    // Deleting the account ends its tokens, even if one of the same name comes back.
    ok(&admin, &["delete", "serviceaccount", "default", "-n", "x"]);
    ok(&admin, &["create", "serviceaccount", "default", "-n", "x"]);
    let refused = retry(|| {
        let (done, _, err) = whoami(&nobody, &token);
        (!done && err.contains(LOGGED_IN)).then_some(())
    });
    assert!(refused.is_some(), "the old token still works after its account was replaced");
}

#[test]
fn a_token_bound_to_a_pod_names_it_and_ends_with_it() {
    let c = start();
    let admin = c.admin();
    let nobody = c.kubeconfig("nobody", Credentials::None);
    ok(&admin, &["create", "serviceaccount", "web"]);
    ok(&admin, &["create", "serviceaccount", "other"]);
    let pod = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"},
        "spec":{"serviceAccountName":"web","containers":[{"name":"c","image":"busybox"}]}}"#;
    let _ = kubectl_in(&admin, &["create", "-f", "-"], Some(pod));
    let uid = ok(&admin, &["get", "pod", "p", "-o", "jsonpath={.metadata.uid}"]);
    let bound = ["create", "token", "web", "--bound-object-kind", "Pod", "--bound-object-name", "p"];
    let token = ok(&admin, &bound).trim().to_string();
    let (done, out, err) = whoami(&nobody, &token);
    assert!(done, "{out}{err}");
    let me: serde_json::Value = serde_json::from_str(&out).expect("json");
    let extra = &me["status"]["userInfo"]["extra"];
    assert_eq!(extra["authentication.kubernetes.io/pod-name"], serde_json::json!(["p"]), "{out}");
    assert_eq!(extra["authentication.kubernetes.io/pod-uid"], serde_json::json!([uid]), "{out}");

    // A pod of another account, a wrong uid, a kind that cannot be bound: refused as Kubernetes.
    let mut other = bound.to_vec();
    other[2] = "other";
    let (done, _, err) = kubectl(&admin, &other);
    assert!(!done && err.contains("to pod running with different serviceaccount name"), "{err}");
    let mut wrong_uid = bound.to_vec();
    wrong_uid.extend(["--bound-object-uid", "0000"]);
    let (done, _, err) = kubectl(&admin, &wrong_uid);
    assert!(!done && err.contains("does not match the UID in record"), "{err}");

    ok(&admin, &["delete", "pod", "p", "--grace-period", "0", "--force"]);
    let refused = retry(|| {
        let (done, _, err) = whoami(&nobody, &token);
        (!done && err.contains(LOGGED_IN)).then_some(())
    });
    assert!(refused.is_some(), "a token bound to a deleted pod still works");
}

#[test]
fn a_node_gets_tokens_only_for_the_pods_bound_to_it() {
    let c = start();
    let admin = c.admin();
    let n1 = c.user("n1", "system:node:n1", &["system:nodes"]);
    ok(&admin, &["create", "serviceaccount", "web"]);
    ok(&admin, &["create", "serviceaccount", "db"]);
    for (pod, node, account) in [("p1", "n1", "web"), ("p2", "n2", "db")] {
        let spec = format!(
            r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"{pod}"}},
              "spec":{{"nodeName":"{node}","serviceAccountName":"{account}","containers":[{{"name":"c","image":"busybox"}}]}}}}"#
        );
        let (done, out, err) = kubectl_in(&admin, &["create", "-f", "-"], Some(&spec));
        assert!(done, "{out}{err}");
    }
    let bound = |account: &str, pod: &str| {
        let uid = ok(&admin, &["get", "pod", pod, "-o", "jsonpath={.metadata.uid}"]);
        let args = ["create", "token", account, "--bound-object-kind", "Pod", "--bound-object-name", pod];
        let mut args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        args.extend(["--bound-object-uid".into(), uid]);
        args
    };
    // Its own pod's account, bound to that pod (the Node authorizer's graph, NodeRestriction).
    let args = bound("web", "p1");
    let (done, out, err) = kubectl(&n1, &args.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(done && out.trim().matches('.').count() == 2, "{out}{err}");
    // Another node's pod's account: the Node authorizer knows no path from n1 to it.
    let args = bound("db", "p2");
    let (done, _, err) = kubectl(&n1, &args.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(!done && err.contains(r#"User "system:node:n1" cannot create resource "serviceaccounts/token""#), "{err}");
    // Its own pod's account, but not bound to the pod: NodeRestriction refuses.
    let (done, _, err) = kubectl(&n1, &["create", "token", "web"]);
    assert!(!done && err.contains("node requested token not bound to a pod"), "{err}");
}

/// `f` until it answers, for up to 5 s (the watch cache follows the store within milliseconds).
fn retry<T>(mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        if let Some(t) = f() {
            return Some(t);
        }
        if std::time::Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// A TokenReview of `token` for `audiences` (none: the field left out), as the admin; its status.
fn review(c: &Secure, token: &str, audiences: Option<&[&str]>) -> serde_json::Value {
    let mut spec = serde_json::json!({"token": token});
    if let Some(a) = audiences {
        spec["audiences"] = serde_json::json!(a);
    }
    let body = serde_json::json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": spec});
    let (done, out, err) = kubectl_in(&c.admin(), &["create", "-f", "-", "-o", "json"], Some(&body.to_string()));
    assert!(done, "{out}{err}");
    serde_json::from_str::<serde_json::Value>(&out).expect("json")["status"].clone()
}

#[test]
fn a_token_review_judges_the_token_for_the_audiences_it_names() {
    let c = start();
    let admin = c.admin();
    ok(&admin, &["create", "serviceaccount", "robot"]);
    let for_a = ok(&admin, &["create", "token", "robot", "--audience", "a"]).trim().to_string();

    let st = review(&c, &for_a, Some(&["b"]));
    assert_eq!(st["authenticated"], serde_json::Value::Null, "{st}");
    assert_eq!(st["error"], r#"token audiences ["a"] is invalid for the target audiences ["b"]"#, "{st}");
    let st = review(&c, &for_a, Some(&["b", "a"]));
    assert_eq!(st["authenticated"], true, "{st}");
    assert_eq!(st["user"]["username"], "system:serviceaccount:default:robot");
    assert_eq!(st["audiences"], serde_json::json!(["a"]));
    // No audiences asked: the API's, which "a" is not.
    let st = review(&c, &for_a, None);
    assert_eq!(st["authenticated"], serde_json::Value::Null, "{st}");

    // A token for the API is good for the API audiences, and says so.
    let api = ok(&admin, &["create", "token", "robot"]).trim().to_string();
    let st = review(&c, &api, None);
    assert_eq!(st["audiences"], serde_json::json!(["https://kubernetes.default.svc.cluster.local"]), "{st}");
    assert_eq!(review(&c, &api, Some(&["a"]))["authenticated"], serde_json::Value::Null);
}
