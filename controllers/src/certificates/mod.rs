//! CertificateSigningRequest controllers: `csrapproving` (auto-approves kubelets' client
//! certificates after a SubjectAccessReview) and `csrsigning` (issues approved requests of the
//! `kubernetes.io` signers with the cluster CA), `csrcleaner` (deletes requests past their use), plus the request checks both share
//! (`pkg/apis/certificates/v1/helpers.go`).

pub mod approver;
pub mod cleaner;
pub mod signer;

use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use kaji_pki::csr::Request;
use std::collections::BTreeSet;

pub const KUBELET_CLIENT: &str = "kubernetes.io/kube-apiserver-client-kubelet";
pub const APISERVER_CLIENT: &str = "kubernetes.io/kube-apiserver-client";
pub const KUBELET_SERVING: &str = "kubernetes.io/kubelet-serving";

/// Whether the request carries a condition of this type with status True.
pub fn has_condition(csr: &CertificateSigningRequest, ty: &str) -> bool {
    csr.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == ty && c.status == "True"))
}

/// Whether a certificate was issued.
pub fn is_issued(csr: &CertificateSigningRequest) -> bool {
    csr.status.as_ref().and_then(|s| s.certificate.as_ref()).is_some_and(|c| !c.0.is_empty())
}

/// The PKCS#10 request, parsed and its signature checked.
pub fn parse_request(csr: &CertificateSigningRequest) -> Result<Request, String> {
    let name = csr.metadata.name.as_deref().unwrap_or("");
    let pem = std::str::from_utf8(&csr.spec.request.0).map_err(|e| format!("unable to parse csr {name:?}: {e}"))?;
    Request::parse(pem).map_err(|e| format!("unable to parse csr {name:?}: {e}"))
}

pub fn usages(csr: &CertificateSigningRequest) -> BTreeSet<String> {
    csr.spec.usages.iter().flatten().cloned().collect()
}

fn set(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(|s| s.to_string()).collect()
}

/// Go's `%v` of a sorted usage list: `[client auth digital signature key encipherment]`.
fn listed(items: &[&str]) -> String {
    let mut v: Vec<&str> = items.to_vec();
    v.sort();
    format!("[{}]", v.join(" "))
}

/// `ValidateKubeletClientCSR`: O=system:nodes, no SANs, CN=system:node:*, and the usages
/// digital signature + client auth (with key encipherment for RSA keys).
pub fn validate_kubelet_client(req: &Request, usages: &BTreeSet<String>) -> Result<(), String> {
    const FULL: &[&str] = &["digital signature", "key encipherment", "client auth"];
    if req.organizations != ["system:nodes"] {
        return Err("subject organization is not system:nodes".into());
    }
    if !req.dns_names.is_empty() {
        return Err("DNS subjectAltNames are not allowed".into());
    }
    if !req.emails.is_empty() {
        return Err("Email subjectAltNames are not allowed".into());
    }
    if !req.ips.is_empty() {
        return Err("IP subjectAltNames are not allowed".into());
    }
    if !req.uris.is_empty() {
        return Err("URI subjectAltNames are not allowed".into());
    }
    if !req.common_name.starts_with("system:node:") {
        return Err("subject common name does not begin with system:node:".into());
    }
    if *usages != set(FULL) && *usages != set(&["digital signature", "client auth"]) {
        return Err(format!("usages did not match {}", listed(FULL)));
    }
    Ok(())
}

/// `ValidateKubeletServingCSR`: O=system:nodes, a DNS or IP SAN and no others, the serving
/// usages, CN=system:node:*.
pub fn validate_kubelet_serving(req: &Request, usages: &BTreeSet<String>) -> Result<(), String> {
    const FULL: &[&str] = &["digital signature", "key encipherment", "server auth"];
    if req.organizations != ["system:nodes"] {
        return Err("subject organization is not system:nodes".into());
    }
    if req.dns_names.is_empty() && req.ips.is_empty() {
        return Err("DNS or IP subjectAltName is required".into());
    }
    if !req.emails.is_empty() {
        return Err("Email subjectAltNames are not allowed".into());
    }
    if !req.uris.is_empty() {
        return Err("URI subjectAltNames are not allowed".into());
    }
    if *usages != set(FULL) && *usages != set(&["digital signature", "server auth"]) {
        return Err(format!("usages did not match {}", listed(FULL)));
    }
    if !req.common_name.starts_with("system:node:") {
        return Err("subject common name does not begin with system:node:".into());
    }
    Ok(())
}

/// `validAPIServerClientUsages`: client auth, optionally digital signature and key encipherment.
pub fn validate_apiserver_client(usages: &[String]) -> Result<(), String> {
    let mut client_auth = false;
    for u in usages {
        match u.as_str() {
            "digital signature" | "key encipherment" => {}
            "client auth" => client_auth = true,
            other => return Err(format!("invalid usage for client certificate: {other}")),
        }
    }
    if !client_auth {
        return Err("missing required usage for client certificate: client auth".into());
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod testing {
    use k8s_openapi::api::certificates::v1::{CertificateSigningRequest, CertificateSigningRequestSpec};
    use k8s_openapi::ByteString;
    use kube::api::ObjectMeta;
    use std::net::IpAddr;

    /// A request for `cn` in `orgs` with these DNS/IP SANs, signer and usages, made by `username`.
    pub fn csr(
        cn: &str,
        orgs: &[&str],
        sans: (&[String], &[IpAddr]),
        signer: &str,
        usages: &[&str],
        username: &str,
    ) -> CertificateSigningRequest {
        let (_, pem) = kaji_pki::csr::new_request(cn, orgs, sans.0, sans.1).expect("csr");
        CertificateSigningRequest {
            metadata: ObjectMeta { name: Some("node-csr-test".into()), ..Default::default() },
            spec: CertificateSigningRequestSpec {
                request: ByteString(pem.into_bytes()),
                signer_name: signer.into(),
                usages: Some(usages.iter().map(|u| u.to_string()).collect()),
                username: Some(username.into()),
                ..Default::default()
            },
            status: None,
        }
    }

    pub fn kubelet(cn: &str, username: &str) -> CertificateSigningRequest {
        csr(cn, &["system:nodes"], (&[], &[]), super::KUBELET_CLIENT, &["digital signature", "client auth"], username)
    }
}
