//! Pod and pod template defaults: spec, containers, volumes, tolerations and QoS class.

use serde_json::{json, Map, Value};

use super::json::{child, child_of, default_nonzero, default_str, default_value, get_str, is_unset, items, with_map};
use crate::validation::parse_quantity;

pub(super) fn default_pod(pod: &mut Value) {
    let Some(spec) = child(pod, "spec") else {
        return;
    };
    default_pod_spec(spec);

    // SetDefaults_Pod (not applied to templates).
    default_value(spec, "enableServiceLinks", json!(true));
    for key in ["containers", "initContainers"] {
        for c in spec.get_mut(key).and_then(Value::as_array_mut).into_iter().flatten() {
            with_map(c, default_requests_from_limits);
        }
    }
    if spec.get("hostNetwork").and_then(Value::as_bool) == Some(true) {
        for key in ["containers", "initContainers"] {
            for c in spec.get_mut(key).and_then(Value::as_array_mut).into_iter().flatten() {
                for port in items(c, "ports") {
                    with_map(port, |p| {
                        if p.get("hostPort").and_then(Value::as_i64).is_none_or(|n| n == 0) {
                            if let Some(cp) = p.get("containerPort").cloned() {
                                p.insert("hostPort".to_string(), cp);
                            }
                        }
                    });
                }
            }
        }
    }

    // ServiceAccount admission (and the deprecated serviceAccount alias the v1 API mirrors).
    let sa = match (get_str(spec, "serviceAccountName"), get_str(spec, "serviceAccount")) {
        ("", "") => "default".to_string(),
        ("", legacy) => legacy.to_string(),
        (name, _) => name.to_string(),
    };
    default_str(spec, "serviceAccountName", &sa);
    default_str(spec, "serviceAccount", &sa);

    // priority and preemptionPolicy are the Priority admission plugin's (apiserver), not defaults.

    default_toleration_seconds(spec);

    let qos = qos_class(spec);
    let Some(m) = pod.as_object_mut() else { return };
    let Some(status) = child_of(m, "status") else {
        return;
    };
    default_str(status, "phase", "Pending");
    default_str(status, "qosClass", qos);
}

pub(super) fn default_template(spec: &mut Map<String, Value>) {
    if let Some(template) = child_of(spec, "template") {
        if let Some(pod_spec) = child_of(template, "spec") {
            default_pod_spec(pod_spec);
        }
    }
}

/// SetDefaults_PodSpec plus the container, probe, env and volume defaults under it.
fn default_pod_spec(spec: &mut Map<String, Value>) {
    default_str(spec, "dnsPolicy", "ClusterFirst");
    default_str(spec, "restartPolicy", "Always");
    default_value(spec, "securityContext", json!({}));
    default_value(spec, "terminationGracePeriodSeconds", json!(30));
    default_str(spec, "schedulerName", "default-scheduler");
    for key in ["containers", "initContainers", "ephemeralContainers"] {
        for c in spec.get_mut(key).and_then(Value::as_array_mut).into_iter().flatten() {
            with_map(c, default_container);
        }
    }
    for vol in spec.get_mut("volumes").and_then(Value::as_array_mut).into_iter().flatten() {
        with_map(vol, default_volume);
    }
}

