//! core/v1 ReplicationControllers against the real binary: defaults, validation, the `scale` and
//! `status` subresources, discovery, kubectl's table, and deletion orphaning by default.

mod common;

use common::{http_with, ApiServer, Kubectl};
use serde_json::{json, Value};

const RCS: &str = "/api/v1/namespaces/default/replicationcontrollers";

use common::{get_json as get, send_json as send, started as setup};

/// An RC with only a template, as `kubectl create` users write them: the rest is defaulted.
fn rc(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ReplicationController", "metadata": {"name": name},
           "spec": {"template": {"metadata": {"labels": {"app": name}},
                    "spec": {"containers": [{"name": "app", "image": "registry.example/app:1"}]}}}})
}

#[test]
fn a_replication_controller_is_defaulted_validated_and_listed() {
    let (_d, s) = setup();
    let (code, made) = send(&s, "POST", RCS, Some(&rc("web")), "application/json");
    assert_eq!(code, 201, "{made}");
    assert_eq!(made["spec"]["selector"], json!({"app": "web"}), "the selector comes from the template");
    assert_eq!(made["metadata"]["labels"], json!({"app": "web"}), "so do the labels");
    assert_eq!(made["spec"]["replicas"], 1);
    assert_eq!(made["metadata"]["generation"], 1);
    assert_eq!(made["status"], json!({"replicas": 0}));
    assert_eq!(made["spec"]["template"]["spec"]["restartPolicy"], "Always");

    // The conformance suite's first request.
    let (code, list) = get(&s, "/api/v1/namespaces/kube-system/replicationcontrollers");
    assert_eq!((code, list["kind"].as_str()), (200, Some("ReplicationControllerList")), "{list}");
    let (_, list) = get(&s, "/api/v1/replicationcontrollers?fieldSelector=status.replicas%3D0");
    assert_eq!(list["items"][0]["metadata"]["name"], "web");
    assert_eq!(get(&s, &format!("{RCS}/web")).1["metadata"]["uid"], made["metadata"]["uid"]);

    let mut bad = rc("bad");
    bad["spec"]["selector"] = json!({"app": "other"});
    let (code, body) = send(&s, "POST", RCS, Some(&bad), "application/json");
    assert_eq!((code, body["reason"].as_str()), (422, Some("Invalid")), "{body}");
    assert_eq!(
        body["message"],
        "ReplicationController \"bad\" is invalid: spec.template.metadata.labels: Invalid value: \
         map[string]string{\"app\":\"bad\"}: `selector` does not match template `labels`"
    );
    let mut no_template = rc("bare");
    no_template["spec"] = json!({"selector": {"app": "x"}});
    let (code, body) = send(&s, "POST", RCS, Some(&no_template), "application/json");
    assert_eq!(code, 422);
    assert_eq!(body["message"], "ReplicationController \"bare\" is invalid: spec.template: Required value");

    // Discovery: short name, category, both subresources.
    let (_, v1) = get(&s, "/api/v1");
    let found = |name: &str| v1["resources"].as_array().into_iter().flatten().find(|r| r["name"] == name).cloned();
    let main = found("replicationcontrollers").expect("listed");
    assert_eq!((main["shortNames"].clone(), main["categories"].clone()), (json!(["rc"]), json!(["all"])));
    assert_eq!(found("replicationcontrollers/scale").expect("scale")["kind"], "Scale");
    assert!(found("replicationcontrollers/status").is_some());
}

