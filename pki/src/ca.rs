//! The cluster CA: made once (or loaded from its two files) and used to issue every
//! certificate — serving and client certificates with the subjects, SANs and usages asked for,
//! with random serials, backdated five minutes against clock skew as Kubernetes' signer does.

use crate::{Error, Result};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, PublicKeyData, SanType, SerialNumber,
};
use std::net::IpAddr;
use std::time::Duration;
use time::OffsetDateTime;

/// How long kubeadm's CA lasts; leaf certificates last a year (its default too).
pub const CA_VALIDITY: Duration = Duration::from_secs(10 * 365 * 24 * 3600);
pub const LEAF_VALIDITY: Duration = Duration::from_secs(365 * 24 * 3600);
/// Certificates start this long before they are made (Kubernetes' signer backdates the same).
pub const BACKDATE: Duration = Duration::from_secs(5 * 60);

/// What a certificate may be used for: Kubernetes' `certificates.k8s.io` usage names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Usage {
    DigitalSignature,
    KeyEncipherment,
    ContentCommitment,
    KeyAgreement,
    DataEncipherment,
    CertSign,
    CrlSign,
    EncipherOnly,
    DecipherOnly,
    Any,
    ServerAuth,
    ClientAuth,
    CodeSigning,
    EmailProtection,
    Timestamping,
    OcspSigning,
}

impl Usage {
    /// A `spec.usages` entry (Kubernetes' `KeyUsage` strings); None for ones kaji cannot
    /// issue (ipsec, s/mime, microsoft/netscape sgc).
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "signing" | "digital signature" => Usage::DigitalSignature,
            "key encipherment" => Usage::KeyEncipherment,
            "content commitment" => Usage::ContentCommitment,
            "key agreement" => Usage::KeyAgreement,
            "data encipherment" => Usage::DataEncipherment,
            "cert sign" => Usage::CertSign,
            "crl sign" => Usage::CrlSign,
            "encipher only" => Usage::EncipherOnly,
            "decipher only" => Usage::DecipherOnly,
            "any" => Usage::Any,
            "server auth" => Usage::ServerAuth,
            "client auth" => Usage::ClientAuth,
            "code signing" => Usage::CodeSigning,
            "email protection" => Usage::EmailProtection,
            "timestamping" => Usage::Timestamping,
            "ocsp signing" => Usage::OcspSigning,
            _ => return None,
        })
    }
}

/// What to issue: subject, SANs, usages, lifetime.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertSpec {
    pub common_name: String,
    pub organizations: Vec<String>,
    pub dns_names: Vec<String>,
    pub ips: Vec<IpAddr>,
    pub emails: Vec<String>,
    pub uris: Vec<String>,
    pub usages: Vec<Usage>,
    pub validity: Duration,
}

impl CertSpec {
    /// A client certificate: user `cn` in groups `orgs` (digital signature, key encipherment,
    /// client auth — kubeadm's usages).
    pub fn client(cn: &str, orgs: &[&str]) -> Self {
        Self {
            common_name: cn.to_string(),
            organizations: orgs.iter().map(|o| o.to_string()).collect(),
            dns_names: vec![],
            ips: vec![],
            emails: vec![],
            uris: vec![],
            usages: vec![Usage::DigitalSignature, Usage::KeyEncipherment, Usage::ClientAuth],
            validity: LEAF_VALIDITY,
        }
    }

    /// A serving certificate for these names and addresses.
    pub fn server(cn: &str, dns_names: &[String], ips: &[IpAddr]) -> Self {
        Self {
            dns_names: dns_names.to_vec(),
            ips: ips.to_vec(),
            usages: vec![Usage::DigitalSignature, Usage::KeyEncipherment, Usage::ServerAuth],
            ..Self::client(cn, &[])
        }
    }

