//! ReplicationController, DaemonSet, StatefulSet, Job and CronJob defaults
//! (`pkg/apis/core/v1/defaults.go`, `pkg/apis/apps/v1/defaults.go`, `pkg/apis/batch/v1/defaults.go`)
//! and the Job strategy's generated selector.

use serde_json::{json, Map, Value};

use super::json::{child, child_of, default_str, default_value, get_str, is_unset};
use super::pod::default_template;
use super::storage::default_claim_spec;

/// The labels the Job strategy puts on a Job's pod template (both spellings, as Kubernetes keeps
/// the legacy ones) and selects it by.
pub const JOB_UID_LABEL: &str = "batch.kubernetes.io/controller-uid";
pub const JOB_NAME_LABEL: &str = "batch.kubernetes.io/job-name";
pub const LEGACY_JOB_UID_LABEL: &str = "controller-uid";
pub const LEGACY_JOB_NAME_LABEL: &str = "job-name";

/// SetDefaults_ReplicationController: a selector and labels that are empty take the template's
/// labels; replicas default to 1; the pod template (optional here, unlike a ReplicaSet's) gets
/// the pod spec defaults only when there is one, so a missing one is still reported as required.
pub(super) fn default_replication_controller(obj: &mut Value) {
    let Some(m) = obj.as_object_mut() else { return };
    let Some(spec) = child_of(m, "spec") else { return };
    default_value(spec, "replicas", json!(1));
    if spec.get("template").is_some_and(Value::is_object) {
        default_template(spec);
    }
    let template_labels = spec.get("template").and_then(|t| t.get("metadata")).and_then(|md| md.get("labels"));
    let Some(labels) = template_labels.filter(|l| l.as_object().is_some_and(|l| !l.is_empty())).cloned() else {
        return;
    };
    if spec.get("selector").and_then(Value::as_object).is_none_or(Map::is_empty) {
        spec.insert("selector".to_string(), labels.clone());
    }
    if let Some(meta) = child_of(m, "metadata") {
        if meta.get("labels").and_then(Value::as_object).is_none_or(Map::is_empty) {
            meta.insert("labels".to_string(), labels);
        }
    }
}

pub(super) fn default_daemon_set(obj: &mut Value) {
    let Some(spec) = child(obj, "spec") else { return };
    if let Some(strategy) = child_of(spec, "updateStrategy") {
        default_str(strategy, "type", "RollingUpdate");
        if get_str(strategy, "type") == "RollingUpdate" {
            if let Some(ru) = child_of(strategy, "rollingUpdate") {
                default_value(ru, "maxUnavailable", json!(1));
                default_value(ru, "maxSurge", json!(0));
            }
        }
    }
    default_value(spec, "revisionHistoryLimit", json!(10));
    default_template(spec);
}

pub(super) fn default_stateful_set(obj: &mut Value) {
    let Some(spec) = child(obj, "spec") else { return };
    default_str(spec, "podManagementPolicy", "OrderedReady");
    if let Some(strategy) = child_of(spec, "updateStrategy") {
        default_str(strategy, "type", "RollingUpdate");
        if get_str(strategy, "type") == "RollingUpdate" {
            if let Some(ru) = child_of(strategy, "rollingUpdate") {
                default_value(ru, "partition", json!(0));
            }
        }
    }
    if let Some(policy) = child_of(spec, "persistentVolumeClaimRetentionPolicy") {
        default_str(policy, "whenDeleted", "Retain");
        default_str(policy, "whenScaled", "Retain");
    }
    default_value(spec, "replicas", json!(1));
    default_value(spec, "revisionHistoryLimit", json!(10));
    for claim in spec.get_mut("volumeClaimTemplates").and_then(Value::as_array_mut).into_iter().flatten() {
        let Some(c) = claim.as_object_mut() else { continue };
        // What the v1 conversion and defaulting print for each template.
        default_str(c, "apiVersion", "v1");
        default_str(c, "kind", "PersistentVolumeClaim");
        if let Some(cs) = child_of(c, "spec") {
            default_claim_spec(cs);
        }
        if let Some(status) = child_of(c, "status") {
            default_str(status, "phase", "Pending");
        }
    }
    default_template(spec);
}

