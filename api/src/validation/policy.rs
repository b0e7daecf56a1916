//! admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy and ValidatingAdmissionPolicyBinding
//! (`pkg/apis/admissionregistration/validation`): match constraints, CEL validations and variables,
//! bindings' parameters and actions. Expressions are compiled by cel-rust, which parses but does
//! not type-check as cel-go does.

use std::collections::BTreeSet;

use serde_json::Value;

use super::apps::validate_label_selector;
use super::causes::{go_slice, BadValue, Cause};
use super::json::{arr, st, strs};
use super::names::{dns1035_label_errors, dns1123_subdomain_errors};
use super::webhook::{validate_match_conditions, validate_rule_with_operations};
use crate::webhook::conditions::check;

const FAILURE_POLICIES: [&str; 2] = ["Fail", "Ignore"];
const MATCH_POLICIES: [&str; 2] = ["Equivalent", "Exact"];
const REASONS: [&str; 3] = ["Forbidden", "Invalid", "RequestEntityTooLarge"];
const ACTIONS: [&str; 3] = ["Audit", "Deny", "Warn"];
const MAX_AUDIT_ANNOTATIONS: usize = 20;

/// `SetDefaults_ValidatingAdmissionPolicySpec` and the MatchResources and Rule defaults.
pub fn default_policy(obj: &mut Value) {
    let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else { return };
    if spec.get("failurePolicy").is_none_or(Value::is_null) {
        spec.insert("failurePolicy".into(), "Fail".into());
    }
    if let Some(m) = spec.get_mut("matchConstraints") {
        default_match_resources(m);
    }
}

/// The binding's `matchResources` defaults.
pub fn default_binding(obj: &mut Value) {
    if let Some(m) = obj.pointer_mut("/spec/matchResources") {
        default_match_resources(m);
    }
}

fn default_match_resources(m: &mut Value) {
    let Some(o) = m.as_object_mut() else { return };
    for (k, v) in [
        ("matchPolicy", Value::from("Equivalent")),
        ("namespaceSelector", serde_json::json!({})),
        ("objectSelector", serde_json::json!({})),
    ] {
        if o.get(k).is_none_or(Value::is_null) {
            o.insert(k.into(), v);
        }
    }
    for key in ["resourceRules", "excludeResourceRules"] {
        for r in o.get_mut(key).and_then(Value::as_array_mut).into_iter().flatten().filter_map(Value::as_object_mut) {
            if r.get("scope").is_none_or(Value::is_null) {
                r.insert("scope".into(), "*".into());
            }
        }
    }
}

pub fn validate_policy(obj: &Value, out: &mut Vec<Cause>) {
    let spec = obj.get("spec").unwrap_or(&Value::Null);
    match spec.get("failurePolicy").and_then(Value::as_str) {
        None => out.push(Cause::required("spec.failurePolicy", "")),
        Some(f) if !FAILURE_POLICIES.contains(&f) => {
            out.push(Cause::not_supported("spec.failurePolicy", f, &FAILURE_POLICIES))
        }
        Some(_) => {}
    }
    if let Some(pk) = spec.get("paramKind").filter(|p| p.is_object()) {
        validate_param_kind(pk, out);
    }
    match spec.get("matchConstraints").filter(|m| m.is_object()) {
        None => out.push(Cause::required("spec.matchConstraints", "")),
        Some(m) => {
            validate_match_resources(m, "spec.matchConstraints", out);
            if arr(m, "resourceRules").is_empty() {
                out.push(Cause::required("spec.matchConstraints.resourceRules", ""));
            }
        }
    }
    validate_match_conditions(spec, "spec.matchConditions", out);
    for (i, v) in arr(spec, "variables").iter().enumerate() {
        let p = format!("spec.variables[{i}]");
        let name = st(v, "name");
        if name.trim().is_empty() {
            out.push(Cause::required(format!("{p}.name"), "name is not specified"));
        } else if !is_cel_identifier(name) {
            out.push(Cause::invalid(format!("{p}.name"), name, "must be a valid CEL identifier"));
        }
        expression(v, "expression", &format!("{p}.expression"), out);
    }
    let (validations, audits) = (arr(spec, "validations"), arr(spec, "auditAnnotations"));
    if validations.is_empty() && audits.is_empty() {
        let msg = "validations or auditAnnotations must contain at least one item";
        out.push(Cause::required("spec.validations", msg));
        out.push(Cause::required("spec.auditAnnotations", msg));
        return;
    }
    for (i, v) in validations.iter().enumerate() {
        validate_validation(v, &format!("spec.validations[{i}]"), out);
    }
    if audits.len() > MAX_AUDIT_ANNOTATIONS {
        out.push(Cause::invalid(
            "spec.auditAnnotations",
            BadValue::Raw(format!("{} items", audits.len())),
            &format!("must not have more than {MAX_AUDIT_ANNOTATIONS} auditAnnotations"),
        ));
    }
    let mut keys = BTreeSet::new();
    for (i, a) in audits.iter().enumerate() {
        let p = format!("spec.auditAnnotations[{i}]");
        let key = st(a, "key");
        if key.is_empty() {
            out.push(Cause::required(format!("{p}.key"), "key is not specified"));
        }
        expression(a, "valueExpression", &format!("{p}.valueExpression"), out);
        if !key.is_empty() && !keys.insert(key) {
            out.push(Cause::duplicate(format!("{p}.key"), key));
        }
    }
}

