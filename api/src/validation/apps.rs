//! Deployment and ReplicaSet validation: selectors, templates, strategies and status.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::{Map, Value};

use super::causes::{go_map, BadValue, Cause};
use super::json::{arr, has, int, obj, st, strs};
use super::meta::validate_labels;
use super::names::{label_value_errors, percent_errors, qualified_name_errors, IS_NEGATIVE_MSG};
use super::obj_or_null;
use super::pod_template::validate_pod_template_spec;

pub(crate) fn validate_label_selector(sel: &Value, path: &str, out: &mut Vec<Cause>) {
    validate_labels(obj(sel, "matchLabels"), &format!("{path}.matchLabels"), out);
    for (i, req) in arr(sel, "matchExpressions").iter().enumerate() {
        let p = format!("{path}.matchExpressions[{i}]");
        let values = strs(req, "values");
        match st(req, "operator") {
            "In" | "NotIn" if values.is_empty() => {
                out.push(Cause::required(format!("{p}.values"), "must be specified when `operator` is 'In' or 'NotIn'"))
            }
            "Exists" | "DoesNotExist" if !values.is_empty() => out.push(Cause::forbidden(
                format!("{p}.values"),
                "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
            )),
            "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
            op => out.push(Cause::invalid(format!("{p}.operator"), op, "not a valid selector operator")),
        }
        let key = st(req, "key");
        out.extend(qualified_name_errors(key).iter().map(|m| Cause::invalid(format!("{p}.key"), key, m)));
        for (j, v) in values.iter().enumerate() {
            out.extend(label_value_errors(v).iter().map(|m| Cause::invalid(format!("{p}.values[{j}]"), v, m)));
        }
    }
}

fn selector_is_empty(sel: &Value) -> bool {
    obj(sel, "matchLabels").is_none_or(Map::is_empty) && arr(sel, "matchExpressions").is_empty()
}

fn selector_matches(sel: &Value, labels: Option<&Map<String, Value>>) -> bool {
    let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
    let labels_ok =
        obj(sel, "matchLabels").is_none_or(|m| m.iter().all(|(k, v)| get(k).is_some() && get(k) == v.as_str()));
    labels_ok
        && arr(sel, "matchExpressions").iter().all(|req| {
            let key = st(req, "key");
            let values = strs(req, "values");
            match st(req, "operator") {
                "In" => get(key).is_some_and(|v| values.iter().any(|x| x == v)),
                "NotIn" => get(key).is_none_or(|v| !values.iter().any(|x| x == v)),
                "Exists" => get(key).is_some(),
                "DoesNotExist" => get(key).is_none(),
                _ => false,
            }
        })
}

/// The generated `String()` of `*metav1.LabelSelector`, which Go prints for selector errors.
pub(crate) fn label_selector_string(sel: Option<&Value>) -> String {
    let Some(sel) = sel.filter(|s| !s.is_null()) else {
        return "nil".to_string();
    };
    let mut labels = String::from("map[string]string{");
    if let Some(m) = obj(sel, "matchLabels") {
        let sorted: BTreeMap<&String, &Value> = m.iter().collect();
        for (k, v) in sorted {
            let _ = write!(labels, "{k}: {},", v.as_str().unwrap_or(""));
        }
    }
    labels.push('}');
    let mut exprs = String::from("[]LabelSelectorRequirement{");
    for req in arr(sel, "matchExpressions") {
        let _ = write!(
            exprs,
            "LabelSelectorRequirement{{Key:{},Operator:{},Values:[{}],}},",
            st(req, "key"),
            st(req, "operator"),
            strs(req, "values").join(" ")
        );
    }
    exprs.push('}');
    format!("&LabelSelector{{MatchLabels:{labels},MatchExpressions:{exprs},}}")
}

pub(crate) fn validate_nonnegative(v: &Value, key: &str, path: &str, out: &mut Vec<Cause>) {
    if let Some(n) = int(v, key) {
        if n < 0 {
            out.push(Cause::invalid(format!("{path}.{key}"), n, IS_NEGATIVE_MSG));
        }
    }
}

fn validate_selector_and_template(spec: &Value, out: &mut Vec<Cause>) {
    validate_workload_selector(spec, "spec", Some("deployment"), out);
    let template = obj_or_null(spec, "template");
    validate_workload_template(spec, template, "spec", &["Always"], Some("ReplicaSet"), out);
}

/// `<path>.selector`: required, a valid label selector, and not empty when `empty_word` names the
/// owner kind for the message (`empty selector is invalid for deployment`).
pub(super) fn validate_workload_selector(spec: &Value, path: &str, empty_word: Option<&str>, out: &mut Vec<Cause>) {
    match spec.get("selector").filter(|s| !s.is_null()) {
        None => out.push(Cause::required(format!("{path}.selector"), "")),
        Some(sel) => {
            validate_label_selector(sel, &format!("{path}.selector"), out);
            if let Some(word) = empty_word.filter(|_| selector_is_empty(sel)) {
                out.push(Cause::invalid(
                    format!("{path}.selector"),
                    BadValue::Raw(label_selector_string(Some(sel))),
                    &format!("empty selector is invalid for {word}"),
                ));
            }
        }
    }
}

