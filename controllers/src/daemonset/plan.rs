//! The DaemonSet decisions, pure: which nodes should run a daemon pod (node name, node affinity and
//! taints, with the tolerations Kubernetes adds to every daemon pod), which node each pod is on or
//! meant for, what to create and delete (the manage loop), the rolling update's next step (with or
//! without surge) and the status it all adds up to — Kubernetes' `pkg/controller/daemon`.

use crate::meta::{pod_is_available, pod_is_ready};
use crate::replicaset::plan::PodRef;
use k8s_openapi::api::apps::v1::{DaemonSet, DaemonSetStatus};
use k8s_openapi::api::core::v1::{
    Affinity, Node, NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, Pod, PodSpec, Toleration,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kaji_api::scheduling::{required_node_affinity_matches, untolerated};
use std::collections::{BTreeMap, HashSet};

/// The label naming the ControllerRevision a pod was made from.
pub const REVISION_HASH: &str = "controller-revision-hash";
/// The label older DaemonSets used for the same purpose (still honoured, as Kubernetes does).
pub const TEMPLATE_GENERATION: &str = "pod-template-generation";
/// The DaemonSet annotation holding its template generation.
pub const TEMPLATE_GENERATION_ANNOTATION: &str = "deprecated.daemonset.template.generation";

/// Kubernetes' burstReplicas for DaemonSets: at most this many creates per sync.
pub const BURST: usize = 250;

/// The tolerations every daemon pod gets (AddOrUpdateDaemonPodTolerations): it stays on a node
/// that is not ready or unreachable, and is placed on nodes under pressure or cordoned; host-network
/// pods also on nodes whose network is not ready yet.
pub fn add_daemon_tolerations(spec: &mut PodSpec) {
    let mut wanted = vec![
        ("node.kubernetes.io/not-ready", "NoExecute"),
        ("node.kubernetes.io/unreachable", "NoExecute"),
        ("node.kubernetes.io/disk-pressure", "NoSchedule"),
        ("node.kubernetes.io/memory-pressure", "NoSchedule"),
        ("node.kubernetes.io/pid-pressure", "NoSchedule"),
        ("node.kubernetes.io/unschedulable", "NoSchedule"),
    ];
    if spec.host_network == Some(true) {
        wanted.push(("node.kubernetes.io/network-unavailable", "NoSchedule"));
    }
    let tolerations = spec.tolerations.get_or_insert_with(Vec::new);
    for (key, effect) in wanted {
        let t = Toleration {
            key: Some(key.into()),
            operator: Some("Exists".into()),
            effect: Some(effect.into()),
            ..Toleration::default()
        };
        if !tolerations.contains(&t) {
            tolerations.push(t);
        }
    }
}

/// The affinity with its required node affinity replaced by one term naming the node
/// (ReplaceDaemonSetPodNodeNameNodeAffinity): the scheduler places the pod there and nowhere else.
pub fn pin_to_node(affinity: Option<Affinity>, node: &str) -> Affinity {
    let mut affinity = affinity.unwrap_or_default();
    let term = NodeSelectorTerm {
        match_fields: Some(vec![NodeSelectorRequirement {
            key: "metadata.name".into(),
            operator: "In".into(),
            values: Some(vec![node.into()]),
        }]),
        match_expressions: None,
    };
    let na = affinity.node_affinity.get_or_insert_with(NodeAffinity::default);
    na.required_during_scheduling_ignored_during_execution = Some(NodeSelector { node_selector_terms: vec![term] });
    affinity
}

/// The node a daemon pod runs on, or the one its node affinity names while it waits for the
/// scheduler (GetTargetNodeName).
pub fn target_node(pod: &Pod) -> Option<String> {
    let spec = pod.spec.as_ref()?;
    if let Some(n) = spec.node_name.as_deref().filter(|n| !n.is_empty()) {
        return Some(n.to_string());
    }
    let required =
        spec.affinity.as_ref()?.node_affinity.as_ref()?.required_during_scheduling_ignored_during_execution.as_ref()?;
    let [term] = required.node_selector_terms.as_slice() else { return None };
    let [field] = term.match_fields.as_deref()? else { return None };
    match (field.key.as_str(), field.operator.as_str(), field.values.as_deref()) {
        ("metadata.name", "In", Some([name])) => Some(name.clone()),
        _ => None,
    }
}

/// Whether `node` should run the daemon pod, and whether a pod already there may stay
/// (nodeShouldRunDaemonPod): it must fit the template's node name and node affinity; a taint the
/// pod does not tolerate keeps new pods off, and one with effect NoExecute also evicts.
pub fn node_should_run(ds: &DaemonSet, node: &Node) -> (bool, bool) {
    let name = node.metadata.name.as_deref().unwrap_or_default();
    let mut spec = ds.spec.template.spec.clone().unwrap_or_default();
    if spec.node_name.as_deref().is_some_and(|n| !n.is_empty() && n != name) {
        return (false, false);
    }
    add_daemon_tolerations(&mut spec);
    let labels = node.metadata.labels.clone().unwrap_or_default();
    if !required_node_affinity_matches(&spec, name, &labels) {
        return (false, false);
    }
    let taints = node.spec.as_ref().and_then(|s| s.taints.clone()).unwrap_or_default();
    let tolerations = spec.tolerations.unwrap_or_default();
    if untolerated(&taints, &tolerations, |e| e == "NoSchedule" || e == "NoExecute").is_none() {
        return (true, true);
    }
    (false, untolerated(&taints, &tolerations, |e| e == "NoExecute").is_none())
}

/// The DaemonSet's template generation (from its annotation), if it has one.
pub fn template_generation(ds: &DaemonSet) -> Option<i64> {
    ds.metadata.annotations.as_ref()?.get(TEMPLATE_GENERATION_ANNOTATION)?.parse().ok()
}

/// Whether a pod was made from the current template (IsPodUpdated): the revision hash matches, or
/// the older template-generation label does.
pub fn is_updated(pod: &Pod, hash: &str, generation: Option<i64>) -> bool {
    let labels = pod.metadata.labels.as_ref();
    let label = |k: &str| labels.and_then(|l| l.get(k)).map(String::as_str);
    let by_hash = !hash.is_empty() && label(REVISION_HASH) == Some(hash);
    let by_generation = generation.is_some_and(|g| label(TEMPLATE_GENERATION) == Some(&g.to_string()));
    by_hash || by_generation
}

fn phase(pod: &Pod) -> &str {
    pod.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("")
}

fn deleting(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
}

fn pod_ref(pod: &Pod) -> PodRef {
    PodRef { name: pod.metadata.name.clone().unwrap_or_default(), uid: pod.metadata.uid.clone().unwrap_or_default() }
}

/// The daemon pods by the node they are on or meant for (getNodesToDaemonPods): pods being
/// deleted that already finished are left out; each node's pods are oldest first, scheduled
/// before unscheduled (podByCreationTimestampAndPhase).
pub fn by_node<'a>(pods: &[&'a Pod]) -> BTreeMap<String, Vec<&'a Pod>> {
    let mut map: BTreeMap<String, Vec<&Pod>> = BTreeMap::new();
    for pod in pods {
        if deleting(pod) && matches!(phase(pod), "Failed" | "Succeeded") {
            continue;
        }
        if let Some(node) = target_node(pod) {
            map.entry(node).or_default().push(pod);
        }
    }
    for list in map.values_mut() {
        list.sort_by_key(|p| {
            let unscheduled = p.spec.as_ref().and_then(|s| s.node_name.as_deref()).is_none_or(str::is_empty);
            let created = p.metadata.creation_timestamp.as_ref().map(|t| t.0.as_millisecond()).unwrap_or(i64::MAX);
            (unscheduled, created, p.metadata.name.clone().unwrap_or_default())
        });
    }
    map
}