    fn params(&self, now: OffsetDateTime, limit: Option<OffsetDateTime>) -> Result<CertificateParams> {
        let mut p = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        for o in &self.organizations {
            dn.push(DnType::OrganizationName, o.as_str());
        }
        dn.push(DnType::CommonName, self.common_name.as_str());
        p.distinguished_name = dn;
        for d in &self.dns_names {
            p.subject_alt_names.push(SanType::DnsName(d.clone().try_into()?));
        }
        for ip in &self.ips {
            p.subject_alt_names.push(SanType::IpAddress(*ip));
        }
        for e in &self.emails {
            p.subject_alt_names.push(SanType::Rfc822Name(e.clone().try_into()?));
        }
        for u in &self.uris {
            p.subject_alt_names.push(SanType::URI(u.clone().try_into()?));
        }
        p.is_ca = IsCa::ExplicitNoCa;
        for u in &self.usages {
            match u {
                Usage::DigitalSignature => p.key_usages.push(KeyUsagePurpose::DigitalSignature),
                Usage::KeyEncipherment => p.key_usages.push(KeyUsagePurpose::KeyEncipherment),
                Usage::ContentCommitment => p.key_usages.push(KeyUsagePurpose::ContentCommitment),
                Usage::KeyAgreement => p.key_usages.push(KeyUsagePurpose::KeyAgreement),
                Usage::DataEncipherment => p.key_usages.push(KeyUsagePurpose::DataEncipherment),
                Usage::CertSign => p.key_usages.push(KeyUsagePurpose::KeyCertSign),
                Usage::CrlSign => p.key_usages.push(KeyUsagePurpose::CrlSign),
                Usage::EncipherOnly => p.key_usages.push(KeyUsagePurpose::EncipherOnly),
                Usage::DecipherOnly => p.key_usages.push(KeyUsagePurpose::DecipherOnly),
                Usage::Any => p.extended_key_usages.push(ExtendedKeyUsagePurpose::Any),
                Usage::ServerAuth => p.extended_key_usages.push(ExtendedKeyUsagePurpose::ServerAuth),
                Usage::ClientAuth => p.extended_key_usages.push(ExtendedKeyUsagePurpose::ClientAuth),
                Usage::CodeSigning => p.extended_key_usages.push(ExtendedKeyUsagePurpose::CodeSigning),
                Usage::EmailProtection => p.extended_key_usages.push(ExtendedKeyUsagePurpose::EmailProtection),
                Usage::Timestamping => p.extended_key_usages.push(ExtendedKeyUsagePurpose::TimeStamping),
                Usage::OcspSigning => p.extended_key_usages.push(ExtendedKeyUsagePurpose::OcspSigning),
            }
        }
        p.use_authority_key_identifier_extension = true;
        p.serial_number = Some(random_serial()?);
        p.not_before = now - BACKDATE;
        let mut not_after = now + self.validity;
        if let Some(limit) = limit {
            not_after = not_after.min(limit);
        }
        p.not_after = not_after;
        Ok(p)
    }
}

/// A certificate and its new key, PEM.
#[derive(Clone)]
pub struct Issued {
    pub cert_pem: String,
    pub key_pem: String,
}

impl std::fmt::Debug for Issued {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Issued").field("cert_pem", &self.cert_pem).field("key_pem", &"<redacted>").finish()
    }
}

/// The cluster CA: its certificate and its signing key.
pub struct Ca {
    cert_pem: String,
    key_pem: String,
    not_after: OffsetDateTime,
    issuer: Issuer<'static, KeyPair>,
}

impl std::fmt::Debug for Ca {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ca").field("cert_pem", &self.cert_pem).finish_non_exhaustive()
    }
}

impl Ca {
    /// A new self-signed CA named `cn` (kubeadm names its CA `kubernetes`).
    pub fn generate(cn: &str, validity: Duration) -> Result<Self> {
        let key = KeyPair::generate()?;
        let now = OffsetDateTime::now_utc();
        let mut p = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, cn);
        p.distinguished_name = dn;
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.key_usages =
            vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment, KeyUsagePurpose::KeyCertSign];
        p.serial_number = Some(random_serial()?);
        p.not_before = now - BACKDATE;
        p.not_after = now + validity;
        let cert = p.self_signed(&key)?;
        let (cert_pem, key_pem, not_after) = (cert.pem(), key.serialize_pem(), p.not_after);
        Ok(Self { cert_pem, key_pem, not_after, issuer: Issuer::new(p, key) })
    }

    /// The CA from its certificate and key (PEM).
    pub fn load(cert_pem: &str, key_pem: &str) -> Result<Self> {
        let key = KeyPair::from_pem(key_pem)?;
        let der = crate::cert::first_cert(cert_pem, "the CA certificate")?;
        let id = crate::cert::Identity::parse(der.as_ref())?;
        let not_after =
            OffsetDateTime::from_unix_timestamp(id.not_after).map_err(|e| Error::Certificate(e.to_string()))?;
        let issuer = Issuer::from_ca_cert_der(&der, key)?;
        Ok(Self { cert_pem: cert_pem.to_string(), key_pem: key_pem.to_string(), not_after, issuer })
    }

    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// The signing key; only for writing it to its 0600 file.
    pub fn key_pem(&self) -> &str {
        &self.key_pem
    }

    /// kubeadm's discovery hash of this CA: `sha256:<hex of its SubjectPublicKeyInfo>`.
    pub fn spki_hash(&self) -> Result<String> {
        crate::cert::spki_sha256(crate::cert::first_cert(&self.cert_pem, "the CA certificate")?.as_ref())
    }

    /// A new key and a certificate for it.
    pub fn issue(&self, spec: &CertSpec) -> Result<Issued> {
        let key = KeyPair::generate()?;
        let cert_pem = self.sign(&key, spec)?;
        Ok(Issued { cert_pem, key_pem: key.serialize_pem() })
    }

    /// A certificate for someone else's public key (a CSR's); never outlives the CA.
    pub fn sign(&self, public_key: &impl PublicKeyData, spec: &CertSpec) -> Result<String> {
        let params = spec.params(OffsetDateTime::now_utc(), Some(self.not_after))?;
        Ok(params.signed_by(public_key, &self.issuer)?.pem())
    }
}

