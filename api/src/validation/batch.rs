//! Job and CronJob validation (`pkg/apis/batch/validation`).

use serde_json::Value;

use super::apps::{
    label_selector_string, validate_nonnegative, validate_workload_selector, validate_workload_template,
};
use super::causes::{BadValue, Cause};
use super::json::{has, int, obj, semantic_eq, st};
use super::meta::{validate_annotations, validate_labels};
use super::names::IMMUTABLE_MSG;
use super::obj_or_null;
use crate::cron;
use crate::defaults::{JOB_NAME_LABEL, JOB_UID_LABEL};

/// Indexed Jobs: at most this many completions and pods at once.
const MAX_INDEXED: i64 = 100_000;
/// CronJob names leave room for the 11-character suffix of their Jobs' names.
const MAX_CRON_JOB_NAME: usize = 52;

/// validateJobSpec: the checks shared by Jobs and CronJob job templates (`path` is the JobSpec's).
fn validate_job_spec_common(spec: &Value, path: &str, out: &mut Vec<Cause>) {
    for key in ["parallelism", "completions", "activeDeadlineSeconds", "backoffLimit", "ttlSecondsAfterFinished"] {
        validate_nonnegative(spec, key, path, out);
    }
    let mode = st(spec, "completionMode");
    if has(spec, "completionMode") && !matches!(mode, "NonIndexed" | "Indexed") {
        out.push(Cause::not_supported(format!("{path}.completionMode"), mode, &["NonIndexed", "Indexed"]));
    }
    if mode == "Indexed" {
        match int(spec, "completions") {
            None => out.push(Cause::required(format!("{path}.completions"), "when completion mode is Indexed")),
            Some(c) if c > MAX_INDEXED => out.push(Cause::invalid(
                format!("{path}.completions"),
                c,
                &format!("must be less than or equal to {MAX_INDEXED} when completion mode is Indexed"),
            )),
            Some(_) => {}
        }
        if let Some(p) = int(spec, "parallelism").filter(|p| *p > MAX_INDEXED) {
            out.push(Cause::invalid(
                format!("{path}.parallelism"),
                p,
                &format!("must be less than or equal to {MAX_INDEXED} when completion mode is Indexed"),
            ));
        }
    }
    if has(spec, "backoffLimitPerIndex") && mode != "Indexed" {
        out.push(Cause::forbidden(format!("{path}.backoffLimitPerIndex"), "requires indexed completion mode"));
    }
    let replacement = st(spec, "podReplacementPolicy");
    if has(spec, "podReplacementPolicy") && !matches!(replacement, "TerminatingOrFailed" | "Failed") {
        out.push(Cause::not_supported(
            format!("{path}.podReplacementPolicy"),
            replacement,
            &["Failed", "TerminatingOrFailed"],
        ));
    }
}

pub(super) fn validate_job(job: &Value, out: &mut Vec<Cause>) {
    let meta = obj_or_null(job, "metadata");
    let spec = obj_or_null(job, "spec");
    if spec.get("manualSelector").and_then(Value::as_bool) != Some(true) && has(spec, "selector") {
        validate_generated_selector(meta, spec, out);
    }
    validate_job_spec_common(spec, "spec", out);
    validate_workload_selector(spec, "spec", None, out);
    validate_workload_template(spec, obj_or_null(spec, "template"), "spec", &["OnFailure", "Never"], None, out);
}

/// ValidateGeneratedSelector: a generated selector's labels on the template are the Job's own.
fn validate_generated_selector(meta: &Value, spec: &Value, out: &mut Vec<Cause>) {
    let uid = st(meta, "uid");
    if uid.is_empty() {
        out.push(Cause::required("metadata.uid", ""));
    }
    let labels = obj(obj_or_null(obj_or_null(spec, "template"), "metadata"), "labels");
    for (key, want) in [(JOB_UID_LABEL, uid), (JOB_NAME_LABEL, st(meta, "name"))] {
        let path = format!("spec.template.metadata.labels[{key}]");
        match labels.and_then(|l| l.get(key)).and_then(Value::as_str) {
            None => out.push(Cause::required(path, &format!("must be '{want}'"))),
            Some(v) if v != want => out.push(Cause::invalid(path, v, &format!("must be '{want}'"))),
            Some(_) => {}
        }
    }
    let sel_uid = obj(obj_or_null(spec, "selector"), "matchLabels").and_then(|m| m.get(JOB_UID_LABEL));
    if sel_uid.and_then(Value::as_str).is_some_and(|v| v != uid) {
        out.push(Cause::invalid(
            "spec.selector",
            BadValue::Raw(label_selector_string(spec.get("selector"))),
            "`selector` not auto-generated",
        ));
    }
}

