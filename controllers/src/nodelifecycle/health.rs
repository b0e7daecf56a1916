//! The node health decision: from a Node, its heartbeat Lease and the time, which conditions the
//! controller marks Unknown (the kubelet went quiet) and which taints the node should carry.

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, NodeCondition, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use std::time::Duration;

pub const NOT_READY: &str = "node.kubernetes.io/not-ready";
pub const UNREACHABLE: &str = "node.kubernetes.io/unreachable";
pub const UNSCHEDULABLE: &str = "node.kubernetes.io/unschedulable";
pub const NO_EXECUTE: &str = "NoExecute";
pub const NO_SCHEDULE: &str = "NoSchedule";

/// (condition, status, taint key): Kubernetes' nodeConditionToTaintKeyStatusMap.
const CONDITION_TAINTS: [(&str, &str, &str); 6] = [
    ("Ready", "False", NOT_READY),
    ("Ready", "Unknown", UNREACHABLE),
    ("MemoryPressure", "True", "node.kubernetes.io/memory-pressure"),
    ("DiskPressure", "True", "node.kubernetes.io/disk-pressure"),
    ("PIDPressure", "True", "node.kubernetes.io/pid-pressure"),
    ("NetworkUnavailable", "True", "node.kubernetes.io/network-unavailable"),
];

/// The conditions the controller forces to Unknown when the kubelet stops reporting
/// (NetworkUnavailable belongs to the network plugin and is left alone).
const KUBELET_CONDITIONS: [&str; 4] = ["Ready", "MemoryPressure", "DiskPressure", "PIDPressure"];

/// How long a node may stay silent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grace {
    /// `--node-monitor-grace-period`: for a node that has reported before.
    pub monitor: Duration,
    /// `--node-startup-grace-period`: for a node whose kubelet never posted a Ready condition.
    pub startup: Duration,
}

/// What the controller should write for one node.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    /// The node's full condition list, when some must become Unknown.
    pub conditions: Option<Vec<NodeCondition>>,
    /// The node's full taint list, when it differs from the current one.
    pub taints: Option<Vec<Taint>>,
    /// The Ready condition goes from True to Unknown with this write (Kubernetes records NodeNotReady).
    pub became_not_ready: bool,
    /// The taints add a NoExecute taint to a node that had none of ours: evictions start (rate-limited).
    pub starts_eviction: bool,
    /// Time left until the node counts as silent (None: it already does).
    pub silent_in: Option<Duration>,
}

pub fn condition<'a>(node: &'a Node, type_: &str) -> Option<&'a NodeCondition> {
    node.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == type_)
}

/// Decides the conditions and taints of `node` at `now`, given its Lease in `kube-node-lease`.
pub fn assess(node: &Node, lease: Option<&Lease>, now: Timestamp, grace: Grace) -> Plan {
    let before_ready = condition(node, "Ready").map(|c| c.status.clone());
    let (conditions, silent_in) = stale_conditions(node, lease, now, grace);
    let mut seen = node.clone();
    if let Some(c) = &conditions {
        seen.status.get_or_insert_with(Default::default).conditions = Some(c.clone());
    }
    let after_ready = condition(&seen, "Ready").map(|c| c.status.clone());
    let current = node.spec.as_ref().and_then(|s| s.taints.clone()).unwrap_or_default();
    let want = desired_taints(&seen, now);
    Plan {
        conditions,
        became_not_ready: before_ready.as_deref() == Some("True") && after_ready.as_deref() != Some("True"),
        starts_eviction: starts_eviction(&current, &want),
        taints: (want != current).then_some(want),
        silent_in,
    }
}

/// The last sign of life: the newer of the Lease's renewTime and Ready's lastHeartbeatTime.
pub fn last_heartbeat(node: &Node, lease: Option<&Lease>) -> Option<Timestamp> {
    let renewed = lease.and_then(|l| l.spec.as_ref()?.renew_time.as_ref()).map(|t| t.0);
    let posted = condition(node, "Ready").and_then(|c| c.last_heartbeat_time.as_ref()).map(|t| t.0);
    renewed.max(posted)
}