/// A workload's pod `template` (given separately, so a caller may validate an amended copy): its
/// labels match `<path>.selector`, it is a valid PodTemplateSpec, its restartPolicy is one of
/// `restart`, and activeDeadlineSeconds is forbidden when `deadline_kind` names the owner.
pub(super) fn validate_workload_template(
    spec: &Value,
    template: &Value,
    path: &str,
    restart: &[&str],
    deadline_kind: Option<&str>,
    out: &mut Vec<Cause>,
) {
    let tmeta = obj_or_null(template, "metadata");
    let tlabels = obj(tmeta, "labels");
    if let Some(sel) = spec.get("selector").filter(|s| !s.is_null() && !selector_is_empty(s)) {
        if !selector_matches(sel, tlabels) {
            out.push(Cause::invalid(
                format!("{path}.template.metadata.labels"),
                BadValue::Raw(go_map(tlabels)),
                "`selector` does not match template `labels`",
            ));
        }
    }
    validate_pod_template_spec(template, &format!("{path}.template"), out);
    let tspec = obj_or_null(template, "spec");
    let rp = st(tspec, "restartPolicy");
    if !rp.is_empty() && !restart.contains(&rp) {
        out.push(Cause::not_supported(format!("{path}.template.spec.restartPolicy"), rp, restart));
    }
    if let Some(kind) = deadline_kind.filter(|_| has(tspec, "activeDeadlineSeconds")) {
        out.push(Cause::forbidden(
            format!("{path}.template.spec.activeDeadlineSeconds"),
            &format!("activeDeadlineSeconds in {kind} is not Supported"),
        ));
    }
}

pub(super) fn validate_replica_set_spec(spec: &Value, out: &mut Vec<Cause>) {
    validate_nonnegative(spec, "replicas", "spec", out);
    validate_nonnegative(spec, "minReadySeconds", "spec", out);
    validate_selector_and_template(spec, out);
}

/// An IntOrString as Go prints it (`25%` or `1`), and its value for the both-zero check.
pub(crate) fn int_or_percent(v: Option<&Value>) -> Option<(String, i64)> {
    match v? {
        Value::Number(n) => {
            let n = n.as_i64().unwrap_or(0);
            Some((n.to_string(), n))
        }
        Value::String(s) => {
            let n = s.strip_suffix('%').and_then(|d| d.parse::<i64>().ok()).unwrap_or(0);
            Some((s.clone(), n))
        }
        _ => None,
    }
}

pub(super) fn validate_deployment_spec(spec: &Value, out: &mut Vec<Cause>) {
    validate_nonnegative(spec, "replicas", "spec", out);
    validate_selector_and_template(spec, out);
    let strategy = obj_or_null(spec, "strategy");
    match st(strategy, "type") {
        "Recreate" => {
            if has(strategy, "rollingUpdate") {
                out.push(Cause::forbidden(
                    "spec.strategy.rollingUpdate",
                    "may not be specified when strategy `type` is 'Recreate'",
                ));
            }
        }
        "RollingUpdate" | "" => {
            let ru = obj_or_null(strategy, "rollingUpdate");
            let p = "spec.strategy.rollingUpdate";
            let mut zero = [false, false];
            for (idx, key) in ["maxUnavailable", "maxSurge"].iter().enumerate() {
                let Some((shown, n)) = int_or_percent(ru.get(*key)) else {
                    continue;
                };
                zero[idx] = n == 0;
                if let Some(Value::String(s)) = ru.get(*key) {
                    out.extend(
                        percent_errors(s)
                            .iter()
                            .map(|m| Cause::invalid(format!("{p}.{key}"), BadValue::Raw(shown.clone()), m)),
                    );
                } else if n < 0 {
                    out.push(Cause::invalid(format!("{p}.{key}"), n, IS_NEGATIVE_MSG));
                }
            }
            let both_set = has(ru, "maxUnavailable") && has(ru, "maxSurge");
            if both_set && zero[0] && zero[1] {
                let shown = int_or_percent(ru.get("maxUnavailable")).map_or_else(String::new, |s| s.0);
                out.push(Cause::invalid(
                    format!("{p}.maxUnavailable"),
                    BadValue::Raw(shown),
                    "may not be 0 when `maxSurge` is 0",
                ));
            }
            if let Some(Value::String(s)) = ru.get("maxUnavailable") {
                if percent_errors(s).is_empty() && s.trim_end_matches('%').parse::<i64>().is_ok_and(|n| n > 100) {
                    out.push(Cause::invalid(
                        format!("{p}.maxUnavailable"),
                        BadValue::Raw(s.clone()),
                        "must not be greater than 100%",
                    ));
                }
            }
        }
        other => out.push(Cause::not_supported("spec.strategy.type", other, &["Recreate", "RollingUpdate"])),
    }
    validate_nonnegative(spec, "minReadySeconds", "spec", out);
    validate_nonnegative(spec, "revisionHistoryLimit", "spec", out);
    if let Some(pds) = int(spec, "progressDeadlineSeconds") {
        if pds < 0 {
            out.push(Cause::invalid("spec.progressDeadlineSeconds", pds, IS_NEGATIVE_MSG));
        }
        if pds <= int(spec, "minReadySeconds").unwrap_or(0) {
            out.push(Cause::invalid("spec.progressDeadlineSeconds", pds, "must be greater than minReadySeconds"));
        }
    }
}

