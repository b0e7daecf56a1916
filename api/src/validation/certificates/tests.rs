use base64::Engine;
use serde_json::{json, Value};

use super::*;

fn b64(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s)
}

fn request(cn: &str) -> String {
    let key = rcgen::KeyPair::generate().expect("key");
    let mut p = rcgen::CertificateParams::default();
    p.distinguished_name.push(rcgen::DnType::OrganizationName, "system:nodes");
    p.distinguished_name.push(rcgen::DnType::CommonName, cn);
    p.serialize_request(&key).expect("csr").pem().expect("pem")
}

fn csr() -> Value {
    json!({"metadata": {"name": "node-csr-1"}, "spec": {
        "request": b64(&request("system:node:n1")),
        "signerName": "kubernetes.io/kube-apiserver-client-kubelet",
        "usages": ["digital signature", "client auth"]}})
}

fn messages(causes: &[Cause]) -> Vec<String> {
    causes.iter().map(|c| format!("{}: {}", c.field, c.message)).collect()
}

fn create(obj: &Value) -> Vec<String> {
    let mut out = vec![];
    validate_create(obj, &mut out);
    messages(&out)
}

fn update(new: &Value, old: &Value, write: CsrWrite) -> Vec<String> {
    let mut out = vec![];
    validate_update(new, old, write, &mut out);
    messages(&out)
}

#[test]
fn a_kubelet_client_request_is_valid() {
    assert_eq!(create(&csr()), Vec::<String>::new());
}

#[test]
fn a_request_that_is_not_a_csr_is_refused() {
    let mut c = csr();
    c["spec"]["request"] = json!(b64("hello"));
    let msgs = create(&c);
    assert_eq!(msgs.len(), 1);
    assert!(msgs[0].starts_with("spec.request: Invalid value: []byte{0x68, 0x65"), "{msgs:?}");
    assert!(msgs[0].ends_with(": PEM block type must be CERTIFICATE REQUEST"), "{msgs:?}");
}

#[test]
fn a_tampered_request_fails_its_signature() {
    let pem = request("system:node:n1");
    let body: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
    let mut der = base64::engine::general_purpose::STANDARD.decode(body).expect("der");
    let n = der.len();
    der[n - 10] ^= 1;
    let tampered = format!(
        "-----BEGIN CERTIFICATE REQUEST-----\n{}\n-----END CERTIFICATE REQUEST-----\n",
        base64::engine::general_purpose::STANDARD.encode(der)
    );
    let mut c = csr();
    c["spec"]["request"] = json!(b64(&tampered));
    assert_eq!(create(&c).len(), 1, "{:?}", create(&c));
}

#[test]
fn signer_usages_and_duration_follow_kubernetes_rules() {
    let mut c = csr();
    c["spec"]["signerName"] = json!("");
    c["spec"]["usages"] = json!(["client auth", "client auth", "flying"]);
    c["spec"]["expirationSeconds"] = json!(599);
    assert_eq!(
        create(&c),
        vec![
            "spec.usages[1]: Duplicate value: \"client auth\"".to_string(),
            format!(
                "spec.usages[2]: Unsupported value: \"flying\": supported values: {}",
                USAGES.iter().map(|u| format!("{u:?}")).collect::<Vec<_>>().join(", ")
            ),
            "spec.signerName: Required value".into(),
            "spec.expirationSeconds: Invalid value: 599: may not specify a duration less than 600 seconds (10 minutes)"
                .into(),
        ]
    );
    c = csr();
    c["spec"]["signerName"] = json!("kubernetes.io/a/b");
    c["spec"]["usages"] = json!([]);
    assert_eq!(
        create(&c),
        vec![
            "spec.usages: Required value",
            "spec.signerName: Invalid value: \"kubernetes.io/a/b\": must be a fully qualified domain and path of the form 'example.com/signer-name'",
        ]
    );
    c["spec"]["signerName"] = json!("example/signer");
    c["spec"]["usages"] = json!(["client auth"]);
    assert_eq!(
        create(&c),
        vec!["spec.signerName: Invalid value: \"example\": should be a domain with at least two segments separated by dots"]
    );
    c["spec"]["signerName"] = json!("kubernetes.io/legacy-unknown");
    assert_eq!(
        create(&c),
        vec!["spec.signerName: Invalid value: \"kubernetes.io/legacy-unknown\": the legacy signerName is not allowed via this API version"]
    );
}

#[test]
fn approved_and_denied_exclude_each_other_and_conditions_are_unique() {
    let mut c = csr();
    c["status"] = json!({"conditions": [
        {"type": "Approved", "status": "True"},
        {"type": "Denied", "status": "True"},
        {"type": "Approved", "status": "False"},
    ]});
    assert_eq!(
        create(&c),
        vec![
            "status.conditions[1].type: Invalid value: \"Denied\": Approved and Denied conditions are mutually exclusive",
            "status.conditions[2].status: Unsupported value: \"False\": supported values: \"True\"",
            "status.conditions[2].type: Invalid value: \"Approved\": Approved and Denied conditions are mutually exclusive",
            "status.conditions[2].type: Duplicate value: \"Approved\"",
        ]
    );
}

#[test]
fn approval_changes_only_through_the_approval_subresource_and_never_goes_away() {
    let old = csr();
    let mut approved = csr();
    approved["status"] = json!({"conditions": [{"type": "Approved", "status": "True", "reason": "ok"}]});
    assert_eq!(update(&approved, &old, CsrWrite::Approval), Vec::<String>::new());
    assert_eq!(
        update(&approved, &old, CsrWrite::Status),
        vec!["status.conditions: Forbidden: updates may not add a condition of type \"Approved\""]
    );
    assert_eq!(
        update(&old, &approved, CsrWrite::Approval),
        vec!["status.conditions: Forbidden: updates may not remove a condition of type \"Approved\""]
    );
    let mut failed = approved.clone();
    failed["status"]["conditions"].as_array_mut().expect("list").push(json!({"type": "Failed", "status": "True"}));
    assert_eq!(update(&failed, &approved, CsrWrite::Status), Vec::<String>::new());
}

#[test]
fn the_certificate_is_set_once_and_only_through_status() {
    let key = rcgen::KeyPair::generate().expect("key");
    let cert = rcgen::CertificateParams::new(vec!["x".into()]).expect("params").self_signed(&key).expect("cert");
    let old = csr();
    let mut issued = csr();
    issued["status"] = json!({"certificate": b64(&cert.pem())});
    assert_eq!(update(&issued, &old, CsrWrite::Status), Vec::<String>::new());
    assert_eq!(
        update(&issued, &old, CsrWrite::Main),
        vec!["status.certificate: Forbidden: updates may not set certificate content"]
    );
    let mut other = csr();
    let key2 = rcgen::KeyPair::generate().expect("key");
    let cert2 = rcgen::CertificateParams::new(vec!["y".into()]).expect("params").self_signed(&key2).expect("cert");
    other["status"] = json!({"certificate": b64(&cert2.pem())});
    assert_eq!(
        update(&other, &issued, CsrWrite::Status),
        vec!["status.certificate: Forbidden: updates may not modify existing certificate content"]
    );
    let mut garbage = csr();
    garbage["status"] = json!({"certificate": b64("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n")});
    assert_eq!(
        update(&garbage, &old, CsrWrite::Status),
        vec!["status.certificate: Invalid value: \"<certificate data>\": only CERTIFICATE PEM blocks are allowed, found \"PRIVATE KEY\""]
    );
}
