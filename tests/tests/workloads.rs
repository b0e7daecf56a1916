//! The workload controllers on a real 3-node `kaji lab`, driven by kubectl: a DaemonSet has a pod
//! on every node and on a node added later, rolls an update out and back; Jobs complete (`kubectl
//! wait` returns) or stop at their backoffLimit; a CronJob runs every minute and keeps its history
//! limit; a node whose agent dies has its pods marked not Ready (out of their Services) until the
//! agent is back. Needs root; fails when a requirement is missing.

use kaji_e2e::{json, wait_for, Lab, Value};
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

const IMAGE: &str = "kaji.local/busybox:lab";
const NS: &str = "work";

#[test]
fn workloads_on_a_lab() {
    let mut lab = Lab::up_with(3, &["--no-demo"]);
    lab.kubectl(&["create", "namespace", NS]);
    // The CronJob first: it ticks on minute boundaries while the rest runs.
    let cron_created = Instant::now();
    lab.apply(&cron_job("tick"));

    a_daemon_set_runs_on_every_node_and_on_a_node_added_later(&lab);
    a_daemon_set_rolls_an_update_out_and_back(&lab);
    a_job_completes_and_kubectl_wait_returns(&lab);
    a_failing_job_stops_at_its_backoff_limit(&lab);
    a_cron_job_runs_every_minute_and_keeps_its_history_limit(&lab, cron_created);
    a_lost_nodes_pods_leave_their_service_until_its_agent_is_back(&lab);

    let down = lab.down();
    assert!(down.status.success(), "kaji lab down failed:\n{}", String::from_utf8_lossy(&down.stderr));
}

fn str_at(v: &Value, pointer: &str) -> String {
    v.pointer(pointer).and_then(Value::as_str).unwrap_or_default().to_string()
}

fn int_at(v: &Value, pointer: &str) -> i64 {
    v.pointer(pointer).and_then(Value::as_i64).unwrap_or(0)
}

fn items(v: &Value) -> Vec<Value> {
    v["items"].as_array().cloned().unwrap_or_default()
}

fn daemon_set(name: &str, env: &str) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 2}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "terminationGracePeriodSeconds": 1,
                    "containers": [{"name": "agent", "image": IMAGE, "command": ["sh", "-c", "sleep 3600"],
                        "env": [{"name": "VERSION", "value": env}]}],
                },
            },
        },
    })
}

/// The nodes running the set's pods; an error unless every live pod runs and no node has two.
fn daemon_pods_by_node(lab: &Lab, name: &str) -> Result<BTreeSet<String>, String> {
    let pods = items(&lab.get_json(&["pods", "-n", NS, "-l", &format!("app={name}")]));
    let live: Vec<&Value> = pods.iter().filter(|p| p["metadata"]["deletionTimestamp"].is_null()).collect();
    let running: Vec<&Value> = live.iter().copied().filter(|p| p["status"]["phase"] == "Running").collect();
    let nodes: BTreeSet<String> = running.iter().map(|p| str_at(p, "/spec/nodeName")).collect();
    if nodes.len() != running.len() || live.len() != running.len() {
        return Err(format!("{} live, {} running on {nodes:?}", live.len(), running.len()));
    }
    Ok(nodes)
}

fn nodes(n: u8) -> BTreeSet<String> {
    (1..=n).map(Lab::node_name).collect()
}

