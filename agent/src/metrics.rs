//! Prometheus metrics with kubelet's names: pod start latency, pod worker (sync) duration, image
//! pull duration, containers started, and running pods/containers read at scrape time.

use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

pub struct Metrics {
    registry: Registry,
    pod_start: Histogram,
    pod_worker: Histogram,
    image_pull: Histogram,
    started: Counter,
    pub running_pods: Gauge,
    pub running_containers: Gauge,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::default();
        let pod_start = Histogram::new(exponential_buckets(0.005, 2.0, 14));
        let pod_worker = Histogram::new(exponential_buckets(0.0005, 2.0, 16));
        let image_pull = Histogram::new(exponential_buckets(0.01, 2.0, 14));
        let started = Counter::default();
        let running_pods = Gauge::default();
        let running_containers = Gauge::default();
        registry.register(
            "kubelet_pod_start_duration_seconds",
            "Duration in seconds from the agent seeing a pod to it running",
            pod_start.clone(),
        );
        registry.register(
            "kubelet_pod_worker_duration_seconds",
            "Duration in seconds to sync a single pod",
            pod_worker.clone(),
        );
        registry.register(
            "kubelet_image_pull_duration_seconds",
            "Duration in seconds to pull an image",
            image_pull.clone(),
        );
        registry.register("kubelet_started_containers", "Cumulative number of containers started", started.clone());
        registry.register("kubelet_running_pods", "Number of pods that have a running container", running_pods.clone());
        registry.register(
            "kubelet_running_containers",
            "Number of containers currently running",
            running_containers.clone(),
        );
        Metrics { registry, pod_start, pod_worker, image_pull, started, running_pods, running_containers }
    }
}

impl Metrics {
    pub fn observe_pod_start(&self, d: Duration) {
        self.pod_start.observe(d.as_secs_f64());
    }
    pub fn observe_sync(&self, d: Duration) {
        self.pod_worker.observe(d.as_secs_f64());
    }
    pub fn observe_pull(&self, d: Duration) {
        self.image_pull.observe(d.as_secs_f64());
    }
    pub fn container_started(&self) {
        self.started.inc();
    }

    pub fn render(&self) -> String {
        let mut out = String::new();
        if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &self.registry) {
            tracing::warn!(error = %e, "cannot encode metrics");
        }
        out
    }
}
