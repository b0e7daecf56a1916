//! `describe pod`: where it runs, its phase, each container's image, ports, state, readiness
//! and restarts, and its conditions.

use super::common::{controlled_by, pairs, s, time};
use super::writer::Out;
use serde_json::Value;

pub fn describe(out: &mut Out, pod: &Value) {
    let (m, spec, st) = (&pod["metadata"], &pod["spec"], &pod["status"]);
    out.kv(0, "Name", s(&m["name"]));
    out.kv(0, "Namespace", s(&m["namespace"]));
    out.kv(0, "Service Account", s(&spec["serviceAccountName"]));
    let node = match (spec["nodeName"].as_str(), st["hostIP"].as_str()) {
        (Some(n), Some(ip)) => format!("{n}/{ip}"),
        (Some(n), None) => n.to_string(),
        _ => String::new(),
    };
    out.kv(0, "Node", node);
    if !st["startTime"].is_null() {
        out.kv(0, "Start Time", time(&st["startTime"]));
    }
    out.kv_list(0, "Labels", &pairs(&m["labels"]));
    out.kv_list(0, "Annotations", &pairs(&m["annotations"]));
    let phase = match m["deletionTimestamp"].as_str() {
        Some(_) => format!("Terminating (lasts {}s)", s(&m["deletionGracePeriodSeconds"])),
        None => s(&st["phase"]),
    };
    out.kv(0, "Status", phase);
    for (key, field) in [("Reason", "reason"), ("Message", "message")] {
        if let Some(v) = st[field].as_str() {
            out.kv(0, key, v);
        }
    }
    out.kv(0, "IP", s(&st["podIP"]));
    controlled_by(out, pod);
    for (title, spec_key, status_key) in [
        ("Init Containers", "initContainers", "initContainerStatuses"),
        ("Containers", "containers", "containerStatuses"),
    ] {
        let Some(containers) = spec[spec_key].as_array().filter(|c| !c.is_empty()) else {
            continue;
        };
        out.header(0, &format!("{title}:"));
        for c in containers {
            let status = st[status_key].as_array().into_iter().flatten().find(|cs| cs["name"] == c["name"]);
            container(out, c, status.unwrap_or(&Value::Null));
        }
    }
    let conds: Vec<Vec<String>> =
        st["conditions"].as_array().into_iter().flatten().map(|c| vec![s(&c["type"]), s(&c["status"])]).collect();
    out.table(0, "Conditions", &["Type", "Status"], &conds);
}

fn container(out: &mut Out, c: &Value, st: &Value) {
    out.header(1, &format!("{}:", s(&c["name"])));
    out.kv(2, "Image", s(&c["image"]));
    let ports: Vec<String> = c["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| format!("{}/{}", s(&p["containerPort"]), p["protocol"].as_str().unwrap_or("TCP")))
        .collect();
    out.kv(2, "Port", ports.join(", "));
    for (key, v) in [("Command", &c["command"]), ("Args", &c["args"])] {
        if let Some(items) = v.as_array() {
            out.kv_list(2, key, &items.iter().map(s).collect::<Vec<_>>());
        }
    }
    state(out, "State", &st["state"]);
    if st["lastState"].as_object().is_some_and(|m| !m.is_empty()) {
        state(out, "Last State", &st["lastState"]);
    }
    out.kv(2, "Ready", if st["ready"] == true { "True" } else { "False" });
    out.kv(2, "Restart Count", st["restartCount"].as_i64().unwrap_or(0).to_string());
    let env: Vec<String> = c["env"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| match e.get("value") {
            Some(v) => format!("{}:  {}", s(&e["name"]), s(v)),
            None => format!("{}:  <set from {}>", s(&e["name"]), source(&e["valueFrom"])),
        })
        .collect();
    match env.as_slice() {
        [] => out.kv(2, "Environment", ""),
        _ => {
            out.header(2, "Environment:");
            for e in env {
                let (k, v) = e.split_once(":  ").unwrap_or((&e, ""));
                out.kv(3, k, v);
            }
        }
    }
}

/// Where an env var's value comes from, briefly.
fn source(from: &Value) -> &'static str {
    ["configMapKeyRef", "secretKeyRef", "fieldRef", "resourceFieldRef"]
        .into_iter()
        .find(|k| !from[*k].is_null())
        .unwrap_or("elsewhere")
}

/// `State:  Running` with `Started:`, or Waiting/Terminated with their reason and details.
fn state(out: &mut Out, key: &str, state: &Value) {
    if let Some(r) = state.get("running") {
        out.kv(2, key, "Running");
        out.kv(3, "Started", time(&r["startedAt"]));
    } else if let Some(w) = state.get("waiting") {
        out.kv(2, key, "Waiting");
        out.kv(3, "Reason", s(&w["reason"]));
    } else if let Some(t) = state.get("terminated") {
        out.kv(2, key, "Terminated");
        out.kv(3, "Reason", s(&t["reason"]));
        out.kv(3, "Exit Code", s(&t["exitCode"]));
        out.kv(3, "Started", time(&t["startedAt"]));
        out.kv(3, "Finished", time(&t["finishedAt"]));
    } else {
        out.kv(2, key, "Waiting");
    }
}
