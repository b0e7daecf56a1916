//! The apiserver over HTTPS with real clients — kubectl, kube-rs and the official Python client:
//! the admin's certificate works; no credentials, a certificate of another CA or an unknown
//! token get 401; a valid identity the authorizer refuses gets 403 with Kubernetes' message;
//! the health endpoints answer without credentials; plain HTTP gets no API.

mod common;

use common::secure::{kubectl, Secure, LOGGED_IN};
use kaji_pki::kubeconfig::{Credentials, Kubeconfig};
use kaji_pki::Ca;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A server that denies everyone but system:masters, with a static token for alice and
/// bootstrap tokens on.
fn start() -> Secure {
    Secure::start(|_, dir| {
        let tokens = dir.join("tokens.csv");
        std::fs::write(&tokens, "alice-token,alice,1001,dev\n").expect("token file");
        let tokens = tokens.to_string_lossy().to_string();
        ["--authorization-mode", "RBAC", "--token-auth-file", &tokens, "--enable-bootstrap-token-auth"]
            .map(String::from)
            .to_vec()
    })
}

/// kubectl in a terminal (util-linux's `script` gives it one) where `typed` is what the user
/// types; its output and errors together.
fn kubectl_in_a_terminal(kubeconfig: &Path, args: &[&str], typed: &str) -> (bool, String) {
    use std::io::Write;
    let cache = kubeconfig.with_extension("cache");
    let quote = |s: &str| format!("'{}'", s.replace('\'', r"'\''"));
    let mut line = format!(
        "kubectl --kubeconfig {} --cache-dir {}",
        quote(&kubeconfig.to_string_lossy()),
        quote(&cache.to_string_lossy())
    );
    for a in args {
        line = format!("{line} {}", quote(a));
    }
    let mut child = Command::new("script")
        .args(["--quiet", "--return", "--command", &line, "/dev/null"])
        .env_remove("KUBECONFIG")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("script runs");
    child.stdin.take().expect("stdin").write_all(typed.as_bytes()).expect("type");
    let out = child.wait_with_output().expect("script ends");
    let text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

#[test]
fn kubectl_gets_in_with_a_cluster_certificate_and_nowhere_without() {
    let s = start();
    let admin = s.kubeconfig("admin", Secure::cert(&s.ca, "kubernetes-admin", &["system:masters"]));
    let (ok, out, err) = kubectl(&admin, &["get", "namespaces", "-o", "name"]);
    assert!(ok && out.contains("namespace/kube-system"), "{out}{err}");
    // The layout's own admin.conf is as good (only its server differs).
    let text = std::fs::read_to_string(s.pki.kubeconfig("admin")).expect("admin.conf");
    let fixed = s.dir.path().join("admin.conf");
    std::fs::write(&fixed, text.replace("https://127.0.0.1:1", &s.server.https_url())).expect("write");
    assert!(kubectl(&fixed, &["get", "namespaces"]).0);

    // Without credentials for an https server kubectl asks for a user name and a password
    // (client-go's prompting loader, as against kube-apiserver): without a terminal it stops
    // there, before any request ...
    let nobody = s.kubeconfig("nobody", Credentials::None);
    let (ok, out, err) = kubectl(&nobody, &["get", "pods"]);
    assert!(!ok && out.contains("Please enter Username: ") && err.trim_end() == "error: EOF", "{out}{err}");
    // ... in one, a name and no password (basic auth, which Kubernetes no longer accepts) are
    // no credentials: 401 (on discovery, which client-go words as its own, not the Status).
    let (ok, out) = kubectl_in_a_terminal(&nobody, &["get", "pods"], "nobody\n\n");
    assert!(!ok && out.contains(LOGGED_IN), "{out}");
    // The health endpoints are public.
    let (ok, out) = kubectl_in_a_terminal(&nobody, &["get", "--raw", "/healthz"], "nobody\n\n");
    assert!(ok && out.trim_end().ends_with("ok"), "{out}");

    let other = Ca::generate("kubernetes", kaji_pki::ca::CA_VALIDITY).expect("ca");
    let stranger = s.kubeconfig("stranger", Secure::cert(&other, "kubernetes-admin", &["system:masters"]));
    let (ok, _, err) = kubectl(&stranger, &["get", "pods"]);
    assert!(!ok && err.contains(LOGGED_IN), "{err}");

    let wrong_token = s.kubeconfig("wrong-token", Credentials::Token("nope".into()));
    let (ok, _, err) = kubectl(&wrong_token, &["get", "pods"]);
    assert!(!ok && err.contains(LOGGED_IN), "{err}");
}

#[test]
fn a_known_identity_the_authorizer_refuses_gets_kubernetes_403() {
    let s = start();
    let jane = s.kubeconfig("jane", Secure::cert(&s.ca, "jane", &["dev"]));
    let (ok, _, err) = kubectl(&jane, &["get", "pods"]);
    assert!(!ok, "{err}");
    assert!(
        err.contains(r#"Error from server (Forbidden): pods is forbidden: User "jane" cannot list resource "pods" in API group "" in the namespace "default""#),
        "{err}"
    );
    let alice = s.kubeconfig("alice", Credentials::Token("alice-token".into()));
    let (ok, _, err) = kubectl(&alice, &["create", "namespace", "x"]);
    assert!(
        !ok && err.contains(r#"User "alice" cannot create resource "namespaces" in API group "" at the cluster scope"#),
        "{err}"
    );
}

#[tokio::test]
async fn kube_rs_verifies_the_server_and_is_refused_without_a_cluster_certificate() -> anyhow::Result<()> {
    let s = tokio::task::spawn_blocking(start).await?;
    let client = |kc: PathBuf| async move {
        let kc = kube::config::Kubeconfig::read_from(kc)?;
        let config = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?;
        anyhow::Ok(kube::Client::try_from(config)?)
    };
    kaji_pki::install_crypto_provider();
    let admin = client(s.kubeconfig("admin", Secure::cert(&s.ca, "kubernetes-admin", &["system:masters"]))).await?;
    let ns: kube::Api<k8s_openapi::api::core::v1::Namespace> = kube::Api::all(admin);
    assert!(ns.get("default").await.is_ok());

    let nobody = client(s.kubeconfig("nobody", Credentials::None)).await?;
    let err = kube::Api::<k8s_openapi::api::core::v1::Pod>::default_namespaced(nobody)
        .list(&Default::default())
        .await
        .expect_err("401");
    assert!(matches!(&err, kube::Error::Api(s) if s.code == 401 && s.reason == "Unauthorized"), "{err:?}");

    // A client that trusts another CA does not trust this server.
    let other = Ca::generate("kubernetes", kaji_pki::ca::CA_VALIDITY)?;
    let kc = Kubeconfig {
        cluster: "kaji".into(),
        server: s.server.https_url(),
        ca_pem: other.cert_pem().into(),
        user: "u".into(),
        context: "u".into(),
        credentials: Credentials::None,
    };
    let path = s.dir.path().join("other-ca.kubeconfig");
    std::fs::write(&path, kc.render())?;
    let err = client(path).await?.apiserver_version().await.expect_err("an unknown server");
    assert!(!matches!(err, kube::Error::Api(_)), "the handshake fails, no HTTP answer: {err:?}");
    Ok(())
}

#[test]
fn the_python_client_is_refused_without_credentials_and_served_with_a_certificate() {
    let s = start();
    let admin = s.kubeconfig("admin", Secure::cert(&s.ca, "kubernetes-admin", &["system:masters"]));
    let nobody = s.kubeconfig("nobody", Credentials::None);
    let script = r#"
import sys
from kubernetes import client, config
from kubernetes.client.rest import ApiException
config.load_kube_config(config_file=sys.argv[1])
names = [n.metadata.name for n in client.CoreV1Api().list_namespace().items]
assert "kube-system" in names, names
config.load_kube_config(config_file=sys.argv[2])
try:
    client.CoreV1Api().list_namespaced_pod("default")
    raise SystemExit("no credentials were accepted")
except ApiException as e:
    assert e.status == 401, e.status
    assert e.reason == "Unauthorized", e.reason
print("ok")
"#;
    let out = Command::new("python3").arg("-c").arg(script).arg(&admin).arg(&nobody).output().expect("python3 runs");
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && stdout.trim() == "ok", "{stdout}\n{stderr}");
}

#[test]
fn plain_http_on_the_secure_port_gets_no_api() {
    let s = start();
    let (code, _) = common::http(&s.server.addr, "GET", "/api/v1/namespaces", None, "");
    assert_ne!(code, 200);
}

/// A bootstrap token Secret as `kubeadm token create` writes it, expiring at `expiration`.
fn bootstrap_secret(id: &str, expiration: &str) -> String {
    format!(
        r#"{{"apiVersion": "v1", "kind": "Secret", "type": "bootstrap.kubernetes.io/token",
  "metadata": {{"name": "bootstrap-token-{id}", "namespace": "kube-system"}},
  "stringData": {{"token-id": "{id}", "token-secret": "0123456789abcdef", "expiration": "{expiration}",
    "usage-bootstrap-authentication": "true", "usage-bootstrap-signing": "true",
    "auth-extra-groups": "system:bootstrappers:kaji:default-node-token"}}}}"#
    )
}

