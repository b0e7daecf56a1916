//! A pod's ServiceAccount token end to end, as on a real node: the ServiceAccount admission
//! plugin gives the pod the projected `kube-api-access-*` volume, the agent (as
//! `system:node:<name>`, through the Node authorizer and NodeRestriction) asks for a token bound
//! to the pod and writes it with `ca.crt` and `namespace` under
//! /var/run/secrets/kubernetes.io/serviceaccount, and from inside the pod a client with that
//! token (kubectl's in-cluster config) lists what the account's Role allows and gets 403 for
//! what it does not. Root only.

mod common;

use common::Node;
use serde_json::json;
use std::process::Command;

const DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pods_projected_token_reads_what_its_role_allows_from_inside_the_pod() -> anyhow::Result<()> {
    let node = Node::start_secure_with(|c, pki| {
        c.service_accounts.signing_key_file = Some(pki.pki("sa.key"));
        c.authorization_modes = kaji_apiserver::auth::AuthorizationMode::parse_list("Node,RBAC").expect("modes");
        c.admission_plugins =
            kaji_apiserver::admission::Plugin::parse_list("ServiceAccount,NodeRestriction").expect("plugins");
    })
    .await?;
    let pki = node.pki.as_ref().expect("a secure node");
    let admin = pki.kubeconfig("admin");
    let kubectl = |args: &[&str], stdin: &str| -> anyhow::Result<(bool, String, String)> {
        use std::io::Write;
        let mut child = Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&admin)
            .args(args)
            .env_remove("KUBECONFIG")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()?;
        child.stdin.take().expect("stdin").write_all(stdin.as_bytes())?;
        let out = child.wait_with_output()?;
        Ok((
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into(),
            String::from_utf8_lossy(&out.stderr).into(),
        ))
    };
    let ca = std::fs::read_to_string(pki.ca_cert())?;
    // What the controller manager makes (its ServiceAccount and root-CA controllers) and a Role.
    let setup = json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "reader", "namespace": "default"}},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "kube-root-ca.crt", "namespace": "default"},
         "data": {"ca.crt": ca}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": {"name": "pod-reader", "namespace": "default"},
         "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": "reader", "namespace": "default"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-reader"},
         "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": "default"}]},
    ]});
    let (ok, out, err) = kubectl(&["create", "-f", "-"], &setup.to_string())?;
    assert!(ok, "{out}{err}");
    // Host network: the pod reaches the apiserver on the node's loopback (no pod network or
    // kube-proxy here), told so by the in-cluster variables. The host's kubectl (a static Go
    // binary) is mounted in: busybox wget's TLS cannot agree on a cipher with rustls.
    let kubectl_bin = std::fs::canonicalize(which("kubectl").expect("kubectl on PATH"))?;
    let bin_dir = kubectl_bin.parent().expect("a directory").to_string_lossy().into_owned();
    let bin_name = kubectl_bin.file_name().expect("a name").to_string_lossy().into_owned();
    let port = node.server.addr.port();
    // Made by the admin: NodeRestriction lets a node create only mirror pods.
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "reader", "namespace": "default"},
        "spec": {"serviceAccountName": "reader", "hostNetwork": true, "nodeName": node.config.node_name,
                 "volumes": [{"name": "host-bin", "hostPath": {"path": bin_dir, "type": "Directory"}}],
                 "containers": [{"name": "c", "image": node.image, "command": ["sleep", "3600"],
                     "env": [{"name": "KUBERNETES_SERVICE_HOST", "value": "127.0.0.1"},
                             {"name": "KUBERNETES_SERVICE_PORT", "value": port.to_string()}],
                     "volumeMounts": [{"name": "host-bin", "mountPath": "/host-bin", "readOnly": true}]}]}});
    let (ok, out, err) = kubectl(&["create", "-f", "-"], &pod.to_string())?;
    assert!(ok, "{out}{err}");
    let pod = node.pods("default").get("reader").await?;
    let volumes = pod.spec.as_ref().and_then(|s| s.volumes.clone()).unwrap_or_default();
    assert!(volumes.iter().any(|v| v.name.starts_with("kube-api-access-")), "the admission plugin adds the volume");
    node.wait_pod("reader", "Running", |p| common::phase(p) == "Running").await?;

    let exec = |script: &str| kubectl(&["exec", "reader", "--", "sh", "-c", script], "");
    let (ok, namespace, err) = exec(&format!("cat {DIR}/namespace"))?;
    assert!(ok && namespace == "default", "{namespace}{err}");
    let (ok, pod_ca, err) = exec(&format!("cat {DIR}/ca.crt"))?;
    assert!(ok && pod_ca == ca, "{pod_ca}{err}");
    let (ok, token, err) = exec(&format!("cat {DIR}/token"))?;
    assert!(ok && token.matches('.').count() == 2, "a JWT: {token}{err}");
    // Written through ..data, as kubelet's atomic writer does.
    let (ok, link, err) = exec(&format!("readlink {DIR}/token"))?;
    assert!(ok && link.trim() == "..data/token", "{link}{err}");

    // The token is the account, bound to this pod (asked by a client with no certificate).
    let anonymous = node.dir.path().join("token-only.kubeconfig");
    let kc = kaji_pki::kubeconfig::Kubeconfig {
        cluster: "kaji".into(),
        server: format!("https://{}", node.server.addr),
        ca_pem: ca.clone(),
        user: "token".into(),
        context: "token".into(),
        credentials: kaji_pki::kubeconfig::Credentials::Token(token.trim().into()),
    };
    std::fs::write(&anonymous, kc.render())?;
    let out = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&anonymous)
        .args(["auth", "whoami", "-o", "json"])
        .env_remove("KUBECONFIG")
        .output()?;
    let (ok, me, err) =
        (out.status.success(), String::from_utf8_lossy(&out.stdout).to_string(), String::from_utf8_lossy(&out.stderr));
    assert!(ok, "{me}{err}");
    let me: serde_json::Value = serde_json::from_str(&me)?;
    assert_eq!(me["status"]["userInfo"]["username"], "system:serviceaccount:default:reader");
    assert_eq!(me["status"]["userInfo"]["extra"]["authentication.kubernetes.io/pod-name"], json!(["reader"]));

    // From inside the pod: kubectl's in-cluster config (the token, ca.crt verifying the server,
    // KUBERNETES_SERVICE_HOST/PORT), as any client-go program in a pod.
    let inside = |args: &str| exec(&format!("/host-bin/{bin_name} --cache-dir /tmp/kube-cache {args} 2>&1"));
    let (ok, whoami, err) = inside("auth whoami -o jsonpath={.status.userInfo.username}")?;
    assert!(ok && whoami == "system:serviceaccount:default:reader", "{whoami}{err}");
    let (ok, pods, err) = inside("get pods -n default -o name")?;
    assert!(ok && pods.trim() == "pod/reader", "{pods}{err}");
    let (ok, secrets, _) = inside("get secrets -n default")?;
    assert!(
        !ok && secrets.contains(r#"User "system:serviceaccount:default:reader" cannot list resource "secrets" in API group "" in the namespace "default""#),
        "{secrets}"
    );
    let (ok, other, _) = inside("get pods -n kube-system")?;
    assert!(!ok && other.contains("(Forbidden)"), "{other}");

    let (ok, out, err) = kubectl(&["delete", "pod", "reader", "--grace-period=1", "--wait=false"], "")?;
    assert!(ok, "{out}{err}");
    node.wait_gone("reader").await?;
    node.assert_nothing_left(std::time::Duration::from_secs(20)).await;
    Ok(())
}

fn which(name: &str) -> Option<std::path::PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?).map(|d| d.join(name)).find(|p| p.is_file())
}
