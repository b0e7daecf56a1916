//! core/v1 PodTemplates against the real binary: the conformance suite's lifecycle (create, get,
//! patch, replace, list by label, watch, delete, deletecollection), defaults and validation,
//! generation, discovery, and the Table it pages with `limit` and `continue`.

mod common;

use common::{http_with, next_event, open_watch, ApiServer, Kubectl};
use serde_json::{json, Value};

const TEMPLATES: &str = "/api/v1/namespaces/default/podtemplates";

use common::{get_json as get, send_json as send, started as setup};

fn create(s: &ApiServer, path: &str, body: &Value) -> Value {
    let (code, made) = send(s, "POST", path, Some(body), "application/json");
    assert_eq!(code, 201, "{made}");
    made
}

/// A PodTemplate as the conformance suite writes one: a name, labels and one container.
fn template(name: &str, labels: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": name, "labels": labels},
           "template": {"spec": {"containers": [{"name": "nginx", "image": "registry.example/nginx:1"}]}}})
}

/// The body of a response sent with chunked transfer encoding (lists as Tables are streamed).
fn dechunk(mut body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(eol) = body.windows(2).position(|w| w == b"\r\n") {
        let size = usize::from_str_radix(String::from_utf8_lossy(&body[..eol]).trim(), 16).unwrap_or(0);
        if size == 0 {
            break;
        }
        let start = eol + 2;
        out.extend_from_slice(&body[start..(start + size).min(body.len())]);
        body = body.get(start + size + 2..).unwrap_or_default();
    }
    out
}

fn names(list: &Value) -> Vec<String> {
    let items = list["items"].as_array().into_iter().flatten();
    items.map(|i| i["metadata"]["name"].as_str().unwrap_or_default().to_owned()).collect()
}

#[test]
fn the_conformance_lifecycle_of_a_pod_template() {
    let (_d, s) = setup();
    let mut watch = open_watch(&s, &format!("{TEMPLATES}?watch=true"));
    let static_label = "/api/v1/podtemplates?labelSelector=podtemplate-static%3Dtrue";
    assert_eq!(names(&get(&s, static_label).1), Vec::<String>::new());

    let made = create(&s, TEMPLATES, &template("nginx", json!({"podtemplate-static": "true"})));
    assert_eq!(made["metadata"]["generation"], 1);
    let spec = &made["template"]["spec"];
    assert_eq!((spec["restartPolicy"].as_str(), spec["dnsPolicy"].as_str()), (Some("Always"), Some("ClusterFirst")));
    assert_eq!(spec["containers"][0]["terminationMessagePath"], "/dev/termination-log");
    assert!(made.get("status").is_none() && made.get("spec").is_none(), "{made}");
    let added = next_event(&mut watch).expect("ADDED");
    assert_eq!((added["type"].as_str(), added["object"]["kind"].as_str()), (Some("ADDED"), Some("PodTemplate")));

    // A strategic merge patch of the labels: a new resourceVersion, the same generation.
    let (code, read) = get(&s, &format!("{TEMPLATES}/nginx"));
    assert_eq!((code, &read["metadata"]["uid"]), (200, &made["metadata"]["uid"]));
    let patch = json!({"metadata": {"labels": {"podtemplate": "patched"}}});
    let (code, patched) =
        send(&s, "PATCH", &format!("{TEMPLATES}/nginx"), Some(&patch), "application/strategic-merge-patch+json");
    assert_eq!(code, 200, "{patched}");
    let rv = |o: &Value| o["metadata"]["resourceVersion"].as_str().unwrap_or("0").parse::<u64>().unwrap_or(0);
    assert!(rv(&patched) > rv(&read));
    assert_eq!(patched["metadata"]["labels"], json!({"podtemplate-static": "true", "podtemplate": "patched"}));
    assert_eq!(patched["metadata"]["generation"], 1, "labels are not the template");
    assert_eq!(next_event(&mut watch).expect("MODIFIED")["type"], "MODIFIED");

    // Replacing it with a new annotation, then a new image: only the template bumps the generation.
    let mut replaced = patched.clone();
    replaced["metadata"]["annotations"] = json!({"updated": "true"});
    let (code, updated) = send(&s, "PUT", &format!("{TEMPLATES}/nginx"), Some(&replaced), "application/json");
    assert_eq!((code, &updated["metadata"]["annotations"]["updated"]), (200, &json!("true")), "{updated}");
    assert_eq!(updated["metadata"]["generation"], 1);
    let image = json!({"template": {"spec": {"containers": [{"name": "nginx", "image": "registry.example/nginx:2"}]}}});
    let (_, bumped) =
        send(&s, "PATCH", &format!("{TEMPLATES}/nginx"), Some(&image), "application/strategic-merge-patch+json");
    assert_eq!(bumped["metadata"]["generation"], 2, "{bumped}");
    assert_eq!(bumped["template"]["spec"]["containers"].as_array().map(Vec::len), Some(1), "merged by name");

    // DELETE answers with the object itself, as podtemplates' store does (ReturnDeletedObject).
    let (code, deleted) = send(&s, "DELETE", &format!("{TEMPLATES}/nginx"), None, "");
    assert_eq!((code, deleted["kind"].as_str()), (200, Some("PodTemplate")), "{deleted}");
    assert_eq!(deleted["metadata"]["name"], "nginx");
    assert_eq!(get(&s, &format!("{TEMPLATES}/nginx")).0, 404);
    assert_eq!(names(&get(&s, static_label).1), Vec::<String>::new());
    let kinds: Vec<Value> = (0..3).filter_map(|_| next_event(&mut watch)).map(|e| e["type"].clone()).collect();
    assert_eq!(kinds, [json!("MODIFIED"), json!("MODIFIED"), json!("DELETED")]);
}

