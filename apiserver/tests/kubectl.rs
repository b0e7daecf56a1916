//! The real kubectl against the real kaji-apiserver binary.

mod common;

use common::{http, ApiServer, Kubectl};
use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::sync::mpsc;
use std::time::{Duration, Instant};

const POD: &str = "apiVersion: v1
kind: Pod
metadata:
  name: web
  labels: {app: web}
spec:
  containers:
  - name: web
    image: nginx:1.25
    ports: [{containerPort: 80}]
";

fn setup() -> (tempfile::TempDir, ApiServer) {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = ApiServer::start(&dir.path().join("data"));
    (dir, server)
}

#[test]
fn kubectl_creates_lists_and_deletes_a_pod() {
    let (_dir, server) = setup();
    let k = Kubectl::new(&server);
    let f = k.file("pod.yaml", POD);
    let f = f.to_str().expect("utf8 path");
    assert_eq!(k.ok(&["create", "-f", f]).trim(), "pod/web created");

    let table = k.ok(&["get", "pods"]);
    let mut lines = table.lines();
    assert_eq!(
        lines.next().map(|h| h.split_whitespace().collect::<Vec<_>>()),
        Some(vec!["NAME", "READY", "STATUS", "RESTARTS", "AGE"])
    );
    let row: Vec<_> = lines.next().expect("one row").split_whitespace().collect();
    assert_eq!(&row[..4], ["web", "0/1", "Pending", "0"]);

    let wide = k.ok(&["get", "pods", "-o", "wide"]);
    assert!(wide.lines().next().expect("header").contains("IP") && wide.contains("NOMINATED NODE"), "{wide}");

    let yaml = k.ok(&["get", "pod", "web", "-o", "yaml"]);
    assert!(
        yaml.contains("uid: ") && yaml.contains("restartPolicy: Always") && yaml.contains("phase: Pending"),
        "{yaml}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&k.ok(&["get", "pod", "web", "-o", "json"])).expect("json output");
    assert_eq!(json["kind"], "Pod");
    assert_eq!(json["spec"]["containers"][0]["ports"][0]["protocol"], "TCP", "defaults applied");

    assert!(k.ok(&["get", "pods", "-l", "app=web", "-o", "name"]).contains("pod/web"));
    let none = k.run(&["get", "pods", "-l", "app=other"]);
    assert!(String::from_utf8_lossy(&none.stderr).contains("No resources found in default namespace."));
    assert!(k.ok(&["get", "pods", "--field-selector", "status.phase=Pending", "-o", "name"]).contains("pod/web"));
    assert!(!k.ok(&["get", "pods", "--field-selector", "status.phase=Running", "-o", "name"]).contains("pod/web"));
    let bad_field = k.run(&["get", "pods", "--field-selector", "spec.colour=red"]);
    assert!(String::from_utf8_lossy(&bad_field.stderr).contains("field label not supported: spec.colour"));

    let all = k.ok(&["get", "pods", "-A"]);
    assert!(all.starts_with("NAMESPACE") && all.contains("default") && all.contains("web"), "{all}");
    let svcs = k.ok(&["get", "svc", "-A"]);
    assert!(svcs.contains("kubernetes") && svcs.contains("10.96.0.1"), "{svcs}");

    assert_eq!(k.ok(&["delete", "pod", "web"]).trim(), "pod \"web\" deleted");
    let gone = k.run(&["get", "pod", "web"]);
    assert!(!gone.status.success());
    assert!(String::from_utf8_lossy(&gone.stderr).contains("Error from server (NotFound): pods \"web\" not found"));
}

#[test]
fn kubectl_reports_invalid_and_unknown_fields_like_kubernetes() {
    let (_dir, server) = setup();
    let k = Kubectl::new(&server);
    let bad =
        k.file("bad.yaml", "apiVersion: v1\nkind: Pod\nmetadata: {name: bad}\nspec:\n  containers:\n  - name: web\n");
    let out = k.run(&["create", "-f", bad.to_str().expect("utf8")]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("The Pod \"bad\" is invalid: spec.containers[0].image: Required value"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bogus = k.file("bogus.yaml", "apiVersion: v1\nkind: Pod\nmetadata: {name: bogus}\nspec:\n  bogusField: 1\n  containers:\n  - {name: web, image: x}\n");
    let out = k.run(&["create", "-f", bogus.to_str().expect("utf8")]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("strict decoding error: unknown field \"spec.bogusField\""));
    let out = k.run(&["create", "-f", bogus.to_str().expect("utf8"), "--validate=warn"]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown field \"spec.bogusField\""), "warning shown");
    let stored = k.ok(&["get", "pod", "bogus", "-o", "json"]);
    assert!(!stored.contains("bogusField"), "unknown fields are dropped");
    // Nothing half-written: the invalid pod does not exist.
    assert!(!k.run(&["get", "pod", "bad"]).status.success());
}

#[test]
fn kubectl_get_watch_sees_a_change() {
    let (_dir, server) = setup();
    let k = Kubectl::new(&server);
    let f = k.file("pod.yaml", POD);
    k.ok(&["create", "-f", f.to_str().expect("utf8")]);
    let mut child = k
        .command()
        .args(["get", "pods", "-w", "--output-watch-events"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("kubectl -w");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let next = |what: &str| {
        rx.recv_timeout(Duration::from_secs(15)).unwrap_or_else(|_| panic!("no {what} line from kubectl get -w"))
    };
    assert!(next("header").starts_with("EVENT"));
    assert!(next("initial row").contains("web"));
    k.ok(&["label", "pod", "web", "tier=frontend"]);
    let changed = next("change");
    assert!(changed.starts_with("MODIFIED") && changed.contains("web"), "{changed}");
    k.ok(&["delete", "pod", "web"]);
    let deleted = next("delete");
    assert!(deleted.starts_with("DELETED"), "{deleted}");
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn kubectl_version_and_api_resources_come_from_discovery() {
    let (_dir, server) = setup();
    let k = Kubectl::new(&server);
    let v: serde_json::Value = serde_json::from_str(&k.ok(&["version", "-o", "json"])).expect("json");
    assert_eq!(v["serverVersion"]["minor"], kaji_api::version::MINOR);
    let res = k.ok(&["api-resources"]);
    let deploy = res.lines().find(|l| l.starts_with("deployments")).expect("deployments listed");
    assert_eq!(
        deploy.split_whitespace().collect::<Vec<_>>(),
        ["deployments", "deploy", "apps/v1", "true", "Deployment"]
    );
    assert!(res.lines().any(|l| l.starts_with("leases") && l.contains("coordination.k8s.io/v1")));
}

#[test]
fn bound_pods_are_deleted_gracefully_until_the_node_confirms() {
    let (_dir, server) = setup();
    let k = Kubectl::new(&server);
    let f = k.file("pod.yaml", POD);
    k.ok(&["create", "-f", f.to_str().expect("utf8")]);
    let binding =
        r#"{"apiVersion":"v1","kind":"Binding","metadata":{"name":"web"},"target":{"kind":"Node","name":"node-1"}}"#;
    let (code, _) =
        http(&server.addr, "POST", "/api/v1/namespaces/default/pods/web/binding", Some(binding), "application/json");
    assert_eq!(code, 201);
    let (code, body) =
        http(&server.addr, "POST", "/api/v1/namespaces/default/pods/web/binding", Some(binding), "application/json");
    assert_eq!(code, 409, "{body}");
    assert_eq!(k.ok(&["get", "pod", "web", "-o", "jsonpath={.spec.nodeName}"]), "node-1");
    k.ok(&["delete", "pod", "web", "--wait=false"]);
    let ts = k.ok(&[
        "get",
        "pod",
        "web",
        "-o",
        "jsonpath={.metadata.deletionTimestamp} {.metadata.deletionGracePeriodSeconds}",
    ]);
    assert!(ts.ends_with(" 30"), "terminating with the pod's grace period: {ts}");
    assert!(k.ok(&["get", "pod", "web"]).contains("Terminating"));
    // The node agent confirms with grace 0.
    k.ok(&["delete", "pod", "web", "--grace-period=0", "--force"]);
    assert!(!k.run(&["get", "pod", "web"]).status.success());
}

#[test]
fn acknowledged_writes_survive_kill_9_under_load() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let mut server = ApiServer::start(&data);
    let addr = server.addr.clone();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writers: Vec<_> = (0..4)
        .map(|w| {
            let (addr, stop) = (addr.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut acked = Vec::new();
                for i in 0.. {
                    if stop.load(std::sync::atomic::Ordering::SeqCst) {
                        break;
                    }
                    let name = format!("cm-{w}-{i}");
                    let body = format!(r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"{name}"}},"data":{{"i":"{i}"}}}}"#);
                    let (code, _) = http(&addr, "POST", "/api/v1/namespaces/default/configmaps", Some(&body), "application/json");
                    if code == 201 {
                        acked.push(name);
                    } else if code == 0 {
                        break;
                    }
                }
                acked
            })
        })
        .collect();
    let started = Instant::now();
    std::thread::sleep(Duration::from_millis(1500));
    server.kill9();
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let acked: Vec<String> = writers.into_iter().flat_map(|w| w.join().expect("writer")).collect();
    assert!(acked.len() > 20, "load was applied ({} writes in {:?})", acked.len(), started.elapsed());
    drop(server);
    let server = ApiServer::start(&data);
    let (code, body) = http(&server.addr, "GET", "/api/v1/namespaces/default/configmaps", None, "");
    assert_eq!(code, 200);
    let list: serde_json::Value = serde_json::from_str(&body).expect("list json");
    let names: std::collections::HashSet<&str> =
        list["items"].as_array().expect("items").iter().filter_map(|i| i["metadata"]["name"].as_str()).collect();
    let lost: Vec<&String> = acked.iter().filter(|n| !names.contains(n.as_str())).collect();
    assert!(lost.is_empty(), "{} acknowledged writes lost after kill -9: {:?}", lost.len(), &lost[..lost.len().min(5)]);
}