/// What a Job update may not change: completions (except scaling an Indexed Job elastically),
/// selector, completionMode, and the pod template.
pub(super) fn validate_job_update(new_spec: &Value, old_spec: &Value, out: &mut Vec<Cause>) {
    let elastic = st(new_spec, "completionMode") == "Indexed"
        && int(new_spec, "completions").is_some()
        && int(new_spec, "completions") == int(new_spec, "parallelism")
        && int(old_spec, "completions") == int(old_spec, "parallelism");
    if !elastic && int(new_spec, "completions") != int(old_spec, "completions") {
        let shown = int(new_spec, "completions").map_or_else(|| "null".to_string(), |n| n.to_string());
        out.push(Cause::invalid("spec.completions", BadValue::Raw(shown), IMMUTABLE_MSG));
    }
    if !semantic_eq(new_spec.get("selector"), old_spec.get("selector")) {
        out.push(Cause::invalid(
            "spec.selector",
            BadValue::Raw(label_selector_string(new_spec.get("selector"))),
            IMMUTABLE_MSG,
        ));
    }
    if st(new_spec, "completionMode") != st(old_spec, "completionMode") {
        out.push(Cause::invalid("spec.completionMode", st(new_spec, "completionMode"), IMMUTABLE_MSG));
    }
    if !semantic_eq(new_spec.get("template"), old_spec.get("template")) {
        let shown = new_spec.get("template").map_or_else(|| "null".to_string(), Value::to_string);
        out.push(Cause::invalid("spec.template", BadValue::Raw(shown), IMMUTABLE_MSG));
    }
}

pub(super) fn validate_cron_job(cj: &Value, out: &mut Vec<Cause>) {
    let name = st(obj_or_null(cj, "metadata"), "name");
    if name.len() > MAX_CRON_JOB_NAME {
        out.push(Cause::invalid(
            "metadata.name",
            name,
            &format!("must be no more than {MAX_CRON_JOB_NAME} characters"),
        ));
    }
    let spec = obj_or_null(cj, "spec");
    let schedule = st(spec, "schedule");
    if schedule.is_empty() {
        out.push(Cause::required("spec.schedule", ""));
    } else if schedule.contains("TZ") {
        out.push(Cause::invalid(
            "spec.schedule",
            schedule,
            "cannot use TZ or CRON_TZ in schedule, use timeZone field instead",
        ));
    } else if let Err(e) = cron::Schedule::parse(schedule) {
        out.push(Cause::invalid("spec.schedule", schedule, &e));
    }
    if let Some(tz) = spec.get("timeZone").and_then(Value::as_str) {
        if let Err(e) = cron::time_zone(tz) {
            out.push(Cause::invalid("spec.timeZone", tz, &e));
        }
    }
    validate_nonnegative(spec, "startingDeadlineSeconds", "spec", out);
    match st(spec, "concurrencyPolicy") {
        "Allow" | "Forbid" | "Replace" => {}
        "" => out.push(Cause::required("spec.concurrencyPolicy", "")),
        other => out.push(Cause::not_supported("spec.concurrencyPolicy", other, &["Allow", "Forbid", "Replace"])),
    }
    validate_nonnegative(spec, "successfulJobsHistoryLimit", "spec", out);
    validate_nonnegative(spec, "failedJobsHistoryLimit", "spec", out);

    let template = obj_or_null(spec, "jobTemplate");
    let tmeta = obj_or_null(template, "metadata");
    validate_labels(obj(tmeta, "labels"), "spec.jobTemplate.metadata.labels", out);
    validate_annotations(obj(tmeta, "annotations"), "spec.jobTemplate.metadata.annotations", out);
    let job_spec = obj_or_null(template, "spec");
    let path = "spec.jobTemplate.spec";
    validate_job_spec_common(job_spec, path, out);
    // The Jobs get a generated selector: the template's labels are not matched against one here.
    let template = obj_or_null(job_spec, "template");
    validate_workload_template(&Value::Null, template, path, &["OnFailure", "Never"], None, out);
    if let Some(sel) = job_spec.get("selector").filter(|s| !s.is_null()) {
        out.push(Cause::invalid(
            format!("{path}.selector"),
            BadValue::Raw(label_selector_string(Some(sel))),
            "`selector` will be auto-generated",
        ));
    }
    if job_spec.get("manualSelector").and_then(Value::as_bool) == Some(true) {
        out.push(Cause::not_supported(
            format!("{path}.manualSelector"),
            BadValue::Raw("true".into()),
            &["nil", "false"],
        ));
    }
}

