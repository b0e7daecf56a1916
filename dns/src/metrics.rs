//! Prometheus metrics under CoreDNS's names (`coredns_dns_*`, `coredns_forward_*`), so the
//! dashboards and alerts written for CoreDNS read kaji-dns too, plus `kaji_dns_*` for what only
//! kaji-dns has. The `server` label is `dns://:<port>` and `zone` is `.`, as for CoreDNS's default
//! Corefile's one server block; `plugin` says who answered (`kubernetes` or `forward`).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    pub server: String,
    pub zone: String,
    pub view: String,
    /// `udp` or `tcp`.
    pub proto: String,
    /// 1 for IPv4 clients, 2 for IPv6.
    pub family: String,
    /// The query type (A, AAAA, SRV, ...; `other` for the rest).
    pub r#type: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResponseLabels {
    pub server: String,
    pub zone: String,
    pub view: String,
    pub rcode: String,
    pub plugin: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DurationLabels {
    pub server: String,
    pub zone: String,
    pub view: String,
    pub r#type: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ForwardLabels {
    pub to: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ForwardResponseLabels {
    pub to: String,
    pub rcode: String,
}

pub struct Metrics {
    registry: Registry,
    pub requests: Family<RequestLabels, Counter>,
    pub responses: Family<ResponseLabels, Counter>,
    pub request_duration: Family<DurationLabels, Histogram>,
    pub forward_requests: Family<ForwardLabels, Counter>,
    pub forward_responses: Family<ForwardResponseLabels, Counter>,
    pub forward_duration: Family<ForwardResponseLabels, Histogram>,
    /// Rebuilding the index after a batch of API changes.
    pub index_build_duration: Histogram,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

/// CoreDNS's buckets: 0.25 ms doubling 16 times (to ~8 s).
fn buckets() -> impl Iterator<Item = f64> {
    exponential_buckets(0.00025, 2.0, 16)
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let requests = Family::<RequestLabels, Counter>::default();
        let responses = Family::<ResponseLabels, Counter>::default();
        let request_duration = Family::<DurationLabels, Histogram>::new_with_constructor(|| Histogram::new(buckets()));
        let forward_requests = Family::<ForwardLabels, Counter>::default();
        let forward_responses = Family::<ForwardResponseLabels, Counter>::default();
        let forward_duration =
            Family::<ForwardResponseLabels, Histogram>::new_with_constructor(|| Histogram::new(buckets()));
        let index_build_duration = Histogram::new(buckets());
        // prometheus-client appends `_total` to counters.
        registry.register(
            "coredns_dns_requests",
            "Counter of DNS requests made per zone, protocol and family",
            requests.clone(),
        );
        registry.register("coredns_dns_responses", "Counter of response status codes", responses.clone());
        registry.register(
            "coredns_dns_request_duration_seconds",
            "Histogram of the time (in seconds) each request took",
            request_duration.clone(),
        );
        registry.register(
            "coredns_forward_requests",
            "Counter of requests made per upstream",
            forward_requests.clone(),
        );
        registry.register(
            "coredns_forward_responses",
            "Counter of responses received per upstream",
            forward_responses.clone(),
        );
        registry.register(
            "coredns_forward_request_duration_seconds",
            "Histogram of the time each request took",
            forward_duration.clone(),
        );
        registry.register(
            "kaji_dns_index_build_duration_seconds",
            "Time to rebuild the lookup index after a batch of Service, EndpointSlice or Namespace changes",
            index_build_duration.clone(),
        );
        Metrics {
            registry,
            requests,
            responses,
            request_duration,
            forward_requests,
            forward_responses,
            forward_duration,
            index_build_duration,
        }
    }

    pub fn render(&self) -> String {
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            tracing::warn!("cannot encode metrics");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_carry_corednss_names_and_labels() {
        let m = Metrics::new();
        m.requests
            .get_or_create(&RequestLabels {
                server: "dns://:53".into(),
                zone: ".".into(),
                view: String::new(),
                proto: "udp".into(),
                family: "1".into(),
                r#type: "A".into(),
            })
            .inc();
        let duration =
            DurationLabels { server: "dns://:53".into(), zone: ".".into(), view: String::new(), r#type: "A".into() };
        m.request_duration.get_or_create(&duration).observe(0.0003);
        let text = m.render();
        assert!(
            text.contains(
                r#"coredns_dns_requests_total{server="dns://:53",zone=".",view="",proto="udp",family="1",type="A"} 1"#
            ),
            "{text}"
        );
        assert!(text.contains("# TYPE coredns_dns_request_duration_seconds histogram"), "{text}");
        assert!(
            text.contains(r#"coredns_dns_request_duration_seconds_bucket{le="0.0005",server="dns://:53",zone=".",view="",type="A"} 1"#),
            "CoreDNS's buckets: {text}"
        );
    }
}
