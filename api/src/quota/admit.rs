//! The admission decision (k8s.io/apiserver's resourcequota CheckRequest), pure: given the
//! namespace's quotas and one write, refuse it with Kubernetes' message or say how each quota's
//! `status.used` grows. The caller stores the new usage (with a revision check) before admitting.

use super::list::{self, ResourceList};
use super::scopes::{self, ScopeSelector};
use super::usage;
use serde_json::Value;

/// One quota as admission reads it: it enforces `status.hard`, as Kubernetes does (a quota whose
/// status the controller has not written yet enforces nothing).
#[derive(Debug, Clone)]
pub struct QuotaView {
    pub name: String,
    pub hard: ResourceList,
    pub used: ResourceList,
    pub selectors: Vec<ScopeSelector>,
}

impl QuotaView {
    pub fn from_json(quota: &Value) -> Self {
        Self {
            name: quota.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("").to_string(),
            hard: list::from_json(quota.pointer("/status/hard")),
            used: list::from_json(quota.pointer("/status/used")),
            selectors: scopes::selectors(quota),
        }
    }
}

/// A write as the quota check sees it.
#[derive(Debug, Clone, Copy)]
pub struct Write<'a> {
    pub group: &'a str,
    pub resource: &'a str,
    pub subresource: Option<&'a str>,
    /// The stored object an update replaces; `None` on create.
    pub old: Option<&'a Value>,
    pub object: &'a Value,
    /// Now, in seconds since the epoch.
    pub now: i64,
}

/// Resources whose request or limit every container must state once a quota limits them
/// (Kubernetes keeps this requirement only for cpu and memory, for compatibility).
const MUST_SPECIFY: &[&str] = &["cpu", "limits.cpu", "limits.memory", "memory", "requests.cpu", "requests.memory"];

/// Refuses the write (the message of a 403), or gives the new `status.used` of each quota whose
/// usage it changes (index into `quotas`, new used).
pub fn check(quotas: &[QuotaView], w: &Write<'_>) -> Result<Vec<(usize, ResourceList)>, String> {
    let handles = match (w.old, w.subresource) {
        (None, None) => true,
        (Some(_), sub) => usage::charged_on_update(w.group, w.resource, sub),
        (None, Some(_)) => false,
    };
    if !handles {
        return Ok(Vec::new());
    }
    let mut interesting = Vec::new();
    for (i, q) in quotas.iter().enumerate() {
        let restricted = usage::matching_resources(w.group, w.resource, q.hard.keys());
        if restricted.is_empty() || !scopes::matches_all(&q.selectors, w.group, w.resource, w.object) {
            continue;
        }
        if (w.group, w.resource) == ("", "pods") {
            if let Some(missing) = missing_compute(&restricted, w.object) {
                return Err(format!("failed quota: {}: must specify {missing}", q.name));
            }
        }
        let unknown: Vec<&String> = restricted.iter().filter(|r| !q.used.contains_key(*r)).collect();
        if !unknown.is_empty() {
            let mut names: Vec<&str> = restricted.iter().map(String::as_str).collect();
            names.sort_unstable();
            return Err(format!("status unknown for quota: {}, resources: {}", q.name, names.join(",")));
        }
        interesting.push(i);
    }
    if interesting.is_empty() {
        return Ok(Vec::new());
    }
    let input = usage::usage(w.group, w.resource, w.object, w.now);
    let negative = list::negative_names(&input);
    if !negative.is_empty() {
        return Err(format!("quota usage is negative for resource(s): {}", negative.join(",")));
    }
    let mut out = Vec::new();
    for i in interesting {
        let q = &quotas[i];
        let delta = match w.old {
            // An update is charged what it adds, and only to quotas the old object was under.
            Some(old) if scopes::matches_all(&q.selectors, w.group, w.resource, old) => {
                list::subtract_non_negative(&input, &usage::usage(w.group, w.resource, old, w.now))
            }
            _ => input.clone(),
        };
        let delta = list::remove_zeros(&delta);
        if delta.is_empty() {
            continue;
        }
        let requested = list::mask(&delta, q.hard.keys());
        let new_used = list::add(&q.used, &requested);
        let (ok, exceeded) = list::less_than_or_equal(&list::mask(&new_used, requested.keys()), &q.hard);
        if !ok && w.subresource != Some("status") {
            return Err(format!(
                "exceeded quota: {}, requested: {}, used: {}, limited: {}",
                q.name,
                list::pretty_print(&list::mask(&requested, &exceeded)),
                list::pretty_print(&list::mask(&q.used, &exceeded)),
                list::pretty_print(&list::mask(&q.hard, &exceeded)),
            ));
        }
        if !list::equals(&new_used, &q.used) {
            out.push((i, new_used));
        }
    }
    Ok(out)
}

