//! Prometheus metrics, named as kube-scheduler names them.

use crate::queue::Depths;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AttemptLabels {
    /// scheduled, unschedulable or error.
    pub result: String,
    pub profile: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueueLabels {
    /// active, backoff or unschedulable.
    pub queue: String,
}

pub struct Metrics {
    registry: Registry,
    profile: String,
    attempts: Family<AttemptLabels, Counter>,
    /// Scheduling algorithm plus binding, per scheduled pod.
    pub e2e_duration: Histogram,
    pending: Family<QueueLabels, Gauge>,
}

impl Metrics {
    pub fn new(profile: &str) -> Self {
        let mut registry = Registry::default();
        let attempts = Family::<AttemptLabels, Counter>::default();
        // 0.1 ms to ~3.6 s in 25% steps, fine enough to read a p99 from.
        let e2e_duration = Histogram::new(exponential_buckets(0.0001, 1.25, 48));
        let pending = Family::<QueueLabels, Gauge>::default();
        registry.register(
            "scheduler_schedule_attempts",
            "Number of attempts to schedule pods, by the result",
            attempts.clone(),
        );
        registry.register(
            "scheduler_e2e_scheduling_duration_seconds",
            "E2e scheduling latency in seconds (scheduling algorithm + binding)",
            e2e_duration.clone(),
        );
        registry.register("scheduler_pending_pods", "Number of pending pods, by the queue type", pending.clone());
        Self { registry, profile: profile.to_string(), attempts, e2e_duration, pending }
    }

    pub fn attempt(&self, result: &str) {
        self.attempts.get_or_create(&AttemptLabels { result: result.into(), profile: self.profile.clone() }).inc();
    }

    /// The Prometheus text exposition, with the queue depths as of now.
    pub fn render(&self, (active, backoff, unschedulable): Depths) -> String {
        for (queue, n) in [("active", active), ("backoff", backoff), ("unschedulable", unschedulable)] {
            self.pending.get_or_create(&QueueLabels { queue: queue.into() }).set(n as i64);
        }
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
    fn renders_attempts_latency_and_queue_depths() {
        let m = Metrics::new("default-scheduler");
        m.attempt("scheduled");
        m.attempt("scheduled");
        m.e2e_duration.observe(0.002);
        let text = m.render((3, 1, 2));
        assert!(
            text.contains(r#"scheduler_schedule_attempts_total{result="scheduled",profile="default-scheduler"} 2"#),
            "{text}"
        );
        assert!(text.contains(r#"scheduler_pending_pods{queue="active"} 3"#), "{text}");
        assert!(text.contains("scheduler_e2e_scheduling_duration_seconds_count 1"), "{text}");
    }
}
