//! The everyday `kaji` commands, run as the built binary against an in-process kaji-apiserver:
//! what a user types and what they see.

mod common;

use common::{one_line_failure, starts_with_words, stderr, stdout, words, Cluster};
use serde_json::{json, Value};
use std::time::Duration;

const SHOP: &str = "\
apiVersion: v1
kind: Namespace
metadata:
  name: shop
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
  namespace: shop
  labels: {app: web}
data:
  mode: fast
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: shop
  labels: {app: web}
spec:
  replicas: 2
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: web
        image: nginx:1.25
        ports: [{containerPort: 80}]
        env:
        - {name: MODE, value: fast}
        - {name: DEBUG, value: \"1\"}
";

fn with_shop() -> Cluster {
    let c = Cluster::start();
    let f = c.file("shop.yaml", SHOP);
    c.ok(&["apply", "-f", f.to_str().expect("utf8")]);
    c
}

#[test]
fn apply_creates_then_leaves_alone_then_configures_what_changed() {
    let c = Cluster::start();
    let f = c.file("shop.yaml", SHOP);
    let f = f.to_str().expect("utf8");
    assert_eq!(
        c.ok(&["apply", "-f", f]),
        "namespace/shop created\nconfigmap/settings created\ndeployment.apps/web created\n"
    );
    assert_eq!(
        c.ok(&["apply", "-f", f]),
        "namespace/shop unchanged\nconfigmap/settings unchanged\ndeployment.apps/web unchanged\n"
    );

    // A new image, a changed value and a removed env var.
    let changed = SHOP
        .replace("nginx:1.25", "nginx:1.26")
        .replace("mode: fast", "mode: slow")
        .replace("        - {name: DEBUG, value: \"1\"}\n", "");
    let f2 = c.file("shop2.yaml", &changed);
    assert_eq!(
        c.ok(&["apply", "-f", f2.to_str().expect("utf8")]),
        "namespace/shop unchanged\nconfigmap/settings configured\ndeployment.apps/web configured\n"
    );
    let d = c.get("/apis/apps/v1/namespaces/shop/deployments/web");
    let container = &d["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["image"], "nginx:1.26");
    assert_eq!(container["env"], json!([{"name": "MODE", "value": "fast"}]), "DEBUG removed");
    assert_eq!(container["imagePullPolicy"], "IfNotPresent", "server defaults kept");
    assert_eq!(c.get("/api/v1/namespaces/shop/configmaps/settings")["data"]["mode"], "slow");
    assert_eq!(d["metadata"]["generation"], 2);

    // The same manifest from stdin, as JSON, and from a directory: nothing left to change.
    let json_doc = serde_json::to_string(&d).expect("json");
    let mut child = c
        .command(&["apply", "-f", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    std::io::Write::write_all(&mut child.stdin.take().expect("stdin"), json_doc.as_bytes()).expect("write stdin");
    let out = child.wait_with_output().expect("kaji apply -f -");
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "deployment.apps/web configured\n", "kubectl-style: the annotation now holds the JSON");
    std::fs::create_dir(c.dir.path().join("manifests")).expect("mkdir");
    std::fs::write(c.dir.path().join("manifests/cm.yaml"), changed.split("---").nth(1).expect("configmap doc"))
        .expect("write");
    let dir = c.dir.path().join("manifests");
    assert_eq!(c.ok(&["apply", "-f", dir.to_str().expect("utf8")]), "configmap/settings unchanged\n");
}

#[test]
fn apply_refuses_bad_input_with_one_line() {
    let c = Cluster::start();
    let missing = c.fails(&["apply", "-f", "/nonexistent/app.yaml"]);
    assert_eq!(missing, "error: the path \"/nonexistent/app.yaml\" does not exist");
    let bad = c.file("bad.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x\n");
    let malformed = c.fails(&["apply", "-f", bad.to_str().expect("utf8")]);
    assert!(malformed.starts_with(&format!("error: error parsing {}: ", bad.display())), "{malformed}");
    let kindless = c.file("kindless.yaml", "apiVersion: v1\nmetadata: {name: x}\n");
    let err = c.fails(&["apply", "-f", kindless.to_str().expect("utf8")]);
    assert!(err.ends_with("(document 1): kind not set"), "{err}");
    let unknown = c.file("widget.yaml", "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\n");
    let err = c.fails(&["apply", "-f", unknown.to_str().expect("utf8")]);
    assert!(err.contains("no matches for kind \"Widget\" in version \"example.com/v1\""), "{err}");
    let invalid =
        c.file("pod.yaml", "apiVersion: v1\nkind: Pod\nmetadata: {name: bad}\nspec:\n  containers:\n  - name: web\n");
    let err = c.fails(&["apply", "-f", invalid.to_str().expect("utf8")]);
    assert_eq!(err, "The Pod \"bad\" is invalid: spec.containers[0].image: Required value");
}

const SSA_V1: &str = "\
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
        env: [{name: A, value: '1'}, {name: B, value: '2'}]
";

#[test]
fn server_side_apply_merges_removes_left_out_fields_and_reports_conflicts() {
    let c = Cluster::start();
    let v1 = c.file("v1.yaml", SSA_V1);
    let v2 = c.file("v2.yaml", &SSA_V1.replace("nginx:1.25", "nginx:1.26").replace("{name: A, value: '1'}, ", ""));
    let (v1, v2) = (v1.to_str().expect("utf8"), v2.to_str().expect("utf8"));
    let ssa = |f: &str| c.ok(&["apply", "--server-side", "-f", f]);
    assert_eq!(ssa(v1), "deployment.apps/web serverside-applied\n");
    let rv = c.get("/apis/apps/v1/namespaces/default/deployments/web")["metadata"]["resourceVersion"].clone();
    assert_eq!(ssa(v1), "deployment.apps/web serverside-applied\n");
    let d = c.get("/apis/apps/v1/namespaces/default/deployments/web");
    assert_eq!(d["metadata"]["resourceVersion"], rv, "an unchanged apply writes nothing");
    let mf = &d["metadata"]["managedFields"][0];
    assert_eq!((mf["manager"].as_str(), mf["operation"].as_str()), (Some("kaji"), Some("Apply")), "{mf}");

    assert_eq!(ssa(v2), "deployment.apps/web serverside-applied\n");
    let d = c.get("/apis/apps/v1/namespaces/default/deployments/web");
    let web = &d["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(web["image"], "nginx:1.26");
    assert_eq!(web["env"], json!([{"name": "B", "value": "2"}]), "A left the manifest, so it left the object");

    c.ok(&["scale", "deployment/web", "--replicas=5"]);
    // A write without a fieldManager is recorded under the client's User-Agent product.
    let d = c.get("/apis/apps/v1/namespaces/default/deployments/web");
    let updates: Vec<&serde_json::Value> = d["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["operation"] == "Update")
        .collect();
    assert_eq!(updates.iter().map(|m| m["manager"].as_str()).collect::<Vec<_>>(), [Some("kaji")], "{d}");
    let err = c.fails(&["apply", "--server-side", "-f", v2]);
    assert!(err.starts_with("error: Apply failed with 1 conflict: conflict with \"kaji\""), "{err}");
    assert!(err.contains(": .spec.replicas") && err.contains("--force-conflicts"), "{err}");
    assert_eq!(c.get("/apis/apps/v1/namespaces/default/deployments/web")["spec"]["replicas"], 5);
    assert_eq!(
        c.ok(&["apply", "--server-side", "--force-conflicts", "--field-manager", "kaji", "-f", v2]),
        "deployment.apps/web serverside-applied\n"
    );
    assert_eq!(c.get("/apis/apps/v1/namespaces/default/deployments/web")["spec"]["replicas"], 2);

    let nameless = c.file("bad.yaml", &SSA_V1.replace("- name: web\n        image", "- image"));
    let err = c.fails(&["apply", "--server-side", "-f", nameless.to_str().expect("utf8")]);
    assert!(err.starts_with("Error from server (BadRequest): ") && err.contains("omits key field \"name\""), "{err}");
}

#[test]
fn get_prints_the_servers_tables_like_kubectl() {
    let c = with_shop();
    let t = words(&c.ok(&["get", "deploy", "-n", "shop"]));
    assert_eq!(t[0], ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"]);
    assert_eq!(t[1][..4], ["web", "0/2", "0", "0"]);
    let wide = c.ok(&["get", "deployments.apps", "-n", "shop", "-o", "wide"]);
    assert!(words(&wide)[0].ends_with(&["CONTAINERS".into(), "IMAGES".into(), "SELECTOR".into()]), "{wide}");
    assert!(wide.contains("nginx:1.25") && wide.contains("app=web"), "{wide}");

    let all = c.ok(&["get", "cm", "-A"]);
    assert!(all.starts_with("NAMESPACE   NAME"), "{all}");
    assert!(all.lines().any(|l| starts_with_words(l, &["shop", "settings"])), "{all}");
    let ns = c.ok(&["get", "ns"]);
    assert!(ns.starts_with("NAME") && ns.contains("shop") && ns.contains("kube-system"), "{ns}");
    assert!(!ns.contains("NAMESPACE"), "cluster-scoped: no namespace column\n{ns}");

    assert_eq!(words(&c.ok(&["get", "configmaps", "-n", "shop", "-l", "app=web"])).len(), 2);
    let none = c.run(&["get", "cm", "-n", "shop", "-l", "app=other"]);
    assert!(none.status.success() && stdout(&none).is_empty());
    assert_eq!(stderr(&none), "No resources found in shop namespace.\n");

    assert_eq!(
        c.ok(&["get", "deploy/web", "cm/settings", "-n", "shop", "-o", "name"]),
        "deployment.apps/web\nconfigmap/settings\n"
    );
    let labels = c.ok(&["get", "deploy", "web", "-n", "shop", "--show-labels"]);
    assert!(labels.lines().next().expect("header").ends_with("LABELS") && labels.contains("app=web"), "{labels}");
}

#[test]
fn get_json_and_yaml_round_trip() {
    let c = with_shop();
    let obj: Value = serde_json::from_str(&c.ok(&["get", "deploy", "web", "-n", "shop", "-o", "json"])).expect("json");
    assert_eq!(obj["kind"], "Deployment");
    assert_eq!(obj["apiVersion"], "apps/v1");
    let mut stored = c.get("/apis/apps/v1/namespaces/shop/deployments/web");
    let managed = stored["metadata"].as_object_mut().and_then(|m| m.remove("managedFields"));
    assert!(managed.is_some(), "the server records who wrote what");
    assert_eq!(obj, stored, "the object as stored, without managedFields (as kubectl prints it)");
    let shown: Value =
        serde_json::from_str(&c.ok(&["get", "deploy", "web", "-n", "shop", "-o", "json", "--show-managed-fields"]))
            .expect("json");
    assert_eq!(shown["metadata"]["managedFields"], managed.expect("checked above"));
    let yaml = c.ok(&["get", "deploy", "web", "-n", "shop", "-o", "yaml"]);
    let back: Value = serde_saphyr::from_str(&yaml).expect("yaml parses");
    assert_eq!(back, obj);

    let list: Value = serde_json::from_str(&c.ok(&["get", "cm", "-n", "shop", "-o", "json"])).expect("json list");
    assert_eq!(list["kind"], "List");
    assert_eq!(list["items"][0]["kind"], "ConfigMap", "items carry their kind");
    // What get -o yaml prints is a manifest: applying it records it (as kubectl would); its
    // resourceVersion is a precondition, so applying the stale copy again is a conflict.
    let yaml = c.ok(&["get", "cm", "settings", "-n", "shop", "-o", "yaml"]);
    let f = c.file("back.yaml", &yaml);
    let f = f.to_str().expect("utf8");
    assert_eq!(c.ok(&["apply", "-f", f]), "configmap/settings configured\n");
    assert!(c.fails(&["apply", "-f", f]).starts_with("Error from server (Conflict): "));
    let without_rv: String =
        yaml.lines().filter(|l| !l.contains("resourceVersion:")).map(|l| format!("{l}\n")).collect();
    let f = c.file("back2.yaml", &without_rv);
    let f = f.to_str().expect("utf8");
    assert_eq!(c.ok(&["apply", "-f", f]), "configmap/settings configured\n");
    assert_eq!(c.ok(&["apply", "-f", f]), "configmap/settings unchanged\n");
    assert_eq!(c.get("/api/v1/namespaces/shop/configmaps/settings")["data"], json!({"mode": "fast"}));
}

#[test]
fn get_names_types_like_kubectl_and_says_what_is_missing() {
    let c = with_shop();
    for word in ["deploy", "deployment", "deployments", "Deployment", "deployments.apps", "deployments.v1.apps"] {
        assert!(c.ok(&["get", word, "-n", "shop", "-o", "name"]).contains("deployment.apps/web"), "{word}");
    }
    assert!(c.ok(&["get", "svc", "-A"]).contains("kubernetes"));
    assert_eq!(c.fails(&["get", "widgets"]), "error: the server doesn't have a resource type \"widgets\"");
    assert_eq!(
        c.fails(&["get", "deploy", "nope", "-n", "shop"]),
        "Error from server (NotFound): deployments.apps \"nope\" not found"
    );
    assert_eq!(
        c.fails(&["get", "deploy", "web", "-A"]),
        "error: a resource cannot be retrieved by name across all namespaces"
    );
}

#[test]
fn get_watch_prints_rows_as_they_change() {
    let c = with_shop();
    let w = c.spawn(&["get", "cm", "-n", "shop", "-w"]);
    assert_eq!(words(&w.next_line("header"))[0], ["NAME", "DATA", "AGE"]);
    let row = w.next_line("row");
    assert!(starts_with_words(&row, &["settings", "1"]), "{row}");
    c.create(
        "/api/v1/namespaces/shop/configmaps",
        json!({"metadata": {"name": "extra"}, "data": {"a": "1", "b": "2"}}),
    );
    let row = w.next_line("added row");
    assert!(starts_with_words(&row, &["extra", "2"]), "{row}");
    c.merge("/api/v1/namespaces/shop/configmaps/settings", json!({"data": {"new": "x"}}));
    let row = w.next_line("modified row");
    assert!(starts_with_words(&row, &["settings", "2"]), "{row}");
}

#[test]
fn kubeconfig_contexts_namespaces_and_the_environment_are_honoured() {
    let c = with_shop();
    let kc = c.dir.path().join("kubeconfig");
    // The `shop` context's namespace is the default; -n overrides it.
    let out = c.ok(&["--context", "shop", "get", "cm", "-o", "name"]);
    assert_eq!(out, "configmap/settings\n");
    assert!(c.ok(&["--context", "shop", "-n", "default", "get", "deploy", "-o", "name"]).is_empty());
    // KUBECONFIG instead of --kubeconfig; flags after the command work too.
    let out =
        c.bare().env("KUBECONFIG", &kc).args(["get", "deploy", "-n", "shop", "-o", "name"]).output().expect("runs");
    assert_eq!(stdout(&out), "deployment.apps/web\n", "{}", stderr(&out));
    let out = c.bare().args(["get", "ns"]).output().expect("runs");
    assert!(one_line_failure(&out, &["get", "ns"]).starts_with("error: no kubeconfig"));
    let err = c.fails(&["--context", "nope", "get", "ns"]);
    assert!(err.starts_with("error: invalid kubeconfig") && err.contains("nope"), "{err}");
    let dead = c.write_kubeconfig("dead", "http://127.0.0.1:1");
    let out = c.bare().arg("--kubeconfig").arg(&dead).args(["get", "pods"]).output().expect("runs");
    let err = one_line_failure(&out, &["get", "pods"]);
    assert!(err.starts_with("error: cannot reach the API server at http://127.0.0.1:1: "), "{err}");
    assert!(err.ends_with("Connection refused (os error 111)"), "{err}");
}

#[test]
fn describe_shows_the_essentials_and_the_events() {
    let c = with_shop();
    let d = c.get("/apis/apps/v1/namespaces/shop/deployments/web");
    c.event(&d, "ScalingReplicaSet", "Scaled up replica set web-abc to 2");
    let text = c.ok(&["describe", "deploy", "web", "-n", "shop"]);
    for want in [
        "Name:",
        "Namespace:",
        "shop",
        "Selector:",
        "app=web",
        "2 desired",
        "nginx:1.25",
        "Events:",
        "ScalingReplicaSet",
        "kaji-test",
    ] {
        assert!(text.contains(want), "{want:?} missing in\n{text}");
    }
    assert!(text.contains("Scaled up replica set web-abc to 2"), "{text}");
    assert!(!text.contains("last-applied-configuration"), "{text}");

    let pod = c.create(
        "/api/v1/namespaces/shop/pods",
        json!({"metadata": {"name": "web-1", "labels": {"app": "web"}},
               "spec": {"containers": [{"name": "web", "image": "nginx:1.25"}]}}),
    );
    c.event(&pod, "Scheduled", "Successfully assigned shop/web-1 to n1");
    let text = c.ok(&["describe", "pod/web-1", "-n", "shop"]);
    assert!(
        text.contains("Status:") && text.contains("Pending") && text.contains("Image:") && text.contains("nginx:1.25"),
        "{text}"
    );
    let events: Vec<&str> = text.lines().skip_while(|l| !l.starts_with("Events:")).collect();
    assert!(events.iter().any(|l| starts_with_words(l, &["Normal", "Scheduled"])), "{text}");
    let cm = c.ok(&["describe", "cm", "settings", "-n", "shop"]);
    assert!(cm.contains("mode:\n----\nfast") && cm.contains("Events:") && cm.contains("<none>"), "{cm}");

    let evs = c.ok(&["events", "-n", "shop"]);
    assert_eq!(words(&evs)[0], ["LAST", "SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]);
    assert!(evs.contains("Deployment/web") && evs.contains("Pod/web-1"), "{evs}");
    let for_pod = c.ok(&["events", "-n", "shop", "--for", "pod/web-1"]);
    assert!(for_pod.contains("Pod/web-1") && !for_pod.contains("Deployment/web"), "{for_pod}");
    assert!(c.ok(&["events", "-A"]).starts_with("NAMESPACE"));
}

#[test]
fn scale_sets_replicas_through_the_scale_subresource() {
    let c = with_shop();
    assert_eq!(c.ok(&["scale", "deploy/web", "--replicas", "5", "-n", "shop"]), "deployment.apps/web scaled\n");
    assert_eq!(c.get("/apis/apps/v1/namespaces/shop/deployments/web")["spec"]["replicas"], 5);
    let err = c.fails(&["scale", "deploy/web", "--replicas", "1", "--current-replicas", "3", "-n", "shop"]);
    assert_eq!(err, "error: expected replicas to be 3, was 5");
    assert_eq!(
        c.fails(&["scale", "deploy/nope", "--replicas", "1", "-n", "shop"]),
        "Error from server (NotFound): deployments.apps \"nope\" not found"
    );
}

#[test]
fn rollout_status_follows_the_deployment_until_it_is_complete() {
    let c = with_shop();
    let status = "/apis/apps/v1/namespaces/shop/deployments/web/status";
    c.merge(status, json!({"status": {"observedGeneration": 1, "replicas": 2, "updatedReplicas": 1}}));
    let r = c.spawn(&["rollout", "status", "deployment/web", "-n", "shop"]);
    assert_eq!(
        r.next_line("progress"),
        "Waiting for deployment \"web\" rollout to finish: 1 out of 2 new replicas have been updated..."
    );
    c.merge(status, json!({"status": {"updatedReplicas": 2, "readyReplicas": 1, "availableReplicas": 1}}));
    assert_eq!(
        r.next_line("progress"),
        "Waiting for deployment \"web\" rollout to finish: 1 of 2 updated replicas are available..."
    );
    c.merge(status, json!({"status": {"readyReplicas": 2, "availableReplicas": 2}}));
    assert_eq!(r.next_line("done"), "deployment \"web\" successfully rolled out");
    let (code, err) = r.finish();
    assert!(code.success(), "{err}");

    c.merge(status, json!({"status": {"updatedReplicas": 1, "conditions": [{"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded"}]}}));
    assert_eq!(
        c.fails(&["rollout", "status", "deploy/web", "-n", "shop"]),
        "error: deployment \"web\" exceeded its progress deadline"
    );
    assert_eq!(
        c.fails(&["rollout", "status", "cm/settings", "-n", "shop"]),
        "error: no status viewer has been implemented for configmaps"
    );
}

#[test]
fn delete_removes_objects_and_waits_for_finalizers() {
    let c = with_shop();
    assert_eq!(c.ok(&["delete", "deploy", "web", "-n", "shop"]), "deployment.apps \"web\" deleted\n");
    assert_eq!(
        c.fails(&["get", "deploy", "web", "-n", "shop"]),
        "Error from server (NotFound): deployments.apps \"web\" not found"
    );
    assert_eq!(
        c.fails(&["delete", "deploy", "web", "-n", "shop"]),
        "Error from server (NotFound): deployments.apps \"web\" not found"
    );
    assert!(c.ok(&["delete", "deploy", "web", "-n", "shop", "--ignore-not-found"]).is_empty());

    // A finalizer holds the object; delete waits until it is gone, unless --wait=false.
    c.create(
        "/api/v1/namespaces/shop/configmaps",
        json!({"metadata": {"name": "held", "finalizers": ["example.com/hold"]}}),
    );
    let mut waiting = c.spawn(&["delete", "cm/held", "-n", "shop", "--cascade=foreground"]);
    assert_eq!(waiting.next_line("deleted"), "configmap \"held\" deleted");
    assert!(waiting.still_running_after(Duration::from_millis(800)), "delete returned before the object was gone");
    c.merge("/api/v1/namespaces/shop/configmaps/held", json!({"metadata": {"finalizers": null}}));
    let (code, err) = waiting.finish();
    assert!(code.success(), "{err}");

    c.create(
        "/api/v1/namespaces/shop/configmaps",
        json!({"metadata": {"name": "held2", "finalizers": ["example.com/hold"]}}),
    );
    assert_eq!(c.ok(&["delete", "cm", "held2", "-n", "shop", "--wait=false"]), "configmap \"held2\" deleted\n");
    assert!(c.get("/api/v1/namespaces/shop/configmaps/held2")["metadata"]["deletionTimestamp"].is_string());

    // By manifest (the namespace's own deletion needs the namespace controller, so no wait).
    let f = c.file("shop.yaml", SHOP);
    let out = c.ok(&["delete", "-f", f.to_str().expect("utf8"), "--ignore-not-found", "--wait=false"]);
    assert_eq!(out, "namespace \"shop\" deleted\nconfigmap \"settings\" deleted\n");
}

#[test]
fn usage_errors_are_one_line_and_help_lists_the_commands() {
    let c = Cluster::start();
    let help = c.ok(&["--help"]);
    for cmd in ["apply", "get", "describe", "delete", "logs", "scale", "rollout", "events", "lab"] {
        assert!(help.lines().any(|l| l.trim_start().starts_with(cmd)), "{cmd} missing in\n{help}");
    }
    assert!(c.ok(&["apply", "--help"]).contains("last-applied-configuration"), "apply --help says how it applies");
    assert_eq!(c.fails(&["delete", "pods"]), "error: resource(s) were provided, but no name was specified");
    let lab = c.bare().args(["lab", "up", "-n", "3", "--dir", "/nonexistent"]).output().expect("runs");
    assert!(one_line_failure(&lab, &["lab"]).contains("do not apply to `kaji lab` (did you mean --nodes?)"));
    assert!(c.fails(&["get", "pods", "pod/web"]).starts_with("error: there is no need to specify a resource type"));
}

#[test]
fn token_create_prints_a_bootstrap_token_its_secret_vouches_for() {
    let c = Cluster::start();
    let out = c.ok(&["token", "create", "--ttl", "2h", "--description", "for n1"]);
    let token = out.trim();
    let (id, secret) = token.split_once('.').expect("<id>.<secret>");
    assert_eq!((id.len(), secret.len()), (6, 16), "{token}");
    let s = c.get(&format!("/api/v1/namespaces/kube-system/secrets/bootstrap-token-{id}"));
    assert_eq!(s["type"], "bootstrap.kubernetes.io/token");
    let field = |k: &str| {
        use base64::Engine;
        let b = base64::engine::general_purpose::STANDARD.decode(s["data"][k].as_str().unwrap_or("")).expect("base64");
        String::from_utf8(b).expect("utf-8")
    };
    assert_eq!((field("token-id"), field("token-secret")), (id.to_string(), secret.to_string()));
    assert_eq!(field("usage-bootstrap-authentication"), "true");
    assert_eq!(field("description"), "for n1");
    let expires: jiff::Timestamp = field("expiration").parse().expect("RFC 3339");
    let left = expires.as_second() - jiff::Timestamp::now().as_second();
    assert!((7100..=7200).contains(&left), "expires in {left} s");
    let err = c.fails(&["token", "create", "--groups", "admins"]);
    assert!(err.contains("does not start with \"system:bootstrappers:\""), "{err}");
}
