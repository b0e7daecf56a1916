//! Pod rows: ready count, status reason, restarts and the wide columns.

use jiff::Timestamp;
use serde_json::{json, Value};

use super::age::since;
use super::obj::{none_if_empty, Obj};

/// kubectl's `printPod`: ready/total, the status reason, restarts with the last restart time.
pub(super) fn pod_cells(pod: Obj<'_>, now: Timestamp) -> Vec<Value> {
    let phase = pod.str("status.phase");
    let mut reason = match pod.str("status.reason") {
        "" => phase.to_owned(),
        r => r.to_owned(),
    };
    let scheduling_gated = pod
        .list("status.conditions")
        .iter()
        .any(|c| Obj(c).str("type") == "PodScheduled" && Obj(c).str("reason") == "SchedulingGated");
    if scheduling_gated {
        reason = "SchedulingGated".to_owned();
    }

    let init_specs = pod.list("spec.initContainers");
    let sidecar =
        |name: &str| init_specs.iter().any(|c| Obj(c).str("name") == name && Obj(c).str("restartPolicy") == "Always");
    let total = pod.list("spec.containers").len()
        + init_specs.iter().filter(|c| Obj(c).str("restartPolicy") == "Always").count();
    let mut ready = 0;
    let (mut restarts, mut sidecar_restarts) = (0, 0);
    let (mut last_restart, mut last_sidecar_restart): (Option<Timestamp>, Option<Timestamp>) = (None, None);

    let mut initializing = false;
    for (i, c) in pod.list("status.initContainerStatuses").iter().enumerate() {
        let c = Obj(c);
        let finished = c.time("lastState.terminated.finishedAt");
        restarts += c.int("restartCount");
        last_restart = last_restart.max(finished);
        let is_sidecar = sidecar(c.str("name"));
        if is_sidecar {
            sidecar_restarts += c.int("restartCount");
            last_sidecar_restart = last_sidecar_restart.max(finished);
        }
        let terminated = c.get("state.terminated").filter(|t| t.is_object()).map(Obj);
        let waiting_reason = c.str("state.waiting.reason");
        if terminated.is_some_and(|t| t.int("exitCode") == 0) {
            continue;
        }
        if is_sidecar && c.bool("started") {
            if c.bool("ready") {
                ready += 1;
            }
            continue;
        }
        reason = match terminated {
            Some(t) => match t.str("reason") {
                "" if t.int("signal") != 0 => format!("Init:Signal:{}", t.int("signal")),
                "" => format!("Init:ExitCode:{}", t.int("exitCode")),
                r => format!("Init:{r}"),
            },
            None if !waiting_reason.is_empty() && waiting_reason != "PodInitializing" => {
                format!("Init:{waiting_reason}")
            }
            None => format!("Init:{i}/{}", init_specs.len()),
        };
        initializing = true;
        break;
    }

    let initialized = pod.condition("status.conditions", "Initialized") == Some("True");
    if !initializing || initialized {
        restarts = sidecar_restarts;
        last_restart = last_sidecar_restart;
        let mut has_running = false;
        for c in pod.list("status.containerStatuses").iter().rev() {
            let c = Obj(c);
            restarts += c.int("restartCount");
            last_restart = last_restart.max(c.time("lastState.terminated.finishedAt"));
            let terminated = c.get("state.terminated").filter(|t| t.is_object()).map(Obj);
            let waiting_reason = c.str("state.waiting.reason");
            if !waiting_reason.is_empty() {
                reason = waiting_reason.to_owned();
            } else if let Some(t) = terminated {
                reason = match t.str("reason") {
                    "" if t.int("signal") != 0 => format!("Signal:{}", t.int("signal")),
                    "" => format!("ExitCode:{}", t.int("exitCode")),
                    r => r.to_owned(),
                };
            } else if c.bool("ready") && c.get("state.running").is_some_and(Value::is_object) {
                has_running = true;
                ready += 1;
            }
        }
        if reason == "Completed" && has_running {
            let pod_ready = pod.condition("status.conditions", "Ready") == Some("True");
            reason = if pod_ready { "Running" } else { "NotReady" }.to_owned();
        }
    }

    if pod.get("metadata.deletionTimestamp").is_some_and(|t| !t.is_null()) {
        if pod.str("status.reason") == "NodeLost" {
            reason = "Unknown".to_owned();
        } else if phase != "Succeeded" && phase != "Failed" {
            reason = "Terminating".to_owned();
        }
    }

    let restarts = match last_restart {
        Some(t) if restarts != 0 => format!("{restarts} ({} ago)", since(Some(t), now)),
        _ => restarts.to_string(),
    };

    let ip = match pod.list("status.podIPs").first() {
        Some(ip) => Obj(ip).str("ip"),
        None => pod.str("status.podIP"),
    };
    let gates = pod.list("spec.readinessGates");
    let readiness_gates = if gates.is_empty() {
        "<none>".to_owned()
    } else {
        let satisfied = gates
            .iter()
            .filter(|g| pod.condition("status.conditions", Obj(g).str("conditionType")) == Some("True"))
            .count();
        format!("{satisfied}/{}", gates.len())
    };

    vec![
        json!(pod.str("metadata.name")),
        json!(format!("{ready}/{total}")),
        json!(reason),
        json!(restarts),
        json!(since(pod.time("metadata.creationTimestamp"), now)),
        json!(none_if_empty(ip)),
        json!(none_if_empty(pod.str("spec.nodeName"))),
        json!(none_if_empty(pod.str("status.nominatedNodeName"))),
        json!(readiness_gates),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::test_support::cell_strings;

    fn running_pod() -> Value {
        json!({
            "metadata": {"name": "nginx", "creationTimestamp": "2025-01-01T11:00:00Z"},
            "spec": {"nodeName": "node1", "containers": [{"name": "nginx"}]},
            "status": {
                "phase": "Running",
                "podIP": "10.244.0.5",
                "podIPs": [{"ip": "10.244.0.5"}],
                "conditions": [{"type": "Ready", "status": "True"}],
                "containerStatuses": [{
                    "name": "nginx", "ready": true, "restartCount": 0,
                    "state": {"running": {"startedAt": "2025-01-01T11:00:02Z"}}
                }]
            }
        })
    }

    fn init_pod(init_statuses: Value) -> Value {
        json!({
            "metadata": {"name": "init", "creationTimestamp": "2025-01-01T11:59:00Z"},
            "spec": {
                "initContainers": [{"name": "setup"}, {"name": "migrate"}],
                "containers": [{"name": "app"}]
            },
            "status": {
                "phase": "Pending",
                "initContainerStatuses": init_statuses,
                "containerStatuses": [{"name": "app", "restartCount": 0,
                                       "state": {"waiting": {"reason": "PodInitializing"}}}]
            }
        })
    }

    #[test]
    fn running_pod_prints_like_kubectl() {
        assert_eq!(
            cell_strings("Pod", &running_pod()),
            ["nginx", "1/1", "Running", "0", "60m", "10.244.0.5", "node1", "<none>", "<none>"]
        );
    }

    #[test]
    fn crash_looping_pod_shows_waiting_reason_and_last_restart() {
        let pod = json!({
            "metadata": {"name": "crash", "creationTimestamp": "2025-01-01T10:00:00Z"},
            "spec": {"containers": [{"name": "app"}, {"name": "side"}]},
            "status": {
                "phase": "Running",
                "containerStatuses": [
                    {"name": "app", "ready": false, "restartCount": 5,
                     "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                     "lastState": {"terminated": {"exitCode": 1, "reason": "Error",
                                                  "finishedAt": "2025-01-01T11:55:00Z"}}},
                    {"name": "side", "ready": true, "restartCount": 1,
                     "state": {"running": {}},
                     "lastState": {"terminated": {"exitCode": 0, "finishedAt": "2025-01-01T10:30:00Z"}}}
                ]
            }
        });
        let c = cell_strings("Pod", &pod);
        assert_eq!(c[1..5], ["1/2", "CrashLoopBackOff", "6 (5m ago)", "120m"]);
        assert_eq!(c[5..8], ["<none>", "<none>", "<none>"]);
    }

    #[test]
    fn terminated_containers_report_reason_signal_or_exit_code() {
        let with_state = |terminated: Value| {
            json!({"status": {"phase": "Running", "containerStatuses": [
                {"name": "a", "restartCount": 0, "state": {"terminated": terminated}}
            ]}, "spec": {"containers": [{"name": "a"}]}})
        };
        let status = |t| cell_strings("Pod", &with_state(t))[2].clone();
        assert_eq!(status(json!({"exitCode": 0, "reason": "Completed"})), "Completed");
        assert_eq!(status(json!({"exitCode": 137, "signal": 9})), "Signal:9");
        assert_eq!(status(json!({"exitCode": 2})), "ExitCode:2");
    }

    #[test]
    fn completed_container_beside_a_running_one_reads_running_or_not_ready() {
        let mut pod = running_pod();
        pod["spec"]["containers"] = json!([{"name": "job"}, {"name": "nginx"}]);
        let statuses = pod["status"]["containerStatuses"].clone();
        pod["status"]["containerStatuses"] = json!([statuses[0].clone(),
            {"name": "job", "restartCount": 0, "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}]);
        assert_eq!(cell_strings("Pod", &pod)[2], "Running");
        pod["status"]["conditions"] = json!([{"type": "Ready", "status": "False"}]);
        assert_eq!(cell_strings("Pod", &pod)[2], "NotReady");
    }

    #[test]
    fn terminating_pod_shows_terminating_unless_finished() {
        let mut pod = running_pod();
        pod["metadata"]["deletionTimestamp"] = json!("2025-01-01T11:59:00Z");
        assert_eq!(cell_strings("Pod", &pod)[2], "Terminating");
        pod["status"]["phase"] = json!("Succeeded");
        pod["status"]["containerStatuses"] = json!([]);
        assert_eq!(cell_strings("Pod", &pod)[2], "Succeeded");
        pod["status"]["reason"] = json!("NodeLost");
        assert_eq!(cell_strings("Pod", &pod)[2], "Unknown");
    }

    #[test]
    fn init_containers_report_progress_and_failures() {
        let done = json!({"name": "setup", "restartCount": 0, "state": {"terminated": {"exitCode": 0}}});
        let running = json!({"name": "migrate", "restartCount": 0, "state": {"running": {}}});
        let c = cell_strings("Pod", &init_pod(json!([done.clone(), running])));
        assert_eq!(c[1..5], ["0/1", "Init:1/2", "0", "60s"]);

        let failed = json!({"name": "migrate", "restartCount": 3,
                            "state": {"terminated": {"exitCode": 1, "reason": "Error"}}});
        assert_eq!(cell_strings("Pod", &init_pod(json!([done.clone(), failed])))[2..4], ["Init:Error", "3"]);

        let backoff = json!({"name": "migrate", "restartCount": 4,
                             "state": {"waiting": {"reason": "CrashLoopBackOff"}}});
        assert_eq!(cell_strings("Pod", &init_pod(json!([done.clone(), backoff])))[2], "Init:CrashLoopBackOff");

        let killed =
            json!({"name": "migrate", "restartCount": 0, "state": {"terminated": {"exitCode": 137, "signal": 9}}});
        assert_eq!(cell_strings("Pod", &init_pod(json!([done, killed])))[2], "Init:Signal:9");
    }

    #[test]
    fn started_sidecar_counts_toward_ready_and_total() {
        let mut pod = running_pod();
        pod["spec"]["initContainers"] = json!([{"name": "proxy", "restartPolicy": "Always"}]);
        pod["status"]["initContainerStatuses"] = json!([
            {"name": "proxy", "started": true, "ready": true, "restartCount": 2, "state": {"running": {}}}
        ]);
        assert_eq!(cell_strings("Pod", &pod)[1..4], ["2/2", "Running", "2"]);
    }

    #[test]
    fn readiness_gates_count_true_conditions() {
        let mut pod = running_pod();
        pod["spec"]["readinessGates"] = json!([{"conditionType": "a/lb"}, {"conditionType": "b/x"}]);
        pod["status"]["conditions"] = json!([{"type": "Ready", "status": "True"}, {"type": "a/lb", "status": "True"}]);
        assert_eq!(cell_strings("Pod", &pod)[8], "1/2");
    }
}