#[test]
fn the_scale_subresource_reads_and_writes_spec_replicas() {
    let (_d, s) = setup();
    assert_eq!(send(&s, "POST", RCS, Some(&rc("web")), "application/json").0, 201);
    let scale_path = format!("{RCS}/web/scale");
    let (code, scale) = get(&s, &scale_path);
    assert_eq!(code, 200, "{scale}");
    assert_eq!((scale["kind"].as_str(), scale["apiVersion"].as_str()), (Some("Scale"), Some("autoscaling/v1")));
    assert_eq!(scale["spec"], json!({"replicas": 1}));
    assert_eq!(scale["status"], json!({"replicas": 0, "selector": "app=web"}));

    let mut put = scale.clone();
    put["spec"]["replicas"] = json!(3);
    let (code, scaled) = send(&s, "PUT", &scale_path, Some(&put), "application/json");
    assert_eq!((code, scaled["spec"]["replicas"].as_i64()), (200, Some(3)), "{scaled}");
    let (_, now) = get(&s, &format!("{RCS}/web"));
    assert_eq!((now["spec"]["replicas"].as_i64(), now["metadata"]["generation"].as_i64()), (Some(3), Some(2)));

    let patch = json!({"spec": {"replicas": 2}});
    let (code, patched) = send(&s, "PATCH", &scale_path, Some(&patch), "application/merge-patch+json");
    assert_eq!((code, patched["spec"]["replicas"].as_i64()), (200, Some(2)), "{patched}");
    assert_eq!(get(&s, &format!("{RCS}/web")).1["spec"]["replicas"], 2);

    // A stale resourceVersion is a conflict; a negative count is refused as Kubernetes words it.
    let (code, _) = send(&s, "PUT", &scale_path, Some(&put), "application/json");
    assert_eq!(code, 409, "the Scale read before the patch is stale");
    let negative = json!({"spec": {"replicas": -1}});
    let (code, body) = send(&s, "PATCH", &scale_path, Some(&negative), "application/merge-patch+json");
    assert_eq!(code, 422, "{body}");
    assert_eq!(
        body["message"],
        "Scale.autoscaling \"web\" is invalid: spec.replicas: Invalid value: -1: must be greater than or equal to 0"
    );
    assert_eq!(get(&s, &format!("{RCS}/missing/scale")).0, 404);
}

#[test]
fn status_is_written_only_through_its_subresource() {
    let (_d, s) = setup();
    assert_eq!(send(&s, "POST", RCS, Some(&rc("web")), "application/json").0, 201);
    let status =
        json!({"status": {"replicas": 2, "readyReplicas": 1, "availableReplicas": 1, "observedGeneration": 1}});
    let (code, body) = send(&s, "PATCH", &format!("{RCS}/web/status"), Some(&status), "application/merge-patch+json");
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["status"]["readyReplicas"], 1);
    assert_eq!(body["metadata"]["generation"], 1, "a status write is no spec change");

    // The main endpoint keeps the status; /status keeps the spec.
    let both = json!({"spec": {"replicas": 5}, "status": {"replicas": 9}});
    let (_, main) = send(&s, "PATCH", &format!("{RCS}/web"), Some(&both), "application/merge-patch+json");
    assert_eq!((main["spec"]["replicas"].as_i64(), main["status"]["replicas"].as_i64()), (Some(5), Some(2)));
    let (_, sub) = send(&s, "PATCH", &format!("{RCS}/web/status"), Some(&both), "application/merge-patch+json");
    assert_eq!((sub["spec"]["replicas"].as_i64(), sub["status"]["replicas"].as_i64()), (Some(5), Some(9)));

    let too_ready = json!({"status": {"replicas": 1, "readyReplicas": 2, "availableReplicas": 0}});
    let (code, body) =
        send(&s, "PATCH", &format!("{RCS}/web/status"), Some(&too_ready), "application/merge-patch+json");
    assert_eq!(code, 422, "{body}");
    assert_eq!(
        body["message"],
        "ReplicationController \"web\" is invalid: status.readyReplicas: Invalid value: 2: cannot be greater than status.replicas"
    );
}

