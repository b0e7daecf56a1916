//! kubectl's typed `create` commands send protobuf bodies (`application/vnd.kubernetes.protobuf`);
//! kaji stores what the same command would have stored through JSON.

mod common;

use base64::Engine as _;
use common::{ApiServer, Kubectl};
use serde_json::{json, Value};

fn setup() -> (tempfile::TempDir, ApiServer) {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = ApiServer::start(&dir.path().join("data"));
    (dir, server)
}

fn get(k: &Kubectl, args: &[&str]) -> Value {
    let mut all = vec!["get"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["-o", "json"]);
    serde_json::from_str(&k.ok(&all)).expect("kubectl prints JSON")
}

/// Run a `kubectl create <what>` through JSON instead: `--dry-run=client -o json`, then
/// `create -f` into `namespace`.
fn create_through_json(k: &Kubectl, args: &[&str], namespace: &str) {
    let mut dry = vec!["create", "--dry-run=client", "-o", "json"];
    dry.extend_from_slice(args);
    let manifest = k.file(&format!("{namespace}.json"), &k.ok(&dry));
    k.ok(&["create", "-n", namespace, "-f", manifest.to_str().expect("utf8 path")]);
}

/// Go's JSON leaves out a non-pointer field's `0`/`false` (`omitempty`); protobuf sends it.
/// Kubernetes reads both the same way, so comparisons drop them.
fn without_zeros(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(_, v)| !matches!(v, Value::Null | Value::Bool(false)) && v.as_i64() != Some(0))
                .map(|(k, v)| (k.clone(), without_zeros(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(without_zeros).collect()),
        other => other.clone(),
    }
}

#[test]
fn kubectl_create_namespace_works_over_protobuf() {
    let (_dir, server) = setup();
    let k = Kubectl::new(&server);
    assert_eq!(k.ok(&["create", "namespace", "foo"]).trim(), "namespace/foo created");
    let ns = get(&k, &["namespace", "foo"]);
    assert_eq!(ns["status"]["phase"], "Active");
    assert_eq!(ns["metadata"]["labels"]["kubernetes.io/metadata.name"], "foo");
    assert!(ns["metadata"].get("generation").is_none(), "the create path owns generation: {ns}");
}

#[test]
fn kubectl_create_deployment_stores_what_kubectl_set() {
    let (_dir, server) = setup();
    let k = Kubectl::new(&server);
    let args = ["deployment", "web", "--image=busybox", "--replicas=2", "--", "sleep", "1"];
    let mut create = vec!["create"];
    create.extend_from_slice(&args);
    assert_eq!(k.ok(&create).trim(), "deployment.apps/web created");
    let d = get(&k, &["deployment", "web"]);
    assert_eq!(d["metadata"]["labels"], json!({"app": "web"}));
    assert_eq!(d["spec"]["replicas"], 2);
    assert_eq!(d["spec"]["selector"], json!({"matchLabels": {"app": "web"}}));
    let template = &d["spec"]["template"];
    assert_eq!(template["metadata"]["labels"], json!({"app": "web"}));
    let c = &template["spec"]["containers"][0];
    assert_eq!(
        (&c["name"], &c["image"], &c["command"]),
        (&json!("busybox"), &json!("busybox"), &json!(["sleep", "1"]))
    );
    assert_eq!(d["spec"]["strategy"]["type"], "RollingUpdate", "defaulted as a JSON create is");

    k.ok(&["create", "namespace", "json"]);
    create_through_json(&k, &args, "json");
    let from_json = get(&k, &["-n", "json", "deployment", "web"]);
    assert_eq!(without_zeros(&d["spec"]), without_zeros(&from_json["spec"]));

    k.ok(&["create", "deployment", "zero", "--image=nginx", "--replicas=0"]);
    assert_eq!(get(&k, &["deployment", "zero"])["spec"]["replicas"], 0, "an explicit 0 is not defaulted to 1");
}

#[test]
fn kubectl_create_configmap_and_secret_round_trip_binary_data() {
    let (_dir, server) = setup();
    let k = Kubectl::new(&server);
    let bytes: Vec<u8> = (0..=255u8).rev().collect();
    let blob = k.file("blob.bin", "");
    std::fs::write(&blob, &bytes).expect("write blob.bin");
    let text = k.file("text.txt", "hello\n");
    let blob_arg = format!("--from-file=blob={}", blob.display());
    let text_arg = format!("--from-file={}", text.display());
    let args = ["configmap", "cm", "--from-literal=a=b", blob_arg.as_str(), text_arg.as_str()];
    let mut create = vec!["create"];
    create.extend_from_slice(&args);
    assert_eq!(k.ok(&create).trim(), "configmap/cm created");
    let cm = get(&k, &["configmap", "cm"]);
    let b64 = base64::engine::general_purpose::STANDARD.encode(&bytes);
    assert_eq!(cm["data"], json!({"a": "b", "text.txt": "hello\n"}));
    assert_eq!(cm["binaryData"], json!({"blob": b64}));

    k.ok(&["create", "namespace", "json"]);
    create_through_json(&k, &args, "json");
    let from_json = get(&k, &["-n", "json", "configmap", "cm"]);
    assert_eq!((&cm["data"], &cm["binaryData"]), (&from_json["data"], &from_json["binaryData"]));

    let secret_file = format!("--from-file=key={}", blob.display());
    assert_eq!(
        k.ok(&["create", "secret", "generic", "s", "--from-literal=x=y", &secret_file]).trim(),
        "secret/s created"
    );
    let s = get(&k, &["secret", "s"]);
    assert_eq!(s["data"], json!({"x": "eQ==", "key": b64}));
    assert_eq!(s["type"], "Opaque");
}

#[test]
fn kubectl_create_service_and_serviceaccount_work_over_protobuf() {
    let (_dir, server) = setup();
    let k = Kubectl::new(&server);
    assert_eq!(k.ok(&["create", "service", "clusterip", "svc", "--tcp=80:8080"]).trim(), "service/svc created");
    let svc = get(&k, &["service", "svc"]);
    assert_eq!(svc["spec"]["ports"][0]["port"], 80);
    assert_eq!(svc["spec"]["ports"][0]["targetPort"], 8080, "an IntOrString int");
    assert_eq!(svc["spec"]["selector"], json!({"app": "svc"}));
    assert_eq!(k.ok(&["create", "serviceaccount", "sa"]).trim(), "serviceaccount/sa created");
}