/// What the manage loop does.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Nodes that get a new daemon pod.
    pub create_on: Vec<String>,
    pub delete: Vec<PodRef>,
    /// Failed pods to delete, with their node (each node's failures back off).
    pub failed: Vec<(String, PodRef)>,
    /// A node with a failed pod is backing off: look again later.
    pub failed_backing_off: bool,
}

impl Plan {
    pub fn is_empty(&self) -> bool {
        self.create_on.is_empty() && self.delete.is_empty() && self.failed.is_empty()
    }
}

/// Whether the update strategy may put a second pod on a node (RollingUpdate with maxSurge > 0).
pub fn surge_value(ds: &DaemonSet) -> Option<&IntOrString> {
    let strategy = ds.spec.update_strategy.as_ref()?;
    if strategy.type_.as_deref().unwrap_or("RollingUpdate") != "RollingUpdate" {
        return None;
    }
    strategy.rolling_update.as_ref()?.max_surge.as_ref().filter(|v| !matches!(v, IntOrString::Int(0)))
}

/// The manage loop (manage + podsShouldBeOnNode): a pod for every node that should run one and
/// has none; failed pods go (unless their node backs off); extra pods go, the oldest stays (with
/// surge, one old and one new may share a node while the new one becomes available); pods on
/// nodes that must not run them go, as do unscheduled pods meant for nodes that no longer exist.
pub fn manage(
    ds: &DaemonSet,
    nodes: &[&Node],
    pods: &BTreeMap<String, Vec<&Pod>>,
    hash: &str,
    now: jiff::Timestamp,
    mut backing_off: impl FnMut(&str) -> bool,
) -> Plan {
    let min_ready = ds.spec.min_ready_seconds.unwrap_or(0);
    let surge = surge_value(ds).is_some();
    let mut plan = Plan::default();
    for node in nodes {
        let name = node.metadata.name.clone().unwrap_or_default();
        let (should_run, should_continue) = node_should_run(ds, node);
        let on_node = pods.get(&name);
        match on_node {
            None if should_run => plan.create_on.push(name),
            None => {}
            Some(list) if should_continue => {
                let mut running = Vec::new();
                for pod in list.iter().filter(|p| !deleting(p)) {
                    if phase(pod) == "Failed" {
                        if backing_off(&name) {
                            plan.failed_backing_off = true;
                        } else {
                            plan.failed.push((name.clone(), pod_ref(pod)));
                        }
                        continue;
                    }
                    running.push(*pod);
                }
                if !surge {
                    plan.delete.extend(running.iter().skip(1).map(|p| pod_ref(p)));
                } else {
                    let (mut oldest_new, mut oldest_old) = (None, None);
                    for pod in running {
                        let slot = if is_updated(pod, hash, None) { &mut oldest_new } else { &mut oldest_old };
                        if slot.is_none() {
                            *slot = Some(pod);
                        } else {
                            plan.delete.push(pod_ref(pod));
                        }
                    }
                    if let (Some(new), Some(old)) = (oldest_new, oldest_old) {
                        if !pod_is_ready(old) || pod_is_available(new, min_ready, now) {
                            plan.delete.push(pod_ref(old));
                        }
                    }
                }
            }
            Some(list) => plan.delete.extend(list.iter().filter(|p| !deleting(p)).map(|p| pod_ref(p))),
        }
    }
    let known: HashSet<&str> = nodes.iter().filter_map(|n| n.metadata.name.as_deref()).collect();
    for (node, list) in pods {
        if known.contains(node.as_str()) {
            continue;
        }
        let unscheduled = list
            .iter()
            .filter(|p| !deleting(p))
            .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()).is_none_or(str::is_empty));
        plan.delete.extend(unscheduled.map(|p| pod_ref(p)));
    }
    plan.create_on.truncate(BURST);
    plan
}

