//! A StatefulSet on a 3-node `kaji lab` with local-path volumes: pods come up one at a time in
//! ordinal order with their stable names and DNS identity, each writes to its own volume, a deleted
//! pod comes back with the same name on the same node with the same data, a scale down removes the
//! highest ordinal and keeps its claim, and deleting that claim removes its directory on the node.
//! Needs root.

use kaji_e2e::{json, wait_for, Lab, Value};
use std::time::Duration;

const NS: &str = "sts";
const IMAGE: &str = "kaji.local/busybox:lab";
const WAIT: Duration = Duration::from_secs(180);

fn str_at(v: &Value, pointer: &str) -> String {
    v.pointer(pointer).and_then(Value::as_str).unwrap_or_default().to_string()
}

fn ready(pod: &Value) -> bool {
    pod["status"]["conditions"].as_array().into_iter().flatten().any(|c| c["type"] == "Ready" && c["status"] == "True")
}

fn ready_since(pod: &Value) -> String {
    let conds = pod["status"]["conditions"].as_array().cloned().unwrap_or_default();
    conds.iter().find(|c| c["type"] == "Ready").map(|c| str_at(c, "/lastTransitionTime")).unwrap_or_default()
}

fn pod(lab: &Lab, name: &str) -> Option<Value> {
    let out = lab.kubectl_output(&["get", "pod", name, "-n", NS, "-o", "json"], None);
    out.status.success().then(|| serde_json::from_slice(&out.stdout).ok()).flatten()
}

fn ready_pod(lab: &Lab, name: &str, not_uid: &str) -> Value {
    wait_for(&format!("pod {name} Ready"), WAIT, || match pod(lab, name) {
        Some(p) if ready(&p) && str_at(&p, "/metadata/uid") != not_uid => Ok(p),
        other => Err(format!("{other:?}")),
    })
}

fn data(lab: &Lab, name: &str) -> String {
    lab.kubectl(&["exec", "-n", NS, name, "--", "cat", "/data/boots"])
}

fn set(replicas: u32) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "web", "namespace": NS},
        "spec": {
            "replicas": replicas, "serviceName": "web",
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": {
                "terminationGracePeriodSeconds": 1,
                "containers": [{"name": "app", "image": IMAGE,
                    "command": ["sh", "-c", "hostname >> /data/boots; exec sleep 100000"],
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}]}]}},
            "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {
                "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "16Mi"}}}}]
        }
    })
}

