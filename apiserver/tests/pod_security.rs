//! PodSecurity admission against a real apiserver: namespace labels and the cluster defaults of
//! `--admission-control-config-file` decide which pods are refused, with Kubernetes' messages,
//! and which writes answer `Warning` headers.

mod common;

use common::{http, ApiServer};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// One request; returns (status, Warning header values, body as JSON). A PATCH is a merge
/// patch, or a JSON patch when the body is an array.
fn send(addr: &str, method: &str, path: &str, body: &Value) -> (u16, Vec<String>, Value) {
    let content_type = match (method, body.is_array()) {
        ("PATCH", true) => "application/json-patch+json",
        ("PATCH", false) => "application/merge-patch+json",
        _ => "application/json",
    };
    let body = body.to_string();
    let mut s = TcpStream::connect(addr).expect("connects");
    s.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).expect("writes");
    let mut out = String::new();
    s.read_to_string(&mut out).expect("reads");
    let (head, body) = out.split_once("\r\n\r\n").expect("a response");
    let status = head.split(' ').nth(1).and_then(|c| c.parse().ok()).expect("a status");
    let warnings = head
        .lines()
        .filter_map(|l| {
            l.split_once(": ").filter(|(k, _)| k.eq_ignore_ascii_case("warning")).map(|(_, v)| v.to_string())
        })
        .collect();
    // Bodies come whole or chunked; the JSON object is what lies between the outer braces.
    let json = match (body.find('{'), body.rfind('}')) {
        (Some(a), Some(b)) => serde_json::from_str(&body[a..=b]).expect("a JSON body"),
        _ => Value::Null,
    };
    (status, warnings, json)
}

fn namespace(s: &ApiServer, name: &str, labels: Value) {
    let (code, _, body) =
        send(&s.addr, "POST", "/api/v1/namespaces", &json!({"metadata": {"name": name, "labels": labels}}));
    assert_eq!(code, 201, "{body}");
}

fn pod(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec})
}

fn create_pod(s: &ApiServer, ns: &str, name: &str, spec: Value) -> (u16, Vec<String>, Value) {
    send(&s.addr, "POST", &format!("/api/v1/namespaces/{ns}/pods"), &pod(name, spec))
}

fn privileged() -> Value {
    json!({"containers": [{"name": "c", "image": "busybox", "securityContext": {"privileged": true}}]})
}

fn plain() -> Value {
    json!({"containers": [{"name": "c", "image": "busybox"}]})
}

