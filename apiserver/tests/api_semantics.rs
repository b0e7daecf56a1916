//! Kubernetes API semantics users rely on, against the real binary (raw HTTP and kubectl).

mod common;

use common::{http, next_event, open_watch, ApiServer, Kubectl};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

fn setup() -> (tempfile::TempDir, ApiServer) {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = ApiServer::start(&dir.path().join("data"));
    (dir, server)
}

fn post(s: &ApiServer, path: &str, body: &Value) -> (u16, Value) {
    let (code, text) = http(&s.addr, "POST", path, Some(&body.to_string()), "application/json");
    (code, serde_json::from_str(&text).unwrap_or(Value::Null))
}

fn get(s: &ApiServer, path: &str) -> (u16, Value) {
    let (code, text) = http(&s.addr, "GET", path, None, "");
    (code, serde_json::from_str(&text).unwrap_or(Value::Null))
}

fn send(s: &ApiServer, method: &str, path: &str, body: &Value, ct: &str) -> (u16, Value) {
    let (code, text) = http(&s.addr, method, path, Some(&body.to_string()), ct);
    (code, serde_json::from_str(&text).unwrap_or(Value::Null))
}

fn cm(name: &str, labels: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": labels}, "data": {"k": "v"}})
}

fn svc(name: &str, extra: Value) -> Value {
    let mut s = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
                       "spec": {"selector": {"app": name}, "ports": [{"port": 80}]}});
    if let (Some(spec), Some(extra)) = (s["spec"].as_object_mut(), extra.as_object()) {
        spec.extend(extra.clone());
    }
    s
}

#[test]
fn terminating_and_missing_namespaces_refuse_new_objects() {
    let (_d, s) = setup();
    let (code, _) = post(&s, "/api/v1/namespaces", &json!({"metadata": {"name": "team"}}));
    assert_eq!(code, 201);
    let (code, body) = post(&s, "/api/v1/namespaces/nope/configmaps", &cm("a", json!({})));
    assert_eq!((code, body["message"].as_str()), (404, Some("namespaces \"nope\" not found")));

    let (code, ns) = send(&s, "DELETE", "/api/v1/namespaces/team", &json!({}), "application/json");
    assert_eq!(code, 200);
    assert_eq!(ns["status"]["phase"], "Terminating");
    assert!(ns["metadata"]["deletionTimestamp"].is_string());
    let (code, body) = post(&s, "/api/v1/namespaces/team/configmaps", &cm("a", json!({})));
    assert_eq!(code, 403, "{body}");
    assert!(body["message"].as_str().unwrap_or("").contains("because it is being terminated"));

    // The namespace controller's last step: empty spec.finalizers through /finalize.
    let mut fin = ns.clone();
    fin["spec"]["finalizers"] = json!([]);
    let (code, _) = send(&s, "PUT", "/api/v1/namespaces/team/finalize", &fin, "application/json");
    assert_eq!(code, 200);
    assert_eq!(get(&s, "/api/v1/namespaces/team").0, 404);
}

