//! CronJob controller. Desired: one Job from `jobTemplate` per start time of `schedule` (in
//! `timeZone`), within startingDeadlineSeconds and the concurrencyPolicy, with at most the history
//! limits of finished Jobs kept. Observed: the CronJob's Jobs; `status.active`,
//! `lastScheduleTime` and `lastSuccessfulTime` follow them.

pub mod plan;
pub mod schedule;

use crate::meta::{self, controller_of, controller_ref};
use crate::shared::{Shared, RESYNC};
use futures::Stream;
use jiff::tz::TimeZone;
use k8s_openapi::api::batch::v1::{CronJob, CronJobStatus, Job};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kaji_api::cron::{self, Schedule};
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::ResourceExt;
use plan::{Event, Input};
use std::collections::HashSet;
use std::sync::{Arc, Mutex};

pub const NAME: &str = "cronjob";
/// The annotation on each Job with the time it was scheduled for (RFC 3339, in the time zone).
pub const SCHEDULED_TIMESTAMP: &str = "batch.kubernetes.io/cronjob-scheduled-timestamp";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("failed to {action} for cronjob {key}")]
    Api {
        action: &'static str,
        key: String,
        #[source]
        source: kube::Error,
    },
}

pub struct Ctx {
    pub shared: Shared,
    pub cron_jobs: Store<CronJob>,
    pub jobs: Store<Job>,
    /// Jobs already reported as UnexpectedJob, so the event is recorded once per Job.
    reported: Mutex<HashSet<String>>,
}

impl Ctx {
    pub fn new(shared: Shared, cron_jobs: Store<CronJob>, jobs: Store<Job>) -> Self {
        Self { shared, cron_jobs, jobs, reported: Mutex::new(HashSet::new()) }
    }
}

#[tracing::instrument(skip_all, fields(controller = NAME, object = %meta::key(&cj.metadata)))]
pub async fn reconcile(cj: Arc<CronJob>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let key = meta::key(&cj.metadata);
    ctx.shared.reconciled(NAME, &key, sync(&cj, &ctx, &key)).await
}

pub fn error_policy(cj: Arc<CronJob>, err: &Error, ctx: Arc<Ctx>) -> Action {
    ctx.shared.failed(NAME, &meta::key(&cj.metadata), err)
}

async fn sync(cj: &CronJob, ctx: &Ctx, key: &str) -> Result<Action, Error> {
    let ns = cj.namespace().unwrap_or_default();
    let uid = cj.uid().unwrap_or_default();
    let spec = &cj.spec;
    let err = |action| move |source| Error::Api { action, key: key.to_string(), source };
    let jobs_api: Api<Job> = Api::namespaced(ctx.shared.client.clone(), &ns);
    let all = ctx.jobs.state();
    let children: Vec<&Job> = all
        .iter()
        .filter(|j| j.metadata.namespace.as_deref() == Some(&ns))
        .filter(|j| controller_of(&j.metadata).is_some_and(|o| o.uid == uid))
        .map(|j| &**j)
        .collect();

    // Active-list entries the cache does not show are confirmed gone by a live read first.
    let mut missing = HashSet::new();
    let known: HashSet<&str> = children.iter().filter_map(|j| j.metadata.uid.as_deref()).collect();
    for r in cj.status.iter().flat_map(|s| s.active.iter().flatten()) {
        let ruid = r.uid.clone().unwrap_or_default();
        if known.contains(ruid.as_str()) {
            continue;
        }
        match jobs_api.get_opt(r.name.as_deref().unwrap_or_default()).await.map_err(err("read a job"))? {
            Some(j) if j.uid().as_deref() == Some(ruid.as_str()) => {}
            _ => {
                missing.insert(ruid);
            }
        }
    }

    let mut setup_events = Vec::new();
    let tz = match spec.time_zone.as_deref() {
        None => Some(TimeZone::system()),
        Some(name) => match cron::time_zone(name) {
            Ok(tz) => Some(tz),
            Err(e) => {
                setup_events.push(Event {
                    warning: true,
                    reason: "UnknownTimeZone",
                    message: format!("invalid timeZone: {name:?}: {e}"),
                });
                None
            }
        },
    };
    let schedule = match Schedule::parse(&spec.schedule) {
        Ok(s) => Some(s),
        Err(e) => {
            setup_events.push(Event {
                warning: true,
                reason: "UnparseableSchedule",
                message: format!("unparseable schedule: {:?} : {e}", spec.schedule),
            });
            None
        }
    };
    let tz_or_utc = tz.clone().unwrap_or(TimeZone::UTC);
    let mut p = plan::plan(&Input {
        cron_job: cj,
        jobs: &children,
        missing: &missing,
        schedule: schedule.as_ref().filter(|_| tz.is_some()),
        tz: &tz_or_utc,
        now: jiff::Timestamp::now(),
    });
    p.events.splice(0..0, setup_events);

    let background = DeleteParams::background();
    for r in &p.replace {
        let name = r.name.clone().unwrap_or_default();
        match jobs_api.delete(&name, &background).await {
            Ok(_) => ctx.shared.recorder.normal(cj, "SuccessfulDelete", format!("Deleted job {name}")).await,
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(source) => return Err(err("delete an active job")(source)),
        }
    }
    let mut status = p.status.clone();
    if let Some((name, scheduled)) = &p.create {
        let job = new_job(cj, name, *scheduled, &tz_or_utc);
        match jobs_api.create(&PostParams::default(), &job).await {
            Ok(created) => {
                ctx.shared.recorder.normal(cj, "SuccessfulCreate", format!("Created job {name}")).await;
                status = plan::started(status, &created, *scheduled);
            }
            // Created before (by a sync whose status write was lost): ours if we control it.
            Err(kube::Error::Api(s)) if s.code == 409 => {
                if let Some(existing) = jobs_api.get_opt(name).await.map_err(err("read a job"))? {
                    if controller_of(&existing.metadata).is_some_and(|o| o.uid == uid) {
                        status = plan::started(status, &existing, *scheduled);
                    }
                }
            }
            Err(e) => {
                ctx.shared.recorder.warning(cj, "FailedCreate", format!("Error creating job: {e}")).await;
                return Err(err("create a job")(e));
            }
        }
    }
    write_status(ctx, cj, status).await.map_err(err("update status"))?;
    for name in &p.prune {
        match jobs_api.delete(name, &background).await {
            Ok(_) => ctx.shared.recorder.normal(cj, "SuccessfulDelete", format!("Deleted job {name}")).await,
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(source) => return Err(err("delete a finished job")(source)),
        }
    }
    record(ctx, cj, &p.events).await;
    Ok(Action::requeue(p.requeue.unwrap_or(RESYNC).min(RESYNC)))
}