/// 16 random bytes, positive (Kubernetes' signer uses 128 random bits too).
fn random_serial() -> Result<SerialNumber> {
    use ring::rand::SecureRandom;
    let mut b = [0u8; 16];
    ring::rand::SystemRandom::new().fill(&mut b).map_err(|_| Error::Random)?;
    b[0] &= 0x7f;
    b[0] |= 0x01;
    Ok(SerialNumber::from_slice(&b))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cert::Identity;

    #[test]
    fn issues_client_and_server_certificates_the_ca_verifies() {
        let ca = Ca::generate("kubernetes", CA_VALIDITY).expect("ca");
        let admin = ca.issue(&CertSpec::client("kubernetes-admin", &["system:masters"])).expect("issue");
        let der = crate::cert::first_cert(&admin.cert_pem, "admin").expect("pem");
        let id = Identity::parse(der.as_ref()).expect("parse");
        assert_eq!(
            (id.common_name.as_str(), id.organizations.clone()),
            ("kubernetes-admin", vec!["system:masters".into()])
        );
        let verifier = crate::tls::ChainVerifier::new(ca.cert_pem()).expect("verifier");
        assert!(verifier.verify(&[der.as_ref().to_vec()]).is_ok());

        let other = Ca::generate("kubernetes", CA_VALIDITY).expect("other ca");
        let stranger = other.issue(&CertSpec::client("kubernetes-admin", &["system:masters"])).expect("issue");
        let der = crate::cert::first_cert(&stranger.cert_pem, "stranger").expect("pem");
        assert!(verifier.verify(&[der.as_ref().to_vec()]).is_err(), "another CA's certificate is refused");

        // A serving certificate is no client certificate.
        let ip: IpAddr = "127.0.0.1".parse().expect("ip");
        let server = ca.issue(&CertSpec::server("kube-apiserver", &["kubernetes".into()], &[ip])).expect("issue");
        let der = crate::cert::first_cert(&server.cert_pem, "server").expect("pem");
        assert!(verifier.verify(&[der.as_ref().to_vec()]).is_err());
    }

    #[test]
    fn a_loaded_ca_signs_like_the_one_that_made_it() {
        let ca = Ca::generate("kubernetes", CA_VALIDITY).expect("ca");
        let again = Ca::load(ca.cert_pem(), ca.key_pem()).expect("load");
        assert_eq!(again.spki_hash().expect("hash"), ca.spki_hash().expect("hash"));
        assert!(ca.spki_hash().expect("hash").starts_with("sha256:"));
        let issued = again.issue(&CertSpec::client("u", &[])).expect("issue");
        let verifier = crate::tls::ChainVerifier::new(ca.cert_pem()).expect("verifier");
        let der = crate::cert::first_cert(&issued.cert_pem, "u").expect("pem");
        assert!(verifier.verify(&[der.as_ref().to_vec()]).is_ok());
        assert!(!format!("{issued:?}").contains("PRIVATE KEY"), "keys are never formatted");
    }

    #[test]
    fn usages_read_kubernetes_names() {
        assert_eq!(Usage::parse("client auth"), Some(Usage::ClientAuth));
        assert_eq!(Usage::parse("signing"), Some(Usage::DigitalSignature));
        assert_eq!(Usage::parse("ipsec tunnel"), None);
    }
}