/// An int-or-percent of `total` (GetScaledValueFromIntOrPercent); `None` for a malformed value.
fn scaled(v: &IntOrString, total: usize, round_up: bool) -> Option<usize> {
    match v {
        IntOrString::Int(i) => usize::try_from(*i).ok(),
        IntOrString::String(s) => {
            let p: usize = s.strip_suffix('%')?.parse().ok()?;
            let x = p * total;
            Some(if round_up { x.div_ceil(100) } else { x / 100 })
        }
    }
}

/// maxSurge and maxUnavailable for `desired` nodes (updatedDesiredNodeCounts): percentages round
/// up, and if both come to zero one pod may be unavailable.
pub fn surge_and_unavailable(ds: &DaemonSet, desired: usize) -> (usize, usize) {
    let rolling = ds.spec.update_strategy.as_ref().and_then(|s| s.rolling_update.as_ref());
    let one = IntOrString::Int(1);
    let unavailable = rolling.and_then(|r| r.max_unavailable.as_ref()).unwrap_or(&one);
    let max_unavailable = scaled(unavailable, desired, true).unwrap_or(1);
    let max_surge = surge_value(ds).and_then(|v| scaled(v, desired, true)).unwrap_or(0);
    if max_surge == 0 && max_unavailable == 0 {
        return (0, 1);
    }
    (max_surge, max_unavailable)
}

