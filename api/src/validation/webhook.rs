//! admissionregistration.k8s.io/v1 webhooks: what ValidatingWebhookConfiguration and
//! MutatingWebhookConfiguration share (Kubernetes' `pkg/apis/admissionregistration/validation`).

use std::collections::BTreeSet;

use serde_json::Value;

use super::apps::validate_label_selector;
use super::causes::{go_slice, BadValue, Cause};
use super::json::{arr, int, st, strs};
use super::names::{dns1035_label_errors, dns1123_subdomain_errors, qualified_name_errors};

const REVIEW_VERSIONS: [&str; 2] = ["v1", "v1beta1"];
const FAILURE_POLICIES: [&str; 2] = ["Fail", "Ignore"];
const MATCH_POLICIES: [&str; 2] = ["Equivalent", "Exact"];
/// A v1 webhook must declare it has no side effects (or none on dry run).
const NO_SIDE_EFFECTS: [&str; 2] = ["None", "NoneOnDryRun"];
const OPERATIONS: [&str; 5] = ["*", "CONNECT", "CREATE", "DELETE", "UPDATE"];
const SCOPES: [&str; 3] = ["*", "Cluster", "Namespaced"];
const REINVOCATION_POLICIES: [&str; 2] = ["IfNeeded", "Never"];
const MAX_MATCH_CONDITIONS: usize = 64;

/// `SetDefaults_ValidatingWebhook` / `SetDefaults_MutatingWebhook` and the rule and service defaults.
pub fn default_webhooks(obj: &mut Value, mutating: bool) {
    let Some(hooks) = obj.get_mut("webhooks").and_then(Value::as_array_mut) else { return };
    for hook in hooks.iter_mut().filter_map(Value::as_object_mut) {
        let mut set = |key: &str, v: Value| {
            if hook.get(key).is_none_or(Value::is_null) {
                hook.insert(key.into(), v);
            }
        };
        set("failurePolicy", "Fail".into());
        set("matchPolicy", "Equivalent".into());
        set("namespaceSelector", serde_json::json!({}));
        set("objectSelector", serde_json::json!({}));
        set("timeoutSeconds", 10.into());
        if mutating {
            set("reinvocationPolicy", "Never".into());
        }
        for rule in hook.get_mut("rules").and_then(Value::as_array_mut).into_iter().flatten() {
            if let Some(r) = rule.as_object_mut() {
                if r.get("scope").is_none_or(Value::is_null) {
                    r.insert("scope".into(), "*".into());
                }
            }
        }
        if let Some(svc) =
            hook.get_mut("clientConfig").and_then(|c| c.get_mut("service")).and_then(Value::as_object_mut)
        {
            if svc.get("port").is_none_or(Value::is_null) {
                svc.insert("port".into(), 443.into());
            }
        }
    }
}

/// `validate{Validating,Mutating}WebhookConfiguration`: every webhook, its review versions and
/// unique names.
pub fn validate_webhooks(obj: &Value, mutating: bool, out: &mut Vec<Cause>) {
    let mut names = BTreeSet::new();
    for (i, hook) in arr(obj, "webhooks").iter().enumerate() {
        let p = format!("webhooks[{i}]");
        validate_webhook(hook, mutating, &p, out);
        validate_review_versions(hook, &format!("{p}.admissionReviewVersions"), out);
        let name = st(hook, "name");
        if !name.is_empty() && !names.insert(name) {
            out.push(Cause::duplicate(format!("{p}.name"), name));
        }
    }
}