pub(super) fn validate_job_status(status: &Value, out: &mut Vec<Cause>) {
    for key in ["active", "succeeded", "failed", "ready", "terminating"] {
        validate_nonnegative(status, key, "status", out);
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::validation::test_support::fields;
    use crate::validation::{invalid_message, validate_create, validate_update};

    fn job(spec: serde_json::Value) -> serde_json::Value {
        let mut o = json!({"metadata": {"name": "pi", "namespace": "d", "uid": "u1"}, "spec": spec});
        crate::defaults::apply_defaults("Job", &mut o);
        o
    }

    fn template(restart: &str) -> serde_json::Value {
        json!({"spec": {"restartPolicy": restart, "containers": [{"name": "pi", "image": "busybox"}]}})
    }

    #[test]
    fn jobs_restart_on_failure_or_never() {
        assert_eq!(validate_create("Job", &job(json!({"template": template("Never")}))), vec![]);
        let always = job(json!({"template": {"spec": {"containers": [{"name": "pi", "image": "busybox"}]}}}));
        let causes = validate_create("Job", &always);
        assert_eq!(
            invalid_message("Job", "pi", &causes),
            "Job.batch \"pi\" is invalid: spec.template.spec.restartPolicy: Unsupported value: \"Always\": \
             supported values: \"OnFailure\", \"Never\""
        );
    }

    #[test]
    fn indexed_jobs_need_completions_and_counts_are_non_negative() {
        let bad = job(
            json!({"completionMode": "Indexed", "parallelism": 2, "backoffLimit": -1, "template": template("Never")}),
        );
        let causes = validate_create("Job", &bad);
        assert_eq!(fields(&causes), vec!["spec.backoffLimit", "spec.completions"]);
        assert_eq!(causes[1].message, "Required value: when completion mode is Indexed");
    }

    #[test]
    fn a_jobs_template_and_completions_are_fixed_but_parallelism_is_not() {
        let old = job(json!({"completions": 5, "parallelism": 2, "template": template("Never")}));
        let mut wider = old.clone();
        wider["spec"]["parallelism"] = json!(4);
        wider["spec"]["suspend"] = json!(true);
        assert_eq!(validate_update("Job", &wider, &old), vec![]);
        let mut changed = old.clone();
        changed["spec"]["completions"] = json!(6);
        changed["spec"]["template"]["spec"]["containers"][0]["image"] = json!("busybox:2");
        assert_eq!(fields(&validate_update("Job", &changed, &old)), vec!["spec.completions", "spec.template"]);
    }

    #[test]
    fn a_generated_selector_cannot_be_overridden_by_template_labels() {
        let mut j = json!({"metadata": {"name": "pi", "namespace": "d", "uid": "u1"},
            "spec": {"template": {"metadata": {"labels": {"batch.kubernetes.io/controller-uid": "other"}},
                "spec": {"restartPolicy": "Never", "containers": [{"name": "pi", "image": "busybox"}]}}}});
        crate::defaults::apply_defaults("Job", &mut j);
        let causes = validate_create("Job", &j);
        assert!(
            fields(&causes).contains(&"spec.template.metadata.labels[batch.kubernetes.io/controller-uid]"),
            "{causes:?}"
        );
    }

    fn cron_job(spec: serde_json::Value) -> serde_json::Value {
        let mut o = json!({"metadata": {"name": "hello", "namespace": "d"}, "spec": spec});
        crate::defaults::apply_defaults("CronJob", &mut o);
        o
    }

    #[test]
    fn cron_jobs_need_a_standard_schedule_and_a_known_time_zone() {
        let jt = json!({"spec": {"template": template("OnFailure")}});
        let ok = cron_job(json!({"schedule": "*/1 * * * *", "timeZone": "Europe/Berlin", "jobTemplate": jt.clone()}));
        assert_eq!(validate_create("CronJob", &ok), vec![]);
        let bad = cron_job(json!({"schedule": "* * *", "timeZone": "Nowhere/City", "jobTemplate": jt.clone()}));
        let causes = validate_create("CronJob", &bad);
        assert_eq!(
            causes[0].error_string(),
            "spec.schedule: Invalid value: \"* * *\": expected exactly 5 fields, found 3: [* * *]"
        );
        assert_eq!(
            causes[1].error_string(),
            "spec.timeZone: Invalid value: \"Nowhere/City\": unknown time zone Nowhere/City"
        );
        let tz = cron_job(json!({"schedule": "TZ=UTC 0 * * * *", "jobTemplate": jt.clone()}));
        assert_eq!(fields(&validate_create("CronJob", &tz)), vec!["spec.schedule"]);
        let mut long = ok.clone();
        long["metadata"]["name"] = json!("a".repeat(53));
        assert_eq!(fields(&validate_create("CronJob", &long)), vec!["metadata.name"]);
        let selected = cron_job(json!({"schedule": "@hourly", "concurrencyPolicy": "Sometimes",
            "jobTemplate": {"spec": {"selector": {"matchLabels": {"a": "b"}}, "template": template("Never")}}}));
        assert_eq!(
            fields(&validate_create("CronJob", &selected)),
            vec!["spec.concurrencyPolicy", "spec.jobTemplate.spec.selector"]
        );
    }
}
