//! Kubernetes' CertificateApproval and CertificateSigning admission plugins (on by default there,
//! always here): approving or denying a CertificateSigningRequest through `/approval` takes the
//! `approve` verb on the `signers` resource named by its signerName (or `<domain>/*`), and
//! setting `status.certificate` through `/status` takes `sign`.

use crate::auth::authz::message::resource_forbidden;
use crate::auth::{Admission, AdmissionRequest, Attributes, Authorizer, Decision, Operation, UserInfo};
use crate::http::errors::ApiResult;
use serde_json::Value;
use std::sync::Arc;

pub struct CertificateAdmission {
    pub authorizer: Arc<dyn Authorizer>,
}

/// `IsAuthorizedForSignerName`: the signer by name, else every signer of its domain.
pub fn authorized_for_signer(authz: &dyn Authorizer, user: &UserInfo, verb: &str, signer: &str) -> bool {
    let user = Arc::new(user.clone());
    let allowed = |name: String| {
        let attrs = Attributes {
            user: user.clone(),
            verb: verb.into(),
            api_group: "certificates.k8s.io".into(),
            api_version: "*".into(),
            resource: "signers".into(),
            name,
            resource_request: true,
            ..Default::default()
        };
        authz.authorize(&attrs).decision == Decision::Allow
    };
    if allowed(signer.to_string()) {
        return true;
    }
    match signer.split_once('/') {
        Some((domain, _)) => allowed(format!("{domain}/*")),
        None => false,
    }
}

fn certificate(v: Option<&Value>) -> &str {
    v.and_then(|v| v.pointer("/status/certificate")).and_then(Value::as_str).unwrap_or("")
}

impl Admission for CertificateAdmission {
    fn validate(&self, req: &AdmissionRequest<'_>, object: Option<&Value>) -> ApiResult<()> {
        if req.resource.kind != "CertificateSigningRequest" || req.operation != Operation::Update {
            return Ok(());
        }
        let signer = |v: Option<&Value>| {
            v.and_then(|v| v.pointer("/spec/signerName")).and_then(Value::as_str).unwrap_or("").to_string()
        };
        let (verb, signer) = match req.subresource {
            Some("approval") => ("approve", signer(object)),
            Some("status") if certificate(object) != certificate(req.old) => ("sign", signer(req.old)),
            _ => return Ok(()),
        };
        if authorized_for_signer(self.authorizer.as_ref(), req.user, verb, &signer) {
            return Ok(());
        }
        let why = format!("user not permitted to {verb} requests with signerName {signer:?}");
        Err(resource_forbidden(req.resource.group, req.resource.plural, req.name, &why))
    }
}
