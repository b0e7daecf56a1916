//! Prometheus metrics per controller: reconciles by result and their duration, and the pods the
//! pod garbage collector force-deleted.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use std::time::Duration;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    pub controller: String,
    /// success or error.
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabels {
    pub controller: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PodGcLabels {
    pub namespace: String,
    /// terminated, orphaned or unscheduled.
    pub reason: String,
}

pub struct Metrics {
    registry: Registry,
    reconciles: Family<ResultLabels, Counter>,
    duration: Family<ControllerLabels, Histogram>,
    pod_gc_deleted: Family<PodGcLabels, Counter>,
    pod_gc_errors: Family<PodGcLabels, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::default();
        let reconciles = Family::<ResultLabels, Counter>::default();
        let duration = Family::<ControllerLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.0005, 2.0, 16))
        });
        registry.register(
            "controller_runtime_reconcile",
            "Total number of reconciliations per controller, by result",
            reconciles.clone(),
        );
        registry.register(
            "controller_runtime_reconcile_time_seconds",
            "Length of time per reconciliation per controller",
            duration.clone(),
        );
        let pod_gc_deleted = Family::<PodGcLabels, Counter>::default();
        let pod_gc_errors = Family::<PodGcLabels, Counter>::default();
        registry.register(
            "pod_gc_collector_force_delete_pods",
            "Number of pods that are being forcefully deleted since the Pod GC Controller started",
            pod_gc_deleted.clone(),
        );
        registry.register(
            "pod_gc_collector_force_delete_pod_errors",
            "Number of errors encountered when forcefully deleting the pods since the Pod GC Controller started",
            pod_gc_errors.clone(),
        );
        Self { registry, reconciles, duration, pod_gc_deleted, pod_gc_errors }
    }
}

impl Metrics {
    pub fn observe(&self, controller: &str, ok: bool, took: Duration) {
        let result = if ok { "success" } else { "error" };
        self.reconciles.get_or_create(&ResultLabels { controller: controller.into(), result: result.into() }).inc();
        self.duration.get_or_create(&ControllerLabels { controller: controller.into() }).observe(took.as_secs_f64());
    }

    /// One pod the pod garbage collector force-deleted (or failed to).
    pub fn pod_gc(&self, namespace: &str, reason: &str, ok: bool) {
        let labels = PodGcLabels { namespace: namespace.into(), reason: reason.into() };
        self.pod_gc_deleted.get_or_create(&labels).inc();
        if !ok {
            self.pod_gc_errors.get_or_create(&labels).inc();
        }
    }

    pub fn render(&self) -> String {
        let mut out = String::new();
        if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &self.registry) {
            tracing::warn!(error = %e, "cannot encode metrics");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_reconciles_by_controller_and_result() {
        let m = Metrics::default();
        m.observe("replicaset", true, Duration::from_millis(2));
        m.observe("replicaset", false, Duration::from_millis(2));
        let text = m.render();
        assert!(
            text.contains(r#"controller_runtime_reconcile_total{controller="replicaset",result="success"} 1"#),
            "{text}"
        );
        assert!(text.contains(r#"controller_runtime_reconcile_time_seconds_count{controller="replicaset"} 2"#));
    }

    #[test]
    fn counts_pod_gc_deletions_and_errors_by_namespace_and_reason() {
        let m = Metrics::default();
        m.pod_gc("default", "orphaned", true);
        m.pod_gc("default", "orphaned", false);
        let text = m.render();
        let series = r#"pod_gc_collector_force_delete_pods_total{namespace="default",reason="orphaned"} 2"#;
        assert!(text.contains(series), "{text}");
        let errors = r#"pod_gc_collector_force_delete_pod_errors_total{namespace="default",reason="orphaned"} 1"#;
        assert!(text.contains(errors), "{text}");
    }
}
