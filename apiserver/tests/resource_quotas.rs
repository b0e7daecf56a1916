//! core/v1 ResourceQuotas against the real binary: CRUD and the status subresource, and quota
//! admission — Kubernetes' refusal messages, usage charged before the object is stored, dry runs
//! never charged, and racing creates never both taking the last unit.

mod common;

use common::{get_json as get, send_json as send, started as setup, ApiServer};
use serde_json::{json, Value};

const QUOTAS: &str = "/api/v1/namespaces/default/resourcequotas";
const JSON: &str = "application/json";

fn quota(name: &str, hard: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": name}, "spec": {"hard": hard}})
}

/// What the quota controller would write: status.hard = spec.hard and the given usage.
fn set_status(s: &ApiServer, name: &str, used: Value) -> Value {
    let (_, q) = get(s, &format!("{QUOTAS}/{name}"));
    let mut q = q;
    q["status"] = json!({"hard": q["spec"]["hard"].clone(), "used": used});
    let (code, body) = send(s, "PUT", &format!("{QUOTAS}/{name}/status"), Some(&q), JSON);
    assert_eq!(code, 200, "{body}");
    body
}

fn pod(name: &str, cpu: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {"containers": [
        {"name": "pause", "image": "registry.example/pause:3", "resources": {"requests": {"cpu": cpu, "memory": "10Mi"}}}]}})
}

#[test]
fn a_quota_is_created_without_status_and_its_status_written_only_through_status() {
    let (_d, s) = setup();
    let mut q = quota("test-quota", json!({"cpu": "1", "memory": "500Mi", "count/replicasets.apps": "5"}));
    q["status"] = json!({"hard": {"cpu": "100"}, "used": {"cpu": "0"}});
    let (code, made) = send(&s, "POST", QUOTAS, Some(&q), JSON);
    assert_eq!(code, 201, "{made}");
    assert!(made.get("status").is_none_or(|st| st.get("hard").is_none()), "status is reset on create: {made}");

    // The main endpoint keeps the stored status; /status keeps the spec.
    let written = set_status(&s, "test-quota", json!({"cpu": "0", "memory": "0", "count/replicasets.apps": "0"}));
    assert_eq!(written["status"]["hard"]["cpu"], "1");
    let mut forged = written.clone();
    forged["status"]["used"]["cpu"] = json!("0");
    forged["status"]["hard"]["cpu"] = json!("1000");
    forged["spec"]["hard"]["cpu"] = json!("2");
    let (code, body) = send(&s, "PUT", &format!("{QUOTAS}/test-quota"), Some(&forged), JSON);
    assert_eq!(code, 200, "{body}");
    assert_eq!((body["spec"]["hard"]["cpu"].as_str(), body["status"]["hard"]["cpu"].as_str()), (Some("2"), Some("1")));
    let patch = json!({"spec": {"hard": {"cpu": "5"}}, "status": {"hard": {"cpu": "7"}}});
    let (code, body) =
        send(&s, "PATCH", &format!("{QUOTAS}/test-quota/status"), Some(&patch), "application/merge-patch+json");
    assert_eq!(code, 200, "{body}");
    assert_eq!((body["spec"]["hard"]["cpu"].as_str(), body["status"]["hard"]["cpu"].as_str()), (Some("2"), Some("7")));

    // Validation with Kubernetes' paths; scopes fixed after create.
    let (code, body) = send(&s, "POST", QUOTAS, Some(&quota("bad", json!({"pods": "-1", "widgets": "1"}))), JSON);
    assert_eq!(code, 422, "{body}");
    assert_eq!(
        body["message"],
        "ResourceQuota \"bad\" is invalid: [spec.hard[pods]: Invalid value: \"-1\": must be greater than or equal to 0, \
         spec.hard[widgets]: Invalid value: \"widgets\": must be a standard resource type or fully qualified]"
    );

    // Discovery.
    let (_, v1) = get(&s, "/api/v1");
    let found = |name: &str| v1["resources"].as_array().into_iter().flatten().find(|r| r["name"] == name).cloned();
    assert_eq!(found("resourcequotas").expect("served")["shortNames"], json!(["quota"]));
    assert!(found("resourcequotas/status").is_some());
    // DELETE answers the object.
    let (code, gone) = send(&s, "DELETE", &format!("{QUOTAS}/test-quota"), None, "");
    assert_eq!((code, gone["kind"].as_str()), (200, Some("ResourceQuota")), "{gone}");
}

