//! rustls configurations (ring, TLS 1.2 and 1.3, HTTP/1.1 by ALPN): servers with or without
//! client certificates, clients that verify the server against the cluster CA, the chain
//! check the apiserver's x509 authenticator runs, and the pinned-CA discovery a joining node
//! uses (kubeadm's `--discovery-token-ca-cert-hash`).

use crate::{cert, Error, Result};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::CryptoProvider;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, DigitallySignedStruct, DistinguishedName, RootCertStore, ServerConfig, SignatureScheme};
use rustls_pki_types::{CertificateDer, ServerName, UnixTime};
use std::sync::{Arc, Mutex};

pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A root store of every certificate in `ca_pem`.
pub fn roots(ca_pem: &str) -> Result<Arc<RootCertStore>> {
    let mut store = RootCertStore::empty();
    for c in cert::certs(ca_pem, "the CA bundle")? {
        store.add(c).map_err(|e| Error::Certificate(format!("the CA bundle: {e}")))?;
    }
    Ok(Arc::new(store))
}

/// Whether and how a server asks for client certificates.
#[derive(Debug, Clone)]
pub enum ClientAuth {
    /// Never asks.
    None,
    /// Asks (naming this CA) and accepts any certificate the client proves it holds the key
    /// of; the application verifies the chain (kube-apiserver's way: a bad certificate is a
    /// 401 from the x509 authenticator, not a failed handshake).
    VerifyLater { ca_pem: String },
    /// Asks; a certificate must chain to this CA or the handshake fails; none is fine.
    Optional { ca_pem: String },
}

/// A server's config from its certificate chain and key (PEM).
pub fn server_config(cert_pem: &str, key_pem: &str, client_auth: &ClientAuth) -> Result<ServerConfig> {
    let chain = cert::certs(cert_pem, "the serving certificate")?;
    let key = cert::private_key(key_pem, "the serving key")?;
    let builder = ServerConfig::builder_with_provider(provider()).with_safe_default_protocol_versions()?;
    let verifier: Arc<dyn ClientCertVerifier> = match client_auth {
        ClientAuth::None => Arc::new(rustls::server::NoClientAuth),
        ClientAuth::VerifyLater { ca_pem } => Arc::new(VerifyLater(webpki_client_verifier(ca_pem)?)),
        ClientAuth::Optional { ca_pem } => webpki_client_verifier(ca_pem)?,
    };
    let mut config = builder.with_client_cert_verifier(verifier).with_single_cert(chain, key)?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

fn webpki_client_verifier(ca_pem: &str) -> Result<Arc<dyn ClientCertVerifier>> {
    Ok(WebPkiClientVerifier::builder_with_provider(roots(ca_pem)?, provider()).allow_unauthenticated().build()?)
}

/// Passes every chain through (checking only the handshake signatures, i.e. that the client
/// holds the certificate's key); [`ChainVerifier`] judges the chain afterwards.
#[derive(Debug)]
struct VerifyLater(Arc<dyn ClientCertVerifier>);

impl ClientCertVerifier for VerifyLater {
    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.0.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// Checks a client's certificate chain against the CA: signatures, validity dates, and the
/// client-auth usage (what Go's x509 verify checks for kube-apiserver).
pub struct ChainVerifier(Arc<dyn ClientCertVerifier>);

impl ChainVerifier {
    pub fn new(ca_pem: &str) -> Result<Self> {
        Ok(Self(webpki_client_verifier(ca_pem)?))
    }

    /// `chain` is DER, leaf first.
    pub fn verify(&self, chain: &[Vec<u8>]) -> Result<(), String> {
        let Some((leaf, rest)) = chain.split_first() else { return Err("no client certificate".into()) };
        let leaf = CertificateDer::from(leaf.as_slice());
        let intermediates: Vec<CertificateDer<'_>> = rest.iter().map(|c| CertificateDer::from(c.as_slice())).collect();
        self.0.verify_client_cert(&leaf, &intermediates, UnixTime::now()).map(drop).map_err(|e| match e {
            rustls::Error::InvalidCertificate(c) => format!("x509: {c:?}"),
            other => other.to_string(),
        })
    }
}

/// A client config that verifies the server against `ca_pem` and, if given, presents a
/// client certificate (cert PEM, key PEM).
pub fn client_config(ca_pem: &str, identity: Option<(&str, &str)>) -> Result<ClientConfig> {
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots(ca_pem)?);
    finish_client(builder, identity)
}

/// A client config that does not verify the server (kube-apiserver's talk to kubelets when no
/// `--kubelet-certificate-authority` is given); it still presents its certificate.
pub fn unverified_client_config(identity: Option<(&str, &str)>) -> Result<ClientConfig> {
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(NoServerVerification(provider())));
    finish_client(builder, identity)
}

