//! Server-side apply with the real kubectl: create, re-apply, change, conflict, force — and bad input.

mod common;

use common::{http, ApiServer, Kubectl};
use serde_json::{json, Value};

const V1: &str = "\
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, labels: {app: web}}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - name: web
        image: nginx:1.25
        ports: [{containerPort: 80}]
        env: [{name: A, value: '1'}, {name: B, value: '2'}]
";

fn setup() -> (tempfile::TempDir, ApiServer) {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = ApiServer::start(&dir.path().join("data"));
    (dir, server)
}

fn get(k: &Kubectl, what: &str) -> Value {
    serde_json::from_str(&k.ok(&["get", what, "-o", "json", "--show-managed-fields"])).expect("json")
}

fn managers(obj: &Value) -> Vec<(String, String)> {
    obj["metadata"]["managedFields"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|e| (e["manager"].as_str().unwrap_or("").into(), e["operation"].as_str().unwrap_or("").into()))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn kubectl_server_side_apply_creates_changes_conflicts_and_forces() {
    let (_dir, server) = setup();
    let k = Kubectl::new(&server);
    let v1 = k.file("v1.yaml", V1);
    let v2 = k.file("v2.yaml", &V1.replace("nginx:1.25", "nginx:1.26").replace("{name: A, value: '1'}, ", ""));
    let (v1, v2) = (v1.to_str().expect("utf8"), v2.to_str().expect("utf8"));

    assert_eq!(k.ok(&["apply", "--server-side", "-f", v1]).trim(), "deployment.apps/web serverside-applied");
    let d = get(&k, "deploy/web");
    assert_eq!(managers(&d), [("kubectl".to_string(), "Apply".to_string())]);
    let fields = &d["metadata"]["managedFields"][0]["fieldsV1"];
    assert_eq!(fields["f:spec"]["f:replicas"], json!({}));
    let web = &fields["f:spec"]["f:template"]["f:spec"]["f:containers"]["k:{\"name\":\"web\"}"];
    assert_eq!(web["."], json!({}), "{fields}");
    assert!(web["f:ports"].get("k:{\"containerPort\":80,\"protocol\":\"TCP\"}").is_some(), "{fields}");
    assert!(web["f:env"].get("k:{\"name\":\"A\"}").is_some(), "{fields}");
    let rv = d["metadata"]["resourceVersion"].clone();

    assert_eq!(k.ok(&["apply", "--server-side", "-f", v1]).trim(), "deployment.apps/web serverside-applied");
    assert_eq!(get(&k, "deploy/web")["metadata"]["resourceVersion"], rv, "an unchanged apply writes nothing");

    k.ok(&["apply", "--server-side", "-f", v2]);
    let d = get(&k, "deploy/web");
    let c = &d["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(c["image"], "nginx:1.26");
    assert_eq!(c["env"], json!([{"name": "B", "value": "2"}]), "A left the manifest and the object");
    assert_eq!(c["imagePullPolicy"], "IfNotPresent", "defaults still apply");
    assert_eq!(d["metadata"]["generation"], 2);

    k.ok(&["scale", "deployment/web", "--replicas=5"]);
    let out = k.run(&["apply", "--server-side", "-f", v2]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("Apply failed with 1 conflict: conflict with \"kubectl"), "{err}");
    assert!(err.contains(": .spec.replicas"), "{err}");
    assert_eq!(get(&k, "deploy/web")["spec"]["replicas"], 5, "a refused apply changes nothing");

    k.ok(&["apply", "--server-side", "--force-conflicts", "-f", v2]);
    let d = get(&k, "deploy/web");
    assert_eq!(d["spec"]["replicas"], 2);
    let yaml = k.ok(&["get", "deploy", "web", "-o", "yaml", "--show-managed-fields"]);
    assert!(
        yaml.contains("manager: kubectl") && yaml.contains("operation: Apply") && yaml.contains("f:replicas: {}"),
        "{yaml}"
    );
    assert!(yaml.contains("fieldsType: FieldsV1") && yaml.contains("time: "), "{yaml}");
}

#[test]
fn kubectl_moves_a_client_side_applied_object_to_server_side_apply() {
    let (_dir, server) = setup();
    let k = Kubectl::new(&server);
    let cm = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata: {mode: fast, debug: '1'}\n";
    let f = k.file("cm.yaml", cm);
    assert_eq!(k.ok(&["apply", "-f", f.to_str().expect("utf8")]).trim(), "configmap/settings created");
    assert!(managers(&get(&k, "cm/settings")).contains(&("kubectl-client-side-apply".into(), "Update".into())));
    // The changed value was the client-side applier's, but it is in its last-applied annotation:
    // kubectl takes it over without --force-conflicts, then records the new last-applied itself.
    let f = k.file("cm2.yaml", &cm.replace("fast", "slow"));
    assert_eq!(
        k.ok(&["apply", "--server-side", "-f", f.to_str().expect("utf8")]).trim(),
        "configmap/settings serverside-applied"
    );
    let obj = get(&k, "cm/settings");
    assert_eq!(obj["data"]["mode"], "slow");
    let last =
        obj["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"].as_str().expect("kept");
    assert!(last.contains("slow"), "{last}");
    let m = managers(&obj);
    assert!(
        m.contains(&("kubectl".into(), "Apply".into())) && m.contains(&("kubectl-last-applied".into(), "Apply".into())),
        "{m:?}"
    );
}

#[test]
fn bad_apply_requests_are_refused_and_change_nothing() {
    let (_dir, server) = setup();
    let path = "/api/v1/namespaces/default/configmaps/c";
    let ssa = "application/apply-patch+yaml";
    let apply = |query: &str, body: &str| http(&server.addr, "PATCH", &format!("{path}?{query}"), Some(body), ssa);
    let good = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\ndata:\n  k: v\n";

    let (code, body) = apply("", good);
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("PATCH, application/apply-patch+yaml requests require a fieldManager"), "{body}");
    let (code, body) = apply("fieldManager=t", good);
    assert_eq!(code, 201, "{body}");
    let stored = http(&server.addr, "GET", path, None, "").1;

    for (bad, why) in [
        ("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c\n", "error decoding YAML"),
        ("apiVersion: v1\nkind: Secret\nmetadata: {name: c}\n", "Incorrect kind"),
        ("apiVersion: apps/v1\nkind: ConfigMap\nmetadata: {name: c}\n", "Incorrect version"),
        ("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: other}\n", "does not match the name on the URL"),
        (
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, managedFields: [{manager: x}]}\n",
            "metadata.managedFields must be nil",
        ),
        ("- just\n- a list\n", "must be an object"),
        ("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {k: [1]}\n", "error decoding ConfigMap"),
    ] {
        let (code, body) = apply("fieldManager=t", bad);
        assert_eq!(code, 400, "{why}: {body}");
        assert!(body.contains(why) && body.contains("\"kind\":\"Status\""), "{why}: {body}");
    }
    let (code, body) = apply("fieldManager=t&fieldValidation=Strict", &format!("{good}bogus: 1\n"));
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("unknown field \\\"bogus\\\""), "{body}");
    let (code, body) = apply("fieldManager=t&force=maybe", good);
    assert_eq!(code, 400, "{body}");

    // Ordinary writes may send managedFields, but only valid ones.
    let put = |mf: Value| {
        let meta = json!({"name": "c", "managedFields": mf});
        let obj = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"k": "v"}});
        http(&server.addr, "PUT", path, Some(&obj.to_string()), "application/json")
    };
    let (code, body) = put(json!([{"manager": "x", "operation": "Explode", "fieldsType": "FieldsV1", "fieldsV1": {}}]));
    assert_eq!(code, 422, "{body}");
    assert!(body.contains("metadata.managedFields[0].operation"), "{body}");
    let (code, body) =
        put(json!([{"manager": "x", "operation": "Update", "fieldsType": "FieldsV1", "fieldsV1": {"q:k": {}}}]));
    assert_eq!(code, 422, "{body}");
    assert_eq!(http(&server.addr, "GET", path, None, "").1, stored, "nothing stored changed");

    // dryRun answers the merge without storing it.
    let (code, body) = apply("fieldManager=t&dryRun=All", &good.replace("k: v", "k: w"));
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("\"k\":\"w\""), "{body}");
    assert_eq!(http(&server.addr, "GET", path, None, "").1, stored);
}

