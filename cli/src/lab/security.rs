//! The lab's certificates, kubeconfigs and join token, laid out as kubeadm lays out
//! /etc/kubernetes (`kaji pki`'s layout, see `kaji_pki::layout`) in the lab directory:
//!
//! ```text
//! <dir>/pki/ca.crt ca.key, apiserver.*, apiserver-kubelet-client.*, sa.key sa.pub
//! <dir>/admin.conf scheduler.conf controller-manager.conf proxy.conf   one client cert each
//! <dir>/kubeconfig                       admin.conf for kubectl on 127.0.0.1:<port> (the forwarder)
//! <dir>/bootstrap-kubelet.conf           a bootstrap token (system:bootstrap:<id>) for joining nodes
//! <dir>/nodes/<name>/kubelet.crt .key    the agent's serving pair for :10250 (issued by the lab CA)
//! <dir>/nodes/<name>/kubelet.conf, pki/  what the agent's TLS bootstrap writes: its own client cert
//! <dir>/admission.yaml                   PodSecurity: baseline enforced outside kube-system
//! ```
//! Keys, kubeconfigs and the token are 0600. Nodes get no client certificate from the lab: each
//! agent asks for one with a CertificateSigningRequest, which the controller manager approves
//! and signs.

use super::topology::{Lab, BRIDGE_IP};
use crate::cmd::token;
use anyhow::{Context, Result};
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kaji_pki::kubeconfig::{Credentials, Kubeconfig};
use kaji_pki::layout::{InitSpec, Layout};
use kube::api::Api;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

/// The `kubernetes` Service's ClusterIP (the first of the apiserver's default Service range).
pub const KUBERNETES_SERVICE_IP: [u8; 4] = [10, 96, 0, 1];
/// How long a lab's join token lasts (kubeadm's default TTL); `node add` makes a new one.
pub const TOKEN_TTL: Duration = Duration::from_secs(24 * 3600);

impl Lab {
    pub fn pki(&self) -> Layout {
        Layout::new(&self.dir)
    }

    /// What kubectl uses: the admin's kubeconfig, against the forwarder.
    pub fn kubeconfig(&self) -> PathBuf {
        self.dir.join("kubeconfig")
    }

    pub fn bootstrap_kubeconfig(&self) -> PathBuf {
        self.dir.join("bootstrap-kubelet.conf")
    }

    /// Node `i`'s files: its serving pair, and where its TLS bootstrap writes its identity.
    pub fn node_pki(&self, i: u8) -> PathBuf {
        self.pki().node_dir(&Lab::node_name(i))
    }
}

fn path(p: PathBuf) -> String {
    p.to_string_lossy().into_owned()
}

/// The apiserver's TLS, authentication, authorization and admission flags.
pub fn apiserver_args(lab: &Lab) -> Vec<String> {
    let pki = lab.pki();
    let mut args = Vec::new();
    for (flag, value) in [
        ("--tls-cert-file", path(pki.pki("apiserver.crt"))),
        ("--tls-private-key-file", path(pki.pki("apiserver.key"))),
        ("--client-ca-file", path(pki.ca_cert())),
        ("--kubelet-client-certificate", path(pki.pki("apiserver-kubelet-client.crt"))),
        ("--kubelet-client-key", path(pki.pki("apiserver-kubelet-client.key"))),
        ("--kubelet-certificate-authority", path(pki.ca_cert())),
        ("--service-account-signing-key-file", path(pki.pki("sa.key"))),
        ("--authorization-mode", "Node,RBAC".into()),
        ("--enable-admission-plugins", "NodeRestriction,ServiceAccount".into()),
        ("--admission-control-config-file", path(admission_config(lab))),
        // The nodes and pods reach every apiserver on the bridge (the kubernetes Service).
        ("--advertise-address", BRIDGE_IP.into()),
    ] {
        args.push(flag.to_string());
        args.push(value);
    }
    args.push("--enable-bootstrap-token-auth".into());
    args
}

/// The admission configuration install.sh installs too: PodSecurity enforces baseline (and warns
/// for workloads it would refuse) in every namespace without its own labels, kube-system exempt.
pub const ADMISSION_CONFIG: &str = include_str!("../../../deploy/admission.yaml");

pub fn admission_config(lab: &Lab) -> PathBuf {
    lab.dir.join("admission.yaml")
}

/// The controller manager's identity, and the CA it signs node certificates with.
pub fn controller_manager_args(lab: &Lab) -> Vec<String> {
    let pki = lab.pki();
    vec![
        "--kubeconfig".into(),
        path(pki.kubeconfig("controller-manager")),
        "--cluster-signing-cert-file".into(),
        path(pki.ca_cert()),
        "--cluster-signing-key-file".into(),
        path(pki.ca_key()),
        "--root-ca-file".into(),
        path(pki.ca_cert()),
    ]
}