#[test]
fn cluster_ips_are_unique_across_restarts_and_released_on_delete() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let first_ip = {
        let s = ApiServer::start(&data);
        let (code, a) = post(&s, "/api/v1/namespaces/default/services", &svc("a", json!({})));
        assert_eq!(code, 201);
        a["spec"]["clusterIP"].as_str().expect("allocated").to_string()
    };
    let s = ApiServer::start(&data);
    let (_, b) = post(&s, "/api/v1/namespaces/default/services", &svc("b", json!({})));
    let second_ip = b["spec"]["clusterIP"].as_str().expect("allocated").to_string();
    assert_ne!(first_ip, second_ip, "no address handed out twice across a restart");
    assert_ne!(second_ip, "10.96.0.1", "the kubernetes Service keeps the first address");

    let (code, body) = post(&s, "/api/v1/namespaces/default/services", &svc("c", json!({"clusterIP": first_ip})));
    assert_eq!(code, 422, "{body}");
    assert!(body["message"].as_str().unwrap_or("").contains("provided IP is already allocated"), "{body}");
    let (code, body) = post(&s, "/api/v1/namespaces/default/services", &svc("d", json!({"clusterIP": "192.168.0.1"})));
    assert_eq!(code, 422, "{body}");

    assert_eq!(send(&s, "DELETE", "/api/v1/namespaces/default/services/a", &json!({}), "application/json").0, 200);
    let (code, c) = post(&s, "/api/v1/namespaces/default/services", &svc("c", json!({"clusterIP": first_ip})));
    assert_eq!((code, c["spec"]["clusterIP"].as_str()), (201, Some(first_ip.as_str())), "released on delete");

    let (code, np) = post(&s, "/api/v1/namespaces/default/services", &svc("np", json!({"type": "NodePort"})));
    assert_eq!(code, 201);
    let port = np["spec"]["ports"][0]["nodePort"].as_u64().expect("nodePort allocated");
    assert!((30000..=32767).contains(&port));
    let (code, _) = post(
        &s,
        "/api/v1/namespaces/default/services",
        &svc("np2", json!({"type": "NodePort", "ports": [{"port": 80, "nodePort": port}]})),
    );
    assert_eq!(code, 422, "a taken nodePort is refused");
    // An update that leaves clusterIP unset keeps the allocated one.
    let mut upd = np.clone();
    upd["spec"].as_object_mut().expect("spec").remove("clusterIP");
    upd["spec"].as_object_mut().expect("spec").remove("clusterIPs");
    let (code, after) = send(&s, "PUT", "/api/v1/namespaces/default/services/np", &upd, "application/json");
    assert_eq!(code, 200, "{after}");
    assert_eq!(after["spec"]["clusterIP"], np["spec"]["clusterIP"]);
}

#[test]
fn lists_page_with_limit_and_continue() {
    let (_d, s) = setup();
    for i in 0..5 {
        assert_eq!(post(&s, "/api/v1/namespaces/default/configmaps", &cm(&format!("cm-{i}"), json!({}))).0, 201);
    }
    let (_, page) = get(&s, "/api/v1/namespaces/default/configmaps?limit=2");
    assert_eq!(page["items"].as_array().map(Vec::len), Some(2));
    assert_eq!(page["metadata"]["remainingItemCount"], 3);
    let token = page["metadata"]["continue"].as_str().expect("continue token");
    let (_, rest) = get(&s, &format!("/api/v1/namespaces/default/configmaps?limit=10&continue={}", urlencode(token)));
    let names: Vec<&str> =
        rest["items"].as_array().expect("items").iter().filter_map(|i| i["metadata"]["name"].as_str()).collect();
    assert_eq!(names, ["cm-2", "cm-3", "cm-4"]);
    assert!(rest["metadata"]["continue"].is_null());
    assert_eq!(get(&s, "/api/v1/namespaces/default/configmaps?continue=garbage").0, 400);
    let k = Kubectl::new(&s);
    assert_eq!(
        k.ok(&["get", "configmaps", "--chunk-size=1", "-o", "name"]).lines().filter(|l| l.contains("cm-")).count(),
        5
    );
}

fn urlencode(s: &str) -> String {
    s.bytes().map(|b| if b.is_ascii_alphanumeric() { (b as char).to_string() } else { format!("%{b:02X}") }).collect()
}

