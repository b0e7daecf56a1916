//! The Job and TTL-after-finished controllers against a real apiserver, playing the agent:
//! completions and parallelism, finalizer-based counting, back-off to a Failed condition, the
//! active deadline, Indexed Jobs, TTL deletion and the release of orphaned pods.

mod common;

use common::{poll, within, Cluster};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, ListParams};
use serde_json::{json, Value};
use std::time::Duration;

const TRACKING: &str = "batch.kubernetes.io/job-tracking";

fn job(name: &str, spec: Value) -> Value {
    let mut spec = spec;
    spec["template"] = json!({"spec": {"restartPolicy": "Never",
        "containers": [{"name": "work", "image": "registry.example/busybox:1"}]}});
    json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name}, "spec": spec})
}

async fn manager(c: &Cluster) -> anyhow::Result<kaji_controllers::Handle> {
    let config = kaji_controllers::Config {
        job_backoff: kaji_controllers::job::backoff::Settings {
            base: Duration::from_millis(200),
            max: Duration::from_secs(2),
        },
        ..kaji_controllers::Config::default()
    };
    c.manager_with(config).await
}

async fn job_pods(c: &Cluster, name: &str) -> anyhow::Result<Vec<Pod>> {
    let lp = ListParams::default().labels(&format!("batch.kubernetes.io/job-name={name}"));
    Ok(c.api::<Pod>().list(&lp).await?.items)
}

fn phase(p: &Pod) -> &str {
    p.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("Pending")
}

fn name(p: &Pod) -> String {
    p.metadata.name.clone().unwrap_or_default()
}

fn condition(job: &Job, type_: &str) -> Option<(String, String)> {
    let c = job.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == type_)?;
    Some((c.status.clone(), c.reason.clone().unwrap_or_default()))
}

/// Ends every pending pod of the Job with `phase`; returns how many it ended.
async fn finish_pending(c: &Cluster, job: &str, phase_: &str) -> anyhow::Result<usize> {
    let mut n = 0;
    for p in job_pods(c, job).await? {
        if phase(&p) == "Pending" && p.metadata.deletion_timestamp.is_none() {
            c.set_status(&name(&p), json!({"phase": phase_})).await?;
            n += 1;
        }
    }
    Ok(n)
}

#[tokio::test]
async fn completions_run_at_most_parallelism_at_once_and_are_counted_once() -> anyhow::Result<()> {
    let c = Cluster::start().await?;
    let m = manager(&c).await?;
    c.create::<Job>(job("pi", json!({"completions": 5, "parallelism": 2}))).await?;
    let jobs = c.api::<Job>();
    let max_active = std::sync::atomic::AtomicUsize::new(0);
    let done = poll("the job to complete", || async {
        let pods = job_pods(&c, "pi").await?;
        let active = pods.iter().filter(|p| phase(p) == "Pending" && p.metadata.deletion_timestamp.is_none()).count();
        max_active.fetch_max(active, std::sync::atomic::Ordering::Relaxed);
        let j = jobs.get("pi").await?;
        if condition(&j, "Complete").is_some() {
            return Ok(Some(j));
        }
        finish_pending(&c, "pi", "Succeeded").await?;
        Ok(None)
    })
    .await?;
    let max_active = max_active.into_inner();
    assert!(max_active <= 2, "at most parallelism pods ran at once: {max_active}");
    let status = done.status.clone().unwrap_or_default();
    assert_eq!((status.succeeded, status.failed, status.active), (Some(5), Some(0), Some(0)));
    assert_eq!(condition(&done, "SuccessCriteriaMet"), Some(("True".into(), "CompletionsReached".into())));
    assert_eq!(condition(&done, "Complete"), Some(("True".into(), "CompletionsReached".into())));
    assert!(status.completion_time.is_some() && status.start_time.is_some());
    let pods = job_pods(&c, "pi").await?;
    assert_eq!(pods.len(), 5, "exactly five pods ran");
    for p in &pods {
        assert!(!p.metadata.finalizers.iter().flatten().any(|f| f == TRACKING), "{} still tracked", name(p));
        let labels = p.metadata.labels.clone().unwrap_or_default();
        assert_eq!(labels.get("job-name").map(String::as_str), Some("pi"));
        assert_eq!(labels.get("batch.kubernetes.io/controller-uid"), done.metadata.uid.as_ref());
    }
    poll("the Completed event", || async { Ok((!c.events("pi", "Completed").await?.is_empty()).then_some(())) })
        .await?;
    // A finished Job stays as it is.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(jobs.get("pi").await?.status, done.status);
    m.shutdown().await?;
    c.stop().await
}

