//! kaji's PKI and TLS plumbing, what every binary shares: the cluster CA and the certificates
//! it issues (`ca`, rcgen, no OpenSSL), reading certificates (`cert`), CSRs (`csr`), private
//! files (`files`, 0600), kubeconfigs with embedded data (`kubeconfig`), rustls configurations
//! (`tls`), and a TLS listener for axum that hands the client's certificate chain to the app
//! (`listener`). Keys are never logged: nothing here formats one into a message.

pub mod ca;
pub mod cert;
pub mod csr;
pub mod files;
pub mod kubeconfig;
pub mod layout;
pub mod listener;
pub mod tls;

pub use ca::{Ca, CertSpec, Issued, Usage};
pub use cert::Identity;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("certificate generation failed: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("invalid PEM in {what}: {detail}")]
    Pem { what: String, detail: String },
    #[error("invalid certificate: {0}")]
    Certificate(String),
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("TLS configuration: {0}")]
    Tls(#[from] rustls::Error),
    #[error("TLS client verifier: {0}")]
    Verifier(#[from] rustls::server::VerifierBuilderError),
    #[error("no randomness from the system")]
    Random,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Install ring as rustls' process-wide crypto provider (for libraries that build their own
/// configs, such as kube-rs); harmless when one is already installed.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}