fn restricted() -> Value {
    json!({
        "securityContext": {"runAsNonRoot": true, "runAsUser": 1000, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [{
            "name": "c",
            "image": "busybox",
            "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}},
        }],
    })
}

fn start(extra: &[&str]) -> (tempfile::TempDir, ApiServer) {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = ApiServer::start_with(&dir.path().join("data"), extra);
    (dir, server)
}

#[test]
fn enforce_restricted_refuses_a_privileged_pod_with_kubernetes_message_and_admits_a_restricted_one() {
    let (_d, s) = start(&[]);
    namespace(&s, "locked", json!({"pod-security.kubernetes.io/enforce": "restricted"}));
    let (code, warnings, body) = create_pod(&s, "locked", "priv", privileged());
    assert_eq!(code, 403, "{body}");
    assert_eq!(body["reason"], "Forbidden");
    assert_eq!(
        body["message"],
        concat!(
            r#"pods "priv" is forbidden: violates PodSecurity "restricted:latest": "#,
            r#"privileged (container "c" must not set securityContext.privileged=true), "#,
            r#"allowPrivilegeEscalation != false (container "c" must set securityContext.allowPrivilegeEscalation=false), "#,
            r#"unrestricted capabilities (container "c" must set securityContext.capabilities.drop=["ALL"]), "#,
            r#"runAsNonRoot != true (pod or container "c" must set securityContext.runAsNonRoot=true), "#,
            r#"seccompProfile (pod or container "c" must set securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost")"#,
        )
    );
    assert!(warnings.is_empty(), "a refused pod gets no warnings: {warnings:?}");
    let (code, _, body) = create_pod(&s, "locked", "ok", restricted());
    assert_eq!(code, 201, "{body}");
    // The same privileged pod is welcome in an unlabelled namespace: privileged is the default.
    let (code, _, body) = create_pod(&s, "default", "priv", privileged());
    assert_eq!(code, 201, "{body}");
}

#[test]
fn enforce_baseline_refuses_host_access_and_admits_a_plain_pod() {
    let (_d, s) = start(&[]);
    namespace(&s, "base", json!({"pod-security.kubernetes.io/enforce": "baseline"}));
    let cases = [
        (
            json!({"volumes": [{"name": "root", "hostPath": {"path": "/"}}], "containers": [{"name": "c", "image": "busybox"}]}),
            r#"violates PodSecurity "baseline:latest": hostPath volumes (volume "root")"#,
        ),
        (
            json!({"hostNetwork": true, "containers": [{"name": "c", "image": "busybox"}]}),
            r#"violates PodSecurity "baseline:latest": host namespaces (hostNetwork=true)"#,
        ),
        (
            privileged(),
            r#"violates PodSecurity "baseline:latest": privileged (container "c" must not set securityContext.privileged=true)"#,
        ),
    ];
    for (i, (spec, why)) in cases.into_iter().enumerate() {
        let (code, _, body) = create_pod(&s, "base", &format!("bad{i}"), spec);
        assert_eq!(code, 403, "{body}");
        assert_eq!(body["message"], format!(r#"pods "bad{i}" is forbidden: {why}"#));
    }
    let (code, _, body) = create_pod(&s, "base", "plain", plain());
    assert_eq!(code, 201, "{body}");
    let (code, list) = http(&s.addr, "GET", "/api/v1/namespaces/base/pods", None, "");
    assert_eq!(code, 200);
    let names: Vec<String> = serde_json::from_str::<Value>(&list).expect("json")["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|p| p["metadata"]["name"].as_str().unwrap_or("").to_string())
        .collect();
    assert_eq!(names, ["plain"], "refused pods are not stored");
}

#[test]
fn warn_restricted_answers_a_warning_for_a_deployment_and_creates_it() {
    let (_d, s) = start(&[]);
    namespace(
        &s,
        "loud",
        json!({"pod-security.kubernetes.io/warn": "restricted", "pod-security.kubernetes.io/warn-version": "v1.30"}),
    );
    let deployment = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "web", "image": "nginx"}]}},
        },
    });
    let (code, warnings, body) = send(&s.addr, "POST", "/apis/apps/v1/namespaces/loud/deployments", &deployment);
    assert_eq!(code, 201, "{body}");
    assert_eq!(
        warnings,
        [concat!(
            r#"299 - "would violate PodSecurity \"restricted:v1.30\": "#,
            r#"allowPrivilegeEscalation != false (container \"web\" must set securityContext.allowPrivilegeEscalation=false), "#,
            r#"unrestricted capabilities (container \"web\" must set securityContext.capabilities.drop=[\"ALL\"]), "#,
            r#"runAsNonRoot != true (pod or container \"web\" must set securityContext.runAsNonRoot=true), "#,
            r#"seccompProfile (pod or container \"web\" must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\")""#,
        )]
    );
    // A pod is warned about too, and admitted; a compliant one is not warned about.
    let (code, warnings, _) = create_pod(&s, "loud", "p", plain());
    assert_eq!((code, warnings.len()), (201, 1));
    let (code, warnings, _) = create_pod(&s, "loud", "q", restricted());
    assert_eq!((code, warnings.len()), (201, 0));
}