fn default_container(c: &mut Map<String, Value>) {
    if get_str(c, "imagePullPolicy").is_empty() {
        let policy =
            if image_tag(get_str(c, "image")).as_deref() == Some("latest") { "Always" } else { "IfNotPresent" };
        c.insert("imagePullPolicy".to_string(), json!(policy));
    }
    default_str(c, "terminationMessagePath", "/dev/termination-log");
    default_str(c, "terminationMessagePolicy", "File");
    default_value(c, "resources", json!({}));
    for port in c.get_mut("ports").and_then(Value::as_array_mut).into_iter().flatten() {
        with_map(port, |p| default_str(p, "protocol", "TCP"));
    }
    for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
        if let Some(p) = c.get_mut(probe).and_then(Value::as_object_mut) {
            default_nonzero(p, "timeoutSeconds", 1);
            default_nonzero(p, "periodSeconds", 10);
            default_nonzero(p, "successThreshold", 1);
            default_nonzero(p, "failureThreshold", 3);
            default_http_get(p);
        }
    }
    if let Some(lifecycle) = c.get_mut("lifecycle").and_then(Value::as_object_mut) {
        for hook in ["postStart", "preStop"] {
            if let Some(h) = lifecycle.get_mut(hook).and_then(Value::as_object_mut) {
                default_http_get(h);
            }
        }
    }
    for env in c.get_mut("env").and_then(Value::as_array_mut).into_iter().flatten() {
        let field_ref = env.get_mut("valueFrom").and_then(|v| v.get_mut("fieldRef")).and_then(Value::as_object_mut);
        if let Some(f) = field_ref {
            default_str(f, "apiVersion", "v1");
        }
    }
}

fn default_http_get(handler: &mut Map<String, Value>) {
    if let Some(h) = handler.get_mut("httpGet").and_then(Value::as_object_mut) {
        default_str(h, "path", "/");
        default_str(h, "scheme", "HTTP");
    }
}

/// The tag `ParseImageName` finds: `latest` when neither tag nor digest is given, `None` with a digest.
fn image_tag(image: &str) -> Option<String> {
    if image.is_empty() {
        return None;
    }
    let (name, digest) = match image.split_once('@') {
        Some((n, d)) => (n, Some(d)),
        None => (image, None),
    };
    let last_segment = name.rsplit('/').next().unwrap_or(name);
    match last_segment.split_once(':') {
        Some((_, tag)) => Some(tag.to_string()),
        None if digest.is_some() => None,
        None => Some("latest".to_string()),
    }
}

const VOLUME_SOURCES: [&str; 30] = [
    "hostPath",
    "emptyDir",
    "gcePersistentDisk",
    "awsElasticBlockStore",
    "gitRepo",
    "secret",
    "nfs",
    "iscsi",
    "glusterfs",
    "persistentVolumeClaim",
    "rbd",
    "flexVolume",
    "cinder",
    "cephfs",
    "flocker",
    "downwardAPI",
    "fc",
    "azureFile",
    "configMap",
    "vsphereVolume",
    "quobyte",
    "azureDisk",
    "photonPersistentDisk",
    "projected",
    "portworxVolume",
    "scaleIO",
    "storageos",
    "csi",
    "ephemeral",
    "image",
];

fn default_volume(vol: &mut Map<String, Value>) {
    if VOLUME_SOURCES.iter().all(|s| is_unset(vol.get(*s))) {
        vol.insert("emptyDir".to_string(), json!({}));
    }
    for src in ["secret", "configMap", "downwardAPI", "projected"] {
        if let Some(s) = vol.get_mut(src).and_then(Value::as_object_mut) {
            default_value(s, "defaultMode", json!(420));
        }
    }
    if let Some(h) = vol.get_mut("hostPath").and_then(Value::as_object_mut) {
        default_value(h, "type", json!(""));
    }
    if let Some(d) = vol.get_mut("downwardAPI") {
        default_field_refs(d);
    }
    for source in items_of(vol.get_mut("projected"), "sources") {
        if let Some(t) = source.get_mut("serviceAccountToken").and_then(Value::as_object_mut) {
            default_value(t, "expirationSeconds", json!(3600));
        }
        if let Some(d) = source.get_mut("downwardAPI") {
            default_field_refs(d);
        }
    }
}

fn items_of<'a>(v: Option<&'a mut Value>, key: &str) -> impl Iterator<Item = &'a mut Value> {
    v.and_then(|v| v.get_mut(key)).and_then(Value::as_array_mut).into_iter().flatten()
}