#[test]
fn kubectl_prints_scales_and_deletes_replication_controllers() {
    let (_d, s) = setup();
    let k = Kubectl::new(&s);
    let manifest = "apiVersion: v1\nkind: ReplicationController\nmetadata: {name: web}\nspec:\n  replicas: 2\n  template:\n    metadata: {labels: {app: web, tier: fe}}\n    spec: {containers: [{name: app, image: busybox}]}\n";
    let f = k.file("rc.yaml", manifest);
    assert_eq!(k.ok(&["create", "-f", f.to_str().expect("utf8")]).trim(), "replicationcontroller/web created");

    let table = k.ok(&["get", "rc"]);
    let header: Vec<&str> = table.lines().next().unwrap_or_default().split_whitespace().collect();
    assert_eq!(header, ["NAME", "DESIRED", "CURRENT", "READY", "AGE"], "{table}");
    let row: Vec<&str> = table.lines().nth(1).unwrap_or_default().split_whitespace().collect();
    assert_eq!(row[..4], ["web", "2", "0", "0"], "{table}");
    let wide = k.ok(&["get", "replicationcontrollers", "-o", "wide"]);
    let header: Vec<&str> = wide.lines().next().unwrap_or_default().split_whitespace().collect();
    assert_eq!(header[5..], ["CONTAINERS", "IMAGES", "SELECTOR"], "{wide}");
    let row: Vec<&str> = wide.lines().nth(1).unwrap_or_default().split_whitespace().collect();
    assert_eq!(row[5..], ["app", "busybox", "app=web,tier=fe"], "{wide}");
    assert!(k.ok(&["get", "all"]).contains("replicationcontroller/web"), "in the `all` category");

    // The server-side Table itself, as kubectl asks for it.
    let accept = "application/json;as=Table;v=v1;g=meta.k8s.io";
    let (code, text) = http_with(&s.addr, "GET", &format!("{RCS}/web"), &[("Accept", accept)], None, "");
    let t: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
    assert_eq!((code, t["kind"].as_str()), (200, Some("Table")), "{text}");
    let cells = t["rows"][0]["cells"].as_array().cloned().unwrap_or_default();
    assert_eq!(cells[..4], [json!("web"), json!(2), json!(0), json!(0)], "{text}");
    assert_eq!(t["rows"][0]["cells"][7], "app=web,tier=fe");

    assert_eq!(k.ok(&["scale", "rc", "web", "--replicas=4"]).trim(), "replicationcontroller/web scaled");
    assert_eq!(k.ok(&["get", "rc", "web", "-o", "jsonpath={.spec.replicas} {.metadata.generation}"]), "4 2");

    // kubectl deletes in the background; a client that names no policy orphans the pods, as
    // core/v1 has done since before the garbage collector.
    let manifest2 = manifest.replace("name: web", "name: legacy");
    let f2 = k.file("rc2.yaml", &manifest2);
    k.ok(&["create", "-f", f2.to_str().expect("utf8")]);
    let (code, body) = send(&s, "DELETE", &format!("{RCS}/legacy"), None, "");
    assert_eq!(code, 200, "{body}");
    let (_, held) = get(&s, &format!("{RCS}/legacy"));
    assert_eq!(held["metadata"]["finalizers"], json!(["orphan"]), "{held}");
    assert!(held["metadata"]["deletionTimestamp"].is_string());
    k.ok(&["delete", "rc", "web", "--wait=false"]);
    assert_eq!(get(&s, &format!("{RCS}/web")).0, 404, "kubectl's Background deletes at once");
}

#[test]
fn pod_security_warns_about_a_template_and_never_refuses_the_controller() {
    let (_d, s) = setup();
    let k = Kubectl::new(&s);
    k.ok(&["create", "namespace", "locked"]);
    // Templates are judged by the warn level only (Kubernetes evaluates controllers without enforce).
    k.ok(&["label", "namespace", "locked", "pod-security.kubernetes.io/enforce=baseline"]);
    k.ok(&["label", "namespace", "locked", "pod-security.kubernetes.io/warn=baseline"]);
    let manifest = "apiVersion: v1\nkind: ReplicationController\nmetadata: {name: root, namespace: locked}\nspec:\n  template:\n    metadata: {labels: {app: root}}\n    spec: {containers: [{name: app, image: busybox, securityContext: {privileged: true}}]}\n";
    let f = k.file("root.yaml", manifest);
    let out = k.run(&["create", "-f", f.to_str().expect("utf8")]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("Warning: would violate PodSecurity \"baseline:latest\": privileged (container \"app\" must not set securityContext.privileged=true)"),
        "{stderr}"
    );
}

