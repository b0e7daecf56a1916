//! The kinds served through `kaji_api::kinds` strategies, against the real binary: each one's
//! CRUD cycle as the conformance suite's "API operations" specs run it (discovery, create, get,
//! list, watch, patch, replace, status, delete, deletecollection), and the admission plugins that
//! come with them (LimitRanger, Priority, RuntimeClass, DefaultIngressClass).

mod common;

use common::{get_json as get, next_event, open_watch, send_json as send, started, ApiServer};
use serde_json::{json, Value};

/// A valid object of each kind, with the path of its collection.
fn samples() -> Vec<(&'static str, &'static str, Value)> {
    vec![
        (
            "IngressClass",
            "/apis/networking.k8s.io/v1/ingressclasses",
            json!({"spec": {"controller": "kaji.dev/ingress"}}),
        ),
        (
            "Ingress",
            "/apis/networking.k8s.io/v1/namespaces/default/ingresses",
            json!({"spec": {"defaultBackend": {"service": {"name": "web", "port": {"number": 80}}}}}),
        ),
        (
            "NetworkPolicy",
            "/apis/networking.k8s.io/v1/namespaces/default/networkpolicies",
            json!({"spec": {"podSelector": {}}}),
        ),
        ("RuntimeClass", "/apis/node.k8s.io/v1/runtimeclasses", json!({"handler": "runc"})),
        ("PriorityClass", "/apis/scheduling.k8s.io/v1/priorityclasses", json!({"value": 1000})),
        (
            "FlowSchema",
            "/apis/flowcontrol.apiserver.k8s.io/v1/flowschemas",
            json!({"spec": {"priorityLevelConfiguration": {"name": "global-default"}}}),
        ),
        (
            "PriorityLevelConfiguration",
            "/apis/flowcontrol.apiserver.k8s.io/v1/prioritylevelconfigurations",
            json!({"spec": {"type": "Limited", "limited": {"limitResponse": {"type": "Reject"}}}}),
        ),
        ("CSIDriver", "/apis/storage.k8s.io/v1/csidrivers", json!({"spec": {}})),
        ("CSINode", "/apis/storage.k8s.io/v1/csinodes", json!({"spec": {"drivers": []}})),
        (
            "CSIStorageCapacity",
            "/apis/storage.k8s.io/v1/namespaces/default/csistoragecapacities",
            json!({"storageClassName": "local"}),
        ),
        (
            "VolumeAttachment",
            "/apis/storage.k8s.io/v1/volumeattachments",
            json!({"spec": {"attacher": "csi.example.com", "nodeName": "n1", "source": {"persistentVolumeName": "pv1"}}}),
        ),
        (
            "VolumeAttributesClass",
            "/apis/storage.k8s.io/v1/volumeattributesclasses",
            json!({"driverName": "csi.example.com"}),
        ),
        (
            "LimitRange",
            "/api/v1/namespaces/default/limitranges",
            json!({"spec": {"limits": [{"type": "Container", "max": {"cpu": "2"}}]}}),
        ),
        ("DeviceClass", "/apis/resource.k8s.io/v1/deviceclasses", json!({"spec": {}})),
        (
            "ResourceClaim",
            "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims",
            json!({"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}}]}}}),
        ),
        (
            "ResourceSlice",
            "/apis/resource.k8s.io/v1/resourceslices",
            json!({"spec": {"driver": "gpu.example.com", "nodeName": "n1", "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 1}}}),
        ),
        ("ServiceCIDR", "/apis/networking.k8s.io/v1/servicecidrs", json!({"spec": {"cidrs": ["10.200.0.0/24"]}})),
        (
            "ValidatingWebhookConfiguration",
            "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
            json!({"webhooks": [{"name": "a.kaji.test", "sideEffects": "None", "admissionReviewVersions": ["v1"],
                "clientConfig": {"url": "https://hook.kaji.test/"}}]}),
        ),
        (
            "MutatingWebhookConfiguration",
            "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations",
            json!({"webhooks": [{"name": "a.kaji.test", "sideEffects": "None", "admissionReviewVersions": ["v1"],
                "clientConfig": {"url": "https://hook.kaji.test/"}}]}),
        ),
        (
            "ValidatingAdmissionPolicy",
            "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies",
            json!({"spec": {"matchConstraints": {"resourceRules": [{"operations": ["CREATE"], "apiGroups": ["apps"],
                "apiVersions": ["v1"], "resources": ["deployments"]}]}, "validations": [{"expression": "object.spec.replicas <= 100"}]}}),
        ),
        (
            "ValidatingAdmissionPolicyBinding",
            "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings",
            json!({"spec": {"policyName": "nothing-yet", "validationActions": ["Deny"]}}),
        ),
    ]
}

/// A status patch for `kind`, where it shows and what it must read.
fn status_write(kind: &str) -> (Value, &'static str, Value) {
    let condition = json!({"type": "Ready", "status": "True", "reason": "E2E", "message": "set",
        "lastTransitionTime": "2026-01-01T00:00:00Z"});
    match kind {
        "Ingress" => (
            json!({"status": {"loadBalancer": {"ingress": [{"ip": "10.0.0.1"}]}}}),
            "/status/loadBalancer/ingress/0/ip",
            json!("10.0.0.1"),
        ),
        "VolumeAttachment" => (json!({"status": {"attached": true}}), "/status/attached", json!(true)),
        "ResourceClaim" => (
            json!({"status": {"reservedFor": [{"resource": "pods", "name": "p", "uid": "u1"}]}}),
            "/status/reservedFor/0/name",
            json!("p"),
        ),
        _ => (json!({"status": {"conditions": [condition]}}), "/status/conditions/0/reason", json!("E2E")),
    }
}

fn api_version(path: &str) -> String {
    match path.strip_prefix("/apis/") {
        Some(rest) => rest.split('/').take(2).collect::<Vec<_>>().join("/"),
        None => "v1".into(),
    }
}

#[test]
fn every_strategy_kind_runs_the_api_operations_cycle() {
    let (_d, s) = started();
    for (kind, path, body) in samples() {
        let name = if kind == "IPAddress" { "10.0.0.9".to_owned() } else { format!("e2e-{}", kind.to_lowercase()) };
        let mut obj = body.clone();
        obj["apiVersion"] = json!(api_version(path));
        obj["kind"] = json!(kind);
        obj["metadata"] = json!({"name": name, "labels": {"e2e": "cycle"}});
        let mut watch = open_watch(&s, &format!("{path}?watch=true&labelSelector=e2e%3Dcycle"));
        let (code, made) = send(&s, "POST", path, Some(&obj), "application/json");
        assert_eq!(code, 201, "{kind}: {made}");
        assert_eq!(made["kind"], kind);
        let added = next_event(&mut watch).expect("ADDED");
        assert_eq!(
            (added["type"].as_str(), added["object"]["metadata"]["name"].as_str()),
            (Some("ADDED"), Some(name.as_str()))
        );

        let item = format!("{path}/{name}");
        let (code, got) = get(&s, &item);
        assert_eq!((code, &got["metadata"]["uid"]), (200, &made["metadata"]["uid"]), "{kind}");
        let (code, list) = get(&s, &format!("{path}?labelSelector=e2e%3Dcycle"));
        assert_eq!((code, list["items"].as_array().map(Vec::len)), (200, Some(1)), "{kind}: {list}");
        assert_eq!(list["kind"], format!("{kind}List"));

        let patch = json!({"metadata": {"annotations": {"patched": "true"}}});
        let (code, patched) = send(&s, "PATCH", &item, Some(&patch), "application/merge-patch+json");
        assert_eq!((code, &patched["metadata"]["annotations"]["patched"]), (200, &json!("true")), "{kind}: {patched}");
        let mut replaced = patched.clone();
        replaced["metadata"]["labels"]["replaced"] = json!("true");
        let (code, put) = send(&s, "PUT", &item, Some(&replaced), "application/json");
        assert_eq!((code, &put["metadata"]["labels"]["replaced"]), (200, &json!("true")), "{kind}: {put}");
        assert_eq!(next_event(&mut watch).expect("MODIFIED")["type"], "MODIFIED");
        assert_eq!(next_event(&mut watch).expect("MODIFIED")["type"], "MODIFIED");

        let info = kaji_api::resources::by_kind(kind).expect("served");
        if info.has(kaji_api::resources::Subresource::Status) {
            let (status, pointer, expected) = status_write(kind);
            let (code, st) =
                send(&s, "PATCH", &format!("{item}/status"), Some(&status), "application/merge-patch+json");
            assert_eq!(code, 200, "{kind}/status: {st}");
            let (_, after) = get(&s, &item);
            assert_eq!(after.pointer(pointer), Some(&expected), "{kind}: status kept: {after}");
            // The main resource does not write status.
            let mut cleared = after.clone();
            cleared["status"] = json!({});
            let (code, put) = send(&s, "PUT", &item, Some(&cleared), "application/json");
            assert_eq!((code, put.pointer(pointer)), (200, Some(&expected)), "{kind}: {put}");
        }
        let (code, gone) = send(&s, "DELETE", &format!("{path}?labelSelector=e2e%3Dcycle"), None, "");
        assert_eq!(code, 200, "{kind}: {gone}");
        let (code, _) = get(&s, &item);
        assert_eq!(code, 404, "{kind} deleted by collection");
    }
}

#[test]
fn new_groups_are_discovered_with_their_resources() {
    let (_d, s) = started();
    let (_, groups) = get(&s, "/apis");
    let names: Vec<&str> =
        groups["groups"].as_array().expect("a list").iter().filter_map(|g| g["name"].as_str()).collect();
    for g in
        ["networking.k8s.io", "node.k8s.io", "scheduling.k8s.io", "flowcontrol.apiserver.k8s.io", "resource.k8s.io"]
    {
        assert!(names.contains(&g), "{g} in {names:?}");
    }
    let (_, net) = get(&s, "/apis/networking.k8s.io/v1");
    let ing =
        net["resources"].as_array().expect("a list").iter().find(|r| r["name"] == "ingresses").expect("ingresses");
    assert_eq!((ing["namespaced"].as_bool(), ing["shortNames"][0].as_str()), (Some(true), Some("ing")));
    assert!(net["resources"].as_array().expect("a list").iter().any(|r| r["name"] == "ingresses/status"));
}

fn post(s: &ApiServer, path: &str, body: Value) -> (u16, Value) {
    send(s, "POST", path, Some(&body), "application/json")
}

fn pod(name: &str, extra: Value) -> Value {
    let mut spec = json!({"containers": [{"name": "app", "image": "registry.example/app:1"}]});
    for (k, v) in extra.as_object().into_iter().flatten() {
        spec[k] = v.clone();
    }
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec})
}

const PODS: &str = "/api/v1/namespaces/default/pods";

#[test]
fn limit_ranges_default_containers_and_refuse_pods_outside_their_bounds() {
    let (_d, s) = started();
    let lr = json!({"metadata": {"name": "limits"}, "spec": {"limits": [{"type": "Container",
        "max": {"cpu": "500m", "memory": "500Mi"}, "min": {"cpu": "100m", "memory": "100Mi"},
        "default": {"cpu": "300m", "memory": "300Mi"}, "defaultRequest": {"cpu": "200m", "memory": "200Mi"}}]}});
    let (code, made) = post(&s, "/api/v1/namespaces/default/limitranges", lr);
    assert_eq!(code, 201, "{made}");
    let (code, p) = post(&s, PODS, pod("defaulted", json!({})));
    assert_eq!(code, 201, "{p}");
    assert_eq!(
        p["spec"]["containers"][0]["resources"],
        json!({"limits": {"cpu": "300m", "memory": "300Mi"}, "requests": {"cpu": "200m", "memory": "200Mi"}})
    );
    let big = json!({"containers": [{"name": "app", "image": "x", "resources": {"limits": {"cpu": "600m"}, "requests": {"cpu": "50m"}}}]});
    let (code, refused) = post(&s, PODS, pod("big", big));
    assert_eq!(code, 403, "{refused}");
    assert_eq!(
        refused["message"],
        "pods \"big\" is forbidden: [minimum cpu usage per Container is 100m, but request is 50m, maximum cpu usage per Container is 500m, but limit is 600m]"
    );
    // Another namespace's pods are not bound by it.
    let (code, _) = post(&s, "/api/v1/namespaces/kube-public/pods", pod("free", json!({})));
    assert_eq!(code, 201);
}

#[test]
fn priority_classes_give_pods_their_priority_and_system_classes_stay() {
    let (_d, s) = started();
    let (code, critical) = get(&s, "/apis/scheduling.k8s.io/v1/priorityclasses/system-node-critical");
    assert_eq!((code, &critical["value"]), (200, &json!(2_000_001_000)), "{critical}");
    let (code, refused) =
        send(&s, "DELETE", "/apis/scheduling.k8s.io/v1/priorityclasses/system-node-critical", None, "");
    assert_eq!(code, 403, "{refused}");
    assert_eq!(
        refused["message"],
        "priorityclasses.scheduling.k8s.io \"system-node-critical\" is forbidden: this is a system priority class and cannot be deleted"
    );

    let (code, p) = post(&s, PODS, pod("plain", json!({})));
    assert_eq!(
        (code, &p["spec"]["priority"], &p["spec"]["preemptionPolicy"]),
        (201, &json!(0), &json!("PreemptLowerPriority"))
    );
    let (code, p) = post(&s, PODS, pod("dns", json!({"priorityClassName": "system-cluster-critical"})));
    assert_eq!((code, &p["spec"]["priority"]), (201, &json!(2_000_000_000)), "{p}");
    let (code, missing) = post(&s, PODS, pod("lost", json!({"priorityClassName": "nope"})));
    assert_eq!(
        (code, missing["message"].as_str()),
        (403, Some("pods \"lost\" is forbidden: no PriorityClass with name nope was found"))
    );
    let (code, lie) =
        post(&s, PODS, pod("liar", json!({"priorityClassName": "system-cluster-critical", "priority": 5})));
    assert_eq!(code, 403, "{lie}");

    let classes = "/apis/scheduling.k8s.io/v1/priorityclasses";
    let (code, _) = post(
        &s,
        classes,
        json!({"metadata": {"name": "low"}, "value": 10, "globalDefault": true, "preemptionPolicy": "Never"}),
    );
    assert_eq!(code, 201);
    let (code, second) = post(&s, classes, json!({"metadata": {"name": "other"}, "value": 20, "globalDefault": true}));
    assert_eq!(
        (code, second["message"].as_str()),
        (403, Some("priorityclasses.scheduling.k8s.io \"other\" is forbidden: PriorityClass low is already marked as default. Only one default can exist"))
    );
    let (code, p) = post(&s, PODS, pod("defaulted", json!({})));
    assert_eq!(code, 201);
    assert_eq!(
        (&p["spec"]["priorityClassName"], &p["spec"]["priority"], &p["spec"]["preemptionPolicy"]),
        (&json!("low"), &json!(10), &json!("Never"))
    );
}

#[test]
fn runtime_classes_must_exist_and_bring_overhead_and_scheduling() {
    let (_d, s) = started();
    let (code, missing) = post(&s, PODS, pod("lost", json!({"runtimeClassName": "gvisor"})));
    assert_eq!(
        (code, missing["message"].as_str()),
        (403, Some("pods \"lost\" is forbidden: pod rejected: RuntimeClass \"gvisor\" not found"))
    );
    let rc = json!({"metadata": {"name": "gvisor"}, "handler": "runsc", "overhead": {"podFixed": {"cpu": "250m"}},
        "scheduling": {"nodeSelector": {"sandbox": "yes"}, "tolerations": [{"key": "sandbox", "operator": "Exists"}]}});
    assert_eq!(post(&s, "/apis/node.k8s.io/v1/runtimeclasses", rc).0, 201);
    let (code, p) = post(&s, PODS, pod("boxed", json!({"runtimeClassName": "gvisor"})));
    assert_eq!(code, 201, "{p}");
    assert_eq!(p["spec"]["overhead"], json!({"cpu": "250m"}));
    assert_eq!(p["spec"]["nodeSelector"], json!({"sandbox": "yes"}));
    assert!(p["spec"]["tolerations"]
        .as_array()
        .expect("a list")
        .contains(&json!({"key": "sandbox", "operator": "Exists"})));
    let (code, conflict) =
        post(&s, PODS, pod("clash", json!({"runtimeClassName": "gvisor", "nodeSelector": {"sandbox": "no"}})));
    assert_eq!(code, 403, "{conflict}");
    let (code, overhead) = post(&s, PODS, pod("sneaky", json!({"overhead": {"cpu": "1"}})));
    assert_eq!(
        (code, overhead["message"].as_str()),
        (403, Some("pods \"sneaky\" is forbidden: pod rejected: Pod Overhead set without corresponding RuntimeClass defined Overhead"))
    );
}

#[test]
fn ingresses_without_a_class_get_the_default_one() {
    let (_d, s) = started();
    let class = json!({"metadata": {"name": "kaji", "annotations": {"ingressclass.kubernetes.io/is-default-class": "true"}},
        "spec": {"controller": "kaji.dev/ingress"}});
    assert_eq!(post(&s, "/apis/networking.k8s.io/v1/ingressclasses", class).0, 201);
    let ing = |name: &str, class: Option<&str>| {
        let mut spec = json!({"defaultBackend": {"service": {"name": "web", "port": {"number": 80}}}});
        if let Some(c) = class {
            spec["ingressClassName"] = json!(c);
        }
        json!({"metadata": {"name": name}, "spec": spec})
    };
    let path = "/apis/networking.k8s.io/v1/namespaces/default/ingresses";
    let (code, made) = post(&s, path, ing("web", None));
    assert_eq!((code, &made["spec"]["ingressClassName"]), (201, &json!("kaji")), "{made}");
    let (_, other) = post(&s, path, ing("other", Some("nginx")));
    assert_eq!(other["spec"]["ingressClassName"], "nginx");
    assert_eq!(made["metadata"]["generation"], 1);
    let mut sent = ing("status", None);
    sent["status"] = json!({"loadBalancer": {"ingress": [{"ip": "10.0.0.1"}]}});
    let (_, created) = post(&s, path, sent);
    assert_eq!(created["status"], json!({"loadBalancer": {}}), "create drops a sent status: {created}");
}

/// A running, ready pod labelled app=web (what the agent would report).
fn running_pod(s: &ApiServer, name: &str) {
    let (code, made) = post(
        s,
        PODS,
        json!({"metadata": {"name": name, "labels": {"app": "web"}},
        "spec": {"nodeName": "n1", "containers": [{"name": "app", "image": "registry.example/app:1"}]}}),
    );
    assert_eq!(code, 201, "{made}");
    let status = json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}});
    let (code, st) = send(s, "PATCH", &format!("{PODS}/{name}/status"), Some(&status), "application/merge-patch+json");
    assert_eq!(code, 200, "{st}");
}