#[test]
fn kubectl_apply_updates_a_changed_manifest_with_a_strategic_merge_patch() {
    let (_dir, server) = setup();
    let k = Kubectl::new(&server);
    let v1 = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web, labels: {app: web}}\nspec:\n  selector: {matchLabels: {app: web}}\n  template:\n    metadata: {labels: {app: web}}\n    spec:\n      containers:\n      - name: web\n        image: nginx:1.25\n        env: [{name: A, value: '1'}, {name: B, value: '2'}]\n      - name: side\n        image: busybox\n";
    let v2 = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web, labels: {app: web, tier: frontend}}\nspec:\n  selector: {matchLabels: {app: web}}\n  template:\n    metadata: {labels: {app: web}}\n    spec:\n      containers:\n      - name: web\n        image: nginx:1.26\n        env: [{name: B, value: '2'}, {name: C, value: '3'}]\n      - name: side\n        image: busybox\n";
    let f1 = k.file("v1.yaml", v1);
    let f2 = k.file("v2.yaml", v2);
    assert_eq!(k.ok(&["apply", "-f", f1.to_str().expect("utf8")]).trim(), "deployment.apps/web created");
    assert_eq!(k.ok(&["apply", "-f", f1.to_str().expect("utf8")]).trim(), "deployment.apps/web unchanged");
    assert_eq!(k.ok(&["apply", "-f", f2.to_str().expect("utf8")]).trim(), "deployment.apps/web configured");
    let d: serde_json::Value = serde_json::from_str(&k.ok(&["get", "deploy", "web", "-o", "json"])).expect("json");
    let c = &d["spec"]["template"]["spec"]["containers"];
    assert_eq!(c[0]["image"], "nginx:1.26");
    assert_eq!(
        c[0]["env"],
        serde_json::json!([{"name": "B", "value": "2"}, {"name": "C", "value": "3"}]),
        "A removed, C added"
    );
    assert_eq!(c[1]["name"], "side");
    assert_eq!(d["metadata"]["labels"]["tier"], "frontend");
    assert_eq!(d["metadata"]["generation"], 2);
    let last = d["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"]
        .as_str()
        .expect("annotation kept");
    assert!(last.ends_with('\n') && last.contains("nginx:1.26"));
    k.ok(&["set", "image", "deployment/web", "side=busybox:1.36"]);
    assert_eq!(
        k.ok(&["get", "deploy", "web", "-o", "jsonpath={.spec.template.spec.containers[1].image}"]),
        "busybox:1.36"
    );
    k.ok(&["rollout", "restart", "deployment/web"]);
    assert!(k
        .ok(&["get", "deploy", "web", "-o", "jsonpath={.spec.template.metadata.annotations}"])
        .contains("kubectl.kubernetes.io/restartedAt"));
}
