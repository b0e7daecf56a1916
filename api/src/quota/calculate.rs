//! What a quota's status should say (the ResourceQuota controller's syncResourceQuota, pure):
//! `hard` is the spec's, `used` the usage of the namespace's objects under the quota's scopes,
//! for exactly the resources it limits.

use super::list::{self, ResourceList};
use super::quantity::Quantity;
use super::scopes::{self, ScopeSelector};
use super::usage;
use serde_json::Value;

/// The kind (group, resource) a limited resource name measures, if any kind does.
pub fn measured_kind(name: &str) -> Option<(String, String)> {
    if let Some(rest) = name.strip_prefix("count/") {
        return Some(match rest.split_once('.') {
            Some((resource, group)) => (group.to_string(), resource.to_string()),
            None => (String::new(), rest.to_string()),
        });
    }
    let kinds = [
        "pods",
        "services",
        "persistentvolumeclaims",
        "configmaps",
        "secrets",
        "resourcequotas",
        "replicationcontrollers",
    ];
    let names = [name.to_string()];
    kinds.iter().find(|k| !usage::matching_resources("", k, &names).is_empty()).map(|k| (String::new(), k.to_string()))
}

/// The usage of `objects` (one kind's objects in the quota's namespace) for the names of `hard`
/// that kind is measured in; zero for each of them when nothing counts.
pub fn kind_usage(
    group: &str,
    resource: &str,
    hard: &ResourceList,
    selectors: &[ScopeSelector],
    objects: &[Value],
    now: i64,
) -> ResourceList {
    let names = usage::matching_resources(group, resource, hard.keys());
    let mut used: ResourceList = names.iter().map(|n| (n.clone(), Quantity::zero())).collect();
    for o in objects.iter().filter(|o| scopes::matches_all(selectors, group, resource, o)) {
        used = list::add(&used, &list::mask(&usage::usage(group, resource, o, now), &names));
    }
    used
}

/// The new `status.used`: `measured` (usage per kind the caller could list) over the previous
/// usage, limited to the names of `hard` (a name no listed kind measures keeps its old value).
pub fn used(hard: &ResourceList, previous: &ResourceList, measured: &[ResourceList]) -> ResourceList {
    let mut used = previous.clone();
    for m in measured {
        for (k, q) in m {
            used.insert(k.clone(), *q);
        }
    }
    list::mask(&used, hard.keys())
}

/// Whether the status differs from `hard` and `used` (a status write would change something).
pub fn status_differs(quota: &Value, hard: &ResourceList, used: &ResourceList) -> bool {
    let status_hard = list::from_json(quota.pointer("/status/hard"));
    let status_used = list::from_json(quota.pointer("/status/used"));
    // Names whose value does not parse are not in either list; a differing count of entries
    // then says the stored status needs rewriting.
    let entries = |p: &str| quota.pointer(p).and_then(Value::as_object).map_or(0, |m| m.len());
    !list::equals(&status_hard, hard)
        || !list::equals(&status_used, used)
        || entries("/status/hard") != hard.len()
        || entries("/status/used") != used.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn names_map_to_the_kind_they_measure() {
        assert_eq!(measured_kind("count/replicasets.apps"), Some(("apps".into(), "replicasets".into())));
        assert_eq!(measured_kind("count/pods"), Some(("".into(), "pods".into())));
        assert_eq!(measured_kind("requests.cpu"), Some(("".into(), "pods".into())));
        assert_eq!(measured_kind("services.nodeports"), Some(("".into(), "services".into())));
        assert_eq!(
            measured_kind("gold.storageclass.storage.k8s.io/requests.storage"),
            Some(("".into(), "persistentvolumeclaims".into()))
        );
        assert_eq!(measured_kind("resourcequotas"), Some(("".into(), "resourcequotas".into())));
        assert_eq!(measured_kind("storage"), None);
    }

    #[test]
    fn usage_sums_the_objects_under_the_scopes() {
        let hard = list::from_json(Some(&json!({"pods": "5", "requests.cpu": "2", "secrets": "3"})));
        let pods = vec![
            json!({"spec": {"containers": [{"resources": {"requests": {"cpu": "500m"}}}]}}),
            json!({"spec": {"activeDeadlineSeconds": 5, "containers": [{"resources": {"requests": {"cpu": "1"}}}]}}),
            json!({"spec": {"containers": [{}]}, "status": {"phase": "Failed"}}),
        ];
        let all = kind_usage("", "pods", &hard, &[], &pods, 0);
        assert_eq!(list::pretty_print(&all), "pods=2,requests.cpu=1500m");
        let nt = scopes::selectors(&json!({"spec": {"scopes": ["NotTerminating"]}}));
        assert_eq!(list::pretty_print(&kind_usage("", "pods", &hard, &nt, &pods, 0)), "pods=1,requests.cpu=500m");
        let secrets = kind_usage("", "secrets", &hard, &[], &[], 0);
        let previous = list::from_json(Some(&json!({"pods": "9", "gone": "1"})));
        assert_eq!(list::pretty_print(&used(&hard, &previous, &[all, secrets])), "pods=2,requests.cpu=1500m,secrets=0");
    }

    #[test]
    fn an_unchanged_status_is_not_rewritten() {
        let hard = list::from_json(Some(&json!({"pods": "5"})));
        let used = list::from_json(Some(&json!({"pods": "0"})));
        let q = json!({"status": {"hard": {"pods": "5"}, "used": {"pods": "0"}}});
        assert!(!status_differs(&q, &hard, &used));
        assert!(status_differs(&json!({"status": {"hard": {"pods": "5"}}}), &hard, &used));
        assert!(status_differs(&json!({}), &hard, &used));
    }
}
