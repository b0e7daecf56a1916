//! What one object costs a quota (Kubernetes' evaluators in pkg/quota/v1/evaluator/core and the
//! generic object-count evaluator): the resource names each kind is measured in and its usage.

use super::list::{add, ResourceList};
use super::quantity::Quantity;
use serde_json::Value;

/// `count/<resource>` for core, `count/<resource>.<group>` otherwise.
pub fn object_count_name(group: &str, resource: &str) -> String {
    if group.is_empty() {
        format!("count/{resource}")
    } else {
        format!("count/{resource}.{group}")
    }
}

/// The pre-`count/` names some core kinds are also counted under.
fn legacy_count_name(group: &str, resource: &str) -> Option<&'static str> {
    if !group.is_empty() {
        return None;
    }
    match resource {
        "pods" => Some("pods"),
        "services" => Some("services"),
        "configmaps" => Some("configmaps"),
        "secrets" => Some("secrets"),
        "resourcequotas" => Some("resourcequotas"),
        "replicationcontrollers" => Some("replicationcontrollers"),
        "persistentvolumeclaims" => Some("persistentvolumeclaims"),
        _ => None,
    }
}

const POD_RESOURCES: &[&str] = &[
    "count/pods",
    "cpu",
    "memory",
    "ephemeral-storage",
    "requests.cpu",
    "requests.memory",
    "requests.ephemeral-storage",
    "limits.cpu",
    "limits.memory",
    "limits.ephemeral-storage",
    "pods",
];
const STORAGE_CLASS_SUFFIX: &str = ".storageclass.storage.k8s.io/";

/// A resource named by a domain that is not Kubernetes' own (IsNativeResource's negation).
fn is_extended(name: &str) -> bool {
    name.contains('/') && !name.contains("kubernetes.io/")
}

/// Of `names`, those an object of `group`/`resource` is measured in (Evaluator.MatchingResources).
pub fn matching_resources<'a>(group: &str, resource: &str, names: impl IntoIterator<Item = &'a String>) -> Vec<String> {
    let count = object_count_name(group, resource);
    let legacy = legacy_count_name(group, resource);
    names
        .into_iter()
        .filter(|n| {
            let n = n.as_str();
            if n == count || Some(n) == legacy {
                return true;
            }
            match (group, resource) {
                ("", "pods") => {
                    POD_RESOURCES.contains(&n)
                        || n.starts_with("hugepages-")
                        || n.starts_with("requests.hugepages-")
                        || (n.starts_with("requests.") && is_extended(n))
                }
                ("", "services") => n == "services.nodeports" || n == "services.loadbalancers",
                ("", "persistentvolumeclaims") => {
                    n == "requests.storage"
                        || n.split_once(STORAGE_CLASS_SUFFIX).is_some_and(|(class, r)| {
                            !class.is_empty() && (r == "persistentvolumeclaims" || r == "requests.storage")
                        })
                }
                _ => false,
            }
        })
        .cloned()
        .collect()
}

/// Whether creates (and, for services, claims and pod resizes, updates) of this resource are
/// charged at admission (Evaluator.Handles).
pub fn charged_on_update(group: &str, resource: &str, subresource: Option<&str>) -> bool {
    matches!(
        (group, resource, subresource),
        ("", "services" | "persistentvolumeclaims", None) | ("", "pods", Some("resize"))
    )
}

/// What `obj` costs: its object count under every name it has, plus the kind's own resources.
/// `now` (RFC 3339 seconds since the epoch) decides whether a deleted pod's grace has run out.
pub fn usage(group: &str, resource: &str, obj: &Value, now: i64) -> ResourceList {
    let one = Quantity::from_units(1);
    let mut out = ResourceList::new();
    out.insert(object_count_name(group, resource), one);
    if let Some(legacy) = legacy_count_name(group, resource) {
        if resource != "pods" {
            out.insert(legacy.to_string(), one);
        }
    }
    match (group, resource) {
        ("", "pods") => out = add(&out, &pod_usage(obj, now)),
        ("", "services") => service_usage(obj, &mut out),
        ("", "persistentvolumeclaims") => claim_usage(obj, &mut out),
        _ => {}
    }
    out
}

/// A pod's compute usage, or nothing once it is terminal or past its deletion grace (QuotaV1Pod).
fn pod_usage(pod: &Value, now: i64) -> ResourceList {
    if !pod_counted(pod, now) {
        return ResourceList::new();
    }
    let (requests, limits) = pod_requests_and_limits(pod);
    compute_usage(&requests, &limits)
}

/// QuotaV1Pod: a pod is charged until it is terminal or stuck past its deletion grace.
pub fn pod_counted(pod: &Value, now: i64) -> bool {
    let phase = pod.pointer("/status/phase").and_then(Value::as_str).unwrap_or("");
    if phase == "Succeeded" || phase == "Failed" {
        return false;
    }
    let deleted = pod.pointer("/metadata/deletionTimestamp").and_then(Value::as_str).and_then(seconds_of);
    let grace = pod.pointer("/metadata/deletionGracePeriodSeconds").and_then(Value::as_i64);
    !matches!((deleted, grace), (Some(at), Some(grace)) if now > at.saturating_add(grace))
}