async fn write_status(ctx: &Ctx, cj: &CronJob, status: CronJobStatus) -> Result<(), kube::Error> {
    let old = cj.status.clone().unwrap_or_default();
    if old == status {
        return Ok(());
    }
    let api: Api<CronJob> = Api::namespaced(ctx.shared.client.clone(), &cj.namespace().unwrap_or_default());
    let mut next = cj.clone();
    next.status = Some(status);
    next.metadata.managed_fields = None;
    api.replace_status(&cj.name_any(), &PostParams::default(), &next).await.map(drop)
}

async fn record(ctx: &Ctx, cj: &CronJob, events: &[Event]) {
    for e in events {
        if e.reason == "UnexpectedJob" {
            let first =
                ctx.reported.lock().is_ok_and(|mut r| r.insert(format!("{}/{}", meta::key(&cj.metadata), e.message)));
            if !first {
                continue;
            }
        }
        if e.warning {
            ctx.shared.recorder.warning(cj, e.reason, e.message.clone()).await;
        } else {
            ctx.shared.recorder.normal(cj, e.reason, e.message.clone()).await;
        }
    }
}

/// The Job for one start time: the template's metadata and spec, owned by the CronJob, with the
/// scheduled time annotated.
pub fn new_job(cj: &CronJob, name: &str, scheduled: jiff::Timestamp, tz: &TimeZone) -> Job {
    let template = cj.spec.job_template.clone();
    let tmeta = template.metadata.unwrap_or_default();
    let mut annotations = tmeta.annotations.unwrap_or_default();
    annotations.insert(
        SCHEDULED_TIMESTAMP.to_string(),
        scheduled.to_zoned(tz.clone()).strftime("%Y-%m-%dT%H:%M:%S%:z").to_string(),
    );
    Job {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: cj.namespace(),
            labels: tmeta.labels,
            annotations: Some(annotations),
            owner_references: Some(vec![controller_ref(cj)]),
            ..ObjectMeta::default()
        },
        spec: Some(template.spec.unwrap_or_default()),
        status: None,
    }
}

/// The CronJob a Job change concerns: its controller, if that is a CronJob.
pub fn cron_jobs_for_job(job: &Job) -> Vec<ObjectRef<CronJob>> {
    let ns = job.metadata.namespace.as_deref().unwrap_or_default();
    match controller_of(&job.metadata) {
        Some(o) if o.kind == "CronJob" => vec![ObjectRef::new(&o.name).within(ns)],
        _ => Vec::new(),
    }
}

/// Runs the controller until `stop` resolves.
pub async fn run(
    ctx: Arc<Ctx>,
    cron_jobs: impl Stream<Item = Result<CronJob, watcher::Error>> + Send + 'static,
    jobs: impl Stream<Item = Result<Job, watcher::Error>> + Send + 'static,
    stop: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let controller =
        Controller::for_stream(cron_jobs, ctx.cron_jobs.clone()).watches_stream(jobs, |job| cron_jobs_for_job(&job));
    crate::shared::drive(controller, reconcile, error_policy, ctx, stop).await;
}
