//! Prometheus metrics, named as kube-proxy names them.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TableLabels {
    pub table: String,
}

pub struct Metrics {
    registry: Registry,
    /// Every sync, whether or not it had to restore.
    pub sync_duration: Histogram,
    pub full_sync_duration: Histogram,
    pub partial_sync_duration: Histogram,
    /// Unix time of the last successful sync.
    pub last_sync_timestamp: Gauge<f64, AtomicU64>,
    pub rules: Family<TableLabels, Gauge>,
    pub restore_failures: Counter,
    /// Failed `nft -f` transactions (nftables mode).
    pub nftables_sync_failures: Counter,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::default();
        // 1 ms to ~30 s in 40% steps.
        let buckets = || exponential_buckets(0.001, 1.4, 31);
        let sync_duration = Histogram::new(buckets());
        let full_sync_duration = Histogram::new(buckets());
        let partial_sync_duration = Histogram::new(buckets());
        let last_sync_timestamp = Gauge::<f64, AtomicU64>::default();
        let rules = Family::<TableLabels, Gauge>::default();
        let restore_failures = Counter::default();
        let nftables_sync_failures = Counter::default();
        registry.register(
            "kubeproxy_sync_proxy_rules_duration_seconds",
            "SyncProxyRules latency in seconds",
            sync_duration.clone(),
        );
        registry.register(
            "kubeproxy_sync_full_proxy_rules_duration_seconds",
            "SyncProxyRules latency in seconds for full resyncs",
            full_sync_duration.clone(),
        );
        registry.register(
            "kubeproxy_sync_partial_proxy_rules_duration_seconds",
            "SyncProxyRules latency in seconds for partial resyncs",
            partial_sync_duration.clone(),
        );
        registry.register(
            "kubeproxy_sync_proxy_rules_last_timestamp_seconds",
            "The last time proxy rules were successfully synced",
            last_sync_timestamp.clone(),
        );
        registry.register(
            "kubeproxy_sync_proxy_rules_iptables_total",
            "Total number of iptables rules owned by kaji-proxy, by table",
            rules.clone(),
        );
        registry.register(
            "kubeproxy_sync_proxy_rules_iptables_restore_failures",
            "Cumulative proxy iptables restore failures",
            restore_failures.clone(),
        );
        registry.register(
            "kubeproxy_sync_proxy_rules_nftables_sync_failures",
            "Cumulative proxy nftables sync failures",
            nftables_sync_failures.clone(),
        );
        Self {
            registry,
            sync_duration,
            full_sync_duration,
            partial_sync_duration,
            last_sync_timestamp,
            rules,
            restore_failures,
            nftables_sync_failures,
        }
    }

    pub fn set_rules(&self, table: &str, n: usize) {
        self.rules.get_or_create(&TableLabels { table: table.into() }).set(n as i64);
    }

    /// The Prometheus text exposition.
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
    fn renders_sync_latency_rules_and_failures() {
        let m = Metrics::new();
        m.sync_duration.observe(0.02);
        m.set_rules("nat", 42);
        m.restore_failures.inc();
        m.nftables_sync_failures.inc();
        m.last_sync_timestamp.set(1.5e9);
        let text = m.render();
        assert!(text.contains("kubeproxy_sync_proxy_rules_duration_seconds_count 1"), "{text}");
        assert!(text.contains(r#"kubeproxy_sync_proxy_rules_iptables_total{table="nat"} 42"#), "{text}");
        assert!(text.contains("kubeproxy_sync_proxy_rules_iptables_restore_failures_total 1"), "{text}");
        assert!(text.contains("kubeproxy_sync_proxy_rules_nftables_sync_failures_total 1"), "{text}");
        assert!(text.contains("kubeproxy_sync_proxy_rules_last_timestamp_seconds 1500000000"), "{text}");
    }
}
