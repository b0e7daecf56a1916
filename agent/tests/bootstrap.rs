//! TLS bootstrap end to end: a secure apiserver (bootstrap tokens on, Node,RBAC and
//! NodeRestriction), the controller manager's csrapproving and csrsigning, and the real
//! `kaji-agent` process given only a bootstrap kubeconfig. The agent asks for its certificate
//! with a CertificateSigningRequest, the controllers approve and sign it, and the agent registers
//! its Node as `system:node:<name>`; an expired token cannot join; `kubectl certificate deny`
//! leaves a request Denied and unsigned. Root only (the agent process).

use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::{Node, Secret};
use kaji_pki::kubeconfig::{Credentials, Kubeconfig};
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const AGENT: &str = env!("CARGO_BIN_EXE_kaji-agent");
const WAIT: Duration = Duration::from_secs(30);

/// The agent process; killed and its state removed on drop, whatever the test did.
struct AgentProcess {
    child: Child,
    root: PathBuf,
    cgroup_parent: String,
    /// Removed after the agent's own cleanup (fields drop after `Drop::drop`).
    _tmp: tempfile::TempDir,
}

impl Drop for AgentProcess {
    fn drop(&mut self) {
        let pid = nix::unistd::Pid::from_raw(i32::try_from(self.child.id()).unwrap_or(0));
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline && matches!(self.child.try_wait(), Ok(None)) {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = Command::new(AGENT)
            .arg("--root-dir")
            .arg(&self.root)
            .args(["--cgroup-parent", &self.cgroup_parent, "--cgroup-driver", "cgroupfs", "cleanup"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

fn kubeconfig(path: &Path, server: &str, ca_pem: &str, credentials: Credentials) {
    let kc = Kubeconfig {
        cluster: "kaji".into(),
        server: server.into(),
        ca_pem: ca_pem.into(),
        user: "u".into(),
        context: "c".into(),
        credentials,
    };
    kaji_pki::files::write_private(path, &kc.render()).expect("kubeconfig");
}

fn kubectl(kubeconfig: &Path, args: &[&str]) -> (bool, String, String) {
    let out = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .arg("--cache-dir")
        .arg(kubeconfig.with_extension("cache"))
        .args(args)
        .env_remove("KUBECONFIG")
        .output()
        .expect("kubectl runs");
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into(), String::from_utf8_lossy(&out.stderr).into())
}

fn token_secret(id: &str, secret: &str, expiration: &str) -> Secret {
    serde_json::from_value(json!({
        "metadata": {"name": format!("bootstrap-token-{id}"), "namespace": "kube-system"},
        "type": "bootstrap.kubernetes.io/token",
        "stringData": {"token-id": id, "token-secret": secret, "expiration": expiration,
            "usage-bootstrap-authentication": "true", "usage-bootstrap-signing": "true",
            "auth-extra-groups": "system:bootstrappers:kaji:default-node-token"}
    }))
    .expect("secret")
}

async fn client_for(path: &Path) -> kube::Client {
    let kc = kube::config::Kubeconfig::read_from(path).expect("kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await.expect("config");
    kube::Client::try_from(config).expect("client")
}

/// A secure apiserver (bootstrap tokens, Node,RBAC, NodeRestriction) and the controller
/// manager's CSR controllers signing for `duration`, with the admin's kubeconfig.
struct Cluster {
    _server: kaji_apiserver::Server,
    url: String,
    ca: kaji_pki::Ca,
    admin_path: PathBuf,
    admin: kube::Client,
    manager: kaji_controllers::Handle,
}

async fn cluster(data: &Path, duration: Duration) -> Cluster {
    let pki = kaji_pki::layout::Layout::new(data.join("pki-root"));
    pki.init(&kaji_pki::layout::InitSpec { server: "https://127.0.0.1".into(), ..Default::default() }).expect("pki");
    let mut api_config = kaji_apiserver::Config::new("127.0.0.1:0".parse().expect("addr"), data.join("data"));
    api_config.tls =
        Some(kaji_apiserver::Serving { cert_file: pki.pki("apiserver.crt"), key_file: pki.pki("apiserver.key") });
    api_config.authentication.client_ca_file = Some(pki.ca_cert());
    api_config.authentication.bootstrap_tokens = true;
    api_config.authorization_modes =
        vec![kaji_apiserver::auth::AuthorizationMode::Node, kaji_apiserver::auth::AuthorizationMode::Rbac];
    api_config.admission_plugins = vec![kaji_apiserver::admission::Plugin::NodeRestriction];
    let server = kaji_apiserver::start(api_config).await.expect("apiserver");
    let url = format!("https://{}", server.addr);
    let ca = pki.load_ca().expect("ca");
    let admin_path = pki.kubeconfig("admin");
    pki.write_kubeconfig(&ca, &admin_path, "kubernetes-admin", &["system:masters"], &url).expect("admin");
    let admin = client_for(&admin_path).await;

    let signing = kaji_controllers::certificates::signer::Settings {
        ca: std::sync::Arc::new(pki.load_ca().expect("ca")),
        duration,
    };
    let manager = kaji_controllers::start(
        admin.clone(),
        kaji_controllers::Config {
            csr_signing: Some(signing),
            node_ipam: None,
            garbage_collector: None,
            ..Default::default()
        },
    )
    .await
    .expect("controller manager");

    Cluster { _server: server, url, ca, admin_path, admin, manager }
}

/// The real agent with only a bootstrap kubeconfig (no pod network, no server port).
fn spawn_agent(
    bootstrap_path: &Path,
    node_kubeconfig: &Path,
    cert_dir: &Path,
    node_name: &str,
    tag: &str,
) -> AgentProcess {
    let root = tempfile::Builder::new().prefix("kaji-agent-test").tempdir_in("/tmp").expect("root");
    let cgroup_parent = format!("kaji-agent-test-{tag}-{}", std::process::id());
    let child = Command::new(AGENT)
        .arg("--bootstrap-kubeconfig")
        .arg(bootstrap_path)
        .arg("--kubeconfig")
        .arg(node_kubeconfig)
        .arg("--cert-dir")
        .arg(cert_dir)
        .arg("--root-dir")
        .arg(root.path().join("root"))
        .args(["--node-name", node_name, "--node-ip", "127.0.0.1", "--port", "0", "--healthz-port", "0"])
        .args(["--pod-network", "none", "--cgroup-driver", "cgroupfs", "--cgroup-parent", &cgroup_parent])
        .env("RUST_LOG", "warn,kaji_agent::bootstrap=info,kaji_agent::rotation=info")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("kaji-agent starts");
    AgentProcess { child, root: root.path().join("root"), cgroup_parent, _tmp: root }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_joins_with_a_bootstrap_token_through_an_approved_and_signed_csr() {
    assert!(nix::unistd::geteuid().is_root(), "the agent process needs root (cgroups, mounts)");
    kaji_pki::install_crypto_provider();
    let data = tempfile::tempdir().expect("tempdir");
    let Cluster { _server, url, ca, admin_path, admin, manager } =
        cluster(data.path(), kaji_controllers::certificates::signer::DEFAULT_DURATION).await;
    let secrets: Api<Secret> = Api::namespaced(admin.clone(), "kube-system");
    secrets
        .create(&PostParams::default(), &token_secret("abcdef", "0123456789abcdef", "2999-01-01T00:00:00Z"))
        .await
        .expect("token");
    secrets
        .create(&PostParams::default(), &token_secret("expire", "0123456789abcdef", "2000-01-01T00:00:00Z"))
        .await
        .expect("token");

    // An expired token cannot join: 401 before anything else.
    let expired_path = data.path().join("expired.kubeconfig");
    kubeconfig(&expired_path, &url, ca.cert_pem(), Credentials::Token("expire.0123456789abcdef".into()));
    let err = Api::<CertificateSigningRequest>::all(client_for(&expired_path).await)
        .list(&ListParams::default())
        .await
        .expect_err("an expired token is refused");
    assert!(matches!(&err, kube::Error::Api(e) if e.code == 401), "{err}");

    // The agent with only a bootstrap kubeconfig.
    let node_name = format!("joiner-{}", std::process::id());
    let bootstrap_path = data.path().join("bootstrap.kubeconfig");
    kubeconfig(&bootstrap_path, &url, ca.cert_pem(), Credentials::Token("abcdef.0123456789abcdef".into()));
    let node_kubeconfig = data.path().join("node").join("kubeconfig");
    let cert_dir = data.path().join("node").join("pki");
    let agent = spawn_agent(&bootstrap_path, &node_kubeconfig, &cert_dir, &node_name, "bootstrap");

    let nodes: Api<Node> = Api::all(admin.clone());
    let deadline = Instant::now() + WAIT;
    let node = loop {
        if let Ok(Some(n)) = nodes.get_opt(&node_name).await {
            break n;
        }
        assert!(Instant::now() < deadline, "the node did not register within {WAIT:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    // Under Node,RBAC with NodeRestriction only system:node:<name> may create Node <name> (a
    // bootstrap token may not): the agent did, with the certificate it was issued.
    let managers: Vec<String> =
        node.metadata.managed_fields.iter().flatten().filter_map(|m| m.manager.clone()).collect();
    assert!(managers.iter().any(|m| m == "kaji-agent"), "{managers:?}");

    let csrs: Api<CertificateSigningRequest> = Api::all(admin.clone());
    let list = csrs.list(&ListParams::default()).await.expect("csrs").items;
    assert_eq!(list.len(), 1, "one request");
    let csr = &list[0];
    let name = csr.metadata.name.clone().unwrap_or_default();
    assert!(name.starts_with("node-csr-"), "{name}");
    assert_eq!(csr.spec.username.as_deref(), Some("system:bootstrap:abcdef"));
    assert_eq!(csr.spec.signer_name, "kubernetes.io/kube-apiserver-client-kubelet");
    let conditions = csr.status.as_ref().and_then(|s| s.conditions.clone()).unwrap_or_default();
    assert_eq!(conditions.len(), 1);
    assert_eq!((conditions[0].type_.as_str(), conditions[0].reason.as_deref()), ("Approved", Some("AutoApproved")));
    assert_eq!(
        conditions[0].message.as_deref(),
        Some("Auto approving kubelet client certificate after SubjectAccessReview.")
    );

    // The node's kubeconfig speaks as system:node:<name> with a certificate of the cluster CA.
    let cert_pem = kaji_pki::files::read(&cert_dir.join("kubelet-client.crt")).expect("cert");
    let der = kaji_pki::cert::first_cert(&cert_pem, "node").expect("pem");
    let id = kaji_pki::Identity::parse(der.as_ref()).expect("identity");
    assert_eq!(
        (id.common_name.clone(), id.organizations.clone()),
        (format!("system:node:{node_name}"), vec!["system:nodes".to_string()])
    );
    use std::os::unix::fs::PermissionsExt;
    for f in [cert_dir.join("kubelet-client.key"), cert_dir.join("kubelet-client.crt"), node_kubeconfig.clone()] {
        assert_eq!(std::fs::metadata(&f).expect("file").permissions().mode() & 0o777, 0o600, "{}", f.display());
    }
    assert!(!cert_dir.join(kaji_agent::bootstrap::TMP_KEY).exists(), "the pending key is gone");
    let (ok, out, err) = kubectl(&node_kubeconfig, &["auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"]);
    assert!(ok, "{err}");
    assert_eq!(out, format!("system:node:{node_name}"));

    let (ok, out, err) = kubectl(&admin_path, &["explain", "csr.spec.signerName"]);
    assert!(ok && out.contains("FIELD: signerName <string>"), "{out}{err}");
    let (ok, out, err) = kubectl(&admin_path, &["get", "csr"]);
    assert!(ok, "{err}");
    let mut lines = out.lines();
    let header: Vec<&str> = lines.next().unwrap_or("").split_whitespace().collect();
    assert_eq!(header, ["NAME", "AGE", "SIGNERNAME", "REQUESTOR", "REQUESTEDDURATION", "CONDITION"]);
    let row: Vec<&str> = lines.next().unwrap_or("").split_whitespace().collect();
    assert_eq!(
        (row[0], row[2], row[3], row[4], row[5]),
        (
            name.as_str(),
            "kubernetes.io/kube-apiserver-client-kubelet",
            "system:bootstrap:abcdef",
            "<none>",
            "Approved,Issued"
        )
    );

    // A request nothing approves automatically: denied by the admin, it stays unsigned.
    let (_, request) = kaji_pki::csr::new_request("alice", &["dev"], &[], &[]).expect("csr");
    let pending: CertificateSigningRequest = serde_json::from_value(json!({
        "metadata": {"name": "alice"},
        "spec": {"request": base64(&request), "signerName": "kubernetes.io/kube-apiserver-client", "usages": ["client auth"]}
    }))
    .expect("csr");
    csrs.create(&PostParams::default(), &pending).await.expect("create");
    let (ok, out, err) = kubectl(&admin_path, &["certificate", "deny", "alice"]);
    assert!(ok, "{err}");
    assert_eq!(out.trim(), "certificatesigningrequest.certificates.k8s.io/alice denied");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let denied = csrs.get("alice").await.expect("get");
    let status = denied.status.expect("status");
    assert!(status.certificate.is_none(), "a denied request is never signed");
    let types: Vec<String> = status.conditions.iter().flatten().map(|c| c.type_.clone()).collect();
    assert_eq!(types, ["Denied"]);
    let (_, out, _) = kubectl(&admin_path, &["get", "csr", "alice", "--no-headers"]);
    assert!(out.trim_end().ends_with("Denied"), "{out}");
    // And a denial cannot be undone: kubectl refuses, and the server too when kubectl is forced.
    let (ok, _, err) = kubectl(&admin_path, &["certificate", "approve", "alice"]);
    assert!(!ok);
    assert!(err.contains("certificate signing request \"alice\" is already Denied"), "{err}");
    let mut approved = csrs.get("alice").await.expect("get");
    let status = approved.status.get_or_insert_with(Default::default);
    status
        .conditions
        .get_or_insert_with(Vec::new)
        .push(serde_json::from_value(json!({"type": "Approved", "status": "True"})).expect("condition"));
    let err =
        csrs.replace_subresource("approval", "alice", &PostParams::default(), &approved).await.expect_err("refused");
    let kube::Error::Api(status) = err else { panic!("a Status: {err}") };
    assert_eq!(status.code, 422);
    assert!(status.message.contains("Approved and Denied conditions are mutually exclusive"), "{}", status.message);

    // Approving takes `approve` on the signer, not just the right to write /approval.
    let bob_path = data.path().join("bob.kubeconfig");
    let bob = ca.issue(&kaji_pki::CertSpec::client("bob", &["csr-approvers"])).expect("bob");
    kubeconfig(
        &bob_path,
        &url,
        ca.cert_pem(),
        Credentials::Certificate { cert_pem: bob.cert_pem, key_pem: bob.key_pem },
    );
    let (_, request) = kaji_pki::csr::new_request("carol", &["dev"], &[], &[]).expect("csr");
    let carol: CertificateSigningRequest = serde_json::from_value(json!({
        "metadata": {"name": "carol"},
        "spec": {"request": base64(&request), "signerName": "kubernetes.io/kube-apiserver-client",
            "usages": ["digital signature", "client auth"], "expirationSeconds": 3600}
    }))
    .expect("csr");
    csrs.create(&PostParams::default(), &carol).await.expect("create");
    let rbac = |args: &[&str]| {
        let (ok, _, err) = kubectl(&admin_path, args);
        assert!(ok, "{err}");
    };
    rbac(&[
        "create",
        "clusterrole",
        "csr-writer",
        "--verb=get,list,update",
        "--resource=certificatesigningrequests,certificatesigningrequests/approval",
    ]);
    rbac(&["create", "clusterrolebinding", "csr-writer", "--clusterrole=csr-writer", "--group=csr-approvers"]);
    let (ok, _, err) = kubectl(&bob_path, &["certificate", "approve", "carol"]);
    assert!(!ok);
    assert!(
        err.contains("certificatesigningrequests.certificates.k8s.io \"carol\" is forbidden: user not permitted to approve requests with signerName \"kubernetes.io/kube-apiserver-client\""),
        "{err}"
    );
    // `signers` is not a served resource (kubectl create clusterrole would refuse it): the API.
    let role: k8s_openapi::api::rbac::v1::ClusterRole = serde_json::from_value(json!({
        "metadata": {"name": "signer-approver"},
        "rules": [{"apiGroups": ["certificates.k8s.io"], "resources": ["signers"], "verbs": ["approve"],
            "resourceNames": ["kubernetes.io/*"]}]
    }))
    .expect("role");
    Api::<k8s_openapi::api::rbac::v1::ClusterRole>::all(admin.clone())
        .create(&PostParams::default(), &role)
        .await
        .expect("create role");
    rbac(&[
        "create",
        "clusterrolebinding",
        "signer-approver",
        "--clusterrole=signer-approver",
        "--group=csr-approvers",
    ]);
    let deadline = Instant::now() + WAIT;
    loop {
        let (ok, out, err) = kubectl(&bob_path, &["certificate", "approve", "carol"]);
        if ok {
            assert_eq!(out.trim(), "certificatesigningrequest.certificates.k8s.io/carol approved");
            break;
        }
        // RBAC is read from the watch cache: the new binding may take a moment.
        assert!(Instant::now() < deadline, "{err}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let deadline = Instant::now() + WAIT;
    let issued = loop {
        let c = csrs.get("carol").await.expect("get");
        if let Some(cert) = c.status.as_ref().and_then(|s| s.certificate.clone()) {
            break cert;
        }
        assert!(Instant::now() < deadline, "carol's request was not signed");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let der = kaji_pki::cert::first_cert(&String::from_utf8_lossy(&issued.0), "carol").expect("pem");
    let id = kaji_pki::Identity::parse(der.as_ref()).expect("identity");
    assert_eq!((id.common_name.as_str(), id.organizations.clone()), ("carol", vec!["dev".to_string()]));
    // The requested hour, backdated five minutes as Kubernetes' signer does.
    assert_eq!(id.not_after - id.not_before, 3600 + 300);
    let (_, out, _) = kubectl(&admin_path, &["get", "csr", "carol", "--no-headers"]);
    let row: Vec<&str> = out.split_whitespace().collect();
    assert_eq!((row[3], row[4], row[5]), ("kubernetes-admin", "60m", "Approved,Issued"), "{out}");

    drop(agent);
    manager.shutdown().await.expect("manager stops");
}

fn base64(s: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(s)
}

/// Certificates of 60 s (backdated five minutes, as Kubernetes' signer does, so 70–90 % of their
/// lifetime has passed when they are issued): the agent renews its bootstrapped certificate at
/// once with a `csr-…` request of its own, approved as `selfnodeclient`, points its kubeconfig
/// at the new pair, and keeps renewing its Lease after the bootstrapped certificate expired —
/// without rotation the node lost the API a minute after joining.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_rotates_its_client_certificate_before_it_expires() {
    assert!(nix::unistd::geteuid().is_root(), "the agent process needs root (cgroups, mounts)");
    kaji_pki::install_crypto_provider();
    let data = tempfile::tempdir().expect("tempdir");
    let c = cluster(data.path(), Duration::from_secs(60)).await;
    Api::<Secret>::namespaced(c.admin.clone(), "kube-system")
        .create(&PostParams::default(), &token_secret("rotate", "0123456789abcdef", "2999-01-01T00:00:00Z"))
        .await
        .expect("token");
    let node_name = format!("rotator-{}", std::process::id());
    let bootstrap_path = data.path().join("bootstrap.kubeconfig");
    kubeconfig(&bootstrap_path, &c.url, c.ca.cert_pem(), Credentials::Token("rotate.0123456789abcdef".into()));
    let node_kubeconfig = data.path().join("node").join("kubeconfig");
    let cert_dir = data.path().join("node").join("pki");
    let agent = spawn_agent(&bootstrap_path, &node_kubeconfig, &cert_dir, &node_name, "rotate");

    let csrs: Api<CertificateSigningRequest> = Api::all(c.admin.clone());
    let issued = |csr: &CertificateSigningRequest| {
        csr.status.as_ref().and_then(|s| s.certificate.as_ref()).map(|pem| {
            let der = kaji_pki::cert::first_cert(&String::from_utf8_lossy(&pem.0), "issued").expect("pem");
            kaji_pki::Identity::parse(der.as_ref()).expect("identity")
        })
    };
    let deadline = Instant::now() + Duration::from_secs(120);
    let (first, renewal) = loop {
        let list = csrs.list(&ListParams::default()).await.expect("csrs").items;
        let name = |c: &CertificateSigningRequest| c.metadata.name.clone().unwrap_or_default();
        let first = list.iter().find(|c| name(c).starts_with("node-csr-")).and_then(issued);
        let renewal = list.iter().find(|c| name(c).starts_with("csr-") && issued(c).is_some()).cloned();
        if let (Some(first), Some(renewal)) = (first, renewal) {
            break (first, renewal);
        }
        assert!(Instant::now() < deadline, "no renewal was issued: {:?}", list.iter().map(name).collect::<Vec<_>>());
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    // The renewal is the node's own request, approved because a node may renew its own.
    assert_eq!(renewal.spec.username.as_deref(), Some(format!("system:node:{node_name}").as_str()));
    assert_eq!(renewal.spec.signer_name, "kubernetes.io/kube-apiserver-client-kubelet");
    let approved = renewal.status.as_ref().and_then(|s| s.conditions.clone()).unwrap_or_default();
    assert_eq!(
        approved[0].message.as_deref(),
        Some("Auto approving self kubelet client certificate after SubjectAccessReview.")
    );
    let renewed = issued(&renewal).expect("issued");
    assert_eq!(renewed.common_name, format!("system:node:{node_name}"));
    assert_eq!(renewed.organizations, ["system:nodes"]);
    assert_eq!(first.not_after - first.not_before, 60 + 300, "the signer's 60 s, backdated five minutes");

    // The kubeconfig moves to a rotated pair (kubelet-client-<time>.crt) and the bootstrapped
    // one is removed.
    let deadline = Instant::now() + Duration::from_secs(60);
    let (cert, _) = loop {
        if let Some((cert, key)) = kaji_agent::bootstrap::client_files(&node_kubeconfig) {
            let file = cert.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            if file.starts_with("kubelet-client-2") {
                break (cert, key);
            }
        }
        assert!(Instant::now() < deadline, "the kubeconfig still names the bootstrapped pair");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(cert.starts_with(&cert_dir), "{}", cert.display());
    assert!(!cert_dir.join("kubelet-client.crt").exists(), "the bootstrapped pair is gone");

    // Past the bootstrapped certificate's end, the node still speaks as itself: its Lease is
    // renewed, and its kubeconfig works for kubectl.
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> = Api::namespaced(c.admin.clone(), "kube-node-lease");
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let renewed_at = leases
            .get_opt(&node_name)
            .await
            .expect("lease")
            .and_then(|l| l.spec.and_then(|s| s.renew_time))
            .map(|t| t.0.as_second());
        if renewed_at.is_some_and(|t| t > first.not_after + 5) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the Lease was not renewed after the first certificate expired: {renewed_at:?}"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let (ok, out, err) = kubectl(&node_kubeconfig, &["auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"]);
    assert!(ok, "{err}");
    assert_eq!(out, format!("system:node:{node_name}"));

    drop(agent);
    c.manager.shutdown().await.expect("manager stops");
}
