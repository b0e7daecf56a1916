//! Resource arithmetic: a pod's effective requests (as Kubernetes computes them) and node allocatable.

use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use std::collections::BTreeMap;

/// CPU a container without a CPU request counts as when scoring (Kubernetes' `DefaultMilliCPURequest`).
pub const DEFAULT_MILLI_CPU_REQUEST: i64 = 100;
/// Memory a container without a memory request counts as when scoring (`DefaultMemoryRequest`, 200Mi).
pub const DEFAULT_MEMORY_REQUEST: i64 = 200 * 1024 * 1024;

/// An amount of each resource: CPU in millicores, memory and ephemeral storage in bytes, pods as a
/// count, and any other (extended, hugepages) resource in its whole units.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Resources {
    pub milli_cpu: i64,
    pub memory: i64,
    pub ephemeral_storage: i64,
    pub pods: i64,
    pub scalar: BTreeMap<String, i64>,
}

impl Resources {
    /// Reads a Kubernetes resource list; quantities that do not parse count as zero (the apiserver
    /// validated them already).
    pub fn from_list(list: Option<&BTreeMap<String, Quantity>>) -> Self {
        let mut r = Self::default();
        for (name, q) in list.into_iter().flatten() {
            let Some(nanos) = kaji_api::validation::parse_quantity(&q.0) else { continue };
            match name.as_str() {
                "cpu" => r.milli_cpu = ceil_div(nanos, 1_000_000),
                "memory" => r.memory = ceil_div(nanos, 1_000_000_000),
                "ephemeral-storage" => r.ephemeral_storage = ceil_div(nanos, 1_000_000_000),
                "pods" => r.pods = ceil_div(nanos, 1_000_000_000),
                other => {
                    r.scalar.insert(other.to_string(), ceil_div(nanos, 1_000_000_000));
                }
            }
        }
        r
    }

    pub fn add(&mut self, o: &Self) {
        self.milli_cpu = self.milli_cpu.saturating_add(o.milli_cpu);
        self.memory = self.memory.saturating_add(o.memory);
        self.ephemeral_storage = self.ephemeral_storage.saturating_add(o.ephemeral_storage);
        self.pods = self.pods.saturating_add(o.pods);
        for (k, v) in &o.scalar {
            let e = self.scalar.entry(k.clone()).or_default();
            *e = e.saturating_add(*v);
        }
    }

    pub fn sub(&mut self, o: &Self) {
        self.milli_cpu = self.milli_cpu.saturating_sub(o.milli_cpu);
        self.memory = self.memory.saturating_sub(o.memory);
        self.ephemeral_storage = self.ephemeral_storage.saturating_sub(o.ephemeral_storage);
        self.pods = self.pods.saturating_sub(o.pods);
        for (k, v) in &o.scalar {
            let e = self.scalar.entry(k.clone()).or_default();
            *e = e.saturating_sub(*v);
        }
    }

    /// Each resource the larger of the two.
    pub fn max_with(&mut self, o: &Self) {
        self.milli_cpu = self.milli_cpu.max(o.milli_cpu);
        self.memory = self.memory.max(o.memory);
        self.ephemeral_storage = self.ephemeral_storage.max(o.ephemeral_storage);
        self.pods = self.pods.max(o.pods);
        for (k, v) in &o.scalar {
            let e = self.scalar.entry(k.clone()).or_default();
            *e = (*e).max(*v);
        }
    }
}

fn ceil_div(nanos: i128, unit: i128) -> i64 {
    let v = if nanos >= 0 { (nanos + unit - 1) / unit } else { nanos / unit };
    i64::try_from(v).unwrap_or(if v > 0 { i64::MAX } else { i64::MIN })
}

/// A container's requests; a resource with a limit but no request is requested at its limit,
/// as the apiserver defaults it.
fn container_requests(c: &Container, non_zero: bool) -> Resources {
    let res = c.resources.as_ref();
    let mut list = res.and_then(|r| r.limits.clone()).unwrap_or_default();
    if let Some(req) = res.and_then(|r| r.requests.as_ref()) {
        list.extend(req.iter().map(|(k, v)| (k.clone(), v.clone())));
    }
    let mut r = Resources::from_list(Some(&list));
    if non_zero {
        if !list.contains_key("cpu") {
            r.milli_cpu = DEFAULT_MILLI_CPU_REQUEST;
        }
        if !list.contains_key("memory") {
            r.memory = DEFAULT_MEMORY_REQUEST;
        }
    }
    r
}