pub(super) fn validate_replica_status(status: &Value, nonneg: &[&str], bounded: &[&str], out: &mut Vec<Cause>) {
    for key in nonneg {
        validate_nonnegative(status, key, "status", out);
    }
    let replicas = int(status, "replicas").unwrap_or(0);
    for key in bounded {
        let n = int(status, key).unwrap_or(0);
        if n > replicas {
            out.push(Cause::invalid(format!("status.{key}"), n, "cannot be greater than status.replicas"));
        }
    }
    let available = int(status, "availableReplicas").unwrap_or(0);
    if available > int(status, "readyReplicas").unwrap_or(0) {
        out.push(Cause::invalid("status.availableReplicas", available, "cannot be greater than readyReplicas"));
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::validation::test_support::{deployment, fields};
    use crate::validation::{validate_create, validate_update};

    #[test]
    fn deployment_selector_must_match_template_labels() {
        let d = deployment(json!({"matchLabels": {"app": "web"}}), json!({"app": "api", "tier": "x"}));
        let causes = validate_create("Deployment", &d);
        assert_eq!(causes.len(), 1);
        assert_eq!(causes[0].field, "spec.template.metadata.labels");
        assert_eq!(
            causes[0].message,
            "Invalid value: map[string]string{\"app\":\"api\", \"tier\":\"x\"}: `selector` does not match template `labels`"
        );
        let ok = deployment(
            json!({"matchExpressions": [{"key": "app", "operator": "In", "values": ["web"]}]}),
            json!({"app": "web"}),
        );
        assert_eq!(validate_create("Deployment", &ok), vec![]);
    }

    #[test]
    fn deployment_needs_a_non_empty_selector_and_always_restart() {
        let mut d = deployment(json!({}), json!({"app": "web"}));
        d["spec"]["template"]["spec"]["restartPolicy"] = json!("Never");
        d["spec"]["replicas"] = json!(-1);
        let causes = validate_create("Deployment", &d);
        assert_eq!(fields(&causes), vec!["spec.replicas", "spec.selector", "spec.template.spec.restartPolicy"]);
        let mut no_sel = deployment(json!({}), json!({}));
        no_sel["spec"].as_object_mut().into_iter().for_each(|s| {
            s.remove("selector");
        });
        assert_eq!(validate_create("Deployment", &no_sel), vec![Cause::required("spec.selector", "")]);
    }

    #[test]
    fn deployment_template_pod_spec_is_validated_under_its_path() {
        let d = deployment(json!({"matchLabels": {"app": "web"}}), json!({"app": "web"}));
        let mut bad = d.clone();
        bad["spec"]["template"]["spec"]["containers"][0]["image"] = json!("");
        assert_eq!(fields(&validate_create("Deployment", &bad)), vec!["spec.template.spec.containers[0].image"]);
    }

    #[test]
    fn rolling_update_may_not_have_both_zero() {
        let mut d = deployment(json!({"matchLabels": {"app": "web"}}), json!({"app": "web"}));
        d["spec"]["strategy"] =
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": "0%"}});
        let causes = validate_create("Deployment", &d);
        assert_eq!(
            causes,
            vec![Cause::invalid(
                "spec.strategy.rollingUpdate.maxUnavailable",
                BadValue::Raw("0".into()),
                "may not be 0 when `maxSurge` is 0"
            )]
        );
        d["spec"]["strategy"] = json!({"type": "Blue"});
        assert_eq!(fields(&validate_create("Deployment", &d)), vec!["spec.strategy.type"]);
    }

    #[test]
    fn deployment_selector_is_immutable() {
        let old = deployment(json!({"matchLabels": {"app": "web"}}), json!({"app": "web", "v": "2"}));
        let new = deployment(json!({"matchLabels": {"app": "web", "v": "2"}}), json!({"app": "web", "v": "2"}));
        let causes = validate_update("Deployment", &new, &old);
        assert_eq!(
            causes,
            vec![Cause::invalid(
                "spec.selector",
                BadValue::Raw("&LabelSelector{MatchLabels:map[string]string{app: web,v: 2,},MatchExpressions:[]LabelSelectorRequirement{},}".into()),
                "field is immutable"
            )]
        );
        assert_eq!(fields(&validate_update("ReplicaSet", &new, &old)), vec!["spec.selector"]);
    }
}