fn evict(s: &ApiServer, name: &str) -> (u16, Value) {
    let body = json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name}});
    send(s, "POST", &format!("{PODS}/{name}/eviction"), Some(&body), "application/json")
}

#[test]
fn evictions_take_the_disruptions_a_budget_allows_and_no_more() {
    let (_d, s) = started();
    running_pod(&s, "a");
    running_pod(&s, "b");
    let pdbs = "/apis/policy/v1/namespaces/default/poddisruptionbudgets";
    let budget =
        json!({"metadata": {"name": "web"}, "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}}});
    let (code, made) = post(&s, pdbs, budget);
    assert_eq!((code, &made["metadata"]["generation"]), (201, &json!(1)), "{made}");
    // Before the disruption controller has seen the budget, evictions wait.
    let (code, wait) = evict(&s, "a");
    assert_eq!(code, 429, "{wait}");
    assert_eq!(
        wait["details"]["causes"][0]["message"],
        "The disruption budget web is still being processed by the server."
    );
    // Play the controller: one disruption allowed.
    let status = json!({"status": {"observedGeneration": 1, "currentHealthy": 2, "desiredHealthy": 1, "expectedPods": 2, "disruptionsAllowed": 1}});
    let (code, st) = send(&s, "PATCH", &format!("{pdbs}/web/status"), Some(&status), "application/merge-patch+json");
    assert_eq!(code, 200, "{st}");
    let (code, ok) = evict(&s, "a");
    assert_eq!((code, &ok["status"]), (201, &json!("Success")), "{ok}");
    let (_, pod) = get(&s, &format!("{PODS}/a"));
    assert!(pod["metadata"]["deletionTimestamp"].is_string(), "{pod}");
    let target = pod["status"]["conditions"]
        .as_array()
        .expect("conditions")
        .iter()
        .find(|c| c["type"] == "DisruptionTarget")
        .cloned();
    assert_eq!(target.map(|c| c["reason"].clone()), Some(json!("EvictionByEvictionAPI")));
    let (code, after) = get(&s, &format!("{pdbs}/web"));
    assert_eq!((code, &after["status"]["disruptionsAllowed"]), (200, &json!(0)), "{after}");
    assert!(after["status"]["disruptedPods"]["a"].is_string(), "{after}");
    let (code, refused) = evict(&s, "b");
    assert_eq!(code, 429, "{refused}");
    assert_eq!(refused["message"], "Cannot evict pod as it would violate the pod's disruption budget.");
    assert_eq!(
        refused["details"]["causes"][0],
        json!({"reason": "DisruptionBudget", "message": "The disruption budget web does not allow evicting pods currently"})
    );
    // A dry run is judged but takes nothing.
    let again = json!({"status": {"disruptionsAllowed": 1, "disruptedPods": null}});
    let (code, _) = send(&s, "PATCH", &format!("{pdbs}/web/status"), Some(&again), "application/merge-patch+json");
    assert_eq!(code, 200);
    let body = json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "b"}});
    let (code, dry) = send(&s, "POST", &format!("{PODS}/b/eviction?dryRun=All"), Some(&body), "application/json");
    assert_eq!(code, 201, "{dry}");
    let (_, b) = get(&s, &format!("{PODS}/b"));
    assert!(b["metadata"].get("deletionTimestamp").is_none(), "{b}");
    assert_eq!(get(&s, &format!("{pdbs}/web")).1["status"]["disruptionsAllowed"], 1);
    // A pending pod needs no budget.
    let (code, _) = post(
        &s,
        PODS,
        json!({"metadata": {"name": "c", "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "app", "image": "registry.example/app:1"}]}}),
    );
    assert_eq!(code, 201);
    assert_eq!(evict(&s, "c").0, 201, "a pending pod is evicted whatever the budget");
    let (code, wrong) = send(
        &s,
        "POST",
        &format!("{PODS}/b/eviction"),
        Some(&json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "a"}})),
        "application/json",
    );
    assert_eq!((code, wrong["message"].as_str()), (400, Some("name in URL does not match name in Eviction object")));
}

