//! Keeps the index current: watches on Services, EndpointSlices and Namespaces (each object
//! reduced on arrival) mark it dirty; one task rebuilds it after each batch of changes and
//! swaps it in whole. Queries read whichever index is current, without waiting.

use crate::index::Index;
use crate::model;
use k8s_openapi::api::core::v1::{Namespace, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kaji_component::reflector::Cache;
use kube::api::Api;
use std::sync::{Arc, RwLock};
use std::time::{SystemTime, UNIX_EPOCH};
use tokio::sync::{watch, Notify};

/// The current index, shared by the rebuild task and every query.
#[derive(Default)]
pub struct Current {
    index: RwLock<Arc<Index>>,
    synced: watch::Sender<bool>,
}

impl Current {
    pub fn get(&self) -> Arc<Index> {
        // A poisoned lock still holds a whole index: every change is one assignment.
        self.index.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub fn set(&self, index: Index) {
        let synced = index.synced;
        *self.index.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(index);
        if synced {
            self.synced.send_replace(true);
        }
    }

    /// Whether every watch has completed its first list.
    pub fn is_synced(&self) -> bool {
        *self.synced.borrow()
    }

    /// Waits until every watch has completed its first list.
    pub async fn wait_synced(&self) {
        let _ = self.synced.subscribe().wait_for(|s| *s).await;
    }
}

/// Follows the API until `stop` turns true, keeping `current` up to date.
pub async fn run(
    client: kube::Client,
    current: Arc<Current>,
    metrics: Arc<crate::metrics::Metrics>,
    mut stop: watch::Receiver<bool>,
) {
    let dirty = Arc::new(Notify::new());
    let services = Cache::follow(Api::<Service>::all(client.clone()), model::service, dirty.clone(), stop.clone());
    let slices = Cache::follow(Api::<EndpointSlice>::all(client.clone()), model::slice, dirty.clone(), stop.clone());
    let namespaces = Cache::follow(
        Api::<Namespace>::all(client),
        |n: &Namespace| n.metadata.name.clone(),
        dirty.clone(),
        stop.clone(),
    );
    let mut was_synced = false;
    loop {
        tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            _ = dirty.notified() => {}
        }
        let synced = services.is_ready() && slices.is_ready() && namespaces.is_ready();
        let started = std::time::Instant::now();
        let (svcs, sls, nss) = (services.state(), slices.state(), namespaces.state());
        let names: Vec<String> = nss.iter().map(|n| n.to_string()).collect();
        let serial = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or_default();
        let index = Index::build(&svcs, &sls, &names, u32::try_from(serial).unwrap_or(u32::MAX), synced);
        let count = index.service_count();
        current.set(index);
        metrics.index_build_duration.observe(started.elapsed().as_secs_f64());
        if synced && !was_synced {
            tracing::info!(
                services = count,
                endpointslices = sls.len(),
                namespaces = names.len(),
                "caches synced; answering for the cluster"
            );
            was_synced = true;
        }
    }
}
