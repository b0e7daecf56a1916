//! `describe deployment`: selector, replica counts, strategy, pod template, conditions and its
//! old and new ReplicaSets.

use super::common::{conditions, metadata, pairs, s};
use super::writer::Out;
use crate::cmd::selector_string;
use serde_json::Value;

pub fn describe(out: &mut Out, d: &Value, replica_sets: &[Value]) {
    metadata(out, d);
    let (spec, st) = (&d["spec"], &d["status"]);
    out.kv(0, "Selector", selector_string(&spec["selector"]).unwrap_or_default());
    let n = |v: &Value| v.as_i64().unwrap_or(0);
    out.kv(
        0,
        "Replicas",
        format!(
            "{} desired | {} updated | {} total | {} available | {} unavailable",
            n(&spec["replicas"]),
            n(&st["updatedReplicas"]),
            n(&st["replicas"]),
            n(&st["availableReplicas"]),
            n(&st["unavailableReplicas"])
        ),
    );
    out.kv(0, "StrategyType", s(&spec["strategy"]["type"]));
    out.kv(0, "MinReadySeconds", n(&spec["minReadySeconds"]).to_string());
    let ru = &spec["strategy"]["rollingUpdate"];
    if !ru.is_null() {
        out.kv(
            0,
            "RollingUpdateStrategy",
            format!("{} max unavailable, {} max surge", s(&ru["maxUnavailable"]), s(&ru["maxSurge"])),
        );
    }
    let tpl = &spec["template"];
    out.header(0, "Pod Template:");
    out.kv_list(1, "Labels", &pairs(&tpl["metadata"]["labels"]));
    out.header(1, "Containers:");
    for c in tpl["spec"]["containers"].as_array().into_iter().flatten() {
        out.header(2, &format!("{}:", s(&c["name"])));
        out.kv(3, "Image", s(&c["image"]));
        let ports: Vec<String> = c["ports"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|p| format!("{}/{}", s(&p["containerPort"]), p["protocol"].as_str().unwrap_or("TCP")))
            .collect();
        out.kv(3, "Port", ports.join(", "));
    }
    conditions(out, d);
    let revision =
        |o: &Value| o["metadata"]["annotations"]["deployment.kubernetes.io/revision"].as_str().map(str::to_string);
    let current = revision(d);
    let line = |rs: &Value| {
        format!(
            "{} ({}/{} replicas created)",
            s(&rs["metadata"]["name"]),
            n(&rs["status"]["replicas"]),
            n(&rs["spec"]["replicas"])
        )
    };
    let (new, old): (Vec<&Value>, Vec<&Value>) =
        replica_sets.iter().partition(|rs| current.is_some() && revision(rs) == current);
    let old: Vec<String> = old
        .into_iter()
        .filter(|rs| n(&rs["spec"]["replicas"]) > 0 || n(&rs["status"]["replicas"]) > 0)
        .map(line)
        .collect();
    out.kv(0, "OldReplicaSets", old.join(", "));
    out.kv(0, "NewReplicaSet", new.first().map(|rs| line(rs)).unwrap_or_default());
}
