//! TTL-after-finished controller. Desired: a finished Job with `ttlSecondsAfterFinished` is gone
//! that many seconds after it finished. Observed: the Jobs; an expired one is read fresh (its TTL
//! may have changed) and deleted in the foreground, at the resourceVersion that was checked.

use crate::job::plan::finish_time;
use crate::meta;
use crate::shared::Shared;
use futures::Stream;
use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, DeleteParams, Preconditions, PropagationPolicy};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use kube::ResourceExt;
use std::sync::Arc;
use std::time::Duration;

pub const NAME: &str = "ttl-after-finished";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("failed to {action} job {key}")]
    Api {
        action: &'static str,
        key: String,
        #[source]
        source: kube::Error,
    },
}

pub struct Ctx {
    pub shared: Shared,
    pub jobs: Store<Job>,
}

/// When a finished Job with a TTL expires (`None`: no TTL, or not finished).
pub fn expires_at(job: &Job) -> Option<jiff::Timestamp> {
    if job.metadata.deletion_timestamp.is_some() {
        return None;
    }
    let ttl = job.spec.as_ref()?.ttl_seconds_after_finished?;
    finish_time(job)?.checked_add(jiff::SignedDuration::from_secs(i64::from(ttl))).ok()
}

#[tracing::instrument(skip_all, fields(controller = NAME, object = %meta::key(&job.metadata)))]
pub async fn reconcile(job: Arc<Job>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let key = meta::key(&job.metadata);
    ctx.shared.reconciled(NAME, &key, sync(&job, &ctx, &key)).await
}

pub fn error_policy(job: Arc<Job>, err: &Error, ctx: Arc<Ctx>) -> Action {
    ctx.shared.failed(NAME, &meta::key(&job.metadata), err)
}

fn until(t: jiff::Timestamp, now: jiff::Timestamp) -> Option<Duration> {
    Duration::try_from(t.duration_since(now)).ok().filter(|d| !d.is_zero())
}

async fn sync(job: &Job, ctx: &Ctx, key: &str) -> Result<Action, Error> {
    let Some(expiry) = expires_at(job) else { return Ok(Action::await_change()) };
    if let Some(left) = until(expiry, jiff::Timestamp::now()) {
        return Ok(Action::requeue(left));
    }
    // The cache may be stale: check the live Job before deleting it.
    let api: Api<Job> = Api::namespaced(ctx.shared.client.clone(), &job.namespace().unwrap_or_default());
    let fresh = match api.get_opt(&job.name_any()).await {
        Ok(Some(j)) => j,
        Ok(None) => return Ok(Action::await_change()),
        Err(source) => return Err(Error::Api { action: "read", key: key.into(), source }),
    };
    match expires_at(&fresh) {
        None => return Ok(Action::await_change()),
        Some(e) => {
            if let Some(left) = until(e, jiff::Timestamp::now()) {
                return Ok(Action::requeue(left));
            }
        }
    }
    let dp = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Foreground),
        preconditions: Some(Preconditions { uid: fresh.uid(), resource_version: fresh.resource_version() }),
        ..DeleteParams::default()
    };
    match api.delete(&fresh.name_any(), &dp).await {
        Ok(_) => tracing::info!(job = %key, "deleted a finished job whose TTL expired"),
        Err(kube::Error::Api(s)) if matches!(s.code, 404 | 409) => {}
        Err(source) => return Err(Error::Api { action: "delete", key: key.into(), source }),
    }
    Ok(Action::await_change())
}

/// Runs the controller until `stop` resolves.
pub async fn run(
    ctx: Arc<Ctx>,
    jobs: impl Stream<Item = Result<Job, watcher::Error>> + Send + 'static,
    stop: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let controller = Controller::for_stream(jobs, ctx.jobs.clone());
    crate::shared::drive(controller, reconcile, error_policy, ctx, stop).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_finished_job_expires_ttl_seconds_after_its_terminal_condition() {
        let job: Job = serde_json::from_value(json!({
            "metadata": {"name": "pi"},
            "spec": {"ttlSecondsAfterFinished": 30, "template": {}},
            "status": {"conditions": [{"type": "Complete", "status": "True", "lastTransitionTime": "2025-01-01T00:00:00Z"}]}
        }))
        .expect("job");
        assert_eq!(expires_at(&job), Some("2025-01-01T00:00:30Z".parse().expect("time")));
        let mut running = job.clone();
        running.status = None;
        assert_eq!(expires_at(&running), None);
        let mut no_ttl = job.clone();
        no_ttl.spec.as_mut().expect("spec").ttl_seconds_after_finished = None;
        assert_eq!(expires_at(&no_ttl), None);
    }
}