/// podComputeUsageHelper: `pods` 1, requests under both their plain and `requests.` names,
/// limits under `limits.`, extended resources and hugepages as `requests.<name>`.
pub fn compute_usage(requests: &ResourceList, limits: &ResourceList) -> ResourceList {
    let mut out = ResourceList::new();
    out.insert("pods".into(), Quantity::from_units(1));
    for r in ["cpu", "memory", "ephemeral-storage"] {
        if let Some(q) = requests.get(r) {
            out.insert(r.into(), *q);
            out.insert(format!("requests.{r}"), *q);
        }
        if let Some(q) = limits.get(r) {
            out.insert(format!("limits.{r}"), *q);
        }
    }
    for (name, q) in requests {
        if name.starts_with("hugepages-") {
            out.insert(name.clone(), *q);
            out.insert(format!("requests.{name}"), *q);
        } else if is_extended(name) && !name.starts_with("requests.") {
            out.insert(format!("requests.{name}"), *q);
        }
    }
    out
}

/// The pod's effective requests and limits (resourcehelper.PodRequests/PodLimits): pod-level
/// resources when set, else the containers' sum against the largest init container (sidecars,
/// init containers that restart Always, add to everything after them), plus the overhead.
pub fn pod_requests_and_limits(pod: &Value) -> (ResourceList, ResourceList) {
    let spec = pod.get("spec").unwrap_or(&Value::Null);
    let of = |c: &Value, which: &str| super::list::from_json(c.pointer(&format!("/resources/{which}")));
    let mut both = [ResourceList::new(), ResourceList::new()];
    for (i, which) in ["requests", "limits"].into_iter().enumerate() {
        let mut sum = ResourceList::new();
        for c in spec.get("containers").and_then(Value::as_array).into_iter().flatten() {
            sum = add(&sum, &of(c, which));
        }
        let mut sidecars = ResourceList::new();
        let mut init_max = ResourceList::new();
        for c in spec.get("initContainers").and_then(Value::as_array).into_iter().flatten() {
            let r = of(c, which);
            if c.get("restartPolicy").and_then(Value::as_str) == Some("Always") {
                sidecars = add(&sidecars, &r);
                init_max = max(&init_max, &sidecars);
            } else {
                init_max = max(&init_max, &add(&sidecars, &r));
            }
        }
        let mut total = max(&add(&sum, &sidecars), &init_max);
        if let Some(pod_level) = spec.pointer(&format!("/resources/{which}")) {
            for (k, q) in super::list::from_json(Some(pod_level)) {
                total.insert(k, q);
            }
        }
        total = add(&total, &super::list::from_json(spec.get("overhead")));
        both[i] = total;
    }
    let [requests, limits] = both;
    (requests, limits)
}

fn max(a: &ResourceList, b: &ResourceList) -> ResourceList {
    let mut out = a.clone();
    for (k, q) in b {
        out.entry(k.clone()).and_modify(|v| *v = (*v).max(*q)).or_insert(*q);
    }
    out
}

/// services 1 (counted above), `services.loadbalancers` 1 for a LoadBalancer and
/// `services.nodeports` one per port for a NodePort or a LoadBalancer that allocates them.
fn service_usage(svc: &Value, out: &mut ResourceList) {
    let spec = svc.get("spec").unwrap_or(&Value::Null);
    let ports = spec.get("ports").and_then(Value::as_array).map_or(0, Vec::len);
    let ports = Quantity::from_units(i64::try_from(ports).unwrap_or(i64::MAX));
    match spec.get("type").and_then(Value::as_str).unwrap_or("ClusterIP") {
        "NodePort" => {
            out.insert("services.nodeports".into(), ports);
        }
        "LoadBalancer" => {
            if spec.get("allocateLoadBalancerNodePorts").and_then(Value::as_bool) != Some(false) {
                out.insert("services.nodeports".into(), ports);
            }
            out.insert("services.loadbalancers".into(), Quantity::from_units(1));
        }
        _ => {}
    }
}

/// persistentvolumeclaims 1 (counted above), `requests.storage` (the larger of the request and
/// what the status says was allocated), and both again under the claim's storage class.
fn claim_usage(pvc: &Value, out: &mut ResourceList) {
    let class = pvc
        .pointer("/spec/storageClassName")
        .and_then(Value::as_str)
        .or_else(|| {
            pvc.pointer("/metadata/annotations/volume.beta.kubernetes.io~1storage-class").and_then(Value::as_str)
        })
        .unwrap_or("");
    let request = pvc.pointer("/spec/resources/requests/storage").and_then(quantity);
    let allocated = pvc.pointer("/status/allocatedResources/storage").and_then(quantity);
    let storage = match (request, allocated) {
        (Some(r), Some(a)) => Some(r.max(a)),
        (r, a) => r.or(a),
    };
    if !class.is_empty() {
        out.insert(format!("{class}{STORAGE_CLASS_SUFFIX}persistentvolumeclaims"), Quantity::from_units(1));
    }
    if let Some(s) = storage {
        out.insert("requests.storage".into(), s);
        if !class.is_empty() {
            out.insert(format!("{class}{STORAGE_CLASS_SUFFIX}requests.storage"), s);
        }
    }
}