#[test]
fn finalizers_hold_a_deleted_object_until_removed_and_deletecollection_honours_selectors() {
    let (_d, s) = setup();
    let mut held = cm("held", json!({"keep": "no"}));
    held["metadata"]["finalizers"] = json!(["example.com/hold"]);
    assert_eq!(post(&s, "/api/v1/namespaces/default/configmaps", &held).0, 201);
    let (code, marked) =
        send(&s, "DELETE", "/api/v1/namespaces/default/configmaps/held", &json!({}), "application/json");
    assert_eq!(code, 200);
    assert!(marked["metadata"]["deletionTimestamp"].is_string(), "only marked: {marked}");
    assert_eq!(get(&s, "/api/v1/namespaces/default/configmaps/held").0, 200);
    let (code, _) = send(
        &s,
        "PATCH",
        "/api/v1/namespaces/default/configmaps/held",
        &json!({"metadata": {"finalizers": null}}),
        "application/merge-patch+json",
    );
    assert_eq!(code, 200);
    assert_eq!(get(&s, "/api/v1/namespaces/default/configmaps/held").0, 404, "removing the last finalizer deletes it");

    for (n, keep) in [("a", "no"), ("b", "yes"), ("c", "no")] {
        assert_eq!(post(&s, "/api/v1/namespaces/default/configmaps", &cm(n, json!({"keep": keep}))).0, 201);
    }
    let (code, deleted) = send(
        &s,
        "DELETE",
        "/api/v1/namespaces/default/configmaps?labelSelector=keep%3Dno",
        &json!({}),
        "application/json",
    );
    assert_eq!(code, 200);
    assert_eq!(deleted["items"].as_array().map(Vec::len), Some(2));
    let (_, left) = get(&s, "/api/v1/namespaces/default/configmaps");
    let names: Vec<&str> =
        left["items"].as_array().expect("items").iter().filter_map(|i| i["metadata"]["name"].as_str()).collect();
    assert_eq!(names, ["b"]);
}

#[test]
fn propagation_policies_hold_the_object_with_the_garbage_collector_finalizers() {
    let (_d, s) = setup();
    let path = |n: &str| format!("/api/v1/namespaces/default/configmaps/{n}");
    for n in ["fg", "orph", "bg", "legacy"] {
        assert_eq!(post(&s, "/api/v1/namespaces/default/configmaps", &cm(n, json!({}))).0, 201);
    }
    let finalizers = |n: &str| get(&s, &path(n)).1["metadata"]["finalizers"].clone();

    // Foreground from the query string: marked, held by foregroundDeletion.
    let (code, fg) =
        send(&s, "DELETE", &format!("{}?propagationPolicy=Foreground", path("fg")), &json!({}), "application/json");
    assert_eq!(code, 200, "{fg}");
    assert!(fg["metadata"]["deletionTimestamp"].is_string());
    assert_eq!(finalizers("fg"), json!(["foregroundDeletion"]));
    // Deleting it again in the background takes the finalizer away, and the object with it.
    let (code, _) = send(&s, "DELETE", &path("fg"), &json!({"propagationPolicy": "Background"}), "application/json");
    assert_eq!(code, 200);
    assert_eq!(get(&s, &path("fg")).0, 404);

    // Orphan as kubectl sends it.
    let k = Kubectl::new(&s);
    k.ok(&["delete", "configmap", "orph", "--cascade=orphan", "--wait=false"]);
    assert_eq!(finalizers("orph"), json!(["orphan"]));

    // No policy: gone at once, as Background.
    assert_eq!(send(&s, "DELETE", &path("bg"), &json!({}), "application/json").0, 200);
    assert_eq!(get(&s, &path("bg")).0, 404);

    // orphanDependents=false on an object that waits answers 202.
    let mut held = cm("held", json!({}));
    held["metadata"]["finalizers"] = json!(["example.com/hold"]);
    assert_eq!(post(&s, "/api/v1/namespaces/default/configmaps", &held).0, 201);
    let (code, _) = send(&s, "DELETE", &path("held"), &json!({"orphanDependents": false}), "application/json");
    assert_eq!(code, 202);

    let (code, body) =
        send(&s, "DELETE", &path("legacy"), &json!({"propagationPolicy": "Sideways"}), "application/json");
    assert_eq!((code, body["reason"].as_str()), (422, Some("Invalid")), "{body}");
    assert_eq!(
        body["message"],
        r#"DeleteOptions.meta.k8s.io "" is invalid: propagationPolicy: Unsupported value: "Sideways": supported values: "Foreground", "Background", "Orphan", "nil""#
    );
    assert_eq!(get(&s, &path("legacy")).0, 200, "a refused delete deletes nothing");
}