/// What a pod needs from a node, as Kubernetes' `resourcehelper.PodRequests` computes it: the
/// larger of (all app containers plus restartable init containers, "sidecars") and the peak of
/// any init container (plus the sidecars started before it); then pod overhead. `pods` is 1.
/// With `non_zero`, containers without a cpu/memory request count the scoring defaults.
pub fn pod_requests(pod: &Pod, non_zero: bool) -> Resources {
    let mut total = Resources::default();
    let Some(spec) = pod.spec.as_ref() else { return total };
    for c in &spec.containers {
        total.add(&container_requests(c, non_zero));
    }
    let mut sidecars = Resources::default();
    let mut init_peak = Resources::default();
    for c in spec.init_containers.iter().flatten() {
        let mut req = container_requests(c, non_zero);
        if c.restart_policy.as_deref() == Some("Always") {
            total.add(&req);
            sidecars.add(&req);
            req = sidecars.clone();
        } else {
            req.add(&sidecars);
        }
        init_peak.max_with(&req);
    }
    total.max_with(&init_peak);
    if let Some(overhead) = spec.overhead.as_ref() {
        total.add(&Resources::from_list(Some(overhead)));
    }
    total.pods = 1;
    total
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(spec: serde_json::Value) -> Pod {
        serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": spec})).expect("test pod")
    }

    fn c(name: &str, cpu: &str, mem: &str) -> serde_json::Value {
        json!({"name": name, "image": "x", "resources": {"requests": {"cpu": cpu, "memory": mem}}})
    }

    #[test]
    fn pod_requests_follow_kubernetes_rules() {
        let sidecar = |cpu: &str| json!({"name": "s", "image": "x", "restartPolicy": "Always", "resources": {"requests": {"cpu": cpu}}});
        let cases = [
            ("sum of app containers", json!({"containers": [c("a", "100m", "1Mi"), c("b", "250m", "2Mi")]}), 350, 3),
            (
                "init container peak wins when larger",
                json!({"containers": [c("a", "100m", "1Mi")], "initContainers": [c("i", "2", "1Mi")]}),
                2000,
                1,
            ),
            (
                "init container smaller than the sum is ignored",
                json!({"containers": [c("a", "1", "4Mi")], "initContainers": [c("i", "500m", "8Mi")]}),
                1000,
                8,
            ),
            (
                "sidecars add to app containers and to later init containers",
                json!({"containers": [c("a", "100m", "0")],
                       "initContainers": [sidecar("200m"), c("i", "1", "0")]}),
                1200,
                0,
            ),
            (
                "limits stand in for missing requests",
                json!({"containers": [{"name": "a", "image": "x", "resources": {"limits": {"cpu": "300m"}}}]}),
                300,
                0,
            ),
            (
                "overhead is added",
                json!({"containers": [c("a", "100m", "1Mi")], "overhead": {"cpu": "50m", "memory": "1Mi"}}),
                150,
                2,
            ),
        ];
        for (name, spec, cpu, mem_mi) in cases {
            let r = pod_requests(&pod(spec), false);
            assert_eq!((r.milli_cpu, r.memory, r.pods), (cpu, mem_mi * 1024 * 1024, 1), "{name}");
        }
    }

    #[test]
    fn non_zero_requests_default_cpu_and_memory_per_container() {
        let p = pod(json!({"containers": [{"name": "a", "image": "x"}, c("b", "1", "1Gi")]}));
        let r = pod_requests(&p, true);
        assert_eq!(r.milli_cpu, 1100);
        assert_eq!(r.memory, DEFAULT_MEMORY_REQUEST + (1 << 30));
        assert_eq!(pod_requests(&p, false).milli_cpu, 1000);
    }

    #[test]
    fn resource_lists_parse_units_and_extended_resources() {
        let list: BTreeMap<String, Quantity> =
            [("cpu", "1.5"), ("memory", "1Gi"), ("pods", "110"), ("example.com/gpu", "2")]
                .into_iter()
                .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
                .collect();
        let r = Resources::from_list(Some(&list));
        assert_eq!((r.milli_cpu, r.memory, r.pods), (1500, 1 << 30, 110));
        assert_eq!(r.scalar.get("example.com/gpu"), Some(&2));
    }
}
