//! policy/v1 PodDisruptionBudget: how many of a set of pods voluntary disruptions (the eviction
//! subresource, `kubectl drain`) may take down at once; the disruption controller writes status.

use k8s_openapi::api::policy::v1 as policy;
use serde_json::{json, Value};

use super::{roundtrip, Strategy};
use crate::resources::{ResourceInfo, Subresource};
use crate::schema::SchemaError;
use crate::table::columns::{Column, AGE};
use crate::table::obj::Obj;
use crate::validation::apps::{int_or_percent, validate_label_selector, validate_nonnegative};
use crate::validation::json::st;
use crate::validation::names::{percent_errors, IS_NEGATIVE_MSG};
use crate::validation::{BadValue, Cause};

pub struct PodDisruptionBudget;

pub const INFO: ResourceInfo = crate::kind_info!(
    "policy",
    "PodDisruptionBudget",
    "poddisruptionbudgets",
    "poddisruptionbudget",
    true,
    &["pdb"],
    &[Subresource::Status],
    &PodDisruptionBudget
);

const EVICTION_POLICIES: [&str; 2] = ["AlwaysAllow", "IfHealthyBudget"];

/// `ValidatePositiveIntOrPercent` and `IsNotMoreThan100Percent` for `spec.<key>`.
fn validate_int_or_percent(spec: &Value, key: &str, out: &mut Vec<Cause>) {
    let Some(v) = spec.get(key).filter(|v| !v.is_null()) else { return };
    let p = format!("spec.{key}");
    match v {
        Value::String(s) => {
            let errs = percent_errors(s);
            out.extend(errs.iter().map(|m| Cause::invalid(p.as_str(), BadValue::Raw(s.clone()), m)));
            if errs.is_empty() && s.trim_end_matches('%').parse::<i64>().is_ok_and(|n| n > 100) {
                out.push(Cause::invalid(p.as_str(), BadValue::Raw(s.clone()), "must not be greater than 100%"));
            }
        }
        _ => {
            let n = int_or_percent(Some(v)).map_or(0, |(_, n)| n);
            if n < 0 {
                out.push(Cause::invalid(p, n, IS_NEGATIVE_MSG));
            }
        }
    }
}

impl Strategy for PodDisruptionBudget {
    fn normalize(&self, obj: &Value) -> Result<Value, SchemaError> {
        roundtrip::<policy::PodDisruptionBudget>(obj)
    }

    fn defaults(&self, obj: &mut Value) {
        // PodDisruptionBudgetStatus.DisruptedPods etc. are zero-valued structs in Go: the counts show as 0.
        if let Some(status) = obj.get_mut("status").and_then(Value::as_object_mut) {
            for key in ["disruptionsAllowed", "currentHealthy", "desiredHealthy", "expectedPods"] {
                crate::defaults::json::default_value(status, key, json!(0));
            }
        }
    }

    fn validate(&self, o: &Value, out: &mut Vec<Cause>) {
        let spec = o.get("spec").unwrap_or(&Value::Null);
        let set = |k: &str| spec.get(k).is_some_and(|v| !v.is_null());
        if set("minAvailable") && set("maxUnavailable") {
            out.push(Cause::invalid(
                "spec",
                BadValue::Raw(spec.to_string()),
                "minAvailable and maxUnavailable cannot be both set",
            ));
        }
        validate_int_or_percent(spec, "minAvailable", out);
        validate_int_or_percent(spec, "maxUnavailable", out);
        if let Some(sel) = spec.get("selector").filter(|s| !s.is_null()) {
            validate_label_selector(sel, "spec.selector", out);
        }
        let policy = st(spec, "unhealthyPodEvictionPolicy");
        if !policy.is_empty() && !EVICTION_POLICIES.contains(&policy) {
            out.push(Cause::not_supported("spec.unhealthyPodEvictionPolicy", policy, &EVICTION_POLICIES));
        }
    }

    fn validate_status(&self, new: &Value, _old: &Value, out: &mut Vec<Cause>) {
        let status = new.get("status").unwrap_or(&Value::Null);
        for key in ["disruptionsAllowed", "currentHealthy", "desiredHealthy", "expectedPods"] {
            validate_nonnegative(status, key, "status", out);
        }
    }

    fn resets_status_on_create(&self) -> bool {
        true
    }

    fn tracks_generation(&self) -> bool {
        true
    }

