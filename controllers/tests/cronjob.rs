//! The CronJob controller (with the Job controller) against a real apiserver, playing the agent:
//! runs on schedule, records them in status, keeps the history limits, and honours Forbid,
//! Replace and suspend.

mod common;

use common::{poll, Cluster};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, Patch, PatchParams};
use serde_json::{json, Value};

fn cron_job(name: &str, extra: Value) -> Value {
    let mut spec = json!({
        "schedule": "0 0 1 1 *",
        "jobTemplate": {"metadata": {"labels": {"team": "batch"}}, "spec": {"template": {"spec": {
            "restartPolicy": "Never", "containers": [{"name": "tick", "image": "registry.example/busybox:1"}]}}}},
    });
    common::merge(&mut spec, extra);
    json!({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": name}, "spec": spec})
}

async fn children(c: &Cluster, cj: &str) -> anyhow::Result<Vec<Job>> {
    let uid = c.api::<CronJob>().get(cj).await?.metadata.uid;
    let jobs = c.api::<Job>().list(&ListParams::default()).await?.items;
    Ok(jobs
        .into_iter()
        .filter(|j| j.metadata.owner_references.iter().flatten().any(|o| Some(&o.uid) == uid.as_ref()))
        .filter(|j| j.metadata.deletion_timestamp.is_none())
        .collect())
}

/// Succeeds every pending pod of every Job.
async fn succeed_all(c: &Cluster) -> anyhow::Result<()> {
    for p in c.api::<Pod>().list(&ListParams::default()).await?.items {
        let phase = p.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("Pending");
        if phase == "Pending" && p.metadata.deletion_timestamp.is_none() {
            c.set_status(p.metadata.name.as_deref().unwrap_or_default(), json!({"phase": "Succeeded"})).await?;
        }
    }
    Ok(())
}

/// A Job owned by the CronJob, suspended (so it never runs), then marked finished at `start`.
async fn finished_job(c: &Cluster, cj: &CronJob, name: &str, condition: &str, start: &str) -> anyhow::Result<()> {
    let owner = json!([{"apiVersion": "batch/v1", "kind": "CronJob", "name": cj.metadata.name, "uid": cj.metadata.uid,
        "controller": true, "blockOwnerDeletion": true}]);
    c.create::<Job>(json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "ownerReferences": owner},
        "spec": {"suspend": true, "template": {"spec": {"restartPolicy": "Never",
            "containers": [{"name": "tick", "image": "registry.example/busybox:1"}]}}}}))
        .await?;
    let mut status = json!({"startTime": start, "conditions": [{"type": condition, "status": "True",
        "lastTransitionTime": start}]});
    if condition == "Complete" {
        status["completionTime"] = json!(start);
        status["conditions"] = json!([{"type": "SuccessCriteriaMet", "status": "True", "lastTransitionTime": start},
            {"type": "Complete", "status": "True", "lastTransitionTime": start}]);
    }
    c.api::<Job>().patch_status(name, &PatchParams::default(), &Patch::Merge(json!({"status": status}))).await?;
    Ok(())
}

#[tokio::test]
async fn history_limits_keep_the_newest_finished_jobs() -> anyhow::Result<()> {
    let c = Cluster::start().await?;
    let m = c.manager().await?;
    let cj: CronJob = c
        .create(cron_job(
            "hist",
            json!({"suspend": true, "successfulJobsHistoryLimit": 1, "failedJobsHistoryLimit": 1}),
        ))
        .await?;
    finished_job(&c, &cj, "hist-1", "Complete", "2025-01-01T10:00:00Z").await?;
    finished_job(&c, &cj, "hist-2", "Complete", "2025-01-01T10:01:00Z").await?;
    finished_job(&c, &cj, "hist-3", "Failed", "2025-01-01T10:02:00Z").await?;
    finished_job(&c, &cj, "hist-4", "Failed", "2025-01-01T10:03:00Z").await?;
    finished_job(&c, &cj, "hist-5", "Complete", "2025-01-01T10:04:00Z").await?;
    let left = poll("the history pruned", || async {
        let mut names: Vec<String> =
            children(&c, "hist").await?.iter().filter_map(|j| j.metadata.name.clone()).collect();
        names.sort();
        Ok((names.len() == 2).then_some(names))
    })
    .await?;
    assert_eq!(left, ["hist-4", "hist-5"]);
    let status = poll("the last success recorded", || async {
        let s = c.api::<CronJob>().get("hist").await?.status.unwrap_or_default();
        Ok(s.last_successful_time.is_some().then_some(s))
    })
    .await?;
    assert_eq!(status.last_successful_time.map(|t| t.0.to_string()), Some("2025-01-01T10:04:00Z".to_string()));
    assert_eq!(c.events("hist", "SuccessfulDelete").await?.len(), 3);
    m.shutdown().await?;
    c.stop().await
}

