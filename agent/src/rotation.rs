//! Client certificate rotation (kubelet's `--rotate-certificates`, client-go's certificate
//! manager): at a jittered 70–90 % of the node's client certificate's lifetime, ask for a new one
//! with the node's own credentials — a new ECDSA key, a CertificateSigningRequest `csr-…` for
//! `system:node:<name>` in `system:nodes` to the kube-apiserver-client-kubelet signer, which the
//! controller manager approves as `selfnodeclient` — write the pair as
//! `<cert-dir>/kubelet-client-<time>.crt|key` (0600), point the kubeconfig at it (one atomic
//! rename), and move every API call of the agent to a client built from it. Without rotation a
//! node's certificate simply expired and the node went NotReady until someone restarted it.
//!
//! The agent's `kube::Client` is a [`Rotating`] service in front of the current real client:
//! requests already under way (a watch) finish on their old connection; every new one goes out
//! with the new certificate, as client-go's transport closing its connections on rotation.

use crate::bootstrap::{self, SIGNER, USAGES};
use futures::future::BoxFuture;
use k8s_openapi::api::certificates::v1::{CertificateSigningRequest, CertificateSigningRequestSpec};
use k8s_openapi::ByteString;
use kaji_pki::kubeconfig::{Credentials, Kubeconfig};
use kube::api::{Api, ObjectMeta, PostParams};
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::task::{Context, Poll};
use std::time::Duration;

/// How long a request may wait for its certificate (client-go's `certificateWaitTimeout`).
pub const WAIT: Duration = Duration::from_secs(15 * 60);

/// The agent's API client: every request goes to the client built from the current certificate.
#[derive(Clone)]
pub struct Rotating(Arc<RwLock<kube::Client>>);

impl Rotating {
    pub fn new(client: kube::Client) -> Self {
        Self(Arc::new(RwLock::new(client)))
    }

    /// A `kube::Client` whose every request takes the current certificate's client.
    pub fn client(&self, default_namespace: &str) -> kube::Client {
        kube::Client::new(self.clone(), default_namespace)
    }

    fn current(&self) -> kube::Client {
        self.0.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    fn swap(&self, client: kube::Client) {
        *self.0.write().unwrap_or_else(std::sync::PoisonError::into_inner) = client;
    }
}

impl tower_service::Service<http::Request<kube::client::Body>> for Rotating {
    type Response = http::Response<kube::client::Body>;
    type Error = kube::Error;
    type Future = BoxFuture<'static, Result<Self::Response, kube::Error>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), kube::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<kube::client::Body>) -> Self::Future {
        let client = self.current();
        Box::pin(async move { client.send(request).await })
    }
}

/// client-go's `nextRotationDeadline`: `not_before` plus 70–90 % of the lifetime (`jitter` in
/// [0, 1) picks where), so a fleet issued together does not renew together.
pub fn deadline(not_before: i64, not_after: i64, jitter: f64) -> i64 {
    // The fixed 70% in integers: 0.7 + 0.2 * 0.5 is 0.7999... in floating point, a second early.
    let total = (not_after - not_before).max(0);
    not_before + total * 7 / 10 + (total as f64 * 0.2 * jitter.clamp(0.0, 1.0)) as i64
}

/// What rotation needs: the kubeconfig it rewrites, where the pairs go, the node, and how to
/// build a client from the kubeconfig (the agent's own flags).
pub struct Settings {
    pub kubeconfig: PathBuf,
    pub cert_dir: PathBuf,
    pub node: String,
    pub connect: Box<dyn Fn() -> BoxFuture<'static, anyhow::Result<kube::Client>> + Send + Sync>,
}

/// Renew before each deadline, forever; a failed renewal is retried with back-off (5 s doubling
/// to 5 min), the node keeping its current certificate meanwhile.
pub async fn run(settings: Settings, rotating: Rotating) {
    let mut backoff = Duration::from_secs(5);
    loop {
        let Some(id) = bootstrap::client_identity(&settings.kubeconfig) else {
            tracing::warn!(kubeconfig = %settings.kubeconfig.display(), "no client certificate to rotate");
            tokio::time::sleep(Duration::from_secs(300)).await;
            continue;
        };
        let at = deadline(id.not_before, id.not_after, fastrand::f64());
        let wait = at - jiff::Timestamp::now().as_second();
        if wait > 0 {
            tracing::info!(expires = id.not_after, rotate_in_s = wait, "waiting to rotate the client certificate");
            tokio::time::sleep(Duration::from_secs(wait as u64)).await;
        }
        match rotate(&settings, &rotating).await {
            Ok(name) => {
                backoff = Duration::from_secs(5);
                tracing::info!(csr = %name, kubeconfig = %settings.kubeconfig.display(), "rotated the node's client certificate");
            }
            Err(e) => {
                tracing::warn!(error = %format!("{e:#}"), retry_in = ?backoff, "could not rotate the client certificate");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(300));
            }
        }
    }
}