#[test]
fn labelling_a_namespace_warns_of_its_violating_pods_and_judges_only_image_changes_after() {
    let (_d, s) = start(&[]);
    namespace(&s, "later", json!({}));
    assert_eq!(create_pod(&s, "later", "priv", privileged()).0, 201);
    assert_eq!(create_pod(&s, "later", "priv2", privileged()).0, 201);
    assert_eq!(create_pod(&s, "later", "plain", plain()).0, 201);
    let (code, warnings, body) = send(
        &s.addr,
        "PATCH",
        "/api/v1/namespaces/later",
        &json!({"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "baseline"}}}),
    );
    assert_eq!(code, 200, "{body}");
    assert_eq!(
        warnings,
        [
            r#"299 - "existing pods in namespace \"later\" violate the new PodSecurity enforce level \"baseline:latest\"""#,
            r#"299 - "priv (and 1 other pod): privileged""#,
        ]
    );
    let (code, _, body) = send(
        &s.addr,
        "PATCH",
        "/api/v1/namespaces/later",
        &json!({"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "strict"}}}),
    );
    assert_eq!(code, 422, "{body}");
    assert_eq!(
        body["message"],
        r#"namespaces "later" is invalid: metadata.labels[pod-security.kubernetes.io/enforce]: Invalid value: "strict": must be one of privileged, baseline, restricted"#
    );
    let path = "/api/v1/namespaces/later/pods/priv";
    let (code, _, body) = send(&s.addr, "PATCH", path, &json!({"metadata": {"labels": {"a": "b"}}}));
    assert_eq!(code, 200, "a metadata change is not judged: {body}");
    let (code, _, body) = send(
        &s.addr,
        "PATCH",
        path,
        &json!([{"op": "replace", "path": "/spec/containers/0/image", "value": "busybox:1.36"}]),
    );
    assert_eq!(code, 403, "{body}");
    assert!(
        body["message"].as_str().unwrap_or("").contains(r#"violates PodSecurity "baseline:latest": privileged"#),
        "{body}"
    );
}

fn admission_config(dir: &std::path::Path, exemptions: &str) -> String {
    let file = dir.join("admission.yaml");
    let text = format!(
        "apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
- name: PodSecurity
  configuration:
    apiVersion: pod-security.admission.config.k8s.io/v1
    kind: PodSecurityConfiguration
    defaults:
      enforce: baseline
    exemptions:
{exemptions}"
    );
    std::fs::write(&file, text).expect("write");
    file.to_string_lossy().into_owned()
}

#[test]
fn a_configured_default_of_baseline_refuses_privileged_pods_outside_the_exemptions() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = admission_config(dir.path(), "      namespaces: [kube-system]\n      runtimeClasses: [kata]\n");
    let s = ApiServer::start_with(&dir.path().join("data"), &["--admission-control-config-file", &file]);
    namespace(&s, "apps", json!({}));
    let (code, _, body) = create_pod(&s, "apps", "priv", privileged());
    assert_eq!(code, 403, "{body}");
    assert_eq!(
        body["message"],
        r#"pods "priv" is forbidden: violates PodSecurity "baseline:latest": privileged (container "c" must not set securityContext.privileged=true)"#
    );
    assert_eq!(create_pod(&s, "apps", "plain", plain()).0, 201);
    // Exempt namespace, exempt runtime class, and a namespace labelled back to privileged.
    assert_eq!(create_pod(&s, "kube-system", "priv", privileged()).0, 201);
    // (The RuntimeClass admission plugin refuses pods naming a class that does not exist.)
    let rc = json!({"metadata": {"name": "kata"}, "handler": "kata"});
    assert_eq!(send(&s.addr, "POST", "/apis/node.k8s.io/v1/runtimeclasses", &rc).0, 201);
    let mut kata = privileged();
    kata["runtimeClassName"] = json!("kata");
    assert_eq!(create_pod(&s, "apps", "kata", kata).0, 201);
    namespace(&s, "open", json!({"pod-security.kubernetes.io/enforce": "privileged"}));
    assert_eq!(create_pod(&s, "open", "priv", privileged()).0, 201);
}

#[test]
fn an_exempt_username_is_never_judged() {
    // Everyone on the insecure port is system:unsecured: exempt it, then exempt someone else.
    for (user, want) in [("system:unsecured", 201), ("system:someone-else", 403)] {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = admission_config(dir.path(), &format!("      usernames: [\"{user}\"]\n"));
        let s = ApiServer::start_with(&dir.path().join("data"), &["--admission-control-config-file", &file]);
        namespace(&s, "apps", json!({"pod-security.kubernetes.io/enforce": "restricted"}));
        let (code, _, body) = create_pod(&s, "apps", "priv", privileged());
        assert_eq!(code, want, "exempt {user}: {body}");
    }
}

#[test]
fn a_bad_admission_configuration_stops_the_start() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = std::path::PathBuf::from(admission_config(dir.path(), "      namespaces: [kube-system]\n"));
    let text = std::fs::read_to_string(&path).expect("read").replace("enforce: baseline", "enforce: strict");
    std::fs::write(&path, text).expect("write");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kaji-apiserver"))
        .args(["--insecure-port", "0", "--data-dir"])
        .arg(dir.path().join("data"))
        .arg("--admission-control-config-file")
        .arg(&path)
        .output()
        .expect("runs");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("defaults.enforce: Invalid value: \"strict\""), "{err}");
}

#[test]
fn kubectl_prints_the_refusal_and_the_warnings_as_against_kubernetes() {
    let (_d, s) = start(&[]);
    let k = common::Kubectl::new(&s);
    k.ok(&["create", "namespace", "apps"]);
    let out = k.ok(&[
        "label",
        "namespace",
        "apps",
        "pod-security.kubernetes.io/enforce=baseline",
        "pod-security.kubernetes.io/warn=restricted",
    ]);
    assert!(out.contains("namespace/apps labeled"), "{out}");
    let refused = k.run(&["run", "priv", "-n", "apps", "--image=busybox", "--privileged"]);
    assert!(!refused.status.success());
    assert_eq!(
        String::from_utf8_lossy(&refused.stderr).trim(),
        r#"Error from server (Forbidden): pods "priv" is forbidden: violates PodSecurity "baseline:latest": privileged (container "priv" must not set securityContext.privileged=true)"#
    );
    let admitted = k.run(&["create", "deployment", "web", "-n", "apps", "--image=nginx"]);
    assert!(admitted.status.success(), "{}", String::from_utf8_lossy(&admitted.stderr));
    let stderr = String::from_utf8_lossy(&admitted.stderr);
    assert!(
        stderr.starts_with(r#"Warning: would violate PodSecurity "restricted:latest": allowPrivilegeEscalation != false (container "nginx" must set securityContext.allowPrivilegeEscalation=false)"#),
        "{stderr}"
    );
}