/// `cpu for: a,b; memory for: a` when containers leave out a limited cpu/memory request or limit.
fn missing_compute(restricted: &[String], pod: &Value) -> Option<String> {
    let required: Vec<&str> =
        restricted.iter().map(String::as_str).filter(|r| MUST_SPECIFY.contains(r)).collect::<Vec<_>>();
    if required.is_empty() {
        return None;
    }
    let mut missing: std::collections::BTreeMap<&str, std::collections::BTreeSet<String>> = Default::default();
    let spec = pod.get("spec").unwrap_or(&Value::Null);
    for c in ["containers", "initContainers"].iter().flat_map(|k| spec.get(*k).and_then(Value::as_array)).flatten() {
        let requests = list::from_json(c.pointer("/resources/requests"));
        let limits = list::from_json(c.pointer("/resources/limits"));
        let has = usage::compute_usage(&requests, &limits);
        for r in &required {
            if !has.contains_key(*r) {
                let name = c.get("name").and_then(Value::as_str).unwrap_or("").to_string();
                missing.entry(r).or_default().insert(name);
            }
        }
    }
    if missing.is_empty() {
        return None;
    }
    let parts: Vec<String> = missing
        .iter()
        .map(|(r, names)| format!("{r} for: {}", names.iter().cloned().collect::<Vec<_>>().join(",")))
        .collect();
    Some(parts.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn quota(name: &str, hard: Value, used: Value) -> QuotaView {
        QuotaView::from_json(&json!({"metadata": {"name": name}, "status": {"hard": hard, "used": used}}))
    }

    fn pod(requests: Value) -> Value {
        json!({"spec": {"containers": [{"name": "pause", "resources": {"requests": requests}}]}})
    }

    fn create<'a>(resource: &'a str, object: &'a Value) -> Write<'a> {
        Write { group: "", resource, subresource: None, old: None, object, now: 0 }
    }

    #[test]
    fn a_pod_beyond_the_quota_is_refused_with_kubernetes_message() {
        let q = quota(
            "test-quota",
            json!({"cpu": "1", "memory": "500Mi", "pods": "5"}),
            json!({"cpu": "500m", "memory": "252Mi", "pods": "1"}),
        );
        let p = pod(json!({"cpu": "600m", "memory": "100Mi"}));
        let err = check(&[q], &create("pods", &p)).expect_err("over quota");
        assert_eq!(err, "exceeded quota: test-quota, requested: cpu=600m, used: cpu=500m, limited: cpu=1");
    }

    #[test]
    fn a_pod_within_the_quota_adds_to_its_usage() {
        let q = quota(
            "q",
            json!({"cpu": "1", "pods": "5", "count/pods": "9"}),
            json!({"cpu": "0", "pods": "1", "count/pods": "1"}),
        );
        let p = pod(json!({"cpu": "250m"}));
        let out = check(&[q], &create("pods", &p)).expect("fits");
        assert_eq!(out.len(), 1);
        assert_eq!(list::pretty_print(&out[0].1), "count/pods=2,cpu=250m,pods=2");
    }

    #[test]
    fn limited_cpu_and_memory_must_be_stated_by_every_container() {
        let q = quota(
            "q",
            json!({"limits.cpu": "2", "requests.memory": "1Gi"}),
            json!({"limits.cpu": "0", "requests.memory": "0"}),
        );
        let p = json!({"spec": {"containers": [{"name": "b"}, {"name": "a", "resources": {"limits": {"cpu": "1"}}}]}});
        let err = check(&[q], &create("pods", &p)).expect_err("missing");
        assert_eq!(err, "failed quota: q: must specify limits.cpu for: b; requests.memory for: a,b");
    }

    #[test]
    fn a_quota_without_calculated_usage_refuses_until_the_controller_writes_it() {
        let q = quota("q", json!({"secrets": "3", "configmaps": "1"}), json!({}));
        let s = json!({});
        let err = check(&[q], &create("secrets", &s)).expect_err("unknown");
        assert_eq!(err, "status unknown for quota: q, resources: secrets");
    }

    #[test]
    fn scoped_quotas_and_unrelated_kinds_are_left_alone() {
        let q = QuotaView::from_json(&json!({"metadata": {"name": "t"}, "spec": {"scopes": ["Terminating"]},
            "status": {"hard": {"pods": "0"}, "used": {"pods": "0"}}}));
        let p = pod(json!({}));
        assert_eq!(check(std::slice::from_ref(&q), &create("pods", &p)), Ok(vec![]));
        assert_eq!(check(&[q], &create("configmaps", &json!({}))), Ok(vec![]));
    }

    #[test]
    fn updates_are_charged_only_what_they_add() {
        let q = quota(
            "q",
            json!({"services.nodeports": "1", "services": "10"}),
            json!({"services.nodeports": "0", "services": "1"}),
        );
        let old = json!({"spec": {"type": "ClusterIP", "ports": [{"port": 80}]}});
        let new = json!({"spec": {"type": "NodePort", "ports": [{"port": 80}, {"port": 81}]}});
        let w = Write { group: "", resource: "services", subresource: None, old: Some(&old), object: &new, now: 0 };
        let err = check(std::slice::from_ref(&q), &w).expect_err("two node ports");
        assert_eq!(
            err,
            "exceeded quota: q, requested: services.nodeports=2, used: services.nodeports=0, limited: services.nodeports=1"
        );
        // A pod update is not a quota event at all (pod resources are fixed once created).
        let w = Write { group: "", resource: "pods", subresource: None, old: Some(&old), object: &new, now: 0 };
        assert_eq!(check(&[q], &w), Ok(vec![]));
    }

    #[test]
    fn the_count_of_any_resource_is_enforced_on_create() {
        let q = quota("q", json!({"count/replicasets.apps": "1"}), json!({"count/replicasets.apps": "1"}));
        let rs = json!({});
        let w = Write { group: "apps", resource: "replicasets", subresource: None, old: None, object: &rs, now: 0 };
        assert_eq!(
            check(&[q], &w),
            Err("exceeded quota: q, requested: count/replicasets.apps=1, used: count/replicasets.apps=1, \
                 limited: count/replicasets.apps=1"
                .to_string())
        );
    }
}