/// The rolling update's next step: old pods to delete and nodes to surge onto (rollingUpdate).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Rollout {
    pub delete: Vec<PodRef>,
    pub create_on: Vec<String>,
}

/// At most one old and one new live pod on the node; `None` if there are more (the manage loop
/// prunes them first) — findUpdatedPodsOnNode.
fn old_and_new<'a>(
    list: &[&'a Pod],
    hash: &str,
    generation: Option<i64>,
) -> Option<(Option<&'a Pod>, Option<&'a Pod>)> {
    let (mut new, mut old) = (None, None);
    for pod in list.iter().filter(|p| !deleting(p)) {
        let slot = if is_updated(pod, hash, generation) { &mut new } else { &mut old };
        if slot.is_some() {
            return None;
        }
        *slot = Some(*pod);
    }
    Some((old, new))
}

/// Kubernetes' rollingUpdate. Without surge it deletes old pods while fewer than maxUnavailable
/// nodes lack an available pod (old unavailable pods go at once) and lets the manage loop create
/// the new ones; with surge it creates a new pod beside an old one on up to maxSurge nodes (at once
/// where the old pod is unavailable) and deletes each old pod when its replacement is available.
pub fn rolling_update(
    ds: &DaemonSet,
    nodes: &[&Node],
    pods: &BTreeMap<String, Vec<&Pod>>,
    hash: &str,
    now: jiff::Timestamp,
) -> Rollout {
    let min_ready = ds.spec.min_ready_seconds.unwrap_or(0);
    let generation = template_generation(ds);
    let available = |p: &Pod| pod_is_available(p, min_ready, now);
    let should_run: BTreeMap<&str, bool> =
        nodes.iter().map(|n| (n.metadata.name.as_deref().unwrap_or_default(), node_should_run(ds, n).0)).collect();
    let desired = should_run.values().filter(|v| **v).count();
    let (max_surge, max_unavailable) = surge_and_unavailable(ds, desired);
    let mut out = Rollout::default();

    if max_surge == 0 {
        let mut unavailable = 0;
        let mut candidates = Vec::new();
        for list in pods.values() {
            let Some((old, new)) = old_and_new(list, hash, generation) else {
                unavailable += 1;
                continue;
            };
            match (old, new) {
                (None, None) | (Some(_), Some(_)) => unavailable += 1,
                (None, Some(new)) => {
                    if !available(new) {
                        unavailable += 1;
                    }
                }
                (Some(old), None) if !available(old) => {
                    out.delete.push(pod_ref(old));
                    unavailable += 1;
                }
                (Some(_), None) if unavailable >= max_unavailable => {}
                (Some(old), None) => candidates.push(pod_ref(old)),
            }
        }
        let room = max_unavailable.saturating_sub(unavailable).min(candidates.len());
        out.delete.extend(candidates.into_iter().take(room));
        return out;
    }

    let (mut surging, mut available_nodes) = (0usize, 0usize);
    let (mut allowed, mut candidates, mut sunset) = (Vec::new(), Vec::new(), Vec::new());
    for (node, list) in pods {
        let Some((old, new)) = old_and_new(list, hash, generation) else {
            surging += 1;
            continue;
        };
        if old.or(new).is_some_and(available) {
            available_nodes += 1;
        }
        let runs_here = should_run.get(node.as_str()).copied().unwrap_or(false);
        match (old, new) {
            (None, _) => {}
            (Some(old), None) if !available(old) => {
                if runs_here {
                    allowed.push(node.clone());
                } else {
                    out.delete.push(pod_ref(old));
                }
            }
            (Some(old), None) => {
                if !runs_here {
                    sunset.push(pod_ref(old));
                } else if surging < max_surge {
                    candidates.push(node.clone());
                }
            }
            (Some(_), Some(new)) if !available(new) => surging += 1,
            (Some(old), Some(_)) => out.delete.push(pod_ref(old)),
        }
    }
    // With surge the owner expects full availability: a pod on a node that no longer qualifies
    // goes only once enough pods elsewhere are available.
    let deletable = available_nodes.saturating_sub(desired).min(sunset.len());
    out.delete.extend(sunset.into_iter().take(deletable));
    let room = max_surge.saturating_sub(surging).min(candidates.len());
    out.create_on = allowed;
    out.create_on.extend(candidates.into_iter().take(room));
    out
}

