//! DaemonSet, StatefulSet and ControllerRevision validation (`pkg/apis/apps/validation`).

use serde_json::{json, Value};

use super::apps::{int_or_percent, validate_nonnegative, validate_workload_selector, validate_workload_template};
use super::causes::{BadValue, Cause};
use super::json::{arr, has, int, semantic_eq, st};
use super::names::{percent_errors, IMMUTABLE_MSG, IS_NEGATIVE_MSG};
use super::obj_or_null;
use super::storage::validate_claim_spec;

pub(super) fn validate_daemon_set_spec(spec: &Value, out: &mut Vec<Cause>) {
    validate_workload_selector(spec, "spec", Some("daemonset"), out);
    validate_workload_template(spec, obj_or_null(spec, "template"), "spec", &["Always"], Some("DaemonSet"), out);
    validate_nonnegative(spec, "minReadySeconds", "spec", out);
    validate_nonnegative(spec, "revisionHistoryLimit", "spec", out);
    let strategy = obj_or_null(spec, "updateStrategy");
    let p = "spec.updateStrategy";
    match st(strategy, "type") {
        "OnDelete" => {}
        "RollingUpdate" => match strategy.get("rollingUpdate").filter(|r| !r.is_null()) {
            None => out.push(Cause::required(format!("{p}.rollingUpdate"), "")),
            Some(ru) => validate_rolling_update_daemon_set(ru, &format!("{p}.rollingUpdate"), out),
        },
        other => out.push(Cause::not_supported(p, other, &["RollingUpdate", "OnDelete"])),
    }
}

/// A positive int or a valid percent, at most 100%; returns its value for the zero checks.
fn positive_int_or_percent(v: Option<&Value>, path: &str, out: &mut Vec<Cause>) -> i64 {
    let Some((shown, n)) = int_or_percent(v) else { return 0 };
    match v {
        Some(Value::String(s)) => {
            let errs = percent_errors(s);
            out.extend(errs.iter().map(|m| Cause::invalid(path, BadValue::Raw(shown.clone()), m)));
            if errs.is_empty() && n > 100 {
                out.push(Cause::invalid(path, BadValue::Raw(shown), "must not be greater than 100%"));
            }
        }
        _ if n < 0 => out.push(Cause::invalid(path, n, IS_NEGATIVE_MSG)),
        _ => {}
    }
    n
}

fn validate_rolling_update_daemon_set(ru: &Value, p: &str, out: &mut Vec<Cause>) {
    let unavailable = positive_int_or_percent(ru.get("maxUnavailable"), &format!("{p}.maxUnavailable"), out);
    let surge = positive_int_or_percent(ru.get("maxSurge"), &format!("{p}.maxSurge"), out);
    match (unavailable != 0, surge != 0) {
        (true, true) => {
            let shown = int_or_percent(ru.get("maxSurge")).map_or_else(String::new, |s| s.0);
            out.push(Cause::invalid(
                format!("{p}.maxSurge"),
                BadValue::Raw(shown),
                "may not be set when maxUnavailable is non-zero",
            ));
        }
        (false, false) => out.push(Cause::required(format!("{p}.maxUnavailable"), "cannot be 0 when maxSurge is 0")),
        _ => {}
    }
}

