//! CertificateSigningRequest rows and columns (`printCertificateSigningRequest`).

use std::time::Duration;

use serde_json::{json, Value};

use super::age::human_duration;
use super::columns::{Column, AGE, NAME};
use super::obj::Obj;

pub(super) fn columns(kind: &str) -> Option<Vec<Column>> {
    Some(match kind {
        "CertificateSigningRequest" => vec![
            NAME,
            AGE,
            ("SignerName", "string", "", 0, "signerName indicates the requested signer, and is a qualified name."),
            ("Requestor", "string", "", 0, "request contains an x509 certificate signing request encoded in a \"CERTIFICATE REQUEST\" PEM block. When serialized as JSON or YAML, the data is additionally base64-encoded."),
            ("RequestedDuration", "string", "", 0, "expirationSeconds is the requested duration of validity of the issued certificate. The certificate signer may issue a certificate with a different validity duration so a client must check the delta between the notBefore and and notAfter fields in the issued certificate to determine the actual duration."),
            ("Condition", "string", "", 0, "conditions applied to the request. Known conditions are \"Approved\", \"Denied\", and \"Failed\"."),
        ],
        _ => return None,
    })
}

pub(super) fn cells(kind: &str, o: Obj<'_>, name: Value, age: Value) -> Option<Vec<Value>> {
    if kind != "CertificateSigningRequest" {
        return None;
    }
    let signer = match o.str("spec.signerName") {
        "" => "<none>",
        s => s,
    };
    let duration = match o.get("spec.expirationSeconds").and_then(Value::as_u64) {
        Some(s) => human_duration(Duration::from_secs(s)),
        None => "<none>".to_owned(),
    };
    Some(vec![name, age, json!(signer), json!(o.str("spec.username")), json!(duration), json!(condition(o.0))])
}

/// `extractCSRStatus`: Denied over Approved over Pending, then `,Failed` and `,Issued`.
pub fn condition(csr: &Value) -> String {
    let types: Vec<&str> = Obj(csr).list("status.conditions").iter().map(|c| Obj(c).str("type")).collect();
    let mut out = if types.contains(&"Denied") {
        "Denied".to_owned()
    } else if types.contains(&"Approved") {
        "Approved".to_owned()
    } else {
        "Pending".to_owned()
    };
    if types.contains(&"Failed") {
        out.push_str(",Failed");
    }
    if !Obj(csr).str("status.certificate").is_empty() {
        out.push_str(",Issued");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_condition_column_reads_as_kubectl_prints_it() {
        assert_eq!(condition(&json!({})), "Pending");
        let approved =
            json!({"status": {"conditions": [{"type": "Approved", "status": "True"}], "certificate": "Y2VydA=="}});
        assert_eq!(condition(&approved), "Approved,Issued");
        let denied = json!({"status": {"conditions": [{"type": "Denied", "status": "True"}, {"type": "Failed", "status": "True"}]}});
        assert_eq!(condition(&denied), "Denied,Failed");
    }

    #[test]
    fn rows_show_signer_requestor_and_duration() {
        let csr = json!({"spec": {"signerName": "kubernetes.io/kube-apiserver-client-kubelet",
            "username": "system:bootstrap:abcdef", "expirationSeconds": 3600}});
        let row = cells("CertificateSigningRequest", Obj(&csr), json!("n"), json!("1s")).expect("a csr row");
        assert_eq!(
            row,
            vec![
                json!("n"),
                json!("1s"),
                json!("kubernetes.io/kube-apiserver-client-kubelet"),
                json!("system:bootstrap:abcdef"),
                json!("60m"),
                json!("Pending")
            ]
        );
    }
}
