//! What every controller's `Ctx` carries: the client, the event recorder, metrics, and a per-object
//! error back-off (250 ms doubling to 2 min, reset by a successful reconcile).

use crate::events::Recorder;
use crate::metrics::Metrics;
use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How often a healthy object is reconciled anyway (a periodic resync).
pub const RESYNC: Duration = Duration::from_secs(300);

pub struct Shared {
    pub client: kube::Client,
    pub recorder: Recorder,
    pub metrics: Arc<Metrics>,
    failures: Mutex<HashMap<String, u32>>,
}

impl Shared {
    pub fn new(client: kube::Client, metrics: Arc<Metrics>) -> Self {
        let recorder = Recorder::new(client.clone(), "kaji-controller-manager");
        Self { client, recorder, metrics, failures: Mutex::new(HashMap::new()) }
    }

    /// Records a reconcile's outcome; a success resets the object's back-off.
    pub fn finished<T, E>(&self, controller: &str, key: &str, started: Instant, result: &Result<T, E>) {
        self.metrics.observe(controller, result.is_ok(), started.elapsed());
        if result.is_ok() {
            if let Ok(mut f) = self.failures.lock() {
                f.remove(key);
            }
        }
    }

    /// Runs one reconcile of `key` with what every controller records around it: its duration
    /// and outcome in the metrics; a success resets the key's back-off.
    pub async fn reconciled<T, E>(
        &self,
        controller: &str,
        key: &str,
        sync: impl std::future::Future<Output = Result<T, E>>,
    ) -> Result<T, E> {
        let started = Instant::now();
        let result = sync.await;
        self.finished(controller, key, started, &result);
        result
    }

    /// A failed reconcile of `key`: logged, then requeued after the key's back-off.
    pub fn failed(&self, controller: &str, key: &str, err: &dyn std::fmt::Display) -> Action {
        tracing::warn!(controller, object = %key, error = %err, "reconcile failed; backing off");
        self.backoff(key)
    }

    /// The requeue after a failed reconcile of `key`.
    pub fn backoff(&self, key: &str) -> Action {
        let n = match self.failures.lock() {
            Ok(mut f) => {
                let n = f.entry(key.to_string()).or_insert(0);
                *n = n.saturating_add(1);
                *n
            }
            Err(_) => 1,
        };
        Action::requeue(backoff_delay(n))
    }
}

/// 250 ms × 2^(n-1), at most 2 minutes.
pub fn backoff_delay(failures: u32) -> Duration {
    let ms = 250u64.saturating_mul(1u64 << failures.saturating_sub(1).min(20));
    Duration::from_millis(ms.min(120_000))
}

/// Runs `controller` until `stop`, each object through `reconcile` and each failure through
/// `error_policy` — what every controller's `run` ends with.
pub async fn drive<K, C, E, F>(
    controller: Controller<K>,
    reconcile: impl FnMut(Arc<K>, Arc<C>) -> F,
    error_policy: impl Fn(Arc<K>, &E, Arc<C>) -> Action,
    ctx: Arc<C>,
    stop: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) where
    K: kaji_component::reflector::Watched,
    C: Send + Sync + 'static,
    E: std::error::Error + Send + Sync + 'static,
    F: std::future::Future<Output = Result<Action, E>> + Send + 'static,
{
    controller
        .graceful_shutdown_on(stop)
        .run(reconcile, error_policy, ctx)
        .for_each(|_| futures::future::ready(()))
        .await;
}

/// Runs `sweep` at once and then again after the delay each run returns, until `stop` resolves —
/// the loop of the periodic sweepers (pod GC, the CSR cleaner), which watch nothing of their own.
pub async fn every<F>(mut sweep: impl FnMut() -> F, stop: impl std::future::Future<Output = ()>)
where
    F: std::future::Future<Output = Duration>,
{
    let mut stop = std::pin::pin!(stop);
    let mut next = Duration::ZERO;
    loop {
        tokio::select! {
            _ = &mut stop => return,
            _ = tokio::time::sleep(next) => {}
        }
        next = sweep().await;
    }
}

/// Runs a controller of the pods' owners of kind `K` (ReplicaSet, StatefulSet, Job) until `stop`:
/// each owner reconciled on its own changes and on those of the pods `owners_of` maps to it.
#[allow(clippy::too_many_arguments)]
pub async fn run_owner_of_pods<K, C, E, F>(
    ctx: Arc<C>,
    store: Store<K>,
    owners: impl Stream<Item = Result<K, watcher::Error>> + Send + 'static,
    pods: impl Stream<Item = Result<Pod, watcher::Error>> + Send + 'static,
    owners_of: fn(&Store<K>, &Pod) -> Vec<ObjectRef<K>>,
    reconcile: impl FnMut(Arc<K>, Arc<C>) -> F,
    error_policy: impl Fn(Arc<K>, &E, Arc<C>) -> Action,
    stop: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) where
    K: kaji_component::reflector::Watched,
    C: Send + Sync + 'static,
    E: std::error::Error + Send + Sync + 'static,
    F: std::future::Future<Output = Result<Action, E>> + Send + 'static,
{
    let mapped = store.clone();
    let controller = Controller::for_stream(owners, store).watches_stream(pods, move |pod| owners_of(&mapped, &pod));
    drive(controller, reconcile, error_policy, ctx, stop).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_two_minutes() {
        assert_eq!(backoff_delay(1), Duration::from_millis(250));
        assert_eq!(backoff_delay(2), Duration::from_millis(500));
        assert_eq!(backoff_delay(5), Duration::from_secs(4));
        assert_eq!(backoff_delay(100), Duration::from_secs(120));
    }

    #[tokio::test]
    async fn every_sweeps_at_once_and_again_after_each_delay_until_stopped() {
        use std::sync::atomic::{AtomicU32, Ordering};
        let runs = Arc::new(AtomicU32::new(0));
        let stop = Arc::new(tokio::sync::Notify::new());
        let (counted, stopper) = (runs.clone(), stop.clone());
        let sweep = move || {
            let n = counted.fetch_add(1, Ordering::SeqCst) + 1;
            if n == 3 {
                stopper.notify_one();
            }
            // No wait between the first runs; after the third, the stop comes before the hour.
            async move {
                if n < 3 {
                    Duration::ZERO
                } else {
                    Duration::from_secs(3600)
                }
            }
        };
        tokio::time::timeout(Duration::from_secs(30), every(sweep, async move { stop.notified().await }))
            .await
            .expect("every returns once stopped");
        assert_eq!(runs.load(Ordering::SeqCst), 3);
    }
}