fn validate_webhook(hook: &Value, mutating: bool, p: &str, out: &mut Vec<Cause>) {
    fully_qualified_name(st(hook, "name"), &format!("{p}.name"), out);
    for (i, rule) in arr(hook, "rules").iter().enumerate() {
        validate_rule_with_operations(rule, &format!("{p}.rules[{i}]"), out);
    }
    one_of(hook, "failurePolicy", &FAILURE_POLICIES, p, out);
    one_of(hook, "matchPolicy", &MATCH_POLICIES, p, out);
    match hook.get("sideEffects").and_then(Value::as_str) {
        None => out.push(Cause::required(
            format!("{p}.sideEffects"),
            &format!("must specify one of {}", NO_SIDE_EFFECTS.join(", ")),
        )),
        Some(s) if !NO_SIDE_EFFECTS.contains(&s) => {
            out.push(Cause::not_supported(format!("{p}.sideEffects"), s, &NO_SIDE_EFFECTS))
        }
        Some(_) => {}
    }
    if let Some(t) = int(hook, "timeoutSeconds").filter(|t| !(1..=30).contains(t)) {
        out.push(Cause::invalid(
            format!("{p}.timeoutSeconds"),
            t,
            "the timeout value must be between 1 and 30 seconds",
        ));
    }
    for key in ["namespaceSelector", "objectSelector"] {
        if let Some(sel) = hook.get(key).filter(|s| s.is_object()) {
            validate_label_selector(sel, &format!("{p}.{key}"), out);
        }
    }
    if mutating {
        one_of(hook, "reinvocationPolicy", &REINVOCATION_POLICIES, p, out);
    }
    let cc = hook.get("clientConfig").unwrap_or(&Value::Null);
    let (url, service) = (cc.get("url").and_then(Value::as_str), cc.get("service").filter(|s| s.is_object()));
    let cp = format!("{p}.clientConfig");
    match (url, service) {
        (Some(u), None) => validate_url(u, &format!("{cp}.url"), out),
        (None, Some(s)) => validate_service(s, &format!("{cp}.service"), out),
        _ => out.push(Cause::required(cp, "exactly one of url or service is required")),
    }
    validate_match_conditions(hook, &format!("{p}.matchConditions"), out);
}

fn one_of(hook: &Value, key: &str, allowed: &[&str], p: &str, out: &mut Vec<Cause>) {
    if let Some(v) = hook.get(key).and_then(Value::as_str).filter(|v| !allowed.contains(v)) {
        out.push(Cause::not_supported(format!("{p}.{key}"), v, allowed));
    }
}

/// `utilvalidation.IsFullyQualifiedName`: a DNS subdomain of at least three labels.
fn fully_qualified_name(name: &str, p: &str, out: &mut Vec<Cause>) {
    if name.is_empty() {
        return out.push(Cause::required(p, ""));
    }
    let errs = dns1123_subdomain_errors(name);
    if !errs.is_empty() {
        return out.push(Cause::invalid(p, name, &errs.join(",")));
    }
    if name.split('.').count() < 3 {
        out.push(Cause::invalid(p, name, "should be a domain with at least three segments separated by dots"));
    }
}

fn validate_review_versions(hook: &Value, p: &str, out: &mut Vec<Cause>) {
    let versions = strs(hook, "admissionReviewVersions");
    if versions.is_empty() {
        return out.push(Cause::required(p, &format!("must specify one of {}", REVIEW_VERSIONS.join(", "))));
    }
    let mut seen = BTreeSet::new();
    let mut accepted = false;
    for (i, v) in versions.iter().enumerate() {
        if !seen.insert(v.as_str()) {
            out.push(Cause::invalid(format!("{p}[{i}]"), v, "duplicate version"));
            continue;
        }
        out.extend(dns1035_label_errors(v).iter().map(|m| Cause::invalid(format!("{p}[{i}]"), v, m)));
        accepted |= REVIEW_VERSIONS.contains(&v.as_str());
    }
    if !accepted {
        let list: Vec<&str> = versions.iter().map(String::as_str).collect();
        out.push(Cause::invalid(
            p,
            BadValue::Raw(go_slice("string", &list)),
            &format!("must include at least one of {}", REVIEW_VERSIONS.join(", ")),
        ));
    }
}

pub(crate) fn validate_rule_with_operations(rule: &Value, p: &str, out: &mut Vec<Cause>) {
    let ops = strs(rule, "operations");
    if ops.is_empty() {
        out.push(Cause::required(format!("{p}.operations"), ""));
    }
    if ops.len() > 1 && ops.iter().any(|o| o == "*") {
        let list: Vec<&str> = ops.iter().map(String::as_str).collect();
        out.push(Cause::invalid(
            format!("{p}.operations"),
            BadValue::Raw(go_slice("admissionregistration.OperationType", &list)),
            "if '*' is present, must not specify other operations",
        ));
    }
    for (i, op) in ops.iter().enumerate() {
        if !OPERATIONS.contains(&op.as_str()) {
            out.push(Cause::not_supported(format!("{p}.operations[{i}]"), op, &OPERATIONS));
        }
    }
    validate_rule(rule, p, out);
}