/// One renewal; returns the request's name.
async fn rotate(settings: &Settings, rotating: &Rotating) -> anyhow::Result<String> {
    let cn = format!("system:node:{}", settings.node);
    let (key_pem, request) = kaji_pki::csr::new_request(&cn, &["system:nodes"], &[], &[])?;
    let api: Api<CertificateSigningRequest> = Api::all(rotating.client("default"));
    let csr = CertificateSigningRequest {
        metadata: ObjectMeta { generate_name: Some("csr-".into()), ..Default::default() },
        spec: CertificateSigningRequestSpec {
            request: ByteString(request.into_bytes()),
            signer_name: SIGNER.into(),
            usages: Some(USAGES.iter().map(|u| u.to_string()).collect()),
            ..Default::default()
        },
        status: None,
    };
    let created = api.create(&PostParams::default(), &csr).await?;
    let name = created.metadata.name.unwrap_or_default();
    tracing::info!(csr = %name, "asked for a new client certificate");
    let cert_pem = tokio::time::timeout(WAIT, bootstrap::wait_for(api, &name))
        .await
        .map_err(|_| anyhow::anyhow!("certificate signing request {name}: timed out waiting for the condition"))??;
    let old = bootstrap::client_files(&settings.kubeconfig);
    let (cert, key) = install(&settings.kubeconfig, &settings.cert_dir, &cert_pem, &key_pem)?;
    rotating.swap((settings.connect)().await?);
    // The previous pair, when it was ours: nothing refers to it any more.
    if let Some((c, k)) = old.filter(|(c, _)| c.starts_with(&settings.cert_dir) && *c != cert) {
        let _ = std::fs::remove_file(c);
        if k != key {
            let _ = std::fs::remove_file(k);
        }
    }
    Ok(name)
}

/// Writes the pair beside the old one and rewrites the kubeconfig to use it (same server and CA).
pub fn install(
    kubeconfig: &Path,
    cert_dir: &Path,
    cert_pem: &str,
    key_pem: &str,
) -> anyhow::Result<(PathBuf, PathBuf)> {
    let kc = bootstrap::read_kubeconfig(kubeconfig)?;
    let (server, ca_pem) = bootstrap::cluster_of(&kc, kubeconfig)?;
    let stamp = jiff::Timestamp::now().strftime("%Y-%m-%d-%H-%M-%S").to_string();
    let cert = cert_dir.join(format!("kubelet-client-{stamp}.crt"));
    let key = cert_dir.join(format!("kubelet-client-{stamp}.key"));
    kaji_pki::files::write_private(&key, key_pem)?;
    kaji_pki::files::write_private(&cert, cert_pem)?;
    let kc = Kubeconfig {
        cluster: "default-cluster".into(),
        server,
        ca_pem,
        user: "default-auth".into(),
        context: "default-context".into(),
        credentials: Credentials::CertificateFiles {
            cert: cert.to_string_lossy().into_owned(),
            key: key.to_string_lossy().into_owned(),
        },
    };
    kaji_pki::files::write_private(kubeconfig, &kc.render())?;
    Ok((cert, key))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_deadline_falls_between_seventy_and_ninety_percent_of_the_lifetime() {
        assert_eq!(deadline(1000, 2000, 0.0), 1700);
        assert_eq!(deadline(1000, 2000, 0.5), 1800);
        assert_eq!(deadline(1000, 2000, 0.999_999), 1899);
        assert_eq!(deadline(1000, 2000, 7.0), 1900, "jitter is clamped");
        assert_eq!(deadline(2000, 1000, 0.5), 2000, "a certificate that ends before it starts is due at once");
    }

    #[test]
    fn install_keeps_the_server_and_ca_and_points_at_the_new_pair() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ca = kaji_pki::Ca::generate("kubernetes", kaji_pki::ca::CA_VALIDITY).expect("ca");
        let first = ca.issue(&kaji_pki::CertSpec::client("system:node:n1", &["system:nodes"])).expect("issue");
        let path = dir.path().join("kubelet.conf");
        let kc = Kubeconfig {
            cluster: "c".into(),
            server: "https://10.0.0.1:6443".into(),
            ca_pem: ca.cert_pem().into(),
            user: "u".into(),
            context: "x".into(),
            credentials: Credentials::Certificate { cert_pem: first.cert_pem.clone(), key_pem: first.key_pem.clone() },
        };
        std::fs::write(&path, kc.render()).expect("kubeconfig");
        assert_eq!(bootstrap::client_files(&path), None, "inline data names no files");
        let second = ca.issue(&kaji_pki::CertSpec::client("system:node:n1", &["system:nodes"])).expect("issue");
        let (cert, key) = install(&path, dir.path(), &second.cert_pem, &second.key_pem).expect("install");
        assert_eq!(bootstrap::client_files(&path), Some((cert.clone(), key.clone())));
        assert_eq!(std::fs::read_to_string(&cert).expect("cert"), second.cert_pem);
        let read = bootstrap::read_kubeconfig(&path).expect("kubeconfig");
        let (server, ca_pem) = bootstrap::cluster_of(&read, &path).expect("cluster");
        assert_eq!((server.as_str(), ca_pem.as_str()), ("https://10.0.0.1:6443", ca.cert_pem()));
        use std::os::unix::fs::PermissionsExt;
        for f in [&cert, &key, &path] {
            assert_eq!(std::fs::metadata(f).expect("file").permissions().mode() & 0o777, 0o600, "{}", f.display());
        }
    }
}