#[test]
fn only_roles_that_name_replication_controllers_may_create_or_scale_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    let tokens = dir.path().join("tokens.csv");
    std::fs::write(&tokens, "root-token,root,0,system:masters\nviewer-token,viewer,1001\neditor-token,editor,1002\n")
        .expect("write tokens");
    let tokens = tokens.to_string_lossy().to_string();
    let s = ApiServer::start_with(
        &dir.path().join("data"),
        &["--token-auth-file", &tokens, "--authorization-mode", "RBAC"],
    );
    let call = |token: &str, method: &str, path: &str, body: Option<Value>| {
        let auth = format!("Bearer {token}");
        let ct = if method == "PATCH" { "application/merge-patch+json" } else { "application/json" };
        let body = body.map(|b| b.to_string());
        let (code, text) = http_with(&s.addr, method, path, &[("Authorization", &auth)], body.as_deref(), ct);
        (code, serde_json::from_str::<Value>(&text).unwrap_or(Value::String(text)))
    };
    // The aggregated pieces of `view` and `edit` (no controller manager here to aggregate them).
    for (user, role) in [("viewer", "system:aggregate-to-view"), ("editor", "system:aggregate-to-edit")] {
        let binding = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": user}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"kind": "User", "name": user}]});
        let path = "/apis/rbac.authorization.k8s.io/v1/namespaces/default/rolebindings";
        assert_eq!(call("root-token", "POST", path, Some(binding)).0, 201);
    }
    let eventually = |token: &str, method: &str, path: &str, body: Option<Value>, want: u16| {
        for _ in 0..100 {
            let (code, v) = call(token, method, path, body.clone());
            if code == want {
                return v;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        panic!("{method} {path} never answered {want}: {:?}", call(token, method, path, body));
    };
    eventually("editor-token", "POST", RCS, Some(rc("web")), 201);
    eventually("viewer-token", "GET", &format!("{RCS}/web"), None, 200);
    let (code, body) = call("viewer-token", "POST", RCS, Some(rc("mine")));
    assert_eq!(code, 403, "{body}");
    assert_eq!(
        body["message"],
        "replicationcontrollers is forbidden: User \"viewer\" cannot create resource \"replicationcontrollers\" in API group \"\" in the namespace \"default\""
    );
    let scale = json!({"spec": {"replicas": 5}});
    assert_eq!(call("viewer-token", "PATCH", &format!("{RCS}/web/scale"), Some(scale.clone())).0, 403);
    assert_eq!(call("viewer-token", "GET", &format!("{RCS}/web/scale"), None).0, 200);
    assert_eq!(call("editor-token", "PATCH", &format!("{RCS}/web/scale"), Some(scale)).0, 200);
    // Status is the controller's to write, not an editor's.
    let status = json!({"status": {"replicas": 5}});
    assert_eq!(call("editor-token", "PATCH", &format!("{RCS}/web/status"), Some(status)).0, 403);

    let (code, role) = call(
        "root-token",
        "GET",
        "/apis/rbac.authorization.k8s.io/v1/clusterroles/system:controller:replication-controller",
        None,
    );
    assert_eq!(code, 200, "{role}");
    assert_eq!(role["rules"][0]["resources"], json!(["replicationcontrollers"]));
    assert_eq!(role["rules"][3]["verbs"], json!(["create", "delete", "list", "patch", "watch"]));
}
