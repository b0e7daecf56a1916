//! The proxy loop. Desired: the rules for every Service and its ready endpoints. Observed: what
//! the last successful sync installed. Watchers on Services and EndpointSlices keep them reduced
//! (`kaji_component::reflector`) and only mark the rules dirty; one loop builds the model, renders and syncs —
//! coalesced to `min_sync_period`, a full rewrite every `sync_period`, with back-off after a
//! failure.

use crate::backend::{Backend, Syncer};
use crate::build::{assemble, NodeContext, ServiceInfo, SliceInfo};
use crate::metrics::Metrics;
use crate::Config;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kaji_component::reflector::Cache;
use kube::api::Api;
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::sync::{watch, Notify};
use tracing::Instrument;

const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// State shared by the loop and the HTTP endpoints.
pub struct Shared {
    pub metrics: Metrics,
    pub sync_period: Duration,
    last_sync: Mutex<Option<Instant>>,
}

impl Shared {
    pub fn new(sync_period: Duration) -> Self {
        Self { metrics: Metrics::new(), sync_period, last_sync: Mutex::new(None) }
    }

    pub fn last_sync_age(&self) -> Option<Duration> {
        self.last_sync.lock().ok().and_then(|l| l.map(|t| t.elapsed()))
    }

    fn synced_now(&self) {
        if let Ok(mut l) = self.last_sync.lock() {
            *l = Some(Instant::now());
        }
        let unix = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or_default();
        self.metrics.last_sync_timestamp.set(unix);
    }
}

/// Runs until `stop` turns true.
pub async fn run(client: kube::Client, config: Config, shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    let dirty = Arc::new(Notify::new());
    let node = config.node_name.clone();
    let services =
        Cache::follow(Api::<Service>::all(client.clone()), ServiceInfo::from_service, dirty.clone(), stop.clone());
    let slices = Cache::follow(
        Api::<EndpointSlice>::all(client),
        move |s: &EndpointSlice| SliceInfo::from_slice(s, &node),
        dirty.clone(),
        stop.clone(),
    );
    tokio::select! {
        _ = stop.wait_for(|s| *s) => return,
        _ = async { services.wait_until_ready().await; slices.wait_until_ready().await; } => {}
    }
    tracing::info!(services = services.len(), endpointslices = slices.len(), "caches synced; programming rules");
    let ctx = NodeContext {
        node_name: config.node_name.clone(),
        cluster_cidr: config.cluster_cidr,
        masquerade_all: config.masquerade_all,
    };
    let mut syncer = Some(Syncer::new(&config.backend));
    let mode = config.backend.mode();
    let mut warned: HashSet<String> = HashSet::new();
    let mut is_dirty = true;
    let mut next_full = tokio::time::Instant::now();
    let mut last_attempt: Option<tokio::time::Instant> = None;
    let mut backoff = Duration::ZERO;
    loop {
        if !is_dirty {
            tokio::select! {
                _ = stop.wait_for(|s| *s) => return,
                _ = dirty.notified() => {}
                _ = tokio::time::sleep_until(next_full) => {}
            }
        }
        // Coalesce bursts of events into one sync per min_sync_period (longer after failures).
        if let Some(last) = last_attempt {
            let earliest = last + config.min_sync_period.max(backoff);
            tokio::select! {
                _ = stop.wait_for(|s| *s) => return,
                _ = tokio::time::sleep_until(earliest) => {}
            }
        }
        is_dirty = false;
        let now = tokio::time::Instant::now();
        last_attempt = Some(now);
        let full = now >= next_full;
        let (svcs, eps) = (services.state(), slices.state());
        let Some(mut s) = syncer.take() else { return };
        let span = tracing::info_span!("sync_rules", services = svcs.len(), full, mode);
        let started = Instant::now();
        let ctx = ctx.clone();
        // The model is built beside the sync, on the blocking thread: its per-sync garbage then
        // stays out of the memory the caches live in.
        let (s, warnings, result, model_ms) = tokio::task::spawn_blocking(move || {
            let t = Instant::now();
            let (model, warnings) = assemble(svcs.iter().map(|s| s.as_ref()), eps.iter().map(|e| e.as_ref()), &ctx);
            drop((svcs, eps));
            let model_ms = t.elapsed().as_millis() as u64;
            let r = s.sync(model, full);
            // The previous model and this sync's garbage are free now: give the pages back.
            kaji_component::malloc::trim();
            (s, warnings, r, model_ms)
        })
        .instrument(span.clone())
        .await
        .unwrap_or_else(|e| panic!("sync task panicked: {e}"));
        for w in warnings.iter().filter(|w| !warned.contains(*w)) {
            tracing::warn!(problem = %w, "skipping bad input");
        }
        warned = warnings.into_iter().collect();
        syncer = Some(s);
        let took = started.elapsed().as_secs_f64();
        let _enter = span.enter();
        match result {
            Ok(outcome) => {
                backoff = Duration::ZERO;
                shared.metrics.sync_duration.observe(took);
                if outcome.full {
                    shared.metrics.full_sync_duration.observe(took);
                    next_full = now + config.sync_period;
                } else {
                    shared.metrics.partial_sync_duration.observe(took);
                }
                if let Backend::Iptables(_) = config.backend {
                    shared.metrics.set_rules("nat", outcome.nat_rules);
                    shared.metrics.set_rules("filter", outcome.filter_rules);
                }
                shared.synced_now();
                if outcome.restored {
                    tracing::info!(
                        took_ms = (took * 1000.0) as u64,
                        model_ms,
                        chains_written = outcome.chains_written,
                        chains_deleted = outcome.chains_deleted,
                        elements_written = outcome.elements_written,
                        bytes = outcome.payload_bytes,
                        "rules synced"
                    );
                } else {
                    tracing::debug!("rules unchanged");
                }
            }
            Err(e) => {
                match config.backend {
                    Backend::Iptables(_) => shared.metrics.restore_failures.inc(),
                    Backend::Nftables(_) => shared.metrics.nftables_sync_failures.inc(),
                };
                backoff = (backoff * 2).clamp(Duration::from_secs(1), MAX_BACKOFF);
                is_dirty = true;
                tracing::warn!(error = %e, retry_in_s = backoff.as_secs(), "sync failed; previous rules stay in place");
            }
        }
    }
}
