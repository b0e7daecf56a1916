//! Prometheus metrics: request counts and latencies by verb/resource/code, watchers, objects.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use std::sync::Mutex;

/// Kubernetes' `apiserver_request_total` labels: the verb as Kubernetes reports it (`GET`,
/// `LIST`, `WATCH`, `POST`, `PUT`, `PATCH`, `APPLY`, `DELETE`, `DELETECOLLECTION`, `CONNECT`),
/// the resource's plural, the subresource (`""` for the object itself) and the HTTP code.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    pub verb: String,
    pub resource: String,
    pub subresource: String,
    pub code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DurationLabels {
    pub verb: String,
    pub resource: String,
    pub subresource: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResourceLabels {
    pub resource: String,
}

/// `apiserver_current_inflight_requests`' label: `readOnly` or `mutating`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct InflightLabels {
    pub request_kind: String,
}

pub struct Metrics {
    registry: Mutex<Registry>,
    /// Requests being served now that the in-flight limits count.
    pub inflight: Family<InflightLabels, Gauge>,
    pub requests: Family<RequestLabels, Counter>,
    pub duration: Family<DurationLabels, Histogram>,
    pub watchers: Gauge,
    pub objects: Family<ResourceLabels, Gauge>,
    /// The store's file, its live data and its kept history, in bytes (when the backend tells).
    pub storage_size: Gauge,
    pub storage_live: Gauge,
    pub storage_history: Gauge,
    /// `apiserver_audit_event_total`, `apiserver_audit_error_total{plugin}`.
    pub audit: crate::audit::backend::Counters,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::default();
        let requests = Family::<RequestLabels, Counter>::default();
        let duration = Family::<DurationLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.0005, 2.0, 16))
        });
        let watchers = Gauge::default();
        let objects = Family::<ResourceLabels, Gauge>::default();
        let inflight = Family::<InflightLabels, Gauge>::default();
        registry.register(
            "apiserver_current_inflight_requests",
            "Number of requests being served now, of those the in-flight limits count, by kind",
            inflight.clone(),
        );
        registry.register(
            "apiserver_request",
            "Counter of apiserver requests by verb, resource, subresource and HTTP code",
            requests.clone(),
        );
        registry.register(
            "apiserver_request_duration_seconds",
            "Response latency by verb and resource",
            duration.clone(),
        );
        registry.register("apiserver_registered_watchers", "Number of open watch streams", watchers.clone());
        registry.register("apiserver_storage_objects", "Number of stored objects by resource", objects.clone());
        let (storage_size, storage_live, storage_history) = (Gauge::default(), Gauge::default(), Gauge::default());
        registry.register(
            "apiserver_storage_size_bytes",
            "Size of the storage database file physically allocated in bytes",
            storage_size.clone(),
        );
        registry.register(
            "kaji_storage_live_bytes",
            "Bytes of the stored objects' keys and values",
            storage_live.clone(),
        );
        registry.register(
            "kaji_storage_history_bytes",
            "Bytes of the store's event history not yet compacted",
            storage_history.clone(),
        );
        let audit = crate::audit::backend::Counters::default();
        registry.register(
            "apiserver_audit_event",
            "Counter of audit events generated and sent to the audit backend.",
            audit.events.clone(),
        );
        registry.register(
            "apiserver_audit_error",
            "Counter of audit events that failed to be audited properly. Plugin identifies the plugin affected by the error.",
            audit.errors.clone(),
        );
        Self {
            registry: Mutex::new(registry),
            inflight,
            requests,
            duration,
            watchers,
            objects,
            storage_size,
            storage_live,
            storage_history,
            audit,
        }
    }
}

impl Metrics {
    /// Count a request on `resource` (`pods`, or `pods/status` for a subresource).
    pub fn observe(&self, verb: &str, resource: &str, code: u16, seconds: f64) {
        let (resource, subresource) = resource.split_once('/').unwrap_or((resource, ""));
        let (verb, resource, subresource) = (verb.to_string(), resource.to_string(), subresource.to_string());
        let labels =
            DurationLabels { verb: verb.clone(), resource: resource.clone(), subresource: subresource.clone() };
        self.duration.get_or_create(&labels).observe(seconds);
        self.requests.get_or_create(&RequestLabels { verb, resource, subresource, code: code.to_string() }).inc();
    }

    /// Record what the store takes (called when /metrics is scraped).
    pub fn set_storage_size(&self, size: crate::storage::StoreSize) {
        let g = |b: u64| i64::try_from(b).unwrap_or(i64::MAX);
        self.storage_size.set(g(size.file));
        self.storage_live.set(g(size.live));
        self.storage_history.set(g(size.history));
    }

    /// Record the requests in flight of `kind` (called when /metrics is scraped).
    pub fn set_inflight(&self, kind: &str, n: usize) {
        let labels = InflightLabels { request_kind: kind.to_string() };
        self.inflight.get_or_create(&labels).set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let reg = self.registry.lock().unwrap_or_else(|p| p.into_inner());
        if prometheus_client::encoding::text::encode(&mut out, &reg).is_err() {
            out.clear();
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_counted_by_verb_resource_subresource_and_code() {
        let m = Metrics::default();
        m.observe("PATCH", "pods/status", 200, 0.001);
        m.observe("PATCH", "pods/status", 200, 0.001);
        m.observe("PUT", "leases", 409, 0.001);
        let text = m.render();
        for want in [
            r#"apiserver_request_total{verb="PATCH",resource="pods",subresource="status",code="200"} 2"#,
            r#"apiserver_request_total{verb="PUT",resource="leases",subresource="",code="409"} 1"#,
        ] {
            assert!(text.contains(want), "{want} missing from\n{text}");
        }
    }
}
