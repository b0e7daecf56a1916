//! The cluster's certificate files, laid out as kubeadm lays out /etc/kubernetes:
//!
//! ```text
//! <dir>/pki/ca.crt ca.key                      the cluster CA
//! <dir>/pki/apiserver.crt apiserver.key        serving; every SAN the apiserver answers on (+ the CA in the chain)
//! <dir>/pki/apiserver-kubelet-client.crt .key  the apiserver's identity towards the agents
//! <dir>/admin.conf                             kubernetes-admin, O=system:masters
//! <dir>/scheduler.conf                         system:kube-scheduler
//! <dir>/controller-manager.conf                system:kube-controller-manager
//! <dir>/proxy.conf                             system:kube-proxy
//! <dir>/nodes/<name>/kubelet.conf, kubelet.crt, kubelet.key   a node's client identity and serving pair
//! ```
//! Keys and kubeconfigs are 0600. An existing CA is kept (`init` again re-issues the rest).

use crate::ca::{Ca, CertSpec, CA_VALIDITY};
use crate::kubeconfig::{Credentials, Kubeconfig};
use crate::{files, Result};
use std::net::IpAddr;
use std::path::{Path, PathBuf};

/// kubeadm's names for the users of the control plane.
pub const ADMIN_USER: &str = "kubernetes-admin";
pub const APISERVER_KUBELET_CLIENT: &str = "kube-apiserver-kubelet-client";
pub const MASTERS: &str = "system:masters";

/// The cluster's name in kubeconfigs.
pub const CLUSTER: &str = "kubernetes";

/// What `kaji pki init` needs to know.
#[derive(Debug, Clone, Default)]
pub struct InitSpec {
    /// The URL the kubeconfigs point at.
    pub server: String,
    /// Addresses the apiserver answers on (127.0.0.1 is always added).
    pub ips: Vec<IpAddr>,
    /// Names it answers on (`kubernetes`, `kubernetes.default`, ... and `localhost` are always added).
    pub dns_names: Vec<String>,
    /// The first IP of the Service range (the `kubernetes` Service's ClusterIP).
    pub service_ip: Option<IpAddr>,
}

/// This machine's host name (a name its apiserver answers on), if it has one.
pub fn host_name() -> Option<String> {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname").ok()?;
    let name = name.trim();
    (!name.is_empty()).then(|| name.to_string())
}

/// A node's files.
#[derive(Debug, Clone)]
pub struct NodeFiles {
    pub kubeconfig: PathBuf,
    pub serving_cert: PathBuf,
    pub serving_key: PathBuf,
}

/// The files under one directory.
#[derive(Debug, Clone)]
pub struct Layout {
    pub dir: PathBuf,
}

impl Layout {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    pub fn pki(&self, file: &str) -> PathBuf {
        self.dir.join("pki").join(file)
    }

    pub fn ca_cert(&self) -> PathBuf {
        self.pki("ca.crt")
    }

    pub fn ca_key(&self) -> PathBuf {
        self.pki("ca.key")
    }