/// The status the nodes and pods add up to (updateDaemonSetStatus); collisionCount and conditions
/// are kept as they were.
pub fn status(
    ds: &DaemonSet,
    nodes: &[&Node],
    pods: &BTreeMap<String, Vec<&Pod>>,
    hash: &str,
    now: jiff::Timestamp,
) -> DaemonSetStatus {
    let min_ready = ds.spec.min_ready_seconds.unwrap_or(0);
    let generation = template_generation(ds);
    let (mut desired, mut current, mut misscheduled) = (0, 0, 0);
    let (mut ready, mut available, mut updated) = (0, 0, 0);
    for node in nodes {
        let name = node.metadata.name.as_deref().unwrap_or_default();
        let first = pods.get(name).and_then(|l| l.first());
        if !node_should_run(ds, node).0 {
            if first.is_some() {
                misscheduled += 1;
            }
            continue;
        }
        desired += 1;
        let Some(pod) = first else { continue };
        current += 1;
        if pod_is_ready(pod) {
            ready += 1;
            if pod_is_available(pod, min_ready, now) {
                available += 1;
            }
        }
        if is_updated(pod, hash, generation) {
            updated += 1;
        }
    }
    let old = ds.status.as_ref();
    DaemonSetStatus {
        collision_count: old.and_then(|s| s.collision_count),
        conditions: old.and_then(|s| s.conditions.clone()),
        current_number_scheduled: current,
        desired_number_scheduled: desired,
        number_available: nonzero(available),
        number_misscheduled: misscheduled,
        number_ready: ready,
        number_unavailable: nonzero(desired - available),
        observed_generation: ds.metadata.generation,
        updated_number_scheduled: nonzero(updated),
    }
}

