//! CertificateSigningRequest validation (`pkg/apis/certificates/validation`): the PKCS#10
//! request parses and its signature holds, signerName, usages, expirationSeconds, conditions, and
//! what each write path (main, `/status`, `/approval`) may change.

use base64::Engine;
use serde_json::Value;

use super::causes::{BadValue, Cause};
use super::json::{arr, int, st};
use super::names::dns1123_subdomain_errors;

/// Which endpoint an update came through: each may change a different part of the status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CsrWrite {
    /// The object itself (metadata only; the strategy keeps spec and status).
    Main,
    /// `/status`: may set `status.certificate` and conditions other than Approved/Denied.
    Status,
    /// `/approval`: may add Approved or Denied.
    Approval,
}

/// Every key usage the API accepts (`allValidUsages`), sorted as Go's `sets.List()` prints them.
pub const USAGES: &[&str] = &[
    "any",
    "cert sign",
    "client auth",
    "code signing",
    "content commitment",
    "crl sign",
    "data encipherment",
    "decipher only",
    "digital signature",
    "email protection",
    "encipher only",
    "ipsec end system",
    "ipsec tunnel",
    "ipsec user",
    "key agreement",
    "key encipherment",
    "microsoft sgc",
    "netscape sgc",
    "ocsp signing",
    "s/mime",
    "server auth",
    "signing",
    "timestamping",
];

const LEGACY_SIGNER: &str = "kubernetes.io/legacy-unknown";

/// Compatibility allowances for a problem already present in the stored object (Kubernetes'
/// `getValidationOptions`), plus what the write path may set.
#[derive(Default)]
struct Opts {
    approval: bool,
    certificate: bool,
    both_approved_and_denied: bool,
    legacy_signer: bool,
    duplicate_conditions: bool,
    arbitrary_certificate: bool,
    unknown_usages: bool,
    duplicate_usages: bool,
}

impl Opts {
    fn new(new: &Value, old: Option<&Value>) -> Self {
        let Some(old) = old else { return Self::default() };
        let types = condition_types(old);
        let usages = strings(old.pointer("/spec/usages"));
        let mut seen = std::collections::HashSet::new();
        Self {
            approval: false,
            certificate: false,
            both_approved_and_denied: types.contains(&"Approved") && types.contains(&"Denied"),
            legacy_signer: old.pointer("/spec/signerName").and_then(Value::as_str) == Some(LEGACY_SIGNER),
            duplicate_conditions: types.iter().any(|t| !seen.insert(*t)),
            arbitrary_certificate: certificate(new) == certificate(old)
                || certificate_error(&certificate(old)).is_some(),
            unknown_usages: usages.iter().any(|u| !USAGES.contains(&u.as_str())),
            duplicate_usages: (1..usages.len()).any(|i| usages[..i].contains(&usages[i])),
        }
    }
}

/// A new request: everything but the update rules.
pub(super) fn validate_create(obj: &Value, out: &mut Vec<Cause>) {
    validate(obj, &Opts::new(obj, None), out);
}

/// An update through `write`: the object's own rules (with allowances for what `old` already
/// had), then no Approved/Denied/Failed condition removed, Approved/Denied changed only through
/// `/approval`, and `status.certificate` set only through `/status`, once.
pub fn validate_update(new: &Value, old: &Value, write: CsrWrite, out: &mut Vec<Cause>) {
    let mut opts = Opts::new(new, Some(old));
    opts.approval = write == CsrWrite::Approval;
    opts.certificate = write == CsrWrite::Status;
    validate(new, &opts, out);
    for t in ["Approved", "Denied", "Failed"] {
        if conditions_of(new, t).len() < conditions_of(old, t).len() {
            out.push(Cause::forbidden(
                "status.conditions",
                &format!("updates may not remove a condition of type {t:?}"),
            ));
        }
    }
    if !opts.approval {
        for t in ["Approved", "Denied"] {
            let (n, o) = (conditions_of(new, t), conditions_of(old, t));
            if n.len() > o.len() {
                out.push(Cause::forbidden(
                    "status.conditions",
                    &format!("updates may not add a condition of type {t:?}"),
                ));
            } else if n.len() == o.len() && n != o {
                out.push(Cause::forbidden(
                    "status.conditions",
                    &format!("updates may not modify a condition of type {t:?}"),
                ));
            }
        }
    }
    let (cert_new, cert_old) = (certificate(new), certificate(old));
    if cert_new != cert_old {
        if !opts.certificate {
            out.push(Cause::forbidden("status.certificate", "updates may not set certificate content"));
        } else if !cert_old.is_empty() {
            out.push(Cause::forbidden("status.certificate", "updates may not modify existing certificate content"));
        }
    }
}

