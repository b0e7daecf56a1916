//! The proxy loop. Desired: the rules for every Service and its ready endpoints. Observed: what
//! the last successful restore installed. Reflectors on Services and EndpointSlices only mark
//! the rules dirty; one loop builds the model, renders and syncs — coalesced to
//! `min_sync_period`, a full rewrite every `sync_period`, with back-off after a failure.

use crate::build::{build_model, NodeContext};
use crate::metrics::Metrics;
use crate::sync::Syncer;
use crate::Config;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::Api;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{watcher, WatchStreamExt};
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

/// Follows one resource into a store; every event marks the rules dirty.
fn follow<K>(api: Api<K>, dirty: Arc<Notify>, stop: watch::Receiver<bool>) -> Store<K>
where
    K: kube::Resource<DynamicType = ()> + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + Sync + 'static,
{
    let (store, writer) = reflector::store();
    let stream = reflector::reflector(writer, watcher(api, watcher::Config::default()).default_backoff());
    let mut stop = stop;
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        loop {
            tokio::select! {
                _ = stop.wait_for(|s| *s) => return,
                ev = stream.next() => match ev {
                    None => return,
                    Some(Err(e)) => tracing::warn!(error = %e, kind = K::kind(&()).as_ref(), "watch failed; retrying"),
                    Some(Ok(_)) => dirty.notify_one(),
                },
            }
        }
    });
    store
}

/// Runs until `stop` turns true.
pub async fn run(client: kube::Client, config: Config, shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    let dirty = Arc::new(Notify::new());
    let services = follow(Api::<Service>::all(client.clone()), dirty.clone(), stop.clone());
    let slices = follow(Api::<EndpointSlice>::all(client), dirty.clone(), stop.clone());
    tokio::select! {
        _ = stop.wait_for(|s| *s) => return,
        _ = async { let _ = services.wait_until_ready().await; let _ = slices.wait_until_ready().await; } => {}
    }
    tracing::info!(services = services.len(), endpointslices = slices.len(), "caches synced; programming rules");
    let ctx = NodeContext {
        node_name: config.node_name.clone(),
        cluster_cidr: config.cluster_cidr.clone(),
        masquerade_all: config.masquerade_all,
    };
    let mut syncer = Some(Syncer::new(config.iptables.clone()));
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
        let (model, warnings) = build_model(svcs.iter().map(|s| s.as_ref()), eps.iter().map(|e| e.as_ref()), &ctx);
        for w in warnings.iter().filter(|w| !warned.contains(*w)) {
            tracing::warn!(problem = %w, "skipping bad input");
        }
        warned = warnings.into_iter().collect();

        let Some(mut s) = syncer.take() else { return };
        let span = tracing::info_span!("sync_rules", services = model.services.len(), full);
        let started = Instant::now();
        let (s, result) = tokio::task::spawn_blocking(move || {
            let r = s.sync(&model, full);
            (s, r)
        })
        .instrument(span.clone())
        .await
        .unwrap_or_else(|e| panic!("sync task panicked: {e}"));
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
                shared.metrics.set_rules("nat", outcome.nat_rules);
                shared.metrics.set_rules("filter", outcome.filter_rules);
                shared.synced_now();
                if outcome.restored {
                    tracing::info!(
                        took_ms = (took * 1000.0) as u64,
                        chains_written = outcome.chains_written,
                        chains_deleted = outcome.chains_deleted,
                        bytes = outcome.payload_bytes,
                        "rules synced"
                    );
                } else {
                    tracing::debug!("rules unchanged");
                }
            }
            Err(e) => {
                shared.metrics.restore_failures.inc();
                backoff = (backoff * 2).clamp(Duration::from_secs(1), MAX_BACKOFF);
                is_dirty = true;
                tracing::warn!(error = %e, retry_in_s = backoff.as_secs(), "sync failed; previous rules stay in place");
            }
        }
    }
}