#[test]
fn status_writes_change_status_and_metadata_never_the_spec() {
    let (_d, s) = started();
    let path = "/apis/networking.k8s.io/v1/namespaces/default/ingresses";
    let ing = json!({"metadata": {"name": "web"}, "spec": {"ingressClassName": "a",
        "defaultBackend": {"service": {"name": "web", "port": {"number": 80}}}}});
    assert_eq!(post(&s, path, ing).0, 201);
    // The conformance suite's Ingress status patch: an annotation and the load balancer.
    let patch = json!({"metadata": {"annotations": {"patchedstatus": "true"}}, "spec": {"ingressClassName": "b"},
        "status": {"loadBalancer": {"ingress": [{"ip": "169.1.1.1"}]}}});
    let (code, got) = send(&s, "PATCH", &format!("{path}/web/status"), Some(&patch), "application/merge-patch+json");
    assert_eq!(code, 200, "{got}");
    assert_eq!(got["metadata"]["annotations"]["patchedstatus"], "true");
    assert_eq!(got["status"]["loadBalancer"]["ingress"][0]["ip"], "169.1.1.1");
    assert_eq!(got["spec"]["ingressClassName"], "a", "the spec does not change through /status");
    assert_eq!(got["metadata"]["generation"], 1);
}

#[test]
fn the_default_service_cidr_is_the_cluster_range_and_ready() {
    let (_d, s) = started();
    let (code, cidr) = get(&s, "/apis/networking.k8s.io/v1/servicecidrs/kubernetes");
    assert_eq!(code, 200, "{cidr}");
    assert_eq!(cidr["spec"]["cidrs"].as_array().map(Vec::len), Some(1));
    assert_eq!(cidr["status"]["conditions"][0]["type"], "Ready");
    assert_eq!(cidr["status"]["conditions"][0]["status"], "True");
    let (code, st) = get(&s, "/apis/networking.k8s.io/v1/servicecidrs/kubernetes/status");
    assert_eq!((code, &st["metadata"]["uid"]), (200, &cidr["metadata"]["uid"]));
}