#[test]
fn status_is_applied_only_through_the_status_subresource() {
    let (_dir, server) = setup();
    let path = "/apis/apps/v1/namespaces/default/deployments/web";
    let ssa = "application/apply-patch+yaml";
    let mut body = deployment_json();
    body["status"] = json!({"replicas": 7});
    let with_status = body.to_string();
    let (code, out) = http(&server.addr, "PATCH", &format!("{path}?fieldManager=ctl"), Some(&with_status), ssa);
    assert_eq!(code, 201, "{out}");
    let obj: Value = serde_json::from_str(&out).expect("json");
    assert!(obj["status"].get("replicas").is_none(), "the main resource ignores status: {out}");

    let status = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
                        "spec": {"replicas": 9}, "status": {"replicas": 7}})
    .to_string();
    let (code, out) = http(&server.addr, "PATCH", &format!("{path}/status?fieldManager=st"), Some(&status), ssa);
    assert_eq!(code, 200, "{out}");
    let obj: Value = serde_json::from_str(&out).expect("json");
    assert_eq!((obj["status"]["replicas"].as_i64(), obj["spec"]["replicas"].as_i64()), (Some(7), Some(2)));
    let entry = obj["metadata"]["managedFields"]
        .as_array()
        .and_then(|a| a.iter().find(|e| e["manager"] == "st"))
        .unwrap_or_else(|| panic!("an entry for st: {out}"));
    assert_eq!((entry["subresource"].as_str(), entry["operation"].as_str()), (Some("status"), Some("Apply")));
    assert_eq!(entry["fieldsV1"], json!({"f:status": {"f:replicas": {}}}));
}

/// A Deployment as JSON (apply bodies may be JSON or YAML).
fn deployment_json() -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
           "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                    "template": {"metadata": {"labels": {"app": "web"}},
                                 "spec": {"containers": [{"name": "web", "image": "nginx:1.25"}]}}}})
}