fn default_field_refs(downward: &mut Value) {
    for item in items(downward, "items") {
        if let Some(f) = item.get_mut("fieldRef").and_then(Value::as_object_mut) {
            default_str(f, "apiVersion", "v1");
        }
    }
}

/// If limits are set but requests are not, requests default to limits (per resource).
fn default_requests_from_limits(c: &mut Map<String, Value>) {
    let Some(res) = c.get_mut("resources").and_then(Value::as_object_mut) else {
        return;
    };
    let Some(limits) = res.get("limits").and_then(Value::as_object).cloned() else {
        return;
    };
    let Some(requests) = child_of(res, "requests") else {
        return;
    };
    for (name, q) in limits {
        requests.entry(name).or_insert(q);
    }
}

/// DefaultTolerationSeconds admission: tolerate not-ready and unreachable nodes for 300s.
fn default_toleration_seconds(spec: &mut Map<String, Value>) {
    let slot = spec.entry("tolerations".to_string()).or_insert(Value::Null);
    if slot.is_null() {
        *slot = json!([]);
    }
    let Some(tolerations) = slot.as_array_mut() else {
        return;
    };
    for taint in ["node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"] {
        let tolerated = tolerations.iter().any(|t| {
            let key = t.get("key").and_then(Value::as_str).unwrap_or("");
            let effect = t.get("effect").and_then(Value::as_str).unwrap_or("");
            (key == taint || key.is_empty()) && (effect == "NoExecute" || effect.is_empty())
        });
        if !tolerated {
            tolerations.push(json!({
                "key": taint, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300
            }));
        }
    }
}

