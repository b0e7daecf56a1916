//! Writes an under-privileged writer must not get through, tried against the real binary. An
//! update or server-side apply that creates needs `create` (Kubernetes' `withAuthorization` in the
//! update and patch handlers); exec, attach and portforward need `create` on their subresource even
//! as a WebSocket upgrade, which arrives as GET (Kubernetes 1.35,
//! `AuthorizePodWebsocketUpgradeCreatePermission`) — both refused with apimachinery's
//! `NewForbidden` and RBAC's (empty) reason, as kube-apiserver answers. DenyServiceExternalIPs
//! refuses new Service externalIPs; CertificateSubjectRestriction refuses `system:masters` from
//! the apiserver-client signer.

mod common;

use common::tokens::TokenApi;
use serde_json::{json, Value};

const PODS: &str = "/api/v1/namespaces/default/pods";
const APPLY: &str = "application/apply-patch+yaml";

fn pod(name: &str) -> String {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
           "spec": {"containers": [{"name": "c", "image": "busybox"}]}})
    .to_string()
}

fn apply(api: &TokenApi, who: &str, name: &str) -> (u16, Value) {
    api.raw(who, "PATCH", &format!("{PODS}/{name}?fieldManager=test"), Some(&pod(name)), APPLY)
}

#[test]
fn server_side_apply_creates_only_for_a_user_allowed_to_create() {
    let api = TokenApi::start(&["alice"], &[], &["--enable-admission-plugins", "ServiceAccount"]);
    api.ok("root", "POST", "/api/v1/namespaces/default/serviceaccounts", json!({"metadata": {"name": "default"}}));
    api.grant(
        "default",
        "get-patch-pods",
        "alice",
        json!([{"apiGroups": [""], "resources": ["pods"], "verbs": ["patch", "get"]}]),
    );

    let (code, v) = apply(&api, "alice", "sneaky");
    assert_eq!((code, v["reason"].as_str()), (403, Some("Forbidden")), "{v}");
    assert_eq!(v["message"], r#"pods "sneaky" is forbidden: "#);
    assert_eq!((v["details"]["name"].as_str(), v["details"]["kind"].as_str()), (Some("sneaky"), Some("pods")));
    assert_eq!(api.call("root", "GET", &format!("{PODS}/sneaky"), None).0, 404, "nothing was created");

    // Patch alone still applies to a pod that exists.
    let (code, v) = apply(&api, "root", "existing");
    assert_eq!(code, 201, "{v}");
    let labelled =
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "existing", "labels": {"a": "b"}}}).to_string();
    let (code, v) = api.raw("alice", "PATCH", &format!("{PODS}/existing?fieldManager=alice"), Some(&labelled), APPLY);
    assert_eq!((code, v["metadata"]["labels"]["a"].as_str()), (200, Some("b")), "{v}");

    // With create the same apply creates — and admission saw a CREATE: the ServiceAccount plugin,
    // which acts on pod creation only, gave the pod its account.
    api.grant(
        "default",
        "create-pods",
        "alice",
        json!([{"apiGroups": [""], "resources": ["pods"], "verbs": ["create"]}]),
    );
    let (code, v) = apply(&api, "alice", "sneaky");
    assert_eq!(code, 201, "{v}");
    assert_eq!(v["spec"]["serviceAccountName"], "default", "{v}");
}

#[test]
fn a_put_that_would_create_needs_create() {
    let api = TokenApi::start(&["bob"], &[], &[]);
    let leases = "/apis/coordination.k8s.io/v1/namespaces/default/leases";
    api.grant(
        "default",
        "update-leases",
        "bob",
        json!([{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["update", "get"]}]),
    );
    let lease =
        |name: &str| json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": name}});

    let (code, v) = api.call("bob", "PUT", &format!("{leases}/l1"), Some(lease("l1")));
    assert_eq!(code, 403, "{v}");
    assert_eq!(v["message"], r#"leases.coordination.k8s.io "l1" is forbidden: "#);
    assert_eq!(api.call("root", "GET", &format!("{leases}/l1"), None).0, 404, "nothing was created");

    // An update of a lease that exists needs only update.
    api.ok("root", "POST", leases, lease("l2"));
    let mut held = lease("l2");
    held["spec"] = json!({"holderIdentity": "bob"});
    let v = api.ok("bob", "PUT", &format!("{leases}/l2"), held);
    assert_eq!(v["spec"]["holderIdentity"], "bob");

    api.grant(
        "default",
        "create-leases",
        "bob",
        json!([{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]}]),
    );
    let (code, v) = api.call("bob", "PUT", &format!("{leases}/l1"), Some(lease("l1")));
    assert_eq!(code, 201, "{v}");
}

/// A WebSocket upgrade (GET) to `pods/p/<sub>` as `who`; (status, body).
fn upgrade(api: &TokenApi, who: &str, sub: &str, method: &str) -> (u16, Value) {
    let auth = format!("Bearer {who}-token");
    let headers = [
        ("Authorization", auth.as_str()),
        ("Connection", "Upgrade"),
        ("Upgrade", "websocket"),
        ("Sec-WebSocket-Version", "13"),
        ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
        ("Sec-WebSocket-Protocol", "v5.channel.k8s.io"),
    ];
    let path = format!("{PODS}/p/{sub}?command=sh&stdout=true");
    let (code, text) = common::http_with(&api.server.addr, method, &path, &headers, None, "");
    (code, serde_json::from_str(&text).unwrap_or(Value::String(text)))
}