pub(super) fn default_job(obj: &mut Value) {
    let Some(m) = obj.as_object_mut() else { return };
    let uid = m.get("metadata").and_then(|md| md.get("uid")).and_then(Value::as_str).map(str::to_string);
    let name = m.get("metadata").and_then(|md| md.get("name")).and_then(Value::as_str).unwrap_or("").to_string();
    let Some(spec) = child_of(m, "spec") else { return };
    default_job_spec(spec);
    if spec.get("manualSelector").and_then(Value::as_bool) != Some(true) {
        if let Some(uid) = uid.filter(|u| !u.is_empty()) {
            generate_selector(spec, &uid, &name);
        }
    }
    // SetDefaults_Job: a Job without labels takes its template's.
    let template_labels = spec.get("template").and_then(|t| t.get("metadata")).and_then(|md| md.get("labels")).cloned();
    if let (Some(labels), Some(meta)) = (template_labels.filter(|l| !l.is_null()), child_of(m, "metadata")) {
        if meta.get("labels").and_then(Value::as_object).is_none_or(Map::is_empty) {
            meta.insert("labels".to_string(), labels);
        }
    }
}

/// SetDefaults_Job's spec part (also what a CronJob's job template is checked against).
fn default_job_spec(spec: &mut Map<String, Value>) {
    if is_unset(spec.get("completions")) && is_unset(spec.get("parallelism")) {
        spec.insert("completions".to_string(), json!(1));
        spec.insert("parallelism".to_string(), json!(1));
    }
    default_value(spec, "parallelism", json!(1));
    if is_unset(spec.get("backoffLimit")) {
        let limit = if is_unset(spec.get("backoffLimitPerIndex")) { 6 } else { i64::from(i32::MAX) };
        spec.insert("backoffLimit".to_string(), json!(limit));
    }
    default_str(spec, "completionMode", "NonIndexed");
    default_value(spec, "suspend", json!(false));
    let replacement = if is_unset(spec.get("podFailurePolicy")) { "TerminatingOrFailed" } else { "Failed" };
    default_str(spec, "podReplacementPolicy", replacement);
    for rule in spec
        .get_mut("podFailurePolicy")
        .and_then(|p| p.get_mut("rules"))
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
    {
        for cond in rule.get_mut("onPodConditions").and_then(Value::as_array_mut).into_iter().flatten() {
            if let Some(c) = cond.as_object_mut() {
                default_str(c, "status", "True");
            }
        }
    }
    default_template(spec);
}

/// The Job strategy's generateSelector: select by the Job's uid and label the template with it.
fn generate_selector(spec: &mut Map<String, Value>, uid: &str, name: &str) {
    if is_unset(spec.get("selector")) {
        spec.insert("selector".to_string(), json!({"matchLabels": {JOB_UID_LABEL: uid}}));
    }
    let Some(template) = child_of(spec, "template") else { return };
    let Some(meta) = child_of(template, "metadata") else { return };
    let Some(labels) = child_of(meta, "labels") else { return };
    for (k, v) in
        [(JOB_UID_LABEL, uid), (JOB_NAME_LABEL, name), (LEGACY_JOB_UID_LABEL, uid), (LEGACY_JOB_NAME_LABEL, name)]
    {
        labels.entry(k.to_string()).or_insert_with(|| json!(v));
    }
}