/// `validateRule` with subresources allowed (webhook rules).
fn validate_rule(rule: &Value, p: &str, out: &mut Vec<Cause>) {
    for (key, what) in [("apiGroups", "API groups"), ("apiVersions", "API versions")] {
        let items = strs(rule, key);
        if items.is_empty() {
            out.push(Cause::required(format!("{p}.{key}"), ""));
        }
        if items.len() > 1 && items.iter().any(|g| g == "*") {
            let list: Vec<&str> = items.iter().map(String::as_str).collect();
            out.push(Cause::invalid(
                format!("{p}.{key}"),
                BadValue::Raw(go_slice("string", &list)),
                &format!("if '*' is present, must not specify other {what}"),
            ));
        }
    }
    for (i, v) in strs(rule, "apiVersions").iter().enumerate() {
        if v.is_empty() {
            out.push(Cause::required(format!("{p}.apiVersions[{i}]"), ""));
        }
    }
    validate_resources(&strs(rule, "resources"), &format!("{p}.resources"), out);
    if let Some(s) = rule.get("scope").and_then(Value::as_str).filter(|s| !SCOPES.contains(s)) {
        out.push(Cause::not_supported(format!("{p}.scope"), s, &SCOPES));
    }
}

fn validate_resources(resources: &[String], p: &str, out: &mut Vec<Cause>) {
    if resources.is_empty() {
        out.push(Cause::required(p, ""));
    }
    let mut wild_sub: BTreeSet<&str> = BTreeSet::new();
    let mut wild_res: BTreeSet<&str> = BTreeSet::new();
    let (mut double, mut single, mut plain) = (false, false, false);
    for (i, rs) in resources.iter().enumerate() {
        if rs.is_empty() {
            out.push(Cause::required(format!("{p}[{i}]"), ""));
            continue;
        }
        double |= rs == "*/*";
        single |= rs == "*";
        let Some((res, sub)) = rs.split_once('/') else {
            plain = rs != "*";
            continue;
        };
        if wild_sub.contains(res) {
            out.push(Cause::invalid(
                format!("{p}[{i}]"),
                rs,
                &format!("if '{res}/*' is present, must not specify {rs}"),
            ));
        }
        if wild_res.contains(sub) {
            out.push(Cause::invalid(
                format!("{p}[{i}]"),
                rs,
                &format!("if '*/{sub}' is present, must not specify {rs}"),
            ));
        }
        if sub == "*" {
            wild_sub.insert(res);
        }
        if res == "*" {
            wild_res.insert(sub);
        }
    }
    let list = || BadValue::Raw(go_slice("string", &resources.iter().map(String::as_str).collect::<Vec<_>>()));
    if resources.len() > 1 && double {
        out.push(Cause::invalid(p, list(), "if '*/*' is present, must not specify other resources"));
    }
    if single && plain {
        out.push(Cause::invalid(p, list(), "if '*' is present, must not specify other resources without subresources"));
    }
}

/// `webhook.ValidateWebhookURL` with https forced.
fn validate_url(raw: &str, p: &str, out: &mut Vec<Cause>) {
    const FORM: &str = "; desired format: https://host[/path]";
    let u = match url::Url::parse(raw) {
        Ok(u) => u,
        Err(e) => return out.push(Cause::required(p, &format!("url must be a valid URL: {e}{FORM}"))),
    };
    if u.scheme() != "https" {
        out.push(Cause::invalid(p, u.scheme(), &format!("'https' is the only allowed URL scheme{FORM}")));
    }
    if u.host_str().is_none_or(str::is_empty) {
        out.push(Cause::invalid(p, "", &format!("host must be specified{FORM}")));
    }
    if !u.username().is_empty() || u.password().is_some() {
        let user = match u.password() {
            Some(pw) => format!("{}:{pw}", u.username()),
            None => u.username().to_string(),
        };
        out.push(Cause::invalid(p, user, "user information is not permitted in the URL"));
    }
    if let Some(f) = u.fragment().filter(|f| !f.is_empty()) {
        out.push(Cause::invalid(p, f, "fragments are not permitted in the URL"));
    }
    if let Some(q) = u.query().filter(|q| !q.is_empty()) {
        out.push(Cause::invalid(p, q, "query parameters are not permitted in the URL"));
    }
}

