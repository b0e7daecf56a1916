//! Certificate signing requests (PKCS#10): a node makes a key and a request, the signer reads
//! the request (its signature checked) and signs the public key in it.

use crate::{Error, Result};
use rcgen::{CertificateParams, CertificateSigningRequestParams, DistinguishedName, DnType, DnValue, KeyPair, SanType};
use std::net::IpAddr;

/// A new key and a CSR for `cn` in `orgs` with these SANs (kubelet's request: no extensions but
/// the SANs).
pub fn new_request(cn: &str, orgs: &[&str], dns_names: &[String], ips: &[IpAddr]) -> Result<(String, String)> {
    let key = KeyPair::generate()?;
    let csr = request_for_key(&key, cn, orgs, dns_names, ips)?;
    Ok((key.serialize_pem(), csr))
}

/// A CSR for an existing key (PEM).
pub fn request_for(key_pem: &str, cn: &str, orgs: &[&str], dns_names: &[String], ips: &[IpAddr]) -> Result<String> {
    request_for_key(&KeyPair::from_pem(key_pem)?, cn, orgs, dns_names, ips)
}

/// The SubjectPublicKeyInfo (DER) of a private key (PEM): what kubelet hashes into its CSR name.
pub fn public_key_der(key_pem: &str) -> Result<Vec<u8>> {
    use rcgen::PublicKeyData;
    Ok(KeyPair::from_pem(key_pem)?.subject_public_key_info())
}

fn request_for_key(key: &KeyPair, cn: &str, orgs: &[&str], dns_names: &[String], ips: &[IpAddr]) -> Result<String> {
    let mut p = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    for o in orgs {
        dn.push(DnType::OrganizationName, *o);
    }
    dn.push(DnType::CommonName, cn);
    p.distinguished_name = dn;
    for d in dns_names {
        p.subject_alt_names.push(SanType::DnsName(d.clone().try_into()?));
    }
    for ip in ips {
        p.subject_alt_names.push(SanType::IpAddress(*ip));
    }
    Ok(p.serialize_request(key)?.pem()?)
}

/// A parsed, signature-checked CSR.
pub struct Request {
    pub common_name: String,
    pub organizations: Vec<String>,
    pub dns_names: Vec<String>,
    pub ips: Vec<IpAddr>,
    pub emails: Vec<String>,
    pub uris: Vec<String>,
    params: CertificateSigningRequestParams,
}

impl std::fmt::Debug for Request {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Request")
            .field("common_name", &self.common_name)
            .field("organizations", &self.organizations)
            .field("dns_names", &self.dns_names)
            .field("ips", &self.ips)
            .finish_non_exhaustive()
    }
}

impl Request {
    /// Parse a `CERTIFICATE REQUEST` PEM block and check its self-signature.
    pub fn parse(pem: &str) -> Result<Self> {
        let params = CertificateSigningRequestParams::from_pem(pem)
            .map_err(|e| Error::Certificate(format!("invalid certificate request: {e}")))?;
        let text = |v: &DnValue| match v {
            DnValue::PrintableString(s) => s.to_string(),
            DnValue::Utf8String(s) => s.clone(),
            DnValue::Ia5String(s) => s.to_string(),
            DnValue::TeletexString(s) => s.to_string(),
            other => format!("{other:?}"),
        };
        let mut common_name = String::new();
        let mut organizations = Vec::new();
        for (ty, v) in params.params.distinguished_name.iter() {
            match ty {
                DnType::CommonName => common_name = text(v),
                DnType::OrganizationName => organizations.push(text(v)),
                _ => {}
            }
        }
        let (mut dns_names, mut ips, mut emails, mut uris) = (vec![], vec![], vec![], vec![]);
        for san in &params.params.subject_alt_names {
            match san {
                SanType::DnsName(d) => dns_names.push(d.to_string()),
                SanType::IpAddress(ip) => ips.push(*ip),
                SanType::Rfc822Name(e) => emails.push(e.to_string()),
                SanType::URI(u) => uris.push(u.to_string()),
                _ => {}
            }
        }
        Ok(Self { common_name, organizations, dns_names, ips, emails, uris, params })
    }

    /// The requested public key, for [`crate::Ca::sign`].
    pub fn public_key(&self) -> &impl rcgen::PublicKeyData {
        &self.params.public_key
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Ca, CertSpec, Identity};

    #[test]
    fn a_signed_request_becomes_a_certificate_for_its_key() {
        let (key_pem, csr_pem) = new_request("system:node:n1", &["system:nodes"], &[], &[]).expect("csr");
        let req = Request::parse(&csr_pem).expect("parse");
        assert_eq!(
            (req.common_name.as_str(), req.organizations.clone()),
            ("system:node:n1", vec!["system:nodes".into()])
        );
        assert!(req.dns_names.is_empty() && req.ips.is_empty());
        let ca = Ca::generate("kubernetes", crate::ca::CA_VALIDITY).expect("ca");
        let spec = CertSpec::client(&req.common_name, &["system:nodes"]);
        let cert_pem = ca.sign(req.public_key(), &spec).expect("sign");
        let id = Identity::parse(crate::cert::first_cert(&cert_pem, "c").expect("pem").as_ref()).expect("id");
        assert_eq!(id.common_name, "system:node:n1");
        // The certificate goes with the key that made the request: rustls accepts the pair.
        crate::tls::client_config(ca.cert_pem(), Some((&cert_pem, &key_pem))).expect("a matching pair");
        let ip: IpAddr = "172.30.0.11".parse().expect("ip");
        let csr = request_for(&key_pem, "system:node:n1", &["system:nodes"], &["n1".into()], &[ip]).expect("csr");
        let req = Request::parse(&csr).expect("parse");
        assert_eq!((req.dns_names.clone(), req.ips.clone()), (vec!["n1".to_string()], vec![ip]));
    }

    #[test]
    fn garbage_and_tampered_requests_are_refused() {
        assert!(Request::parse("not a csr").is_err());
        let (_, csr_pem) = new_request("system:node:n1", &["system:nodes"], &[], &[]).expect("csr");
        let block = pem_body(&csr_pem);
        let mut der = base64_decode(&block);
        let n = der.len();
        der[n / 2] ^= 0x01;
        let tampered = format!(
            "-----BEGIN CERTIFICATE REQUEST-----\n{}\n-----END CERTIFICATE REQUEST-----\n",
            base64_encode(&der)
        );
        assert!(Request::parse(&tampered).is_err());
    }

    fn pem_body(pem: &str) -> String {
        pem.lines().filter(|l| !l.starts_with("-----")).collect()
    }

    fn base64_decode(s: &str) -> Vec<u8> {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD.decode(s).expect("base64")
    }

    fn base64_encode(b: &[u8]) -> String {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD.encode(b)
    }
}