fn a_daemon_set_runs_on_every_node_and_on_a_node_added_later(lab: &Lab) {
    lab.apply(&daemon_set("node-agent", "1"));
    wait_for("a daemon pod running on each of the 3 nodes", Duration::from_secs(120), || {
        let on = daemon_pods_by_node(lab, "node-agent")?;
        if on == nodes(3) {
            Ok(())
        } else {
            Err(format!("on {on:?}"))
        }
    });
    lab.kubectl(&["rollout", "status", "daemonset/node-agent", "-n", NS, "--timeout=60s"]);
    let ds = lab.get_json(&["daemonset", "node-agent", "-n", NS]);
    assert_eq!(int_at(&ds, "/status/desiredNumberScheduled"), 3, "{ds}");
    assert_eq!(int_at(&ds, "/status/numberReady"), 3, "{ds}");
    // Every daemon pod carries the tolerations Kubernetes adds and names its node by affinity.
    let pods = items(&lab.get_json(&["pods", "-n", NS, "-l", "app=node-agent"]));
    for p in &pods {
        let tolerations = p["spec"]["tolerations"].to_string();
        assert!(tolerations.contains("node.kubernetes.io/unreachable"), "{p}");
        assert!(tolerations.contains("node.kubernetes.io/unschedulable"), "{p}");
        let term = &p["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
            ["nodeSelectorTerms"][0]["matchFields"][0];
        assert_eq!(term["values"][0], p["spec"]["nodeName"], "{p}");
    }

    let out = lab.kaji(&["node", "add"]);
    let report = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "kaji lab node add failed:\n{report}\n{}", lab.all_logs());
    assert!(report.contains("waiting for kaji-lab-node-4 to be Ready ... done"), "{report}");
    let status = lab.kaji(&["status"]);
    let status = String::from_utf8_lossy(&status.stdout);
    assert!(status.contains("agent-4") && status.contains("kaji-lab-node-4"), "{status}");
    wait_for("a daemon pod on the added 4th node", Duration::from_secs(120), || {
        let on = daemon_pods_by_node(lab, "node-agent")?;
        if on == nodes(4) {
            Ok(())
        } else {
            Err(format!("on {on:?}"))
        }
    });
    wait_for("the DaemonSet's status to count 4 nodes", Duration::from_secs(30), || {
        let ds = lab.get_json(&["daemonset", "node-agent", "-n", NS]);
        let counts = ["desiredNumberScheduled", "currentNumberScheduled", "numberReady", "updatedNumberScheduled"]
            .map(|f| int_at(&ds, &format!("/status/{f}")));
        if counts == [4; 4] {
            Ok(())
        } else {
            Err(ds["status"].to_string())
        }
    });
}

fn revisions(lab: &Lab, name: &str) -> Vec<i64> {
    let list = items(&lab.get_json(&["controllerrevisions", "-n", NS, "-l", &format!("app={name}")]));
    let mut revs: Vec<i64> = list.iter().map(|r| int_at(r, "/revision")).collect();
    revs.sort();
    revs
}

fn versions(lab: &Lab, name: &str) -> BTreeSet<String> {
    let pods = items(&lab.get_json(&["pods", "-n", NS, "-l", &format!("app={name}")]));
    pods.iter()
        .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
        .map(|p| str_at(p, "/spec/containers/0/env/0/value"))
        .collect()
}

fn a_daemon_set_rolls_an_update_out_and_back(lab: &Lab) {
    assert_eq!(revisions(lab, "node-agent"), vec![1]);
    lab.kubectl(&["set", "env", "daemonset/node-agent", "-n", NS, "VERSION=2"]);
    lab.kubectl(&["rollout", "status", "daemonset/node-agent", "-n", NS, "--timeout=120s"]);
    wait_for("every daemon pod on version 2", Duration::from_secs(60), || {
        let v = versions(lab, "node-agent");
        let on = daemon_pods_by_node(lab, "node-agent")?;
        if v == BTreeSet::from(["2".to_string()]) && on == nodes(4) {
            Ok(())
        } else {
            Err(format!("{v:?} on {on:?}"))
        }
    });
    assert_eq!(revisions(lab, "node-agent"), vec![1, 2]);
    let history = lab.kubectl(&["rollout", "history", "daemonset/node-agent", "-n", NS]);
    assert!(history.lines().any(|l| l.trim_start().starts_with('1')), "{history}");
    assert!(history.lines().any(|l| l.trim_start().starts_with('2')), "{history}");

    lab.kubectl(&["rollout", "undo", "daemonset/node-agent", "-n", NS]);
    lab.kubectl(&["rollout", "status", "daemonset/node-agent", "-n", NS, "--timeout=120s"]);
    wait_for("every daemon pod back on version 1", Duration::from_secs(60), || {
        let v = versions(lab, "node-agent");
        let on = daemon_pods_by_node(lab, "node-agent")?;
        if v == BTreeSet::from(["1".to_string()]) && on == nodes(4) {
            Ok(())
        } else {
            Err(format!("{v:?} on {on:?}"))
        }
    });
    // The undo renumbers the first template's revision instead of recording a copy.
    assert_eq!(revisions(lab, "node-agent"), vec![2, 3]);
}

fn job(name: &str, spec: Value, script: &str) -> Value {
    let mut spec = spec;
    spec["template"] = json!({"spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
        "containers": [{"name": "work", "image": IMAGE, "command": ["sh", "-c", script]}]}});
    json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": NS}, "spec": spec})
}