/// `webhook.ValidateWebhookService`.
fn validate_service(svc: &Value, p: &str, out: &mut Vec<Cause>) {
    if st(svc, "name").is_empty() {
        out.push(Cause::required(format!("{p}.name"), ""));
    }
    if st(svc, "namespace").is_empty() {
        out.push(Cause::required(format!("{p}.namespace"), ""));
    }
    let port = int(svc, "port").unwrap_or(443);
    if !(1..=65535).contains(&port) {
        out.push(Cause::invalid(
            format!("{p}.port"),
            port,
            "port is not valid: must be between 1 and 65535, inclusive",
        ));
    }
    let Some(path) = svc.get("path").and_then(Value::as_str) else { return };
    if path.is_empty() || path == "/" {
        return;
    }
    let pp = format!("{p}.path");
    if path == "//" {
        return out.push(Cause::invalid(pp, path, "segment[0] may not be empty"));
    }
    if !path.starts_with('/') {
        out.push(Cause::invalid(pp.as_str(), path, "must start with a '/'"));
    }
    let trimmed = path.get(1..).unwrap_or("");
    let trimmed = trimmed.strip_suffix('/').unwrap_or(trimmed);
    for (i, step) in trimmed.split('/').enumerate() {
        if step.is_empty() {
            out.push(Cause::invalid(pp.as_str(), path, &format!("segment[{i}] may not be empty")));
            continue;
        }
        for e in dns1123_subdomain_errors(step) {
            out.push(Cause::invalid(pp.as_str(), path, &format!("segment[{i}]: {e}")));
        }
    }
}