pub(super) fn validate_stateful_set_spec(spec: &Value, out: &mut Vec<Cause>) {
    match st(spec, "podManagementPolicy") {
        "" => out.push(Cause::required("spec.podManagementPolicy", "")),
        "OrderedReady" | "Parallel" => {}
        other => out.push(Cause::invalid("spec.podManagementPolicy", other, "must be 'OrderedReady' or 'Parallel'")),
    }
    let strategy = obj_or_null(spec, "updateStrategy");
    match st(strategy, "type") {
        "" => out.push(Cause::required("spec.updateStrategy", "")),
        "OnDelete" => {
            if let Some(ru) = strategy.get("rollingUpdate").filter(|r| !r.is_null()) {
                out.push(Cause::invalid(
                    "spec.updateStrategy.rollingUpdate",
                    BadValue::Raw(ru.to_string()),
                    "only allowed for updateStrategy 'RollingUpdate'",
                ));
            }
        }
        "RollingUpdate" => {
            let ru = obj_or_null(strategy, "rollingUpdate");
            let p = "spec.updateStrategy.rollingUpdate";
            validate_nonnegative(ru, "partition", p, out);
            if has(ru, "maxUnavailable") {
                let path = format!("{p}.maxUnavailable");
                if positive_int_or_percent(ru.get("maxUnavailable"), &path, out) == 0 {
                    let shown = int_or_percent(ru.get("maxUnavailable")).map_or_else(String::new, |s| s.0);
                    out.push(Cause::invalid(path, BadValue::Raw(shown), "cannot be 0"));
                }
            }
        }
        other => out.push(Cause::invalid(
            "spec.updateStrategy",
            BadValue::Raw(format!("{{Type:{other}}}")),
            "must be 'RollingUpdate' or 'OnDelete'",
        )),
    }
    let policy = obj_or_null(spec, "persistentVolumeClaimRetentionPolicy");
    for key in ["whenDeleted", "whenScaled"] {
        let v = st(policy, key);
        if !policy.is_null() && !matches!(v, "Retain" | "Delete") {
            let path = format!("spec.persistentVolumeClaimRetentionPolicy.{key}");
            out.push(Cause::not_supported(path, v, &["Retain", "Delete"]));
        }
    }
    validate_nonnegative(spec, "replicas", "spec", out);
    validate_nonnegative(spec, "minReadySeconds", "spec", out);
    if let Some(start) = int(obj_or_null(spec, "ordinals"), "start") {
        if start < 0 {
            out.push(Cause::invalid("spec.ordinals.start", start, IS_NEGATIVE_MSG));
        }
    }
    validate_workload_selector(spec, "spec", Some("statefulset"), out);
    // Containers mount the claim templates by name: check the template as the pods will be.
    let mut template = obj_or_null(spec, "template").clone();
    let claims: Vec<&str> =
        arr(spec, "volumeClaimTemplates").iter().map(|c| st(obj_or_null(c, "metadata"), "name")).collect();
    if let Some(tspec) = template.get_mut("spec").and_then(Value::as_object_mut) {
        let volumes = tspec.entry("volumes").or_insert_with(|| json!([]));
        if let Some(list) = volumes.as_array_mut() {
            for name in claims.iter().filter(|n| !n.is_empty()) {
                if !list.iter().any(|v| st(v, "name") == *name) {
                    list.push(json!({"name": name, "persistentVolumeClaim": {"claimName": name}}));
                }
            }
        }
    }
    validate_workload_template(spec, &template, "spec", &["Always"], Some("StatefulSet"), out);
    for (i, claim) in arr(spec, "volumeClaimTemplates").iter().enumerate() {
        let p = format!("spec.volumeClaimTemplates[{i}]");
        if st(obj_or_null(claim, "metadata"), "name").is_empty() {
            out.push(Cause::required(format!("{p}.metadata.name"), ""));
        }
        validate_claim_spec(obj_or_null(claim, "spec"), &format!("{p}.spec"), out);
    }
}

/// What a StatefulSet update may change: replicas, ordinals, template, updateStrategy, the claim
/// retention policy and minReadySeconds.
pub(super) fn validate_stateful_set_update(new_spec: &Value, old_spec: &Value, out: &mut Vec<Cause>) {
    let mutable = [
        "replicas",
        "ordinals",
        "template",
        "updateStrategy",
        "persistentVolumeClaimRetentionPolicy",
        "minReadySeconds",
    ];
    let strip = |v: &Value| {
        let mut v = v.clone();
        if let Some(m) = v.as_object_mut() {
            for k in mutable {
                m.remove(k);
            }
        }
        v
    };
    if !semantic_eq(Some(&strip(new_spec)), Some(&strip(old_spec))) {
        out.push(Cause::forbidden(
            "spec",
            "updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', \
             'updateStrategy', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden",
        ));
    }
}

pub(super) fn validate_controller_revision(cr: &Value, out: &mut Vec<Cause>) {
    if cr.get("data").is_none_or(Value::is_null) {
        out.push(Cause::required("data", "data is mandatory"));
    }
    if let Some(r) = int(cr, "revision") {
        if r < 0 {
            out.push(Cause::invalid("revision", r, IS_NEGATIVE_MSG));
        }
    }
}

pub(super) fn validate_controller_revision_update(new: &Value, old: &Value, out: &mut Vec<Cause>) {
    if !semantic_eq(new.get("data"), old.get("data")) {
        let shown = new.get("data").map_or_else(|| "null".to_string(), Value::to_string);
        out.push(Cause::invalid("data", BadValue::Raw(shown), IMMUTABLE_MSG));
    }
}