#[test]
fn admission_refuses_what_exceeds_a_quota_and_charges_what_it_admits() {
    let (_d, s) = setup();
    let (code, body) =
        send(&s, "POST", QUOTAS, Some(&quota("q", json!({"cpu": "1", "memory": "1Gi", "pods": "5"}))), JSON);
    assert_eq!(code, 201, "{body}");

    // A quota enforces its status' hard limits: until the controller writes them, nothing; once
    // they are written, nothing whose usage it has not counted yet.
    let (code, body) = send(&s, "POST", "/api/v1/namespaces/default/pods", Some(&pod("early", "100m")), JSON);
    assert_eq!(code, 201, "{body}");
    set_status(&s, "q", json!({"cpu": "0"}));
    let (code, body) = send(&s, "POST", "/api/v1/namespaces/default/pods", Some(&pod("later", "100m")), JSON);
    assert_eq!((code, body["reason"].as_str()), (403, Some("Forbidden")), "{body}");
    assert_eq!(body["message"], "pods \"later\" is forbidden: status unknown for quota: q, resources: cpu,memory,pods");

    set_status(&s, "q", json!({"cpu": "0", "memory": "0", "pods": "0"}));
    let (code, body) = send(&s, "POST", "/api/v1/namespaces/default/pods", Some(&pod("a", "500m")), JSON);
    assert_eq!(code, 201, "{body}");
    let (_, q) = get(&s, &format!("{QUOTAS}/q"));
    assert_eq!(q["status"]["used"], json!({"cpu": "500m", "memory": "10Mi", "pods": "1"}), "charged on admission");

    // A dry run is judged, never charged.
    let (code, body) = send(&s, "POST", "/api/v1/namespaces/default/pods?dryRun=All", Some(&pod("dry", "500m")), JSON);
    assert_eq!(code, 201, "{body}");
    let (_, after) = get(&s, &format!("{QUOTAS}/q"));
    assert_eq!(after["status"]["used"], q["status"]["used"]);
    assert_eq!(after["metadata"]["resourceVersion"], q["metadata"]["resourceVersion"]);

    let (code, body) = send(&s, "POST", "/api/v1/namespaces/default/pods", Some(&pod("big", "600m")), JSON);
    assert_eq!(code, 403, "{body}");
    assert_eq!(
        body["message"],
        "pods \"big\" is forbidden: exceeded quota: q, requested: cpu=600m, used: cpu=500m, limited: cpu=1"
    );
    let (code, body) = send(&s, "POST", "/api/v1/namespaces/default/pods?dryRun=All", Some(&pod("big", "600m")), JSON);
    assert_eq!(code, 403, "a dry run is refused as the real write would be: {body}");

    let mut bare = pod("bare", "1m");
    bare["spec"]["containers"][0]["resources"] = json!({});
    let (code, body) = send(&s, "POST", "/api/v1/namespaces/default/pods", Some(&bare), JSON);
    assert_eq!(code, 403, "{body}");
    assert_eq!(
        body["message"],
        "pods \"bare\" is forbidden: failed quota: q: must specify cpu for: pause; memory for: pause"
    );

    // Other namespaces and kinds the quota does not limit pass untouched.
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}});
    assert_eq!(send(&s, "POST", "/api/v1/namespaces/default/configmaps", Some(&cm), JSON).0, 201);
}

#[test]
fn racing_creates_never_both_take_the_last_unit() {
    let (_d, s) = setup();
    let (code, _) = send(&s, "POST", QUOTAS, Some(&quota("q", json!({"configmaps": "3"}))), JSON);
    assert_eq!(code, 201);
    set_status(&s, "q", json!({"configmaps": "0"}));
    let addr = s.addr.clone();
    let threads: Vec<_> = (0..8)
        .map(|i| {
            let addr = addr.clone();
            std::thread::spawn(move || {
                let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("c{i}")}});
                common::http(&addr, "POST", "/api/v1/namespaces/default/configmaps", Some(&cm.to_string()), JSON).0
            })
        })
        .collect();
    let codes: Vec<u16> = threads.into_iter().map(|t| t.join().expect("a thread")).collect();
    let created = codes.iter().filter(|c| **c == 201).count();
    assert_eq!(created, 3, "exactly the quota's worth is admitted: {codes:?}");
    assert!(codes.iter().all(|c| *c == 201 || *c == 403 || *c == 409), "{codes:?}");
    let (_, q) = get(&s, &format!("{QUOTAS}/q"));
    assert_eq!(q["status"]["used"]["configmaps"], "3");
}
