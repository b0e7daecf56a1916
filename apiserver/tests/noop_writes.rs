//! A write that changes nothing is not a write, as in Kubernetes: an update, patch, apply or
//! scale that leaves the object as stored answers with the stored object — same
//! resourceVersion, no watch event — whether it comes as raw HTTP or from kubectl.

mod common;

use common::{http, next_event, open_watch, ApiServer, Kubectl};
use serde_json::{json, Value};

fn setup() -> (tempfile::TempDir, ApiServer) {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = ApiServer::start(&dir.path().join("data"));
    (dir, server)
}

fn send(s: &ApiServer, method: &str, path: &str, body: &Value, ct: &str) -> (u16, Value) {
    let (code, text) = http(&s.addr, method, path, Some(&body.to_string()), ct);
    (code, serde_json::from_str(&text).unwrap_or(Value::Null))
}

fn get(s: &ApiServer, path: &str) -> Value {
    let (code, text) = http(&s.addr, "GET", path, None, "");
    assert_eq!(code, 200, "GET {path}: {text}");
    serde_json::from_str(&text).expect("JSON")
}

fn rv(v: &Value) -> String {
    v["metadata"]["resourceVersion"].as_str().unwrap_or_default().to_string()
}

const CM: &str = "/api/v1/namespaces/default/configmaps";

#[test]
fn updates_patches_and_applies_that_change_nothing_keep_the_resource_version() {
    let (_d, s) = setup();
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "a", "labels": {"app": "web"}}, "data": {"k": "v"}});
    let (code, created) = send(&s, "POST", &format!("{CM}?fieldManager=tester"), &cm, "application/json");
    assert_eq!(code, 201, "{created}");
    let stored = rv(&created);
    let mut watch = open_watch(&s, &format!("{CM}?watch=true&resourceVersion={stored}"));
    let path = format!("{CM}/a?fieldManager=tester");

    let mut stale_time = get(&s, &format!("{CM}/a"));
    stale_time["metadata"]["managedFields"][0]["time"] = "2001-01-01T00:00:00Z".into();
    let mut without_rv = cm.clone();
    without_rv["metadata"]["labels"] = json!({"app": "web"});
    let writes: Vec<(&str, &str, Value, &str)> = vec![
        ("PUT of what GET returned", "PUT", get(&s, &format!("{CM}/a")), "application/json"),
        ("PUT without resourceVersion", "PUT", without_rv, "application/json"),
        ("PUT whose only change is a manager's timestamp", "PUT", stale_time, "application/json"),
        ("merge patch of the same value", "PATCH", json!({"data": {"k": "v"}}), "application/merge-patch+json"),
        ("empty merge patch", "PATCH", json!({}), "application/merge-patch+json"),
        (
            "JSON patch that only tests",
            "PATCH",
            json!([{"op": "test", "path": "/data/k", "value": "v"}]),
            "application/json-patch+json",
        ),
        (
            "strategic patch of the same label",
            "PATCH",
            json!({"metadata": {"labels": {"app": "web"}}}),
            "application/strategic-merge-patch+json",
        ),
    ];
    for (what, method, body, ct) in writes {
        let (code, out) = send(&s, method, &path, &body, ct);
        assert_eq!(code, 200, "{what}: {out}");
        assert_eq!(rv(&out), stored, "{what}: a new resourceVersion for no change");
        assert_eq!(out["data"], json!({"k": "v"}), "{what}: answers with the stored object");
    }
    // A stale resourceVersion is still a conflict, change or not.
    let mut stale = get(&s, &format!("{CM}/a"));
    stale["metadata"]["resourceVersion"] = "1".into();
    assert_eq!(send(&s, "PUT", &path, &stale, "application/json").0, 409);

    // Server-side apply: the first apply by a new manager takes ownership (a change), the
    // second is a no-op.
    let applied = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"k": "v"}});
    let apply = format!("{CM}/a?fieldManager=applier&force=true");
    let (code, first) = send(&s, "PATCH", &apply, &applied, "application/apply-patch+yaml");
    assert_eq!(code, 200, "{first}");
    assert_ne!(rv(&first), stored, "ownership changed: a write");
    let owned = rv(&first);
    let (code, second) = send(&s, "PATCH", &apply, &applied, "application/apply-patch+yaml");
    assert_eq!((code, rv(&second)), (200, owned.clone()), "{second}");

    // The watch saw the ownership change, then the next real change — nothing for the no-ops.
    let (code, changed) = send(&s, "PATCH", &path, &json!({"data": {"k": "w"}}), "application/merge-patch+json");
    assert_eq!(code, 200, "{changed}");
    let first_event = next_event(&mut watch).expect("an event");
    assert_eq!((first_event["type"].as_str(), rv(&first_event["object"])), (Some("MODIFIED"), owned));
    let next = next_event(&mut watch).expect("an event");
    assert_eq!((next["object"]["data"]["k"].as_str(), rv(&next["object"])), (Some("w"), rv(&changed)));
}

