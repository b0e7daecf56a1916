//! Kubernetes' CertificateApproval, CertificateSigning and CertificateSubjectRestriction admission
//! plugins (on by default there, always here): approving or denying a CertificateSigningRequest
//! through `/approval` takes the `approve` verb on the `signers` resource named by its signerName
//! (or `<domain>/*`), setting `status.certificate` through `/status` takes `sign`, and no request
//! for the `kubernetes.io/kube-apiserver-client` signer may ask for `O=system:masters` — whoever
//! may create and approve such a request would otherwise mint a cluster-admin certificate.

use crate::auth::authz::message::resource_forbidden;
use crate::auth::{names, Admission, AdmissionRequest, Attributes, Authorizer, Decision, Operation, UserInfo};
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

/// `certificatesv1.KubeAPIServerClientSignerName`.
pub const APISERVER_CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client";

/// CertificateSubjectRestriction: on create, a request for the apiserver-client signer whose
/// subject names `system:masters` in any of its organizations is refused.
pub struct CertificateSubjectRestriction;

impl Admission for CertificateSubjectRestriction {
    fn validate(&self, req: &AdmissionRequest<'_>, object: Option<&Value>) -> ApiResult<()> {
        let handled = req.operation == Operation::Create
            && req.resource.kind == "CertificateSigningRequest"
            && req.subresource.is_none();
        let spec = |f: &str| object.and_then(|o| o.pointer(&format!("/spec/{f}"))).and_then(Value::as_str);
        if !handled || spec("signerName") != Some(APISERVER_CLIENT_SIGNER) {
            return Ok(());
        }
        let forbid = |why: String| resource_forbidden(req.resource.group, req.resource.plural, req.name, &why);
        let orgs = kaji_api::validation::request_organizations(spec("request").unwrap_or(""))
            .map_err(|e| forbid(format!("failed to parse CSR: {e}")))?;
        if orgs.iter().any(|o| o == names::SYSTEM_PRIVILEGED_GROUP) {
            return Err(forbid(format!(
                "use of {APISERVER_CLIENT_SIGNER} signer with {} group is not allowed",
                names::SYSTEM_PRIVILEGED_GROUP
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine;
    use serde_json::json;

    /// `openssl req -subj "/O=system:nodes/O=system:masters/CN=mallory"`: two organizations, the
    /// second privileged (rcgen cannot write a subject with one attribute type twice).
    const TWO_ORGS: &str = "-----BEGIN CERTIFICATE REQUEST-----
MIH+MIGkAgEAMEIxFTATBgNVBAoMDHN5c3RlbTpub2RlczEXMBUGA1UECgwOc3lz
dGVtOm1hc3RlcnMxEDAOBgNVBAMMB21hbGxvcnkwWTATBgcqhkjOPQIBBggqhkjO
PQMBBwNCAAT2EJWwFf4ZScocskKvN3GOmqZgAG2QlhatXYUnQ4WcZuEFZ4OgNiO/
2AZ+kesqUfzlM5t7PYYOkyGYnKXukVhmoAAwCgYIKoZIzj0EAwIDSQAwRgIhAOPj
LVoLJfDnIdMQrOfYZiiOK81U1qB5NIttI57UNA7CAiEAzsnGfpjCt+t0t1ZEm29F
MIXGTirqmbTHgpgt5N8gZj4=
-----END CERTIFICATE REQUEST-----
";

    fn csr(pem: &str, signer: &str) -> Value {
        let request = base64::engine::general_purpose::STANDARD.encode(pem);
        json!({"metadata": {"name": "c"}, "spec": {"request": request, "signerName": signer}})
    }

    fn create(obj: &Value) -> ApiResult<()> {
        let user = UserInfo::new("u", &[]);
        let req = AdmissionRequest {
            user: &user,
            operation: Operation::Create,
            resource: kaji_api::resources::by_kind("CertificateSigningRequest").expect("served"),
            subresource: None,
            namespace: None,
            name: "c",
            old: None,
            dry_run: false,
            options: None,
        };
        CertificateSubjectRestriction.validate(&req, Some(obj))
    }

    #[test]
    fn system_masters_is_refused_for_the_apiserver_client_signer_among_any_organizations() {
        let err = create(&csr(TWO_ORGS, APISERVER_CLIENT_SIGNER)).expect_err("masters");
        assert_eq!(
            (err.code, err.message.as_str()),
            (
                403,
                r#"certificatesigningrequests.certificates.k8s.io "c" is forbidden: use of kubernetes.io/kube-apiserver-client signer with system:masters group is not allowed"#
            )
        );
        // Other signers are their own policy's concern (the kubelet signers want system:nodes only).
        assert!(create(&csr(TWO_ORGS, "kubernetes.io/kube-apiserver-client-kubelet")).is_ok());
        assert!(create(&csr(TWO_ORGS, "example.com/anything")).is_ok());
    }

    #[test]
    fn other_groups_pass_and_an_unparsable_request_is_refused() {
        let (_, pem) = kaji_pki::csr::new_request("dev", &["developers"], &[], &[]).expect("csr");
        assert!(create(&csr(&pem, APISERVER_CLIENT_SIGNER)).is_ok());
        let err = create(&csr("not a pem", APISERVER_CLIENT_SIGNER)).expect_err("garbage");
        assert!(err.message.contains("is forbidden: failed to parse CSR: "), "{}", err.message);
    }
}
