//! Helpers every controller shares: label selectors, controller references, adoption and release,
//! and pod readiness/availability as Kubernetes' controller utilities define them.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::Resource;
use serde::de::DeserializeOwned;
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::fmt::Debug;

/// A parsed metav1.LabelSelector.
#[derive(Clone, Debug)]
pub struct Selector(kaji_api::selector::LabelSelector);

impl Selector {
    /// `None` for an unparsable selector. An absent or empty selector matches everything.
    pub fn new(sel: Option<&LabelSelector>) -> Option<Self> {
        let value = serde_json::to_value(sel).ok()?;
        kaji_api::selector::LabelSelector::from_json(&value).ok().map(Self)
    }

    /// Like `new`, but an empty selector matches nothing, as workload controllers treat it.
    pub fn for_workload(sel: &LabelSelector) -> Option<Self> {
        let s = Self::new(Some(sel))?;
        (!s.0.is_empty()).then_some(s)
    }

    /// A plain label map (a ReplicationController's or Service's selector): every pair must be
    /// among the labels. Like a workload's, an empty one matches nothing.
    pub fn for_set(set: &BTreeMap<String, String>) -> Option<Self> {
        if set.is_empty() {
            return None;
        }
        let value = json!({"matchLabels": set});
        kaji_api::selector::LabelSelector::from_json(&value).ok().map(Self)
    }

    pub fn matches(&self, labels: Option<&BTreeMap<String, String>>) -> bool {
        let map: Map<String, Value> =
            labels.into_iter().flatten().map(|(k, v)| (k.clone(), Value::String(v.clone()))).collect();
        self.0.matches(Some(&map))
    }
}

/// The owner reference with `controller: true`, if any.
pub fn controller_of(meta: &ObjectMeta) -> Option<&OwnerReference> {
    meta.owner_references.iter().flatten().find(|r| r.controller == Some(true))
}

/// A controller reference to `owner` (controller and blockOwnerDeletion set).
pub fn controller_ref<K: Resource<DynamicType = ()>>(owner: &K) -> OwnerReference {
    let meta = owner.meta();
    OwnerReference {
        api_version: K::api_version(&()).to_string(),
        kind: K::kind(&()).to_string(),
        name: meta.name.clone().unwrap_or_default(),
        uid: meta.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// The owners of kind `K` a child's change concerns: its controller if that is a `K`, else (an
/// orphan) every `K` in its namespace whose `selector` (`None`: selects nothing) matches it.
pub fn owners_of<K>(
    owners: &Store<K>,
    child: &ObjectMeta,
    selector: impl Fn(&K) -> Option<Selector>,
) -> Vec<ObjectRef<K>>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    let ns = child.namespace.as_deref().unwrap_or_default();
    if let Some(owner) = controller_of(child) {
        if owner.kind == K::kind(&()) {
            return vec![ObjectRef::new(&owner.name).within(ns)];
        }
        return Vec::new();
    }
    owners
        .state()
        .iter()
        .filter(|o| o.meta().namespace.as_deref() == Some(ns))
        .filter(|o| selector(o).is_some_and(|s| s.matches(child.labels.as_ref())))
        .map(|o| ObjectRef::from_obj(&**o))
        .collect()
}

/// What a controller does with one candidate child.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// Ours and matching: keep.
    Owned,
    /// Orphan that matches: take it.
    Adopt,
    /// Ours but no longer matching: let it go.
    Release,
    /// Not ours.
    Ignore,
}

/// Kubernetes' ControllerRefManager decision for a child of `owner_uid` with these labels.
pub fn claim(owner_uid: &str, owner_deleting: bool, child: &ObjectMeta, selector: &Selector) -> Claim {
    let matches = selector.matches(child.labels.as_ref());
    match controller_of(child) {
        Some(r) if r.uid == owner_uid => match (matches, owner_deleting) {
            (true, _) => Claim::Owned,
            (false, false) => Claim::Release,
            (false, true) => Claim::Ignore,
        },
        Some(_) => Claim::Ignore,
        None if matches && !owner_deleting && child.deletion_timestamp.is_none() => Claim::Adopt,
        None => Claim::Ignore,
    }
}

/// Sets our controller reference on an orphan (strategic merge keyed by uid; the uid in the patch
/// makes it fail if the child was replaced by a namesake).
pub async fn adopt<K>(api: &Api<K>, child: &ObjectMeta, owner: OwnerReference) -> Result<(), kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let patch = json!({"metadata": {"ownerReferences": [owner], "uid": child.uid}});
    let name = child.name.as_deref().unwrap_or_default();
    api.patch(name, &PatchParams::default(), &Patch::Strategic(patch)).await.map(|_| ())
}