#[test]
fn a_bootstrap_token_is_its_bootstrapper_until_it_expires_or_goes() {
    let s = start();
    let admin = s.kubeconfig("admin", Secure::cert(&s.ca, "kubernetes-admin", &["system:masters"]));
    let in_an_hour = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(3600);
    let manifest = s.dir.path().join("tokens.json");
    let secrets =
        [bootstrap_secret("abcdef", &in_an_hour.to_string()), bootstrap_secret("expird", "2020-01-01T00:00:00Z")];
    std::fs::write(&manifest, format!(r#"{{"apiVersion": "v1", "kind": "List", "items": [{}]}}"#, secrets.join(",")))
        .expect("write");
    let (ok, out, err) = kubectl(&admin, &["create", "-f", &manifest.to_string_lossy()]);
    assert!(ok, "{out}{err}");

    let valid = s.kubeconfig("valid", Credentials::Token("abcdef.0123456789abcdef".into()));
    let (ok, out, err) = kubectl(&valid, &["auth", "whoami", "-o", "jsonpath={.status.userInfo}"]);
    assert!(ok, "{out}{err}");
    let info: serde_json::Value = serde_json::from_str(&out).expect("userInfo");
    assert_eq!(info["username"], "system:bootstrap:abcdef", "{out}");
    assert_eq!(
        info["groups"],
        serde_json::json!([
            "system:bootstrappers",
            "system:bootstrappers:kaji:default-node-token",
            "system:authenticated"
        ]),
        "{out}"
    );
    // Authenticated is not authorized: without a binding the bootstrapper may not list pods.
    let (ok, _, err) = kubectl(&valid, &["get", "pods"]);
    assert!(!ok && err.contains(r#"User "system:bootstrap:abcdef" cannot list resource "pods""#), "{err}");

    // A wrong secret, an expired token and a deleted one are no credentials: 401.
    for (name, token) in [("wrong", "abcdef.0123456789abcdeX"), ("expired", "expird.0123456789abcdef")] {
        let kc = s.kubeconfig(name, Credentials::Token(token.into()));
        let (ok, _, err) = kubectl(&kc, &["auth", "whoami"]);
        assert!(!ok && err.contains(LOGGED_IN), "{name}: {err}");
    }
    let (ok, out, err) = kubectl(&admin, &["delete", "secret", "-n", "kube-system", "bootstrap-token-abcdef"]);
    assert!(ok, "{out}{err}");
    let (ok, _, err) = kubectl(&valid, &["auth", "whoami"]);
    assert!(!ok && err.contains(LOGGED_IN), "a deleted token still works: {err}");
}