/// The status checks shared by DaemonSet and StatefulSet writers.
pub(super) fn validate_collision_count(new: &Value, old: &Value, out: &mut Vec<Cause>) {
    let new_n = int(obj_or_null(new, "status"), "collisionCount");
    let old_n = int(obj_or_null(old, "status"), "collisionCount");
    if let Some(old_n) = old_n {
        if new_n.unwrap_or(0) < old_n {
            out.push(Cause::invalid("status.collisionCount", new_n.unwrap_or(0), "cannot be decremented"));
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::validation::test_support::fields;
    use crate::validation::{validate_create, validate_status_update, validate_update};

    fn template() -> serde_json::Value {
        json!({"metadata": {"labels": {"app": "x"}}, "spec": {"restartPolicy": "Always",
            "containers": [{"name": "a", "image": "busybox", "volumeMounts": [{"name": "data", "mountPath": "/data"}]}]}})
    }

    fn obj(kind: &str, spec: serde_json::Value) -> serde_json::Value {
        let mut o = json!({"metadata": {"name": "web", "namespace": "d"}, "spec": spec});
        crate::defaults::apply_defaults(kind, &mut o);
        o
    }

    #[test]
    fn daemon_set_rolling_updates_need_exactly_one_non_zero_budget() {
        let mut t = template();
        t["spec"]["volumes"] = json!([{"name": "data", "emptyDir": {}}]);
        let ok = obj("DaemonSet", json!({"selector": {"matchLabels": {"app": "x"}}, "template": t.clone()}));
        assert_eq!(validate_create("DaemonSet", &ok), vec![]);
        let both = obj(
            "DaemonSet",
            json!({"selector": {"matchLabels": {"app": "x"}}, "template": t.clone(),
                "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": "10%"}}}),
        );
        let causes = validate_create("DaemonSet", &both);
        assert_eq!(
            causes[0].error_string(),
            "spec.updateStrategy.rollingUpdate.maxSurge: Invalid value: 10%: may not be set when maxUnavailable is non-zero"
        );
        let none = obj(
            "DaemonSet",
            json!({"selector": {"matchLabels": {"app": "x"}}, "template": t.clone(),
                "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 0}}}),
        );
        assert_eq!(
            validate_create("DaemonSet", &none)[0].error_string(),
            "spec.updateStrategy.rollingUpdate.maxUnavailable: Required value: cannot be 0 when maxSurge is 0"
        );
        let mut jobby = ok.clone();
        jobby["spec"]["template"]["spec"]["restartPolicy"] = json!("Never");
        jobby["spec"]["selector"] = json!({});
        assert_eq!(
            fields(&validate_create("DaemonSet", &jobby)),
            vec!["spec.selector", "spec.template.spec.restartPolicy"]
        );
    }

    #[test]
    fn stateful_set_mounts_may_name_claim_templates_and_only_some_fields_change() {
        let claim = json!({"metadata": {"name": "data"},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}});
        let sts = obj(
            "StatefulSet",
            json!({"serviceName": "web", "selector": {"matchLabels": {"app": "x"}}, "template": template(),
                "volumeClaimTemplates": [claim]}),
        );
        assert_eq!(validate_create("StatefulSet", &sts), vec![]);
        let mut no_claim = sts.clone();
        no_claim["spec"]["volumeClaimTemplates"] = json!([]);
        assert_eq!(
            fields(&validate_create("StatefulSet", &no_claim)),
            vec!["spec.template.spec.containers[0].volumeMounts[0].name"]
        );
        let mut scaled = sts.clone();
        scaled["spec"]["replicas"] = json!(5);
        scaled["spec"]["template"]["spec"]["containers"][0]["image"] = json!("busybox:2");
        assert_eq!(validate_update("StatefulSet", &scaled, &sts), vec![]);
        let mut renamed = sts.clone();
        renamed["spec"]["serviceName"] = json!("other");
        assert_eq!(fields(&validate_update("StatefulSet", &renamed, &sts)), vec!["spec"]);
        let mut bad = sts.clone();
        bad["spec"]["podManagementPolicy"] = json!("Random");
        bad["spec"]["updateStrategy"] = json!({"type": "OnDelete", "rollingUpdate": {"partition": 1}});
        assert_eq!(
            fields(&validate_create("StatefulSet", &bad)),
            vec!["spec.podManagementPolicy", "spec.updateStrategy.rollingUpdate"]
        );
    }

    #[test]
    fn stateful_set_status_counts_are_bounded_and_collisions_only_grow() {
        let old =
            json!({"metadata": {"name": "web", "namespace": "d"}, "status": {"replicas": 2, "collisionCount": 1}});
        let mut new = old.clone();
        new["status"] = json!({"replicas": 2, "readyReplicas": 3, "collisionCount": 0});
        assert_eq!(
            fields(&validate_status_update("StatefulSet", &new, &old)),
            vec!["status.readyReplicas", "status.collisionCount"]
        );
    }

    #[test]
    fn controller_revisions_need_data_that_never_changes() {
        let cr = json!({"metadata": {"name": "web-1", "namespace": "d"}, "revision": 1, "data": {"spec": {}}});
        assert_eq!(validate_create("ControllerRevision", &cr), vec![]);
        let missing = json!({"metadata": {"name": "web-1", "namespace": "d"}, "revision": -1});
        assert_eq!(fields(&validate_create("ControllerRevision", &missing)), vec!["data", "revision"]);
        let mut changed = cr.clone();
        changed["data"] = json!({"spec": {"x": 1}});
        assert_eq!(fields(&validate_update("ControllerRevision", &changed, &cr)), vec!["data"]);
    }
}
