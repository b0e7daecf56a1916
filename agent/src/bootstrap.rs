//! TLS bootstrap (kubelet's `--bootstrap-kubeconfig`, `pkg/kubelet/certificate/bootstrap`): when
//! the node's kubeconfig is missing or its client certificate has expired, ask for one with the
//! bootstrap credentials — a new ECDSA P-256 key, a CertificateSigningRequest `node-csr-<hash>`
//! for `system:node:<name>` in `system:nodes` to the kube-apiserver-client-kubelet signer — wait
//! until it is approved and issued, and write the key, the certificate and a kubeconfig that uses
//! them (all 0600). The key waits in `<cert-dir>/kubelet-client.key.tmp`, so a restart asks again
//! with the same key under the same name instead of piling up requests.

use base64::Engine;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::certificates::v1::{CertificateSigningRequest, CertificateSigningRequestSpec};
use k8s_openapi::ByteString;
use kaji_pki::kubeconfig::{Credentials, Kubeconfig};
use kube::api::{Api, ObjectMeta, PostParams};
use kube::runtime::{watcher, WatchStreamExt};
use sha2::Digest;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub const SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";
pub const USAGES: [&str; 2] = ["digital signature", "client auth"];
pub const TMP_KEY: &str = "kubelet-client.key.tmp";
pub const KEY_FILE: &str = "kubelet-client.key";
pub const CERT_FILE: &str = "kubelet-client.crt";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("reading kubeconfig {path}: {detail}")]
    Kubeconfig { path: PathBuf, detail: String },
    #[error("the bootstrap client: {0}")]
    Client(#[source] kube::Error),
    #[error(transparent)]
    Pki(#[from] kaji_pki::Error),
    #[error("cannot create certificate signing request")]
    Create(#[source] kube::Error),
    #[error("watching certificate signing request {name}")]
    Watch {
        name: String,
        #[source]
        source: watcher::Error,
    },
    #[error("certificate signing request {0} already exists for another key")]
    Mismatch(String),
    /// client-go's words for a request the approver or an admin denied.
    #[error("certificate signing request is denied, reason: {reason}, message: {message}")]
    Denied { reason: String, message: String },
    /// client-go's words for a request its signer refused.
    #[error("certificate signing request failed, reason: {reason}, message: {message}")]
    Failed { reason: String, message: String },
    #[error("timed out waiting for the condition")]
    Timeout,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The files of one bootstrap.
#[derive(Debug, Clone)]
pub struct Paths {
    pub bootstrap_kubeconfig: PathBuf,
    pub kubeconfig: PathBuf,
    pub cert_dir: PathBuf,
}

/// Make sure `paths.kubeconfig` holds a valid client certificate for `node`, bootstrapping one
/// if needed; gives up after `timeout`. Returns whether a new certificate was obtained.
pub async fn ensure(paths: &Paths, node: &str, timeout: Duration) -> Result<bool> {
    if still_valid(&paths.kubeconfig, jiff::Timestamp::now().as_second()) {
        tracing::info!(kubeconfig = %paths.kubeconfig.display(), "the kubeconfig's client certificate is valid; no bootstrap");
        return Ok(false);
    }
    let bootstrap = read_kubeconfig(&paths.bootstrap_kubeconfig)?;
    let (server, ca_pem) = cluster_of(&bootstrap, &paths.bootstrap_kubeconfig)?;
    let client = client_for(bootstrap, &paths.bootstrap_kubeconfig).await?;
    let tmp = paths.cert_dir.join(TMP_KEY);
    let key_pem = match std::fs::read_to_string(&tmp) {
        Ok(k) if kaji_pki::csr::public_key_der(&k).is_ok() => k,
        _ => {
            let (k, _) = kaji_pki::csr::new_request("x", &[], &[], &[])?;
            kaji_pki::files::write_private(&tmp, &k)?;
            k
        }
    };
    let cn = format!("system:node:{node}");
    let request = kaji_pki::csr::request_for(&key_pem, &cn, &["system:nodes"], &[], &[])?;
    let name = digested_name(&kaji_pki::csr::public_key_der(&key_pem)?, &cn, &["system:nodes"], &USAGES);
    let cert_pem = tokio::time::timeout(timeout, request_certificate(client, &name, &request))
        .await
        .map_err(|_| Error::Timeout)??;
    let key_path = paths.cert_dir.join(KEY_FILE);
    let cert_path = paths.cert_dir.join(CERT_FILE);
    kaji_pki::files::write_private(&key_path, &key_pem)?;
    kaji_pki::files::write_private(&cert_path, &cert_pem)?;
    let kc = Kubeconfig {
        cluster: "default-cluster".into(),
        server,
        ca_pem,
        user: "default-auth".into(),
        context: "default-context".into(),
        credentials: Credentials::CertificateFiles {
            cert: cert_path.to_string_lossy().into_owned(),
            key: key_path.to_string_lossy().into_owned(),
        },
    };
    kaji_pki::files::write_private(&paths.kubeconfig, &kc.render())?;
    let _ = std::fs::remove_file(&tmp);
    tracing::info!(csr = %name, kubeconfig = %paths.kubeconfig.display(), "bootstrapped the node's client certificate");
    Ok(true)
}

/// kubelet's `digestedName`: `node-csr-` + the unpadded base64url SHA-512/256 of the public key,
/// the subject and the usages, each base64url-encoded and `|`-terminated.
pub fn digested_name(spki_der: &[u8], cn: &str, orgs: &[&str], usages: &[&str]) -> String {
    let encode = |b: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b);
    let mut hash = sha2::Sha512_256::new();
    let mut write = |b: &[u8]| {
        hash.update(encode(b).as_bytes());
        hash.update(b"|");
    };
    write(spki_der);
    write(cn.as_bytes());
    for o in orgs {
        write(o.as_bytes());
    }
    for u in usages {
        write(u.as_bytes());
    }
    format!("node-csr-{}", encode(&hash.finalize()))
}

/// Create the request (or find ours from before a restart) and wait for its certificate.
async fn request_certificate(client: kube::Client, name: &str, request: &str) -> Result<String> {
    let api: Api<CertificateSigningRequest> = Api::all(client);
    let csr = CertificateSigningRequest {
        metadata: ObjectMeta { name: Some(name.into()), ..Default::default() },
        spec: CertificateSigningRequestSpec {
            request: ByteString(request.as_bytes().to_vec()),
            signer_name: SIGNER.into(),
            usages: Some(USAGES.iter().map(|u| u.to_string()).collect()),
            ..Default::default()
        },
        status: None,
    };
    match api.create(&PostParams::default(), &csr).await {
        Ok(_) => tracing::info!(csr = %name, "asked for a client certificate; waiting for approval"),
        Err(kube::Error::Api(e)) if e.code == 409 => {
            // Ours from before a restart (same key, same name): it must be the same request.
            let existing = api.get(name).await.map_err(Error::Create)?;
            let same_key = std::str::from_utf8(&existing.spec.request.0)
                .ok()
                .and_then(|p| kaji_pki::csr::Request::parse(p).ok())
                .zip(kaji_pki::csr::Request::parse(request).ok())
                .is_some_and(|(a, b)| a.common_name == b.common_name && a.organizations == b.organizations);
            if !same_key || existing.spec.signer_name != SIGNER {
                return Err(Error::Mismatch(name.into()));
            }
            tracing::info!(csr = %name, "found the request made before a restart; waiting for it");
        }
        Err(e) => return Err(Error::Create(e)),
    }
    wait_for(api, name).await
}

/// Watch request `name` until it is issued (its certificate), denied or failed.
pub(crate) async fn wait_for(api: Api<CertificateSigningRequest>, name: &str) -> Result<String> {
    let cfg = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut events = watcher::watcher(api, cfg).applied_objects().boxed();
    while let Some(csr) = events.try_next().await.map_err(|source| Error::Watch { name: name.into(), source })? {
        if let Some(pem) = outcome(&csr)? {
            return Ok(pem);
        }
    }
    Err(Error::Timeout)
}

/// client-go's `WaitForCertificate` on one observed state: the certificate once approved and
/// issued, an error once denied or failed, `None` while pending.
pub fn outcome(csr: &CertificateSigningRequest) -> Result<Option<String>> {
    let Some(status) = &csr.status else { return Ok(None) };
    let mut approved = false;
    for c in status.conditions.iter().flatten() {
        let (reason, message) = (c.reason.clone().unwrap_or_default(), c.message.clone().unwrap_or_default());
        match c.type_.as_str() {
            "Denied" => return Err(Error::Denied { reason, message }),
            "Failed" => return Err(Error::Failed { reason, message }),
            "Approved" => approved = true,
            _ => {}
        }
    }
    match &status.certificate {
        Some(cert) if approved && !cert.0.is_empty() => Ok(Some(String::from_utf8_lossy(&cert.0).into_owned())),
        _ => Ok(None),
    }
}

/// kubelet's `isClientConfigStillValid`: the kubeconfig parses and its client certificate has
/// not expired.
pub fn still_valid(kubeconfig: &Path, now: i64) -> bool {
    client_identity(kubeconfig).is_some_and(|id| now < id.not_after)
}

/// The kubeconfig's client certificate (inline or from its file), parsed; None when it has none.
pub fn client_identity(kubeconfig: &Path) -> Option<kaji_pki::Identity> {
    let kc = read_kubeconfig(kubeconfig).ok()?;
    let user = current_user(&kc)?;
    let pem = match (&user.client_certificate_data, &user.client_certificate) {
        (Some(data), _) => {
            base64::engine::general_purpose::STANDARD.decode(data.trim()).ok().and_then(|b| String::from_utf8(b).ok())
        }
        (None, Some(path)) => std::fs::read_to_string(relative_to(kubeconfig, path)).ok(),
        (None, None) => None,
    }?;
    let der = kaji_pki::cert::first_cert(&pem, "the kubeconfig's client certificate").ok()?;
    kaji_pki::Identity::parse(der.as_ref()).ok()
}

/// The client certificate and key files a kubeconfig names (None when inline or absent).
pub fn client_files(kubeconfig: &Path) -> Option<(PathBuf, PathBuf)> {
    let kc = read_kubeconfig(kubeconfig).ok()?;
    let user = current_user(&kc)?;
    match (&user.client_certificate, &user.client_key) {
        (Some(c), Some(k)) => Some((relative_to(kubeconfig, c), relative_to(kubeconfig, k))),
        _ => None,
    }
}

pub(crate) fn read_kubeconfig(path: &Path) -> Result<kube::config::Kubeconfig> {
    kube::config::Kubeconfig::read_from(path)
        .map_err(|e| Error::Kubeconfig { path: path.to_path_buf(), detail: e.to_string() })
}

fn current_context(kc: &kube::config::Kubeconfig) -> Option<&kube::config::Context> {
    let name = kc.current_context.as_deref()?;
    kc.contexts.iter().find(|c| c.name == name)?.context.as_ref()
}

fn current_user(kc: &kube::config::Kubeconfig) -> Option<&kube::config::AuthInfo> {
    let user = current_context(kc)?.user.as_deref()?;
    kc.auth_infos.iter().find(|a| a.name == user)?.auth_info.as_ref()
}

/// The server and CA (PEM) the bootstrap kubeconfig trusts: the new kubeconfig keeps them.
pub(crate) fn cluster_of(kc: &kube::config::Kubeconfig, path: &Path) -> Result<(String, String)> {
    let bad = |detail: &str| Error::Kubeconfig { path: path.to_path_buf(), detail: detail.into() };
    let name = current_context(kc).map(|c| c.cluster.clone()).ok_or_else(|| bad("no current context"))?;
    let cluster = kc
        .clusters
        .iter()
        .find(|c| c.name == name)
        .and_then(|c| c.cluster.as_ref())
        .ok_or_else(|| bad("no cluster for the current context"))?;
    let server = cluster.server.clone().ok_or_else(|| bad("no server"))?;
    let ca = match (&cluster.certificate_authority_data, &cluster.certificate_authority) {
        (Some(data), _) => base64::engine::general_purpose::STANDARD
            .decode(data.trim())
            .ok()
            .and_then(|b| String::from_utf8(b).ok())
            .ok_or_else(|| bad("certificate-authority-data is not base64 PEM"))?,
        (None, Some(file)) => std::fs::read_to_string(relative_to(path, file)).map_err(|e| bad(&e.to_string()))?,
        (None, None) => return Err(bad("no certificate authority: the bootstrap must verify the apiserver")),
    };
    Ok((server, ca))
}

fn relative_to(kubeconfig: &Path, file: &str) -> PathBuf {
    let p = Path::new(file);
    match kubeconfig.parent() {
        Some(dir) if p.is_relative() => dir.join(p),
        _ => p.to_path_buf(),
    }
}

async fn client_for(kc: kube::config::Kubeconfig, path: &Path) -> Result<kube::Client> {
    kaji_pki::install_crypto_provider();
    let config = kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
        .await
        .map_err(|e| Error::Kubeconfig { path: path.to_path_buf(), detail: e.to_string() })?;
    kube::Client::try_from(config).map_err(Error::Client)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::certificates::v1::{CertificateSigningRequestCondition, CertificateSigningRequestStatus};

    fn with(conditions: &[(&str, &str)], cert: Option<&str>) -> CertificateSigningRequest {
        CertificateSigningRequest {
            status: Some(CertificateSigningRequestStatus {
                conditions: Some(
                    conditions
                        .iter()
                        .map(|(t, r)| CertificateSigningRequestCondition {
                            type_: t.to_string(),
                            status: "True".into(),
                            reason: Some(r.to_string()),
                            message: Some("m".into()),
                            ..Default::default()
                        })
                        .collect(),
                ),
                certificate: cert.map(|c| ByteString(c.as_bytes().to_vec())),
            }),
            ..Default::default()
        }
    }

    #[test]
    fn the_wait_ends_when_approved_and_issued_or_refused() {
        assert!(outcome(&CertificateSigningRequest::default()).expect("pending").is_none());
        assert!(outcome(&with(&[("Approved", "AutoApproved")], None)).expect("approved").is_none());
        assert_eq!(
            outcome(&with(&[("Approved", "AutoApproved")], Some("PEM"))).expect("issued").as_deref(),
            Some("PEM")
        );
        let denied = outcome(&with(&[("Denied", "KubectlDeny")], None)).expect_err("denied");
        assert_eq!(denied.to_string(), "certificate signing request is denied, reason: KubectlDeny, message: m");
        let failed =
            outcome(&with(&[("Approved", "A"), ("Failed", "SignerValidationFailure")], None)).expect_err("failed");
        assert_eq!(
            failed.to_string(),
            "certificate signing request failed, reason: SignerValidationFailure, message: m"
        );
    }

    #[test]
    fn the_name_depends_on_key_subject_and_usages() {
        let a = digested_name(b"key-a", "system:node:n1", &["system:nodes"], &USAGES);
        assert!(a.starts_with("node-csr-") && a.len() == "node-csr-".len() + 43, "{a}");
        assert_eq!(a, digested_name(b"key-a", "system:node:n1", &["system:nodes"], &USAGES));
        assert_ne!(a, digested_name(b"key-b", "system:node:n1", &["system:nodes"], &USAGES));
        // The delimiter keeps CN "foo" + O "bar" apart from CN "foob" + O "ar".
        assert_ne!(digested_name(b"k", "foo", &["bar"], &[]), digested_name(b"k", "foob", &["ar"], &[]));
    }

    #[test]
    fn a_kubeconfig_is_still_valid_until_its_certificate_expires() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ca = kaji_pki::Ca::generate("kubernetes", kaji_pki::ca::CA_VALIDITY).expect("ca");
        let issued = ca.issue(&kaji_pki::CertSpec::client("system:node:n1", &["system:nodes"])).expect("issue");
        let (cert, key) = (dir.path().join("c.crt"), dir.path().join("c.key"));
        std::fs::write(&cert, &issued.cert_pem).expect("cert");
        std::fs::write(&key, &issued.key_pem).expect("key");
        let kc = Kubeconfig {
            cluster: "c".into(),
            server: "https://127.0.0.1:6443".into(),
            ca_pem: ca.cert_pem().into(),
            user: "u".into(),
            context: "x".into(),
            credentials: Credentials::CertificateFiles { cert: "c.crt".into(), key: "c.key".into() },
        };
        let path = dir.path().join("kubeconfig");
        std::fs::write(&path, kc.render()).expect("kubeconfig");
        let now = jiff::Timestamp::now().as_second();
        assert!(still_valid(&path, now));
        assert!(!still_valid(&path, now + 2 * 365 * 24 * 3600), "expired");
        assert!(!still_valid(&dir.path().join("missing"), now));
    }
}