#[test]
fn status_scale_and_namespace_finalize_writes_that_change_nothing_are_no_ops() {
    let (_d, s) = setup();
    let deploy = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}}});
    let deployments = "/apis/apps/v1/namespaces/default/deployments";
    let (code, d) = send(&s, "POST", deployments, &deploy, "application/json");
    assert_eq!(code, 201, "{d}");
    let (code, d) = send(
        &s,
        "PATCH",
        &format!("{deployments}/web/status"),
        &json!({"status": {"replicas": 2}}),
        "application/merge-patch+json",
    );
    assert_eq!(code, 200, "{d}");
    let stored = rv(&d);
    let cases: Vec<(&str, &str, String, Value, &str)> = vec![
        (
            "the same status",
            "PATCH",
            format!("{deployments}/web/status"),
            json!({"status": {"replicas": 2}}),
            "application/merge-patch+json",
        ),
        (
            "a status change through the main endpoint (ignored)",
            "PUT",
            format!("{deployments}/web"),
            {
                let mut v = d.clone();
                v["status"]["replicas"] = 7.into();
                v
            },
            "application/json",
        ),
        (
            "the same scale",
            "PATCH",
            format!("{deployments}/web/scale"),
            json!({"spec": {"replicas": 2}}),
            "application/merge-patch+json",
        ),
    ];
    for (what, method, path, body, ct) in cases {
        let (code, out) = send(&s, method, &path, &body, ct);
        assert_eq!(code, 200, "{what}: {out}");
        assert_eq!(rv(&out), stored, "{what}");
    }
    assert_eq!(get(&s, &format!("{deployments}/web"))["metadata"]["generation"], 1);

    let (code, ns) = send(&s, "POST", "/api/v1/namespaces", &json!({"metadata": {"name": "team"}}), "application/json");
    assert_eq!(code, 201, "{ns}");
    let (code, out) = send(&s, "PUT", "/api/v1/namespaces/team/finalize", &ns, "application/json");
    assert_eq!((code, rv(&out)), (200, rv(&ns)), "{out}");
}

#[test]
fn kubectl_replace_label_scale_and_server_side_apply_of_nothing_new_write_nothing() {
    let (_d, s) = setup();
    let k = Kubectl::new(&s);
    let manifest = k.file(
        "cm.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  labels: {tier: web}\ndata:\n  mode: fast\n",
    );
    let manifest = manifest.to_str().expect("utf-8 path");
    k.ok(&["apply", "--server-side", "-f", manifest]);
    let rv_of = |what: &str| k.ok(&["get", what, "-o", "jsonpath={.metadata.resourceVersion}"]);
    let before = rv_of("configmap/settings");
    for args in [
        vec!["apply", "--server-side", "-f", manifest],
        vec!["replace", "-f", manifest],
        vec!["label", "--overwrite", "configmap/settings", "tier=web"],
    ] {
        k.ok(&args);
        assert_eq!(rv_of("configmap/settings"), before, "kubectl {args:?} wrote an unchanged object");
    }
    k.ok(&["create", "deployment", "web", "--image=registry.example/web:1", "--replicas=2"]);
    let before = rv_of("deployment/web");
    k.ok(&["scale", "deployment/web", "--replicas=2"]);
    assert_eq!(rv_of("deployment/web"), before, "kubectl scale to the same size");
    k.ok(&["scale", "deployment/web", "--replicas=3"]);
    assert_ne!(rv_of("deployment/web"), before, "a real change is still written");
}
