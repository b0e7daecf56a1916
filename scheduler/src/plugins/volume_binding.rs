//! VolumeBinding: a pod's PersistentVolumeClaims decide where it may run. A bound claim's volume
//! node affinity must hold on the node (a local volume lives on one node); an unbound claim of a
//! WaitForFirstConsumer class fits any node until the scheduler names the chosen node on the
//! claim (`volume.kubernetes.io/selected-node`) for the provisioner, and then only that node; a missing claim, or an
//! unbound one of an Immediate class, fits nowhere (Kubernetes' volumebinding plugin, without
//! pre-provisioned volume matching).

use crate::framework::{CycleState, FilterPlugin, Snapshot, Status};
use crate::labels::term_matches;
use crate::nodeinfo::{NodeInfo, PodInfo};
use k8s_openapi::api::core::v1::{NodeSelectorTerm, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::runtime::reflector::{ObjectRef, Store};
use std::borrow::Cow;

pub const NAME: &str = "VolumeBinding";
pub const CONFLICT: &str = "node(s) had volume node affinity conflict";
pub const UNBOUND_IMMEDIATE: &str = "pod has unbound immediate PersistentVolumeClaims";
/// Kubernetes' ErrReasonBindConflict: here, a claim whose volume is being made on another node.
pub const BIND_CONFLICT: &str = "node(s) didn't find available persistent volumes to bind";
/// The annotation naming the node a WaitForFirstConsumer claim's volume is to be made on.
pub const SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";

/// What the plugin reads: the cluster's claims, volumes and storage classes.
#[derive(Clone)]
pub struct Stores {
    pub claims: Store<PersistentVolumeClaim>,
    pub volumes: Store<PersistentVolume>,
    pub classes: Store<StorageClass>,
}

/// One claim of the pod, as far as placement goes.
#[derive(Clone, Debug, PartialEq)]
pub enum ClaimFit {
    /// Bound to a volume that requires one of these node selector terms (none: any node).
    Bound(Vec<NodeSelectorTerm>),
    /// Unbound, its volume made where the pod goes — or, once a node was selected for it (its
    /// volume may be being made there), only on that node.
    Delayed { name: String, selected: Option<String> },
    /// The pod cannot be placed until this changes.
    Blocked(String),
}

/// The pod's claim names, in volume order.
pub fn claim_names(pod: &PodInfo) -> Vec<String> {
    let volumes = pod.pod.spec.as_ref().and_then(|s| s.volumes.as_ref());
    volumes.into_iter().flatten().filter_map(|v| Some(v.persistent_volume_claim.as_ref()?.claim_name.clone())).collect()
}

/// How a claim constrains placement, given the objects it refers to.
pub fn fit(
    name: &str,
    claim: Option<&PersistentVolumeClaim>,
    volume: impl Fn(&str) -> Option<PersistentVolume>,
    class: impl Fn(&str) -> Option<StorageClass>,
) -> ClaimFit {
    let Some(claim) = claim else { return ClaimFit::Blocked(format!("persistentvolumeclaim \"{name}\" not found")) };
    if claim.metadata.deletion_timestamp.is_some() {
        return ClaimFit::Blocked(format!("persistentvolumeclaim \"{name}\" is being deleted"));
    }
    let spec = claim.spec.as_ref();
    if let Some(vol) = spec.and_then(|s| s.volume_name.as_deref()).filter(|v| !v.is_empty()) {
        let Some(pv) = volume(vol) else {
            return ClaimFit::Blocked(format!("persistentvolume \"{vol}\" not found"));
        };
        let terms = pv.spec.and_then(|s| s.node_affinity?.required).map(|r| r.node_selector_terms).unwrap_or_default();
        return ClaimFit::Bound(terms);
    }
    let class_name = spec.and_then(|s| s.storage_class_name.as_deref()).unwrap_or_default();
    let delayed = !class_name.is_empty()
        && class(class_name).and_then(|c| c.volume_binding_mode).as_deref() == Some("WaitForFirstConsumer");
    if delayed {
        let selected = claim.metadata.annotations.as_ref().and_then(|a| a.get(SELECTED_NODE)).filter(|n| !n.is_empty());
        ClaimFit::Delayed { name: name.to_string(), selected: selected.cloned() }
    } else {
        ClaimFit::Blocked(UNBOUND_IMMEDIATE.into())
    }
}

pub struct VolumeBinding(pub Stores);

impl VolumeBinding {
    fn fits(&self, pod: &PodInfo) -> Vec<ClaimFit> {
        let s = &self.0;
        claim_names(pod)
            .into_iter()
            .map(|name| {
                let claim = s.claims.get(&ObjectRef::new(&name).within(&pod.namespace));
                let volume = |v: &str| s.volumes.get(&ObjectRef::new(v)).map(|p| (*p).clone());
                let class = |c: &str| s.classes.get(&ObjectRef::new(c)).map(|c| (*c).clone());
                fit(&name, claim.as_deref(), volume, class)
            })
            .collect()
    }

    /// The unbound WaitForFirstConsumer claims of `pod` that do not name `node` yet.
    pub fn to_select(&self, pod: &PodInfo, node: &str) -> Vec<String> {
        self.fits(pod)
            .into_iter()
            .filter_map(|f| match f {
                ClaimFit::Delayed { name, selected } if selected.as_deref() != Some(node) => Some(name),
                _ => None,
            })
            .collect()
    }
}

/// Whether the node satisfies every bound claim; the first blocking reason otherwise.
pub fn filter_fits(fits: &[ClaimFit], node: &NodeInfo) -> Status {
    for f in fits {
        match f {
            ClaimFit::Blocked(reason) => return Status::Unschedulable(vec![Cow::Owned(reason.clone())]),
            ClaimFit::Bound(terms) if !terms.is_empty() => {
                if !terms.iter().any(|t| term_matches(t, &node.name, &node.labels)) {
                    return Status::unschedulable(CONFLICT);
                }
            }
            ClaimFit::Delayed { selected: Some(selected), .. } if *selected != node.name => {
                return Status::unschedulable(BIND_CONFLICT);
            }
            ClaimFit::Bound(_) | ClaimFit::Delayed { .. } => {}
        }
    }
    Status::Success
}

impl FilterPlugin for VolumeBinding {
    fn name(&self) -> &'static str {
        NAME
    }

    fn pre_filter(&self, pod: &PodInfo, _: &Snapshot<'_>, state: &mut CycleState) {
        state.insert(NAME, self.fits(pod));
    }

    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        match state.get::<Vec<ClaimFit>>(NAME) {
            Some(fits) => filter_fits(fits, node),
            None => filter_fits(&self.fits(pod), node),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::test_util::{node, pod};
    use serde_json::json;

    fn claim(v: serde_json::Value) -> PersistentVolumeClaim {
        serde_json::from_value(v).expect("claim")
    }

    fn pv(host: &str) -> PersistentVolume {
        serde_json::from_value(json!({
            "metadata": {"name": "pv"},
            "spec": {"nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": [host]}]}]}}}
        }))
        .expect("pv")
    }

    fn wffc(name: &str) -> Option<StorageClass> {
        (name == "local-path").then(|| {
            serde_json::from_value(json!({"metadata": {"name": name}, "provisioner": "p",
                "volumeBindingMode": "WaitForFirstConsumer"}))
            .expect("class")
        })
    }

    #[test]
    fn bound_claims_hold_the_pod_to_their_volume_node() {
        let bound = claim(json!({"metadata": {"name": "data"}, "spec": {"volumeName": "pv"}}));
        let f = fit("data", Some(&bound), |_| Some(pv("node-2")), wffc);
        let n1 = node("node-1", json!({"kubernetes.io/hostname": "node-1"}), json!({}));
        let n2 = node("node-2", json!({"kubernetes.io/hostname": "node-2"}), json!({}));
        assert_eq!(filter_fits(std::slice::from_ref(&f), &n1), Status::unschedulable(CONFLICT));
        assert_eq!(filter_fits(&[f], &n2), Status::Success);
    }

    #[test]
    fn unbound_claims_wait_for_the_first_consumer_or_block() {
        let n = node("node-1", json!({}), json!({}));
        let delayed = claim(json!({"metadata": {"name": "d"}, "spec": {"storageClassName": "local-path"}}));
        let f = fit("d", Some(&delayed), |_| None, wffc);
        assert_eq!(f, ClaimFit::Delayed { name: "d".into(), selected: None });
        assert_eq!(filter_fits(&[f], &n), Status::Success);
        let immediate = claim(json!({"metadata": {"name": "i"}, "spec": {"storageClassName": "fast"}}));
        assert_eq!(
            filter_fits(&[fit("i", Some(&immediate), |_| None, wffc)], &n),
            Status::unschedulable(UNBOUND_IMMEDIATE)
        );
        let missing = fit("gone", None, |_| None, wffc);
        assert_eq!(filter_fits(&[missing], &n), Status::unschedulable("persistentvolumeclaim \"gone\" not found"));
    }

    #[test]
    fn a_claim_with_a_selected_node_holds_the_pod_to_it() {
        let selected = claim(json!({"metadata": {"name": "d", "annotations": {SELECTED_NODE: "node-2"}},
            "spec": {"storageClassName": "local-path"}}));
        let f = fit("d", Some(&selected), |_| None, wffc);
        assert_eq!(f, ClaimFit::Delayed { name: "d".into(), selected: Some("node-2".into()) });
        let (n1, n2) = (node("node-1", json!({}), json!({})), node("node-2", json!({}), json!({})));
        assert_eq!(filter_fits(std::slice::from_ref(&f), &n1), Status::unschedulable(BIND_CONFLICT));
        assert_eq!(filter_fits(&[f], &n2), Status::Success);
    }

    #[test]
    fn claim_names_come_from_the_pod_volumes() {
        let p = pod(json!({"volumes": [{"name": "a", "emptyDir": {}},
            {"name": "b", "persistentVolumeClaim": {"claimName": "data-web-0"}}]}));
        assert_eq!(claim_names(&p), vec!["data-web-0"]);
    }
}