#[tokio::test]
async fn failures_back_off_and_stop_at_the_backoff_limit() -> anyhow::Result<()> {
    let c = Cluster::start().await?;
    let m = manager(&c).await?;
    c.create::<Job>(job("fail", json!({"backoffLimit": 2}))).await?;
    let jobs = c.api::<Job>();
    let failed = poll("the job to fail", || async {
        let j = jobs.get("fail").await?;
        if condition(&j, "Failed").is_some() {
            return Ok(Some(j));
        }
        finish_pending(&c, "fail", "Failed").await?;
        Ok(None)
    })
    .await?;
    assert_eq!(condition(&failed, "FailureTarget"), Some(("True".into(), "BackoffLimitExceeded".into())));
    assert_eq!(condition(&failed, "Failed"), Some(("True".into(), "BackoffLimitExceeded".into())));
    assert_eq!(failed.status.as_ref().and_then(|s| s.failed), Some(3), "backoffLimit 2 allows three tries");
    assert!(condition(&failed, "Complete").is_none());
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(job_pods(&c, "fail").await?.len(), 3, "no pod after the limit");
    assert_eq!(c.events("fail", "BackoffLimitExceeded").await?.len(), 1);
    m.shutdown().await?;
    c.stop().await
}

#[tokio::test]
async fn the_active_deadline_fails_the_job_and_deletes_its_pods() -> anyhow::Result<()> {
    let c = Cluster::start().await?;
    let m = manager(&c).await?;
    c.create::<Job>(job("slow", json!({"activeDeadlineSeconds": 1, "parallelism": 2, "completions": 4}))).await?;
    let jobs = c.api::<Job>();
    let failed = poll("the deadline", || async {
        let j = jobs.get("slow").await?;
        Ok(condition(&j, "Failed").is_some().then_some(j))
    })
    .await?;
    assert_eq!(condition(&failed, "Failed"), Some(("True".into(), "DeadlineExceeded".into())));
    poll("the job's pods to be gone", || async { Ok(job_pods(&c, "slow").await?.is_empty().then_some(())) }).await?;
    m.shutdown().await?;
    c.stop().await
}

#[tokio::test]
async fn indexed_jobs_run_one_pod_per_index_and_record_completed_indexes() -> anyhow::Result<()> {
    let c = Cluster::start().await?;
    let m = manager(&c).await?;
    c.create::<Job>(job("idx", json!({"completions": 3, "parallelism": 3, "completionMode": "Indexed"}))).await?;
    let pods = poll("three indexed pods", || async {
        let pods = job_pods(&c, "idx").await?;
        Ok((pods.len() == 3).then_some(pods))
    })
    .await?;
    let mut indexes: Vec<String> = pods
        .iter()
        .map(|p| p.metadata.annotations.clone().unwrap_or_default()["batch.kubernetes.io/job-completion-index"].clone())
        .collect();
    indexes.sort();
    assert_eq!(indexes, ["0", "1", "2"]);
    for p in &pods {
        let i = &p.metadata.annotations.clone().unwrap_or_default()["batch.kubernetes.io/job-completion-index"];
        let spec = p.spec.clone().unwrap_or_default();
        assert_eq!(spec.hostname, Some(format!("idx-{i}")));
        assert!(name(p).starts_with(&format!("idx-{i}-")));
        let env = spec.containers[0].env.clone().unwrap_or_default();
        assert!(env.iter().any(|e| e.name == "JOB_COMPLETION_INDEX"), "{env:?}");
    }
    // Index 1 fails once and is retried; then all succeed.
    let one = pods.iter().find(|p| name(p).starts_with("idx-1-")).map(name).unwrap_or_default();
    c.set_status(&one, json!({"phase": "Failed"})).await?;
    let jobs = c.api::<Job>();
    let done = poll("the indexed job to complete", || async {
        let j = jobs.get("idx").await?;
        if condition(&j, "Complete").is_some() {
            return Ok(Some(j));
        }
        if job_pods(&c, "idx").await?.len() == 4 {
            finish_pending(&c, "idx", "Succeeded").await?;
        }
        Ok(None)
    })
    .await?;
    let status = done.status.unwrap_or_default();
    assert_eq!(status.completed_indexes.as_deref(), Some("0-2"));
    assert_eq!((status.succeeded, status.failed), (Some(3), Some(1)));
    m.shutdown().await?;
    c.stop().await
}

#[tokio::test]
async fn finished_jobs_with_a_ttl_are_deleted_and_orphaned_pods_are_released() -> anyhow::Result<()> {
    let c = Cluster::start().await?;
    let m = manager(&c).await?;
    c.create::<Job>(job("brief", json!({"ttlSecondsAfterFinished": 1}))).await?;
    poll("a pod", || async { Ok((finish_pending(&c, "brief", "Succeeded").await? == 1).then_some(())) }).await?;
    let jobs = c.api::<Job>();
    poll("the TTL to delete the job", || async { Ok(jobs.get_opt("brief").await?.is_none().then_some(())) }).await?;
    poll("its pods to go with it", || async { Ok(job_pods(&c, "brief").await?.is_empty().then_some(())) }).await?;

    // A running Job deleted in the background leaves its pods to the garbage collector; their
    // tracking finalizers must not keep them.
    c.create::<Job>(job("gone", json!({"parallelism": 2, "completions": 2}))).await?;
    poll("two pods", || async { Ok((job_pods(&c, "gone").await?.len() == 2).then_some(())) }).await?;
    within(jobs.delete("gone", &DeleteParams::background())).await??;
    poll("the orphaned pods to be released and collected", || async {
        Ok(job_pods(&c, "gone").await?.is_empty().then_some(()))
    })
    .await?;
    m.shutdown().await?;
    c.stop().await
}