#[test]
fn a_write_naming_another_uid_is_refused() {
    let (_d, s) = setup();
    let (_, made) = post(&s, "/api/v1/namespaces/default/configmaps", &cm("c", json!({})));
    let path = "/api/v1/namespaces/default/configmaps/c";
    // The garbage collector's guard against a namesake: the uid in a patch must be the object's.
    let stale = json!({"metadata": {"uid": "not-this-one", "labels": {"a": "b"}}});
    let (code, body) = send(&s, "PATCH", path, &stale, "application/strategic-merge-patch+json");
    assert_eq!(code, 422, "{body}");
    assert!(body["message"].as_str().unwrap_or("").contains("metadata.uid"), "{body}");
    let same = json!({"metadata": {"uid": made["metadata"]["uid"], "labels": {"a": "b"}}});
    assert_eq!(send(&s, "PATCH", path, &same, "application/strategic-merge-patch+json").0, 200);
    // A PUT carrying another uid fails its precondition, as in Kubernetes.
    let mut put = cm("c", json!({}));
    put["metadata"]["uid"] = json!("not-this-one");
    let (code, body) = send(&s, "PUT", path, &put, "application/json");
    assert_eq!((code, body["reason"].as_str()), (409, Some("Conflict")), "{body}");
}

#[test]
fn kubectl_scale_and_describe_work_on_deployments() {
    let (_d, s) = setup();
    let k = Kubectl::new(&s);
    let deploy = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\nspec:\n  selector: {matchLabels: {app: d}}\n  template:\n    metadata: {labels: {app: d}}\n    spec: {containers: [{name: c, image: busybox}]}\n";
    let f = k.file("d.yaml", deploy);
    k.ok(&["create", "-f", f.to_str().expect("utf8")]);
    assert_eq!(k.ok(&["scale", "deployment", "d", "--replicas=3"]).trim(), "deployment.apps/d scaled");
    assert_eq!(k.ok(&["get", "deploy", "d", "-o", "jsonpath={.spec.replicas} {.metadata.generation}"]), "3 2");
    // --current-replicas sends a PUT on /scale without a Content-Type.
    assert_eq!(
        k.ok(&["scale", "deployment", "d", "--current-replicas=3", "--replicas=1"]).trim(),
        "deployment.apps/d scaled"
    );
    let stale = k.run(&["scale", "deployment", "d", "--current-replicas=3", "--replicas=2"]);
    assert!(!stale.status.success(), "precondition on current replicas");
    let (_, scale) = get(&s, "/apis/apps/v1/namespaces/default/deployments/d/scale");
    assert_eq!(
        (scale["kind"].as_str(), scale["spec"]["replicas"].as_i64(), scale["status"]["selector"].as_str()),
        (Some("Scale"), Some(1), Some("app=d"))
    );
    let described = k.ok(&["describe", "deployment", "d"]);
    assert!(described.contains("Replicas:") && described.contains("app=d"), "{described}");
}

#[test]
fn events_are_found_by_involved_object() {
    let (_d, s) = setup();
    let ev = |name: &str, obj: &str| {
        json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": name},
        "involvedObject": {"kind": "Pod", "name": obj, "namespace": "default"}, "reason": "Scheduled",
        "message": format!("placed {obj}"), "type": "Normal", "count": 1})
    };
    assert_eq!(post(&s, "/api/v1/namespaces/default/events", &ev("e1", "web")).0, 201);
    assert_eq!(post(&s, "/api/v1/namespaces/default/events", &ev("e2", "db")).0, 201);
    let (_, found) = get(&s, "/api/v1/namespaces/default/events?fieldSelector=involvedObject.name%3Dweb%2CinvolvedObject.namespace%3Ddefault");
    let names: Vec<&str> =
        found["items"].as_array().expect("items").iter().filter_map(|i| i["metadata"]["name"].as_str()).collect();
    assert_eq!(names, ["e1"]);
}