fn a_job_completes_and_kubectl_wait_returns(lab: &Lab) {
    lab.apply(&job("count", json!({"completions": 5, "parallelism": 2}), "echo counted on $(hostname)"));
    lab.kubectl(&["wait", "--for=condition=complete", "job/count", "-n", NS, "--timeout=180s"]);
    let j = lab.get_json(&["job", "count", "-n", NS]);
    assert_eq!(int_at(&j, "/status/succeeded"), 5, "{j}");
    assert_eq!(int_at(&j, "/status/failed"), 0, "{j}");
    let pods = items(&lab.get_json(&["pods", "-n", NS, "-l", "batch.kubernetes.io/job-name=count"]));
    assert_eq!(pods.iter().filter(|p| p["status"]["phase"] == "Succeeded").count(), 5, "five pods ran");
    let logs = lab.kubectl(&["logs", "job/count", "-n", NS]);
    assert!(logs.contains("counted on count-"), "{logs}");
}

fn a_failing_job_stops_at_its_backoff_limit(lab: &Lab) {
    lab.apply(&job("fails", json!({"backoffLimit": 1}), "echo failing; exit 3"));
    lab.kubectl(&["wait", "--for=condition=failed", "job/fails", "-n", NS, "--timeout=180s"]);
    let j = lab.get_json(&["job", "fails", "-n", NS]);
    let failed = j["status"]["conditions"].as_array().into_iter().flatten().find(|c| c["type"] == "Failed");
    let failed = failed.unwrap_or_else(|| panic!("no Failed condition: {j}"));
    assert_eq!(failed["reason"], "BackoffLimitExceeded", "{j}");
    assert_eq!(int_at(&j, "/status/failed"), 2, "backoffLimit 1: two pods failed, {j}");
    // No pod is started after the Job failed.
    std::thread::sleep(Duration::from_secs(5));
    let pods = items(&lab.get_json(&["pods", "-n", NS, "-l", "batch.kubernetes.io/job-name=fails"]));
    assert!(pods.iter().all(|p| p["status"]["phase"] == "Failed"), "{pods:?}");
    assert_eq!(pods.len(), 2, "{pods:?}");
}

fn cron_job(name: &str) -> Value {
    json!({
        "apiVersion": "batch/v1", "kind": "CronJob",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "schedule": "*/1 * * * *",
            "successfulJobsHistoryLimit": 1,
            "jobTemplate": {"spec": {"template": {"spec": {"restartPolicy": "Never",
                "terminationGracePeriodSeconds": 1,
                "containers": [{"name": "tick", "image": IMAGE, "command": ["sh", "-c", "date"]}]}}}},
        },
    })
}

fn a_cron_job_runs_every_minute_and_keeps_its_history_limit(lab: &Lab, created: Instant) {
    let mut seen = BTreeSet::new();
    // Two minute boundaries pass within 2 minutes of the creation; a little slack for the load.
    let left = Duration::from_secs(170).saturating_sub(created.elapsed());
    wait_for("the CronJob to have started two Jobs", left, || {
        for j in items(&lab.get_json(&["jobs", "-n", NS])) {
            let owner = &j["metadata"]["ownerReferences"][0];
            if owner["kind"] == "CronJob" && owner["name"] == "tick" {
                seen.insert(str_at(&j, "/metadata/name"));
            }
        }
        if seen.len() >= 2 {
            Ok(())
        } else {
            Err(format!("jobs so far: {seen:?}"))
        }
    });
    let first = seen.iter().next().cloned().unwrap_or_default();
    wait_for("the CronJob's history limit (the first Job removed, 1 successful kept)", Duration::from_secs(90), || {
        let jobs: Vec<Value> = items(&lab.get_json(&["jobs", "-n", NS]))
            .into_iter()
            .filter(|j| j["metadata"]["ownerReferences"][0]["name"] == "tick")
            .collect();
        let done = jobs.iter().filter(|j| int_at(j, "/status/succeeded") >= 1).count();
        let cj = lab.get_json(&["cronjob", "tick", "-n", NS]);
        let first_gone = jobs.iter().all(|j| str_at(j, "/metadata/name") != first);
        if done == 1 && first_gone && cj["status"]["lastSuccessfulTime"].is_string() {
            Ok(())
        } else {
            Err(format!("{} jobs, {done} succeeded; status {}", jobs.len(), cj["status"]))
        }
    });
    for name in &seen {
        assert!(name.starts_with("tick-"), "job names are <cronjob>-<scheduled minute>: {name}");
    }
}