#[test]
fn a_collection_is_deleted_by_label_and_other_namespaces_are_untouched() {
    let (_d, s) = setup();
    create(&s, "/api/v1/namespaces", &json!({"metadata": {"name": "other"}}));
    for name in ["test-podtemplate-1", "test-podtemplate-2", "test-podtemplate-3"] {
        create(&s, TEMPLATES, &template(name, json!({"podtemplate-set": "true"})));
    }
    create(&s, TEMPLATES, &template("keep", json!({"podtemplate-set": "false"})));
    create(&s, "/api/v1/namespaces/other/podtemplates", &template("elsewhere", json!({"podtemplate-set": "true"})));

    let selected = format!("{TEMPLATES}?labelSelector=podtemplate-set%3Dtrue");
    let (code, list) = get(&s, &selected);
    assert_eq!((code, list["kind"].as_str()), (200, Some("PodTemplateList")), "{list}");
    assert_eq!(names(&list), ["test-podtemplate-1", "test-podtemplate-2", "test-podtemplate-3"]);
    assert_eq!(names(&get(&s, "/api/v1/podtemplates?labelSelector=podtemplate-set%3Dtrue").1).len(), 4);

    let (code, body) = send(&s, "DELETE", &selected, None, "");
    assert_eq!(code, 200, "{body}");
    assert_eq!(names(&get(&s, &selected).1), Vec::<String>::new());
    assert_eq!(names(&get(&s, TEMPLATES).1), ["keep"]);
    assert_eq!(names(&get(&s, "/api/v1/namespaces/other/podtemplates").1), ["elsewhere"]);
}

#[test]
fn invalid_templates_are_refused_with_their_template_paths() {
    let (_d, s) = setup();
    let mut empty = template("empty", json!({}));
    empty["template"] = json!({});
    let (code, body) = send(&s, "POST", TEMPLATES, Some(&empty), "application/json");
    assert_eq!((code, body["reason"].as_str()), (422, Some("Invalid")), "{body}");
    assert_eq!(body["message"], "PodTemplate \"empty\" is invalid: template.spec.containers: Required value");
    assert_eq!(body["details"]["kind"], "PodTemplate");

    // A pod's restart policies are all a template's; an ephemeral container is none of them.
    let mut job_like = template("job-like", json!({}));
    job_like["template"]["spec"]["restartPolicy"] = json!("Never");
    assert_eq!(create(&s, TEMPLATES, &job_like)["template"]["spec"]["restartPolicy"], "Never");
    let mut debug = job_like.clone();
    debug["template"]["spec"]["ephemeralContainers"] = json!([{"name": "dbg", "image": "busybox"}]);
    let (code, body) = send(&s, "PUT", &format!("{TEMPLATES}/job-like"), Some(&debug), "application/json");
    assert_eq!(code, 422, "{body}");
    assert_eq!(
        body["message"],
        "PodTemplate \"job-like\" is invalid: template.spec.ephemeralContainers: Forbidden: \
         ephemeral containers not allowed in pod template"
    );

    // Discovery: namespaced, every verb, no short name, no category, no subresource.
    let (_, v1) = get(&s, "/api/v1");
    let resources = v1["resources"].as_array().cloned().unwrap_or_default();
    let found = resources.iter().find(|r| r["name"] == "podtemplates").cloned().expect("listed");
    assert_eq!((found["kind"].as_str(), found["namespaced"].as_bool()), (Some("PodTemplate"), Some(true)));
    assert_eq!(found["singularName"], "podtemplate");
    assert_eq!(
        found["verbs"],
        json!(["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"])
    );
    assert!(found.get("shortNames").is_none_or(|n| n == &json!([])), "{found}");
    assert!(found.get("categories").is_none_or(|c| c == &json!([])), "{found}");
    assert!(!resources.iter().any(|r| r["name"].as_str().is_some_and(|n| n.starts_with("podtemplates/"))));
}

