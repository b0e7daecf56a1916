//! flowcontrol.apiserver.k8s.io/v1 FlowSchema: which requests go to which priority level.

use k8s_openapi::api::flowcontrol::v1 as fc;
use serde_json::{json, Value};

use super::{roundtrip, Strategy};
use crate::resources::{ResourceInfo, Subresource};
use crate::schema::SchemaError;
use crate::table::columns::{Column, AGE};
use crate::table::obj::Obj;
use crate::validation::json::{arr, int, st};
use crate::validation::names::dns1123_subdomain_errors;
use crate::validation::Cause;

pub struct FlowSchema;

pub const INFO: ResourceInfo = crate::kind_info!(
    "flowcontrol.apiserver.k8s.io",
    "FlowSchema",
    "flowschemas",
    "flowschema",
    false,
    &[],
    &[Subresource::Status],
    &FlowSchema
);

const SUBJECT_KINDS: [&str; 3] = ["Group", "ServiceAccount", "User"];

impl Strategy for FlowSchema {
    fn normalize(&self, obj: &Value) -> Result<Value, SchemaError> {
        roundtrip::<fc::FlowSchema>(obj)
    }

    fn defaults(&self, obj: &mut Value) {
        // SetDefaults_FlowSchemaSpec.
        if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
            crate::defaults::json::default_nonzero(spec, "matchingPrecedence", 1000);
        }
    }

    fn validate(&self, o: &Value, out: &mut Vec<Cause>) {
        let spec = o.get("spec").unwrap_or(&Value::Null);
        let precedence = int(spec, "matchingPrecedence").unwrap_or(0);
        if !(1..=10000).contains(&precedence) {
            out.push(Cause::invalid("spec.matchingPrecedence", precedence, "must be between 1 and 10000, inclusive"));
        }
        let pl = spec.pointer("/priorityLevelConfiguration/name").and_then(Value::as_str).unwrap_or("");
        if pl.is_empty() {
            out.push(Cause::required("spec.priorityLevelConfiguration.name", "must reference a priority level"));
        } else {
            out.extend(
                dns1123_subdomain_errors(pl)
                    .iter()
                    .map(|m| Cause::invalid("spec.priorityLevelConfiguration.name", pl, m)),
            );
        }
        if let Some(t) = spec.pointer("/distinguisherMethod/type").and_then(Value::as_str) {
            if !["ByNamespace", "ByUser"].contains(&t) {
                out.push(Cause::not_supported("spec.distinguisherMethod.type", t, &["ByNamespace", "ByUser"]));
            }
        }
        for (i, rule) in arr(spec, "rules").iter().enumerate() {
            let p = format!("spec.rules[{i}]");
            let subjects = arr(rule, "subjects");
            if subjects.is_empty() {
                out.push(Cause::required(format!("{p}.subjects"), "subjects must contain at least one value"));
            }
            for (j, s) in subjects.iter().enumerate() {
                let kind = st(s, "kind");
                if !SUBJECT_KINDS.contains(&kind) {
                    out.push(Cause::not_supported(format!("{p}.subjects[{j}].kind"), kind, &SUBJECT_KINDS));
                } else if s.get(lower_first(kind)).is_none_or(Value::is_null) {
                    let field = lower_first(kind);
                    out.push(Cause::required(
                        format!("{p}.subjects[{j}].{field}"),
                        &format!("{field} is required when subject kind is '{kind}'"),
                    ));
                }
            }
            if arr(rule, "resourceRules").is_empty() && arr(rule, "nonResourceRules").is_empty() {
                out.push(Cause::required(
                    format!("{p}.resourceRules"),
                    "at least one of resourceRules and nonResourceRules has to be non-empty",
                ));
            }
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
            ("PriorityLevel", "string", "", 0, "`name` is the name of the priority level configuration being referenced Required."),
            ("MatchingPrecedence", "string", "", 0, "`matchingPrecedence` is used to choose among the FlowSchemas that match a given request. The chosen FlowSchema is among those with the numerically lowest (which we take to be logically highest) MatchingPrecedence.  Each MatchingPrecedence value must be ranged in [1,10000]. Note that if the precedence is not specified, it will be set to 1000 as default."),
            ("DistinguisherMethod", "string", "", 0, "`distinguisherMethod` defines how to compute the flow distinguisher for requests that match this schema. `nil` specifies that the distinguisher is disabled and thus will always be the empty string."),
            AGE,
            ("MissingPL", "string", "", 0, "references a broken or non-existent PriorityLevelConfiguration"),
        ]
    }

    fn cells(&self, o: Obj<'_>, age: &Value) -> Vec<Value> {
        let method = o.get("spec.distinguisherMethod.type").and_then(Value::as_str).unwrap_or("*");
        let missing = o.condition("status.conditions", "Dangling").unwrap_or("?");
        vec![
            json!(o.str("spec.priorityLevelConfiguration.name")),
            json!(o.int("spec.matchingPrecedence")),
            json!(method),
            age.clone(),
            json!(missing),
        ]
    }
}

fn lower_first(kind: &str) -> &'static str {
    match kind {
        "Group" => "group",
        "ServiceAccount" => "serviceAccount",
        _ => "user",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kinds::test_support::{cells, create_causes, defaulted, fields};

    fn schema(spec: Value) -> Value {
        json!({"metadata": {"name": "fs"}, "spec": spec})
    }

    #[test]
    fn precedence_defaults_to_1000_and_a_level_is_required() {
        let fs = schema(json!({"priorityLevelConfiguration": {"name": "pl"},
            "rules": [{"subjects": [{"kind": "User", "user": {"name": "u"}}], "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}]}]}));
        assert_eq!(defaulted("FlowSchema", fs.clone())["spec"]["matchingPrecedence"], 1000);
        assert_eq!(create_causes("FlowSchema", &fs), vec![]);
        assert_eq!(fields(&create_causes("FlowSchema", &schema(json!({})))), ["spec.priorityLevelConfiguration.name"]);
        let bad = schema(json!({"priorityLevelConfiguration": {"name": "pl"}, "matchingPrecedence": 20000,
            "rules": [{"subjects": [{"kind": "User"}]}]}));
        assert_eq!(
            fields(&create_causes("FlowSchema", &bad)),
            ["spec.matchingPrecedence", "spec.rules[0].subjects[0].user", "spec.rules[0].resourceRules"]
        );
        let row = cells("FlowSchema", &defaulted("FlowSchema", fs));
        assert_eq!(row[..4], [json!("fs"), json!("pl"), json!(1000), json!("*")]);
        assert_eq!(row[5], json!("?"));
    }
}