/// The pod's Ready condition ("True", "False", or "" without one).
fn pod_ready(lab: &Lab, name: &str) -> String {
    let p = lab.get_json(&["pod", name, "-n", NS]);
    let ready = p["status"]["conditions"].as_array().into_iter().flatten().find(|c| c["type"] == "Ready");
    ready.and_then(|c| c["status"].as_str()).unwrap_or_default().to_string()
}

/// The Service's endpoint addresses: (ready, not ready).
fn endpoint_ips(lab: &Lab, service: &str) -> (Vec<String>, Vec<String>) {
    let e = lab.get_json(&["endpoints", service, "-n", NS]);
    let ips = |field: &str| -> Vec<String> {
        let subsets = e["subsets"].as_array().cloned().unwrap_or_default();
        subsets
            .iter()
            .flat_map(|s| s[field].as_array().cloned().unwrap_or_default())
            .map(|a| str_at(&a, "/ip"))
            .collect()
    };
    (ips("addresses"), ips("notReadyAddresses"))
}

/// Kubernetes' MarkPodsNotReady: the node lifecycle controller sets Ready=False on the pods of a
/// node whose kubelet went silent, so its Services stop sending them traffic long before the
/// taint manager evicts them (5 min); the agent, back, reports them Ready again.
fn a_lost_nodes_pods_leave_their_service_until_its_agent_is_back(lab: &Lab) {
    let node = Lab::node_name(4);
    lab.apply(&json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "pinned", "namespace": NS, "labels": {"app": "pinned"}},
        "spec": {"nodeName": node, "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "c", "image": IMAGE, "command": ["sh", "-c", "sleep 3600"]}]},
    }));
    lab.apply(&json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "pinned", "namespace": NS},
        "spec": {"selector": {"app": "pinned"}, "ports": [{"port": 80}]},
    }));
    let ip = wait_for("pod pinned Ready and in its Service", Duration::from_secs(60), || {
        let ip = str_at(&lab.get_json(&["pod", "pinned", "-n", NS]), "/status/podIP");
        let (ready, _) = endpoint_ips(lab, "pinned");
        if pod_ready(lab, "pinned") == "True" && !ip.is_empty() && ready.contains(&ip) {
            Ok(ip)
        } else {
            Err(format!("Ready {:?}, endpoints {ready:?}", pod_ready(lab, "pinned")))
        }
    });

    lab.kill9("agent-4");
    // The node goes Unknown after --node-monitor-grace-period (40 s), then its pods go not Ready.
    wait_for("pod pinned not Ready and out of its Service's ready addresses", Duration::from_secs(120), || {
        let (ready, not_ready) = endpoint_ips(lab, "pinned");
        if pod_ready(lab, "pinned") == "False" && ready.is_empty() && not_ready.contains(&ip) {
            Ok(())
        } else {
            Err(format!("Ready {:?}, endpoints {ready:?} / not ready {not_ready:?}", pod_ready(lab, "pinned")))
        }
    });
    let n = lab.get_json(&["node", &node]);
    let node_ready = n["status"]["conditions"].as_array().into_iter().flatten().find(|c| c["type"] == "Ready").cloned();
    assert_eq!(node_ready.as_ref().map(|c| c["status"].clone()), Some(json!("Unknown")), "{n}");
    let events = lab.kubectl(&["get", "events", "-n", NS, "--field-selector", "involvedObject.name=pinned"]);
    assert!(events.contains("NodeNotReady") && events.contains("Node is not ready"), "{events}");
    assert_eq!(str_at(&lab.get_json(&["pod", "pinned", "-n", NS]), "/status/phase"), "Running", "not evicted yet");

    let out = lab.kaji(&["restart", "agent-4"]);
    assert!(out.status.success(), "restart agent-4: {}", String::from_utf8_lossy(&out.stderr));
    wait_for("pod pinned Ready and in its Service again", Duration::from_secs(90), || {
        let (ready, _) = endpoint_ips(lab, "pinned");
        if pod_ready(lab, "pinned") == "True" && ready.contains(&ip) {
            Ok(())
        } else {
            Err(format!("Ready {:?}, endpoints {ready:?}", pod_ready(lab, "pinned")))
        }
    });
}