fn expression(v: &Value, key: &str, p: &str, out: &mut Vec<Cause>) {
    let e = st(v, key);
    if e.trim().is_empty() {
        out.push(Cause::required(p, "expression is not specified"));
    } else if let Err(msg) = check(e) {
        out.push(Cause::invalid(p, e, &msg));
    }
}

fn validate_validation(v: &Value, p: &str, out: &mut Vec<Cause>) {
    expression(v, "expression", &format!("{p}.expression"), out);
    if let Some(me) = v.get("messageExpression").and_then(Value::as_str).filter(|m| !m.is_empty()) {
        if me.trim().is_empty() {
            out.push(Cause::invalid(format!("{p}.messageExpression"), me, "must be non-empty if specified"));
        } else if let Err(msg) = check(me) {
            out.push(Cause::invalid(format!("{p}.messageExpression"), me, &msg));
        }
    }
    if let Some(m) = v.get("message").and_then(Value::as_str).filter(|m| !m.is_empty()) {
        if m.trim().is_empty() {
            out.push(Cause::invalid(format!("{p}.message"), m, "must be non-empty if specified"));
        } else if m.trim().contains('\n') {
            out.push(Cause::invalid(format!("{p}.message"), m, "must not contain line breaks"));
        }
    }
    if let Some(r) = v.get("reason").and_then(Value::as_str).filter(|r| !REASONS.contains(r)) {
        out.push(Cause::not_supported(format!("{p}.reason"), r, &REASONS));
    }
}

fn validate_param_kind(pk: &Value, out: &mut Vec<Cause>) {
    let api_version = st(pk, "apiVersion");
    if api_version.is_empty() {
        out.push(Cause::required("spec.paramKind.apiVersion", ""));
    } else {
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        if api_version.matches('/').count() > 1 {
            out.push(Cause::invalid(
                "spec.paramKind.apiVersion",
                api_version,
                &format!("unexpected GroupVersion string: {api_version}"),
            ));
        } else {
            if !group.is_empty() {
                let errs = dns1123_subdomain_errors(group);
                if !errs.is_empty() {
                    out.push(Cause::invalid("spec.paramKind.apiVersion", group, &errs.join(",")));
                }
            }
            if version.is_empty() {
                out.push(Cause::invalid("spec.paramKind.apiVersion", api_version, "version must be specified"));
            } else {
                let errs = dns1035_label_errors(version);
                if !errs.is_empty() {
                    out.push(Cause::invalid("spec.paramKind.apiVersion", version, &errs.join(",")));
                }
            }
        }
    }
    let kind = st(pk, "kind");
    if kind.is_empty() {
        out.push(Cause::required("spec.paramKind.kind", ""));
    } else {
        let errs = dns1035_label_errors(&kind.to_lowercase());
        if !errs.is_empty() {
            out.push(Cause::invalid(
                "spec.paramKind.kind",
                kind,
                &format!("may have mixed case, but should otherwise match: {}", errs.join(",")),
            ));
        }
    }
}