/// Open a raw watch; returns the reader of its body lines.
#[test]
fn a_watch_older_than_the_history_gets_410_gone() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let s = ApiServer::start_with(&data, &["--watch-cache-size", "2"]);
    let (_, first) = post(&s, "/api/v1/namespaces/default/configmaps", &cm("a", json!({})));
    let old_rv = first["metadata"]["resourceVersion"].as_str().expect("rv").to_string();
    for n in ["b", "c", "d"] {
        post(&s, "/api/v1/namespaces/default/configmaps", &cm(n, json!({})));
    }
    // A consistent list waits until the watch cache has seen every write.
    assert_eq!(get(&s, "/api/v1/namespaces/default/configmaps").0, 200);
    let mut w = open_watch(&s, &format!("/api/v1/namespaces/default/configmaps?watch=true&resourceVersion={old_rv}"));
    let ev = next_event(&mut w).expect("an event");
    assert_eq!(ev["type"], "ERROR");
    assert_eq!((ev["object"]["code"].as_u64(), ev["object"]["reason"].as_str()), (Some(410), Some("Expired")));
}

#[test]
fn sigterm_closes_watches_and_exits_cleanly() {
    let (_d, mut s) = setup();
    let mut w = open_watch(&s, "/api/v1/namespaces/default/configmaps?watch=true");
    post(&s, "/api/v1/namespaces/default/configmaps", &cm("x", json!({})));
    assert_eq!(next_event(&mut w).expect("event")["type"], "ADDED");
    let pid = s.child.id().to_string();
    assert!(std::process::Command::new("kill").args(["-TERM", &pid]).status().expect("kill").success());
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(st) = s.child.try_wait().expect("wait") {
            break st;
        }
        assert!(Instant::now() < deadline, "apiserver did not exit within 10s of SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "clean exit: {status}");
    assert!(next_event(&mut w).is_none(), "the watch stream was closed");
}

#[test]
fn metrics_and_health_endpoints_answer() {
    let (_d, s) = setup();
    get(&s, "/api/v1/namespaces/default/pods");
    let (code, body) = http(&s.addr, "GET", "/metrics", None, "");
    assert_eq!(code, 200);
    assert!(body.contains("apiserver_request_total{") && body.contains("verb=\"LIST\""), "{body}");
    assert!(body.contains("apiserver_request_duration_seconds_bucket"));
    for p in ["/healthz", "/livez", "/readyz"] {
        assert_eq!(http(&s.addr, "GET", p, None, "").0, 200, "{p}");
    }
    let (code, body) = get(&s, "/api/v1/namespaces/default/widgets");
    assert_eq!((code, body["kind"].as_str(), body["reason"].as_str()), (404, Some("Status"), Some("NotFound")));
    let (code, body) =
        send(&s, "PATCH", "/api/v1/namespaces/default/configmaps/x", &json!({}), "application/apply-patch+yaml");
    assert_eq!((code, body["reason"].as_str()), (400, Some("BadRequest")), "server-side apply needs a fieldManager");
    let (code, body) = send(&s, "PATCH", "/api/v1/namespaces/default/configmaps/x", &json!({}), "text/plain");
    assert_eq!((code, body["reason"].as_str()), (415, Some("UnsupportedMediaType")));
    let (code, body) =
        send(&s, "POST", "/api/v1/namespaces/default/configmaps", &json!("not an object"), "application/json");
    assert_eq!(code, 400, "{body}");
}

#[test]
fn paths_are_served_with_a_trailing_slash_like_kubernetes() {
    let (_d, s) = setup();
    let (code, v) = get(&s, "/version/");
    assert_eq!((code, v["minor"].as_str()), (200, Some(kaji_api::version::MINOR)), "{v}");
    assert!(
        v["gitVersion"].as_str().is_some_and(|g| g.starts_with(&format!("{}-kaji.", kaji_api::version::RELEASE))),
        "{v}"
    );
    assert_eq!(post(&s, "/api/v1/namespaces/default/configmaps/", &cm("slash", json!({}))).0, 201);
    let (code, list) = get(&s, "/api/v1/namespaces/default/configmaps/");
    assert_eq!((code, list["kind"].as_str()), (200, Some("ConfigMapList")), "{list}");
    let (code, one) = get(&s, "/api/v1/namespaces/default/configmaps/slash/");
    assert_eq!((code, one["metadata"]["name"].as_str()), (200, Some("slash")), "{one}");
    for p in ["/api/", "/apis/", "/api/v1/", "/apis/apps/v1/"] {
        assert_eq!(get(&s, p).0, 200, "{p}");
    }
}