#[test]
fn statefulset_with_local_volumes() {
    kaji_e2e::require_lab_requirements();
    let mut lab = Lab::up_with(3, &["--no-demo"]);
    lab.kubectl(&["create", "namespace", NS]);
    lab.apply(&json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": NS},
        "spec": {"clusterIP": "None", "selector": {"app": "web"}, "ports": [{"name": "web", "port": 80}]}}));
    lab.apply(&set(3));

    // Ordered: each pod is created only once its predecessor is Ready.
    let pods: Vec<Value> = (0..3).map(|i| ready_pod(&lab, &format!("web-{i}"), "")).collect();
    for i in 1..3 {
        let created = str_at(&pods[i], "/metadata/creationTimestamp");
        let before_ready = ready_since(&pods[i - 1]);
        assert!(
            before_ready <= created,
            "web-{i} created at {created}, before web-{} was Ready at {before_ready}",
            i - 1
        );
    }
    for (i, p) in pods.iter().enumerate() {
        let name = format!("web-{i}");
        assert_eq!(str_at(p, "/spec/hostname"), name);
        assert_eq!(str_at(p, "/spec/subdomain"), "web");
        assert_eq!(str_at(p, "/metadata/labels/statefulset.kubernetes.io~1pod-name"), name);
        assert_eq!(str_at(p, "/metadata/labels/apps.kubernetes.io~1pod-index"), i.to_string());
        assert_eq!(data(&lab, &name), format!("{name}\n"), "each pod writes to its own volume");
        // Its claim is bound to a volume on the pod's node.
        let claim = lab.get_json(&["pvc", &format!("data-{name}"), "-n", NS]);
        assert_eq!(str_at(&claim, "/status/phase"), "Bound", "{claim}");
        assert_eq!(str_at(&claim, "/spec/storageClassName"), "local-path", "the default class: {claim}");
        let pv = lab.get_json(&["pv", &str_at(&claim, "/spec/volumeName")]);
        let pinned = str_at(&pv, "/spec/nodeAffinity/required/nodeSelectorTerms/0/matchExpressions/0/values/0");
        assert_eq!(pinned, str_at(p, "/spec/nodeName"), "{pv}");
    }
    let hostnames = wait_for("the headless service's slice names every pod", WAIT, || {
        let slices = lab.get_json(&["endpointslices", "-n", NS, "-l", "kubernetes.io/service-name=web"]);
        let mut names: Vec<String> = slices["items"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|s| s["endpoints"].as_array().cloned().unwrap_or_default())
            .map(|e| str_at(&e, "/hostname"))
            .collect();
        names.sort();
        if names == ["web-0", "web-1", "web-2"] {
            Ok(names)
        } else {
            Err(format!("{names:?}"))
        }
    });
    assert_eq!(hostnames.len(), 3);
    let sts = lab.get_json(&["statefulset", "web", "-n", NS]);
    assert_eq!(sts["status"]["readyReplicas"], 3, "{sts}");
    assert_eq!(sts["status"]["currentRevision"], sts["status"]["updateRevision"], "{sts}");
    let revs = lab.kubectl(&["get", "controllerrevisions", "-n", NS, "-o", "name"]);
    assert!(revs.contains(&format!("controllerrevision.apps/{}", str_at(&sts, "/status/updateRevision"))), "{revs}");

    // A deleted pod comes back with the same name, on the same node, with its data.
    let old = &pods[1];
    lab.kubectl(&["delete", "pod", "web-1", "-n", NS, "--wait=false"]);
    let back = ready_pod(&lab, "web-1", &str_at(old, "/metadata/uid"));
    assert_eq!(str_at(&back, "/spec/nodeName"), str_at(old, "/spec/nodeName"));
    assert_eq!(data(&lab, "web-1"), "web-1\nweb-1\n", "the volume kept what the first pod wrote");

    // Scale down: the highest ordinal goes, its claim stays.
    lab.kubectl(&["scale", "statefulset", "web", "-n", NS, "--replicas=2"]);
    wait_for("web-2 gone", WAIT, || pod(&lab, "web-2").map_or(Ok(()), |p| Err(str_at(&p, "/status/phase"))));
    assert!(pod(&lab, "web-0").is_some_and(|p| ready(&p)) && pod(&lab, "web-1").is_some_and(|p| ready(&p)));
    let claim = lab.get_json(&["pvc", "data-web-2", "-n", NS]);
    assert_eq!(str_at(&claim, "/status/phase"), "Bound", "kept after the scale down: {claim}");

    // Deleting the claim removes its volume and the directory on its node (reclaim Delete).
    let pv = lab.get_json(&["pv", &str_at(&claim, "/spec/volumeName")]);
    let dir = std::path::PathBuf::from(str_at(&pv, "/spec/hostPath/path"));
    assert!(dir.join("boots").exists(), "{} holds web-2's data", dir.display());
    lab.kubectl(&["delete", "pvc", "data-web-2", "-n", NS]);
    let pv_name = str_at(&pv, "/metadata/name");
    wait_for("the volume deleted", WAIT, || {
        let out = lab.kubectl_output(&["get", "pv", &pv_name], None);
        if out.status.success() {
            Err(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Ok(())
        }
    });
    assert!(!dir.exists(), "{} removed on the node", dir.display());

    let down = lab.down();
    assert!(down.status.success(), "kaji lab down failed:\n{}", String::from_utf8_lossy(&down.stderr));
}
