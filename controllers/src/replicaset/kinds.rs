//! The two kinds the replica controller runs: apps/v1 ReplicaSet and core/v1
//! ReplicationController, which Kubernetes' `pkg/controller/replication` drives with the
//! ReplicaSet controller's code. They differ only in how they are read: an RC's selector is a
//! plain label map, its spec and template optional; the status is the same set of counts.

use super::plan::{Condition, Status};
use crate::meta::Selector;
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{PodTemplateSpec, ReplicationController};
use k8s_openapi::NamespaceResourceScope;
use kube::Resource;
use serde::de::DeserializeOwned;
use std::fmt::Debug;

/// What the replica controller reads of the objects it runs.
pub trait Replicated:
    Resource<DynamicType = (), Scope = NamespaceResourceScope> + Clone + Debug + DeserializeOwned + Send + Sync + 'static
{
    /// The controller's name, as kube-controller-manager's `--controllers` spells it (metrics, logs).
    const NAME: &'static str;

    /// The pod selector; `None` when it is empty or invalid, and then the owner selects nothing.
    fn selector(&self) -> Option<Selector>;

    /// `spec.replicas`, 1 when unset.
    fn replicas(&self) -> i32;

    fn min_ready_seconds(&self) -> i32;

    fn template(&self) -> Option<&PodTemplateSpec>;

    /// The status as stored, in the shape the controller computes.
    fn observed(&self) -> Status;
}

/// Both kinds' statuses (and conditions) have the same fields under different type names.
macro_rules! observed {
    ($status:expr) => {{
        let Some(s) = &$status else { return Status::default() };
        let conditions = s.conditions.iter().flatten().map(|c| Condition {
            type_: text(c.type_.clone()),
            status: text(c.status.clone()),
            reason: c.reason.clone(),
            message: c.message.clone(),
            last_transition_time: c.last_transition_time.clone(),
        });
        Status {
            replicas: s.replicas,
            fully_labeled_replicas: s.fully_labeled_replicas.unwrap_or(0),
            ready_replicas: s.ready_replicas.unwrap_or(0),
            available_replicas: s.available_replicas.unwrap_or(0),
            observed_generation: s.observed_generation,
            conditions: conditions.collect(),
        }
    }};
}

/// A condition's type or status: a string in an RC's conditions, optional in a ReplicaSet's.
fn text(v: impl Into<Option<String>>) -> String {
    v.into().unwrap_or_default()
}

impl Replicated for ReplicaSet {
    const NAME: &'static str = "replicaset";

    fn selector(&self) -> Option<Selector> {
        Selector::for_workload(&self.spec.selector)
    }

    fn replicas(&self) -> i32 {
        self.spec.replicas.unwrap_or(1)
    }

    fn min_ready_seconds(&self) -> i32 {
        self.spec.min_ready_seconds.unwrap_or(0)
    }

    fn template(&self) -> Option<&PodTemplateSpec> {
        self.spec.template.as_ref()
    }

    fn observed(&self) -> Status {
        observed!(self.status)
    }
}

impl Replicated for ReplicationController {
    const NAME: &'static str = "replicationcontroller";

    fn selector(&self) -> Option<Selector> {
        Selector::for_set(self.spec.as_ref()?.selector.as_ref()?)
    }

    fn replicas(&self) -> i32 {
        self.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)
    }

    fn min_ready_seconds(&self) -> i32 {
        self.spec.as_ref().and_then(|s| s.min_ready_seconds).unwrap_or(0)
    }

    fn template(&self) -> Option<&PodTemplateSpec> {
        self.spec.as_ref()?.template.as_ref()
    }

    fn observed(&self) -> Status {
        observed!(self.status)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        ReplicationControllerCondition, ReplicationControllerSpec, ReplicationControllerStatus,
    };
    use std::collections::BTreeMap;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn a_replication_controller_selects_by_its_label_map() {
        let rc = |selector: Option<BTreeMap<String, String>>| ReplicationController {
            spec: Some(ReplicationControllerSpec { selector, ..ReplicationControllerSpec::default() }),
            ..ReplicationController::default()
        };
        let sel = rc(Some(labels(&[("app", "web")]))).selector().expect("a selector");
        assert!(sel.matches(Some(&labels(&[("app", "web"), ("pod-template-hash", "x")]))));
        assert!(!sel.matches(Some(&labels(&[("app", "api")]))));
        assert!(rc(Some(BTreeMap::new())).selector().is_none(), "an empty selector selects nothing");
        assert!(rc(None).selector().is_none());
        assert!(ReplicationController::default().selector().is_none(), "no spec at all");
    }

    #[test]
    fn unset_replicas_mean_one_for_both_kinds() {
        assert_eq!(ReplicationController::default().replicas(), 1);
        assert_eq!(ReplicaSet::default().replicas(), 1);
        assert_eq!(ReplicationController::default().min_ready_seconds(), 0);
        assert!(ReplicationController::default().template().is_none());
    }

    #[test]
    fn a_replication_controllers_status_reads_as_a_replica_sets() {
        let rc = ReplicationController {
            status: Some(ReplicationControllerStatus {
                replicas: 3,
                ready_replicas: Some(2),
                observed_generation: Some(4),
                conditions: Some(vec![ReplicationControllerCondition {
                    type_: "ReplicaFailure".into(),
                    status: "True".into(),
                    reason: Some("FailedCreate".into()),
                    ..ReplicationControllerCondition::default()
                }]),
                ..ReplicationControllerStatus::default()
            }),
            ..ReplicationController::default()
        };
        let s = rc.observed();
        assert_eq!((s.replicas, s.ready_replicas, s.available_replicas), (3, 2, 0));
        assert_eq!(s.observed_generation, Some(4));
        assert_eq!(s.conditions[0].reason.as_deref(), Some("FailedCreate"));
        assert_eq!(ReplicationController::default().observed(), Status::default());
    }
}
