//! Encryption at rest (`--encryption-provider-config`), as a user of kube-apiserver's sees it:
//! kubectl writes and reads Secrets as always, the store's files hold no plaintext (embedded store
//! or etcd, whichever KAJI_TEST_STORAGE picks), a restart with the same keys reads them back, and
//! a bad configuration stops the start with one line saying what is wrong.

mod common;

use common::{ApiServer, Kubectl};
use std::path::Path;
use std::process::Command;

const PLAINTEXT: &str = "correct-horse-battery-staple";

fn config(dir: &Path, key: &str) -> String {
    let path = dir.join("encryption.yaml");
    let text = format!(
        "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n  - resources: [secrets]\n    providers:\n      - aesgcm:\n          keys:\n            - name: key1\n              secret: {key}\n      - identity: {{}}\n"
    );
    std::fs::write(&path, text).expect("write config");
    path.to_string_lossy().into_owned()
}

/// Every file under `dir` (the embedded store's, or the test etcd member's beside it).
fn bytes_under(dir: &Path) -> Vec<u8> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else { return out };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(bytes_under(&p));
        } else {
            out.extend(std::fs::read(&p).unwrap_or_default());
        }
    }
    out
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle.as_bytes())
}

#[test]
fn secrets_are_encrypted_at_rest_and_read_back_through_kubectl() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let cfg = config(dir.path(), "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=");
    let mut server = ApiServer::start_with(&data, &["--encryption-provider-config", &cfg]);
    let kubectl = Kubectl::new(&server);
    kubectl.ok(&["create", "secret", "generic", "db", &format!("--from-literal=password={PLAINTEXT}")]);
    kubectl.ok(&["create", "configmap", "plain", "--from-literal=note=a-note-in-the-clear"]);
    let read = kubectl.ok(&["get", "secret", "db", "-o", "jsonpath={.data.password}"]);
    use base64::Engine as _;
    let decoded = base64::engine::general_purpose::STANDARD.decode(read.trim()).expect("base64");
    assert_eq!(decoded, PLAINTEXT.as_bytes(), "kubectl reads the Secret decrypted");

    server.kill9();
    // The store's files (and etcd's) after a kill -9: the Secret's value is sealed, the ConfigMap
    // (not named by the config) is not. base64 of the password is what a Secret stores.
    let at_rest = [bytes_under(&data), bytes_under(&data.with_extension("etcd"))].concat();
    assert!(!at_rest.is_empty(), "found the store's files");
    let b64 = base64::engine::general_purpose::STANDARD.encode(PLAINTEXT);
    assert!(!contains(&at_rest, &b64) && !contains(&at_rest, PLAINTEXT), "the Secret is not stored in plaintext");
    assert!(contains(&at_rest, "k8s:enc:aesgcm:v1:key1:"), "stored in Kubernetes' aesgcm format");
    assert!(contains(&at_rest, "a-note-in-the-clear"), "ConfigMaps are not in the config: stored as they are");

    // Same keys after a restart: the Secret reads back.
    let server = ApiServer::start_with(&data, &["--encryption-provider-config", &cfg]);
    let read = Kubectl::new(&server).ok(&["get", "secret", "db", "-o", "jsonpath={.data.password}"]);
    assert_eq!(read.trim(), b64);
}

#[test]
fn a_bad_encryption_config_stops_the_start_with_one_clear_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = config(dir.path(), "dG9vIHNob3J0");
    let out = Command::new(env!("CARGO_BIN_EXE_kaji-apiserver"))
        .args(["--insecure-port", "0", "--data-dir"])
        .arg(dir.path().join("data"))
        .args(["--encryption-provider-config", &cfg])
        .output()
        .expect("runs");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("an AES-GCM key is 16 or 32 bytes, this one is 9"), "{err}");
    assert!(!dir.path().join("data").join("kaji.redb").exists(), "nothing was stored with a bad config");
}

#[test]
fn replacing_secrets_unchanged_re_encrypts_what_was_stored_before_the_config() {
    // Kubernetes' documented step after turning encryption on (or rotating a key):
    // `kubectl get secrets -o json | kubectl replace -f -` rewrites every Secret with the first
    // provider, although nothing in them changed; once rewritten, a replace writes nothing.
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let mut server = ApiServer::start(&data);
    Kubectl::new(&server).ok(&["create", "secret", "generic", "db", &format!("--from-literal=password={PLAINTEXT}")]);
    server.kill9();
    let cfg = config(dir.path(), "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=");
    let server = ApiServer::start_with(&data, &["--encryption-provider-config", &cfg]);
    let kubectl = Kubectl::new(&server);
    let rv = || kubectl.ok(&["get", "secret", "db", "-o", "jsonpath={.metadata.resourceVersion}"]);
    let replace = || {
        let json = dir.path().join("secrets.json");
        std::fs::write(&json, kubectl.ok(&["get", "secrets", "-o", "json"])).expect("write");
        kubectl.ok(&["replace", "-f", &json.to_string_lossy()]);
    };
    let before = rv();
    replace();
    let rewritten = rv();
    assert_ne!(rewritten, before, "the plaintext Secret was rewritten (encrypted) by the replace");
    replace();
    assert_eq!(rv(), rewritten, "an encrypted, unchanged Secret is not written again");
    let read = kubectl.ok(&["get", "secret", "db", "-o", "jsonpath={.data.password}"]);
    use base64::Engine as _;
    assert_eq!(read.trim(), base64::engine::general_purpose::STANDARD.encode(PLAINTEXT));
}