/// Kubernetes' tryUpdateNodeHealth: once the node has been silent for longer than its grace
/// period, every kubelet condition not already Unknown becomes Unknown (NodeStatusUnknown), and a
/// missing one is added (NodeStatusNeverUpdated). `None` when nothing changes.
fn stale_conditions(
    node: &Node,
    lease: Option<&Lease>,
    now: Timestamp,
    grace: Grace,
) -> (Option<Vec<NodeCondition>>, Option<Duration>) {
    let created = node.metadata.creation_timestamp.as_ref().map(|t| t.0);
    let (since, grace) = match (last_heartbeat(node, lease), condition(node, "Ready")) {
        (Some(t), _) => (t, grace.monitor),
        (None, None) => (created.unwrap_or(now), grace.startup),
        (None, Some(_)) => (created.unwrap_or(now), grace.monitor),
    };
    let silent = now.duration_since(since);
    let grace_signed = SignedDuration::try_from(grace).unwrap_or(SignedDuration::MAX);
    if silent <= grace_signed {
        let left = grace_signed - silent;
        return (None, Some(Duration::try_from(left).unwrap_or_default()));
    }
    let mut conditions = node.status.as_ref().and_then(|s| s.conditions.clone()).unwrap_or_default();
    let mut changed = false;
    for type_ in KUBELET_CONDITIONS {
        match conditions.iter_mut().find(|c| c.type_ == type_) {
            Some(c) if c.status == "Unknown" => {}
            Some(c) => {
                c.status = "Unknown".into();
                c.reason = Some("NodeStatusUnknown".into());
                c.message = Some("Kubelet stopped posting node status.".into());
                c.last_transition_time = Some(Time(now));
                changed = true;
            }
            None => {
                conditions.push(NodeCondition {
                    type_: type_.into(),
                    status: "Unknown".into(),
                    reason: Some("NodeStatusNeverUpdated".into()),
                    message: Some("Kubelet never posted node status.".into()),
                    last_heartbeat_time: node.metadata.creation_timestamp.clone(),
                    last_transition_time: Some(Time(now)),
                });
                changed = true;
            }
        }
    }
    (changed.then_some(conditions), None)
}

/// The node's taints with the controller-managed ones reconciled against its conditions: the
/// NoSchedule taint of every condition in the table (and `unschedulable`), the NoExecute
/// not-ready/unreachable taint for Ready False/Unknown. Other taints stay as they are, except that a
/// NoExecute taint without `timeAdded` gets one (evictions count from it). Existing entries keep
/// their position and `timeAdded`; new ones go at the end.
pub fn desired_taints(node: &Node, now: Timestamp) -> Vec<Taint> {
    let mut want: Vec<(&str, &str)> = Vec::new();
    for (type_, status, key) in CONDITION_TAINTS {
        if condition(node, type_).is_some_and(|c| c.status == status) {
            want.push((key, NO_SCHEDULE));
        }
    }
    if node.spec.as_ref().and_then(|s| s.unschedulable) == Some(true) {
        want.push((UNSCHEDULABLE, NO_SCHEDULE));
    }
    match condition(node, "Ready").map(|c| c.status.as_str()) {
        Some("False") => want.push((NOT_READY, NO_EXECUTE)),
        Some("Unknown") => want.push((UNREACHABLE, NO_EXECUTE)),
        _ => {}
    }
    let current = node.spec.as_ref().and_then(|s| s.taints.clone()).unwrap_or_default();
    let mut out: Vec<Taint> = current
        .into_iter()
        .filter(|t| !managed(t) || want.contains(&(t.key.as_str(), t.effect.as_str())))
        .map(|mut t| {
            if t.effect == NO_EXECUTE && t.time_added.is_none() {
                t.time_added = Some(Time(now));
            }
            t
        })
        .collect();
    for (key, effect) in want {
        if !out.iter().any(|t| t.key == key && t.effect == effect) {
            let time_added = (effect == NO_EXECUTE).then_some(Time(now));
            out.push(Taint { key: key.into(), effect: effect.into(), value: None, time_added });
        }
    }
    out
}

/// A taint this controller adds and removes.
fn managed(t: &Taint) -> bool {
    match t.effect.as_str() {
        NO_EXECUTE => t.key == NOT_READY || t.key == UNREACHABLE,
        NO_SCHEDULE => t.key == UNSCHEDULABLE || CONDITION_TAINTS.iter().any(|(_, _, k)| *k == t.key),
        _ => false,
    }
}

/// `want` adds a not-ready/unreachable NoExecute taint to a node without either; swapping one for
/// the other is not a new eviction and is not rate-limited (as in Kubernetes).
pub fn starts_eviction(current: &[Taint], want: &[Taint]) -> bool {
    let ours = |t: &Taint| t.effect == NO_EXECUTE && (t.key == NOT_READY || t.key == UNREACHABLE);
    !current.iter().any(ours) && want.iter().any(ours)
}

