//! scheduling.k8s.io/v1 PriorityClass: a named pod priority (the Priority admission plugin
//! resolves `spec.priorityClassName` through it).

use k8s_openapi::api::scheduling::v1 as scheduling;
use serde_json::{json, Value};

use super::{roundtrip, Strategy};
use crate::resources::ResourceInfo;
use crate::schema::SchemaError;
use crate::table::columns::{Column, AGE};
use crate::table::obj::Obj;
use crate::validation::json::{int, st};
use crate::validation::Cause;

pub struct PriorityClass;

pub const INFO: ResourceInfo = crate::kind_info!(
    "scheduling.k8s.io",
    "PriorityClass",
    "priorityclasses",
    "priorityclass",
    false,
    &["pc"],
    &[],
    &PriorityClass
);

/// The highest value a user-defined class may have (`HighestUserDefinablePriority`).
pub const HIGHEST_USER_DEFINABLE: i64 = 1_000_000_000;
/// The classes the apiserver creates and keeps (`SystemPriorityClasses`), with their values.
pub const SYSTEM_CLASSES: [(&str, i64, &str); 2] = [
    (
        "system-node-critical",
        2_000_001_000,
        "Used for system critical pods that must not be moved from their current node.",
    ),
    (
        "system-cluster-critical",
        2_000_000_000,
        "Used for system critical pods that must run in the cluster, but can be moved to another node if necessary.",
    ),
];
const RESERVED_PREFIX: &str = "system-";
const POLICIES: [&str; 2] = ["Never", "PreemptLowerPriority"];

/// One of the built-in classes as the apiserver stores it.
fn system_class(name: &str, value: i64, description: &str) -> Value {
    json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name},
        "value": value, "description": description, "preemptionPolicy": "PreemptLowerPriority"})
}

impl Strategy for PriorityClass {
    fn normalize(&self, obj: &Value) -> Result<Value, SchemaError> {
        roundtrip::<scheduling::PriorityClass>(obj)
    }

    fn defaults(&self, obj: &mut Value) {
        if let Some(m) = obj.as_object_mut() {
            crate::defaults::json::default_str(m, "preemptionPolicy", "PreemptLowerPriority");
        }
    }

    fn validate(&self, o: &Value, out: &mut Vec<Cause>) {
        let name = o.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("");
        let value = int(o, "value").unwrap_or(0);
        // ValidatePriorityClass: only the system classes may use the reserved prefix or go
        // above the user range, and with exactly their own values.
        match SYSTEM_CLASSES.iter().find(|(n, _, _)| *n == name) {
            Some((_, v, _)) if *v != value => out.push(Cause::forbidden(
                "metadata.name",
                &format!("priority class {name} is a system class and must have value {v}"),
            )),
            Some(_) => {}
            None if name.starts_with(RESERVED_PREFIX) => {
                out.push(Cause::forbidden("metadata.name", "priority class names with 'system-' prefix are reserved"))
            }
            None if value > HIGHEST_USER_DEFINABLE => out.push(Cause::forbidden(
                "value",
                &format!("maximum allowed value of a user defined priority is {HIGHEST_USER_DEFINABLE}"),
            )),
            None => {}
        }
        let policy = st(o, "preemptionPolicy");
        if !policy.is_empty() && !POLICIES.contains(&policy) {
            out.push(Cause::not_supported("preemptionPolicy", policy, &POLICIES));
        }
    }

    fn validate_update(&self, new: &Value, old: &Value, out: &mut Vec<Cause>) {
        if int(new, "value") != int(old, "value") {
            out.push(Cause::forbidden("value", "may not be changed in an update."));
        }
        if st(new, "preemptionPolicy") != st(old, "preemptionPolicy") {
            out.push(Cause::invalid("preemptionPolicy", st(new, "preemptionPolicy"), "field is immutable"));
        }
    }

    fn forbids_delete(&self, obj: &Value) -> Option<String> {
        let name = obj.pointer("/metadata/name").and_then(Value::as_str)?;
        SYSTEM_CLASSES
            .iter()
            .any(|(n, _, _)| *n == name)
            .then(|| "this is a system priority class and cannot be deleted".to_owned())
    }

    fn builtin(&self) -> Vec<Value> {
        SYSTEM_CLASSES.iter().map(|(n, v, d)| system_class(n, *v, d)).collect()
    }

    fn columns(&self) -> Vec<Column> {
        vec![
            ("Value", "integer", "", 0, "The value of this priority class. This is the actual priority that pods receive when they have the name of this class in their pod spec."),
            ("Global-Default", "boolean", "", 0, "globalDefault specifies whether this PriorityClass should be considered as the default priority for pods that do not have any priority class. Only one PriorityClass can be marked as `globalDefault`. However, if more than one PriorityClasses exists with their `globalDefault` field set to true, the smallest value of such global default PriorityClasses will be used as the default priority."),
            AGE,
            ("PreemptionPolicy", "string", "", 0, "preemptionPolicy is the Policy for preempting pods with lower priority. One of Never, PreemptLowerPriority. Defaults to PreemptLowerPriority if unset."),
        ]
    }

    fn cells(&self, o: Obj<'_>, age: &Value) -> Vec<Value> {
        vec![json!(o.int("value")), json!(o.bool("globalDefault")), age.clone(), json!(o.str("preemptionPolicy"))]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kinds::test_support::{cells, create_causes, defaulted, fields, update_causes};

    fn class(name: &str, value: i64) -> Value {
        json!({"metadata": {"name": name}, "value": value})
    }

    #[test]
    fn user_classes_stay_below_the_system_range_and_prefix() {
        assert_eq!(create_causes("PriorityClass", &class("high", 1_000_000_000)), vec![]);
        let too_high = create_causes("PriorityClass", &class("high", 1_000_000_001));
        assert_eq!(
            too_high[0].error_string(),
            "value: Forbidden: maximum allowed value of a user defined priority is 1000000000"
        );
        assert_eq!(fields(&create_causes("PriorityClass", &class("system-mine", 5))), ["metadata.name"]);
        assert_eq!(create_causes("PriorityClass", &class("system-node-critical", 2_000_001_000)), vec![]);
        assert_eq!(fields(&create_causes("PriorityClass", &class("system-node-critical", 7))), ["metadata.name"]);
    }

    #[test]
    fn the_value_and_policy_are_fixed_and_defaulted() {
        assert_eq!(defaulted("PriorityClass", class("a", 1))["preemptionPolicy"], "PreemptLowerPriority");
        let system = PriorityClass.builtin();
        assert_eq!(system.len(), 2);
        for c in &system {
            assert_eq!(create_causes("PriorityClass", c), vec![], "{c}");
            assert!(PriorityClass.forbids_delete(c).is_some());
        }
        assert_eq!(PriorityClass.forbids_delete(&class("high", 5)), None);
        let causes = update_causes("PriorityClass", &class("a", 2), &class("a", 1));
        assert_eq!(causes[0].error_string(), "value: Forbidden: may not be changed in an update.");
        let row = cells("PriorityClass", &defaulted("PriorityClass", class("a", 1)));
        assert_eq!(row[..3], [json!("a"), json!(1), json!(false)]);
        assert_eq!(row[4], json!("PreemptLowerPriority"));
    }
}