fn validate_match_resources(m: &Value, p: &str, out: &mut Vec<Cause>) {
    match m.get("matchPolicy").and_then(Value::as_str) {
        None => out.push(Cause::required(format!("{p}.matchPolicy"), "")),
        Some(mp) if !MATCH_POLICIES.contains(&mp) => {
            out.push(Cause::not_supported(format!("{p}.matchPolicy"), mp, &MATCH_POLICIES))
        }
        Some(_) => {}
    }
    for key in ["namespaceSelector", "objectSelector"] {
        match m.get(key).filter(|s| s.is_object()) {
            None => out.push(Cause::required(format!("{p}.{key}"), "")),
            Some(sel) => validate_label_selector(sel, &format!("{p}.{key}"), out),
        }
    }
    for key in ["resourceRules", "excludeResourceRules"] {
        for (i, r) in arr(m, key).iter().enumerate() {
            let rp = format!("{p}.{key}[{i}]");
            let mut names = BTreeSet::new();
            for (j, n) in strs(r, "resourceNames").iter().enumerate() {
                for msg in path_segment_errors(n) {
                    out.push(Cause::invalid(format!("{rp}.resourceNames[{j}]"), n, msg));
                }
                if !names.insert(n.clone()) {
                    out.push(Cause::duplicate(format!("{rp}.resourceNames[{j}]"), n));
                }
            }
            validate_rule_with_operations(r, &rp, out);
        }
    }
}

/// `IsPathSegmentName`.
fn path_segment_errors(name: &str) -> Vec<&'static str> {
    if name == "." || name == ".." {
        return vec!["may not be '.' or '..'"];
    }
    let mut errs = Vec::new();
    if name.contains('/') {
        errs.push("may not contain '/'");
    }
    if name.contains('%') {
        errs.push("may not contain '%'");
    }
    errs
}

/// `isCELIdentifier`: `[_a-zA-Z][_a-zA-Z0-9]*`, not a CEL reserved word.
fn is_cel_identifier(name: &str) -> bool {
    const RESERVED: [&str; 23] = [
        "true",
        "false",
        "null",
        "in",
        "as",
        "break",
        "const",
        "continue",
        "else",
        "for",
        "function",
        "if",
        "import",
        "let",
        "loop",
        "package",
        "namespace",
        "return",
        "var",
        "void",
        "while",
        "__proto__",
        "__ts__",
    ];
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c == '_' || c.is_ascii_alphabetic())
        && chars.all(|c| c == '_' || c.is_ascii_alphanumeric())
        && !RESERVED.contains(&name)
}