fn validate(obj: &Value, opts: &Opts, out: &mut Vec<Cause>) {
    let spec = obj.get("spec").unwrap_or(&Value::Null);
    let request = bytes(spec.get("request"));
    if let Err(why) = check_request(&request) {
        out.push(Cause::invalid("spec.request", BadValue::Raw(go_bytes(&request)), &why));
    }
    let usages = strings(spec.get("usages"));
    if usages.is_empty() {
        out.push(Cause::required("spec.usages", ""));
    }
    for (i, u) in usages.iter().enumerate() {
        if !opts.unknown_usages && !USAGES.contains(&u.as_str()) {
            out.push(Cause::not_supported(format!("spec.usages[{i}]"), u.as_str(), USAGES));
        }
        if !opts.duplicate_usages && usages[..i].contains(u) {
            out.push(Cause::duplicate(format!("spec.usages[{i}]"), u.as_str()));
        }
    }
    let signer = st(spec, "signerName");
    if !opts.legacy_signer && signer == LEGACY_SIGNER {
        out.push(Cause::invalid(
            "spec.signerName",
            signer,
            "the legacy signerName is not allowed via this API version",
        ));
    } else {
        validate_signer_name("spec.signerName", signer, out);
    }
    if let Some(s) = int(spec, "expirationSeconds").filter(|s| *s < 600) {
        out.push(Cause::invalid(
            "spec.expirationSeconds",
            s,
            "may not specify a duration less than 600 seconds (10 minutes)",
        ));
    }
    validate_conditions(obj, opts, out);
    if !opts.arbitrary_certificate {
        if let Some(why) = certificate_error(&certificate(obj)) {
            out.push(Cause::invalid("status.certificate", "<certificate data>", &why));
        }
    }
}

fn validate_conditions(obj: &Value, opts: &Opts, out: &mut Vec<Cause>) {
    let (mut approved, mut denied) = (false, false);
    let mut seen: Vec<&str> = Vec::new();
    let conditions = obj.pointer("/status/conditions").and_then(Value::as_array).map_or(&[][..], Vec::as_slice);
    for (i, c) in conditions.iter().enumerate() {
        let (ty, status) = (st(c, "type"), st(c, "status"));
        if ty.is_empty() && !opts.duplicate_conditions {
            out.push(Cause::required(format!("status.conditions[{i}].type"), ""));
        }
        let allowed: &[&str] =
            if matches!(ty, "Approved" | "Denied" | "Failed") { &["True"] } else { &["False", "True", "Unknown"] };
        if status.is_empty() {
            out.push(Cause::required(format!("status.conditions[{i}].status"), ""));
        } else if !allowed.contains(&status) {
            out.push(Cause::not_supported(format!("status.conditions[{i}].status"), status, allowed));
        }
        if !opts.both_approved_and_denied {
            let clash = match ty {
                "Approved" => {
                    approved = true;
                    denied
                }
                "Denied" => {
                    denied = true;
                    approved
                }
                _ => false,
            };
            if clash {
                out.push(Cause::invalid(
                    format!("status.conditions[{i}].type"),
                    ty,
                    "Approved and Denied conditions are mutually exclusive",
                ));
            }
        }
        if !opts.duplicate_conditions {
            if seen.contains(&ty) {
                out.push(Cause::duplicate(format!("status.conditions[{i}].type"), ty));
            }
            seen.push(ty);
        }
    }
}

/// `ValidateSignerName`: `<domain>/<path>`, the domain a DNS subdomain with a dot.
pub(super) fn validate_signer_name(field: &str, signer: &str, out: &mut Vec<Cause>) {
    if signer.is_empty() {
        out.push(Cause::required(field, ""));
        return;
    }
    let Some((domain, path)) = signer.split_once('/').filter(|(_, p)| !p.contains('/')) else {
        out.push(Cause::invalid(
            field,
            signer,
            "must be a fully qualified domain and path of the form 'example.com/signer-name'",
        ));
        return;
    };
    if domain.len() > 253 {
        out.push(Cause::too_long(field, 253));
    }
    for e in dns1123_subdomain_errors(domain) {
        out.push(Cause::invalid(field, domain, &e));
    }
    if !domain.contains('.') {
        out.push(Cause::invalid(field, domain, "should be a domain with at least two segments separated by dots"));
    }
    let max_path = 253usize.saturating_sub(domain.len() + 1);
    if path.len() > max_path {
        out.push(Cause::too_long(field, max_path));
    }
    for e in dns1123_subdomain_errors(path) {
        out.push(Cause::invalid(field, path, &e));
    }
}