    fn columns(&self) -> Vec<Column> {
        vec![
            ("Min Available", "string", "", 0, "The minimum number of pods that must be available simultaneously.  This can be either an integer or percentage."),
            ("Max Unavailable", "string", "", 0, "The maximum number of pods that may be unavailable.  This can be either an integer or percentage."),
            ("Allowed Disruptions", "integer", "", 0, "Calculated number of pods that may be disrupted at this time."),
            AGE,
        ]
    }

    fn cells(&self, o: Obj<'_>, age: &Value) -> Vec<Value> {
        let shown =
            |k: &str| int_or_percent(o.get(k).filter(|v| !v.is_null())).map_or_else(|| "N/A".to_owned(), |(s, _)| s);
        vec![
            json!(shown("spec.minAvailable")),
            json!(shown("spec.maxUnavailable")),
            json!(o.int("status.disruptionsAllowed")),
            age.clone(),
        ]
    }
}

/// `UpdateDisruptionAllowedCondition`: DisruptionAllowed True (SufficientPods) while the budget
/// allows a disruption, False (InsufficientPods) when not; the transition time moves only with
/// the status.
pub fn set_allowed_condition(pdb: &mut Value, now: String) {
    let allowed = pdb.pointer("/status/disruptionsAllowed").and_then(Value::as_i64).unwrap_or(0) > 0;
    let (status, reason) = if allowed { ("True", "SufficientPods") } else { ("False", "InsufficientPods") };
    let generation = pdb.pointer("/metadata/generation").and_then(Value::as_i64).unwrap_or(0);
    let Some(st) = pdb.get_mut("status").and_then(Value::as_object_mut) else { return };
    let list = st.entry("conditions").or_insert_with(|| json!([]));
    if !list.is_array() {
        *list = json!([]);
    }
    let list = list.as_array_mut().expect("an array");
    let wanted = json!({"type": "DisruptionAllowed", "status": status, "reason": reason, "message": "",
        "observedGeneration": generation, "lastTransitionTime": now});
    match list.iter_mut().find(|c| c.get("type").and_then(Value::as_str) == Some("DisruptionAllowed")) {
        Some(c) if c.get("status").and_then(Value::as_str) == Some(status) => {
            c["reason"] = json!(reason);
            c["observedGeneration"] = json!(generation);
        }
        Some(c) => *c = wanted,
        None => list.push(wanted),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kinds::test_support::{cells, create_causes, defaulted, fields};

    fn pdb(spec: Value) -> Value {
        json!({"metadata": {"name": "web", "namespace": "d"}, "spec": spec})
    }

    #[test]
    fn one_of_min_available_or_max_unavailable_within_bounds() {
        assert_eq!(
            create_causes(
                "PodDisruptionBudget",
                &pdb(json!({"minAvailable": 2, "selector": {"matchLabels": {"a": "b"}}}))
            ),
            vec![]
        );
        assert_eq!(create_causes("PodDisruptionBudget", &pdb(json!({"maxUnavailable": "25%"}))), vec![]);
        let both = create_causes("PodDisruptionBudget", &pdb(json!({"minAvailable": 1, "maxUnavailable": 1})));
        assert_eq!(fields(&both), ["spec"]);
        assert!(both[0].message.ends_with("minAvailable and maxUnavailable cannot be both set"), "{both:?}");
        assert_eq!(
            fields(&create_causes("PodDisruptionBudget", &pdb(json!({"minAvailable": "150%"})))),
            ["spec.minAvailable"]
        );
        assert_eq!(
            fields(&create_causes("PodDisruptionBudget", &pdb(json!({"maxUnavailable": -1})))),
            ["spec.maxUnavailable"]
        );
        let bad = pdb(json!({"minAvailable": 1, "unhealthyPodEvictionPolicy": "Sometimes"}));
        assert_eq!(fields(&create_causes("PodDisruptionBudget", &bad)), ["spec.unhealthyPodEvictionPolicy"]);
    }

    #[test]
    fn kubectl_prints_the_budget() {
        let mut p = defaulted("PodDisruptionBudget", pdb(json!({"minAvailable": "50%"})));
        p["status"]["disruptionsAllowed"] = json!(2);
        assert_eq!(cells("PodDisruptionBudget", &p)[..4], [json!("web"), json!("50%"), json!("N/A"), json!(2)]);
    }
}