    pub fn kubeconfig(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}.conf"))
    }

    pub fn node_dir(&self, node: &str) -> PathBuf {
        self.dir.join("nodes").join(node)
    }

    /// The CA in this layout.
    pub fn load_ca(&self) -> Result<Ca> {
        Ca::load(&files::read(&self.ca_cert())?, &files::read(&self.ca_key())?)
    }

    /// The CA (made if missing), the apiserver's serving and kubelet-client certificates, the
    /// ServiceAccount signing key `sa.key` with its `sa.pub` (ECDSA P-256, made if missing), and
    /// the control plane's kubeconfigs.
    pub fn init(&self, spec: &InitSpec) -> Result<Ca> {
        let ca = if self.ca_cert().exists() && self.ca_key().exists() {
            self.load_ca()?
        } else {
            let ca = Ca::generate(CLUSTER, CA_VALIDITY)?;
            files::write_private(&self.ca_key(), ca.key_pem())?;
            files::write_public(&self.ca_cert(), ca.cert_pem())?;
            ca
        };
        let mut ips: Vec<IpAddr> = vec![IpAddr::from([127, 0, 0, 1])];
        ips.extend(spec.service_ip);
        ips.extend(spec.ips.iter().copied());
        ips.dedup();
        let mut dns: Vec<String> = [
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local",
            "localhost",
        ]
        .map(String::from)
        .to_vec();
        for d in &spec.dns_names {
            if !dns.contains(d) {
                dns.push(d.clone());
            }
        }
        let serving = ca.issue(&CertSpec::server("kube-apiserver", &dns, &ips))?;
        // The chain carries the CA, so a joining node can pin it by hash (see `tls::discover_pinned_ca`).
        files::write_public(&self.pki("apiserver.crt"), &format!("{}{}", serving.cert_pem, ca.cert_pem()))?;
        files::write_private(&self.pki("apiserver.key"), &serving.key_pem)?;
        let kubelet_client = ca.issue(&CertSpec::client(APISERVER_KUBELET_CLIENT, &[MASTERS]))?;
        files::write_public(&self.pki("apiserver-kubelet-client.crt"), &kubelet_client.cert_pem)?;
        files::write_private(&self.pki("apiserver-kubelet-client.key"), &kubelet_client.key_pem)?;
        // The ServiceAccount token key pair (kubeadm's sa.key/sa.pub): made once, never replaced,
        // since replacing it would end every token issued with it.
        if !self.pki("sa.key").exists() {
            let key = rcgen::KeyPair::generate()?;
            files::write_private(&self.pki("sa.key"), &key.serialize_pem())?;
            files::write_public(&self.pki("sa.pub"), &key.public_key_pem())?;
        }
        for (file, user, orgs) in [
            ("admin", ADMIN_USER, &[MASTERS][..]),
            ("scheduler", "system:kube-scheduler", &[][..]),
            ("controller-manager", "system:kube-controller-manager", &[][..]),
            ("proxy", "system:kube-proxy", &[][..]),
        ] {
            self.write_kubeconfig(&ca, &self.kubeconfig(file), user, orgs, &spec.server)?;
        }
        Ok(ca)
    }

    /// A kubeconfig at `path` for a new certificate of `user` in `orgs`, against `server`.
    pub fn write_kubeconfig(&self, ca: &Ca, path: &Path, user: &str, orgs: &[&str], server: &str) -> Result<()> {
        let issued = ca.issue(&CertSpec::client(user, orgs))?;
        let kc = Kubeconfig {
            cluster: CLUSTER.into(),
            server: server.into(),
            ca_pem: ca.cert_pem().into(),
            user: user.into(),
            context: format!("{user}@{CLUSTER}"),
            credentials: Credentials::Certificate { cert_pem: issued.cert_pem, key_pem: issued.key_pem },
        };
        files::write_private(path, &kc.render())
    }

    /// A node's client kubeconfig (`system:node:<name>` in `system:nodes`) and its serving pair
    /// for the agent's port (SANs: its name and addresses).
    pub fn issue_node(&self, ca: &Ca, node: &str, ips: &[IpAddr], server: &str) -> Result<NodeFiles> {
        let dir = self.node_dir(node);
        let files = NodeFiles {
            kubeconfig: dir.join("kubelet.conf"),
            serving_cert: dir.join("kubelet.crt"),
            serving_key: dir.join("kubelet.key"),
        };
        let user = format!("system:node:{node}");
        self.write_kubeconfig(ca, &files.kubeconfig, &user, &["system:nodes"], server)?;
        let serving = ca.issue(&CertSpec::server(&user, &[node.to_string()], ips))?;
        files::write_public(&files.serving_cert, &serving.cert_pem)?;
        files::write_private(&files.serving_key, &serving.key_pem)?;
        Ok(files)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn init_writes_kubeadms_layout_with_private_keys() {
        let dir = tempfile::tempdir().expect("tempdir");
        let layout = Layout::new(dir.path());
        let spec = InitSpec {
            server: "https://127.0.0.1:6443".into(),
            ips: vec!["172.30.0.1".parse().expect("ip")],
            dns_names: vec!["host1".into()],
            service_ip: Some("10.96.0.1".parse().expect("ip")),
        };
        let ca = layout.init(&spec).expect("init");
        let chain = files::read(&layout.pki("apiserver.crt")).expect("read");
        let certs = crate::cert::certs(&chain, "apiserver").expect("pem");
        assert_eq!(certs.len(), 2, "the serving certificate and the CA");
        let id = crate::Identity::parse(certs[0].as_ref()).expect("parse");
        for want in [
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local",
            "host1",
        ] {
            assert!(id.dns_names.iter().any(|d| d == want), "{want} missing from {:?}", id.dns_names);
        }
        for want in ["127.0.0.1", "172.30.0.1", "10.96.0.1"] {
            assert!(id.ips.contains(&want.parse().expect("ip")), "{want} missing from {:?}", id.ips);
        }
        for f in [
            "pki/ca.key",
            "pki/apiserver.key",
            "pki/apiserver-kubelet-client.key",
            "pki/sa.key",
            "admin.conf",
            "proxy.conf",
        ] {
            let mode = std::fs::metadata(dir.path().join(f)).expect("stat").permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "{f}");
        }
        let admin = files::read(&layout.kubeconfig("admin")).expect("read");
        assert!(admin.contains("certificate-authority-data: ") && admin.contains("client-key-data: "));
        let sa_key = files::read(&layout.pki("sa.key")).expect("read");
        assert!(sa_key.starts_with("-----BEGIN PRIVATE KEY-----"), "PKCS#8");
        assert!(files::read(&layout.pki("sa.pub")).expect("read").starts_with("-----BEGIN PUBLIC KEY-----"));
        // Again: the same CA and ServiceAccount key, new leaves.
        let again = layout.init(&spec).expect("init again");
        assert_eq!(files::read(&layout.pki("sa.key")).expect("read"), sa_key, "tokens already issued stay valid");
        assert_eq!(again.spki_hash().expect("hash"), ca.spki_hash().expect("hash"));
        let node = layout.issue_node(&ca, "n1", &["172.30.0.11".parse().expect("ip")], &spec.server).expect("node");
        let serving = crate::Identity::parse(
            crate::cert::first_cert(&files::read(&node.serving_cert).expect("read"), "n1").expect("pem").as_ref(),
        )
        .expect("parse");
        assert_eq!(
            (serving.common_name.as_str(), serving.dns_names.clone()),
            ("system:node:n1", vec!["n1".to_string()])
        );
    }
}
