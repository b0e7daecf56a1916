//! `--client-ca-file`: x509 client certificates, as kube-apiserver reads them — the chain must
//! verify against the CA for client auth; the subject's CN is the user, each O a group. A
//! verified chain is remembered (by its SHA-256) until the certificate expires, so a busy
//! connection does not pay for a signature check per request.

use super::{Authenticator, AuthnError, AuthnRequest, AuthnResult};
use crate::auth::UserInfo;
use sha2::Digest;
use std::collections::HashMap;
use std::sync::Mutex;

/// Verified chains kept at most (then the memory starts over).
const CACHE_LIMIT: usize = 4096;

pub struct X509 {
    verifier: kaji_pki::tls::ChainVerifier,
    verified: Mutex<HashMap<[u8; 32], (UserInfo, i64)>>,
}

impl X509 {
    pub fn new(ca_pem: &str) -> Result<Self, kaji_pki::Error> {
        Ok(Self { verifier: kaji_pki::tls::ChainVerifier::new(ca_pem)?, verified: Mutex::default() })
    }

    fn verify(&self, chain: &[Vec<u8>]) -> AuthnResult {
        self.verifier.verify(chain).map_err(|e| AuthnError(format!("verifying certificate failed: {e}")))?;
        let id = kaji_pki::Identity::parse(&chain[0]).map_err(|e| AuthnError(e.to_string()))?;
        if id.common_name.is_empty() {
            return Ok(None);
        }
        let user = UserInfo { name: id.common_name, groups: id.organizations, ..Default::default() };
        let mut cache = self.verified.lock().unwrap_or_else(|p| p.into_inner());
        if cache.len() >= CACHE_LIMIT {
            cache.clear();
        }
        cache.insert(digest(chain), (user.clone(), id.not_after));
        Ok(Some(user))
    }
}

fn digest(chain: &[Vec<u8>]) -> [u8; 32] {
    let mut h = sha2::Sha256::new();
    for c in chain {
        h.update((c.len() as u64).to_be_bytes());
        h.update(c);
    }
    h.finalize().into()
}

impl Authenticator for X509 {
    fn authenticate(&self, req: &AuthnRequest<'_>) -> AuthnResult {
        if req.client_chain.is_empty() {
            return Ok(None);
        }
        let now = jiff::Timestamp::now().as_second();
        let known = self.verified.lock().unwrap_or_else(|p| p.into_inner()).get(&digest(req.client_chain)).cloned();
        match known {
            Some((user, not_after)) if now <= not_after => Ok(Some(user)),
            _ => self.verify(req.client_chain),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderMap;
    use kaji_pki::{Ca, CertSpec};

    fn der(pem: &str) -> Vec<u8> {
        kaji_pki::cert::first_cert(pem, "test").expect("pem").as_ref().to_vec()
    }

    fn auth(x: &X509, chain: &[Vec<u8>]) -> AuthnResult {
        let headers = HeaderMap::new();
        x.authenticate(&AuthnRequest { headers: &headers, path: "/api", client_chain: chain })
    }

    #[test]
    fn the_common_name_is_the_user_and_organizations_its_groups() {
        let ca = Ca::generate("kubernetes", kaji_pki::ca::CA_VALIDITY).expect("ca");
        let x = X509::new(ca.cert_pem()).expect("authenticator");
        let node = ca.issue(&CertSpec::client("system:node:n1", &["system:nodes"])).expect("cert");
        for _ in 0..2 {
            let u = auth(&x, &[der(&node.cert_pem)]).expect("verified").expect("a user");
            assert_eq!((u.name.as_str(), u.groups.clone()), ("system:node:n1", vec!["system:nodes".into()]));
        }
        assert_eq!(auth(&x, &[]), Ok(None), "no certificate, no opinion");
    }

    #[test]
    fn another_cas_certificate_or_a_serving_one_is_an_error() {
        let ca = Ca::generate("kubernetes", kaji_pki::ca::CA_VALIDITY).expect("ca");
        let x = X509::new(ca.cert_pem()).expect("authenticator");
        let other = Ca::generate("kubernetes", kaji_pki::ca::CA_VALIDITY).expect("ca");
        let stranger = other.issue(&CertSpec::client("admin", &["system:masters"])).expect("cert");
        let err = auth(&x, &[der(&stranger.cert_pem)]).expect_err("refused");
        assert!(err.0.starts_with("verifying certificate failed: x509:"), "{err}");
        let serving = ca.issue(&CertSpec::server("kube-apiserver", &[], &[])).expect("cert");
        assert!(auth(&x, &[der(&serving.cert_pem)]).is_err());
    }
}