/// Go's `omitempty`: a zero count is left out.
fn nonzero(n: i32) -> Option<i32> {
    (n != 0).then_some(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use serde_json::json;

    fn ds(spec: serde_json::Value) -> DaemonSet {
        let mut spec = spec;
        spec["selector"] = json!({"matchLabels": {"app": "d"}});
        if spec.get("template").is_none() {
            spec["template"] = json!({"metadata": {"labels": {"app": "d"}}, "spec": {"containers": [{"name": "c"}]}});
        }
        serde_json::from_value(json!({"metadata": {"name": "d", "uid": "ds-uid"}, "spec": spec})).expect("ds")
    }

    fn node(name: &str, extra: serde_json::Value) -> Node {
        let mut n = json!({"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}}});
        if let Some(spec) = extra.get("spec") {
            n["spec"] = spec.clone();
        }
        if let Some(labels) = extra.get("labels").and_then(|l| l.as_object()) {
            for (k, v) in labels {
                n["metadata"]["labels"][k] = v.clone();
            }
        }
        serde_json::from_value(n).expect("node")
    }

    fn at(s: i64) -> Time {
        Time(jiff::Timestamp::from_second(1_700_000_000 + s).expect("time"))
    }

    /// A daemon pod on `node` (scheduled or only pinned), with this hash, created at `created`.
    fn pod(name: &str, node: &str, scheduled: bool, hash: &str, created: i64, phase: &str, ready: bool) -> Pod {
        let mut spec = PodSpec { affinity: Some(pin_to_node(None, node)), ..PodSpec::default() };
        if scheduled {
            spec.node_name = Some(node.into());
        }
        serde_json::from_value(json!({
            "metadata": {"name": name, "uid": format!("uid-{name}"), "creationTimestamp": at(created),
                "labels": {"app": "d", REVISION_HASH: hash}},
            "spec": spec,
            "status": {"phase": phase, "conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"},
                "lastTransitionTime": at(0)}]},
        }))
        .expect("pod")
    }

    fn now() -> jiff::Timestamp {
        jiff::Timestamp::from_second(1_700_001_000).expect("time")
    }

    fn names(refs: &[PodRef]) -> Vec<&str> {
        refs.iter().map(|r| r.name.as_str()).collect()
    }

    #[test]
    fn daemon_pods_tolerate_what_kubernetes_adds_once() {
        let mut spec = PodSpec::default();
        add_daemon_tolerations(&mut spec);
        add_daemon_tolerations(&mut spec);
        let keys: Vec<_> = spec.tolerations.iter().flatten().map(|t| t.key.clone().unwrap_or_default()).collect();
        assert_eq!(keys.len(), 6, "{keys:?}");
        assert!(keys.contains(&"node.kubernetes.io/unschedulable".to_string()));
        let mut host = PodSpec { host_network: Some(true), ..PodSpec::default() };
        add_daemon_tolerations(&mut host);
        assert_eq!(host.tolerations.map(|t| t.len()), Some(7), "host network adds network-unavailable");
    }

    #[test]
    fn pods_name_their_node_through_affinity_until_scheduled() {
        let p = pod("a", "n1", false, "h", 0, "Pending", false);
        assert_eq!(target_node(&p), Some("n1".into()));
        let mut moved = p.clone();
        moved.spec.as_mut().expect("spec").node_name = Some("n2".into());
        assert_eq!(target_node(&moved), Some("n2".into()), "the scheduled node wins");
        let other = Affinity::default();
        let replaced = pin_to_node(Some(other), "n3");
        let required = replaced.node_affinity.and_then(|a| a.required_during_scheduling_ignored_during_execution);
        assert_eq!(required.map(|r| r.node_selector_terms.len()), Some(1));
    }

    #[test]
    fn nodes_qualify_by_selector_affinity_and_taints() {
        let plain = ds(json!({}));
        let ssd = ds(json!({"template": {"metadata": {"labels": {"app": "d"}},
            "spec": {"containers": [{"name": "c"}], "nodeSelector": {"disk": "ssd"}}}}));
        let n = node("n1", json!({}));
        let fast = node("n2", json!({"labels": {"disk": "ssd"}}));
        let no_schedule = node("n3", json!({"spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]}}));
        let no_execute = node("n4", json!({"spec": {"taints": [{"key": "k", "effect": "NoExecute"}]}}));
        let cordoned = node(
            "n5",
            json!({"spec": {"taints": [{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}]}}),
        );
        assert_eq!(node_should_run(&plain, &n), (true, true));
        assert_eq!(node_should_run(&ssd, &n), (false, false));
        assert_eq!(node_should_run(&ssd, &fast), (true, true));
        assert_eq!(node_should_run(&plain, &no_schedule), (false, true), "NoSchedule: no new pod, the old stays");
        assert_eq!(node_should_run(&plain, &no_execute), (false, false), "NoExecute evicts");
        assert_eq!(node_should_run(&plain, &cordoned), (true, true), "daemon pods tolerate cordoned nodes");
    }

    #[test]
    fn manage_creates_where_missing_and_prunes_extras_and_strays() {
        let set = ds(json!({}));
        let (n1, n2, n3) = (node("n1", json!({})), node("n2", json!({})), node("n3", json!({})));
        let older = pod("older", "n2", true, "h", 0, "Running", true);
        let newer = pod("newer", "n2", true, "h", 5, "Running", true);
        let stray = pod("stray", "gone", false, "h", 0, "Pending", false);
        let failed = pod("failed", "n3", true, "h", 0, "Failed", false);
        let pods = [&older, &newer, &stray, &failed];
        let map = by_node(&pods);
        let plan = manage(&set, &[&n1, &n2, &n3], &map, "h", now(), |_| false);
        assert_eq!(plan.create_on, vec!["n1"]);
        assert_eq!(names(&plan.delete), vec!["newer", "stray"], "the oldest stays; unscheduled pods of gone nodes go");
        assert_eq!(
            plan.failed.iter().map(|(n, p)| (n.as_str(), p.name.as_str())).collect::<Vec<_>>(),
            [("n3", "failed")]
        );
        let waiting = manage(&set, &[&n1, &n2, &n3], &map, "h", now(), |n| n == "n3");
        assert!(waiting.failed.is_empty() && waiting.failed_backing_off);
    }

    #[test]
    fn manage_removes_pods_from_nodes_that_no_longer_qualify() {
        let set = ds(json!({}));
        let evicting = node("n1", json!({"spec": {"taints": [{"key": "k", "effect": "NoExecute"}]}}));
        let p = pod("p", "n1", true, "h", 0, "Running", true);
        let plan = manage(&set, &[&evicting], &by_node(&[&p]), "h", now(), |_| false);
        assert_eq!(names(&plan.delete), vec!["p"]);
        assert!(plan.create_on.is_empty());
    }

    #[test]
    fn rolling_update_respects_max_unavailable() {
        let set = ds(json!({"updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}}}));
        let nodes: Vec<Node> = (1..=3).map(|i| node(&format!("n{i}"), json!({}))).collect();
        let refs: Vec<&Node> = nodes.iter().collect();
        let olds: Vec<Pod> =
            (1..=3).map(|i| pod(&format!("p{i}"), &format!("n{i}"), true, "old", 0, "Running", true)).collect();
        let prefs: Vec<&Pod> = olds.iter().collect();
        let step = rolling_update(&set, &refs, &by_node(&prefs), "new", now());
        assert_eq!(names(&step.delete), vec!["p1"], "one at a time");
        // A new pod not yet available uses up the budget; an unavailable old pod goes anyway.
        let new1 = pod("q1", "n1", true, "new", 10, "Running", false);
        let old2 = pod("p2", "n2", true, "old", 0, "Running", false);
        let step = rolling_update(&set, &refs, &by_node(&[&new1, &old2, &olds[2]]), "new", now());
        assert_eq!(names(&step.delete), vec!["p2"]);
        let done = pod("q1", "n1", true, "new", 10, "Running", true);
        let step = rolling_update(&set, &refs, &by_node(&[&done, &olds[1], &olds[2]]), "new", now());
        assert_eq!(names(&step.delete), vec!["p2"]);
    }

    #[test]
    fn rolling_update_with_surge_starts_new_pods_beside_old_ones() {
        let set = ds(json!({"updateStrategy": {"type": "RollingUpdate",
            "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}}));
        let nodes: Vec<Node> = (1..=2).map(|i| node(&format!("n{i}"), json!({}))).collect();
        let refs: Vec<&Node> = nodes.iter().collect();
        let o1 = pod("o1", "n1", true, "old", 0, "Running", true);
        let o2 = pod("o2", "n2", true, "old", 0, "Running", true);
        let step = rolling_update(&set, &refs, &by_node(&[&o1, &o2]), "new", now());
        assert_eq!(step, Rollout { delete: vec![], create_on: vec!["n1".into()] });
        let starting = pod("s1", "n1", true, "new", 10, "Running", false);
        let step = rolling_update(&set, &refs, &by_node(&[&o1, &starting, &o2]), "new", now());
        assert_eq!(step, Rollout::default(), "the surge budget is used");
        let up = pod("s1", "n1", true, "new", 10, "Running", true);
        let step = rolling_update(&set, &refs, &by_node(&[&o1, &up, &o2]), "new", now());
        assert_eq!(names(&step.delete), vec!["o1"]);
        assert_eq!(step.create_on, vec!["n2"]);
        // The manage loop keeps both on a node only while the new one is not available.
        let plan = manage(&set, &refs, &by_node(&[&o1, &starting, &o2]), "new", now(), |_| false);
        assert!(plan.delete.is_empty(), "{plan:?}");
        let plan = manage(&set, &refs, &by_node(&[&o1, &up, &o2]), "new", now(), |_| false);
        assert_eq!(names(&plan.delete), vec!["o1"]);
    }

    #[test]
    fn percentages_round_and_zero_budgets_allow_one() {
        let pct = ds(json!({"updateStrategy": {"rollingUpdate": {"maxUnavailable": "10%"}}}));
        assert_eq!(surge_and_unavailable(&pct, 15), (0, 2));
        let zero = ds(json!({"updateStrategy": {"rollingUpdate": {"maxUnavailable": 0, "maxSurge": 0}}}));
        assert_eq!(surge_and_unavailable(&zero, 5), (0, 1));
        assert_eq!(surge_and_unavailable(&ds(json!({})), 5), (0, 1));
    }

    #[test]
    fn status_counts_nodes_and_pods() {
        let mut set = ds(json!({}));
        set.metadata.generation = Some(3);
        let only_ssd = node("n3", json!({"spec": {"taints": [{"key": "k", "effect": "NoExecute"}]}}));
        let nodes = [node("n1", json!({})), node("n2", json!({})), only_ssd];
        let refs: Vec<&Node> = nodes.iter().collect();
        let ready_new = pod("a", "n1", true, "new", 0, "Running", true);
        let misplaced = pod("c", "n3", true, "new", 0, "Running", true);
        let s = status(&set, &refs, &by_node(&[&ready_new, &misplaced]), "new", now());
        assert_eq!(s.desired_number_scheduled, 2);
        assert_eq!(s.current_number_scheduled, 1);
        assert_eq!(s.number_misscheduled, 1);
        assert_eq!(s.number_ready, 1);
        assert_eq!(s.number_available, Some(1));
        assert_eq!(s.number_unavailable, Some(1));
        assert_eq!(s.updated_number_scheduled, Some(1));
        assert_eq!(s.observed_generation, Some(3));
        let empty = status(&set, &[], &BTreeMap::new(), "new", now());
        assert_eq!(
            (empty.number_available, empty.number_unavailable, empty.updated_number_scheduled),
            (None, None, None)
        );
    }
}