#[test]
fn exec_attach_and_portforward_need_create_even_as_a_websocket_get() {
    let api = TokenApi::start(&["viewer", "operator"], &[], &[]);
    api.ok("root", "POST", PODS, serde_json::from_str(&pod("p")).expect("json"));
    let subs = ["pods/exec", "pods/attach", "pods/portforward"];
    api.grant("default", "get-exec", "viewer", json!([{"apiGroups": [""], "resources": subs, "verbs": ["get"]}]));
    api.grant(
        "default",
        "exec",
        "operator",
        json!([{"apiGroups": [""], "resources": subs, "verbs": ["get", "create"]}]),
    );
    for sub in ["exec", "attach", "portforward"] {
        let (code, v) = upgrade(&api, "viewer", sub, "GET");
        assert_eq!(code, 403, "{sub}: {v}");
        assert_eq!(v["message"], r#"pods "p" is forbidden: "#, "{sub}");
        // SPDY's POST is `create` itself: refused by the request's own authorization.
        let (code, v) = upgrade(&api, "viewer", sub, "POST");
        assert_eq!(code, 403, "{sub}: {v}");
        assert_eq!(
            v["message"],
            format!(
                r#"pods "p" is forbidden: User "viewer" cannot create resource "pods/{sub}" in API group "" in the namespace "default""#
            )
        );
        // Allowed both verbs, the request goes on to the pod (not scheduled: Kubernetes' 400).
        for method in ["GET", "POST"] {
            let (code, v) = upgrade(&api, "operator", sub, method);
            assert_eq!(
                (code, v["message"].as_str()),
                (400, Some("pod p does not have a host assigned")),
                "{sub} {method}"
            );
        }
    }
}

#[test]
fn deny_service_external_ips_refuses_only_new_ones() {
    let api = TokenApi::start(&[], &[], &["--enable-admission-plugins", "DenyServiceExternalIPs"]);
    let services = "/api/v1/namespaces/default/services";
    let svc = |name: &str, ips: &[&str]| json!({"metadata": {"name": name}, "spec": {"ports": [{"port": 80}], "externalIPs": ips}});
    let refused = r#"services "web" is forbidden: Use of external IPs is denied by admission control"#;
    // Even the cluster admin: the plugin is about the field, not the writer.
    let (code, v) = api.call("root", "POST", services, Some(svc("web", &["203.0.113.7"])));
    assert_eq!((code, v["message"].as_str()), (403, Some(refused)), "{v}");
    api.ok("root", "POST", services, svc("web", &[]));
    let (code, v) =
        api.call("root", "PATCH", &format!("{services}/web"), Some(json!({"spec": {"externalIPs": ["203.0.113.7"]}})));
    assert_eq!((code, v["message"].as_str()), (403, Some(refused)), "{v}");
    let v = api.ok("root", "PATCH", &format!("{services}/web"), json!({"spec": {"type": "NodePort"}}));
    assert_eq!(v["spec"]["type"], "NodePort");
}

#[test]
fn external_ips_a_service_already_has_may_be_kept_or_removed() {
    // Off by default, as in Kubernetes: the Service gets its addresses.
    let mut api = TokenApi::start(&[], &[], &[]);
    let web = "/api/v1/namespaces/default/services/web";
    let svc = json!({"metadata": {"name": "web"}, "spec": {"ports": [{"port": 80}], "externalIPs": ["203.0.113.7", "203.0.113.8"]}});
    api.ok("root", "POST", "/api/v1/namespaces/default/services", svc);
    api.restart(&["--enable-admission-plugins", "DenyServiceExternalIPs"]);
    let v = api.ok("root", "PATCH", web, json!({"metadata": {"labels": {"kept": "yes"}}}));
    assert_eq!(v["spec"]["externalIPs"], json!(["203.0.113.7", "203.0.113.8"]));
    let v = api.ok("root", "PATCH", web, json!({"spec": {"externalIPs": ["203.0.113.8"]}}));
    assert_eq!(v["spec"]["externalIPs"], json!(["203.0.113.8"]));
    let (code, v) =
        api.call("root", "PATCH", web, Some(json!({"spec": {"externalIPs": ["203.0.113.8", "203.0.113.7"]}})));
    assert_eq!(code, 403, "once removed, an address is new again: {v}");
}

#[test]
fn nobody_may_ask_the_apiserver_client_signer_for_system_masters() {
    use base64::Engine;
    let api = TokenApi::start(&[], &[], &[]);
    let csrs = "/apis/certificates.k8s.io/v1/certificatesigningrequests";
    let csr = |name: &str, orgs: &[&str]| {
        let (_, pem) = kaji_pki::csr::new_request("mallory", orgs, &[], &[]).expect("csr");
        json!({"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest", "metadata": {"name": name},
               "spec": {"request": base64::engine::general_purpose::STANDARD.encode(pem),
                        "signerName": "kubernetes.io/kube-apiserver-client", "usages": ["client auth"]}})
    };
    // Not even the cluster admin: whoever may create and approve one would mint cluster-admin.
    let (code, v) = api.call("root", "POST", csrs, Some(csr("masters", &["system:masters"])));
    assert_eq!(code, 403, "{v}");
    assert_eq!(
        v["message"],
        r#"certificatesigningrequests.certificates.k8s.io "masters" is forbidden: use of kubernetes.io/kube-apiserver-client signer with system:masters group is not allowed"#
    );
    api.ok("root", "POST", csrs, csr("developers", &["developers"]));
}