/// `ComputePodQOS`: Guaranteed, Burstable or BestEffort from the containers' cpu/memory.
fn qos_class(spec: &Map<String, Value>) -> &'static str {
    let mut requests: Vec<(&str, i128)> = Vec::new();
    let mut limits: Vec<(&str, i128)> = Vec::new();
    fn add<'a>(acc: &mut Vec<(&'a str, i128)>, name: &'a str, q: i128) {
        match acc.iter_mut().find(|(n, _)| *n == name) {
            Some((_, total)) => *total = total.saturating_add(q),
            None => acc.push((name, q)),
        }
    }
    let positive = |v: &Value| -> Option<i128> {
        let q = match v {
            Value::String(s) => parse_quantity(s),
            Value::Number(n) => parse_quantity(&n.to_string()),
            _ => None,
        }?;
        (q > 0).then_some(q)
    };
    let mut guaranteed = true;
    let containers = ["containers", "initContainers"]
        .into_iter()
        .flat_map(|k| spec.get(k).and_then(Value::as_array).into_iter().flatten());
    for c in containers {
        let res = c.get("resources");
        let list = |k: &str| res.and_then(|r| r.get(k)).and_then(Value::as_object);
        for (name, q) in list("requests").into_iter().flatten() {
            if let (true, Some(q)) = (name == "cpu" || name == "memory", positive(q)) {
                add(&mut requests, name, q);
            }
        }
        let mut found = (false, false);
        for (name, q) in list("limits").into_iter().flatten() {
            if let (true, Some(q)) = (name == "cpu" || name == "memory", positive(q)) {
                add(&mut limits, name, q);
                if name == "cpu" {
                    found.0 = true;
                } else {
                    found.1 = true;
                }
            }
        }
        if found != (true, true) {
            guaranteed = false;
        }
    }
    if requests.is_empty() && limits.is_empty() {
        return "BestEffort";
    }
    if guaranteed {
        guaranteed = requests.iter().all(|(n, r)| limits.iter().any(|(ln, l)| ln == n && l == r));
    }
    if guaranteed && requests.len() == limits.len() {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::defaults::test_support::defaulted;

    #[test]
    fn pod_gets_spec_container_and_status_defaults() {
        let p = defaulted(
            "Pod",
            json!({"metadata": {"name": "p"}, "spec": {"containers": [
                {"name": "a", "image": "nginx", "ports": [{"containerPort": 80}],
                 "livenessProbe": {"httpGet": {"port": 80}},
                 "env": [{"name": "N", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]}
            ]}}),
        );
        let spec = &p["spec"];
        assert_eq!(spec["restartPolicy"], "Always");
        assert_eq!(spec["dnsPolicy"], "ClusterFirst");
        assert_eq!(spec["schedulerName"], "default-scheduler");
        assert_eq!(spec["terminationGracePeriodSeconds"], 30);
        assert_eq!(spec["securityContext"], json!({}));
        assert_eq!(spec["enableServiceLinks"], true);
        assert_eq!(spec["serviceAccountName"], "default");
        assert_eq!(spec["serviceAccount"], "default");
        assert!(spec.get("priority").is_none(), "the Priority admission plugin's, not a default");
        let c = &spec["containers"][0];
        assert_eq!(c["imagePullPolicy"], "Always");
        assert_eq!(c["terminationMessagePath"], "/dev/termination-log");
        assert_eq!(c["terminationMessagePolicy"], "File");
        assert_eq!(c["resources"], json!({}));
        assert_eq!(c["ports"][0]["protocol"], "TCP");
        assert_eq!(
            c["livenessProbe"],
            json!({"httpGet": {"port": 80, "path": "/", "scheme": "HTTP"},
                   "timeoutSeconds": 1, "periodSeconds": 10, "successThreshold": 1, "failureThreshold": 3})
        );
        assert_eq!(c["env"][0]["valueFrom"]["fieldRef"]["apiVersion"], "v1");
        assert_eq!(p["status"], json!({"phase": "Pending", "qosClass": "BestEffort"}));
    }

    #[test]
    fn user_values_are_kept() {
        let p = defaulted(
            "Pod",
            json!({"spec": {"restartPolicy": "Never", "serviceAccountName": "builder",
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "a", "image": "x:1", "imagePullPolicy": "Never"}]},
            "status": {"phase": "Running"}}),
        );
        assert_eq!(p["spec"]["restartPolicy"], "Never");
        assert_eq!(p["spec"]["serviceAccountName"], "builder");
        assert_eq!(p["spec"]["serviceAccount"], "builder");
        assert_eq!(p["spec"]["terminationGracePeriodSeconds"], 0);
        assert_eq!(p["spec"]["containers"][0]["imagePullPolicy"], "Never");
        assert_eq!(p["status"]["phase"], "Running");
    }

    #[test]
    fn image_pull_policy_depends_on_the_tag() {
        for (image, policy) in [
            ("nginx", "Always"),
            ("nginx:latest", "Always"),
            ("nginx:1.27", "IfNotPresent"),
            ("registry:5000/nginx", "Always"),
            ("registry:5000/nginx:1", "IfNotPresent"),
            ("nginx@sha256:abc", "IfNotPresent"),
        ] {
            let p = defaulted("Pod", json!({"spec": {"containers": [{"name": "a", "image": image}]}}));
            assert_eq!(p["spec"]["containers"][0]["imagePullPolicy"], policy, "{image}");
        }
    }

    #[test]
    fn pods_tolerate_not_ready_and_unreachable_for_five_minutes() {
        let p = defaulted(
            "Pod",
            json!({"spec": {"containers": [], "tolerations": [
                {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 10}
            ]}}),
        );
        assert_eq!(
            p["spec"]["tolerations"],
            json!([
                {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 10},
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
            ])
        );
        let all = defaulted("Pod", json!({"spec": {"tolerations": [{"operator": "Exists"}]}}));
        assert_eq!(all["spec"]["tolerations"], json!([{"operator": "Exists"}]));
    }

    #[test]
    fn qos_class_follows_requests_and_limits() {
        let qos = |res: Value| {
            let p = defaulted("Pod", json!({"spec": {"containers": [{"name": "a", "image": "x", "resources": res}]}}));
            p["status"]["qosClass"].clone()
        };
        assert_eq!(qos(json!({})), "BestEffort");
        assert_eq!(qos(json!({"limits": {"cpu": "1", "memory": "1Gi"}})), "Guaranteed");
        assert_eq!(qos(json!({"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "1000m"}})), "Guaranteed");
        assert_eq!(qos(json!({"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "500m"}})), "Burstable");
        assert_eq!(qos(json!({"requests": {"memory": "64Mi"}})), "Burstable");
        assert_eq!(qos(json!({"limits": {"cpu": "1"}})), "Burstable");
    }

    #[test]
    fn requests_default_to_limits_only_on_pods() {
        let p = defaulted(
            "Pod",
            json!({"spec": {"containers": [{"name": "a", "image": "x",
            "resources": {"limits": {"cpu": "1"}, "requests": {"memory": "1Mi"}}}]}}),
        );
        assert_eq!(p["spec"]["containers"][0]["resources"]["requests"], json!({"cpu": "1", "memory": "1Mi"}));
        let rs = defaulted(
            "ReplicaSet",
            json!({"spec": {"template": {"spec": {"containers": [
            {"name": "a", "image": "x", "resources": {"limits": {"cpu": "1"}}}]}}}}),
        );
        assert!(rs["spec"]["template"]["spec"]["containers"][0]["resources"].get("requests").is_none());
    }

    #[test]
    fn pod_templates_get_a_template_spec_defaults_and_no_pod_only_ones() {
        let t = defaulted(
            "PodTemplate",
            json!({"metadata": {"name": "t"}, "template": {"metadata": {"labels": {"app": "x"}},
                "spec": {"containers": [{"name": "a", "image": "nginx", "resources": {"limits": {"cpu": "1"}}}],
                "volumes": [{"name": "v"}]}}}),
        );
        let spec = &t["template"]["spec"];
        assert_eq!(
            (&spec["restartPolicy"], &spec["dnsPolicy"], &spec["schedulerName"]),
            (&json!("Always"), &json!("ClusterFirst"), &json!("default-scheduler"))
        );
        assert_eq!((&spec["terminationGracePeriodSeconds"], &spec["securityContext"]), (&json!(30), &json!({})));
        let c = &spec["containers"][0];
        assert_eq!((&c["imagePullPolicy"], &c["terminationMessagePolicy"]), (&json!("Always"), &json!("File")));
        assert_eq!(spec["volumes"][0]["emptyDir"], json!({}));
        // SetDefaults_Pod's parts belong to pods, not to templates.
        assert!(c["resources"].get("requests").is_none());
        for pod_only in ["enableServiceLinks", "serviceAccountName", "priority", "tolerations"] {
            assert!(spec.get(pod_only).is_none(), "{pod_only}");
        }
        assert!(t.get("spec").is_none() && t.get("status").is_none(), "a PodTemplate has neither");

        let kept =
            defaulted("PodTemplate", json!({"template": {"spec": {"restartPolicy": "Never", "containers": []}}}));
        assert_eq!(kept["template"]["spec"]["restartPolicy"], "Never");
        let bare = defaulted("PodTemplate", json!({"metadata": {"name": "t"}}));
        assert_eq!(bare["template"]["spec"]["restartPolicy"], "Always", "Go defaults the zero template too");
    }

    #[test]
    fn volumes_get_modes_and_an_empty_dir_when_sourceless() {
        let p = defaulted(
            "Pod",
            json!({"spec": {"volumes": [
                {"name": "a"}, {"name": "b", "configMap": {"name": "c"}}, {"name": "c", "secret": {"secretName": "s", "defaultMode": 256}}
            ]}}),
        );
        let v = &p["spec"]["volumes"];
        assert_eq!(v[0]["emptyDir"], json!({}));
        assert_eq!(v[1]["configMap"]["defaultMode"], 420);
        assert_eq!(v[2]["secret"]["defaultMode"], 256);
    }
}