#[test]
fn tables_page_with_limit_and_continue() {
    let (_d, s) = setup();
    for i in 0..5 {
        let mut t = template(&format!("template-{i:04}"), json!({}));
        t["template"]["metadata"] = json!({"labels": {"app": "web", "tier": format!("t{i}")}});
        t["template"]["spec"]["containers"] = json!([{"name": "test", "image": "test2"}]);
        create(&s, TEMPLATES, &t);
    }
    // The conformance suite asks in meta.k8s.io/v1beta1.
    let accept = [("Accept", "application/json;as=Table;v=v1beta1;g=meta.k8s.io")];
    let table = |path: &str| {
        let (code, text) = http_with(&s.addr, "GET", path, &accept, None, "");
        assert_eq!(code, 200, "{text}");
        serde_json::from_slice::<Value>(&dechunk(text.as_bytes())).unwrap_or(Value::Null)
    };
    let first = table(&format!("{TEMPLATES}?limit=2"));
    assert_eq!((first["kind"].as_str(), first["apiVersion"].as_str()), (Some("Table"), Some("meta.k8s.io/v1beta1")));
    let columns: Vec<&str> =
        first["columnDefinitions"].as_array().into_iter().flatten().filter_map(|c| c["name"].as_str()).collect();
    assert_eq!(columns, ["Name", "Containers", "Images", "Pod Labels"]);
    let rows = first["rows"].as_array().cloned().unwrap_or_default();
    assert_eq!(rows.len(), 2, "{first}");
    assert_eq!(rows[0]["cells"], json!(["template-0000", "test", "test2", "app=web,tier=t0"]));
    assert_eq!(rows[1]["cells"][0], "template-0001");
    assert!(first["metadata"]["resourceVersion"].as_str().is_some_and(|rv| !rv.is_empty()), "{first}");
    let token = first["metadata"]["continue"].as_str().unwrap_or_default().to_owned();
    assert!(!token.is_empty(), "{first}");

    let rest = table(&format!("{TEMPLATES}?continue={token}"));
    let cells: Vec<Value> = rest["rows"].as_array().into_iter().flatten().map(|r| r["cells"][0].clone()).collect();
    assert_eq!(cells, ["template-0002", "template-0003", "template-0004"]);
    assert!(rest["metadata"].get("continue").is_none_or(|c| c == ""), "the last page: {rest}");
}

#[test]
fn kubectl_prints_pod_templates_without_an_age_column() {
    let (_d, s) = setup();
    let k = Kubectl::new(&s);
    let manifest = "apiVersion: v1\nkind: PodTemplate\nmetadata: {name: web}\ntemplate:\n  metadata: {labels: {app: web}}\n  spec: {containers: [{name: app, image: busybox}, {name: side, image: nginx}]}\n";
    let f = k.file("pt.yaml", manifest);
    assert_eq!(k.ok(&["create", "-f", f.to_str().expect("utf8")]).trim(), "podtemplate/web created");
    let table = k.ok(&["get", "podtemplates"]);
    let lines: Vec<Vec<&str>> = table.lines().map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(lines[0], ["NAME", "CONTAINERS", "IMAGES", "POD", "LABELS"], "{table}");
    assert_eq!(lines[1], ["web", "app,side", "busybox,nginx", "app=web"], "{table}");
    assert!(!k.ok(&["get", "all"]).contains("podtemplate"), "not in the `all` category");
    k.ok(&["apply", "--server-side", "-f", f.to_str().expect("utf8")]);
    assert_eq!(k.ok(&["delete", "podtemplate", "web"]).trim(), "podtemplate \"web\" deleted");
}