/// An agent's join (bootstrap kubeconfig, where its own kubeconfig and cert go) and serving TLS.
pub fn agent_args(lab: &Lab, i: u8) -> Vec<String> {
    let node = lab.node_pki(i);
    vec![
        "--bootstrap-kubeconfig".into(),
        path(lab.bootstrap_kubeconfig()),
        "--kubeconfig".into(),
        path(node.join("kubelet.conf")),
        "--cert-dir".into(),
        path(node.join("pki")),
        "--tls-cert-file".into(),
        path(node.join("kubelet.crt")),
        "--tls-private-key-file".into(),
        path(node.join("kubelet.key")),
        "--client-ca-file".into(),
        path(lab.pki().ca_cert()),
    ]
}

/// The CA (kept across `up`s of one dir), the apiserver's serving and kubelet-client pairs, the
/// ServiceAccount key, the control plane's kubeconfigs, the admin's for kubectl, and each node's
/// serving pair.
pub fn certificates(lab: &Lab) -> Result<()> {
    let pki = lab.pki();
    let spec = InitSpec {
        server: lab.server(),
        ips: vec![BRIDGE_IP.parse()?],
        dns_names: kaji_pki::layout::host_name().into_iter().collect(),
        service_ip: Some(IpAddr::from(KUBERNETES_SERVICE_IP)),
    };
    let ca = pki.init(&spec).with_context(|| format!("cannot write the certificates in {}", lab.dir.display()))?;
    kaji_pki::files::write_private(&lab.kubeconfig(), &kaji_pki::files::read(&pki.kubeconfig("admin"))?)?;
    kaji_pki::files::write_public(&admission_config(lab), ADMISSION_CONFIG)?;
    for i in lab.node_ids() {
        serving_pair(lab, &ca, i)?;
    }
    Ok(())
}

/// Node `i`'s serving pair for :10250 (SANs: its name and address).
pub fn serving_pair(lab: &Lab, ca: &kaji_pki::Ca, i: u8) -> Result<()> {
    let (name, ip): (String, IpAddr) = (Lab::node_name(i), Lab::node_ip(i).parse()?);
    let issued =
        ca.issue(&kaji_pki::CertSpec::server(&format!("system:node:{name}"), std::slice::from_ref(&name), &[ip]))?;
    let dir = lab.node_pki(i);
    kaji_pki::files::write_public(&dir.join("kubelet.crt"), &issued.cert_pem)?;
    kaji_pki::files::write_private(&dir.join("kubelet.key"), &issued.key_pem)?;
    Ok(())
}

/// A bootstrap token as `kaji token create` makes it (kube-system/bootstrap-token-<id>, in
/// system:bootstrappers:kaji:default-node-token), written into the nodes' bootstrap kubeconfig.
pub async fn join_token(lab: &Lab, client: &kube::Client) -> Result<()> {
    let (id, secret) = token::random_token()?;
    let expires = jiff::Timestamp::now() + TOKEN_TTL;
    let groups = [token::DEFAULT_GROUP.to_string()];
    token::store(client, &token::token_secret(&id, &secret, Some(expires), "kaji lab: nodes join with it", &groups))
        .await?;
    let first = lab.bridge_server().split(',').next().unwrap_or_default().to_string();
    let kc = Kubeconfig {
        cluster: kaji_pki::layout::CLUSTER.into(),
        server: first,
        ca_pem: kaji_pki::files::read(&lab.pki().ca_cert())?,
        user: "tls-bootstrap-token-user".into(),
        context: "tls-bootstrap-token-user@kubernetes".into(),
        credentials: Credentials::Token(format!("{id}.{secret}")),
    };
    kaji_pki::files::write_private(&lab.bootstrap_kubeconfig(), &kc.render())?;
    Ok(())
}

/// What `deploy/install.sh` binds beyond Kubernetes' defaults: kaji's controller manager runs
/// every controller under its own user (no `--use-service-account-credentials` yet), so
/// `system:kube-controller-manager` holds cluster-admin. (The lab's proxies use `proxy.conf`,
/// `system:kube-proxy`, which the default policy binds to `system:node-proxier`.)
pub async fn bindings(client: &kube::Client) -> Result<()> {
    let binding: ClusterRoleBinding = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "kaji:controller-manager"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "system:kube-controller-manager"}],
    }))?;
    super::demo::create_or_keep(Api::<ClusterRoleBinding>::all(client.clone()), binding)
        .await
        .context("binding the controller manager to cluster-admin")
}

/// A client with the lab's admin kubeconfig.
pub async fn client(lab: &Lab) -> Result<kube::Client> {
    kaji_pki::install_crypto_provider();
    let path = lab.kubeconfig();
    let kc = kube::config::Kubeconfig::read_from(&path)
        .with_context(|| format!("cannot read {} (is the lab up?)", path.display()))?;
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?;
    kube::Client::try_from(config).context("cannot build a client")
}