/// `want` without the NoExecute taints it would add: what to write while the eviction rate limiter
/// holds a node back.
pub fn hold_back_eviction(current: &[Taint], want: Vec<Taint>) -> Vec<Taint> {
    want.into_iter()
        .filter(|t| t.effect != NO_EXECUTE || current.iter().any(|c| c.key == t.key && c.effect == t.effect))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use k8s_openapi::api::core::v1::{NodeSpec, NodeStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};

    const GRACE: Grace = Grace { monitor: Duration::from_secs(40), startup: Duration::from_secs(60) };

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + secs).expect("valid time")
    }

    fn cond(type_: &str, status: &str, heartbeat: i64) -> NodeCondition {
        NodeCondition {
            type_: type_.into(),
            status: status.into(),
            reason: Some("KubeletReady".into()),
            last_heartbeat_time: Some(Time(at(heartbeat))),
            last_transition_time: Some(Time(at(0))),
            ..NodeCondition::default()
        }
    }

    fn taint(key: &str, effect: &str, added: Option<i64>) -> Taint {
        Taint { key: key.into(), effect: effect.into(), value: None, time_added: added.map(|s| Time(at(s))) }
    }

    fn node(conditions: Vec<NodeCondition>, taints: Vec<Taint>) -> Node {
        Node {
            metadata: ObjectMeta {
                name: Some("n1".into()),
                creation_timestamp: Some(Time(at(0))),
                ..ObjectMeta::default()
            },
            spec: Some(NodeSpec { taints: Some(taints), ..NodeSpec::default() }),
            status: Some(NodeStatus { conditions: Some(conditions), ..NodeStatus::default() }),
        }
    }

    fn lease(renewed: i64) -> Lease {
        Lease {
            spec: Some(LeaseSpec { renew_time: Some(MicroTime(at(renewed))), ..LeaseSpec::default() }),
            ..Lease::default()
        }
    }

    fn healthy(heartbeat: i64) -> Vec<NodeCondition> {
        vec![
            cond("Ready", "True", heartbeat),
            cond("MemoryPressure", "False", heartbeat),
            cond("DiskPressure", "False", heartbeat),
            cond("PIDPressure", "False", heartbeat),
        ]
    }

    fn keys(taints: &[Taint]) -> Vec<String> {
        taints.iter().map(|t| format!("{}:{}", t.key, t.effect)).collect()
    }

    fn statuses(conditions: &[NodeCondition]) -> Vec<(String, String, Option<String>)> {
        conditions.iter().map(|c| (c.type_.clone(), c.status.clone(), c.reason.clone())).collect()
    }

    #[test]
    fn a_fresh_lease_keeps_a_node_healthy_even_with_an_old_status_heartbeat() {
        let plan = assess(&node(healthy(0), vec![]), Some(&lease(100)), at(130), GRACE);
        assert_eq!(plan.conditions, None);
        assert_eq!(plan.taints, None);
        assert_eq!(plan.silent_in, Some(Duration::from_secs(10)));
        assert!(!plan.became_not_ready);
    }

    #[test]
    fn without_a_lease_the_ready_heartbeat_counts() {
        let plan = assess(&node(healthy(100), vec![]), None, at(139), GRACE);
        assert_eq!(plan.conditions, None);
        let plan = assess(&node(healthy(100), vec![]), None, at(141), GRACE);
        assert!(plan.conditions.is_some());
    }

    #[test]
    fn a_silent_node_goes_unknown_and_unreachable() {
        let plan = assess(&node(healthy(0), vec![]), Some(&lease(10)), at(51), GRACE);
        let conditions = plan.conditions.expect("conditions change");
        let unknown = Some("NodeStatusUnknown".to_string());
        assert_eq!(
            statuses(&conditions),
            vec![
                ("Ready".into(), "Unknown".into(), unknown.clone()),
                ("MemoryPressure".into(), "Unknown".into(), unknown.clone()),
                ("DiskPressure".into(), "Unknown".into(), unknown.clone()),
                ("PIDPressure".into(), "Unknown".into(), unknown),
            ]
        );
        let ready = &conditions[0];
        assert_eq!(ready.message.as_deref(), Some("Kubelet stopped posting node status."));
        assert_eq!(ready.last_transition_time, Some(Time(at(51))));
        assert_eq!(ready.last_heartbeat_time, Some(Time(at(0))), "the last heartbeat is kept");
        let taints = plan.taints.expect("taints change");
        assert_eq!(keys(&taints), vec![format!("{UNREACHABLE}:NoSchedule"), format!("{UNREACHABLE}:NoExecute")]);
        assert_eq!(taints[1].time_added, Some(Time(at(51))));
        assert!(plan.became_not_ready && plan.starts_eviction);
        assert_eq!(plan.silent_in, None);
    }

    #[test]
    fn an_already_unknown_node_is_left_as_it_is() {
        let mut conditions = healthy(0);
        for c in &mut conditions {
            c.status = "Unknown".into();
        }
        let taints = vec![taint(UNREACHABLE, NO_SCHEDULE, None), taint(UNREACHABLE, NO_EXECUTE, Some(45))];
        let plan = assess(&node(conditions, taints), None, at(500), GRACE);
        assert_eq!(plan, Plan::default());
    }

    #[test]
    fn a_node_that_never_reported_gets_the_startup_grace_then_never_updated_conditions() {
        let plan = assess(&node(vec![], vec![]), None, at(59), GRACE);
        assert_eq!((plan.conditions, plan.taints), (None, None));
        let plan = assess(&node(vec![], vec![]), None, at(61), GRACE);
        let conditions = plan.conditions.expect("conditions added");
        assert_eq!(conditions.len(), 4);
        assert!(conditions.iter().all(|c| c.status == "Unknown"
            && c.reason.as_deref() == Some("NodeStatusNeverUpdated")
            && c.message.as_deref() == Some("Kubelet never posted node status.")
            && c.last_heartbeat_time == Some(Time(at(0)))));
        assert!(!plan.became_not_ready, "it was never Ready");
        assert!(plan.starts_eviction);
    }

    #[test]
    fn taints_follow_the_conditions() {
        // (name, conditions, current taints, desired taints)
        type Case = (&'static str, Vec<NodeCondition>, Vec<Taint>, Vec<String>);
        let cases: Vec<Case> = vec![
            (
                "ready false: not-ready",
                vec![cond("Ready", "False", 100)],
                vec![],
                vec![format!("{NOT_READY}:NoSchedule"), format!("{NOT_READY}:NoExecute")],
            ),
            (
                "ready again: our taints go, others stay",
                healthy(100),
                vec![
                    taint("dedicated", NO_EXECUTE, Some(1)),
                    taint(UNREACHABLE, NO_SCHEDULE, None),
                    taint(UNREACHABLE, NO_EXECUTE, Some(3)),
                ],
                vec!["dedicated:NoExecute".into()],
            ),
            (
                "unknown to false swaps the taints",
                vec![cond("Ready", "False", 100)],
                vec![taint(UNREACHABLE, NO_SCHEDULE, None), taint(UNREACHABLE, NO_EXECUTE, Some(3))],
                vec![format!("{NOT_READY}:NoSchedule"), format!("{NOT_READY}:NoExecute")],
            ),
            (
                "memory pressure is NoSchedule only",
                vec![cond("Ready", "True", 100), cond("MemoryPressure", "True", 100)],
                vec![],
                vec!["node.kubernetes.io/memory-pressure:NoSchedule".into()],
            ),
            ("no ready condition yet: nothing", vec![], vec![taint(NOT_READY, NO_SCHEDULE, None)], vec![]),
        ];
        for (name, conditions, taints, want) in cases {
            let n = node(conditions, taints);
            assert_eq!(keys(&desired_taints(&n, at(101))), want, "{name}");
        }
    }

    #[test]
    fn unschedulable_nodes_get_the_unschedulable_taint() {
        let mut n = node(healthy(100), vec![]);
        n.spec.get_or_insert_with(Default::default).unschedulable = Some(true);
        assert_eq!(keys(&desired_taints(&n, at(101))), vec![format!("{UNSCHEDULABLE}:NoSchedule")]);
    }

    #[test]
    fn existing_taints_keep_their_time_and_untimed_no_execute_taints_get_one() {
        let n = node(
            vec![cond("Ready", "Unknown", 0)],
            vec![taint("maintenance", NO_EXECUTE, None), taint(UNREACHABLE, NO_EXECUTE, Some(7))],
        );
        let out = desired_taints(&n, at(101));
        assert_eq!(out[0].time_added, Some(Time(at(101))));
        assert_eq!(out[1].time_added, Some(Time(at(7))));
    }

    #[test]
    fn swapping_not_ready_for_unreachable_does_not_start_an_eviction() {
        let current = vec![taint(NOT_READY, NO_EXECUTE, Some(1))];
        let want = vec![taint(UNREACHABLE, NO_EXECUTE, Some(2))];
        assert!(!starts_eviction(&current, &want));
        assert!(starts_eviction(&[], &want));
        assert!(starts_eviction(&[taint("other", NO_EXECUTE, None)], &want));
    }

    #[test]
    fn holding_back_drops_only_new_no_execute_taints() {
        let current = vec![taint("other", NO_EXECUTE, Some(1))];
        let want = vec![
            taint("other", NO_EXECUTE, Some(1)),
            taint(UNREACHABLE, NO_SCHEDULE, None),
            taint(UNREACHABLE, NO_EXECUTE, Some(2)),
        ];
        let held = hold_back_eviction(&current, want);
        assert_eq!(keys(&held), vec!["other:NoExecute".to_string(), format!("{UNREACHABLE}:NoSchedule")]);
    }
}