#[tokio::test]
async fn forbid_waits_for_the_active_run_and_replace_swaps_it_for_a_missed_start() -> anyhow::Result<()> {
    let c = Cluster::start().await?;
    let m = c.manager().await?;
    let cj: CronJob =
        c.create(cron_job("solo", json!({"schedule": "*/1 * * * *", "concurrencyPolicy": "Forbid"}))).await?;
    // A run started by hand (as `kubectl create job --from=cronjob/solo` does), then recorded as active.
    let owner = json!([{"apiVersion": "batch/v1", "kind": "CronJob", "name": "solo", "uid": cj.metadata.uid,
        "controller": true, "blockOwnerDeletion": true}]);
    let manual: Job = c
        .create(json!({"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "solo-manual", "ownerReferences": owner,
                "annotations": {"cronjob.kubernetes.io/instantiate": "manual"}},
            "spec": {"template": {"spec": {"restartPolicy": "Never",
                "containers": [{"name": "tick", "image": "registry.example/busybox:1"}]}}}}))
        .await?;
    poll("the hand-made run reported", || async {
        Ok((!c.events("solo", "UnexpectedJob").await?.is_empty()).then_some(()))
    })
    .await?;
    let past = (jiff::Timestamp::now() - jiff::SignedDuration::from_mins(5)).to_string();
    let active = json!([{"apiVersion": "batch/v1", "kind": "Job", "namespace": "default", "name": "solo-manual",
        "uid": manual.metadata.uid}]);
    let cjs = c.api::<CronJob>();
    let patch = Patch::Merge(json!({"status": {"lastScheduleTime": past, "active": active}}));
    cjs.patch_status("solo", &PatchParams::default(), &patch).await?;
    poll("a JobAlreadyActive event", || async {
        Ok((!c.events("solo", "JobAlreadyActive").await?.is_empty()).then_some(()))
    })
    .await?;
    assert_eq!(children(&c, "solo").await?.len(), 1, "Forbid starts no second run");

    // Replace: the running Job goes and the missed start runs.
    cjs.patch("solo", &PatchParams::default(), &Patch::Merge(json!({"spec": {"concurrencyPolicy": "Replace"}})))
        .await?;
    let run = poll("the active run replaced", || async {
        let s = cjs.get("solo").await?.status.unwrap_or_default();
        let active = s.active.unwrap_or_default();
        let replaced = active.len() == 1 && active[0].uid != manual.metadata.uid;
        Ok((replaced && c.api::<Job>().get_opt("solo-manual").await?.is_none()).then(|| active[0].clone()))
    })
    .await?;
    let name = run.name.clone().unwrap_or_default();
    let minute = jiff::Timestamp::now().as_second().div_euclid(60);
    assert!(name == format!("solo-{minute}") || name == format!("solo-{}", minute - 1), "{name}");
    let job = c.api::<Job>().get(&name).await?;
    assert_eq!(job.metadata.labels.clone().unwrap_or_default().get("team").map(String::as_str), Some("batch"));
    let annotations = job.metadata.annotations.clone().unwrap_or_default();
    assert!(annotations.contains_key("batch.kubernetes.io/cronjob-scheduled-timestamp"), "{annotations:?}");

    // It succeeds: the CronJob sees it complete.
    let s = poll("the run to be seen complete", || async {
        succeed_all(&c).await?;
        let s = cjs.get("solo").await?.status.unwrap_or_default();
        Ok((s.active.is_none() && s.last_successful_time.is_some()).then_some(s))
    })
    .await?;
    assert!(s.last_schedule_time.is_some());
    assert!(!c.events("solo", "SawCompletedJob").await?.is_empty());
    m.shutdown().await?;
    c.stop().await
}
