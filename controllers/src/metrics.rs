//! Prometheus metrics per controller: reconciles by result and their duration.

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

pub struct Metrics {
    registry: Registry,
    reconciles: Family<ResultLabels, Counter>,
    duration: Family<ControllerLabels, Histogram>,
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
        Self { registry, reconciles, duration }
    }
}

impl Metrics {
    pub fn observe(&self, controller: &str, ok: bool, took: Duration) {
        let result = if ok { "success" } else { "error" };
        self.reconciles.get_or_create(&ResultLabels { controller: controller.into(), result: result.into() }).inc();
        self.duration.get_or_create(&ControllerLabels { controller: controller.into() }).observe(took.as_secs_f64());
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
}
