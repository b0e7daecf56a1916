//! A secure apiserver — HTTPS, client certificates from a PKI made for the test — and the
//! kubeconfigs and kubectl runs the tests of authentication and authorization use.

use super::ApiServer;
use kaji_pki::kubeconfig::{Credentials, Kubeconfig};
use kaji_pki::layout::{InitSpec, Layout};
use kaji_pki::{Ca, CertSpec};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// What kubectl says on a 401: "(Unauthorized)" after the Status of a request, "(the server has
/// asked for the client to provide credentials)" after discovery.
pub const LOGGED_IN: &str = "error: You must be logged in to the server (";

/// The real binary on HTTPS with a fresh PKI in a temp dir (removed with it).
pub struct Secure {
    pub server: ApiServer,
    pub pki: Layout,
    pub ca: Ca,
    pub dir: tempfile::TempDir,
}

impl Secure {
    /// Starts the server with the flags `extra` returns, given the PKI and the temp dir (for
    /// files those flags name, e.g. a token file or the ServiceAccount key).
    pub fn start(extra: impl FnOnce(&Layout, &Path) -> Vec<String>) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let pki = Layout::new(dir.path().join("pki-root"));
        let ca = pki.init(&InitSpec { server: "https://127.0.0.1:1".into(), ..Default::default() }).expect("pki");
        let extra = extra(&pki, dir.path());
        let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
        let server = ApiServer::start_secure(&dir.path().join("data"), &pki, &extra);
        Secure { server, pki, ca, dir }
    }

    /// A kubeconfig file for this server with `credentials`, trusting its CA.
    pub fn kubeconfig(&self, name: &str, credentials: Credentials) -> PathBuf {
        let kc = Kubeconfig {
            cluster: "kaji".into(),
            server: self.server.https_url(),
            ca_pem: self.ca.cert_pem().into(),
            user: name.into(),
            context: name.into(),
            credentials,
        };
        let path = self.dir.path().join(format!("{name}.kubeconfig"));
        std::fs::write(&path, kc.render()).expect("write kubeconfig");
        path
    }

    /// A client certificate for `cn` in `orgs`, issued by `ca`.
    pub fn cert(ca: &Ca, cn: &str, orgs: &[&str]) -> Credentials {
        let issued = ca.issue(&CertSpec::client(cn, orgs)).expect("issue");
        Credentials::Certificate { cert_pem: issued.cert_pem, key_pem: issued.key_pem }
    }

    /// A kubeconfig file (`file`) for a user with a certificate of this cluster's CA.
    pub fn user(&self, file: &str, cn: &str, orgs: &[&str]) -> PathBuf {
        self.kubeconfig(file, Self::cert(&self.ca, cn, orgs))
    }

    /// kubeadm's admin: `kubernetes-admin` in `system:masters`.
    pub fn admin(&self) -> PathBuf {
        self.user("admin", "kubernetes-admin", &["system:masters"])
    }
}

/// kubectl with `kubeconfig` only (KUBECONFIG ignored, a cache of its own): success, stdout, stderr.
pub fn kubectl(kubeconfig: &Path, args: &[&str]) -> (bool, String, String) {
    kubectl_in(kubeconfig, args, None)
}

/// [`kubectl`] with `stdin` written to it (then closed).
pub fn kubectl_in(kubeconfig: &Path, args: &[&str], stdin: Option<&str>) -> (bool, String, String) {
    use std::io::Write;
    let mut child = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .arg("--cache-dir")
        .arg(kubeconfig.with_extension("cache"))
        .args(args)
        .env_remove("KUBECONFIG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl runs");
    let mut input = child.stdin.take().expect("stdin");
    input.write_all(stdin.unwrap_or("").as_bytes()).expect("stdin");
    drop(input);
    let out = child.wait_with_output().expect("kubectl ends");
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into(), String::from_utf8_lossy(&out.stderr).into())
}
