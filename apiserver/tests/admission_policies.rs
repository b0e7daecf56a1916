//! ValidatingAdmissionPolicy against the real binary: a Deny binding refuses what its policy's
//! CEL validations reject (with the reason's code and Kubernetes' message), a Warn binding lets it
//! through with kubectl printing the warning, parameters come from the object the binding names,
//! bindings' match resources narrow the policy, and the policy kinds carry their status.

mod common;

use common::{eventually, send_json as send, started, ApiServer, Kubectl};
use serde_json::{json, Value};

const POLICIES: &str = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies";
const BINDINGS: &str = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings";

fn post(s: &ApiServer, path: &str, body: Value) -> (u16, Value) {
    send(s, "POST", path, Some(&body), "application/json")
}

fn created(s: &ApiServer, path: &str, body: Value) -> Value {
    let (code, v) = post(s, path, body);
    assert_eq!(code, 201, "{path}: {v}");
    v
}

/// POSTs `body` until the answer has `code`: bindings, policies and their parameters take effect
/// once the watch cache holds them (as in Kubernetes); what got created meanwhile is deleted.
fn until(s: &ApiServer, path: &str, body: Value, code: u16) -> Value {
    let name = body["metadata"]["name"].as_str().unwrap_or("").to_string();
    eventually(&format!("POST {path} ({name}) to answer {code}"), || {
        let (got, v) = post(s, path, body.clone());
        if got == 201 {
            send(s, "DELETE", &format!("{path}/{name}"), None, "application/json");
        }
        (got == code).then_some(v)
    })
}

fn configmap_rules() -> Value {
    json!({"resourceRules": [{"operations": ["CREATE", "UPDATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"]}]})
}

fn cm(name: &str, data: Value) -> Value {
    json!({"metadata": {"name": name}, "data": data})
}

#[test]
fn a_deny_binding_refuses_what_the_policy_rejects() {
    let (_dir, s) = started();
    created(
        &s,
        POLICIES,
        json!({"metadata": {"name": "owner"}, "spec": {"matchConstraints": configmap_rules(),
        "variables": [{"name": "owner", "expression": "has(object.data) && 'owner' in object.data ? object.data.owner : ''"}],
        "validations": [
            {"expression": "variables.owner != ''", "messageExpression": "'configmap ' + object.metadata.name + ' has no owner'"},
            {"expression": "variables.owner != 'mallory'", "message": "mallory owns nothing", "reason": "Forbidden"}]}}),
    );
    let (path, ns) = ("/api/v1/namespaces/default/configmaps", "default");
    // No binding yet: the policy does nothing.
    assert_eq!(post(&s, path, cm("before", json!({}))).0, 201);
    created(
        &s,
        BINDINGS,
        json!({"metadata": {"name": "owner-everywhere"}, "spec": {"policyName": "owner", "validationActions": ["Deny"]}}),
    );
    let body = until(&s, path, cm("orphan", json!({})), 422);
    assert_eq!(body["reason"], "Invalid", "{body}");
    assert_eq!(
        body["message"],
        "configmaps \"orphan\" is forbidden: ValidatingAdmissionPolicy 'owner' with binding 'owner-everywhere' denied request: configmap orphan has no owner"
    );
    let (code, body) = post(&s, path, cm("stolen", json!({"owner": "mallory"})));
    assert_eq!(
        (code, body["message"].as_str().unwrap_or("").ends_with("denied request: mallory owns nothing")),
        (403, true),
        "{body}"
    );
    assert_eq!(post(&s, path, cm("owned", json!({"owner": "alice"}))).0, 201);
    // An update is judged too.
    let (code, _) = send(&s, "PUT", &format!("{path}/owned"), Some(&cm("owned", json!({}))), "application/json");
    assert_eq!(code, 422);
    assert_eq!(send(&s, "GET", &format!("/api/v1/namespaces/{ns}/configmaps/orphan"), None, "application/json").0, 404);
}

