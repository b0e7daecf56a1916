//! Reading certificates: PEM to DER, the subject as Kubernetes reads it (CN = user, O = groups),
//! expiry, SANs, and kubeadm's CA hash.

use crate::{Error, Result};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use sha2::Digest;
use std::net::IpAddr;
use x509_parser::prelude::{FromDer, GeneralName, X509Certificate};

/// What a certificate says about its holder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub common_name: String,
    pub organizations: Vec<String>,
    /// Unix seconds.
    pub not_before: i64,
    pub not_after: i64,
    pub dns_names: Vec<String>,
    pub ips: Vec<IpAddr>,
}

impl Identity {
    /// Parse one DER certificate (no verification).
    pub fn parse(der: &[u8]) -> Result<Self> {
        let (_, cert) = X509Certificate::from_der(der).map_err(|e| Error::Certificate(e.to_string()))?;
        let subject = cert.subject();
        let text = |a: &x509_parser::x509::AttributeTypeAndValue<'_>| a.as_str().map(str::to_string).ok();
        let common_name = subject.iter_common_name().next().and_then(text).unwrap_or_default();
        let organizations = subject.iter_organization().filter_map(text).collect();
        let (mut dns_names, mut ips) = (Vec::new(), Vec::new());
        if let Ok(Some(san)) = cert.subject_alternative_name() {
            for name in &san.value.general_names {
                match name {
                    GeneralName::DNSName(d) => dns_names.push(d.to_string()),
                    GeneralName::IPAddress(b) => match b.len() {
                        4 => ips.push(IpAddr::from(<[u8; 4]>::try_from(*b).expect("four bytes"))),
                        16 => ips.push(IpAddr::from(<[u8; 16]>::try_from(*b).expect("sixteen bytes"))),
                        _ => {}
                    },
                    _ => {}
                }
            }
        }
        Ok(Self {
            common_name,
            organizations,
            not_before: cert.validity().not_before.timestamp(),
            not_after: cert.validity().not_after.timestamp(),
            dns_names,
            ips,
        })
    }
}

/// Every certificate in a PEM text, in order.
pub fn certs(pem: &str, what: &str) -> Result<Vec<CertificateDer<'static>>> {
    let all: Vec<_> = CertificateDer::pem_slice_iter(pem.as_bytes())
        .collect::<Result<_, _>>()
        .map_err(|e| Error::Pem { what: what.to_string(), detail: e.to_string() })?;
    if all.is_empty() {
        return Err(Error::Pem { what: what.to_string(), detail: "no CERTIFICATE block".into() });
    }
    Ok(all)
}

/// The first certificate of a PEM text.
pub fn first_cert(pem: &str, what: &str) -> Result<CertificateDer<'static>> {
    Ok(certs(pem, what)?.remove(0))
}

/// The private key of a PEM text (PKCS#8, SEC1 or PKCS#1); the error never quotes the text.
pub fn private_key(pem: &str, what: &str) -> Result<PrivateKeyDer<'static>> {
    PrivateKeyDer::from_pem_slice(pem.as_bytes())
        .map_err(|e| Error::Pem { what: what.to_string(), detail: format!("no usable private key ({e})") })
}

/// `sha256:<hex>` of a certificate's SubjectPublicKeyInfo (kubeadm's `--discovery-token-ca-cert-hash`).
pub fn spki_sha256(der: &[u8]) -> Result<String> {
    let (_, cert) = X509Certificate::from_der(der).map_err(|e| Error::Certificate(e.to_string()))?;
    let digest = sha2::Sha256::digest(cert.public_key().raw);
    Ok(format!("sha256:{}", digest.iter().map(|b| format!("{b:02x}")).collect::<String>()))
}