pub(super) fn default_cron_job(obj: &mut Value) {
    let Some(spec) = child(obj, "spec") else { return };
    default_str(spec, "concurrencyPolicy", "Allow");
    default_value(spec, "suspend", json!(false));
    default_value(spec, "successfulJobsHistoryLimit", json!(3));
    default_value(spec, "failedJobsHistoryLimit", json!(1));
    // Only the pod template inside the job template is defaulted; the job spec's own defaults are
    // applied to each Job the controller creates from it.
    if let Some(job_spec) = child_of(spec, "jobTemplate").and_then(|t| child_of(t, "spec")) {
        default_template(job_spec);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::defaults::test_support::defaulted;

    fn template() -> Value {
        json!({"metadata": {"labels": {"app": "x"}}, "spec": {"containers": [{"name": "a", "image": "busybox"}]}})
    }

    #[test]
    fn replication_controllers_take_selector_and_labels_from_their_template() {
        let rc =
            defaulted("ReplicationController", json!({"metadata": {"name": "rc"}, "spec": {"template": template()}}));
        assert_eq!(rc["spec"]["replicas"], 1);
        assert_eq!(rc["spec"]["selector"], json!({"app": "x"}));
        assert_eq!(rc["metadata"]["labels"], json!({"app": "x"}));
        assert_eq!(rc["spec"]["template"]["spec"]["restartPolicy"], "Always");

        let own = defaulted(
            "ReplicationController",
            json!({"metadata": {"labels": {"team": "a"}}, "spec": {"replicas": 0, "selector": {"app": "y"}, "template": template()}}),
        );
        assert_eq!(own["spec"]["replicas"], 0, "an explicit zero stays");
        assert_eq!(own["spec"]["selector"], json!({"app": "y"}), "a selector given is kept");
        assert_eq!(own["metadata"]["labels"], json!({"team": "a"}), "labels given are kept");

        let bare = defaulted("ReplicationController", json!({"metadata": {"name": "rc"}, "spec": {}}));
        assert!(bare["spec"].get("template").is_none(), "no template is made up: it is required");
        assert!(bare["spec"].get("selector").is_none() && bare["metadata"].get("labels").is_none());
    }

    #[test]
    fn daemon_sets_roll_one_at_a_time_by_default() {
        let ds = defaulted("DaemonSet", json!({"spec": {"template": template()}}));
        assert_eq!(
            ds["spec"]["updateStrategy"],
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}})
        );
        assert_eq!(ds["spec"]["revisionHistoryLimit"], 10);
        assert_eq!(ds["spec"]["template"]["spec"]["restartPolicy"], "Always");
        let on_delete = defaulted("DaemonSet", json!({"spec": {"updateStrategy": {"type": "OnDelete"}}}));
        assert_eq!(on_delete["spec"]["updateStrategy"], json!({"type": "OnDelete"}));
    }

    #[test]
    fn stateful_sets_get_ordered_pods_partition_zero_and_claim_template_defaults() {
        let sts = defaulted(
            "StatefulSet",
            json!({"spec": {"template": template(), "volumeClaimTemplates": [{"metadata": {"name": "data"},
                "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}]}}),
        );
        let spec = &sts["spec"];
        assert_eq!(spec["podManagementPolicy"], "OrderedReady");
        assert_eq!(spec["updateStrategy"], json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 0}}));
        assert_eq!(
            spec["persistentVolumeClaimRetentionPolicy"],
            json!({"whenDeleted": "Retain", "whenScaled": "Retain"})
        );
        assert_eq!((spec["replicas"].clone(), spec["revisionHistoryLimit"].clone()), (json!(1), json!(10)));
        let claim = &spec["volumeClaimTemplates"][0];
        assert_eq!((claim["apiVersion"].as_str(), claim["kind"].as_str()), (Some("v1"), Some("PersistentVolumeClaim")));
        assert_eq!(claim["spec"]["volumeMode"], "Filesystem");
        assert_eq!(claim["status"], json!({"phase": "Pending"}));
    }

    #[test]
    fn jobs_default_to_one_completion_six_retries_and_a_generated_selector() {
        let job = defaulted("Job", json!({"metadata": {"name": "pi", "uid": "u1"}, "spec": {"template": template()}}));
        let spec = &job["spec"];
        assert_eq!((spec["completions"].clone(), spec["parallelism"].clone()), (json!(1), json!(1)));
        assert_eq!(spec["backoffLimit"], 6);
        assert_eq!(spec["completionMode"], "NonIndexed");
        assert_eq!(spec["suspend"], false);
        assert_eq!(spec["podReplacementPolicy"], "TerminatingOrFailed");
        assert_eq!(spec["selector"], json!({"matchLabels": {JOB_UID_LABEL: "u1"}}));
        let labels = &spec["template"]["metadata"]["labels"];
        assert_eq!(labels[JOB_NAME_LABEL], "pi");
        assert_eq!(labels[LEGACY_JOB_UID_LABEL], "u1");
        assert_eq!(labels["app"], "x");
        assert_eq!(job["metadata"]["labels"], *labels, "a job without labels takes its template's");

        let parallel = defaulted("Job", json!({"spec": {"parallelism": 3}}));
        assert!(parallel["spec"].get("completions").is_none(), "a work queue job keeps completions unset");
        let manual = defaulted(
            "Job",
            json!({"metadata": {"uid": "u"}, "spec": {"manualSelector": true, "selector": {"matchLabels": {"a": "b"}}}}),
        );
        assert_eq!(manual["spec"]["selector"], json!({"matchLabels": {"a": "b"}}));
        let per_index = defaulted("Job", json!({"spec": {"backoffLimitPerIndex": 1}}));
        assert_eq!(per_index["spec"]["backoffLimit"], i64::from(i32::MAX));
    }

    #[test]
    fn cron_jobs_allow_concurrency_and_keep_three_and_one() {
        let cj = defaulted(
            "CronJob",
            json!({"spec": {"schedule": "* * * * *", "jobTemplate": {"spec": {"template": template()}}}}),
        );
        let spec = &cj["spec"];
        assert_eq!(spec["concurrencyPolicy"], "Allow");
        assert_eq!(spec["suspend"], false);
        assert_eq!(
            (spec["successfulJobsHistoryLimit"].clone(), spec["failedJobsHistoryLimit"].clone()),
            (json!(3), json!(1))
        );
        assert_eq!(spec["jobTemplate"]["spec"]["template"]["spec"]["dnsPolicy"], "ClusterFirst");
        assert!(spec["jobTemplate"]["spec"].get("backoffLimit").is_none());
    }
}