/// `validateMatchConditions`: at most 64, unique qualified names, an expression each that
/// compiles (`crate::webhook::conditions::check`).
pub(crate) fn validate_match_conditions(hook: &Value, p: &str, out: &mut Vec<Cause>) {
    let conditions = arr(hook, "matchConditions");
    if conditions.len() > MAX_MATCH_CONDITIONS {
        out.push(Cause::too_many(p, conditions.len(), MAX_MATCH_CONDITIONS));
    }
    let mut names = BTreeSet::new();
    for (i, c) in conditions.iter().enumerate() {
        let cp = format!("{p}[{i}]");
        let expression = st(c, "expression");
        if expression.trim().is_empty() {
            out.push(Cause::required(format!("{cp}.expression"), ""));
        } else if let Err(e) = crate::webhook::conditions::check(expression.trim()) {
            out.push(Cause::invalid(format!("{cp}.expression"), expression, &e));
        }
        let name = st(c, "name");
        if name.is_empty() {
            out.push(Cause::required(format!("{cp}.name"), ""));
        } else {
            out.extend(qualified_name_errors(name).iter().map(|m| Cause::invalid(format!("{cp}.name"), name, m)));
        }
        if !name.is_empty() && !names.insert(name) {
            out.push(Cause::duplicate(format!("{cp}.name"), name));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn hook(extra: Value) -> Value {
        let mut h = json!({"name": "deny.example.com", "sideEffects": "None", "admissionReviewVersions": ["v1"],
            "clientConfig": {"service": {"namespace": "ns", "name": "svc", "path": "/validate"}},
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}]});
        for (k, v) in extra.as_object().expect("an object") {
            h[k] = v.clone();
        }
        h
    }

    fn errors(hooks: Vec<Value>, mutating: bool) -> Vec<String> {
        let mut out = Vec::new();
        validate_webhooks(&json!({"webhooks": hooks}), mutating, &mut out);
        out.iter().map(Cause::error_string).collect()
    }

    #[test]
    fn a_complete_webhook_is_valid_and_gets_kubernetes_defaults() {
        assert_eq!(errors(vec![hook(json!({}))], true), Vec::<String>::new());
        let mut obj = json!({"webhooks": [hook(json!({}))]});
        default_webhooks(&mut obj, true);
        let h = &obj["webhooks"][0];
        assert_eq!(
            (&h["failurePolicy"], &h["matchPolicy"], &h["timeoutSeconds"], &h["reinvocationPolicy"]),
            (&json!("Fail"), &json!("Equivalent"), &json!(10), &json!("Never"))
        );
        assert_eq!((&h["rules"][0]["scope"], &h["clientConfig"]["service"]["port"]), (&json!("*"), &json!(443)));
        assert_eq!((&h["namespaceSelector"], &h["objectSelector"]), (&json!({}), &json!({})));
    }

    #[test]
    fn names_side_effects_versions_and_timeouts_are_checked() {
        let errs = errors(
            vec![hook(
                json!({"name": "short.name", "sideEffects": "Some", "admissionReviewVersions": ["v2"], "timeoutSeconds": 31}),
            )],
            false,
        );
        assert_eq!(
            errs,
            vec![
                "webhooks[0].name: Invalid value: \"short.name\": should be a domain with at least three segments separated by dots",
                "webhooks[0].sideEffects: Unsupported value: \"Some\": supported values: \"None\", \"NoneOnDryRun\"",
                "webhooks[0].timeoutSeconds: Invalid value: 31: the timeout value must be between 1 and 30 seconds",
                "webhooks[0].admissionReviewVersions: Invalid value: []string{\"v2\"}: must include at least one of v1, v1beta1",
            ]
        );
        assert_eq!(
            errors(vec![hook(json!({})), hook(json!({}))], false),
            vec!["webhooks[1].name: Duplicate value: \"deny.example.com\""]
        );
    }

    #[test]
    fn client_config_is_exactly_one_https_url_or_service() {
        let both =
            hook(json!({"clientConfig": {"url": "https://a.example.com", "service": {"namespace": "n", "name": "s"}}}));
        assert_eq!(
            errors(vec![both], false),
            vec!["webhooks[0].clientConfig: Required value: exactly one of url or service is required"]
        );
        let http = hook(json!({"clientConfig": {"url": "http://u:p@a.example.com/x?q=1#f"}}));
        assert_eq!(
            errors(vec![http], false),
            vec![
                "webhooks[0].clientConfig.url: Invalid value: \"http\": 'https' is the only allowed URL scheme; desired format: https://host[/path]",
                "webhooks[0].clientConfig.url: Invalid value: \"u:p\": user information is not permitted in the URL",
                "webhooks[0].clientConfig.url: Invalid value: \"f\": fragments are not permitted in the URL",
                "webhooks[0].clientConfig.url: Invalid value: \"q=1\": query parameters are not permitted in the URL",
            ]
        );
        let bad_path =
            hook(json!({"clientConfig": {"service": {"namespace": "n", "name": "s", "path": "/a//B", "port": 0}}}));
        assert_eq!(
            errors(vec![bad_path], false),
            vec![
                "webhooks[0].clientConfig.service.port: Invalid value: 0: port is not valid: must be between 1 and 65535, inclusive",
                "webhooks[0].clientConfig.service.path: Invalid value: \"/a//B\": segment[1] may not be empty",
                "webhooks[0].clientConfig.service.path: Invalid value: \"/a//B\": segment[2]: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
            ]
        );
    }

    #[test]
    fn rules_refuse_wildcards_mixed_with_names() {
        let rule = json!([{"operations": ["*", "CREATE"], "apiGroups": ["*", "apps"], "apiVersions": [],
            "resources": ["*", "pods", "*/*"], "scope": "Everywhere"}]);
        assert_eq!(
            errors(vec![hook(json!({"rules": rule}))], false),
            vec![
                "webhooks[0].rules[0].operations: Invalid value: []admissionregistration.OperationType{\"*\", \"CREATE\"}: if '*' is present, must not specify other operations",
                "webhooks[0].rules[0].apiGroups: Invalid value: []string{\"*\", \"apps\"}: if '*' is present, must not specify other API groups",
                "webhooks[0].rules[0].apiVersions: Required value",
                "webhooks[0].rules[0].resources: Invalid value: []string{\"*\", \"pods\", \"*/*\"}: if '*/*' is present, must not specify other resources",
                "webhooks[0].rules[0].resources: Invalid value: []string{\"*\", \"pods\", \"*/*\"}: if '*' is present, must not specify other resources without subresources",
                "webhooks[0].rules[0].scope: Unsupported value: \"Everywhere\": supported values: \"*\", \"Cluster\", \"Namespaced\"",
            ]
        );
    }
}