/// `ParseCSR` + `CheckSignature`.
fn check_request(pem_bytes: &[u8]) -> Result<(), String> {
    let not_csr = || "PEM block type must be CERTIFICATE REQUEST".to_string();
    let text = std::str::from_utf8(pem_bytes).map_err(|_| not_csr())?;
    let mut blocks = x509_parser::pem::Pem::iter_from_buffer(text.as_bytes());
    match blocks.next() {
        Some(Ok(p)) if p.label == "CERTIFICATE REQUEST" => rcgen::CertificateSigningRequestParams::from_pem(text)
            .map(drop)
            .map_err(|e| format!("x509: invalid certificate request: {e}")),
        _ => Err(not_csr()),
    }
}

/// Every `O` of the request's subject, in order, repeats kept (`ParseCSR(...).Subject.Organization`):
/// `spec.request` as the API carries it, base64 of a PEM `CERTIFICATE REQUEST`.
pub fn request_organizations(request_b64: &str) -> Result<Vec<String>, String> {
    let pem_bytes = base64::engine::general_purpose::STANDARD.decode(request_b64).map_err(|e| e.to_string())?;
    let block = match x509_parser::pem::Pem::iter_from_buffer(&pem_bytes).next() {
        Some(Ok(p)) if p.label == "CERTIFICATE REQUEST" => p,
        _ => return Err("PEM block type must be CERTIFICATE REQUEST".into()),
    };
    use x509_parser::prelude::FromDer;
    let (_, csr) = x509_parser::certification_request::X509CertificationRequest::from_der(&block.contents)
        .map_err(|e| format!("x509: invalid certificate request: {e}"))?;
    let subject = &csr.certification_request_info.subject;
    subject.iter_organization().map(|o| o.as_str().map(str::to_string).map_err(|e| e.to_string())).collect()
}

/// `validateCertificate`: empty, or only CERTIFICATE blocks each holding a certificate.
fn certificate_error(pem_bytes: &[u8]) -> Option<String> {
    if pem_bytes.is_empty() {
        return None;
    }
    let mut blocks = 0;
    for block in x509_parser::pem::Pem::iter_from_buffer(pem_bytes) {
        let Ok(block) = block else { break };
        if block.label != "CERTIFICATE" {
            return Some(format!("only CERTIFICATE PEM blocks are allowed, found {:?}", block.label));
        }
        blocks += 1;
        if let Err(e) = block.parse_x509() {
            return Some(format!("x509: malformed certificate: {e}"));
        }
    }
    (blocks == 0).then(|| "must contain at least one CERTIFICATE PEM block".to_string())
}

fn bytes(v: Option<&Value>) -> Vec<u8> {
    let s = v.and_then(Value::as_str).unwrap_or("");
    base64::engine::general_purpose::STANDARD.decode(s).unwrap_or_default()
}

fn certificate(obj: &Value) -> Vec<u8> {
    bytes(obj.pointer("/status/certificate"))
}

fn strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array).map_or(vec![], |a| a.iter().map(|x| x.as_str().unwrap_or("").to_string()).collect())
}

fn condition_types(obj: &Value) -> Vec<&str> {
    obj.pointer("/status/conditions")
        .and_then(Value::as_array)
        .map_or(vec![], |a| a.iter().map(|c| st(c, "type")).collect())
}

fn conditions_of<'a>(obj: &'a Value, ty: &str) -> Vec<&'a Value> {
    let status = obj.get("status").unwrap_or(&Value::Null);
    arr(status, "conditions").iter().filter(|c| st(c, "type") == ty).collect()
}

/// Go's `%#v` of a `[]byte`.
fn go_bytes(b: &[u8]) -> String {
    let parts: Vec<String> = b.iter().map(|x| format!("0x{x:x}")).collect();
    format!("[]byte{{{}}}", parts.join(", "))
}

#[cfg(test)]
mod tests;