#[test]
fn parameters_and_match_resources_come_from_the_binding() {
    let (_dir, s) = started();
    for ns in ["limited", "free"] {
        created(&s, "/api/v1/namespaces", json!({"metadata": {"name": ns, "labels": {"tier": ns}}}));
    }
    created(&s, "/api/v1/namespaces/limited/configmaps", cm("limits", json!({"maxKeys": "2"})));
    created(
        &s,
        POLICIES,
        json!({"metadata": {"name": "max-keys"}, "spec": {"matchConstraints": configmap_rules(),
        "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
        "matchConditions": [{"name": "not-the-limits", "expression": "object.metadata.name != 'limits'"}],
        "validations": [{"expression": "!has(object.data) || size(object.data) <= int(params.data.maxKeys)",
                         "messageExpression": "'at most ' + params.data.maxKeys + ' keys'"}]}}),
    );
    created(
        &s,
        BINDINGS,
        json!({"metadata": {"name": "limited-only"}, "spec": {"policyName": "max-keys", "validationActions": ["Deny"],
        "paramRef": {"name": "limits", "parameterNotFoundAction": "Deny"},
        "matchResources": {"namespaceSelector": {"matchLabels": {"tier": "limited"}}}}}),
    );
    let three = json!({"a": "1", "b": "2", "c": "3"});
    let body = until(&s, "/api/v1/namespaces/limited/configmaps", cm("big", three.clone()), 422);
    assert!(body["message"].as_str().unwrap_or("").ends_with("denied request: at most 2 keys"), "{body}");
    assert_eq!(
        post(&s, "/api/v1/namespaces/free/configmaps", cm("big", three)).0,
        201,
        "the binding's namespaceSelector"
    );
    assert_eq!(post(&s, "/api/v1/namespaces/limited/configmaps", cm("small", json!({"a": "1"}))).0, 201);
    // Without its parameter object the binding denies (parameterNotFoundAction: Deny).
    assert_eq!(send(&s, "DELETE", "/api/v1/namespaces/limited/configmaps/limits", None, "application/json").0, 200);
    let body = until(&s, "/api/v1/namespaces/limited/configmaps", cm("any", json!({})), 422);
    assert!(
        body["message"]
            .as_str()
            .unwrap_or("")
            .ends_with("no params found for policy binding with `Deny` parameterNotFoundAction"),
        "{body}"
    );
}

#[test]
fn a_warn_binding_admits_and_warns() {
    let (_dir, s) = started();
    created(
        &s,
        POLICIES,
        json!({"metadata": {"name": "labelled"}, "spec": {"matchConstraints": configmap_rules(),
        "validations": [{"expression": "has(object.metadata.labels)", "message": "label your configmaps"}]}}),
    );
    created(
        &s,
        BINDINGS,
        json!({"metadata": {"name": "warn"}, "spec": {"policyName": "labelled", "validationActions": ["Warn"]}}),
    );
    let k = Kubectl::new(&s);
    let stderr = eventually("kubectl to print the binding's warning", || {
        let out = k.run(&["create", "configmap", "plain", "-n", "default"]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let stderr = String::from_utf8_lossy(&out.stderr).to_string();
        if !stderr.contains("Warning: ") {
            k.ok(&["delete", "configmap", "plain", "-n", "default"]);
            return None;
        }
        Some(stderr)
    });
    assert!(
        stderr.contains("Warning: Validation failed for ValidatingAdmissionPolicy 'labelled' with binding 'warn': label your configmaps"),
        "{stderr}"
    );
}

#[test]
fn policies_carry_status_and_refuse_expressions_that_do_not_compile() {
    let (_dir, s) = started();
    let (code, body) = post(
        &s,
        POLICIES,
        json!({"metadata": {"name": "bad"}, "spec": {"matchConstraints": configmap_rules(),
        "validations": [{"expression": "object.spec.replicas >"}]}}),
    );
    assert_eq!(code, 422, "{body}");
    assert_eq!(body["details"]["causes"][0]["field"], "spec.validations[0].expression");
    created(
        &s,
        POLICIES,
        json!({"metadata": {"name": "p"}, "status": {"observedGeneration": 9},
        "spec": {"matchConstraints": configmap_rules(), "validations": [{"expression": "true"}]}}),
    );
    let (_, got) = send(&s, "GET", &format!("{POLICIES}/p"), None, "application/json");
    assert_eq!(
        (&got["metadata"]["generation"], got.get("status").and_then(|s| s.get("observedGeneration"))),
        (&json!(1), None)
    );
    let patch = json!({"status": {"conditions": [{"type": "PatchStatusFailed", "status": "False", "reason": "e2e",
        "message": "Set from an e2e test", "lastTransitionTime": "2024-01-01T00:00:00Z"}]}});
    let (code, patched) =
        send(&s, "PATCH", &format!("{POLICIES}/p/status"), Some(&patch), "application/merge-patch+json");
    assert_eq!((code, &patched["status"]["conditions"][0]["type"]), (200, &json!("PatchStatusFailed")), "{patched}");
}