fn finish_client(
    builder: rustls::ConfigBuilder<ClientConfig, rustls::client::WantsClientCert>,
    identity: Option<(&str, &str)>,
) -> Result<ClientConfig> {
    let mut config = match identity {
        Some((cert_pem, key_pem)) => builder.with_client_auth_cert(
            cert::certs(cert_pem, "the client certificate")?,
            cert::private_key(key_pem, "the client key")?,
        )?,
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

#[derive(Debug)]
struct NoServerVerification(Arc<CryptoProvider>);

impl ServerCertVerifier for NoServerVerification {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// Trusts the server only if its chain carries a CA whose public key has `pin` as hash and
/// its certificate verifies against that CA; remembers the CA.
#[derive(Debug)]
struct PinnedCa {
    pin: String,
    provider: Arc<CryptoProvider>,
    found: Mutex<Option<CertificateDer<'static>>>,
}

impl ServerCertVerifier for PinnedCa {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let ca = intermediates
            .iter()
            .find(|c| cert::spki_sha256(c.as_ref()).is_ok_and(|h| h.eq_ignore_ascii_case(&self.pin)))
            .ok_or_else(|| {
                rustls::Error::General(format!(
                    "the server's certificate chain has no CA with public key hash {}",
                    self.pin
                ))
            })?;
        let mut roots = RootCertStore::empty();
        roots.add(ca.clone().into_owned()).map_err(|e| rustls::Error::General(e.to_string()))?;
        let verifier = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), self.provider.clone())
            .build()
            .map_err(|e| rustls::Error::General(e.to_string()))?;
        let ok = verifier.verify_server_cert(end_entity, intermediates, server_name, ocsp, now)?;
        *self.found.lock().unwrap_or_else(|p| p.into_inner()) = Some(ca.clone().into_owned());
        Ok(ok)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider.signature_verification_algorithms.supported_schemes()
    }
}

/// Join discovery: connect to `host:port`, and return the cluster CA (PEM) if the server's
/// chain carries a CA whose SubjectPublicKeyInfo hashes to `pin` (`sha256:<hex>`) and the
/// server's certificate, for `host`, verifies against it. Nothing is sent but the handshake.
pub async fn discover_pinned_ca(host: &str, port: u16, pin: &str) -> Result<String> {
    let pin = pin.trim().to_string();
    if !pin.starts_with("sha256:") || pin.len() != 7 + 64 {
        return Err(Error::Certificate(format!("{pin:?} is not a CA hash (sha256:<64 hex digits>)")));
    }
    let verifier = Arc::new(PinnedCa { pin, provider: provider(), found: Mutex::new(None) });
    let config = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .dangerous()
        .with_custom_certificate_verifier(verifier.clone())
        .with_no_client_auth();
    let name = ServerName::try_from(host.to_string()).map_err(|e| Error::Certificate(format!("{host}: {e}")))?;
    let io = |source| Error::Io { path: format!("{host}:{port}"), source };
    let tcp = tokio::net::TcpStream::connect((host, port)).await.map_err(io)?;
    let mut tls = tokio_rustls::TlsConnector::from(Arc::new(config)).connect(name, tcp).await.map_err(io)?;
    let _ = tokio::io::AsyncWriteExt::shutdown(&mut tls).await;
    let ca = verifier.found.lock().unwrap_or_else(|p| p.into_inner()).take();
    let ca = ca.ok_or_else(|| Error::Certificate("the server sent no certificate".into()))?;
    Ok(pem_encode("CERTIFICATE", ca.as_ref()))
}

/// One PEM block.
pub fn pem_encode(label: &str, der: &[u8]) -> String {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for chunk in b64.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(chunk).expect("base64 is ASCII"));
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}
