//! The OpenAPI documents as real kubectl reads them: `explain` (v3; v2 with
//! `--output plaintext-openapiv2`), `--recursive`, every served kind, validation, in kubectl
//! 1.32 and 1.27 (which reads /openapi/v2 as protobuf before anything else), and the HTTP
//! caching kubectl relies on (hash URLs, ETag).

mod common;

use common::{ApiServer, Kubectl};
use kaji_api::resources::RESOURCES;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

fn setup() -> (tempfile::TempDir, ApiServer) {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = ApiServer::start(&dir.path().join("data"));
    (dir, server)
}

fn kubectls(server: &ApiServer) -> Vec<(&'static str, Kubectl)> {
    vec![("1.32", Kubectl::new(server)), ("1.27", Kubectl::version(server, "1.27"))]
}

#[test]
fn kubectl_explain_describes_fields_from_the_served_schemas() {
    let (_d, server) = setup();
    for (v, k) in kubectls(&server) {
        let out = k.ok(&["explain", "deployment.spec.replicas"]);
        assert!(out.contains("FIELD: replicas <integer>"), "kubectl {v}: {out}");
        assert!(out.contains("Number of desired pods."), "kubectl {v}: {out}");
        let out = k.ok(&["explain", "pods.spec.containers.ports"]);
        assert!(out.contains("containerPort\t<integer> -required-"), "kubectl {v}: {out}");
        // Every served kind, the ones added after this test too.
        for r in RESOURCES {
            let what = if r.group.is_empty() { r.plural.to_string() } else { format!("{}.{}", r.plural, r.group) };
            let out = k.ok(&["explain", &what]);
            assert!(out.contains(&format!("KIND:       {}", r.kind)), "kubectl {v} explain {what}: {out}");
            assert!(out.contains("metadata\t<ObjectMeta>"), "kubectl {v} explain {what}: {out}");
        }
    }
    let k = Kubectl::new(&server);
    let out = k.ok(&["explain", "deployments", "--recursive"]);
    for line in ["template\t<PodTemplateSpec> -required-", "livenessProbe\t<Probe>", "matchLabels\t<map[string]string>"]
    {
        assert!(out.contains(line), "explain --recursive lacks {line:?}:\n{out}");
    }
    // The same schemas through /openapi/v2 (protobuf), as kubectl's older explain reads them.
    let out = k.ok(&["explain", "deployment.spec.strategy", "--output", "plaintext-openapiv2"]);
    assert!(out.contains("RESOURCE: strategy <Object>") && out.contains("rollingUpdate\t<Object>"), "{out}");
}

#[test]
fn kubectl_validation_rejects_unknown_fields_in_every_version() {
    let (_d, server) = setup();
    let manifest = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: NAME}\nspec:\n  BOGUS\
                    selector: {matchLabels: {app: web}}\n  template:\n    metadata: {labels: {app: web}}\n    \
                    spec:\n      containers: [{name: web, image: nginx}]\n";
    for (v, k) in kubectls(&server).into_iter().chain([("1.28", Kubectl::version(&server, "1.28"))]) {
        let name = format!("web-{}", v.replace('.', "-"));
        let bad = k.file("bad.yaml", &manifest.replace("NAME", &name).replace("BOGUS", "replicaz: 2\n  "));
        let out = k.run(&["apply", "--validate=strict", "-f", bad.to_str().expect("utf8")]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "kubectl {v}: {err}");
        assert!(err.contains("unknown field \"spec.replicaz\""), "kubectl {v}: {err}");
        let good = k.file("good.yaml", &manifest.replace("NAME", &name).replace("BOGUS", "replicas: 2\n  "));
        let out = k.ok(&["apply", "--validate=strict", "-f", good.to_str().expect("utf8")]);
        assert_eq!(out.trim(), format!("deployment.apps/{name} created"), "kubectl {v}");
        // An update is a client-side apply: its patch is computed from /openapi/v2's merge keys.
        let more = manifest.replace("NAME", &name).replace("BOGUS", "replicas: 3\n  ");
        let more = more.replace("image: nginx}", "image: nginx, env: [{name: A, value: a}]}");
        let f = k.file("more.yaml", &more);
        let out = k.ok(&["apply", "--validate=strict", "-f", f.to_str().expect("utf8")]);
        assert_eq!(out.trim(), format!("deployment.apps/{name} configured"), "kubectl {v}");
        let env =
            k.ok(&["get", "deploy", &name, "-o", "jsonpath={.spec.replicas} {.spec.template.spec.containers[0].env}"]);
        assert_eq!(env, r#"3 [{"name":"A","value":"a"}]"#, "kubectl {v}");
    }
}

/// `GET path` with extra header lines; returns (status, head, body length).
fn get(addr: &str, path: &str, headers: &str) -> (u16, String, usize) {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(20))).expect("timeout");
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\n{headers}Connection: close\r\n\r\n").expect("send");
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).expect("read");
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let code = head.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    (code, head.to_string(), body.len())
}

fn header(head: &str, name: &str) -> String {
    head.lines()
        .filter_map(|l| l.split_once(':'))
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.trim().to_string())
        .unwrap_or_default()
}

#[test]
fn documents_are_cached_by_hash_and_etag() {
    let (_d, server) = setup();
    let (code, head, _) = get(&server.addr, "/openapi/v3", "");
    assert_eq!(code, 200);
    let etag = header(&head, "etag");
    assert!(etag.starts_with('"'), "{head}");
    assert_eq!(get(&server.addr, "/openapi/v3", &format!("If-None-Match: {etag}\r\n")).0, 304);
    let index: serde_json::Value = {
        let k = Kubectl::new(&server);
        serde_json::from_str(&k.ok(&["get", "--raw", "/openapi/v3"])).expect("index is JSON")
    };
    let url = index["paths"]["apis/apps/v1"]["serverRelativeURL"].as_str().expect("apps/v1 is listed").to_string();
    let (code, head, len) = get(&server.addr, &url, "");
    assert_eq!((code, header(&head, "cache-control").as_str()), (200, "public, immutable"));
    assert!(len > 10_000, "a whole document: {len} bytes");
    let (code, head, _) = get(&server.addr, "/openapi/v3/apis/apps/v1?hash=0000", "");
    assert_eq!((code, header(&head, "location")), (301, url.clone()));
    assert_eq!(get(&server.addr, "/openapi/v3/apis/nope/v1", "").0, 404);
    let (code, head, len) =
        get(&server.addr, "/openapi/v2", "Accept: application/com.github.proto-openapi.spec.v2@v1.0+protobuf\r\n");
    assert_eq!(
        (code, header(&head, "content-type").as_str()),
        (200, "application/com.github.proto-openapi.spec.v2.v1.0+protobuf")
    );
    assert!(len > 10_000, "{len}");
    let (code, head, _) = get(&server.addr, "/openapi/v2", "Accept: application/json\r\n");
    assert_eq!((code, header(&head, "content-type").as_str()), (200, "application/json"));
}