/// Removes our owner reference from a child that stopped matching. A child already gone is fine.
pub async fn release<K>(api: &Api<K>, child: &ObjectMeta, owner_uid: &str) -> Result<(), kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let patch = json!({"metadata": {"ownerReferences": [{"$patch": "delete", "uid": owner_uid}], "uid": child.uid}});
    let name = child.name.as_deref().unwrap_or_default();
    match api.patch(name, &PatchParams::default(), &Patch::Strategic(patch)).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 422 => Ok(()),
        Err(e) => Err(e),
    }
}

/// Not terminated and not being deleted (Kubernetes' IsPodActive).
pub fn pod_is_active(pod: &Pod) -> bool {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    pod.metadata.deletion_timestamp.is_none() && !matches!(phase, Some("Succeeded") | Some("Failed"))
}

/// When the pod's Ready condition turned True, if it is True.
pub fn pod_ready_since(pod: &Pod) -> Option<Option<jiff::Timestamp>> {
    let cond = pod.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == "Ready")?;
    (cond.status == "True").then(|| cond.last_transition_time.as_ref().map(|t| t.0))
}

pub fn pod_is_ready(pod: &Pod) -> bool {
    pod_ready_since(pod).is_some()
}

/// Ready for at least `min_ready_seconds` at `now` (Kubernetes' IsPodAvailable).
pub fn pod_is_available(pod: &Pod, min_ready_seconds: i32, now: jiff::Timestamp) -> bool {
    match pod_ready_since(pod) {
        None => false,
        Some(_) if min_ready_seconds <= 0 => true,
        Some(None) => false,
        Some(Some(since)) => since.as_second() + i64::from(min_ready_seconds) <= now.as_second(),
    }
}

/// `namespace/name` of an object, for logs and keys.
pub fn key(meta: &ObjectMeta) -> String {
    format!("{}/{}", meta.namespace.as_deref().unwrap_or_default(), meta.name.as_deref().unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodCondition, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn meta(labels_: &[(&str, &str)], owner: Option<&str>) -> ObjectMeta {
        ObjectMeta {
            labels: Some(labels(labels_)),
            owner_references: owner.map(|uid| {
                vec![OwnerReference { uid: uid.into(), controller: Some(true), ..OwnerReference::default() }]
            }),
            ..ObjectMeta::default()
        }
    }

    #[test]
    fn claims_follow_controller_ref_manager() {
        let sel = LabelSelector { match_labels: Some(labels(&[("app", "web")])), ..LabelSelector::default() };
        let sel = Selector::for_workload(&sel).expect("selector");
        let cases = [
            ("ours and matching", meta(&[("app", "web")], Some("me")), false, Claim::Owned),
            ("orphan matching", meta(&[("app", "web")], None), false, Claim::Adopt),
            ("orphan, owner deleting", meta(&[("app", "web")], None), true, Claim::Ignore),
            ("orphan not matching", meta(&[("app", "db")], None), false, Claim::Ignore),
            ("ours, labels changed", meta(&[("app", "db")], Some("me")), false, Claim::Release),
            ("someone else's", meta(&[("app", "web")], Some("other")), false, Claim::Ignore),
        ];
        for (name, child, deleting, want) in cases {
            assert_eq!(claim("me", deleting, &child, &sel), want, "{name}");
        }
    }

    #[test]
    fn empty_workload_selector_matches_nothing() {
        assert!(Selector::for_workload(&LabelSelector::default()).is_none());
    }

    #[test]
    fn availability_waits_for_min_ready_seconds() {
        let now: jiff::Timestamp = "2025-01-01T00:00:10Z".parse().expect("time");
        let ready_at = |t: &str| Pod {
            status: Some(PodStatus {
                conditions: Some(vec![PodCondition {
                    type_: "Ready".into(),
                    status: "True".into(),
                    last_transition_time: Some(Time(t.parse().expect("time"))),
                    ..PodCondition::default()
                }]),
                ..PodStatus::default()
            }),
            ..Pod::default()
        };
        assert!(pod_is_available(&ready_at("2025-01-01T00:00:09Z"), 0, now));
        assert!(!pod_is_available(&ready_at("2025-01-01T00:00:09Z"), 5, now));
        assert!(pod_is_available(&ready_at("2025-01-01T00:00:04Z"), 5, now));
        assert!(!pod_is_available(&Pod::default(), 0, now));
    }
}