pub fn validate_binding(obj: &Value, out: &mut Vec<Cause>) {
    let spec = obj.get("spec").unwrap_or(&Value::Null);
    let policy = st(spec, "policyName");
    if policy.is_empty() {
        out.push(Cause::required("spec.policyName", ""));
    } else {
        out.extend(dns1123_subdomain_errors(policy).iter().map(|m| Cause::invalid("spec.policyName", policy, m)));
    }
    if let Some(pr) = spec.get("paramRef").filter(|p| p.is_object()) {
        let name = st(pr, "name");
        let selector = pr.get("selector").filter(|s| s.is_object());
        if !name.is_empty() {
            for msg in path_segment_errors(name) {
                out.push(Cause::invalid("spec.paramRef.name", name, msg));
            }
            if selector.is_some() {
                out.push(Cause::forbidden("spec.paramRef.name", "name and selector are mutually exclusive"));
            }
        }
        if let Some(sel) = selector {
            validate_label_selector(sel, "spec.paramRef.selector", out);
            if !name.is_empty() {
                out.push(Cause::forbidden("spec.paramRef.selector", "name and selector are mutually exclusive"));
            }
        }
        if name.is_empty() && selector.is_none() {
            out.push(Cause::required("spec.paramRef", "one of name or selector must be specified"));
        }
        match pr.get("parameterNotFoundAction").and_then(Value::as_str).filter(|a| !a.is_empty()) {
            None => out.push(Cause::required("spec.paramRef.parameterNotFoundAction", "")),
            Some(a) if a != "Deny" && a != "Allow" => {
                out.push(Cause::not_supported("spec.paramRef.parameterNotFoundAction", a, &["Deny", "Allow"]))
            }
            Some(_) => {}
        }
    }
    if let Some(m) = spec.get("matchResources").filter(|m| m.is_object()) {
        validate_match_resources(m, "spec.matchResources", out);
    }
    let actions = strs(spec, "validationActions");
    let mut seen = BTreeSet::new();
    for (i, a) in actions.iter().enumerate() {
        if !ACTIONS.contains(&a.as_str()) {
            out.push(Cause::not_supported(format!("spec.validationActions[{i}]"), a, &ACTIONS));
        }
        if !seen.insert(a.as_str()) {
            out.push(Cause::duplicate(format!("spec.validationActions[{i}]"), a));
        }
    }
    if seen.contains("Deny") && seen.contains("Warn") {
        let list: Vec<&str> = actions.iter().map(String::as_str).collect();
        out.push(Cause::invalid(
            "spec.validationActions",
            BadValue::Raw(go_slice("admissionregistration.ValidationAction", &list)),
            "must not contain both Deny and Warn (repeating the same validation failure information in the API response and headers serves no purpose)",
        ));
    }
    if seen.is_empty() {
        out.push(Cause::required("spec.validationActions", "at least one validation action is required"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn errors(f: fn(&Value, &mut Vec<Cause>), obj: Value) -> Vec<String> {
        let mut out = Vec::new();
        f(&obj, &mut out);
        out.iter().map(Cause::error_string).collect()
    }

    fn policy(spec: Value) -> Value {
        let mut p = json!({"metadata": {"name": "p"}, "spec": spec});
        default_policy(&mut p);
        p
    }

    #[test]
    fn a_policy_needs_constraints_and_validations_that_compile() {
        let rules = json!({"resourceRules": [{"operations": ["CREATE"], "apiGroups": ["apps"], "apiVersions": ["v1"], "resources": ["deployments"]}]});
        let good = policy(json!({"matchConstraints": rules, "validations": [{"expression": "object.spec.replicas > 1",
            "messageExpression": "'wants replicas > 1, got ' + string(object.spec.replicas)"}],
            "variables": [{"name": "replicas", "expression": "object.spec.replicas"}]}));
        assert_eq!(errors(validate_policy, good.clone()), Vec::<String>::new());
        assert_eq!(good["spec"]["failurePolicy"], "Fail");
        assert_eq!(good["spec"]["matchConstraints"]["resourceRules"][0]["scope"], "*");
        assert_eq!(
            errors(validate_policy, policy(json!({}))),
            vec![
                "spec.matchConstraints: Required value",
                "spec.validations: Required value: validations or auditAnnotations must contain at least one item",
                "spec.auditAnnotations: Required value: validations or auditAnnotations must contain at least one item",
            ]
        );
        let bad = policy(json!({"matchConstraints": rules, "validations": [{"expression": "1 +", "reason": "Teapot"}],
            "variables": [{"name": "in", "expression": "1"}]}));
        let errs = errors(validate_policy, bad);
        assert_eq!(errs[0], "spec.variables[0].name: Invalid value: \"in\": must be a valid CEL identifier");
        assert!(
            errs[1].starts_with(
                "spec.validations[0].expression: Invalid value: \"1 +\": compilation failed: ERROR: <input>:1:"
            ),
            "{errs:?}"
        );
        assert_eq!(errs[2], "spec.validations[0].reason: Unsupported value: \"Teapot\": supported values: \"Forbidden\", \"Invalid\", \"RequestEntityTooLarge\"");
    }

    #[test]
    fn a_binding_names_its_policy_actions_and_parameters() {
        let ok = json!({"spec": {"policyName": "p", "validationActions": ["Deny"],
            "paramRef": {"name": "cfg", "parameterNotFoundAction": "Deny"}}});
        assert_eq!(errors(validate_binding, ok), Vec::<String>::new());
        let bad = json!({"spec": {"validationActions": ["Deny", "Warn", "Deny"], "paramRef": {"parameterNotFoundAction": "Maybe"}}});
        assert_eq!(
            errors(validate_binding, bad),
            vec![
                "spec.policyName: Required value",
                "spec.paramRef: Required value: one of name or selector must be specified",
                "spec.paramRef.parameterNotFoundAction: Unsupported value: \"Maybe\": supported values: \"Deny\", \"Allow\"",
                "spec.validationActions[2]: Duplicate value: \"Deny\"",
                "spec.validationActions: Invalid value: []admissionregistration.ValidationAction{\"Deny\", \"Warn\", \"Deny\"}: must not contain both Deny and Warn (repeating the same validation failure information in the API response and headers serves no purpose)",
            ]
        );
    }
}