fn quantity(v: &Value) -> Option<Quantity> {
    match v {
        Value::String(s) => Quantity::parse(s),
        Value::Number(n) => Quantity::parse(&n.to_string()),
        _ => None,
    }
}

/// Seconds since the epoch of an RFC 3339 timestamp.
pub fn seconds_of(ts: &str) -> Option<i64> {
    ts.parse::<jiff::Timestamp>().ok().map(|t| t.as_second())
}

#[cfg(test)]
mod tests {
    use super::super::list::pretty_print;
    use super::*;
    use serde_json::json;

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_pod_costs_its_requests_limits_and_extended_resources() {
        let pod = json!({"spec": {"containers": [
            {"name": "a", "resources": {"requests": {"cpu": "500m", "memory": "252Mi", "ephemeral-storage": "30Gi",
                "example.com/dongle": "2"}, "limits": {"example.com/dongle": "2"}}},
            {"name": "b", "resources": {"requests": {"cpu": "100m"}, "limits": {"cpu": "1"}}}]}});
        assert_eq!(
            pretty_print(&usage("", "pods", &pod, 0)),
            "count/pods=1,cpu=600m,ephemeral-storage=30Gi,limits.cpu=1,memory=252Mi,pods=1,requests.cpu=600m,\
             requests.ephemeral-storage=30Gi,requests.example.com/dongle=2,requests.memory=252Mi"
        );
    }

    #[test]
    fn terminal_and_expired_pods_cost_only_their_object_count() {
        let done = json!({"spec": {"containers": [{"resources": {"requests": {"cpu": "1"}}}]},
            "status": {"phase": "Succeeded"}});
        assert_eq!(pretty_print(&usage("", "pods", &done, 0)), "count/pods=1");
        let deleted = json!({"metadata": {"deletionTimestamp": "2020-01-01T00:00:00Z", "deletionGracePeriodSeconds": 30},
            "spec": {"containers": [{}]}});
        let at = seconds_of("2020-01-01T00:00:00Z").expect("a time");
        assert_eq!(pretty_print(&usage("", "pods", &deleted, at + 10)), "count/pods=1,pods=1");
        assert_eq!(pretty_print(&usage("", "pods", &deleted, at + 31)), "count/pods=1");
    }

    #[test]
    fn the_largest_init_container_bounds_the_requests() {
        let pod = json!({"spec": {
            "initContainers": [{"resources": {"requests": {"cpu": "2"}}},
                               {"restartPolicy": "Always", "resources": {"requests": {"cpu": "100m"}}}],
            "containers": [{"resources": {"requests": {"cpu": "500m"}}}],
            "overhead": {"cpu": "10m"}}});
        let (requests, _) = pod_requests_and_limits(&pod);
        assert_eq!(pretty_print(&requests), "cpu=2010m");
    }

    #[test]
    fn services_count_node_ports_and_load_balancers() {
        let np = json!({"spec": {"type": "NodePort", "ports": [{"port": 80}, {"port": 81}]}});
        assert_eq!(pretty_print(&usage("", "services", &np, 0)), "count/services=1,services=1,services.nodeports=2");
        let lb =
            json!({"spec": {"type": "LoadBalancer", "allocateLoadBalancerNodePorts": false, "ports": [{"port": 80}]}});
        assert_eq!(
            pretty_print(&usage("", "services", &lb, 0)),
            "count/services=1,services=1,services.loadbalancers=1"
        );
    }

    #[test]
    fn claims_count_storage_also_by_class() {
        let pvc = json!({"spec": {"storageClassName": "gold", "resources": {"requests": {"storage": "1Gi"}}}});
        assert_eq!(
            pretty_print(&usage("", "persistentvolumeclaims", &pvc, 0)),
            "count/persistentvolumeclaims=1,gold.storageclass.storage.k8s.io/persistentvolumeclaims=1,\
             gold.storageclass.storage.k8s.io/requests.storage=1Gi,persistentvolumeclaims=1,requests.storage=1Gi"
        );
    }

    #[test]
    fn kinds_match_only_their_own_resource_names() {
        let hard =
            names(&["pods", "cpu", "count/replicasets.apps", "secrets", "requests.example.com/dongle", "services"]);
        assert_eq!(matching_resources("", "pods", &hard), names(&["pods", "cpu", "requests.example.com/dongle"]));
        assert_eq!(matching_resources("apps", "replicasets", &hard), names(&["count/replicasets.apps"]));
        assert_eq!(matching_resources("", "secrets", &hard), names(&["secrets"]));
        assert!(matching_resources("", "configmaps", &hard).is_empty());
        assert_eq!(usage("apps", "replicasets", &json!({}), 0).len(), 1);
    }
}
